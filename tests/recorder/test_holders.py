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
event; MEMSNAP_GC_CYCLES=1 keeps each run's cycles that held tensors (the gc_cycles table: the Node
cycle's types and attributes, its tensor's block; analyze shows them under the site held by
reference cycles), the runs' events still around the frees (the saved objects freed before the
run's end), and with the collector left to run by itself on three threads leaves nothing saved; a long run whose ring wrapped (MEMSNAP_MAX_ENTRIES small) still gets its holders.
"""
import json
import os
import re
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
for var in ("MEMSNAP_DUMP", "MEMSNAP_DUMP_ON_OOM", "MEMSNAP_DUMP_SIGNAL", "MEMSNAP_HOLDERS_TIME", "MEMSNAP_GC_EVENTS", "MEMSNAP_GC_CYCLES",
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
check("analyze: the kept loss's candidate, its holder through the loss's graph (the first block's list index, by address)",
      re.search(r"held by: global `losses` of causes_train\.py -> list\[\d\] -> tensor of 4 bytes -> through its autograd graph "
                r"\(grad_fn EvalBackward0\) -> saved `self` of EvalBackward0 \(3 blocks alike\)", text) is not None,
      [line for line in text.splitlines() if "`losses`" in line])
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

check("without MEMSNAP_GC_CYCLES no cycle is kept (the gc_cycles table is there, empty)",
      rows(os.path.join(work, "dump.db"), "select count(*) from gc_cycles") == [(0,)])

# MEMSNAP_GC_CYCLES=1: the cycles that held CUDA tensors, by collector run, and the runs' events
# still around the frees (the objects are freed in a second collection, after the first's end)
db, p = train("cycles", "6", MEMSNAP_GC_CYCLES="1")
cyc_rows = rows(db, "select run, generation, objects, tensors, tensor_bytes, address, addresses, types, edges "
                    "from gc_cycles order by id")
check("cycles mode: a row a Node cycle (PyTorch's guide's workload), its types, the attributes joining them, its tensor; "
      "two runs: the two cycles of steps 0 and 1, then the three of steps 2 to 4",
      p.returncode == 0 and len(cyc_rows) == 5 and [r[0] for r in cyc_rows] == [1, 1, 2, 2, 2] and
      all(r[1] == 2 and r[3] == 1 and r[4] == CYCLE and r[6] == "%d:%d" % (r[5], CYCLE) and r[7] == "2 Node, 1 Tensor" and
          r[8] == "Node.tensor -> Tensor; Node.other -> Node" for r in cyc_rows), (cyc_rows, p.stderr[-800:]))
gc_rows = rows(db, "select time_ns, size, requested_size from events where kind = ? order by id", GC)
runs = [(gc_rows[i][0], gc_rows[i + 1][0], gc_rows[i + 1][2]) for i in range(0, len(gc_rows) - 1, 2)
        if gc_rows[i][1] == 0 and gc_rows[i + 1][1] == 1]
frees = rows(db, "select time_ns, address from events where kind = 3 and requested_size = %d and address in (%s)" %
             (CYCLE, ",".join(str(r[5]) for r in cyc_rows) if cyc_rows else "0"))  # the cycles' blocks (addresses are reused)
check("cycles mode: the two gc.collect() runs, a begin and an end each, the end counting what was saved and freed",
      len(gc_rows) == 4 and len(runs) == 2 and all(n >= 4 for _b, _e, n in runs), gc_rows)
check("cycles mode: each cycle's tensor freed within its run, before the run's end (the saved objects freed at the stop)",
      len(frees) == 5 and all(any(b <= t <= e for b, e, _n in runs) for t, _a in frees), (frees, runs))
meta = dict(rows(db, "select key, value from meta where key like 'gc_cycles%'"))
check("cycles mode: its meta (runs, those whose garbage held a tensor, rows dropped, time)",
      int(meta.get("gc_cycles_runs", 0)) == 2 and int(meta.get("gc_cycles_described", 0)) == 2 and
      int(meta.get("gc_cycles_dropped", -1)) == 0 and int(meta.get("gc_cycles_ms", -1)) >= 0, meta)
text = subprocess.run([cli, "analyze", db], capture_output=True, text=True).stdout
gc_part = text[text.find("\ngarbage collector"):]
n_cyc = 5
check("cycles mode: analyze shows the cycles under the site held by reference cycles, with the holders as before",
      "cycles: 2 Node, 1 Tensor: Node.tensor -> Tensor; Node.other -> Node (%d cycles, %d CUDA tensors, " % (n_cyc, n_cyc) in gc_part
      and "held by: forward hook of Net.head" in text, gc_part[:1200])
js = json.loads(subprocess.run([cli, "analyze", "--json", db], capture_output=True, text=True).stdout or "{}")
sites = js.get("gc", {}).get("cycle_sites", [])
check("cycles mode: JSON's cycle site and its candidate carry the cycles; every row linked to a run's free",
      len(sites) == 1 and sites[0].get("cycles") == [{"types": "2 Node, 1 Tensor", "edges": "Node.tensor -> Tensor; Node.other -> Node",
                                                      "objects": 3, "cycles": n_cyc, "tensors": n_cyc,
                                                      "tensor_bytes": n_cyc * CYCLE, "generation": 2}] and
      js["gc"].get("cycles_recorded") == n_cyc and js["gc"].get("cycles_unlinked") == 0 and
      [e["cycles"] for e in js.get("leaks", []) + js.get("held", []) if e.get("reference_cycles")] == [sites[0]["cycles"]],
      (sites[:1] and sites[0].get("cycles"), js.get("gc", {}).get("cycles_recorded")))

# the cycles mode with the collector left to run by itself (its thresholds, three threads making
# cycles): every run has its end, nothing stays in gc.garbage or alive, the debug flags come back
auto = os.path.join(work, "auto.py")
with open(auto, "w") as f:
    f.write("""import gc, threading, time, memsnap
