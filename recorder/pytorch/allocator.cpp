// allocator.cpp: memsnap as PyTorch's CUDA allocator, a subclass of
// c10::cuda::CUDACachingAllocator::CUDAAllocator built against the installed PyTorch's headers.
//
// PyTorch reaches its allocator through this class from everywhere: tensors (allocate), the
// torch._C bindings behind torch.cuda.memory (statistics, snapshots, the recorder, MemPool, the
// memory fraction), the device-generic torch.accelerator API, CUDA graphs and torch.compile's
// graph trees (private pools, checkpoints), and CUDA IPC (torch.multiprocessing). The pluggable
// interface (CUDAPluggableAllocator) forwards malloc, free and a few hooks and refuses the rest;
// this class answers every method, each by translating PyTorch's types into libmemsnap's public C
// API (recorder/memsnap.h) and back. It holds no policy of its own: every decision is the
// library's. What it keeps is what only PyTorch's types can hold: the GatheredContexts that
// PyTorch's recorder (recordHistory) asks for, with the TraceEntry ring they go in, and the
// filters of the captures underway, and the allocators that serve pools (MemPool(allocator=...)).
//
// Built once per PyTorch version by memsnap's Python package (recorder/python/memsnap/torch_cxx.py)
// with the user's compiler, linked against libc10, libc10_cuda, libtorch_cuda and libmemsnap, and
// installed by memsnap_torch_install() (torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator
// and c10::SetAllocator(kCUDA), before CUDA is initialised). Written against PyTorch 2.11's interface
// (c10/cuda/CUDACachingAllocator.h); a PyTorch whose interface differs fails to compile it, and
// memsnap then falls back to the pluggable allocator.
//
// Errors: libmemsnap returns codes; they become PyTorch's exceptions here (c10::OutOfMemoryError
// for out of memory, which Python sees as torch.OutOfMemoryError, c10::Error otherwise), except in
// the tensors' deleter, which must not throw (the library reports an invalid free itself).
#include <c10/core/impl/GPUTrace.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stack>
#include <tuple>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memsnap.h"

namespace {

using c10::CachingDeviceAllocator::AllocatorTraceTracker;
using c10::CachingDeviceAllocator::AnnotationEntry;
using c10::CachingDeviceAllocator::BlockInfo;
using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::SegmentInfo;
using c10::CachingDeviceAllocator::TraceEntry;
using c10::cuda::CUDAStream;
using c10::cuda::MempoolId_t;
using c10::cuda::CUDACachingAllocator::AllocatorState;
using c10::cuda::CUDACachingAllocator::CheckpointDelta;
using c10::cuda::CUDACachingAllocator::CUDAAllocator;
using c10::cuda::CUDACachingAllocator::OutOfMemoryObserver;
using c10::cuda::CUDACachingAllocator::ShareableHandle;
using c10::cuda::CUDACachingAllocator::SnapshotInfo;
using c10::cuda::CUDACachingAllocator::StreamSegmentSize;

constexpr size_t kOneExaByte = 1152921504606846976ULL;

std::string last_error() { return memsnap_last_error(); }

bool is_async() {
  char value[32];
  return memsnap_get_option("allocator", value, sizeof value) == MEMSNAP_OK && std::strcmp(value, "async") == 0;
}

// What PyTorch's cudaMallocAsync backend answers for a method it does not have.
[[noreturn]] void refuse_async(const char* what) {
  TORCH_CHECK(false, "cudaMallocAsync does not yet support ", what,
              ". If you need it, please file an issue describing your use case.");
}

// An exception an out-of-memory observer threw (a Python observer's error), kept to be raised in
// the allocation that failed, as PyTorch raises it there.
thread_local std::exception_ptr observer_error;

// PyTorch's recorder (recordHistory): the context gathered for the call in progress on this
// thread, given to its trace entries by the trace observer (which runs inside the call).
thread_local std::shared_ptr<c10::GatheredContext>* call_context = nullptr;
thread_local std::stack<std::string>* compile_contexts = nullptr;
thread_local std::string* user_metadata = nullptr;

// What every trace entry carries of them, as PyTorch's record_trace: the innermost compile region
// ("N/A" outside one) and the user's metadata ("" when none was set).
std::string current_compile_context() {
  return compile_contexts && !compile_contexts->empty() ? compile_contexts->top() : "N/A";
}
std::string current_user_metadata() { return user_metadata ? *user_metadata : std::string(); }

// The DataPtr deleter of every tensor: frees through memsnap, never throws.
void delete_block(void* ptr);

// ---- PyTorch's recorder: TraceEntries and the contexts of blocks --------------------------------

template <typename T>
struct Ring {  // PyTorch's RingBuffer: the last max_entries entries, oldest first when read
  size_t max_entries = 1;
  size_t next = 0;
  std::vector<T> entries;
  void set_max(size_t n) { max_entries = std::max<size_t>(1, n); }
  void insert(const T& e) {
    if (entries.size() < max_entries) {
      entries.push_back(e);
    } else {
      entries[next] = e;
      next = next + 1 == max_entries ? 0 : next + 1;
    }
  }
  void clear() {
    entries.clear();
    next = 0;
  }
  std::vector<T> read() const {
    std::vector<T> out(entries.begin() + static_cast<std::ptrdiff_t>(next), entries.end());
    out.insert(out.end(), entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(next));
    return out;
  }
};

struct Recorder {
  std::mutex mu;  // taken inside memsnap's device locks (the trace observer), never around a memsnap call
  std::atomic<bool> recording{false};
  std::atomic<int> when{static_cast<int>(RecordContext::NEVER)};
  std::atomic<CreateContextFn> gather{nullptr};
  std::vector<Ring<TraceEntry>> traces;  // by device
  Ring<AnnotationEntry> annotations;
  std::unordered_set<int> skip;  // TraceEntry::Action values left out of the traces
  std::map<uintptr_t, std::shared_ptr<c10::GatheredContext>> block_contexts;    // by block address
  std::map<uintptr_t, std::shared_ptr<c10::GatheredContext>> segment_contexts;  // by segment address
  std::vector<AllocatorTraceTracker> trackers;
  c10::ApproximateClockToUnixTimeConverter clock;

