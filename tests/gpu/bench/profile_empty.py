"""profile_empty.py: the `torch.empty(1024) + del` loop of stack_cost.py alone, for a profiler
(perf record -g python3 tests/gpu/bench/profile_empty.py all 5): where an op's time goes under memsnap
with a recording mode, or under PyTorch's own allocator.

usage: python3 tests/gpu/bench/profile_empty.py MODE DEPTH [SECONDS]
       MODE: off, none, native, python, all, all-alloc (memsnap), torch (PyTorch's allocator,
       not recording) or torch-all (its recorder, stacks="all"); the loop runs about SECONDS
       (default 10) after a warm-up, D Python frames deep, and prints us per op.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import stack_cost  # noqa: E402


def main(argv):
    mode, depth = argv[1], int(argv[2])
    seconds = float(argv[3]) if len(argv) > 3 else 10.0
    allocator = "native" if mode.startswith("torch") else "memsnap"
    os.environ.setdefault("MEMSNAP_LIB", os.path.join(stack_cost.ROOT, "build", "libmemsnap.so"))
    torch = stack_cost.start(allocator, None)
    rec = {"off": None, "torch": None, "torch-all": "all"}.get(mode, mode)
    stack_cost.set_recording(allocator, torch, rec)
    sys.setrecursionlimit(1000)
    stack_cost.at_depth(depth, stack_cost.empty_loop, torch, 20000)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        stack_cost.at_depth(depth, stack_cost.empty_loop, torch, 20000)
        n += 20000
    print("%s depth %d: %.3f us/op over %d ops" % (mode, depth, (time.perf_counter() - t0) / n * 1e6, n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
