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
python3 -c 'import os, sqlite3, sys
db = sys.argv[1]
print("snapshot: %d events, %.1f MiB" % (sqlite3.connect(db).execute("select count(*) from events").fetchone()[0], os.path.getsize(db) / 2**20))' "$dir/big.db"
cli=$build/memsnap
python3 "$(dirname "$0")/bench_time.py" \
  "memsnap replay" -- "$cli" replay "$dir/big.db" --- \
  "memsnap replay --set max_split_size_mb=64" -- "$cli" replay --set max_split_size_mb=64 "$dir/big.db" --- \
  "memsnap replay --sweep" -- "$cli" replay --sweep "$dir/big.db"
