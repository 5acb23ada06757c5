"""gpt2_train.py: an ordinary Hugging Face GPT-2 training loop, in the variants users run: eager,
gradient accumulation with activation checkpointing and bf16 autocast, torch.compile.

  python3 gpt2_train.py [--layers 6] [--batch 8] [--seq 512] [--steps 6] [--set-to-none 1|0]
                        [--accum N] [--checkpointing] [--autocast] [--compile] [--leak]
                        [--leak-hook]

--accum N runs N micro-batches of --batch each per optimizer step. --leak keeps a view of every
step's logits (`out.logits[:, -1]` holds the whole logits tensor): the leak of issue 22.
--leak-hook keeps, through a forward hook on the last transformer block, every step's hidden
states (`output[0].detach()`: 12 MiB a step at the defaults): the leak of issue 42. Both leaks'
memory is made by the forward call, the line the zoo marks as the leak's.
"""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=6)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--set-to-none", type=int, default=1)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--checkpointing", action="store_true")
p.add_argument("--autocast", action="store_true")
p.add_argument("--compile", action="store_true")
p.add_argument("--leak", action="store_true")
p.add_argument("--leak-hook", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
config = GPT2Config(n_layer=args.layers, n_positions=max(1024, args.seq))
model = GPT2LMHeadModel(config).cuda()
if args.checkpointing:
    model.gradient_checkpointing_enable()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
step_fn = torch.compile(model) if args.compile else model
print("parameters", sum(p.numel() for p in model.parameters()), flush=True)
kept = []
if args.leak_hook:
    def keep_hidden_states(module, inputs, output):
        kept.append((output[0] if isinstance(output, tuple) else output).detach())  # --leak-hook's leak
    model.transformer.h[-1].register_forward_hook(keep_hidden_states)
for step in range(args.steps):
    for micro in range(args.accum):
        x = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.autocast):
            out = step_fn(input_ids=x, labels=x)  # zoo: leak
        (out.loss / args.accum).backward()
    opt.step()
    opt.zero_grad(set_to_none=bool(args.set_to_none))
    if args.leak:
        kept.append(out.logits[:, -1])
print("loss %.4f" % out.loss.item(), flush=True)
