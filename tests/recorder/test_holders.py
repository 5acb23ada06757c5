"""test_holders.py BUILD_DIR: what holds a snapshot's memory, found by the Python package
(recorder/python/memsnap/holders.py), and the garbage collector's runs (gc events), on a training
loop (tests/data/run/causes_train.py) with the stand-in torch of tests/data/fake_torch on the
simulated device, read back with sqlite3 and through `memsnap analyze` (text and JSON).

Checked: each cause's blocks carry the chain that holds them (a module's forward hook and the
list its closure holds, a global's closure, a global cache dict, an object's attribute, a kept
loss's graph and an evaluation's, whose saved tensors only the graph's nodes hold, as PyTorch's C++
holds them: the list holding the loss or output, then down its grad_fn; the kept graph candidate
names that list), a frame's local, the optimizer's state, a reference cycle no root reaches); the
walk's meta keys; the gc events (begin and end, generation 2 for gc.collect, objects collected);
the analysis names each candidate's holder under it, the site only the collector frees as held by
reference cycles, in text and JSON. Every way a snapshot is written in the process gets holders:
memsnap.dump, the exit dump, the dump signal, the out-of-memory dump. MEMSNAP_HOLDERS_TIME=0
writes no table; a tiny limit cuts the walk and says so; the walk leaves no cycle that would keep a
tensor the program drops; MEMSNAP_GC_EVENTS=0 records no gc
event; a long run whose ring wrapped (MEMSNAP_MAX_ENTRIES small) still gets its holders.
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

build = os.path.abspath(sys.argv[1])
script = os.path.join(here, "..", "data", "run", "causes_train.py")
cli = os.path.join(build, "memsnap")
work = tempfile.mkdtemp(prefix="memsnap-holders-")
env = dict(os.environ, MEMSNAP_BACKEND="sim", MEMSNAP_SIM_CAPACITY="4G", MEMSNAP_TORCH_ALLOCATOR="pluggable",
           MEMSNAP_LIB=os.path.join(build, "libmemsnap.so"), MEMSNAP_RECORD="1",
           PYTHONPATH=os.pathsep.join([os.path.join(here, "..", "data", "fake_torch"),
                                       os.path.join(here, "..", "..", "recorder", "python"),
                                       os.environ.get("PYTHONPATH", "")]))
for var in ("MEMSNAP_DUMP", "MEMSNAP_DUMP_ON_OOM", "MEMSNAP_DUMP_SIGNAL", "MEMSNAP_HOLDERS_TIME", "MEMSNAP_GC_EVENTS",
            "MEMSNAP_MAX_ENTRIES", "MEMSNAP_STACKS"):
    env.pop(var, None)
KiB = 1024
HOOK, CLOSURE, CACHE, ATTR, CYCLE, SAVED, LOCAL = (1024 * KiB, 1088 * KiB, 1152 * KiB, 1216 * KiB, 1280 * KiB,
                                                    1344 * KiB, 1408 * KiB)
EVAL = 512 * KiB
GC = 19


def train(name, *args, **extra):
    db = os.path.join(work, name + ".db")
    p = subprocess.run([sys.executable, script, db, *args], env=dict(env, **extra), capture_output=True, text=True,
                       timeout=120)
    return db, p


def rows(db, sql, *params):
    c = sqlite3.connect(db)
    try:
        return c.execute(sql, params).fetchall()
    except sqlite3.Error as e:
        return [("error", str(e))]
    finally:
        c.close()


def holders(db):
    """{tensor bytes: [(root, chain)]}: the chains of the blocks by the bytes of their tensor."""
    out = {}
    for root, chain, nbytes in rows(db, "select root, holder, tensor_bytes from holders order by id"):
        out.setdefault(nbytes, []).append((root, chain))
    return out


def has(h, nbytes, root, *words):
    return any(r == root and all(w in c for w in words) for r, c in h.get(nbytes, []))


db, p = train("dump", "6")
check("the loop runs and writes its snapshot", p.returncode == 0 and "steps done 6" in p.stdout and os.path.exists(db),
      p.stdout + p.stderr)
h = holders(db)
check("a forward hook's list: the hook's module, the closure's variable, the list",
      has(h, HOOK, "hook", "forward hook of Net.head", "closure variable `store` of <lambda>", "list["), h.get(HOOK))
check("a closure: the global function and its closure's list",
      has(h, CLOSURE, "global", "global `log` of causes_train.py", "closure variable `history` of log", "list["),
      h.get(CLOSURE))
check("a global cache dict, by its key", has(h, CACHE, "global", "global `_cache` of causes_train.py -> dict[5]"), h.get(CACHE))
check("an object's attribute across steps", has(h, ATTR, "global", "global `trainer`", "attribute `last` of Trainer"),
      h.get(ATTR))
check("a kept loss's graph (its saved tensor held only by the node, as PyTorch's C++ holds it): the list, the loss, "
      "through its grad_fn, what it saved",
      has(h, SAVED, "autograd", "global `losses` of causes_train.py -> list[", "-> tensor of 4 bytes -> through its autograd "
          "graph (grad_fn EvalBackward0) -> saved `self` of EvalBackward0"), h.get(SAVED))
check("an evaluation's kept graph: a GELU's saved input, reached from the output in `eval_outputs` down its graph "
      "(next_functions: the nodes' Python objects made on demand, as PyTorch's are)",
      has(h, EVAL, "autograd", "global `eval_outputs` of causes_train.py -> list[", "tensor of 524288 bytes -> through its "
          "autograd graph (grad_fn GeluBackward0 -> AddmmBackward0 -> GeluBackward0) -> saved `self` of GeluBackward0") and
      has(h, EVAL, "autograd", "global `eval_outputs`", "(grad_fn GeluBackward0) -> saved `self` of GeluBackward0"),
      h.get(EVAL))
check("a frame's local while the snapshot is written", has(h, LOCAL, "local", "local `keep` of finish (causes_train.py:"),
      h.get(LOCAL))
check("the optimizer's state", any(r == "optimizer" and "state of optimizer AdamW" in c and "exp_avg" in c
                                   for v in h.values() for r, c in v), str(h)[:400])
check("a reference cycle no root reaches: its objects' type, that only the collector frees it",
      has(h, CYCLE, "cycle", "reference cycle of Node objects", "only the garbage collector frees",
          "attribute `tensor` of Node"), h.get(CYCLE))
meta = dict(rows(db, "select key, value from meta where key like 'holders%'"))
check("the walk's meta: time, blocks walked, not cut",
      int(meta.get("holders_blocks", 0)) >= 8 and int(meta.get("holders_ms", -1)) >= 0 and
      int(meta.get("holders_cut", 1)) == 0, meta)

gc_rows = rows(db, "select size, extra, requested_size, thread from events where kind = ? order by id", GC)
begins = [r for r in gc_rows if r[0] == 0]
ends = [r for r in gc_rows if r[0] == 1]
check("gc events: the loop's two gc.collect() runs, a begin and an end each, generation 2",
      len(begins) == len(ends) == 2 and all(r[1] == 2 for r in gc_rows), gc_rows)
check("gc events: each end says how many objects it collected (the Node pairs and their dicts)",
      all(r[2] >= 2 for r in ends), ends)

# the analysis: holders under the candidates, the reference cycles
text = subprocess.run([cli, "analyze", db], capture_output=True, text=True).stdout
check("analyze: the hook's leak named with its holder under it",
      "held by: forward hook of Net.head -> closure variable `store` of <lambda>" in text, text[-3000:])
check("analyze: the cache's leak, with the blocks alike counted",
      "held by: global `_cache` of causes_train.py -> dict[" in text and "blocks alike)" in text)
graphs_part = text[text.find("autograd graphs kept alive"):text.find("  allocation sites:")]
check("analyze: the evaluation's kept graph candidate says what keeps it: the list holding its output, through its graph",
      "G1. 6.00 MiB in 2 autograd graphs kept alive: the forward of Scorer" in graphs_part and
      "what it returned is kept by global `eval_outputs` of causes_train.py -> list[" in graphs_part and
      "     held by: global `eval_outputs` of causes_train.py -> list[" in graphs_part and
      "through its autograd graph (grad_fn GeluBackward0" in graphs_part, graphs_part)
check("analyze: the kept loss's candidate, its holder through the loss's graph",
      "held by: global `losses` of causes_train.py -> list[0] -> tensor of 4 bytes -> through its autograd graph "
      "(grad_fn EvalBackward0) -> saved `self` of EvalBackward0 (3 blocks alike)" in text)
check("analyze: the garbage collector's section, the cycle site held by reference cycles with its fix",
      "garbage collector\n  2 runs recorded; 2 freed device memory" in text and
      "held by reference cycles: only the garbage collector freed it" in text and "gc.collect() every N steps" in text,
      text[text.find("garbage collector"):][:800])
js = json.loads(subprocess.run([cli, "analyze", "--json", db], capture_output=True, text=True).stdout or "{}")
by_root = {}
for entry in js.get("leaks", []) + js.get("held", []):
    for hh in entry.get("holders", []):
        by_root.setdefault(hh["root"], []).append(hh["holder"])
check("JSON: the candidates' holders by root kind",
      {"hook", "global", "optimizer", "cycle", "autograd"} <= set(by_root), sorted(by_root))
kg = (js.get("kept_graphs") or [{}])[0].get("holders") or [{}]
check("JSON: the kept graph's holders: root autograd, what keeps its tensor, the blocks alike",
      kg[0].get("root") == "autograd" and kg[0].get("kept_by", "").startswith("global `eval_outputs` of causes_train.py -> list[")
      and kg[0].get("holder", "").startswith(kg[0].get("kept_by", "?") + " -> through its autograd graph") and
      kg[0].get("blocks", 0) >= 4, kg)
gcj = js.get("gc", {})
check("JSON: the collector's runs, those that freed memory, the cycle site",
      gcj.get("runs") == 2 and gcj.get("runs_freeing") == 2 and len(gcj.get("freeing_runs", [])) == 2 and
      gcj["freeing_runs"][0]["generation"] == 2 and len(gcj.get("cycle_sites", [])) == 1 and
      gcj["cycle_sites"][0]["freed_bytes"] >= 2 * CYCLE, gcj)
cyc = [e for e in js.get("leaks", []) + js.get("held", []) if e.get("reference_cycles")]
check("JSON: the cycle site's candidate says reference_cycles, with the collector's frees",
      len(cyc) == 1 and cyc[0]["gc_frees"]["by_collector"] >= 4 and cyc[0]["gc_frees"]["runs"] == 2,
      [(e.get("reference_cycles"), e.get("gc_frees")) for e in cyc])
check("JSON: the walk", js.get("holders_walk", {}).get("cut") is False and js["holders_walk"]["blocks"] >= 8,
      js.get("holders_walk"))

# every way a snapshot is written in the process
db, p = train("exit", "4", "exit", MEMSNAP_DUMP=os.path.join(work, "exit.db"))
check("the exit dump (MEMSNAP_DUMP) gets holders", p.returncode == 0 and has(holders(db), CACHE, "global", "`_cache`"),
      p.stderr[-800:])
db, p = train("signal", "4", "signal", MEMSNAP_DUMP=os.path.join(work, "signal.db"), MEMSNAP_DUMP_SIGNAL="USR1")
check("the dump signal's snapshot gets holders, the frame's local too (the main thread seen from the signal thread)",
      p.returncode == 0 and has(holders(db + ".signal"), LOCAL, "local", "`keep` of finish"),
      (p.stderr[-800:], holders(db + ".signal").get(LOCAL)))
db, p = train("oom", "4", "oom", MEMSNAP_DUMP_ON_OOM=os.path.join(work, "oom.db"), MEMSNAP_OOM="null")
check("the out-of-memory dump gets holders", "oom: OutOfMemoryError" in p.stdout and
      has(holders(db), LOCAL, "local", "`keep` of finish"), (p.stdout, p.stderr[-800:]))

# the options
db, p = train("off", "4", MEMSNAP_HOLDERS_TIME="0", MEMSNAP_GC_EVENTS="0")
check("MEMSNAP_HOLDERS_TIME=0: no holders table; MEMSNAP_GC_EVENTS=0: no gc event",
      p.returncode == 0 and rows(db, "select count(*) from sqlite_master where name = 'holders'") == [(0,)] and
      rows(db, "select count(*) from events where kind = ?", GC) == [(0,)], p.stderr[-500:])
text = subprocess.run([cli, "analyze", db], capture_output=True, text=True).stdout
check("analyze without holders or gc events: no holder lines, no collector's section",
      "held by" not in text and "garbage collector" not in text and "leak candidates" in text)
db, p = train("cut", "4", MEMSNAP_HOLDERS_TIME="0.000001")
meta = dict(rows(db, "select key, value from meta where key like 'holders%'"))
text = subprocess.run([cli, "analyze", db], capture_output=True, text=True).stdout
check("a walk cut by its time limit says so (meta and report)",
      int(meta.get("holders_cut", 0)) == 1 and "the time ran out" in text, (meta, text[-600:]))

# the walk leaves nothing behind: a tensor dropped right after a snapshot is freed at once (no
# frame of the walk, nor a frame's snapshot of its locals, keeps it until the collector runs)
after = os.path.join(work, "after.py")
with open(after, "w") as f:
    f.write("""import gc, memsnap
memsnap.enable()
import torch
kept = {}
def step():
    kept["a"] = torch.empty(8 << 20)
    x = torch.empty(1 << 20)
    memsnap.dump(%r)
    del x
gc.disable()
step()
kept.clear()
print("allocated after", memsnap.memory_stats()["allocated_bytes.all.current"])
""" % os.path.join(work, "after.db"))
p = subprocess.run([sys.executable, after], env=env, capture_output=True, text=True, timeout=60)
check("after a snapshot's walk, the tensors the program drops are freed at once (gc off)",
      "allocated after 0" in p.stdout and rows(os.path.join(work, "after.db"), "select count(*) from holders")[0][0] >= 2,
      p.stdout + p.stderr[-500:])

# a long run: the ring wrapped many times; the snapshot's blocks still get their holders
db, p = train("long", "60", MEMSNAP_MAX_ENTRIES="400")
dropped = rows(db, "select value from meta where key = 'dropped_events'")
check("a long run whose ring wrapped: holders all the same",
      p.returncode == 0 and dropped and int(dropped[0][0]) > 1000 and
      has(holders(db), HOOK, "hook", "forward hook of Net.head"), (dropped, p.stderr[-500:]))
finish()
