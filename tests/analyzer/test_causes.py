"""test_causes.py BUILD_DIR: what holds a leak, read from a recorded snapshot (tests/data/causes.db.xz:
tests/data/run/causes_train.py, 6 steps, recorded with the stand-in torch on the simulated
device, MEMSNAP_STACKS=python): its holders table and gc events through `memsnap analyze` as text,
JSON and the page; the same file with the table and the events removed (a snapshot of an older
version) analyzed as before; a holder's text that is HTML stays text in the page; a gc_cycles
table added (MEMSNAP_GC_CYCLES) linked to the cycle site's freed blocks, its HTML kept text.
"""
import json
import lzma
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

cli = os.path.join(os.path.abspath(sys.argv[1]), "memsnap")
work = tempfile.mkdtemp(prefix="memsnap-causes-")
db = os.path.join(work, "causes.db")
with lzma.open(os.path.join(here, "..", "data", "causes.db.xz")) as f, open(db, "wb") as out:
    shutil.copyfileobj(f, out)


def analyze(*args):
    p = subprocess.run([cli, "analyze", *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


rc, text, err = analyze(db)
check("analyze reads the snapshot", rc == 0, err)
leaks = text[text.find("leak candidates"):text.find("\nholders:")]
first = leaks.split("\n  2. ")[0]
check("the first candidate (the kept loss) is named with its holder: the list, the loss, down its graph to what it saved",
      "held by: global `losses` of causes_train.py -> list[0] -> tensor of 4 bytes -> through its autograd graph (grad_fn "
      "EvalBackward0) -> saved `self` of EvalBackward0 (3 blocks alike)" in first, first)
check("the evaluation's kept graph (G1) says what keeps it: the list `eval_outputs`, in its sentence and under its stack",
      "G1. 6.00 MiB in 2 autograd graphs kept alive: the forward of Scorer at Scorer.forward (causes_train.py:72)" in first and
      "what it returned is kept by global `eval_outputs` of causes_train.py -> list[0] -> tensor of 524288 bytes, and with it" in first
      and "     held by: global `eval_outputs` of causes_train.py -> list[0] -> tensor of 524288 bytes -> through its autograd "
      "graph (grad_fn GeluBackward0 -> AddmmBackward0 -> GeluBackward0) -> saved `self` of GeluBackward0 (4 blocks alike)" in first,
      first)
check("the hook's candidate: its module's forward hook and the closure's list",
      "held by: forward hook of Net.head -> closure variable `store` of <lambda> (causes_train.py:95) -> list[" in leaks)
check("the closure's candidate", "held by: global `log` of causes_train.py -> closure variable `history` of log" in leaks)
check("the global cache's candidate, three blocks alike",
      re.search(r"held by: global `_cache` of causes_train.py -> dict\[\d\] -> tensor of 1179648 bytes \(3 blocks alike\)",
                leaks) is not None)
check("the optimizer's state", "held by: state of optimizer AdamW -> dict[<Parameter>] -> dict['exp_avg']" in leaks)
check("the holder walk's line", "holders: 36 blocks of the largest and growing sites walked at the snapshot in" in text)
gc_part = text[text.find("\ngarbage collector"):text.find("\nout of memory")]
check("the collector's section: 2 runs, both freed memory; the cycle site held by reference cycles, its line, its fix",
      "2 runs recorded; 2 freed device memory (6.31 MiB in all)" in gc_part and
      "6.31 MiB freed by 2 runs" in gc_part and "<module> (causes_train.py:117)" in gc_part and
      "only the garbage collector freed it (5 of its 5 frees, 6.31 MiB, in 2 runs)" in gc_part and
      "gc.collect() every N steps" in gc_part, gc_part)

rc, out, err = analyze("--json", db)
js = json.loads(out) if rc == 0 else {}
entries = js.get("leaks", []) + js.get("held", [])
check("JSON: every candidate has holders, reference_cycles and gc_frees",
      entries and all({"holders", "reference_cycles", "gc_frees"} <= set(e) for e in entries))
check("JSON: the first leak's holder", js["leaks"][0]["holders"][0]["root"] == "autograd" and
      "global `losses`" in js["leaks"][0]["holders"][0]["holder"], js["leaks"][0].get("holders"))
kg = js.get("kept_graphs") or [{}]
check("JSON: the kept graph's holders, what keeps its output", kg[0].get("holders") == [
    {"root": "autograd", "kept_by": "global `eval_outputs` of causes_train.py -> list[0] -> tensor of 524288 bytes",
     "holder": "global `eval_outputs` of causes_train.py -> list[0] -> tensor of 524288 bytes -> through its autograd graph "
               "(grad_fn GeluBackward0 -> AddmmBackward0 -> GeluBackward0) -> saved `self` of GeluBackward0", "blocks": 4}],
      kg[0].get("holders"))
cyc = [e for e in entries if e["reference_cycles"]]
check("JSON: the cycle site: its holder a cycle of Node objects, the collector's frees",
      len(cyc) == 1 and cyc[0]["holders"][0]["root"] == "cycle" and "Node" in cyc[0]["holders"][0]["holder"] and
      cyc[0]["gc_frees"] == {"frees": 5, "by_collector": 5, "bytes": 6619136, "runs": 2}, cyc)
check("JSON: the collector's runs and the walk", js["gc"]["runs"] == 2 and len(js["gc"]["freeing_runs"]) == 2 and
      js["gc"]["freeing_runs"][0]["generation"] == 2 and js["holders_walk"]["blocks"] == 36 and
      js["holders_walk"]["cut"] is False, (js.get("gc"), js.get("holders_walk")))

page = os.path.join(work, "page.html")
rc, _, err = analyze("--html", page, db)
html = open(page, encoding="utf-8").read() if rc == 0 else ""
check("the page carries the holders, the kept graph's, and the collector's runs",
      '"holders":[{"root":"hook"' in html and '"freeing_runs":[{' in html and
      '"kept_by":"global `eval_outputs` of causes_train.py -\\u003e list[0]' in html, err)

# A holder's text that is HTML: text in the page's data (\u003c), never markup
hostile = os.path.join(work, "hostile.db")
shutil.copy(db, hostile)
c = sqlite3.connect(hostile)
c.execute("update holders set holder = '</script><img src=x onerror=alert(1)>' where root = 'hook'")
c.commit()
c.close()
rc, _, err = analyze("--html", page, hostile)
html = open(page, encoding="utf-8").read() if rc == 0 else ""
check("a holder's HTML stays text: escaped in the page's data", rc == 0 and "<img src=x" not in html and
      "\\u003c/script\\u003e\\u003cimg src=x onerror=alert(1)" in html, err)

# The cycles the collector found (MEMSNAP_GC_CYCLES: the gc_cycles table, absent from this older
# file): a row linked to a cycle block a run freed, its untrusted text kept text
cyc = os.path.join(work, "cycles.db")
shutil.copy(db, cyc)
c = sqlite3.connect(cyc)
c.execute("CREATE TABLE gc_cycles(id INTEGER PRIMARY KEY, run INTEGER, generation INTEGER, objects INTEGER, tensors INTEGER,"
          " tensor_bytes INTEGER, address INTEGER, addresses TEXT, types TEXT, edges TEXT)")
freed = c.execute("select address from events where kind = 3 and requested_size = 1310720 order by id").fetchall()
c.executemany("insert into gc_cycles(run, generation, objects, tensors, tensor_bytes, address, addresses, types, edges)"
              " values(1, 2, 3, 1, 1310720, ?, '', '2 Node, 1 Tensor', 'Node.data -> Tensor; <img src=x onerror=alert(2)>')",
              freed[:2])
c.execute("insert into gc_cycles(run, generation, objects, tensors, tensor_bytes, address, addresses, types, edges)"
          " values(9, 2, 3, 1, 64, 12345, '', 'Other', 'none')")  # a block no run freed: not linked
c.commit()
c.close()
rc, text, err = analyze(cyc)
check("cycles: the rows linked to the cycle site, shown under it, alike ones counted",
      rc == 0 and len(freed) >= 2 and "cycles: 2 Node, 1 Tensor: Node.data -> Tensor; <img src=x onerror=alert(2)> (2 cycles, 2 CUDA "
      "tensors, 2.50 MiB)" in text, (err, text[text.find("garbage collector"):][:900]))
rc, out, err = analyze("--json", cyc)
js = json.loads(out) if rc == 0 else {}
check("cycles in JSON: under the cycle site and its candidate; one row unlinked",
      js["gc"]["cycles_recorded"] == 3 and js["gc"]["cycles_unlinked"] == 1 and
      js["gc"]["cycle_sites"][0]["cycles"][0]["cycles"] == 2, js.get("gc", {}).get("cycle_sites", [{}])[0].get("cycles"))
rc, _, err = analyze("--html", page, cyc)
html = open(page, encoding="utf-8").read() if rc == 0 else ""
check("cycles in the page: text, escaped", rc == 0 and "<img src=x" not in html and "\\u003cimg src=x onerror=alert(2)" in html,
      err)

# An older snapshot: no holders table, no gc events
old = os.path.join(work, "old.db")
shutil.copy(db, old)
c = sqlite3.connect(old)
c.execute("drop table holders")
c.execute("delete from events where kind = 19")
c.execute("delete from meta where key like 'holders%'")
c.commit()
c.close()
rc, text, err = analyze(old)
check("a snapshot without holders or gc events: analyzed, no holder lines, no collector's section",
      rc == 0 and "held by" not in text and "is kept by" not in text and "garbage collector" not in text and "1. growing" in text, err)
rc, out, err = analyze("--json", old)
js = json.loads(out) if rc == 0 else {}
check("JSON of it: empty holders, no runs, no walk", js.get("gc", {}).get("runs") == 0 and
      js.get("holders_walk", {}).get("ms") is None and all(e["holders"] == [] for e in js.get("leaks", [])) and
      all(g["holders"] == [] for g in js.get("kept_graphs", [])), err)
finish()
