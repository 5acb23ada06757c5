/* blocks.c: block structs and the free sets of pools, the primitives below the allocation modes.
 *
 * Everything that makes, files or joins a block without deciding anything lives here, below the
 * files that decide: the allocation modes (expandable.c, pools.c, async_alloc.c) and the caching
 * policy with the mode dispatch (alloc.c) sit above it, and it calls none of them (as mimalloc's
 * page and segment primitives sit below its allocation paths):
 *   - block structs come from a device's free list, refilled in slabs of SLAB_BLOCKS, so that
 *     the allocation path never allocates host memory for them (msi_reserve_blocks first, then
 *     msi_block_new and msi_block_put, inline in internal.h);
 *   - a pool keeps its free blocks in one set per stream (msi_stream_set, made by alloc.c on the
 *     stream's first request): mapped blocks in the set's tree (blocktree.c; msi_pool_insert and
 *     msi_pool_erase, inline in internal.h), the unmapped ranges of expandable segments in the
 *     set's `unmapped` list, by address;
 *   - two free neighbours of one segment merge (msi_try_merge), mapped with mapped and unmapped
 *     with unmapped;
 *   - a block freed during a capture waits in d->deferred until none is underway.
 * Every function runs with the device lock held.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SLAB_BLOCKS 256

/* ---- block structs --------------------------------------------------------------------- */

int msi_reserve_blocks(msi_device *d) {
  if (MSI_LIKELY(d->spare_blocks && d->spare_blocks->next)) return 0;
  if (d->nslabs == d->slabs_cap) {
    int cap = d->slabs_cap ? d->slabs_cap * 2 : 16;
    void **grown = realloc(d->block_slabs, sizeof *grown * (size_t)cap);
    if (!grown) return -1;
    d->block_slabs = grown;
    d->slabs_cap = cap;
  }
  msi_block *slab = aligned_alloc(64, SLAB_BLOCKS * sizeof *slab);
  if (!slab) return -1;
  memset(slab, 0, SLAB_BLOCKS * sizeof *slab);
  d->block_slabs[d->nslabs++] = slab;
  for (int i = 0; i < SLAB_BLOCKS; i++) {
    slab[i].next = d->spare_blocks;
    d->spare_blocks = &slab[i];
  }
  return 0;
}

void msi_blocks_destroy(msi_device *d) {
  for (int i = 0; i < d->nslabs; i++) {
    msi_block *slab = d->block_slabs[i];
    for (int j = 0; j < SLAB_BLOCKS; j++) free(slab[j].uses);
    free(slab);
  }
  free(d->block_slabs);
}

/* ---- the free sets of a pool ----------------------------------------------------------- */

/* The unmapped ranges of a stream set: a list by address, linked through ->right. */
void msi_unmapped_insert(msi_block *b) {
  msi_block **link = &b->pool->sets[b->set_index].unmapped;
  while (*link && (*link)->ptr < b->ptr) link = &(*link)->right;
  b->left = b->parent = NULL;
  b->right = *link;
  *link = b;
  b->in_tree = false;
}

/* Out of line, as when it lived in expandable.c: inlined into msi_try_merge, where it is rare
 * (expandable segments alone have unmapped ranges), it made every merge save one more register. */
__attribute__((noinline)) void msi_unmapped_erase(msi_block *b) {
  msi_block **link = &b->pool->sets[b->set_index].unmapped;
  while (*link && *link != b) link = &(*link)->right;
  if (*link) *link = b->right;
  b->right = NULL;
}

/* ---- merging and deferring ------------------------------------------------------------- */

size_t msi_try_merge(msi_device *d, msi_block *dst, msi_block *src) {
  if (!src || src->allocated || src->event_count > 0 || src->nuses > 0 || src->mapped != dst->mapped) return 0;
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  size_t taken = src->size;
  dst->size += taken;
  if (src->mapped) msi_pool_erase(src);
  else msi_unmapped_erase(src);
  msi_block_put(d, src);
  return taken;
}

bool msi_defer_block(msi_device *d, msi_block *b) {
  if (d->ndeferred == d->deferred_cap) {
    size_t cap = d->deferred_cap ? d->deferred_cap * 2 : 16;
    msi_block **g = realloc(d->deferred, sizeof *g * cap);
    if (!g) return false;
    d->deferred = g;
    d->deferred_cap = cap;
  }
  d->deferred[d->ndeferred++] = b;
  return true;
}
