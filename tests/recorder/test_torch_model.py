"""test_torch_model.py BUILD_DIR: a PyTorch program's model recorded in its own language
(recorder/python/memsnap/torch_model.py): the module, tensor, step and backward events of a small
training loop (tests/data/run/model_train.py) with the stand-in torch of tests/data/fake_torch on
the simulated device, read back from the snapshot with sqlite3.

Checked: the forward's module events in order with their paths; every module's backward begun and
ended inside its pass, the modules whose inputs need no gradient ended at the pass's end, innermost
first; the parameters and the buffer at the first forward, labelled with their modules, at the
addresses of their blocks; each optimizer step's parameters, gradients and state; the step that
GradScaler skipped; the backward passes with the stack of the backward() call, and an allocation
on a thread that never ran Python carrying that call's Python frames while the pass is open (none
outside it); a module whose walk fails does not break the program. Then: MEMSNAP_TORCH_MODULES=0
records none of it; without recording nothing is hooked; memsnap.record() after enable() hooks
then; `memsnap run` records it.
"""
import os
import sqlite3
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

build = os.path.abspath(sys.argv[1])
script = os.path.join(here, "..", "data", "run", "model_train.py")
native = os.path.join(build, "tests", "libnative_thread.so")
work = tempfile.mkdtemp(prefix="memsnap-torch-model-")
env = dict(os.environ, MEMSNAP_BACKEND="sim", MEMSNAP_SIM_CAPACITY="1G", MEMSNAP_TORCH_ALLOCATOR="pluggable",
           MEMSNAP_LIB=os.path.join(build, "libmemsnap.so"),
           PYTHONPATH=os.pathsep.join([os.path.join(here, "..", "data", "fake_torch"),
                                       os.path.join(here, "..", "..", "recorder", "python"),
                                       os.environ.get("PYTHONPATH", "")]))
for var in ("MEMSNAP_RECORD", "MEMSNAP_TORCH_MODULES", "MEMSNAP_STACKS", "MEMSNAP_DUMP"):
    env.pop(var, None)
MODULE, TENSOR, STEP, BACKWARD = 15, 16, 17, 18
PARAMETER, GRADIENT, STATE, BUFFER = 1, 2, 3, 4


def train(name, *args, **extra):
    db = os.path.join(work, name + ".db")
    p = subprocess.run([sys.executable, script, db, *args], env=dict(env, **extra), capture_output=True, text=True)
    return db, p


def rows(db, sql, *params):
    c = sqlite3.connect(db)
    try:
        return c.execute(sql, params).fetchall()
    finally:
        c.close()


def model_events(db):
    """(id, kind, size, requested_size, label text, thread, stack_id, address, device) of the model's events."""
    return rows(db, "select e.id, e.kind, e.size, e.requested_size, l.text, e.thread, e.stack_id, e.address, e.device "
                    "from events e left join labels l on l.id = e.extra where e.kind between 15 and 18 order by e.id")


db, p = train("default", "3", "native", native, MEMSNAP_RECORD="1")
check("a training loop with the hooks: it runs, dumps, and a module whose walk fails still runs",
      p.returncode == 0 and "steps done 3" in p.stdout and "odd module ran" in p.stdout and os.path.exists(db),
      p.stdout + p.stderr)
check("the hooks are registered once", "hooks 1" in p.stdout, p.stdout)
ev = model_events(db) if os.path.exists(db) else []
backward = [e for e in ev if e[1] == BACKWARD]
passes = [(backward[i][0], backward[i + 1][0]) for i in range(0, len(backward) - 1, 2)]
check("three backward passes, each a begin (size 0) then an end (size 1)",
      [e[2] for e in backward] == [0, 1] * 3, str(backward))

