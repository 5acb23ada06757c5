"""test_modules.py BUILD_DIR: memory by module, categories from tensor events and iterations from
recorded optimizer steps (the model's language: docs/snapshot-format.md's module, tensor, step and
backward events), on a snapshot written here event by event with known answers.

The program it describes: a model Net with submodules enc (whose child enc.0 runs inside it) and
head; three training steps, the second skipped by GradScaler. Each step: enc.0's forward makes A1
(1 MiB, saved for backward) and a temporary T1 (512 KiB, freed in it); enc then makes A2 (2 MiB);
head makes A3 (4 MiB); then a backward pass on autograd's thread (its own thread id) runs head's
backward (it makes the gradient G, 8 MiB, and frees A3), then enc's and enc.0's (freeing A2, A1);
then the optimizer's step, whose tensor events name the parameter P (16 MiB, made before the
steps) enc.0's and G head's gradient; G is freed after the step (set_to_none).
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

build = sys.argv[1]
cli = os.path.join(build, "memsnap")
work = tempfile.mkdtemp(prefix="memsnap-modules-")
MiB = 1 << 20
ALLOC, FREE_REQ, FREE_DONE, SEG_ALLOC = 1, 2, 3, 4
MODULE, TENSOR, STEP, BACKWARD = 15, 16, 17, 18
MAIN, AUTOGRAD = 100, 101

subprocess.run([os.path.join(build, "tests", "gen_snapshots"), work], check=True, capture_output=True,
               env=dict(os.environ, MEMSNAP_BACKEND="sim"))
db = os.path.join(work, "model.db")
shutil.copy(os.path.join(work, "empty.db"), db)
c = sqlite3.connect(db)
labels = ["Net", "Net.enc", "Net.enc.0", "Net.head", "SGD"]
for i, text in enumerate(labels, 1):
    c.execute("insert into labels values (?, ?)", (i, text))
L = {text: i for i, text in enumerate(labels, 1)}
rows, t = [], [1000]
next_addr = [1 << 40]


def event(kind, device=0, address=0, size=0, requested=0, extra=None, thread=MAIN):
    t[0] += 1000
    rows.append((len(rows) + 1, t[0], kind, device, 0, address, size, requested, extra, thread, None))
    return len(rows)


def alloc(size, thread=MAIN):
    addr = next_addr[0]
    next_addr[0] += 1 << 30
    event(SEG_ALLOC, address=addr, size=size, requested=size, thread=thread)
    event(ALLOC, address=addr, size=size, requested=size, thread=thread)
    return addr, size


def free(block, thread=MAIN):
    event(FREE_REQ, address=block[0], size=block[1], requested=block[1], thread=thread)
    event(FREE_DONE, address=block[0], size=block[1], requested=block[1], thread=thread)


def module(name, what, thread=MAIN):
    event(MODULE, device=-1, size=what, extra=L[name], thread=thread)


P = alloc(16 * MiB)  # the parameter, made before the steps
steps = []
for step in range(3):
    module("Net", 0)
    module("Net.enc", 0)
    module("Net.enc.0", 0)
    A1 = alloc(1 * MiB)
    T1 = alloc(MiB // 2)
    free(T1)
    module("Net.enc.0", 1)
    A2 = alloc(2 * MiB)
    module("Net.enc", 1)
    module("Net.head", 0)
    A3 = alloc(4 * MiB)
    module("Net.head", 1)
    module("Net", 1)
    event(BACKWARD, device=-1, size=0)
    module("Net.head", 2, AUTOGRAD)
    G = alloc(8 * MiB, AUTOGRAD)
    free(A3, AUTOGRAD)
    module("Net.head", 3, AUTOGRAD)
    module("Net.enc", 2, AUTOGRAD)
    free(A2, AUTOGRAD)
    module("Net.enc.0", 2, AUTOGRAD)
    free(A1, AUTOGRAD)
    module("Net.enc.0", 3, AUTOGRAD)
    module("Net.enc", 3, AUTOGRAD)
    event(BACKWARD, device=-1, size=1)
    if step == 1:
        steps.append((event(STEP, device=-1, size=3, extra=L["SGD"]), 3))
    else:
        steps.append((event(STEP, device=-1, size=1, extra=L["SGD"]), 1))
        event(TENSOR, address=P[0], size=P[1], requested=1, extra=L["Net.enc.0"])
        event(TENSOR, address=G[0], size=G[1], requested=2, extra=L["Net.head"])
        steps.append((event(STEP, device=-1, size=2, extra=L["SGD"]), 2))
    free(G)
c.executemany("insert into events values (?,?,?,?,?,?,?,?,?,?,?)", rows)
for event_id, what in steps:
    c.execute("insert into steps values (?, ?, ?, ?)", (event_id, rows[event_id - 1][1], L["SGD"], what))
c.execute("insert into segments(id, device, address, size, pool, stream) values (1, 0, ?, ?, 'large', 0)", P)
c.execute("insert into blocks(id, segment_id, address, size, requested_size, state, stack_id) values (1, 1, ?, ?, ?, 'allocated', NULL)", (P[0], P[1], P[1]))
c.execute("update meta set value = ? where key in ('recorded_events')", (len(rows),))
c.commit()
c.close()

out = subprocess.run([cli, "analyze", "--json", db], capture_output=True, text=True)
check("the snapshot analyzes", out.returncode == 0, out.stderr)
j = json.loads(out.stdout) if out.returncode == 0 else {}
mods = {m["name"]: m for m in j.get("modules", [])}
s = j.get("summary", {})
check("modules: the tree as recorded, parents before their submodules",
      [m["name"] for m in j.get("modules", [])] == ["Net", "Net.enc", "Net.enc.0", "Net.head"] and
      [m["parent"] for m in j.get("modules", [])] == [-1, 0, 1, 0] and mods["Net.enc.0"]["shown"] == "enc.0", str(mods))
check("modules: three forward calls each, backward calls for those with a backward",
      all(mods[n]["forward_calls"] == 3 for n in mods) and mods["Net.head"]["backward_calls"] == 3 and
      mods["Net.enc.0"]["backward_calls"] == 3 and mods["Net"]["backward_calls"] == 0, str(mods))
check("modules: activations are what a forward made and still held at its end (its temporaries not)",
      (mods["Net.enc.0"]["activation_bytes"], mods["Net.enc"]["activation_bytes"], mods["Net.head"]["activation_bytes"],
       mods["Net"]["activation_bytes"]) == (MiB, 3 * MiB, 4 * MiB, 7 * MiB), str({n: m["activation_bytes"] for n, m in mods.items()}))
check("modules: saved for backward, per call: made in its forward, freed by a backward pass (with its submodules')",
      (mods["Net.enc.0"]["saved_bytes"], mods["Net.enc"]["saved_bytes"], mods["Net"]["saved_bytes"]) == (MiB, 3 * MiB, 7 * MiB),
      str({n: m["saved_bytes"] for n, m in mods.items()}))
# allocated during a step: P 16, +A1 17, +T1 17.5 (enc.0's peak), -T1, +A2 19, +A3 23 (the forward's
# peak), then in backward +G 31 (head's backward peak), -A3 27 ...
check("modules: forward and backward peaks are the highest allocated totals while they ran",
      mods["Net.enc.0"]["forward_peak_bytes"] == 17 * MiB + MiB // 2 and mods["Net"]["forward_peak_bytes"] == 23 * MiB and
      mods["Net.head"]["backward_peak_bytes"] == 31 * MiB and mods["Net.enc"]["backward_peak_bytes"] == 27 * MiB,
      str({n: (m["forward_peak_bytes"], m["backward_peak_bytes"]) for n, m in mods.items()}))
check("modules: tensors by their module, summed over submodules (as module.parameters())",
      mods["Net.enc.0"]["parameter_bytes"] == 16 * MiB and mods["Net"]["parameter_bytes"] == 16 * MiB and
      mods["Net.head"]["gradient_bytes"] == 8 * MiB and mods["Net.enc"]["gradient_bytes"] == 0, str(mods))
check("modules: at the allocated peak (31 MiB: P, A2, A1 and G, made by head's backward), by module",
      s.get("peak_allocated_bytes") == 31 * MiB and mods["Net.head"]["at_peak_bytes"] == 12 * MiB and
      mods["Net.enc"]["at_peak_bytes"] == 3 * MiB and mods["Net"]["at_peak_bytes"] == 15 * MiB,
      str({n: m["at_peak_bytes"] for n, m in mods.items()}))
its = j.get("iterations", [])
check("iterations: one per recorded step, the skipped one too, marked",
      s.get("iteration_source") == "steps" and s.get("iteration_label") == "SGD.step" and len(its) == 3 and
      s.get("iteration_edges") == "step ends" and
      [i["skipped"] for i in its] == [False, True, False], str((s.get("iteration_source"), [i.get("skipped") for i in its])))
check("counts: backward passes and optimizer steps as recorded, the skipped step counted apart",
      (s.get("backward_passes"), s.get("optimizer_steps"), s.get("skipped_steps"), s.get("steps_from"),
       s.get("backward_passes_from")) == (3, 2, 1, "recorded", "recorded"), str(s))
cat = j.get("categories_at_peak", {})
ev = j.get("category_evidence", {})
check("categories: the parameter and the gradient by their tensor events, and the evidence says so",
      cat.get("parameter") == 16 * MiB and cat.get("gradient") == 8 * MiB and ev.get("parameter") == "tensors" and
      ev.get("gradient") == "tensors", str((cat, ev)))
tops = {tuple(x.get("module") or "" for x in [e]) for e in j.get("top_sites", [])}
check("sites: the module their allocations were made in (here all by one site without a stack: the one they share)",
      all("module" in e for e in j.get("top_sites", [])), str(tops))
text = subprocess.run([cli, "analyze", db], capture_output=True, text=True).stdout
check("text report: memory by module, and the skipped step marked",
      "memory by module" in text and "enc.0" in text and "skipped" in text, text[-1500:])

# End to end: a training loop of the stand-in torch recorded by memsnap's Python layer
# (tests/data/run/model_train.py: Net with two Blocks, AdamW through GradScaler, step 1 skipped)
recorded = os.path.join(work, "recorded.db")
env = dict(os.environ, MEMSNAP_RECORD="1", MEMSNAP_STACKS="all", MEMSNAP_BACKEND="sim", MEMSNAP_SIM_CAPACITY="1G",
           MEMSNAP_TORCH_ALLOCATOR="pluggable", MEMSNAP_LIB=os.path.join(build, "libmemsnap.so"),
           PYTHONPATH=os.pathsep.join([os.path.join(here, "..", "data", "fake_torch"),
                                       os.path.join(here, "..", "..", "recorder", "python")]))
for var in ("MEMSNAP_TORCH_MODULES", "MEMSNAP_DUMP"):
    env.pop(var, None)
p = subprocess.run([sys.executable, os.path.join(here, "..", "data", "run", "model_train.py"), recorded, "4"], env=env,
                   capture_output=True, text=True)
out = subprocess.run([cli, "analyze", "--json", recorded], capture_output=True, text=True)
j = json.loads(out.stdout) if p.returncode == 0 and out.returncode == 0 else {}
mods = {m["name"]: m for m in j.get("modules", [])}
its = j.get("iterations", [])
check("recorded: four iterations from the recorded steps, the second skipped",
      j.get("summary", {}).get("iteration_source") == "steps" and [i["skipped"] for i in its] == [False, True, False, False],
      p.stderr[-500:] + out.stderr + str([(i.get("skipped")) for i in its]))
check("recorded: the model's modules, each block called once a step, its parameters and gradients by module",
      mods.get("Net.blocks.0", {}).get("forward_calls") == 4 and mods.get("Net.blocks.0", {}).get("backward_calls") == 4 and
      mods["Net.blocks.0"]["parameter_bytes"] > 0 and mods["Net.blocks.0"]["gradient_bytes"] == mods["Net.blocks.0"]["parameter_bytes"] and
      mods["Net"]["parameter_bytes"] == sum(mods[n]["parameter_bytes"] for n in ("Net.embed", "Net.blocks", "Net.head")),
      str({n: (m["forward_calls"], m["parameter_bytes"], m["gradient_bytes"]) for n, m in mods.items()}))
ev = j.get("category_evidence", {})
check("recorded: parameters, gradients and optimizer state rest on tensor events",
      all("tensors" in ev.get(c, "") for c in ("parameter", "gradient", "optimizer_state")) and
      j.get("summary", {}).get("optimizer_steps") == 3 and j["summary"]["skipped_steps"] == 1 and
      j["summary"]["backward_passes"] == 4, str((ev, j.get("summary"))))
shutil.rmtree(work)
finish()
