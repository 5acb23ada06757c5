"""shard_train.py: issue 51's training program, run whole (unsharded, on one GPU) or as rank 0 of
FSDP2 or DDP through PyTorch's fake process group, so that `memsnap predict --shard` can be
checked against what the sharded program really allocates.

  python3 shard_train.py --model gpt2|1b --mode single|fsdp2|ddp [--world N] [--mp bf16|bf16model] [--ac]
                         [--batch B] [--seq S] [--steps K] [--tracker] [--result FILE.json]

Models (transformers' GPT2LMHeadModel or LlamaForCausalLM made from a config, no weights downloaded;
word embeddings not tied, so that FSDP2's units and DDP's buckets need no special case):
  gpt2  12 layers, 768 wide, seq 1024, batch 8 (the issue's GPT-2)
  1b    18 layers, 2048 wide, 16 heads, seq 512, batch 2: 1.11 billion parameters, whose
        parameters, gradients and AdamW state (17.8 GB in fp32) dominate its memory
  llama 12 Llama layers, 1024 wide, 16 heads, SwiGLU 2816, vocab 32000, seq 1024, batch 4 (220M
        parameters): another family (RMSNorm, rotary positions, no biases)
Modes:
  single  the whole model on the GPU (built there), AdamW; --mp bf16 runs forward under
          torch.autocast(bfloat16) (the unsharded counterpart of FSDP2's mixed precision);
          --mp bf16model: the model cast to bf16 (model.to(bfloat16)), its AdamW on bf16
          parameters: every activation in bf16, as FSDP2's bf16 compute makes them (the
          recording `--recorded-dtype bf16 --orig-dtype fp32` predicts FSDP2's from);
          --ac: every block checkpointed (gradient_checkpointing_enable, non-reentrant)
  fsdp2   init_process_group("fake", rank 0, world N, FakeStore): every buffer allocated as on a
          real rank, the collectives skipped. The model made on the meta device, each block
          fully_shard-ed, then the root (the transformer auto-wrap policy's units), to_empty on
          the GPU and initialised in place; --mp bf16: MixedPrecisionPolicy(param_dtype=bf16,
          reduce_dtype=fp32)
  --backend gloo: real ranks instead, all on this GPU (each process its own allocator), over gloo;
          rank 0 reports
  ddp     the same fake group, DistributedDataParallel(model) with its defaults (25 MiB buckets),
          a communication hook that returns each bucket as it is (the fake group's allreduce
          returns nothing DDP's reducer accepts)
Each step: random tokens, loss = model(x, labels=x).loss, backward, AdamW step, zero_grad. The
result (JSON): the peaks torch.cuda.max_memory_allocated/reserved over the whole run, the
parameters' count, the steps' times; with --tracker (fsdp2 and single), FSDPMemTracker's peak
over two more steps (PyTorch's own estimator, as torchtitan's estimation script runs it).
"""
import argparse
import json
import os
import sys
import time

import torch


def config(name):
    from transformers import GPT2Config, LlamaConfig
    if name == "llama":  # another family: RMSNorm, SwiGLU, rotary positions, no biases
        return LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=16,
                           num_key_value_heads=16, vocab_size=32000, max_position_embeddings=2048,
                           tie_word_embeddings=False), 4, 1024
    if name == "gpt2":
        return GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, tie_word_embeddings=False), 8, 1024
    if name == "1b":
        return GPT2Config(n_layer=18, n_embd=2048, n_head=16, n_positions=1024, tie_word_embeddings=False), 2, 512
    raise SystemExit("unknown model %r" % name)


def model_class(name):
    if name == "llama":
        from transformers import LlamaForCausalLM
        return LlamaForCausalLM
    from transformers import GPT2LMHeadModel
    return GPT2LMHeadModel


def blocks(model):
    """The repeated blocks FSDP2's transformer auto-wrap would wrap."""
    return model.model.layers if hasattr(model, "model") else model.transformer.h


