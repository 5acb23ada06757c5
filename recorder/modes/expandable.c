/* expandable.c: expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
 * MEMSNAP_EXPANDABLE_SEGMENTS=1), as c10/cuda/CUDACachingAllocator.cpp's ExpandableSegment.
 *
 * Instead of one device allocation per segment, each stream and pool gets one reservation of
 * address space as large as 1 1/8 of the device, and physical memory is mapped into it page by
 * page (2 MiB pages for the small pool, 20 MiB for the large one) as requests need it, through
 * the backend's virtual memory calls (the driver's cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess, cuMemUnmap, cuMemRelease; the sim backend simulates them). A request that
 * does not fit a cached block grows the segment in place: the free block at its end and the
 * pages mapped after it become one block. empty_cache unmaps the whole free pages of free blocks;
 * a segment left without a mapped page gives its address space back.
 *
 * Layout of a segment: its blocks tile [base, base + size) in address order. Mapped blocks are
 * allocated, cached (in their stream set's free tree) or waiting on events, like any block;
 * unmapped ranges are blocks with mapped == false in their set's `unmapped` list. Two free
 * neighbours of the same kind always merge (blocks.c's msi_try_merge), so a free mapped block is
 * followed, if by anything free, by an unmapped range.
 *
 * Statistics follow PyTorch: a mapped page adds to reserved_bytes and num_device_alloc, an
 * unmapped one to num_device_free; the segment count and inactive_split leave expandable
 * segments out. Events: segment_map and segment_unmap (PyTorch's names) with the range.
 * IPC: the pages under a block are exported as POSIX file descriptors when another process is
 * sent the block (msi_expandable_export, for ipc.c), once per page; the descriptors are closed
 * when their page is unmapped (a receiver holds its own reference to the memory).
 * Every function runs with the device lock held. Blocks are made, filed and merged by blocks.c,
 * below; alloc.c, above, asks here for memory and for unmapping, and nothing here calls up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "history/history.h"
#include "internal.h"

/* ---- pages ------------------------------------------------------------------------------ */

/* Maps pages [first, last) of seg. Returns MSI_BE_OK, or MSI_BE_OOM / MSI_BE_ERR with none of
 * them mapped. */
static int map_pages(msi_device *d, msi_expseg *seg, size_t first, size_t last) {
  if (last > seg->handles_cap) {
    size_t cap = seg->handles_cap ? seg->handles_cap : 16;
    while (cap < last) cap *= 2;
    if (cap > seg->max_pages) cap = seg->max_pages;
    void **g = realloc(seg->handles, sizeof *g * cap);
    if (!g) {
      msi_error("device %d: out of host memory mapping pages", d->index);
      return MSI_BE_ERR;
    }
    memset(g + seg->handles_cap, 0, sizeof *g * (cap - seg->handles_cap));
    seg->handles = g;
    seg->handles_cap = cap;
  }
  for (size_t i = first; i < last; i++) {
    int rc = msi_be->page_map(d->index, seg->base + i * seg->page_size, seg->page_size, &seg->handles[i]);
    if (rc != MSI_BE_OK) {
      for (size_t j = first; j < i; j++) {
        msi_be->page_unmap(d->index, seg->base + j * seg->page_size, seg->page_size, seg->handles[j]);
        seg->handles[j] = NULL;
      }
      return rc;
    }
  }
  if (last > seg->nhandles) seg->nhandles = last;
  return MSI_BE_OK;
}

static void unmap_pages(msi_device *d, msi_expseg *seg, size_t first, size_t last) {
  for (size_t i = first; i < last; i++) {
    if (!seg->handles[i]) continue;
    if (seg->fds && seg->fds[i] >= 0) { /* exported for IPC: a receiver keeps its own reference */
      close(seg->fds[i]);
      seg->fds[i] = -1;
    }
    if (msi_be->page_unmap(d->index, seg->base + i * seg->page_size, seg->page_size, seg->handles[i]) != MSI_BE_OK)
      msi_error("device %d: unmapping page %#lx failed", d->index, (unsigned long)(seg->base + i * seg->page_size));
    seg->handles[i] = NULL;
  }
  while (seg->nhandles && !seg->handles[seg->nhandles - 1]) seg->nhandles--;
}

/* ---- segments ----------------------------------------------------------------------------- */

bool msi_expandable_usable(msi_device *d) {
  if (msi_be->vmm_supported(d->index) == 1) return true;
  char why[256];
  snprintf(why, sizeof why, "%s", memsnap_last_error());
  msi_warn("device %d: expandable segments are not available (%s); using classic segments", d->index, why);
  return false;
}

