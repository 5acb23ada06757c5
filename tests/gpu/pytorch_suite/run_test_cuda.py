"""run_test_cuda.py: PyTorch's own allocator tests natively and under `memsnap run`, and the tests
whose results differ (issue 36; docs/BENCHMARKS.md, "PyTorch's allocator tests").

PyTorch's test/test_cuda.py is the specification of its allocator's behaviour. This script
fetches nothing and edits nothing: it takes the path of a test_cuda.py (a checkout's, or the copy
a session was given), runs the allocator-related selection (SELECTION) once natively and once
under `memsnap run` in its default mode, for each allocator setting asked (default, expandable
segments, the cudaMallocAsync backend), and prints, per setting, how many passed on each side and
every test whose result differs.

The file may be newer than the installed PyTorch. Two things it needs are provided beside it,
never by editing it: `expecttest` (absent on the GPU machine: a stand-in module with the
TestCase that common_utils imports), and common_utils.TEST_CUDAMALLOCASYNC where the installed
common_utils lacks it (defined as newer PyTorch defines it: the backend is cudaMallocAsync, here
read from PYTORCH_CUDA_ALLOC_CONF so that both sides see the same value).

A test that kills its process (an abort, a segfault: natively, the async backend does on this
machine), or one that leaves CUDA in an error state (common_utils then stops the suite), would
leave the tests after it unrun. Then the side goes on in a new process with the selected tests
that have no result yet, named one by one (the selection is listed by the file itself run with
the same arguments, unittest's runTests replaced: load_selection(), run by --list), as PyTorch's CI goes on
after such a test; a test that killed the process is reported as `crashed (signal N)`. Both sides
are handled alike.

usage (from the repository root, build/ prepared with tests/gpu/prepare.sh):
  python3 tests/gpu/pytorch_suite/run_test_cuda.py PATH/test_cuda.py [--settings default,expandable,async]
          [--sides native,memsnap] [--timeout SECONDS] [--memsnap build/memsnap] [--jobs N]
          [--gpus 0,1] [-k PATTERN ...] [--against EARLIER/test_cuda.json] [--analyze] [--same-history]
  python3 tests/gpu/pytorch_suite/run_test_cuda.py PATH/test_cuda.py --list [-k PATTERN ...]
--gpus spreads the runs over GPUs (run i on the i-th GPU listed, round robin; with --jobs 2 the
two sides of a setting run at once, each alone on its GPU). --against takes the sides this run
lacks from an earlier run's test_cuda.json (a side may take a GPU call of its own: SIDES in
suite.sh), so that a run of one side still names the tests that differ; without it a run of one
side compares nothing and says so. --analyze keeps what `memsnap analyze` says of each snapshot
the memsnap side wrote ($OUT/test_cuda-SETTING-memsnap-PID.txt: its out-of-memory errors, what was
live then and at the peak), and deletes the snapshots.
--same-history re-checks each test that passes natively and not under memsnap: a side's process
runs a test after the tests before it, and where native failed one that memsnap passed (its
backend left a capture broken, say), native's process went on with other state. The test is run
again on both sides in one process after the tests memsnap's process ran before it
(memory_in_order.py), leaving out, one a round, the first that fails natively only; when it then
fails natively too, with the same exception as under memsnap, it is reported and counted apart
(same_history(); docs/BENCHMARKS.md, runs 51 to 55, found test_max_split_expandable so by hand).
Writes $OUT/test_cuda-SETTING-SIDE.log (the test output) and $OUT/test_cuda.json (every test's
result on each side); exit status 1 when a test that passes natively does not under memsnap.
"""
import argparse
import concurrent.futures
import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

# The selection: unittest's -k patterns (a test runs when its name matches any).
SELECTION = ["memory", "alloc", "snapshot", "oom", "cach", "mempool", "mem_pool", "expandable", "fraction",
             "record_stream", "empty_cache", "graph_memory", "graph_rng", "cuda_graph_", "graph_capture", "stats"]
