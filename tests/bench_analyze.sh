#!/usr/bin/env bash
# bench_analyze.sh BUILD_DIR [EVENTS]: the analyzer's speed on a snapshot of EVENTS events
# (default 1,000,000) recorded by tests/gen_snapshots.c: wall time and peak memory of
# `memsnap analyze` (text) and `memsnap analyze --json`. Figures go to docs/BENCHMARKS.md.
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
for args in (["analyze", db], ["analyze", "--json", db]):
    best = None
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([cli] + args, stdout=subprocess.DEVNULL, check=True)
        dt = time.perf_counter() - t
        best = dt if best is None or dt < best else best
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print("memsnap %-28s best of 3: %.2f s, peak RSS so far %.1f MiB" % (" ".join(args[:-1]), best, rss))
PY
