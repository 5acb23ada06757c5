#!/usr/bin/env bash
# whatif_record.sh: the recordings issue 43's checkpoint predictions are worked out on, brought back
# to the development machine: GPT-2 (train_child.py) recorded with `memsnap run` at batch 4 and 8
# without checkpointing, and at batch 8 and 24 with gradient_checkpointing_enable() (what the
# prediction should come to); resnet50 at batch 32 and 64 without checkpointing and at 128 with
# every stage checkpointed. Each .db is xz-packed into $OUT (at most 8 files come back). From the
# repository root with build/ prepared by tests/gpu/prepare.sh; one GPU.
set -u
cd "$(dirname "$0")/../../.." || exit 2
: "${OUT:?whatif_record.sh: OUT is not set}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 STEPS=3
W=$(mktemp -d)
rec() {  # rec NAME MODEL BATCH CKPT
  MODEL=$2 BATCH=$3 CKPT=$4 timeout -k 10 200 build/memsnap run -q --no-suggest --max-entries 4000000 -o "$W/$1.db" \
    -- python3 tests/gpu/predict/train_child.py 2>&1 | grep RESULT | sed "s/^/$1 /"
  MODEL=$2 BATCH=$3 CKPT=$4 timeout -k 10 200 python3 tests/gpu/predict/train_child.py 2>&1 | grep RESULT | sed "s/^/$1-native /"
}
rec g4 gpt2 4 "" & rec g8 gpt2 8 "" & rec c8 gpt2 8 all & wait
rec c24 gpt2 24 all & rec r32 resnet50 32 "" & rec r64 resnet50 64 "" & rec rc128 resnet50 128 all & wait
for f in "$W"/*.db; do xz -T4 -6 -c "$f" >"$OUT/$(basename "$f").xz"; done
ls -la "$OUT"
