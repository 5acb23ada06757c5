#!/usr/bin/env bash
# final_wave.sh: the GPU checks issues 42 and 44 still wait for, in one call on nvidia-h200-x4,
# each part on its own cards, all at once:
#   GPUs 0,1: tests/gpu/crash/run.sh (issue 44: a PyTorch loop killed with kill -9 under memsnap
#             run; a torchrun job's rank 1 killed)
#   GPU 2:    model_language/cost.py: GPT-2's step natively and under memsnap run (recording, the
#             module record and the live mapping on: memsnap run's default), side by side
#   GPU 3:    cnn_train.py --amp --steps 10 with GradScaler's first scale at 2^18 and 2^20 (some
#             steps skipped, not all), recorded and analyzed: every step an iteration, the skipped
#             ones marked (issue 42)
# From the repository root, build/ prepared by tests/gpu/prepare.sh and carried. $OUT gets
# final.tar.xz; the tables last.
set -u
cd "$(dirname "$0")/../.." || exit 2
: "${OUT:?final_wave.sh: OUT is not set}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W=$(mktemp -d)
R=$W/final M=build/memsnap
mkdir -p "$R/crash"
(CUDA_VISIBLE_DEVICES=0,1 OUT=$R/crash timeout -k 10 520 tests/gpu/crash/run.sh >"$R/crash.txt" 2>&1
 echo "[crash: exit $?]" >>"$R/crash.txt") &
(CUDA_VISIBLE_DEVICES=2 timeout -k 10 330 python3 tests/gpu/model_language/cost.py --budget 300 --memsnap "$M" \
   --json "$R/cost.json" >"$R/cost.txt" 2>&1) &
(export CUDA_VISIBLE_DEVICES=3
 for scale in 18 20; do
   timeout -k 10 150 "$M" run --no-suggest -q -o "$R/amp$scale.db" -- python3 tests/gpu/zoo/programs/cnn_train.py --amp \
     --steps 10 --init-scale $((1 << scale)) >"$R/amp$scale.log" 2>&1
   "$M" analyze --json --no-suggest "$R/amp$scale.db" >"$R/amp$scale.json" 2>>"$R/amp$scale.log"
   python3 -c 'import json, sys
j = json.load(open(sys.argv[1])); s = j["summary"]; it = j["iterations"]
print("2^%s: %d iterations, %d marked skipped, skipped_steps %d, optimizer_steps %d, backward_passes %d, source %s" % (
    sys.argv[2], len(it), sum(i["skipped"] for i in it), s["skipped_steps"], s["optimizer_steps"], s["backward_passes"],
    s["iteration_source"]))' "$R/amp$scale.json" $scale >>"$R/amp.txt" 2>&1
   grep -h "skipped steps" "$R/amp$scale.log" >>"$R/amp.txt"
 done) &
wait
rm -f "$R"/crash/*.db "$R"/amp*.db
tests/gpu/pack_out.sh "$R" final >/dev/null
ls -l "$OUT"
echo "== GradScaler"; cat "$R/amp.txt"
echo "== cost"; tail -2 "$R/cost.txt"
echo "== crash"; tail -25 "$R/crash.txt"
