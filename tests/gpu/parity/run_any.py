"""run_any.py: `memsnap run` on programs that are not PyTorch training scripts, on the GPU, in one
call (issue 23; docs/run.md, docs/BENCHMARKS.md "GPU: any program under the default mode").

Each program is unchanged, keeps memory in a function of its own every step (the leak), and
prints a RESULT line with a checksum of what it computed. Each is run plainly, then under
`memsnap run` as a new user would: with no --mode (allocator+intercept for Python), and where it
says something, in another mode. For each recorded run the script checks that the program exited
as it did plainly with the same checksum (recording changed nothing), that a snapshot was
written, and that its first leak candidates name the program's function at a line of the
program's file (the Python frames the interposer records, merged with the native ones):

  cupy       CuPy: each step keeps an 8 MiB array through a slice of it (the pool grows: a
             cudaMalloc at the program's line); default mode, and --mode audit
  jax        JAX: each step keeps a 2048x2048 result; default mode (XLA's allocator made
             'platform' by memsnap run), and --keep-arena (XLA's arena: not named, for the record)
  numba      Numba: each step keeps a device array a kernel filled; default mode
  torch      PyTorch: each step keeps a 16 MiB tensor; --mode intercept --no-torch-blocks (the
             driver-level snapshot alone: not named, for the record, docs/run.md says why),
             --mode intercept (with run.torch.db beside it), and the default mode
  ctypes     tests/data/run/steps.py on the real libcudart: build/tests/librun_steps.so through
             ctypes, no torch; default mode, and --mode audit
  static     build/run_static (nvcc's static cudart) under --mode audit: cuGetProcAddress reached
             through dlsym, which the auditor sees
  bench      tests/intercept/bench_python_frames.sh against the driver: what the Python frames
             cost per cudaMalloc + cudaFree pair, the GIL released (the helper thread reads
             them) and held

A program that is not installed (CuPy, JAX, Numba, torch) is reported as skipped. One JSON line
per run goes to $OUT/run_any.jsonl, every command's output to $OUT/run_any.log; programs and
snapshots live in a temporary directory (the GPU machine returns only a few files from $OUT).
"Same output" is the exit status, the number of blocks kept and the checksum: equal ("yes"), or
a float checksum within a relative 1e-5 ("close": JAX and cuBLAS may pick another algorithm from
run to run), else "NO".

The GPU machine ends a command at 10 minutes: once --budget seconds (default 540) have passed,
the runs left are reported as skipped (rerun them with --only), each run is stopped at what is
left of the budget (its whole process group: the program too), and the tables are still
printed: the Python frames' cost (bench), then the short table of runs, last, also written to
$OUT/run_any_table.txt.

usage (from the repository root, build/ prepared with tests/gpu/prepare.sh):
  python3 tests/gpu/parity/run_any.py [--steps N] [--budget SECONDS] [--only cupy,jax,numba,torch,ctypes,static,bench]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.join(ROOT, "build")
MEMSNAP = os.path.join(BUILD, "memsnap")
STEPS_LIB = os.path.join(BUILD, "tests", "librun_steps.so")
STEPS_PY = os.path.join(ROOT, "tests", "data", "run", "steps.py")
STATIC = os.path.join(BUILD, "run_static")
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="memsnap-run-any-")
WORK = tempfile.mkdtemp(prefix="memsnap-run-any-work-")
# librun_steps.so's libcudart: prepare.sh copies it beside build/ for machines without the toolkit's lib64
LIB_ENV = {"LD_LIBRARY_PATH": BUILD + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
START = time.monotonic()
BUDGET = [540.0]  # seconds for the whole script (--budget)


def left():
    """Seconds left of the budget."""
    return BUDGET[0] - (time.monotonic() - START)

# ---- the unchanged programs ------------------------------------------------------------------------

CUPY = r'''
import hashlib, json, sys, time
import cupy as cp
steps = int(sys.argv[1])
kept = []

def keep_for_later(x):
    y = x * 2                  # a new 8 MiB array
    kept.append(y[:1024])      # the slice keeps all of it alive

cp.random.seed(0)
t0 = time.perf_counter()
for step in range(steps):
    a = cp.random.random((2 << 20,), dtype=cp.float32)
    b = cp.sqrt(a)
    keep_for_later(b)
    del a, b
total = float(sum(float(k.sum()) for k in kept))
cp.cuda.Device().synchronize()
print("RESULT " + json.dumps({"total_ms": (time.perf_counter() - t0) * 1e3, "checksum": round(total, 3),
                              "kept": len(kept)}), flush=True)
'''

JAX = r'''
import json, sys, time
import jax, jax.numpy as jnp
steps = int(sys.argv[1])
kept = []

def keep_for_later(x):
    kept.append(x @ x)         # a 2048x2048 result, 16 MiB, kept

key = jax.random.PRNGKey(0)
t0 = time.perf_counter()
for step in range(steps):
    key, sub = jax.random.split(key)
    a = jax.random.normal(sub, (2048, 2048)) / 64
    b = jnp.tanh(a)
    keep_for_later(b)
    b.block_until_ready()
total = float(sum(float(jnp.sum(k)) for k in kept))
print("RESULT " + json.dumps({"total_ms": (time.perf_counter() - t0) * 1e3, "checksum": round(total, 2),
                              "kept": len(kept), "backend": jax.default_backend()}), flush=True)
'''

NUMBA = r'''
import json, math, sys, time
import numpy as np
if not hasattr(np, "row_stack"):  # the GPU machine's numba-cuda still uses it; NumPy 2.4 removed it
    np.row_stack = np.vstack       # (both the plain and the recorded runs do this)
from numba import cuda
steps = int(sys.argv[1])
n = 1 << 20
kept = []

@cuda.jit
def fill(out, step):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = math.sin(i * 0.001 + step)

def keep_for_later(step):
    out = cuda.device_array(n, dtype=np.float32)   # 4 MiB, kept
    fill[(n + 255) // 256, 256](out, step)
    kept.append(out)

t0 = time.perf_counter()
for step in range(steps):
    work = cuda.device_array(n, dtype=np.float32)
    fill[(n + 255) // 256, 256](work, step)
    keep_for_later(step)
    del work
cuda.synchronize()
total = float(sum(float(k.copy_to_host().sum()) for k in kept))
print("RESULT " + json.dumps({"total_ms": (time.perf_counter() - t0) * 1e3, "checksum": round(total, 2),
                              "kept": len(kept)}), flush=True)
'''

TORCH = r'''
import json, sys, time
import torch
steps = int(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []

def keep_for_later(out):
    kept.append(out.detach().repeat(4, 4))   # 16 MiB a step, kept: PyTorch's cache grows here

t0 = time.perf_counter()
for step in range(steps):
    x = torch.randn(256, 1024, device="cuda")
    out = model(x)
    loss = out.square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    keep_for_later(out)
torch.cuda.synchronize()
print("RESULT " + json.dumps({"total_ms": (time.perf_counter() - t0) * 1e3, "checksum": round(loss.item(), 6),
                              "kept": len(kept)}), flush=True)
'''


def write_program(name, text):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    return path


# ---- running and reading ------------------------------------------------------------------------------

def log(tag, cmd, p_stdout, p_stderr):
    with open(os.path.join(OUT, "run_any.log"), "a") as f:
        f.write("== %s\n$ %s\n%s\n%s\n" % (tag, " ".join(cmd), p_stdout, p_stderr))


def run_cmd(cmd, env, timeout):
    """Runs cmd in a process group of its own, stopped whole (memsnap run and the program under it)
    at the timeout. Returns (status or "timeout", stdout, stderr)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=max(timeout, 1))
        return p.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = p.communicate()
        return "timeout", stdout, stderr


