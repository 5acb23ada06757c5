"""modes_compare.py: each allocator mode under memsnap against the same mode of PyTorch's native
allocator, in one run on one GPU (issue 11; docs/BENCHMARKS.md, "Allocator modes").

PyTorch cannot swap its allocator once CUDA is initialised, so each (mode, task, side) runs in a
child process; native and memsnap children alternate, so drifts in clocks hit both alike. The
parent prints one JSON line per child (also appended to $OUT/modes.jsonl when OUT is set) and a
table at the end.

Modes (PYTORCH_CUDA_ALLOC_CONF, which memsnap reads too):
  classic     the default caching allocator
  expandable  expandable_segments:True
  async       backend:cudaMallocAsync
Tasks:
  expand10    10 blocks of 100 MiB allocated and freed, then one of 1 GiB: reserved memory
  resnet50    torchvision resnet50, batch 64, SGD with momentum, 25 steps
  gpt2        transformers GPT2LMHeadModel (12 layers, 768 wide), batch 8 x 512, AdamW, 25 steps
  compiled    an MLP trained with torch.compile(mode="reduce-overhead") (CUDA graph trees)
  graph       torch.cuda.graph capture and replay of a 2-layer MLP
  mempool     torch.cuda.MemPool with use_mem_pool
  empty       x = torch.empty(n, device="cuda"); del x: microseconds per pair
Each training task reports the losses, the median step time (steps 5 and on), peak allocated and
reserved memory and every torch.cuda.memory_stats() value at the end.

usage: python3 modes_compare.py MODE:TASK[:REPS] [...]
  REPS (default 1): native and memsnap alternate REPS times; the step time is the fastest
  median of each side, and the losses of the repetitions of one side are compared too (the
  run-to-run variation of the native allocator itself).
"""
import json
import os
import statistics
import subprocess
import sys
import time

from torch_compare import setup  # "native", or "memsnap": memsnap.enable() first

CONF = {"classic": "", "expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}
MiB = 1 << 20


# ---- children ------------------------------------------------------------------------------

def finish_stats(torch, out):
    torch.cuda.synchronize()
    out["peak_allocated"] = torch.cuda.max_memory_allocated()
    out["peak_reserved"] = torch.cuda.max_memory_reserved()
    out["stats"] = {k: v for k, v in torch.cuda.memory_stats().items()}
    return out


def optimizer_step(opt, loss_of):
    """A training step: the loss loss_of(i) computes, backward, opt.step(); returns the loss."""
    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(i)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def train_loop(torch, step_fn, steps):
    losses, times = [], []
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step_fn(i)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return {"losses": losses, "step_ms": statistics.median(times[5:]) * 1e3}


def deterministic(torch):
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)  # pooling backward has no such kernel


def task_resnet50(torch):
    import torchvision
    deterministic(torch)
    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 3, 224, 224, generator=g).cuda()
    y = torch.randint(0, 1000, (64,), generator=g).cuda()
    step = optimizer_step(opt, lambda i: torch.nn.functional.cross_entropy(model(x), y))
    return finish_stats(torch, train_loop(torch, step, 25))


def task_gpt2(torch):
    import transformers
    deterministic(torch)
    cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=512)
    model = transformers.GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), generator=g).cuda()
    step = optimizer_step(opt, lambda i: model(ids, labels=ids).loss)
    return finish_stats(torch, train_loop(torch, step, 25))


