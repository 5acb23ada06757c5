"""steps.py: an unchanged Python program for the `memsnap run` tests that never imports torch: its
device memory comes from a compiled library linked against libcudart (librun_steps.so,
tests/intercept/run_steps_lib.c) that it calls through ctypes, which releases the GIL around each
call as PyTorch's ops, CuPy and jaxlib do.

Each of STEPS steps allocates and frees a work buffer (1 to 4 MiB, varying from step to step as
a batch's size does, from a seeded generator) and keeps 1 MiB in keep_for_later(): the leak
`memsnap analyze` should name, at this file's line that calls the library. No mark, no range,
no period in the sizes: the analysis finds the steps from the loop's line.

Usage: steps.py [--deepbind] LIBRARY [STEPS] [held | threads N | contended | bench N | jax]
  --deepbind the library is loaded with RTLD_DEEPBIND: its own dependencies (libcudart) come
             before the process's global symbols, an LD_PRELOAD library's among them
  held       the steps call the library through ctypes.PyDLL, which keeps the GIL around each
             call (as a binding that does not release it does)
  threads N  the steps run in N threads at once (each its own STEPS), the main thread waits
  contended  after the steps, a thread allocates in work_while_locked() holding a lock of the
             library's while the main thread, holding the GIL, waits for that lock (what
             PyTorch's allocator mutex and a tensor freed from Python can do): a recorder that
             took the GIL back inside cudaMalloc would hang here
  jax        imports jax first (tests/data/fake_jax on the path) and prints the allocator XLA
             would have
  bench N    after the steps, times steps_work(1 MiB) calls (a cudaMalloc and a cudaFree each)
             through ctypes.CDLL (the GIL released) and through ctypes.PyDLL (held), and prints
             microseconds per call as a JSON line: burst_* N calls in a row, the fastest of 5
             rounds; alone_* the median of 200 calls 2 ms apart (nothing else runs: each finds the
             threads asleep); busy_released the median of 40 calls while another thread runs
             Python (the GIL must be taken from it)
"""
import ctypes
import os
import random
import sys

deepbind = sys.argv[1] == "--deepbind"
if deepbind:
    del sys.argv[1]
dll = ctypes.PyDLL if len(sys.argv) > 3 and sys.argv[3] == "held" else ctypes.CDLL
lib = dll(sys.argv[1], mode=os.RTLD_DEEPBIND | os.RTLD_LOCAL if deepbind else ctypes.DEFAULT_MODE)
for name in ("steps_work", "steps_keep_for_later"):
    getattr(lib, name).argtypes = [ctypes.c_size_t]


def keep_for_later():
    rc = lib.steps_keep_for_later(1 << 20)
    assert rc == 0, "steps_keep_for_later failed: error %d" % rc


def step(batch_mib):
    rc = lib.steps_work(batch_mib << 20)
    assert rc == 0, "steps_work failed: error %d" % rc
    keep_for_later()


def run(steps):
    sizes = random.Random(steps)
    for _ in range(steps):
        step(sizes.randint(1, 4))


def bench(n):
    """Times steps_work(1 MiB) (bench N in the usage above) and prints one JSON line."""
    import json
    import statistics
    import threading
    import time

    def calls(work, count, gap=0.0):
        times = []
        for _ in range(count):
            if gap:
                time.sleep(gap)
            t0 = time.perf_counter()
            work(1 << 20)
            times.append(time.perf_counter() - t0)
        return times

    result = {}
    for label, dll in (("released", lib), ("held", ctypes.PyDLL(sys.argv[1]))):
        work = dll.steps_work
        work.argtypes = [ctypes.c_size_t]
        best = None
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                work(1 << 20)
            t = (time.perf_counter() - t0) / n
            best = t if best is None or t < best else best
        result["burst_" + label] = round(best * 1e6, 3)
        result["alone_" + label] = round(statistics.median(calls(work, 200, 0.002)) * 1e6, 3)
    stop = []

    def spin():
        x = 0
        while not stop:
            x += 1

    other = threading.Thread(target=spin)
    other.start()
    result["busy_released"] = round(statistics.median(calls(lib.steps_work, 40)) * 1e6, 3)
    stop.append(True)
    other.join()
    print("BENCH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    if len(sys.argv) > 3 and sys.argv[3] == "jax":
        import jax
        print("steps.py: XLA's allocator would be %s" % jax.allocator, flush=True)
    if len(sys.argv) > 4 and sys.argv[3] == "threads":
        import threading
        threads = [threading.Thread(target=run, args=(steps,)) for _ in range(int(sys.argv[4]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        run(steps)
    if len(sys.argv) > 3 and sys.argv[3] == "contended":
        import threading
        import time

        def work_while_locked():
            assert lib.steps_work_locked(1 << 20) == 0

        worker = threading.Thread(target=work_while_locked)
        worker.start()
        while not lib.steps_lock_held():
            time.sleep(0.001)
        holding_gil = ctypes.PyDLL(sys.argv[1])  # a call that keeps the GIL, as PyTorch's bindings
        holding_gil.steps_wait_for_lock()          # do around a tensor's free
        worker.join()
    if len(sys.argv) > 4 and sys.argv[3] == "bench":
        bench(int(sys.argv[4]))
    print("steps.py: %d blocks kept" % lib.steps_kept(), flush=True)
