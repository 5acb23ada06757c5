"""unedited.py: an unedited training script for the stand-in torch (tests/data/fake_torch): it never
imports memsnap nor marks anything. STEPS steps of: 1 MiB activations (2 to 6 of them: steps
differ, as PyTorch's do, so that no period of the allocations holds), a 256 KiB tensor kept in
keep_loss_for_logging (the leak), torch.optim.AdamW's step over four 1 MiB parameters.

Usage: unedited.py [STEPS] [blocks]
  blocks   also wrap each step in `with torch.profiler.record_function("step")` with a nested
           "forward" block, one of which raises (caught), and print how often the class's own
           __enter__ and __exit__ ran
"""
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
blocks = "blocks" in sys.argv[2:]
params = [torch.empty(1 << 20, device="cuda") for _ in range(4)]
optimizer = torch.optim.AdamW(params, lr=1e-3)
kept = []


def keep_loss_for_logging():
    kept.append(torch.empty(256 << 10, device="cuda"))


def forward(step):
    activations = [torch.empty(1 << 20, device="cuda") for _ in range(2 + step * step % 5)]
    keep_loss_for_logging()
    if blocks and step == 2:
        raise ValueError("a failing step")
    del activations


for step in range(steps):
    if blocks:
        with torch.profiler.record_function("step"):
            try:
                with torch.profiler.record_function("forward"):
                    forward(step)
            except ValueError:
                pass
    else:
        forward(step)
    optimizer.step()
if blocks:
    print("record_function entered %d left %d" % (torch.autograd.profiler.entered, torch.autograd.profiler.left))
