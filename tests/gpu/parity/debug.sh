#!/usr/bin/env bash
# debug.sh: one GPU call to look at single tasks with their raw output (used while developing;
# run.sh is the benchmark). Each task runs as in torch_compare.py --only TASK MODE.
cd "$(dirname "$0")/../../.."
export MEMSNAP_LIB=$PWD/build/libmemsnap.so PYTHONUNBUFFERED=1
for spec in "$@"; do
  echo "=== $spec"
  timeout 300 python3 tests/gpu/parity/torch_compare.py --only $spec 2>&1 | tail -40
  echo "=== rc ${PIPESTATUS[0]}"
done
