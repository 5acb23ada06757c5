"""test_zoo.py BUILD_DIR: the analysis on real snapshots of the zoo (tests/data/zoo/, recorded by
`memsnap run` on an H100 with PyTorch 2.11: tests/gpu/zoo/), against the answers the programs
are known to have, so that `make test` checks iterations, categories and leaks on real traces
without a GPU.

The known answers come from the programs, not from memsnap: the optimizer steps each runs, the
bytes of its parameters (4 a parameter: fp32) and of AdamW's state (8 a parameter), the lines of
its injected leaks, and, where torch.profiler's memory timeline knows them, its categories on the
same program (tests/gpu/zoo/README.md). Each fixture is xz-compressed; it is unpacked into a
temporary directory.
"""
import json
import lzma
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

build = sys.argv[1]
cli = os.path.join(build, "memsnap")
fixtures = os.path.join(here, "..", "data", "zoo")
work = tempfile.mkdtemp(prefix="memsnap-zoo-")
MiB = 1 << 20
GPT2_6 = 81912576       # parameters of GPT2Config(n_layer=6), as the programs print them
PEFT_ALL, PEFT_TRAINED = 126799104, 2359296  # peft_lora.py: all parameters, the LoRA adapters
LINEAR = 536870912      # two 8192x8192 fp32 weights
LOGITS = 8 * 512 * 50257 * 4  # one step's logits at batch 8, sequence 512, fp32
GPT2_1024 = 203668480   # GPT2Config(n_layer=12, n_embd=1024, n_head=16): fsdp2_train.py's model


def analyze(name, *args):
    db = os.path.join(work, name + ".db")
    if not os.path.exists(db):
        with lzma.open(os.path.join(fixtures, name + ".db.xz")) as f, open(db, "wb") as out:
            out.write(f.read())
    j = subprocess.run([cli, "analyze", "--json", *args, db], capture_output=True, text=True)
    text = subprocess.run([cli, "analyze", *args, db], capture_output=True, text=True)
    return (json.loads(j.stdout) if j.returncode == 0 else {"error": j.stderr}), text.stdout


def near(value, expected, tolerance):
    return abs(value - expected) <= tolerance * expected


def frames(entry):
    return ["%s:%d" % (os.path.basename(f["file"]), f["line"]) for f in entry.get("full_stack", []) if f.get("file")]


def training(name, steps, label="Optimizer.step#AdamW.step"):
    """The checks every leak-free training program passes; its analysis."""
    j, text = analyze(name)
    s = j.get("summary", {})
    check("%s: %d iterations from the optimizer's step ranges" % (name, steps),
          len(j.get("iterations", [])) == steps and s.get("iteration_source") == "ranges" and s.get("iteration_label") == label,
          str({k: s.get(k) for k in ("iteration_source", "iteration_label")}) + " %d" % len(j.get("iterations", [])))
    growing = [l for l in j.get("leaks", []) if l["kind"] in ("growing", "growing_released")]
    check("%s: no growing candidate; the report and the JSON say there is no growth" % name,
          not growing and s.get("growth") == "none" and ("no growth across %d iterations" % steps) in text,
          str([(l["kind"], frames(l)[:3]) for l in growing]))
    check("%s: no autograd graph kept (every forward's backward ran)" % name,
          j.get("kept_graphs") == [] and "autograd graph" not in text, str(j.get("kept_graphs"))[:300])
    cat = j.get("categories_at_peak", {})
    check("%s: the categories at the peak sum to the allocated peak, and each iteration's to its own" % name,
          sum(cat.values()) == s.get("peak_allocated_bytes") and
          all(sum(i["categories"].values()) == i["peak_allocated_bytes"] for i in j.get("iterations", [])))
    return j, text


def categories(name, j, **want):
    """Each category at the peak within its tolerance: name=(bytes, tolerance)."""
    cat = j.get("categories_at_peak", {})
    for category, (expected, tolerance) in want.items():
        check("%s: %s at the peak %.1f MiB, expected %.1f MiB within %d%%" % (
              name, category, cat.get(category, 0) / MiB, expected / MiB, round(tolerance * 100)),
              near(cat.get(category, 0), expected, tolerance))


# The programs: two Linear layers, AdamW and set_to_none=True; SGD with momentum and
# set_to_none=False (torch.profiler on the same programs: parameter 536870912, gradient
# 536870912, optimizer state 1073741824 and 536870912 B)
for name in ("two_linear_adamw", "two_linear_adamw-cxx"):  # -cxx: recorded through the C++ allocator (run 40)
    j, _ = training(name, 6)
    categories(name, j, parameter=(LINEAR, 0.02), gradient=(LINEAR, 0.02), optimizer_state=(2 * LINEAR, 0.02))
