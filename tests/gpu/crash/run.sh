#!/usr/bin/env bash
# run.sh: nothing lost when a PyTorch job dies on the GPU (issue 44), in one call of under 8 minutes:
#   1. a PyTorch training loop under `memsnap run`, killed with kill -9 after 30 steps: its snapshot,
#      written from its live mapping, holds the 30 kept 4 MiB tensors and says how it died;
#   2. the same program under `torchrun --nproc_per_node 2` (2 GPUs), rank 1 killed with kill -9
#      after 20 steps: torchrun ends rank 0 (SIGTERM), and each rank's snapshot is written, with
#      its kept tensors, and says how that rank died (rank 0: the signal it caught, and when);
#   3. the loop under a shell, so not memsnap run's child, ended by SIGTERM: the signal it
#      caught, and when, from its mapping.
# Prints one table row per process: case, rank, pid, how it ended (memsnap run's line), kept
# tensors in the snapshot, steps the process printed, verdict. Results in $OUT (or ./crash-out).
# usage (on the GPU machine, build/ carried): tests/gpu/crash/run.sh   (part 2: 2 GPUs, NCCL; on
# one GPU both ranks share it through gloo)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cli=$root/build/memsnap
out=${OUT:-$PWD/crash-out}
mkdir -p "$out"
py=${PYTHON:-python3}
rows=()
fail=0

# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN.
wait_for() {
  for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
kept_in() { # the 4 MiB blocks allocated in a snapshot
  python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("select count(*) from blocks where state = \"allocated\" and requested_size = 4194304").fetchone()[0])' "$1" 2>/dev/null || echo 0
}
row() { rows+=("$(printf '%-22s %-5s %-8s %-58s %-6s %-6s %s' "$@")"); }
mode_line() { grep -m1 -o "recording '[^']*' (mode [a-z+ ]*)" "$1"; } # the path PyTorch was recorded through

# ---- 1. one process, kill -9 --------------------------------------------------------------------
start=$(date +%s)
log=$out/single.out
"$cli" run --no-suggest -o "$out/single-%p.db" -- "$py" "$here/train_kill.py" >"$log" 2>&1 &
runner=$!
if wait_for "$log" '^step 29 ' 240; then
  pid=$(grep -m1 '^step 0 ' "$log" | awk '{print $4}')
  steps=$(grep -c '^step ' "$log")
  kill -9 "$pid"
  wait "$runner"
  steps=$(grep -c '^step ' "$log")
  db=$out/single-$pid.db
  how=$(grep -o "killed by SIGKILL at [^;]*" "$log" | head -n 1)
  kept=$(kept_in "$db")
  verdict=ok
  { [ -s "$db" ] && [ -n "$how" ] && [ "$kept" -ge 30 ] && [ "$kept" -ge "$((steps - 1))" ]; } || { verdict=FAIL; fail=1; }
  row "kill -9, one process" 0 "$pid" "${how:-no snapshot}" "$kept" "$steps" "$verdict"
else
  row "kill -9, one process" - - "never reached step 30 (see $log)" 0 0 FAIL
  fail=1
  kill -9 "$runner" 2>/dev/null
fi
echo "part 1: $(($(date +%s) - start)) s; $(mode_line "$out/single.out")"

