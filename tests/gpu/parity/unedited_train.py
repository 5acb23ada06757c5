"""unedited_train.py: issue 22 on the GPU: what `memsnap analyze` says of unedited programs recorded
by `memsnap run` in its default mode (docs/BENCHMARKS.md, "An unedited program").

  gpt2      an ordinary Hugging Face GPT-2 training script (6 layers, AdamW, batch 8x512, 6 steps,
            no memsnap import, no marks) that keeps a view of each step's logits
            (`kept.append(out.logits[:, -1])`: the whole logits stay alive). Recorded by
            `memsnap run` (default mode) and by `memsnap run --mode torch-native` (PyTorch's own
            recorder) for comparison. Checked: the first leak candidate is `growing` by about the
            logits' size per step (8 x 512 x 50257 x 4 bytes = 785.3 MiB), iteration_source is not
            `none`, the text report shows the script's line, categories_at_peak sums to the
            allocated peak, `optimizer_state` is AdamW's two states (8 bytes a parameter) and
            `parameter` the weights (4 bytes a parameter), each within 10%.
  retry     a script that allocates and frees 60% of the card, then asks for 70%: the allocator
            releases its cache and retries; `retries` must say so.
  varying   GPT-2 (6 layers) trained on sequence lengths that vary step by step, recorded by
            `memsnap run`; `suggestions` (the replay's sweep) should name expandable segments. The
            same script then runs under native PyTorch with and without that setting: the
            measured peaks reserved against the suggestion's.
  growing   the same with lengths growing step by step (128 to 1024, batch 16): each step's
            activations outgrow the cached blocks, the case expandable segments are for.

The varying program is also recorded by PyTorch's own recorder (--mode torch-native), and the
replay's baseline (the recorded settings replayed) is reported beside each recorded peak.
Programs and snapshots live in a temporary directory, but the varying program's two snapshots,
which are written to $OUT; $OUT also gets unedited_train.jsonl (one line per
program) and unedited_train.log (every command's output). A short table is printed last.

usage (from the repository root, build/ prepared with tests/gpu/prepare.sh):
  python3 tests/gpu/parity/unedited_train.py [--only gpt2,retry,varying,growing]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MEMSNAP = os.path.join(ROOT, "build", "memsnap")
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="memsnap-unedited-")
WORK = tempfile.mkdtemp(prefix="memsnap-unedited-work-")
KEEP = os.environ.get("OUT") or WORK  # the varying program's snapshots come back for a look
MiB = 1 << 20

GPT2 = '''
import torch
from transformers import GPT2Config, GPT2LMHeadModel

config = GPT2Config(n_layer=6)
model = GPT2LMHeadModel(config).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
print("parameters", sum(p.numel() for p in model.parameters()), flush=True)
kept = []
for step in range(6):
    x = torch.randint(0, config.vocab_size, (8, 512), device="cuda")
    out = model(x, labels=x)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
    kept.append(out.logits[:, -1])
print("loss", out.loss.item(), flush=True)
'''

RETRY = '''
import torch

total = torch.cuda.get_device_properties(0).total_memory
a = torch.empty(int(total * 0.6), dtype=torch.uint8, device="cuda")
del a
b = torch.empty(int(total * 0.7), dtype=torch.uint8, device="cuda")
print("allocated", b.numel(), "of", total, flush=True)
'''

VARYING = '''
import os
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
config = GPT2Config(n_layer=6)
model = GPT2LMHeadModel(config).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
lengths = [int(n) for n in os.environ["LENGTHS"].split(",")]
batch = int(os.environ.get("BATCH", "8"))
for step, n in enumerate(lengths):
    x = torch.randint(0, config.vocab_size, (batch, n), device="cuda")
    out = model(x, labels=x)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("peak_reserved", torch.cuda.max_memory_reserved(), flush=True)
'''


def write(name, text):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def run(cmd, env=None, log=None):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    with open(os.path.join(OUT, "unedited_train.log"), "a") as f:
        f.write("$ %s\n%s%s[exit %d, %.1f s]\n" % (" ".join(cmd), p.stdout, p.stderr, p.returncode, time.time() - t))
    return p


def analyze(db, *extra):
    p = run([MEMSNAP, "analyze", "--json", *extra, db])
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": p.stderr[-500:]}


def gpt2(results):
    script = write("train.py", GPT2)
    rows = {}
    for mode in ("default", "torch-native"):
        db = os.path.join(WORK, "train-%s.db" % mode)
        cmd = [MEMSNAP, "run", "-q", "-o", db] + ([] if mode == "default" else ["--mode", mode]) + ["--", sys.executable, script]
        p = run(cmd)
        params = next((int(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("parameters")), 0)
        j = analyze(db)
        text = run([MEMSNAP, "analyze", db]).stdout
        leak = (j.get("leaks") or [{}])[0]
        cat = j.get("categories_at_peak", {})
        peak = j.get("summary", {}).get("peak_allocated_bytes", 0)
        logits = 8 * 512 * 50257 * 4
        row = {
            "program": "gpt2", "mode": mode, "exit": p.returncode, "parameters": params,
            "iteration_source": j.get("summary", {}).get("iteration_source"),
            "iterations": len(j.get("iterations", [])),
            "leak_kind": leak.get("kind"), "leak_per_iteration_mib": round(leak.get("bytes_per_iteration", 0) / MiB, 2),
            "leak_near_logits": abs(leak.get("bytes_per_iteration", 0) - logits) < 0.05 * logits,
            "script_line_in_report": "train.py:" in text.split("leak candidates")[-1][:3000] if "leak candidates" in text else False,
            "categories_sum_to_peak": bool(cat) and sum(cat.values()) == peak,
            "parameter_mib": round(cat.get("parameter", 0) / MiB, 1), "optimizer_state_mib": round(cat.get("optimizer_state", 0) / MiB, 1),
            "parameter_ok": params > 0 and abs(cat.get("parameter", 0) - 4 * params) <= 0.1 * 4 * params,
            "optimizer_state_ok": params > 0 and abs(cat.get("optimizer_state", 0) - 8 * params) <= 0.1 * 8 * params,
            "categories_at_peak": cat, "error": j.get("error"),
        }
        rows[mode] = row
        results.append(row)
    return rows


def retry(results):
    script = write("retry.py", RETRY)
    db = os.path.join(WORK, "retry.db")
    p = run([MEMSNAP, "run", "-q", "-o", db, "--", sys.executable, script])
    j = analyze(db)
    r = j.get("retries") or []
    text = run([MEMSNAP, "analyze", db]).stdout
    row = {"program": "retry", "mode": "default", "exit": p.returncode, "retries": len(r),
           "requested_gib": round(r[0]["requested_bytes"] / 2**30, 2) if r else None,
           "released_gib": round(r[0]["released_bytes"] / 2**30, 2) if r else None,
           "said_in_text": "retried" in text, "error": j.get("error")}
    results.append(row)


# the sequence lengths (and batch) of each varying program: shuffled, and growing step by step (each
# step's activations larger than any cached block: new segments, the case expandable segments fix)
SCHEDULES = {"varying": {"LENGTHS": "128,1024,384,896,256,1024,640,512,960,320", "BATCH": "8"},
             "growing": {"LENGTHS": "128,256,384,512,640,768,896,1024", "BATCH": "16"}}


def varying(results, name="varying"):
    os.environ.update(SCHEDULES[name])
    script = write(name + ".py", VARYING)
    # PyTorch's own recorder's snapshot too (--mode torch-native), replayed the same way: the
    # replay's baseline against the recorded peak, for each kind of snapshot
    db_native = os.path.join(KEEP, name + "-torch-native.db")
    run([MEMSNAP, "run", "-q", "-o", db_native, "--mode", "torch-native", "--", sys.executable, script])
    jn = analyze(db_native)
    db = os.path.join(KEEP, name + ".db")
    p = run([MEMSNAP, "run", "-q", "-o", db, "--", sys.executable, script])
    j = analyze(db)
    sug = j.get("suggestions") or []
    best = sug[0] if sug else {}
    native = {}
    for conf in ("", best.get("pytorch_cuda_alloc_conf", "")):
        q = run([sys.executable, script], env={"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {})
        native[conf or "(defaults)"] = next((int(l.split()[1]) for l in q.stdout.splitlines() if l.startswith("peak_reserved")), None)
    row = {"program": name, "mode": "default", "exit": p.returncode,
           "recorded_peak_reserved_gib": round(j.get("summary", {}).get("peak_reserved_bytes", 0) / 2**30, 2),
           "suggestion": best.get("pytorch_cuda_alloc_conf"),
           "predicted_peak_reserved_gib": round(best.get("peak_reserved_bytes", 0) / 2**30, 2) if best else None,
           "saved_gib": round(best.get("saved_bytes", 0) / 2**30, 2) if best else None,
           "native_peak_reserved_gib": {k: (round(v / 2**30, 2) if v else None) for k, v in native.items()},
           "replay_baseline_peak_reserved_gib": round(
               (j.get("suggestions_sweep") or {}).get("baseline_peak_reserved_bytes", 0) / 2**30, 2),
           "torch_native_recorded_peak_reserved_gib": round(jn.get("summary", {}).get("peak_reserved_bytes", 0) / 2**30, 2),
           "torch_native_replay_baseline_gib": round(
               (jn.get("suggestions_sweep") or {}).get("baseline_peak_reserved_bytes", 0) / 2**30, 2),
           "torch_native_suggestion": ((jn.get("suggestions") or [{}])[0]).get("pytorch_cuda_alloc_conf"),
           "suggestions": sug[:5], "error": j.get("error")}
    results.append(row)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="gpt2,retry,varying,growing")
    args = ap.parse_args()
    results = []
    for name in args.only.split(","):
        try:
            {"gpt2": gpt2, "retry": retry, "varying": varying,
             "growing": lambda r: varying(r, "growing")}[name](results)
        except Exception as e:  # one program's failure must not hide the others'
            results.append({"program": name, "error": repr(e)})
    with open(os.path.join(OUT, "unedited_train.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    print("\n%-8s %-13s %s" % ("program", "mode", "result"))
    for r in results:
        keys = [k for k in r if k not in ("program", "mode", "categories_at_peak", "suggestions")]
        print("%-8s %-13s %s" % (r.get("program"), r.get("mode", ""), ", ".join("%s=%s" % (k, r[k]) for k in keys)))


if __name__ == "__main__":
    main()
