"""compile_turns.py: torch.compile(mode="reduce-overhead") training and evaluation taking turns over
two input shapes (issue 34), after a function that makes CUDA graph trees restore a checkpoint.

Graph trees record a graph per (function, shape) path. They restore their private pool's
checkpoint (torch._C._cuda_setCheckpointPoolState) when a new graph must be recorded (or warmed
up) while a path they were replaying still has live outputs: first, PyTorch's own
test_cudagraph_trees.py test_live_outputs_multiple_graphs (a function with a graph break whose
second graph depends on the data: run twice on zeros, then twice on ones with the output kept),
which restores twice natively; then the training and evaluation turns (each call of a compiled
function there starts a new generation, so they record without restoring). Prints one line
"COMPILE {json}": the restores counted, whether the first part answered right, the losses' sum,
the peaks over the whole run (max_memory_allocated, max_memory_reserved), the peaks of the turns
once every graph was recorded (reset after the first four turns: no compilation in them) and
whether it ran without an error.

The peaks over the whole run include what torch.compile allocates while compiling (Inductor's
autotuning benchmarks clear the L2 cache with a buffer of its size, 50 MiB on an H100), which a
run that finds its kernels in Inductor's cache skips: compare runs with caches alike (run_cxx.sh
gives each run an empty TORCHINDUCTOR_CACHE_DIR).

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

    out = {"who": who, "allocator": kind}

    def branchy(x):  # PyTorch's test_live_outputs_multiple_graphs
        x = x + x + x
        y = x + 1
        torch._dynamo.graph_break()
        z = x * x
        if z.sum() > 0:
            return y + 1
        return y

    cbranchy = torch.compile(branchy, mode="reduce-overhead")
    try:
        for _ in range(2):
            cbranchy(torch.zeros(5, device="cuda"))
        kept = None
        for _ in range(2):
            kept = cbranchy(torch.ones(5, device="cuda"))
        out["branchy right"] = bool((kept == 5.0).all())  # ones: x = 3, y = 4, y + 1
        del kept
    except Exception as e:  # noqa: BLE001
        out["branchy error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
        traceback.print_exc()
    out["restores in branchy"] = restores[0]

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
    total = 0.0
    steady = None
    before = {"allocated": 0, "reserved": 0}  # the peaks until the reset below
    try:
        for it in range(10):
            if it == 4:  # every graph recorded (evaluation records at its second turn, it == 3): from here
                # the peaks of replays and of the allocations between them alone
                torch.cuda.synchronize()
                steady = torch.cuda.memory_allocated()
                before = {"allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved()}
                torch.cuda.reset_peak_memory_stats()
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
    out.update(restores=restores[0], losses=round(total, 3), steady_max_allocated=torch.cuda.max_memory_allocated(),
               steady_max_reserved=torch.cuda.max_memory_reserved(), allocated_at_steady=steady,
               allocated=torch.cuda.memory_allocated())
    out.update(max_allocated=max(before["allocated"], out["steady_max_allocated"]),
               max_reserved=max(before["reserved"], out["steady_max_reserved"]))
    print("COMPILE " + json.dumps(out))
    sys.exit(0 if out["error"] is None and "branchy error" not in out else 1)


if __name__ == "__main__":
    main()
