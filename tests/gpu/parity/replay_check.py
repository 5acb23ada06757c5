"""replay_check.py: `memsnap replay`'s predictions against PyTorch run natively (issue 13;
docs/BENCHMARKS.md, "Replay: predicted against measured").

For each model (resnet50 batch 64; a GPT-2-sized transformer, 12 layers x 768, batch 8 x 512,
from its config), on one GPU:
  1. record:   the training steps under memsnap (memsnap.enable(), recording from before the first
               CUDA allocation, default settings) -> $OUT/replay_MODEL.db, a memsnap snapshot;
  2. pytorch:  the same under PyTorch's native allocator with its own recorder
               (torch.cuda.memory._record_memory_history) -> $OUT/replay_MODEL.pickle.gz, for the
               imported-snapshot path (`memsnap import`, then replay);
  3. native:   the same under PyTorch's native allocator with PYTORCH_CUDA_ALLOC_CONF set to each
               setting (the default and three others), each in its own process: the measured
               torch.cuda.max_memory_reserved(), max_memory_allocated(), num_device_alloc,
               num_alloc_retries.
Then, when build/memsnap runs here (tests/gpu/prepare.sh copies the libraries it needs beside
it), it predicts each setting's peak reserved from both snapshots with `memsnap replay --json
--set ...` (the device's capacity is the recorded one). Every measurement and prediction is a JSON
line in $OUT/replay_check.jsonl; the snapshots stay in $OUT, so predictions can be computed again
on another machine:

    python3 tests/gpu/parity/replay_check.py --predict-only DIR    # DIR: the $OUT of a GPU run

The children run the same seeded, deterministic steps, so they make the same requests in the same
order; a table of predicted against measured peak reserved comes last.

usage: python3 tests/gpu/parity/replay_check.py [--steps N] [--models resnet50,gpt2] [--predict-only DIR]
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
CLI = os.path.join(ROOT, "build", "memsnap")
MiB = 1 << 20

# The settings compared: PYTORCH_CUDA_ALLOC_CONF, and the same as `memsnap replay --set` items.
SETTINGS = [
    ("default", ""),
    ("max_split_size_mb:64", "max_split_size_mb:64"),
    ("roundup_power2_divisions:4", "roundup_power2_divisions:4"),
    ("expandable_segments:True", "expandable_segments:True"),
]
MODELS = ["resnet50", "gpt2"]


# ---- children: one workload under one allocator -------------------------------------------

def deterministic(torch):
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)


def make_step(torch, model_name):
    """The model, its optimizer and a training step (fixed inputs)."""
    deterministic(torch)
    g = torch.Generator().manual_seed(1)
    if model_name == "resnet50":
        import torchvision
        model = torchvision.models.resnet50().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(64, 3, 224, 224, generator=g).cuda()
        y = torch.randint(0, 1000, (64,), generator=g).cuda()
        loss_of = lambda: torch.nn.functional.cross_entropy(model(x), y)  # noqa: E731
    else:
        import transformers
        cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=512)
        model = transformers.GPT2LMHeadModel(cfg).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, cfg.vocab_size, (8, 512), generator=g).cuda()
        loss_of = lambda: model(ids, labels=ids).loss  # noqa: E731

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


def child(kind, model_name, steps, out_dir):
    """kind: record (memsnap), pytorch (native + PyTorch's recorder) or native. One JSON line."""
    if kind == "record":
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        import torch
        memsnap.record(max_entries=4000000, stacks="python")  # before the first CUDA allocation
    else:
        import torch
        torch.cuda.init()
        if kind == "pytorch":
            torch.cuda.memory._record_memory_history(max_entries=4000000, stacks="python")
    step = make_step(torch, model_name)
    losses = [step() for _ in range(steps)]
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    out = {"kind": kind, "model": model_name, "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "steps": steps,
           "losses": losses, "peak_reserved": torch.cuda.max_memory_reserved(),
           "peak_allocated": torch.cuda.max_memory_allocated(),
           "num_device_alloc": stats.get("num_device_alloc"), "num_alloc_retries": stats.get("num_alloc_retries"),
           "segments_end": stats.get("segment.all.current"),
           "device": torch.cuda.get_device_name(), "total_bytes": torch.cuda.get_device_properties(0).total_memory,
           "torch": torch.__version__}
    if kind == "record":
        path = os.path.join(out_dir, "replay_%s.db" % model_name)
        memsnap.dump(path)
        out["snapshot"] = path
    elif kind == "pytorch":
        raw = os.path.join(out_dir, "replay_%s.pickle" % model_name)
        torch.cuda.memory._dump_snapshot(raw)
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(raw)
        out["snapshot"] = raw + ".gz"
    print(json.dumps(out))


# ---- predictions (needs only build/memsnap) -------------------------------------------------

def cli_works():
    try:
        return subprocess.run([CLI, "version"], capture_output=True, timeout=30).returncode == 0
    except OSError:
        return False


def predict(snapshot, conf, tmp_dir, capacity=None):
    """memsnap replay of `snapshot` (a .db, or a PyTorch .pickle.gz imported first) under the
    PYTORCH_CUDA_ALLOC_CONF string `conf`, on a card of `capacity` bytes (None: the recorded
    one): its JSON, or {"error": ...}."""
    db = snapshot
    if snapshot.endswith(".pickle.gz") or snapshot.endswith(".pickle"):
        db = os.path.join(tmp_dir, os.path.basename(snapshot).split(".pickle")[0] + ".imported.db")
        if not os.path.exists(db):
            r = subprocess.run([CLI, "import", snapshot, "-o", db], capture_output=True, text=True)
            if r.returncode != 0:
                return {"error": "import: " + r.stderr.strip()}
    args = [CLI, "replay", "--json"] + (["--capacity", str(capacity)] if capacity else [])
    for item in filter(None, conf.split(",")):
        key, value = item.split(":", 1)
        args += ["--set", "%s=%s" % (key, value)]
    t0 = time.perf_counter()
    r = subprocess.run(args + [db], capture_output=True, text=True)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        return {"error": "replay exited %d: %s" % (r.returncode, r.stderr.strip()[-500:])}
    out["replay_s"] = time.perf_counter() - t0
    return out


def device0(pred):
    devs = pred.get("devices") or [{}]
    return devs[0]


def predictions(out_dir, measured, log):
    """Adds a prediction line per (model, source, setting) to `log`; returns them."""
    rows = []
    for m in measured:
        if m.get("kind") != "native" or "peak_reserved" not in m:
            continue
        for source, name in (("memsnap", "replay_%s.db"), ("pytorch", "replay_%s.pickle.gz")):
            snap = os.path.join(out_dir, name % m["model"])
            if not os.path.exists(snap):
                continue
            # PyTorch's snapshot does not hold the card's size: the measured one
            p = predict(snap, m["conf"], out_dir, m.get("total_bytes") if source == "pytorch" else None)
            d = device0(p)
            row = {"kind": "prediction", "model": m["model"], "conf": m["conf"], "source": source,
                   "predicted_peak_reserved": d.get("peak_reserved_bytes"),
                   "predicted_peak_allocated": d.get("peak_allocated_bytes"),
                   "predicted_device_allocs": d.get("device_allocs"), "predicted_retries": d.get("retries"),
                   "recorded_peak_reserved": (d.get("recorded") or {}).get("peak_reserved_bytes"),
                   "measured_peak_reserved": m["peak_reserved"], "measured_peak_allocated": m["peak_allocated"],
                   "measured_device_allocs": m["num_device_alloc"], "notes": p.get("notes"),
                   "error": p.get("error"), "replay_s": p.get("replay_s")}
            if row["predicted_peak_reserved"] and m["peak_reserved"]:
                row["error_pct"] = 100.0 * (row["predicted_peak_reserved"] - m["peak_reserved"]) / m["peak_reserved"]
            rows.append(row)
            log(row)
    return rows


def table(rows):
    print("\n%-9s %-28s %-8s %14s %14s %8s %11s" % ("model", "setting", "source", "measured MiB", "predicted MiB",
                                                  "error", "cudaMalloc"))
    for r in rows:
        pr = r.get("predicted_peak_reserved")
        print("%-9s %-28s %-8s %14.1f %14s %8s %11s" % (
            r["model"], r["conf"] or "default", r["source"], r["measured_peak_reserved"] / MiB,
            "%.1f" % (pr / MiB) if pr else "-", "%+.2f%%" % r["error_pct"] if "error_pct" in r else (r.get("error") or "-")[:8],
            "%s/%s" % (r.get("predicted_device_allocs"), r.get("measured_device_allocs"))))


def main():
    args = sys.argv[1:]
    if len(args) == 5 and args[0] == "--child":
        child(args[1], args[2], int(args[3]), args[4])
        return 0
    steps, models, only = 8, MODELS, None
    i = 0
    while i < len(args):
        if args[i] == "--steps":
            steps = int(args[i + 1]); i += 2
        elif args[i] == "--models":
            models = args[i + 1].split(","); i += 2
        elif args[i] == "--predict-only":
            only = args[i + 1]; i += 2
        else:
            print(__doc__)
            return 2
    out_dir = only or os.environ.get("OUT", "/tmp/memsnap-replay")
    os.makedirs(out_dir, exist_ok=True)
    log_path = os.path.join(out_dir, "replay_check.jsonl" if not only else "replay_check.predicted.jsonl")
    logf = open(log_path, "a")

    def log(obj):
        logf.write(json.dumps(obj) + "\n")
        logf.flush()

    measured = []
    if only:
        src = os.path.join(only, "replay_check.jsonl")
        measured = [json.loads(line) for line in open(src) if line.strip()]
        measured = [m for m in measured if m.get("kind") in ("native", "record", "pytorch")]
    else:
        env_base = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
        env_base.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env_base.pop("PYTORCH_ALLOC_CONF", None)
        for model in models:
            runs = [("record", "")] + [("pytorch", "")] + [("native", conf) for _, conf in SETTINGS]
            for kind, conf in runs:
                env = dict(env_base)
                if conf:
                    env["PYTORCH_CUDA_ALLOC_CONF"] = conf
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, model, str(steps), out_dir],
                                   capture_output=True, text=True, env=env)
                line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")), None)
                if r.returncode != 0 or not line:
                    res = {"kind": kind, "model": model, "conf": conf, "error": r.stderr.strip()[-2000:]}
                else:
                    res = json.loads(line)
                res["wall_s"] = time.perf_counter() - t0
                log(res)
                measured.append(res)
                print("%-9s %-8s %-28s %s" % (model, kind, conf or "default",
                                             "peak reserved %.1f MiB" % (res["peak_reserved"] / MiB) if "peak_reserved" in res
                                             else "error: " + res["error"][-300:]), flush=True)
        # the losses must agree: the same requests in the same order
        for model in models:
            losses = {json.dumps(m.get("losses")) for m in measured if m["model"] == model and "losses" in m}
            log({"kind": "check", "model": model, "same_losses_everywhere": len(losses) == 1})
    rows = []
    if cli_works():
        rows = predictions(out_dir, measured, log)
    else:
        print("build/memsnap does not run here: compute the predictions elsewhere with --predict-only %s" % out_dir)
    logf.close()
    if rows:
        table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
