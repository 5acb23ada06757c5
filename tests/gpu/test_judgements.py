"""test_judgements.py: the GPU scripts' verdicts, checked without a GPU on the raw results of
earlier GPU runs (tests/gpu/results/) and on models of the runs they would make.

The GPU scripts themselves run only on the lent GPU machine, but what they conclude from what
they measured is plain logic, and a wrong conclusion there passes or fails a whole issue:
  - run_test_cuda.py's --same-history (same_history()): whether a test that passes natively and
    not under memsnap fails natively too after the tests memsnap's process ran before it. Its GPU
    runs are replaced by a model of runs 53 to 55 (docs/BENCHMARKS.md): natively,
    test_get_per_process_memory_fraction errors when no fraction was set, test_graph_record_stream
    errors and breaks the graph tests after it, and test_max_split_expandable runs out of memory
    after test_matmul_memory_use passed;
  - run_zoo.py's checks: torch.profiler's range for activations, DDP's peaks rule both ways,
    gpt2_compile's layout rule, on runs 52, 56 and 57's raw results.

Also run_test_cuda.py's --list (the selection as the test file itself lists it), on a stand-in
torch and test file.

usage: python3 tests/gpu/test_judgements.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
sys.path.insert(0, os.path.join(here, "pytorch_suite"))
sys.path.insert(0, os.path.join(here, "zoo"))
from checks import check, finish  # noqa: E402
import run_test_cuda  # noqa: E402
import run_zoo  # noqa: E402

RESULTS = os.path.join(here, "results")
MiB = 1 << 20
TARGET = "TestCudaMallocAsync.test_max_split_expandable"


def load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)


# --- run_test_cuda.py --list: the selection, listed by the file itself ------------------------
# A stand-in torch (common_utils.run_tests is unittest.main, as PyTorch's calls it) and a test file
# of three classes: --list must give the tests the -k patterns select, in unittest.main's order.

stand_in = tempfile.mkdtemp(prefix="judgements-")
for name, text in {"torch/__init__.py": "", "torch/testing/__init__.py": "", "torch/testing/_internal/__init__.py": "",
                   "torch/testing/_internal/common_utils.py": "import unittest\n\ndef run_tests():\n    unittest.main()\n",
                   "test_cuda.py": "import unittest\nfrom torch.testing._internal.common_utils import run_tests\n\n\n"
                   "class TestCuda(unittest.TestCase):\n    def test_memory_stats(self): pass\n"
                   "    def test_matmul(self): pass\n    def test_caching_pinned(self): pass\n\n\n"
                   "class TestCudaMallocAsync(unittest.TestCase):\n    def test_max_split_expandable(self): pass\n\n\n"
                   "class TestOther(unittest.TestCase):\n    def test_nothing(self): pass\n\n\n"
                   "if __name__ == '__main__':\n    run_tests()\n"}.items():
    os.makedirs(os.path.dirname(os.path.join(stand_in, name)), exist_ok=True)
    with open(os.path.join(stand_in, name), "w") as f:
        f.write(text)
listing = subprocess.run([sys.executable, run_test_cuda.__file__, os.path.join(stand_in, "test_cuda.py"), "--list"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=stand_in), timeout=60)
listed = [line[5:] for line in listing.stdout.splitlines() if line.startswith("TEST ")]
check("--list: the selection's tests, in unittest.main's order",
      listed == ["TestCuda.test_caching_pinned", "TestCuda.test_memory_stats", "TestCudaMallocAsync.test_max_split_expandable"],
      "%r (exit %d) %s" % (listed, listing.returncode, listing.stderr[-500:]))
listing = subprocess.run([sys.executable, run_test_cuda.__file__, os.path.join(stand_in, "test_cuda.py"), "--list", "-k", "matmul"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=stand_in), timeout=60)
check("--list -k: that pattern only", [line[5:] for line in listing.stdout.splitlines() if line.startswith("TEST ")] ==
      ["TestCuda.test_matmul"], listing.stdout[-500:] + listing.stderr[-500:])
shutil.rmtree(stand_in)

# --- run_test_cuda.py --same-history ---------------------------------------------------------

memsnap = load("run51-test_cuda-async-memsnap.json")["async"]["memsnap"]["results"]
native = load("run46-test_cuda-async.json")["async"]["native"]["results"]
res = {"native": {"results": native}, "memsnap": {"results": memsnap}}


class Args:
    history_timeout = 10

    def __init__(self):
        self.history_deadline = time.time() + 60


def model(variant):
    """A stand-in for in_order() (one GPU run): runs 53 to 55 as a model; variant changes one thing."""
    calls = []

    def in_order(args, setting, side, helpers, gpu, tests, target, tag):
        calls.append((side, list(tests)))
        rows, broken = [], False
        for t in tests:
            if variant == "crash" and side == "native" and t == "TestCuda.test_memory_allocation":
                return {"rows": rows, "incomplete": True}  # the process died in it
            if side == "native" and t == "TestCuda.test_get_per_process_memory_fraction":
                rows.append({"test": t, "result": "ERROR", "exceptions": ["ValueError"]})
            elif side == "native" and t == "TestCuda.test_graph_record_stream":
                rows.append({"test": t, "result": "ERROR", "exceptions": ["torch.AcceleratorError"]})
                broken = True
            elif side == "native" and broken and any(k in t for k in ("graph", "matmul", "autocast")):
                rows.append({"test": t, "result": "ERROR", "exceptions": ["RuntimeError"]})
            else:
                r = memsnap.get(t, "ok")
                rows.append({"test": t, "result": r if r in run_test_cuda.OKISH else "FAIL", "exceptions": ["AssertionError"]})
        leftovers = any(r["test"] == "TestCuda.test_matmul_memory_use" and r["result"] == "ok" for r in rows)
        if variant == "skipped":
            rows.append({"test": target, "result": "skipped"})
        elif not leftovers or (variant == "memsnap passes" and side == "memsnap"):
            rows.append({"test": target, "result": "ok"})
        else:
            exceptions = ["torch.OutOfMemoryError"]
            if variant == "finally" and side == "native":  # the test's finally raises after the OOM
                exceptions.append("ValueError")
            if variant == "other error" and side == "memsnap":
                exceptions = ["AssertionError"]
            rows.append({"test": target, "result": "ERROR", "exceptions": exceptions})
        return {"rows": rows}
    return in_order, calls


real_in_order = run_test_cuda.in_order
try:
    run_test_cuda.in_order, calls = model("plain")
    verdict, detail = run_test_cuda.same_history(Args(), "async", TARGET, res, None, None)
    check("same history: the OOM natively too after memsnap's history is 'history'", verdict == "history", detail)
    check("same history: three native rounds, then memsnap's, on the same tests",
          [c[0] for c in calls] == ["native", "native", "native", "memsnap"] and calls[-1][1] == calls[-2][1], str(calls))
    left = set(calls[0][1]) - set(calls[-1][1])
    check("same history: what is left out failed natively only, one a round",
          left == {"TestCuda.test_get_per_process_memory_fraction", "TestCuda.test_graph_record_stream"}, str(left))
    check("same history: the history is memsnap's tests before the test, without skipped and natively crashed ones",
          all(memsnap[t] != "skipped" and not native.get(t, "").startswith("crashed") for t in calls[0][1]) and
          TARGET not in calls[0][1] and
          list(memsnap).index(calls[0][1][-1]) < list(memsnap).index(TARGET), str(calls[0][1][-3:]))
    check("same history: its detail names what was left out", "test_graph_record_stream" in detail, detail)

    for variant, want in (("finally", "history"), ("crash", "history"), ("skipped", "differs"),
                          ("other error", "differs"), ("memsnap passes", "differs")):
        run_test_cuda.in_order, calls = model(variant)
        verdict, detail = run_test_cuda.same_history(Args(), "async", TARGET, res, None, None)
        check("same history, %s: %s" % (variant, want), verdict == want, "%s: %s" % (verdict, detail))

    run_test_cuda.in_order, calls = model("plain")
    spent = Args()
    spent.history_deadline = time.time() - 1
    verdict, detail = run_test_cuda.same_history(spent, "async", TARGET, res, None, None)
    check("same history: nothing decided once the budget is spent", verdict == "differs" and not calls and "budget" in detail,
          detail)
    verdict, detail = run_test_cuda.same_history(Args(), "async", "TestCuda.test_not_in_the_run", res, None, None)
    check("same history: a test memsnap never ran differs", verdict == "differs" and "not run" in detail, detail)

    def nothing(*a):
        return None
    run_test_cuda.in_order = nothing
    verdict, detail = run_test_cuda.same_history(Args(), "async", TARGET, res, None, None)
    check("same history: a run that gives nothing differs", verdict == "differs", detail)
finally:
    run_test_cuda.in_order = real_in_order

# --- run_zoo.py's checks -----------------------------------------------------------------------

profile = [json.loads(line) for line in open(os.path.join(RESULTS, "run52-zoo-profile.jsonl"))]
ctx = {"profiler": next(p["profiler"] for p in profile if p["program"] == "gpt2_eager")}
if isinstance(ctx["profiler"], str):  # older results kept the dict's repr
    import ast
    ctx["profiler"] = ast.literal_eval(ctx["profiler"])
peak = 6691247616
activation = run_zoo.profiler("activation")
expected = activation(ctx)
check("profiler: activations with 3.7 GiB unknown are a range", isinstance(expected, tuple) and
      expected[0] == 151027712 + 4096 and expected[1] == expected[0] + 3898115584, str(expected))
for v, want in ((3797.1 * MiB, True), (0, False), (expected[1] + 0.02 * peak, False)):
    ok, detail = run_zoo.category_check(v, expected, 0.10, activation.slack * peak)
    check("profiler: activation %.1f MiB %s" % (v / MiB, "inside the range" if want else "outside it"), ok == want, detail)
known = dict(ctx["profiler"], at_peak=dict(ctx["profiler"]["at_peak"], unknown=0))
check("profiler: with nothing unknown, activations are one value", activation({"profiler": known}) == 151027712 + 4096)
autograd = run_zoo.profiler("autograd_detail")
check("profiler: autograd against AUTOGRAD_DETAIL, within its tolerance only",
      run_zoo.category_check(1648361472, autograd(ctx), 0.10, 0)[0] and
      not run_zoo.category_check(1648361472 * 1.2, autograd(ctx), 0.10, 0)[0])

programs = {p.name: p for p in run_zoo.ZOO}
runs = [json.loads(line) for line in open(os.path.join(RESULTS, "run56-zoo-two-gpus.jsonl"))]


def peaks(program, native, memsnap, parameters):
    nat = {"rc": 0, "out": "", "reports": native}
    rec = {"rc": 0, "out": "", "reports": memsnap, "dbs": []}
    res = run_zoo.check_run(programs[program], False, nat, rec, {"parameters": parameters}, None)
    return next(r for r in res if r[0] == "peaks")


for program in ("ddp", "gpt2_compile"):
    d = next(r for r in runs if r["program"] == program and not r["leak"])
    name, ok, detail = peaks(program, d["native_reports"], d["memsnap_reports"], d.get("parameters") or 0)
    check("peaks: run 56's %s within its rule" % program, ok, detail)
ddp = next(r for r in runs if r["program"] == "ddp" and not r["leak"])
far = json.loads(json.dumps(ddp["memsnap_reports"]))
far["0"]["devices"]["0"]["peak_allocated"] -= 4 * ddp["parameters"] + 1
check("peaks: DDP more than one gradients' copy apart fails", not peaks("ddp", ddp["native_reports"], far, ddp["parameters"])[1])
compile_run = next(r for r in runs if r["program"] == "gpt2_compile" and not r["leak"])
far = json.loads(json.dumps(compile_run["memsnap_reports"]))
far["0"]["devices"]["0"]["peak_allocated"] += 3 * MiB
check("peaks: gpt2_compile 3 MiB apart fails", not peaks("gpt2_compile", compile_run["native_reports"], far, 0)[1])
exact = next(r for r in runs if r["program"] == "two_linear_adamw" and not r["leak"])
off = json.loads(json.dumps(exact["memsnap_reports"]))
off["0"]["devices"]["0"]["peak_allocated"] += 512
check("peaks: an exact program 512 B apart fails", not peaks("two_linear_adamw", exact["native_reports"], off, 0)[1])
finish()
