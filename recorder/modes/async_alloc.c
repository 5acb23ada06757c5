/* async_alloc.c: the stream-ordered mode (MEMSNAP_ALLOCATOR=async, or backend:cudaMallocAsync
 * in PYTORCH_CUDA_ALLOC_CONF), as PyTorch's CUDAMallocAsyncAllocator.cpp.
 *
 * There is no cache here: every request goes to the device's stream-ordered pool (the driver's
 * default cuMemPool, cuMemAllocAsync / cuMemFreeAsync; on the sim backend a simulated pool),
 * whose release threshold is set so that it keeps what is freed. The driver decides reuse: a
 * block freed on a stream is reused at once by that stream, by others once the free is known to
 * be complete. memsnap keeps what PyTorch's backend keeps:
 *   - each live allocation's size, stream and the streams it was used on (record_stream); a
 *     block used on other streams is freed, as PyTorch's backend frees it, on a stream of
 *     memsnap's own (the "unifying free stream", made at init) after that stream waited for the
 *     block's stream and every stream that used it: freed on its own stream, the block would be
 *     reused at once by the next allocation there while the other streams still use it;
 *   - the bytes allocated through it, against the memory-fraction cap (no retry: an allocation
 *     past the cap, or one the pool refuses, is out of memory at once, as in PyTorch);
 *   - statistics: the pool's reserved and used bytes, current and peak, as allocated_bytes,
 *     active_bytes and reserved_bytes (all); every other statistic stays zero, as PyTorch leaves
 *     it; reset_peak resets the pool's high-water marks; reset_accumulated does nothing.
 * Recording: alloc, free_requested and free_completed of each block (the free is complete in
 * stream order), and the pool's growth and shrinkage as segment_map / segment_unmap events, read
 * from the pool after each call while recording (the pool's internal layout is the driver's:
 * the events carry the size of the change and the address of the allocation that caused it);
 * never while a capture is underway (reading the pool there invalidates the capture: PyTorch's
 * test_graph_capture_simple failed so), where the next call after it records the change.
 * CUDA graphs: the driver captures cuMemAllocAsync and cuMemFreeAsync as graph memory nodes, so
 * a capture needs no private pool here. As PyTorch does, a block allocated before a capture and
 * freed during one is freed only once no capture is underway (its free must not enter the
 * graph). A capture that ended without its end call (PyTorch ends the pool only after the driver
 * ended the capture, so not when that failed) would count as underway for good; where its stream
 * is known (memsnap_pool_capture_stream; the C++ allocator names it) each call during a capture
 * asks the driver and drops one whose stream, seen capturing, no longer captures it
 * (msi_captures_drop_ended), and the frees that waited for it go ahead.
 * Every function takes the device lock, except msi_async_stats (lock held). Its block structs
 * and deferred frees come from blocks.c, below; alloc.c starts and ends the mode (msi_async_init,
 * msi_async_destroy) and api.c routes the calls here: nothing here calls up into either.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "history/history.h"
#include "internal.h"

typedef struct msi_async_state {
  uint64_t used;          /* bytes allocated through memsnap, for the fraction cap */
  uint64_t reserved_seen; /* the pool's reserved bytes when last looked at (recording) */
  memsnap_stream_t free_stream; /* where blocks used on other streams are freed */
  bool has_free_stream;
} msi_async_state;

int msi_async_init(msi_device *d) {
  if (msi_be->async_supported(d->index) != 1) {
    char why[256];
    snprintf(why, sizeof why, "%s", memsnap_last_error());
    msi_warn("device %d: the stream-ordered allocator (MEMSNAP_ALLOCATOR=async) is not available (%s); "
             "using the caching allocator", d->index, why);
    return -1;
  }
  d->async = calloc(1, sizeof *d->async);
  if (!d->async) {
    msi_warn("device %d: out of host memory; using the caching allocator", d->index);
    return -1;
  }
  d->async->has_free_stream = msi_be->side_stream(d->index, &d->async->free_stream) == MSI_BE_OK;
  if (!d->async->has_free_stream)
    msi_warn("device %d: no stream of memsnap's own (%s): a block used on other streams is freed on its own "
             "stream, after it waited for them", d->index, memsnap_last_error());
  return 0;
}