SETTINGS = {"default": "", "expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}

EXPECTTEST = '''"""A stand-in for the expecttest package (absent here): what common_utils imports."""
import unittest


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertEqual(str(actual).strip(), str(expect).strip())

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        with self.assertRaises(exc_type) as cm:
            callable(*args, **kwargs)
        self.assertExpectedInline(str(cm.exception), expect)
'''

RUNNER = '''"""Runs a test_cuda.py as __main__ with what a newer file needs of common_utils."""
import os
import runpy
import sys

import torch.testing._internal.common_utils as common_utils

if not hasattr(common_utils, "TEST_CUDAMALLOCASYNC"):
    common_utils.TEST_CUDAMALLOCASYNC = "backend:cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
path = sys.argv[1]
sys.argv = [path] + sys.argv[2:]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
runpy.run_path(path, run_name="__main__")
'''


def walk_suite(suite):
    """The test cases of a unittest suite, nested suites flattened, in order."""
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from walk_suite(t)
        else:
            yield t


def load_selection(path, patterns=SELECTION):
    """The tests of the test_cuda.py at path that the -k patterns select, loaded into this process
    (to be run here by the in-process diagnostics, compile_regions_in_order.py and
    memory_in_order.py, or listed by --list for the runner), in unittest.main's order:
    [("Class.test", TestCase)]. The file runs as __main__ with those patterns, as the runner runs
    it, with unittest's runTests replaced; expecttest's stand-in and
    common_utils.TEST_CUDAMALLOCASYNC are given as for the runner. Imports torch. Raises what the
    file raised when it gave no suite."""
    try:
        import expecttest  # noqa: F401
    except ImportError:  # absent on the GPU machine
        helpers = tempfile.mkdtemp(prefix="expecttest-")
        with open(os.path.join(helpers, "expecttest.py"), "w") as f:
            f.write(EXPECTTEST)
        sys.path.insert(0, helpers)
    import torch.testing._internal.common_utils as common_utils

    if not hasattr(common_utils, "TEST_CUDAMALLOCASYNC"):
        common_utils.TEST_CUDAMALLOCASYNC = "backend:cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    chosen = {}

    def take(program):
        chosen["suite"] = program.test

    unittest.TestProgram.runTests = take
    sys.argv = [path, "-v"] + [a for k in patterns for a in ("-k", k)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
    except (Exception, SystemExit) as e:  # what run_tests does after unittest.main returns
        if "suite" not in chosen:
            raise
        print("(after the listing: %r)" % (e,))
    return [(".".join(t.id().split(".")[-2:]), t) for t in walk_suite(chosen["suite"])]


START = re.compile(r"^(test\w*) \(([\w.]+)\)")
STATUS = re.compile(r"\.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)\b")
LINE_STATUS = re.compile(r"^(ok|FAIL|ERROR|skipped|expected failure|unexpected success)\b")


def parse(text):
    """unittest -v output into {"Class.test": status}; a test that started and never finished is
    'did not finish' (a crash or the time limit)."""
    results, current = {}, None
    for line in text.splitlines():
        m = START.match(line)
        if m:
            # "(__main__.TestCuda.test_x)" (Python 3.11+) or "(__main__.TestCuda)": the class
            parts = m.group(2).split(".")
            cls = parts[-2] if len(parts) > 1 and parts[-1] == m.group(1) else parts[-1]
            current = "%s.%s" % (cls, m.group(1))
            results[current] = "did not finish"
            s = STATUS.search(line)
            if s:
                results[current], current = s.group(1), None
            continue
        if current:
            s = STATUS.search(line) or LINE_STATUS.match(line)
            if s:
                results[current], current = s.group(1), None
    return results


def side_env(args, setting, helpers, gpu):
    env = dict(os.environ)
    env["PYTHONPATH"] = helpers + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if SETTINGS[setting]:
        env["PYTORCH_CUDA_ALLOC_CONF"] = SETTINGS[setting]
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def collect(args, env, helpers):
    """The selected tests in unittest.main's order, listed natively; [] when the listing fails."""
    cmd = [sys.executable, os.path.abspath(__file__), args.test_file, "--list"]
    for k in args.k or SELECTION:
        cmd += ["-k", k]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    return [line[5:] for line in p.stdout.splitlines() if line.startswith("TEST ")]


def run_side(args, setting, side, helpers, gpu=None):
    """One side of one setting: the test file run over the selection, and after a test that kills
    the process, again over the selected tests not yet run. Returns ({test: status}, exit status
    of the first process, seconds)."""
    env = side_env(args, setting, helpers, gpu)
    t = time.time()
    results, first_rc, names, log, everything, procs, nproc = {}, None, None, [], None, {}, 0
    while True:
        nproc += 1
        cmd = [sys.executable, os.path.join(helpers, "run_test_file.py"), args.test_file, "-v"]
        if names is None:
            for k in args.k or SELECTION:
                cmd += ["-k", k]
        else:
            cmd += names
        if side == "memsnap":
            dbdir = tempfile.mkdtemp(prefix="test_cuda-")
            cmd = [args.memsnap, "run", "-q", "-o", os.path.join(dbdir, "test_cuda-%p.db"), "--"] + cmd
        left = args.timeout - (time.time() - t)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=max(1, left))
            text, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:  # what it wrote so far (bytes or str, whichever)
            text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x for x in (e.stdout, e.stderr) if x)
            rc = 124
        log.append("$ %s\n%s\n[exit %d]\n" % (" ".join(cmd), text, rc))
        if side == "memsnap" and args.analyze:
            analyze_snapshots(args, setting, dbdir)
        with open(os.path.join(args.out, "test_cuda-%s-%s.log" % (setting, side)), "w") as f:
            f.write("".join(log))  # so far: a run stopped from outside still leaves it
        first_rc = rc if first_rc is None else first_rc
        got = parse(text)
        crashed = [n for n, r in got.items() if r == "did not finish"]
        if rc != 124:
            for n in crashed:
                got[n] = "crashed (signal %d)" % -rc if rc < 0 else "crashed (exit %d)" % rc
        new = [n for n in got if n not in results]
        results.update(got)
        for n in new:
            procs[n] = nproc  # the process (1, 2, ...) that ran it: its history (same_history)
        if rc == 124 or not new:
            break
        # the process died inside a test, or the suite stopped itself (common_utils stops it when
        # CUDA is left in an error state): go on with the selected tests that have no result yet
        if everything is None:
            everything = collect(args, env, helpers)
        names = [n for n in everything if n not in results]
        if not names:
            break
        log.append("[%s; %d selected tests left, run by name]\n" % (
            ", ".join(crashed) + " crashed the process" if crashed else "the run stopped early", len(names)))
    with open(os.path.join(args.out, "test_cuda-%s-%s.log" % (setting, side)), "w") as f:
        f.write("".join(log) + "[%.0f s]\n" % (time.time() - t))
    return results, first_rc, time.time() - t, procs


