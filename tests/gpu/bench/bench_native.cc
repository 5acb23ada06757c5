// bench_native.cc: ns per malloc+free pair of PyTorch's native c10 CUDACachingAllocator, with
// the same workloads as bench_alloc.c (bench_workload.h). Built on the GPU machine against the
// installed torch's headers and libc10_cuda (tests/gpu/run.sh).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cstdio>

namespace alloc = c10::cuda::CUDACachingAllocator;

static cudaStream_t stream = nullptr;
#define BENCH_ALLOC(size) alloc::raw_alloc_with_stream((size), stream)
#define BENCH_FREE(ptr) alloc::raw_delete(ptr)
#include "bench_workload.h"

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 1000000;
  alloc::init(c10::cuda::device_count());
  printf("native same_512B %.1f\n", bench_same(512, iters));
  printf("native same_1MiB %.1f\n", bench_same(1 << 20, iters));
  printf("native random_20k %.1f\n", bench_random(iters));
  return 0;
}