void msi_async_destroy(msi_device *d) {
  /* Give every live allocation back (and the deferred ones), then the pool's memory. */
  for (size_t i = 0; i < d->ndeferred; i++) {
    msi_be->async_free(d->index, d->deferred[i]->ptr, d->deferred[i]->stream);
    msi_block_put(d, d->deferred[i]);
  }
  d->ndeferred = 0;
  for (size_t i = 0; i <= d->live.mask; i++) {
    msi_block *b;
    while ((b = d->live.slots[i].block) != NULL) {
      msi_ptrmap_take(&d->live, b->ptr);
      msi_be->async_free(d->index, b->ptr, b->stream);
      msi_block_put(d, b);
    }
  }
  msi_be->async_trim(d->index);
  free(d->async);
  d->async = NULL;
}

/* While recording: the pool's reserved bytes changed since last seen become a map or unmap;
 * an unmap's extra is `reason` (MEMSNAP_RELEASE_EMPTY_CACHE for a trim, else the driver's own). */
static void record_pool_change(msi_device *d, uintptr_t at, memsnap_stream_t stream, uint8_t reason) {
  if (MSI_UNLIKELY(d->ncaptures)) return; /* see the top of this file */
  uint64_t reserved = 0, reserved_high, used, used_high;
  if (msi_be->async_usage(d->index, &reserved, &reserved_high, &used, &used_high) != MSI_BE_OK) return;
  uint64_t seen = d->async->reserved_seen;
  if (reserved > seen)
    msi_history_add(MSI_EV_SEGMENT_MAP, d->index, stream, at, reserved - seen, reserved - seen, 0, d->event_stack);
  else if (reserved < seen)
    msi_history_add(MSI_EV_SEGMENT_UNMAP, d->index, stream, at, seen - reserved, seen - reserved, reason, d->event_stack);
  d->async->reserved_seen = reserved;
}

static void format_size(char *buf, size_t len, uint64_t bytes) {
  if (bytes < ((uint64_t)1 << 20)) snprintf(buf, len, "%.2f KiB", (double)bytes / 1024.0);
  else if (bytes < ((uint64_t)1 << 30)) snprintf(buf, len, "%.2f MiB", (double)bytes / 1048576.0);
  else snprintf(buf, len, "%.2f GiB", (double)bytes / 1073741824.0);
}

static void free_block(msi_device *d, msi_block *b, uint32_t stack);

/* Frees the blocks whose free waited for the end of a capture. */
static void free_deferred(msi_device *d) {
  for (size_t i = 0; i < d->ndeferred; i++) free_block(d, d->deferred[i], d->event_stack);
  d->ndeferred = 0;
}

