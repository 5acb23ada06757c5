/* memsnap.h: public API of libmemsnap, a CUDA caching allocator that records memory history.
 *
 * Two ways in:
 *   - PyTorch's pluggable allocator ABI (memsnap_malloc / memsnap_free and the optional hooks
 *     memsnap_init, memsnap_empty_cache, memsnap_set_memory_fraction, memsnap_record_stream);
 *   - C and CUDA programs, which call the same functions directly and read statistics with
 *     memsnap_get_stats().
 *
 * Streams are CUDA streams: memsnap_stream_t is the same type as cudaStream_t and CUstream, so
 * a cudaStream_t can be passed as it is. Stream 0 is the legacy default stream.
 *
 * Configuration comes from environment variables (MEMSNAP_BACKEND, MEMSNAP_SIM_CAPACITY, ...),
 * read once at initialisation; `memsnap options` lists them and docs/options.md documents them.
 *
 * Errors: functions that can fail return NULL or a negative MEMSNAP_E* code and leave a
 * message for memsnap_last_error(). The library never prints on the allocation path and never
 * exits the process (except on out of memory when MEMSNAP_OOM=abort asks it to).
 */
#ifndef MEMSNAP_H
#define MEMSNAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEMSNAP_VERSION "0.1.0"

typedef struct CUstream_st *memsnap_stream_t; /* == cudaStream_t == CUstream */

/* Error codes (negative return values). */
#define MEMSNAP_OK 0
#define MEMSNAP_ENOMEM (-1)   /* the device (or the memory fraction) has no room */
#define MEMSNAP_EINVAL (-2)   /* bad argument: unknown device, pointer not ours, bad option */
#define MEMSNAP_EBACKEND (-3) /* the device backend failed (driver error, no GPU) */

/* ---- PyTorch pluggable allocator ABI ------------------------------------------------------ */

/* Allocates `size` bytes on `device` for use on `stream`. Returns NULL for size 0 and on
 * failure. The MEMSNAP_OOM option decides what a failure does: null returns NULL; throw raises
 * torch.OutOfMemoryError on out of memory and a RuntimeError for any other failure (a driver
 * error), C++ exceptions that PyTorch turns into Python ones; abort aborts on out of memory
 * (other failures return NULL). */
void *memsnap_malloc(ssize_t size, int device, memsnap_stream_t stream);

/* Returns a block to the cache. `size` and `stream` are those of the allocation; the block is
 * reused only after every stream recorded with memsnap_record_stream() has passed this point.
 * Freeing NULL does nothing. Freeing a pointer memsnap does not own (a double free, a foreign
 * pointer, a pointer inside a block) frees nothing and changes no state: it is counted
 * (num_invalid_frees), recorded as an invalid_free event while recording, reported on stderr
 * once per call site and in memsnap_last_error(); MEMSNAP_INVALID_FREE=abort ends the process
 * instead (after the MEMSNAP_DUMP snapshot, if set). */
void memsnap_free(void *ptr, ssize_t size, int device, memsnap_stream_t stream);

/* Initialises the library for `device_count` devices (PyTorch's init_fn). Optional: the first
 * allocation initialises lazily. Safe to call more than once. */
void memsnap_init(int device_count);

/* Releases every cached, unused segment of every device back to the device (PyTorch's
 * reset_fn, so torch.cuda.empty_cache() works). Waits for outstanding stream events first. */
void memsnap_empty_cache(void);

/* Caps the memory memsnap may reserve on `device` at fraction * total device memory, like
 * torch.cuda.set_per_process_memory_fraction(). fraction must be in [0, 1]. */
void memsnap_set_memory_fraction(double fraction, int device);

/* The memory fraction of `device` as torch.cuda.get_per_process_memory_fraction() gives it:
 * 1.0 when none is set, else the capped bytes over the device's total memory. A negative
 * MEMSNAP_E* code for an unknown device or a backend that cannot start. */
double memsnap_get_memory_fraction(int device);

/* Marks `ptr` as used on `stream` (torch.Tensor.record_stream): when the block is freed, it is
 * not reused until the work queued on `stream` at free time has completed. */
void memsnap_record_stream(void *ptr, memsnap_stream_t stream);

/* ---- Direct C API ------------------------------------------------------------------------- */

/* Allocates like memsnap_malloc() but returns MEMSNAP_OK and stores the pointer in *out, or a
 * negative MEMSNAP_E* code with *out set to NULL. Never throws, never aborts. */
int memsnap_alloc(void **out, size_t size, int device, memsnap_stream_t stream);

/* Frees a pointer from memsnap_alloc()/memsnap_malloc(), looking up its device and stream.
 * Returns MEMSNAP_OK, or MEMSNAP_EINVAL if memsnap does not own `ptr` (counted and recorded as
 * an invalid free like memsnap_free's, but never printed nor fatal: the caller has the code). */
int memsnap_release(void *ptr);

/* Message for the last error on this thread ("" if none). Valid until the next call. */
const char *memsnap_last_error(void);

/* Name of the active backend ("cuda" or "sim"), initialising the library if needed; NULL if
 * initialisation failed. */
const char *memsnap_backend_name(void);

