"""fsdp2_train.py: GPT-2 (12 layers, width 1024) trained with FSDP2 (fully_shard) on every GPU
of the host, bf16 mixed precision (parameters in bf16, gradients reduced in fp32), 8 optimizer
steps. Run with torchrun:

  torchrun --standalone --nproc-per-node 2 fsdp2_train.py [--steps 8] [--batch 8] [--seq 1024] [--leak]

--leak keeps a view of every step's logits on each rank.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--leak", action="store_true")
args = p.parse_args()

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
torch.manual_seed(0)
config = GPT2Config(n_layer=12, n_embd=1024, n_head=16)
model = GPT2LMHeadModel(config).cuda()
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for block in model.transformer.h:
    fully_shard(block, mp_policy=mp)
fully_shard(model, mp_policy=mp)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
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
