"""model_train.py: a small training loop for the stand-in torch (tests/data/fake_torch) that
tests/recorder/test_torch_model.py records with memsnap's module, tensor, step and backward events
(recorder/python/memsnap/torch_model.py).

The model, Net: an embedding of token ids (which need no gradient), two Blocks, a head and the
loss made inside Net.forward (so that Net's output is a tensor of its own); a buffer `mask` of
4096 bytes. A Block is a Linear `ln`, a Split into two outputs (two tensors that require grad: a
multi-grad hook of mode "any"), a Merge of the two (two inputs: mode "all") and an MLP (Linear,
GELU, Linear). Net.odd is a module whose named_modules raises (a hook that fails inside must not
break the program): it runs once, after the first forward. AdamW steps through a
torch.cuda.amp.GradScaler; step 1's gradients "hold inf" (the scaler's stand-in flag found_inf):
its optimizer step is skipped.

Usage: model_train.py DB [STEPS] [record-late] [native LIB]
  DB           the snapshot written at the end (memsnap.dump)
  STEPS        training steps (default 3)
  record-late  memsnap.enable() with the history not recording, memsnap.record() after the model is
               built (the hooks come with the recording)
  roots        after the steps: a second Net alive beside the first runs forward (Net#2), goes,
               and a third takes its name; then a backward pass the engine runs unwrapped
               (Variable._execution_engine.run_backward, as C++ callers do), then a plain one
  native LIB   LIB is build/tests/libnative_thread.so: in every backward pass a hook on the loss
               allocates 12345 bytes on a thread that never ran Python (freed at once), and after
               the steps, outside any backward pass, 23456 bytes
Prints "hooks N" (global forward pre-hooks registered) and "steps done N".
"""
import ctypes
import sys

import memsnap

args = sys.argv[1:]
db = args[0]
steps = int(args[1]) if len(args) > 1 and args[1].isdigit() else 3
record_late = "record-late" in args
native = ctypes.CDLL(args[args.index("native") + 1]) if "native" in args else None

memsnap.enable()
import torch  # noqa: E402
from torch import nn  # noqa: E402


class Split(nn.Module):
    def forward(self, x):
        return torch._op("SplitBackward0", x.nbytes, (x,)), torch._op("SplitBackward0", x.nbytes, (x,))


class Merge(nn.Module):
    def forward(self, a, b):
        return torch._op("AddBackward0", a.nbytes, (a, b))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.Linear(d, d, bias=False)
        self.split = Split()
        self.merge = Merge()
        self.mlp = MLP(d)

    def forward(self, x):
        a, b = self.split(self.ln(x))
        return self.mlp(self.merge(a, b))


class Odd(nn.Module):
    def named_modules(self, *args, **kwargs):
        raise RuntimeError("a module that cannot be walked")

    def forward(self, x):
        return x


class Net(nn.Module):
    def __init__(self, vocab=64, d=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d), Block(d)])
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.empty(4096))

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return torch._op("SumBackward0", 4, (self.head(x),))


def native_alloc(grad, size=12345):
    ptr = native.native_thread_malloc(malloc_fn, size)
    memsnap.free(ptr)


def train_step(model, optimizer, scaler, step):
    ids = torch.empty(16)
    loss = model(ids)
    if native is not None:
        loss.register_hook(native_alloc)
    scaler.scale(loss).backward()
    if step == 1:
        scaler.found_inf = True
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


if native is not None:
    native.native_thread_malloc.restype = ctypes.c_void_p
    native.native_thread_malloc.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
    malloc_fn = ctypes.cast(memsnap.load().memsnap_malloc, ctypes.c_void_p).value
model = Net()
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.cuda.amp.GradScaler()
if record_late:
    memsnap.record()
for step in range(steps):
    train_step(model, optimizer, scaler, step)
    if step == 0:
        odd = Odd()
        print("odd module ran" if odd(ids_ := torch.empty(8)) is ids_ else "odd module failed")
if native is not None:
    native_alloc(None, 23456)
if "roots" in args:
    second = Net()
    second(torch.empty(16))
    del second
    third = Net()
    third(torch.empty(16))
    loss = model(torch.empty(16))
    torch.autograd.variable.Variable._execution_engine.run_backward((loss,), None, False, False, (),
                                                                    allow_unreachable=True, accumulate_grad=True)
    model(torch.empty(16)).backward()
print("hooks %d" % len(torch.nn.modules.module._global_forward_pre_hooks))
print("steps done %d" % steps)
memsnap.dump(db)
