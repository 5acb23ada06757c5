"""test_categories.py BUILD_DIR: memory by category (analyzer/analysis/categories.c) on a
synthetic training step with known bytes per category, recorded on the simulated device.

A stand-in for PyTorch's code is written to a temporary directory with the file layout and the
function names the category rules know: torch/nn/modules/module.py (Module._apply makes the
parameters), torch/autograd/__init__.py (backward: the engine's intermediates, the gradients in
AccumulateGrad.apply, the saved activations freed), torch/optim/adamw.py (AdamW._init_group
makes the state, AdamW.step a temporary). The "user's script" then runs 4 steps of: forward
(two 2 MiB activations saved for backward, a 512 KiB temporary freed by the line that made it,
256 KiB of logits kept: the leak), backward, optimizer step; the steps differ in how many
temporaries they make, so that no period of the allocations holds. No marks, no ranges: the
iterations come from the optimizer's steps.

The peak is in the last backward, when the engine's 1 MiB intermediate is made while the
activations are still held: parameters 4 MiB, gradients 4 MiB, optimizer state 8 MiB,
activations 4 MiB, autograd 1 MiB, kept logits 1 MiB (other) = 22 MiB.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

build = sys.argv[1]
cli = os.path.join(build, "memsnap")
MiB = 1 << 20
work = tempfile.mkdtemp(prefix="memsnap-categories-")

STAND_IN = {
    "torch/__init__.py": "",
    "torch/nn/__init__.py": "",
    "torch/nn/modules/__init__.py": "",
    "torch/nn/modules/module.py": """
        import memsnap
        class Module:
            def __init__(self):
                self.params = []
            def _apply(self, count, size):
                for _ in range(count):
                    self.params.append(memsnap.malloc(size))
                return self
    """,
    "torch/autograd/__init__.py": """
        import memsnap
        class AccumulateGrad:
            @staticmethod
            def apply(grads, count, size):
                if not grads:
                    for _ in range(count):
                        grads.append(memsnap.malloc(size))
        def backward(saved, grads):
            intermediate = memsnap.malloc(1 << 20)
            for a in saved:
                memsnap.free(a)
            AccumulateGrad.apply(grads, 4, 1 << 20)
            memsnap.free(intermediate)
    """,
    "torch/optim/__init__.py": "",
    "torch/optim/adamw.py": """
        import memsnap
        class AdamW:
            def __init__(self):
                self.state = []
            def _init_group(self):
                self.state += [memsnap.malloc(4 << 20), memsnap.malloc(4 << 20)]
            def step(self):
                if not self.state:
                    self._init_group()
                scratch = memsnap.malloc(1 << 20)
                memsnap.free(scratch)
    """,
}

SCRIPT = """
import memsnap
from torch.nn.modules.module import Module
from torch.autograd import backward
from torch.optim.adamw import AdamW

memsnap.record(stacks=os.environ.get("STACKS", "all"))
model = Module()._apply(4, 1 << 20)
optimizer = AdamW()
grads, kept = [], []


def keep_logits():
    kept.append(memsnap.malloc(256 << 10))


def forward(step):
    saved = [memsnap.malloc(2 << 20), memsnap.malloc(2 << 20)]
    for _ in range(1 + step % 3):  # steps differ, as PyTorch's do: no period of the allocations holds
        memsnap.free(memsnap.malloc(512 << 10))  # a temporary: freed by the line that made it
    keep_logits()
    return saved


for step in range(4):
    saved = forward(step)
    backward(saved, grads)
    optimizer.step()