  // Forgets the contexts of blocks inside [addr, addr + size). mu held.
  void forget_range(uintptr_t addr, uint64_t size) {
    block_contexts.erase(block_contexts.lower_bound(addr), block_contexts.lower_bound(addr + size));
  }
};

Recorder& recorder() {
  static Recorder* r = new Recorder();  // never destroyed: contexts may hold Python state at exit
  return *r;
}

// What PyTorch's recorder keeps (RecordContext), copied out of the Recorder so that the tensors'
// hot path reads one global and nothing else when it keeps nothing (no static guard, no
// thread-local, no shared_ptr: issue 34's torch.empty + del).
std::atomic<int> recorded_when{static_cast<int>(RecordContext::NEVER)};

inline bool gathers(RecordContext level) {
  return C10_UNLIKELY(recorded_when.load(std::memory_order_relaxed) >= static_cast<int>(level));
}

// The context of a call about to reach memsnap, gathered outside memsnap's locks (PyTorch's
// maybeGatherContext): for allocations when the recorder keeps at least `level`.
std::shared_ptr<c10::GatheredContext> gather_context(RecordContext level) {
  if (!gathers(level)) return nullptr;
  CreateContextFn fn = recorder().gather.load();
  return fn ? fn() : nullptr;
}

// Makes `ctx` the calling thread's context for the memsnap call in its scope (an out-of-memory
// observer may allocate inside it: the outer call's context comes back after).
struct CallContext {
  std::shared_ptr<c10::GatheredContext> ctx;
  std::shared_ptr<c10::GatheredContext>* outer;
  explicit CallContext(std::shared_ptr<c10::GatheredContext> c) : ctx(std::move(c)), outer(call_context) {
    call_context = ctx ? &ctx : nullptr;
  }
  ~CallContext() { call_context = outer; }
};

bool action_of(int kind, TraceEntry::Action* out) {
  switch (kind) {
    case MEMSNAP_TRACE_ALLOC: *out = TraceEntry::ALLOC; return true;
    case MEMSNAP_TRACE_FREE_REQUESTED: *out = TraceEntry::FREE_REQUESTED; return true;
    case MEMSNAP_TRACE_FREE_COMPLETED: *out = TraceEntry::FREE_COMPLETED; return true;
    case MEMSNAP_TRACE_SEGMENT_ALLOC: *out = TraceEntry::SEGMENT_ALLOC; return true;
    case MEMSNAP_TRACE_SEGMENT_FREE: *out = TraceEntry::SEGMENT_FREE; return true;
    case MEMSNAP_TRACE_SEGMENT_MAP: *out = TraceEntry::SEGMENT_MAP; return true;
    case MEMSNAP_TRACE_SEGMENT_UNMAP: *out = TraceEntry::SEGMENT_UNMAP; return true;
    case MEMSNAP_TRACE_OOM: *out = TraceEntry::OOM; return true;
    default: return false;
  }
}

// memsnap's trace observer: every decision of the allocator, on the thread that made it, with its
// device lock held (as PyTorch records its trace and calls its trackers). Builds PyTorch's
// TraceEntry with the call's context, keeps the contexts of blocks and segments for snapshots.
void observe(const memsnap_trace_event* e, void*) {
  TraceEntry::Action action;
  if (!action_of(e->kind, &action)) return;
  Recorder& r = recorder();
  std::shared_ptr<c10::GatheredContext> ctx = call_context ? *call_context : nullptr;
  std::lock_guard<std::mutex> lock(r.mu);
  bool recording = r.recording.load(std::memory_order_relaxed);
  int when = r.when.load(std::memory_order_relaxed);
  switch (action) {
    case TraceEntry::ALLOC:
      if (when >= static_cast<int>(RecordContext::STATE)) r.block_contexts[e->address] = ctx;
      break;
    case TraceEntry::FREE_REQUESTED:
    case TraceEntry::FREE_COMPLETED: {
      auto it = r.block_contexts.find(e->address);
      if (it != r.block_contexts.end()) {
        if (!ctx) ctx = it->second;  // PyTorch's: the free's context, else the allocation's
        // and, as PyTorch's free_block, a block back in the cache keeps no context: a snapshot
        // shows the allocation's stack only while the block is allocated
        if (action == TraceEntry::FREE_COMPLETED) r.block_contexts.erase(it);
      }
      break;
    }
    case TraceEntry::SEGMENT_ALLOC:
      if (when >= static_cast<int>(RecordContext::STATE)) r.segment_contexts[e->address] = ctx;
      break;
    case TraceEntry::SEGMENT_FREE:
    case TraceEntry::SEGMENT_UNMAP:
      r.segment_contexts.erase(e->address);
      r.forget_range(e->address, e->size);
      break;
    default:
      break;
  }
  if (!recording && r.trackers.empty()) return;
  // the sizes PyTorch's entries carry: the size asked for of blocks, the bytes of segments
  bool blockwise = action == TraceEntry::ALLOC || action == TraceEntry::FREE_REQUESTED ||
                   action == TraceEntry::FREE_COMPLETED;
  size_t size = blockwise && e->requested_size ? e->requested_size : e->size;
  TraceEntry te(action, static_cast<c10::DeviceIndex>(e->device), e->address, size, e->stream, MempoolId_t{0, 0},
                c10::getApproximateTime(), when >= static_cast<int>(RecordContext::ALLOC) ? ctx : nullptr,
                current_compile_context(), current_user_metadata());
  for (const auto& tracker : r.trackers) tracker(te);
  if (recording && !r.skip.count(static_cast<int>(action)) && e->device >= 0 &&
      static_cast<size_t>(e->device) < r.traces.size())
    r.traces[e->device].insert(te);
}

// memsnap calls the observer only while PyTorch's recorder or a tracker wants its events.
void update_observer() {
  Recorder& r = recorder();
  bool wanted;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    wanted = r.recording.load() || !r.trackers.empty() ||
             r.when.load() >= static_cast<int>(RecordContext::STATE);
  }
  memsnap_set_trace_observer(wanted ? observe : nullptr, nullptr);
}

