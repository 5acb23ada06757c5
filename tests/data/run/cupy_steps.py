"""cupy_steps.py [STEPS]: a CuPy program (the stand-in of tests/data/fake_cupy) that makes a
temporary and keeps one 1 MiB array a step: under `memsnap run` CuPy allocates from memsnap's
allocator, so the kept arrays are a leak at this file's line."""
import sys

import cupy

kept = []
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
    scratch = cupy.empty(4 << 20)
    kept.append(cupy.empty(1 << 20))  # the leak: one array a step
    del scratch
print("cupy_steps: %d arrays kept" % len(kept))
