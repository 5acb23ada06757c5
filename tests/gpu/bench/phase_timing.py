"""phase_timing.py: where a stack capture's time goes under PyTorch on the GPU machine, with the
diagnostic library of `make phase-timing` (build/timing/libmemsnap.so: the TSC ticks of each
part of every capture in memsnap.stack_counters()). Issue 26; docs/BENCHMARKS.md, "Stacks at
depth".

One process per recording mode (python, all), pinned to one core: the `torch.empty(1024) + del`
loop of stack_cost.py D Python frames deep for D = 5, 30, 100, recording turned off and on in
turns (us per op, the ratio), and for the recorded loops the ns per capture of each part:
the whole capture, its native part, asking the interpreter for the thread state and the GIL,
reading the frames, comparing them and finding their nodes, and the stack id. The clock reads
cost some tens of ns a capture themselves: the parts tell where the time goes, the diagnostic
library's ratio is not the product's (stack_cost.py measures that).

With --gpt2, also GPT-2 small training steps (stack_cost.py's) with all stacks: the captures a
step makes, and the ms a step spends in each part of them.

usage: LD_LIBRARY_PATH=build python3 tests/gpu/bench/phase_timing.py [--gpt2] [OPS]   (make phase-timing first;
       tests/gpu/prepare.sh copies the libraries into build/). PHASE_LIB names another
       diagnostic library (another build's, to compare two in one run).
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import stack_cost  # noqa: E402

PARTS = ["ticks_capture", "ticks_native", "ticks_python_present", "ticks_python_read", "ticks_python_nodes",
         "ticks_pair"]


def counts_between(c0, c1):
    """The counters' increase from c0 to c1, less the two that are states, not counts."""
    return {k: c1[k] - c0.get(k, 0) for k in c1 if k not in ("ticks_per_us", "python_reader")}


def gpt2_child():
    """GPT-2 steps with all stacks: a step's captures, those with Python frames, the ms a step
    spends in each part of the captures, and the step's own ms."""
    torch = stack_cost.start("memsnap", None)
    import memsnap
    step = stack_cost.gpt2_step(torch)
    stack_cost.set_recording("memsnap", torch, "all")
    for _ in range(3):  # the model's stacks seen once
        step()
    torch.cuda.synchronize()
    steps = 10
    c0 = memsnap.stack_counters()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    c1 = memsnap.stack_counters()
    stack_cost.set_recording("memsnap", torch, None)
    d = counts_between(c0, c1)
    tpu = c1.get("ticks_per_us") or 0
    per = {"steps": steps, "step_ms": wall / steps * 1000, "captures": d.get("captures", 0) / steps,
           "python_records": d.get("python_records", 0) / steps,
           "ms": {p: (d.get(p, 0) / steps / tpu / 1000 if tpu else None) for p in PARTS}}
    print("RESULT " + json.dumps({"mode": "gpt2", "per_step": per, "counters": d}), flush=True)


def child(mode, ops):
    if hasattr(os, "sched_setaffinity"):  # one core, as stack_cost.py's cases (BENCH_CPU)
        os.sched_setaffinity(0, {int(os.environ.get("BENCH_CPU", "5")) % os.cpu_count()})
    if mode == "gpt2":
        return gpt2_child()
    torch = stack_cost.start("memsnap", None)
    import memsnap
    sys.setrecursionlimit(1000)
    out = {}
    for depth in stack_cost.DEPTHS:
        stack_cost.at_depth(depth, stack_cost.empty_loop, torch, 2000)
        times = {"off": [], "on": []}
        c0 = memsnap.stack_counters()
        for _ in range(5):
            for state in ("off", "on"):
                stack_cost.set_recording("memsnap", torch, mode if state == "on" else None)
                t0 = time.perf_counter()
                stack_cost.at_depth(depth, stack_cost.empty_loop, torch, ops)
                times[state].append((time.perf_counter() - t0) / ops * 1e6)
        stack_cost.set_recording("memsnap", torch, None)
        c1 = memsnap.stack_counters()
        d = counts_between(c0, c1)
        d["python_reader"] = c1.get("python_reader")
        caps = max(d.get("captures", 0), 1)
        tpu = c1.get("ticks_per_us") or 0
        out[depth] = {"off_us": sorted(times["off"])[2], "on_us": sorted(times["on"])[2], "captures": d.get("captures", 0),
                      "ns": {p: (d.get(p, 0) / caps / tpu * 1000 if tpu else None) for p in PARTS},
                      "counters": d}
    print("RESULT " + json.dumps({"mode": mode, "depths": out}), flush=True)


def main(argv):
    if len(argv) > 2 and argv[1] == "--child":
        child(argv[2], int(argv[3]))
        return 0
    gpt2 = "--gpt2" in argv
    argv = [a for a in argv if a != "--gpt2"]
    ops = int(argv[1]) if len(argv) > 1 else 20000
    lib = os.environ.get("PHASE_LIB") or os.path.join(stack_cost.ROOT, "build", "timing", "libmemsnap.so")
    if not os.path.exists(lib):
        sys.exit("phase_timing: %s is missing: make phase-timing" % lib)
    env = dict(os.environ, MEMSNAP_LIB=lib)
    env["LD_LIBRARY_PATH"] = os.path.join(stack_cost.ROOT, "build") + ":" + env.get("LD_LIBRARY_PATH", "")
    rows, failed = [], False
    for mode in ("python", "all") + (("gpt2",) if gpt2 else ()):
        try:
            p = subprocess.run([sys.executable, __file__, "--child", mode, str(ops)], env=env, capture_output=True,
                               text=True, timeout=500)
        except subprocess.TimeoutExpired:
            p = subprocess.CompletedProcess([], 124, "", "the child ran 500 s")
        res = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if not res:
            print("%s: exit %d %s" % (mode, p.returncode, p.stderr[-1500:]))
            failed = True
            continue
        r = json.loads(res[-1][len("RESULT "):])
        rows.append(r)
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], "phase_timing.jsonl"), "a") as f:
                f.write(json.dumps(r) + "\n")
    print("\nns per capture, by part (diagnostic library; us per op off / on and their ratio)")
    print("mode    depth  off us  on us  ratio  capture  native  present  read  nodes  pair")
    for r in rows:
        if r["mode"] == "gpt2":
            continue
        for depth, v in sorted(r["depths"].items(), key=lambda kv: int(kv[0])):
            ns = v["ns"]
            f = lambda k: "%6.0f" % ns[k] if ns.get(k) is not None else "     ?"
            print("%-6s  %5s  %6.2f  %5.2f  %5.2fx  %s  %s  %s  %s  %s  %s" % (
                r["mode"], depth, v["off_us"], v["on_us"], v["on_us"] / v["off_us"], f("ticks_capture"),
                f("ticks_native"), f("ticks_python_present"), f("ticks_python_read"), f("ticks_python_nodes"),
                f("ticks_pair")))
    for r in rows:
        if r["mode"] == "gpt2":
            v = r["per_step"]
            ms = v["ms"]
            print("\nGPT-2 step with all stacks (diagnostic library): %.2f ms a step, %.0f captures a step (%.0f with"
                  " Python frames); ms a step in the captures: whole %s, native %s, present %s, read %s, nodes %s, pair %s"
                  % (v["step_ms"], v["captures"], v["python_records"], *("%.3f" % ms[p] if ms[p] is not None else "?"
                                                                         for p in PARTS)))
            print("  counters a step: %s" % {k: round(c / v["steps"], 1) for k, c in r["counters"].items()
                                             if c and not k.startswith("ticks")})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
