"""run.py: issue 52's GPU check: every cause of leak_program.py recorded under `memsnap run` (default
mode), analyzed with `memsnap analyze --json`, and checked to be named first with its holder or
its cause; then a short table, printed last.

  python3 tests/gpu/leaks/run.py [--memsnap build/memsnap] [--causes hook,closure,...] [--steps 12]
                                 [--out DIR] [--budget SECONDS]

From the repository root on a machine with a GPU, PyTorch and transformers (no network needed: the
GPT-2 is made from a config), build/ prepared by tests/gpu/prepare.sh and carried. Each cause's
snapshot, JSON, text report and log go into --out (default: a temporary folder); with $OUT set,
the JSON, reports and logs (not the snapshots) are packed into $OUT/leaks.tar.xz.

What "named first" means for each cause (the JSON's keys: docs/analysis-json.md):
  hook, closure, cache, attribute   the first growing candidate (`leaks[0]`) has a holder whose
                                    chain names the cause's holder: the list `features` or the
                                    forward hook of transformer.h.5; the closure variable
                                    `history`; the global `_cache`; Trainer's attribute `history`
  kept_loss, eval_every_k           the first graph kept without a backward (`kept_graphs[0]`) has
                                    a holder through the loss's autograd graph (root `autograd`)
                                    whose `kept_by` names the list that keeps the loss
                                    (`val_losses`, `eval_outputs`), and the first candidate
                                    (`leaks[0]`, else `held[0]`) is in that graph (`kept_graph` 0)
                                    or has a holder naming the list
  node_cycle, awaitable             recorded with MEMSNAP_GC_CYCLES=1: the first site the collector
                                    alone frees (`gc.cycle_sites[0]`) or the first candidate marked
                                    `reference_cycles` is the cause's line in leak_program.py, and
                                    its `cycles` name the objects joining the cycle (Node.data ->
                                    Tensor and Node.next -> Node; Awaitable.result -> Tensor)
  control                           no growing candidate (`leaks` empty) and no cycle site
Exit status: the number of causes not named as said.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PROGRAM = os.path.join(HERE, "leak_program.py")
CAUSES = ("hook", "closure", "cache", "kept_loss", "eval_every_k", "node_cycle", "awaitable", "attribute", "control")
HOLDER_WORDS = {"hook": ("`features`", "forward hook of GPT2LMHeadModel.transformer.h.5"),
                "closure": ("closure variable `history` of log",), "cache": ("global `_cache`",),
                "attribute": ("attribute `history` of Trainer",), "kept_loss": ("val_losses",),
                "eval_every_k": ("eval_outputs",)}
CYCLE_LINES = {"node_cycle": "Node(torch.empty", "awaitable": "Awaitable(torch.empty"}
# the reference-cycle causes run with MEMSNAP_GC_CYCLES=1: the cycles each collector run freed, with
# their objects' types and the attributes joining them, under the cycle site
CYCLE_WORDS = {"node_cycle": ("Node.data -> Tensor", "Node.next -> Node"), "awaitable": ("Awaitable.result -> Tensor",)}


def program_line(entry):
    """The first frame of leak_program.py in a site's stack: 'leak_program.py:LINE', or ''."""
    for f in entry.get("full_stack") or entry.get("stack") or []:
        if f.get("file", "").endswith("leak_program.py"):
            return "leak_program.py:%d" % f.get("line", 0)
    return ""


def source_line(where):
    try:
        n = int(where.split(":")[1])
        with open(PROGRAM) as f:
            return f.read().splitlines()[n - 1]
    except (IndexError, ValueError, OSError):
        return ""


def holders_text(entry):
    return " | ".join(h.get("holder", "") for h in entry.get("holders", []))


