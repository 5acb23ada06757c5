"""run_modes.py: `memsnap run` on the GPU, in one call (issue 12; docs/run.md, docs/BENCHMARKS.md
"memsnap run").

Records unchanged programs and checks each snapshot names the program's leak, then measures what
recording costs against the same program run without memsnap:

  resnet50   a torchvision resnet50 training script (batch 64, STEPS steps, SGD with momentum)
             that keeps each step's logits in keep_logits_for_logging(): run plain, then under
             `memsnap run` in each mode (allocator, torch-native, intercept, allocator+intercept);
             the median step time (steps 5 and on) of each against plain
  cupy       a CuPy program that keeps one array per step in keep_for_later(): plain, intercept
  jax        a JAX program (XLA_PYTHON_CLIENT_ALLOCATOR=platform, so each buffer is its own
             cuMemAlloc) that keeps one array per step: plain, intercept
  static     build/run_static (tests/gpu/parity/run_static.cu, nvcc's default static cudart): keeps
             256 KiB per step, then times 1 MiB cudaMalloc + cudaFree pairs: plain, intercept with
             stacks, intercept without stacks (the interposer's cost per pair), and intercept
             --cache (the pairs served by memsnap's caching allocator)
  torchrun   `torchrun --nproc_per_node 2` (gloo, both ranks on the one GPU) of a DDP script that
             keeps each step's output in keep_outputs_for_later(), recorded with -o run-%r.db in
             allocator and torch-native mode: one snapshot per rank, each naming the leak
  forked     a script that forks two children (no exec) before touching CUDA, each training a
             small MLP and keeping outputs in keep_outputs_for_later(): allocator mode, one
             snapshot per child, each naming the leak
  cudart     build/tests/run_cudart (tests/intercept/run_cudart.c, dynamic libcudart.so, keeps 64 KiB per
             step in keep_for_later()): intercept

In intercept mode a PyTorch program also gets PyTorch's recorder (PATH.torch.db, the blocks
inside the segments the interposer sees); the leak is named if any snapshot of a run names it.

Each run is a child process; plain and recorded runs of one program alternate REPS times (the
fastest of each side is kept). One JSON line per run goes to $OUT/run_modes.jsonl (the programs'
output to $OUT/run_modes.log; programs and snapshots to a temporary directory); a short table
is printed last. A program that is not installed (CuPy, JAX) is reported as skipped.

usage (from the repository root, build/ prepared with tests/gpu/prepare.sh):
  python3 tests/gpu/parity/run_modes.py [--steps N] [--reps N] [--only resnet50,cupy,jax,static,torchrun,cudart,forked]
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MEMSNAP = os.path.join(ROOT, "build", "memsnap")
STATIC = os.path.join(ROOT, "build", "run_static")
# tests/intercept/run_cudart.c, linked against libcudart.so (the toolkit's shared runtime; prepare.sh puts
# a copy beside it for machines without the toolkit's lib64)
CUDART = os.path.join(ROOT, "build", "tests", "run_cudart")
CUDART_ENV = {"LD_LIBRARY_PATH": os.path.join(ROOT, "build") + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="memsnap-run-modes-")
# Programs and snapshots live outside $OUT: the GPU machine returns at most 8 files from it, so
# $OUT holds only run_modes.jsonl and run_modes.log (every command's output).
WORK = tempfile.mkdtemp(prefix="memsnap-run-modes-work-")

# ---- the unchanged programs ---------------------------------------------------------------------

RESNET = r'''
import json, os, statistics, sys, time
import torch, torchvision
steps = int(sys.argv[1])
model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (64,), device="cuda")
kept = []

def keep_logits_for_logging(logits):
    kept.append(logits.detach().clone())

times = []
for step in range(steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    keep_logits_for_logging(out)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print("RESULT " + json.dumps({"step_ms": statistics.median(times[5:]) * 1e3, "loss": loss.item(),
                              "peak_allocated": torch.cuda.max_memory_allocated()}), flush=True)
'''

CUPY = r'''
import json, sys, time
import cupy as cp
steps = int(sys.argv[1])
kept = []

def keep_for_later(a):
    kept.append(a[:65536].copy())

t0 = time.perf_counter()
for step in range(steps):
    a = cp.random.random((1 << 20,), dtype=cp.float32)
    b = cp.sqrt(a) * 2
    keep_for_later(b)
    del a, b
cp.cuda.Device().synchronize()
print("RESULT " + json.dumps({"total_ms": (time.perf_counter() - t0) * 1e3, "kept": len(kept)}), flush=True)
'''

JAX = r'''
import json, sys, time
import jax, jax.numpy as jnp
steps = int(sys.argv[1])
kept = []

def keep_for_later(a):
    kept.append(a[:65536] + 0)

key = jax.random.PRNGKey(0)
t0 = time.perf_counter()
for step in range(steps):
    key, sub = jax.random.split(key)
    a = jax.random.normal(sub, (1 << 20,))
    b = jnp.sqrt(jnp.abs(a)) * 2
    keep_for_later(b)
    b.block_until_ready()
print("RESULT " + json.dumps({"total_ms": (time.perf_counter() - t0) * 1e3, "kept": len(kept),
                              "backend": jax.default_backend()}), flush=True)
'''

# torchrun: two ranks on one GPU (gloo: NCCL refuses two ranks on one device), DDP on a small
# MLP, each rank keeps its outputs in keep_outputs_for_later(). `memsnap run -o run-%r.db` writes
# one snapshot per rank and torchrun itself, which allocates nothing, writes none.
TORCHRUN = r'''
import json, os, sys, time
import torch, torch.distributed as dist
steps = int(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.cuda.set_device(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []

def keep_outputs_for_later(out):
    kept.append(out.detach().clone())

t0 = time.perf_counter()
for step in range(steps):
    x = torch.randn(256, 1024, device="cuda")
    out = model(x)
    loss = out.square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    keep_outputs_for_later(out)
torch.cuda.synchronize()
dist.destroy_process_group()
if rank == 0:
    print("RESULT " + json.dumps({"total_ms": (time.perf_counter() - t0) * 1e3, "kept": len(kept)}), flush=True)
'''

# Two children forked (no exec) before the parent touches CUDA, each training a small MLP and
# keeping its outputs in keep_outputs_for_later(), ending with os._exit(0) as multiprocessing's
# fork workers do. Plain, each child initialises CUDA itself; recorded, each writes its snapshot.
FORKED = r'''
import json, os, sys, time
import torch
steps = int(sys.argv[1])
kept = []

def keep_outputs_for_later(out):
    kept.append(out.detach().clone())

def child():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    for step in range(steps):
        out = model(torch.randn(256, 1024, device="cuda"))
        out.square().mean().backward()
        keep_outputs_for_later(out)
    torch.cuda.synchronize()

t0 = time.perf_counter()
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        try:
            child()
            code = 0
        except Exception as e:
            print("child failed:", e, flush=True)
            code = 1
        os._exit(code)
    pids.append(pid)
codes = [os.waitpid(p, 0)[1] for p in pids]
print("RESULT " + json.dumps({"total_ms": (time.perf_counter() - t0) * 1e3, "children": codes}), flush=True)
sys.exit(1 if any(codes) else 0)
'''

JAX_ENV = {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def write_program(name, text):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    return path


# ---- running one ---------------------------------------------------------------------------------

def run_one(program, args, mode=None, env_extra=None, options=(), label=None, timeout=400, pattern="-%p.db"):
    """Runs the program plain (mode None) or under `memsnap run --mode MODE OPTIONS`. Returns a
    dict: status, wall_s, the program's RESULT (or its JSON line), and the snapshots written."""
    env = dict(os.environ, **(env_extra or {}))
    label = label or mode or "plain"
    tag = "%s-%s" % (program, label.replace(" ", "").replace("/", "-"))
    db = os.path.join(WORK, tag + pattern)
    cmd = list(args)
    if mode:
        cmd = [MEMSNAP, "run", "--mode", mode, "-o", db, "--max-entries", "400000"] + list(options) + ["--"] + cmd
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        status, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        status, stdout, stderr = "timeout", e.stdout or "", e.stderr or ""
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        stderr = stderr.decode() if isinstance(stderr, bytes) else stderr
    wall = time.perf_counter() - t0
    with open(os.path.join(OUT, "run_modes.log"), "a") as f:
        f.write("== %s\n$ %s\n%s\n%s\n" % (tag, " ".join(cmd), stdout, stderr))
    result = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
        elif line.startswith("{\"program\""):
            result = json.loads(line)
    snapshots = [line.split(" ", 1)[1] for line in stdout.splitlines() if line.startswith("snapshot ")]
    return {"program": program, "mode": label, "status": status, "wall_s": wall,
            "result": result, "snapshots": snapshots, "stderr_tail": stderr[-800:] if status != 0 else ""}


