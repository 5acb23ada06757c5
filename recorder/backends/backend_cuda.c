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
 * Only cuda.h's types are used; every function comes from dlsym. The virtual memory calls
 * (expandable segments), the stream-ordered pool (async mode) and the capture-mode exchange are
 * optional: a driver without them still serves classic segments, and the modes that need them
 * say so and fall back (vmm_supported, async_supported).
 *
 * Peer access (MEMSNAP_PEER_ACCESS=1, the default): PyTorch's pluggable allocator never tells
 * memsnap that a device started copying from another (CUDAPluggableAllocator::enablePeerAccess
 * only calls cudaDeviceEnablePeerAccess, which covers cuMemAlloc's memory but not memory mapped
 * with cuMemMap nor a stream-ordered pool's), so the pages of expandable segments are mapped,
 * and the default pool opened, for every device that cuDeviceCanAccessPeer says can reach them,
 * from the start; PyTorch's own allocator does the same for a peer once it copies between the two.
 *
 * CUDA IPC (ipc.c): classic segments are shared with cuIpcGetMemHandle and opened with
 * cuIpcOpenMemHandle; the pages of expandable segments are created exportable as POSIX file
 * descriptors (as PyTorch creates its own; plainly when the driver refuses that) and exported
 * with cuMemExportToShareableHandle, and a received page is imported from its descriptor and
 * mapped into a reservation of the receiver's.
 *
 * CUDA graph capture: a capture in the default (global) mode forbids cuMemAlloc and cuMemFree
 * in every thread ("operation not permitted when stream is capturing"). PyTorch's allocator
 * switches the calling thread to the relaxed mode around cudaMalloc (cudaMallocMaybeCapturing);
 * this backend does the same around every call that allocates or frees device memory. The graph
 * a capture builds is read (capture_info, node_parents) for graph_capture_record_stream_reuse
 * (capture.c), with cuStreamGetCaptureInfo and cuGraphNodeGetDependencies as PyTorch reads it.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdatomic.h>
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
  X(cuGetErrorString, CUresult, (CUresult, const char **))                       \
  X(cuStreamSynchronize, CUresult, (CUstream))                                   \
  X(cuStreamWaitEvent, CUresult, (CUstream, CUevent, unsigned int))              \
  X(cuStreamCreate, CUresult, (CUstream *, unsigned int))                        \
  X(cuDeviceGetAttribute, CUresult, (int *, CUdevice_attribute, CUdevice))

/* Optional: NULL when the driver lacks them. */
#define OPTIONAL_FUNCS(X)                                                                      \
  X(cuThreadExchangeStreamCaptureMode, CUresult, (CUstreamCaptureMode *))                     \
  X(cuMemAddressReserve, CUresult, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)) \
  X(cuMemAddressFree, CUresult, (CUdeviceptr, size_t))                                         \
  X(cuMemCreate, CUresult, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
  X(cuMemRelease, CUresult, (CUmemGenericAllocationHandle))                                    \
  X(cuMemMap, CUresult, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)) \
  X(cuMemUnmap, CUresult, (CUdeviceptr, size_t))                                               \
  X(cuMemSetAccess, CUresult, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))          \
  X(cuMemAllocAsync, CUresult, (CUdeviceptr *, size_t, CUstream))                              \
  X(cuMemFreeAsync, CUresult, (CUdeviceptr, CUstream))                                         \
  X(cuDeviceGetDefaultMemPool, CUresult, (CUmemoryPool *, CUdevice))                           \
  X(cuMemPoolSetAttribute, CUresult, (CUmemoryPool, CUmemPool_attribute, void *))              \
  X(cuMemPoolGetAttribute, CUresult, (CUmemoryPool, CUmemPool_attribute, void *))              \
  X(cuMemPoolTrimTo, CUresult, (CUmemoryPool, size_t))                                         \
  X(cuCtxSynchronize, CUresult, (void))                                                         \
  X(cuDeviceCanAccessPeer, CUresult, (int *, CUdevice, CUdevice))                              \
  X(cuMemPoolSetAccess, CUresult, (CUmemoryPool, const CUmemAccessDesc *, size_t))             \
  X(cuIpcGetMemHandle, CUresult, (CUipcMemHandle *, CUdeviceptr))                              \
  X(cuIpcOpenMemHandle_v2, CUresult, (CUdeviceptr *, CUipcMemHandle, unsigned int))            \
  X(cuIpcCloseMemHandle, CUresult, (CUdeviceptr))                                              \
  X(cuMemGetAddressRange_v2, CUresult, (CUdeviceptr *, size_t *, CUdeviceptr))                 \
  X(cuMemExportToShareableHandle, CUresult, (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long)) \
  X(cuMemImportFromShareableHandle, CUresult, (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType)) \
  X(cuStreamGetCaptureInfo_v3, CUresult, (CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *, const CUgraphNode **, const void **, size_t *)) \
  X(cuStreamGetCaptureInfo_v2, CUresult, (CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *, const CUgraphNode **, size_t *)) \
  X(cuGraphNodeGetDependencies_v2, CUresult, (CUgraphNode, CUgraphNode *, void *, size_t *))                     \
  X(cuGraphNodeGetDependencies, CUresult, (CUgraphNode, CUgraphNode *, size_t *))

