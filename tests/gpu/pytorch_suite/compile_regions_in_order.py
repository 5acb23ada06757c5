"""compile_regions_in_order.py: why TestCudaMallocAsync.test_memory_compile_regions fails under
memsnap in the whole selection's order and passes alone (issue 36; docs/BENCHMARKS.md, run 39).

Runs, in one process and in unittest.main's order, the tests of PyTorch's test_cuda.py that the
issue's selection runs before test_memory_compile_regions, then that test, and prints what the
test compared: every snapshot it took is kept (torch.cuda.memory._snapshot wrapped, the test file
untouched), and the last one's trace is printed as the test reads it (the compile regions, "N/A"
left out and repeats merged) and entry by entry (action, region, size). Also says whether the test
passed through its `except RuntimeError: pass`, which hides an error as a pass.

usage: compile_regions_in_order.py PATH/test_cuda.py [--class-only]
  (natively; under memsnap: memsnap run -q -o DB -- python3 compile_regions_in_order.py ...)
--class-only runs the tests of TestCudaMallocAsync only (a shorter prefix, to narrow the cause).
Prints one line "REGIONS {json}" last.
"""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_test_cuda import load_selection  # noqa: E402

TARGET = "TestCudaMallocAsync.test_memory_compile_regions"


def main():
    path = sys.argv[1]
    class_only = "--class-only" in sys.argv

    # what unittest.main would run, taken from the file and run here in two parts
    selection = load_selection(path)
    import torch
    tests = []
    for name, t in selection:
        if class_only and not name.startswith("TestCudaMallocAsync."):
            continue
        tests.append((name, t))
        if name == TARGET:
            break
    snaps = []
    real = torch.cuda.memory._snapshot

    def keeping(*a, **k):
        s = real(*a, **k)
        snaps.append(s)
        return s

    errors = []
    real_record = torch.cuda.memory._record_memory_history

    def record(*a, **k):
        try:
            return real_record(*a, **k)
        except RuntimeError as e:
            errors.append("_record_memory_history: %s" % e)
            raise

    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(unittest.TestSuite([t for _, t in tests[:-1]]))
    before = (result.testsRun, len(result.failures), len(result.errors))
    torch.cuda.memory._snapshot = keeping
    torch.cuda.memory._record_memory_history = record
    last = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(unittest.TestSuite([tests[-1][1]]))
    torch.cuda.memory._snapshot, torch.cuda.memory._record_memory_history = real, real_record
    out = {"tests_before": before[0], "failed_before": before[1] + before[2], "target": tests[-1][0],
           "passed": last.wasSuccessful(), "snapshots_taken": len(snaps), "errors": errors}
    if snaps:
        traces = snaps[-1]["device_traces"]
        idx = next((i for i, t in enumerate(traces) if t), None)
        seq, entries = [], []
        for e in traces[idx] if idx is not None else []:
            c = e.get("compile_context", "?")
            entries.append([e["action"], c, e["size"]])
            if c != "N/A" and (not seq or seq[-1] != c):
                seq.append(c)
        out.update(device=idx, sequence=seq, entries=entries[:200], n_entries=len(entries))
    else:
        out["note"] = "no snapshot taken: the test left through its `except RuntimeError` before (a hidden error)"
    print("REGIONS " + json.dumps(out))


if __name__ == "__main__":
    main()
