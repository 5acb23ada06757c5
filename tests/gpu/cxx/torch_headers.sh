#!/usr/bin/env bash
# torch_headers.sh: on the GPU machine, packs the installed PyTorch's headers that memsnap's C++
# allocator (torch/, issue 34) compiles against into $OUT/torch-headers.tar.gz, with the facts
# of the installation (version, C++ ABI, include paths, the allocator symbols its libraries
# export) in $OUT/torch-facts.txt, so that the C++ layer can be compiled on the development
# machine, which has no PyTorch. Unpack with: mkdir -p build/torch-headers && tar -xzf
# torch-headers.tar.gz -C build/torch-headers
set -u
OUT=${OUT:-/tmp/torch-headers}
mkdir -p "$OUT"
TORCH=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
{
  python3 -c 'import torch, sys, sysconfig; print("torch", torch.__version__, "cuda", torch.version.cuda, "cxx11_abi", torch.compiled_with_cxx11_abi()); print("python", sys.version.split()[0], sysconfig.get_paths()["include"])'
  python3 -c 'import torch.utils.cpp_extension as c; print("include_paths", c.include_paths()); print("library_paths", c.library_paths())'
  g++ --version | head -1; ninja --version 2>&1 | head -1; nvcc --version 2>&1 | tail -1
  echo "== libc10_cuda allocator symbols"; nm -DC "$TORCH/lib/libc10_cuda.so" | grep -E 'CUDACachingAllocator|CUDAAllocatorConfig' | head -400
  echo "== libtorch_cuda pluggable symbols"; nm -DC "$TORCH/lib/libtorch_cuda.so" | grep -E 'CUDAPluggableAllocator|changeCurrentAllocator|getIpcDevPtr|memory_snapshot|_record_memory_history' | head -200
  echo "== libc10 allocator symbols"; nm -DC "$TORCH/lib/libc10.so" | grep -E 'AcceleratorAllocatorConfig|SetAllocator|GetAllocator' | head -100
} >"$OUT/torch-facts.txt" 2>&1
probe=$(mktemp --suffix=.cpp)
cat >"$probe" <<'CPP'
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAAllocatorConfig.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/csrc/profiler/combined_traceback.h>
CPP
INC=$(python3 -c 'import torch.utils.cpp_extension as c; print(" ".join("-I" + p for p in c.include_paths()))')
PYINC=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
start=$(date +%s.%N)
g++ -std=c++17 -fsyntax-only $INC -I"$PYINC" -I/usr/local/cuda/include "$probe" 2>"$OUT/probe.log" && echo "probe compiles" >>"$OUT/torch-facts.txt"
echo "probe compile seconds $(echo "$(date +%s.%N) - $start" | bc)" >>"$OUT/torch-facts.txt"
g++ -std=c++17 -M $INC -I"$PYINC" -I/usr/local/cuda/include "$probe" 2>/dev/null | tr ' \\' '\n\n' | grep "^$TORCH/include/" |
  sed "s|^$TORCH/include/||" | sort -u >"$OUT/deps.txt"
cd "$TORCH/include" || exit 1
# c10 and the header-only part whole (the allocator's interface and what it includes), the CUDA
# bindings' headers, and each file the probe reached
{ find c10 torch/headeronly -name '*.h' 2>/dev/null; ls torch/csrc/cuda/*.h torch/csrc/profiler/*.h 2>/dev/null; cat "$OUT/deps.txt"; } |
  sort -u >"$OUT/files.txt"
tar -czf "$OUT/torch-headers.tar.gz" -T "$OUT/files.txt"
# the Python side of the allocator as this version has it, to read
(cd "$TORCH/.." && tar -czf "$OUT/torch-python.tar.gz" torch/cuda/memory.py torch/cuda/__init__.py torch/cuda/graphs.py \
  torch/utils/cpp_extension.py torch/multiprocessing/reductions.py torch/_inductor/cudagraph_trees.py \
  torch/testing/_internal/common_utils.py torch/accelerator/memory.py torch/_C/__init__.pyi 2>/dev/null)
ls -la "$OUT"
