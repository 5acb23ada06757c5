"""memory_in_order.py: what the tests before a test of PyTorch's test_cuda.py leave on the GPU, test
by test, in the selection's order and one process (issue 36; docs/BENCHMARKS.md, runs 53 to 55).

Written for TestCudaMallocAsync.test_max_split_expandable under the async backend: it caps the
process at its reserved bytes plus 120 MiB and allocates 120 MiB, so it fails when more bytes are
counted as allocated than the pool holds, e.g. graph memory (allocated during a capture, held by
CUDA's graph pool, not by the stream-ordered pool) still alive from an earlier test. Natively the
earlier tests of that order crash or fail (their process is then restarted), so the two sides ran
different histories; this script runs the same history on both.

Runs the selection's tests before TARGET in unittest.main's order (the file run as __main__ with
the suite's -k selection, unittest's runTests replaced), leaving out the ones --skip names and,
with --skip-crashed JSON, those that crashed natively in that earlier run_test_cuda.py result
(the same tests on both sides then); --only A,B runs those (in that order) and TARGET only. After each test: gc, synchronize, and one line
  MEM <test> <result> allocated=<MiB> reserved=<MiB> graph_used=<MiB> graph_reserved=<MiB>
(allocated and reserved as torch.cuda.memory_allocated/_reserved say; graph_* are CUDA's graph
memory attributes, read through the CUDA runtime PyTorch loaded; -1 where unreadable). Then
TARGET, and one line "MEMORDER {json}" last.

usage: memory_in_order.py PATH/test_cuda.py [TARGET] [--skip A,B] [--skip-crashed RESULTS.json] [--only A,B]
  natively, or under memsnap: memsnap run -q -o DB -- python3 memory_in_order.py ...
"""
import ctypes
import gc
import json
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_test_cuda import load_selection  # noqa: E402

MIB = 1024.0 * 1024.0


def graph_memory(device):
    """(used, reserved) bytes of CUDA's graph memory on device, or (-1, -1)."""
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return -1, -1
    out = []
    for attr in (0, 2):  # cudaGraphMemAttrUsedMemCurrent, cudaGraphMemAttrReservedMemCurrent
        v = ctypes.c_uint64(0)
        if rt.cudaDeviceGetGraphMemAttribute(ctypes.c_int(device), ctypes.c_int(attr), ctypes.byref(v)) != 0:
            return -1, -1
        out.append(v.value)
    return out[0], out[1]


EXCEPTION = re.compile(r"^([\w.]*(?:Error|Exception|Interrupt))\b(?!\s+raised from)")


def outcome(result):
    """(result, why, exceptions): why is the last exception line of a failed test's traceback,
    exceptions the types of every exception in it, in order (an error in a `finally` hides the one
    before it: "During handling of the above exception...")."""
    for kind, items in (("ERROR", result.errors), ("FAIL", result.failures), ("skipped", result.skipped),
                        ("expected failure", result.expectedFailures)):
        if items:
            text = items[0][1] if isinstance(items[0][1], str) else str(items[0][1])
            lines = [l for l in text.strip().splitlines() if l.strip()]
            said = [l for l in lines if EXCEPTION.match(l)]
            types = [EXCEPTION.match(l).group(1) for l in said]
            return kind, (said[-1] if said else (lines or [""])[0])[:300], types
    if result.unexpectedSuccesses:
        return "unexpected success", "", []
    return "ok", "", []


def main():
    args = sys.argv[1:]
    for flag in ("--skip", "--skip-crashed", "--only"):
        if flag in args and args.index(flag) + 1 >= len(args):
            sys.exit("usage: %s takes a value" % flag)
    if not args:
        sys.exit("usage: memory_in_order.py PATH/test_cuda.py [TARGET] [--skip A,B] [--skip-crashed RESULTS.json] [--only A,B]")
    path = args[0]
    target = args[1] if len(args) > 1 and not args[1].startswith("--") else "TestCudaMallocAsync.test_max_split_expandable"
    skip = set()
    if "--skip" in args:
        skip |= set(args[args.index("--skip") + 1].split(","))
    only = None
    if "--only" in args:  # these tests only (in the selection's order), then TARGET
        only = set(args[args.index("--only") + 1].split(",")) - {""}
    if "--skip-crashed" in args:
        earlier = json.load(open(args[args.index("--skip-crashed") + 1]))
        for setting in earlier.values():
            native = setting.get("native", {}).get("results", {})
            skip |= {t for t, r in native.items() if r.startswith("crashed")}

    selection = load_selection(path)
    import torch
    tests = []
    for name, t in selection:
        if name == target:
            tests.append((name, t))
            break
        if name not in skip and (only is None or name in only):
            tests.append((name, t))
    if not tests or tests[-1][0] != target:
        print("MEMORDER " + json.dumps({"error": "%s is not in the selection" % target}))
        return 2

    rows = []
    for name, t in tests:
        result = unittest.TestResult()
        t.run(result)
        status, why, exceptions = outcome(result)
        gc.collect()
        try:
            torch.cuda.synchronize()
        except Exception as e:  # a test that left CUDA in an error state: say so, go on
            why = why or repr(e)[:300]
        used, reserved = graph_memory(torch.cuda.current_device())
        row = {"test": name, "result": status, "allocated": torch.cuda.memory_allocated(),
               "reserved": torch.cuda.memory_reserved(), "graph_used": used, "graph_reserved": reserved}
        if status not in ("ok", "skipped"):
            row["why"], row["exceptions"] = why, exceptions
            items = result.errors or result.failures
            if items:  # the whole traceback: an error in a `finally` hides the one before it
                row["traceback"] = str(items[0][1])[-3000:]
        rows.append(row)
        print("MEM %s %s allocated=%.1f reserved=%.1f graph_used=%.1f graph_reserved=%.1f%s" % (
            name, status.replace(" ", "_"), row["allocated"] / MIB, row["reserved"] / MIB, used / MIB,
            reserved / MIB, ("  # " + why) if row.get("why") else ""), flush=True)
    print("MEMORDER " + json.dumps({"target": target, "passed": rows[-1]["result"] == "ok", "skipped": sorted(skip),
                                    "tests_before": len(rows) - 1, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
