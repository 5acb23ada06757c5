"""dump_speed.py: writing a snapshot, memsnap against PyTorch's torch.cuda.memory._dump_snapshot.

Both record with Python and native stacks (PyTorch: _record_memory_history(stacks="all") on its
native allocator; memsnap: memsnap.record(stacks="all") under memsnap.enable()), run the same
workload, then write their snapshot; only the write is timed:

  gpt2   transformers GPT2LMHeadModel (12 layers, 768 wide, batch 8 x 512, AdamW), recording from
         before the model is built through --gpt2-steps training steps (default 6: about 19,500 events, as the issue's GPT-2 run; 2 give about 6,700)
  100k   torch.empty of 1024 to 4096 floats and del, 40,000 times (alloc, free_requested,
         free_completed: over 100,000 events), one tensor in a hundred kept

Every (case, side) runs in a process of its own, sides alternating, --reps times (default 3);
the table gives the medians. memsnap's file is checked after each write: it opens as a
snapshot, holds the events, and no temporary file is left beside it (the write is atomic: a
temporary file renamed into place). Raw results: $OUT/dump_speed.jsonl, one JSON object a run.

  python3 tests/gpu/bench/dump_speed.py [--reps N] [--gpt2-steps N]
  python3 tests/gpu/bench/dump_speed.py --sim        # no GPU, no torch: memsnap's side of 100k on the
                                               # simulated device, to try the script
"""
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OUT = os.environ.get("OUT", "/tmp")
GOAL = 10.0  # memsnap at least this many times faster (issue 15)


def start(side, entries):
    """Starts recording on `side` (torch or memsnap) with Python + native stacks; returns torch."""
    if side == "memsnap":
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        import torch
        memsnap.record(max_entries=entries, stacks="all")
        return torch
    import torch
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=entries, stacks="all")
    return torch


def work_gpt2(torch, steps):
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=512)
    model = transformers.GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), generator=torch.Generator().manual_seed(1)).cuda()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        model(ids, labels=ids).loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return model, opt  # alive while the snapshot is written, as in a real run


def work_100k(torch):
    keep = []
    for i in range(40000):
        x = torch.empty(1024 + (i % 7) * 512, device="cuda")
        if i % 100 == 0:
            keep.append(x)
        del x
    torch.cuda.synchronize()
    return keep


def dump(side, path):
    """Writes the snapshot; returns (seconds, events in it)."""
    if side == "memsnap":
        import memsnap
        t0 = time.perf_counter()
        memsnap.dump(path)
        seconds = time.perf_counter() - t0
        return seconds, check_memsnap_file(path)
    import pickle
    import torch
    t0 = time.perf_counter()
    torch.cuda.memory._dump_snapshot(path)
    seconds = time.perf_counter() - t0
    with open(path, "rb") as f:
        snap = pickle.load(f)
    return seconds, sum(len(t) for t in snap["device_traces"])


def check_memsnap_file(path):
    """The events of a finished memsnap snapshot; raises if it is not whole or a temporary is left."""
    import sqlite3
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    version = db.execute("pragma user_version").fetchone()[0]
    events = db.execute("select count(*) from events").fetchone()[0]
    frames = db.execute("select count(*) from frames").fetchone()[0]
    db.close()
    left = [f for f in os.listdir(os.path.dirname(path) or ".") if f.startswith(os.path.basename(path) + ".tmp")]
    if version != 1 or events == 0 or frames == 0 or left:
        raise RuntimeError("snapshot %s: format %s, %d events, %d frames, temporaries left: %s" % (path, version, events, frames, left))
    return events


def child(case, side, args):
    entries = 1000000
    if side == "sim":  # memsnap alone on the simulated device: the script's own test
        os.environ["MEMSNAP_BACKEND"] = "sim"
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.record(max_entries=entries, stacks="all")
        keep = []
        for i in range(40000):
            p = memsnap.malloc(4 * (1024 + (i % 7) * 512))
            if i % 100 == 0:
                keep.append(p)
            else:
                memsnap.free(p)
        seconds, events = dump("memsnap", os.path.join(OUT, "dump_speed-sim.db"))
        return {"seconds": seconds, "events": events}
    torch = start(side, entries)
    held = work_gpt2(torch, args["gpt2_steps"]) if case == "gpt2" else work_100k(torch)
    path = os.path.join(OUT, "dump_speed-%s-%s.%s" % (case, side, "db" if side == "memsnap" else "pickle"))
    seconds, events = dump(side, path)
    del held
    return {"seconds": seconds, "events": events, "bytes": os.path.getsize(path)}


