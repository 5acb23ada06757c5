/* intercept.c: libmemsnap_intercept.so, the LD_PRELOAD library of `memsnap run --mode intercept`
 * (and, through audit.c, the LD_AUDIT library of --mode audit, which loads it into the program).
 *
 * It records every device allocation of a process, whatever makes it, and passes each call
 * through unchanged:
 *   - the runtime API (libcudart.so): cudaMalloc, cudaMallocAsync, cudaMallocFromPoolAsync,
 *     cudaMallocManaged, cudaMallocPitch, cudaFree, cudaFreeAsync, defined here so that the
 *     dynamic linker binds a program's and its libraries' calls to them first;
 *   - the driver API: cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, cuMemAllocAsync,
 *     cuMemAllocFromPoolAsync, cuMemFree, cuMemFreeAsync, cuMemMap, cuMemUnmap (a mapping of
 *     physical memory created by cuMemCreate is recorded when mapped, its free when unmapped).
 *     Programs linked against libcuda bind to the definitions here. cudart (also the static one
 *     nvcc links by default) and many libraries fetch driver functions through cuGetProcAddress,
 *     which they find with dlsym on libcuda's handle: dlsym is interposed so that it answers
 *     cuGetProcAddress with this library's, which answers the functions above with their
 *     wrappers (and remembers the driver's for the wrapper to call).
 *
 * A call made inside another recorded call (cudaMalloc calling cuMemAlloc through cudart's
 * table) is passed through unrecorded: only the outermost call is recorded, so each allocation
 * is seen once, under the API the program used. Recording goes through libmemsnap's public
 * header only (memsnap_external_alloc/free, recorder/allocator/external.c), with the caller's return
 * address so the snapshot names the library that allocated.
 *
 * With MEMSNAP_BACKEND=sim there is no driver: the allocation functions answer from memsnap's
 * simulated device instead of forwarding (addresses that are never dereferenced), and
 * cuGetProcAddress answers the functions defined here; everything else reports
 * CUDA_ERROR_NOT_FOUND. The tests record real programs built against the toolkit this way.
 *
 * With MEMSNAP_INTERCEPT_CACHE=1 (`memsnap run --cache`) cudaMalloc and cuMemAlloc are served by
 * memsnap's caching allocator instead (below, "--cache").
 *
 * _exit and _Exit write the MEMSNAP_DUMP snapshot first (the exit handlers they skip would have),
 * in the process that started recording only (a vfork child shares its memory).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "intercept.h"
#include "memsnap.h"

#undef cuGetProcAddress

#define CALLER() __builtin_extract_return_addr(__builtin_return_address(0))
#define MEMSNAP_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* dlsym runs inside a sanitizer's own start-up (it looks up what it intercepts), before its
 * shadow memory exists: the code on that path must not be instrumented. */
#define NOT_INSTRUMENTED __attribute__((no_sanitize("address", "undefined", "thread")))
#define EXPORT __attribute__((visibility("default")))

static __thread int depth; /* > 0 inside a recorded call: inner calls are passed through */
static void *(*real_dlsym)(void *, const char *);
static int sim = -1;      /* MEMSNAP_BACKEND=sim: answer from the simulated device */
static pid_t owner_pid;   /* the process whose _exit dumps */

static bool is_sim(void) {
  if (sim < 0) {
    const char *b = getenv("MEMSNAP_BACKEND");
    sim = b && strcmp(b, "sim") == 0;
  }
  return sim;
}

/* libc's dlsym. Found on first use: a library preloaded before this one (a sanitizer's runtime)
 * calls dlsym before this library's constructors run. */
NOT_INSTRUMENTED static void find_real_dlsym(void) {
  real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!real_dlsym) real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
}

void *msi_intercept_real_dlsym(void *handle, const char *name) {
  if (!real_dlsym) find_real_dlsym();
  return real_dlsym ? real_dlsym(handle, name) : NULL;
}