# ---- 2. torchrun, two ranks, rank 1 killed ------------------------------------------------------
start=$(date +%s)
# on a machine of one GPU, both ranks on it, through gloo (NCCL wants a GPU a rank)
backend=nccl case2="torchrun, rank 1 -9"
[ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ] && backend=gloo case2="torchrun/gloo 1 GPU"
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 1 ]; then
  log=$out/ranks.out
  "$cli" run --no-suggest -o "$out/rank%r-%p.db" -- torchrun --nproc_per_node 2 "$here/train_kill.py" --ddp --backend "$backend" >"$log" 2>&1 &
  runner=$!
  if wait_for "$log" 'step 19 pid [0-9]* rank 1' 300 && wait_for "$log" 'step 19 pid [0-9]* rank 0' 60; then
    victim=$(grep -m1 'step 0 pid [0-9]* rank 1' "$log" | awk '{print $4}')
    kill -9 "$victim"
    wait "$runner"
    for r in 0 1; do
      pid=$(grep -m1 "step 0 pid [0-9]* rank $r" "$log" | awk '{print $4}')
      steps=$(grep -c "pid $pid rank $r" "$log")
      db=$out/rank$r-$pid.db
      how=$(grep "process $pid " "$log" | grep -o "\(killed by\|exited with\|ended\)[^;]*" | head -n 1)
      kept=$(kept_in "$db")
      verdict=ok
      { [ -s "$db" ] && [ "$kept" -ge 19 ] && [ "$kept" -ge "$((steps - 1))" ]; } || { verdict=FAIL; fail=1; }
      # rank 1: SIGKILL, which no process can catch; rank 0: its own snapshot at exit (gloo: its
      # collective fails and it exits), or the signal torchrun ended it with, caught and written
      # into its mapping (docs/recover.md), with the time
      [ "$r" = 1 ] && ! echo "$how" | grep -q SIGKILL && { verdict=FAIL; fail=1; }
      [ "$r" = 0 ] && [ -n "$how" ] && ! echo "$how" | grep -q "killed by SIG[A-Z]* at " && { verdict=FAIL; fail=1; }
      row "$case2" "$r" "$pid" "${how:-its own snapshot at exit}" "$kept" "$steps" "$verdict"
    done
  else
    row "$case2" - - "the ranks never reached step 20 (see $log)" 0 0 FAIL
    fail=1
    kill -9 "$runner" 2>/dev/null
  fi
else
  row "$case2" - - "skipped: no GPU" - - skip
fi
echo "part 2: $(($(date +%s) - start)) s"

# ---- 3. a process memsnap run did not start itself, ended by SIGTERM ----------------------------
# the training loop under a shell that stays (as torchrun's ranks are under torchrun): memsnap run
# does not see how it ended; the mapping says it (the signal it caught, and when). The mode is
# named: auto records a shell through the interposer alone, and the tensors are inside
# PyTorch's segments
start=$(date +%s)
log=$out/term.out
"$cli" run --no-suggest --mode allocator+intercept -o "$out/term-%p.db" -- bash -c "'$py' '$here/train_kill.py'; echo shell-done" >"$log" 2>&1 &
runner=$!
if wait_for "$log" '^step 19 ' 240; then
  pid=$(grep -m1 '^step 0 ' "$log" | awk '{print $4}')
  kill -TERM "$pid"
  wait "$runner"
  steps=$(grep -c '^step ' "$log")
  db=$out/term-$pid.db
  how=$(grep "process $pid " "$log" | grep -o "killed by[^;]*" | head -n 1)
  kept=$(kept_in "$db")
  verdict=ok
  { [ -s "$db" ] && echo "$how" | grep -q "killed by SIGTERM at " && [ "$kept" -ge 20 ] && [ "$kept" -ge "$((steps - 1))" ]; } ||
    { verdict=FAIL; fail=1; }
  row "SIGTERM, under a shell" 0 "$pid" "${how:-no line}" "$kept" "$steps" "$verdict"
else
  row "SIGTERM, under a shell" - - "never reached step 20 (see $log)" 0 0 FAIL
  fail=1
  kill -9 "$runner" 2>/dev/null
fi
echo "part 3: $(($(date +%s) - start)) s"

echo
printf '%-22s %-5s %-8s %-58s %-6s %-6s %s\n' case rank pid "how it ended (memsnap run)" kept steps verdict
for r in "${rows[@]}"; do echo "$r"; done
live_folder=${MEMSNAP_LIVE_DIR:-/dev/shm/memsnap-$(id -u)} # the user's own folder (docs/RELIABILITY.md)
ls "$live_folder" 2>/dev/null | grep -q 'memsnap-.*\.live' &&
  echo "note: live mappings left in $live_folder: $(ls "$live_folder" | grep 'memsnap-.*\.live' | tr '\n' ' ')"
exit "$fail"
