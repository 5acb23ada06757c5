#!/usr/bin/env bash
# whatif_run.sh: issue 43's GPU check in one call: whatif_check.py (GPT-2 checkpointed, the two
# Linear with SGD, resnet50's stages checkpointed, --advise under a 24 GiB cap) on one GPU, its
# results packed into $OUT/whatif.tar.xz without the recordings (tests/gpu/pack_out.sh), its
# table last. From the repository root with build/ prepared by tests/gpu/prepare.sh.
set -u
cd "$(dirname "$0")/../../.." || exit 2
: "${OUT:?whatif_run.sh: OUT is not set}"
W=$(mktemp -d)
OUT=$W PYTHONUNBUFFERED=1 timeout -k 10 560 python3 tests/gpu/predict/whatif_check.py >"$W/whatif.txt" 2>&1
echo "[whatif_check.py: exit $?]" >>"$W/whatif.txt"
rm -f "$W"/*.db
tests/gpu/pack_out.sh "$W" whatif >/dev/null
tail -50 "$W/whatif.txt"
