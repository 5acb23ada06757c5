#!/usr/bin/env bash
# bench_runlog.sh: what the run log costs (docs/BENCHMARKS.md, "The run log"), on the simulated
# device, two builds run in turn RUNS times (default 5), the median of each:
#   step   an allocation, its free and an optimizer step's end (gen_runlog many: the step takes the
#          run log's sample), per iteration, less the same without the step;
#   tells  an iteration told as PyTorch's layer tells a model of 150 parameters (a step's beginning,
#          parameters and gradients, the optimizer state, its end: gen_runlog tells);
# and the live mapping's size with the default ring (100,000 events), which a day's run keeps.
# The base build is one without the run log (gen_runlog.c compiled against its library here).
# The allocation path's compare and store: tests/recorder/bench_live.sh BASE NEW.
# usage: tests/analyzer/bench_runlog.sh BASE_BUILD NEW_BUILD [RUNS [N]]
set -eu
base=$1 new=$2 runs=${3:-5} n=${4:-1000000}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MEMSNAP_LIVE_DIR=$tmp
cc -O2 -D_GNU_SOURCE -I"$here" -I"$here/../../recorder" "$here/gen_runlog.c" -L"$base" -lmemsnap -Wl,-rpath,"$(cd "$base" && pwd)" -o "$tmp/gen_base"
for r in $(seq 1 "$runs"); do
  for side in base new; do
    gen=$tmp/gen_base; [ $side = new ] && gen=$new/tests/gen_runlog
    echo "$side step $("$gen" many "$tmp/x.db" "$n" | awk '{print $2}')"
    echo "$side tells $("$gen" tells "$tmp/x.db" $((n / 50)) | awk '{print $2}')"
  done
done >"$tmp/out"
python3 - "$tmp/out" "$runs" <<'PY'
import statistics, sys
v = {}
for line in open(sys.argv[1]):
    side, what, x = line.split()
    v.setdefault((side, what), []).append(float(x))
print("ns per iteration, median of %s runs each" % sys.argv[2])
print("%-8s %14s %14s %12s" % ("", "without", "with run log", "difference"))
for what in ("step", "tells"):
    b, n = statistics.median(v[("base", what)]), statistics.median(v[("new", what)])
    print("%-8s %14.1f %14.1f %+12.1f" % (what, b, n, n - b))
PY
# the mapping of a process recording with the default ring
"$new/tests/gen_runlog" kill x >"$tmp/kill.out" &
pid=$!
for _ in $(seq 1 100); do grep -q "iteration 50" "$tmp/kill.out" 2>/dev/null && break; sleep 0.1; done
size=$(stat -c %s "$tmp/memsnap-$pid.live")
kill -9 $pid; wait $pid 2>/dev/null || true
echo "live mapping: $size bytes (header 8 KiB, the ring 6.4 MB, the run log $(( (2 * 16384 * 96 + 4096 + 4095) / 4096 * 4096 )) bytes, the log as used)"