j, _ = training("two_linear_sgd_keep_grads", 6, "Optimizer.step#SGD.step")
categories("two_linear_sgd_keep_grads", j, parameter=(LINEAR, 0.02), gradient=(LINEAR, 0.02), optimizer_state=(LINEAR, 0.02))

# GPT-2 (6 layers) eager: the peak is early in backward (the logits and their gradient): few
# gradients yet; with set_to_none=False they are all alive from the first backward on
j, _ = training("gpt2_eager", 6)
categories("gpt2_eager", j, parameter=(4 * GPT2_6, 0.10), optimizer_state=(8 * GPT2_6, 0.10))
check("gpt2_eager: the logits and what forward saved are activations (over half the peak)",
      j["categories_at_peak"]["activation"] > 0.5 * j["summary"]["peak_allocated_bytes"])
j, _ = training("gpt2_eager_keep_grads", 6)
categories("gpt2_eager_keep_grads", j, parameter=(4 * GPT2_6, 0.10), gradient=(4 * GPT2_6, 0.10),
           optimizer_state=(8 * GPT2_6, 0.10))

# Gradient accumulation (4 micro-batches a step), activation checkpointing, bf16 autocast: one
# iteration per optimizer step, the gradients about the parameters' size while they accumulate
j, _ = training("gpt2_accum_ckpt_bf16", 6)
categories("gpt2_accum_ckpt_bf16", j, parameter=(4 * GPT2_6, 0.10), gradient=(4 * GPT2_6, 0.10))
check("gpt2_accum_ckpt_bf16: four backward passes an optimizer step",
      j["summary"]["backward_passes"] == 4 * j["summary"]["optimizer_steps"], str(j["summary"]))

# torch.compile: a compiled graph's buffer caught in flight at two boundaries is no growth
j, _ = training("gpt2_compile", 6)
categories("gpt2_compile", j, parameter=(4 * GPT2_6, 0.10), optimizer_state=(8 * GPT2_6, 0.10))

# Frameworks: the HF Trainer, Lightning (its optimizer step runs the forward and backward passes
# in a closure), PEFT's LoRA (the frozen base weights are parameters, the state only the adapters')
j, _ = training("hf_trainer", 6)
categories("hf_trainer", j, parameter=(4 * GPT2_6, 0.10), optimizer_state=(8 * GPT2_6, 0.10))
j, _ = training("lightning", 6)
categories("lightning", j, parameter=(4 * GPT2_6, 0.10), optimizer_state=(8 * GPT2_6, 0.10))
check("lightning: the forward passes inside the optimizer's step are not the optimizer's",
      j["categories_at_peak"]["activation"] > 0.5 * j["summary"]["peak_allocated_bytes"], str(j["categories_at_peak"]))
j, _ = training("peft_lora", 6)
categories("peft_lora", j, parameter=(4 * PEFT_ALL, 0.10), optimizer_state=(8 * PEFT_TRAINED, 0.10))

# torchvision's resnet50 with SGD: torch.profiler on the same program gave parameter 102448128 and
# gradient 109047808 at its peak
j, _ = training("resnet50", 6, "Optimizer.step#SGD.step")
categories("resnet50", j, parameter=(102448128, 0.10), gradient=(109047808, 0.10))

# FSDP2 on two GPUs (rank 0): the optimizer's steps, not FSDP's ranges (104 of them per rank), and
# its parameters: each rank's shard of the fp32 model (half of it) and the unsharded bf16 copies
# it gathers
# (fsdp2-cxx-r1: rank 1 of run 40, recorded through the C++ allocator, memsnap run's default)
for name in ("fsdp2-r0", "fsdp2-cxx-r1"):
    j, text = training(name, 8)
    p = j.get("parameters_at_peak", {})
    check("%s: the sharded parameters are half the fp32 model (within 2%%), the gathered ones above 0" % name,
          near(p.get("fsdp_sharded", 0), 4 * GPT2_1024 / 2, 0.02) and p.get("fsdp_gathered", 0) > 0 and
          p.get("module", 1) == 0 and sum(p.values()) == j["categories_at_peak"]["parameter"], str(p))
    check("%s: the text report says the parameters' kinds" % name, "fsdp_sharded" in text and "fsdp_gathered" in text)
    check("%s: a backward pass and a step an iteration" % name, j["summary"]["backward_passes"] == 8 and
          j["summary"]["optimizer_steps"] == 8, str(j["summary"]))
# DDP on two GPUs (rank 0): the module's parameters, its buckets held apart from them
j, _ = training("ddp-r0", 6)
categories("ddp-r0", j, parameter=(4 * GPT2_6, 0.10), optimizer_state=(8 * GPT2_6, 0.10))

