"""whatif_check.py: issue 43 on the GPU: `memsnap predict --checkpoint / --optimizer / --advise`
against the program changed for real and run natively (docs/predict.md, "What if the model
changed"; docs/BENCHMARKS.md, "Predict: the program changed, on a GPU").

  1. record:   GPT-2 (transformers' GPT2LMHeadModel from GPT2Config: 12 layers, sequence 1024,
               use_cache off; AdamW; random tokens; STEPS steps) at batch 4 and 8 with
               `build/memsnap run`, without checkpointing -> $OUT/g4.db, $OUT/g8.db; two
               Linear(8192, 8192) with AdamW (batch 4096) -> $OUT/lin.db; torchvision resnet50
               at batch 32 and 64 -> $OUT/r32.db, $OUT/r64.db (the program: train_child.py);
  2. predict:  `memsnap predict g4.db=4 g8.db=8 --checkpoint GPT2Block --at 8 --at 16 --at 24
               --at 32 --json`; `memsnap predict lin.db --optimizer sgd --json`;
               `memsnap predict g4.db=4 g8.db=8 --checkpoint GPT2Block --at 32 --capacity 24G
               --advise --json`;
  3. native:   GPT-2 with model.gradient_checkpointing_enable() at batch 8, 16, 24 and 32, and
               the two Linear with SGD, resnet50 with torch.utils.checkpoint on each of its four
               stages at 64, 128 and 192, each in its own process under PyTorch's own allocator:
               torch.cuda.max_memory_allocated() and max_memory_reserved();
               The same --advise without --checkpoint (issue 53: it finds the modules itself);
  4. the cap:  --advise's smallest change that fits (its PYTORCH_CUDA_ALLOC_CONF, memory fraction,
               the GPT-2 blocks it checkpoints: all of them by gradient_checkpointing_enable(),
               some by torch.utils.checkpoint on those blocks' forward, and its optimizer) applied
               natively under a 24 GiB cap (torch.cuda.set_per_process_memory_fraction(24 GiB / the
               card)): batch 32 first, then the largest batch, probed one at a time from the one
               --advise gives (the boundary: one batch fits, the next runs out of memory); the
               same for the change --advise finds without --checkpoint (the probes shared where
               the change is the same).
A table comes last. What must hold (issue 43): checkpointed GPT-2's peak allocated within 3% of
native at batch 8, 16, 24 and 32 and peak reserved within 10%; the two Linear's SGD peak allocated
within 2%; --advise names a change that makes batch 32 fit, and the largest batch it gives with
it is native's or one below, with --checkpoint GPT2Block and without it.

Nothing is fetched and nothing is built: run from the repository root with build/ (build/memsnap
and the libraries beside it) already there, PyTorch and transformers installed, on one GPU with
at least 40 GiB. Every step is bounded (each child has a time limit, the whole run a deadline
under 9 minutes); a step that fails is recorded and the others go on. $OUT gets whatif_check.jsonl
(a line per measurement and prediction), whatif_check.log (every command and its output), the
predictions' JSON and text, and the three recordings.

usage: python3 tests/gpu/predict/whatif_check.py [--steps 3] [--at 8,16,24,32] [--cap-gib 24] [--advise-at 32]
                                                 [--resnet-at 64,128,192]
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
H = Harness("whatif_check", minutes=8.6)  # the whole run: under 9 minutes
OUT, START, log, record, run = H.out, H.start, H.log, H.record, H.run
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

TRAIN = os.path.join(HERE, "train_child.py")  # the training program, one process per measurement










def train_env(model, batch, steps, ckpt="", opt="adamw", conf="", cap=0, fraction=1.0):
    env = dict(OFFLINE, MODEL=model, BATCH=str(batch), STEPS=str(steps), CKPT=ckpt, OPT=opt, PYTORCH_CUDA_ALLOC_CONF=conf,
               FRACTION=repr(fraction))
    if cap:
        env["CAP_BYTES"] = str(cap)
    return env


def native(script, what, **kw):
    """The script under PyTorch's own allocator: its RESULT (None when it did not say)."""
    rc, out, err = run([sys.executable, script], train_env(**kw))
    r = result_of(out)
    record({"kind": "native", "what": what, "args": kw, "exit": rc, "result": r, "error": None if r else (err or "")[-500:]})
    return r


