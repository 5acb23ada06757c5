#!/usr/bin/env bash
# two_gpus.sh: the checks that need two GPUs, in one call on a two-GPU machine (nvidia-h100-x2):
#   1. ddp_parity.py through NCCL, one rank per GPU, native and memsnap alternating twice;
#   2. peer_copy.py: copies between the GPUs from memory memsnap mapped, in each mode;
#   3. memsnap analyze over the two ranks' snapshots (the table of ranks).
# Prepare on the development machine with tests/gpu/prepare.sh and carry build/. Logs and the
# ranks' snapshots go to $OUT (emptied of an earlier run's first). Exit status 1 when a check failed.
set -u -o pipefail
cd "$(dirname "$0")/../../.."
export OUT=${OUT:-/tmp/memsnap-gpu}
mkdir -p "$OUT"
rm -f "$OUT"/ddp.jsonl "$OUT"/ddp-rank*.db
# NVLink multicast stays off on this workplace's machines (KINDS.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export MEMSNAP_LIB="$PWD/build/libmemsnap.so" PYTHONUNBUFFERED=1
nvidia-smi -L
nvidia-smi topo -m 2>/dev/null | head -4
rc=0
python3 tests/gpu/parity/ddp_parity.py --backend nccl --nproc 2 --reps 2 2>&1 | tail -14 | tee "$OUT/ddp.txt" || rc=1
python3 tests/gpu/parity/peer_copy.py 2>&1 | tail -8 | tee "$OUT/peer.txt" || rc=1
if ls "$OUT"/ddp-rank*.db >/dev/null 2>&1; then
  build/memsnap analyze "$OUT"/ddp-rank*.db >"$OUT/ranks.txt" 2>&1 || rc=1
  head -30 "$OUT/ranks.txt"
else
  echo "no ranks' snapshots in $OUT"; rc=1
fi
echo "== summary"; cat "$OUT/ddp.txt" "$OUT/peer.txt" | grep -v '^{'
exit $rc
