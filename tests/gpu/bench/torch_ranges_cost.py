"""torch_ranges_cost.py: what recording PyTorch's record_function scopes as memsnap's ranges costs
(memsnap.enable(): recorder/python/memsnap/__init__.py, _record_torch_ranges; docs/BENCHMARKS.md,
"PyTorch's ranges").

Each configuration runs in a process of its own (memsnap must become the allocator before CUDA
starts), REPS times, alternating; the fastest of each is kept:

  native        PyTorch's own allocator
  memsnap       memsnap.enable(), recording, record_function recorded as ranges (the default)
  memsnap-off   the same with MEMSNAP_TORCH_RANGES=0

Measured in each: a loop of `with torch.profiler.record_function("x"): pass` (µs per block), and
an optimizer step of a small model (AdamW over 50 parameters; µs per step, with the
Optimizer.step range around it). Prints one JSON line per run to $OUT/torch_ranges_cost.jsonl and
a short table with the ratios to native last.

usage (from the repository root, build/ prepared with tests/gpu/prepare.sh):
  python3 tests/gpu/bench/torch_ranges_cost.py [--reps N] [--blocks N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="memsnap-ranges-cost-")

CHILD = r'''
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "recorder", "python"))
mode, blocks = sys.argv[2], int(sys.argv[3])
if mode != "native":
    import memsnap
    memsnap.enable()
    memsnap.record()
import torch
x = torch.empty(1, device="cuda")
rf = torch.profiler.record_function
for _ in range(1000):
    with rf("warm"):
        pass
t = time.perf_counter()
for _ in range(blocks):
    with rf("x"):
        pass
block_us = (time.perf_counter() - t) / blocks * 1e6
params = [torch.nn.Parameter(torch.randn(256, 256, device="cuda")) for _ in range(50)]
for p in params:
    p.grad = torch.randn_like(p)
opt = torch.optim.AdamW(params, lr=1e-3)
for _ in range(5):
    opt.step()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(100):
    opt.step()
torch.cuda.synchronize()
step_us = (time.perf_counter() - t) / 100 * 1e6
print(json.dumps({"mode": mode, "block_us": block_us, "step_us": step_us}))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=100000)
    args = ap.parse_args()
    lib = os.path.join(ROOT, "build", "libmemsnap.so")
    best = {}
    with open(os.path.join(OUT, "torch_ranges_cost.jsonl"), "w") as log:
        for rep in range(args.reps):
            for mode in ("native", "memsnap", "memsnap-off"):
                env = dict(os.environ, MEMSNAP_LIB=lib, MEMSNAP_TORCH_RANGES="0" if mode == "memsnap-off" else "1")
                p = subprocess.run([sys.executable, "-c", CHILD, ROOT, mode, str(args.blocks)], env=env,
                                   capture_output=True, text=True)
                line = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else None
                r = json.loads(line) if line else {"mode": mode, "error": p.stderr[-800:]}
                r["rep"] = rep
                log.write(json.dumps(r) + "\n")
                if "error" in r:
                    print("error in", mode, r["error"])
                    continue
                b = best.setdefault(mode, dict(r))
                b["block_us"] = min(b["block_us"], r["block_us"])
                b["step_us"] = min(b["step_us"], r["step_us"])
    nat = best.get("native")
    print("\n%-12s %14s %10s %14s %10s" % ("mode", "block (us)", "vs native", "AdamW step (us)", "vs native"))
    for mode in ("native", "memsnap", "memsnap-off"):
        r = best.get(mode)
        if not r:
            print("%-12s failed" % mode)
            continue
        print("%-12s %14.3f %10s %14.1f %10s" % (mode, r["block_us"], "%.2fx" % (r["block_us"] / nat["block_us"]) if nat else "-",
                                                r["step_us"], "%.3fx" % (r["step_us"] / nat["step_us"]) if nat else "-"))


if __name__ == "__main__":
    main()