// ---- graph trees' checkpoints -------------------------------------------------------------------

struct PoolState : AllocatorState {
  memsnap_pool_state* state;
  explicit PoolState(memsnap_pool_state* s) : state(s) {}
  ~PoolState() override { memsnap_pool_checkpoint_free(state); }
};

// ---- MemPool(allocator=...): a pool whose segments another CUDAAllocator provides ---------------

using AllocatorRef = std::shared_ptr<CUDAAllocator>;  // kept by the pool until it is gone

int provide_segment(void* ctx, size_t size, int device, memsnap_stream_t stream, void** out) {
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    *out = (*static_cast<AllocatorRef*>(ctx))->raw_alloc_with_stream(size, stream);
  } catch (...) {  // its failure is an out of memory of the pool's
    *out = nullptr;
  }
  return *out ? MEMSNAP_OK : MEMSNAP_ENOMEM;
}

void give_back_segment(void* ctx, void* ptr, size_t, int device, memsnap_stream_t) {
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    (*static_cast<AllocatorRef*>(ctx))->raw_delete(ptr);
  } catch (...) {  // nothing to do about it here: the segment is the other allocator's
  }
}

void release_provider(void* ctx) { delete static_cast<AllocatorRef*>(ctx); }

// ---- free-memory callbacks: PyTorch's registry (the CUDA IPC blocks others released, collected) --

int collect_freed_memory(void*) {
  bool freed = false;
  try {
    for (const auto& name : c10::FreeCudaMemoryCallbacksRegistry()->Keys())
      freed |= c10::FreeCudaMemoryCallbacksRegistry()->Create(name)->Execute();
  } catch (...) {  // a failed collection frees nothing
  }
  return freed ? 1 : 0;
}

void oom_observer(int device, size_t size, size_t total, size_t free_bytes, void* arg) {
  try {
    (*static_cast<OutOfMemoryObserver*>(arg))(device, size, total, free_bytes);
  } catch (...) {
    if (!observer_error) observer_error = std::current_exception();
  }
}

// ---- the allocator ------------------------------------------------------------------------------

class MemsnapAllocator : public CUDAAllocator {
 public:
  // ---- c10::Allocator