/* Reserves a new segment for the set and returns its one block, unmapped; NULL on failure. */
static msi_block *new_segment(msi_device *d, msi_pool *pool, int set_index) {
  size_t page = pool->is_small ? MSI_SMALL_BUFFER : MSI_LARGE_BUFFER;
  size_t room = d->device_total + d->device_total / 8; /* room to remap pages after unmapping some */
  size_t max_pages = (room + page - 1) / page;
  msi_expseg *seg = calloc(1, sizeof *seg);
  if (!seg || msi_reserve_blocks(d) != 0) {
    free(seg);
    msi_error("device %d: out of host memory creating an expandable segment", d->index);
    return NULL;
  }
  if (msi_be->va_reserve(d->index, max_pages * page, &seg->base) != MSI_BE_OK) {
    free(seg);
    return NULL;
  }
  seg->size = max_pages * page;
  seg->page_size = page;
  seg->max_pages = max_pages;
  seg->stream = pool->sets[set_index].stream;
  seg->next = d->expsegs;
  d->expsegs = seg;
  msi_block *b = msi_block_new(d, seg->base, seg->size, seg->stream, pool);
  b->mapped = false;
  b->seg = seg;
  b->set_index = (uint16_t)set_index;
  msi_unmapped_insert(b);
  return b;
}

/* Gives a wholly unmapped segment's address space back and forgets it. */
static void release_segment(msi_device *d, msi_block *b) {
  msi_expseg *seg = b->seg;
  msi_unmapped_erase(b);
  if (msi_be->va_free(d->index, seg->base, seg->size) != MSI_BE_OK)
    msi_error("device %d: freeing the address space at %#lx failed", d->index, (unsigned long)seg->base);
  for (msi_expseg **link = &d->expsegs; *link; link = &(*link)->next)
    if (*link == seg) {
      *link = seg->next;
      break;
    }
  free(seg->handles);
  free(seg->fds);
  free(seg);
  msi_block_put(d, b);
}

static bool allocatable(const msi_block *b) { return b && !b->allocated && b->event_count == 0 && b->nuses == 0; }

/* Whether the free and unmapped blocks from b on hold `size` bytes together. */
static bool has_room(const msi_block *b, size_t size) {
  size_t bytes = 0;
  for (; bytes < size && allocatable(b); b = b->next) bytes += b->size;
  return bytes >= size;
}

/* The lowest address where free and unmapped space holds `size` bytes: an unmapped range, or
 * the free block just before one; a new segment when none has room. */
static msi_block *find_block(msi_device *d, msi_pool *pool, int set_index, size_t size) {
  for (msi_block *c = pool->sets[set_index].unmapped; c; c = c->right) {
    msi_block *start = allocatable(c->prev) ? c->prev : c;
    if (has_room(start, size)) return start;
  }
  return new_segment(d, pool, set_index);
}

/* Maps the pages covering the first `size` bytes of the unmapped block b; the rest stays an
 * unmapped block after it, and b merges with its free mapped neighbours. MSI_BE_OK / OOM / ERR. */
static int map_block(msi_device *d, msi_block *b, size_t size) {
  msi_expseg *seg = b->seg;
  size_t first = (b->ptr - seg->base) / seg->page_size;
  size_t last = (b->ptr + size - seg->base + seg->page_size - 1) / seg->page_size;
  if (msi_reserve_blocks(d) != 0) {
    msi_error("device %d: out of host memory mapping pages", d->index);
    return MSI_BE_ERR;
  }
  int rc = map_pages(d, seg, first, last);
  if (rc != MSI_BE_OK) return rc;
  size_t mapped = (last - first) * seg->page_size;
  uintptr_t at = b->ptr;
  msi_unmapped_erase(b);
  b->mapped = true;
  if (mapped < b->size) {
    msi_block *rest = msi_block_new(d, b->ptr + mapped, b->size - mapped, b->stream, b->pool);
    rest->mapped = false;
    rest->seg = seg;
    rest->set_index = b->set_index;
    rest->prev = b;
    rest->next = b->next;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = mapped;
    msi_unmapped_insert(rest);
  }
  msi_try_merge(d, b, b->prev);
  msi_try_merge(d, b, b->next);
  msi_pool_insert(b);
  int k = b->pool->stat_kind;
  d->total_allocated_memory += mapped;
  MSI_STAT_INC(d->stats.reserved_bytes, k, (int64_t)mapped);
  msi_run_peak(&d->run_peak_reserved, d->stats.reserved_bytes[MEMSNAP_POOL_ALL].current);
  d->stats.num_device_alloc++;
  if (b->pool->owner) b->pool->owner->malloc_count += (int64_t)(last - first);
  if (msi_is_recording())
    msi_history_add(MSI_EV_SEGMENT_MAP, d->index, b->stream, at, mapped, mapped, 0, d->event_stack);
  return MSI_BE_OK;
}