def inspect(db, leak_function):
    """What a snapshot shows: its first leak candidate's frames, whether they name the leak, and
    the external segments by source and library."""
    out = {"db": db}
    try:
        a = json.loads(subprocess.run([MEMSNAP, "analyze", "--json", db], capture_output=True, text=True,
                                      timeout=300).stdout)
        leaks = a.get("leaks", [])
        names = [f.get("short_name") or f.get("name") for f in (leaks[0]["stack"] if leaks else [])][:8]
        out["first_leak"] = {"kind": leaks[0]["kind"], "bytes_per_iteration": leaks[0]["bytes_per_iteration"],
                             "frames": names} if leaks else None
        out["leak_named"] = any(leak_function in (n or "") for leak in leaks[:3] for n in
                                [f.get("short_name") or f.get("name") for f in leak["stack"]])
        out["peak_allocated"] = a["summary"].get("peak_allocated_bytes", a["summary"].get("peak_allocated"))
    except (ValueError, KeyError, subprocess.TimeoutExpired) as e:
        out["error"] = "analyze: %s" % e
    try:
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
        out["segments"] = con.execute("select pool, ifnull(source, ''), ifnull(library, ''), count(*), sum(size) "
                                      "from segments group by 1, 2, 3 order by 5 desc limit 12").fetchall()
        out["events"] = con.execute("select count(*) from events").fetchone()[0]
    except sqlite3.Error as e:
        out["error_sql"] = str(e)
    return out


