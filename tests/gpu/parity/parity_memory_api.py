"""parity_memory_api.py: every public function of torch.cuda.memory under memsnap against native
PyTorch, for backend native and backend:cudaMallocAsync (issues 24 and 34).

Each (backend, allocator) pair runs in a child process of its own (PyTorch cannot swap its
allocator once CUDA is up): "native" is PyTorch's own allocator, "memsnap" is memsnap.enable()
(its C++ allocator, built for this PyTorch; the pluggable interface where it cannot be built: the
row "memsnap allocator" says which), "memsnap-pluggable" is memsnap.enable() with
MEMSNAP_TORCH_ALLOCATOR=pluggable (the pluggable interface with memsnap's Python answers), and
"pluggable" (backend native only) is libmemsnap installed as a bare CUDAPluggableAllocator
without memsnap's answers, to show what PyTorch's pluggable interface refuses by itself. A child
runs the same checks in the same order and prints one JSON line of answers (an exception is
answered as "error: Type: message"). The parent compares memsnap's answer with native's for
each check and prints a table last.

On the GPU machine (after tests/gpu/prepare.sh, build/ carried):
    python3 tests/gpu/parity/parity_memory_api.py --json parity.json
Here, against the stand-in on the simulated device (tests/recorder/test_torch_memory.py does):
    PYTHONPATH=tests/data/fake_torch MEMSNAP_BACKEND=sim python3 tests/gpu/parity/parity_memory_api.py

usage: parity_memory_api.py [--backends native,cudaMallocAsync] [--json FILE] [--no-compile] [--no-memsnap-pluggable]
"""
import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
MB = 1 << 20


# ---- the checks (in the child) ------------------------------------------------------------------

def answer(fn, *args):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args)
    except Exception as e:  # the answer is the error, named by type and message
        return "error: %s: %s" % (type(e).__name__, " ".join(str(e).split())[:160])


def empty(torch, n):
    return torch.empty(n, device="cuda", dtype=torch.uint8)