  c10::DataPtr allocate(size_t size) override {
    TORCH_CHECK_WITH(OutOfMemoryError, size < kOneExaByte,
                     "CUDA out of memory. Tried to allocate more than 1EB memory.");
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    void* ptr = nullptr;
    if (size != 0) ptr = malloc_on(device, size, c10::cuda::getCurrentCUDAStream(device).stream());
    return {ptr, ptr, &delete_block, c10::Device(c10::DeviceType::CUDA, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const final {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyKind::cudaMemcpyDeviceToDevice));
  }

  // ---- c10::DeviceAllocator

  bool initialized() override { return initialized_.load(); }

  void emptyCache(MempoolId_t mempool_id) override {
    if (mempool_id.first == 0 && mempool_id.second == 0) {
      memsnap_empty_cache();
      return;
    }
    for (int d = 0; d < device_count(); d++)  // the pool's device empties it; the others have none
      memsnap_empty_pool_cache(d, mempool_id.first, mempool_id.second);
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device(device);
    memsnap_stats_t s;
    TORCH_CHECK(memsnap_get_stats(device, &s) == MEMSNAP_OK, "memsnap: ", last_error());
    DeviceStats out;
    auto copy = [](c10::CachingAllocator::Stat& to, const memsnap_stat_t& from) {
      to.current = from.current;
      to.peak = from.peak;
      to.allocated = from.allocated;
      to.freed = from.freed;
    };
    for (int k = 0; k < MEMSNAP_POOL_KINDS; k++) {  // memsnap's kinds are PyTorch's StatType order
      copy(out.allocation[k], s.allocation[k]);
      copy(out.segment[k], s.segment[k]);
      copy(out.active[k], s.active[k]);
      copy(out.inactive_split[k], s.inactive_split[k]);
      copy(out.allocated_bytes[k], s.allocated_bytes[k]);
      copy(out.reserved_bytes[k], s.reserved_bytes[k]);
      copy(out.active_bytes[k], s.active_bytes[k]);
      copy(out.inactive_split_bytes[k], s.inactive_split_bytes[k]);
      copy(out.requested_bytes[k], s.requested_bytes[k]);
    }
    copy(out.oversize_allocations, s.oversize_allocations);
    copy(out.oversize_segments, s.oversize_segments);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_sync_all_streams = s.num_sync_all_streams;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    out.max_split_size = s.max_split_size;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device(device);
    if (is_async()) {
      TORCH_WARN_ONCE("For backend:cudaMallocAsync, resetAccumulatedStats has no effect.");
    } else {
      memsnap_reset_accumulated_stats(device);
    }
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device(device);
    memsnap_reset_peak_stats(device);
  }

  // ---- c10::cuda::CUDACachingAllocator::CUDAAllocator

  void* raw_alloc(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return malloc_on(device, nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
  }

  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    if (nbytes == 0) return nullptr;
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return malloc_on(device, nbytes, stream);
  }

  void raw_delete(void* ptr) override {
    if (!ptr) return;
    CallContext call(gather_context(RecordContext::ALL));
    TORCH_CHECK(memsnap_release(ptr) == MEMSNAP_OK, "invalid device pointer: ", ptr);
  }

  void init(int device_count) override {
    // PyTorch's own settings parser reads PYTORCH_CUDA_ALLOC_CONF here too, so that a value it
    // refuses (per_process_memory_fraction:1.1) fails as with its own allocator, whose devices
    // read it when they start; its cudaMallocAsync backend never does, so neither does memsnap's
    // async mode (a value only the native backend reads, release_lock_on_cudamalloc:none, is
    // no error there)
    if (!is_async()) (void)c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig::per_process_memory_fraction();
    memsnap_init(device_count);
    devices_.store(device_count);
    initialized_.store(true);
  }

  double getMemoryFraction(c10::DeviceIndex device) override {
    check_device(device);
    double f = memsnap_get_memory_fraction(device);
    TORCH_CHECK(f >= 0, "memsnap: ", last_error());
    return f;
  }

  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    check_device(device);
    TORCH_CHECK(0 <= fraction && fraction <= 1, "invalid fraction:", fraction, ". Please set within (0, 1).");
    memsnap_set_memory_fraction(fraction, device);
  }

  std::vector<StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override {
    check_device(device);
    std::vector<StreamSegmentSize> out;
    for_segments(device, {0, 0}, [&](const memsnap_segment_info& s, const memsnap_block_info*) {
      if (!s.is_expandable) return;
      for (auto& o : out)
        if (o.stream == s.stream && o.is_small_pool == !s.is_large) {
          o.total_size += s.total_size;
          return;
        }
      out.emplace_back(s.stream, !s.is_large, s.total_size);
    });
    return out;
  }

  void enable(bool value) override { memsnap_set_caching(value ? 1 : 0); }  // the async mode ignores it, as PyTorch's backend

  bool isEnabled() const override { return memsnap_caching() != 0; }

  void cacheInfo(c10::DeviceIndex device, size_t* largestBlock) override {
    check_device(device);
    if (*largestBlock == 0) {  // as PyTorch: the device's free memory is the first guess
      c10::cuda::CUDAGuard guard(device);
      size_t total = 0;
      C10_CUDA_CHECK(cudaMemGetInfo(largestBlock, &total));
    }
    for_segments(device, {0, 0}, [&](const memsnap_segment_info& s, const memsnap_block_info* blocks) {
      for (size_t i = 0; i < s.n_blocks; i++)
        if (!blocks[i].active && blocks[i].size > *largestBlock) *largestBlock = blocks[i].size;
    });
  }

  void* getBaseAllocation(void* ptr, size_t* size) override {
    void* base = nullptr;
    size_t bytes = 0;
    TORCH_CHECK(memsnap_block_base(ptr, &base, &bytes) == MEMSNAP_OK, last_error());
    if (size) *size = bytes;
    return base;
  }

  void recordStream(const c10::DataPtr& ptr, CUDAStream stream) override {
    // nothing for an empty tensor, nor for memory memsnap did not allocate (received by IPC)
    if (!ptr.get() || ptr.get_deleter() != &delete_block) return;
    memsnap_record_stream(ptr.get(), stream.stream());
  }

