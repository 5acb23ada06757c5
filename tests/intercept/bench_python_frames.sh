#!/usr/bin/env bash
# bench_python_frames.sh BUILD_DIR [PAIRS]: what the interposer's Python frames cost per
# allocation (docs/BENCHMARKS.md, "Python frames under the interposer").
#
# tests/data/run/steps.py calls librun_steps.so's steps_work (one 1 MiB cudaMalloc and its
# cudaFree) PAIRS times (default 20000) through ctypes.CDLL, which releases the GIL (the frames
# are read by gil_helper.c's thread), then through ctypes.PyDLL, which keeps it (the thread reads
# its own), the fastest of 5 rounds each, under `memsnap run --mode intercept` with each --stacks
# choice. Without a GPU it runs on the simulated device (MEMSNAP_BACKEND=sim, set unless the
# caller set MEMSNAP_BACKEND); on a GPU machine, MEMSNAP_BACKEND=cuda measures the driver's.
# Prints one table: microseconds per pair, and what the Python frames add to native ones.
set -eu
build=$(cd "$1" && pwd)
pairs=${2:-20000}
here=$(cd "$(dirname "$0")" && pwd)
export MEMSNAP_BACKEND=${MEMSNAP_BACKEND:-sim}
[ "$MEMSNAP_BACKEND" = cuda ] && unset MEMSNAP_BACKEND # the interposer forwards to the driver
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-8s %22s %22s\n' stacks "GIL released (us/pair)" "GIL held (us/pair)"
declare -A rel held
for stacks in none native python all; do
  line=$("$build/memsnap" run -q --mode intercept --stacks "$stacks" --max-entries 100000000 -o "$work/b.db" -- \
    python3 "$here/../data/run/steps.py" "$build/tests/librun_steps.so" 2 bench "$pairs" | grep '^BENCH ')
  rel[$stacks]=$(echo "${line#BENCH }" | python3 -c 'import json, sys; print(json.load(sys.stdin)["gil_released_us_per_pair"])')
  held[$stacks]=$(echo "${line#BENCH }" | python3 -c 'import json, sys; print(json.load(sys.stdin)["gil_held_us_per_pair"])')
  printf '%-8s %22s %22s\n' "$stacks" "${rel[$stacks]}" "${held[$stacks]}"
  rm -f "$work/b.db"
done
python3 -c "print('python frames add (all - native): %.2f us/pair with the GIL released, %.2f held' %
  (${rel[all]} - ${rel[native]}, ${held[all]} - ${held[native]}))"
