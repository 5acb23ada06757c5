"""gpt2_oom.py: GPT-2 (12 layers) training that runs out of memory in its first backward pass, as
on a card too small for the batch: the process may use only what the forward pass left reserved
plus 256 MiB (torch.cuda.set_per_process_memory_fraction), so the forward pass completes and the
backward pass fails. Exits with PyTorch's OutOfMemoryError (status 1), natively and recorded.

  python3 gpt2_oom.py [--batch 8] [--seq 1024]
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=1024)
args = p.parse_args()

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=12)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
out = model(input_ids=x, labels=x)
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(min(1.0, (torch.cuda.memory_reserved() + (256 << 20)) / total))
out.loss.backward()
opt.step()
print("no out-of-memory: the card is larger than this program expects")
