"""cost.py: what issue 52's Python-side record costs a GPT-2 training step, natively and under
`memsnap run` with the garbage collector's runs recorded (the default), without
(MEMSNAP_GC_EVENTS=0) and with the cycles of each run kept (MEMSNAP_GC_CYCLES=1), side by side in
one run; and how long the holder walk takes at a snapshot
of that process (memsnap.dump() with the model, its optimizer state and a forward hook's kept
outputs alive: the walk's own time, the snapshot's holders_ms).

  python3 tests/gpu/leaks/cost.py [--rounds 3] [--warmup 3] [--steps 20] [--budget SECONDS]
                                  [--memsnap build/memsnap] [--json PATH]

The model and step of tests/gpu/model_language/gpt2_model.py (6 layers, batch 8 x 512, AdamW; its
timed_steps), one process per side and round, the sides' order turned each round. Each process times --steps steps
(torch.cuda.synchronize() around each) after --warmup and reports their median; a side's time is
the median of its processes' medians, its spread the largest less the smallest over it. The
memsnap sides then keep 4 steps of transformer.h.5's outputs through a forward hook (a leak for
the walk to find), call memsnap.dump(), and report the walk's milliseconds, the blocks walked,
whether it was cut, the dump's whole time, the gc runs the snapshot recorded and, with
MEMSNAP_GC_CYCLES, the milliseconds its runs spent describing and freeing what they saved (the
snapshot's gc_cycles_ms, all runs together). Prints one line per process, then the summary table
last.
"""
import argparse
import gc
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
MARK = "leaks-cost "
SIDES = ("native", "memsnap", "memsnap_no_gc", "memsnap_cycles")


def worker(args):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "model_language"))
    import gpt2_model
    config, model, opt = gpt2_model.build()
    times = gpt2_model.timed_steps(config, model, opt, args.warmup, args.steps)
    result = {"median_s": statistics.median(times), "gc_counts": gc.get_count()}
    if args.dump:
        import memsnap
        kept = []
        model.transformer.h[5].register_forward_hook(lambda m, i, o: kept.append(o[0].detach()))
        for _ in range(4):
            x = gpt2_model.batch(config)
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        memsnap.dump(args.dump)
        result["dump_s"] = time.perf_counter() - t0
        c = sqlite3.connect(args.dump)
        meta = dict(c.execute("select key, value from meta where key like 'holders%' or key like 'gc_cycles%'").fetchall())
        result.update(walk_ms=meta.get("holders_ms"), walk_blocks=meta.get("holders_blocks"), walk_cut=meta.get("holders_cut"),
                      gc_runs=c.execute("select count(*) from events where kind = 19 and size = 0").fetchone()[0],
                      holders=[r[0] for r in c.execute("select holder from holders where rank = 0 limit 3")],
                      cycles_ms=meta.get("gc_cycles_ms"), cycles_runs=meta.get("gc_cycles_runs"))
        c.close()
    print(MARK + json.dumps(result), flush=True)


def one_process(args, side, work):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--warmup", str(args.warmup), "--steps", str(args.steps)]
    env = dict(os.environ)
    if side != "native":
        cmd = [args.memsnap, "run", "-q", "--no-suggest", "-o", os.path.join(work, "exit-%p.db"), "--"] + cmd + [
            "--dump", os.path.join(work, "dump.db")]
        if side == "memsnap_no_gc":
            env["MEMSNAP_GC_EVENTS"] = "0"
        if side == "memsnap_cycles":
            env["MEMSNAP_GC_CYCLES"] = "1"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired:
        text, rc = "timeout after %d s" % args.timeout, 124
    for name in os.listdir(work):
        os.remove(os.path.join(work, name))
    for line in text.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):]), rc, text[-1500:]
    return None, rc, text[-1500:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--dump", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--budget", type=float, default=0)
    ap.add_argument("--memsnap", default=os.path.join(ROOT, "build", "memsnap"))
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    work = tempfile.mkdtemp(prefix="leaks-cost-")
    results, failures, start, longest, note = {s: [] for s in SIDES}, [], time.time(), 0, ""
    for r in range(args.rounds):
        if args.budget and time.time() - start + len(SIDES) * longest > args.budget:
            note = "stopped before round %d (budget %.0f s)" % (r, args.budget)
            break
        order = SIDES[r % len(SIDES):] + SIDES[:r % len(SIDES)]
        for side in order:
            t = time.time()
            res, rc, tail = one_process(args, side, work)
            longest = max(longest, time.time() - t)
            results[side].append(res)
            print("round %d %-14s %s (exit %d)" % (r, side, json.dumps(res), rc), flush=True)
            if res is None or rc != 0:
                failures.append("round %d %s: exit %d: %s" % (r, side, rc, tail[-500:]))
    summary = {}
    for side in SIDES:
        ok = [x for x in results[side] if x]
        meds = [x["median_s"] for x in ok]
        summary[side] = {"median_s": statistics.median(meds) if meds else None,
                         "spread": (max(meds) - min(meds)) / statistics.median(meds) if meds else None,
                         "walk_ms": [x.get("walk_ms") for x in ok if "walk_ms" in x],
                         "walk_blocks": [x.get("walk_blocks") for x in ok if "walk_blocks" in x],
                         "walk_cut": [x.get("walk_cut") for x in ok if "walk_cut" in x],
                         "dump_s": [round(x["dump_s"], 3) for x in ok if "dump_s" in x],
                         "gc_runs": [x.get("gc_runs") for x in ok if "gc_runs" in x],
                         "cycles_ms": [x.get("cycles_ms") for x in ok if x.get("cycles_ms") is not None],
                         "holders": ok[0].get("holders") if ok and "holders" in ok[0] else None}
    native = summary["native"]["median_s"]
    for side in SIDES:
        m = summary[side]["median_s"]
        summary[side]["ratio"] = m / native if m and native else None
    print("\nside            step ms   spread  ratio    walk ms (blocks, cut)     dump s        gc runs in the snapshot"
          "  cycles ms (all runs)")
    for side in SIDES:
        s = summary[side]
        print("%-14s %8s %7s %7s    %-25s %-13s %-24s %s" % (
            side, "%.2f" % (s["median_s"] * 1e3) if s["median_s"] else "-", "%.1f%%" % (100 * s["spread"]) if s["spread"] is not None else "-",
            "%.4f" % s["ratio"] if s["ratio"] else "-", "%s (%s, %s)" % (s["walk_ms"], s["walk_blocks"], s["walk_cut"]) if s["walk_ms"] else "-",
            s["dump_s"] or "-", s["gc_runs"] or "-", s["cycles_ms"] or "-"))
    if summary["memsnap"]["holders"]:
        print("first holders found:", " | ".join(h[:100] for h in summary["memsnap"]["holders"]))
    for f in failures:
        print("failed:", f)
    if note:
        print(note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sides": summary, "failures": failures, "note": note}, f, indent=1)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
