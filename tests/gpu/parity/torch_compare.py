"""torch_compare.py: PyTorch with memsnap against PyTorch's native allocator, on one GPU.

Run by tests/gpu/run.sh on the GPU machine. PyTorch cannot swap its allocator once CUDA is
initialised, so every measurement runs in a child process per allocator (native, memsnap),
alternating the two so that drifts in clocks hit both sides alike. The parent prints a table.

Tasks (each child prints one JSON line):
  train   a small CNN trained 30 steps with fixed seeds and deterministic algorithms: the losses
          (must be identical), memory_stats() keys, empty_cache().
  empty   `x = torch.empty(n, device="cuda"); del x` loops: microseconds per op.
  resnet  torchvision resnet50, batch 64, SGD: milliseconds per training step, peak allocated
          and reserved memory.
  oom     allocation beyond a memory fraction: what the user gets, and whether CUDA still works.
  parity  (native process only) a random trace of allocations, frees and empty_cache on two
          streams replayed through PyTorch's caching allocator and through memsnap on its
          simulated device with the GPU's capacity: all statistics compared after every step.

usage: python3 torch_compare.py [--bench FILE] [--reps N]
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))


# ---- children ------------------------------------------------------------------------------

def setup(mode):
    import torch
    if mode == "memsnap":
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
    return torch


def task_train(torch, mode):
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dev = "cuda"
    # Only layers with deterministic CUDA kernels (pooling backward has none).
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(64 * 8 * 8, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = torch.randn(30, 64, 3, 32, 32, generator=g)
    labels = torch.randint(0, 10, (30, 64), generator=g)
    losses = []
    for step in range(30):
        x, y = data[step].to(dev), labels[step].to(dev)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    stats = torch.cuda.memory_stats()
    out = {"losses": losses, "stat_keys": sorted(stats), "allocated": torch.cuda.memory_allocated(),
           "max_allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    del model, opt, x, y, loss
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    out["empty_cache_released"] = before - torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    out["peak_after_reset"] = torch.cuda.max_memory_allocated()
    if mode == "memsnap":
        import memsnap
        memsnap.check(0)
        out["invariants"] = "ok"
    return out


def task_empty(torch, mode):
    out = {}
    for label, numel in (("4KiB", 1024), ("1MiB", 1 << 18)):
        for _ in range(2000):
            x = torch.empty(numel, device="cuda")
            del x
        times = []
        n = 100000
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                x = torch.empty(numel, device="cuda")
                del x
            times.append((time.perf_counter() - t0) / n * 1e6)
        out[label] = statistics.median(times)
    return out


def task_resnet(torch, mode):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
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
    return {"step_ms": statistics.median(times), "peak_allocated": torch.cuda.max_memory_allocated(),
            "peak_reserved": torch.cuda.max_memory_reserved()}


def task_oom(torch, mode):
    torch.cuda.set_per_process_memory_fraction(0.05)
    keep = torch.empty(1 << 20, device="cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    out = {}
    try:
        x = torch.empty(int(total * 0.1) // 4, device="cuda")
        out["raised"] = "nothing"
        out["data_ptr"] = x.data_ptr()
    except Exception as e:  # noqa: BLE001 - we report what type arrives
        out["raised"] = type(e).__module__ + "." + type(e).__qualname__
        out["is_torch_oom"] = isinstance(e, torch.OutOfMemoryError)
        out["message"] = str(e).splitlines()[0][:160]
    y = torch.randn(1000, device="cuda")
    out["cuda_works_after"] = abs(float((y * 2).sum()) - 2 * float(y.sum())) < 1e-3
    out["num_ooms"] = torch.cuda.memory_stats().get("num_ooms")
    del keep
    return out


def task_parity(torch, mode):
    """Replays one random trace of allocations, frees and empty_cache on two streams through
    torch.cuda.caching_allocator_alloc/delete and records every statistic after every step.
    Run once per allocator (memsnap serves the same torch calls); the parent compares the two
    sequences. Both processes make the same device allocations in the same order, so the driver
    hands out addresses in the same order, and best-fit ties break alike."""
    import random
    fraction = float(os.environ.get("PARITY_FRACTION", "0"))
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.empty_cache()
    if fraction:
        torch.cuda.set_per_process_memory_fraction(fraction)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    rng = random.Random(int(os.environ.get("PARITY_SEED", "7")))
    live = []
    steps = int(os.environ.get("PARITY_STEPS", "3000"))
    keys = sorted(torch.cuda.memory_stats())
    trace, ooms = [], 0
    for step in range(steps):
        r = rng.random()
        if r < 0.005:
            torch.cuda.empty_cache()
            op = "empty_cache"
        elif live and (r < 0.45 or len(live) > 300):
            torch.cuda.caching_allocator_delete(live.pop(rng.randrange(len(live))))
            op = "free"
        else:
            small = rng.random() < 0.6
            lo, hi = (1, 1 << 20) if small else ((1 << 20) + 1, 96 << 20)
            size = int(2 ** rng.uniform(math.log2(lo), math.log2(hi)))  # log-uniform
            s = streams[rng.randrange(2)]
            op = "alloc %d" % size
            try:
                live.append(torch.cuda.caching_allocator_alloc(size, 0, s))
            except torch.OutOfMemoryError:
                ooms += 1
                op += " oom"
        stats = torch.cuda.memory_stats()
        trace.append([op] + [stats[k] for k in keys])
    for p in live:
        torch.cuda.caching_allocator_delete(p)
    path = os.path.join(os.environ.get("OUT", "/tmp"), "parity_%s_%s.json" % (os.environ.get("PARITY_NAME", "x"), mode))
    with open(path, "w") as f:
        json.dump({"keys": keys, "trace": trace}, f)
    out = {"steps": steps, "ooms": ooms, "file": path}
    if mode == "memsnap":
        import memsnap
        memsnap.check(0)
        out["invariants"] = "ok"
    return out


def compare_parity(a, b):
    """Compares two recorded parity traces: returns (steps compared, mismatching steps, first)."""
    if "file" not in a or "file" not in b:
        return 0, -1, [a.get("error", "")[-300:], b.get("error", "")[-300:]]
    ta, tb = json.load(open(a["file"])), json.load(open(b["file"]))
    common = [k for k in ta["keys"] if k in tb["keys"]]
    ia = [ta["keys"].index(k) + 1 for k in common]
    ib = [tb["keys"].index(k) + 1 for k in common]
    bad, first = 0, []
    for step, (ra, rb) in enumerate(zip(ta["trace"], tb["trace"])):
        diff = [(common[n], ra[i], rb[j]) for n, (i, j) in enumerate(zip(ia, ib)) if ra[i] != rb[j]]
        if ra[0] != rb[0]:
            diff.append(("op", ra[0], rb[0]))
        if diff:
            bad += 1
            if len(first) < 3:
                first.append({"step": step, "op": ra[0], "diff": diff[:6]})
    missing = sorted(set(ta["keys"]) ^ set(tb["keys"]))
    if missing:
        first.append({"keys only on one side": missing})
    return min(len(ta["trace"]), len(tb["trace"])), bad, first


def child(mode, task):
    torch = setup(mode)
    result = globals()["task_" + task](torch, mode)
    print("RESULT " + json.dumps(result))


# ---- parent --------------------------------------------------------------------------------

def run_child(mode, task, env=None, timeout=300):
    e = dict(os.environ)
    e["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    e.update(env or {})
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, task], env=e,
                       capture_output=True, text=True, timeout=timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": "exit %d: %s" % (p.returncode, (p.stderr or p.stdout)[-600:])}


def main(argv):
    if len(argv) > 2 and argv[1] == "--child":
        child(argv[2], argv[3])
        return 0
    if len(argv) > 3 and argv[1] == "--only":  # one task in a child, its output shown as it is
        e = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
        return subprocess.run([sys.executable, "-X", "faulthandler", os.path.abspath(__file__), "--child",
                               argv[3], argv[2]], env=e).returncode
    bench_file = argv[argv.index("--bench") + 1] if "--bench" in argv else None
    reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else 3
    results = {}
    import torch
    results["gpu"] = torch.cuda.get_device_name(0)
    results["torch"] = torch.__version__
    for task in ("train", "oom"):
        for mode in ("native", "memsnap"):
            results[task + "_" + mode] = run_child(mode, task)
    for task in ("empty", "resnet"):
        for mode in ("native", "memsnap"):
            results[task + "_" + mode] = []
        for _ in range(reps):
            for mode in ("native", "memsnap"):
                results[task + "_" + mode].append(run_child(mode, task))
    parity_configs = [
        ("default", {}),
        ("max_split_size_mb:64,roundup_power2_divisions:4",
         {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,roundup_power2_divisions:4"}),
        ("fraction 0.03 + garbage_collection_threshold:0.5 + max_split_size_mb:40",
         {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.5,max_split_size_mb:40", "PARITY_FRACTION": "0.03"}),
    ]
    results["parity"] = []
    for n, (name, env) in enumerate(parity_configs):
        env = dict(env, PARITY_NAME=str(n))
        a, b = run_child("native", "parity", env), run_child("memsnap", "parity", env)
        results["parity"].append((name, {"native": a, "memsnap": b, "compare": compare_parity(a, b)}))
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, "torch_compare.json"), "w") as f:
            json.dump(results, f, indent=1)
    print_table(results, bench_file)
    return 0


def med(runs, key):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else float("nan")


def print_table(r, bench_file):
    rows = []
    tn, tm = r["train_native"], r["train_memsnap"]
    if "losses" in tn and "losses" in tm:
        diff = max(abs(a - b) for a, b in zip(tn["losses"], tm["losses"]))
        rows.append(("small CNN, 30 steps: losses", "%.6f" % tn["losses"][-1], "%.6f" % tm["losses"][-1],
                     "identical" if tn["losses"] == tm["losses"] else "max diff %.3g" % diff))
        rows.append(("memory_stats() keys", str(len(tn["stat_keys"])), str(len(tm["stat_keys"])),
                     "same" if tn["stat_keys"] == tm["stat_keys"] else "DIFFER"))
        rows.append(("empty_cache() released bytes", str(tn["empty_cache_released"]), str(tm["empty_cache_released"]), ""))
        rows.append(("memsnap invariants after training", "", tm.get("invariants", "?"), ""))
    else:
        rows.append(("train", str(tn)[:60], str(tm)[:200], "ERROR"))
    for label in ("4KiB", "1MiB"):
        a, b = med(r["empty_native"], label), med(r["empty_memsnap"], label)
        rows.append(("torch.empty+del %s (us/op)" % label, "%.3f" % a, "%.3f" % b, "ratio %.3f" % (b / a)))
    a, b = med(r["resnet_native"], "step_ms"), med(r["resnet_memsnap"], "step_ms")
    rows.append(("resnet50 b64 train step (ms)", "%.2f" % a, "%.2f" % b, "ratio %.4f" % (b / a)))
    for key in ("peak_allocated", "peak_reserved"):
        a, b = med(r["resnet_native"], key), med(r["resnet_memsnap"], key)
        rows.append(("resnet50 %s (MiB)" % key, "%.1f" % (a / 2**20), "%.1f" % (b / 2**20), "ratio %.4f" % (b / a)))
    on, om = r["oom_native"], r["oom_memsnap"]
    rows.append(("OOM: exception", on.get("raised", on.get("error", "?"))[:28], om.get("raised", om.get("error", "?"))[:28],
                 "torch.OutOfMemoryError" if om.get("is_torch_oom") else "NOT torch OOM"))
    rows.append(("OOM: CUDA usable afterwards", str(on.get("cuda_works_after")), str(om.get("cuda_works_after")),
                 "num_ooms %s/%s" % (on.get("num_ooms"), om.get("num_ooms"))))
    for name, p in r["parity"]:
        steps, bad, first = p["compare"]
        rows.append(("parity: " + name[:40], "%d steps, %s OOMs" % (steps, p["native"].get("ooms")),
                     "%s OOMs" % p["memsnap"].get("ooms"),
                     ("%d of %d steps differ" % (bad, steps)) if bad else "all %d stats equal at every step" % len(
                         json.load(open(p["native"]["file"]))["keys"])))
        if bad:
            print("parity %s: %s" % (name, json.dumps(first)[:1500]))
    if bench_file and os.path.exists(bench_file):
        vals = {}
        for line in open(bench_file):
            parts = line.split()
            if len(parts) == 3:
                vals.setdefault((parts[0], parts[1]), []).append(float(parts[2]))
        for case in ("same_512B", "same_1MiB", "random_20k"):
            a = vals.get(("native", case))
            b = vals.get(("memsnap", case))
            if a and b:
                rows.append(("C malloc+free pair %s (ns)" % case, "%.1f" % statistics.median(a),
                             "%.1f" % statistics.median(b), "ratio %.3f" % (statistics.median(b) / statistics.median(a))))
    print("\n%s, torch %s" % (r["gpu"], r["torch"]))
    print("%-46s %-18s %-18s %s" % ("check", "native", "memsnap", "result"))
    for row in rows:
        print("%-46s %-18s %-18s %s" % row)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
