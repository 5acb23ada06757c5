"""stack_cost.py: what recording stacks costs under PyTorch, memsnap against PyTorch's recorder,
on one GPU, in one run (docs/BENCHMARKS.md, "Stacks at depth", issue 26).

Every case runs in a child process pinned to one core (the allocator is chosen before CUDA
starts); the cases take turns, REPS times, and the parent prints medians and ratios, the short
table last:

  empty   a `torch.empty(1024, device="cuda"); del` loop, us per op, called D Python frames
          deeper than the child's own code for D = 5, 30, 100 (the depths take turns inside the
          process): PyTorch's native allocator; PyTorch's recorder
          (_record_memory_history(stacks="all"), its default context "all"); memsnap
          (memsnap.enable()) not recording, recording Python stacks, recording all stacks
          (Python + native, frees' too: MEMSNAP_CONTEXT's default), and all stacks with
          context="alloc" (frees without a stack)
  gpt2    a GPT-2 training step (transformers' GPT2LMHeadModel from a GPT2Config: GPT-2 small,
          12 layers, 768 wide; no weights downloaded, nothing fetched; batch 4 x 256 tokens, or
          STACK_COST_GPT2_SHAPE's "BxT", AdamW, TF32), ms per step: PyTorch's native allocator,
          memsnap not recording, memsnap recording all stacks
  ab      the same loop with recording turned on and off inside one process, the modes taking
          turns (memsnap: not recording, Python stacks, all stacks, all stacks with
          context="alloc", and events without stacks and native stacks alone; PyTorch's
          allocator: not recording, its recorder with stacks="all"):
          the ratios to not recording within a process, which a process's placement on the host
          (docs/BENCHMARKS.md: processes are bimodal, each for its life) moves for both sides
  gpt2ab  GPT-2 steps with memsnap's recording turned off and on inside one process, blocks of
          10 steps taking turns (ms per step by mode)
  gpt2pairs  the same in 30 rounds of 2-step blocks (memsnap: not recording, events without
          stacks, Python stacks, native stacks, all stacks, all stacks with context="alloc";
          PyTorch's allocator: not recording, its recorder): each round's ratio to its block not
          recording (quartiles over the rounds) and memsnap's captures a step (compare_builds.py
          runs it)
  check   memsnap with MEMSNAP_TEST_STACKS=check on both workloads (a few hundred ops and two
          GPT-2 steps): every capture is made the new way and the way before (unw_backtrace, the
          C API) and compared; prints how many differ (must be 0) and how many walks fell back
          to libunwind

Each memsnap process also reports memsnap.stack_counters() over its timed loops (captures that
took a lock or the GIL, and which Python reader was used), and every process its involuntary
context switches and threads, to tell a slow process's cause.

Goals (issue 26): the loop with all stacks at most 1.3x the loop without recording, and below
half of PyTorch's recorder; the GPT-2 step with all stacks within 1% of native.

usage: python3 tests/gpu/bench/stack_cost.py [--reps N] [--skip-gpt2] [--cases empty,ab,gpt2] [--budget SECONDS]
       Run from anywhere: the library is build/libmemsnap.so of this repository (build it here
       with tests/gpu/prepare.sh, which also copies libunwind, SQLite and cJSON beside it, then
       carry build/); MEMSNAP_LIB overrides it. Needs torch and transformers, no network.
       Stops starting new processes after --budget seconds (default 520) and prints what it has.
       Results also go to $OUT/stack_cost.json (default /tmp).
"""
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OUT = os.environ.get("OUT") or "/tmp"
DEPTHS = (5, 30, 100)


def start(allocator, stacks):
    """allocator: native (PyTorch's) or memsnap; stacks: None (not recording), python, all or
    all-alloc (all stacks, context "alloc")."""
    context = None
    if stacks == "all-alloc":
        stacks, context = "all", "alloc"
    if allocator == "memsnap":
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        import torch
        torch.cuda.init()
        if stacks:
            memsnap.record(max_entries=100000, stacks=stacks, context=context)
        return torch
    import torch
    torch.cuda.init()
    if stacks:
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks=stacks, context=context or "all")
    return torch


def empty_loop(torch, n):
    for _ in range(n):
        x = torch.empty(1024, device="cuda")
        del x


def at_depth(depth, fn, *args):
    """fn(*args) called `depth` Python frames deeper."""
    if depth > 1:
        return at_depth(depth - 1, fn, *args)
    return fn(*args)


def timed_loop(torch, n):
    t0 = time.perf_counter()
    empty_loop(torch, n)
    return (time.perf_counter() - t0) / n * 1e6


