"""two_linear.py: two 8192x8192 Linear layers (512 MiB of fp32 weights) trained for a few steps,
the program whose categories are known to the byte: parameters 512 MiB, their gradients 512 MiB,
AdamW's two states 1024 MiB (SGD with momentum: 512 MiB).

  python3 two_linear.py [--optimizer adamw|sgd] [--set-to-none 1|0] [--steps N] [--leak]

--leak keeps every step's output (32 MiB) in a list: a leak of one block per step.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
p.add_argument("--set-to-none", type=int, default=1)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--leak", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8192, 8192, bias=False), torch.nn.ReLU(),
                            torch.nn.Linear(8192, 8192, bias=False)).cuda()
if args.optimizer == "adamw":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
else:
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
kept = []
for step in range(args.steps):
    x = torch.randn(1024, 8192, device="cuda")
    out = model(x)  # zoo: leak
    loss = out.square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=bool(args.set_to_none))
    if args.leak:
        kept.append(out.detach())
print("loss %.6f" % loss.item())
