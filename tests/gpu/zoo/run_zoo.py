"""run_zoo.py: the zoo of real programs (issue 33), natively and under `memsnap run`, on the GPU
machine, with a table program by check (tests/gpu/zoo/README.md).

Each program of programs/ is an ordinary user script, never edited for memsnap. Each runs:
  native    plain python3 (or torchrun): its exit status, output and the peaks PyTorch counted
            (site/sitecustomize.py writes them at exit);
  profiler  natively under torch.profiler with memory profiling, for the programs whose categories
            torch.profiler's memory timeline knows (the expected categories);
  memsnap   `memsnap run` in its default mode: exit status, output and peaks as native, and what
            `memsnap analyze --json` and the text report say of its snapshots;
and each again with --leak (an injected leak, the line marked `# zoo: leak`), natively and
recorded. The checks (CHECKS below) compare the recorded answers with the known ones.

usage (from the repository root, build/ prepared with tests/gpu/prepare.sh):
  python3 tests/gpu/zoo/run_zoo.py [--only NAME,...] [--gpus N] [--no-leak] [--no-profiler]
                                   [--native-again] [--keep DIR] [--memsnap PATH]
--gpus N runs the programs that need at most N GPUs (default: as many as the machine has).
--jobs N runs N one-GPU programs at once (each process's own peaks do not depend on what else
runs; the programs that use every GPU run alone, after them).
--keep DIR copies every snapshot recorded there (NAME[-leak][-rRANK].db), for fixtures.
--native-again runs each program natively a second time and reports that run's peaks beside a
peaks failure: native's own run-to-run spread, shown, never used by the check.
Writes $OUT/zoo.jsonl (one line per program and variant) and $OUT/zoo.log (every command and its
output); prints the table last. Exit status 1 when a check failed.
"""
import argparse
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PROGRAMS = os.path.join(HERE, "programs")
SITE = os.path.join(HERE, "site")
MiB = 1 << 20


class Program:
    """A zoo program: its script and arguments, the GPUs it needs, and its known answers.

    steps:      the iterations memsnap must find (the optimizer's steps, or the outer loop's
                passes for a program without an optimizer); None: not checked
    exit:       the exit status it has natively (and must have recorded)
    categories: [(category, expected, tolerance)] checked at the allocated peak of rank 0;
                expected is bytes, or a function of the native report (params printed by the
                program, the profiler's categories)
    extra:      [(name, function(analysis, text, ctx) -> (ok, detail))] further checks
    torch:      whether it is a PyTorch program (its peaks are PyTorch's counters)
    profile:    run it under torch.profiler natively for its categories (with profile_args
                added: torch.profiler's analysis of a long trace takes minutes, and the peak
                comes in the first steps) and profile_env set (ZOO_PROFILE_FROM=optimizer:
                from the first optimizer on, site/sitecustomize.py)
    peaks:      "exact": every rank's peaks equal native's; "ddp": or apart from them by one copy
                of the model's gradients at most, either way (DDP's buckets fill in an order the
                timing decides: native runs gave 7018359808 B (run 36; both ranks in run 58) and
                7345210368 B (run 40; both runs of 57), the two ranks of run 56 one each, and
                memsnap each of the two; docs/BENCHMARKS.md, the zoo);
                "layout": or apart from them by at most 2 MiB allocated and one 20 MiB segment
                reserved (equal-size free blocks are chosen by address, so the peaks of one
                request sequence depend on where the driver put the segments: native runs of
                generate() differ by one segment reserved, and replays of one recorded sequence
                on three layouts by 1.6 MiB allocated; torch.compile's native runs differ by
                13 KiB allocated, run 57; docs/BENCHMARKS.md, the zoo)
    """

    def __init__(self, name, script, args=(), gpus=1, steps=None, exit=0, categories=(), extra=(), torch=True,
                 profile=False, profile_args=(), profile_env=None, leak=True, peaks="exact", timeout=900):
        self.name, self.script, self.args, self.gpus = name, script, list(args), gpus
        self.steps, self.exit, self.categories, self.extra = steps, exit, list(categories), list(extra)
        self.torch, self.profile, self.leak, self.timeout = torch, profile, leak, timeout
        self.profile_args, self.profile_env = list(profile_args), dict(profile_env or {})
        self.peaks = peaks


