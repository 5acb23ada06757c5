#!/usr/bin/env bash
# bench_live.sh: what the live mapping costs recording (docs/BENCHMARKS.md, "The live mapping"):
# allocate+free pairs on the simulated device, bench_stacks's figures (ns per pair, each the median
# of its 7 repetitions), for two builds run in turn RUNS times (default 9), then each mode's median
# over the runs, side by side. The baseline is a build of the code before the mapping (git
# worktree of main, `make all test-programs`); MEMSNAP_LIVE=0 in the same build is the heap ring.
# usage: bench_live.sh BASE_BUILD NEW_BUILD [RUNS [ITERS [DEPTH]]]
set -eu
base=$1 new=$2 runs=${3:-9} iters=${4:-200000} depth=${5:-10}
export MEMSNAP_BACKEND=sim
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$runs"); do
  echo "base $("$base/tests/bench_stacks" "$iters" "$depth" | tail -n 1)" >>"$out"
  echo "new $("$new/tests/bench_stacks" "$iters" "$depth" | tail -n 1)" >>"$out"
  echo "heap $(MEMSNAP_LIVE=0 "$new/tests/bench_stacks" "$iters" "$depth" | tail -n 1)" >>"$out"
done
python3 - "$out" "$runs" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    w = line.split()
    build, vals = w[0], dict(zip(w[3::2], map(float, w[4::2])))
    for mode, v in vals.items():
        rows.setdefault((build, mode), []).append(v)
modes = ["off", "none", "native", "python", "all"]
print("ns per allocate+free pair, median of %s runs (each the median of 7 repetitions)" % sys.argv[2])
print("%-26s" % "build" + "".join("%9s" % m for m in modes))
for build, name in [("base", "before (main)"), ("new", "live mapping"), ("heap", "this build, MEMSNAP_LIVE=0")]:
    print("%-26s" % name + "".join("%9.1f" % statistics.median(rows[(build, m)]) for m in modes))
print("%-26s" % "live mapping - before" + "".join("%+9.1f" % (statistics.median(rows[("new", m)]) - statistics.median(rows[("base", m)])) for m in modes))
PY
