#!/usr/bin/env bash
# suite.sh [SETTINGS]: PyTorch's test_cuda.py selection in one GPU call (issue 36): for each setting
# (default: expandable,async) the native side, then the memsnap side, each alone on the GPU; on a
# machine with two GPUs, GPUS=0,1 runs the two sides at once, each on a card of its own (SIDES=native
# or SIDES=memsnap runs one side only, for a call each where a side takes long; AGAINST=an earlier
# run's test_cuda.json then supplies the other side, e.g. tests/gpu/results/run46-test_cuda-async.json;
# ANALYZE=1 keeps memsnap analyze's report of each snapshot of the memsnap side; SAME_HISTORY=1 runs
# each test that passes natively and not under memsnap again on both sides after the tests memsnap's
# process ran before it, and counts it apart when it then fails natively too). Then,
# with DIAG set, the compile-regions diagnostic (compile_regions_in_order.py): TestCudaMallocAsync's
# tests before test_memory_compile_regions, natively and under memsnap, and, when that prefix did
# not make it fail under memsnap, the whole selection's prefix under memsnap. The test file is
# .carry/test_cuda.py (PyTorch's, carried, never committed). Logs and test_cuda.json are packed
# into $OUT/suite.tar.xz; the tables are printed last.
set -u
cd "$(dirname "$0")/../../.."
W=$(mktemp -d)
F=${TEST_CUDA:-.carry/test_cuda.py}
nvidia-smi -L
export PYTHONUNBUFFERED=1
if [ -n "${GPUS:-}" ]; then par=(--jobs 2 --gpus "$GPUS"); g0=${GPUS%%,*} g1=${GPUS##*,}; else par=(); g0=0 g1=0; fi
more=()
[ -n "${AGAINST:-}" ] && more+=(--against "$AGAINST")
[ -n "${ANALYZE:-}" ] && more+=(--analyze)
[ -n "${SAME_HISTORY:-}" ] && more+=(--same-history --history-budget "${HISTORY_BUDGET:-900}")
OUT=$W/suite timeout "${SUITE_TIMEOUT:-560}" python3 tests/gpu/pytorch_suite/run_test_cuda.py "$F" \
  --settings "${1:-expandable,async}" --sides "${SIDES:-native,memsnap}" "${par[@]}" "${more[@]}" \
  --timeout "${SIDE_TIMEOUT:-290}" >"$W/suite.txt" 2>&1
echo "[run_test_cuda exit $?]" >>"$W/suite.txt"
if [ -n "${DIAG:-}" ]; then
  d=tests/gpu/pytorch_suite/compile_regions_in_order.py
  CUDA_VISIBLE_DEVICES=$g0 timeout 90 python3 $d "$F" --class-only >"$W/regions-native-class.txt" 2>&1
  CUDA_VISIBLE_DEVICES=$g1 timeout 90 build/memsnap run -q -o "$W/regions-class-%p.db" -- python3 $d "$F" \
    --class-only >"$W/regions-memsnap-class.txt" 2>&1
  if grep -q '"passed": true' "$W/regions-memsnap-class.txt"; then
    CUDA_VISIBLE_DEVICES=$g1 timeout "${DIAG_TIMEOUT:-150}" build/memsnap run -q -o "$W/regions-%p.db" -- \
      python3 $d "$F" >"$W/regions-memsnap.txt" 2>&1
  fi
  rm -f "$W"/regions*.db
fi
mkdir -p "$OUT"
tests/gpu/pack_out.sh "$W" suite >/dev/null
cat "$W/suite.txt"
for f in "$W"/regions-*.txt; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"; grep -E "^(Ran|OK|FAILED)" "$f" | tail -3; grep -E "Error|error" "$f" | tail -3
  grep '^REGIONS ' "$f" | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line[8:])
    print({k: v for k, v in d.items() if k != 'entries'})
    print('first entries:', d.get('entries', [])[:12])"
done