# the forward of step 0: every module call, in order, with its path
first_pass = passes[0][0] if passes else 0
forward = ["%s:%d" % (e[4], e[2]) for e in ev if e[1] == MODULE and e[0] < first_pass]
block = lambda n: ["Net.blocks.%d:0" % n, "Net.blocks.%d.ln:0" % n, "Net.blocks.%d.ln:1" % n,  # noqa: E731
                   "Net.blocks.%d.split:0" % n, "Net.blocks.%d.split:1" % n, "Net.blocks.%d.merge:0" % n,
                   "Net.blocks.%d.merge:1" % n, "Net.blocks.%d.mlp:0" % n, "Net.blocks.%d.mlp.fc:0" % n,
                   "Net.blocks.%d.mlp.fc:1" % n, "Net.blocks.%d.mlp.act:0" % n, "Net.blocks.%d.mlp.act:1" % n,
                   "Net.blocks.%d.mlp.proj:0" % n, "Net.blocks.%d.mlp.proj:1" % n, "Net.blocks.%d.mlp:1" % n,
                   "Net.blocks.%d:1" % n]
expected = ["Net:0", "Net.embed:0", "Net.embed:1"] + block(0) + block(1) + ["Net.head:0", "Net.head:1", "Net:1"]
check("forward: each module's begin and end in call order, named by its path from the root's class",
      forward == expected, "\n".join(forward))
modules = sorted(set(x.split(":")[0] for x in expected))
counts = {}
for e in ev:
    if e[1] == MODULE:
        counts[(e[4], e[2])] = counts.get((e[4], e[2]), 0) + 1
check("every one of the 19 modules begins and ends its forward and its backward once a step",
      len(modules) == 19 and all(counts.get((m, w)) == 3 for m in modules for w in range(4)) and len(counts) == 76,
      str(counts))
nested = True
for begin, end in passes:
    inside = [(e[4], e[2]) for e in ev if e[1] == MODULE and begin < e[0] < end]
    began = set()
    for label, what in inside:
        nested &= what in (2, 3)
        if what == 2:
            began.add(label)
        else:
            nested &= label in began
    nested &= began == set(modules) and len(inside) == 38
check("backward: each module's backward begins and then ends inside its pass, nothing else there", nested)
order_ok = True
for begin, end in passes:
    inside = ["%s:%d" % (e[4], e[2]) for e in ev if e[1] == MODULE and begin < e[0] < end]
    order_ok &= inside[:1] == ["Net:2"] and inside[-2:] == ["Net.embed:3", "Net:3"]
check("backward: the root's begins first (its loss is its own output); the root and the embedding, whose inputs "
      "need no gradient, end at the pass's end, innermost first", order_ok and passes)
split_merge = True
for begin, end in passes:
    inside = ["%s:%d" % (e[4], e[2]) for e in ev if e[1] == MODULE and begin < e[0] < end]
    for n in (0, 1):
        # merge's inputs are split's two outputs: all their gradients (mode "all") end merge's backward,
        # the first of them (mode "any") begins split's
        split_merge &= (inside.index("Net.blocks.%d.merge:2" % n) < inside.index("Net.blocks.%d.split:2" % n) <
                        inside.index("Net.blocks.%d.merge:3" % n) < inside.index("Net.blocks.%d.split:3" % n))
check("backward: a module of two outputs (split) begins at their first gradient, one of two inputs (merge) ends "
      "after both", split_merge and passes)

# tensors
params = [("Net.embed", 2048), ("Net.blocks.0.ln", 1024), ("Net.blocks.0.mlp.fc", 4096), ("Net.blocks.0.mlp.fc", 128),
          ("Net.blocks.0.mlp.proj", 4096), ("Net.blocks.0.mlp.proj", 32), ("Net.blocks.1.ln", 1024),
          ("Net.blocks.1.mlp.fc", 4096), ("Net.blocks.1.mlp.fc", 128), ("Net.blocks.1.mlp.proj", 4096),
          ("Net.blocks.1.mlp.proj", 32), ("Net.head", 2048), ("Net.head", 64)]
first_forward = next((e[0] for e in ev if e[1] == MODULE), 0)
at_start = [(e[4], e[3], e[2]) for e in ev if e[1] == TENSOR and e[0] < first_forward]
check("the first forward: each module's own parameters and buffers, labelled with it, before its events",
      at_start == [("Net", BUFFER, 4096)] + [(m, PARAMETER, n) for m, n in params], str(at_start))
