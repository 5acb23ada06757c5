#!/usr/bin/env bash
# open_checks.sh: the GPU checks that this repository's last changes still wait for, one after the
# other in one call on one GPU (each alone on the card), everything packed into $OUT (pack_out.sh):
#   async   PyTorch's test_cuda.py selection under the async backend, the memsnap side alone,
#           compared with run 46's native side (AGAINST), memsnap analyze's report of each of its
#           snapshots kept (ANALYZE): test_max_split_expandable (docs/BENCHMARKS.md, runs 46 and 47)
#   profile the zoo's gpt2_eager, whose torch.profiler run now begins at the first optimizer
#           (ZOO_PROFILE_FROM=optimizer), and generate with a second native run (docs/BENCHMARKS.md,
#           runs 48 to 50)
# OPEN_CHECKS=async or =profile runs one of them. Prepare build/ with tests/gpu/prepare.sh, carry
# build/ and .carry/ (PyTorch's test_cuda.py as .carry/test_cuda.py).
set -u
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
nvidia-smi -L
want=${OPEN_CHECKS:-async,profile}
if [[ ",$want," == *,async,* ]]; then
  (OUT=$W SIDES=memsnap ANALYZE=1 AGAINST=tests/gpu/results/run46-test_cuda-async.json SIDE_TIMEOUT=240 \
    SUITE_TIMEOUT=300 tests/gpu/pytorch_suite/suite.sh async >"$W/async.txt" 2>&1)
fi
if [[ ",$want," == *,profile,* ]]; then
  (OUT=$W ZOO_TIMEOUT=${PROFILE_TIMEOUT:-250} tests/gpu/zoo/zoo.sh --only gpt2_eager,generate --no-leak \
    --native-again >"$W/profile.txt" 2>&1)
fi
mkdir -p "$OUT"
for f in "$W"/*.tar.xz*; do [ -e "$f" ] && mv "$f" "$OUT/"; done
for part in async profile; do
  [ -f "$W/$part.txt" ] || continue
  echo "== $part"; grep -v '^-rw\|^total\|^drwx' "$W/$part.txt" | tail -n 40
done