def params_bytes(per_param):
    """Expected bytes: per_param bytes a parameter the program printed ('parameters N')."""
    return lambda ctx: per_param * ctx.get("parameters", 0)


def profiler(category):
    """Expected bytes: torch.profiler's memory timeline's value for `category` at its peak (its
    INPUT counts as memsnap's activation: both are what the step holds when backward begins).

    For activations the timeline often does not know: it names a tensor an activation only where
    it followed the tensor from forward into backward, and leaves the rest 'unknown' (on HF GPT-2,
    3.7 GiB unknown against 144 MiB of activations and inputs: docs/BENCHMARKS.md, run 52). Where
    its unknown bytes exceed UNKNOWN_SHARE of its total, the expectation is the range it allows,
    (known, known + unknown): the check then says the profiler bounds the value, not that it
    equals it. Gradients and parameters it recognises by their own records, so they stay exact."""
    def expected(ctx):
        p = ctx.get("profiler") or {}
        at = p.get("at_peak")
        if not at:
            return None
        known = at.get(category, 0) + (at.get("input", 0) if category == "activation" else 0)
        unknown = at.get("unknown", 0)
        if category == "activation" and unknown > UNKNOWN_SHARE * p.get("total_at_peak", 0):
            return (known, known + unknown)
        return known
    expected.slack = 0.01  # of the peak: the profiler's peak moment is its own, a block or two apart
    return expected


UNKNOWN_SHARE = 0.05  # profiler(): above this share of unknown bytes, torch.profiler bounds activations


def category_check(v, e, tol, slack):
    """(ok, detail) for a category's bytes v against e: bytes, or a (low, high) range that
    torch.profiler's unknown bytes leave (profiler(): the tolerance below it only, the slack, for
    the profiler's peak moment, both ways); None when nothing is expected."""
    if isinstance(e, tuple):
        low, high = e
        ok = low * (1 - tol) - slack <= v <= high + slack  # the unknown bytes are the tolerance above
        return ok, "%.1f MiB, expected between %.1f and %.1f MiB (torch.profiler: %.1f MiB known, %.1f MiB unknown)" % (
            v / MiB, low / MiB, high / MiB, low / MiB, (high - low) / MiB)
    ok = e is not None and (e > 0 or slack > 0) and abs(v - e) <= tol * e + slack
    return ok, "%.1f MiB, expected %s" % (v / MiB, "%.1f MiB" % (e / MiB) if e else e)


def other_below(share):
    def check(j, text, ctx):
        peak = j["summary"]["peak_allocated_bytes"]
        other = j.get("categories_at_peak", {}).get("other", 0)
        return other < share * peak, "other %.1f MiB of %.1f MiB" % (other / MiB, peak / MiB)
    return ("other_below_%d%%" % round(share * 100), check)


def above_zero(category):
    def check(j, text, ctx):
        v = j.get("categories_at_peak", {}).get(category, 0)
        return v > 0, "%s %.1f MiB" % (category, v / MiB)
    return ("%s_above_zero" % category, check)


def has_oom(j, text, ctx):
    n = len(j.get("oom") or [])
    return n >= 1, "%d OOM events" % n