check("tensor events are of device 0, without stacks",
      all(e[8] == 0 and e[6] is None for e in ev if e[1] == TENSOR))
check("parameters and buffer: their addresses are their storages' blocks, still allocated",
      rows(db, "select count(*) from events where kind=16 and requested_size in (1, 4) and address not in "
               "(select address from blocks where state='allocated')") == [(0,)] and
      rows(db, "select count(distinct address) from events where kind=16 and requested_size in (1, 4)") == [(14,)])
steps = [e for e in ev if e[1] == STEP]
check("optimizer steps: begin, end; skipped; begin, end; each named by the optimizer's class",
      [(e[2], e[4]) for e in steps] == [(1, "AdamW"), (2, "AdamW"), (3, "AdamW"), (1, "AdamW"), (2, "AdamW")],
      str(steps))
step_ok = True
for k in (0, 3):
    if len(steps) < 5:
        step_ok = False
        break
    begin, end = steps[k][0], steps[k + 1][0]
    inside = [(e[4], e[3], e[2]) for e in ev if e[1] == TENSOR and begin < e[0] < end]
    step_ok &= sorted(x for x in inside if x[1] == PARAMETER) == sorted((m, PARAMETER, n) for m, n in params)
    step_ok &= sorted(x for x in inside if x[1] == GRADIENT) == sorted((m, GRADIENT, n) for m, n in params)
    step_ok &= sorted(x for x in inside if x[1] == STATE) == sorted((m, STATE, n) for m, n in params for _ in (0, 1))
    step_ok &= [x[1] for x in inside] == [PARAMETER, GRADIENT] * 13 + [STATE] * 26  # state after the step
check("each step: every parameter and its gradient before it, labelled with their module; its state after, two "
      "tensors a parameter (the step count is no tensor)", step_ok)
check("the optimizer's state: its blocks, still allocated at the end",
      rows(db, "select count(distinct address), sum(address not in (select address from blocks where "
               "state='allocated')) from events where kind=16 and requested_size=3") == [(26, 0)])
check("gradients: blocks the backward pass allocated",
      rows(db, "select count(*) from events t where kind=16 and requested_size=2 and not exists (select 1 from events a "
               "where a.kind=1 and a.address=t.address and a.id < t.id)") == [(0,)])
skipped = steps[2][0] if len(steps) > 2 else 0
check("the skipped step: after the second pass, no step began between it and the skip",
      len(passes) == 3 and passes[1][1] < skipped < passes[2][0] and
      not [e for e in ev if e[1] == STEP and passes[1][1] < e[0] < skipped])
check("the labels table names every label an event names",
      rows(db, "select count(*) from events where kind in (15, 16, 17) and extra != 0 and extra not in "
               "(select id from labels)") == [(0,)] and
      rows(db, "select count(*) from events where kind in (15, 16, 17) and extra is null") == [(0,)])


def frames(db, where):
    """The frames of the first event matching `where`, innermost first: (kind, name, file)."""
    return rows(db, "select f.kind, f.name, f.file from stack_frames sf join frames f on f.id = sf.frame_id where "
                    "sf.stack_id = (select stack_id from events where %s order by id limit 1) order by sf.position"
                % where)


begin_frames = frames(db, "kind=18 and size=0")
check("a backward pass's begin carries the stack of the backward() call",
      any(f[1] == "train_step" and f[2].endswith("model_train.py") for f in begin_frames) and
      rows(db, "select count(*) from events where kind=18 and size=0 and stack_id is null") == [(0,)] and
      rows(db, "select count(*) from events where kind=18 and size=1 and stack_id is not null") == [(0,)],
      str(begin_frames))
main = rows(db, "select thread from events where kind=18 limit 1")
inside = frames(db, "kind=1 and requested_size=12345")
threads = rows(db, "select count(*), count(distinct thread), sum(thread = ?) from events where kind=1 and "
                   "requested_size=12345", main[0][0] if main else 0)
