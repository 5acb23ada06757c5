"""lightning_train.py: a small transformer language model trained with a PyTorch Lightning Trainer
on one GPU, 6 optimizer steps, no logger, no checkpoints.

  python3 lightning_train.py [--steps 6] [--leak]

--leak keeps every training step's logits in the module (a list the LightningModule holds).
"""
import argparse

try:
    import lightning as L
except ImportError:  # the older package name
    import pytorch_lightning as L
import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--leak", action="store_true")
args = p.parse_args()


class LM(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = GPT2LMHeadModel(GPT2Config(n_layer=6))
        self.kept = []

    def training_step(self, batch, batch_idx):
        out = self.model(input_ids=batch, labels=batch)  # zoo: leak
        if args.leak:
            self.kept.append(out.logits[:, -1])
        return out.loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


torch.manual_seed(0)
data = torch.utils.data.DataLoader(torch.randint(0, 50257, (8 * args.steps, 512)), batch_size=8)
trainer = L.Trainer(max_steps=args.steps, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(LM(), data)
print("steps", trainer.global_step, flush=True)
