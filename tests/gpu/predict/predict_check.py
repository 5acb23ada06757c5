"""predict_check.py: issue 35 on the GPU: `memsnap predict` against PyTorch run natively
(docs/predict.md; docs/BENCHMARKS.md, "Predict on a GPU").

GPT-2 (transformers' GPT2LMHeadModel from GPT2Config: 12 layers, sequence 1024; AdamW; random
tokens; STEPS training steps) on one GPU:
  1. record:   the training script at batch 4 and 8 with `build/memsnap run` (default mode: memsnap
               is PyTorch's allocator, the interposer records the rest), every event kept
               -> $OUT/b4.db, $OUT/b8.db;
  2. predict:  `memsnap predict b4.db=4 b8.db=8 --at 12 --at 16 --at 20 --at 24 --sweep --json` on
               the recorded card (the rows of the defaults and of expandable_segments:True are
               read), and `memsnap predict b4.db=4 b8.db=8 --capacity 24G --sweep --json` (the
               largest batch that fits 24 GiB under each setting);
  3. native:   the same script under PyTorch's own allocator at each predicted batch, under the
               defaults and under expandable_segments:True, each in its own process:
               torch.cuda.max_memory_allocated() and max_memory_reserved() (batch 16 and 24
               first, the others after step 4);
  4. the cap:  the largest batch that fits natively under a 24 GiB cap
               (torch.cuda.set_per_process_memory_fraction(24 GiB / the card)), under both
               settings, probed one batch at a time from the predicted one (the boundary: one
               batch fits, the next runs out of memory).
A short table comes last: predicted against measured, the error in percent. What must hold
(issue 35): peak allocated within 1% of native at batch 16 and 24, peak reserved within 3%, under
both settings; the predicted largest batch under 24 GiB within one of native's.

Nothing is fetched and nothing is built: run from the repository root with build/ (build/memsnap
and the libraries beside it) already there, PyTorch and transformers installed. Every step is
bounded (each child has a time limit, the whole run a deadline under 9 minutes) and a step that
fails is recorded and the others go on. $OUT gets: predict_check.jsonl (a line per measurement and
prediction), predict_check.log (every command and its output), predict.json and capacity.json
(memsnap predict's answers), predict.txt (its text report), b4.db and b8.db (the recordings).

usage: python3 tests/gpu/predict/predict_check.py [--steps 3] [--at 12,16,20,24] [--cap-gib 24]
"""
import argparse
import json
import os
import sys
import time

from harness import Harness, boundary, pct, result_of

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
CLI = os.path.join(ROOT, "build", "memsnap")
GiB = 1 << 30
H = Harness("predict_check", minutes=8.5)  # the whole run: under 9 minutes
OUT, START, log, record, run = H.out, H.start, H.log, H.record, H.run
SETTINGS = [("defaults", ""), ("expandable_segments:True", "expandable_segments:True")]

# the training program (GPT-2 with transformers' default use_cache, as these runs always had it)
TRAIN = os.path.join(HERE, "train_child.py")