/* Reads the options from the environment now (they are read once: later changes to the
 * variables are not seen) without starting the backend: CUDA stays uninitialised, so a process
 * that never touches the device may still fork children that use it. Cannot fail (a bad value is
 * warned about on stderr and replaced by its default). memsnap.enable() calls it. */
void memsnap_read_options(void);

/* Describes option i of the options table: returns its environment variable name
 * ("MEMSNAP_BACKEND", ...) and sets *default_value and *comment, or returns NULL past the end. */
const char *memsnap_option_info(int i, const char **default_value, const char **comment);

/* Changes an option while running:
 * `name` is the option ("oom") or its variable ("MEMSNAP_OOM"). Only MEMSNAP_OOM and
 * MEMSNAP_GARBAGE_COLLECTION_THRESHOLD may change at run time; the others shape the segments
 * and are read from the environment once (by this call, if it is the first: the device is not
 * started). Returns MEMSNAP_OK or MEMSNAP_EINVAL (message set). */
int memsnap_set_option(const char *name, const char *value);

/* Writes the effective value of option `name` ("oom" or "MEMSNAP_OOM") into value[len], as
 * `memsnap options` and a snapshot's options spell it ("async", "1", "unlimited"...), reading
 * the environment first if nothing did (the device is not started). Returns MEMSNAP_OK, or
 * MEMSNAP_EINVAL for an unknown name (message set). */
int memsnap_get_option(const char *name, char *value, size_t len);

/* Number of devices the backend sees, or a negative MEMSNAP_E* code. */
int memsnap_device_count(void);

/* Verifies every invariant of `device`'s allocator state (block states, segment links, free
 * trees, statistics recomputed from the blocks). Returns MEMSNAP_OK, or MEMSNAP_EINVAL with the
 * first broken invariant in memsnap_last_error(). Slow: for tests and debugging. */
int memsnap_check(int device);

/* Writes the MEMSNAP_DUMP snapshot if one is set (and not written yet), then releases every
 * block and segment and forgets all state; the next call re-reads the environment. Pointers handed out before are invalid afterwards. For tests and for programs
 * that want a clean exit. */
void memsnap_shutdown(void);

/* ---- Statistics (same keys and meanings as torch.cuda.memory_stats()) --------------------- */

typedef struct memsnap_stat {
  int64_t current; /* value now */
  int64_t peak;    /* highest value since the last peak reset */
  int64_t allocated; /* sum of all increases since the last accumulated reset */
  int64_t freed;     /* sum of all decreases since the last accumulated reset */
} memsnap_stat_t;

enum { MEMSNAP_POOL_ALL = 0, MEMSNAP_POOL_SMALL = 1, MEMSNAP_POOL_LARGE = 2, MEMSNAP_POOL_KINDS = 3 };

typedef struct memsnap_stats {
  memsnap_stat_t allocation[MEMSNAP_POOL_KINDS];     /* number of allocated blocks */
  memsnap_stat_t segment[MEMSNAP_POOL_KINDS];        /* number of device allocations held */
  memsnap_stat_t active[MEMSNAP_POOL_KINDS];         /* allocated or waiting on stream events */
  memsnap_stat_t inactive_split[MEMSNAP_POOL_KINDS]; /* free blocks inside partly used segments */
  memsnap_stat_t allocated_bytes[MEMSNAP_POOL_KINDS];
  memsnap_stat_t reserved_bytes[MEMSNAP_POOL_KINDS];
  memsnap_stat_t active_bytes[MEMSNAP_POOL_KINDS];
  memsnap_stat_t inactive_split_bytes[MEMSNAP_POOL_KINDS];
  memsnap_stat_t requested_bytes[MEMSNAP_POOL_KINDS]; /* sizes as asked for, before rounding */
  memsnap_stat_t oversize_allocations; /* allocations of at least max_split_size */
  memsnap_stat_t oversize_segments;    /* segments of at least max_split_size */
  int64_t num_alloc_retries;    /* device allocations retried after freeing the cache */
  int64_t num_ooms;             /* out-of-memory errors returned */
  int64_t num_sync_all_streams; /* waits for every outstanding event (empty_cache) */
  int64_t num_device_alloc;     /* device allocation calls (cudaMalloc) */
  int64_t num_device_free;      /* device free calls (cudaFree) */
  int64_t max_split_size;       /* the option in bytes; -1 when unlimited, as in PyTorch */
  int64_t num_invalid_frees;    /* frees of pointers memsnap did not own (double, foreign, interior);
                                   memsnap's own: PyTorch's allocator refuses them */
} memsnap_stats_t;

/* Copies the statistics of `device` into *out. Returns MEMSNAP_OK or MEMSNAP_EINVAL. A device
 * that never allocated reports zeros. */
int memsnap_get_stats(int device, memsnap_stats_t *out);

/* Resets peak values to current values (torch.cuda.reset_peak_memory_stats). */
int memsnap_reset_peak_stats(int device);

/* Resets the allocated/freed sums and the counters (torch.cuda.reset_accumulated_memory_stats). */
int memsnap_reset_accumulated_stats(int device);

