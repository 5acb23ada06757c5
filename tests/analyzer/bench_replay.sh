#!/usr/bin/env bash
# bench_replay.sh BUILD_DIR [EVENTS]: `memsnap replay`'s speed on a snapshot of EVENTS events
# (default 1,000,000) recorded by tests/analyzer/gen_snapshots.c: wall and CPU time and peak memory of one
# replay (recorded settings, and max_split_size_mb:64), and of the sweep (20 settings, one worker
# per core). Figures go to docs/BENCHMARKS.md.
set -eu
build=${1:-build}
events=${2:-1000000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$build/tests/gen_snapshots" "$dir" "$events"
python3 - "$build/memsnap" "$dir/big.db" <<'PY'
import os, resource, subprocess, sys, time, sqlite3
cli, db = sys.argv[1], sys.argv[2]
n = sqlite3.connect(db).execute("select count(*) from events").fetchone()[0]
print("snapshot: %d events, %.1f MiB; %d cores; load average %.1f" % (n, os.path.getsize(db) / 2**20, os.cpu_count(), os.getloadavg()[0]))
for args in (["replay"], ["replay", "--set", "max_split_size_mb=64"], ["replay", "--sweep"]):
    best, cpu = None, None
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([cli] + args + [db], stdout=subprocess.DEVNULL, check=True)
        dt = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        c = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if best is None or dt < best:
            best, cpu = dt, c
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print("memsnap %-36s best of 3: %.2f s wall, %.2f s CPU, peak RSS so far %.1f MiB" % (" ".join(args), best, cpu, rss))
PY