GiB512 = 536870912
LAYOUT_ALLOCATED, LAYOUT_RESERVED = 2 * MiB, 20 * MiB  # Program(peaks="layout")
# torch.profiler's run: with_stack=True (which PyTorch 2.11's memory timeline requires) over HF
# GPT-2 takes over 5 minutes for 2 steps (docs/BENCHMARKS.md, runs 48 and 50)
PROFILER_TIMEOUT = int(os.environ.get("ZOO_PROFILER_TIMEOUT", "300"))
ZOO = [
    Program("two_linear_adamw", "two_linear.py", steps=6, profile=True,
            categories=[("parameter", GiB512, 0.02), ("gradient", GiB512, 0.02), ("optimizer_state", 2 * GiB512, 0.02)]),
    Program("two_linear_sgd_keep_grads", "two_linear.py", ["--optimizer", "sgd", "--set-to-none", "0"], steps=6,
            profile=True, categories=[("parameter", GiB512, 0.02), ("gradient", GiB512, 0.02),
                                      ("optimizer_state", GiB512, 0.02)]),
    Program("gpt2_eager", "gpt2_train.py", steps=6, profile=True, profile_args=["--steps", "2"],
            profile_env={"ZOO_PROFILE_FROM": "optimizer"},
            categories=[("parameter", params_bytes(4), 0.10), ("optimizer_state", params_bytes(8), 0.10),
                        ("gradient", profiler("gradient"), 0.10), ("activation", profiler("activation"), 0.10),
                        ("autograd", profiler("autograd_detail"), 0.10)]),
    Program("gpt2_eager_keep_grads", "gpt2_train.py", ["--set-to-none", "0"], steps=6,
            categories=[("parameter", params_bytes(4), 0.10), ("gradient", params_bytes(4), 0.10),
                        ("optimizer_state", params_bytes(8), 0.10)]),
    Program("gpt2_accum_ckpt_bf16", "gpt2_train.py", ["--accum", "4", "--checkpointing", "--autocast", "--batch", "4"],
            steps=6, categories=[("parameter", params_bytes(4), 0.10), ("gradient", params_bytes(4), 0.10)]),
    Program("gpt2_compile", "gpt2_train.py", ["--compile"], steps=6, peaks="layout",
            categories=[("parameter", params_bytes(4), 0.10), ("optimizer_state", params_bytes(8), 0.10)]),
    Program("gpt2_oom_backward", "gpt2_oom.py", exit=1, leak=False, extra=[other_below(0.10), ("oom_recorded", has_oom),
                                                                              above_zero("activation")]),
    Program("fsdp2", "fsdp2_train.py", gpus=2, steps=8, extra=[above_zero("parameter")]),
    Program("ddp", "ddp_train.py", gpus=2, steps=6, peaks="ddp", categories=[("parameter", params_bytes(4), 0.10)]),
    Program("hf_trainer", "hf_trainer.py", steps=6, extra=[above_zero("parameter"), above_zero("optimizer_state")]),
    Program("lightning", "lightning_train.py", steps=6, extra=[above_zero("parameter"), above_zero("optimizer_state")]),
    Program("peft_lora", "peft_lora.py", steps=6, extra=[above_zero("parameter")]),
    Program("resnet50", "cnn_train.py", steps=6, profile=True, categories=[("gradient", profiler("gradient"), 0.10),
                                                                            ("parameter", profiler("parameter"), 0.10)]),
    Program("generate", "generate.py", steps=6, peaks="layout"),
    Program("cupy", "cupy_steps.py", steps=6, torch=False),
    Program("jax", "jax_mlp.py", steps=6, torch=False),
]


LOG_LOCK = threading.Lock()


def log(args, text):
    with LOG_LOCK, open(os.path.join(args.out, "zoo.log"), "a") as f:
        f.write(text)


def run(args, cmd, env, timeout):
    t = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    log(args, "$ %s\n%s%s[exit %d, %.1f s]\n\n" % (" ".join(cmd), out, err[-20000:], rc, time.time() - t))
    return rc, out, err, time.time() - t


def command(prog, leak, extra=()):
    script = [os.path.join(PROGRAMS, prog.script)] + prog.args + list(extra) + (["--leak"] if leak else [])
    if prog.gpus > 1:
        return ["torchrun", "--standalone", "--nproc-per-node", str(prog.gpus)] + script
    return [sys.executable] + script


def environment(report_dir, extra=None):
    env = dict(os.environ)
    # torch.compile's caches start empty for every run: a run that finds another's compiled
    # kernels skips their autotuning and its allocations, and its peaks differ
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=report_dir)
    env["TRITON_CACHE_DIR"] = os.path.join(env["TORCHINDUCTOR_CACHE_DIR"], "triton")
    env["PYTHONPATH"] = SITE + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["ZOO_REPORT"] = report_dir
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    env.update(extra or {})
    return env