def run_one(name, args, options=None, env_extra=None, timeout=300):
    """Runs the program plain (options None) or under `memsnap run OPTIONS`. Returns a dict: status,
    wall time, the program's RESULT, the snapshots the summary listed and its 'seen' and 'JAX' lines."""
    env = dict(os.environ, **(env_extra or {}))
    label = "plain" if options is None else "memsnap run " + (" ".join(options) or "(default)")
    tag = "%s-%s" % (name, label.replace(" ", "_").replace("/", "-"))
    cmd = list(args)
    if options is not None:
        db = os.path.join(WORK, tag + "-%p.db")
        cmd = [MEMSNAP, "run", "-o", db, "--max-entries", "400000"] + list(options) + ["--"] + cmd
    t0 = time.perf_counter()
    status, stdout, stderr = run_cmd(cmd, env, min(timeout, left()))
    wall = time.perf_counter() - t0
    log(tag, cmd, stdout, stderr)
    result = {}
    lines = stdout.splitlines()
    for line in lines:
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
        elif line.startswith('{"program": "run_static"'):  # its timing varies: what it kept is its output
            result = {"checksum": json.loads(line).get("kept_bytes")}
        elif line.startswith("steps.py: ") and line.endswith(" blocks kept"):  # steps.py's last line
            result = {"checksum": line}
    return {"program": name, "mode": label, "status": status, "wall_s": round(wall, 2), "result": result,
            "snapshots": [l.split(" ", 1)[1] for l in lines if l.startswith("snapshot ")],
            "seen": [l.strip() for l in lines if l.strip().startswith(("seen:", "the interposer's", "JAX:"))],
            "stderr_tail": stderr[-600:] if status != 0 else ""}