def judge(cause, js):
    """(ok, what the analysis said first, its holder or cause)."""
    leaks, held = js.get("leaks", []), js.get("held", [])
    gcj = js.get("gc", {})
    first = leaks[0] if leaks else (held[0] if held else {})
    said = "%s %s at %s" % (first.get("kind", "-"), _mib(first.get("bytes_per_iteration") or first.get("live_bytes") or 0),
                            program_line(first) or "-") if first else "nothing"
    if cause == "control":
        cycles = gcj.get("cycle_sites", [])
        return (not leaks and not any(program_line(c) for c in cycles),
                "no growing candidate" if not leaks else said, "%d gc runs, %d cycle sites" % (gcj.get("runs", 0), len(cycles)))
    if cause in CYCLE_LINES:
        sites = [c for c in gcj.get("cycle_sites", []) if program_line(c)]
        marked = [e for e in leaks + held if e.get("reference_cycles") and program_line(e)]
        site = sites[0] if sites else (marked[0] if marked else None)
        where = program_line(site) if site else ""
        cycles = (site or {}).get("cycles") or []
        edges = " | ".join("%s: %s (%s cycles)" % (c.get("types"), c.get("edges"), c.get("cycles")) for c in cycles)
        ok = (bool(where) and CYCLE_LINES[cause] in source_line(where) and
              any(all(w in c.get("edges", "") for w in CYCLE_WORDS[cause]) for c in cycles))
        how = ("held by reference cycles: %s freed by %s gc runs; %s" % (
            _mib(site.get("freed_bytes", site.get("gc_frees", {}).get("bytes", 0))),
            site.get("runs", site.get("gc_frees", {}).get("runs", "?")), edges[:120] or "no cycle kept (MEMSNAP_GC_CYCLES)")
               if site else "no cycle site (%d gc runs)" % gcj.get("runs", 0))
        return ok, "cycle site at " + (where or "-"), how
    words = HOLDER_WORDS[cause]
    if cause in ("kept_loss", "eval_every_k"):
        graphs = js.get("kept_graphs") or []
        graph = bool(graphs) and first.get("kept_graph") == 0  # the first candidate is in kept graph G1
        every = first.get("every")
        text = holders_text(first)
        # what keeps G1: the list holding the loss, found down the loss's autograd graph (the saved
        # tensors are held from C++: no Python referrer leads to them)
        kept = [h for h in (graphs[0].get("holders", []) if graphs else []) if h.get("root") == "autograd"]
        by = kept[0].get("kept_by", "") if kept else ""
        named = any(w in by for w in words) and "through its autograd graph (grad_fn " in kept[0].get("holder", "")
        return (named and (graph or any(w in text for w in words))), said, (
            "G1 kept by %s" % by[:90] if by else "G1 with no holder" if graphs else "no kept graph") + (
            " [G1: %s in %s graphs; first candidate %s]" % (_mib(graphs[0].get("live_bytes", 0)), graphs[0].get("graphs"),
                                                           "in it" if graph else "not in it") if graphs else "") + (
            " [every %s iterations]" % every.get("iterations") if every else "")
    first = leaks[0] if leaks else {}
    text = holders_text(first)
    return bool(leaks) and any(w in text for w in words), said, text[:160] or "no holder"


def _mib(n):
    return "%.1f MiB" % (float(n) / (1 << 20))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memsnap", default=os.path.join(ROOT, "build", "memsnap"))
    ap.add_argument("--causes", default=",".join(CAUSES))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", default="")
    ap.add_argument("--budget", type=float, default=540, help="seconds for every cause (the rest is skipped)")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="leaks-")
    os.makedirs(out, exist_ok=True)
    start, rows, failed = time.time(), [], 0
    for cause in args.causes.split(","):
        if time.time() - start > args.budget:
            rows.append((cause, False, "skipped: the budget of %.0f s ran out" % args.budget, ""))
            failed += 1
            continue
        db = os.path.join(out, cause + ".db")
        t0 = time.time()
        env = dict(os.environ, MEMSNAP_GC_CYCLES="1") if cause in CYCLE_LINES else None
        rec = subprocess.run([args.memsnap, "run", "-q", "--no-suggest", "-o", db, "--", sys.executable, PROGRAM, cause,
                              "--steps", str(args.steps)], capture_output=True, text=True, timeout=300, env=env)
        with open(os.path.join(out, cause + ".log"), "w") as f:
            f.write(rec.stdout + rec.stderr)
        an = subprocess.run([args.memsnap, "analyze", "--json", "--no-suggest", db], capture_output=True, text=True,
                            timeout=300)
        txt = subprocess.run([args.memsnap, "analyze", "--no-suggest", db], capture_output=True, text=True, timeout=300)
        with open(os.path.join(out, cause + ".json"), "w") as f:
            f.write(an.stdout)
        with open(os.path.join(out, cause + ".txt"), "w") as f:
            f.write(txt.stdout + txt.stderr)
        try:
            js = json.loads(an.stdout)
        except ValueError:
            js = None
        if rec.returncode != 0 or js is None:
            rows.append((cause, False, "run exit %d, analyze exit %d" % (rec.returncode, an.returncode),
                         (rec.stderr + an.stderr)[-160:].replace("\n", " ")))
            failed += 1
            continue
        ok, said, how = judge(cause, js)
        walk = js.get("holders_walk", {})
        rows.append((cause, ok, said, "%s  [walk %s ms%s, %.0f s]" % (how, walk.get("ms"), ", cut" if walk.get("cut") else "",
                                                                        time.time() - t0)))
        failed += not ok
        print("%-13s %s" % (cause, "ok" if ok else "NOT NAMED"), flush=True)
    print("\ncause         named  first candidate or site                  holder or cause")
    for cause, ok, said, how in rows:
        print("%-13s %-6s %-40s %s" % (cause, "yes" if ok else "NO", said[:40], how))
    if os.environ.get("OUT"):
        import tarfile
        with tarfile.open(os.path.join(os.environ["OUT"], "leaks.tar.xz"), "w:xz") as tar:
            for name in sorted(os.listdir(out)):
                if not name.endswith(".db"):
                    tar.add(os.path.join(out, name), arcname=name)
    print("\n%d of %d causes named first (snapshots, JSON and reports in %s)" % (len(rows) - failed, len(rows), out))
    sys.exit(failed)


if __name__ == "__main__":
    main()
