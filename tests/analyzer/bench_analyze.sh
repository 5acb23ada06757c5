#!/usr/bin/env bash
# bench_analyze.sh BUILD_DIR [EVENTS]: the analyzer's speed on a snapshot of EVENTS events
# (default 1,000,000) recorded by tests/analyzer/gen_snapshots.c: wall time (best and median of REPS runs,
# default 3), CPU time and peak memory of `memsnap analyze` (text), `--json` and `--html`, and the
# machine's load average before each command (other work on the cores shows in the wall times).
# Figures go to docs/BENCHMARKS.md.
set -eu
build=${1:-build}
events=${2:-1000000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$build/tests/gen_snapshots" "$dir" "$events"
python3 - "$build/memsnap" "$dir/big.db" <<'PY'
import resource, subprocess, sys, time, sqlite3
cli, db = sys.argv[1], sys.argv[2]
n = sqlite3.connect(db).execute("select count(*) from events").fetchone()[0]
print("snapshot: %d events, %.1f MiB" % (n, __import__("os").path.getsize(db) / 2**20))
import os, statistics
reps = int(os.environ.get("REPS", "3"))
for args in (["analyze", db], ["analyze", "--json", db], ["analyze", "--html", db + ".html", db]):
    walls, cpus, rss = [], [], 0
    load = os.getloadavg()[0]
    for _ in range(reps):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([cli] + args, stdout=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        rss = after.ru_maxrss / 1024
    print("memsnap %-16s wall best %.2f s, median %.2f s (%s); CPU median %.2f s; peak RSS so far %.1f MiB; load before %.1f"
          % (" ".join(args[:2] if args[1] in ("--json", "--html") else args[:1]), min(walls), statistics.median(walls),
             " ".join("%.2f" % w for w in walls), statistics.median(cpus), rss, load))
PY
