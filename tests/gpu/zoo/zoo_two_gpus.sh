#!/usr/bin/env bash
# zoo_two_gpus.sh: the whole zoo on a machine with two GPUs in one call (tests/gpu/zoo/README.md):
# the one-GPU programs split in two halves, each on a GPU of its own (three programs at a time),
# then the two-GPU programs (FSDP2, DDP) on both. Everything in memsnap run's default mode (the
# C++ allocator where it builds). zoo.jsonl, zoo.log and the snapshots of each part are packed into
# $OUT/zoo2gpus.tar.xz; the tables are printed last. Prepare build/ with tests/gpu/prepare.sh and
# carry it. ZOO_TIMEOUT bounds each part (seconds).
set -u
cd "$(dirname "$0")/../../.."
W=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
HALF1=${HALF1:-gpt2_eager,gpt2_compile,gpt2_accum_ckpt_bf16,hf_trainer,peft_lora,cupy,jax}
HALF2=${HALF2:-two_linear_adamw,two_linear_sgd_keep_grads,gpt2_eager_keep_grads,gpt2_oom_backward,lightning,resnet50,generate}
limit=${ZOO_TIMEOUT:-400}
nvidia-smi -L
part() {  # part NAME GPUS ONLY [run_zoo options...]
  local name=$1 gpus=$2 only=$3; shift 3
  mkdir -p "$W/$name"
  OUT=$W/$name CUDA_VISIBLE_DEVICES=$gpus timeout "$limit" python3 tests/gpu/zoo/run_zoo.py \
    --only "$only" --keep "$W/$name/snapshots" "$@" >"$W/$name/out.txt" 2>&1
  echo "[$name exit $?]" >>"$W/$name/out.txt"
}
part half1 0 "$HALF1" --gpus 1 --jobs 3 &
part half2 1 "$HALF2" --gpus 1 --jobs 3 &
wait
[ -n "${SKIP_TWO_GPU:-}" ] || part two 0,1 fsdp2,ddp
tests/gpu/pack_out.sh "$W" zoo2gpus >/dev/null
for p in half1 half2 two; do
  [ -f "$W/$p/out.txt" ] || continue
  echo "== $p"  # the table and the exit line, or, where no table came, what the part printed last
  if grep -q '^program ' "$W/$p/out.txt"; then sed -n '/^program /,$p' "$W/$p/out.txt"; else tail -n 8 "$W/$p/out.txt"; fi
done