def reports(report_dir):
    """The processes' reports, by rank (the process that used a GPU; torchrun's launcher did not)."""
    out = {}
    for path in glob.glob(os.path.join(report_dir, "*.json")):
        with open(path) as f:
            r = json.load(f)
        if r.get("devices") or "cupy_pool_total_bytes" in r or r.get("jax_peak_bytes_in_use") is not None:
            out[r.get("rank", 0)] = r
    return out


NUMBER = re.compile(r"-?\d+\.\d+(e-?\d+)?")
TIMING = re.compile(r"'(\w*(?:runtime|per_second)\w*)': '?[\d.]+'?")  # the HF Trainer's speed figures


def same_output(a, b):
    """Whether two outputs say the same: the same lines, decimals equal to 1e-3 relative (a loss
    after a few steps differs in its last digits between runs: atomics in backward), timings
    (the HF Trainer's train_runtime, samples per second) left out."""
    a, b = TIMING.sub(r"'\1': #", a), TIMING.sub(r"'\1': #", b)
    la, lb = a.strip().splitlines(), b.strip().splitlines()
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if NUMBER.sub("#", x) != NUMBER.sub("#", y):
            return False
        for u, v in zip(NUMBER.finditer(x), NUMBER.finditer(y)):
            fu, fv = float(u.group()), float(v.group())
            if not math.isclose(fu, fv, rel_tol=1e-3, abs_tol=1e-6):
                return False
    return True


def leak_line(prog):
    with open(os.path.join(PROGRAMS, prog.script)) as f:
        for i, line in enumerate(f, 1):
            if "# zoo: leak" in line:
                return "%s:%d" % (prog.script, i)
    return None


def frames_text(entry):
    return " ".join("%s:%s" % (os.path.basename(f.get("file", "")), f.get("line")) for f in entry.get("full_stack", []))


def analyze(args, db):
    rc, out, err, _ = run(args, [args.memsnap, "analyze", "--json", db], None, 600)
    try:
        j = json.loads(out)
    except ValueError:
        j = {"error": err[-2000:] or "no JSON"}
    rc, text, err, _ = run(args, [args.memsnap, "analyze", db], None, 600)
    return j, text


