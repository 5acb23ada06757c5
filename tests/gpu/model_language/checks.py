"""checks.py: issue 42's checks on what run.sh left in a folder, a table with one row per check.

  python3 checks.py DIR

DIR holds run.sh's results (the names below). The rows:
  names            no site named by a memsnap frame: in every analysis, the first frame (`stack[0]`)
                   of every entry of `leaks`, `held` (where there is one), `top_sites` and
                   `live_at_peak` is no memsnap frame (a short name or a native module's file name
                   holding "memsnap", or a Python file of memsnap's package)
  hook leak        gpt2_leak.json: the first candidate `growing`, 12 MiB an iteration within 5%,
                   its stack holding gpt2_train.py's `# zoo: leak` line
  no false leak    gpt2.json (leak-free): no candidate `growing` or `growing_released`
  ddp gradient rN  ddp-rN.json: categories_at_peak.gradient at least the parameters' bytes
                   (ddp_buckets.py prints them)
  ddp buckets      no site made by DDP's bucket set-up (a frame of Reducer's initialize_buckets or
                   rebuild_buckets, or DDP's _ddp_init_helper) is `activation` (what they are is
                   printed)
  grad scaler      cnn_amp.json: 10 iterations, as many marked `skipped` as the program skipped
  category X, module X   compare.py's comparisons with MemTracker (memtracker.json)
  cost             cost.json: memsnap's GPT-2 step within 1% of native's, with both spreads
  parts            every part ran to exit status 0 (compare.txt's status is its rows)
Ends with "N passed, N failed"; the exit status is the failure count.
"""
import glob
import io
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "zoo"))
import compare  # noqa: E402
import run_zoo  # noqa: E402  (frames_text, leak_line)

MiB = 1 << 20
ANALYSES = ["gpt2_leak", "gpt2", "cnn_amp", "ddp-r0", "ddp-r1"]
SITE_LISTS = ["leaks", "held", "top_sites", "live_at_peak"]
MEMSNAP_PACKAGE = re.compile(r"(^|/)memsnap/(run_site/)?\w+\.py$")
HOOK_BYTES = 8 * 512 * 768 * 4  # gpt2_train.py's hidden states at its defaults: batch x seq x n_embd x fp32
DDP_BUCKETS = re.compile(r"initialize_buckets|rebuild_buckets|_ddp_init_helper|Reducer::Reducer")
SCALER_STEPS = 10
COST_GOAL = 0.01


def load(d, name):
    with open(os.path.join(d, name)) as f:
        return json.load(f)


def output(d, name):
    """A part's output: its standard output and error together ('' where it left none)."""
    text = ""
    for path in (os.path.join(d, name), os.path.join(d, name + ".err")):
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                text += f.read()
    return text


def entries(value):
    """The site entries of a list key (a list, or an object holding lists of them)."""
    if isinstance(value, list):
        return [e for e in value if isinstance(e, dict)]
    if isinstance(value, dict):
        return [e for v in value.values() if isinstance(v, list) for e in v if isinstance(e, dict)]
    return []


def sites(j):
    """Every site entry of the lists checked, with the list's name."""
    return [(key, e) for key in SITE_LISTS if key in j for e in entries(j[key])]


def memsnap_frame(f):
    if "memsnap" in (f.get("short_name") or "").lower():
        return True
    if "memsnap" in os.path.basename(f.get("module") or "").lower():
        return True
    return f.get("kind") == "python" and MEMSNAP_PACKAGE.search(f.get("file") or "") is not None


def frame_text(f):
    where = os.path.basename(f.get("file") or f.get("module") or "")
    return "%s (%s%s)" % (f.get("short_name") or f.get("name"), where, ":%s" % f["line"] if f.get("line") else "")


def check_names(d):
    checked, bad, missing = 0, [], []
    for name in ANALYSES:
        try:
            j = load(d, name + ".json")
        except (OSError, ValueError) as e:
            missing.append("%s (%s)" % (name, type(e).__name__))
            continue
        for key, e in sites(j):
            stack = e.get("stack") or []
            if not stack:
                continue
            checked += 1
            if memsnap_frame(stack[0]):
                bad.append("%s %s: %s" % (name, key, frame_text(stack[0])))
    detail = "%d first frames in %d analyses, %d memsnap's" % (checked, len(ANALYSES) - len(missing), len(bad))
    if bad:
        detail += ": " + "; ".join(bad[:4]) + (" ..." if len(bad) > 4 else "")
    if missing:
        detail += "; no analysis: " + ", ".join(missing)
    return [("names", not bad and not missing and checked > 0, detail)]


def check_hook_leak(d):
    j = load(d, "gpt2_leak.json")
    leaks = j.get("leaks") or []
    first = leaks[0] if leaks else {}
    line = run_zoo.leak_line(run_zoo.Program("gpt2_leak", "gpt2_train.py"))
    named = line is not None and line in run_zoo.frames_text(first)
    per = first.get("bytes_per_iteration", 0)
    ok = first.get("kind") == "growing" and abs(per - HOOK_BYTES) <= 0.05 * HOOK_BYTES and named
    top = (first.get("stack") or [{}])[0]
    return [("hook leak", ok, "first of %d: %s %.2f MiB/iteration (expected %.2f within 5%%), %s %s; named %s" % (
        len(leaks), first.get("kind"), per / MiB, HOOK_BYTES / MiB, line, "in its stack" if named else "NOT in its stack",
        frame_text(top) if top else "-"))]


def check_no_false_leak(d):
    j = load(d, "gpt2.json")
    leaks = j.get("leaks") or []
    growing = [e for e in leaks if e.get("kind") in ("growing", "growing_released")]
    held = len(entries(j["held"])) if "held" in j else None
    return [("no false leak", not growing, "leak-free GPT-2: %d candidates, %d growing%s%s" % (
        len(leaks), len(growing), "" if held is None else ", %d held listed apart" % held,
        ": " + frame_text((growing[0].get("stack") or [{}])[0]) if growing else ""))]