def run_checks(torch, compile_checks):
    mem = torch.cuda.memory
    out = {}
    live = {}

    def alloc_three():
        live.update(a=empty(torch, 3 * MB), b=empty(torch, 1000), c=empty(torch, 64 << 10))
        first = mem.memory_allocated()
        del live["b"]
        return [first, mem.memory_allocated()]

    out["memory_allocated"] = answer(alloc_three)
    out["max_memory_allocated"] = answer(mem.max_memory_allocated)
    out["memory_reserved"] = answer(mem.memory_reserved)
    out["max_memory_reserved"] = answer(mem.max_memory_reserved)
    out["memory_stats keys"] = answer(lambda: sorted(mem.memory_stats()))
    out["memory_stats values"] = answer(lambda: dict(mem.memory_stats()))
    out["memory_stats_as_nested_dict"] = answer(lambda: sorted(mem.memory_stats_as_nested_dict()))
    out["memory_cached (deprecated)"] = answer(mem.memory_cached)

    def reset_peak():
        live["d"] = empty(torch, 8 * MB)
        del live["d"]
        mem.reset_peak_memory_stats()
        return [mem.max_memory_allocated() == mem.memory_allocated(), mem.max_memory_allocated()]

    out["reset_peak_memory_stats"] = answer(reset_peak)
    out["reset_max_memory_allocated"] = answer(lambda: [mem.reset_max_memory_allocated(), mem.max_memory_allocated()])

    def reset_accumulated():
        mem.reset_accumulated_memory_stats()
        s = mem.memory_stats()
        return {k: v for k, v in s.items() if k.endswith((".allocated", ".freed")) or k.startswith("num_")}

    out["reset_accumulated_memory_stats"] = answer(reset_accumulated)
    out["memory_summary"] = answer(lambda: [len(mem.memory_summary().splitlines()),
                                            len(mem.memory_summary(abbreviated=True).splitlines())])

    def fraction():
        mem.set_per_process_memory_fraction(0.5)
        got = mem.get_per_process_memory_fraction()
        mem.set_per_process_memory_fraction(1.0)
        return [round(got, 9), round(mem.get_per_process_memory_fraction(), 9)]

    out["set/get_per_process_memory_fraction"] = answer(fraction)
    out["mem_get_info (total)"] = answer(lambda: mem.mem_get_info()[1])

    def raw_alloc():
        before = mem.memory_allocated()
        p = mem.caching_allocator_alloc(3000)
        grown = mem.memory_allocated() - before
        mem.caching_allocator_delete(p)
        return [p != 0, grown, mem.memory_allocated() - before]

    out["caching_allocator_alloc/delete"] = answer(raw_alloc)
    out["get_allocator_backend"] = answer(mem.get_allocator_backend)

    def snapshot():
        live.update(x=empty(torch, 5 * MB), y=empty(torch, 4000))
        segs = mem.memory_snapshot()
        blocks = [b for s in segs for b in s["blocks"]]
        return {"type": type(segs).__name__, "segment keys": sorted(segs[0]), "block keys": sorted(blocks[0]),
                "states": sorted({b["state"] for b in blocks}),
                "allocated = sum of active_allocated blocks":
                    sum(b["size"] for b in blocks if b["state"] == "active_allocated") == mem.memory_allocated()}

    out["memory_snapshot"] = answer(snapshot)

    def history():
        mem._record_memory_history(max_entries=1000)
        z = empty(torch, 2 * MB)
        del z
        s = mem._snapshot()
        mem._record_memory_history(enabled=None)
        trace = s["device_traces"][0]
        alloc = [e for e in trace if e["action"] == "alloc"]
        return {"keys": sorted(s), "trace keys": sorted(alloc[0]) if alloc else None,
                "actions": sorted({e["action"] for e in trace}), "alloc has frames": bool(alloc and alloc[0]["frames"]),
                "settings keys": sorted(s.get("allocator_settings", {}))}

    out["_record_memory_history + _snapshot"] = answer(history)

    def dump():
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.pickle")
            mem._dump_snapshot(path)
            with open(path, "rb") as f:
                return sorted(pickle.load(f))

    out["_dump_snapshot"] = answer(dump)

    def mempool():
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            t = empty(torch, 3000)
            inside = pool.use_count()
        segs = pool.snapshot()
        got = {"segments": len(segs), "all of the pool": all(tuple(s["segment_pool_id"]) == tuple(pool.id) for s in segs),
               "allocated": sum(s["allocated_size"] for s in segs), "use_count inside/after": [inside, pool.use_count()]}
        del t, pool
        return got

    out["MemPool + use_mem_pool + snapshot"] = answer(mempool)
    out["host_memory_stats"] = answer(lambda: sorted(mem.host_memory_stats()))
    out["list_gpu_processes"] = answer(lambda: type(mem.list_gpu_processes()).__name__)
    out["_cuda_attach_out_of_memory_observer"] = answer(
        lambda: torch._C._cuda_attach_out_of_memory_observer(lambda *a: None) or "ok")

    def oom_observer():
        """PyTorch's recipe for a snapshot at out of memory: an observer attached, then a request
        larger than the card (a multiple of 2 MiB: the size the observer gets is the same for
        every allocator)."""
        calls = []
        torch._C._cuda_attach_out_of_memory_observer(lambda *a: calls.append(a))
        total = mem.mem_get_info()[1]
        asked = -(-2 * total // (2 * MB)) * 2 * MB
        try:
            empty(torch, asked)
            return "no out-of-memory error"
        except torch.OutOfMemoryError:
            pass
        mine = [c for c in calls if c[1] == asked]
        return {"calls": len(calls), "device": mine[0][0] if mine else None, "size asked": bool(mine),
                "total is the card's": bool(mine) and mine[0][2] == total,
                "free <= total": bool(mine) and 0 <= mine[0][3] <= total}

    out["out-of-memory observer called"] = answer(oom_observer)
    if hasattr(mem, "caching_allocator_enable"):
        out["caching_allocator_enable"] = answer(lambda: mem.caching_allocator_enable(True) or "ok")

        def uncached():
            """The cache off: a tensor of its own device allocation, outside the statistics."""
            before = mem.memory_allocated()
            mem.caching_allocator_enable(False)
            try:
                t = torch.full((3 * MB,), 7, device="cuda", dtype=torch.uint8)
                grown = mem.memory_allocated() - before
                right = int(t[-1]) == 7
                del t
            finally:
                mem.caching_allocator_enable(True)
            return [grown, right]

        out["caching_allocator_enable(False): a tensor outside the statistics"] = answer(uncached)
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "memory_stats"):
        out["torch.accelerator.memory_stats (device-generic)"] = answer(
            lambda: [len(accelerator.memory_stats()), accelerator.memory_stats().get("active_bytes.all.current", 0) ==
                     mem.memory_stats().get("active_bytes.all.current", -1)])
    if hasattr(mem, "_set_allocator_settings"):
        def settings():
            """roundup_power2_divisions:4 set at run time: 84 MiB is then allocated as 96 MiB."""
            mem.empty_cache()
            start = mem.memory_allocated()
            mem._set_allocator_settings("roundup_power2_divisions:4")
            try:
                x = empty(torch, 84 * MB)
                grown = mem.memory_allocated() - start
                del x
            finally:
                mem._set_allocator_settings("")
            return grown

        out["_set_allocator_settings at run time"] = answer(settings)

    def release():
        live.clear()
        mem.empty_cache()
        return [mem.memory_allocated(), mem.memory_reserved()]

    out["empty_cache"] = answer(release)
    # last: a shared storage's memory is held for the receivers (PyTorch's IPC limbo)
    live["ipc"] = empty(torch, 2 * MB)
    out["IPC: storage._share_cuda_"] = answer(lambda: type(live["ipc"].untyped_storage()._share_cuda_()).__name__)
    if compile_checks:
        out["torch.compile graph trees (checkpoint restore)"] = answer(graph_trees, torch)
    return out