def task_compiled(torch):
    deterministic(torch)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(2048, 2048), torch.nn.GELU())],
                                torch.nn.Linear(2048, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cmodel = torch.compile(model, mode="reduce-overhead")
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(8, 256, 2048, generator=g).cuda()
    ys = torch.randint(0, 10, (8, 256), generator=g).cuda()
    t0 = time.perf_counter()
    step = optimizer_step(opt, lambda i: torch.nn.functional.cross_entropy(cmodel(xs[i % 8]), ys[i % 8]))
    out = train_loop(torch, step, 30)
    out["total_s"] = time.perf_counter() - t0
    return finish_stats(torch, out)


def task_graph(torch):
    deterministic(torch)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    static_x = torch.randn(512, 1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    before = torch.cuda.memory_reserved()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    outs = []
    for i in range(10):
        static_x.copy_(torch.full((512, 1024), float(i) / 10, device="cuda"))
        graph.replay()
        eager = model(static_x)
        outs.append(float((static_y - eager).abs().max()))
    out = {"max_diff_vs_eager": max(outs), "checksum": float(static_y.sum()),
           "graph_pool_reserved": torch.cuda.memory_reserved() - before}
    del graph, static_y
    torch.cuda.empty_cache()
    out["reserved_after_reset"] = torch.cuda.memory_reserved()
    return finish_stats(torch, out)


def task_mempool(torch):
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
        b = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
    c = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    out = {"pool_id": list(pool.id)}
    try:
        out["pool_holds_exactly_a_b"] = torch._C._cuda_checkPoolLiveAllocations(
            torch.cuda.current_device(), pool.id, {a.data_ptr(), b.data_ptr()})
    except Exception as e:  # native PyTorch may not expose this for user pools
        out["pool_holds_exactly_a_b"] = "%s: %s" % (type(e).__name__, e)
    out["reserved_with_pool"] = torch.cuda.memory_reserved()
    del a, b
    torch.cuda.empty_cache()
    out["reserved_pool_alive"] = torch.cuda.memory_reserved()
    del pool
    torch.cuda.empty_cache()
    out["reserved_after_del"] = torch.cuda.memory_reserved()
    del c
    return finish_stats(torch, out)


def task_expand10(torch):
    xs = [torch.empty(100 * MiB, dtype=torch.uint8, device="cuda") for _ in range(10)]
    del xs
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    out = {"reserved_mib": torch.cuda.memory_reserved() / MiB}
    del big
    torch.cuda.empty_cache()
    out["reserved_after_empty_cache_mib"] = torch.cuda.memory_reserved() / MiB
    return finish_stats(torch, out)


def task_empty(torch):
    sizes = [512, 64 << 10, 3 << 20, 50 << 20]
    out = {}
    for n in sizes:
        for _ in range(200):
            del_x = torch.empty(n, dtype=torch.uint8, device="cuda")
            del del_x
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                x = torch.empty(n, dtype=torch.uint8, device="cuda")
                del x
            best.append((time.perf_counter() - t0) / 2000 * 1e6)
        out["us_%d" % n] = min(best)
    return finish_stats(torch, out)


def child(mode, task, side):
    torch = setup(side)
    t0 = time.perf_counter()
    out = globals()["task_" + task](torch)
    out.update(mode=mode, task=task, side=side, wall_s=round(time.perf_counter() - t0, 2),
               backend=torch.cuda.memory.get_allocator_backend())
    print("RESULT " + json.dumps(out))


# ---- parent ----------------------------------------------------------------------------------

def run_child(mode, task, side):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("PYTORCH_ALLOC_CONF", None)
    if CONF[mode]:
        env["PYTORCH_CUDA_ALLOC_CONF"] = CONF[mode]
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if task == "compiled":  # both sides compile from scratch (a warm cache allocates less)
        import tempfile
        cache = tempfile.mkdtemp(prefix="inductor-")
        env.update(TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton"),
                   TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, task, side], env=env,
                       capture_output=True, text=True, timeout=400)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    if p.returncode != 0 or not line:
        err = (p.stderr or p.stdout).strip().splitlines()
        return {"mode": mode, "task": task, "side": side, "error": "exit %d: %s" % (p.returncode, " | ".join(err[-4:]))}
    r = json.loads(line[len("RESULT "):])
    r["process_s"] = round(time.perf_counter() - t0, 1)
    return r


def compare(n, m):
    """One table row for a native/memsnap pair."""
    if "error" in n or "error" in m:
        return "ERROR native: %s | memsnap: %s" % (n.get("error", "ok"), m.get("error", "ok"))
    parts = []
    if "losses" in n:
        diff = max(abs(a - b) for a, b in zip(n["losses"], m["losses"]))
        parts.append("losses %s (max diff %.3g)" % ("identical" if diff == 0 else "differ", diff))
        parts.append("step %.2f vs %.2f ms (%.3fx)" % (m["step_ms"], n["step_ms"], m["step_ms"] / n["step_ms"]))
    parts.append("peak alloc %s, reserved %.1f vs %.1f MiB" % (
        "equal" if n["peak_allocated"] == m["peak_allocated"] else "%.1f vs %.1f MiB" % (
            m["peak_allocated"] / MiB, n["peak_allocated"] / MiB), m["peak_reserved"] / MiB, n["peak_reserved"] / MiB))
    keys = sorted(set(n["stats"]) | set(m["stats"]))
    differ = [k for k in keys if n["stats"].get(k) != m["stats"].get(k)]
    parts.append("stats %d/%d equal%s" % (len(keys) - len(differ), len(keys),
                                         (" (differ: %s)" % ", ".join(differ[:8])) if differ else ""))
    for k in ("reserved_mib", "reserved_after_empty_cache_mib", "max_diff_vs_eager", "checksum", "graph_pool_reserved",
              "reserved_after_reset", "pool_holds_exactly_a_b", "reserved_with_pool", "reserved_pool_alive",
              "reserved_after_del", "total_s"):
        if k in n or k in m:
            parts.append("%s %s vs %s" % (k, m.get(k), n.get(k)))
    for k in sorted(x for x in n if x.startswith("us_")):
        parts.append("%s %.2f vs %.2f" % (k, m[k], n[k]))
    return "; ".join(parts)


def main(argv):
    if argv[:1] == ["--child"]:
        return child(*argv[1:4])
    out = os.environ.get("OUT")
    rows = []
    for spec in argv:
        mode, task, reps = (spec.split(":") + ["1"])[:3]
        runs = {"native": [], "memsnap": []}
        for _ in range(int(reps)):
            for side in ("native", "memsnap"):
                r = run_child(mode, task, side)
                runs[side].append(r)
                line = json.dumps(r)
                print(line[:3000], flush=True)
                if out:
                    with open(os.path.join(out, "modes.jsonl"), "a") as f:
                        f.write(line + "\n")
        pair = {side: dict(rs[0]) for side, rs in runs.items()}
        text = ""
        for side, rs in runs.items():
            ok = [r for r in rs if "step_ms" in r]
            if len(ok) > 1:
                pair[side]["step_ms"] = min(r["step_ms"] for r in ok)
                text += "; %s run-to-run loss diff %.3g" % (side, max(
                    abs(a - b) for r in ok[1:] for a, b in zip(ok[0]["losses"], r["losses"])))
        rows.append((spec, compare(pair["native"], pair["memsnap"]) + text))
    print("\n== memsnap vs native, same mode (memsnap first in each 'A vs B')")
    for spec, text in rows:
        print("%-22s %s" % (spec, text))


if __name__ == "__main__":
    main(sys.argv[1:])