def recorded(script, name, **kw):
    db = os.path.join(OUT, name + ".db")
    if os.path.exists(db):
        os.remove(db)
    rc, out, err = run([CLI, "run", "-q", "--no-suggest", "--max-entries", "4000000", "-o", db, "--", sys.executable, script],
                       train_env(**kw), timeout=200)
    r = result_of(out)
    record({"kind": "record", "name": name, "args": kw, "exit": rc, "result": r, "snapshot": db, "exists": os.path.exists(db),
            "error": None if rc == 0 else (err or "")[-500:]})
    return db


def predict(args, name, timeout=240):
    """memsnap predict ARGS --json: its answer (None on failure), kept as $OUT/NAME.json; the same in
    text as $OUT/NAME.txt."""
    rc, out, err = run([CLI, "predict"] + args + ["--json"], timeout=timeout)
    try:
        j = json.loads(out)
    except ValueError:
        j = None
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        f.write(out if j else json.dumps({"exit": rc, "stderr": err[-4000:]}))
    record({"kind": "predict", "name": name, "args": args, "exit": rc, "error": None if j else err[-1000:],
            "what_if": (j or {}).get("what_if"), "notes": (j or {}).get("notes")})
    return j


def predict_text(args, name, timeout=240):
    rc, out, err = run([CLI, "predict"] + args, timeout=timeout)
    with open(os.path.join(OUT, name + ".txt"), "w") as f:
        f.write(out + err)




