#!/usr/bin/env bash
# bench_python_frames.sh BUILD_DIR [PAIRS]: what the interposer's Python frames cost per
# allocation (docs/BENCHMARKS.md, "Python frames under the interposer").
#
# tests/data/run/steps.py times librun_steps.so's steps_work (one 1 MiB cudaMalloc and its
# cudaFree) through ctypes.CDLL, which releases the GIL (the frames are read by gil_helper.c's
# thread), and through ctypes.PyDLL, which keeps it (the thread reads its own): PAIRS calls in a
# row (default 20000, the fastest of 5 rounds), 200 calls alone (2 ms apart, the median), and 40
# while another Python thread holds the GIL (the median). Each row is one process under `memsnap
# run --mode intercept --stacks S` (default --max-entries: the ring wraps, as in a long run), all
# in this one run of the script; on a machine with a driver also the program alone (plain).
# Without a GPU it runs on the simulated device (MEMSNAP_BACKEND=sim, set unless the caller set
# MEMSNAP_BACKEND; the plain row needs a driver); MEMSNAP_BACKEND=cuda measures the driver's.
# Prints one table, microseconds per pair, then what the Python frames add to native ones (all
# against native), as a difference and a ratio.
set -eu
build=$(cd "$1" && pwd)
pairs=${2:-20000}
here=$(cd "$(dirname "$0")" && pwd)
export MEMSNAP_BACKEND=${MEMSNAP_BACKEND:-sim}
rows="none native python all"
if [ "$MEMSNAP_BACKEND" = cuda ]; then
  unset MEMSNAP_BACKEND # the interposer forwards to the driver
  rows="plain $rows"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cols="burst_released burst_held alone_released alone_held busy_released"
printf '%-7s %15s %11s %15s %11s %14s\n' "" "burst: released" "burst: held" "alone: released" "alone: held" \
  "busy: released"
for stacks in $rows; do
  prog=(python3 "$here/../data/run/steps.py" "$build/tests/librun_steps.so" 2 bench "$pairs")
  if [ "$stacks" = plain ]; then
    "${prog[@]}" >"$work/$stacks.out"
  else
    "$build/memsnap" run -q --mode intercept --stacks "$stacks" -o "$work/b.db" -- "${prog[@]}" >"$work/$stacks.out"
  fi
  grep '^BENCH ' "$work/$stacks.out" | sed 's/^BENCH //' >"$work/$stacks.json"
  python3 - "$work/$stacks.json" "$stacks" $cols <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("%-7s %15.2f %11.2f %15.2f %11.2f %14.1f" % tuple([sys.argv[2]] + [r[c] for c in sys.argv[3:]]))
EOF
  rm -f "$work/b.db"
done
python3 - "$work/native.json" "$work/all.json" $cols <<'EOF'
import json, sys
native, full = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print("python frames (all against native): " + ", ".join(
    "%s %+.2f us (%.2fx)" % (c.replace("_", " "), full[c] - native[c], full[c] / native[c]) for c in sys.argv[3:]))
EOF
