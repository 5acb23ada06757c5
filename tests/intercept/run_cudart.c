/* run_cudart.c: a plain CUDA program for `memsnap run` tests, linked against the toolkit's
 * libcudart.so and unaware of memsnap.
 *
 * Each of ITERATIONS steps allocates a 1 MiB work buffer with cudaMalloc, a 256 KiB one with
 * cudaMallocAsync and 64 KiB of managed memory, frees all three, and keeps a 64 KiB cudaMalloc
 * in keep_for_later() that it never frees: the leak `memsnap analyze` should name. It also
 * allocates and frees once through the driver API, reached the way cudart and libraries reach
 * it, after the steps (cudart has made the device's primary context current by then):
 * dlopen("libcuda.so.1") and dlsym(handle, "cuGetProcAddress_v2") (RTLD_DEFAULT where there is
 * no driver to open: the sim backend behind the interposer), then cuGetProcAddress("cuMemAlloc").
 *
 * Usage: run_cudart [ITERATIONS] [exit N | _exit N | abort | segv | wait]
 *   exit N   return N from main (exit handlers run)
 *   _exit N  end with _exit(N) (they do not)
 *   abort    end with abort()
 *   segv     end with a segmentation fault (a store through a null pointer)
 *   wait     print "ready", then sleep until a signal ends the process
 * Exit status 3: a CUDA call failed (the message says which).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void check(cudaError_t rc, const char *what) {
  if (rc != cudaSuccess) {
    fprintf(stderr, "run_cudart: %s failed: error %d\n", what, (int)rc);
    exit(3);
  }
}

static void *kept[1024];

__attribute__((noinline)) static void keep_for_later(int i) {
  check(cudaMalloc(&kept[i % 1024], 64 << 10), "cudaMalloc (kept)");
}

__attribute__((noinline)) static void step(int i) {
  void *work, *async_buf, *managed;
  check(cudaMalloc(&work, 1 << 20), "cudaMalloc");
  check(cudaMallocAsync(&async_buf, 256 << 10, NULL), "cudaMallocAsync");
  check(cudaMallocManaged(&managed, 64 << 10, cudaMemAttachGlobal), "cudaMallocManaged");
  keep_for_later(i);
  check(cudaFreeAsync(async_buf, NULL), "cudaFreeAsync");
  check(cudaFree(managed), "cudaFree (managed)");
  check(cudaFree(work), "cudaFree");
}

/* The driver API the way cudart finds it. */
static void driver_round_trip(void) {
  typedef CUresult (*get_proc_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  get_proc_t get_proc = (get_proc_t)dlsym(libcuda ? libcuda : RTLD_DEFAULT, "cuGetProcAddress_v2");
  if (!get_proc) {
    fprintf(stderr, "run_cudart: no cuGetProcAddress_v2 in the process (no driver)\n");
    exit(3);
  }
  CUresult (*mem_alloc)(CUdeviceptr *, size_t) = NULL;
  CUresult (*mem_free)(CUdeviceptr) = NULL;
  CUdriverProcAddressQueryResult status;
  if (get_proc("cuMemAlloc", (void **)&mem_alloc, 12000, 0, &status) != CUDA_SUCCESS ||
      get_proc("cuMemFree", (void **)&mem_free, 12000, 0, &status) != CUDA_SUCCESS) {
    fprintf(stderr, "run_cudart: cuGetProcAddress failed\n");
    exit(3);
  }
  CUdeviceptr p;
  if (mem_alloc(&p, 3 << 20) != CUDA_SUCCESS || mem_free(p) != CUDA_SUCCESS) {
    fprintf(stderr, "run_cudart: cuMemAlloc/cuMemFree through cuGetProcAddress failed\n");
    exit(3);
  }
  /* The per-thread-default-stream variant, and cuGetProcAddress's first version (4 arguments)
   * asked for by an older runtime, through itself. */
  CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) = NULL;
  CUresult (*free_async)(CUdeviceptr, CUstream) = NULL;
  CUresult (*get_proc_v1)(const char *, void **, int, cuuint64_t) = NULL;
  if (get_proc("cuMemAllocAsync", (void **)&alloc_async, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status) ||
      get_proc("cuGetProcAddress", (void **)&get_proc_v1, 11030, 0, &status) ||
      get_proc_v1("cuMemFreeAsync", (void **)&free_async, 11030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ||
      alloc_async(&p, 1 << 20, NULL) != CUDA_SUCCESS || free_async(p, NULL) != CUDA_SUCCESS) {
    fprintf(stderr, "run_cudart: the per-thread stream variants through cuGetProcAddress (v1 and v2) failed\n");
    exit(3);
  }
}

int main(int argc, char **argv) {
  int iterations = argc > 1 ? atoi(argv[1]) : 8;
  const char *end = argc > 2 ? argv[2] : "exit";
  int code = argc > 3 ? atoi(argv[3]) : 0;
  for (int i = 0; i < iterations; i++) step(i);
  driver_round_trip();
  printf("run_cudart: %d steps, %d KiB kept\n", iterations, iterations * 64);
  fflush(stdout);
  if (!strcmp(end, "_exit")) _exit(code);
  if (!strcmp(end, "abort")) abort();
  if (!strcmp(end, "segv")) *(volatile int *)(uintptr_t)(code - code) = 1;
  if (!strcmp(end, "wait")) {
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
  }
  return code;
}