memsnap.enable()
import torch
class Node:
    def __init__(self, t=None):
        self.t, self.other = t, None
def work(n):
    for i in range(n):
        a, b = Node(torch.empty(4096) if i %% 500 == 0 else None), Node()
        a.other, b.other = b, a
        a.items = [i, {"k": b}]
ts = [threading.Thread(target=work, args=(6000,)) for _ in range(2)]
for t in ts:
    t.start()
work(6000)
for t in ts:
    t.join()
gc.collect()
print("garbage", len(gc.garbage), "debug", gc.get_debug(), "nodes", sum(type(o) is Node for o in gc.get_objects()))
memsnap.dump(%r)
""" % os.path.join(work, "auto.db"))
p = subprocess.run([sys.executable, auto], env=dict(env, MEMSNAP_GC_CYCLES="1"), capture_output=True, text=True,
                   timeout=120)
adb = os.path.join(work, "auto.db")
ev = rows(adb, "select size from events where kind = ?", GC)
check("cycles mode, the collector by itself: no object left saved, the debug flags back, every run's begin has its end",
      "garbage 0 debug 0 nodes 0" in p.stdout and len(ev) > 10 and
      sum(1 for r in ev if r[0] == 0) == sum(1 for r in ev if r[0] == 1), (p.stdout, p.stderr[-800:], len(ev)))
check("cycles mode, the collector by itself: the cycles holding tensors kept (Node.t)",
      rows(adb, "select count(*) from gc_cycles where edges like '%Node.t -> Tensor%'")[0][0] >= 10,
      rows(adb, "select types, edges from gc_cycles limit 3"))

# a long run: the ring wrapped many times; the snapshot's blocks still get their holders
db, p = train("long", "60", MEMSNAP_MAX_ENTRIES="400")
dropped = rows(db, "select value from meta where key = 'dropped_events'")
check("a long run whose ring wrapped: holders all the same",
      p.returncode == 0 and dropped and int(dropped[0][0]) > 1000 and
      has(holders(db), HOOK, "hook", "forward hook of Net.head"), (dropped, p.stderr[-500:]))
finish()
