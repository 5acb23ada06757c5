"""compare_builds.py: several builds of libmemsnap.so timed on the GPU machine in one run, the
builds taking turns (issue 26: a change to the capture measured against the build before it).

For each build, REPS times in turn: stack_cost.py's `ab` process (the torch.empty + del loop at
Python depths 5, 30 and 100, recording modes taking turns inside the process: each mode's ratio
to not recording) and its `gpt2pairs` process (GPT-2 small training steps, blocks of 2 steps
taking turns between not recording, events without stacks, Python stacks, native stacks, all
stacks and all stacks with context="alloc", 30 rounds: each round's ratio to not recording);
then, where the build has a diagnostic
library beside it (DIR/timing/libmemsnap.so, `make phase-timing`), phase_timing.py --gpt2 with it.
Prints one table, the medians over the processes, last; raw results to $OUT/compare_builds.json.

usage: python3 tests/gpu/bench/compare_builds.py [--reps N] [--budget SECONDS] [--cases ab,gpt2pairs,phase]
                                          [--gpt2-shapes BxT[,BxT...]] [--with-pytorch] NAME=DIR [NAME=DIR...]
       --with-pytorch: also a gpt2pairs process on PyTorch's allocator, its recorder
       (_record_memory_history, stacks="all") turned on and off, for each size in turn.
       --gpt2-shapes: the gpt2pairs process once for each batch x sequence length in turn
       (default 4x256, bound by the CPU's dispatch; 8x512 is the parity table's, bound by the GPU).
       DIR holds a libmemsnap.so (its libunwind, cJSON, SQLite found through LD_LIBRARY_PATH or
       beside it: tests/gpu/prepare.sh puts them in build/, which this script puts first on
       LD_LIBRARY_PATH).
"""
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import stack_cost  # noqa: E402

OUT = os.environ.get("OUT") or "/tmp"


