"""record_compare.py: memsnap's recorder against PyTorch's own, on one GPU, in one run.

PyTorch's recorder is torch.cuda.memory._record_memory_history (native caching allocator);
memsnap's is memsnap.record() under memsnap.enable(). Every case runs in a child process (the
allocator is chosen before CUDA starts), cases alternate, and the parent prints a table:

  empty     `torch.empty(1024); del` loop, us per op: without recording, with python stacks, with
            all stacks (Python + native / C++); overhead = recording - not recording
  resnet    resnet50 batch-64 training step, ms, without and with recording (all stacks)
  dump      after 100,000 recorded entries: seconds to write the snapshot (PyTorch: _snapshot()
            plus pickle.dump, as _dump_snapshot does), and bytes per event of the file

usage: python3 record_compare.py [--reps N]
"""
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OUT = os.environ.get("OUT", "/tmp")


def start(torch_mode, stacks):
    """torch_mode: native or memsnap; stacks: None (no recording), python or all."""
    if torch_mode == "memsnap":
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        import torch
        if stacks:
            memsnap.record(max_entries=100000, stacks=stacks)
        return torch
    import torch
    torch.cuda.init()
    if stacks:
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks=stacks)
    return torch


def case_empty(mode, stacks):
    torch = start(mode, stacks)
    for _ in range(2000):
        x = torch.empty(1024, device="cuda")
        del x
    times = []
    n = 50000
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            x = torch.empty(1024, device="cuda")
            del x
        times.append((time.perf_counter() - t0) / n * 1e6)
    return {"us": statistics.median(times)}


def case_resnet(mode, stacks):
    torch = start(mode, stacks)
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / 20 * 1e3)
    return {"ms": statistics.median(times)}


def case_dump(mode, stacks):
    torch = start(mode, stacks)
    keep = []
    for i in range(40000):  # alloc + free_requested + free_completed: > 100,000 entries
        x = torch.empty(1024 + (i % 7) * 512, device="cuda")
        if i % 100 == 0:
            keep.append(x)
        del x
    torch.cuda.synchronize()
    if mode == "memsnap":
        import memsnap
        path = os.path.join(OUT, "record_compare.db")
        t0 = time.perf_counter()
        memsnap.dump(path)
        seconds = time.perf_counter() - t0
        import sqlite3
        events = sqlite3.connect(path).execute("select count(*) from events").fetchone()[0]
    else:
        path = os.path.join(OUT, "record_compare.pickle")
        t0 = time.perf_counter()
        snap = torch.cuda.memory._snapshot()
        with open(path, "wb") as f:
            pickle.dump(snap, f)
        seconds = time.perf_counter() - t0
        events = sum(len(t) for t in snap["device_traces"])
    size = os.path.getsize(path)
    return {"seconds": seconds, "events": events, "bytes": size, "bytes_per_event": size / max(events, 1)}


def child(argv):
    if hasattr(os, "sched_setaffinity"):  # one core for every case: the host's cores differ
        os.sched_setaffinity(0, {int(os.environ.get("BENCH_CPU", "5"))})
    case, mode, stacks = argv[0], argv[1], (None if argv[2] == "none" else argv[2])
    print("RESULT " + json.dumps(globals()["case_" + case](mode, stacks)))


def run(case, mode, stacks):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case, mode, stacks or "none"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, MEMSNAP_LIB=os.environ.get(
                           "MEMSNAP_LIB", os.path.join(ROOT, "build", "libmemsnap.so"))))
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (p.stderr or p.stdout)[-500:]}


def main(argv):
    if argv[1:2] == ["--child"]:
        child(argv[2:])
        return 0
    reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else 3
    r = {}
    cases = [("empty", m, s) for s in (None, "python", "all") for m in ("native", "memsnap")]
    cases += [("resnet", "native", None), ("resnet", "memsnap", "all"), ("resnet", "native", "all")]
    for _ in range(reps):
        for c in cases:
            r.setdefault(c, []).append(run(*c))
    for mode in ("native", "memsnap"):
        r[("dump", mode, "all")] = [run("dump", mode, "all")]
    with open(os.path.join(OUT, "record_compare.json"), "w") as f:
        json.dump({"|".join(str(x) for x in k): v for k, v in r.items()}, f, indent=1)

    def med(key, field):
        vals = [x[field] for x in r[key] if field in x]
        if not vals:
            print("error in %s: %s" % (key, r[key][0].get("error", "")[-400:]))
            return float("nan")
        return statistics.median(vals)

    print("\n%-52s %12s %12s" % ("recording", "PyTorch", "memsnap"))
    base = {m: med(("empty", m, None), "us") for m in ("native", "memsnap")}
    print("%-52s %12.3f %12.3f" % ("torch.empty+del, no recording (us/op)", base["native"], base["memsnap"]))
    for s in ("python", "all"):
        a, b = med(("empty", "native", s), "us"), med(("empty", "memsnap", s), "us")
        print("%-52s %12.3f %12.3f" % ("  with stacks=%s (us/op)" % s, a, b))
        print("%-52s %12.3f %12.3f" % ("  overhead with stacks=%s (us/op)" % s, a - base["native"], b - base["memsnap"]))
    n0 = med(("resnet", "native", None), "ms")
    a, b = med(("resnet", "native", "all"), "ms"), med(("resnet", "memsnap", "all"), "ms")
    print("%-52s %12.2f %12.2f" % ("resnet50 b64 step, recording all stacks (ms)", a, b))
    print("%-52s %12.4f %12.4f" % ("  ratio to native without recording (%.2f ms)" % n0, a / n0, b / n0))
    da, db = r[("dump", "native", "all")][0], r[("dump", "memsnap", "all")][0]
    if "seconds" in da and "seconds" in db:
        print("%-52s %12.3f %12.3f" % ("dump of %d / %d events (s)" % (da["events"], db["events"]), da["seconds"], db["seconds"]))
        print("%-52s %12.1f %12.1f" % ("file bytes per event", da["bytes_per_event"], db["bytes_per_event"]))
    else:
        print("dump error:", da.get("error", "")[-300:], db.get("error", "")[-300:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
