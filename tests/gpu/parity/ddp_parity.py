"""ddp_parity.py: DistributedDataParallel under memsnap against PyTorch's native allocator, per
rank, in one run (issue 11, item 4; docs/BENCHMARKS.md, "Multi-GPU parity").

The workload of the report that opened the issue: 8 Linear(4096, 4096) layers, AdamW, batch 256,
20 steps, one process per rank. Each side (native, memsnap) runs as its own group of processes
(PyTorch cannot swap its allocator once CUDA is initialised); the sides alternate REPS times.
Each rank reports max_memory_allocated, max_memory_reserved, its losses and, under memsnap,
writes a snapshot (ddp-rank<R>.db in $OUT) so that a difference can be traced to its stack.

usage: python3 ddp_parity.py [--backend nccl|gloo] [--nproc N] [--same-gpu] [--reps R]
  nccl with one GPU per rank is the real case (a two-GPU machine: tests/gpu/parity/two_gpus.sh). --same-gpu puts every
  rank on cuda:0 and needs gloo (NCCL refuses two ranks on one GPU): it checks the DDP machinery
  (reducer buckets, broadcasts, record_stream) under memsnap on a one-GPU machine, not NCCL's
  streams.
Prints one JSON line per rank and side (appended to $OUT/ddp.jsonl when OUT is set), then a table.
Exit status 1 when memsnap's peak allocated is neither a figure native took in the run nor one of
them plus the model's gradients (native's own peak takes both under NCCL: see the end of main),
when its peak reserved differs from native's for the same peak allocated, or when a rank's losses
differ between runs or sides.
"""
import argparse
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MiB = 1 << 20
LAYERS, WIDTH = 8, 4096
GRADIENT_BYTES = LAYERS * (WIDTH * WIDTH + WIDTH) * 4  # the model's float32 gradients: 512.125 MiB


def rank_main(side, backend, same_gpu, out_dir):
    import torch
    if side == "memsnap":
        sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
        import memsnap
        memsnap.enable()
        memsnap.record()
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dev = 0 if same_gpu else rank
    torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)]).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1 + rank)
    losses = []
    for _ in range(20):
        x = torch.randn(256, 4096, generator=g).cuda()
        opt.zero_grad(set_to_none=True)
        loss = ddp(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    res = {"side": side, "backend": backend, "rank": rank, "world": world, "device": dev,
           "peak_allocated": torch.cuda.max_memory_allocated(),
           "peak_reserved": torch.cuda.max_memory_reserved(),
           "allocated": torch.cuda.memory_allocated(), "losses": losses}
    if side == "memsnap" and out_dir:
        import memsnap
        path = os.path.join(out_dir, "ddp-rank%d.db" % rank)
        memsnap.dump(path)
        res["snapshot"] = path
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT " + json.dumps(res), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_side(side, args):
    """Starts one process per rank for one side; returns their results, rank order."""
    port = free_port()
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = [sys.executable, __file__, "--child", side, "--backend", args.backend]
        if args.same_gpu:
            cmd.append("--same-gpu")
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    results = []
    for rank, p in enumerate(procs):
        out, _ = p.communicate(timeout=600)
        lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            results.append({"side": side, "rank": rank, "error": "exit %d" % p.returncode})
        else:
            results.append(json.loads(lines[-1][len("RESULT "):]))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--same-gpu", action="store_true")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--child", choices=["native", "memsnap"])
    args = ap.parse_args()
    out_dir = os.environ.get("OUT")
    if args.child:
        rank_main(args.child, args.backend, args.same_gpu, out_dir)
        return 0
    if args.backend == "nccl" and args.same_gpu:
        sys.exit("ddp_parity: NCCL refuses two ranks on one GPU; --same-gpu needs --backend gloo")
    rows = {}
    for _ in range(args.reps):
        for side in ("native", "memsnap"):
            for r in run_side(side, args):
                print(json.dumps(r), flush=True)
                if out_dir:
                    with open(os.path.join(out_dir, "ddp.jsonl"), "a") as f:
                        f.write(json.dumps(r) + "\n")
                rows.setdefault((r["rank"], side), []).append(r)
    bad = False
    print("\nrank  side     peak allocated MiB  peak reserved MiB  last loss")
    for rank in range(args.nproc):
        for side in ("native", "memsnap"):
            for r in rows.get((rank, side), []):
                if "error" in r:
                    print("%4d  %-7s  %s" % (rank, side, r["error"]))
                    bad = True
                    continue
                print("%4d  %-7s  %18.3f  %17.3f  %.6f" % (rank, side, r["peak_allocated"] / MiB,
                                                          r["peak_reserved"] / MiB, r["losses"][-1]))
    # Native PyTorch's own peak is not one figure under NCCL: on two H100s (run 21) a rank's
    # peak allocated was 3141.750 MiB in most runs and 3653.875 in 3 of 14 native runs: 512.125
    # MiB more, the model's gradients once more (the reducer's copy still alive at the next peak,
    # freed when NCCL's stream finishes). A figure native took in the run, or one of native's
    # figures plus the gradients (the other state, which a short run of native may not happen to
    # show), is native's behaviour; memsnap fails with any other. Peak reserved is compared with
    # native's for the same peak allocated, where native had that peak in the run.
    def runs(side):
        return [r for (rank, s), rs in rows.items() if s == side for r in rs if "error" not in r]
    nat, mem = runs("native"), runs("memsnap")
    for side, rs in (("native", nat), ("memsnap", mem)):
        vals = [r["peak_allocated"] for r in rs]
        counts = ", ".join("%.3f MiB x%d" % (v / MiB, vals.count(v)) for v in sorted(set(vals)))
        print("%-7s peaks over all ranks and runs: %s" % (side, counts))
    allowed = set(r["peak_allocated"] for r in nat)
    allowed |= set(v + GRADIENT_BYTES for v in allowed) | set(v - GRADIENT_BYTES for v in allowed)
    odd = sorted(set(r["peak_allocated"] for r in mem) - allowed)
    if nat and odd:
        print("memsnap's peak allocated took a figure that is not native's: %s MiB" % ", ".join("%.3f" % (v / MiB) for v in odd))
        bad = True
    reserved_of = {}
    for r in nat:
        reserved_of.setdefault(r["peak_allocated"], set()).add(r["peak_reserved"])
    for r in mem:
        if r["peak_allocated"] in reserved_of and r["peak_reserved"] not in reserved_of[r["peak_allocated"]]:
            print("rank %d: memsnap's peak reserved %.3f MiB where native's was %s MiB for the same peak allocated"
                  % (r["rank"], r["peak_reserved"] / MiB, ", ".join("%.3f" % (v / MiB) for v in reserved_of[r["peak_allocated"]])))
            bad = True
    for rank in range(args.nproc):
        losses = {side: set(tuple(r["losses"]) for r in rows.get((rank, side), []) if "error" not in r)
                  for side in ("native", "memsnap")}
        if len(losses["native"] | losses["memsnap"]) > 1:
            print("rank %d: the losses differ between runs or sides" % rank)
            bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