def graph_trees(torch):
    """A second compiled function recorded after the first one replayed: CUDA graph trees restore
    the pool's checkpoint (setCheckpointPoolState) there."""
    def f(x):
        return x * 2 + 1

    def g(x):
        return x.sin() + 1
    cf = torch.compile(f, mode="reduce-overhead")
    cg = torch.compile(g, mode="reduce-overhead")
    x = torch.randn(1 << 16, device="cuda")
    total = 0.0
    for i in range(8):
        y = cf(x)
        if i >= 3:
            total += float(cg(y).sum())
    torch.cuda.synchronize()
    return "ok"


def child(alloc, compile_checks):
    import torch
    kind = None
    if alloc in ("memsnap", "memsnap-pluggable"):
        if alloc == "memsnap-pluggable":
            os.environ["MEMSNAP_TORCH_ALLOCATOR"] = "pluggable"
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        kind = memsnap.allocator_kind()
    elif alloc == "pluggable":
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        so = memsnap.library_path()
        mem = torch.cuda.memory
        mem.change_current_allocator(mem.CUDAPluggableAllocator(so, "memsnap_malloc", "memsnap_free"))
    out = run_checks(torch, compile_checks)
    if kind:
        out["memsnap allocator"] = kind
    print("PARITY " + json.dumps(out, default=repr))


# ---- the parent ---------------------------------------------------------------------------------

def run_child(alloc, backend, compile_checks):
    env = dict(os.environ)
    conf = [it for it in env.get("PYTORCH_CUDA_ALLOC_CONF", "").split(",") if it and not it.startswith("backend:")]
    if backend != "native" and alloc != "pluggable":
        conf.append("backend:" + backend)
    env["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(conf)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", alloc] + ([] if compile_checks else ["--no-compile"])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("PARITY "):
            return json.loads(line[len("PARITY "):])
    return {"child": "error: exit %d: %s" % (p.returncode, (p.stderr or "").strip()[-400:])}


