/* alloc.c: the caching allocator of one device, making PyTorch's decisions.
 *
 * This follows c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.11) rule for rule, so that users
 * reason about memsnap exactly as about PyTorch's native allocator:
 *   - sizes round up to 512 bytes, or to a power-of-two division (roundup_power2_divisions);
 *   - requests up to 1 MiB come from the small pool (2 MiB segments), larger ones from the
 *     large pool (20 MiB segments below 10 MiB, else the request rounded up to 2 MiB);
 *   - a request takes the smallest cached block of its pool and stream that fits (lowest
 *     address among equals), split when the remainder is worth keeping; freed blocks merge
 *     with free neighbours of the same segment;
 *   - blocks of max_split_size or more are never split, and never serve smaller requests;
 *   - a block used on other streams (record_stream) is reused only once events recorded on
 *     those streams at free time have completed;
 *   - when the device refuses memory: free cached oversize blocks, retry; free every unsplit
 *     cached segment, retry (num_alloc_retries); then fail (num_ooms); each release's event
 *     says why (MEMSNAP_RELEASE_*, set where releasing starts: nothing on a request that
 *     releases nothing);
 *   - with a memory fraction set, reserved memory stays under the cap, and
 *     garbage_collection_threshold frees the oldest cached segments above it;
 *   - with expandable segments, a new segment is one growing virtual reservation per stream and
 *     pool (expandable.c), every block may split, and empty_cache unmaps free pages;
 *   - while a CUDA graph capture (or a MemPool) allocates to a private pool, requests its filter
 *     accepts come from that pool (pools.c), cross-stream events wait for the capture to end
 *     (with graph_capture_record_stream_reuse, a block freed so is reused before the end once
 *     the capture's graph orders its uses first: capture.c), and nothing synchronizes.
 * The data structures differ (see blocktree.c, ptrmap.c): decisions are the same.
 *
 * Layers: this file is the policy and the dispatch to the modes (expandable.c, pools.c,
 * async_alloc.c, capture.c); it and the modes call down into the block primitives (blocks.c: block structs,
 * the pools' free sets, merging, deferring), and nothing below calls up into this file. Where a
 * mode needs the policy (pools.c releasing a private pool's cached blocks), the policy hands its
 * function down as an argument.
 *
 * Locking: one mutex per device guards everything in msi_device. Nothing here allocates host
 * memory on the fast path (block structs come from blocks.c's free list, refilled in slabs) and
 * nothing does I/O. Entry points: msi_device_malloc, msi_device_free, msi_device_record_stream,
 * msi_device_empty_cache, msi_device_set_fraction (each takes the lock itself).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "history/history.h"
#include "internal.h"

/* ---- sizes ----------------------------------------------------------------------------- */

static inline int log2_floor(size_t v) { return 63 - __builtin_clzll((unsigned long long)v); }

static uint32_t divisions_for(size_t size) {
  int log = log2_floor(size);
  int index = log > 20 ? log - 20 : 0;
  if (index > MSI_POWER2_INTERVALS - 1) index = MSI_POWER2_INTERVALS - 1;
  return msi_opt.power2_divisions[index];
}

