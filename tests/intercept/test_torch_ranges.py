"""test_torch_ranges.py BUILD_DIR: PyTorch's record_function scopes recorded as memsnap's ranges
under `memsnap run` (memsnap.enable(): recorder/python/memsnap/__init__.py, _record_torch_ranges),
with the stand-in torch of tests/data/fake_torch and the unedited script tests/data/run/unedited.py
on the simulated device: the optimizer's "Optimizer.step#AdamW.step" ranges give the iterations of
a script that marks nothing; nested user blocks, one left by an exception, are recorded whole and
the class's own work still runs; MEMSNAP_TORCH_RANGES=0 records none (the iterations then come from
the optimizer's frames, with the module record off too: with it, from the steps it recorded).
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

build = sys.argv[1]
cli = os.path.join(build, "memsnap")
script = os.path.join(here, "..", "data", "run", "unedited.py")
work = tempfile.mkdtemp(prefix="memsnap-torch-ranges-")
env = dict(os.environ, MEMSNAP_BACKEND="sim", MEMSNAP_SIM_CAPACITY="1G",
           PYTHONPATH=os.path.join(here, "..", "data", "fake_torch") + os.pathsep + os.environ.get("PYTHONPATH", ""))
KiB = 1024


def record(name, *args, **extra):
    db = os.path.join(work, name + ".db")
    p = subprocess.run([cli, "run", "-q", "-o", db, "--", sys.executable, script, *args], env=dict(env, **extra),
                       capture_output=True, text=True)
    return db, p


def ranges(db):
    c = sqlite3.connect(db)
    return c.execute("select l.text, r.depth, r.end_ns is not null from ranges r join labels l on l.id = r.label_id "
                     "order by r.start_ns").fetchall()


def analyze(db):
    p = subprocess.run([cli, "analyze", "--json", db], capture_output=True, text=True)
    return json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr}


db, p = record("plain", "6")
check("an unedited script under memsnap run: it runs and the snapshot is written", p.returncode == 0 and os.path.exists(db),
      p.stdout + p.stderr)
r = ranges(db) if os.path.exists(db) else []
check("the optimizer's steps are ranges: six 'Optimizer.step#AdamW.step', each closed",
      r == [("Optimizer.step#AdamW.step", 0, 1)] * 6, str(r))
j = analyze(db)
s = j.get("summary", {})
check("the iterations come from the optimizer's steps as memsnap's module record saw them, six of them",
      s.get("iteration_source") == "steps" and s.get("iteration_label") == "AdamW.step" and
      len(j.get("iterations", [])) == 6, str(s))
db_ranges, _ = record("ranges", "6", MEMSNAP_TORCH_MODULES="0")
s = analyze(db_ranges).get("summary", {})
check("without the module record (MEMSNAP_TORCH_MODULES=0), from those ranges, six of them",
      s.get("iteration_source") == "ranges" and s.get("iteration_label") == "Optimizer.step#AdamW.step", str(s))
leak = (j.get("leaks") or [{}])[0]
check("the first leak candidate is growing by the kept tensor per iteration, at the script's line",
      leak.get("kind") == "growing" and leak.get("bytes_per_iteration") == 256 * KiB and
      any(f["file"].endswith("unedited.py") and f["name"] == "keep_loss_for_logging" for f in leak.get("full_stack", [])),
      str(leak)[:600])

db, p = record("blocks", "6", "blocks")
r = ranges(db) if os.path.exists(db) else []
check("user blocks: 'step' at depth 0 holding 'forward' at depth 1, six each, all closed (one left by an exception)",
      [x for x in r if x[0] != "Optimizer.step#AdamW.step"] == [("step", 0, 1), ("forward", 1, 1)] * 6, str(r))
check("user blocks: record_function's own __enter__ and __exit__ still run, as often as without memsnap",
      "record_function entered 18 left 18" in p.stdout, p.stdout + p.stderr)

db, p = record("off", "6", MEMSNAP_TORCH_RANGES="0", MEMSNAP_TORCH_MODULES="0")
r = ranges(db) if os.path.exists(db) else ["unreadable"]
check("MEMSNAP_TORCH_RANGES=0: no range recorded", r == [], str(r))
j = analyze(db)
check("MEMSNAP_TORCH_RANGES=0: the iterations come from the optimizer's frames instead, six of them",
      j.get("summary", {}).get("iteration_source") == "optimizer" and len(j.get("iterations", [])) == 6 and
      (j.get("leaks") or [{}])[0].get("bytes_per_iteration") == 256 * KiB, str(j.get("summary")))
finish()
