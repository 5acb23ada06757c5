"""shard_gap.py: where `memsnap predict --shard STRATEGY:N` and a native sharded run part (issue 51:
GPT-2 DDP at 2 ranks, reserved 16.152 GiB predicted against 17.688 native, allocated equal to the
byte, found by it in run 73 to be the replay's segment placement, docs/replay.md "Addresses"; the
1.1B model from its autocast recording at fsdp2:8).

  python3 tests/gpu/shard/shard_gap.py UNSHARDED.db NATIVE.db [--shard ddp:2] [--build build]
                                       [--args '--param-dtype 2 --reduce-dtype 4 --meta']

UNSHARDED.db: the one-GPU recording the prediction starts from (tests/data/shard/gpt2_fp32.db.xz,
unpacked); NATIVE.db: the same program as rank 0 of the sharded run, recorded under `memsnap run`
(run.py's gpt2_fp32_ddp_2, 1b_bf16_fsdp2_8). --args: build/tests/shard_events's options (bytes
per element for dtypes). No GPU: it reads the two snapshots and the history shard.c
synthesises (build/tests/shard_events, `make build/tests/shard_events`), and prints
  - the allocations by size that one history has and the other has not (count per size), and
  - the first place where the two histories' allocations of 1 MiB or more stop matching in order
    (size and stream), with the few on each side after it,
then both recordings replayed (`memsnap replay --json`: peak allocated and reserved beside the
recorded ones).
"""
import argparse
import collections
import json
import sqlite3
import subprocess
import sys


def native(db):
    con = sqlite3.connect(db)
    return [(int(size), int(stream)) for size, stream in
            con.execute("select size, stream from events where kind = 1 order by id")]


def synthesised(build, db, shard, args):
    out = subprocess.run([build + "/tests/shard_events", db, shard] + args.split(), capture_output=True, text=True)
    if out.returncode:
        sys.exit("error: shard_events: " + out.stderr.strip())
    rows = []
    for line in out.stdout.splitlines():
        f = line.split()
        if f and f[0] == "alloc":
            rows.append((int(f[5]), int(f[2])))
    return rows


def peaks(build, db):
    out = subprocess.run([build + "/memsnap", "replay", "--json", db], capture_output=True, text=True)
    try:
        j = json.loads(out.stdout)
    except ValueError:
        return "replay failed: " + out.stderr.strip()[:200]
    d = (j.get("devices") or [{}])[0]
    g = 2 ** 30
    rec = d.get("recorded") or {}
    return "allocated %.3f GiB, reserved %.3f GiB (as recorded: %.3f, %.3f; external memory counted)" % (
        d.get("peak_allocated_bytes", 0) / g, d.get("peak_reserved_bytes", 0) / g,
        rec.get("peak_allocated_bytes", 0) / g, rec.get("peak_reserved_bytes", 0) / g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("unsharded")
    ap.add_argument("native")
    ap.add_argument("--shard", default="ddp:2")
    ap.add_argument("--args", default="")
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    syn, nat = synthesised(a.build, a.unsharded, a.shard, a.args), native(a.native)
    cs, cn = collections.Counter(s for s, _ in syn), collections.Counter(s for s, _ in nat)
    print("allocations: synthesised %d, native %d" % (len(syn), len(nat)))
    print("%14s %12s %8s" % ("size", "synthesised", "native"))
    for size in sorted(set(cs) | set(cn)):
        if cs[size] != cn[size]:
            print("%14d %12d %8d" % (size, cs[size], cn[size]))
    big_s = [r for r in syn if r[0] >= 1 << 20]
    big_n = [r for r in nat if r[0] >= 1 << 20]
    for i, (x, y) in enumerate(zip(big_s, big_n)):
        if x != y:
            print("first difference among allocations of 1 MiB or more, at the %d-th:" % (i + 1))
            print("  synthesised:", big_s[i:i + 8])
            print("  native:     ", big_n[i:i + 8])
            break
    else:
        print("allocations of 1 MiB or more: the same sizes and streams in the same order (%d, %d)" % (len(big_s), len(big_n)))
    print("native replayed:", peaks(a.build, a.native))
    print("unsharded replayed:", peaks(a.build, a.unsharded))


if __name__ == "__main__":
    main()