def init_in_place(model):
    """Parameters filled where they are (a DTensor's local shard), as a real init would."""
    with torch.no_grad():
        for p in model.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            local.normal_(0.0, 0.02)
        for b in model.buffers():
            local = b.to_local() if hasattr(b, "to_local") else b
            if local.is_floating_point():
                local.zero_()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2", choices=("gpt2", "1b", "llama"))
    ap.add_argument("--mode", default="single", choices=("single", "fsdp2", "ddp"))
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--mp", default="none", choices=("none", "bf16", "bf16model"))
    ap.add_argument("--ac", action="store_true")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tracker", action="store_true")
    ap.add_argument("--result", default="")
    ap.add_argument("--backend", default="fake", choices=("fake", "gloo"))
    a = ap.parse_args()
    if a.mp == "bf16model" and a.mode != "single":
        sys.exit("--mp bf16model is the one-GPU program's (FSDP2's own is --mp bf16)")
    rank = int(os.environ.get("MEMSNAP_SHARD_RANK", "0"))
    if a.backend == "gloo" and "MEMSNAP_SHARD_RANK" not in os.environ:
        # real ranks over gloo, every one on this GPU (each its own allocator): rank 0 reports
        import subprocess
        procs = []
        for r in range(a.world):
            argv = list(sys.argv[1:])
            if r and "--result" in argv:
                i = argv.index("--result")
                del argv[i:i + 2]
            env = dict(os.environ, MEMSNAP_SHARD_RANK=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=env))
        sys.exit(max(p.wait() for p in procs))
    Model = model_class(a.model)
    cfg, batch, seq = config(a.model)
    batch, seq = a.batch or batch, a.seq or seq
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    out = {"model": a.model, "mode": a.mode, "backend": a.backend, "world": a.world, "mp": a.mp, "ac": a.ac, "batch": batch, "seq": seq,
           "steps": a.steps}
    if a.mode != "single" and a.backend == "gloo":
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=a.world)
    elif a.mode != "single":
        import torch.distributed as dist
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=a.world, store=FakeStore())
    if a.mode == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        with torch.device("meta"):
            model = Model(cfg)
        if a.ac:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        kw = {}
        if a.mp == "bf16":
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in blocks(model):
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        model.to_empty(device=dev)
        init_in_place(model)
    else:
        with torch.device(dev):
            model = Model(cfg)
        if a.mp == "bf16model":
            model.to(torch.bfloat16)
        if a.ac:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if a.mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel
            model = DistributedDataParallel(model, device_ids=[0])
            # The fake group's allreduce hands DDP's reducer no tensor back (2.11: "expected the hook
            # result is either a Tensor or a TensorList found None"): a hook that returns the bucket
            # as reduced keeps every buffer DDP makes (its buckets, the gradients' views), only the
            # collective skipped, as the fake group does for FSDP2.
            def reduced(_state, bucket):
                fut = torch.futures.Future()
                fut.set_result(bucket.buffer())
                return fut
            if a.backend == "fake":
                model.register_comm_hook(None, reduced)
    model.train()
    out["parameters"] = sum(p.numel() for p in model.parameters())  # a DTensor's numel is the whole tensor's
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev).manual_seed(0)

    def step():
        x = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev, generator=gen)
        if a.mode == "single" and a.mp == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
        else:
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)

    times = []
    for _ in range(a.steps):
        t0 = time.time()
        step()
        torch.cuda.synchronize()
        times.append(time.time() - t0)
    out["peak_allocated"] = torch.cuda.max_memory_allocated(dev)
    out["peak_reserved"] = torch.cuda.max_memory_reserved(dev)
    out["step_s"] = times
    if a.tracker:
        try:
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
            from torch.distributed._tools.mem_tracker import MemTracker
            torch.cuda.reset_peak_memory_stats(dev)
            fmt = FSDPMemTracker(model, optim) if a.mode == "fsdp2" else MemTracker()
            if a.mode != "fsdp2":
                fmt.track_external(model, optim)
            with fmt:
                for i in range(2):
                    step()
                    if i == 0 and hasattr(fmt, "reset_mod_stats"):
                        fmt.reset_mod_stats()
            snap = fmt.get_tracker_snapshot("peak")
            totals = [v["Total"] for k, v in snap.items() if getattr(k, "type", str(k)) == "cuda" or "cuda" in str(k)]
            out["tracker_peak"] = max(totals) if totals else None
            out["tracker_torch_peak_allocated"] = torch.cuda.max_memory_allocated(dev)
        except Exception as e:  # the estimator's own failure is a result too
            out["tracker_error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    if a.result:
        with open(a.result, "w") as f:
            json.dump(out, f)
    print(json.dumps(out))
    if a.mode != "single":
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