def check_run(prog, leak, native, recorded, ctx, args):
    """The checks of one program and variant: [(check, ok, detail)]."""
    res = []
    res.append(("exit", recorded["rc"] == native["rc"] == prog.exit,
                "native %d, memsnap %d, expected %d" % (native["rc"], recorded["rc"], prog.exit)))
    res.append(("output", same_output(native["out"], recorded["out"]), "" if same_output(native["out"], recorded["out"])
                else "native %r, memsnap %r" % (native["out"][-200:], recorded["out"][-200:])))
    nr, rr = native["reports"], recorded["reports"]
    if prog.torch:
        ok, detail, within_rule = bool(nr) and set(nr) == set(rr), [], []
        for rank in sorted(nr):
            a, b = nr[rank].get("devices", {}), rr.get(rank, {}).get("devices", {})
            for d in sorted(set(a) | set(b)):
                x, y = a.get(d, {}), b.get(d, {})
                same = x == y
                if not same and prog.peaks == "ddp" and x and y:  # one gradients' copy of slack
                    slack = 4 * ctx.get("parameters", 0)
                    same = all(abs(y[k] - x[k]) <= slack for k in ("peak_allocated", "peak_reserved"))
                    if same:
                        within_rule.append("rank %s cuda:%s apart by %+d B allocated (one gradients' copy: %d B)" % (
                            rank, d, y["peak_allocated"] - x["peak_allocated"], slack))
                if not same and prog.peaks == "layout" and x and y:  # the address layout's own spread
                    same = (abs(y["peak_allocated"] - x["peak_allocated"]) <= LAYOUT_ALLOCATED and
                            abs(y["peak_reserved"] - x["peak_reserved"]) <= LAYOUT_RESERVED)
                    if same:
                        within_rule.append("rank %s cuda:%s apart by %+d B allocated, %+d B reserved" % (
                            rank, d, y["peak_allocated"] - x["peak_allocated"], y["peak_reserved"] - x["peak_reserved"]))
                ok &= same
                if not same:
                    again = ctx.get("native_again", {}).get(rank, {}).get("devices", {}).get(d)
                    detail.append("rank %s cuda:%s native %s memsnap %s%s" % (
                        rank, d, x, y, "" if again is None else " (native again %s)" % again))
        res.append(("peaks", ok, "; ".join(detail + within_rule) or "%d ranks equal" % len(nr)))
    dbs = recorded["dbs"]
    res.append(("snapshot", len(dbs) >= prog.gpus, "%d snapshots" % len(dbs)))
    if not dbs:
        return res
    for rank, db in sorted(dbs.items()):
        j, text = analyze(args, db)
        if "error" in j:
            res.append(("analyze r%d" % rank, False, j["error"][-300:]))
            continue
        its = len(j.get("iterations", []))
        tag = "" if prog.gpus == 1 else " r%d" % rank
        if prog.steps is not None:
            res.append(("iterations" + tag, its == prog.steps, "%d (%s: %s), expected %d" % (
                its, j["summary"].get("iteration_source"), j["summary"].get("iteration_label"), prog.steps)))
        leaks = j.get("leaks", [])
        growing = [l for l in leaks if l.get("kind") in ("growing", "growing_released")]
        if not leak:
            if prog.steps is not None:
                said = re.search(r"no growth across %d iterations" % its, text) is not None
                res.append(("no_false_leak" + tag, not growing and said, "%d growing candidates%s" % (
                    len(growing), "" if said else ", text lacks 'no growth across %d iterations'" % its)))
        else:
            first = leaks[0] if leaks else {}
            line = leak_line(prog)
            named = line is not None and line in frames_text(first)
            res.append(("leak_found" + tag, first.get("kind") == "growing" and named, "first: %s %.1f MiB/it at %s" % (
                first.get("kind"), first.get("bytes_per_iteration", 0) / MiB, (frames_text(first)[:160] or "-"))))
        if rank != 0 or leak:
            continue
        cat = j.get("categories_at_peak", {})
        for name, expected, tol in prog.categories:
            e = expected(ctx) if callable(expected) else expected
            v = cat.get(name, 0)
            if e is None and getattr(expected, "slack", None) is not None:  # torch.profiler gave nothing
                res.append(("cat:" + name, None, "skipped: torch.profiler's memory timeline gave nothing (%s)" %
                            ctx.get("profiler_error", "no report")))
                continue
            slack = getattr(expected, "slack", 0) * j["summary"]["peak_allocated_bytes"]
            ok, detail = category_check(v, e, tol, slack)
            res.append(("cat:" + name, ok, detail))
        for name, fn in prog.extra:
            ok, detail = fn(j, text, ctx)
            res.append((name, ok, detail))
    return res


def one_side(args, prog, leak, side, work):
    tag = prog.name + ("-leak" if leak else "")
    report_dir = tempfile.mkdtemp(prefix="report-", dir=work)
    if side == "memsnap":
        db = os.path.join(work, tag + "-r%r.db")
        cmd = [args.memsnap, "run", "-q", "-o", db, "--"] + command(prog, leak)
        env = environment(report_dir)
    else:
        cmd = command(prog, leak, prog.profile_args if side == "profiler" else ())
        env = environment(report_dir, dict({"ZOO_PROFILE": "1"}, **prog.profile_env) if side == "profiler" else None)
    rc, out, err, secs = run(args, cmd, env, PROFILER_TIMEOUT if side == "profiler" else prog.timeout)
    res = {"rc": rc, "out": out, "seconds": secs, "reports": reports(report_dir), "dbs": {}}
    if side == "memsnap":
        for path in glob.glob(os.path.join(work, tag + "-r*.db")):
            m = re.search(r"-r(\d+)\.db$", path)
            if m:
                res["dbs"][int(m.group(1))] = path
                if args.keep:
                    shutil.copy(path, os.path.join(args.keep, os.path.basename(path)))
    return res