def same_output(plain, r):
    """'yes' when the exit status, the blocks kept and the checksum are those of the plain run,
    'close' when a float checksum differs by a relative 1e-5 at most, else 'NO'."""
    a, b = plain["result"].get("checksum"), r["result"].get("checksum")
    if r["status"] != plain["status"] or r["result"].get("kept") != plain["result"].get("kept") or a is None:
        return "NO"
    if a == b:
        return "yes"
    if isinstance(a, float) and isinstance(b, float) and abs(a - b) <= 1e-5 * max(abs(a), abs(b), 1e-30):
        return "close"
    return "NO"


def inspect(db, program_file, function):
    """The snapshot's first leak candidates: whether one names `function` at a line of
    `program_file` (a Python frame, or a native one with the file's name; any file when None: a
    native program without debug information), the first such frame, and the innermost frames of
    the first candidate."""
    out = {"db": os.path.basename(db)}
    status, stdout, _ = run_cmd([MEMSNAP, "analyze", "--json", db], os.environ, min(300, left()))
    try:
        a = json.loads(stdout)
    except ValueError as e:
        out["error"] = "analyze (%s): %s" % (status, e)
        return out
    leaks = a.get("leaks", [])
    base = os.path.basename(program_file) if program_file else None
    out["iterations"] = a.get("summary", {}).get("iteration_label")
    if leaks:
        first = leaks[0]
        out["first_leak"] = {"kind": first["kind"], "bytes_per_iteration": first["bytes_per_iteration"],
                             "category": first.get("category"),
                             "frames": ["%s (%s:%s)" % (f.get("short_name") or f["name"], os.path.basename(f.get("file") or ""),
                                                        f.get("line")) for f in first.get("full_stack", [])[:6]]}
    out["leak_named"], out["at"] = False, None
    for rank, leak in enumerate(leaks[:3]):
        for f in leak.get("full_stack", []):
            where = os.path.basename(f.get("file") or "")
            if (base is None or where == base) and (f.get("short_name") or f["name"]).startswith(function):
                out["leak_named"], out["at"], out["rank"] = True, "%s:%s" % (where or f.get("module", "?"), f.get("line")), rank + 1
                break
        if out["leak_named"]:
            break
    out["python_frames_in_first"] = sum(f.get("kind") == "python" for f in (leaks[0].get("full_stack", []) if leaks else []))
    out["external"] = a.get("external", [])[:3]
    return out


def emit(record):
    line = json.dumps(record, default=str)
    print(line, flush=True)
    with open(os.path.join(OUT, "run_any.jsonl"), "a") as f:
        f.write(line + "\n")


def have(module):
    return subprocess.run([sys.executable, "-c", "import " + module], capture_output=True).returncode == 0


def skipped_row(name, mode):
    return {"program": name, "mode": mode, "status": "skipped", "same_output": None, "named": None, "at": None,
            "wall_s": "-"}


def suite(name, args, program_file, function, variants, env_extra=None, expect_named=None):
    """The plain program, then each variant (memsnap run options). Rows for the table; a run that
    the budget leaves no time for is a row 'skipped'."""
    if left() < 10:
        emit({"skipped": name, "why": "out of time (--budget)"})
        return [skipped_row(name, "plain")] + [skipped_row(name, " ".join(o) or "(default)") for o in variants]
    plain = run_one(name, args, None, env_extra)
    emit(plain)
    rows = [{"program": name, "mode": "plain", "status": plain["status"], "same_output": None, "named": None,
             "at": None, "wall_s": plain["wall_s"]}]
    for options in variants:
        if left() < 10:
            emit({"skipped": "%s %s" % (name, " ".join(options)), "why": "out of time (--budget)"})
            rows.append(skipped_row(name, " ".join(options) or "(default)"))
            continue
        r = run_one(name, args, options, env_extra)
        r["inspect"] = [inspect(db, program_file, function) for db in r["snapshots"][:3]]
        same = same_output(plain, r)
        hit = next((i for i in r["inspect"] if i.get("leak_named")), None)
        r["same_output"], r["named"] = same, hit is not None
        emit(r)
        want = (expect_named or {}).get(tuple(options), True)
        rows.append({"program": name, "mode": r["mode"][len("memsnap run "):], "status": r["status"],
                     "same_output": same, "named": hit is not None, "expected": want,
                     "at": hit["at"] if hit else None, "wall_s": r["wall_s"]})
    return rows


PARTS = ("cupy", "jax", "numba", "torch", "ctypes", "static", "bench")


