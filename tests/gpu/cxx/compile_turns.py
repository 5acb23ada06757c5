"""compile_turns.py: torch.compile(mode="reduce-overhead") training and evaluation taking turns over
two input shapes (issue 34). CUDA graph trees record a graph per (function, shape) path; when a
turn of evaluation comes after part of a training path was replayed, the trees record a new graph
from a checkpoint of their private pool, which they restore first (setCheckpointPoolState), so
the run exercises the restore many times. Prints one line "COMPILE {json}": the restores counted,
the losses' sum, the peaks (max_memory_allocated, max_memory_reserved) and whether it ran without
an error.

usage: compile_turns.py [native | memsnap]   (memsnap: memsnap.enable() first, in this process)
"""
import json
import sys
import traceback

from who import allocator_from_argv


def main():
    who, kind = allocator_from_argv()
    import torch
    restores = [0]
    original = torch._C._cuda_setCheckpointPoolState

    def counting(*args):
        restores[0] += 1
        return original(*args)
    torch._C._cuda_setCheckpointPoolState = counting  # graph trees look it up at call time

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train(x):
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    def evaluate(x):
        with torch.no_grad():
            return model(x).abs().mean()

    ctrain = torch.compile(train, mode="reduce-overhead")
    ceval = torch.compile(evaluate, mode="reduce-overhead")
    inputs = {bs: torch.randn(bs, 256, device="cuda") for bs in (64, 96)}
    out = {"who": who, "allocator": kind}
    total = 0.0
    try:
        for it in range(10):
            for bs, x in inputs.items():
                opt.zero_grad(set_to_none=True)
                total += float(ctrain(x))
                opt.step()
                if it % 2 == 1:  # evaluation after part of the training paths replayed
                    total += float(ceval(x))
        torch.cuda.synchronize()
        out["error"] = None
    except Exception as e:  # noqa: BLE001
        out["error"] = "%s: %s" % (type(e).__name__, str(e)[:400])
        traceback.print_exc()
    out.update(restores=restores[0], losses=round(total, 3), max_allocated=torch.cuda.max_memory_allocated(),
               max_reserved=torch.cuda.max_memory_reserved(), allocated=torch.cuda.memory_allocated())
    print("COMPILE " + json.dumps(out))
    sys.exit(0 if out["error"] is None else 1)


if __name__ == "__main__":
    main()