# generate(): inference, no optimizer: the iterations are the calls (the program's loop), the KV
# cache that grows inside each is no growth across them; no backward pass: said
j, text = analyze("generate")
check("generate: 6 iterations, the program's loop, no growth",
      len(j.get("iterations", [])) == 6 and j["summary"]["iteration_source"] == "loop" and
      j["summary"]["growth"] == "none" and "no growth across 6 iterations" in text, str(j.get("summary")))
check("generate: no backward pass or optimizer step: the categories that need them say so",
      {"gradient", "activation", "autograd", "optimizer_state"} <= set(j.get("categories_without_evidence", {})),
      str(j.get("categories_without_evidence")))

# GPT-2 (12 layers) that runs out of memory in its first backward pass: what forward made and
# backward had not yet freed is activation, `other` is small; no optimizer step: said so
j, text = analyze("gpt2_oom_backward")
cat, peak = j.get("categories_at_peak", {}), j.get("summary", {}).get("peak_allocated_bytes", 1)
check("gpt2_oom_backward: the out-of-memory is recorded, in backward", len(j.get("oom", [])) == 1 and
      j["summary"]["backward_passes"] == 1 and j["summary"]["optimizer_steps"] == 0, str(j.get("summary")))
check("gpt2_oom_backward: other below 10% of the peak, activations most of it",
      cat.get("other", peak) < 0.10 * peak and cat.get("activation", 0) > 0.8 * peak, str(cat))
check("gpt2_oom_backward: no iterations (one forward pass's layers are none); growth cannot be told",
      j["iterations"] == [] and j["summary"]["growth"] == "unknown" and "growth cannot be told" in text)
check("gpt2_oom_backward: the categories it cannot tell say why",
      set(j.get("categories_without_evidence", {})) == {"gradient", "optimizer_state"} and
      "no optimizer step" in text, str(j.get("categories_without_evidence")))

# An injected leak (gpt2_train.py keeps a view of every step's logits, made at its line 42): the
# first candidate, growing by the logits' size a step, at the program's line
j, text = analyze("gpt2_eager-leak")
first = (j.get("leaks") or [{}])[0]
check("gpt2_eager-leak: the first candidate grows by one step's logits, at the program's line (gpt2_train.py:42)",
      first.get("kind") == "growing" and near(first.get("bytes_per_iteration", 0), LOGITS, 0.05) and
      "gpt2_train.py:42" in frames(first) and j["summary"]["growth"] == "growing",
      str((first.get("kind"), first.get("bytes_per_iteration"), frames(first)[:6])))

# CuPy under memsnap run: its arrays from memsnap's allocator, the loop of the program's code
j, text = analyze("cupy")
check("cupy: 6 iterations from the program's loop, no growth", len(j.get("iterations", [])) == 6 and
      j["summary"]["iteration_source"] == "loop" and j["summary"]["growth"] == "none", str(j.get("summary")))
j, text = analyze("cupy-leak")
first = (j.get("leaks") or [{}])[0]
check("cupy-leak: the first candidate grows by the 64 MiB kept a step, at cupy_steps.py:22",
      first.get("kind") == "growing" and near(first.get("bytes_per_iteration", 0), 64 * MiB, 0.01) and
      "cupy_steps.py:22" in frames(first), str((first.get("kind"), first.get("bytes_per_iteration"), frames(first)[:6])))

# Recorded through the C++ allocator (memsnap run's default): no site, candidate or line of the
# reports named by memsnap's own frames (libmemsnap_torch.so's MemsnapAllocator::malloc_on, the
# library's); an autograd thread's allocation reads as its node
for name in ("two_linear_adamw-cxx", "fsdp2-cxx-r1", "gpt2_leak_hook-cxx", "ddp_buckets-cxx-r0", "resnet50_amp-cxx"):
    j, text = analyze(name)
    entries = j.get("leaks", []) + j.get("held", []) + j.get("top_sites", []) + j.get("live_at_peak", [])
    named = [e["stack"][0] for e in entries if e.get("stack")]
    ours = [f["short_name"] for f in named if "emsnap" in f["short_name"] or "libmemsnap" in f.get("module", "")]
    check("%s: no site named by a memsnap frame (%d sites)" % (name, len(named)),
          named and not ours and "Memsnap" not in text and "libmemsnap" not in text, str(ours[:3]))
j, _ = analyze("two_linear_adamw-cxx")
backward = [e for e in j.get("top_sites", []) if e.get("stack") and e["stack"][0]["short_name"] == "MmBackward0"]
check("two_linear_adamw-cxx: the gradients' site reads as its autograd node (MmBackward0)",
      backward and backward[0]["stack"][0]["name"].startswith("torch::autograd::generated::MmBackward0"),
      str([e["stack"][0]["short_name"] for e in j.get("top_sites", []) if e.get("stack")][:6]))

