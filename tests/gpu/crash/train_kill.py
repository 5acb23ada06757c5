"""train_kill.py: a training loop on the GPU that keeps one 4 MiB tensor a step (the leak the
snapshot must show after a kill -9), for tests/gpu/crash/run.sh. Prints "step N pid P rank R" after
each step, flushed, and trains until killed (or --steps). --ddp: under torchrun, one rank a GPU
(NCCL); with --backend gloo, the ranks may share a GPU (a machine of one GPU)."""
import argparse
import os
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--ddp", action="store_true")
p.add_argument("--steps", type=int, default=10**9)
p.add_argument("--backend", default="nccl")
args = p.parse_args()
rank = int(os.environ.get("RANK", "0"))
if args.ddp:
    import torch.distributed as dist
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    dist.init_process_group(args.backend)
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(dev)
if args.ddp:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
kept = []


def keep_for_later(step):
    kept.append(torch.full((1024, 1024), float(step), device=dev))  # 4 MiB a step, never freed


for step in range(args.steps):
    x = torch.randn(256, 1024, device=dev)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    keep_for_later(step)
    torch.cuda.synchronize()
    print(f"step {step} pid {os.getpid()} rank {rank}", flush=True)
    time.sleep(0.05)