#define DECLARE(name, ret, args) static ret(*p_##name) args;
DRIVER_FUNCS(DECLARE)
OPTIONAL_FUNCS(DECLARE)
#undef DECLARE

static void *libcuda;
static int ndevs;
static CUcontext ctxs[MSI_MAX_DEVICES];
static CUmemoryPool pools[MSI_MAX_DEVICES]; /* default pools, set up for the async mode */
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
#define RESOLVE_OPTIONAL(name, ret, args) p_##name = (ret(*) args)dlsym(libcuda, #name);
  OPTIONAL_FUNCS(RESOLVE_OPTIONAL)
#undef RESOLVE_OPTIONAL
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
    pools[i] = NULL;
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

/* The calling thread's capture mode, relaxed while memory is allocated or freed (a global-mode
 * capture elsewhere in the process would refuse the call). */
static CUstreamCaptureMode relax_capture(void) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (p_cuThreadExchangeStreamCaptureMode) p_cuThreadExchangeStreamCaptureMode(&mode);
  return mode;
}

static void restore_capture(CUstreamCaptureMode mode) {
  if (p_cuThreadExchangeStreamCaptureMode) p_cuThreadExchangeStreamCaptureMode(&mode);
}

static int cuda_mem_alloc(int dev, size_t size, uintptr_t *out) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUdeviceptr p = 0;
  CUstreamCaptureMode mode = relax_capture();
  CUresult r = p_cuMemAlloc_v2(&p, size);
  restore_capture(mode);
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
  CUstreamCaptureMode mode = relax_capture();
  CUresult r = p_cuMemFree_v2((CUdeviceptr)ptr);
  restore_capture(mode);
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

static int cuda_stream_synchronize(int dev, memsnap_stream_t stream) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUresult r = p_cuStreamSynchronize((CUstream)stream);
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuStreamSynchronize", r);
}

static int cuda_device_synchronize(int dev) {
  if (!p_cuCtxSynchronize) return cuda_stream_synchronize(dev, NULL);
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUresult r = p_cuCtxSynchronize();
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuCtxSynchronize", r);
}

static int cuda_stream_wait(int dev, memsnap_stream_t waiter, memsnap_stream_t stream) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUevent ev = NULL;
  CUresult r = p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) r = p_cuEventRecord(ev, (CUstream)stream);
  if (r == CUDA_SUCCESS) r = p_cuStreamWaitEvent((CUstream)waiter, ev, 0);
  if (ev) p_cuEventDestroy_v2(ev);
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("making a stream wait for another", r);
}