# Run 60 (H200, the default path with the module record): the model's language on real traces.
# A forward hook on the last block keeps 12 MiB of hidden states a step: the first candidate,
# named by the code that made them (GPT2Block.forward's residual add) in transformer.h.5
j, text = analyze("gpt2_leak_hook-cxx")
first = (j.get("leaks") or [{}])[0]
# its first frame the operator (the block's last residual add, at::_ops::add_Tensor::call in the
# native stack), then the line that called it
check("gpt2_leak_hook-cxx: the hook's leak first, growing 12 MiB a step, named aten::add at GPT2Block.forward "
      "(modeling_gpt2.py:307) in transformer.h.5",
      first.get("kind") == "growing" and near(first.get("bytes_per_iteration", 0), 12 * MiB, 0.01) and
      [f["short_name"] for f in first["stack"][:2]] == ["aten::add", "GPT2Block.forward"] and
      first["stack"][0]["name"].startswith("at::_ops::add_Tensor::call(") and first["stack"][1]["line"] == 307 and
      first.get("held_module", "").endswith("transformer.h.5") and
      "in transformer.h.5" in text, str((first.get("kind"), first.get("bytes_per_iteration"), first.get("stack", [{}])[0],
                                         first.get("held_module"))))
check("gpt2_leak_hook-cxx: no kept autograd graph (the hook keeps outputs, whose saved tensors their backward freed; "
      "the last step's output, held after its backward, is none either)", j.get("kept_graphs") == [],
      str(j.get("kept_graphs"))[:300])
inner = [f["name"] for e in j.get("leaks", []) + j.get("held", []) + j.get("live_at_peak", []) for f in e.get("stack", [])
         if f["name"].startswith("Module._call_impl")]
check("gpt2_leak_hook-cxx: PyTorch's module-call plumbing folded, the hooked path's inner function too", not inner, str(inner[:2]))
mods = {m["name"]: m for m in j.get("modules", [])}
check("gpt2_leak_hook-cxx: memory by module: six blocks, each called once a step forward and backward, its parameters",
      all(mods.get("GPT2LMHeadModel.transformer.h.%d" % i, {}).get("forward_calls") == 6 and
          mods["GPT2LMHeadModel.transformer.h.%d" % i]["backward_calls"] == 6 for i in range(6)) and
      near(mods.get("GPT2LMHeadModel", {}).get("parameter_bytes", 0), 4 * GPT2_6, 0.01) and
      j["summary"]["iteration_source"] == "steps", str({n: m["forward_calls"] for n, m in list(mods.items())[:8]}))
ml = j  # gpt2_leak_hook-cxx: categories in MemTracker's terms (run 60: equal to its to the byte on this GPT-2)
asked, temp = ml.get("categories_at_peak_asked", {}), ml.get("temporary_at_peak_by_phase", {})
check("gpt2_leak_hook-cxx: categories also in the bytes asked for (each at most its blocks'), temporaries by phase",
      set(asked) == set(ml["categories_at_peak"]) and all(0 <= asked[c] <= ml["categories_at_peak"][c] for c in asked) and
      near(asked["parameter"], 4 * GPT2_6, 0.01) and
      sum(v["bytes"] for v in temp.values()) == ml["categories_at_peak"]["temporary"], str((asked, temp)))
# DDP with gradient_as_bucket_view: the buckets hold the gradients (1 GiB); the tensors say so
j, _ = analyze("ddp_buckets-cxx-r0")
cat = j.get("categories_at_peak", {})
check("ddp_buckets-cxx-r0: gradient at the peak is the buckets' 1 GiB, told by the tensors; no bucket an activation",
      cat.get("gradient", 0) >= 1 << 30 and j["category_evidence"]["gradient"].startswith("tensors") and
      not any(e["category"] == "activation" and any("bucket" in f["name"].lower() or "Reducer" in f["name"] for f in e["full_stack"])
              for e in j.get("leaks", []) + j.get("held", []) + j.get("top_sites", [])), str((cat, j.get("category_evidence"))))
# GradScaler from 2^24: every step's gradients overflow, each step skipped and still an iteration
j, text = analyze("resnet50_amp-cxx")
its = j.get("iterations", [])
check("resnet50_amp-cxx: ten iterations, the skipped steps marked, no optimizer step counted",
      len(its) == 10 and all(i["skipped"] for i in its) and j["summary"]["skipped_steps"] == 10 and
      j["summary"]["optimizer_steps"] == 0 and j["summary"]["backward_passes"] == 10 and "skipped step" in text,
      str((len(its), j.get("summary", {}).get("skipped_steps"))))

# JAX under memsnap run (XLA allocates each array from the driver): the loop, no growth
j, text = analyze("jax")
check("jax: 6 iterations from the program's loop, no growth", len(j.get("iterations", [])) == 6 and
      j["summary"]["iteration_source"] == "loop" and j["summary"]["growth"] == "none", str(j.get("summary")))
finish()