int msi_async_malloc(msi_device *d, size_t size, memsnap_stream_t stream, uint32_t stack, void **out) {
  int rc = MEMSNAP_OK;
  pthread_mutex_lock(&d->lock);
  d->event_stack = stack;
  if (MSI_UNLIKELY(d->ncaptures)) msi_captures_drop_ended(d);
  if (MSI_UNLIKELY(d->ndeferred) && d->ncaptures == 0) free_deferred(d);
  msi_async_state *st = d->async;
  uintptr_t ptr = 0;
  int be = MSI_BE_OOM;
  if (msi_reserve_blocks(d) != 0) {
    msi_error("device %d: out of host memory", d->index);
    rc = MEMSNAP_ENOMEM;
    goto out;
  }
  if (!d->set_fraction || st->used + size <= d->allowed_memory_maximum)
    be = msi_be->async_alloc(d->index, size, stream, &ptr);
  if (be == MSI_BE_OOM) {
    size_t free_bytes = 0, total = 0;
    msi_be->device_info(d->index, &free_bytes, &total, NULL, 0);
    msi_last_oom = (msi_oom_info){true, d->index, size, d->set_fraction ? d->allowed_memory_maximum : total, free_bytes};
    if (msi_is_recording())
      msi_history_add(MSI_EV_OOM, d->index, stream, free_bytes, size, size, 0, d->event_stack);
    char s_used[32], s_req[32], s_total[32], s_free[32], s_cap[64] = "none";
    format_size(s_used, sizeof s_used, st->used);
    format_size(s_req, sizeof s_req, size);
    format_size(s_total, sizeof s_total, total);
    format_size(s_free, sizeof s_free, free_bytes);
    if (d->set_fraction) format_size(s_cap, sizeof s_cap, d->allowed_memory_maximum);
    msi_error("CUDA out of memory. Allocation on device %d would exceed allowed memory. Currently allocated: %s; "
              "requested: %s; device limit: %s; free (according to CUDA): %s; memory fraction cap: %s",
              d->index, s_used, s_req, s_total, s_free, s_cap);
    rc = MEMSNAP_ENOMEM;
    goto out;
  }
  if (be != MSI_BE_OK) {
    rc = MEMSNAP_EBACKEND;
    goto out;
  }
  msi_block *b = msi_block_new(d, ptr, size, stream, &d->large);
  b->captured = d->ncaptures > 0; /* allocated while a capture was underway */
  b->allocated = true;
  b->requested_size = size;
  b->stack_id = stack;
  if (msi_ptrmap_put(&d->live, b) != 0) {
    msi_be->async_free(d->index, ptr, stream);
    msi_block_put(d, b);
    msi_error("device %d: out of host memory", d->index);
    rc = MEMSNAP_ENOMEM;
    goto out;
  }
  st->used += size;
  if (msi_is_recording()) {
    record_pool_change(d, ptr, stream, MEMSNAP_RELEASE_DRIVER);
    msi_history_add(MSI_EV_ALLOC, d->index, stream, ptr, size, size, 0, stack);
  }
  *out = (void *)ptr;
out:
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int msi_async_free(msi_device *d, void *ptr, uint32_t stack) {
  pthread_mutex_lock(&d->lock);
  d->event_stack = stack;
  msi_block *b = msi_ptrmap_take(&d->live, (uintptr_t)ptr);
  if (!b) {
    pthread_mutex_unlock(&d->lock);
    return MEMSNAP_EINVAL;
  }
  if (MSI_UNLIKELY(b->told)) { /* a role told of it (roles.c) ends with it */
    msi_roles_forget(&d->roles, b->ptr);
    b->told = false;
  }
  if (MSI_UNLIKELY(d->ncaptures)) msi_captures_drop_ended(d);
  if (MSI_UNLIKELY(d->ncaptures) && !b->captured && msi_defer_block(d, b)) { /* allocated outside the capture */
    pthread_mutex_unlock(&d->lock);
    return MEMSNAP_OK;
  }
  if (MSI_UNLIKELY(d->ndeferred) && d->ncaptures == 0) free_deferred(d);
  free_block(d, b, stack);
  pthread_mutex_unlock(&d->lock);
  return MEMSNAP_OK;
}

/* Whether the block's stream or a stream that used it is capturing (or cannot say): its free then
 * stays off the unifying stream. Asked only while memsnap counts a capture underway, which may
 * outlive it: PyTorch never ends the pool of a capture whose end failed. */
static bool touches_capture(msi_device *d, const msi_block *b) {
  uint64_t id;
  size_t n;
  if (msi_be->capture_info(d->index, b->stream, &id, NULL, 0, &n) != 0) return true;
  for (uint32_t i = 0; i < b->nuses; i++)
    if (msi_be->capture_info(d->index, b->uses[i], &id, NULL, 0, &n) != 0) return true;
  return false;
}

/* Makes stream `on` wait for `after` before b's free; a failure is said (the free goes on). */
static void order_free_after(msi_device *d, const msi_block *b, memsnap_stream_t on, memsnap_stream_t after) {
  if (msi_be->stream_wait(d->index, on, after) != MSI_BE_OK)
    msi_error("device %d: cannot order the free of %#lx after stream %p", d->index, (unsigned long)b->ptr,
              (void *)after);
}

/* Gives b back to the pool in stream order and forgets it. Lock held. */
static void free_block(msi_device *d, msi_block *b, uint32_t stack) {
  /* Used on other streams: freed on the unifying stream once it waited for the block's stream and
   * every user; on the block's stream after it waited for the users where there is none, or
   * where one of those streams is capturing (a wait on a capturing stream would pull the
   * unifying stream into the capture). */
  memsnap_stream_t on = b->stream;
  if (b->nuses && d->async->has_free_stream && (!d->ncaptures || !touches_capture(d, b))) {
    on = d->async->free_stream;
    order_free_after(d, b, on, b->stream);
  }
  for (uint32_t i = 0; i < b->nuses; i++) order_free_after(d, b, on, b->uses[i]);
  if (msi_be->async_free(d->index, b->ptr, on) != MSI_BE_OK)
    msi_error("device %d: freeing %#lx failed", d->index, (unsigned long)b->ptr);
  d->async->used -= b->size;
  if (msi_is_recording()) {
    msi_history_add_free(true, d->index, b->stream, b->ptr, b->size, b->size, stack);
    record_pool_change(d, b->ptr, b->stream, MEMSNAP_RELEASE_DRIVER);
  }
  msi_block_put(d, b);
}

int msi_async_record_stream(msi_device *d, void *ptr, memsnap_stream_t stream) {
  int found = 0;
  pthread_mutex_lock(&d->lock);
  msi_block *b = msi_ptrmap_get(&d->live, (uintptr_t)ptr);
  if (b) {
    found = 1;
    bool known = stream == b->stream;
    for (uint32_t i = 0; i < b->nuses && !known; i++) known = b->uses[i] == stream;
    if (!known) {
      memsnap_stream_t *g = b->nuses < UINT16_MAX ? realloc(b->uses, sizeof *g * (b->nuses + 1)) : NULL;
      if (!g) {
        msi_error("device %d: out of host memory in record_stream", d->index);
        found = -1;
      } else {
        b->uses = g;
        b->uses[b->nuses++] = stream;
        b->uses_cap = (uint16_t)b->nuses;
      }
    }
  }
  pthread_mutex_unlock(&d->lock);
  return found;
}

void msi_async_empty_cache(msi_device *d, uint32_t stack) {
  pthread_mutex_lock(&d->lock);
  d->event_stack = stack;
  if (msi_be->async_trim(d->index) != MSI_BE_OK)
    msi_error("device %d: trimming the stream-ordered pool failed: %s", d->index, memsnap_last_error());
  if (msi_is_recording()) record_pool_change(d, 0, NULL, MEMSNAP_RELEASE_EMPTY_CACHE);
  pthread_mutex_unlock(&d->lock);
}

void msi_async_stats(msi_device *d, memsnap_stats_t *out) {
  uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  memset(out, 0, sizeof *out); /* max_split_size too: PyTorch's backend leaves it 0 */
  if (msi_be->async_usage(d->index, &reserved, &reserved_high, &used, &used_high) != MSI_BE_OK) return;
  out->allocated_bytes[MEMSNAP_POOL_ALL].current = (int64_t)used;
  out->allocated_bytes[MEMSNAP_POOL_ALL].peak = (int64_t)used_high;
  out->active_bytes[MEMSNAP_POOL_ALL].current = (int64_t)used;
  out->active_bytes[MEMSNAP_POOL_ALL].peak = (int64_t)used_high;
  out->reserved_bytes[MEMSNAP_POOL_ALL].current = (int64_t)reserved;
  out->reserved_bytes[MEMSNAP_POOL_ALL].peak = (int64_t)reserved_high;
}

void msi_async_reset_peak(msi_device *d) {
  if (msi_be->async_reset_peak(d->index) != MSI_BE_OK)
    msi_error("device %d: resetting the pool's peaks failed", d->index);
}

size_t msi_async_blocks(msi_device *d, msi_async_block **out) {
  msi_async_block *v = malloc(sizeof *v * (d->live.count + 1));
  if (!v) {
    msi_error("device %d: out of host memory listing allocations", d->index);
    return SIZE_MAX;
  }
  size_t n = 0;
  for (size_t i = 0; i <= d->live.mask; i++) {
    msi_block *b = d->live.slots[i].block;
    if (b) v[n++] = (msi_async_block){b->ptr, b->size, b->stream, b->stack_id};
  }
  *out = v;
  return n;
}