__attribute__((constructor)) static void intercept_init(void) {
  if (!real_dlsym) find_real_dlsym();
  owner_pid = getpid();
  is_sim();
}

/* ---- the real functions ------------------------------------------------------------------ */

/* The driver functions wrapped here: the name cuGetProcAddress is asked for, and the exported
 * name. */
#define DRIVER_FUNCTIONS(X)                                        \
  X(MEM_ALLOC, "cuMemAlloc", "cuMemAlloc_v2")                      \
  X(MEM_ALLOC_PITCH, "cuMemAllocPitch", "cuMemAllocPitch_v2")      \
  X(MEM_ALLOC_MANAGED, "cuMemAllocManaged", "cuMemAllocManaged")   \
  X(MEM_ALLOC_ASYNC, "cuMemAllocAsync", "cuMemAllocAsync")         \
  X(MEM_ALLOC_POOL, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync") \
  X(MEM_FREE, "cuMemFree", "cuMemFree_v2")                         \
  X(MEM_FREE_ASYNC, "cuMemFreeAsync", "cuMemFreeAsync")            \
  X(MEM_MAP, "cuMemMap", "cuMemMap")                               \
  X(MEM_UNMAP, "cuMemUnmap", "cuMemUnmap")                         \
  X(GET_PROC, "cuGetProcAddress", "cuGetProcAddress_v2")           \
  X(CTX_GET_DEVICE, "cuCtxGetDevice", "cuCtxGetDevice")            \
  X(CTX_GET_CURRENT, "cuCtxGetCurrent", "cuCtxGetCurrent")         \
  X(CTX_SYNCHRONIZE, "cuCtxSynchronize", "cuCtxSynchronize")       \
  X(DEVICE_GET, "cuDeviceGet", "cuDeviceGet")                      \
  X(PRIMARY_RETAIN, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain")

enum {
#define X(id, base, exported) FN_##id,
  DRIVER_FUNCTIONS(X)
#undef X
  FN_COUNT
};
static const char *const base_names[FN_COUNT] = {
#define X(id, base, exported) base,
    DRIVER_FUNCTIONS(X)
#undef X
};
static const char *const exported_names[FN_COUNT] = {
#define X(id, base, exported) exported,
    DRIVER_FUNCTIONS(X)
#undef X
};
/* The driver's function per name, [1] its per-thread-default-stream variant: what
 * cuGetProcAddress returned, else found in libcuda by name. */
static _Atomic(void *) driver_fn[FN_COUNT][2];
static void *wrappers[FN_COUNT];      /* this library's function per name */
static void *wrappers_ptsz[FN_COUNT]; /* ... its per-thread-default-stream variant, where one exists */
static void *wrapper_get_proc_v1;     /* cuGetProcAddress's first version (4 arguments) */

static void *libcuda_symbol(const char *name) {
  void *fn = real_dlsym(RTLD_NEXT, name); /* libcuda linked in */
  if (fn) return fn;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); /* libcuda loaded by cudart */
  if (!h) return NULL;
  fn = real_dlsym(h, name);
  dlclose(h);
  return fn;
}

static void *driver(int id, bool ptsz) {
  void *fn = atomic_load_explicit(&driver_fn[id][ptsz], memory_order_acquire);
  if (!fn) fn = atomic_load_explicit(&driver_fn[id][0], memory_order_acquire);
  if (!fn) {
    fn = libcuda_symbol(exported_names[id]);
    if (fn) atomic_store(&driver_fn[id][0], fn);
  }
  return fn;
}

/* The runtime functions wrapped here, and cudaGetDevice (not wrapped: called for the device). */
#define RUNTIME_FUNCTIONS(X) \
  X(cudaMalloc) X(cudaMallocManaged) X(cudaMallocPitch) X(cudaMallocAsync) X(cudaMallocFromPoolAsync) \
  X(cudaFree) X(cudaFreeAsync) X(cudaGetDevice) X(cudaDeviceSynchronize)
