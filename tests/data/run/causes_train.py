"""causes_train.py: a training loop for the stand-in torch (tests/data/fake_torch) whose memory is
kept alive by every cause memsnap's holders and gc events name (recorder/python/memsnap/holders.py;
tests/recorder/test_holders.py records it; tests/data/causes.db is one of its snapshots).

Each cause allocates blocks of its own size, every step unless said:
  HOOK      a forward hook of Net.head appends a tensor to the list its closure holds (keep_outputs)
  CLOSURE   log() appends to `history`, a list its closure holds (log is a global)
  CACHE     the global dict `_cache`, keyed by step
  ATTR      trainer.last, an attribute replaced each step (one block alive)
  CYCLE     two Node objects referring to each other, one holding the tensor: freed only when the
            garbage collector runs (gc.collect() every 3 steps: the last steps' cycles are alive
            at the snapshot, a cycle no root reaches)
  SAVED     a loss kept in the global list `losses`, its grad_fn holding what it saved for backward
            (as PyTorch's nodes hold it: reachable only through grad_fn and its `_saved_*`)
  EVAL      every 3rd step (2, 5...) an evaluation of Scorer (Linear, GELU, Linear, GELU) with grad
            enabled and no backward, its output kept in the global list `eval_outputs`: a kept
            autograd graph whose GELUs' saved inputs (EVAL bytes each) only its nodes hold
  LOCAL     a tensor in finish()'s frame while the snapshot is written (once)
plus AdamW's state (the optimizer of Net), and each step's backward pass through Net.

Usage: causes_train.py DB [STEPS] [dump|exit|signal|oom]
  dump    memsnap.dump(DB) from finish() (the default)
  exit    nothing: the exit dump (MEMSNAP_DUMP=DB) writes it
  signal  the dump signal (MEMSNAP_DUMP_SIGNAL=USR1, MEMSNAP_DUMP=DB) sent to itself from finish(),
          its snapshot copied to DB.signal once it has its holders (the exit dump writes DB again)
  oom     a request past the device from finish() (MEMSNAP_DUMP_ON_OOM=DB)
Prints "steps done N".
"""
import gc
import os
import shutil
import signal
import sys
import time

import memsnap

args = sys.argv[1:]
db = args[0]
steps = int(args[1]) if len(args) > 1 and args[1].isdigit() else 6
how = next((a for a in args[1:] if a in ("dump", "exit", "signal", "oom")), "dump")

gc.disable()  # the collector runs where the loop says: every 3 steps (steps 1, 4...), never by itself
memsnap.enable()
import torch  # noqa: E402
from torch import nn  # noqa: E402

KiB = 1024
HOOK, CLOSURE, CACHE, ATTR, CYCLE, SAVED, LOCAL = (1024 * KiB, 1088 * KiB, 1152 * KiB, 1216 * KiB, 1280 * KiB,
                                                    1344 * KiB, 1408 * KiB)
EVAL = 512 * KiB


class Net(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.body = nn.Linear(d, d)
        self.head = nn.Linear(d, d)

    def forward(self, x):
        return self.head(self.body(x))


class Scorer(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.act = nn.GELU()
        self.out = nn.Linear(d, d)
        self.act2 = nn.GELU()

    def forward(self, x):
        return self.act2(self.out(self.act(self.proj(x))))


class Trainer:
    def __init__(self):
        self.last = None


class Node:
    def __init__(self, tensor=None):
        self.tensor = tensor
        self.other = None


def make_logger():
    history = []

    def log(x):
        history.append(torch.empty(CLOSURE))
    return log


def keep_outputs(store):
    return lambda module, inputs, output: store.append(torch.empty(HOOK))


_cache = {}
losses = []
eval_outputs = []
log = make_logger()
model = Net()
scorer = Scorer()
model.head.register_forward_hook(keep_outputs([]))
optimizer = torch.optim.AdamW(model.parameters())
trainer = Trainer()
w = torch.empty(64, requires_grad=True)

for step in range(steps):
    memsnap.mark("step")
    out = model(torch.empty(4096))
    out.backward()
    log(out)
    _cache[step] = torch.empty(CACHE)
    trainer.last = torch.empty(ATTR)
    a, b = Node(torch.empty(CYCLE)), Node()
    a.other, b.other = b, a
    del a, b
    losses.append(torch._op("EvalBackward0", 4, (w,), saved_bytes=SAVED))
    optimizer.step()
    if step % 3 == 2:  # evaluated without torch.no_grad(), its output kept
        eval_outputs.append(scorer(torch.empty(EVAL)))
    if step % 3 == 1:
        gc.collect()
    del out
print("steps done %d" % steps, flush=True)


def finish():
    keep = torch.empty(LOCAL)
    if how == "dump":
        memsnap.dump(db)
    elif how == "signal":
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(500):  # the signal thread writes it, then the hook adds the holders
            time.sleep(0.01)
            if os.path.exists(db) and _has_holders():
                break
        shutil.copy(db, db + ".signal")  # the exit dump writes MEMSNAP_DUMP again
    elif how == "oom":
        try:
            torch.empty(1 << 40)
        except Exception as e:  # noqa: BLE001 - torch.OutOfMemoryError under memsnap
            print("oom: %s" % type(e).__name__, flush=True)
    return keep


def _has_holders():
    import sqlite3
    try:
        c = sqlite3.connect(db)
        return c.execute("select count(*) from holders").fetchone()[0] > 0
    except sqlite3.Error:
        return False


finish()