def native(script, batch, conf, steps, cap=0):
    """The script under PyTorch's own allocator: its RESULT (None when it did not say)."""
    env = {"MODEL": "gpt2", "USE_CACHE": "1", "BATCH": str(batch), "STEPS": str(steps), "PYTORCH_CUDA_ALLOC_CONF": conf,
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if cap:
        env["CAP_BYTES"] = str(cap)
    rc, out, err = run([sys.executable, script], env)
    r = result_of(out)
    record({"kind": "native", "batch": batch, "conf": conf, "cap_bytes": cap, "exit": rc, "result": r,
            "error": None if r else (err or "")[-500:]})
    return r


def predict(args, name):
    """memsnap predict ARGS --json: its answer (None on failure), kept as $OUT/NAME.json."""
    rc, out, err = run([CLI, "predict"] + args + ["--json"], timeout=240)
    try:
        j = json.loads(out)
    except ValueError:
        j = None
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        f.write(out if j else json.dumps({"exit": rc, "stderr": err[-4000:]}))
    record({"kind": "predict", "name": name, "args": args, "exit": rc, "error": None if j else err[-1000:]})
    return j




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--at", default="12,16,20,24")
    ap.add_argument("--cap-gib", type=float, default=24.0)
    a = ap.parse_args()
    ats = [int(x) for x in a.at.split(",")]
    cap = int(a.cap_gib * GiB)
    script = TRAIN
    record({"kind": "start", "out": OUT, "steps": a.steps, "at": ats, "cap_bytes": cap, "cli": CLI})

    # 1. record at batch 4 and 8
    runs = []
    for b in (4, 8):
        db = os.path.join(OUT, "b%d.db" % b)
        if os.path.exists(db):
            os.remove(db)
        rc, out, err = run([CLI, "run", "-q", "--no-suggest", "--max-entries", "4000000", "-o", db, "--",
                            sys.executable, script],
                           {"MODEL": "gpt2", "USE_CACHE": "1", "BATCH": str(b), "STEPS": str(a.steps), "HF_HUB_OFFLINE": "1",
                            "TRANSFORMERS_OFFLINE": "1"},
                           timeout=200)
        r = result_of(out)
        record({"kind": "record", "batch": b, "exit": rc, "result": r, "snapshot": db, "exists": os.path.exists(db),
                "error": None if rc == 0 else (err or "")[-500:]})
        runs.append("%s=%d" % (db, b))

    # 2. predict
    at_args = sum((["--at", str(n)] for n in ats), [])
    pj = predict(runs + at_args + ["--sweep"], "predict")
    cj = predict(runs + ["--capacity", str(cap), "--sweep"], "capacity")
    rc, out, err = run([CLI, "predict"] + runs + at_args + ["--capacity", str(cap)], timeout=240)
    with open(os.path.join(OUT, "predict.txt"), "w") as f:
        f.write(out + err)

    def predicted(n, conf):
        for r in (pj or {}).get("predictions", []):
            if r["at"] == n and r["pytorch_cuda_alloc_conf"] == conf and r["memory_fraction"] == 1:
                return r
        return None

    def predicted_fit(conf):
        for r in (cj or {}).get("largest_that_fits", []):
            if r["pytorch_cuda_alloc_conf"] == conf and r["memory_fraction"] == 1:
                return r.get("at")
        return None

    # 3. native at the batches the issue names (16, 24) first; the others after the cap (4), so
    # that a slow machine's deadline takes what matters least
    order = sorted(ats, key=lambda n: (n not in (16, 24), n))
    measured = {}
    for n in [n for n in order if n in (16, 24)]:
        for _, conf in SETTINGS:
            measured[(n, conf)] = native(script, n, conf, a.steps)

    # 4. the largest batch under the cap, natively: probed from the prediction
    fit_native = {}
    for _, conf in SETTINGS:
        guess = predicted_fit(conf) or 12
        fits = {}

        def probe(n):
            if n not in fits:
                r = native(script, n, conf, a.steps, cap)
                fits[n] = None if r is None else not r["oom"]
            return fits[n]

        found = boundary(probe, guess)
        fit_native[conf] = found
        record({"kind": "cap", "conf": conf, "cap_bytes": cap, "predicted": predicted_fit(conf), "native": found,
                "probes": {str(k): v for k, v in sorted(fits.items())}})

    for n in [n for n in order if n not in (16, 24)]:
        for _, conf in SETTINGS:
            measured[(n, conf)] = native(script, n, conf, a.steps)

    # the table
    rows = []
    print("\nGPT-2 12 layers, sequence 1024, AdamW, %d steps; recorded at batch 4 and 8 (memsnap run)" % a.steps)
    if pj:
        print("aligned: %.2f%% of the runs' bytes; fit %s; notes: %d" % (100 * pj.get("aligned_share", 0), pj.get("fit"),
                                                                         len(pj.get("notes", []))))
    print("%5s  %-26s  %14s %14s %7s  %14s %14s %7s" % ("batch", "setting", "pred. alloc", "native alloc", "err%",
                                                       "pred. reserved", "native res.", "err%"))
    for n in order:
        for label, conf in SETTINGS:
            p, m = predicted(n, conf), measured.get((n, conf))
            pa = p["peak_allocated_bytes"] if p else None
            pr = p["peak_reserved_bytes"] if p else None
            ma = m["peak_allocated"] if m and not m["oom"] else None
            mr = m["peak_reserved"] if m and not m["oom"] else None
            ea, er = pct(pa, ma), pct(pr, mr)
            rows.append({"kind": "compare", "batch": n, "conf": conf, "predicted_external": p.get("external_bytes") if p else None,
                         "predicted_allocated": pa, "native_allocated": ma,
                         "err_allocated_pct": ea, "predicted_reserved": pr, "native_reserved": mr, "err_reserved_pct": er})
            f = lambda v: "%.2f GiB" % (v / GiB) if v is not None else "-"
            e = lambda v: "%+.2f" % v if v is not None else "-"
            print("%5d  %-26s  %14s %14s %7s  %14s %14s %7s" % (n, label, f(pa), f(ma), e(ea), f(pr), f(mr), e(er)))
    for r in rows:
        record(r)
    ext = [r["predicted_external"] for r in rows if r["predicted_external"]]
    if ext:
        print("(the predictions hold %.0f to %.0f MiB of external memory, outside the allocator: memsnap run's interposer "
              "saw it; torch.cuda.max_memory_* count it only when PyTorch's allocator made it)" % (min(ext) / 2**20, max(ext) / 2**20))
    print("\nlargest batch under a %.4g GiB cap" % (cap / GiB))
    print("%-26s  %9s  %6s  %s" % ("setting", "predicted", "native", "within one"))
    for label, conf in SETTINGS:
        p, m = predicted_fit(conf), fit_native.get(conf)
        ok = "yes" if p is not None and m is not None and abs(p - m) <= 1 else "-"
        print("%-26s  %9s  %6s  %s" % (label, p if p is not None else "-", m if m is not None else "-", ok))
    held = [r for r in rows if r["batch"] in (16, 24)]
    verdict = all(r["err_allocated_pct"] is not None and abs(r["err_allocated_pct"]) <= 1 and r["err_reserved_pct"] is not None
                  and abs(r["err_reserved_pct"]) <= 3 for r in held) and held
    verdict_cap = all(predicted_fit(c) is not None and fit_native.get(c) is not None and abs(predicted_fit(c) - fit_native[c]) <= 1
                      for _, c in SETTINGS)
    record({"kind": "verdict", "peaks_within_1_and_3_pct": bool(verdict), "capacity_within_one": bool(verdict_cap),
            "wall_s": round(time.time() - START, 1)})
    print("\nbatch 16 and 24 within 1%% (allocated) and 3%% (reserved): %s; capacity within one: %s; %.0f s; $OUT: %s"
          % ("yes" if verdict else "no", "yes" if verdict_cap else "no", time.time() - START, OUT))


if __name__ == "__main__":
    main()
