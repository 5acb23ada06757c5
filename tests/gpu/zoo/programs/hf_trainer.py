"""hf_trainer.py: GPT-2 (6 layers) fine-tuned with the Hugging Face Trainer on random tokens, 6
optimizer steps, no logging, no checkpoints.

  python3 hf_trainer.py [--steps 6] [--leak]

--leak keeps every step's logits through a callback-free hook on the model's forward (a list the
program holds): one logits tensor per micro-batch.
"""
import argparse
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--leak", action="store_true")
args = p.parse_args()


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seq):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 50257, (n, seq), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=6))
kept = []
if args.leak:
    model.register_forward_hook(lambda mod, inp, out: kept.append(out.logits[:, -1]))
with tempfile.TemporaryDirectory() as tmp:
    targs = TrainingArguments(output_dir=tmp, max_steps=args.steps, per_device_train_batch_size=8,
                              learning_rate=1e-4, report_to=[], save_strategy="no", logging_strategy="no",
                              disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(8 * args.steps, 512))
    result = trainer.train()  # zoo: leak
print("steps", result.global_step, flush=True)
