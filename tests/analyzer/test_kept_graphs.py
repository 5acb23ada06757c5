"""test_kept_graphs.py BUILD_DIR: leaks that grow every k iterations and autograd graphs kept
without a backward (analyzer/analysis/leaks.c, kept_graphs.c), on the snapshots
tests/analyzer/gen_kept_graphs.c records on the simulated device with known answers (its opening
comment states them): the text report, the JSON (docs/analysis-json.md) and the page's data.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

build = sys.argv[1]
cli = os.path.join(build, "memsnap")
work = tempfile.mkdtemp(prefix="memsnap-kept-graphs-")
MiB = 1 << 20
subprocess.run([os.path.join(build, "tests", "gen_kept_graphs"), work], check=True)


def analyze(name):
    db = os.path.join(work, name + ".db")
    j = subprocess.run([cli, "analyze", "--json", db], capture_output=True, text=True, check=True)
    t = subprocess.run([cli, "analyze", db], capture_output=True, text=True, check=True)
    return json.loads(j.stdout), t.stdout


def first_names(entries):
    return [e["stack"][0]["name"] for e in entries if e.get("stack")]


# eval.db: an evaluation after steps 3, 7 and 11 without no_grad, its loss kept: three graphs of
# 4 x 40 MiB, called from evaluate()
j, text = analyze("eval")
graphs = j.get("kept_graphs", [])
g = graphs[0] if graphs else {}
at = g.get("forward_called_at") or {}
check("eval: one kept graph candidate: 3 graphs, 480 MiB in 12 blocks, of Net",
      len(graphs) == 1 and g.get("graphs") == 3 and g.get("live_bytes") == 3 * 4 * 40 * MiB and g.get("live_count") == 12 and
      g.get("forward_module") == "Net", str(graphs)[:400])
check("eval: the forward called at evaluate(), in iterations 3 to 11; the modules' saved bytes per call",
      at.get("name") == "evaluate" and g.get("first_iteration") == 3 and g.get("last_iteration") == 11 and
      g.get("saved_bytes_per_call") == 4 * 40 * MiB * 12 // 15, str((at, g.get("first_iteration"), g.get("last_iteration"),
                                                                 g.get("saved_bytes_per_call"))))
check("eval: its largest site holds 120 MiB of it (one layer's output in three graphs)",
      g.get("largest_site_bytes") == 120 * MiB and first_names([g])[0] in ("linear_out", "gelu_out", "norm_out", "attn_out"))
check("eval: the verdict is growth, not 'no growth across 12 iterations'",
      j["summary"]["growth"] == "growing" and "no growth across" not in text)
layers = [l for l in j["leaks"] if l["stack"][0]["name"] in ("linear_out", "gelu_out", "norm_out", "attn_out")]
check("eval: each layer's site grows every 4 iterations, +40 MiB at 3 of 11, never freed, in kept graph G1",
      len(layers) == 4 and all(l["kind"] == "growing" and l["every"] and l["every"]["iterations"] == 4 and
                               l["every"]["steps"] == 3 and l["every"]["bytes_per_step"] == 40 * MiB and
                               l["every"]["fell_bytes"] == 0 and l["kept_graph"] == 0 and l["kept_graph_bytes"] == 120 * MiB
                               for l in layers), str([(l["stack"][0]["name"], l["every"], l["kept_graph"]) for l in layers]))
check("eval: the sawtooth (16 MiB a step, all freed every 4th) and the jittering temporary are no leaks",
      not {"cycle_buffer", "jitter_temp"} & set(first_names(j["leaks"])), str(first_names(j["leaks"])))
check("eval: the loss (512 bytes a graph) is no candidate: three steps of it are below the 1 MiB minimum",
      "loss_out" not in first_names(j["leaks"]))
line = next((l for l in text.splitlines() if l.startswith("  G1. ")), "")
check("eval text: G1 says the bytes, the graphs, the forward's module and line, the cause and the fix",
      re.search(r"G1\. 480\.00 MiB in 3 autograd graphs kept alive: the forward of Net at evaluate \(gen_kept_graphs\.c:\d+\) "
                r"ran with grad enabled and no backward \(iterations 3 to 11\)", line) is not None and
      "torch.no_grad()" in line and "loss.item()" in line, line)
check("eval text: the layers' sites say '+40.00 MiB every 4 iterations (grew at 3 of 11 iterations, never freed)' and "
      "their part of G1",
      len(re.findall(r"growing: \+40\.00 MiB every 4 iterations \(grew at 3 of 11 iterations, never freed\); 120\.00 MiB live "
                     r"in 3 blocks.*; 120\.00 MiB of it in kept graph G1", text)) == 4, text[:3000])

# eval_nograd.db: the same evaluation under no_grad: no graph, no leak, no growth
j, text = analyze("eval_nograd")
check("eval_nograd: no kept graph, no growing candidate, 'no growth across 12 iterations'",
      j.get("kept_graphs") == [] and not j["leaks"] and j["summary"]["growth"] == "none" and
      "no growth across 12 iterations" in text and "autograd graph" not in text, str(first_names(j["leaks"])))

# midstep.db: dumped in a step's backward: its forward's saved tensors alive, yet no kept graph
j, text = analyze("midstep")
check("midstep: a forward whose own backward is running is no kept graph", j.get("kept_graphs") == [],
      str(j.get("kept_graphs"))[:300])

# hook.db: a hook's kept outputs (one module's) and a forward in flight at the dump: no graph
j, text = analyze("hook")
check("hook: no kept graph beside a hook's kept outputs, though the last forward is in flight",
      j.get("kept_graphs") == [] and "autograd graph" not in text, str(j.get("kept_graphs"))[:300])
check("hook: the hook's site grows 12 MiB a step", j["leaks"] and j["leaks"][0]["kind"] == "growing" and
      j["leaks"][0]["bytes_per_iteration"] == 12 * MiB and j["leaks"][0]["live_bytes"] == 5 * 12 * MiB,
      str([(l["stack"][0]["name"], l["kind"], l["bytes_per_iteration"]) for l in j["leaks"]]))

# every.db: 300 MiB kept at steps 3, 8, 11, 16, 19, 23 (every 3 to 5), a sawtooth, jitter
j, text = analyze("every")
l = j["leaks"][0] if j["leaks"] else {}
check("every: the checkpoint copy first, growing +300 MiB every 3 to 5 iterations at 6 of 23, 1.76 GiB live",
      first_names([l]) == ["checkpoint_copy"] and l["kind"] == "growing" and l["every"]["steps"] == 6 and
      l["every"]["bytes_per_step"] == 300 * MiB and (l["every"]["min_iterations"], l["every"]["max_iterations"]) == (3, 5) and
      l["live_bytes"] == 6 * 300 * MiB, str(l)[:400])
check("every: the sawtooth of 100 MiB a step freed every 4th is no candidate; nothing else grows",
      first_names(j["leaks"]) == ["checkpoint_copy"], str(first_names(j["leaks"])))
check("every text: '+300.00 MiB every 3 to 5 iterations (grew at 6 of 23 iterations, never freed)'",
      "1. growing: +300.00 MiB every 3 to 5 iterations (grew at 6 of 23 iterations, never freed); 1.76 GiB live in 6 blocks" in text)
check("every: no kept graph without the module record", j.get("kept_graphs") == [])

# long.db: 8 MiB kept every 100th of 1000 steps, through a ring that wrapped
j, text = analyze("long")
l = j["leaks"][0] if j["leaks"] else {}
check("long: the ring wrapped (events dropped), hundreds of iterations kept",
      j["summary"]["dropped_events"] > 0 and len(j["iterations"]) > 300, str((j["summary"]["dropped_events"], len(j["iterations"]))))
check("long: the log buffer first, +8 MiB every 100 iterations, the only candidate that grows",
      first_names(j["leaks"]) == ["log_buffer"] and l["every"] and l["every"]["bytes_per_step"] == 8 * MiB and
      l["every"]["min_iterations"] == l["every"]["max_iterations"] == 100, str((first_names(j["leaks"]), l.get("every"))))

# the page: the same keys in its data, and its list escapes what it shows (web/view.js adds text)
page = os.path.join(work, "eval.html")
subprocess.run([cli, "analyze", "--html", page, os.path.join(work, "eval.db")], check=True, capture_output=True)
html = open(page).read()
data = re.search(r'<script type="application/json" id="memsnap-data">(.*?)</script>', html, re.S)
doc = json.loads(data.group(1)) if data else {}
check("page: its data holds kept_graphs and the leaks' every",
      len(doc.get("kept_graphs", [])) == 1 and doc["kept_graphs"][0]["graphs"] == 3 and
      any(l.get("every") for l in doc.get("leaks", [])), str(list(doc)[:40]))
check("page: a kept-graphs list in the leak candidates' section", 'id="kept-graphs"' in html)
finish()
