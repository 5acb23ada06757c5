// run_static.cu: a plain CUDA C++ program for tests/gpu/parity/run_modes.py, built by nvcc with its
// default static cudart (no libcudart.so at run time: `memsnap run` must reach it through
// cuGetProcAddress). It does two things and prints one JSON line:
//   - STEPS steps that allocate a 4 MiB buffer, fill it with a kernel, free it, and keep a
//     256 KiB buffer in keep_for_later() (never freed: the leak `memsnap analyze` should name);
//   - PAIRS cudaMalloc + cudaFree pairs of 1 MiB, timed: the cost of one pair, which
//     `memsnap run --mode intercept` adds its recording to.
// usage: run_static [STEPS] [PAIRS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    cudaError_t e = (call);                                                             \
    if (e != cudaSuccess) {                                                             \
      std::fprintf(stderr, "run_static: %s: %s\n", #call, cudaGetErrorString(e));       \
      std::exit(3);                                                                     \
    }                                                                                   \
  } while (0)

__global__ void fill(float *p, size_t n, float v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

static std::vector<void *> kept;

__attribute__((noinline)) static void keep_for_later() {
  void *p;
  CHECK(cudaMalloc(&p, 256 << 10));
  kept.push_back(p);
}

__attribute__((noinline)) static void step(int i) {
  float *work;
  size_t n = (4 << 20) / sizeof(float);
  CHECK(cudaMalloc(&work, n * sizeof(float)));
  fill<<<(unsigned)((n + 255) / 256), 256>>>(work, n, (float)i);
  CHECK(cudaGetLastError());
  keep_for_later();
  CHECK(cudaFree(work));
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  int pairs = argc > 2 ? std::atoi(argv[2]) : 20000;
  CHECK(cudaFree(0)); // context creation, outside the timing
  for (int i = 0; i < steps; i++) step(i);
  CHECK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; i++) {
    void *p;
    CHECK(cudaMalloc(&p, 1 << 20));
    CHECK(cudaFree(p));
  }
  auto t1 = std::chrono::steady_clock::now();
  double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / (pairs ? pairs : 1);
  std::printf("{\"program\": \"run_static\", \"steps\": %d, \"kept_bytes\": %zu, \"pairs\": %d, \"ns_per_pair\": %.1f}\n",
              steps, kept.size() * (256 << 10), pairs, ns);
  return 0;
}