/* Whether `attr` of device dev is set; 0 with the reason in msi_error otherwise. */
static int device_has(int dev, CUdevice_attribute attr, const char *what) {
  CUdevice d;
  int value = 0;
  CUresult r = p_cuDeviceGet(&d, dev);
  if (r == CUDA_SUCCESS) r = p_cuDeviceGetAttribute(&value, attr, d);
  if (r != CUDA_SUCCESS) {
    fail("reading a device attribute", r);
    return 0;
  }
  if (!value) msi_error("device %d does not support %s", dev, what);
  return value != 0;
}

/* ---- virtual memory: expandable segments ---------------------------------------------------- */

static int cuda_vmm_supported(int dev) {
  if (!p_cuMemAddressReserve || !p_cuMemAddressFree || !p_cuMemCreate || !p_cuMemRelease || !p_cuMemMap ||
      !p_cuMemUnmap || !p_cuMemSetAccess) {
    msi_error("the driver (libcuda.so.1) lacks the virtual memory management API");
    return 0;
  }
  return device_has(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "virtual memory management");
}

static int cuda_va_reserve(int dev, size_t size, uintptr_t *out) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUdeviceptr p = 0;
  CUresult r = p_cuMemAddressReserve(&p, size, 0, 0, 0);
  leave(pushed);
  if (r != CUDA_SUCCESS) return fail("cuMemAddressReserve", r);
  *out = (uintptr_t)p;
  return MSI_BE_OK;
}

static int cuda_va_free(int dev, uintptr_t ptr, size_t size) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUresult r = p_cuMemAddressFree((CUdeviceptr)ptr, size);
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuMemAddressFree", r);
}

/* The devices that map device dev's pages: dev itself first, then (MEMSNAP_PEER_ACCESS=1) every
 * device the driver says can access dev's memory. Returns their count (at least 1). */
static int access_list(int dev, CUmemAccessDesc *descs) {
  static int counts[MSI_MAX_DEVICES];
  static int peers[MSI_MAX_DEVICES][MSI_MAX_DEVICES];
  pthread_mutex_lock(&ctx_lock);
  if (!counts[dev]) {
    peers[dev][counts[dev]++] = dev;
    CUdevice self, other;
    for (int p = 0; msi_opt.peer_access && p_cuDeviceCanAccessPeer && p < ndevs && p < MSI_MAX_DEVICES; p++) {
      int can = 0;
      if (p != dev && p_cuDeviceGet(&self, dev) == CUDA_SUCCESS && p_cuDeviceGet(&other, p) == CUDA_SUCCESS &&
          p_cuDeviceCanAccessPeer(&can, other, self) == CUDA_SUCCESS && can)
        peers[dev][counts[dev]++] = p;
    }
  }
  int n = counts[dev];
  pthread_mutex_unlock(&ctx_lock);
  for (int i = 0; i < n; i++) {
    memset(&descs[i], 0, sizeof descs[i]);
    descs[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    descs[i].location.id = peers[dev][i];
    descs[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  return n;
}

/* Maps physical page h at ptr, readable and writable by dev and its peers. Context entered. */
static int map_and_set_access(int dev, uintptr_t ptr, size_t page_size, CUmemGenericAllocationHandle h) {
  CUmemAccessDesc descs[MSI_MAX_DEVICES];
  int ndescs = access_list(dev, descs);
  CUresult r = p_cuMemMap((CUdeviceptr)ptr, page_size, 0, h, 0);
  if (r != CUDA_SUCCESS) return fail("cuMemMap", r);
  if ((r = p_cuMemSetAccess((CUdeviceptr)ptr, page_size, descs, (size_t)ndescs)) != CUDA_SUCCESS) {
    p_cuMemUnmap((CUdeviceptr)ptr, page_size);
    return fail("cuMemSetAccess", r);
  }
  return MSI_BE_OK;
}

/* Whether dev supports GPUDirect RDMA on cuMemCreate's memory (asked once). */
static int rdma_capable(int dev) {
  static atomic_int known[MSI_MAX_DEVICES]; /* 0 unknown, 1 no, 2 yes */
  int k = atomic_load_explicit(&known[dev], memory_order_relaxed);
  if (!k) {
    CUdevice d;
    int v = 0;
    if (p_cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
        p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, d) != CUDA_SUCCESS)
      v = 0;
    k = v ? 2 : 1;
    atomic_store_explicit(&known[dev], k, memory_order_relaxed);
  }
  return k == 2;
}

/* Pages are made exportable as POSIX file descriptors (for CUDA IPC, as PyTorch makes its own)
 * unless the driver refuses that once: then plainly, from then on. */
static atomic_int pages_exportable = 1;

static int cuda_page_map(int dev, uintptr_t ptr, size_t page_size, void **handle) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  if (rdma_capable(dev)) prop.allocFlags.gpuDirectRDMACapable = 1; /* as PyTorch asks where the device can */
  CUmemGenericAllocationHandle h = 0;
  CUstreamCaptureMode mode = relax_capture();
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (atomic_load(&pages_exportable) && p_cuMemExportToShareableHandle) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    r = p_cuMemCreate(&h, page_size, &prop, 0);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) atomic_store(&pages_exportable, 0);
  }
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    r = p_cuMemCreate(&h, page_size, &prop, 0);
  }
  int rc = MSI_BE_OK;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    rc = MSI_BE_OOM;
  } else if (r != CUDA_SUCCESS) {
    rc = fail("cuMemCreate", r);
  } else if ((rc = map_and_set_access(dev, ptr, page_size, h)) != MSI_BE_OK) {
    p_cuMemRelease(h);
  }
  restore_capture(mode);
  leave(pushed);
  if (rc == MSI_BE_OK) *handle = (void *)(uintptr_t)h;
  return rc;
}

