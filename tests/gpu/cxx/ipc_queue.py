"""ipc_queue.py: issue 34's program: a trainer sends CUDA tensors to a worker through
torch.multiprocessing (spawn, a Queue), as the weight-sync code of RL frameworks does, and prints
the worker's sums. Natively it exits 0; under memsnap it must too, never hang.

What is sent: a 4 MiB tensor (a block of the large pool, inside a 20 MiB segment), a small one
(the small pool) and a slice of a third (an offset into its storage). The trainer drops its own
references right after sending, so the worker reads memory that only PyTorch's CUDA IPC
reference counting keeps alive; after the worker is done, torch.cuda.ipc_collect() collects what
PyTorch's limbo may give back. How much stays allocated then ("allocated after", in bytes) is
PyTorch's business (its limbo, its reference counter file), not a verdict: run_cxx.sh compares it
with the same program run natively on both sides ("native").

usage: ipc_queue.py [same | native-worker | memsnap-worker | native]
  same            the worker runs as the trainer does (both under memsnap when run with `memsnap run`)
  native-worker   the worker runs PyTorch's own allocator (MEMSNAP_RUN_MODE removed before spawning)
  memsnap-worker  the worker calls memsnap.enable() itself (run the trainer natively: PyTorch's
                  handles opened by memsnap)
  native          both sides native (run without memsnap): the baseline
Prints one line "IPC {json}" and exits 0 when every sum is right and both processes ended well.
"""
import json
import os
import sys
import time

import torch
import torch.multiprocessing as mp

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def worker(inbox, outbox, enable_memsnap):
    kind = "native"
    if enable_memsnap:
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        kind = memsnap.allocator_kind()
    elif "memsnap" in sys.modules:
        kind = sys.modules["memsnap"].allocator_kind() or "native"
    sums = []
    for _ in range(3):
        t = inbox.get(timeout=120)
        sums.append(float(t.double().sum().item()))
        del t
    outbox.put({"sums": sums, "worker allocator": kind,
                "worker backend": torch.cuda.memory.get_allocator_backend()})


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "same"
    if mode == "native-worker":
        os.environ.pop("MEMSNAP_RUN_MODE", None)  # the worker's sitecustomize then does nothing
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=worker, args=(inbox, outbox, mode == "memsnap-worker"))
    p.start()
    base = torch.cuda.memory_allocated()
    big = torch.arange(1 << 20, dtype=torch.float32, device="cuda")  # 4 MiB
    small = torch.full((1000,), 3.0, device="cuda")
    whole = torch.linspace(0, 1, 1 << 18, device="cuda")
    part = whole[1000:5000]
    want = [float(t.double().sum().item()) for t in (big, small, part)]
    for t in (big, small, part):
        inbox.put(t)
    del big, small, part, whole  # only IPC's reference counting keeps them now
    result = {"mode": mode, "want": want}
    try:
        got = outbox.get(timeout=240)
        result.update(got)
    except Exception as e:  # noqa: BLE001 - a worker that died or hangs: say so, do not hang
        result["error"] = "no answer from the worker: %s" % (type(e).__name__,)
    p.join(timeout=60)
    if p.is_alive():
        p.kill()
        result["error"] = result.get("error", "") + " worker did not exit"
    result["worker exit"] = p.exitcode
    for _ in range(50):  # the worker's releases reach the trainer's reference counters
        torch.cuda.ipc_collect()
        if torch.cuda.memory_allocated() == base:
            break
        time.sleep(0.1)
    result["allocated after"] = torch.cuda.memory_allocated() - base
    result["allocated back to base"] = result["allocated after"] == 0
    result["trainer allocator"] = (sys.modules["memsnap"].allocator_kind() if "memsnap" in sys.modules else None) or \
        "native"
    ok = "error" not in result and result.get("sums") == want and result["worker exit"] == 0
    result["ok"] = ok
    print("IPC " + json.dumps(result))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
