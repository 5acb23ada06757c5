#!/usr/bin/env bash
# demo.sh BUILD_DIR: runs the main job end to end: the sample training loop (with its leak) on
# the GPU when one is present and working, else on the simulated device, recording its history
# into a snapshot, then summarises the snapshot. Called by `make demo` after the build.
set -eu
build=${1:-build}
backend=${MEMSNAP_BACKEND:-}
if [ -z "$backend" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then backend=cuda; else backend=sim; fi
fi
echo "== memsnap demo on the $backend backend (set MEMSNAP_BACKEND=sim|cuda to choose)"
MEMSNAP_BACKEND=$backend MEMSNAP_SIM_CAPACITY=${MEMSNAP_SIM_CAPACITY:-2G} \
  "$build/samples/train_loop" --iterations 8 --record --dump "$build/demo.db"
echo
echo "== the snapshot, $build/demo.db (SQLite; docs/snapshot-format.md):"
python3 "$(dirname "$0")/show_snapshot.py" "$build/demo.db"
echo
echo "== the leak: keep_loss_for_logging holds one block per iteration, and allocated memory"
echo "== grows by the same amount every iteration (see the 'iter' lines)"