OKISH = ("ok", "expected failure", "skipped")
HISTORY_ROUNDS = 6


def in_order(args, setting, side, helpers, gpu, tests, target, tag):
    """memory_in_order.py's run of `tests` then `target` in one process on one side: its MEMORDER
    record ({"rows": [{"test", "result", "why", "exceptions"...}]}); where the process died or ran
    out of time, {"rows": [...], "incomplete": True} with the tests it finished (its MEM lines);
    None when nothing came (the output is in $OUT either way)."""
    cmd = [sys.executable, os.path.join(HERE, "memory_in_order.py"), args.test_file, target, "--only", ",".join(tests) or ","]
    if side == "memsnap":
        dbdir = tempfile.mkdtemp(prefix="history-")
        cmd = [args.memsnap, "run", "-q", "-o", os.path.join(dbdir, "history-%p.db"), "--"] + cmd
    limit = max(1, min(args.history_timeout, args.history_deadline - time.time()))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=side_env(args, setting, helpers, gpu), timeout=limit)
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:  # what it wrote so far
        text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x for x in (e.stdout, e.stderr) if x)
        text += "\n[stopped after %.0f s]" % limit
    with open(os.path.join(args.out, "test_cuda-%s-history-%s-%s.txt" % (setting, tag, side)), "w") as f:
        f.write("$ %s\n%s" % (" ".join(cmd), text))
    if side == "memsnap":
        for name in os.listdir(dbdir):
            os.remove(os.path.join(dbdir, name))
    rows = []
    for line in text.splitlines():
        if line.startswith("MEMORDER "):
            d = json.loads(line[9:])
            return d if d.get("rows") else None
        if line.startswith("MEM "):  # "MEM <test> <result> allocated=..."
            parts = line.split()
            rows.append({"test": parts[1], "result": parts[2].replace("_", " ")})
    return {"rows": rows, "incomplete": True} if rows else None


def failed_with(row, types):
    """Whether row failed (FAIL or ERROR) with an exception of one of these types."""
    return row.get("result") in ("FAIL", "ERROR") and bool(set(row.get("exceptions") or []) & set(types))