def run(case, side, args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("MEMSNAP_LIB", os.path.join(ROOT, "build", "libmemsnap.so"))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", case, side, json.dumps(args)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (p.stderr or p.stdout)[-600:]}


def summarize(results):
    """Rows of the table from {(case, side): [run, ...]}: medians, the ratio and the verdict."""
    rows = []
    for case in ("gpt2", "100k"):
        torch_runs = [r for r in results.get((case, "torch"), []) if "seconds" in r]
        ms_runs = [r for r in results.get((case, "memsnap"), []) if "seconds" in r]
        if not torch_runs or not ms_runs:
            rows.append({"case": case, "error": True})
            continue
        t = statistics.median(r["seconds"] for r in torch_runs)
        m = statistics.median(r["seconds"] for r in ms_runs)
        rows.append({"case": case, "torch_events": torch_runs[0]["events"], "memsnap_events": ms_runs[0]["events"],
                     "torch_s": t, "memsnap_s": m, "ratio": t / m if m > 0 else float("inf"),
                     "torch_all": [round(r["seconds"], 3) for r in torch_runs],
                     "memsnap_all": [round(r["seconds"], 3) for r in ms_runs]})
    return rows


def table(rows):
    lines = ["%-6s %17s %11s %11s %8s  %s" % ("case", "events (pt / ms)", "PyTorch s", "memsnap s", "ratio", "goal >= %gx" % GOAL)]
    for r in rows:
        if r.get("error"):
            lines.append("%-6s %s" % (r["case"], "no result (see the errors above)"))
            continue
        lines.append("%-6s %8d / %-6d %11.3f %11.3f %7.1fx  %s" % (
            r["case"], r["torch_events"], r["memsnap_events"], r["torch_s"], r["memsnap_s"], r["ratio"],
            "met" if r["ratio"] >= GOAL else "missed"))
    return "\n".join(lines)


def main(argv):
    if argv[1:2] == ["--child"]:
        print("RESULT " + json.dumps(child(argv[2], argv[3], json.loads(argv[4]))))
        return 0
    reps = int(argv[argv.index("--reps") + 1]) if "--reps" in argv else 3
    args = {"gpt2_steps": int(argv[argv.index("--gpt2-steps") + 1]) if "--gpt2-steps" in argv else 6}
    os.makedirs(OUT, exist_ok=True)
    raw = open(os.path.join(OUT, "dump_speed.jsonl"), "a")
    if "--sim" in argv:
        times = []
        for rep in range(reps):
            r = run("100k", "sim", args)
            raw.write(json.dumps(dict(r, case="100k", side="sim", rep=rep)) + "\n")
            if "error" in r:
                print("error:", r["error"])
                return 1
            times.append(r["seconds"])
        print("memsnap on the simulated device, %d events: dump %.3f s (median of %s)" % (r["events"], statistics.median(times), times))
        return 0
    results = {}
    for rep in range(reps):
        for case in ("gpt2", "100k"):
            for side in (("torch", "memsnap") if rep % 2 == 0 else ("memsnap", "torch")):
                r = run(case, side, args)
                raw.write(json.dumps(dict(r, case=case, side=side, rep=rep, **args)) + "\n")
                raw.flush()
                if "error" in r:
                    print("error in %s/%s: %s" % (case, side, r["error"]))
                else:
                    print("%s %s rep %d: %.3f s, %d events" % (case, side, rep, r["seconds"], r["events"]))
                results.setdefault((case, side), []).append(r)
    rows = summarize(results)
    raw.write(json.dumps({"summary": rows}) + "\n")
    raw.close()
    print()
    print(table(rows))
    return 0 if all(not r.get("error") and r["ratio"] >= GOAL for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