enum {
#define X(name) RT_##name,
  RUNTIME_FUNCTIONS(X)
#undef X
  RT_COUNT
};
static const char *const runtime_names[RT_COUNT] = {
#define X(name) #name,
    RUNTIME_FUNCTIONS(X)
#undef X
};
/* libcudart's function per name: found after this library in the global scope, or remembered
 * from a dlsym on a handle of libcudart (ctypes, libraries that load it themselves). */
static _Atomic(void *) runtime_fn[RT_COUNT];
static void *runtime_wrappers[RT_COUNT];

/* dl_iterate_phdr callback: the first loaded libcudart.so* that defines the name in *arg. */
static int find_in_cudart(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  void **io = arg; /* io[0]: the name in, io[1]: the function out */
  const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  if (!base || strncmp(base + 1, "libcudart.so", 12) != 0) return 0;
  void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return 0;
  io[1] = real_dlsym(h, io[0]);
  dlclose(h);
  return io[1] != NULL;
}

/* libcudart's function: after this library in the global scope, else in a libcudart loaded
 * locally (a library dlopened with RTLD_LOCAL that needs it), else remembered from a dlsym. */
static void *runtime_symbol(int id) {
  void *fn = atomic_load_explicit(&runtime_fn[id], memory_order_acquire);
  if (!fn) {
    fn = real_dlsym(RTLD_NEXT, runtime_names[id]);
    if (!fn) {
      void *io[2] = {(void *)runtime_names[id], NULL};
      dl_iterate_phdr(find_in_cudart, io);
      fn = io[1];
    }
    if (fn) atomic_store(&runtime_fn[id], fn);
  }
  return fn;
}
#define RUNTIME(name, type) ((type)runtime_symbol(RT_##name))

/* ---- recording ---------------------------------------------------------------------------- */

static int current_device_driver(void) {
  CUdevice dev = 0;
  CUresult (*get)(CUdevice *) = (CUresult(*)(CUdevice *))driver(FN_CTX_GET_DEVICE, false);
  return get && get(&dev) == CUDA_SUCCESS ? (int)dev : 0;
}

static int current_device_runtime(void) {
  int dev = 0;
  cudaError_t (*get)(int *) = RUNTIME(cudaGetDevice, cudaError_t(*)(int *));
  return get && get(&dev) == cudaSuccess ? dev : 0;
}

static void report_oom(size_t size, int device, void *caller) {
  memsnap_external_oom(size, device, NULL, caller);
}

static void track_alloc(uintptr_t ptr, size_t size, int device, void *stream, const char *api, void *caller) {
  if (ptr) memsnap_external_alloc((void *)ptr, size, device, (memsnap_stream_t)stream, api, caller);
}

/* Under sim: device memory from the simulated device, recorded. 0 ok, else 2 (out of memory). */
static int sim_alloc(uintptr_t *out, size_t size, void *stream, const char *api, void *caller) {
  void *p = NULL;
  *out = 0;
  if (memsnap_sim_mem_alloc(0, size, &p) != MEMSNAP_OK) {
    report_oom(size, 0, caller);
    return 2;
  }
  *out = (uintptr_t)p;
  track_alloc(*out, size, 0, stream, api, caller);
  return 0;
}

/* Under sim: gives a recorded allocation back. 0 ok, else 1 (not an allocation). */
static int sim_free(uintptr_t ptr, void *stream) {
  size_t size = 0;
  if (!ptr) return 0;
  if (memsnap_external_free((void *)ptr, 0, (memsnap_stream_t)stream, &size) != MEMSNAP_OK) return 1;
  memsnap_sim_mem_free(0, (void *)ptr, size);
  return 0;
}

/* ---- --cache: cudaMalloc and cudaFree served by memsnap's caching allocator ------------------ */

/* MEMSNAP_INTERCEPT_CACHE=1 (`memsnap run --cache`): cudaMalloc/cuMemAlloc take blocks from
 * memsnap's caching allocator (the legacy default stream, the device's primary context), and
 * cudaFree/cuMemFree return them after synchronizing the device, as cudaFree does: a program
 * that allocates in a loop skips the driver's allocation and unmapping. The blocks are memsnap's
 * own in the snapshot (pools small and large). */
