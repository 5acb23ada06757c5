"""memtracker_zoo.py: PyTorch's MemTracker on the zoo's other programs where it runs (issue 42's
"and on the zoo's programs where MemTracker runs"), natively, as the programs train: two Linear
8192x8192 with AdamW (tests/gpu/zoo/programs/two_linear.py) and torchvision's resnet50 with SGD
momentum, batch 32 (cnn_train.py). One warm-up step, then one step under MemTracker, told of the
model, the optimizer and what the warm-up left alive (as memtracker_gpt2.py does for GPT-2);
compare.py --categories compares its categories at the peak with memsnap's of the program recorded.

  python3 memtracker_zoo.py --program two_linear|resnet50 --json PATH

PATH gets memtracker_gpt2.py's keys but `modules` (device, parameters, peak, previous_step_bytes,
allocated_not_tracked_bytes, max_memory_allocated).
"""
import argparse
import contextlib
import json
import os
import sys

import torch
from torch.distributed._tools.mem_tracker import MemTracker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memtracker_gpt2 import by_name, held_tensors, storage_bytes  # noqa: E402


def two_linear():
    """two_linear.py's model and a step of it."""
    model = torch.nn.Sequential(torch.nn.Linear(8192, 8192, bias=False), torch.nn.ReLU(),
                                torch.nn.Linear(8192, 8192, bias=False)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        x = torch.randn(1024, 8192, device="cuda")
        out = model(x)
        loss = out.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return [x, out, loss]
    return model, opt, step


def resnet50():
    """cnn_train.py's model (without --amp) and a step of it."""
    import torchvision
    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        x = torch.randn(32, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (32,), device="cuda")
        out = model(x)
        loss = loss_fn(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return [x, y, out, loss]
    return model, opt, step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", choices=["two_linear", "resnet50"], required=True)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    model, opt, step = {"two_linear": two_linear, "resnet50": resnet50}[args.program]()
    device = "cuda:%d" % torch.cuda.current_device()
    left = step()  # the warm-up: AdamW's (or the momentum's) state, cuBLAS's workspaces
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    previous = [t for t in held_tensors(left) if t.is_cuda]
    previous_bytes = storage_bytes(previous)
    tracker = MemTracker()
    tracker.track_external(model, opt, *previous)
    untracked = torch.cuda.memory_allocated() - by_name(tracker.get_tracker_snapshot(), device).get("Total", 0)
    del previous
    with tracker:
        left = step()
    torch.cuda.synchronize()
    result = {"program": args.program, "device": device, "parameters": sum(p.numel() for p in model.parameters()),
              "peak": by_name(tracker.get_tracker_snapshot("peak"), device), "previous_step_bytes": previous_bytes,
              "allocated_not_tracked_bytes": untracked, "max_memory_allocated": torch.cuda.max_memory_allocated(),
              "torch": torch.__version__}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print("%s: MemTracker at its peak: %s" % (args.program, ", ".join(
        "%s %.1f MiB" % (k, v / (1 << 20)) for k, v in result["peak"].items())))


if __name__ == "__main__":
    main()
