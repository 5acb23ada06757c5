/* backend_cuda.c: the CUDA device backend, through the driver API loaded at run time.
 *
 * Why the driver API and not cudart: a PyTorch process has already loaded its own libcudart
 * (cu12 or cu13 builds, sometimes a different minor version than any toolkit on the machine).
 * Linking libmemsnap against another cudart would put a second runtime in the process. The
 * driver (libcuda.so.1) exists once per machine, every runtime version sits on top of it,
 * and a runtime's device memory is the device's *primary context*, which the driver API
 * shares: cuDevicePrimaryCtxRetain() returns the very context cudart uses, so memory,
 * streams and events interoperate with PyTorch whatever its CUDA version. Loading libcuda
 * with dlopen() also lets the same library load on machines without a GPU (the sim backend).
 *
 * Only cuda.h's types are used; every function comes from dlsym.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define DRIVER_FUNCS(X)                                               \
  X(cuInit, CUresult, (unsigned int))                                 \
  X(cuDeviceGetCount, CUresult, (int *))                              \
  X(cuDeviceGet, CUresult, (CUdevice *, int))                         \
  X(cuDeviceGetName, CUresult, (char *, int, CUdevice))               \
  X(cuDeviceTotalMem_v2, CUresult, (size_t *, CUdevice))              \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))      \
  X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice))               \
  X(cuCtxGetCurrent, CUresult, (CUcontext *))                         \
  X(cuCtxPushCurrent_v2, CUresult, (CUcontext))                       \
  X(cuCtxPopCurrent_v2, CUresult, (CUcontext *))                      \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t))                 \
  X(cuMemFree_v2, CUresult, (CUdeviceptr))                            \
  X(cuMemGetInfo_v2, CUresult, (size_t *, size_t *))                  \
  X(cuEventCreate, CUresult, (CUevent *, unsigned int))               \
  X(cuEventRecord, CUresult, (CUevent, CUstream))                     \
  X(cuEventQuery, CUresult, (CUevent))                                \
  X(cuEventSynchronize, CUresult, (CUevent))                          \
  X(cuEventDestroy_v2, CUresult, (CUevent))                           \
  X(cuGetErrorString, CUresult, (CUresult, const char **))

#define DECLARE(name, ret, args) static ret(*p_##name) args;
DRIVER_FUNCS(DECLARE)
#undef DECLARE

static void *libcuda;
static int ndevs;
static CUcontext ctxs[MSI_MAX_DEVICES];
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *err_str(CUresult r) {
  const char *s = NULL;
  if (p_cuGetErrorString && p_cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
  return "unknown CUDA error";
}

static int fail(const char *what, CUresult r) {
  msi_error("cuda backend: %s failed: %s (CUresult %d)", what, err_str(r), (int)r);
  return MSI_BE_ERR;
}

static int cuda_init(void) {
  libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!libcuda) {
    msi_error("cuda backend: cannot load libcuda.so.1 (%s); is the NVIDIA driver installed? "
              "MEMSNAP_BACKEND=sim selects the simulated device", dlerror());
    return MSI_BE_ERR;
  }
#define RESOLVE(name, ret, args)                                                         \
  p_##name = (ret(*) args)dlsym(libcuda, #name);                                         \
  if (!p_##name) {                                                                       \
    msi_error("cuda backend: libcuda.so.1 lacks %s (driver too old?)", #name);           \
    return MSI_BE_ERR;                                                                   \
  }
  DRIVER_FUNCS(RESOLVE)
#undef RESOLVE
  CUresult r = p_cuInit(0);
  if (r != CUDA_SUCCESS) return fail("cuInit", r);
  r = p_cuDeviceGetCount(&ndevs);
  if (r != CUDA_SUCCESS) return fail("cuDeviceGetCount", r);
  return MSI_BE_OK;
}

static void cuda_shutdown(void) {
  for (int i = 0; i < MSI_MAX_DEVICES; i++) {
    if (ctxs[i]) {
      CUdevice dev;
      if (p_cuDeviceGet(&dev, i) == CUDA_SUCCESS) p_cuDevicePrimaryCtxRelease_v2(dev);
      ctxs[i] = NULL;
    }
  }
  /* libcuda stays loaded: unloading the driver library under a live runtime is unsafe. */
}