static int cache = -1;
static bool use_cache(void) {
  if (cache < 0) {
    const char *c = getenv("MEMSNAP_INTERCEPT_CACHE");
    cache = c && !strcmp(c, "1");
  }
  return cache && depth == 0;
}

/* 0 ok, 2 out of memory, 1 any other failure. */
static int cached_alloc(void **out, size_t size, int device, void *caller) {
  int rc = memsnap_alloc_for(out, size, device, NULL, caller);
  return rc == MEMSNAP_OK ? 0 : rc == MEMSNAP_ENOMEM ? 2 : 1;
}

/* Synchronizes the device with `sync` (what cudaFree would do), then returns p to memsnap's
 * cache. false when memsnap does not own p (allocated before, or in another context: the caller
 * then frees it the usual way, which synchronizes again). */
static bool cached_free(void *p, bool (*sync)(void)) {
  if (!p) return false;
  if (sync) sync();
  return memsnap_release_for(p) == MEMSNAP_OK;
}

static bool sync_runtime(void) {
  cudaError_t (*fn)(void) = (cudaError_t(*)(void))runtime_symbol(RT_cudaDeviceSynchronize);
  return fn && fn() == cudaSuccess;
}

static bool sync_driver(void) {
  CUresult (*fn)(void) = (CUresult(*)(void))driver(FN_CTX_SYNCHRONIZE, false);
  return fn && fn() == CUDA_SUCCESS;
}

/* Whether the calling thread's context is its device's primary context (cudart's), the one
 * memsnap allocates in: a driver-API program's own context keeps the driver's allocations. */
static CUcontext primary[64];
static bool in_primary_context(int device) {
  CUcontext cur = NULL;
  CUresult (*get_current)(CUcontext *) = (CUresult(*)(CUcontext *))driver(FN_CTX_GET_CURRENT, false);
  if (device < 0 || device >= 64 || !get_current || get_current(&cur) != CUDA_SUCCESS || !cur) return false;
  if (!primary[device]) {
    CUresult (*device_get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))driver(FN_DEVICE_GET, false);
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))driver(FN_PRIMARY_RETAIN, false);
    CUdevice d;
    CUcontext ctx = NULL; /* retained once, for the life of the process, as cudart does */
    if (!device_get || !retain || device_get(&d, device) != CUDA_SUCCESS || retain(&ctx, d) != CUDA_SUCCESS) return false;
    primary[device] = ctx;
  }
  return cur == primary[device];
}

/* ---- the driver API ----------------------------------------------------------------------- */

/* Calls `fn_expr` (a function of return type `rtype`; `missing` when it cannot be found) with
 * `args`, then, at the outermost level, `record` if it returned `ok`, or reports an out of
 * memory of `args_size` bytes on `device` if it returned `oom`. Under sim, `sim_expr` answers
 * instead. */
#define FORWARD(rtype, fn_expr, missing, ok, oom, device, args, sim_expr, record, args_size) \
  do {                                                                              \
    if (is_sim()) return (sim_expr);                                                \
    __typeof__(fn_expr) fn = (fn_expr);                                             \
    if (!fn) return missing;                                                        \
    depth++;                                                                        \
    rtype r = fn args;                                                              \
    depth--;                                                                        \
    if (r == ok && depth == 0) record;                                              \
    if (r == oom && depth == 0 && (args_size) != 0) report_oom((args_size), device, CALLER()); \
    return r;                                                                       \
  } while (0)

/* The driver's function `id` (of type `type`); libcudart's function `name`. */
#define DRIVER_CALL(id, ptsz, type, args, sim_expr, record, args_size)                                      \
  FORWARD(CUresult, (type)driver(id, ptsz), CUDA_ERROR_NOT_INITIALIZED, CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, \
          current_device_driver(), args, sim_expr, record, args_size)
