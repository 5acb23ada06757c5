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
echo "== memsnap analyze $build/demo.db (the snapshot is SQLite: docs/snapshot-format.md)"
"$build/memsnap" analyze "$build/demo.db"
echo
echo "== the leak: keep_loss_for_logging is the first leak candidate, growing every iteration,"
echo "== ranked above the weights and optimizer state that hold more but do not grow"
