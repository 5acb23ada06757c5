#!/usr/bin/env bash
# zoo.sh [run_zoo.py options...]: the zoo on the GPU machine in one call (tests/gpu/zoo/README.md):
# run_zoo.py with the options given (e.g. --jobs 4, --only NAME,...), every snapshot kept, and
# everything packed into $OUT/zoo.tar.xz (tests/gpu/pack_out.sh): zoo.jsonl, zoo.log and the
# snapshots (the fixtures of tests/data/zoo come from them). The table is printed last.
# Prepare build/ on the development machine with tests/gpu/prepare.sh and carry it.
set -u
cd "$(dirname "$0")/../../.."
W=$(mktemp -d)
nvidia-smi -L
PYTHONUNBUFFERED=1 OUT=$W timeout "${ZOO_TIMEOUT:-570}" python3 tests/gpu/zoo/run_zoo.py --keep "$W/snapshots" "$@" \
  >"$W/zoo.out" 2>&1
rc=$?
tests/gpu/pack_out.sh "$W" zoo >/dev/null
sed -n '/^program /,$p' "$W/zoo.out"
[ $rc -eq 124 ] && { echo "zoo.sh: run_zoo.py stopped at its time limit; what it had ran:"; grep -E '^[a-z0-9_]+(-leak)? ' "$W/zoo.out" | tail -40; }
exit $rc