  SnapshotInfo snapshot(MempoolId_t mempool_id, bool include_traces) override {
    if (is_async())
      TORCH_CHECK(false,
                  "Calling snapshot with backend:cudaMallocAsync is not meaningful. (For backend:native, snapshot "
                  "returns a detailed summary of all blocks tracked by the allocator, but the cudaMallocAsync backend "
                  "does not track individual blocks.)");
    SnapshotInfo result;
    Recorder& r = recorder();
    int n = device_count();
    // the segments first: memsnap's device locks are never taken inside the recorder's
    std::vector<SegmentInfo> segments;
    for (int d = 0; d < n; d++) {
      for_segments(static_cast<c10::DeviceIndex>(d), mempool_id,
                   [&](const memsnap_segment_info& s, const memsnap_block_info* blocks) {
                     SegmentInfo info;
                     info.device = static_cast<c10::DeviceIndex>(s.device);
                     info.address = s.address;
                     info.total_size = s.total_size;
                     info.stream = s.stream;
                     info.is_large = s.is_large != 0;
                     info.is_expandable = s.is_expandable != 0;
                     info.owner_private_pool_id = {s.pool_id[0], s.pool_id[1]};
                     for (size_t i = 0; i < s.n_blocks; i++) {
                       BlockInfo b;
                       b.size = blocks[i].size;
                       b.requested_size = blocks[i].requested_size;
                       b.allocated = blocks[i].allocated != 0;
                       b.active = blocks[i].active != 0;
                       if (b.allocated) info.allocated_size += b.size;
                       if (b.active) {
                         info.active_size += b.size;
                         info.requested_size += b.requested_size;
                       }
                       info.blocks.push_back(std::move(b));
                     }
                     segments.push_back(std::move(info));
                   });
    }
    auto to_us = r.clock.makeConverter();
    std::lock_guard<std::mutex> lock(r.mu);
    size_t total_active = 0;
    for (auto& s : segments) {
      auto seg = r.segment_contexts.find(s.address);
      if (seg != r.segment_contexts.end()) s.context_when_allocated = seg->second;
      uintptr_t at = s.address;
      for (auto& b : s.blocks) {
        auto ctx = r.block_contexts.find(at);
        if (ctx != r.block_contexts.end()) b.context_when_allocated = ctx->second;
        at += b.size;
      }
      total_active += s.active_size;
    }
    result.segments = std::move(segments);
    for (int d = 0; d < n; d++) {
      std::vector<TraceEntry> trace;
      if (include_traces && static_cast<size_t>(d) < r.traces.size()) {
        trace = r.traces[d].read();
        for (auto& te : trace) te.time_.t_ = to_us(te.time_.approx_t_) / 1000;
      }
      result.device_traces.emplace_back(std::move(trace));
    }
    if (r.recording.load()) {
      result.external_annotations = r.annotations.read();
      for (auto& ae : result.external_annotations) ae.time_.t_ = to_us(ae.time_.approx_t_) / 1000;
      // as PyTorch, the snapshot is an entry of the traces read next time, with the compile
      // region and user metadata every entry carries (its "N/A" outside a region is what
      // test_memory_compile_regions leaves out of the regions it compares)
      for (size_t d = 0; d < r.traces.size(); d++)
        if (!r.skip.count(static_cast<int>(TraceEntry::SNAPSHOT)))
          r.traces[d].insert(TraceEntry(TraceEntry::SNAPSHOT, static_cast<c10::DeviceIndex>(d), 0, total_active,
                                        nullptr, MempoolId_t{0, 0}, c10::getApproximateTime(), nullptr,
                                        current_compile_context(), current_user_metadata()));
    }
    fill_settings(result.config_metadata);
    return result;
  }

  void beginAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override {
    check_device(device);
    auto owned = std::make_unique<std::function<bool(cudaStream_t)>>(std::move(filter));
    std::lock_guard<std::mutex> lock(filters_mu_);
    int rc = memsnap_begin_allocate_to_pool(device, mempool_id.first, mempool_id.second, &call_filter, owned.get());
    TORCH_CHECK(rc == MEMSNAP_OK, "beginAllocateToPool: ", last_error());
    filters_[key(device, mempool_id)] = std::move(owned);  // kept until the matching end
    // PyTorch begins a graph's pool on its capture stream: named, the async mode notices a
    // capture whose end failed (PyTorch then never ends the pool)
    memsnap_pool_capture_stream(device, mempool_id.first, mempool_id.second,
                                c10::cuda::getCurrentCUDAStream(device).stream());
  }