#define RUNTIME_CALL(name, type, args, sim_expr, record, args_size)                                         \
  FORWARD(cudaError_t, RUNTIME(name, type), cudaErrorInitializationError, cudaSuccess, cudaErrorMemoryAllocation, \
          current_device_runtime(), args, sim_expr, record, args_size)

#define SIM_ALLOC(p, size, stream, api) \
  (sim_alloc((uintptr_t *)(p), (size), (stream), (api), CALLER()) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS)
#define SIM_FREE(p, stream) (sim_free((uintptr_t)(p), (stream)) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS)

static CUresult alloc_driver(CUdeviceptr *p, size_t size, void *caller) {
  DRIVER_CALL(FN_MEM_ALLOC, false, CUresult(*)(CUdeviceptr *, size_t), (p, size), SIM_ALLOC(p, size, NULL, "cuMemAlloc"),
              track_alloc(*p, size, current_device_driver(), NULL, "cuMemAlloc", caller), size);
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
  if (use_cache()) {
    int device = is_sim() ? 0 : current_device_driver();
    if (is_sim() || in_primary_context(device)) {
      int rc = cached_alloc((void **)p, size, device, CALLER());
      return rc == 0 ? CUDA_SUCCESS : rc == 2 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
    }
  }
  return alloc_driver(p, size, CALLER());
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned int elem) {
  void *caller = CALLER();
  DRIVER_CALL(FN_MEM_ALLOC_PITCH, false, CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int),
              (p, pitch, width, height, elem),
              (*pitch = (width + 511) & ~(size_t)511, SIM_ALLOC(p, *pitch * height, NULL, "cuMemAllocPitch")),
              track_alloc(*p, *pitch * height, current_device_driver(), NULL, "cuMemAllocPitch", caller), width * height);
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned int flags) {
  void *caller = CALLER();
  DRIVER_CALL(FN_MEM_ALLOC_MANAGED, false, CUresult(*)(CUdeviceptr *, size_t, unsigned int), (p, size, flags),
              SIM_ALLOC(p, size, NULL, "cuMemAllocManaged"),
              track_alloc(*p, size, current_device_driver(), NULL, "cuMemAllocManaged", caller), size);
}

static CUresult alloc_async(CUdeviceptr *p, size_t size, CUstream s, bool ptsz, void *caller) {
  DRIVER_CALL(FN_MEM_ALLOC_ASYNC, ptsz, CUresult(*)(CUdeviceptr *, size_t, CUstream), (p, size, s),
              SIM_ALLOC(p, size, s, "cuMemAllocAsync"),
              track_alloc(*p, size, current_device_driver(), s, "cuMemAllocAsync", caller), size);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s) { return alloc_async(p, size, s, false, CALLER()); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t size, CUstream s) { return alloc_async(p, size, s, true, CALLER()); }

static CUresult alloc_pool(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s, bool ptsz, void *caller) {
  DRIVER_CALL(FN_MEM_ALLOC_POOL, ptsz, CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream), (p, size, pool, s),
              SIM_ALLOC(p, size, s, "cuMemAllocFromPoolAsync"),
              track_alloc(*p, size, current_device_driver(), s, "cuMemAllocFromPoolAsync", caller), size);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s) {
  return alloc_pool(p, size, pool, s, false, CALLER());
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s) {
  return alloc_pool(p, size, pool, s, true, CALLER());
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  if (use_cache() && cached_free((void *)p, is_sim() ? NULL : sync_driver)) return CUDA_SUCCESS;
  DRIVER_CALL(FN_MEM_FREE, false, CUresult(*)(CUdeviceptr), (p), SIM_FREE(p, NULL),
              memsnap_external_free((void *)p, 0, NULL, NULL), 0);
}

