"""peft_lora.py: a LoRA fine-tune of GPT-2 (12 layers) with PEFT: the base weights frozen, rank-16
adapters on the attention and MLP projections trained with AdamW, 6 steps.

  python3 peft_lora.py [--steps 6] [--batch 8] [--seq 512] [--leak]
"""
import argparse

import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--leak", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
base = GPT2LMHeadModel(GPT2Config(n_layer=12))
model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=["c_attn", "c_fc", "c_proj"],
                                        fan_in_fan_out=True, lora_dropout=0.0)).cuda()
trainable = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in trainable), "parameters", sum(p.numel() for p in model.parameters()), flush=True)
opt = torch.optim.AdamW(trainable, lr=1e-4)
kept = []
for step in range(args.steps):
    x = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
    out = model(input_ids=x, labels=x)  # zoo: leak
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if args.leak:
        kept.append(out.logits[:, -1])
print("loss %.4f" % out.loss.item(), flush=True)