/* Flat view for bindings: the number of statistics, the dotted key of statistic i in
 * torch.cuda.memory_stats() spelling ("allocated_bytes.all.current", "num_ooms", ...) or NULL
 * past the end, and the values of `device` in that order. memsnap_get_stats_flat() returns the
 * number of values written, or a negative MEMSNAP_E* code. */
int memsnap_stat_count(void);
const char *memsnap_stat_key(int i);
int memsnap_get_stats_flat(int device, int64_t *values, int capacity);

/* ---- History recording and snapshots ----------------------------------------------------- */

/* Starts recording allocator events into a ring of `max_entries` events (0: MEMSNAP_MAX_ENTRIES)
 * with stacks per `stacks` ("none", "native", "python", "all"; NULL: MEMSNAP_STACKS). Starting
 * again with another size starts a new, empty ring. Whether frees record their stacks is
 * MEMSNAP_CONTEXT ("all", the default, or "alloc"; memsnap_set_option("context", ...) changes it
 * at any time). Returns MEMSNAP_OK, MEMSNAP_EINVAL for a bad `stacks`, or MEMSNAP_ENOMEM when
 * the ring cannot be allocated. */
int memsnap_record_start(size_t max_entries, const char *stacks);

/* Stops recording; the ring keeps what it holds for memsnap_dump(). Returns MEMSNAP_OK. */
int memsnap_record_stop(void);

/* What the stack captures did so far in this process, for finding where recording's cost goes
 * (docs/allocator.md, "Stack counters"): fills values[0..n) and, when keys is not NULL, keys[0..n)
 * with the counters' names ("captures", "native_cached", ..., "python_reader"), n the smaller of
 * capacity and the number of counters. Returns n; -1 for a negative capacity or NULL values. */
int memsnap_stack_counters(const char **keys, uint64_t *values, int capacity);

/* Empties the ring: the events recorded so far are forgotten (not counted as dropped), and the
 * next snapshot's times count from now; recording goes on if it was on (PyTorch's
 * _record_memory_history(clear_history=True)). Returns MEMSNAP_OK. */
int memsnap_record_clear(void);

/* Writes a snapshot (docs/snapshot-format.md): the allocator's state now, the recorded events,
 * marks, ranges and stacks, as one SQLite file, atomically (a reader sees the old file or the
 * new one). `path` may hold %p (pid), %r (rank), %h (host), %t (Unix time). Works without
 * recording (state only). Returns MEMSNAP_OK, or a negative code with the reason set. */
int memsnap_dump(const char *path);

/* Writes the MEMSNAP_DUMP snapshot now if one is set and not written yet; the dump at exit is
 * then skipped. For hosts whose own exit runs first (memsnap's Python module calls it from
 * Python's atexit, while Python frames can still be named). Returns MEMSNAP_OK or the dump's
 * error. */
int memsnap_dump_exit(void);

/* Records an instant mark; each mark starts an iteration that lasts until the next mark with
 * the same label. Returns MEMSNAP_OK (also when not recording: nothing is recorded). */
int memsnap_mark(const char *label);

/* Opens a nested range on the calling thread (NVTX style) / closes the innermost one.
 * memsnap_range_pop returns MEMSNAP_EINVAL when no range is open on this thread. */
int memsnap_range_push(const char *label);
int memsnap_range_pop(void);

/* ---- What a framework tells the history: its model's language ------------------------------
 * PyTorch's layer of memsnap's Python package (recorder/python/memsnap/torch_model.py) tells the
 * history which module runs forward or backward, which blocks hold parameters, gradients and
 * optimizer state, where optimizer steps begin, end or are skipped, and when backward passes run
 * (docs/snapshot-format.md: the module, tensor, step and backward events). Each call records its
 * event on the calling thread while the ring records, and does nothing otherwise; none is on the
 * allocation path. They return MEMSNAP_OK, or MEMSNAP_EINVAL for a bad argument (nothing is
 * recorded). */

/* The label id of `text` (interned once, as marks' and ranges' labels are): >= 1, or
 * MEMSNAP_EINVAL for NULL or "", MEMSNAP_ENOMEM when it cannot be kept. Ids name the module (its path in
 * the model, "GPT2LMHeadModel.transformer.h.3.mlp") or the optimizer ("AdamW") of the events. */
int memsnap_label(const char *text);

/* A module (label: its path) begins or ends its forward or its backward on the calling thread. */
enum {
  MEMSNAP_MODULE_FORWARD = 0,
  MEMSNAP_MODULE_FORWARD_END = 1,
  MEMSNAP_MODULE_BACKWARD = 2,
  MEMSNAP_MODULE_BACKWARD_END = 3
};
int memsnap_module_event(int label, int what);

/* n tensors seen by their role: storage[i] is the data pointer of tensor i's storage (the block
 * that holds it), bytes[i] the tensor's own bytes, role[i] a MEMSNAP_TENSOR_*, label[i] the
 * module it belongs to (0: none known), device[i] its device. */
enum {
  MEMSNAP_TENSOR_PARAMETER = 1,
  MEMSNAP_TENSOR_GRADIENT = 2,
  MEMSNAP_TENSOR_OPTIMIZER_STATE = 3,
  MEMSNAP_TENSOR_BUFFER = 4
};
int memsnap_tensor_events(size_t n, const uint64_t *storage, const uint64_t *bytes, const uint8_t *role,
                          const int32_t *label, const int16_t *device);