def same_history(args, setting, test, res, helpers, gpu):
    """Whether `test`, which passed natively and not under memsnap, fails natively too after the
    tests memsnap's process ran before it: ("history", detail) when it then fails on both sides with
    the same exception, else ("differs", detail).

    The two sides' processes ran different histories where native failed a test memsnap passed (a
    capture its backend left broken, say): from there on native's process held other state. So the
    history is memsnap's (the tests its process ran before `test`, skipped ones and those that
    crashed natively left out), and each round runs it natively; while `test` passes there, the
    first test of the history that failed natively and passed under memsnap is left out (both sides)
    and the round repeated. When `test` fails natively, memsnap runs the same history: the verdict
    is "history" only if `test` fails there with the same exception."""
    nat, mem = res["native"]["results"], res["memsnap"]["results"]
    if test not in mem:
        return "differs", "not run under memsnap"
    procs = res["memsnap"].get("process")
    order = list(mem)
    before = order[:order.index(test)]
    if procs:  # the tests of the process that ran it
        before = [t for t in before if procs.get(t) == procs.get(test)]
    else:  # an earlier run's JSON without processes: the tests since memsnap's last crash
        ends = [i for i, t in enumerate(before) if mem[t].startswith(("crashed", "did not finish"))]
        before = before[ends[-1] + 1:] if ends else before
    history = [t for t in before if mem[t] != "skipped" and not mem[t].startswith(("crashed", "did not finish"))
               and not nat.get(t, "").startswith("crashed")]
    left_out, tag = [], test.split(".")[-1]
    for rnd in range(1, HISTORY_ROUNDS + 1):
        if time.time() >= args.history_deadline:
            return "differs", "not decided: --history-budget spent (round %d)" % rnd
        n = in_order(args, setting, "native", helpers, gpu, history, test, "%s-%d" % (tag, rnd))
        if n is None:
            return "differs", "the same-history run gave nothing natively (round %d; its output in $OUT)" % rnd
        if n.get("incomplete"):  # a test of the history killed native's process: leave it out, go on
            done = {r["test"] for r in n["rows"]}
            dead = next((t for t in history if t not in done), None)
            if dead is None:
                return "differs", "the test itself did not finish natively after the same %d tests" % len(history)
            history.remove(dead)
            left_out.append(dead + " (killed native's process)")
            continue
        rows = {r["test"]: r for r in n["rows"]}
        last = n["rows"][-1]
        if last["result"] in ("FAIL", "ERROR"):
            m = in_order(args, setting, "memsnap", helpers, gpu, history, test, "%s-%d" % (tag, rnd))
            mlast = (m or {}).get("rows", [{}])[-1] if m and not m.get("incomplete") else {}
            # the same exception: memsnap's, found in native's chain (a `finally` may raise another after it)
            if mlast.get("test") == test and mlast.get("exceptions") and failed_with(last, mlast["exceptions"][-1:]):
                return "history", ("fails natively too (%s) after the same %d tests memsnap's process ran before it%s" % (
                    mlast["exceptions"][-1], len(history), "; left out on both sides, as they failed natively only: " +
                    ", ".join(left_out) if left_out else ""))
            return "differs", "after the same %d tests: native %s (%s), memsnap %s (%s)" % (
                len(history), last["result"], ", ".join(last.get("exceptions") or []) or "-",
                mlast.get("result", "no result"), ", ".join(mlast.get("exceptions") or []) or "-")
        if last["result"] not in ("ok", "expected failure"):  # skipped natively: nothing to compare
            return "differs", "%s natively after the same %d tests" % (last["result"], len(history))
        native_only = [t for t in history if rows.get(t, {}).get("result", "ok") not in OKISH and mem.get(t) in OKISH]
        if not native_only:
            return "differs", "passes natively after the same %d tests memsnap's process ran before it" % len(history)
        history.remove(native_only[0])
        left_out.append(native_only[0])
    return "differs", "still passes natively after %d rounds (left out: %s)" % (HISTORY_ROUNDS, ", ".join(left_out))