def bucket_sites(j):
    """DDP's bucket sites of an analysis: {stack_id or frames: entry}."""
    found = {}
    for _, e in sites(j):
        frames = e.get("full_stack") or e.get("stack") or []
        if any(DDP_BUCKETS.search((f.get("name") or "") + " " + (f.get("short_name") or "")) for f in frames):
            found.setdefault(e.get("stack_id") or run_zoo.frames_text(e), e)
    return found


def check_ddp(d):
    m = re.search(r"^parameter_bytes (\d+)", output(d, "ddp.log"), re.M)
    expected = int(m.group(1)) if m else None
    rows, described, ok_buckets = [], [], True
    for rank in (0, 1):
        name = "ddp-r%d" % rank
        try:
            j = load(d, name + ".json")
        except (OSError, ValueError) as e:
            rows.append(("ddp gradient r%d" % rank, False, "no analysis (%s)" % type(e).__name__))
            ok_buckets = False
            described.append("r%d: no analysis" % rank)
            continue
        grad = j.get("categories_at_peak", {}).get("gradient", 0)
        rows.append(("ddp gradient r%d" % rank, expected is not None and grad >= expected,
                     "gradient %.1f MiB at the peak (%.1f MiB), parameters %s" % (
                         grad / MiB, j.get("summary", {}).get("peak_allocated_bytes", 0) / MiB,
                         "%.1f MiB" % (expected / MiB) if expected else "not printed by the program")))
        found = bucket_sites(j)
        cats = ["%s (holds %s) %.1f MiB" % (e.get("category"), e.get("held_category", "-"),
                                            (e.get("live_bytes") or e.get("allocated_bytes") or 0) / MiB)
                for e in found.values()]
        ok_buckets &= bool(found) and all("activation" not in (e.get("category"), e.get("held_category")) for e in found.values())
        described.append("r%d: %s" % (rank, "; ".join(cats) if cats else "no bucket site found"))
    rows.append(("ddp buckets", ok_buckets, "bucket sites: " + " | ".join(described)))
    return rows


def check_scaler(d):
    j = load(d, "cnn_amp.json")
    its = j.get("iterations") or []
    skipped = sum(1 for it in its if it.get("skipped") is True)
    m = re.search(r"^skipped steps (\d+) of (\d+)", output(d, "cnn_amp.log"), re.M)
    printed = int(m.group(1)) if m else None
    s = j.get("summary", {})
    detail = "%d iterations (expected %d), %d marked skipped, the program skipped %s; backward_passes %s, " \
             "optimizer_steps %s%s" % (len(its), SCALER_STEPS, skipped, printed, s.get("backward_passes"),
                                       s.get("optimizer_steps"),
                                       ", summary.iterations %s" % s["iterations"] if "iterations" in s else "")
    if printed == 0:
        return [("grad scaler", None, detail + ": the scaler skipped none, so nothing shows (not a verdict)")]
    ok = len(its) == SCALER_STEPS and s.get("iterations", SCALER_STEPS) == SCALER_STEPS and skipped == printed
    return [("grad scaler", ok, detail)]


def check_memtracker(d):
    return compare.compare(load(d, "gpt2.json"), load(d, "memtracker.json"), out=io.StringIO())


def check_cost(d):
    c = load(d, "cost.json")
    n, m, r = c["native"], c["memsnap"], c.get("ratio")
    if r is None:
        return [("cost", False, "no ratio: %s" % "; ".join(c.get("failures") or ["no times"])[-300:])]
    spread = max(n["spread"], m["spread"])
    detail = "memsnap %.2f ms / native %.2f ms = %.4f (%+.2f%%); spread native %.2f%%, memsnap %.2f%% (%d rounds)%s%s" % (
        m["median_s"] * 1e3, n["median_s"] * 1e3, r, 100 * (r - 1), 100 * n["spread"], 100 * m["spread"], c.get("rounds", 0),
        "; the 1% goal is below the spread" if spread > COST_GOAL else "", "; " + c["note"] if c.get("note") else "")
    return [("cost", r <= 1 + COST_GOAL and not c.get("failures"), detail)]


def check_parts(d):
    bad = []
    for path in sorted(glob.glob(os.path.join(d, "*.rc"))):
        part = os.path.basename(path)[:-3]
        with open(path) as f:
            rc = f.read().strip()
        if rc != "0" and part != "compare.txt":
            bad.append("%s exit %s" % (part, rc))
    return [("parts", not bad, "; ".join(bad) or "every part exited 0")]


CHECKS = [check_parts, check_names, check_hook_leak, check_no_false_leak, check_ddp, check_scaler, check_memtracker, check_cost]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: checks.py DIR")
    d = sys.argv[1]
    rows = []
    for check in CHECKS:
        try:
            rows += check(d)
        except Exception as e:  # noqa: BLE001 - one check's missing file must not hide the others
            rows.append((check.__name__[len("check_"):].replace("_", " "), False, "%s: %s" % (type(e).__name__, e)))
    print("%-26s %-6s %s" % ("check", "", "figures"))
    for name, ok, detail in rows:
        detail = " | ".join(line.strip() for line in detail.splitlines())
        print("%-26s %-6s %s" % (name, "PASS" if ok else "skip" if ok is None else "FAIL", detail))
    failed = sum(ok is False for _, ok, _ in rows)
    print("%d passed, %d failed" % (sum(ok is True for _, ok, _ in rows), failed))
    sys.exit(min(failed, 125))


if __name__ == "__main__":
    main()