check("during a backward pass, a thread that never ran Python allocates: its native frames, then the Python frames "
      "of the backward() call",
      threads == [(3, 3, 0)] and inside[:1] and inside[0][0] == "native" and inside[0][2].endswith("native_thread.c")
      and [f[1] for f in inside if f[0] == "python"][-2:] == ["train_step", "<module>"],
      "%s %s" % (threads, inside))
outside = frames(db, "kind=1 and requested_size=23456")
check("outside a backward pass, the same thread's allocation has native frames only",
      outside and all(f[0] == "native" for f in outside), str(outside))

db, p = train("roots", "1", "roots", MEMSNAP_RECORD="1")
ev = model_events(db) if os.path.exists(db) else []
names = rows(db, "select text from labels where text like 'Net#%' order by text") if os.path.exists(db) else []
check("a second root of a class alive beside the first: Class#2, its modules below it; a third, once the second "
      "is gone, takes its name",
      p.returncode == 0 and names == sorted([("Net#2" + m[3:],) for m in modules + ["Net.blocks"]]) and
      sum(1 for e in ev if e[1] == MODULE and e[4] == "Net#2" and e[2] == 0) == 2 and
      sum(1 for e in ev if e[1] == TENSOR and e[4] == "Net#2.embed" and e[3] == PARAMETER) == 2,
      "%s %s" % (names, p.stderr))
backward = [e for e in ev if e[1] == BACKWARD]
between = (backward[1][0], backward[2][0]) if len(backward) == 4 else (0, 0)  # the first pass's end, the last's begin
stale = [(e[4], e[2]) for e in ev if e[1] == MODULE and e[2] >= 2 and between[0] < e[0] < between[1]]
check("a backward pass the wrapper did not see: the modules it left open end before the next pass begins",
      len(backward) == 4 and stale[-2:] == [("Net.embed", 3), ("Net", 3)] and
      sum(1 for x in stale if x[1] == 2) == sum(1 for x in stale if x[1] == 3) == 19, str(stale[-4:]))

db, p = train("off", "2", MEMSNAP_RECORD="1", MEMSNAP_TORCH_MODULES="0")
check("MEMSNAP_TORCH_MODULES=0: the loop runs, nothing hooked, no module, tensor, step or backward event",
      p.returncode == 0 and "hooks 0" in p.stdout and os.path.exists(db) and
      rows(db, "select count(*) from events where kind between 15 and 18") == [(0,)] and
      rows(db, "select count(*) from events where kind=1") != [(0,)], p.stdout + p.stderr)
db, p = train("unrecorded", "2")
check("without recording: nothing hooked", p.returncode == 0 and "hooks 0" in p.stdout, p.stdout + p.stderr)
db, p = train("late", "2", "record-late")
ev = model_events(db) if os.path.exists(db) else []
check("memsnap.record() after memsnap.enable(): hooked then, the steps recorded",
      p.returncode == 0 and "hooks 1" in p.stdout and
      sum(1 for e in ev if e[1] == MODULE and e[2] == 0) == 2 * 19 and
      sum(1 for e in ev if e[1] == BACKWARD) == 4 and sum(1 for e in ev if e[1] == STEP) == 3,
      p.stdout + p.stderr)

run_db = os.path.join(work, "run.db")
p = subprocess.run([os.path.join(build, "memsnap"), "run", "-q", "-o", run_db, "--", sys.executable, script,
                    os.path.join(work, "inner.db"), "2"], env=env, capture_output=True, text=True)
ev = model_events(run_db) if os.path.exists(run_db) else []
check("memsnap run: an unedited program's modules, tensors, steps and backward passes are recorded",
      p.returncode == 0 and sum(1 for e in ev if e[1] == MODULE) == 2 * 76 and
      sum(1 for e in ev if e[1] == BACKWARD) == 4 and
      [e[2] for e in ev if e[1] == STEP] == [1, 2, 3] and sum(1 for e in ev if e[1] == TENSOR) > 0,
      p.stdout + p.stderr)
finish()