static int cuda_page_export(int dev, void *handle, int *fd) {
  if (!p_cuMemExportToShareableHandle) {
    msi_error("the driver (libcuda.so.1) lacks cuMemExportToShareableHandle");
    return MSI_BE_ERR;
  }
  if (!atomic_load(&pages_exportable)) {
    msi_error("cuda backend: the driver refused exportable pages (cuMemCreate with POSIX file descriptors), so "
              "this expandable segment cannot be shared with another process");
    return MSI_BE_ERR;
  }
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  int out = -1;
  CUresult r = p_cuMemExportToShareableHandle(&out, (CUmemGenericAllocationHandle)(uintptr_t)handle,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  leave(pushed);
  if (r != CUDA_SUCCESS) return fail("cuMemExportToShareableHandle", r);
  *fd = out;
  return MSI_BE_OK;
}

static int cuda_page_map_fd(int dev, uintptr_t ptr, size_t page_size, int fd, void **handle) {
  if (!p_cuMemImportFromShareableHandle) {
    msi_error("the driver (libcuda.so.1) lacks cuMemImportFromShareableHandle");
    return MSI_BE_ERR;
  }
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUmemGenericAllocationHandle h = 0;
  CUresult r = p_cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  int rc = r == CUDA_SUCCESS ? map_and_set_access(dev, ptr, page_size, h) : fail("cuMemImportFromShareableHandle", r);
  if (rc != MSI_BE_OK && r == CUDA_SUCCESS) p_cuMemRelease(h);
  leave(pushed);
  if (rc == MSI_BE_OK) *handle = (void *)(uintptr_t)h;
  return rc;
}

/* ---- CUDA IPC of classic segments -------------------------------------------------------------- */

static int cuda_ipc_get_handle(int dev, uintptr_t ptr, size_t size, unsigned char out[64]) {
  (void)size;
  if (!p_cuIpcGetMemHandle) {
    msi_error("the driver (libcuda.so.1) lacks cuIpcGetMemHandle");
    return MSI_BE_ERR;
  }
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUipcMemHandle h;
  CUresult r = p_cuIpcGetMemHandle(&h, (CUdeviceptr)ptr);
  leave(pushed);
  if (r != CUDA_SUCCESS) return fail("cuIpcGetMemHandle", r);
  memcpy(out, h.reserved, sizeof h.reserved);
  return MSI_BE_OK;
}

static int cuda_ipc_open(int dev, const unsigned char handle[64], uintptr_t *ptr, size_t *size) {
  if (!p_cuIpcOpenMemHandle_v2 || !p_cuIpcCloseMemHandle || !p_cuMemGetAddressRange_v2) {
    msi_error("the driver (libcuda.so.1) lacks cuIpcOpenMemHandle");
    return MSI_BE_ERR;
  }
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUipcMemHandle h;
  memcpy(h.reserved, handle, sizeof h.reserved);
  CUdeviceptr p = 0, base = 0;
  size_t bytes = 0;
  CUresult r = p_cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (r == CUDA_SUCCESS && p_cuMemGetAddressRange_v2(&base, &bytes, p) != CUDA_SUCCESS) bytes = 0;
  leave(pushed);
  if (r != CUDA_SUCCESS) return fail("cuIpcOpenMemHandle", r);
  *ptr = (uintptr_t)p;
  *size = bytes;
  return MSI_BE_OK;
}

static int cuda_ipc_close(int dev, uintptr_t ptr) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUresult r = p_cuIpcCloseMemHandle((CUdeviceptr)ptr);
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuIpcCloseMemHandle", r);
}