def main():
    ap = argparse.ArgumentParser(description="memsnap run on CuPy, JAX, Numba, PyTorch and C programs (issue 23)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget", type=float, default=540.0,
                    help="seconds for the whole script: runs past it are skipped, the tables printed")
    ap.add_argument("--only", default=",".join(PARTS))
    opts = ap.parse_args()
    only = set(opts.only.split(","))
    if not only <= set(PARTS):
        ap.error("--only: unknown %s (from %s)" % (",".join(sorted(only - set(PARTS))), ",".join(PARTS)))
    BUDGET[0] = opts.budget
    os.makedirs(OUT, exist_ok=True)
    print("results in", OUT, flush=True)
    subprocess.run("nvidia-smi -L || echo no nvidia-smi", shell=True)
    if not os.access(MEMSNAP, os.X_OK):
        sys.exit("error: %s is missing: build on the development machine and carry build/ (tests/gpu/prepare.sh)"
                 % MEMSNAP)
    libs = subprocess.run(["ldd", os.path.join(BUILD, "libmemsnap.so")], capture_output=True, text=True).stdout
    if "not found" in libs:
        sys.exit("error: libmemsnap.so misses libraries:\n" + libs)
    table = []
    python = [sys.executable]
    workloads = [
        ("cupy", "cupy", CUPY, [[], ["--mode", "audit"]], {}),
        ("jax", "jax", JAX, [[], ["--keep-arena"]], {("--keep-arena",): False}),
        ("numba", "numba", NUMBA, [[]], {}),
        # the driver-level file alone does not name it (docs/run.md: the kept tensors sit in cached
        # segments); with PyTorch's blocks beside it (run.torch.db) it is named
        ("torch", "torch", TORCH, [["--mode", "intercept", "--no-torch-blocks"], ["--mode", "intercept"], []],
         {("--mode", "intercept", "--no-torch-blocks"): False}),
    ]
    for name, module, text, variants, expect in workloads:
        if name not in only:
            continue
        if not have(module):
            emit({"skipped": name, "why": module + " is not installed"})
            continue
        prog = write_program(name + "_leak.py", text)
        table += suite(name, python + [prog, str(opts.steps)], prog, "keep_for_later", variants, expect_named=expect)
    if "ctypes" in only:
        if os.access(STEPS_LIB, os.R_OK):
            table += suite("ctypes", python + [STEPS_PY, STEPS_LIB, str(opts.steps)], STEPS_PY, "keep_for_later",
                           [[], ["--mode", "audit"]], env_extra=LIB_ENV)
        else:
            emit({"skipped": "ctypes", "why": STEPS_LIB + " was not built (make test-programs)"})
    if "static" in only:
        if os.access(STATIC, os.X_OK):
            # a native program: its leak is named by its C function (run_static.cu's keep_for_later)
            table += suite("static", [STATIC, "20", "2000"], None, "keep_for_later",
                           [["--mode", "audit"], ["--mode", "intercept"]])
        else:
            emit({"skipped": "static", "why": STATIC + " was not built (make gpu-bench needs nvcc)"})
    bench = None
    if "bench" in only and os.access(STEPS_LIB, os.R_OK):
        if left() < 60:
            emit({"skipped": "bench", "why": "out of time (--budget)"})
        else:
            status, stdout, stderr = run_cmd(
                ["bash", os.path.join(ROOT, "tests", "intercept", "bench_python_frames.sh"), BUILD, "20000"],
                dict(os.environ, MEMSNAP_BACKEND="cuda", **LIB_ENV), left())
            log("bench_python_frames", ["bench_python_frames.sh"], stdout, stderr)
            bench = stdout if status == 0 else "(exit status %s)\n%s%s" % (status, stdout, stderr[-600:])
            emit({"bench": "python_frames", "status": status, "table": stdout, "stderr_tail": stderr[-600:]})
    if bench:
        print("\nPython frames per 1 MiB cudaMalloc + cudaFree pair, against the driver:\n" + bench, flush=True)

    lines = ["%-8s %-38s %-8s %-5s %-8s %-22s %s" % ("program", "memsnap run", "status", "same", "leak", "at", "wall s")]
    for r in table:
        named = "-" if r["named"] is None else ("named" if r["named"] else "MISSED") + \
            ("" if r["named"] is None or r.get("expected", True) else " (expected)")
        lines.append("%-8s %-38s %-8s %-5s %-8s %-22s %s" % (r["program"], r["mode"][:38], r["status"],
                                                             r["same_output"] or "-", named, r["at"] or "-",
                                                             r["wall_s"]))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "run_any_table.txt"), "w") as f:
        f.write(text + (("\n" + bench) if bench else ""))
    print("\n" + text, end="", flush=True)


if __name__ == "__main__":
    main()
