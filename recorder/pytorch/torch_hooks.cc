// torch_hooks.cc: the CUDA graph hooks of PyTorch's pluggable allocator, in the C++ signatures
// PyTorch calls them with, forwarding to memsnap's private pools (pools.c through api.c).
//
// torch.cuda.memory.CUDAPluggableAllocator accepts three function pointers besides malloc and
// free: set_begin_allocate_to_pool, set_end_allocate_to_pool_fn and set_release_pool
// (torch/csrc/cuda/CUDAPluggableAllocator.h). PyTorch calls them, through std::function, as
//   void begin(int device, c10::cuda::MempoolId_t id, std::function<bool(cudaStream_t)> filter);
//   void end(int device, c10::cuda::MempoolId_t id);
//   void release(int device, c10::cuda::MempoolId_t id);
// from CUDAGraph::capture_begin / capture_end / reset and torch.cuda.use_mem_pool. MempoolId_t is
// std::pair<unsigned long long, unsigned long long>; the filter is PyTorch's own closure (for a
// graph: "this stream is capturing with my capture id"). The functions below have exactly those
// types, so the calls land with the right ABI; the filter is copied (PyTorch owns the argument)
// and called back from memsnap's allocation path, and freed when the capture ends.
//
// Nothing here needs PyTorch's headers: std::pair and std::function are the standard library's,
// and cudaStream_t is struct CUstream_st *, memsnap_stream_t.
#include <functional>
#include <new>
#include <utility>

#include "memsnap.h"

extern "C" {
typedef int (*msi_pool_filter)(void *ctx, memsnap_stream_t stream);
int msi_begin_allocate_owned(int device, uint64_t id0, uint64_t id1, msi_pool_filter filter, void *ctx,
                             void (*release_ctx)(void *));
}

namespace {
using MempoolId = std::pair<unsigned long long, unsigned long long>;
using StreamFilter = std::function<bool(memsnap_stream_t)>;

int call_filter(void *ctx, memsnap_stream_t stream) {
  try {
    return (*static_cast<StreamFilter *>(ctx))(stream) ? 1 : 0;
  } catch (...) {  // an error in PyTorch's filter: not this capture's stream
    return 0;
  }
}

void delete_filter(void *ctx) { delete static_cast<StreamFilter *>(ctx); }
}  // namespace

extern "C" {

// PyTorch's begin_allocate_to_pool hook (set_begin_allocate_to_pool).
__attribute__((visibility("default"))) void memsnap_torch_begin_allocate_to_pool(int device, MempoolId id,
                                                                                 StreamFilter filter) {
  StreamFilter *copy = new (std::nothrow) StreamFilter(std::move(filter));
  if (!copy) return;  // out of host memory: allocations stay in the default pools
  msi_begin_allocate_owned(device, id.first, id.second, call_filter, copy, delete_filter);
}

// PyTorch's end_allocate_to_pool hook (set_end_allocate_to_pool_fn).
__attribute__((visibility("default"))) void memsnap_torch_end_allocate_to_pool(int device, MempoolId id) {
  memsnap_end_allocate_to_pool(device, id.first, id.second);
}

// PyTorch's release_pool hook (set_release_pool).
__attribute__((visibility("default"))) void memsnap_torch_release_pool(int device, MempoolId id) {
  memsnap_release_pool(device, id.first, id.second);
}

}  // extern "C"