static int cuda_page_unmap(int dev, uintptr_t ptr, size_t page_size, void *handle) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUstreamCaptureMode mode = relax_capture();
  CUresult r = p_cuMemUnmap((CUdeviceptr)ptr, page_size);
  CUresult r2 = p_cuMemRelease((CUmemGenericAllocationHandle)(uintptr_t)handle);
  restore_capture(mode);
  leave(pushed);
  if (r != CUDA_SUCCESS) return fail("cuMemUnmap", r);
  return r2 == CUDA_SUCCESS ? MSI_BE_OK : fail("cuMemRelease", r2);
}

/* ---- the stream-ordered pool: async mode -------------------------------------------------------- */

/* The device's default pool, set up once as PyTorch's backend does: it keeps what is freed
 * (release threshold UINT64_MAX) and reuses it in every way the driver allows. */
static int default_pool(int dev, CUmemoryPool *out) {
  if (pools[dev]) {
    *out = pools[dev];
    return MSI_BE_OK;
  }
  CUdevice d;
  CUmemoryPool pool = NULL;
  CUresult r = p_cuDeviceGet(&d, dev);
  if (r == CUDA_SUCCESS) r = p_cuDeviceGetDefaultMemPool(&pool, d);
  if (r != CUDA_SUCCESS) return fail("cuDeviceGetDefaultMemPool", r);
  cuuint64_t threshold = UINT64_MAX;
  int enable = 1;
  r = p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
  if (r == CUDA_SUCCESS) r = p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, &enable);
  if (r == CUDA_SUCCESS) r = p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &enable);
  if (r == CUDA_SUCCESS) r = p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &enable);
  if (r != CUDA_SUCCESS) return fail("setting up the stream-ordered pool", r);
  CUmemAccessDesc descs[MSI_MAX_DEVICES];
  int ndescs = access_list(dev, descs);
  /* the owner's own access is implicit (and may not be set): only the peers are given */
  if (ndescs > 1 && p_cuMemPoolSetAccess && (r = p_cuMemPoolSetAccess(pool, descs + 1, (size_t)(ndescs - 1))) != CUDA_SUCCESS)
    msi_warn("device %d: peers cannot access the stream-ordered pool (cuMemPoolSetAccess: %s)", dev, err_str(r));
  *out = pools[dev] = pool;
  return MSI_BE_OK;
}