def analyze_snapshots(args, setting, dbdir):
    """`memsnap analyze` of each snapshot in dbdir into $OUT (the text report), then deletes them."""
    for name in sorted(os.listdir(dbdir)):
        path = os.path.join(dbdir, name)
        if name.endswith(".db"):
            with open(os.path.join(args.out, "test_cuda-%s-memsnap-%s.txt" % (setting, name[len("test_cuda-"):-3])), "w") as f:
                try:
                    subprocess.run([args.memsnap, "analyze", "--no-suggest", path], stdout=f,
                                   stderr=subprocess.STDOUT, timeout=120)
                except subprocess.TimeoutExpired:
                    f.write("\n[memsnap analyze stopped after 120 s]\n")
        os.remove(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("test_file")
    ap.add_argument("--settings", default="default,expandable,async")
    ap.add_argument("--sides", default="native,memsnap")
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--memsnap", default=os.path.join(ROOT, "build", "memsnap"))
    ap.add_argument("-k", action="append")
    ap.add_argument("--list", action="store_true",
                    help="print the tests the -k patterns select, 'TEST Class.test' a line, in unittest.main's order, and stop")
    ap.add_argument("--jobs", type=int, default=1, help="runs of (setting, side) at once")
    ap.add_argument("--gpus", default="", help="GPUs to spread the runs over (CUDA_VISIBLE_DEVICES values, comma-separated)")
    ap.add_argument("--against", default="", help="an earlier run's test_cuda.json: the sides this run lacks")
    ap.add_argument("--analyze", action="store_true", help="memsnap analyze's report of each snapshot of the memsnap side")
    ap.add_argument("--same-history", action="store_true",
                    help="re-run each test that passes natively and not under memsnap after memsnap's history on both sides")
    ap.add_argument("--history-timeout", type=int, default=240, help="seconds for each run of --same-history")
    ap.add_argument("--history-budget", type=int, default=900, help="seconds for all the runs of --same-history")
    args = ap.parse_args()
    if args.list:  # in a process of its own (collect()): the file, loaded, leaves torch imported
        for name, _ in load_selection(args.test_file, args.k or SELECTION):
            print("TEST " + name)
        return
    args.history_deadline = time.time() + args.history_budget  # from the start: the sides' time counts
    earlier = {}
    if args.against:
        try:
            with open(args.against) as f:
                earlier = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit("error: cannot read --against '%s': %s" % (args.against, e))
    args.out = os.environ.get("OUT") or tempfile.mkdtemp(prefix="test_cuda-")
    os.makedirs(args.out, exist_ok=True)
    if not os.path.isfile(args.test_file):
        sys.exit("error: no test file at '%s'" % args.test_file)
    helpers = tempfile.mkdtemp(prefix="test_cuda-helpers-")
    with open(os.path.join(helpers, "expecttest.py"), "w") as f:
        f.write(EXPECTTEST)
    with open(os.path.join(helpers, "run_test_file.py"), "w") as f:
        f.write(RUNNER)
    report, worse, compared, history_only = {}, 0, True, 0
    lines = []
    pairs = [(setting, side) for setting in args.settings.split(",") for side in args.sides.split(",")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        gpus = [g for g in args.gpus.split(",") if g]
        runs = dict(zip(pairs, pool.map(
            lambda ip: run_side(args, ip[1][0], ip[1][1], helpers, gpus[ip[0] % len(gpus)] if gpus else None),
            enumerate(pairs))))
    for setting in args.settings.split(","):
        res = {}
        for side in args.sides.split(","):
            results, rc, secs, procs = runs[(setting, side)]
            res[side] = {"results": results, "exit": rc, "seconds": round(secs), "process": procs}
        report[setting] = res
        taken = {side: dict(v, earlier=args.against) for side, v in earlier.get(setting, {}).items()
                 if side in ("native", "memsnap") and side not in res}
        res = dict(taken, **res)  # the earlier run's side first: native before memsnap
        sides = sorted(res, key=lambda x: x != "native")
        passed = {s: {t for t, r in res[s]["results"].items() if r in ("ok", "expected failure")} for s in sides}
        lines.append("%s: %s" % (setting, ", ".join("%s %d passed of %d ran (%d s, exit %d%s)" % (
            s, len(passed[s]), len(res[s]["results"]), res[s]["seconds"], res[s]["exit"],
            ", from %s" % res[s]["earlier"] if "earlier" in res[s] else "") for s in sides)))
        if len(sides) == 2:
            a, b = sides
            tests = sorted(set(res[a]["results"]) | set(res[b]["results"]))
            for t in tests:
                ra, rb = res[a]["results"].get(t, "not run"), res[b]["results"].get(t, "not run")
                if ra != rb:
                    lines.append("  %-70s %s: %-14s %s: %s" % (t, a, ra, b, rb))
            lost = sorted(passed[a] - passed[b])
            if args.same_history and a == "native" and lost:
                with open(os.path.join(args.out, "test_cuda.json"), "w") as f:  # kept should a re-check hang
                    json.dump(report, f, indent=1)
                print("\n".join(lines), flush=True)
                lines = []
                for t in list(lost):
                    verdict, detail = same_history(args, setting, t, res, helpers, gpus[0] if gpus else None)
                    lines.append("  %s: %s" % (t, detail))
                    report[setting].setdefault("same_history", {})[t] = {"verdict": verdict, "detail": detail}
                    if verdict == "history":
                        lost.remove(t)
                        history_only += 1
            worse += len(lost)
        else:
            lines.append("  one side only: nothing compared (--against an earlier run's test_cuda.json compares)")
            compared = False
    with open(os.path.join(args.out, "test_cuda.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("\n".join(lines))
    if compared:
        print("%d tests pass natively and not under memsnap%s" % (worse, (
            "; %d more fail natively too after the tests memsnap's process ran before them (--same-history)" %
            history_only) if history_only else ""))
    sys.exit(1 if worse else 0)


if __name__ == "__main__":
    main()