def short(v, width=44):
    if isinstance(v, list) and len(v) > 6:
        v = "%d items (sha1 %s)" % (len(v), hashlib.sha1(json.dumps(v).encode()).hexdigest()[:8])
    elif isinstance(v, dict) and len(v) > 6:
        v = "%d keys" % len(v)
    text = v if isinstance(v, str) else json.dumps(v)
    return text if len(text) <= width else text[:width - 3] + "..."


def compare(n, m):
    """'same', or what differs."""
    if n == m:
        return "same"
    if isinstance(n, str) and isinstance(m, str) and n.startswith("error:") and (m.startswith(n) or n.startswith(m)):
        return "same error"  # memsnap may add a hint after PyTorch's message
    if isinstance(n, dict) and isinstance(m, dict):
        keys = sorted(set(n) | set(m))
        equal = sum(1 for k in keys if n.get(k) == m.get(k))
        return "DIFFER: %d/%d equal (%s)" % (equal, len(keys), ", ".join(k for k in keys if n.get(k) != m.get(k))[:80])
    if isinstance(n, list) and isinstance(m, list) and all(isinstance(x, str) for x in n + m):
        only = sorted(set(n) ^ set(m))
        return "DIFFER: %d vs %d; only on one side: %s" % (len(n), len(m), ", ".join(only)[:80])
    return "DIFFER"


def main():
    args = sys.argv[1:]
    compile_checks = "--no-compile" not in args
    if "--child" in args:
        return child(args[args.index("--child") + 1], compile_checks)
    try:
        import torch  # noqa: F401
        fake = torch.__version__.endswith("fake")
    except ImportError:
        sys.exit("parity_memory_api.py needs PyTorch (or tests/data/fake_torch on PYTHONPATH)")
    if fake:
        compile_checks = False  # the stand-in has no torch.compile
    backends = args[args.index("--backends") + 1].split(",") if "--backends" in args else ["native", "cudaMallocAsync"]
    results = {}
    for backend in backends:
        allocs = ["native", "memsnap"] + ([] if "--no-memsnap-pluggable" in args else ["memsnap-pluggable"])
        allocs += ["pluggable"] if backend == "native" else []
        results[backend] = {a: run_child(a, backend, compile_checks) for a in allocs}
    if "--json" in args:
        with open(args[args.index("--json") + 1], "w") as f:
            json.dump(results, f, indent=1, default=repr)
    rows = []
    for backend, r in results.items():
        checks = [c for c in dict.fromkeys(list(r["native"]) + list(r["memsnap"])) if c != "memsnap allocator"]
        for c in checks:
            n, m = r["native"].get(c, "(absent)"), r["memsnap"].get(c, "(absent)")
            mp = r.get("memsnap-pluggable", {}).get(c, "(absent)")
            row = [c, backend, short(n), short(m), compare(n, m), short(mp), compare(n, mp) if "memsnap-pluggable" in r
                   else "", short(r["pluggable"].get(c, "(absent)")) if "pluggable" in r else ""]
            rows.append(row)
    print("\n| check | backend | native | memsnap | memsnap vs native | memsnap, pluggable | pluggable vs native | "
          "bare pluggable (no memsnap answers) |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    kinds = sorted({r["memsnap"].get("memsnap allocator", "?") for r in results.values()})
    same = sum(1 for r in rows if r[4] in ("same", "same error"))
    plug = sum(1 for r in rows if r[6] in ("same", "same error"))
    print("\nmemsnap's pluggable interface: %d of %d answers the same as native" % (plug, len(rows)))
    print("%d of %d answers the same under memsnap as native (memsnap allocator: %s)" % (same, len(rows), ",".join(kinds)))


if __name__ == "__main__":
    main()