def emit(record):
    line = json.dumps(record, default=str)
    print(line, flush=True)
    with open(os.path.join(OUT, "run_modes.jsonl"), "a") as f:
        f.write(line + "\n")


def best(runs, key):
    vals = [r["result"].get(key) for r in runs if r["status"] == 0 and r["result"].get(key) is not None]
    return min(vals) if vals else None


# ---- the suites ------------------------------------------------------------------------------------

def suite(name, args, variants, leak_function, key, reps, env_extra=None, pattern="-%p.db", ranks=1):
    """The plain program and each variant (label, mode, memsnap run options) alternate `reps`
    times; the fastest `key` of each side is kept."""
    rows = []
    runs = {("plain", None, ()): []}
    for v in variants:
        runs[v] = []
    for rep in range(reps):
        for (label, mode, options) in runs:
            r = run_one(name, args, mode, env_extra, options, label, pattern=pattern)
            r["rep"] = rep
            if mode and r["snapshots"]:
                r["inspect"] = [inspect(db, leak_function) for db in r["snapshots"][:4]]
            emit(r)
            runs[(label, mode, options)].append(r)
    base = best(runs[("plain", None, ())], key)
    for (label, mode, options), rs in runs.items():
        value = best(rs, key)
        named = None
        if mode and "none" not in options:  # without stacks no site has a name
            # ranks > 1: every rank's snapshot names it, else one of the run's snapshots does
            def named_in(r):
                hits = [bool(i.get("leak_named")) for i in r.get("inspect", [])]
                return len(hits) >= ranks and all(hits) if ranks > 1 else any(hits)
            named = all(named_in(r) for r in rs if r["status"] == 0) and any(r["status"] == 0 for r in rs)
        rows.append({"program": name, "mode": label, key: value,
                     "vs_plain": (value / base) if value and base else None,
                     "status": sorted({r["status"] for r in rs}, key=str), "leak_named": named,
                     "snapshots": sum(len(r["snapshots"]) for r in rs)})
    emit({"summary": name, "rows": rows})
    return rows


def modes(*names):
    return [(m, m, ()) for m in names]