def process_facts():
    """Involuntary context switches so far, threads, the CPU the process is on, the time the
    hypervisor took from that CPU so far (steal, ticks), and the process's memory in huge pages."""
    cpus = sorted(os.sched_getaffinity(0))
    facts = {"threads": len(os.listdir("/proc/self/task")), "cpu": cpus}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("nonvoluntary_ctxt_switches"):
                    facts["involuntary_switches"] = int(line.split()[1])
        with open("/proc/stat") as f:
            for line in f:
                if len(cpus) == 1 and line.startswith("cpu%d " % cpus[0]):
                    facts["steal_ticks"] = int(line.split()[8])
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    facts["huge_kib"] = int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return facts


def facts_delta(f0, f1):
    for k in ("involuntary_switches", "steal_ticks"):
        f1[k] = f1.get(k, 0) - f0.get(k, 0)
    return f1


def counters(allocator):
    if allocator != "memsnap":
        return None
    import memsnap
    return memsnap.stack_counters()


def counter_sum(deltas):
    """The counters of several timed stretches added up (python_reader: the last one's)."""
    deltas = [x for x in deltas if x]
    if not deltas:
        return None
    return {k: sum(x[k] for x in deltas) for k in deltas[0] if k != "python_reader"} | \
        {"python_reader": deltas[-1]["python_reader"]}


def counter_delta(a, b):
    return {k: b[k] - a[k] for k in b if k != "python_reader"} | {"python_reader": b.get("python_reader")} if a and b else None


def empty_work(torch, quick, allocator="native"):
    sys.setrecursionlimit(max(1000, 4 * max(DEPTHS)))
    for d in DEPTHS:
        at_depth(d, empty_loop, torch, 200 if quick else 3000)
    if quick:
        return {}
    times = {d: [] for d in DEPTHS}
    c0, f0 = counters(allocator), process_facts()
    for _ in range(5):  # the depths take turns, so a drift of the host moves them together
        for d in DEPTHS:
            times[d].append(at_depth(d, timed_loop, torch, 20000))
    return {"us": {str(d): statistics.median(times[d]) for d in DEPTHS}, "counters": counter_delta(c0, counters(allocator)),
            "facts": facts_delta(f0, process_facts())}


def set_recording(allocator, torch, mode):
    """mode: None (off), none (events without stacks), native, python, all, all-alloc."""
    stacks, context = (mode or "all", "all") if mode != "all-alloc" else ("all", "alloc")
    if allocator == "memsnap":
        import memsnap
        if mode:
            memsnap.record(max_entries=100000, stacks=stacks, context=context)
        else:
            memsnap.stop_recording()
    else:
        torch.cuda.memory._record_memory_history("all" if mode else None, max_entries=100000, stacks=stacks,
                                                 context=context)


# The recording modes the ab and gpt2pairs cases take in turn, by allocator (the first: not recording).
AB_MODES = {"memsnap": (None, "none", "native", "python", "all", "all-alloc"), "native": (None, "all")}


def ab_work(torch, allocator):
    """The loop with each recording mode in turn, in this one process: us per op by mode and
    depth (medians of 5 turns), and memsnap's counters over the timed loops by mode."""
    sys.setrecursionlimit(max(1000, 4 * max(DEPTHS)))
    modes = AB_MODES[allocator]
    for m in modes:  # every stack seen once before timing
        set_recording(allocator, torch, m)
        for d in DEPTHS:
            at_depth(d, empty_loop, torch, 3000)
    times = {str(m): {d: [] for d in DEPTHS} for m in modes}
    deltas = {str(m): [] for m in modes}
    f0 = process_facts()
    for _ in range(5):
        for m in modes:
            set_recording(allocator, torch, m)
            c0 = counters(allocator)
            for d in DEPTHS:
                times[str(m)][d].append(at_depth(d, timed_loop, torch, 20000))
            deltas[str(m)].append(counter_delta(c0, counters(allocator)))
    set_recording(allocator, torch, None)
    return {"us": {m: {str(d): statistics.median(v[d]) for d in DEPTHS} for m, v in times.items()},
            "counters": {m: counter_sum(v) for m, v in deltas.items()},
            "facts": facts_delta(f0, process_facts())}


GPT2_SHAPE = "4x256"  # the GPT-2 step's batch x sequence length unless STACK_COST_GPT2_SHAPE says


