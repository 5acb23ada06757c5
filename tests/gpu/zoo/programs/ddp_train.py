"""ddp_train.py: GPT-2 (6 layers) trained with DistributedDataParallel on every GPU of the host,
6 steps. Run with torchrun:

  torchrun --standalone --nproc-per-node 2 ddp_train.py [--steps 6] [--batch 8] [--seq 512] [--leak]

--leak keeps a view of every step's logits on each rank.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--leak", action="store_true")
args = p.parse_args()

dist.init_process_group("nccl")
rank = dist.get_rank()
local = int(os.environ.get("LOCAL_RANK", rank))
torch.cuda.set_device(local)
torch.manual_seed(0)
config = GPT2Config(n_layer=6)
model = DDP(GPT2LMHeadModel(config).cuda(), device_ids=[local])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
if rank == 0:
    print("parameters", sum(p.numel() for p in model.parameters()), flush=True)
kept = []
for step in range(args.steps):
    x = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")
    out = model(input_ids=x, labels=x)  # zoo: leak
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if args.leak:
        kept.append(out.logits[:, -1])
loss = out.loss.detach()
dist.all_reduce(loss)
if rank == 0:
    print("loss %.4f" % (loss.item() / dist.get_world_size()), flush=True)
dist.destroy_process_group()