def have(module):
    return subprocess.run([sys.executable, "-c", "import " + module], capture_output=True).returncode == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--only", default="resnet50,cupy,jax,static,torchrun,cudart,forked")
    opts = ap.parse_args()
    only = set(opts.only.split(","))
    os.makedirs(OUT, exist_ok=True)
    print("results in", OUT, flush=True)
    subprocess.run("nvidia-smi -L || echo no nvidia-smi", shell=True)
    if not os.access(MEMSNAP, os.X_OK):
        sys.exit("error: %s is missing: build on the development machine and carry build/ (tests/gpu/prepare.sh)"
                 % MEMSNAP)
    libs = subprocess.run(["ldd", os.path.join(ROOT, "build", "libmemsnap.so")], capture_output=True, text=True).stdout
    if "not found" in libs:
        sys.exit("error: libmemsnap.so misses libraries:\n" + libs)
    table = []
    # name, the module it needs, the program, steps per --steps, its leak, what is timed, modes, env
    workloads = [
        ("resnet50", "torchvision", RESNET, 1, "keep_logits_for_logging", "step_ms",
         modes("allocator", "torch-native", "intercept", "allocator+intercept"), None),
        ("cupy", "cupy", CUPY, 10, "keep_for_later", "total_ms", modes("intercept"), None),
        ("jax", "jax", JAX, 10, "keep_for_later", "total_ms", modes("intercept"), JAX_ENV),
    ]
    for name, module, text, factor, leak, key, variants, env in workloads:
        if name not in only:
            continue
        if not have(module):
            emit({"skipped": name, "why": module + " is not installed"})
            continue
        prog = write_program(name + ".py", text)
        table += suite(name, [sys.executable, prog, str(opts.steps * factor)], variants, leak, key, opts.reps,
                       env_extra=env)
    if "torchrun" in only and have("torch"):
        prog = write_program("ddp_leak.py", TORCHRUN)
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", prog,
                    str(opts.steps)]
        table += suite("torchrun", torchrun, [("allocator", "allocator", ()), ("torch-native", "torch-native", ())],
                       "keep_outputs_for_later", "total_ms", opts.reps, pattern="-%r.db", ranks=2)
    if "forked" in only and have("torch"):
        prog = write_program("forked.py", FORKED)
        table += suite("forked", [sys.executable, prog, str(opts.steps)], [("allocator", "allocator", ())],
                       "keep_outputs_for_later", "total_ms", opts.reps, ranks=2)
    if "cudart" in only:
        if os.access(CUDART, os.X_OK):
            table += suite("cudart", [CUDART, "200"], [("intercept", "intercept", ())], "keep_for_later",
                           "total_ms", opts.reps, env_extra=CUDART_ENV)
        else:
            emit({"skipped": "cudart", "why": CUDART + " was not built (make test-programs)"})
    if "static" in only:
        if os.access(STATIC, os.X_OK):
            table += suite("static", [STATIC, "20", "20000"],
                           [("intercept", "intercept", ("--stacks", "all")),
                            ("intercept/no stacks", "intercept", ("--stacks", "none")),
                            ("intercept --cache", "intercept", ("--cache",))],
                           "keep_for_later", "ns_per_pair", opts.reps)
        else:
            emit({"skipped": "static", "why": STATIC + " was not built (make gpu-bench needs nvcc)"})

    print("\n%-10s %-30s %14s %9s %-8s %-6s %s" % ("program", "mode", "value", "vs plain", "status", "leak", "snaps"))
    for r in table:
        key = [k for k in ("step_ms", "total_ms", "ns_per_pair") if k in r][0]
        value = "-" if r[key] is None else "%.2f %s" % (r[key], {"step_ms": "ms/step", "total_ms": "ms",
                                                                  "ns_per_pair": "ns/pair"}[key])
        print("%-10s %-30s %14s %9s %-8s %-6s %s" % (
            r["program"], r["mode"], value, "-" if r["vs_plain"] is None else "%.3fx" % r["vs_plain"],
            ",".join(map(str, r["status"])), {None: "-", True: "named", False: "MISSED"}[r["leak_named"]],
            r["snapshots"]))


if __name__ == "__main__":
    main()