def gpt2_shape():
    """The GPT-2 step's batch and sequence length: STACK_COST_GPT2_SHAPE, "BxT" (default 4x256, a
    step bound by the CPU's dispatch; 8x512 is the parity table's, bound by the GPU)."""
    text = os.environ.get("STACK_COST_GPT2_SHAPE", GPT2_SHAPE)
    m = re.fullmatch(r"([1-9][0-9]{0,2})x([1-9][0-9]{0,3})", text)
    if not m or int(m.group(2)) > 1024:
        sys.exit("stack_cost: STACK_COST_GPT2_SHAPE must be BxT with T at most 1024, not %r" % text)
    return int(m.group(1)), int(m.group(2))


def gpt2_step(torch):
    """A GPT-2 small training step (the model and optimizer made here, the batch gpt2_shape()'s):
    the function that makes one."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, gpt2_shape(), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    return step


def gpt2_work(torch, quick, toggle=None, rounds=5, steps=10):
    """ms per step (median of `rounds` blocks of `steps` steps); with toggle (allocator, modes),
    the blocks take turns between the recording modes inside this process: ms per step by mode
    (medians), and each mode's ratio to the first mode's block of the same round (median and
    quartiles over the rounds) with memsnap's captures a step."""
    step = gpt2_step(torch)
    for _ in range(2 if quick else 8):
        step()
    torch.cuda.synchronize()
    if quick:
        return {}
    modes = toggle[1] if toggle else [None]
    times = {str(m): [] for m in modes}
    deltas = {str(m): [] for m in modes}
    for _ in range(rounds):
        for m in modes:
            if toggle:
                set_recording(toggle[0], torch, m)
                step()  # the mode's first step outside the timing
            torch.cuda.synchronize()
            c0 = counters(toggle[0] if toggle else "native")
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
            times[str(m)].append((time.perf_counter() - t0) / steps * 1e3)
            deltas[str(m)].append(counter_delta(c0, counters(toggle[0] if toggle else "native")))
    if not toggle:
        return {"ms": statistics.median(times["None"])}
    set_recording(toggle[0], torch, None)
    first = str(modes[0])

    def quartiles(v):
        v = sorted(v)
        return [v[len(v) // 4], statistics.median(v), v[(3 * len(v)) // 4]]

    caps = {m: counter_sum(v) for m, v in deltas.items()}
    return {"ms_by_mode": {m: statistics.median(v) for m, v in times.items()},
            "ratio_quartiles": {m: quartiles([a / b for a, b in zip(v, times[first])]) for m, v in times.items()},
            "captures_per_step": {m: (c["captures"] / (rounds * steps) if c else 0) for m, c in caps.items()},
            "python_per_step": {m: (c["python_records"] / (rounds * steps) if c else 0) for m, c in caps.items()}}


def child(argv):
    if hasattr(os, "sched_setaffinity"):  # one core for every case: the host's cores differ
        os.sched_setaffinity(0, {int(os.environ.get("BENCH_CPU", "5")) % os.cpu_count()})
    case, allocator, stacks = argv[0], argv[1], (None if argv[2] == "none" else argv[2])
    torch = start(allocator, None if case in ("ab", "gpt2ab", "gpt2pairs") else stacks)
    if case == "ab":
        result = ab_work(torch, allocator)
    elif case == "gpt2ab":
        result = gpt2_work(torch, False, (allocator, (None, "all")))
    elif case == "gpt2pairs":  # many short blocks: each round's ratio to not recording
        result = gpt2_work(torch, False, (allocator, AB_MODES[allocator]), 30, 2)
    elif case == "check":  # both workloads, briefly, in one process
        empty_work(torch, True)
        gpt2_work(torch, True)
        result = {}
    else:
        result = empty_work(torch, False, allocator) if case == "empty" else gpt2_work(torch, False)
    print("RESULT " + json.dumps(result), flush=True)


def run(case, allocator, stacks, env_extra=None):
    env = dict(os.environ, MEMSNAP_LIB=os.environ.get("MEMSNAP_LIB", os.path.join(ROOT, "build", "libmemsnap.so")),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.update(env_extra or {})
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case, allocator, stacks or "none"],
                           capture_output=True, text=True, timeout=300, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 300 s"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["stderr"] = p.stderr[-3000:]
            return r
    return {"error": (p.stderr or p.stdout)[-1500:]}


EMPTY = [("native", None), ("native", "all"), ("memsnap", None), ("memsnap", "python"), ("memsnap", "all"),
         ("memsnap", "all-alloc")]
GPT2 = [("native", None), ("memsnap", None), ("memsnap", "all")]
AB = [("memsnap", None), ("native", None)]
GPT2AB = [("memsnap", None)]
NAMES = {("native", None): "PyTorch, native allocator", ("native", "all"): "PyTorch, _record_memory_history(stacks='all')",
         ("memsnap", None): "memsnap, not recording", ("memsnap", "python"): "memsnap, Python stacks",
         ("memsnap", "all"): "memsnap, all stacks", ("memsnap", "all-alloc"): "memsnap, all stacks, context='alloc'"}


def main(argv):
    if argv[1:2] == ["--child"]:
        child(argv[2:])
        return 0
    reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else 3
    budget = float(argv[argv.index("--budget") + 1]) if "--budget" in argv else 520.0
    only = argv[argv.index("--cases") + 1].split(",") if "--cases" in argv else ["empty", "ab", "gpt2", "gpt2ab"]
    gpt2 = "--skip-gpt2" not in argv and "gpt2" in only
    gpt2_shape()  # a malformed STACK_COST_GPT2_SHAPE is refused before any process starts
    began = time.monotonic()
    print("library: %s" % os.environ.get("MEMSNAP_LIB", os.path.join(ROOT, "build", "libmemsnap.so")), flush=True)
    check = run("check", "memsnap", "all", {"MEMSNAP_TEST_STACKS": "check"})
    r = {}
    cases = ([("empty",) + c for c in EMPTY] if "empty" in only else []) + \
        ([("ab",) + c for c in AB] if "ab" in only else []) + ([("gpt2",) + c for c in GPT2] if gpt2 else []) + \
        ([("gpt2ab",) + c for c in GPT2AB] if "gpt2ab" in only and "--skip-gpt2" not in argv else [])
    for rep in range(reps):
        if rep and time.monotonic() - began > budget:
            print("budget of %.0f s spent: %d of %d repetitions" % (budget, rep, reps), flush=True)
            break
        for c in cases:
            r.setdefault(c, []).append(run(*c))
            res = r[c][-1]
            print("rep %d %-6s %-44s %s" % (rep, c[0], NAMES[c[1:]] if "ab" not in c[0] else c[1] + ", modes in turn",
                                             {k: v for k, v in res.items() if k != "stderr"}
                                             if "error" not in res else "error: " + res["error"][-300:]), flush=True)
    with open(os.path.join(OUT, "stack_cost.json"), "w") as f:
        json.dump({"|".join(str(x) for x in k): v for k, v in r.items()} | {"check": check}, f, indent=1)
    print("results: %s" % os.path.join(OUT, "stack_cost.json"))

    def med(key, pick):
        vals = [pick(x) for x in r.get(key, []) if "error" not in x]
        return statistics.median(vals) if vals else float("nan")

    m = re.search(r"memsnap: stack check: .*", check.get("stderr", "") + check.get("error", ""))
    print("\nstacks on PyTorch, each capture made both ways (MEMSNAP_TEST_STACKS=check):")
    print("  " + (m.group(0) if m else "no report: " + check.get("error", "")[-600:]))
    for key, runs in r.items():
        errors = [x["error"] for x in runs if "error" in x]
        if errors:
            print("error in %s %s: %s" % (key[0], key[1], errors[0][-600:]))

    # each process's figures, so that a slow process shows with its counters and switches
    print("\nper process (us/op at D=%d; while timed: involuntary context switches, the CPU's steal ticks;"
          " threads, memory in huge pages):" % DEPTHS[1])
    for key, runs in r.items():
        if key[0].startswith("gpt2"):
            continue
        for x in runs:
            if "error" in x:
                continue
            us = "%.3f" % x["us"][str(DEPTHS[1])] if key[0] == "empty" else " ".join(
                "%s=%.3f" % (m, v[str(DEPTHS[1])]) for m, v in x["us"].items())
            f = x.get("facts", {})
            print("  %-5s %-8s %-9s %s  switches %s threads %s steal %s huge %s KiB" % (
                key[0], key[1], key[2] or "none", us, f.get("involuntary_switches"), f.get("threads"),
                f.get("steal_ticks"), f.get("huge_kib")))
            cs = x.get("counters")
            if cs:
                for m, c in (cs.items() if key[0] == "ab" else [("", cs)]):
                    if c:
                        print("        %s counters %s" % (m, {k: v for k, v in c.items() if v}))

    n = len(r.get(("empty",) + EMPTY[0], []))
    if n:
        print("\ntorch.empty(1024) + del, us/op, median of %d processes; D Python frames deeper" % n)
        print("  %-44s" % "" + "".join("  %9s" % ("D=%d" % d) for d in DEPTHS))
        e = {c: {d: med(("empty",) + c, lambda x, d=d: x["us"][str(d)]) for d in DEPTHS} for c in EMPTY}
        for c in EMPTY:
            print("  %-44s" % NAMES[c] + "".join("  %9.3f" % e[c][d] for d in DEPTHS))
        base, torch_rec = e[("memsnap", None)], e[("native", "all")]
        print("  %-44s" % "memsnap all stacks / memsnap not recording" +
              "".join("  %8.2fx" % (e[("memsnap", "all")][d] / base[d]) for d in DEPTHS) + "   goal <= 1.3x")
        print("  %-44s" % "memsnap all stacks / PyTorch's recorder" +
              "".join("  %8.2fx" % (e[("memsnap", "all")][d] / torch_rec[d]) for d in DEPTHS) + "   goal < 0.5x")
        print("  %-44s" % "PyTorch's recorder / PyTorch not recording" +
              "".join("  %8.2fx" % (torch_rec[d] / e[("native", None)][d]) for d in DEPTHS))
    ab = {c: r.get(("ab",) + c, []) for c in AB}
    ab_ok = {c: [x for x in v if "error" not in x] for c, v in ab.items()}
    if ab_ok[("memsnap", None)]:
        print("\nthe same loop, recording turned on and off inside each process (ab), median over %d processes of each"
              " process's ratio to not recording" % len(ab_ok[("memsnap", None)]))
        print("  %-44s" % "" + "".join("  %9s" % ("D=%d" % d) for d in DEPTHS))

        def ratio(c, mode):
            return {d: statistics.median([x["us"][mode][str(d)] / x["us"]["None"][str(d)] for x in ab_ok[c]])
                    for d in DEPTHS} if ab_ok[c] else None

        def absolute(c, mode):
            return {d: statistics.median([x["us"][mode][str(d)] for x in ab_ok[c]]) for d in DEPTHS} if ab_ok[c] else None

        for c, mode, name in ((("memsnap", None), "None", "memsnap not recording, us/op"),
                              (("native", None), "None", "PyTorch not recording, us/op"),
                              (("native", None), "all", "PyTorch's recorder, us/op")):
            v = absolute(c, mode)
            if v:
                print("  %-44s" % name + "".join("  %9.3f" % v[d] for d in DEPTHS))
        for mode, name in (("none", "memsnap events, no stacks"), ("native", "memsnap native stacks"),
                           ("python", "memsnap Python stacks"), ("all", "memsnap all stacks"),
                           ("all-alloc", "memsnap all stacks, context=alloc")):
            v = ratio(("memsnap", None), mode)
            print("  %-44s" % (name + " / not recording") + "".join("  %8.2fx" % v[d] for d in DEPTHS) +
                  ("   goal <= 1.3x" if mode == "all" else ""))
        v = ratio(("native", None), "all")
        if v:
            print("  %-44s" % "PyTorch's recorder / not recording" + "".join("  %8.2fx" % v[d] for d in DEPTHS))
        a, t = absolute(("memsnap", None), "all"), absolute(("native", None), "all")
        if a and t:
            print("  %-44s" % "memsnap all stacks / PyTorch's recorder" + "".join("  %8.2fx" % (a[d] / t[d]) for d in DEPTHS) +
                  "   goal < 0.5x (medians of processes)")
    if gpt2:
        g = {c: med(("gpt2",) + c, lambda x: x["ms"]) for c in GPT2}
        print("\nGPT-2 small training step (batch %d x %d), ms, median of %d processes" %
              (gpt2_shape() + (len(r.get(("gpt2",) + GPT2[0], [])),)))
        for c in GPT2:
            print("  %-44s  %9.2f  %.4fx native" % (NAMES[c], g[c], g[c] / g[("native", None)]))
        print("  goal: all stacks within 1%% of native: %.4fx" % (g[("memsnap", "all")] / g[("native", None)]))
    g2 = [x["ms_by_mode"] for x in r.get(("gpt2ab", "memsnap", None), []) if "error" not in x]
    if g2:
        print("\nGPT-2 step, memsnap recording turned off and on (all stacks) inside each process, %d processes:" % len(g2))
        for x in g2:
            print("  not recording %.2f ms, all stacks %.2f ms: %.4fx" % (x["None"], x["all"], x["all"] / x["None"]))
        print("  median of the processes' ratios: %.4fx" % statistics.median(x["all"] / x["None"] for x in g2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