  void endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id) override {
    check_device(device);
    std::lock_guard<std::mutex> lock(filters_mu_);
    int rc = memsnap_end_allocate_to_pool(device, mempool_id.first, mempool_id.second);
    filters_.erase(key(device, mempool_id));
    TORCH_CHECK(rc == MEMSNAP_OK, "endAllocatePool: not currently recording to mempool_id (", last_error(), ")");
  }

  void releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) override {
    check_device(device);
    TORCH_CHECK(memsnap_release_pool(device, mempool_id.first, mempool_id.second) == MEMSNAP_OK, "releasePool: ",
                last_error());
  }

  int getPoolUseCount(c10::DeviceIndex device, MempoolId_t mempool_id) override {
    check_device(device);
    int n = memsnap_pool_use_count(device, mempool_id.first, mempool_id.second);
    return n < 0 ? 0 : n;  // a pool gone has no users
  }

  void createOrIncrefPool(c10::DeviceIndex device, MempoolId_t mempool_id,
                          std::shared_ptr<CUDAAllocator> allocator) override {
    check_device(device);
    if (is_async()) refuse_async("createOrIncrefPool");
    TORCH_CHECK(memsnap_create_pool(device, mempool_id.first, mempool_id.second) == MEMSNAP_OK, "createOrIncrefPool: ",
                last_error());
    if (allocator && memsnap_pool_use_count(device, mempool_id.first, mempool_id.second) == 1) {
      // a new pool served by another allocator (MemPool(allocator=...)): its segments come from it
      int rc = memsnap_pool_set_provider(device, mempool_id.first, mempool_id.second, &provide_segment,
                                         &give_back_segment, new AllocatorRef(std::move(allocator)), &release_provider);
      TORCH_CHECK(rc == MEMSNAP_OK, "createOrIncrefPool: ", last_error());
    }
  }

  void setUseOnOOM(c10::DeviceIndex device, MempoolId_t mempool_id, bool use_on_oom) override {
    check_device(device);
    TORCH_CHECK(memsnap_pool_set_flags(device, mempool_id.first, mempool_id.second, use_on_oom ? 1 : 0, -1) ==
                    MEMSNAP_OK,
                "setUseOnOOM: ", last_error());
  }

  void setNoSplit(c10::DeviceIndex device, MempoolId_t mempool_id) override {
    check_device(device);
    TORCH_CHECK(memsnap_pool_set_flags(device, mempool_id.first, mempool_id.second, -1, 1) == MEMSNAP_OK,
                "setNoSplit: ", last_error());
  }

  bool checkPoolLiveAllocations(c10::DeviceIndex device, MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected_live_allocations) override {
    check_device(device);
    if (is_async()) refuse_async("checkPoolLiveAllocations");
    std::vector<uint64_t> ptrs;
    ptrs.reserve(expected_live_allocations.size());
    for (void* p : expected_live_allocations) ptrs.push_back(reinterpret_cast<uint64_t>(p));
    std::sort(ptrs.begin(), ptrs.end());
    int rc = memsnap_pool_live_allocations_match(device, mempool_id.first, mempool_id.second, ptrs.data(), ptrs.size());
    TORCH_CHECK(rc >= 0, "Could not find pool of id");
    return rc == 1;
  }

  ShareableHandle shareIpcHandle(void* ptr) override {
    if (is_async()) refuse_async("shareIpcHandle");
    char* handle = nullptr;
    size_t len = 0, offset = 0;
    int rc = memsnap_ipc_share(ptr, &handle, &len, &offset);
    TORCH_CHECK(rc == MEMSNAP_OK, last_error());
    std::string bytes(handle, len);
    std::free(handle);
    return ShareableHandle{static_cast<ptrdiff_t>(offset), std::move(bytes)};
  }

  std::shared_ptr<void> getIpcDevPtr(std::string handle) override {
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    void* base = nullptr;
    int rc = memsnap_ipc_open(handle.data(), handle.size(), device, &base);
    TORCH_CHECK(rc == MEMSNAP_OK, last_error());
    return std::shared_ptr<void>(base, [](void* p) { memsnap_ipc_close(p); });
  }

  bool isHistoryEnabled() override { return recorder().recording.load(); }

  void recordHistory(bool enabled, CreateContextFn context_recorder, size_t alloc_trace_max_entries,
                     RecordContext when, bool clearHistory, const std::vector<std::string>& skip_actions) override {
    if (is_async()) refuse_async("recordHistory");
    TORCH_CHECK(when == RecordContext::NEVER || context_recorder);
    Recorder& r = recorder();
    {
      std::lock_guard<std::mutex> lock(r.mu);
      r.recording.store(enabled);
      r.gather.store(enabled ? context_recorder : nullptr);
      r.when.store(static_cast<int>(enabled ? when : RecordContext::NEVER));
      recorded_when.store(r.when.load());
      r.traces.resize(static_cast<size_t>(std::max(device_count(), 1)));
      for (auto& t : r.traces) {
        t.set_max(alloc_trace_max_entries);
        if (!enabled || clearHistory) t.clear();
      }
      r.annotations.set_max(alloc_trace_max_entries);
      if (!enabled || clearHistory) r.annotations.clear();
      r.skip.clear();
      for (const auto& a : skip_actions)
        r.skip.insert(static_cast<int>(c10::CachingDeviceAllocator::parseTraceEntryAction(a)));
      if (!enabled) {
        r.block_contexts.clear();
        r.segment_contexts.clear();
      }
    }
    update_observer();
  }

  void recordAnnotation(const std::vector<std::pair<std::string, std::string>>& md) override {
    Recorder& r = recorder();
    if (!r.recording.load()) return;
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    AnnotationEntry ae(device, c10::getApproximateTime());
    for (const auto& kv : md) ae.recordUserMetadata(kv.first, kv.second);
    std::lock_guard<std::mutex> lock(r.mu);
    r.annotations.insert(ae);
  }

  // As PyTorch's: pushed and popped whether the recorder records or not (PyTorch's recorder adds
  // the callbacks that call these only while it records with compile_context=True), so that a
  // region entered before recording stops and left after pops what it pushed.
  void pushCompileContext(std::string& md) override {
    if (!compile_contexts) compile_contexts = new std::stack<std::string>();
    compile_contexts->push(md);
  }

  void popCompileContext() override {
    if (compile_contexts && !compile_contexts->empty()) compile_contexts->pop();
  }

  void setUserMetadata(const std::string& metadata) override {
    if (!user_metadata) user_metadata = new std::string();
    *user_metadata = metadata;
  }

  std::string getUserMetadata() override { return current_user_metadata(); }

  void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override {
    if (is_async()) refuse_async("attachOutOfMemoryObserver");
    auto* kept = new OutOfMemoryObserver(std::move(observer));  // called for the process's life
    if (memsnap_add_oom_observer(&oom_observer, kept) != MEMSNAP_OK) {
      delete kept;
      TORCH_CHECK(false, "memsnap: ", last_error());
    }
  }

  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override {
    {
      std::lock_guard<std::mutex> lock(recorder().mu);
      recorder().trackers.push_back(std::move(tracker));
    }
    update_observer();
  }

  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    // memsnap maps expandable pages and its async pool for every peer that can reach them from the
    // start (MEMSNAP_PEER_ACCESS=1); what is left is the runtime's peer access, as PyTorch does it
    c10::cuda::CUDAGuard guard(dev);
    cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
    else C10_CUDA_CHECK(err);
  }

  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override {
    if (p2p_enabled || srcDevice == dstDevice)
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    // without peer access, only the peer copy handles memory not from cudaMalloc (expandable, async)
    return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
  }

  std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex device, MempoolId_t id) override {
    check_device(device);
    if (is_async()) refuse_async("getCheckpointState");
    memsnap_pool_state* s = memsnap_pool_checkpoint(device, id.first, id.second);
    TORCH_CHECK(s, last_error());
    return std::make_shared<PoolState>(s);
  }

  CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device, std::shared_ptr<AllocatorState> pps) override {
    check_device(device);
    if (is_async()) refuse_async("setCheckpointPoolState");
    auto state = std::dynamic_pointer_cast<PoolState>(pps);
    TORCH_CHECK(state, "Expected PrivatePoolState");
    void **freed = nullptr, **allocated = nullptr;
    size_t n_freed = 0, n_allocated = 0;
    CallContext call(gather_context(RecordContext::STATE));
    int rc = memsnap_pool_restore(device, state->state, &freed, &n_freed, &allocated, &n_allocated);
    TORCH_CHECK(rc == MEMSNAP_OK, last_error());
    CheckpointDelta delta;
    for (size_t i = 0; i < n_freed; i++) delta.ptrs_freed.push_back(freed[i]);
    for (size_t i = 0; i < n_allocated; i++)
      delta.dataptrs_allocd.emplace_back(allocated[i], allocated[i], &delete_block,
                                         c10::Device(c10::DeviceType::CUDA, device));
    std::free(freed);
    std::free(allocated);
    return delta;
  }

  std::string name() override { return is_async() ? "cudaMallocAsync" : "native"; }

 private:
  std::atomic<bool> initialized_{false};
  std::atomic<int> devices_{0};
  std::mutex filters_mu_;
  std::map<std::tuple<int, uint64_t, uint64_t>, std::unique_ptr<std::function<bool(cudaStream_t)>>> filters_;

  static std::tuple<int, uint64_t, uint64_t> key(c10::DeviceIndex device, MempoolId_t id) {
    return std::make_tuple(static_cast<int>(device), static_cast<uint64_t>(id.first), static_cast<uint64_t>(id.second));
  }

  static int call_filter(void* ctx, memsnap_stream_t stream) {
    try {
      return (*static_cast<std::function<bool(cudaStream_t)>*>(ctx))(stream) ? 1 : 0;
    } catch (...) {  // an error in PyTorch's filter: not this capture's stream
      return 0;
    }
  }

  int device_count() {
    int n = devices_.load();
    if (n == 0) n = std::max(memsnap_device_count(), 0);
    return n;
  }

  void check_device(c10::DeviceIndex device) {
    TORCH_CHECK(0 <= device && device < device_count(), "Invalid device argument ", device, ": did you call init?");
  }

  // An allocation of memsnap's, its failure turned into PyTorch's exception.
  void* malloc_on(c10::DeviceIndex device, size_t size, cudaStream_t stream) {
    void* ptr = nullptr;
    int rc;
    if (C10_LIKELY(!gathers(RecordContext::STATE))) {
      rc = memsnap_alloc(&ptr, size, device, stream);
    } else {
      CallContext call(gather_context(RecordContext::STATE));
      rc = memsnap_alloc(&ptr, size, device, stream);
    }
    if (C10_LIKELY(rc == MEMSNAP_OK)) {
      const c10::impl::PyInterpreter* interp = c10::impl::GPUTrace::get_trace();
      if (C10_UNLIKELY(interp))
        (*interp)->trace_gpu_memory_allocation(c10::kCUDA, reinterpret_cast<uintptr_t>(ptr));
      if (C10_UNLIKELY(c10::memoryProfilingEnabled())) report_to_profiler(ptr, device);
      return ptr;
    }
    if (observer_error) {  // an out-of-memory observer raised: its error, as PyTorch raises it
      std::exception_ptr e = observer_error;
      observer_error = nullptr;
      std::rethrow_exception(e);
    }
    std::string message = last_error();
    if (rc == MEMSNAP_ENOMEM) {
      // as PyTorch's backends: the caching one tells the profiler, the cudaMallocAsync one does
      // not (its statistics read the driver's pool, which would invalidate a capture underway:
      // test_graph_capture_oom)
      memsnap_stats_t s;
      if (!is_async() && memsnap_get_stats(device, &s) == MEMSNAP_OK)
        c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(size), s.allocated_bytes[MEMSNAP_POOL_ALL].current,
                                         s.reserved_bytes[MEMSNAP_POOL_ALL].current,
                                         c10::Device(c10::DeviceType::CUDA, device));
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    }
    TORCH_CHECK(false, "memsnap: ", message);
  }

  template <typename Fn>
  void for_segments(c10::DeviceIndex device, MempoolId_t id, Fn fn) {
    memsnap_segment_info* segs = nullptr;
    memsnap_block_info* blocks = nullptr;
    size_t n_segs = 0, n_blocks = 0;
    int rc = memsnap_copy_segments(device, id.first, id.second, &segs, &n_segs, &blocks, &n_blocks);
    std::unique_ptr<memsnap_segment_info, decltype(&std::free)> s_guard(segs, &std::free);
    std::unique_ptr<memsnap_block_info, decltype(&std::free)> b_guard(blocks, &std::free);
    TORCH_CHECK(rc == MEMSNAP_OK, "memsnap: ", last_error());
    for (size_t i = 0; i < n_segs; i++) fn(segs[i], blocks + segs[i].first_block);
  }

  // The allocator's settings as PyTorch's snapshot reports them: memsnap's for what it decides,
  // PyTorch's parser's for the pinned host allocator, which memsnap does not serve.
  static void fill_settings(c10::cuda::CUDACachingAllocator::AllocatorConfigInfo& md) {
    using Config = c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig;
    char value[1100];
    auto option = [&](const char* name) -> std::string {
      return memsnap_get_option(name, value, sizeof value) == MEMSNAP_OK ? std::string(value) : std::string();
    };
    std::string split = option("max_split_size_mb");
    md.max_split_size = split == "unlimited" || split.empty() ? SIZE_MAX : std::stoull(split) << 20;
    md.garbage_collection_threshold = std::strtod(option("garbage_collection_threshold").c_str(), nullptr);
    md.expandable_segments = option("expandable_segments") == "1";
    md.pinned_num_register_threads = Config::pinned_num_register_threads();
    md.release_lock_on_malloc = Config::release_lock_on_cudamalloc();
    md.pinned_use_host_register = Config::pinned_use_cuda_host_register();
    md.graph_capture_record_stream_reuse = Config::graph_capture_record_stream_reuse();
    md.last_allocator_settings = c10::CachingAllocator::getAllocatorSettings();
    md.roundup_power2_divisions.assign(16, 0);  // memsnap prints "[1:d0,2:d1,...]"
    std::string divisions = option("roundup_power2_divisions");
    size_t k = 0;
    for (size_t pos = divisions.find(':'); pos != std::string::npos && k < 16; pos = divisions.find(':', pos + 1))
      md.roundup_power2_divisions[k++] = std::strtoull(divisions.c_str() + pos + 1, nullptr, 10);
  }

  // PyTorch's profiler is told of each block (its rounded size) and the totals after it.
  static void report_to_profiler(void* ptr, c10::DeviceIndex device) {
    memsnap_stats_t s;
    size_t size = 0;
    int owner = device;
    if (memsnap_block_size(ptr, &size, &owner) != MEMSNAP_OK || memsnap_get_stats(device, &s) != MEMSNAP_OK) return;
    c10::reportMemoryUsageToProfiler(ptr, static_cast<int64_t>(size), s.allocated_bytes[MEMSNAP_POOL_ALL].current,
                                     s.reserved_bytes[MEMSNAP_POOL_ALL].current,
                                     c10::Device(c10::DeviceType::CUDA, device));
  }
};