def change_of(row):
    """The native form of an advice row: (conf, memory fraction, CKPT, optimizer); None when it
    cannot be made natively (a bytes-per-parameter optimizer)."""
    names = row.get("checkpointed") or []
    # GPT2Block #N (Python frames) is block N - 1; GPT2LMHeadModel.transformer.h.N (module paths) block N
    blocks = sorted(int(n.split("#")[1]) - 1 if "#" in n else int(n.rsplit(".", 1)[1]) for n in names)
    module = row.get("checkpoint_module")
    if names and module not in (None, "GPT2Block", "transformer.h.*"):
        return None  # another module than the blocks: train_child.py checkpoints blocks only
    ckpt = "all" if len(blocks) == 12 else ",".join(str(b) for b in blocks)
    opt = row.get("optimizer") or "adamw"
    if opt.endswith("B"):
        return None
    return row.get("pytorch_cuda_alloc_conf", ""), float(row.get("memory_fraction", 1) or 1), ckpt, opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--at", default="8,16,24,32")
    ap.add_argument("--cap-gib", type=float, default=24.0)
    ap.add_argument("--advise-at", type=int, default=32)
    ap.add_argument("--linear-batch", type=int, default=4096)
    ap.add_argument("--resnet-at", default="64,128,192")
    a = ap.parse_args()
    ats = [int(x) for x in a.at.split(",")]
    cap = int(a.cap_gib * GiB)
    script = TRAIN
    record({"kind": "start", "out": OUT, "steps": a.steps, "at": ats, "cap_bytes": cap, "cli": CLI})

    # 1. record
    g = [recorded(script, "g%d" % b, model="gpt2", batch=b, steps=a.steps) for b in (4, 8)]
    lin = recorded(script, "lin", model="linear", batch=a.linear_batch, steps=a.steps)
    rn = [recorded(script, "r%d" % b, model="resnet50", batch=b, steps=a.steps) for b in (32, 64)]
    runs = ["%s=4" % g[0], "%s=8" % g[1]]

    # 2. predict
    at_args = sum((["--at", str(n)] for n in ats), [])
    pj = predict(runs + ["--checkpoint", "GPT2Block"] + at_args, "checkpoint")
    predict_text(runs + ["--checkpoint", "GPT2Block"] + at_args, "checkpoint")
    oj = predict([lin, "--optimizer", "sgd"], "optimizer")
    predict_text([lin, "--optimizer", "sgd"], "optimizer")
    rats = [int(x) for x in a.resnet_at.split(",")]
    rj = predict(["%s=32" % rn[0], "%s=64" % rn[1], "--checkpoint", "layer*"] + sum((["--at", str(n)] for n in rats), []),
                 "resnet_checkpoint")
    aj = predict(runs + ["--checkpoint", "GPT2Block", "--at", str(a.advise_at), "--capacity", str(cap), "--advise"], "advise",
                 timeout=300)
    predict_text(runs + ["--checkpoint", "GPT2Block", "--at", str(a.advise_at), "--capacity", str(cap), "--advise"], "advise",
                 timeout=300)
    fj = predict(runs + ["--at", str(a.advise_at), "--capacity", str(cap), "--advise"], "advise_found", timeout=300)
    predict_text(runs + ["--at", str(a.advise_at), "--capacity", str(cap), "--advise"], "advise_found", timeout=300)

    def predicted(j, n, changed=True):
        for r in (j or {}).get("predictions", []):
            if r["at"] == n and r["changed"] == changed and r["recorded_settings"]:
                return r
        return None

    # 3. native: the checkpointed GPT-2, the two Linear with SGD
    measured = {n: native(script, "gpt2 checkpointed", model="gpt2", batch=n, steps=a.steps, ckpt="all") for n in ats}
    lin_sgd = native(script, "linear sgd", model="linear", batch=a.linear_batch, steps=a.steps, opt="sgd")
    r_measured = {n: native(script, "resnet50 stages checkpointed", model="resnet50", batch=n, steps=a.steps, ckpt="all")
                  for n in rats}

    # 4. --advise's change under the cap, with --checkpoint GPT2Block and without (found)
    all_probes = {}  # (change, batch) -> fits natively

    def under_cap(j, kind):
        best = (j or {}).get("advice", {}).get("best")
        fit_native, at_fits = None, None
        change = change_of(best) if best else None
        probes = {}
        if change:
            conf, fraction, ckpt, opt = change

            def probe(n):
                if (change, n) not in all_probes:
                    r = native(script, "advised change under the cap", model="gpt2", batch=n, steps=a.steps, ckpt=ckpt,
                               opt=opt, conf=conf, cap=cap, fraction=fraction)
                    all_probes[(change, n)] = None if r is None else not r["oom"]
                probes[n] = all_probes[(change, n)]
                return probes[n]

            at_fits = probe(a.advise_at)
            guess = (best.get("largest_that_fits") or {}).get("at") or a.advise_at
            fit_native = boundary(probe, guess)
        pl = ((best or {}).get("largest_that_fits") or {}).get("at")
        record({"kind": kind, "cap_bytes": cap, "best": best, "native_change": change, "fits_at": at_fits,
                "predicted_largest": pl, "native_largest": fit_native, "probes": {str(k): v for k, v in sorted(probes.items())}})
        return best, at_fits, pl, fit_native

    best, at_fits, pl, fit_native = under_cap(aj, "cap")
    fbest, f_at_fits, fpl, f_native = under_cap(fj, "cap_found")

    # the table
    f = lambda v: "%.2f GiB" % (v / GiB) if v is not None else "-"
    e = lambda v: "%+.2f" % v if v is not None else "-"
    print("\nGPT-2 12 layers, sequence 1024, AdamW, %d steps; recorded at batch 4 and 8 (memsnap run), predicted with "
          "--checkpoint GPT2Block, measured with gradient_checkpointing_enable()" % a.steps)
    if pj:
        c = (pj.get("what_if") or {}).get("checkpoint") or {}
        print("module calls found: %s calls of %s instances before %s backward passes" %
              (c.get("calls"), len(c.get("instances", [])), c.get("backward_passes")))
    def table(what, j, measured_at, sizes):
        """Prints predicted against native peaks at each size and records them; the rows."""
        print("%5s  %14s %14s %7s  %14s %14s %7s" % ("batch", "pred. alloc", "native alloc", "err%", "pred. reserved",
                                                    "native res.", "err%"))
        out = []
        for n in sizes:
            p, m = predicted(j, n), measured_at.get(n)
            # the prediction's peaks are the allocator's, as torch.cuda.max_memory_* (the external memory
            # held beside it, cuBLAS's own cudaMalloc, is its external_bytes)
            pa = p["peak_allocated_bytes"] if p else None
            pr = p["peak_reserved_bytes"] if p else None
            ma = m["peak_allocated"] if m and not m["oom"] else None
            mr = m["peak_reserved"] if m and not m["oom"] else None
            row = {"kind": "compare", "what": what, "batch": n, "predicted_allocated": pa, "native_allocated": ma,
                   "err_allocated_pct": pct(pa, ma), "predicted_reserved": pr, "native_reserved": mr,
                   "err_reserved_pct": pct(pr, mr)}
            out.append(row)
            record(row)
            print("%5d  %14s %14s %7s  %14s %14s %7s" % (n, f(pa), f(ma), e(row["err_allocated_pct"]), f(pr), f(mr),
                                                         e(row["err_reserved_pct"])))
        return out

    rows = table("checkpoint", pj, measured, ats)
    print("\ntorchvision resnet50, 224x224, AdamW; recorded at batch 32 and 64, predicted with --checkpoint 'layer*', "
          "measured with torch.utils.checkpoint on each stage")
    table("resnet50 checkpoint", rj, r_measured, rats)
    p = predicted(oj, a.linear_batch) or next((r for r in (oj or {}).get("predictions", []) if r["changed"]), None)
    pa = p["peak_allocated_bytes"] if p else None  # as above: the allocator's, as torch's counters
    ma = lin_sgd["peak_allocated"] if lin_sgd and not lin_sgd["oom"] else None
    lin_row = {"kind": "compare", "what": "optimizer sgd", "predicted_allocated": pa, "native_allocated": ma,
               "err_allocated_pct": pct(pa, ma), "predicted_reserved": p["peak_reserved_bytes"] if p else None,
               "native_reserved": lin_sgd["peak_reserved"] if lin_sgd and not lin_sgd["oom"] else None}
    record(lin_row)
    o = (oj or {}).get("what_if", {}) or {}
    o = o.get("optimizer") or {}
    print("\ntwo Linear(8192, 8192), batch %d, recorded with AdamW, --optimizer sgd (recorded: %s; state evidence: %s)" %
          (a.linear_batch, o.get("recorded"), o.get("state_evidence")))
    print("  peak allocated: predicted %s, native SGD %s, %s%%; reserved: predicted %s, native %s" %
          (f(pa), f(ma), e(lin_row["err_allocated_pct"]), f(lin_row["predicted_reserved"]), f(lin_row["native_reserved"])))
    def advice_lines(title, b, fits, largest, nat):
        print("\n%s" % title)
        print("  smallest change that fits: %s" % ((b or {}).get("description") or "none"))
        print("  natively under the cap: batch %d %s; largest batch: predicted %s, native %s" %
              (a.advise_at, {True: "fits", False: "does not fit", None: "-"}[fits], largest if largest is not None else "-",
               nat if nat is not None else "-"))
    advice_lines("--advise --checkpoint GPT2Block --capacity %.4g GiB --at %d" % (cap / GiB, a.advise_at), best, at_fits, pl,
                 fit_native)
    mods = ((fj or {}).get("advice") or {}).get("modules") or {}
    tried = [c["module"] for c in mods.get("considered", []) if c.get("tried")]
    advice_lines("--advise without --checkpoint: %d modules found in the %s, tried %s" %
                 (len(mods.get("considered", [])), mods.get("found_in", "-"), ", ".join(tried) or "none"),
                 fbest, f_at_fits, fpl, f_native)
    held = [r for r in rows if r["err_allocated_pct"] is not None and abs(r["err_allocated_pct"]) <= 3 and
            r["err_reserved_pct"] is not None and abs(r["err_reserved_pct"]) <= 10]
    v_ckpt = len(held) == len(ats)
    v_opt = lin_row["err_allocated_pct"] is not None and abs(lin_row["err_allocated_pct"]) <= 2
    v_adv = bool(best) and at_fits is True and pl is not None and fit_native is not None and fit_native - 1 <= pl <= fit_native
    v_found = bool(fbest) and f_at_fits is True and fpl is not None and f_native is not None and f_native - 1 <= fpl <= f_native
    record({"kind": "verdict", "checkpoint_within_3_and_10_pct": v_ckpt, "optimizer_within_2_pct": v_opt,
            "advise_fits_and_largest_native_or_one_below": v_adv, "advise_found_fits_and_largest_native_or_one_below": v_found,
            "wall_s": round(time.time() - START, 1)})
    print("\ncheckpoint within 3%% / 10%%: %s; optimizer within 2%%: %s; advise: %s; advise without --checkpoint: %s; %.0f s; "
          "$OUT: %s" % ("yes" if v_ckpt else "no", "yes" if v_opt else "no", "yes" if v_adv else "no",
                        "yes" if v_found else "no", time.time() - START, OUT))


if __name__ == "__main__":
    main()