static CUresult free_async(CUdeviceptr p, CUstream s, bool ptsz) {
  DRIVER_CALL(FN_MEM_FREE_ASYNC, ptsz, CUresult(*)(CUdeviceptr, CUstream), (p, s), SIM_FREE(p, s),
              memsnap_external_free((void *)p, 0, (memsnap_stream_t)s, NULL), 0);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return free_async(p, s, false); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return free_async(p, s, true); }

/* Virtual memory: physical memory is counted where it is mapped, [ptr, ptr + size). */
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
  void *caller = CALLER();
  DRIVER_CALL(FN_MEM_MAP, false, CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long),
              (p, size, offset, h, flags), CUDA_ERROR_NOT_SUPPORTED,
              track_alloc(p, size, current_device_driver(), NULL, "cuMemMap", caller), size);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  DRIVER_CALL(FN_MEM_UNMAP, false, CUresult(*)(CUdeviceptr, size_t), (p, size), CUDA_ERROR_NOT_SUPPORTED,
              memsnap_external_free((void *)p, size, NULL, NULL), 0);
}

/* The wrapped driver function named `symbol` (its base or exported name; a "_ptsz" suffix sets
 * *ptsz), or -1. */
static int wrapper_index(const char *symbol, bool *ptsz) {
  size_t n = strlen(symbol);
  bool suffix = n > 5 && !strcmp(symbol + n - 5, "_ptsz");
  if (ptsz) *ptsz = suffix;
  if (suffix) n -= 5;
  for (int i = 0; i < FN_COUNT; i++)
    if (wrappers[i] && ((strlen(base_names[i]) == n && !strncmp(symbol, base_names[i], n)) ||
                        (strlen(exported_names[i]) == n && !strncmp(symbol, exported_names[i], n))))
      return i;
  return -1;
}

/* The wrapper to hand out for function i: the per-thread-default-stream one for ptsz, and for
 * cuGetProcAddress the one with the signature asked for (the first version's before CUDA 12.0,
 * and under that name). */
static void *wrapper_for(int i, bool ptsz, int version, const char *symbol) {
  if (i == FN_GET_PROC && (version < 12000 || !strcmp(symbol, "cuGetProcAddress"))) return wrapper_get_proc_v1;
  return ptsz && wrappers_ptsz[i] ? wrappers_ptsz[i] : wrappers[i];
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  int i = wrapper_index(symbol, NULL);
  bool ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (is_sim()) { /* no driver: what is defined here, nothing else */
    *pfn = i >= 0 ? wrapper_for(i, ptsz, version, "") : NULL;
    if (status) *status = i >= 0 ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
  }
  CUresult (*real)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
      (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))driver(FN_GET_PROC, false);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && *pfn && i >= 0) {
    void *wrapper = wrapper_for(i, ptsz, version, "");
    if (*pfn != wrapper) {
      if (i != FN_GET_PROC) atomic_store(&driver_fn[i][ptsz], *pfn);
      *pfn = wrapper;
    }
  }
  return r;
}

/* The first version (CUDA 11.3 to 12.4's cuGetProcAddress), still exported by drivers. */
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

__attribute__((constructor)) static void fill_wrappers(void) {
  wrappers[FN_MEM_ALLOC] = (void *)cuMemAlloc_v2;
  wrappers[FN_MEM_ALLOC_PITCH] = (void *)cuMemAllocPitch_v2;
  wrappers[FN_MEM_ALLOC_MANAGED] = (void *)cuMemAllocManaged;
  wrappers[FN_MEM_ALLOC_ASYNC] = (void *)cuMemAllocAsync;
  wrappers[FN_MEM_ALLOC_POOL] = (void *)cuMemAllocFromPoolAsync;
  wrappers[FN_MEM_FREE] = (void *)cuMemFree_v2;
  wrappers[FN_MEM_FREE_ASYNC] = (void *)cuMemFreeAsync;
  wrappers[FN_MEM_MAP] = (void *)cuMemMap;
  wrappers[FN_MEM_UNMAP] = (void *)cuMemUnmap;
  wrappers[FN_GET_PROC] = (void *)cuGetProcAddress_v2;
  wrappers_ptsz[FN_MEM_ALLOC_ASYNC] = (void *)cuMemAllocAsync_ptsz;
  wrappers_ptsz[FN_MEM_ALLOC_POOL] = (void *)cuMemAllocFromPoolAsync_ptsz;
  wrappers_ptsz[FN_MEM_FREE_ASYNC] = (void *)cuMemFreeAsync_ptsz;
  wrapper_get_proc_v1 = (void *)cuGetProcAddress;
}