/* An optimizer's step (label: the optimizer's class) begins, ends, or was skipped (GradScaler
 * found infinite or NaN gradients and did not call it). */
enum { MEMSNAP_STEP_BEGIN = 1, MEMSNAP_STEP_END = 2, MEMSNAP_STEP_SKIPPED = 3 };
int memsnap_step_event(int label, int what);

/* A backward pass begins on the calling thread (torch.autograd's engine is called) / ends. The
 * begin captures the calling thread's Python frames: until the matching end, an allocation on a
 * thread that has no Python frames of its own (autograd's device threads) carries them after its
 * native frames, so that it reads as the backward() call that ran it. Nested begins stack (at most
 * 16 deep); memsnap_backward_end returns MEMSNAP_EINVAL when none is open. */
int memsnap_backward_begin(void);
int memsnap_backward_end(void);

/* ---- Private pools: CUDA graph capture, torch.cuda.MemPool --------------------------------- */

/* A pool is named by two integers (PyTorch's MempoolId_t). While allocations go to a pool, every
 * request on `device` whose stream `filter` accepts (returns non-zero; called with the
 * allocator's lock held, so it must not allocate through memsnap) is served from the pool's own
 * blocks, which no other request ever gets. The blocks stay the pool's until it is released
 * (its use count reaches 0) and they are free; then empty_cache returns them to the device.
 * This is how a CUDA graph keeps the addresses its capture baked in. While any pool is being
 * allocated to, memsnap does not query or record stream events and does not synchronize.
 *
 * memsnap_begin_allocate_to_pool creates the pool with use count 1 (or adds a user to an
 * existing one) and starts routing; `ctx` must stay valid until the matching
 * memsnap_end_allocate_to_pool. memsnap_begin_allocate_thread_to_pool routes the calling
 * thread's requests (torch.cuda.use_mem_pool). memsnap_create_pool makes a pool (or adds a
 * user) without routing anything (a MemPool's creation); memsnap_release_pool takes a user away.
 * Each returns MEMSNAP_OK, or MEMSNAP_EINVAL (a pool already being allocated to, not being
 * allocated to, unknown or already released; message set) or MEMSNAP_ENOMEM. */
typedef int (*memsnap_pool_filter_t)(void *ctx, memsnap_stream_t stream);
int memsnap_begin_allocate_to_pool(int device, uint64_t id0, uint64_t id1, memsnap_pool_filter_t filter, void *ctx);
int memsnap_begin_allocate_thread_to_pool(int device, uint64_t id0, uint64_t id1);
int memsnap_end_allocate_to_pool(int device, uint64_t id0, uint64_t id1);
/* Names the stream whose CUDA graph capture the allocation to pool (id0, id1) serves (PyTorch's
 * capture stream, current when it begins the pool). In the stream-ordered mode memsnap then
 * notices a capture that ended without memsnap_end_allocate_to_pool (PyTorch skips it when
 * ending the capture failed): once the stream was seen capturing and no longer captures it, the
 * allocation to the pool ends as if called, and a late end call still succeeds. Without it such a
 * capture counts as underway for the rest of the process, and frees of blocks allocated before
 * it wait for its end. MEMSNAP_OK, or MEMSNAP_EINVAL (no allocation to that pool in progress). */
int memsnap_pool_capture_stream(int device, uint64_t id0, uint64_t id1, memsnap_stream_t stream);
int memsnap_create_pool(int device, uint64_t id0, uint64_t id1);
int memsnap_release_pool(int device, uint64_t id0, uint64_t id1);
/* Waits for outstanding stream events, then returns the cached blocks of pool (id0, id1) to the
 * device if the pool is released (PyTorch's emptyCache(mempool_id), which a MemPool's destructor
 * calls); the pool is forgotten once it holds nothing. MEMSNAP_OK, or MEMSNAP_EINVAL for an
 * unknown pool or while a capture is underway. */
int memsnap_empty_pool_cache(int device, uint64_t id0, uint64_t id1);

/* A pool whose segments another allocator provides (PyTorch's MemPool(allocator=...): NCCL's
 * ncclMemAlloc, a custom CUDA allocator): while the pool exists, each new segment of the pool is
 * alloc(ctx, size, device, stream, &ptr) (MEMSNAP_OK, or MEMSNAP_ENOMEM: out of memory, the usual
 * retries follow) instead of the device's, and each segment the pool gives back is free(ctx, ptr,
 * size, device, stream); both are called with the device's lock held (they must not call
 * memsnap). The pool's segments are classic ones (no expandable segments). release(ctx) is called
 * once the pool is gone (released and holding no segment), or at once when this fails. Set it
 * right after the pool is made, before anything is allocated in it. MEMSNAP_OK, or MEMSNAP_EINVAL
 * for an unknown pool or one that holds segments or has a provider already (message set). */
/* Options of pool (id0, id1), each unchanged when negative: use_on_oom 1, the pool lends its cached
 * blocks to requests outside any pool when the device is out of memory (as a last resort, after
 * the cache was released and the device asked again; PyTorch's MemPool(use_on_oom=True));
 * no_split 1, its blocks are never split (MemPool(no_split=True)). MEMSNAP_OK, or MEMSNAP_EINVAL
 * for an unknown pool. */
