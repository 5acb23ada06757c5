"""empty_timing.py: torch.empty + del under memsnap's C++ allocator against the pluggable path (and
native PyTorch), in one run (issue 34: the C++ allocator must cost no more per op than the
pluggable path; it skips the pluggable wrapper's std::function hops and metadata map).

Each allocator runs in a child process of its own (PyTorch cannot swap its allocator once CUDA is
up). The three children of a round run at once, each pinned to a CPU of its own, and start timing
together (each says READY once warm; the parent answers GO to all): whatever the host does
meanwhile (the first GPU run saw native PyTorch itself take 2.2 us in one child and 4.5 us in
the next) falls on all three alike. Rounds rotate the CPUs among the allocators. Each child times
--ops pairs of torch.empty(4096 bytes) + del, 7 times, and keeps the median ns per pair; the
result per allocator is the median over rounds. Recording is off (memsnap's cost per op, not its
recorder's). Prints one line "TIMING {json}" last: the medians, the ratio cxx / pluggable, and
every child's median.

usage: empty_timing.py [--ops N] [--repeat R]
"""
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
KINDS = ("cxx", "pluggable", "native")


def child(kind, ops, cpu):
    if cpu >= 0:
        os.sched_setaffinity(0, {cpu})
    if kind != "native":
        os.environ["MEMSNAP_TORCH_ALLOCATOR"] = kind
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        got = memsnap.allocator_kind()
        if got != kind:
            print("CHILD " + json.dumps({"kind": kind, "error": "asked %s, got %s" % (kind, got)}), flush=True)
            return
    import torch
    torch.empty(1, device="cuda")
    for _ in range(ops // 5):  # warm the caches
        x = torch.empty(4096, dtype=torch.uint8, device="cuda")
        del x
    print("READY", flush=True)
    sys.stdin.readline()  # GO: the three start together
    rounds = []
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(ops):
            x = torch.empty(4096, dtype=torch.uint8, device="cuda")
            del x
        rounds.append((time.perf_counter_ns() - start) / ops)
    print("CHILD " + json.dumps({"kind": kind, "ns": statistics.median(rounds), "rounds": rounds, "cpu": cpu}),
          flush=True)


def cpus():
    """Three CPUs this process may use, far apart (so likely on different cores), or -1s."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 4:
        return [-1, -1, -1]
    step = max(1, len(mine) // 4)
    return [mine[step], mine[2 * step], mine[3 * step]]


def one_round(ops, placement, env):
    procs = {}
    for kind, cpu in placement.items():
        procs[kind] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", kind, "--ops", str(ops),
                                        "--cpu", str(cpu)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    ready = {}
    for kind, p in procs.items():  # each READY (or its failure) before anyone starts
        line = p.stdout.readline()
        while line and not line.startswith(("READY", "CHILD ")):
            line = p.stdout.readline()
        ready[kind] = line
    for kind, p in procs.items():
        if ready[kind].startswith("READY"):
            p.stdin.write("GO\n")
            p.stdin.flush()
    out = {}
    for kind, p in procs.items():
        try:
            rest, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            rest, err = p.communicate()
        lines = [l for l in (ready[kind] + rest).splitlines() if l.startswith("CHILD ")]
        out[kind] = json.loads(lines[-1][6:]) if lines else {"error": "exit %s: %s" % (p.returncode, err[-300:])}
    return out


def main():
    args = sys.argv[1:]
    if "--child" in args:
        return child(args[args.index("--child") + 1], int(args[args.index("--ops") + 1]),
                     int(args[args.index("--cpu") + 1]))
    ops = int(args[args.index("--ops") + 1]) if "--ops" in args else 50000
    repeat = int(args[args.index("--repeat") + 1]) if "--repeat" in args else 3
    env = dict(os.environ)
    env.pop("MEMSNAP_RECORD", None)
    results = {k: [] for k in KINDS}
    errors = []
    where = cpus()
    for r in range(repeat):
        placement = {kind: where[(i + r) % 3] for i, kind in enumerate(KINDS)}
        for kind, res in one_round(ops, placement, env).items():
            if "ns" in res:
                results[kind].append(res["ns"])
            else:
                errors.append("%s: %s" % (kind, res.get("error")))
    med = {k: round(statistics.median(v), 1) if v else None for k, v in results.items()}
    ratio = round(med["cxx"] / med["pluggable"], 3) if med["cxx"] and med["pluggable"] else None
    for k, v in results.items():
        print("%-9s ns per torch.empty+del, each round's median: %s" % (k, [round(x, 1) for x in v]))
    print("TIMING " + json.dumps({"median_ns": med, "cxx_over_pluggable": ratio, "ops": ops, "repeat": repeat,
                                  "cpus": where, "rounds": {k: [round(x) for x in v] for k, v in results.items()},
                                  "errors": errors}))


if __name__ == "__main__":
    main()
