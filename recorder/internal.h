/* internal.h: types and functions shared between the recorder's files (prefix msi_).
 *
 * Architecture (one concept a file; recorder/README.md lists the folders, each a layer):
 *   alloc.c               the caching allocator: PyTorch's CUDACachingAllocator decisions, per
 *                         device, and the dispatch to the modes below it
 *   blocks.c              block structs (from slabs) and the free sets of pools: filing a block,
 *                         merging free neighbours, deferring a block freed during a capture
 *   blocktree.c           the ordered set of free blocks of one pool and stream (a treap)
 *   ptrmap.c              pointer -> allocated block hash map
 *   stats.c               statistic updates, resets and the flat key table
 *   api.c                 public entry points (on top: nothing in the recorder calls into it)
 *   devices.c             the device table and lazy initialisation (options, backend, recording)
 *   options.c             the options table and environment parsing
 *   error.c               error messages (thread-local last error; option warnings on stderr)
 *   modes/expandable.c    expandable segments: one virtual reservation per stream and pool,
 *                         mapped in pages (PyTorch's expandable_segments:True)
 *   modes/pools.c         private pools (CUDA graph capture, torch.cuda.MemPool) and captures
 *                         underway
 *   modes/capture.c       blocks freed during a capture, reused before its end once its graph
 *                         orders their uses before new work (PyTorch's
 *                         graph_capture_record_stream_reuse)
 *   modes/async_alloc.c   the stream-ordered mode (MEMSNAP_ALLOCATOR=async, PyTorch's
 *                         cudaMallocAsync)
 *   backends/backend.c    the active backend (msi_be), chosen and started when the library
 *                         comes up
 *   backends/backend_sim.c   the simulated device
 *   backends/backend_cuda.c  the CUDA driver backend (libcuda loaded at run time)
 *
 * Providers of memory sit behind the backend table below (msi_backend): whole segments
 * (mem_alloc), pages of a virtual reservation (va_reserve, page_map) and the stream-ordered pool
 * (async_alloc). alloc.c is the caching policy and never asks which backend it runs on.
 *
 * The allocator's layers, bottom to top; each file calls only into files below it, never back up
 * (tests/test_layers.py checks that no files of the recorder call each other in a loop):
 *   backends/backend.c (the active backend), ptrmap.c, blocktree.c
 *   blocks.c                              block and pool primitives
 *   modes/: expandable.c, pools.c, async_alloc.c, capture.c  the modes
 *   alloc.c                               the caching policy and the dispatch to the modes
 *   devices.c                             the device table: makes and destroys each device's state
 *   api.c                                 the entry points
 * Where a lower file needs the policy (pools.c releasing a private pool's cached blocks), the
 * policy hands its function down as an argument.
 */
#ifndef MEMSNAP_INTERNAL_H
#define MEMSNAP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include "memsnap.h"
#include "snapshot_schema.h"

#define MSI_LIKELY(x) __builtin_expect(!!(x), 1)
#define MSI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define MSI_MAX_DEVICES 64

/* PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp). */
#define MSI_MIN_BLOCK_SIZE ((size_t)512)            /* all sizes are rounded to 512 bytes */
#define MSI_SMALL_SIZE ((size_t)1 << 20)            /* largest request in the small pool */
#define MSI_SMALL_BUFFER ((size_t)2 << 20)          /* small pool segment size */
#define MSI_LARGE_BUFFER ((size_t)20 << 20)         /* segment size for requests 1..10 MiB */
#define MSI_MIN_LARGE_ALLOC ((size_t)10 << 20)      /* requests from here get their own segment */
#define MSI_ROUND_LARGE ((size_t)2 << 20)           /* ... rounded up to 2 MiB */
#define MSI_POWER2_INTERVALS 16                     /* roundup_power2_divisions: 1 MiB .. 64 GiB */

/* Index of the first element at or above address p in an array of n elements of `stride` bytes,
 * sorted by address, each starting with its address (a uintptr_t): external.c's and uncached.c's
 * tables of live allocations. */
