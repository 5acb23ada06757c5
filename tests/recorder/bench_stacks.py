"""bench_stacks.py: what recording stacks costs an allocate+free pair made from a Python function
N calls deep, on the simulated device (docs/BENCHMARKS.md, "Stacks at depth").

The pairs are made in C (build/tests/libbench_stacks.so, bench_stacks_pairs) called through
ctypes from a Python function DEPTH Python calls below the module's code, so every capture reads
DEPTH + 2 Python frames. With --gil held (ctypes.PyDLL) the C loop holds the GIL, as an
allocation from `del tensor` does; with --gil released (ctypes.CDLL) it runs without it, as a
PyTorch op does (torch.empty releases the GIL around the allocation).

The C loop is build/tests/libbench_stacks.so of this tree (make test-programs); its memsnap_*
calls go to the library memsnap loaded (MEMSNAP_LIB), so another build of the library (an older
commit's: compare them in one run) is timed with the same loop.

usage: MEMSNAP_LIB=build/libmemsnap.so PYTHONPATH=recorder/python \\
         python3 tests/recorder/bench_stacks.py [--iters N] [--gil held|released] [DEPTH...]
BENCH_EVICT_KB=N writes N KiB of other memory after each allocation and each free (the C loop's
option): the recorder's data then comes from farther caches, as under PyTorch.
prints one line per depth: "depth D  off X  none X  native X  python X  all X" in ns per pair,
the median of 7 repetitions in which the modes take turns.
"""
import argparse
import ctypes
import os
import statistics
import sys

os.environ.setdefault("MEMSNAP_BACKEND", "sim")
import memsnap  # noqa: E402

MODES = ["off", "none", "native", "python", "all"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--gil", choices=["held", "released"], default="held")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("depths", type=int, nargs="*", default=[5, 30, 100])
    a = ap.parse_args()
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    lib_path = os.path.join(root, "build", "tests", "libbench_stacks.so")
    ctypes.CDLL(memsnap.library_path(), mode=ctypes.RTLD_GLOBAL)  # the bench library's memsnap_* calls
    loader = ctypes.PyDLL if a.gil == "held" else ctypes.CDLL
    bench = loader(lib_path)
    bench.bench_stacks_pairs.restype = ctypes.c_double
    bench.bench_stacks_pairs.argtypes = [ctypes.c_long]
    sys.setrecursionlimit(max(1000, 4 * max(a.depths)))
    memsnap.backend()

    def descend(depth, iters):
        if depth > 1:
            return descend(depth - 1, iters)
        return bench.bench_stacks_pairs(iters)

    def run(mode, depth, iters):
        if mode == "off":
            memsnap.stop_recording()
        else:
            memsnap.record(stacks=mode)
        ns = descend(depth, iters)
        memsnap.stop_recording()
        return ns

    for depth in a.depths:
        times = {m: [] for m in MODES}
        for m in MODES:
            run(m, depth, a.iters // 10 + 1)  # warm
        for _ in range(a.reps):
            for m in MODES:
                times[m].append(run(m, depth, a.iters))
        print("depth %3d" % depth + "".join("  %s %.1f" % (m, statistics.median(times[m])) for m in MODES), flush=True)


if __name__ == "__main__":
    main()
