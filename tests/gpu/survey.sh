#!/usr/bin/env bash
# survey.sh: a session's first look on the GPU machine (session of 2026-11-27, issues 33 to 36):
# PyTorch's headers and facts for the C++ allocator (cxx/torch_headers.sh), then zoo programs
# recorded by the library as it is (their snapshots come back for the analysis's development).
# Everything comes back packed: $OUT/survey.tar.xz (pack_out.sh).
set -u
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
OUT=$W/headers tests/gpu/cxx/torch_headers.sh >/dev/null 2>&1
cat "$W/headers/torch-facts.txt" | head -8
OUT=$W/zoo timeout 500 python3 tests/gpu/zoo/run_zoo.py --no-leak --keep "$W/zoo/snapshots" --only "${ZOO_ONLY:-two_linear_adamw,two_linear_sgd_keep_grads,gpt2_accum_ckpt_bf16,gpt2_oom_backward,gpt2_eager,generate,cupy,jax}" 2>&1 | tail -40
tests/gpu/pack_out.sh "$W" survey >/dev/null
ls -la "$OUT"