static size_t next_division(size_t size, uint32_t divisions) {
  if ((size & (size - 1)) == 0) return size;
  size_t floor = (size_t)1 << log2_floor(size);
  size_t step = floor >> log2_floor(divisions);
  if (step == 0) return floor << 1;
  size_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

size_t msi_round_size(size_t size) {
  if (size < MSI_MIN_BLOCK_SIZE) return MSI_MIN_BLOCK_SIZE;
  uint32_t divisions = MSI_UNLIKELY(msi_opt.any_power2_divisions) ? divisions_for(size) : 0;
  if (divisions > 1 && size > MSI_MIN_BLOCK_SIZE * divisions) return next_division(size, divisions);
  return MSI_MIN_BLOCK_SIZE * ((size + MSI_MIN_BLOCK_SIZE - 1) / MSI_MIN_BLOCK_SIZE);
}

size_t msi_allocation_size(size_t size) {
  if (size <= MSI_SMALL_SIZE) return MSI_SMALL_BUFFER;
  if (size < MSI_MIN_LARGE_ALLOC) return MSI_LARGE_BUFFER;
  return MSI_ROUND_LARGE * ((size + MSI_ROUND_LARGE - 1) / MSI_ROUND_LARGE);
}

static inline bool is_split(const msi_block *b) { return b->prev || b->next; }

static bool should_split(const msi_device *d, const msi_block *b, size_t size) {
  size_t remaining = b->size - size;
  if (MSI_UNLIKELY(b->pool->owner != NULL) && b->pool->owner->no_split) return false; /* MemPool(no_split=True) */
  if (b->pool->is_small || d->expandable) return remaining >= MSI_MIN_BLOCK_SIZE;
  return size < msi_opt.max_split_size && remaining > MSI_SMALL_SIZE;
}

/* ---- pools ----------------------------------------------------------------------------- */

/* Index of the free-block set of `stream` in `pool`, created when missing; -1 if out of host
 * memory. */
static __attribute__((noinline)) int stream_set_slow(msi_pool *p, memsnap_stream_t stream) {
  for (int i = 0; i < p->nsets; i++) {
    if (p->sets[i].stream == stream) {
      p->last_set = i;
      return i;
    }
  }
  if (p->nsets == UINT16_MAX) return -1; /* set_index is 16 bits */
  if (p->nsets == p->sets_cap) {
    int cap = p->sets_cap ? p->sets_cap * 2 : 4;
    msi_stream_set *grown = realloc(p->sets, sizeof *grown * (size_t)cap);
    if (!grown) return -1;
    p->sets = grown;
    p->sets_cap = cap;
  }
  memset(&p->sets[p->nsets], 0, sizeof p->sets[p->nsets]);
  p->sets[p->nsets].stream = stream;
  p->last_set = p->nsets;
  return p->nsets++;
}

/* Streams repeat, so the set used last is checked first. */
static inline int stream_set(msi_pool *p, memsnap_stream_t stream) {
  if (MSI_LIKELY(p->nsets && p->sets[p->last_set].stream == stream)) return p->last_set;
  return stream_set_slow(p, stream);
}

static inline uint64_t gc_age(const msi_block *b) {
  return b->pool->get_free_blocks_call_count - b->gc_count_base;
}

/* ---- segments -------------------------------------------------------------------------- */

/* What one malloc is looking for. */
typedef struct request {
  size_t size;        /* rounded */
  size_t alloc_size;  /* segment size if a new segment is needed */
  memsnap_stream_t stream;
  msi_pool *pool;
  msi_stream_set *set;
  uint16_t set_index;
} request;

/* Asks the device for a new segment (or, with expandable segments, for the pages the request
 * lacks). Returns MSI_BE_OK with *out set, MSI_BE_OOM, or MSI_BE_ERR. The memory fraction is
 * checked before the device is asked. */
static int alloc_segment(msi_device *d, const request *r, bool is_retry, msi_block **out) {
  size_t size = r->alloc_size;
  int k = r->pool->stat_kind;
  if (is_retry) d->stats.num_alloc_retries++;
  if (d->set_fraction && d->total_allocated_memory + size > d->allowed_memory_maximum) return MSI_BE_OOM;
  msi_private_pool *owner = r->pool->owner;
  bool provided = MSI_UNLIKELY(owner != NULL) && owner->provider_alloc; /* another allocator's segments */
  if (d->expandable && !provided) return msi_expandable_alloc(d, r->pool, r->set_index, r->size, out);
  uintptr_t ptr;
  int rc;
  if (provided) {
    void *p = NULL;
    int got = owner->provider_alloc(owner->provider_ctx, size, d->index, r->stream, &p);
    rc = got == MEMSNAP_OK && p ? MSI_BE_OK : got == MEMSNAP_OK || got == MEMSNAP_ENOMEM ? MSI_BE_OOM : MSI_BE_ERR;
    if (rc == MSI_BE_ERR) msi_error("device %d: the pool's allocator failed to allocate %zu bytes", d->index, size);
    ptr = (uintptr_t)p;
  } else {
    rc = msi_be->mem_alloc(d->index, size, &ptr);
  }
  if (rc != MSI_BE_OK) return rc;
  d->total_allocated_memory += size;
  *out = msi_block_new(d, ptr, size, r->stream, r->pool);
  (*out)->set_index = r->set_index;
  MSI_STAT_INC(d->stats.segment, k, 1);
  MSI_STAT_INC(d->stats.reserved_bytes, k, (int64_t)size);
  msi_run_peak(&d->run_peak_reserved, d->stats.reserved_bytes[MEMSNAP_POOL_ALL].current);
  if (size >= msi_opt.max_split_size) msi_stat_inc(&d->stats.oversize_segments, 1);
  d->stats.num_device_alloc++;
  if (r->pool->owner) r->pool->owner->malloc_count++;
  if (msi_is_recording())
    msi_history_add(MSI_EV_SEGMENT_ALLOC, d->index, r->stream, ptr, size, size, 0, d->event_stack);
  return MSI_BE_OK;
}

/* Returns a whole cached segment to the device and forgets it; its event says why
 * (d->release_reason, which the caller set). */
static void release_segment(msi_device *d, msi_block *b) {
  int k = b->pool->stat_kind;
  if (msi_is_recording())
    msi_history_add(MSI_EV_SEGMENT_FREE, d->index, b->stream, b->ptr, b->size, b->size, d->release_reason,
                    d->event_stack);
  msi_private_pool *owner = b->pool->owner;
  if (MSI_UNLIKELY(owner != NULL) && owner->provider_free)
    owner->provider_free(owner->provider_ctx, (void *)b->ptr, b->size, d->index, b->stream);
  else if (msi_be->mem_free(d->index, b->ptr, b->size) != MSI_BE_OK)
    msi_error("device %d: freeing segment %#lx failed", d->index, (unsigned long)b->ptr);
  d->total_allocated_memory -= b->size;
  MSI_STAT_DEC(d->stats.segment, k, 1);
  MSI_STAT_DEC(d->stats.reserved_bytes, k, (int64_t)b->size);
  if (b->size >= msi_opt.max_split_size) msi_stat_dec(&d->stats.oversize_segments, 1);
  d->stats.num_device_free++;
  if (b->pool->owner) b->pool->owner->malloc_count--;
  msi_pool_erase(b);
  msi_block_put(d, b);
}

/* ---- freeing and merging --------------------------------------------------------------- */

/* Puts an inactive block (freed, events done) back in its pool, merged with its neighbours;
 * `record`: adds its free_completed event (false: the caller did). */
static void free_block_recorded(msi_device *d, msi_block *b, bool record) {
  int k = b->pool->stat_kind;
  if (record && msi_is_recording())
    msi_history_add(MSI_EV_FREE_COMPLETED, d->index, b->stream, b->ptr, b->size, b->requested_size, 0,
                    d->event_stack);
  int64_t orig_size = (int64_t)b->size, requested = (int64_t)b->requested_size;
  int64_t net_blocks = 0, net_bytes = 0;
  msi_block *neighbours[2] = {b->prev, b->next};
  for (int i = 0; i < 2; i++) {
    size_t taken = msi_try_merge(d, b, neighbours[i]);
    if (taken) {
      net_blocks -= 1;
      net_bytes -= (int64_t)taken;
    }
  }
  msi_pool_insert(b);
  if (is_split(b)) {
    net_blocks += 1;
    net_bytes += (int64_t)b->size;
  }
  if (!b->seg) { /* PyTorch leaves expandable segments out of inactive_split: free pages can go back */
    if (net_blocks > 0) MSI_STAT_INC(d->stats.inactive_split, k, net_blocks);
    else if (net_blocks < 0) MSI_STAT_DEC(d->stats.inactive_split, k, -net_blocks);
    if (net_bytes > 0) MSI_STAT_INC(d->stats.inactive_split_bytes, k, net_bytes);
    else if (net_bytes < 0) MSI_STAT_DEC(d->stats.inactive_split_bytes, k, -net_bytes);
  }
  MSI_STAT_DEC(d->stats.active, k, 1);
  MSI_STAT_DEC(d->stats.active_bytes, k, orig_size);
  MSI_STAT_DEC(d->stats.requested_bytes, k, requested);
}

static void free_block(msi_device *d, msi_block *b) { free_block_recorded(d, b, true); }

/* A block freed during a capture that capture.c found safe to reuse before the capture's end:
 * into its pool (its free_completed recorded now). */
static void reuse_deferred(msi_device *d, msi_block *b) { free_block(d, b); }

/* ---- cross-stream events --------------------------------------------------------------- */

static void *event_get(msi_device *d) {
  if (d->nevent_cache) return d->event_cache[--d->nevent_cache];
  void *ev = NULL;
  if (msi_be->event_create(d->index, &ev) != MSI_BE_OK) return NULL;
  return ev;
}

static void event_put(msi_device *d, void *ev) {
  if (d->nevent_cache == d->event_cache_cap) {
    int cap = d->event_cache_cap ? d->event_cache_cap * 2 : 16;
    void **grown = realloc(d->event_cache, sizeof *grown * (size_t)cap);
    if (!grown) {
      msi_be->event_destroy(d->index, ev);
      return;
    }
    d->event_cache = grown;
    d->event_cache_cap = cap;
  }
  d->event_cache[d->nevent_cache++] = ev;
}

static msi_event_queue *event_queue(msi_device *d, memsnap_stream_t stream) {
  for (int i = 0; i < d->nqueues; i++)
    if (d->queues[i].stream == stream) return &d->queues[i];
  if (d->nqueues == d->queues_cap) {
    int cap = d->queues_cap ? d->queues_cap * 2 : 4;
    msi_event_queue *grown = realloc(d->queues, sizeof *grown * (size_t)cap);
    if (!grown) return NULL;
    d->queues = grown;
    d->queues_cap = cap;
  }
  d->queues[d->nqueues] = (msi_event_queue){stream, NULL, NULL};
  return &d->queues[d->nqueues++];
}

/* Records an event on every stream the block was used on; the block stays inactive until they
 * complete. If the driver refuses an event, that use cannot be tracked: the error is kept and
 * the block waits only for the others. */
static void insert_events(msi_device *d, msi_block *b) {
  for (uint32_t i = 0; i < b->nuses; i++) {
    msi_event_queue *q = event_queue(d, b->uses[i]);
    msi_pending_event *pe = q ? malloc(sizeof *pe) : NULL;
    void *ev = pe ? event_get(d) : NULL;
    if (!ev || msi_be->event_record(d->index, ev, b->uses[i]) != MSI_BE_OK) {
      if (ev) event_put(d, ev);
      free(pe);
      msi_error("device %d: cannot record a stream event for block %#lx", d->index, (unsigned long)b->ptr);
      continue;
    }
    *pe = (msi_pending_event){ev, b, NULL};
    if (q->tail) q->tail->next = pe;
    else q->head = pe;
    q->tail = pe;
    b->event_count++;
    d->pending_events++;
  }
  b->nuses = 0;
  if (b->event_count == 0) free_block(d, b);
}

static void event_done(msi_device *d, msi_event_queue *q) {
  msi_pending_event *pe = q->head;
  q->head = pe->next;
  if (!q->head) q->tail = NULL;
  event_put(d, pe->event);
  d->pending_events--;
  if (--pe->block->event_count == 0) free_block(d, pe->block);
  free(pe);
}

/* Records the events of blocks freed while a capture was underway (querying or recording an
 * event during a capture is illegal, so PyTorch defers them until none is). */
static void insert_deferred_events(msi_device *d) {
  msi_capture_reset(d); /* no capture underway: the deferred blocks' markers are of no use */
  for (size_t i = 0; i < d->ndeferred; i++) insert_events(d, d->deferred[i]);
  d->ndeferred = 0;
}

/* Frees the blocks whose events completed. A stream's events complete in order, so each
 * queue is read from its head until the first pending one. */
void msi_process_events(msi_device *d) {
  if (MSI_UNLIKELY(d->ndeferred != 0 || d->capture_reuse != NULL)) insert_deferred_events(d);
  for (int i = 0; i < d->nqueues; i++) {
    msi_event_queue *q = &d->queues[i];
    while (q->head) {
      int done = msi_be->event_query(d->index, q->head->event);
      if (done == 0) break;
      event_done(d, q); /* an error counts as complete: the context is lost anyway */
    }
  }
}

/* Waits for every outstanding event and frees their blocks. Never during a capture. */
static void synchronize_and_free_events(msi_device *d) {
  d->stats.num_sync_all_streams++;
  insert_deferred_events(d);
  for (int i = 0; i < d->nqueues; i++) {
    msi_event_queue *q = &d->queues[i];
    while (q->head) {
      msi_be->event_synchronize(d->index, q->head->event);
      event_done(d, q);
    }
  }
}

/* ---- free-memory callbacks ------------------------------------------------------------- */

#define MAX_FREE_MEMORY_CALLBACKS 16
static struct {
  memsnap_free_memory_fn fn;
  void *arg;
} free_memory_callbacks[MAX_FREE_MEMORY_CALLBACKS];
static atomic_int n_free_memory_callbacks; /* published after the slot is written */
static pthread_mutex_t free_memory_callbacks_lock = PTHREAD_MUTEX_INITIALIZER;

int msi_add_free_memory_callback(memsnap_free_memory_fn fn, void *arg) {
  pthread_mutex_lock(&free_memory_callbacks_lock);
  int n = atomic_load(&n_free_memory_callbacks);
  if (n == MAX_FREE_MEMORY_CALLBACKS) {
    pthread_mutex_unlock(&free_memory_callbacks_lock);
    msi_error("memsnap_add_free_memory_callback: %d callbacks are registered already", MAX_FREE_MEMORY_CALLBACKS);
    return MEMSNAP_ENOMEM;
  }
  free_memory_callbacks[n].fn = fn;
  free_memory_callbacks[n].arg = arg;
  atomic_store(&n_free_memory_callbacks, n + 1);
  pthread_mutex_unlock(&free_memory_callbacks_lock);
  return MEMSNAP_OK;
}

/* Calls every callback (no lock held); whether any freed something. */
static bool run_free_memory_callbacks(void) {
  bool freed = false;
  int n = atomic_load(&n_free_memory_callbacks);
  for (int i = 0; i < n; i++) freed |= free_memory_callbacks[i].fn(free_memory_callbacks[i].arg) != 0;
  return freed;
}

/* ---- finding memory -------------------------------------------------------------------- */

/* What a free block of an expandable segment can grow to: itself and the unmapped range after it. */
static size_t expandable_size(const msi_block *b) {
  return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

static msi_block *get_free_block(msi_device *d, const request *r) {
  if (MSI_UNLIKELY(d->set_fraction && msi_opt.gc_threshold > 0)) r->pool->get_free_blocks_call_count++;
  msi_block *b = msi_set_lower_bound(r->set, r->size);
  if (!b) return NULL;
  if (MSI_UNLIKELY(b->seg != NULL)) {
    if (d->expandable) {
      /* Best fit by what a block can grow to: a smaller block that can grow less comes first. */
      msi_block *next = msi_set_next(r->set, b);
      while (b->seg && next && expandable_size(next) < expandable_size(b)) {
        b = next;
        next = msi_set_next(r->set, b);
      }
    } else {
      do b = msi_set_next(r->set, b); while (b && b->seg);
      if (!b) return NULL;
    }
  }
  size_t max_split = msi_opt.max_split_size;
  if (r->size < max_split && b->size >= max_split) return NULL; /* no oversize block for small */
  if (r->size >= max_split && b->size >= r->size + msi_opt.max_non_split_rounding) return NULL;
  msi_pool_erase(b);
  return b;
}

/* Frees cached segments of the large pool that have waited longest, until reserved memory is
 * under garbage_collection_threshold of the fraction cap. */
static void garbage_collect(msi_device *d) {
  size_t threshold = (size_t)(msi_opt.gc_threshold * (double)d->allowed_memory_maximum);
  if (d->total_allocated_memory <= threshold) return;
  size_t target = d->total_allocated_memory - threshold, reclaimed = 0;
  d->release_reason = MEMSNAP_RELEASE_GC;
  msi_pool *p = &d->large;
  uint64_t total_age = 0;
  int64_t freeable = 0;
  for (int s = 0; s < p->nsets; s++)
    for (msi_block *b = msi_set_first(&p->sets[s]); b; b = msi_set_next(&p->sets[s], b))
      if (!is_split(b) && !b->seg) {
        total_age += gc_age(b);
        freeable++;
      }
  bool freed = true;
  while (reclaimed < target && freed && freeable > 0) {
    double age_threshold = (double)total_age / (double)freeable;
    freed = false;
    for (int s = 0; s < p->nsets; s++) {
      msi_block *b = msi_set_first(&p->sets[s]);
      while (b) {
        msi_block *next = msi_set_next(&p->sets[s], b);
        if (!is_split(b) && !b->seg && (double)gc_age(b) >= age_threshold) {
          freed = true;
          reclaimed += b->size;
          total_age -= gc_age(b);
          freeable--;
          release_segment(d, b);
        }
        b = next;
      }
    }
  }
}

/* Frees oversize cached blocks of the request's stream: one that alone covers the request,
 * else the largest ones until enough is freed. Returns whether it freed enough. */
static bool release_available_cached_blocks(msi_device *d, const request *r) {
  size_t max_split = msi_opt.max_split_size;
  if (max_split == SIZE_MAX) return false;
  size_t key = r->size < max_split ? max_split : r->size;
  msi_block *b = msi_set_lower_bound(r->set, key);
  d->release_reason = MEMSNAP_RELEASE_OVERSIZE;
  if (b) {
    if (is_split(b) || b->seg) return false; /* oversize blocks are whole classic segments */
    release_segment(d, b);
    return true;
  }
  size_t released = 0;
  for (b = msi_set_last(r->set); b && released < key && b->size >= max_split;) {
    msi_block *prev = msi_set_prev(r->set, b);
    if (!is_split(b) && !b->seg) {
      released += b->size;
      release_segment(d, b);
    }
    b = prev;
  }
  return released >= key;
}

/* Releases the cached blocks of one pool: whole classic segments, and the free pages of
 * expandable segments (a segment left wholly unmapped is released). */
static void release_pool_blocks(msi_device *d, msi_pool *p) {
  msi_block **to_unmap = NULL;
  size_t n = 0, cap = 0;
  for (int s = 0; s < p->nsets; s++) {
    msi_block *b = msi_set_first(&p->sets[s]);
    while (b) {
      msi_block *next = msi_set_next(&p->sets[s], b);
      if (b->seg) { /* unmapping changes the set: gather first, as PyTorch does */
        if (n == cap) {
          size_t c = cap ? cap * 2 : 16;
          msi_block **g = realloc(to_unmap, sizeof *g * c);
          if (!g) {
            msi_error("device %d: out of host memory releasing cached pages", d->index);
            break;
          }
          to_unmap = g;
          cap = c;
        }
        to_unmap[n++] = b;
      } else if (!is_split(b)) {
        release_segment(d, b);
      }
      b = next;
    }
  }
  for (size_t i = 0; i < n; i++) msi_expandable_unmap(d, to_unmap[i]);
  free(to_unmap);
}

/* Releases every cached segment that is not split, and the free pages of expandable segments
 * (empty_cache), then the private pools no capture or MemPool uses any more; `reason`
 * (MEMSNAP_RELEASE_*) goes into their events. */
static void release_cached_blocks(msi_device *d, uint8_t reason) {
  d->release_reason = reason;
  synchronize_and_free_events(d);
  release_pool_blocks(d, &d->large);
  release_pool_blocks(d, &d->small);
  if (MSI_UNLIKELY(d->private_pools != NULL)) msi_private_pools_release_freeable(d, NULL, release_pool_blocks);
}

/* A cached block for `r` in a private pool that lends itself when the device is out of memory
 * (MemPool(use_on_oom=True)), the pools tried in turn: *out_r is the request in that pool. */
static bool free_block_of_lending_pool(msi_device *d, const request *r, request *out_r, msi_block **out) {
  for (msi_private_pool *pp = d->private_pools; pp; pp = pp->next) {
    if (!pp->use_on_oom) continue;
    request q = *r;
    q.pool = r->size <= MSI_SMALL_SIZE ? &pp->small : &pp->large;
    int set_index = stream_set(q.pool, r->stream);
    if (set_index < 0) continue;
    q.set_index = (uint16_t)set_index;
    q.set = &q.pool->sets[set_index];
    msi_block *b = get_free_block(d, &q);
    if (b) {
      *out_r = q;
      *out = b;
      return true;
    }
  }
  return false;
}

/* Turns the block found for `r` into an allocated block of r->size bytes, splitting off the
 * remainder when `split` (should_split: when worth it). */
static msi_block *use_block(msi_device *d, const request *r, msi_block *b, size_t orig_size, bool split) {
  int k = r->pool->stat_kind;
  bool already_split = is_split(b);
  if (split) {
    msi_block *rest = b;
    b = msi_block_new(d, rest->ptr, r->size, r->stream, r->pool);
    b->set_index = rest->set_index;
    b->seg = rest->seg;
    b->prev = rest->prev;
    if (b->prev) b->prev->next = b;
    b->next = rest;
    rest->prev = b;
    rest->ptr += r->size;
    rest->size -= r->size;
    msi_pool_insert(rest);
    if (b->seg) {
      /* expandable segments stay out of inactive_split (free_block) */
    } else if (already_split) {
      MSI_STAT_DEC(d->stats.inactive_split_bytes, k, (int64_t)b->size);
    } else {
      MSI_STAT_INC(d->stats.inactive_split_bytes, k, (int64_t)rest->size);
      MSI_STAT_INC(d->stats.inactive_split, k, 1);
    }
  } else if (already_split && !b->seg) {
    MSI_STAT_DEC(d->stats.inactive_split_bytes, k, (int64_t)b->size);
    MSI_STAT_DEC(d->stats.inactive_split, k, 1);
  }
  b->allocated = true;
  b->requested_size = orig_size;
  b->stack_id = d->event_stack;
  if (msi_is_recording())
    msi_history_add(MSI_EV_ALLOC, d->index, r->stream, b->ptr, b->size, orig_size, 0, d->event_stack);
  MSI_STAT_INC(d->stats.allocation, k, 1);
  MSI_STAT_INC(d->stats.allocated_bytes, k, (int64_t)b->size);
  msi_run_peak(&d->run_peak_allocated, d->stats.allocated_bytes[MEMSNAP_POOL_ALL].current);
  MSI_STAT_INC(d->stats.active, k, 1);
  MSI_STAT_INC(d->stats.active_bytes, k, (int64_t)b->size);
  MSI_STAT_INC(d->stats.requested_bytes, k, (int64_t)orig_size);
  if (b->size >= msi_opt.max_split_size) msi_stat_inc(&d->stats.oversize_allocations, 1);
  return b;
}

static void format_size(char *buf, size_t len, size_t bytes) {
  if (bytes < 1024) snprintf(buf, len, "%zu bytes", bytes);
  else if (bytes < ((size_t)1 << 20)) snprintf(buf, len, "%.2f KiB", (double)bytes / 1024.0);
  else if (bytes < ((size_t)1 << 30)) snprintf(buf, len, "%.2f MiB", (double)bytes / 1048576.0);
  else snprintf(buf, len, "%.2f GiB", (double)bytes / 1073741824.0);
}

/* Leaves PyTorch's out-of-memory message, with memsnap's names, in the last error. */
static void report_oom(msi_device *d, const request *r, size_t orig_size) {
  size_t size = r->size;
  size_t free_bytes = 0, total = 0;
  msi_be->device_info(d->index, &free_bytes, &total, NULL, 0);
  msi_last_oom = (msi_oom_info){true, d->index, r->alloc_size, d->set_fraction ? d->allowed_memory_maximum : total,
                                free_bytes};
  int64_t allocated = d->stats.allocated_bytes[MEMSNAP_POOL_ALL].current;
  int64_t reserved = d->stats.reserved_bytes[MEMSNAP_POOL_ALL].current;
  if (msi_is_recording())
    msi_history_add(MSI_EV_OOM, d->index, r->stream, free_bytes, size, orig_size, (uint64_t)(reserved - allocated),
                    d->event_stack);
  char s_req[32], s_total[32], s_free[32], s_alloc[32], s_unused[32], s_allowed[48] = "";
  format_size(s_req, sizeof s_req, size);
  format_size(s_total, sizeof s_total, total);
  format_size(s_free, sizeof s_free, free_bytes);
  format_size(s_alloc, sizeof s_alloc, (size_t)allocated);
  format_size(s_unused, sizeof s_unused, (size_t)(reserved - allocated));
  if (d->set_fraction) {
    format_size(s_allowed, sizeof s_allowed - 12, d->allowed_memory_maximum);
    strcat(s_allowed, " allowed; ");
  }
  msi_error("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is "
            "free. %sOf the allocated memory %s is allocated by memsnap, and %s is reserved by memsnap "
            "but unallocated. If reserved but unallocated memory is large try setting "
            "MEMSNAP_MAX_SPLIT_SIZE_MB to avoid fragmentation.",
            s_req, d->index, s_total, s_free, s_allowed, s_alloc, s_unused);
}

int msi_device_malloc(msi_device *d, size_t orig_size, memsnap_stream_t stream, uint32_t stack, void **out) {
  int rc = MEMSNAP_OK;
  msi_block *b = NULL;
  pthread_mutex_lock(&d->lock);
  d->event_stack = stack;
  if (MSI_UNLIKELY((d->pending_events | d->ndeferred) != 0 || d->capture_reuse != NULL)) {
    if (MSI_LIKELY(d->ncaptures == 0)) msi_process_events(d);
    else msi_capture_reclaim(d, stream, reuse_deferred); /* graph_capture_record_stream_reuse */
  }
  request r;
  r.size = msi_round_size(orig_size);
  r.pool = MSI_LIKELY(d->ncaptures == 0) ? (r.size <= MSI_SMALL_SIZE ? &d->small : &d->large)
                                         : msi_pool_for(d, r.size, stream);
  r.alloc_size = msi_allocation_size(r.size);
  r.stream = stream;
  int set_index = stream_set(r.pool, stream);
  if (MSI_UNLIKELY(set_index < 0 || msi_reserve_blocks(d) != 0)) {
    msi_error("device %d: out of host memory", d->index);
    rc = MEMSNAP_ENOMEM;
    goto cleanup;
  }
  r.set_index = (uint16_t)set_index;
  r.set = &r.pool->sets[set_index];
  b = get_free_block(d, &r);
  if (!b && MSI_UNLIKELY(atomic_load_explicit(&n_free_memory_callbacks, memory_order_relaxed) > 0)) {
    /* PyTorch's free-memory callbacks (other processes' released IPC blocks, collected), which
     * free through the allocator: called without the lock, then the cache is searched again. */
    pthread_mutex_unlock(&d->lock);
    bool freed = run_free_memory_callbacks();
    pthread_mutex_lock(&d->lock);
    d->event_stack = stack;
    if (freed) {
      if (MSI_UNLIKELY(msi_reserve_blocks(d) != 0)) {
        msi_error("device %d: out of host memory", d->index);
        rc = MEMSNAP_ENOMEM;
        goto cleanup;
      }
      r.set = &r.pool->sets[set_index]; /* the sets may have grown meanwhile */
      b = get_free_block(d, &r);
    }
  }
  if (!b) {
    if (MSI_UNLIKELY(d->set_fraction && msi_opt.gc_threshold > 0)) garbage_collect(d);
    int be = alloc_segment(d, &r, false, &b);
    if (be == MSI_BE_OOM && release_available_cached_blocks(d, &r)) be = alloc_segment(d, &r, false, &b);
    if (be == MSI_BE_OOM && MSI_LIKELY(d->ncaptures == 0)) { /* a capture must not synchronize */
      release_cached_blocks(d, MEMSNAP_RELEASE_RETRY);
      be = alloc_segment(d, &r, true, &b);
    }
    if (be == MSI_BE_OOM && MSI_UNLIKELY(d->private_pools != NULL) && !r.pool->owner) {
      /* the last resort, as PyTorch: a cached block of a pool that lends itself (use_on_oom) */
      request lent;
      if (free_block_of_lending_pool(d, &r, &lent, &b)) {
        r = lent;
        be = MSI_BE_OK;
      }
    }
    if (be == MSI_BE_OOM) {
      d->stats.num_ooms++;
      report_oom(d, &r, orig_size);
      rc = MEMSNAP_ENOMEM;
      goto cleanup;
    }
    if (be != MSI_BE_OK) {
      rc = MEMSNAP_EBACKEND;
      goto cleanup;
    }
  }
  b = use_block(d, &r, b, orig_size, should_split(d, b, r.size));
  if (MSI_UNLIKELY(msi_ptrmap_put(&d->live, b) != 0)) {
    /* Cannot track it: give it back rather than hand out memory that cannot be freed. */
    msi_error("device %d: out of host memory", d->index);
    b->allocated = false;
    MSI_STAT_DEC(d->stats.allocation, r.pool->stat_kind, 1);
    MSI_STAT_DEC(d->stats.allocated_bytes, r.pool->stat_kind, (int64_t)b->size);
    if (b->size >= msi_opt.max_split_size) msi_stat_dec(&d->stats.oversize_allocations, 1);
    free_block(d, b);
    rc = MEMSNAP_ENOMEM;
    goto cleanup;
  }
  *out = (void *)b->ptr;
cleanup:
  pthread_mutex_unlock(&d->lock);
  return rc;
}

/* Frees allocated block b, taken out of the pointer map already. Lock held. */
static void free_taken(msi_device *d, msi_block *b) {
  int k = b->pool->stat_kind;
  b->allocated = false;
  if (MSI_UNLIKELY(b->told)) { /* a role told of it (roles.c) ends with it */
    msi_roles_forget(&d->roles, b->ptr);
    b->told = false;
  }
  bool at_once = !b->nuses; /* no other stream used it: completed now */
  if (msi_is_recording()) {
    msi_history_add_free(at_once, d->index, b->stream, b->ptr, b->size, b->requested_size, d->event_stack);
  }
  MSI_STAT_DEC(d->stats.allocation, k, 1);
  MSI_STAT_DEC(d->stats.allocated_bytes, k, (int64_t)b->size);
  if (b->size >= msi_opt.max_split_size) msi_stat_dec(&d->stats.oversize_allocations, 1);
  if (MSI_LIKELY(at_once)) free_block_recorded(d, b, false); /* its free_completed is added */
  else if (MSI_UNLIKELY(d->ncaptures) && msi_defer_block(d, b)) { /* events after the capture... */
    if (msi_opt.capture_stream_reuse) msi_capture_mark(d, b);      /* ...or reused before its end */
  } else insert_events(d, b);
}

int msi_device_free(msi_device *d, void *ptr, uint32_t stack) {
  pthread_mutex_lock(&d->lock);
  d->event_stack = stack;
  msi_block *b = msi_ptrmap_take(&d->live, (uintptr_t)ptr);
  if (MSI_UNLIKELY(!b)) {
    pthread_mutex_unlock(&d->lock);
    return MEMSNAP_EINVAL;
  }
  free_taken(d, b);
  pthread_mutex_unlock(&d->lock);
  return MEMSNAP_OK;
}

void msi_device_free_locked(msi_device *d, msi_block *b) {
  msi_ptrmap_take(&d->live, b->ptr);
  free_taken(d, b);
}

msi_block *msi_device_claim_locked(msi_device *d, msi_block *b, size_t size) {
  if (msi_reserve_blocks(d) != 0) {
    msi_error("device %d: out of host memory", d->index);
    return NULL;
  }
  request r;
  r.size = size;
  r.alloc_size = 0;
  r.stream = b->stream;
  r.pool = b->pool;
  r.set_index = b->set_index;
  r.set = &b->pool->sets[b->set_index];
  msi_pool_erase(b);
  msi_block *a = use_block(d, &r, b, size, b->size > size);
  if (msi_ptrmap_put(&d->live, a) != 0) {
    msi_error("device %d: out of host memory", d->index);
    a->allocated = false; /* as msi_device_malloc gives a block back it cannot track */
    MSI_STAT_DEC(d->stats.allocation, r.pool->stat_kind, 1);
    MSI_STAT_DEC(d->stats.allocated_bytes, r.pool->stat_kind, (int64_t)a->size);
    if (a->size >= msi_opt.max_split_size) msi_stat_dec(&d->stats.oversize_allocations, 1);
    free_block(d, a);
    return NULL;
  }
  return a;
}

int msi_device_record_stream(msi_device *d, void *ptr, memsnap_stream_t stream) {
  int found = 0;
  pthread_mutex_lock(&d->lock);
  msi_block *b = msi_ptrmap_get(&d->live, (uintptr_t)ptr);
  if (!b) goto out;
  found = 1;
  if (stream == b->stream) goto out; /* uses on the allocation stream need no event */
  for (uint32_t i = 0; i < b->nuses; i++)
    if (b->uses[i] == stream) goto out;
  if (b->nuses == b->uses_cap) {
    uint32_t cap = b->uses_cap ? (uint32_t)b->uses_cap * 2 : 2;
    memsnap_stream_t *grown = cap <= UINT16_MAX ? realloc(b->uses, sizeof *grown * cap) : NULL;
    if (!grown) {
      msi_error("device %d: out of host memory in record_stream", d->index);
      found = -1;
      goto out;
    }
    b->uses = grown;
    b->uses_cap = (uint16_t)cap;
  }
  b->uses[b->nuses++] = stream;
out:
  pthread_mutex_unlock(&d->lock);
  return found;
}

void msi_device_empty_cache(msi_device *d, uint32_t stack) {
  pthread_mutex_lock(&d->lock);
  d->event_stack = stack;
  if (d->ncaptures) /* releasing synchronizes, which a capture forbids (PyTorch asserts) */
    msi_error("device %d: empty_cache while a CUDA graph capture allocates to a private pool: nothing released",
              d->index);
  else
    release_cached_blocks(d, MEMSNAP_RELEASE_EMPTY_CACHE);
  pthread_mutex_unlock(&d->lock);
}

int msi_device_empty_pool(msi_device *d, const uint64_t id[2], uint32_t stack) {
  int rc = MEMSNAP_OK;
  pthread_mutex_lock(&d->lock);
  d->event_stack = stack;
  if (d->ncaptures) {
    msi_error("device %d: emptying a pool's cache while a CUDA graph capture allocates to a private pool", d->index);
    rc = MEMSNAP_EINVAL;
  } else if (!msi_private_pool_find(d, id)) {
    msi_error("device %d: no pool (%llu, %llu)", d->index, (unsigned long long)id[0], (unsigned long long)id[1]);
    rc = MEMSNAP_EINVAL;
  } else {
    synchronize_and_free_events(d);
    d->release_reason = MEMSNAP_RELEASE_POOL;
    msi_private_pools_release_freeable(d, id, release_pool_blocks);
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}

void msi_device_apply_settings(msi_device *d) {
  pthread_mutex_lock(&d->lock);
  d->stats.max_split_size = msi_opt.max_split_size == SIZE_MAX ? -1 : (int64_t)msi_opt.max_split_size;
  if (!d->async && d->expandable != msi_opt.expandable_segments)
    d->expandable = msi_opt.expandable_segments && msi_expandable_usable(d);
  pthread_mutex_unlock(&d->lock);
}

int msi_device_set_fraction(msi_device *d, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    msi_error("invalid memory fraction %g: it must be between 0 and 1", fraction);
    return MEMSNAP_EINVAL;
  }
  pthread_mutex_lock(&d->lock);
  d->set_fraction = fraction < 1.0;
  d->allowed_memory_maximum = d->set_fraction ? (size_t)(fraction * (double)d->device_total) : 0;
  pthread_mutex_unlock(&d->lock);
  return MEMSNAP_OK;
}

double msi_device_get_fraction(msi_device *d) {
  pthread_mutex_lock(&d->lock);
  double f = d->set_fraction && d->device_total ? (double)d->allowed_memory_maximum / (double)d->device_total : 1.0;
  pthread_mutex_unlock(&d->lock);
  return f;
}

static int cmp_block_ptr(const void *a, const void *b) {
  uintptr_t x = (*(msi_block *const *)a)->ptr, y = (*(msi_block *const *)b)->ptr;
  return x < y ? -1 : x > y;
}

/* The heads of the segments being listed: a growing array, NULL once out of host memory. */
typedef struct head_list {
  msi_block **v;
  size_t n, cap;
} head_list;

/* Adds b if it starts a segment: a classic segment's first block, or the first mapped block of a
 * run of mapped blocks in an expandable segment (PyTorch lists each run as a segment). */
static void add_head(head_list *h, msi_block *b) {
  if (!h->v || !b->mapped || (b->prev && b->prev->mapped)) return;
  if (h->n == h->cap) {
    msi_block **g = realloc(h->v, sizeof *g * h->cap * 2);
    if (!g) {
      free(h->v);
      h->v = NULL;
      return;
    }
    h->v = g;
    h->cap *= 2;
  }
  h->v[h->n++] = b;
}

static void add_pool_heads(head_list *h, msi_pool *p) {
  for (int s = 0; s < p->nsets; s++)
    for (msi_block *b = msi_set_first(&p->sets[s]); b; b = msi_set_next(&p->sets[s], b)) add_head(h, b);
}

size_t msi_device_segments(msi_device *d, msi_block ***out) {
  size_t cap = 0;
  *out = NULL;
  return msi_device_segments_into(d, out, &cap);
}

size_t msi_device_segments_into(msi_device *d, msi_block ***buf, size_t *cap) {
  /* Each segment's first block is allocated, cached or waiting on events (or deferred). */
  head_list h = {*buf, 0, *cap};
  if (!h.v || h.cap < 64) {
    free(h.v);
    h.v = malloc(sizeof(msi_block *) * 64);
    h.cap = 64;
  }
  for (size_t i = 0; i <= d->live.mask; i++)
    if (d->live.slots[i].block) add_head(&h, d->live.slots[i].block);
  add_pool_heads(&h, &d->small);
  add_pool_heads(&h, &d->large);
  for (msi_private_pool *pp = d->private_pools; pp; pp = pp->next) {
    add_pool_heads(&h, &pp->small);
    add_pool_heads(&h, &pp->large);
  }
  for (size_t i = 0; i < d->ndeferred; i++) add_head(&h, d->deferred[i]);
  for (int q = 0; q < d->nqueues; q++)
    for (msi_pending_event *pe = d->queues[q].head; pe; pe = pe->next)
      if (pe->block->event_count && !pe->block->prev) {
        bool seen = false; /* a block waits on one event per stream: add it once */
        for (msi_pending_event *e2 = d->queues[q].head; e2 != pe && !seen; e2 = e2->next) seen = e2->block == pe->block;
        for (int q2 = 0; q2 < q && !seen; q2++)
          for (msi_pending_event *e2 = d->queues[q2].head; e2 && !seen; e2 = e2->next) seen = e2->block == pe->block;
        if (!seen) add_head(&h, pe->block);
      }
  *buf = h.v;
  *cap = h.v ? h.cap : 0;
  if (!h.v) {
    msi_error("device %d: out of host memory listing segments", d->index);
    return SIZE_MAX;
  }
  qsort(h.v, h.n, sizeof *h.v, cmp_block_ptr);
  return h.n;
}

int msi_device_init(msi_device *d, int index) {
  memset(d, 0, sizeof *d);
  d->index = index;
  d->small.is_small = true;
  d->small.stat_kind = MEMSNAP_POOL_SMALL;
  d->large.stat_kind = MEMSNAP_POOL_LARGE;
  d->stats.max_split_size = msi_opt.max_split_size == SIZE_MAX ? -1 : (int64_t)msi_opt.max_split_size;
  if (msi_ptrmap_init(&d->live, 1024) != 0) {
    msi_error("device %d: out of host memory", index);
    return -1;
  }
  if (msi_be->device_info(index, NULL, &d->device_total, NULL, 0) != MSI_BE_OK) {
    msi_ptrmap_destroy(&d->live);
    return -1;
  }
  pthread_mutex_init(&d->lock, NULL);
  if (msi_opt.memory_fraction < 1.0) msi_device_set_fraction(d, msi_opt.memory_fraction);
  /* A configuration the driver cannot serve warns once and falls back to classic segments. */
  if (msi_opt.async_mode) msi_async_init(d);
  else if (msi_opt.expandable_segments) d->expandable = msi_expandable_usable(d);
  return 0;
}

void msi_device_destroy(msi_device *d) {
  pthread_mutex_lock(&d->lock);
  d->event_stack = 0;
  if (d->async) msi_async_destroy(d);
  /* End the captures and make every private pool freeable; free every live block (dropping
   * stream uses), wait for events, then every segment is whole and cached, and
   * release_cached_blocks returns them all. */
  for (int i = 0; i < d->ncaptures; i++)
    if (d->captures[i].release_ctx) d->captures[i].release_ctx(d->captures[i].ctx);
  d->ncaptures = 0;
  for (msi_private_pool *pp = d->private_pools; pp; pp = pp->next) pp->use_count = 0;
  msi_capture_reset(d);
  for (size_t i = 0; i < d->ndeferred; i++) {
    d->deferred[i]->nuses = 0;
    free_block(d, d->deferred[i]);
  }
  d->ndeferred = 0;
  for (size_t i = 0; i <= d->live.mask; i++) {
    msi_block *b;
    while ((b = d->live.slots[i].block) != NULL) {
      msi_ptrmap_take(&d->live, b->ptr);
      b->allocated = false;
      b->nuses = 0;
      free_block(d, b);
    }
  }
  release_cached_blocks(d, MEMSNAP_RELEASE_SHUTDOWN);
  msi_private_pools_destroy(d);
  msi_expandable_destroy_all(d);
  for (int i = 0; i < d->nevent_cache; i++) msi_be->event_destroy(d->index, d->event_cache[i]);
  msi_blocks_destroy(d);
  free(d->event_cache);
  free(d->queues);
  free(d->small.sets);
  free(d->large.sets);
  free(d->captures);
  free(d->deferred);
  msi_ptrmap_destroy(&d->live);
  msi_roles_free(&d->roles);
  pthread_mutex_unlock(&d->lock);
  pthread_mutex_destroy(&d->lock);
}
