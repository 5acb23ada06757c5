#!/usr/bin/env bash
# run.sh BUILD_DIR SECONDS TARGET... (make fuzz runs it): runs each libFuzzer target of BUILD_DIR/fuzz/ for SECONDS
# from its corpus (tests/fuzz/corpus/TARGET, plus what earlier runs found in
# BUILD_DIR/corpus/TARGET), one line per target: executions, speed, corpus, and whether it
# crashed (the input is kept in BUILD_DIR/crashes/). Exits non-zero if any target crashed.
set -u
build=$1
seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/crashes"
# The snapshot target edits a real snapshot (small: vacuumed), from the regular build's
# gen_snapshots (GEN_SNAPSHOTS).
"${GEN_SNAPSHOTS:-build/tests/gen_snapshots}" "$build" >/dev/null || exit 1
python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('pragma page_size = 1024'); c.execute('vacuum')" "$build/leak.db"
export MEMSNAP_FUZZ_SEED=$build/leak.db
# The pickle target also starts from the real PyTorch snapshots, uncompressed.
mkdir -p "$build/seeds/fuzz_pickle"
for f in "$here"/../data/*.pickle.gz; do
  [ -f "$f" ] && gzip -dc "$f" >"$build/seeds/fuzz_pickle/$(basename "$f" .gz)"
done
status=0
for t in "$@"; do
  mkdir -p "$build/corpus/$t"
  log="$build/$t.log"
  # -close_fd_mask=2: the targets' own warnings (bad option values) would flood the output.
  seeds=("$here/corpus/$t")
  [ -d "$build/seeds/$t" ] && seeds+=("$build/seeds/$t")
  "$build/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -close_fd_mask=2 -artifact_prefix="$build/crashes/$t-" "$build/corpus/$t" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  corpus=$(ls "$build/corpus/$t" | wc -l)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    echo "$t: ${runs:-?} executions in ${seconds} s (${speed:-?}/s), $cov, corpus $corpus inputs, no crash"
  else
    echo "FAIL $t: exited $rc; the input is in $build/crashes/; log $log:"
    grep -A30 -m1 -E 'ERROR|runtime error|deadly signal|timeout' "$log" | head -40
    status=1
  fi
done
exit $status