def run_program(args, prog, work):
    """Every side and variant of one program; its rows (one per variant), also appended to
    $OUT/zoo.jsonl as they come."""
    ctx, rows = {}, []
    variants = [False] + ([True] if prog.leak and not args.no_leak else [])
    for leak in variants:
        t = time.time()
        native = one_side(args, prog, leak, "native", work)
        if args.native_again:  # native's own spread, beside memsnap's difference (never a tolerance)
            ctx["native_again"] = one_side(args, prog, leak, "native", work)["reports"]
        m = re.search(r"^parameters (\d+)", native["out"], re.M)
        if m:
            ctx["parameters"] = int(m.group(1))
        if prog.profile and not leak and not args.no_profiler:
            prof = one_side(args, prog, leak, "profiler", work)
            ctx["profiler"] = (prof["reports"].get(0) or {}).get("profiler")
            ctx["profiler_error"] = ((prof["reports"].get(0) or {}).get("profiler_error") or
                                     ("still running at its %s s limit (ZOO_PROFILER_TIMEOUT)" % PROFILER_TIMEOUT
                                      if prof["rc"] == 124 else "exit %d" % prof["rc"]))
        recorded = one_side(args, prog, leak, "memsnap", work)
        try:
            checks = check_run(prog, leak, native, recorded, ctx, args)
        except Exception as e:  # noqa: BLE001 - one program's failure must not hide the others'
            checks = [("runner", False, repr(e))]
        row = {"program": prog.name, "leak": leak, "checks": [{"check": c, "ok": ok, "detail": d} for c, ok, d in checks],
               "native_seconds": round(native["seconds"], 1), "memsnap_seconds": round(recorded["seconds"], 1),
               "native_reports": native["reports"], "memsnap_reports": recorded["reports"],
               "native_again_reports": ctx.get("native_again"), "profiler": ctx.get("profiler"), "parameters": ctx.get("parameters"), "minutes": round((time.time() - t) / 60, 1)}
        rows.append(row)
        with LOG_LOCK, open(os.path.join(args.out, "zoo.jsonl"), "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print("%-28s %s" % (prog.name + ("-leak" if leak else ""),
                            " ".join("%s=%s" % (c, "ok" if ok else "skip" if ok is None else "FAIL") for c, ok, _ in checks)),
              flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--gpus", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--no-leak", action="store_true")
    ap.add_argument("--no-profiler", action="store_true")
    ap.add_argument("--native-again", action="store_true",
                    help="run each program natively twice: the second run's peaks are reported beside a peaks failure")
    ap.add_argument("--keep", default="")
    ap.add_argument("--memsnap", default=os.path.join(ROOT, "build", "memsnap"))
    args = ap.parse_args()
    args.out = os.environ.get("OUT") or tempfile.mkdtemp(prefix="zoo-")
    os.makedirs(args.out, exist_ok=True)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    if args.gpus is None:
        try:
            import torch
            args.gpus = torch.cuda.device_count()
        except Exception:  # noqa: BLE001
            args.gpus = 1
    only = set(filter(None, args.only.split(",")))
    work = tempfile.mkdtemp(prefix="zoo-work-")
    chosen = [p for p in ZOO if (not only or p.name in only) and p.gpus <= args.gpus]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = list(pool.map(lambda p: run_program(args, p, work), [p for p in chosen if p.gpus == 1]))
    done += [run_program(args, p, work) for p in chosen if p.gpus > 1]
    rows = [r for program_rows in done for r in program_rows]
    failed = 0
    print("\n%-28s %s" % ("program", "checks (the failed ones with what they found)"))
    for r in rows:
        bad = [c for c in r["checks"] if c["ok"] is False]
        skipped = [c for c in r["checks"] if c["ok"] is None]
        failed += len(bad)
        print("%-28s %d of %d ok%s%s" % (r["program"] + ("-leak" if r["leak"] else ""),
                                         len(r["checks"]) - len(bad) - len(skipped), len(r["checks"]),
                                         ", %d skipped" % len(skipped) if skipped else "",
                                         "" if bad else ": " + " ".join(c["check"] for c in r["checks"] if c["ok"])))
        for c in bad + skipped:
            print("    %s %-24s %s" % ("FAIL" if c["ok"] is False else "skip", c["check"], c["detail"][:160]))
    print("\n%d checks, %d failed" % (sum(len(r["checks"]) for r in rows), failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
