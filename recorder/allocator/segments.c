/* segments.c: the allocator's segments and blocks as plain public structs
 * (memsnap_copy_segments), for a host that builds a snapshot of its own from them: PyTorch's
 * SnapshotInfo in recorder/pytorch/, which PyTorch's memory_snapshot() and _dump_snapshot() turn
 * into their dict. snapshot.c writes the same state into a snapshot file.
 *
 * A segment is listed as PyTorch lists it: a classic segment whole, an expandable segment as one
 * segment per run of mapped pages, and in the async mode each live block as a segment of its
 * own (PyTorch's backend refuses snapshots there; memsnap's own snapshots list them so too).
 * The device lock is held while copying; alloc.c lists the segments' first blocks, and nothing
 * here calls up.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Grows *v (elements of `size` bytes) to hold at least n + 1; false when out of host memory. */
static bool reserve(void **v, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return true;
  size_t c = *cap ? *cap * 2 : 64;
  void *g = realloc(*v, size * c);
  if (!g) return false;
  *v = g;
  *cap = c;
  return true;
}

int msi_copy_segments(msi_device *d, const uint64_t id[2], memsnap_segment_info **segments, size_t *n_segments,
                      memsnap_block_info **blocks, size_t *n_blocks) {
  memsnap_segment_info *segs = NULL;
  memsnap_block_info *bl = NULL;
  size_t nsegs = 0, nbl = 0, cap_segs = 0, cap_bl = 0;
  bool all = id[0] == 0 && id[1] == 0;
  int rc = MEMSNAP_OK;
  pthread_mutex_lock(&d->lock);
  if (d->async) {
    msi_async_block *ab = NULL;
    size_t n = all ? msi_async_blocks(d, &ab) : 0;
    if (n == SIZE_MAX) goto oom;
    for (size_t i = 0; i < n; i++) {
      if (!reserve((void **)&segs, &cap_segs, nsegs, sizeof *segs) || !reserve((void **)&bl, &cap_bl, nbl, sizeof *bl)) {
        free(ab);
        goto oom;
      }
      segs[nsegs++] = (memsnap_segment_info){d->index, ab[i].size > MSI_SMALL_SIZE, 0, ab[i].stream, ab[i].ptr,
                                             ab[i].size, {0, 0}, nbl, 1};
      bl[nbl++] = (memsnap_block_info){ab[i].ptr, ab[i].size, ab[i].size, 1, 1};
    }
    free(ab);
    goto out;
  }
  msi_block **heads = NULL;
  size_t nheads = msi_device_segments(d, &heads);
  if (nheads == SIZE_MAX) goto oom;
  for (size_t i = 0; i < nheads; i++) {
    msi_block *h = heads[i];
    msi_private_pool *owner = h->pool->owner;
    if (!all && (!owner || owner->id[0] != id[0] || owner->id[1] != id[1])) continue;
    if (!reserve((void **)&segs, &cap_segs, nsegs, sizeof *segs)) {
      free(heads);
      goto oom;
    }
    memsnap_segment_info *sg = &segs[nsegs++];
    *sg = (memsnap_segment_info){d->index, !h->pool->is_small, h->seg != NULL, h->stream, h->ptr, 0,
                                 {owner ? owner->id[0] : 0, owner ? owner->id[1] : 0}, nbl, 0};
    for (msi_block *b = h; b && b->mapped; b = b->next) {
      if (!reserve((void **)&bl, &cap_bl, nbl, sizeof *bl)) {
        free(heads);
        goto oom;
      }
      /* active: allocated, or freed and waiting for other streams' events (or a capture's end) */
      bool active = b->allocated || !b->in_tree;
      bl[nbl++] = (memsnap_block_info){b->ptr, b->size, b->requested_size, b->allocated, active};
      sg->total_size += b->size;
      sg->n_blocks++;
    }
  }
  free(heads);
  goto out;
oom:
  msi_error("device %d: out of host memory copying the segments", d->index);
  rc = MEMSNAP_ENOMEM;
  free(segs);
  free(bl);
  segs = NULL;
  bl = NULL;
  nsegs = nbl = 0;
out:
  pthread_mutex_unlock(&d->lock);
  *segments = segs;
  *n_segments = nsegs;
  *blocks = bl;
  *n_blocks = nbl;
  return rc;
}

int msi_block_size(msi_device *d, void *ptr, size_t *size, int *device) {
  pthread_mutex_lock(&d->lock);
  msi_block *b = msi_ptrmap_get(&d->live, (uintptr_t)ptr);
  if (b) {
    *size = b->size;
    *device = d->index;
  }
  pthread_mutex_unlock(&d->lock);
  return b ? MEMSNAP_OK : MEMSNAP_EINVAL; /* not this device's: the caller tries the others */
}

int msi_block_base(msi_device *d, void *ptr, void **base, size_t *size) {
  int rc = MEMSNAP_OK;
  pthread_mutex_lock(&d->lock);
  msi_block *b = msi_ptrmap_get(&d->live, (uintptr_t)ptr);
  if (!b) {
    rc = MEMSNAP_EINVAL; /* another device's, or not memsnap's: the caller says which */
  } else if (d->async) { /* each allocation is its own, as PyTorch's backend answers */
    *base = ptr;
    *size = b->size;
  } else if (b->seg) {
    msi_error("Tensors allocated with expandable_segments:True cannot be shared between processes. Consider using "
              "expandable_segments:False in data loading workers via "
              "torch.cuda.memory._set_allocator_settings('expandable_segments:False')");
    rc = MEMSNAP_EINVAL;
  } else {
    msi_block *h = b;
    while (h->prev) h = h->prev;
    size_t n = 0;
    for (msi_block *x = h; x; x = x->next) n += x->size;
    *base = (void *)h->ptr;
    *size = n;
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}
