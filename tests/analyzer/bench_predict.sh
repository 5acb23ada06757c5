#!/usr/bin/env bash
# bench_predict.sh BUILD_DIR [STEPS]: `memsnap predict`'s speed on two runs of about a million
# events each: tests/analyzer/predict_workload.c recorded at batch 4 and 8 for STEPS steps
# (default 10000: 1.02 million events each) on the simulated device, with native stacks. Times (wall, CPU, peak memory; best
# of 3) one prediction at batch 16, the same under the sweep's 20 settings, and the largest batch
# that fits 1 GiB. Figures go to docs/BENCHMARKS.md ("Predict").
set -eu
build=${1:-build}
steps=${2:-10000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for n in 4 8; do
  env -i PATH="$PATH" MEMSNAP_BACKEND=sim MEMSNAP_SIM_CAPACITY=8G MEMSNAP_RECORD=1 MEMSNAP_MAX_ENTRIES=4000000 \
    MEMSNAP_STACKS=native MEMSNAP_DUMP="$dir/b$n.db" "$build/tests/predict_workload" batch "$n" "$steps"
done
python3 -c 'import os, sqlite3, sys
for db in sys.argv[1:]:
    print("%s: %d events, %.1f MiB" % (os.path.basename(db), sqlite3.connect(db).execute("select count(*) from events").fetchone()[0], os.path.getsize(db) / 2**20))' "$dir/b4.db" "$dir/b8.db"
cli=$build/memsnap
runs=("$dir/b4.db=4" "$dir/b8.db=8")
python3 "$(dirname "$0")/bench_time.py" \
  "memsnap predict b4.db=4 b8.db=8 --at 16" -- "$cli" predict "${runs[@]}" --at 16 --- \
  "memsnap predict b4.db=4 b8.db=8 --at 16 --sweep" -- "$cli" predict "${runs[@]}" --at 16 --sweep --- \
  "memsnap predict b4.db=4 b8.db=8 --capacity 1G" -- "$cli" predict "${runs[@]}" --capacity 1G
