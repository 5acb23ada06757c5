"""train.py: an unchanged "training script" for the `memsnap run` tests (tests/test_run.sh).

It imports torch (the stand-in in tests/data/fake_torch when PyTorch is absent), runs STEPS
steps that each allocate four 1 MiB activations and free them, and keeps one 256 KiB tensor
per step in keep_loss_for_logging(): the leak that `memsnap analyze` should name.

Usage: train.py [STEPS] [exit N | raise | _exit N | fork | forked N | workers N | cudart LIB]
  exit N     exit with status N after the steps
  raise      end with an uncaught exception (status 1)
  _exit N    end with os._exit(N): exit handlers do not run
  fork       a forked child that exits with os._exit(0) before the parent's steps
  forked N   N children forked (os.fork, no exec) before the parent touches the device, each
             running the steps and ending with os._exit(0)
  workers N  N worker processes (multiprocessing, spawn) that run the steps too
  cudart LIB also allocate 3 MiB with LIB's cudaMalloc directly, outside torch (never freed)
  frag       after the steps, hold eleven 9 MiB tensors at once (two to a 20 MiB segment: 120 MiB
             reserved; expandable segments would map 100 MiB), then free them
"""
import os
import sys

import torch

kept = []


def keep_loss_for_logging(step):
    kept.append(torch.empty(256 << 10, device="cuda"))


def train_step(step):
    activations = [torch.empty(1 << 20, device="cuda") for _ in range(4)]
    keep_loss_for_logging(step)
    del activations


def train(steps):
    for step in range(steps):
        train_step(step)


def worker(steps):
    train(steps)


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    end = sys.argv[2] if len(sys.argv) > 2 else "exit"
    arg = sys.argv[3] if len(sys.argv) > 3 else "0"
    if end == "fork":
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    if end == "forked":
        children = []
        for _ in range(int(arg)):
            pid = os.fork()
            if pid == 0:
                train(steps)
                os._exit(0)
            children.append(pid)
        if any(os.waitpid(pid, 0)[1] for pid in children):
            sys.exit("a forked child failed")
    if end == "cudart":
        import ctypes
        cudart = ctypes.CDLL(arg)
        cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        direct = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(direct), 3 << 20) == 0
    train(steps)
    if end == "frag":
        held = [torch.empty(9 << 20, device="cuda") for _ in range(11)]
        del held
    if end == "workers":
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=worker, args=(steps,)) for _ in range(int(arg))]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            sys.exit("a worker failed")
    print("train.py: %d steps, %d tensors kept" % (steps, len(kept)), flush=True)
    if end == "raise":
        raise RuntimeError("the training failed on purpose")
    if end == "_exit":
        os._exit(int(arg))
    sys.exit(int(arg) if end == "exit" else 0)