int memsnap_pool_set_flags(int device, uint64_t id0, uint64_t id1, int use_on_oom, int no_split);

typedef int (*memsnap_segment_alloc_fn)(void *ctx, size_t size, int device, memsnap_stream_t stream, void **out);
typedef void (*memsnap_segment_free_fn)(void *ctx, void *ptr, size_t size, int device, memsnap_stream_t stream);
int memsnap_pool_set_provider(int device, uint64_t id0, uint64_t id1, memsnap_segment_alloc_fn alloc,
                              memsnap_segment_free_fn free_fn, void *ctx, void (*release)(void *ctx));

/* Whether the allocated blocks of pool (id0, id1) are exactly ptrs[0..n), sorted ascending
 * (PyTorch's checkPoolLiveAllocations, which torch.compile's CUDA graph trees ask): 1 yes, 0 no,
 * MEMSNAP_EINVAL for an unknown pool. */
int memsnap_pool_live_allocations_match(int device, uint64_t id0, uint64_t id1, const uint64_t *ptrs, size_t n);

/* The use count of pool (id0, id1): captures, MemPools and use_mem_pool blocks holding it
 * (torch.cuda.MemPool.use_count()). MEMSNAP_EINVAL for an unknown pool. */
int memsnap_pool_use_count(int device, uint64_t id0, uint64_t id1);

/* ---- Allocations memsnap's allocator did not make ---------------------------------------- */

/* Records a device allocation made by someone else (the intercept library of `memsnap run
 * --mode intercept`: cudaMalloc, cuMemAlloc, cuMemMap... of any library), after it succeeded:
 * `source` names the API (a string that stays valid, a literal), `caller` is the return address
 * of the allocating call (its library is named in the snapshot), NULL if unknown. While
 * recording it becomes the events segment_alloc and alloc; a snapshot shows it as a segment of
 * pool "external" (docs/snapshot-format.md). Returns MEMSNAP_OK, MEMSNAP_EINVAL for a NULL ptr,
 * MEMSNAP_ENOMEM, or MEMSNAP_EBACKEND when the library cannot start. */
int memsnap_external_alloc(void *ptr, size_t size, int device, memsnap_stream_t stream, const char *source,
                           void *caller);

/* Records the free of the external allocation at `ptr`, or with size > 0 of every external
 * allocation that starts in [ptr, ptr + size) (cuMemUnmap of a range), and sets *freed_bytes
 * (if not NULL) to their total size. Returns MEMSNAP_OK (also for NULL), or MEMSNAP_EINVAL when
 * none was recorded there. */
int memsnap_external_free(void *ptr, size_t size, memsnap_stream_t stream, size_t *freed_bytes);

/* memsnap_alloc() and memsnap_release() on behalf of an intercepted cudaMalloc / cudaFree (the
 * intercept library's --cache): the recorded stack starts at `caller`, the return address of
 * the intercepted call, and Python frames are recorded only if the calling thread holds the GIL
 * (the caller may hold a lock that a thread holding the GIL waits for). Same returns. */
int memsnap_alloc_for(void **out, size_t size, int device, memsnap_stream_t stream, void *caller);
int memsnap_release_for(void *ptr);

/* Records that an allocation of `size` bytes made by someone else failed for lack of memory
 * (an oom event while recording) and writes the MEMSNAP_DUMP_ON_OOM snapshot if one is set and
 * not written yet. Returns MEMSNAP_OK, or MEMSNAP_EBACKEND when the library cannot start. */
int memsnap_external_oom(size_t size, int device, memsnap_stream_t stream, void *caller);

/* An out-of-memory observer, as PyTorch's attachOutOfMemoryObserver: called after memsnap_alloc
 * (or memsnap_alloc_for) failed for lack of device memory, on the thread that asked, outside every
 * lock of the allocator and after the MEMSNAP_DUMP_ON_OOM snapshot, with the device, the size of
 * the allocation that failed (the segment memsnap asked the device for, as PyTorch passes it), the
 * device's total bytes (the allowed maximum under a memory fraction) and its free bytes. It may
 * call memsnap (memsnap_dump, the statistics); the out-of-memory message stays the last error. */
typedef void (*memsnap_oom_observer_t)(int device, size_t size, size_t total, size_t free_bytes, void *arg);

/* Adds an observer (at most 64, called in the order added, never removed). Returns MEMSNAP_OK,
 * MEMSNAP_EINVAL when `fn` is NULL, or MEMSNAP_ENOMEM when 64 are already attached. */
int memsnap_add_oom_observer(memsnap_oom_observer_t fn, void *arg);

/* ---- What a host allocator needs: PyTorch's C++ allocator (recorder/pytorch/) ------------ */

/* These serve a program that installs memsnap as its allocator through a C++ class of its own
 * (recorder/pytorch/allocator.cpp: PyTorch's CUDAAllocator), which answers PyTorch in PyTorch's
 * types and leaves every decision to the functions below. */

