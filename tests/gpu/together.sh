#!/usr/bin/env bash
# together.sh: several GPU checks at once on a machine with two GPUs, in one call (the device time
# of a session is short; each check's results are per process, so they do not disturb each other;
# no timing is taken here):
#   predict   tests/gpu/predict/predict_check.py on GPU 1 (issue 35)
#   cxx       tests/gpu/cxx/run_cxx.sh build parity ipc compile nocache on GPU 0 (issue 34)
#   zoo1      the zoo's one-GPU programs named in ZOO1 on GPU 0 (issue 33)
#   zoo2      the zoo's two-GPU programs (FSDP2, DDP) on both GPUs
# The zoo and predict record through the pluggable interface (MEMSNAP_TORCH_ALLOCATOR=pluggable:
# the path their earlier runs measured); run_cxx.sh checks the C++ allocator. Everything comes
# back in $OUT/together.tar.xz (pack_out.sh); each part's table is printed last.
# Prepare build/ with tests/gpu/prepare.sh on the development machine and carry it.
set -u
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
mkdir -p "$W/predict" "$W/cxx" "$W/zoo1" "$W/zoo2"
nvidia-smi -L
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
limit=${TOGETHER_SECONDS:-560}
(OUT=$W/predict CUDA_VISIBLE_DEVICES=1 MEMSNAP_TORCH_ALLOCATOR=pluggable timeout "$limit" \
  python3 tests/gpu/predict/predict_check.py >"$W/predict/out.txt" 2>&1) &
(OUT=$W/cxx CUDA_VISIBLE_DEVICES=0 timeout "$limit" tests/gpu/cxx/run_cxx.sh build parity ipc compile nocache \
  >"$W/cxx/out.txt" 2>&1) &
(OUT=$W/zoo1 CUDA_VISIBLE_DEVICES=0 MEMSNAP_TORCH_ALLOCATOR=pluggable timeout "$limit" python3 tests/gpu/zoo/run_zoo.py \
  --gpus 1 --jobs 3 --keep "$W/zoo1/snapshots" --only "${ZOO1:-gpt2_eager,generate,gpt2_compile,hf_trainer}" \
  >"$W/zoo1/out.txt" 2>&1) &
(OUT=$W/zoo2 MEMSNAP_TORCH_ALLOCATOR=pluggable timeout "$limit" python3 tests/gpu/zoo/run_zoo.py \
  --keep "$W/zoo2/snapshots" --only fsdp2,ddp >"$W/zoo2/out.txt" 2>&1) &
wait
tests/gpu/pack_out.sh "$W" together >/dev/null
for part in zoo1 zoo2; do echo "== $part"; sed -n '/^program /,$p' "$W/$part/out.txt"; grep -E '^[a-z0-9_]+(-leak)? ' "$W/$part/out.txt" | head -0; done
echo "== predict"; tail -n 25 "$W/predict/out.txt"
echo "== cxx"; tail -n 30 "$W/cxx/out.txt"
ls -la "$OUT"
