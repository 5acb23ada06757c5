"""torch_train.py: a PyTorch training loop with a deliberate leak, recorded by memsnap.

The GPU twin of samples/train_loop.c: a small MLP trained on random data, each step marked
("step") with forward/backward/optimizer ranges, and one bug: the loss tensor of every step is
kept in a list (`history.append(loss)` instead of `loss.item()`), so memory grows each step.
At the end it writes a snapshot (docs/snapshot-format.md) whose live blocks point at the line
that leaks.

usage: PYTHONPATH=recorder/python python3 samples/torch_train.py [--steps N] [--out PATH]
"""
import argparse
import sys

import memsnap


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default="torch_train-%p.db")
    args = parser.parse_args()
    memsnap.enable()  # before the first CUDA tensor
    import torch
    if not torch.cuda.is_available():
        print("error: this sample needs a CUDA GPU (samples/train_loop.c runs without one)", file=sys.stderr)
        return 1
    memsnap.record(stacks="all")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
    opt = torch.optim.Adam(model.parameters())
    history = []
    for step in range(args.steps):
        memsnap.mark("step")
        x = torch.randn(256, 1024, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        with memsnap.range("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            keep_for_logging = loss * torch.ones(64 * 1024, device="cuda")  # 256 KiB per step
        with memsnap.range("backward"):
            loss.backward()
        with memsnap.range("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        history.append(keep_for_logging)  # the leak: a GPU tensor kept every step
    path = memsnap.dump(args.out)
    print("%d steps; allocated %.1f MiB; snapshot %s" % (args.steps, torch.cuda.memory_allocated() / 2**20, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