// What delete_block does beyond the free itself: the recorder's context, PyTorch's GPU trace
// and its memory profiler, each while asked for.
void delete_block_observed(void* ptr) {
  CallContext call(gather_context(RecordContext::ALL));
  const c10::impl::PyInterpreter* interp = c10::impl::GPUTrace::get_trace();
  if (C10_UNLIKELY(interp)) (*interp)->trace_gpu_memory_deallocation(c10::kCUDA, reinterpret_cast<uintptr_t>(ptr));
  size_t size = 0;
  int device = -1;
  bool profiling = c10::memoryProfilingEnabled() && memsnap_block_size(ptr, &size, &device) == MEMSNAP_OK;
  memsnap_free(ptr, 0, device, nullptr);  // an invalid free is reported by the library, never thrown here
  memsnap_stats_t s;
  if (profiling && memsnap_get_stats(device, &s) == MEMSNAP_OK)  // as PyTorch tells its profiler, after the free
    c10::reportMemoryUsageToProfiler(ptr, -static_cast<int64_t>(size), s.allocated_bytes[MEMSNAP_POOL_ALL].current,
                                     s.reserved_bytes[MEMSNAP_POOL_ALL].current,
                                     c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
}

void delete_block(void* ptr) {
  if (!ptr) return;
  if (C10_UNLIKELY(gathers(RecordContext::ALL) || c10::impl::GPUTrace::get_trace() || c10::memoryProfilingEnabled()))
    return delete_block_observed(ptr);
  memsnap_free(ptr, 0, -1, nullptr);  // an invalid free is reported by the library, never thrown here
}

std::shared_ptr<MemsnapAllocator>& installed() {
  static auto* a = new std::shared_ptr<MemsnapAllocator>();  // kept for the process's life
  return *a;
}

}  // namespace

