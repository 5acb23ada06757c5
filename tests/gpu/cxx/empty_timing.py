"""empty_timing.py: torch.empty + del under memsnap's C++ allocator against the pluggable path (and
native PyTorch), in one run (issue 34: the C++ allocator must cost no more per op than the
pluggable path; it skips the pluggable wrapper's std::function hops and metadata map).

Each allocator runs in a child process of its own (PyTorch cannot swap its allocator once CUDA is
up), the children taking turns (--repeat rounds of cxx, pluggable, native), each timing --ops
pairs of torch.empty(4096 bytes) + del in 7 rounds and keeping the median ns per pair. Recording
is off (memsnap's cost per op, not its recorder's). Prints one line "TIMING {json}" last: the
median per allocator and the ratio cxx / pluggable.

usage: empty_timing.py [--ops N] [--repeat R]
"""
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def child(kind, ops):
    if kind != "native":
        os.environ["MEMSNAP_TORCH_ALLOCATOR"] = kind
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        got = memsnap.allocator_kind()
        if got != kind:
            print("CHILD " + json.dumps({"kind": kind, "error": "asked %s, got %s" % (kind, got)}))
            return
    import torch
    torch.empty(1, device="cuda")
    for _ in range(ops // 10):  # warm the caches
        x = torch.empty(4096, dtype=torch.uint8, device="cuda")
        del x
    rounds = []
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(ops):
            x = torch.empty(4096, dtype=torch.uint8, device="cuda")
            del x
        rounds.append((time.perf_counter_ns() - start) / ops)
    print("CHILD " + json.dumps({"kind": kind, "ns": statistics.median(rounds), "rounds": rounds}))


def main():
    args = sys.argv[1:]
    if "--child" in args:
        return child(args[args.index("--child") + 1], int(args[args.index("--ops") + 1]))
    ops = int(args[args.index("--ops") + 1]) if "--ops" in args else 100000
    repeat = int(args[args.index("--repeat") + 1]) if "--repeat" in args else 3
    env = dict(os.environ)
    env.pop("MEMSNAP_RECORD", None)
    results = {"cxx": [], "pluggable": [], "native": []}
    errors = []
    for _ in range(repeat):
        for kind in results:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, "--ops", str(ops)], env=env,
                               capture_output=True, text=True, timeout=300)
            line = [l for l in p.stdout.splitlines() if l.startswith("CHILD ")]
            r = json.loads(line[-1][6:]) if line else {"error": "exit %d: %s" % (p.returncode, p.stderr[-300:])}
            if "ns" in r:
                results[kind].append(r["ns"])
            else:
                errors.append("%s: %s" % (kind, r.get("error")))
    med = {k: round(statistics.median(v), 1) if v else None for k, v in results.items()}
    ratio = round(med["cxx"] / med["pluggable"], 3) if med["cxx"] and med["pluggable"] else None
    for k, v in results.items():
        print("%-9s ns per torch.empty+del, each child's median: %s" % (k, [round(x, 1) for x in v]))
    print("TIMING " + json.dumps({"median_ns": med, "cxx_over_pluggable": ratio, "ops": ops, "repeat": repeat,
                                  "errors": errors}))


if __name__ == "__main__":
    main()