/* dlsym: cudart and libraries that load libcuda themselves find cuGetProcAddress (and the
 * allocation functions) here; libmemsnap's own driver backend is left to the real ones, so the
 * allocator's segments are not counted twice. Everything else is the real dlsym's, reached by a
 * tail call so that RTLD_NEXT keeps meaning "after the caller". */
static bool from_libmemsnap(void *caller) {
  static void *memsnap_base;
  Dl_info info;
  if (!memsnap_base && dladdr((void *)memsnap_dump, &info)) memsnap_base = info.dli_fbase;
  return dladdr(caller, &info) && info.dli_fbase == memsnap_base;
}

__attribute__((noinline)) static void *swap_symbol(void *handle, const char *name, void *caller) {
  void *fn = real_dlsym(handle, name);
  if (!fn || from_libmemsnap(caller)) return fn;
  bool ptsz;
  int i = wrapper_index(name, &ptsz);
  void *wrapper = i >= 0 ? wrapper_for(i, ptsz, 12000, name) : NULL;
  if (wrapper && fn != wrapper) {
    void *expected = NULL;
    if (i != FN_GET_PROC) atomic_compare_exchange_strong(&driver_fn[i][ptsz], &expected, fn);
    return wrapper;
  }
  for (int k = 0; k < RT_COUNT; k++)
    if (runtime_wrappers[k] && fn != runtime_wrappers[k] && !strcmp(name, runtime_names[k])) {
      void *expected = NULL;
      atomic_compare_exchange_strong(&runtime_fn[k], &expected, fn);
      return runtime_wrappers[k];
    }
  return fn;
}

/* Exported as "dlsym" by the alias below. It has a name of its own because libmemsnap.so calls
 * dlsym too (its backend, the Python frames): libc's, as far as the library's files are
 * concerned, and a tool that reads them should not see this file as the one they call. */
NOT_INSTRUMENTED static void *interposed_dlsym(void *handle, const char *name) {
  if (MEMSNAP_UNLIKELY(!real_dlsym)) find_real_dlsym();
  if (handle != RTLD_NEXT && name[0] == 'c' && name[1] == 'u' && (name[2] == 'M' || name[2] == 'G' || name[2] == 'd'))
    return swap_symbol(handle, name, CALLER());
  return real_dlsym(handle, name);
}
EXPORT void *dlsym(void *handle, const char *name) __attribute__((alias("interposed_dlsym")));

/* ---- the runtime API ---------------------------------------------------------------------- */

#define SIM_RALLOC(p, size, stream, api) \
  (sim_alloc((uintptr_t *)(p), (size), (stream), (api), CALLER()) ? cudaErrorMemoryAllocation : cudaSuccess)
#define SIM_RFREE(p, stream) (sim_free((uintptr_t)(p), (stream)) ? cudaErrorInvalidValue : cudaSuccess)

EXPORT cudaError_t cudaMalloc(void **p, size_t size) {
  void *caller = CALLER();
  if (use_cache()) {
    int rc = cached_alloc(p, size, is_sim() ? 0 : current_device_runtime(), caller);
    return rc == 0 ? cudaSuccess : rc == 2 ? cudaErrorMemoryAllocation : cudaErrorUnknown;
  }
  RUNTIME_CALL(cudaMalloc, cudaError_t(*)(void **, size_t), (p, size), SIM_RALLOC(p, size, NULL, "cudaMalloc"),
               track_alloc((uintptr_t)*p, size, current_device_runtime(), NULL, "cudaMalloc", caller), size);
}