static inline size_t msi_lower_bound_addr(const void *array, size_t n, size_t stride, uintptr_t p) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (*(const uintptr_t *)((const char *)array + mid * stride) < p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* ---- errors (error.c) ------------------------------------------------------------------ */

/* Formats a message into this thread's last-error buffer (memsnap_last_error). */
void msi_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Like msi_error but also prints "memsnap: warning: ..." on stderr (never on the hot path). */
void msi_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void msi_clear_error(void);
/* The device out-of-memory error the calling thread's allocation ended with, as PyTorch's
 * out-of-memory observers are told of it: set where the allocation paths report it (alloc.c,
 * async_alloc.c), taken by api.c, which calls the observers outside the allocator's locks. An
 * allocation that failed for lack of host memory leaves it unset. */
typedef struct msi_oom_info {
  bool set;
  int device;
  size_t size;       /* what was asked of the device */
  size_t total;      /* the device's memory, or the memory fraction's limit */
  size_t free_bytes; /* the device's free memory */
} msi_oom_info;
extern __thread msi_oom_info msi_last_oom;

/* ---- options (options.c) --------------------------------------------------------------- */

typedef enum { MSI_OOM_NULL, MSI_OOM_THROW, MSI_OOM_ABORT } msi_oom_action;
typedef enum { MSI_INVALID_FREE_WARN, MSI_INVALID_FREE_SILENT, MSI_INVALID_FREE_ABORT } msi_invalid_free_action;
enum { MSI_STACKS_NONE = 0, MSI_STACKS_NATIVE = 1, MSI_STACKS_PYTHON = 2, MSI_STACKS_ALL = 3 };
enum { MSI_CONTEXT_ALL = 0, MSI_CONTEXT_ALLOC = 1 }; /* whose stacks are recorded: everyone's, or not frees' */

typedef struct msi_options {
  char backend[16];            /* "cuda" or "sim" */
  size_t sim_capacity;         /* bytes per simulated device */
  int sim_devices;             /* number of simulated devices */
  int sim_top_down;            /* sim: segments from the top of the free memory down, as CUDA places them (1), or first fit from the bottom (0) */
  size_t max_split_size;       /* SIZE_MAX: unlimited */
  size_t max_non_split_rounding; /* slack allowed when an oversize request takes a cached block */
  uint32_t power2_divisions[MSI_POWER2_INTERVALS]; /* 0 or 1: off for that interval */
  bool any_power2_divisions;   /* some interval has divisions > 1 */
  double gc_threshold;         /* 0: off */
  double memory_fraction;      /* below 1.0: cap every device at this share at start */
  msi_oom_action oom;
  msi_invalid_free_action invalid_free; /* what a free of a pointer memsnap does not own does */
  bool record;                 /* record from the first call */
  uint64_t max_entries;        /* events kept by the ring */
  int stacks;                  /* MSI_STACKS_* */
  int context;                 /* MSI_CONTEXT_*: MSI_CONTEXT_ALLOC records frees without a stack */
  char dump[1024];             /* snapshot written at exit ("" none) */
  char dump_on_oom[1024];      /* snapshot written at the first out of memory ("" none) */
  int dump_signal;             /* signal that writes a snapshot (0 none) */
  bool expandable_segments;    /* grow one virtual segment per stream and pool (expandable.c) */
  bool async_mode;             /* the stream-ordered allocator (async_alloc.c) instead of caching */
  bool peer_access;            /* map expandable pages and the async pool for peer devices too */
  bool sim_old_driver;         /* sim: no virtual memory management, no stream-ordered pools */
  bool intercept_cache;        /* read by the intercept library; kept here for the snapshot's options */
  bool torch_ranges;           /* read by the Python package (memsnap.enable()); kept here likewise */
  bool torch_modules;          /* likewise (memsnap.enable(): torch_model.py) */
  double holders_time;         /* the Python package's holder walk at a snapshot (holders.py), seconds */
  bool gc_events;              /* the Python package's garbage collector record (holders.py) */
  bool gc_cycles;              /* and the reference cycles holding CUDA tensors each run freed (cycles.py) */
  int torch_allocator;         /* likewise: 0 the C++ allocator (recorder/pytorch/), 1 the pluggable interface */
  uint32_t gil_wait_ms;        /* gil_helper.c: the longest wait for a thread's Python frames (0: never) */
  bool no_caching;             /* uncached.c serves every request: MEMSNAP_NO_CACHING, PYTORCH_NO_CUDA_MEMORY_CACHING=1 */
  bool caching_off;            /* likewise, until turned on again (memsnap_set_caching: PyTorch's caching_allocator_enable); not an option */
  bool capture_stream_reuse;   /* graph_capture_record_stream_reuse: capture.c reuses blocks freed during a capture */
} msi_options;

extern msi_options msi_opt;

/* Reads every option from the environment into msi_opt, warning about invalid values (the
 * default is kept). PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF supply the tuning knobs that
 * no MEMSNAP_ variable sets. */
void msi_options_load(void);

/* Sets one option by name ("oom" or "MEMSNAP_OOM") at run time. MEMSNAP_OK, or MEMSNAP_EINVAL
 * (error set) for unknown names, invalid values and options read only at initialisation. */
int msi_option_set(const char *name, const char *value);

/* Applies PyTorch's allocator settings given at run time (memsnap_set_allocator_settings): the
 * tuning keys back to their defaults, then what `settings` names; MEMSNAP_OK, or MEMSNAP_EINVAL
 * (error set, nothing changed). */
int msi_options_apply_settings(const char *settings);

/* Copies MEMSNAP_DUMP (or MEMSNAP_DUMP_ON_OOM) into out, consistently while another thread may
 * set it; returns whether one is set. */
bool msi_dump_path(bool on_oom, char *out, size_t len);

/* Writes the effective value of option `name` ("oom" or "MEMSNAP_OOM") into out: MEMSNAP_OK,
 * or MEMSNAP_EINVAL (error set) for an unknown name. */
int msi_option_get(const char *name, char *out, size_t len);

/* Writes the effective value of option i (the table's order) into out. */
void msi_option_value(int i, char *out, size_t len);

/* Parses "512", "64K", "1.5G" (binary units) into *out. Returns 0, or -1 if malformed. */
int msi_parse_size(const char *s, size_t *out);

/* Parses roundup_power2_divisions ("4" or "[256:1,512:2,>:8]") into out[16]. 0 or -1. */
int msi_parse_power2_divisions(const char *s, uint32_t out[MSI_POWER2_INTERVALS]);

/* An option's name, default and comment, as memsnap_option_info() gives them. */
typedef struct msi_option_info {
  const char *name;        /* lower case; the variable is MEMSNAP_ + upper case */
  const char *default_str;
  const char *comment;
} msi_option_info;

/* The number of options (memsnap_option_info's indexes run from 0 below it). */
int msi_option_count(void);

/* ---- backends ------------------------------------------------------------------------- */

#define MSI_BE_OK 0
#define MSI_BE_OOM 1   /* the device is out of memory: the caller may free cache and retry */
#define MSI_BE_ERR (-1) /* anything else; msi_error() has the details */

typedef struct msi_backend {
  const char *name;
  int (*init)(void);                     /* MSI_BE_OK or MSI_BE_ERR */
  int (*device_count)(void);             /* >= 0 */
  /* free/total bytes and a printable name of a device. MSI_BE_OK or MSI_BE_ERR. */
  int (*device_info)(int dev, size_t *free_bytes, size_t *total_bytes, char *name, size_t len);
  int (*mem_alloc)(int dev, size_t size, uintptr_t *out); /* MSI_BE_OK / _OOM / _ERR */
  int (*mem_free)(int dev, uintptr_t ptr, size_t size);
  int (*event_create)(int dev, void **ev);
  int (*event_record)(int dev, void *ev, memsnap_stream_t stream);
  int (*event_query)(int dev, void *ev); /* 1 complete, 0 pending, MSI_BE_ERR */
  int (*event_synchronize)(int dev, void *ev);
  void (*event_destroy)(int dev, void *ev);
  int (*stream_synchronize)(int dev, memsnap_stream_t stream); /* MSI_BE_OK or MSI_BE_ERR */
  int (*device_synchronize)(int dev);                          /* every stream's work: MSI_BE_OK or MSI_BE_ERR */
  /* Virtual memory (expandable segments). vmm_supported: 1, or 0 with msi_error saying why.
   * va_reserve/va_free: address space only. page_map creates one physical page of page_size
   * bytes and maps it read-write at ptr (MSI_BE_OK / _OOM / _ERR, *handle set); page_unmap
   * unmaps and releases it. */
  int (*vmm_supported)(int dev);
  int (*va_reserve)(int dev, size_t size, uintptr_t *out);
  int (*va_free)(int dev, uintptr_t ptr, size_t size);
  int (*page_map)(int dev, uintptr_t ptr, size_t page_size, void **handle);
  int (*page_unmap)(int dev, uintptr_t ptr, size_t page_size, void *handle);
  /* The device's stream-ordered pool (async mode). async_supported: 1, or 0 with msi_error.
   * async_alloc: MSI_BE_OK / _OOM / _ERR; async_free frees in stream order; async_trim waits
   * for the device and returns every unused byte of the pool (empty_cache); async_usage reads
   * the pool's reserved and used bytes, now and their high-water marks; async_reset_peak sets
   * the marks to the current values. */
  int (*async_supported)(int dev);
  int (*async_alloc)(int dev, size_t size, memsnap_stream_t stream, uintptr_t *out);
  int (*async_free)(int dev, uintptr_t ptr, memsnap_stream_t stream);
  int (*async_trim)(int dev);
  int (*async_usage)(int dev, uint64_t *reserved, uint64_t *reserved_high, uint64_t *used, uint64_t *used_high);
  int (*async_reset_peak)(int dev);
  /* A stream of the device's own, made once (at msi_async_init): the async mode frees a block
   * used on other streams there, after it waited for all of them, as PyTorch's backend does on
   * its "unifying free stream", so that no stream reuses the block before every user is done.
   * MSI_BE_OK with *out set, or MSI_BE_ERR. */
  int (*side_stream)(int dev, memsnap_stream_t *out);
  /* Makes `waiter` wait for the work queued on `stream` so far (an event, then a wait). */
  int (*stream_wait)(int dev, memsnap_stream_t waiter, memsnap_stream_t stream);
  /* CUDA IPC (ipc.c). ipc_get_handle: the 64-byte cudaIpcMemHandle_t of the device allocation
   * [ptr, ptr + size) (a classic segment); ipc_open maps the allocation another process shared
   * (*ptr and *size set) and ipc_close unmaps it. page_export: a POSIX file descriptor for a page
   * page_map made (its handle), which the caller owns; page_map_fd: maps at ptr, inside a
   * reservation, the page another process exported as fd (now a descriptor of this process's),
   * readable and writable by dev and its peers, *handle set for page_unmap. Each returns MSI_BE_OK
   * or MSI_BE_ERR (msi_error says why). */
  int (*ipc_get_handle)(int dev, uintptr_t ptr, size_t size, unsigned char out[64]);
  int (*ipc_open)(int dev, const unsigned char handle[64], uintptr_t *ptr, size_t *size);
  int (*ipc_close)(int dev, uintptr_t ptr);
  int (*page_export)(int dev, void *handle, int *fd);
  int (*page_map_fd)(int dev, uintptr_t ptr, size_t page_size, int fd, void **handle);
  /* CUDA graph capture, read (capture.c). capture_info: 1 when `stream` is capturing, with the
   * capture's id and the graph's nodes that new work on the stream would depend on (its
   * terminal nodes: *n of them, the first `cap` copied into nodes; none when the capture was
   * invalidated: the stream stays in it until its end); 0 when it is not capturing; MSI_BE_ERR.
   * node_parents: the nodes `node` depends on (*n of them, the first `cap` copied); MSI_BE_OK or
   * MSI_BE_ERR. Nodes are opaque non-zero values. */
  int (*capture_info)(int dev, memsnap_stream_t stream, uint64_t *id, uintptr_t *nodes, size_t cap, size_t *n);
  int (*node_parents)(int dev, uintptr_t node, uintptr_t *out, size_t cap, size_t *n);
  void (*shutdown)(void);
} msi_backend;

extern const msi_backend msi_backend_sim;
extern const msi_backend msi_backend_cuda;
/* backend.c: the active backend, set by msi_backend_start when the library comes up. */
extern const msi_backend *msi_be;
/* Makes the backend MEMSNAP_BACKEND names active and starts it: MSI_BE_OK or MSI_BE_ERR. */
int msi_backend_start(void);

int msi_sim_synchronize(memsnap_stream_t stream); /* backend_sim.c */
/* backend_sim.c: the simulated capture graphs (memsnap_sim_capture_begin and the rest): `what`
 * is one of these; `other` is the stream waited for (MSI_SIM_WAIT). */
enum { MSI_SIM_BEGIN, MSI_SIM_LAUNCH, MSI_SIM_WAIT, MSI_SIM_END };
int msi_sim_capture(memsnap_stream_t stream, int what, memsnap_stream_t other);
/* backend_sim.c: whether `device` may access the simulated memory at `ptr` (memory of another
 * device only through peer access): 1 yes, 0 no, -1 when no device holds ptr. */
int msi_sim_peer_access(int device, uintptr_t ptr);

/* ---- blocks, pools, devices ------------------------------------------------------------ */

typedef struct msi_pool msi_pool;
typedef struct msi_block msi_block;
typedef struct msi_expseg msi_expseg;
typedef struct msi_private_pool msi_private_pool;

/* A block: a piece of a segment, allocated or free. 128 bytes in two cache lines: the first
 * holds what free-set searches and merges read, the second the rest. */
struct msi_block {
  uintptr_t ptr;
  size_t size;            /* rounded size */
  msi_block *prev, *next; /* address neighbours inside the segment; NULL at its ends */
  msi_block *left, *right, *parent; /* free-set tree links (blocktree.c) */
  uint32_t prio;          /* tree priority */
  uint16_t set_index;     /* pool->sets[set_index] is the block's stream's free set */
  bool allocated;
  bool in_tree;
  /* second cache line */
  msi_pool *pool;
  memsnap_stream_t stream;
  size_t requested_size;  /* size as asked for */
  uint64_t gc_count_base; /* pool's get_free_block count when the block was cached */
  uint32_t event_count;   /* outstanding events before the block may be reused */
  uint32_t stack_id;      /* stack that allocated it, while recording (0: none) */
  uint32_t nuses;
  uint16_t uses_cap;
  bool mapped : 1;        /* backed by memory; false only for the unmapped ranges of an expandable segment */
  bool captured : 1;      /* async mode: allocated while a capture was underway */
  bool told : 1;          /* allocated, and a framework told its role (roles.c holds it, by address) */
  memsnap_stream_t *uses; /* streams from record_stream, until the block is freed */
  msi_expseg *seg;        /* the expandable segment it lies in, or NULL for a classic segment */
} __attribute__((aligned(64)));
_Static_assert(sizeof(msi_block) == 128, "msi_block should fill two cache lines");

/* The free blocks of one pool that belong to one stream, ordered by (size, address): size-class
 * bins with a bitmap of the non-empty ones, each bin a treap ordered by (size, address). Sizes
 * up to 8 KiB have a class each; above, 16 classes per power of two, as in TLSF. (One class per
 * small-pool size, 2048 classes, made each set 22 KiB and PyTorch's torch.empty loop erratically
 * slower on the H200: docs/BENCHMARKS.md.) blocktree.c has the operations. */
#define MSI_BIN_EXACT 16 /* sizes up to 16 * 512 B: one class per size */
#define MSI_BIN_SUB_BITS 4
#define MSI_BINS 896 /* all classes of sizes below 2^64, rounded up to whole bitmap words */
typedef struct msi_stream_set {
  memsnap_stream_t stream;
  size_t count;
  uint64_t summary;                 /* bit w: nonempty[w] != 0 */
  uint64_t nonempty[MSI_BINS / 64]; /* bit c: bins[c] != NULL */
  msi_block *bins[MSI_BINS];
  msi_block *unmapped;              /* unmapped ranges of expandable segments, by address (linked by ->right) */
} msi_stream_set;

struct msi_pool {
  bool is_small;
  int stat_kind;               /* MEMSNAP_POOL_SMALL or MEMSNAP_POOL_LARGE */
  msi_private_pool *owner;     /* the private pool it belongs to, or NULL for the default pools */
  msi_stream_set *sets;        /* one per stream seen, never shrinks */
  int nsets, sets_cap;
  int last_set;                /* index of the last set used: streams repeat */
  uint64_t get_free_blocks_call_count; /* gc age clock, counted only when gc is on */
};

/* blocktree.c: the ordered free-block set of one stream. Order is (size, ptr) throughout. */
void msi_set_insert(msi_stream_set *s, msi_block *b);
void msi_set_erase(msi_stream_set *s, msi_block *b);
msi_block *msi_set_lower_bound(const msi_stream_set *s, size_t size); /* first with size >= size */
msi_block *msi_set_first(const msi_stream_set *s);
msi_block *msi_set_last(const msi_stream_set *s);
msi_block *msi_set_next(const msi_stream_set *s, const msi_block *b); /* NULL after the last */
msi_block *msi_set_prev(const msi_stream_set *s, const msi_block *b); /* NULL before the first */
int msi_set_bin_of(size_t size);

/* ptrmap.c: open-addressing hash map from block address to allocated block. */
typedef struct msi_ptrmap_slot {
  uintptr_t key; /* the block's address; 0: empty */
  msi_block *block;
} msi_ptrmap_slot;
typedef struct msi_ptrmap {
  msi_ptrmap_slot *slots;
  size_t mask;  /* capacity - 1; capacity is a power of two */
  size_t count;
} msi_ptrmap;
int msi_ptrmap_init(msi_ptrmap *m, size_t capacity); /* 0, or -1 if out of host memory */
void msi_ptrmap_destroy(msi_ptrmap *m);
int msi_ptrmap_put(msi_ptrmap *m, msi_block *b);     /* 0, or -1 if out of host memory */
msi_block *msi_ptrmap_get(const msi_ptrmap *m, uintptr_t ptr);
msi_block *msi_ptrmap_take(msi_ptrmap *m, uintptr_t ptr); /* removes; NULL if absent */

/* One outstanding cross-stream event: the block may be reused once it completed. */
typedef struct msi_pending_event {
  void *event;
  msi_block *block;
  struct msi_pending_event *next;
} msi_pending_event;

typedef struct msi_event_queue {
  memsnap_stream_t stream;
  msi_pending_event *head, *tail;
} msi_event_queue;

/* An expandable segment (expandable.c): one reservation of address space, mapped page by page.
 * Its blocks tile [base, base + size): mapped blocks (allocated, cached or waiting) and unmapped
 * ranges (mapped == false, kept in their stream set's `unmapped` list). */
struct msi_expseg {
  uintptr_t base;
  size_t size;              /* page_size * max_pages */
  size_t page_size;         /* 2 MiB for the small pool, 20 MiB for the large one, as PyTorch */
  size_t max_pages;
  void **handles;           /* physical page by index, NULL where unmapped */
  int *fds;                 /* a page's exported descriptor (IPC), -1 none; NULL until one is exported */
  size_t nhandles;          /* handles[] entries in use (pages up to the highest mapped one) */
  size_t handles_cap;
  memsnap_stream_t stream;
  msi_expseg *next;         /* the device's list */
};

/* A private pool (pools.c): the blocks a CUDA graph capture or a torch.cuda.MemPool allocated,
 * never handed to allocations outside it, held until the pool is released and its blocks are
 * free (PyTorch's PrivatePool). */
struct msi_private_pool {
  uint64_t id[2];           /* PyTorch's MempoolId_t */
  int use_count;            /* captures and pools referring to it; 0: freeable by empty_cache */
  int64_t malloc_count;     /* segments (and mapped pages) it holds */
  /* another allocator's segments (memsnap_pool_set_provider), or NULLs: the device's */
  memsnap_segment_alloc_fn provider_alloc;
  memsnap_segment_free_fn provider_free;
  void *provider_ctx;
  void (*provider_release)(void *ctx);
  bool use_on_oom;          /* lends its cached blocks when the device is out of memory (memsnap_pool_set_flags) */
  bool no_split;            /* its blocks are never split */
  msi_pool small, large;
  msi_private_pool *next;
};

/* An allocation-to-pool in progress: requests whose stream passes `filter` go to pool `id`. */
typedef int (*msi_pool_filter)(void *ctx, memsnap_stream_t stream);
typedef struct msi_capture {
  uint64_t id[2];
  msi_pool_filter filter;
  void *ctx;
  void (*release_ctx)(void *ctx);
  memsnap_stream_t stream; /* the capture's stream (memsnap_pool_capture_stream), else NULL */
  uint64_t capture_id;     /* the driver's id of its capture, once seen (seen) */
  bool seen;               /* `stream` was seen capturing */
} msi_capture;

#define MSI_ENDED_CAPTURES 8 /* captures memsnap found ended without their end call, remembered */

/* ---- the roles a framework told of live blocks (roles.c), a primitive ------------------------ */

/* What a tensor event said of the block at an address: its role (MEMSNAP_TENSOR_*) and its
 * module's label (0: none). Kept while the block lives, whatever the ring forgets. */
typedef struct msi_role { uint64_t address; uint32_t label; uint8_t role; } msi_role;
/* Open addressing by address (0: an empty slot); the device lock guards it. */
typedef struct msi_roles {
  msi_role *slots;
  size_t mask, count;
} msi_roles;
/* Sets (or replaces) the role of the block at `address`. 0, or -1 when out of host memory (the
 * role is then not kept). */
int msi_roles_set(msi_roles *t, uint64_t address, uint8_t role, uint32_t label);
/* The role told of `address`, or NULL. */
const msi_role *msi_roles_get(const msi_roles *t, uint64_t address);
/* Forgets `address` (its block is freed). */
void msi_roles_forget(msi_roles *t, uint64_t address);
void msi_roles_free(msi_roles *t);

typedef struct msi_device {
  pthread_mutex_t lock;
  int index;
  msi_pool small, large;
  msi_ptrmap live;                 /* allocated blocks by address */
  memsnap_stats_t stats;
  size_t total_allocated_memory;   /* bytes of all segments held (reserved) */
  size_t allowed_memory_maximum;   /* memory fraction cap, valid when set_fraction */
  bool set_fraction;
  size_t device_total;             /* total device memory, for the fraction */
  msi_event_queue *queues;         /* one per stream with outstanding events */
  int nqueues, queues_cap;
  size_t pending_events;
  void **event_cache;              /* completed events kept for reuse */
  int nevent_cache, event_cache_cap;
  uint32_t event_stack;            /* stack id of the call in progress, for its events (lock held) */
  uint8_t release_reason;          /* why segments are being released (MEMSNAP_RELEASE_*): their events'
                                      extra; set where releasing starts, read only while releasing */
  msi_block *spare_blocks;         /* free list of block structs (linked through next) */
  void **block_slabs;              /* slabs of block structs, freed at shutdown */
  int nslabs, slabs_cap;
  bool expandable;                 /* expandable segments on (the option, and the driver can) */
  msi_expseg *expsegs;             /* live expandable segments */
  msi_private_pool *private_pools; /* graph and MemPool pools, live or freeable */
  msi_capture *captures;           /* allocations to a private pool in progress */
  int ncaptures, captures_cap;
  struct {
    uint64_t id[2];
    bool valid;
  } ended[MSI_ENDED_CAPTURES]; /* captures msi_captures_drop_ended dropped: their late end call */
  uint64_t nended;             /* still succeeds (a ring, the oldest overwritten) */
  msi_block **deferred;            /* freed during a capture with stream uses: events wait for its end */
  size_t ndeferred, deferred_cap;
  struct msi_capture_reuse *capture_reuse; /* capture.c: free markers of deferred blocks, graph walks; NULL: none */
  struct msi_async_state *async;   /* async mode's per-device state (async_alloc.c), else NULL */
  /* the run log's (history/runlog.c): allocated and reserved bytes' highest since its last sample
     (devices.c's sampler reads them and starts them again; msi_run_peak keeps them) */
  int64_t run_peak_allocated, run_peak_reserved;
  msi_roles roles;                 /* the roles told of its live blocks (roles.c), by address */
} msi_device;

/* ---- blocks and the free sets of pools (blocks.c), below the modes and alloc.c ---------- */

/* Each runs with the device lock held. The small ones are inline: the allocation path calls
 * them on every request. */

/* Makes sure at least two spare block structs exist, so that one malloc (a new segment plus a
 * split) never fails half way. Returns 0, or -1 if out of host memory. */
int msi_reserve_blocks(msi_device *d);
/* Frees every block struct (the slabs) and the stream uses they hold (device shutdown). */
void msi_blocks_destroy(msi_device *d);

/* A block struct for [ptr, ptr + size), free and mapped, with no neighbours; msi_reserve_blocks
 * ran first. Its set_index is the caller's to set. */
static inline msi_block *msi_block_new(msi_device *d, uintptr_t ptr, size_t size, memsnap_stream_t stream,
                                       msi_pool *pool) {
  msi_block *b = d->spare_blocks;
  d->spare_blocks = b->next;
  /* Field by field: zeroing the whole struct compiles to `rep stos`, the slowest part of a
   * split. Tree links and priority are set by msi_set_insert, set_index by the caller. */
  b->ptr = ptr;
  b->size = size;
  b->prev = b->next = NULL;
  b->allocated = b->in_tree = false;
  b->pool = pool;
  b->stream = stream;
  b->requested_size = 0;
  b->event_count = 0;
  b->nuses = b->uses_cap = 0;
  b->uses = NULL; /* msi_block_put freed it */
  b->stack_id = 0;
  b->mapped = true;
  b->told = false;
  b->seg = NULL;
  return b;
}

/* Gives a block struct back to the free list (its stream uses freed). */
static inline void msi_block_put(msi_device *d, msi_block *b) {
  if (MSI_UNLIKELY(b->uses != NULL)) {
    free(b->uses);
    b->uses = NULL;
  }
  b->next = d->spare_blocks;
  d->spare_blocks = b;
}

/* Caches a free mapped block in the set of its stream (set_index was fixed when it was
 * allocated), or takes it out. */
static inline void msi_pool_insert(msi_block *b) {
  msi_pool *p = b->pool;
  b->gc_count_base = p->get_free_blocks_call_count;
  msi_set_insert(&p->sets[b->set_index], b);
}
static inline void msi_pool_erase(msi_block *b) { msi_set_erase(&b->pool->sets[b->set_index], b); }

/* The unmapped ranges of expandable segments in their stream set: a list by address. */
void msi_unmapped_insert(msi_block *b);
void msi_unmapped_erase(msi_block *b);

/* Merges the free neighbour `src` into `dst` if it may (both mapped, or both unmapped ranges of
 * an expandable segment; neither waiting on events or stream uses). Returns the bytes taken
 * over (0: not merged). */
size_t msi_try_merge(msi_device *d, msi_block *dst, msi_block *src);

/* Keeps a block freed during a capture until none is underway (d->deferred). Returns false
 * only when out of host memory (the caller then goes on as without a capture). */
bool msi_defer_block(msi_device *d, msi_block *b);

/* ---- history (history.c), stacks (stacks.c, symbolize.c), snapshots (snapshot.c) ------- */

/* memsnap_set_dump_hook's hook deferred on this thread while it holds a lock (snapshot.c): the
 * next memsnap_dump keeps its path; msi_dump_hook_run calls the hook with it (if any) and ends
 * the deferral. */
void msi_dump_hook_defer(void);
void msi_dump_hook_run(void);

#define MSI_EV_(id, name) MSI_EV_##id,
typedef enum {
  MSI_EV_NONE, /* ids from 1, as snapshot_schema.h lists them */
  MEMSNAP_EVENT_KIND_LIST(MSI_EV_)
  MSI_EV_KINDS
} msi_event_kind;
#undef MSI_EV_

/* One recorded event, 64 bytes. For OOM: addr is the device's free bytes, aux the bytes the
 * cache held reserved but unallocated. For marks and ranges: aux is the label id, requested the
 * range depth. For segment_free and segment_unmap: aux is why (MEMSNAP_RELEASE_*; 0 unknown). */
typedef struct msi_event {
  uint64_t time_ns;   /* monotonic */
  uint64_t addr;
  uint64_t size;      /* rounded block size, or segment size */
  uint64_t requested; /* size asked for */
  uint64_t stream;
  uint64_t aux;
  uint32_t stack_id;
  uint32_t tid;
  int16_t device;     /* -1: no device (marks) */
  uint8_t kind;       /* msi_event_kind */
  uint8_t pad;
  uint32_t seq;       /* history.c: the event's index + 1 once published (truncated); 0 while written */
} msi_event;
_Static_assert(sizeof(msi_event) == 64, "msi_event should be 64 bytes");

/* The monotonic clock in ns: here, not in a file, so that any file reads it (history.c's event
 * times, gil_helper.c's waits, stacks.c's diagnostic build) without calling another file. */
static inline uint64_t msi_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* msi_is_recording, which the allocation paths inline: history.h */
uint32_t msi_thread_id(void);
int msi_history_start(uint64_t max_entries); /* MEMSNAP_OK or MEMSNAP_ENOMEM */
void msi_history_stop(void);
/* Empties the ring (memsnap_record_clear): what was recorded is gone, not counted as dropped. */
void msi_history_clear(void);
void msi_history_reset(void);                /* frees the ring and labels */
/* Adds events alike but for their kinds, kinds[0..n) in that order, at one time, with one claim
 * of slots (no lock: history.c): the events of one call with no device call between them (a
 * free completed at once: free_requested, free_completed). msi_history_add adds one. */
void msi_history_add_n(const uint8_t *kinds, int n, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                       uint64_t requested, uint64_t aux, uint32_t stack_id);
void msi_history_add(msi_event_kind kind, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                     uint64_t requested, uint64_t aux, uint32_t stack_id);
/* A free: its free_requested, and with `completed` (no other stream used the block) its
 * free_completed too, at one time (msi_history_add_n). */
void msi_history_add_free(bool completed, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                          uint64_t requested, uint32_t stack_id);
/* msi_history_add and a free's two events (completed at once, requested = size), for the ring
 * only: allocations memsnap's allocator did not make, which a trace observer must not see. */
void msi_history_add_unobserved(msi_event_kind kind, int device, memsnap_stream_t stream, uintptr_t addr,
                                uint64_t size, uint64_t requested, uint64_t aux, uint32_t stack_id);
void msi_history_add_free_unobserved(int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                                     uint32_t stack_id);
/* Events recorded since recording started (dropped ones included). */
uint64_t msi_history_total(void);
/* Copies the ring, oldest first, into a new array (*out, caller frees): event k of the recording
 * (its id, from 1) is at *before + e->seq + 1, *dropped counts the events not copied (overwritten,
 * or claimed and not published in time). Returns the count, or UINT64_MAX when out of host
 * memory. */
uint64_t msi_history_copy(msi_event **out, uint64_t *dropped, uint64_t *before, uint64_t *max_entries,
                          uint64_t *start_ns);
const char *msi_label(uint32_t id);
/* Reads a ring that msi_history_start put in a live mapping (another process's, perhaps dead,
 * perhaps running: read as it is, never waited for), as msi_history_copy copies one: the events
 * published and not overwritten, oldest first, into *out (caller frees); *base is the ring's
 * first event of the recording (absolute: event e of the window is base + before + e->seq).
 * `cap` and `events_offset` are what the mapping's header says. MEMSNAP_OK; MEMSNAP_EINVAL (error
 * set) when the ring does not match them; MEMSNAP_ENOMEM. */
int msi_history_read_mapped(const void *ring, uint64_t bytes, uint64_t cap, uint32_t events_offset, msi_event **out,
                            uint64_t *n_out, uint64_t *dropped, uint64_t *before, uint64_t *start_ns, uint64_t *base);
/* The ring's count of events ever claimed (the next event's absolute index; 0 with no ring), and
 * its capacity into *cap (0: none). */
uint64_t msi_history_position(uint64_t *cap);
/* memsnap_mark, memsnap_range_push and memsnap_range_pop once the library is up. */
int msi_history_mark(const char *label);
int msi_history_range_push(const char *label);
int msi_history_range_pop(void);

/* ---- the process's facts (history/process.c), for its snapshot and its live mapping ---------- */

/* Its rank in a job as the variable a launcher set says it (digits only; torchrun's RANK first,
 * then LOCAL_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID): the text, or NULL when none does. */
const char *msi_process_rank(void);
/* Its command line, arguments joined by spaces, into buf[len] ("" when it cannot be read). */
void msi_process_cmdline(char *buf, size_t len);
/* Its executable's path into buf[len]: the length, or 0 ("") when it cannot be read. */
size_t msi_process_exe(char *buf, size_t len);
/* Calls fn(path, lo, hi, load bias, arg) for each executable range of each loaded module (the main
 * program by its path), until fn returns non-zero; returns that, or 0. */
int msi_modules_each(int (*fn)(const char *path, uint64_t lo, uint64_t hi, uint64_t bias, void *arg), void *arg);

/* memsnap_tensor_events in two (model_events.c), the roles kept between them (api.c): the
 * tensors' arrays checked (MEMSNAP_OK, or MEMSNAP_EINVAL with the error set, nothing done), and
 * their events added while the ring records. */
int msi_tensor_events_check(size_t n, const uint64_t *storage, const uint64_t *bytes, const uint8_t *role,
                            const int32_t *label, const int16_t *device);
void msi_tensor_events_add(size_t n, const uint64_t *storage, const uint64_t *bytes, const uint8_t *role,
                           const int32_t *label, const int16_t *device);

/* memsnap_step_event's check and event (model_events.c); api.c's adds the live state's update at
 * an iteration's end. */
int msi_step_event(int label, int what);

/* Interns a label (each distinct text is kept once, for the life of the recording). Returns its
 * id, or UINT32_MAX when out of host memory. */
uint32_t msi_label_id(const char *label);
/* How many labels are interned: ids below it are valid (0, "", once any is). */
uint32_t msi_label_count(void);
/* fork(): take (prepare), release (parent) or reset (child) the history's and stacks' locks. */
void msi_history_fork(int phase);
void msi_history_start_fork(int phase); /* start's lock: before every other */
void msi_stacks_fork(int phase);
enum { MSI_FORK_PREPARE, MSI_FORK_PARENT, MSI_FORK_CHILD };

/* Stack of the calling thread (per MEMSNAP_STACKS), interned: its id, or 0 for none. */
uint32_t msi_stack_capture(void);
/* The same, its native part starting at return address first_pc when that is among the first
 * frames outside the library (0: no such start). Without may_take_gil, a thread that released
 * the GIL does not take it back: it may hold another library's lock (PyTorch's allocator mutex
 * around cudaMalloc) that a thread holding the GIL waits for; its Python frames are read by
 * gil_helper.c's thread instead (native frames only when the GIL is not had in time). */
uint32_t msi_stack_capture_from(uint64_t first_pc, bool may_take_gil);
/* The stack of a free (a release, an empty_cache): msi_stack_capture_from's, or 0 when
 * MEMSNAP_CONTEXT is alloc. */
uint32_t msi_stack_capture_for_free(uint64_t first_pc, bool may_take_gil);
void msi_stacks_reset(void);
/* Backward passes lend their Python frames (memsnap_backward_begin/end): push the calling thread's
 * Python part (read only when `capture`: the ring records) on a global stack of at most
 * MSI_STACKS_LEND_MAX (deeper begins are counted, keep none); until it is popped, a capture on a
 * thread with no Python frames of its own takes the innermost one's. Pop returns 0, or -1 when
 * none is open. */
#define MSI_STACKS_LEND_MAX 16
void msi_stacks_lend_push(bool capture);
int msi_stacks_lend_pop(void);

/* An interned stack: words[offset..] holds its n_native program counters, then its n_python
 * (code object, position) pairs, innermost first. A position is the instruction offset, or the
 * line with MSI_PY_LINE_FLAG set where Python lacks PyFrame_GetLasti (before 3.11). */
#define MSI_STACK_MAX_PYTHON 64 /* Python frames kept per stack */
#define MSI_PY_LINE_FLAG (1ull << 63)
typedef struct msi_stack_rec {
  uint32_t offset; /* first word in the words array */
  uint16_t n_native, n_python;
} msi_stack_rec;
/* Copies the interned stacks into new arrays that the caller frees: (*recs)[1..*count) by id
 * ([0] unused), *words their words; recording goes on meanwhile (the code objects they name stay
 * alive: every interned one holds a reference). Returns 0, or -1 when out of host memory (then
 * both are NULL). */
int msi_stacks_copy(msi_stack_rec **recs, uint64_t **words, uint32_t *count);

/* gil_helper.c: runs fn(arg) on a helper thread holding the GIL while the caller waits, for a
 * caller that must not take it. Returns 0 when fn ran, -1 when it did not and never will (no
 * Python, Python finalizing, or the GIL not had within the wait: native frames only then). */
int msi_gil_helper_run(void (*fn)(void *), void *arg);

/* ---- native frames (unwind.c, ehframe.c), below stacks.c ------------------------------ */

#define MSI_STACK_MAX_NATIVE 128 /* native frames kept per stack (PyTorch's dispatcher alone puts ~50 between an op and Python) */
/* Frames walked, the library's own among them: unw_backtrace's 136 of before, from one frame
 * further in (msi_unwind_stack's), so that a stack cut short ends where it ended before. */
#define MSI_UNWIND_MAX_RAW (MSI_STACK_MAX_NATIVE + 9)

/* ehframe.c: how to step out of the frame a return address returns into. */
enum { MSI_RULE_STEP, MSI_RULE_LAST, MSI_RULE_OTHER };
enum { MSI_RULE_CFA_RBP = 1, MSI_RULE_RBP_SAVED = 2 };
typedef struct msi_unwind_rule {
  int32_t cfa_offset; /* STEP: CFA = (CFA_RBP ? rbp : rsp) + cfa_offset; the return address at CFA - 8 */
  int16_t rbp_offset; /* RBP_SAVED: the caller's rbp at CFA + rbp_offset (else rbp keeps its value) */
  uint8_t kind;       /* STEP; LAST: the outermost frame; OTHER: only libunwind can step it */
  uint8_t flags;
} msi_unwind_rule;
/* The rule of the frame that `ra` returns into (libunwind's fast trace steps the same frames).
 * *loads and *unloads are the loader's counts of modules loaded and unloaded so far. */
msi_unwind_rule msi_ehframe_rule(uint64_t ra, unsigned long long *loads, unsigned long long *unloads);

/* unwind.c: the calling thread's native frames, walked with the rules above and cached per
 * thread, so that what did not change since the thread's earlier captures is not walked again. */
typedef struct msi_unwind_cache msi_unwind_cache;
/* A thread's cache: NULL when out of host memory or when the thread's stack cannot be found. */
msi_unwind_cache *msi_unwind_cache_new(void);
void msi_unwind_cache_free(msi_unwind_cache *c);
/* One capture's frames: pcs[0..n), innermost first, starting with msi_unwind_stack's own frame
 * (what unw_backtrace called from there gives); pcs[0..lib_end) lie inside libmemsnap.
 * nodes[i] (i >= lib_end) is stacks.c's id for the frames i..n-1 once known, 0 before; in a
 * stack cut to the MSI_STACK_MAX_NATIVE frames a stack keeps (`cut`), for the frames i..cut_end-1
 * (cut_end = lib_end + MSI_STACK_MAX_NATIVE), which depends on where the stack starts: such
 * nodes are never carried over to another stack. */
typedef struct msi_native_stack {
  const uint64_t *pcs;
  uint32_t *nodes; /* NULL: not cached (libunwind's frames) */
  int n, lib_end;
  bool known;      /* every node from lib_end on (up to cut_end when cut) is set */
  bool cut;        /* the nodes are a cut stack's */
} msi_native_stack;
/* Fills *out with the calling thread's native frames: from the cache `c` (NULL: from libunwind,
 * as before the cache, into raw[MSI_UNWIND_MAX_RAW + 1]). Valid until the thread's next capture.
 * `entry` tells the library's ways in apart (a return address of the caller's: an allocation
 * and a free made from one place start alike), so that each finds its own frames first.
 * After a capture whose nodes were not all known, stacks.c sets them (a cut stack's: all of
 * them, in its meaning) and calls msi_unwind_keep, which caches the frames for the thread's
 * later captures. */
void msi_unwind_stack(msi_unwind_cache *c, uint64_t entry, uint64_t *raw, msi_native_stack *out);
void msi_unwind_keep(msi_unwind_cache *c, bool cut);
/* Makes every thread drop its cached frames at its next capture (the stack table was reset). */
void msi_unwind_forget(void);
/* Captures so far that walked frames (not all were cached), and that libunwind made. */
void msi_unwind_counts(unsigned long long *walked, unsigned long long *fell_back);
#ifdef MSI_PHASE_TIMING
/* The diagnostic build's: cached chains whose first frame matched and whose words were compared,
 * those whose words held, frames stepped by walks, walks that joined the previous capture's, and
 * the words of the chains compared, each from where its comparison began to the chain's end (an
 * upper bound on the words read: a comparison stops at the first difference). */
#define MSI_UNWIND_DIAG 5
void msi_unwind_diag(unsigned long long *out);
#endif
/* Whether pc lies in libmemsnap's code. */
bool msi_unwind_is_self(uint64_t pc);

/* The CPython C API, found with dlsym at run time (libmemsnap does not link libpython): stacks.c
 * reads the frames of allocating threads through it, symbolize.c names code objects with it. */
typedef struct _object PyObject;
typedef struct msi_python {
  int state; /* 0 unknown, 1 usable, -1 absent */
  int (*IsInitialized)(void);
  int (*GILState_Check)(void);
  void *(*GILState_GetThisThreadState)(void);
  PyObject *(*ThreadState_GetFrame)(void *);
  PyObject *(*Frame_GetBack)(PyObject *);
  PyObject *(*Frame_GetCode)(PyObject *);
  int (*Frame_GetLineNumber)(PyObject *);
  int (*Frame_GetLasti)(PyObject *);         /* 3.11+: the instruction offset, cheap */
  int (*Code_Addr2Line)(PyObject *, int);    /* offset -> line, at snapshot time */
  void (*IncRef)(PyObject *);
  void (*DecRef)(PyObject *);
  int (*GILState_Ensure)(void);
  void (*GILState_Release)(int);
  PyObject *(*GetAttrString)(PyObject *, const char *);
  const char *(*Unicode_AsUTF8)(PyObject *);
  PyObject *(*Unicode_AsEncodedString)(PyObject *, const char *, const char *); /* optional */
  char *(*Bytes_AsString)(PyObject *);                                          /* optional */
  void (*Err_Clear)(void);
} msi_python;
/* pyframes.c: the table, looked up on first use; never NULL. Its state says whether it can be
 * used: with state 1 every member is set but those marked optional (and Frame_GetLasti, set only
 * with Code_Addr2Line). */
const msi_python *msi_python_api(void);
/* The Python frames of thread state `tstate` (the calling thread's), innermost first, as (code,
 * position) pairs into out[0..2 * max): the count. msi_pyframes_api walks them with the C API
 * (the GIL held); msi_pyframes_read reads the interpreter's frame records (the GIL need not be
 * held) and returns -1 where it cannot: unknown layouts, and until it was compared with the C
 * API once, which it does when `gil_held` (then returning the C API's frames). */
int msi_pyframes_api(void *tstate, uint64_t *out, int max);
int msi_pyframes_read(void *tstate, uint64_t *out, int max, bool gil_held);
/* Which reader msi_pyframes_read uses: 2 the frame records, 1 the records once compared with the
 * C API, -1 the C API (another version or build, or they differed), 0 not chosen yet. */
int msi_pyframes_reader(void);
/* The names of the Python frame (code, position) with the GIL held: *name (co_qualname, else
 * co_name) and *file (co_filename), each malloc'ed (NULL when absent), *line (-1 unknown). 0, or -1
 * where Python is not usable (nothing set). */
int msi_pyframes_name(uint64_t code, uint64_t pos, char **name, char **file, int64_t *line);

/* symbolize.c: the frames of the interned stacks named, at snapshot time only. */
typedef struct msi_frame {
  bool python;
  char *name;     /* function; demangled */
  char *file;     /* source file; native: "" without debug information */
  char *module;   /* native: shared object path */
  int64_t line;   /* line; native: 0 without debug information */
  uint64_t pc;    /* native: program counter (return address) */
  uint64_t offset; /* native: pc - symbol start, or - module base without a symbol */
  bool inlined;    /* native: a function the compiler inlined into the next frame (same pc) */
} msi_frame;

typedef struct msi_symbolized {
  msi_frame *frames;
  size_t nframes;
  struct {
    int64_t *frames; /* frame indices, innermost first */
    uint32_t depth;
  } *stacks;        /* by stack id; [0] is empty */
  uint32_t nstacks;
  struct msi_symbolize_pending *pending; /* between msi_stacks_symbolize and _finish */
} msi_symbolized;
/* Names every interned stack's frames (native from the symbol tables, Python's from their code
 * objects) and starts the DWARF line lookups (symbols.c), which run while the caller writes
 * other tables; msi_stacks_symbolize_finish completes the frames with files, lines and inlined
 * functions. Each returns MEMSNAP_OK or MEMSNAP_ENOMEM (then `out` is freed and empty).
 * msi_symbolized_free ends lookups still under way. */
int msi_stacks_symbolize(msi_symbolized *out);
int msi_stacks_symbolize_finish(msi_symbolized *out);
/* The same for stacks given (another process's, read from its live mapping: recover.c): its
 * modules in `syms` (taken over, closed with the result), its Python frames named by
 * `python_name` (which sets name, file and line, malloc'ed; left NULL: unknown). `foreign`: the
 * pcs are not this process's (no dladdr); `no_lines`: no DWARF lookups. */
typedef struct msi_symbolize_source {
  const msi_stack_rec *recs;
  const uint64_t *words;
  uint32_t count;
  struct msi_symbols *syms;
  void (*python_name)(void *arg, uint64_t code, uint64_t pos, msi_frame *f);
  void *arg;
  bool foreign, no_lines;
} msi_symbolize_source;
int msi_stacks_symbolize_source(msi_symbolized *out, const msi_symbolize_source *src);
/* Frees what `s` holds (ending lookups still under way) and leaves it empty. */
void msi_symbolized_free(msi_symbolized *s);

/* symbols.c: function names from the ELF symbol tables of the loaded modules. */
typedef struct msi_symbols msi_symbols;
msi_symbols *msi_symbols_open(void); /* NULL if out of host memory */
/* An empty set, then modules added one by one (another process's, from its live mapping):
 * NULL / -1 when out of host memory. */
msi_symbols *msi_symbols_new(void);
int msi_symbols_add(msi_symbols *s, const char *path, uint64_t lo, uint64_t hi, uint64_t bias);
void msi_symbols_close(msi_symbols *s);
/* The module and function holding a pc: path NULL when no loaded module holds it; name NULL when
 * the module's tables name no function there; offset from the function, else from the module. */
typedef struct msi_resolved {
  const char *path, *name; /* valid until msi_symbols_close */
  uint64_t offset, start;
} msi_resolved;
/* Resolves pcs[0..n) into out[0..n) in one pass over each module's symbol table. 0, or -1 when
 * out of host memory. */
int msi_symbols_resolve(msi_symbols *s, const uint64_t *pcs, size_t n, msi_resolved *out);
/* A function the compiler inlined at a native frame's pc, from DWARF (addr2line -i): `frame`
 * is the index of that frame; the frames inlined at one pc come in a row, innermost first. */
typedef struct msi_inline {
  size_t frame;
  char *name, *file; /* name as the debug information spells it (mangled for C++) */
  int64_t line;
} msi_inline;
/* File and line of native frames from DWARF (addr2line -a -f -i), in two halves so the runs go on
 * while the caller does other work: start runs addr2line once per module that has line tables,
 * all at once, on the frames with wanted[i] set (NULL when out of host memory; it may run none);
 * finish reads the answers, sets file and line of those frames, lists the functions inlined at
 * their pcs into *inl (caller frees each name and file, and the array; returns how many, 0 with
 * *inl NULL when none or out of host memory) and ends the runs. cancel ends them unread. The
 * frames and the symbols must stay as they were between start and finish. */
typedef struct msi_lines msi_lines;
msi_lines *msi_symbols_lines_start(msi_symbols *s, const msi_frame *frames, size_t n, const bool *wanted);
size_t msi_symbols_lines_finish(msi_lines *L, msi_frame *frames, size_t n, const bool *wanted, msi_inline **inl);
void msi_symbols_lines_cancel(msi_lines *L);

/* snapshot.c: expands %p %r %h %t %% in a snapshot path. MEMSNAP_OK or MEMSNAP_EINVAL. */
int msi_expand_path(const char *pattern, char *out, size_t len);

/* snapshot.c: writes the MEMSNAP_DUMP_ON_OOM snapshot if one is set and none was written yet,
 * keeping the caller's last error (api.c's and external.c's entry points call it). */
void msi_dump_on_oom(void);

/* ---- invalid frees (misuse.c) ---------------------------------------------------------- */

/* Kinds of invalid free (the event's aux; docs/snapshot-format.md). */
enum { MSI_FREE_DOUBLE = 1, MSI_FREE_FOREIGN = 2, MSI_FREE_INTERIOR = 3 };
const char *msi_invalid_free_name(int kind);
/* A free of `ptr` that no device's allocated blocks hold: classifies it, counts it
 * (num_invalid_frees), records it while recording, warns once per site (stack id, else `site`,
 * the caller's return address; only when `loud`: memsnap_release's caller has the code) and sets
 * the error. Takes the device locks itself (none may be
 * held). Returns true when MEMSNAP_INVALID_FREE=abort asks the caller to end the process. */
bool msi_invalid_free(void *ptr, int hint, uint64_t size_arg, memsnap_stream_t stream, uint32_t stack, uint64_t site,
                      bool loud);
/* Forgets the sites warned about (memsnap_shutdown). */
void msi_invalid_free_reset(void);
/* fork(): takes (prepare) or releases (parent, child) the warnings' lock. */
void msi_invalid_free_fork(int phase);

/* ---- the device table (devices.c), below the entry points ------------------------------ */

/* Initialises the library (options, backend, device count, MEMSNAP_RECORD) if needed; 0, or -1
 * with the error set. */
int msi_ensure_ready(void);
bool msi_is_ready(void);
/* Devices the backend has (valid once ready). */
int msi_device_count_ready(void);
/* The state of `device`, initialising it (and the library), or NULL (error set). */
msi_device *msi_device_get(int device);
/* The state of `device` if it was made already, else NULL (never initialises). */
extern _Atomic(msi_device *) msi_device_table[MSI_MAX_DEVICES];
static inline msi_device *msi_device_peek(int device) {
  if (MSI_UNLIKELY(device < 0 || device >= MSI_MAX_DEVICES)) return NULL;
  return atomic_load_explicit(&msi_device_table[device], memory_order_acquire);
}
/* Calls fn with every device's state locked (in index order), for snapshots. */
void msi_devices_locked(void (*fn)(msi_device **devs, int n, void *arg), void *arg);
/* fork(): takes (prepare) or releases (parent, child) the init lock and every device lock. */
void msi_devices_fork(int phase);
/* Reads the options from the environment (once) without starting the backend. */
void msi_devices_read_options(void);
/* Releases every device, the backend, the history and the stacks; returns whether the library
 * was up. */
bool msi_devices_shutdown(void);
/* Registers what runs once when the library comes up (init lock held): api.c's exit dump and
 * signal thread. */
void msi_devices_on_ready(void (*fn)(void));

/* alloc.c */
int msi_device_init(msi_device *d, int index);       /* 0 or -1 */
void msi_device_destroy(msi_device *d);              /* releases every segment */
/* `stack` is the caller's stack id (0: none), given to the events of the call. */
int msi_device_malloc(msi_device *d, size_t size, memsnap_stream_t stream, uint32_t stack, void **out);
int msi_device_free(msi_device *d, void *ptr, uint32_t stack); /* MEMSNAP_OK or MEMSNAP_EINVAL */
int msi_device_record_stream(msi_device *d, void *ptr, memsnap_stream_t stream); /* 1 found */
void msi_device_empty_cache(msi_device *d, uint32_t stack);
/* empty_cache for one private pool (PyTorch's emptyCache(mempool_id), which a MemPool's
 * destructor calls): waits for the events, then releases the pool's cached blocks if it is
 * freeable. MEMSNAP_OK, or MEMSNAP_EINVAL (unknown pool, or a capture underway). */
int msi_device_empty_pool(msi_device *d, const uint64_t id[2], uint32_t stack);
int msi_device_set_fraction(msi_device *d, double fraction);
/* The cap as PyTorch's getMemoryFraction gives it: 1.0 when none is set, else the capped bytes
 * over the device's total (the fraction as set, less the rounding to whole bytes). */
double msi_device_get_fraction(msi_device *d);
size_t msi_round_size(size_t size);
/* The first block of every segment of `d`, by address, in a new array (*out, caller frees);
 * walk ->next for the rest. Lock held. Returns the count, or SIZE_MAX when out of host memory. */
size_t msi_device_segments(msi_device *d, msi_block ***out);
/* The same into *buf (capacity *cap, grown with realloc; NULL and 0 for a new one), which the
 * caller keeps for the next call and frees: the live state's, taken every half ring, allocates
 * nothing once its largest size is reached. On SIZE_MAX *buf is NULL (freed). */
size_t msi_device_segments_into(msi_device *d, msi_block ***buf, size_t *cap);
size_t msi_allocation_size(size_t size);
/* Frees blocks whose cross-stream events completed, and records the events of blocks freed
 * during a capture once none is underway. Lock held. */
void msi_process_events(msi_device *d);
/* Registers a free-memory callback (memsnap_add_free_memory_callback), which msi_device_malloc
 * calls without the lock when no cached block fits: MEMSNAP_OK or MEMSNAP_ENOMEM (16 at most). */
int msi_add_free_memory_callback(memsnap_free_memory_fn fn, void *arg);
/* For checkpoint.c, lock held: frees allocated block b as msi_device_free does; allocates exactly
 * `size` bytes at the start of cached block b (size at most b's), splitting off any remainder,
 * and returns the allocated block (NULL when out of host memory, error set). */
void msi_device_free_locked(msi_device *d, msi_block *b);
msi_block *msi_device_claim_locked(msi_device *d, msi_block *b, size_t size);

/* expandable.c: expandable segments. Lock held for each. */
/* Whether the device can have them; on failure warns once (a clear message, then classic
 * segments). */
bool msi_expandable_usable(msi_device *d);
/* Finds (or reserves) address space for `size` bytes of `pool` on `stream` and maps what is
 * missing; returns MSI_BE_OK with the free, mapped block (out of its free set), MSI_BE_OOM or
 * MSI_BE_ERR. */
int msi_expandable_alloc(msi_device *d, msi_pool *pool, int set_index, size_t size, msi_block **out);
/* Unmaps the whole pages of a free mapped block of an expandable segment (PyTorch's
 * unmap_block); a segment left wholly unmapped is released. */
void msi_expandable_unmap(msi_device *d, msi_block *b);
/* Releases every expandable segment (shutdown: all are unmapped by then). */
void msi_expandable_destroy_all(msi_device *d);
/* Exports the pages under the mapped block b for IPC: their POSIX file descriptors (kept while
 * the page stays mapped, so the numbers stay valid for a receiver's pidfd_getfd) into *fds (n
 * entries, a new array the caller frees), the first page's address into *first and the page size
 * into *page_size. MSI_BE_OK, or MSI_BE_ERR (error set). */
int msi_expandable_export(msi_device *d, const msi_block *b, int **fds, size_t *n, uintptr_t *first, size_t *page_size);

/* pools.c: private pools. Lock held for each. */
msi_private_pool *msi_private_pool_find(msi_device *d, const uint64_t id[2]);
/* The pool a request of `size` (rounded) on `stream` takes from: a private pool while a capture
 * whose filter accepts the stream is underway, else the device's small or large pool. */
msi_pool *msi_pool_for(msi_device *d, size_t size, memsnap_stream_t stream);
/* Creates the pool (use count 1) or adds a user; NULL when out of host memory. */
msi_private_pool *msi_private_pool_incref(msi_device *d, const uint64_t id[2]);
/* How the caching policy gives one pool's cached blocks back (alloc.c hands it down). */
typedef void (*msi_pool_release_fn)(msi_device *d, msi_pool *p);
/* Releases the freeable pools' cached blocks with `release` (only pool only[0..1] when not NULL)
 * and forgets those that hold nothing. */
void msi_private_pools_release_freeable(msi_device *d, const uint64_t *only, msi_pool_release_fn release);
void msi_private_pools_destroy(msi_device *d);
/* Entry points; each takes the device lock. MEMSNAP_OK or a negative code (error set). begin
 * takes ownership of ctx (release_ctx frees it, also on failure). */
int msi_pool_begin(msi_device *d, const uint64_t id[2], msi_pool_filter filter, void *ctx, void (*release_ctx)(void *));
int msi_pool_end(msi_device *d, const uint64_t id[2]);
/* Names the stream whose capture the allocation to pool `id` belongs to. MEMSNAP_OK, or
 * MEMSNAP_EINVAL when no allocation to it is in progress. */
int msi_pool_capture_stream(msi_device *d, const uint64_t id[2], memsnap_stream_t stream);
/* The stream-ordered mode's check for captures that ended without their end call (PyTorch ends
 * the pool only after the driver ended the capture, so a failed end leaves it): a capture whose
 * stream was seen capturing (an invalidated capture counts as capturing until its end) and no
 * longer captures it, or captures another, is dropped, as its end call would. Captures without
 * a named stream are never dropped, nor those whose filter context memsnap owns (PyTorch's
 * pluggable hooks begin those, and name no stream). Lock held. */
void msi_captures_drop_ended(msi_device *d);
int msi_pool_create(msi_device *d, const uint64_t id[2]);
int msi_pool_release(msi_device *d, const uint64_t id[2]);
/* Whether the pool's allocated blocks are exactly ptrs[0..n) (sorted): 1, 0, or MEMSNAP_EINVAL. */
int msi_pool_live_match(msi_device *d, const uint64_t id[2], const uint64_t *ptrs, size_t n);
/* The pool's use count (captures, MemPools and use_mem_pool blocks holding it), or
 * MEMSNAP_EINVAL for an unknown pool. */
int msi_pool_use_count(msi_device *d, const uint64_t id[2]);
/* memsnap_pool_set_flags. */
int msi_pool_set_flags(msi_device *d, const uint64_t id[2], int use_on_oom, int no_split);
/* memsnap_pool_set_provider: takes ownership of ctx (release called on failure too). */
int msi_pool_set_provider(msi_device *d, const uint64_t id[2], memsnap_segment_alloc_fn alloc,
                          memsnap_segment_free_fn free_fn, void *ctx, void (*release)(void *));

/* capture.c: reusing blocks freed during a capture (graph_capture_record_stream_reuse). Lock
 * held for each. mark: block b, just deferred (d->deferred), keeps the capture graph's terminal
 * nodes of its stream and of every stream it was used on as its free markers (none when one of
 * them is not capturing: it then waits for the capture's end). reclaim: takes out of d->deferred
 * each marked block of `stream` whose markers all precede the stream's terminal nodes, and hands
 * it to `reuse` (the caching policy frees it into its pool). reset: forgets every marker and walk
 * (no capture underway any more, or shutdown). Out of host memory or a backend error, a block
 * simply waits for the capture's end. */
void msi_capture_mark(msi_device *d, msi_block *b);
void msi_capture_reclaim(msi_device *d, memsnap_stream_t stream, void (*reuse)(msi_device *d, msi_block *b));
void msi_capture_reset(msi_device *d);

/* async_alloc.c: the stream-ordered mode. Each returns what its msi_device_* counterpart does. */
int msi_async_malloc(msi_device *d, size_t size, memsnap_stream_t stream, uint32_t stack, void **out);
int msi_async_free(msi_device *d, void *ptr, uint32_t stack);
int msi_async_record_stream(msi_device *d, void *ptr, memsnap_stream_t stream);
void msi_async_empty_cache(msi_device *d, uint32_t stack);
/* Fills the statistics PyTorch's cudaMallocAsync backend reports (the pool's reserved and used
 * bytes, current and peak; the rest stays zero). Lock held. */
void msi_async_stats(msi_device *d, memsnap_stats_t *out);
void msi_async_reset_peak(msi_device *d);
/* Live allocations, as one block each, for snapshots: count, or SIZE_MAX when out of memory. */
typedef struct msi_async_block {
  uintptr_t ptr;
  size_t size;
  memsnap_stream_t stream;
  uint32_t stack_id;
} msi_async_block;
size_t msi_async_blocks(msi_device *d, msi_async_block **out);
int msi_async_init(msi_device *d);
void msi_async_destroy(msi_device *d);

/* ipc.c: CUDA IPC in PyTorch's handle format (memsnap_ipc_*). msi_ipc_share returns
 * MEMSNAP_EINVAL without an error for a pointer `d` does not hold (api.c tries the others);
 * `caller` is the return address recorded with what is received. msi_ipc_reset unmaps every open
 * handle (memsnap_shutdown, before the backend stops). */
int msi_ipc_share(msi_device *d, void *ptr, char **handle, size_t *len, size_t *offset);
int msi_ipc_open(const char *handle, size_t len, int device, void **base, void *caller);
int msi_ipc_close(void *base);
void msi_ipc_reset(void);

/* uncached.c: the cache turned off (memsnap_set_caching). alloc: a device allocation of its own,
 * recorded as external; free: MEMSNAP_EINVAL for an address it did not make. reset frees every
 * live one (memsnap_shutdown). */
int msi_uncached_alloc(int device, size_t size, memsnap_stream_t stream, void **out, void *caller);
int msi_uncached_free(void *ptr);
bool msi_uncached_any(void);
void msi_uncached_reset(void);

/* checkpoint.c: a private pool's layout saved and restored (memsnap_pool_checkpoint, _restore). */
memsnap_pool_state *msi_pool_checkpoint(msi_device *d, const uint64_t id[2]);
int msi_pool_restore(msi_device *d, const memsnap_pool_state *s, void ***freed, size_t *n_freed, void ***allocated,
                     size_t *n_allocated);

/* segments.c: the segments of `d` (all, or private pool id's) as public structs (memsnap_copy_segments). */
int msi_copy_segments(msi_device *d, const uint64_t id[2], memsnap_segment_info **segments, size_t *n_segments,
                      memsnap_block_info **blocks, size_t *n_blocks);

/* segments.c: the segment holding allocated block ptr (memsnap_block_base); MEMSNAP_EINVAL
 * without an error when `d` does not hold it, with one for a block of an expandable segment. */
int msi_block_base(msi_device *d, void *ptr, void **base, size_t *size);
/* The size and device of allocated block ptr (memsnap_block_size); MEMSNAP_EINVAL without an
 * error when `d` does not hold it. */
int msi_block_size(msi_device *d, void *ptr, size_t *size, int *device);
/* alloc.c: makes a device follow settings changed at run time (the statistics' max_split_size,
 * expandable segments for new segments). Takes the lock. */
void msi_device_apply_settings(msi_device *d);

/* stats.c */
static inline void msi_stat_inc(memsnap_stat_t *s, int64_t n) {
  s->current += n;
  if (s->current > s->peak) s->peak = s->current;
  s->allocated += n;
}
static inline void msi_stat_dec(memsnap_stat_t *s, int64_t n) {
  s->current -= n;
  s->freed += n;
}
/* The run log's peak since its last sample (msi_device.run_peak_*): a compare and a store on the
 * allocation path, nothing more. Lock held. */
static inline void msi_run_peak(int64_t *peak, int64_t now) {
  if (now > *peak) *peak = now;
}
/* Updates the aggregate entry and the entry of the pool kind `k`. */
#define MSI_STAT_INC(arr, k, n) (msi_stat_inc(&(arr)[MEMSNAP_POOL_ALL], (n)), msi_stat_inc(&(arr)[(k)], (n)))
#define MSI_STAT_DEC(arr, k, n) (msi_stat_dec(&(arr)[MEMSNAP_POOL_ALL], (n)), msi_stat_dec(&(arr)[(k)], (n)))
void msi_stats_reset_peak(memsnap_stats_t *s);
/* Writes the values in memsnap_stat_key() order; returns how many. */
int msi_stats_flatten(const memsnap_stats_t *s, int64_t *values, int capacity);
void msi_stats_reset_accumulated(memsnap_stats_t *s);

/* external.c: allocations memsnap's allocator did not make (memsnap_external_alloc). */
typedef struct msi_external_block {
  uintptr_t ptr;
  size_t size;
  memsnap_stream_t stream;
  uintptr_t caller;  /* return address of the allocating call */
  uint32_t stack_id;
  uint32_t source;   /* label id of the API */
  int device;
} msi_external_block;
/* Calls fn on each live one, by address, under external.c's lock (fn takes no lock of the
 * library's: a snapshot's gather runs it under the device locks, which come first). */
void msi_external_each(void (*fn)(const msi_external_block *b, void *arg), void *arg);
void msi_external_reset(void);
void msi_external_fork(int phase);

#endif /* MEMSNAP_INTERNAL_H */