/* The cache turned on (1, the default) or off (0): off, every request is served by a device
 * allocation of its own and freed at once by memsnap_free/memsnap_release, as PyTorch's
 * caching_allocator_enable(False) does. MEMSNAP_NO_CACHING=1 (or PYTORCH_NO_CUDA_MEMORY_CACHING=1)
 * keeps it off whatever this says, as PyTorch's variable does. Such allocations stay out of the
 * statistics (PyTorch's do too) but are recorded: a snapshot shows each as a segment of pool
 * "external" whose source is "uncached". Blocks allocated before a switch are freed as they were
 * made. memsnap_caching() returns whether the cache is on now. In the async mode (allocator=async)
 * neither the switch nor the variable does anything and the cache is always on, as with
 * PyTorch's cudaMallocAsync backend. */
void memsnap_set_caching(int enabled);
int memsnap_caching(void);

/* The segment that holds the block at `ptr` (an allocated block of memsnap's): its first address
 * and total size (PyTorch's getBaseAllocation). MEMSNAP_OK; MEMSNAP_EINVAL (message set) for a
 * pointer memsnap did not hand out, or a block of an expandable segment (whose reservation is
 * not one device allocation, so PyTorch refuses it too) or of the async mode. */
int memsnap_block_base(void *ptr, void **base, size_t *size);

/* The rounded size and the device of the allocated block at `ptr` (what PyTorch's memory profiler
 * is told when it is freed). MEMSNAP_OK, or MEMSNAP_EINVAL (message set) for a pointer memsnap did
 * not hand out. */
int memsnap_block_size(void *ptr, size_t *size, int *device);

/* Sharing a block with another process (CUDA IPC), in PyTorch's own handle format, so that a
 * receiver running PyTorch's allocator opens what memsnap sends and memsnap opens what PyTorch
 * sends (version byte 2, then 'c' and the cudaIpcMemHandle_t of the block's segment, or 'e', a
 * header {pid, page size, page count} and one POSIX file descriptor per page of an expandable
 * segment, exported with cuMemExportToShareableHandle; docs/allocator.md, "IPC").
 *
 * memsnap_ipc_share: the handle of the allocated block at `ptr` into *handle (malloc'd, *len
 * bytes, the caller frees it with free()) and the block's offset from the start of what the
 * handle maps into *offset. The block is recorded as sent (an ipc_share event while recording).
 * MEMSNAP_OK; MEMSNAP_EINVAL for a pointer memsnap did not hand out, and in the async mode (its
 * pool's memory cannot be shared this way; PyTorch's cudaMallocAsync backend refuses too);
 * MEMSNAP_EBACKEND when the driver refuses; MEMSNAP_ENOMEM.
 *
 * memsnap_ipc_open: maps what `handle` (len bytes, from memsnap_ipc_share or PyTorch's
 * shareIpcHandle) shares into this process on `device` and returns its first address in *base.
 * Opening the same handle again returns the same address and counts one more user; each open is
 * matched by one memsnap_ipc_close(base), and the last unmaps it. The mapping is recorded as
 * received (a segment of pool "external" whose source is "cuda_ipc"). MEMSNAP_OK, or
 * MEMSNAP_EINVAL (a malformed handle), MEMSNAP_EBACKEND (the driver or the kernel refused: the
 * message says which, e.g. pidfd_getfd without the right to the sender's descriptors),
 * MEMSNAP_ENOMEM. memsnap_ipc_close returns MEMSNAP_EINVAL for an address no open returned. */
int memsnap_ipc_share(void *ptr, char **handle, size_t *len, size_t *offset);
int memsnap_ipc_open(const char *handle, size_t len, int device, void **base);
int memsnap_ipc_close(void *base);

/* A callback that may free device memory held elsewhere (PyTorch's FreeCudaMemoryCallbacks:
 * the collection of CUDA IPC blocks other processes released), called when a request finds no
 * cached block, before memsnap asks the device for more: with no lock of memsnap's held, so it
 * may free through memsnap. It returns non-zero when it freed something (the request then looks
 * in the cache again). At most 16; MEMSNAP_OK, MEMSNAP_EINVAL (NULL fn) or MEMSNAP_ENOMEM. */
typedef int (*memsnap_free_memory_fn)(void *arg);
int memsnap_add_free_memory_callback(memsnap_free_memory_fn fn, void *arg);

/* Checkpoints of a private pool (torch.compile's CUDA graph trees restore one before recording a
 * new graph after replaying part of a path; PyTorch's getCheckpointState/setCheckpointPoolState).
 *
 * memsnap_pool_checkpoint: the layout of pool (id0, id1) now: every segment with its blocks and
 * which are allocated. NULL (message set) for an unknown pool, a released one, or out of host
 * memory. memsnap_pool_checkpoint_free frees it.
 *
 * memsnap_pool_restore: frees every block of the pool that is allocated now, then allocates the
 * checkpoint's allocated blocks again, at their addresses and sizes, splitting the segments as
 * they were. *freed (n_freed) gets the addresses freed, *allocated (n_allocated) those allocated,
 * in new arrays the caller frees with free() (an address may be in both). The allocator's
 * statistics and recording see frees and allocations as usual. MEMSNAP_OK; MEMSNAP_EINVAL
 * (message set) when a segment of the checkpoint is gone or a block is still used by another
 * stream; MEMSNAP_ENOMEM. */