static int cuda_device_count(void) { return ndevs; }

/* Makes device `dev`'s primary context current, saving whether one was pushed. */
static int enter(int dev, bool *pushed) {
  *pushed = false;
  CUcontext ctx = ctxs[dev];
  if (MSI_UNLIKELY(!ctx)) {
    pthread_mutex_lock(&ctx_lock);
    if (!ctxs[dev]) {
      CUdevice d;
      CUresult r = p_cuDeviceGet(&d, dev);
      if (r == CUDA_SUCCESS) r = p_cuDevicePrimaryCtxRetain(&ctxs[dev], d);
      if (r != CUDA_SUCCESS) {
        pthread_mutex_unlock(&ctx_lock);
        return fail("retaining the primary context", r);
      }
    }
    ctx = ctxs[dev];
    pthread_mutex_unlock(&ctx_lock);
  }
  CUcontext cur = NULL;
  p_cuCtxGetCurrent(&cur);
  if (cur == ctx) return MSI_BE_OK;
  CUresult r = p_cuCtxPushCurrent_v2(ctx);
  if (r != CUDA_SUCCESS) return fail("cuCtxPushCurrent", r);
  *pushed = true;
  return MSI_BE_OK;
}

static void leave(bool pushed) {
  CUcontext ignored;
  if (pushed) p_cuCtxPopCurrent_v2(&ignored);
}

static int cuda_device_info(int dev, size_t *free_bytes, size_t *total, char *name, size_t len) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  size_t f = 0, t = 0;
  CUdevice d;
  CUresult r = p_cuMemGetInfo_v2(&f, &t);
  if (r == CUDA_SUCCESS) r = p_cuDeviceGet(&d, dev);
  /* totalGlobalMem, which PyTorch's set_per_process_memory_fraction multiplies */
  if (r == CUDA_SUCCESS) r = p_cuDeviceTotalMem_v2(&t, d);
  if (r == CUDA_SUCCESS && name) r = p_cuDeviceGetName(name, (int)len, d);
  leave(pushed);
  if (r != CUDA_SUCCESS) return fail("reading device memory info", r);
  if (free_bytes) *free_bytes = f;
  if (total) *total = t;
  return MSI_BE_OK;
}

static int cuda_mem_alloc(int dev, size_t size, uintptr_t *out) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUdeviceptr p = 0;
  CUresult r = p_cuMemAlloc_v2(&p, size);
  leave(pushed);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return MSI_BE_OOM;
  if (r != CUDA_SUCCESS) return fail("cuMemAlloc", r);
  *out = (uintptr_t)p;
  return MSI_BE_OK;
}

static int cuda_mem_free(int dev, uintptr_t ptr, size_t size) {
  (void)size;
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUresult r = p_cuMemFree_v2((CUdeviceptr)ptr);
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuMemFree", r);
}

static int cuda_event_create(int dev, void **ev) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUresult r = p_cuEventCreate((CUevent *)ev, CU_EVENT_DISABLE_TIMING);
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuEventCreate", r);
}

static int cuda_event_record(int dev, void *ev, memsnap_stream_t stream) {
  (void)dev;
  CUresult r = p_cuEventRecord((CUevent)ev, (CUstream)stream);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuEventRecord", r);
}

static int cuda_event_query(int dev, void *ev) {
  (void)dev;
  CUresult r = p_cuEventQuery((CUevent)ev);
  if (r == CUDA_SUCCESS) return 1;
  if (r == CUDA_ERROR_NOT_READY) return 0;
  return fail("cuEventQuery", r);
}

static int cuda_event_synchronize(int dev, void *ev) {
  (void)dev;
  CUresult r = p_cuEventSynchronize((CUevent)ev);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuEventSynchronize", r);
}

static void cuda_event_destroy(int dev, void *ev) {
  (void)dev;
  p_cuEventDestroy_v2((CUevent)ev);
}

const msi_backend msi_backend_cuda = {
    .name = "cuda",
    .init = cuda_init,
    .device_count = cuda_device_count,
    .device_info = cuda_device_info,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .event_destroy = cuda_event_destroy,
    .shutdown = cuda_shutdown,
};