int msi_expandable_alloc(msi_device *d, msi_pool *pool, int set_index, size_t size, msi_block **out) {
  msi_block *c = find_block(d, pool, set_index, size);
  if (!c) return MSI_BE_ERR;
  int rc = MSI_BE_OK;
  if (!c->mapped) rc = map_block(d, c, c->size < size ? c->size : size);
  while (rc == MSI_BE_OK && c->size < size) {
    /* c is free and mapped, followed by an unmapped range: map what is missing; the range
     * absorbs c. */
    msi_block *next = c->next;
    size_t missing = size - c->size;
    rc = map_block(d, next, missing < next->size ? missing : next->size);
    if (rc == MSI_BE_OK) c = next;
  }
  if (rc != MSI_BE_OK) return rc;
  msi_pool_erase(c);
  *out = c;
  return MSI_BE_OK;
}

void msi_expandable_unmap(msi_device *d, msi_block *b) {
  msi_expseg *seg = b->seg;
  size_t page = seg->page_size;
  size_t first = (b->ptr - seg->base + page - 1) / page, last = (b->ptr + b->size - seg->base) / page;
  if (first >= last) return; /* no whole page is free */
  if (msi_reserve_blocks(d) != 0) {
    msi_error("device %d: out of host memory unmapping pages", d->index);
    return;
  }
  /* Unmapping does not wait for the GPU as cudaFree does: PyTorch synchronizes the segment's
   * stream first. */
  if (msi_be->stream_synchronize(d->index, seg->stream) != MSI_BE_OK) return;
  unmap_pages(d, seg, first, last);
  msi_pool_erase(b);
  uintptr_t at = seg->base + first * page;
  size_t size = (last - first) * page, before = at - b->ptr, after = b->size - before - size;
  if (before) { /* prev -> free part before -> b */
    msi_block *f = msi_block_new(d, b->ptr, before, b->stream, b->pool);
    f->seg = seg;
    f->set_index = b->set_index;
    f->prev = b->prev;
    if (f->prev) f->prev->next = f;
    f->next = b;
    b->prev = f;
    msi_pool_insert(f);
  }
  if (after) { /* b -> free part after -> next */
    msi_block *f = msi_block_new(d, at + size, after, b->stream, b->pool);
    f->seg = seg;
    f->set_index = b->set_index;
    f->next = b->next;
    if (f->next) f->next->prev = f;
    f->prev = b;
    b->next = f;
    msi_pool_insert(f);
  }
  b->ptr = at;
  b->size = size;
  b->mapped = false;
  msi_try_merge(d, b, b->prev);
  msi_try_merge(d, b, b->next);
  msi_unmapped_insert(b);
  int k = b->pool->stat_kind;
  d->total_allocated_memory -= size;
  MSI_STAT_DEC(d->stats.reserved_bytes, k, (int64_t)size);
  d->stats.num_device_free++;
  if (b->pool->owner) b->pool->owner->malloc_count -= (int64_t)(last - first);
  if (msi_is_recording())
    msi_history_add(MSI_EV_SEGMENT_UNMAP, d->index, b->stream, at, size, size, d->release_reason, d->event_stack);
  if (!b->prev && !b->next) release_segment(d, b);
}

void msi_expandable_destroy_all(msi_device *d) {
  while (d->expsegs) {
    msi_expseg *seg = d->expsegs;
    d->expsegs = seg->next;
    unmap_pages(d, seg, 0, seg->nhandles);
    msi_be->va_free(d->index, seg->base, seg->size);
    free(seg->handles);
    free(seg->fds);
    free(seg);
  }
}

int msi_expandable_export(msi_device *d, const msi_block *b, int **fds, size_t *n, uintptr_t *first, size_t *page_size) {
  msi_expseg *seg = b->seg;
  size_t page = seg->page_size;
  size_t lo = (b->ptr - seg->base) / page, hi = (b->ptr + b->size - seg->base + page - 1) / page;
  if (!seg->fds) {
    seg->fds = malloc(sizeof *seg->fds * seg->max_pages);
    if (!seg->fds) {
      msi_error("device %d: out of host memory exporting pages", d->index);
      return MSI_BE_ERR;
    }
    for (size_t i = 0; i < seg->max_pages; i++) seg->fds[i] = -1;
  }
  int *out = malloc(sizeof *out * (hi - lo));
  if (!out) {
    msi_error("device %d: out of host memory exporting pages", d->index);
    return MSI_BE_ERR;
  }
  for (size_t i = lo; i < hi; i++) {
    if (!seg->handles[i]) { /* a mapped block lies on mapped pages only */
      msi_error("device %d: page %#lx under a block is not mapped", d->index, (unsigned long)(seg->base + i * page));
      free(out);
      return MSI_BE_ERR;
    }
    if (seg->fds[i] < 0 && msi_be->page_export(d->index, seg->handles[i], &seg->fds[i]) != MSI_BE_OK) {
      seg->fds[i] = -1;
      free(out);
      return MSI_BE_ERR;
    }
    out[i - lo] = seg->fds[i];
  }
  *fds = out;
  *n = hi - lo;
  *first = seg->base + lo * page;
  *page_size = page;
  return MSI_BE_OK;
}