typedef struct memsnap_pool_state memsnap_pool_state;
memsnap_pool_state *memsnap_pool_checkpoint(int device, uint64_t id0, uint64_t id1);
int memsnap_pool_restore(int device, const memsnap_pool_state *state, void ***freed, size_t *n_freed, void ***allocated,
                         size_t *n_allocated);
void memsnap_pool_checkpoint_free(memsnap_pool_state *state);

/* The allocator's state as plain structs, for a host that builds its own snapshot (PyTorch's
 * SnapshotInfo): memsnap_copy_segments fills *segments (n_segments, by address) and *blocks
 * (n_blocks; segment i owns blocks [first_block, first_block + n_blocks) of it, by address) with
 * the segments of `device` (every pool when id0 == id1 == 0, else private pool (id0, id1) only),
 * in new arrays the caller frees with free(). An expandable segment is listed as one segment per
 * run of mapped pages, as PyTorch lists it; the async mode lists each live block as a segment.
 * MEMSNAP_OK, MEMSNAP_EINVAL (a bad device) or MEMSNAP_ENOMEM. */
typedef struct memsnap_block_info {
  uint64_t address, size, requested_size;
  int allocated; /* handed out and not freed */
  int active;    /* allocated, or freed and still used by another stream */
} memsnap_block_info;
typedef struct memsnap_segment_info {
  int device;
  int is_large;      /* large pool (blocks over 1 MiB) */
  int is_expandable;
  memsnap_stream_t stream;
  uint64_t address, total_size;
  uint64_t pool_id[2]; /* (0, 0): the default pools */
  size_t first_block, n_blocks;
} memsnap_segment_info;
int memsnap_copy_segments(int device, uint64_t id0, uint64_t id1, memsnap_segment_info **segments, size_t *n_segments,
                          memsnap_block_info **blocks, size_t *n_blocks);

/* A trace observer sees every decision of the allocator as it happens (PyTorch's trace
 * trackers, which its own recorder builds on): called on the thread that made it, with the
 * device's lock held, so it must not call memsnap or take a lock that a caller of memsnap may
 * hold (Python's GIL). Its kinds are the snapshot format's event ids; for alloc and the frees
 * `size` is the block's rounded size and requested_size the size asked for; for oom `address` is
 * the device's free bytes. Allocations memsnap did not make (external, uncached, received) are
 * not shown. One observer at a time: memsnap_set_trace_observer replaces it (NULL removes it).
 * Returns MEMSNAP_OK. */
enum {
  MEMSNAP_TRACE_ALLOC = 1,
  MEMSNAP_TRACE_FREE_REQUESTED = 2,
  MEMSNAP_TRACE_FREE_COMPLETED = 3,
  MEMSNAP_TRACE_SEGMENT_ALLOC = 4,
  MEMSNAP_TRACE_SEGMENT_FREE = 5,
  MEMSNAP_TRACE_OOM = 6,
  MEMSNAP_TRACE_SNAPSHOT = 7,
  MEMSNAP_TRACE_SEGMENT_MAP = 11,
  MEMSNAP_TRACE_SEGMENT_UNMAP = 12,
};
typedef struct memsnap_trace_event {
  int kind;
  int device;
  uint64_t address, size, requested_size;
  memsnap_stream_t stream;
} memsnap_trace_event;
typedef void (*memsnap_trace_observer_t)(const memsnap_trace_event *event, void *arg);
int memsnap_set_trace_observer(memsnap_trace_observer_t fn, void *arg);

/* Applies PyTorch's allocator settings given at run time (torch.cuda.memory._set_allocator_settings,
 * the PYTORCH_CUDA_ALLOC_CONF syntax): max_split_size_mb, max_non_split_rounding_mb,
 * roundup_power2_divisions and garbage_collection_threshold go back to their defaults unless the
 * string sets them (as PyTorch's parser does), expandable_segments changes where the string sets
 * it (new segments only); other keys are left to PyTorch. MEMSNAP_OK, or MEMSNAP_EINVAL with the
 * first invalid item named (nothing is changed then). */
int memsnap_set_allocator_settings(const char *settings);

/* ---- Simulated device (MEMSNAP_BACKEND=sim) ----------------------------------------------- */

/* Completes all work queued on `stream` of the simulated device, so events recorded on it
 * become complete. Returns MEMSNAP_OK, or MEMSNAP_EINVAL when the backend is not sim. */
int memsnap_sim_synchronize(memsnap_stream_t stream);

/* Takes `size` bytes of the simulated device's memory straight from the device, with no cache
 * (what cudaMalloc answers under the intercept library with MEMSNAP_BACKEND=sim), and gives them
 * back. Return MEMSNAP_OK, MEMSNAP_ENOMEM when the device is full, or MEMSNAP_EINVAL (not the sim
 * backend, bad device, a range the device did not give). */
int memsnap_sim_mem_alloc(int device, size_t size, void **out);
int memsnap_sim_mem_free(int device, void *ptr, size_t size);

/* Whether `device` may access the simulated memory at `ptr`: 1 yes, 0 no (an expandable
 * segment's page or the async pool of another device with MEMSNAP_PEER_ACCESS=0), MEMSNAP_EINVAL
 * when ptr is in no device's memory or the backend is not sim. */