memsnap.dump(sys.argv[1])
"""

for name, text in STAND_IN.items():
    path = os.path.join(work, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
script = os.path.join(work, "train.py")
with open(script, "w") as f:
    f.write("import os, sys\n" + SCRIPT)

env = dict(os.environ, MEMSNAP_BACKEND="sim", MEMSNAP_SIM_CAPACITY="1G",
           PYTHONPATH=work + os.pathsep + os.environ.get("PYTHONPATH", ""))


def analyze(db, *args):
    out = subprocess.run([cli, "analyze", "--json", *args, db], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr}


for stacks in ("all", "python"):
    db = os.path.join(work, "train-%s.db" % stacks)
    run = subprocess.run([sys.executable, script, db], env=dict(env, STACKS=stacks), capture_output=True, text=True)
    check("stacks=%s: the synthetic step is recorded" % stacks, run.returncode == 0 and os.path.exists(db), run.stderr)
    j = analyze(db)
    cat = j.get("categories_at_peak", {})
    want = {"parameter": 4 * MiB, "gradient": 4 * MiB, "optimizer_state": 8 * MiB, "activation": 4 * MiB,
            "temporary": 0, "autograd": 1 * MiB, "other": 1 * MiB, "external": 0}
    check("stacks=%s: peak allocated 22 MiB, in the last backward" % stacks,
          j.get("summary", {}).get("peak_allocated_bytes") == 22 * MiB, str(j.get("summary", j)))
    check("stacks=%s: categories at the peak to the byte" % stacks, cat == want, str(cat))
    check("stacks=%s: categories at the peak sum to the allocated peak" % stacks,
          sum(cat.values()) == j.get("summary", {}).get("peak_allocated_bytes"))
    its = j.get("iterations", [])
    check("stacks=%s: four iterations from the optimizer's steps" % stacks,
          j.get("summary", {}).get("iteration_source") == "optimizer" and len(its) == 4, str(j.get("summary")))
    check("stacks=%s: each iteration's categories sum to its peak" % stacks,
          its and all(i["categories"] is not None and sum(i["categories"].values()) == i["peak_allocated_bytes"] for i in its))
    check("stacks=%s: the last iteration's peak by category is the snapshot's" % stacks,
          its and its[-1]["categories"] == want, str(its[-1]["categories"] if its else None))
    by_site = {l["stack"][0]["name"]: l["category"] for l in j.get("leaks", []) + j.get("held", [])}
    check("stacks=%s: the leak is 'other', the weights 'parameter', the state 'optimizer_state'" % stacks,
          by_site.get("keep_logits") == "other" and by_site.get("Module._apply") == "parameter" and
          by_site.get("AdamW._init_group") == "optimizer_state", str(by_site))
    tops = {(t["stack"][0]["name"], t["stack"][0]["line"]): t["category"] for t in j.get("top_sites", [])}
    check("stacks=%s: the optimizer's scratch and the forward's workspace are temporaries" % stacks,
          sorted(c for (n, _), c in tops.items() if n in ("AdamW.step", "forward") and c == "temporary") == ["temporary", "temporary"],
          str(tops))

db = os.path.join(work, "train-all.db")
j = analyze(db, "--category", "logits=keep_logits@*train.py", "--category", "weights=Module._apply")
cat = j.get("categories_at_peak", {})
check("--category: the user's rules come first, their names JSON's keys",
      cat.get("logits") == 1 * MiB and cat.get("weights") == 4 * MiB and cat.get("other") == 0 and cat.get("parameter") == 0,
      str(cat))
bad = subprocess.run([cli, "analyze", "--category", "no pattern", db], capture_output=True, text=True)
check("--category: a rule that is not NAME=PATTERN is a usage error", bad.returncode == 2 and "--category" in bad.stderr,
      bad.stderr)
text = subprocess.run([cli, "analyze", db], capture_output=True, text=True).stdout
check("text report: the peak by category, largest first",
      "at the peak: 36% optimizer_state (8.00 MiB), 18% parameter (4.00 MiB)" in text, text[:2000])
NOTE = "cached unused below zero: more allocated than reserved"
check("text report: no note on cached bytes below zero where segments hold every allocation", NOTE not in text)
# memory that no segment counts (the async mode's allocations in a capture live in CUDA's graph
# memory, outside the pool): the same snapshot without its segments' events
unsegmented = os.path.join(work, "unsegmented.db")
shutil.copy(db, unsegmented)
c = sqlite3.connect(unsegmented)
c.execute("DELETE FROM events WHERE kind IN (SELECT id FROM event_kinds WHERE name IN ('segment_map', 'segment_alloc'))")
c.execute("DELETE FROM segments")  # else the segments and reserved bytes at the snapshot are taken
c.execute("DELETE FROM stats WHERE key LIKE 'reserved_bytes%'")  # as made before the history
c.commit()
c.close()
text = subprocess.run([cli, "analyze", unsegmented], capture_output=True, text=True).stdout
check("text report: cached bytes below zero are explained once", text.count(NOTE) == 1, text[-1500:])
check("text report: a column below zero takes its unit by magnitude", "-17.00 MiB" in text, text[-1500:])
finish()
