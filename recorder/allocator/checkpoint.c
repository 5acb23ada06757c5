/* checkpoint.c: a private pool's layout saved and restored (PyTorch's getCheckpointState and
 * setCheckpointPoolState, c10/cuda/CUDACachingAllocator.cpp's Note [Checkpointing PrivatePoolState]).
 *
 * torch.compile's CUDA graph trees record graphs into one private pool. After recording a graph
 * they take a checkpoint of the pool; when they later record a new graph after replaying part of
 * a path, the pool no longer says which of its blocks hold live tensors (replays allocate
 * nothing), so they restore the checkpoint of the point they branch from: every block the pool
 * has allocated now is freed, the checkpoint's allocated blocks are allocated again at their
 * addresses and sizes (each segment split as it was), and the rest stays free. PyTorch then gives
 * the storages of the live tensors new deleters bound to those blocks (the C++ allocator in
 * recorder/pytorch/ does that part; here only the allocator's state).
 *
 * A checkpoint lists each segment of the pool (an expandable segment: each run of mapped pages,
 * as snapshots list them) with its blocks' addresses, sizes and whether they were allocated.
 * Restoring goes through the allocator's own frees and allocations (alloc.c's
 * msi_device_free_locked and msi_device_claim_locked), so statistics and recording follow as for
 * any free and allocation. As PyTorch, a block still used by another stream (events outstanding)
 * cannot be checkpointed or restored: that is an error.
 *
 * Each entry point takes the device lock; api.c calls in, and nothing here calls up.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct state_block {
  uintptr_t ptr;
  size_t size;
  bool allocated;
} state_block;

typedef struct state_segment {
  size_t first, n; /* its blocks in blocks[] */
} state_segment;

struct memsnap_pool_state {
  int device;
  uint64_t id[2];
  state_segment *segs;
  size_t nsegs;
  state_block *blocks;
  size_t nblocks;
};

void memsnap_pool_checkpoint_free(memsnap_pool_state *s) {
  if (!s) return;
  free(s->segs);
  free(s->blocks);
  free(s);
}

/* The pool, when it exists and is in use (PyTorch refuses a freeable one). Lock held. */
static msi_private_pool *usable_pool(msi_device *d, const uint64_t id[2]) {
  msi_private_pool *pp = msi_private_pool_find(d, id);
  if (!pp) {
    msi_error("device %d: could not find private pool (%llu, %llu)", d->index, (unsigned long long)id[0],
              (unsigned long long)id[1]);
  } else if (pp->use_count == 0) {
    msi_error("device %d: private pool (%llu, %llu) is released: not expected to checkpoint a freeable graph",
              d->index, (unsigned long long)id[0], (unsigned long long)id[1]);
    pp = NULL;
  }
  return pp;
}

/* Whether block b is neither allocated nor cached: waiting for another stream's events. */
static bool waiting(const msi_block *b) { return !b->allocated && !b->in_tree && b->mapped; }

memsnap_pool_state *msi_pool_checkpoint(msi_device *d, const uint64_t id[2]) {
  memsnap_pool_state *s = calloc(1, sizeof *s);
  if (!s) {
    msi_error("device %d: out of host memory checkpointing a pool", d->index);
    return NULL;
  }
  s->device = d->index;
  s->id[0] = id[0];
  s->id[1] = id[1];
  pthread_mutex_lock(&d->lock);
  msi_private_pool *pp = usable_pool(d, id);
  msi_block **heads = NULL;
  size_t nheads = 0, cap_segs = 0, cap_blocks = 0;
  if (!pp) goto fail;
  if (d->ncaptures == 0 && (d->pending_events || d->ndeferred)) msi_process_events(d);
  nheads = msi_device_segments(d, &heads);
  if (nheads == SIZE_MAX) {
    heads = NULL;
    goto fail;
  }
  for (size_t i = 0; i < nheads; i++) {
    if (heads[i]->pool->owner != pp) continue;
    if (s->nsegs == cap_segs) {
      cap_segs = cap_segs ? cap_segs * 2 : 8;
      state_segment *g = realloc(s->segs, sizeof *g * cap_segs);
      if (!g) goto oom;
      s->segs = g;
    }
    state_segment *seg = &s->segs[s->nsegs++];
    seg->first = s->nblocks;
    seg->n = 0;
    for (msi_block *b = heads[i]; b && b->mapped; b = b->next) {
      if (waiting(b) || b->event_count) {
        msi_error("device %d: block %#lx of private pool (%llu, %llu) is still used by another stream: events "
                  "should have synchronized when checkpointing", d->index, (unsigned long)b->ptr,
                  (unsigned long long)id[0], (unsigned long long)id[1]);
        goto fail;
      }
      if (s->nblocks == cap_blocks) {
        cap_blocks = cap_blocks ? cap_blocks * 2 : 32;
        state_block *g = realloc(s->blocks, sizeof *g * cap_blocks);
        if (!g) goto oom;
        s->blocks = g;
      }
      s->blocks[s->nblocks++] = (state_block){b->ptr, b->size, b->allocated};
      seg->n++;
    }
  }
  pthread_mutex_unlock(&d->lock);
  free(heads);
  return s;
oom:
  msi_error("device %d: out of host memory checkpointing a pool", d->index);
fail:
  pthread_mutex_unlock(&d->lock);
  free(heads);
  memsnap_pool_checkpoint_free(s);
  return NULL;
}