static int cuda_async_supported(int dev) {
  if (!p_cuMemAllocAsync || !p_cuMemFreeAsync || !p_cuDeviceGetDefaultMemPool || !p_cuMemPoolSetAttribute ||
      !p_cuMemPoolGetAttribute || !p_cuMemPoolTrimTo || !p_cuCtxSynchronize) {
    msi_error("the driver (libcuda.so.1) lacks the stream-ordered allocator (cuMemAllocAsync)");
    return 0;
  }
  if (!device_has(dev, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, "memory pools (cuMemAllocAsync)")) return 0;
  CUmemoryPool pool;
  return default_pool(dev, &pool) == MSI_BE_OK;
}

static int cuda_async_alloc(int dev, size_t size, memsnap_stream_t stream, uintptr_t *out) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUdeviceptr p = 0;
  CUresult r = p_cuMemAllocAsync(&p, size, (CUstream)stream);
  leave(pushed);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return MSI_BE_OOM;
  if (r != CUDA_SUCCESS) return fail("cuMemAllocAsync", r);
  *out = (uintptr_t)p;
  return MSI_BE_OK;
}

static int cuda_async_free(int dev, uintptr_t ptr, memsnap_stream_t stream) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUresult r = p_cuMemFreeAsync((CUdeviceptr)ptr, (CUstream)stream);
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuMemFreeAsync", r);
}

static int cuda_side_stream(int dev, memsnap_stream_t *out) {
  bool pushed;
  if (enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUstream s = NULL;
  CUresult r = p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  leave(pushed);
  if (r != CUDA_SUCCESS) return fail("creating a stream", r);
  *out = (memsnap_stream_t)s;
  return MSI_BE_OK;
}

static int cuda_async_trim(int dev) {
  CUmemoryPool pool;
  bool pushed;
  if (default_pool(dev, &pool) != MSI_BE_OK || enter(dev, &pushed) != MSI_BE_OK) return MSI_BE_ERR;
  CUresult r = p_cuCtxSynchronize();
  if (r == CUDA_SUCCESS) r = p_cuMemPoolTrimTo(pool, 0);
  leave(pushed);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("cuMemPoolTrimTo", r);
}

static int cuda_async_usage(int dev, uint64_t *reserved, uint64_t *reserved_high, uint64_t *used, uint64_t *used_high) {
  CUmemoryPool pool;
  if (default_pool(dev, &pool) != MSI_BE_OK) return MSI_BE_ERR;
  cuuint64_t v[4] = {0, 0, 0, 0};
  const CUmemPool_attribute attrs[4] = {CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
                                         CU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_HIGH};
  for (int i = 0; i < 4; i++) {
    CUresult r = p_cuMemPoolGetAttribute(pool, attrs[i], &v[i]);
    if (r != CUDA_SUCCESS) return fail("cuMemPoolGetAttribute", r);
  }
  *reserved = v[0];
  *reserved_high = v[1];
  *used = v[2];
  *used_high = v[3];
  return MSI_BE_OK;
}

static int cuda_async_reset_peak(int dev) {
  CUmemoryPool pool;
  if (default_pool(dev, &pool) != MSI_BE_OK) return MSI_BE_ERR;
  cuuint64_t zero = 0; /* 0 is the one value allowed: the mark becomes the current value */
  CUresult r = p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
  if (r == CUDA_SUCCESS) r = p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
  return r == CUDA_SUCCESS ? MSI_BE_OK : fail("resetting the pool's high-water marks", r);
}

/* ---- CUDA graph capture, read (capture.c) ---------------------------------------------------- */

/* The symbols are the driver's versioned entry points, which keep their signatures whatever the
 * toolkit's headers map the plain names to: the edge-data versions (CUDA 12.3 and later) first,
 * asked for no edge data (a graph with special edges then answers CUDA_ERROR_LOSSY_QUERY, an
 * error here: the block waits for the capture's end), else the older ones. */
_Static_assert(sizeof(CUgraphNode) == sizeof(uintptr_t), "graph nodes are handed out as uintptr_t");

static int cuda_capture_info(int dev, memsnap_stream_t stream, uint64_t *id, uintptr_t *nodes, size_t cap, size_t *n) {
  (void)dev; /* a stream's capture needs no current context */
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t cid = 0;
  CUgraph graph = NULL;
  const CUgraphNode *deps = NULL;
  size_t ndeps = 0;
  CUresult r;
  if (p_cuStreamGetCaptureInfo_v3) r = p_cuStreamGetCaptureInfo_v3((CUstream)stream, &status, &cid, &graph, &deps, NULL, &ndeps);
  else if (p_cuStreamGetCaptureInfo_v2) r = p_cuStreamGetCaptureInfo_v2((CUstream)stream, &status, &cid, &graph, &deps, &ndeps);
  else {
    msi_error("cuda backend: the driver cannot describe a capture (no cuStreamGetCaptureInfo_v2)");
    return MSI_BE_ERR;
  }
  if (r != CUDA_SUCCESS) return fail("cuStreamGetCaptureInfo", r);
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return 0;
  *id = (uint64_t)cid;
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) { /* invalidated: still capturing until its end, no graph */
    *n = 0;
    return 1;
  }
  *n = ndeps;
  for (size_t i = 0; i < ndeps && i < cap; i++) nodes[i] = (uintptr_t)deps[i];
  return 1;
}

