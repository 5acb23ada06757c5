#!/usr/bin/env bash
# run.sh: the GPU benchmark and checks, on the GPU machine, in one call (see docs/BENCHMARKS.md).
#   1. preflight: GPU, torch version, that libmemsnap.so resolves its libraries;
#   2. the C allocator benchmark: memsnap (cuda backend) and PyTorch's native c10 allocator
#      (built here against the installed torch), alternating, 3 times each;
#   3. torch_compare.py: PyTorch with memsnap against native (losses, timings, peaks, OOM,
#      decision parity). Prints the table last. Logs go to $OUT.
# Prepare on the development machine with tests/gpu/prepare.sh and carry build/.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/memsnap-gpu}
mkdir -p "$OUT"
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
if ldd build/libmemsnap.so | grep 'not found'; then echo "error: libmemsnap.so misses libraries"; exit 1; fi
TORCH=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
ABI=$(python3 -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))')
CUDA=${CUDA_HOME:-/usr/local/cuda}
if ! g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$ABI" -Itests/gpu/bench tests/gpu/bench/bench_native.cc -o build/bench_native \
  -I"$TORCH/include" -I"$CUDA/include" -L"$TORCH/lib" -lc10_cuda -lc10 -L"$CUDA/lib64" -lcudart \
  -Wl,-rpath,"$TORCH/lib" -Wl,-rpath,"$CUDA/lib64" -lm 2>"$OUT/bench_native_build.log"; then
  echo "bench_native did not build:"; tail -5 "$OUT/bench_native_build.log"
fi
: >"$OUT/bench.txt"
pin=""
command -v taskset >/dev/null && pin="taskset -c 2" # one core for both: less run-to-run noise
for i in 1 2 3; do
  MEMSNAP_BACKEND=cuda $pin build/bench_alloc "${ITERS:-1000000}" >>"$OUT/bench.txt"
  [ -x build/bench_native ] && $pin build/bench_native "${ITERS:-1000000}" >>"$OUT/bench.txt"
done
cat "$OUT/bench.txt"
PYTHONUNBUFFERED=1 MEMSNAP_LIB="$PWD/build/libmemsnap.so" python3 tests/gpu/parity/torch_compare.py --bench "$OUT/bench.txt" \
  2>&1 | tee "$OUT/torch_compare.txt"
