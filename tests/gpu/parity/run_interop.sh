#!/usr/bin/env bash
# run_interop.sh: on the GPU machine, memsnap's PyTorch snapshot import and export against
# PyTorch 2.11's own tools (docs/pytorch-snapshots.md). Prepare with tests/gpu/prepare.sh after
# `make test` (which writes build/exported/) and carry build/.
#   1. python -m torch.cuda._memory_viz stats|trace|trace_plot|segment_plot on files that
#      `memsnap export` wrote (build/exported/: the two real snapshots and a sim-recorded one);
#   2. a live PyTorch run recorded by PyTorch (tests/gpu/parity/torch_snapshot.py), imported, analyzed,
#      exported back and read again by _memory_viz.
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/memsnap-interop}
mkdir -p "$OUT"
ok=0 bad=0
step() { # step NAME CMD...: runs CMD, keeps its output (in a file named from NAME), counts it
  local name=$1
  shift
  local log="$OUT/$(echo "$name" | tr -c "A-Za-z0-9_.\n-" _).log"
  if "$@" >"$log" 2>&1; then ok=$((ok + 1)); echo "ok   $name"; else bad=$((bad + 1)); echo "FAIL $name"; tail -5 "$log"; fi
}
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
for f in resnet50_leak cycle_oom leak; do
  step "memory_viz stats $f" python3 -m torch.cuda._memory_viz stats "build/exported/$f.pickle"
  step "memory_viz trace $f" python3 -m torch.cuda._memory_viz trace "build/exported/$f.pickle"
  step "memory_viz trace_plot $f" python3 -m torch.cuda._memory_viz trace_plot "build/exported/$f.pickle" -o "$OUT/$f-trace.html"
  step "memory_viz segment_plot $f" python3 -m torch.cuda._memory_viz segment_plot "build/exported/$f.pickle" -o "$OUT/$f-segments.html"
done
head -12 "$OUT/memory_viz_stats_resnet50_leak.log"
step "live: PyTorch records and dumps" python3 tests/gpu/parity/torch_snapshot.py "$OUT/live.pickle"
step "live: memsnap import" build/memsnap import "$OUT/live.pickle" -o "$OUT/live.db"
step "live: memsnap analyze" build/memsnap analyze "$OUT/live.db"
sed -n 1,60p "$OUT/live__memsnap_analyze.log"
step "live: memsnap analyze --html" build/memsnap analyze --html "$OUT/live.html" "$OUT/live.db"
step "live: memsnap export" build/memsnap export --format pytorch "$OUT/live.db" -o "$OUT/live-back.pickle"
step "live: memory_viz stats of the export" python3 -m torch.cuda._memory_viz stats "$OUT/live-back.pickle"
step "live: memory_viz trace_plot of the export" python3 -m torch.cuda._memory_viz trace_plot "$OUT/live-back.pickle" -o "$OUT/live-back.html"
python3 - "$OUT/live.pickle" "$OUT/live-back.pickle" <<'PY'
import pickle, sys
a, b = (pickle.load(open(p, "rb")) for p in sys.argv[1:])
ta, tb = a["device_traces"][0], b["device_traces"][0]
acts = lambda t: {k: sum(1 for e in t if e["action"] == k) for k in sorted({e["action"] for e in t})}
print("original: %d segments, %d trace entries %s" % (len(a["segments"]), len(ta), acts(ta)))
print("exported: %d segments, %d trace entries %s" % (len(b["segments"]), len(tb), acts(tb)))
PY
echo "interop: $ok passed, $bad failed"