int memsnap_sim_peer_access(int device, const void *ptr);

/* CUDA graph capture on the simulated device, for tests of what depends on the capture's graph
 * (graph_capture_record_stream_reuse): begin starts a capture on `stream`; launch puts work on
 * it (while capturing, a node of the graph after the stream's last ones); stream_wait makes
 * `waiter` wait for the work queued on `stream` so far, as PyTorch's Stream.wait_stream does (while
 * `stream` captures, waiter joins its capture); end ends the capture `stream` takes part in, for
 * every stream of it. Return MEMSNAP_OK, MEMSNAP_EINVAL (not the sim backend, begin on a stream
 * capturing already, end on one that is not) or MEMSNAP_ENOMEM. */
int memsnap_sim_capture_begin(memsnap_stream_t stream);
int memsnap_sim_launch(memsnap_stream_t stream);
int memsnap_sim_stream_wait(memsnap_stream_t waiter, memsnap_stream_t stream);
int memsnap_sim_capture_end(memsnap_stream_t stream);

/* ---- a history that outlives the process (docs/recover.md) ------------------------------ */

/* What memsnap_live_info and memsnap_recover say about a live mapping
 * (MEMSNAP_LIVE_DIR/memsnap-PID.live: the event ring and the names its events need, kept in a
 * file while a process records). Times are nanoseconds since its recording started. */
typedef struct memsnap_live_info_t {
  int pid, rank;            /* rank -1: none */
  int alive;                /* the process still runs (it has the mapping mapped) */
  char program[256];        /* the executable's file name */
  char command_line[1024];
  char dump_path[1024];     /* its MEMSNAP_DUMP, absolute, patterns unexpanded ("" none) */
  char snapshot[1024];      /* memsnap_recover: the snapshot written */
  uint64_t events, dropped; /* events kept, and those before them or torn */
  uint64_t last_event_ns, last_alloc_ns, end_ns; /* end_ns: when it ended (0 unknown) */
  int end_signal;           /* the signal it died of, as its parent saw it or as it caught it (the
                               mapping keeps the fatal signals it can catch); 0 none or unknown */
  int no_word;              /* it has ended, wrote no snapshot and caught none of the signals it
                               watched: SIGKILL, _exit, or a signal it did not watch (SIGINT,
                               SIGUSR1, one its program handled: docs/recover.md) */
} memsnap_live_info_t;

/* How the recorded process ended, as its parent saw it (memsnap run), for memsnap_recover. */
typedef struct memsnap_recover_options {
  int end_signal;       /* the signal that ended it; 0 none or unknown */
  int exit_status;      /* its exit status; -1 unknown */
  uint64_t end_mono_ns; /* CLOCK_MONOTONIC time it was seen to end; 0 unknown */
  int live;             /* it may still run: read as it is, keep the mapping, no DWARF line lookups */
  int keep;             /* keep the mapping after the snapshot is written */
} memsnap_recover_options;

/* The folder of live mappings: MEMSNAP_LIVE_DIR, else this user's own folder memsnap-UID (made
 * 0700 when recording starts) under /dev/shm where it is writable, else under $TMPDIR, else /tmp.
 * Never NULL. */
const char *memsnap_live_dir(void);

/* The readers below (memsnap_live_info, memsnap_recover, memsnap_live_request_dump) refuse a file
 * that is a symbolic link, not a regular file, or owned by another user than the caller; with
 * `on` nonzero, from now on in this process, they read a file of any owner (memsnap recover
 * --any-owner: a file named on purpose; its bytes are checked as always). */
void memsnap_live_any_owner(int on);

/* Reads a live mapping's header into *out. MEMSNAP_OK, or MEMSNAP_EINVAL (message set: not a
 * mapping, another version's, damaged, unreadable, a link, another user's). */
int memsnap_live_info(const char *live_path, memsnap_live_info_t *out);

/* Writes the snapshot of a live mapping, as the process would have written it: every event the
 * ring holds up to its end (a torn last one dropped), the stacks named from the modules and Python
 * frames the mapping recorded, the allocator's segments and blocks rebuilt from the events
 * (docs/recover.md says what a recovered snapshot lacks). `snapshot_path` NULL: the process's
 * MEMSNAP_DUMP, else memsnap-PID.db; %p is the process's pid. `opts` may be NULL. Removes the
 * mapping once written (not with opts->live or opts->keep). Fills *out (may be NULL). Returns
 * MEMSNAP_OK, MEMSNAP_EINVAL (message set: a mapping of another version or a damaged one is
 * refused, nothing written), MEMSNAP_ENOMEM or MEMSNAP_EBACKEND (the file could not be written). */
int memsnap_recover(const char *live_path, const char *snapshot_path, const memsnap_recover_options *opts,
                    memsnap_live_info_t *out);

/* Asks the process recording into a live mapping for a snapshot (memsnap dump PID) and waits up
 * to timeout_ms for it; the snapshot's path into `written`. MEMSNAP_OK; MEMSNAP_EINVAL (message
 * set: not a mapping, the process is gone, or no answer in time). */
int memsnap_live_request_dump(const char *live_path, int timeout_ms, char *written, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* MEMSNAP_H */