static int cuda_node_parents(int dev, uintptr_t node, uintptr_t *out, size_t cap, size_t *n) {
  (void)dev;
  size_t count = 0;
  CUresult r;
  bool v2 = p_cuGraphNodeGetDependencies_v2 != NULL;
  if (!v2 && !p_cuGraphNodeGetDependencies) {
    msi_error("cuda backend: the driver cannot read a graph (no cuGraphNodeGetDependencies)");
    return MSI_BE_ERR;
  }
  r = v2 ? p_cuGraphNodeGetDependencies_v2((CUgraphNode)node, NULL, NULL, &count)
         : p_cuGraphNodeGetDependencies((CUgraphNode)node, NULL, &count);
  if (r != CUDA_SUCCESS) return fail("cuGraphNodeGetDependencies", r);
  *n = count;
  if (count == 0 || count > cap) return MSI_BE_OK;
  r = v2 ? p_cuGraphNodeGetDependencies_v2((CUgraphNode)node, (CUgraphNode *)out, NULL, &count)
         : p_cuGraphNodeGetDependencies((CUgraphNode)node, (CUgraphNode *)out, &count);
  if (r != CUDA_SUCCESS) return fail("cuGraphNodeGetDependencies", r);
  *n = count;
  return MSI_BE_OK;
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
    .stream_synchronize = cuda_stream_synchronize,
    .device_synchronize = cuda_device_synchronize,
    .vmm_supported = cuda_vmm_supported,
    .va_reserve = cuda_va_reserve,
    .va_free = cuda_va_free,
    .page_map = cuda_page_map,
    .page_unmap = cuda_page_unmap,
    .async_supported = cuda_async_supported,
    .async_alloc = cuda_async_alloc,
    .async_free = cuda_async_free,
    .async_trim = cuda_async_trim,
    .async_usage = cuda_async_usage,
    .async_reset_peak = cuda_async_reset_peak,
    .stream_wait = cuda_stream_wait,
    .side_stream = cuda_side_stream,
    .ipc_get_handle = cuda_ipc_get_handle,
    .ipc_open = cuda_ipc_open,
    .ipc_close = cuda_ipc_close,
    .page_export = cuda_page_export,
    .page_map_fd = cuda_page_map_fd,
    .capture_info = cuda_capture_info,
    .node_parents = cuda_node_parents,
    .shutdown = cuda_shutdown,
};