/* Appends p to a growing array of addresses; false when out of host memory. */
static bool push(void ***v, size_t *n, size_t *cap, void *p) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 16;
    void **g = realloc(*v, sizeof *g * c);
    if (!g) return false;
    *v = g;
    *cap = c;
  }
  (*v)[(*n)++] = p;
  return true;
}

/* The cached block of pool pp that starts at ptr, or NULL. Lock held. */
static msi_block *cached_at(msi_private_pool *pp, uintptr_t ptr) {
  msi_pool *pools[2] = {&pp->small, &pp->large};
  for (int k = 0; k < 2; k++)
    for (int s = 0; s < pools[k]->nsets; s++)
      for (msi_block *b = msi_set_first(&pools[k]->sets[s]); b; b = msi_set_next(&pools[k]->sets[s], b))
        if (b->ptr == ptr) return b;
  return NULL;
}

int msi_pool_restore(msi_device *d, const memsnap_pool_state *s, void ***freed, size_t *n_freed, void ***allocated,
                     size_t *n_allocated) {
  size_t cap_freed = 0, cap_alloc = 0;
  msi_block **claimed = NULL;
  int rc = MEMSNAP_OK;
  *freed = *allocated = NULL;
  *n_freed = *n_allocated = 0;
  pthread_mutex_lock(&d->lock);
  msi_private_pool *pp = usable_pool(d, s->id);
  if (!pp) {
    rc = MEMSNAP_EINVAL;
    goto out;
  }
  /* Free every block the pool has allocated now (gathered first: freeing changes the map). */
  msi_block **live = NULL;
  size_t nlive = 0, cap_live = 0;
  for (size_t i = 0; i <= d->live.mask; i++) {
    msi_block *b = d->live.slots[i].block;
    if (b && b->pool->owner == pp && !push((void ***)&live, &nlive, &cap_live, b)) {
      free(live);
      goto oom;
    }
  }
  for (size_t i = 0; i < nlive; i++) {
    if (!push(freed, n_freed, &cap_freed, (void *)live[i]->ptr)) {
      free(live);
      goto oom;
    }
    msi_device_free_locked(d, live[i]);
  }
  free(live);
  /* Allocate each segment's blocks as they were, then free those the checkpoint had free. */
  claimed = calloc(s->nblocks ? s->nblocks : 1, sizeof *claimed);
  if (!claimed) goto oom;
  for (size_t g = 0; g < s->nsegs && rc == MEMSNAP_OK; g++) {
    const state_segment *seg = &s->segs[g];
    msi_block *cur = seg->n ? cached_at(pp, s->blocks[seg->first].ptr) : NULL;
    for (size_t i = 0; i < seg->n; i++) {
      const state_block *sb = &s->blocks[seg->first + i];
      if (!cur || !cur->in_tree || !cur->mapped || cur->ptr != sb->ptr || cur->size < sb->size) {
        msi_error("device %d: restoring private pool (%llu, %llu): the block at %#lx (%zu bytes) of its checkpoint is "
                  "not free in the pool (still used by another stream, or its segment is gone)",
                  d->index, (unsigned long long)s->id[0], (unsigned long long)s->id[1], (unsigned long)sb->ptr,
                  sb->size);
        rc = MEMSNAP_EINVAL;
        break;
      }
      msi_block *a = msi_device_claim_locked(d, cur, sb->size);
      if (!a) goto oom;
      claimed[seg->first + i] = a;
      cur = a->next;
    }
    if (rc != MEMSNAP_OK) { /* give back what this segment claimed so far */
      for (size_t i = 0; i < seg->n && claimed[seg->first + i]; i++) msi_device_free_locked(d, claimed[seg->first + i]);
      break;
    }
    for (size_t i = 0; i < seg->n; i++) {
      const state_block *sb = &s->blocks[seg->first + i];
      if (sb->allocated) {
        if (!push(allocated, n_allocated, &cap_alloc, (void *)sb->ptr)) goto oom;
      } else {
        msi_device_free_locked(d, claimed[seg->first + i]);
      }
    }
  }
  goto out;
oom:
  msi_error("device %d: out of host memory restoring a pool", d->index);
  rc = MEMSNAP_ENOMEM;
out:
  pthread_mutex_unlock(&d->lock);
  free(claimed);
  return rc;
}
