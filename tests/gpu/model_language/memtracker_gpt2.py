"""memtracker_gpt2.py: PyTorch's own MemTracker (torch.distributed._tools.mem_tracker) on GPT-2 as
tests/gpu/zoo/programs/gpt2_train.py trains it (6 layers, batch 8 x 512, AdamW), run natively:
the figures memsnap's categories and modules are compared with (compare.py; issue 42).

One warm-up step (AdamW makes its state, cuBLAS its workspace), then one step under MemTracker.
MemTracker counts only the tensors made inside it and those it is told of (track_external): the
model's parameters and buffers, the optimizer's state, and what the warm-up step left alive, its
input and its output (loss, logits, the cache's keys and values). gpt2_train.py holds that output
until the next forward returns, so memsnap sees it during that forward; MemTracker counts it as
`Other`. The step is gpt2_train.py's: forward, backward, step, zero_grad(set_to_none=True).

  python3 memtracker_gpt2.py --json PATH [--layers 6] [--batch 8] [--seq 512]

PATH gets:
  device                        the CUDA device the figures are of ("cuda:0")
  parameters                    the model's parameter count
  peak                          MemTracker's categories at its peak: Parameter, Buffer, Gradient,
                                Activation, Temp, Optstate, Other and Total, in bytes
  modules                       every module MemTracker saw: fqn (GPT2LMHeadModel.transformer.h.3),
                                parameter_bytes, buffer_bytes, input_bytes, output_bytes, and states:
                                {state: [one entry per call: {reftype: bytes, ..., "Total": bytes}]}
                                for Pre-Forward, Post-Forward, Peak-Forward, Pre-Backward,
                                Post-Backward, Peak-Backward
  previous_step_bytes           what the warm-up step left alive (tracked as Other)
  allocated_not_tracked_bytes   allocated when the tracked step began but unknown to MemTracker
                                (cuBLAS's workspaces, what the search above missed)
  max_memory_allocated          torch.cuda.max_memory_allocated() over the tracked step
  warmup_max_memory_allocated   the same over the warm-up step
"""
import argparse
import contextlib
import json
import os
import sys
import time

import torch
from torch.distributed._tools.mem_tracker import MemTracker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_model  # noqa: E402


def held_tensors(obj, depth=0, seen=None):
    """The tensors an object holds: a ModelOutput's fields, lists' and dicts' items, and other
    objects' attributes (the cache's layers and their keys and values), eight levels down."""
    seen = set() if seen is None else seen
    if obj is None or id(obj) in seen or depth > 8 or isinstance(obj, (torch.nn.Module, type, str)):
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
        return
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    else:
        items = list(getattr(obj, "__dict__", {}).values())
        slots = [n for k in type(obj).__mro__ for n in getattr(k, "__slots__", ()) if isinstance(n, str)]
        items += [getattr(obj, n, None) for n in slots]
    for item in items:
        yield from held_tensors(item, depth + 1, seen)


def storage_bytes(tensors):
    """Bytes of the distinct storages the tensors use."""
    seen = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def by_name(snap, device):
    """One device's entry of a MemTracker snapshot with its keys as names ({"Parameter": bytes, ...,
    "Total": bytes}); {} where the snapshot has none for the device (nothing tracked there)."""
    for dev, entry in snap.items():
        if str(dev) == device:
            return {getattr(k, "value", k): int(v) for k, v in entry.items()}
    return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()

    config, model, opt = gpt2_model.build(args.layers, args.seq)
    device = "cuda:%d" % torch.cuda.current_device()
    print("parameters", sum(p.numel() for p in model.parameters()), flush=True)
    tracker, x, out = None, None, None
    for step in range(2):
        if step == 1:  # after the warm-up: tell MemTracker what exists, then track one step
            torch.cuda.synchronize()
            warmup_peak = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            previous = [t for t in held_tensors([x, out]) if t.is_cuda]
            previous_bytes = storage_bytes(previous)
            tracker = MemTracker()
            tracker.track_external(model, opt, *previous)
            untracked = torch.cuda.memory_allocated() - by_name(tracker.get_tracker_snapshot(), device).get("Total", 0)
            del previous  # freed where gpt2_train.py frees them: when the next forward returns
            t0 = time.time()
        with tracker if tracker is not None else contextlib.nullcontext():
            x = gpt2_model.batch(config, args.batch, args.seq)
            out = model(input_ids=x, labels=x)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    tracked_seconds = time.time() - t0

    modules = []
    for stats in tracker.memory_tracking.values():
        modules.append({
            "fqn": stats.mod_fqn,
            "parameter_bytes": getattr(stats, "parameter_mem", None),
            "buffer_bytes": getattr(stats, "buffer_mem", None),
            "input_bytes": getattr(stats, "input_mem", None),
            "output_bytes": getattr(stats, "output_mem", None),
            "states": {getattr(state, "value", str(state)): [by_name(s, device) for s in snaps]
                       for state, snaps in stats.snapshots.items()},
        })
    result = {
        "device": device,
        "parameters": sum(p.numel() for p in model.parameters()),
        "peak": by_name(tracker.get_tracker_snapshot("peak"), device),
        "modules": modules,
        "previous_step_bytes": previous_bytes,
        "allocated_not_tracked_bytes": untracked,
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "warmup_max_memory_allocated": warmup_peak,
        "tracked_step_seconds": round(tracked_seconds, 2),
        "torch": torch.__version__,
    }
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    MiB = 1 << 20
    print("MemTracker at its peak (%s): %s" % (device, ", ".join(
        "%s %.1f MiB" % (k, v / MiB) for k, v in result["peak"].items())))
    print("what the warm-up step left alive: %.1f MiB; allocated but not tracked: %.1f MiB; max_memory_allocated "
          "%.1f MiB (warm-up %.1f MiB); %d modules; the tracked step took %.1f s" % (
              previous_bytes / MiB, untracked / MiB, result["max_memory_allocated"] / MiB, warmup_peak / MiB,
              len(modules), tracked_seconds))


if __name__ == "__main__":
    main()