def main(argv):
    reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else 3
    budget = float(argv[argv.index("--budget") + 1]) if "--budget" in argv else 480.0
    cases = argv[argv.index("--cases") + 1].split(",") if "--cases" in argv else ["ab", "gpt2pairs", "phase"]
    shapes = argv[argv.index("--gpt2-shapes") + 1].split(",") if "--gpt2-shapes" in argv else [stack_cost.GPT2_SHAPE]
    builds = [a.split("=", 1) for a in argv[1:] if "=" in a]
    if not builds:
        sys.exit(__doc__)
    for name, d in builds:
        if not os.path.exists(os.path.join(d, "libmemsnap.so")):
            sys.exit("compare_builds: %s has no libmemsnap.so" % d)
    names = [name for name, _ in builds]
    if "PyTorch" in names or len(set(names)) < len(names):
        sys.exit("compare_builds: each build needs its own name, and PyTorch is the --with-pytorch rows'")
    if len(set(shapes)) < len(shapes):
        sys.exit("compare_builds: --gpt2-shapes names a size twice")
    os.environ["LD_LIBRARY_PATH"] = os.path.join(stack_cost.ROOT, "build") + ":" + os.environ.get("LD_LIBRARY_PATH", "")
    began = time.monotonic()
    given = os.environ.get("STACK_COST_GPT2_SHAPE")
    for shape in shapes:  # refused here rather than in every child
        os.environ["STACK_COST_GPT2_SHAPE"] = shape
        stack_cost.gpt2_shape()
    if given is None:  # phase timing's GPT-2 steps keep the size this process was given
        del os.environ["STACK_COST_GPT2_SHAPE"]
    else:
        os.environ["STACK_COST_GPT2_SHAPE"] = given
    runs = ([("ab", None)] if "ab" in cases else []) + [("gpt2pairs", s) for s in shapes if "gpt2pairs" in cases]
    results = {name: {"ab": [], "gpt2pairs": [], "phase": None} for name, _ in builds}
    pytorch = "--with-pytorch" in argv and "gpt2pairs" in cases
    results["PyTorch"] = {"gpt2pairs": []}
    for rep in range(reps):
        if rep and time.monotonic() - began > budget:
            print("budget of %.0f s spent after %d repetitions" % (budget, rep), flush=True)
            break
        order = builds[rep % len(builds):] + builds[:rep % len(builds)]
        for name, d in order:
            env = {"MEMSNAP_LIB": os.path.abspath(os.path.join(d, "libmemsnap.so"))}
            for case, shape in runs:
                r = stack_cost.run(case, "memsnap", None, dict(env, STACK_COST_GPT2_SHAPE=shape) if shape else env)
                if shape:
                    r["shape"] = shape
                results[name][case].append(r)
                brief = r.get("error", "")[-300:] or (
                    {m: {k: round(v / r["us"]["None"][k], 3) for k, v in x.items()} for m, x in r["us"].items()}
                    if case == "ab" else {"ratio_quartiles": r["ratio_quartiles"], "ms": r["ms_by_mode"],
                                          "captures_per_step": r["captures_per_step"]})
                print("rep %d %-8s %-9s %s" % (rep, name, case + (" " + shape if shape else ""), brief), flush=True)
        for shape in shapes if pytorch else []:  # PyTorch's recorder, its allocator
            r = stack_cost.run("gpt2pairs", "native", None, {"STACK_COST_GPT2_SHAPE": shape})
            r["shape"] = shape
            results["PyTorch"]["gpt2pairs"].append(r)
            print("rep %d %-8s %-9s %s" % (rep, "PyTorch", "gpt2pairs " + shape, r.get("error", "")[-300:] or {
                "ratio_quartiles": r["ratio_quartiles"], "ms": r["ms_by_mode"]}), flush=True)
    for name, d in builds:
        timing = os.path.join(d, "timing", "libmemsnap.so")
        if "phase" in cases and os.path.exists(timing) and time.monotonic() - began < budget + 60:
            p = subprocess.run([sys.executable, os.path.join(HERE, "phase_timing.py"), "--gpt2", "20000"],
                               env=dict(os.environ, PHASE_LIB=os.path.abspath(timing), OUT=""), capture_output=True,
                               text=True, timeout=400)
            results[name]["phase"] = p.stdout[-4000:] + p.stderr[-1500:]
            print("phase timing, %s:\n%s" % (name, results[name]["phase"]), flush=True)
    with open(os.path.join(OUT, "compare_builds.json"), "w") as f:
        json.dump(results, f, indent=1)

    def med(v):
        return statistics.median(v) if v else float("nan")

    modes = ("none", "python", "native", "all", "all-alloc")
    print("\nmedians over processes (ab: each process's ratio to not recording; gpt2pairs: the median round's)")
    if "gpt2pairs" not in cases:
        print("%-8s %-10s %8s %8s %8s (processes)" % ("build", "ab mode", "D=5", "D=30", "D=100"))
    else:
        print("%-8s %-10s %8s %8s %8s   %-7s %-10s %8s %8s %8s %s" % (
            "build", "ab mode", "D=5", "D=30", "D=100", "shape", "gpt2 mode", "ratio", "ms", "caps", "(processes)"))
    for name, _ in builds:
        ab = [x for x in results[name]["ab"] if "error" not in x]

        def ab_row(mode):
            return [med([x["us"][mode][str(d)] / x["us"]["None"][str(d)] for x in ab]) for d in stack_cost.DEPTHS]

        if "gpt2pairs" not in cases:
            for mode in modes:
                print("%-8s %-10s %7.3fx %7.3fx %7.3fx (%d)" % (name, mode, *ab_row(mode), len(ab)))
            continue
        for i, shape in enumerate(shapes):
            g = [x for x in results[name]["gpt2pairs"] if "error" not in x and x.get("shape") == shape]
            for mode in modes:
                row = ab_row(mode) if not i else [float("nan")] * len(stack_cost.DEPTHS)
                gr = med([x["ratio_quartiles"][mode][1] for x in g if mode in x["ratio_quartiles"]])
                gms = med([x["ms_by_mode"][mode] for x in g if mode in x["ms_by_mode"]])
                gc = med([x["captures_per_step"][mode] for x in g if mode in x["captures_per_step"]])
                print("%-8s %-10s %7.3fx %7.3fx %7.3fx   %-7s %-10s %7.4fx %8.2f %8.0f" % (
                    name, mode, *row, shape, mode, gr, gms, gc))
            gms = med([x["ms_by_mode"]["None"] for x in g])
            print("%-8s %-10s %26s   %-7s %-10s %17.2f %8s (%d)" % (name, "", "", shape, "None", gms, "", len(g)))
    for shape in shapes if pytorch else []:
        g = [x for x in results["PyTorch"]["gpt2pairs"] if "error" not in x and x.get("shape") == shape]
        gr = med([x["ratio_quartiles"]["all"][1] for x in g])
        gms = med([x["ms_by_mode"]["None"] for x in g])
        print("%-8s %-10s %26s   %-7s %-10s %7.4fx %8.2f %8s (%d; ms: not recording)" % (
            "PyTorch", "", "", shape, "recorder", gr, gms, "", len(g)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
