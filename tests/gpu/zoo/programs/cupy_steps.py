"""cupy_steps.py: a CuPy program (no PyTorch): 6 steps of a dense layer's forward and backward
written by hand on 4096x4096 float32 arrays, CuPy's own memory pool underneath.

  python3 cupy_steps.py [--steps 6] [--leak]

--leak keeps every step's activations (64 MiB).
"""
import argparse

import cupy as cp

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--leak", action="store_true")
args = p.parse_args()

rng = cp.random.default_rng(0)
w = rng.standard_normal((4096, 4096), dtype=cp.float32) * 0.01
kept = []
for step in range(args.steps):
    x = rng.standard_normal((4096, 4096), dtype=cp.float32)
    h = cp.maximum(x @ w, 0)  # zoo: leak
    grad_h = (h > 0).astype(cp.float32) * (2 * h / h.size)
    grad_w = x.T @ grad_h
    w -= 0.01 * grad_w
    if args.leak:
        kept.append(h)
    del x, h, grad_h, grad_w
cp.cuda.Stream.null.synchronize()
print("norm %.4f" % float(cp.linalg.norm(w)), flush=True)
