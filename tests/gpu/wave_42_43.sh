#!/usr/bin/env bash
# wave_42_43.sh: the GPU checks issues 42 and 43 still wait for, in one call on a machine of three
# GPUs or more (nvidia-h200-x4), each part on its own card, all at once:
#   GPU 0: the module record's cost: model_language/cost.py with the record off
#          (MEMSNAP_TORCH_MODULES=0) and on, each against native, side by side (issue 42)
#   GPU 1: MemTracker's categories on the zoo's two_linear.py and cnn_train.py (resnet50) against
#          memsnap run's of the same programs (model_language/memtracker_zoo.py, compare.py
#          --categories; issue 42)
#   GPU 2: predict/whatif_check.py (issue 43)
# From the repository root, build/ prepared by tests/gpu/prepare.sh and carried. $OUT gets
# wave.tar.xz (every result and log) and whatif.tar.xz (whatif_check.py's $OUT); the tables last.
set -u
cd "$(dirname "$0")/../.." || exit 2
: "${OUT:?wave_42_43.sh: OUT is not set}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W=$(mktemp -d)
mkdir -p "$W/wave" "$W/whatif"
M=build/memsnap ML=tests/gpu/model_language Z=tests/gpu/zoo/programs R=$W/wave

(CUDA_VISIBLE_DEVICES=2 OUT=$W/whatif timeout -k 10 530 python3 tests/gpu/predict/whatif_check.py >"$R/whatif.txt" 2>&1
 echo "[whatif: exit $?]" >>"$R/whatif.txt") &

(export CUDA_VISIBLE_DEVICES=1
 for prog in two_linear:two_linear.py resnet50:cnn_train.py; do
   name=${prog%%:*} script=${prog#*:}
   timeout -k 10 150 "$M" run --no-suggest -q -o "$R/$name.db" -- python3 "$Z/$script" >"$R/$name.log" 2>&1
   "$M" analyze --json --no-suggest "$R/$name.db" >"$R/$name.json" 2>>"$R/$name.log"
   timeout -k 10 150 python3 "$ML/memtracker_zoo.py" --program "$name" --json "$R/mt_$name.json" >>"$R/$name.log" 2>&1
   python3 "$ML/compare.py" --categories "$R/$name.json" "$R/mt_$name.json" >"$R/compare_$name.txt" 2>&1
   echo "[$name: compare exit $?]" >>"$R/compare_$name.txt"
 done) &

(export CUDA_VISIBLE_DEVICES=0
 MEMSNAP_TORCH_MODULES=0 timeout -k 10 230 python3 "$ML/cost.py" --budget 200 --memsnap "$M" --json "$R/cost_off.json" \
   >"$R/cost_off.txt" 2>&1
 timeout -k 10 230 python3 "$ML/cost.py" --budget 200 --memsnap "$M" --json "$R/cost_on.json" >"$R/cost_on.txt" 2>&1) &
wait
tests/gpu/pack_out.sh "$R" wave >/dev/null
rm -f "$W"/whatif/*.db
tests/gpu/pack_out.sh "$W/whatif" whatif >/dev/null
ls -l "$OUT"
for f in compare_two_linear.txt compare_resnet50.txt; do echo "== $f"; cat "$R/$f"; done
for f in cost_off.txt cost_on.txt; do echo "== $f (MEMSNAP_TORCH_MODULES ${f:5:-4})"; tail -2 "$R/$f"; done
echo "== whatif"
tail -40 "$R/whatif.txt"
