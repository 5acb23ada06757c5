"""ddp_buckets.py: DistributedDataParallel with gradient_as_bucket_view=True over four
nn.Linear(8192, 8192, bias=False) (1 GiB of fp32 parameters), Adam, 6 steps of random data. The
parameters' gradients are views into DDP's buckets, so the buckets are the gradients (1 GiB on
each rank): issue 42. Run with torchrun:

  torchrun --standalone --nproc-per-node 2 ddp_buckets.py [--steps 6] [--batch 64]

Rank 0 prints the parameters' count and bytes.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--batch", type=int, default=64)
args = p.parse_args()

dist.init_process_group("nccl")
rank = dist.get_rank()
local = int(os.environ.get("LOCAL_RANK", rank))
torch.cuda.set_device(local)
torch.manual_seed(0)
layers = []
for i in range(4):
    layers += [nn.Linear(8192, 8192, bias=False, device="cuda")] + ([nn.ReLU()] if i < 3 else [])
model = DDP(nn.Sequential(*layers), device_ids=[local], gradient_as_bucket_view=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
if rank == 0:
    print("parameters", sum(p.numel() for p in model.parameters()), flush=True)
    print("parameter_bytes", sum(p.numel() * p.element_size() for p in model.parameters()), flush=True)
for step in range(args.steps):
    x = torch.randn(args.batch, 8192, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
loss = loss.detach()
dist.all_reduce(loss)
if rank == 0:
    print("loss %.6f" % (loss.item() / dist.get_world_size()), flush=True)
dist.destroy_process_group()
