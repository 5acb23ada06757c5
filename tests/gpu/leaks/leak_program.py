"""leak_program.py CAUSE [--steps N]: a small GPT-2 (from a config, no weights: 6 layers, batch 8 x
256, AdamW) trained on the GPU the way users write it, with one cause of leaked memory (issue 52),
or none. run.py records each under `memsnap run` and checks that the analysis names it first, with
its holder or its cause.

  hook         a forward hook of transformer.h.5, a lambda whose closure holds the global list
               `features`, appends the block's output each step (as in the issue: ~12 MiB a step)
  closure      log(), made by make_logger(), appends the last position's logits to `history`, a
               list only its closure holds
  cache        the global dict `_cache` keeps a slice of each step's logits by step
  kept_loss    each step also evaluates a batch with grad enabled and keeps the loss in the global
               list `val_losses`: its autograd graph and saved activations stay alive
  eval_every_k every 4th step evaluates without torch.no_grad() and keeps the loss in
               `eval_outputs`: a graph kept every 4 steps (the growth every k iterations)
  node_cycle   PyTorch's GPU memory guide: two tensors in a cycle of Node objects made each step,
               freed only when the garbage collector runs (its own thresholds)
  awaitable    the guide's other workload: an Awaitable holding a tensor, with a callback (a
               closure over the awaitable) that returns a view of it: a cycle each step
  attribute    Trainer.history, an attribute, grows by torch.cat of each step's last logits
  control      none: the leak-free loop
"""
import argparse
import gc
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

CAUSES = ("hook", "closure", "cache", "kept_loss", "eval_every_k", "node_cycle", "awaitable", "attribute", "control")
ap = argparse.ArgumentParser()
ap.add_argument("cause", choices=CAUSES)
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--seq", type=int, default=256)
args = ap.parse_args()

torch.manual_seed(0)
config = GPT2Config(n_layer=6, n_positions=1024)
model = GPT2LMHeadModel(config).cuda()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

features = []          # hook
_cache = {}            # cache
val_losses = []        # kept_loss
eval_outputs = []      # eval_every_k


def keep_outputs(store):
    return lambda module, inputs, output: store.append(output[0].detach())


def make_logger():
    history = []

    def log(logits):
        history.append(logits[:, -1].detach().clone())
    return log


log = make_logger()


class Node:
    def __init__(self, data=None):
        self.data = data
        self.next = None


class Awaitable:
    """A result with a callback that returns a view of it: the callback's closure holds the
    awaitable, which holds the callback."""

    def __init__(self, result):
        self.result = result
        self.callback = None

    def then(self, fn):
        self.callback = lambda: fn(self.result)
        return self


class Trainer:
    def __init__(self):
        self.history = None


trainer = Trainer()
if args.cause == "hook":
    model.transformer.h[5].register_forward_hook(keep_outputs(features))


def batch():
    return torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda")


for step in range(args.steps):
    x = batch()
    out = model(input_ids=x, labels=x)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if args.cause == "closure":
        log(out.logits)
    elif args.cause == "cache":
        _cache[step] = out.logits[:, :8].detach().clone()
    elif args.cause == "kept_loss":
        v = batch()
        val_losses.append(model(input_ids=v, labels=v).loss)
    elif args.cause == "eval_every_k" and step % 4 == 3:
        v = batch()
        eval_outputs.append(model(input_ids=v, labels=v).loss)  # no torch.no_grad(): the graph stays
    elif args.cause == "node_cycle":
        a = Node(torch.empty(5 << 20, dtype=torch.uint8, device="cuda"))
        b = Node(torch.empty(5 << 20, dtype=torch.uint8, device="cuda"))
        a.next, b.next = b, a
        del a, b
    elif args.cause == "awaitable":
        aw = Awaitable(torch.empty(8 << 20, dtype=torch.uint8, device="cuda")).then(lambda t: t.view(-1)[:1024])
        del aw
    elif args.cause == "attribute":
        last = out.logits[:, -1].detach()
        trainer.history = last.clone() if trainer.history is None else torch.cat([trainer.history, last])
    del out
torch.cuda.synchronize()
print("steps done %d, cause %s, gc counts %s" % (args.steps, args.cause, gc.get_count()), file=sys.stderr)