EXPORT cudaError_t cudaMallocManaged(void **p, size_t size, unsigned int flags) {
  void *caller = CALLER();
  RUNTIME_CALL(cudaMallocManaged, cudaError_t(*)(void **, size_t, unsigned int), (p, size, flags),
               SIM_RALLOC(p, size, NULL, "cudaMallocManaged"),
               track_alloc((uintptr_t)*p, size, current_device_runtime(), NULL, "cudaMallocManaged", caller), size);
}

EXPORT cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height) {
  void *caller = CALLER();
  RUNTIME_CALL(cudaMallocPitch, cudaError_t(*)(void **, size_t *, size_t, size_t), (p, pitch, width, height),
               (*pitch = (width + 511) & ~(size_t)511, SIM_RALLOC(p, *pitch * height, NULL, "cudaMallocPitch")),
               track_alloc((uintptr_t)*p, *pitch * height, current_device_runtime(), NULL, "cudaMallocPitch", caller), width * height);
}

EXPORT cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) {
  void *caller = CALLER();
  RUNTIME_CALL(cudaMallocAsync, cudaError_t(*)(void **, size_t, cudaStream_t), (p, size, s),
               SIM_RALLOC(p, size, s, "cudaMallocAsync"),
               track_alloc((uintptr_t)*p, size, current_device_runtime(), s, "cudaMallocAsync", caller), size);
}

EXPORT cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  void *caller = CALLER();
  RUNTIME_CALL(cudaMallocFromPoolAsync, cudaError_t(*)(void **, size_t, cudaMemPool_t, cudaStream_t), (p, size, pool, s),
               SIM_RALLOC(p, size, s, "cudaMallocFromPoolAsync"),
               track_alloc((uintptr_t)*p, size, current_device_runtime(), s, "cudaMallocFromPoolAsync", caller), size);
}

EXPORT cudaError_t cudaFree(void *p) {
  if (use_cache() && cached_free(p, is_sim() ? NULL : sync_runtime)) return cudaSuccess;
  RUNTIME_CALL(cudaFree, cudaError_t(*)(void *), (p), SIM_RFREE(p, NULL), memsnap_external_free(p, 0, NULL, NULL), 0);
}

EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
  RUNTIME_CALL(cudaFreeAsync, cudaError_t(*)(void *, cudaStream_t), (p, s), SIM_RFREE(p, s),
               memsnap_external_free(p, 0, (memsnap_stream_t)s, NULL), 0);
}

__attribute__((constructor)) static void fill_runtime_wrappers(void) {
  runtime_wrappers[RT_cudaMalloc] = (void *)cudaMalloc;
  runtime_wrappers[RT_cudaMallocManaged] = (void *)cudaMallocManaged;
  runtime_wrappers[RT_cudaMallocPitch] = (void *)cudaMallocPitch;
  runtime_wrappers[RT_cudaMallocAsync] = (void *)cudaMallocAsync;
  runtime_wrappers[RT_cudaMallocFromPoolAsync] = (void *)cudaMallocFromPoolAsync;
  runtime_wrappers[RT_cudaFree] = (void *)cudaFree;
  runtime_wrappers[RT_cudaFreeAsync] = (void *)cudaFreeAsync;
}

/* ---- exits that skip the exit handlers ---------------------------------------------------- */

static void dump_before_exit(void) {
  if (getpid() == owner_pid) memsnap_dump_exit(); /* does nothing when recording never started */
}

EXPORT void _exit(int status) {
  dump_before_exit();
  void (*real)(int) = (void (*)(int))real_dlsym(RTLD_NEXT, "_exit");
  real(status);
  __builtin_unreachable();
}

EXPORT void _Exit(int status) {
  dump_before_exit();
  void (*real)(int) = (void (*)(int))real_dlsym(RTLD_NEXT, "_Exit");
  real(status);
  __builtin_unreachable();
}
