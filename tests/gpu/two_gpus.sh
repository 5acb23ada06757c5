#!/usr/bin/env bash
# two_gpus.sh: the checks that need two GPUs, in one call on a two-GPU machine (nvidia-h100-x2):
#   1. ddp_parity.py through NCCL, one rank per GPU, native and memsnap alternating twice;
#   2. peer_copy.py: copies between the GPUs from memory memsnap mapped, in each mode;
#   3. memsnap analyze over the two ranks' snapshots (the table of ranks).
# Prepare on the development machine with tests/gpu/prepare.sh and carry build/. Logs go to $OUT.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/memsnap-gpu}
mkdir -p "$OUT"
# NVLink multicast stays off on this workplace's machines (KINDS.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export MEMSNAP_LIB="$PWD/build/libmemsnap.so" PYTHONUNBUFFERED=1
nvidia-smi -L
nvidia-smi topo -m 2>/dev/null | head -4
python3 tests/gpu/ddp_parity.py --backend nccl --nproc 2 --reps 2 2>&1 | tail -12 | tee "$OUT/ddp.txt"
python3 tests/gpu/peer_copy.py 2>&1 | tail -8 | tee "$OUT/peer.txt"
ls "$OUT"/ddp-rank*.db >/dev/null 2>&1 && build/memsnap analyze "$OUT"/ddp-rank*.db 2>&1 | head -30 | tee "$OUT/ranks.txt"
echo "== summary"; cat "$OUT/ddp.txt" "$OUT/peer.txt" | grep -v '^{'