extern "C" {

// The interface version of this file (memsnap's Python package refuses another).
__attribute__((visibility("default"))) int memsnap_torch_abi(void) { return 1; }

// Makes memsnap PyTorch's CUDA allocator, the device-generic one (c10::GetAllocator(kCUDA)) too.
// 0, or -1 with the reason in *error (valid until the next call): PyTorch refuses to swap an
// initialised allocator.
__attribute__((visibility("default"))) int memsnap_torch_install(const char** error) {
  static std::string message;
  try {
    if (!installed()) installed() = std::make_shared<MemsnapAllocator>();
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(installed());
    // changeCurrentAllocator swaps c10::cuda::CUDACachingAllocator's allocator only; the
    // device-generic registry (c10::GetAllocator(kCUDA), behind c10::getDeviceAllocator and so
    // torch.accelerator's memory functions) still names PyTorch's own, which its static
    // initializer set at priority 0. Same priority wins; a higher one if something outranked it.
    c10::SetAllocator(c10::kCUDA, installed().get(), 0);
    if (c10::GetAllocator(c10::kCUDA) != installed().get())
      c10::SetAllocator(c10::kCUDA, installed().get(), std::numeric_limits<uint8_t>::max());
    memsnap_add_free_memory_callback(&collect_freed_memory, nullptr);
    return 0;
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown error";
  }
  if (error) *error = message.c_str();
  return -1;
}

// Whether memsnap's C++ allocator is PyTorch's current CUDA allocator.
__attribute__((visibility("default"))) int memsnap_torch_is_current(void) {
  return installed() && c10::cuda::CUDACachingAllocator::get() == installed().get() &&
         c10::GetAllocator(c10::kCUDA) == installed().get();
}

}  // extern "C"
