"""cost.py: what recording costs a GPT-2 training step (issue 42: within 1% of native with the
module record on), natively and under `memsnap run` (default mode), side by side.

  python3 cost.py [--rounds 3] [--warmup 3] [--steps 20] [--budget SECONDS] [--memsnap build/memsnap]
                  [--json PATH]

gpt2_train.py's model and step (gpt2_model.py: 6 layers, batch 8 x 512, AdamW) in one process per
side and round, the sides alternated (native first in even rounds, memsnap first in odd ones, so
a drift of the machine falls on both). Each process runs --warmup steps, then times --steps
steps, each between two torch.cuda.synchronize() calls, and reports their median. A side's step
time is the median of its processes' medians, its spread (largest less smallest process median)
over that: a difference below the spread is not one the measurement can tell. --budget stops
starting rounds when the next might not end in time (the rounds done are summarized). Prints one
line per process and the summary; writes the same to --json: {native: {...}, memsnap: {...},
ratio}. Exit status 1 when a process failed (the summary says which).

  python3 cost.py --worker [--warmup 3] [--steps 20]   one process's steps (what the rounds run)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
MARK = "cost-step-seconds "


def worker(args):
    sys.path.insert(0, HERE)
    import gpt2_model
    config, model, opt = gpt2_model.build()
    times = gpt2_model.timed_steps(config, model, opt, args.warmup, args.steps)
    print(MARK + json.dumps(times), flush=True)


def one_process(args, side, work):
    """One process's median step time in seconds, or None; and its output's tail."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--warmup", str(args.warmup), "--steps", str(args.steps)]
    if side == "memsnap":
        cmd = [args.memsnap, "run", "-q", "--no-suggest", "-o", os.path.join(work, "cost-%p.db"), "--"] + cmd
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired:
        text, rc = "timeout after %d s" % args.timeout, 124
    for name in os.listdir(work):  # the snapshots are not kept: only the time matters here
        os.remove(os.path.join(work, name))
    for line in text.splitlines():
        if line.startswith(MARK):
            return statistics.median(json.loads(line[len(MARK):])), rc, text[-2000:]
    return None, rc, text[-2000:]


def summary(medians):
    ok = [m for m in medians if m is not None]
    if not ok:
        return {"process_medians_s": medians, "median_s": None, "spread": None}
    mid = statistics.median(ok)
    return {"process_medians_s": medians, "median_s": mid, "spread": (max(ok) - min(ok)) / mid}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=120, help="seconds for one process")
    ap.add_argument("--budget", type=float, default=0, help="seconds for all rounds (0: no limit)")
    ap.add_argument("--memsnap", default=os.path.join(ROOT, "build", "memsnap"))
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    work = tempfile.mkdtemp(prefix="cost-")
    medians, failures, note, start, longest = {"native": [], "memsnap": []}, [], "", time.time(), 0
    for r in range(args.rounds):
        if args.budget and time.time() - start + 2 * longest > args.budget:
            note = "stopped before round %d: the next might not end within the budget of %.0f s" % (r, args.budget)
            print(note)
            break
        for side in (("native", "memsnap") if r % 2 == 0 else ("memsnap", "native")):
            t = time.time()
            median, rc, tail = one_process(args, side, work)
            longest = max(longest, time.time() - t)
            medians[side].append(median)
            print("round %d %-8s %s (exit %d, %.0f s)" % (r, side, "median step %.2f ms" % (median * 1e3)
                                                         if median is not None else "no time", rc, time.time() - t), flush=True)
            if median is None or rc != 0:
                failures.append("round %d %s: exit %d: %s" % (r, side, rc, tail[-600:]))
    result = {side: summary(m) for side, m in medians.items()}
    n, m = result["native"]["median_s"], result["memsnap"]["median_s"]
    result.update(ratio=m / n if n and m else None, rounds=len(medians["native"]), warmup=args.warmup, steps=args.steps,
                  failures=failures, note=note)
    if result["ratio"] is not None:
        print("step: native %.2f ms (spread %.1f%%), memsnap %.2f ms (spread %.1f%%): ratio %.4f (%+.2f%%)" % (
            n * 1e3, 100 * result["native"]["spread"], m * 1e3, 100 * result["memsnap"]["spread"],
            result["ratio"], 100 * (result["ratio"] - 1)))
    for f in failures:
        print("failed:", f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
