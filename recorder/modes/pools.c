/* pools.c: private pools, for CUDA graph capture and torch.cuda.MemPool (PyTorch's PrivatePool).
 *
 * While a capture allocates to a pool (memsnap_begin_allocate_to_pool, which PyTorch's
 * CUDAGraph::capture_begin reaches through the pluggable allocator's hooks), every request
 * whose stream the capture's filter accepts is served from that pool's own small and large
 * pools; nothing else ever takes their blocks, and they go back to the device only once every
 * capture and MemPool using the pool released it (use count 0) and empty_cache finds them free.
 * That is what keeps a graph's baked-in addresses valid between replays.
 *
 * Rules, as in c10/cuda/CUDACachingAllocator.cpp:
 *   - begin: the pool is created with use count 1, or an existing one gains a user; a pool has
 *     at most one capture underway; end removes the capture;
 *   - release: one user less; at 0 the pool is freeable: empty_cache releases its cached
 *     segments (alloc.c, the caching policy, says how: it hands its release function down)
 *     and forgets it once it holds none;
 *   - while any capture is underway, cross-stream events are not queried or recorded (illegal
 *     during capture: alloc.c defers them) and nothing synchronizes;
 *   - a pool may have a provider (MemPool(allocator=...)): another allocator whose functions give
 *     and take back its segments (alloc.c calls them instead of the device); its context goes
 *     when the pool does.
 * Every function here runs with the device lock held; the public wrappers are in api.c. alloc.c
 * asks here which pool serves a request (msi_pool_for), and nothing here calls up into it.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

msi_private_pool *msi_private_pool_find(msi_device *d, const uint64_t id[2]) {
  for (msi_private_pool *pp = d->private_pools; pp; pp = pp->next)
    if (pp->id[0] == id[0] && pp->id[1] == id[1]) return pp;
  return NULL;
}

msi_private_pool *msi_private_pool_incref(msi_device *d, const uint64_t id[2]) {
  msi_private_pool *pp = msi_private_pool_find(d, id);
  if (pp) {
    pp->use_count++;
    return pp;
  }
  pp = calloc(1, sizeof *pp);
  if (!pp) return NULL;
  pp->id[0] = id[0];
  pp->id[1] = id[1];
  pp->use_count = 1;
  pp->small.is_small = true;
  pp->small.stat_kind = MEMSNAP_POOL_SMALL;
  pp->small.owner = pp;
  pp->large.stat_kind = MEMSNAP_POOL_LARGE;
  pp->large.owner = pp;
  pp->next = d->private_pools;
  d->private_pools = pp;
  return pp;
}

msi_pool *msi_pool_for(msi_device *d, size_t size, memsnap_stream_t stream) {
  for (int i = d->ncaptures - 1; i >= 0; i--) { /* the latest capture first, as PyTorch */
    msi_capture *c = &d->captures[i];
    if (c->filter(c->ctx, stream)) {
      msi_private_pool *pp = msi_private_pool_find(d, c->id);
      if (pp) return size <= MSI_SMALL_SIZE ? &pp->small : &pp->large;
    }
  }
  return size <= MSI_SMALL_SIZE ? &d->small : &d->large;
}

static void pool_free_sets(msi_pool *p) {
  free(p->sets);
  p->sets = NULL;
  p->nsets = p->sets_cap = 0;
}

/* Forgets a pool that holds nothing: its sets, and the context of its provider. */
static void pool_forget(msi_private_pool *pp) {
  pool_free_sets(&pp->small);
  pool_free_sets(&pp->large);
  if (pp->provider_release) pp->provider_release(pp->provider_ctx);
  free(pp);
}

void msi_private_pools_release_freeable(msi_device *d, const uint64_t *only, msi_pool_release_fn release) {
  msi_private_pool **link = &d->private_pools;
  while (*link) {
    msi_private_pool *pp = *link;
    if (pp->use_count == 0 && (!only || (pp->id[0] == only[0] && pp->id[1] == only[1]))) {
      release(d, &pp->small);
      release(d, &pp->large);
      if (pp->malloc_count == 0) {
        *link = pp->next;
        pool_forget(pp);
        continue;
      }
    }
    link = &pp->next;
  }
}

void msi_private_pools_destroy(msi_device *d) {
  while (d->private_pools) {
    msi_private_pool *pp = d->private_pools;
    d->private_pools = pp->next;
    pool_forget(pp);
  }
}

/* ---- entry points (api.c calls these with the device found) ------------------------------ */

/* The index of the allocation to pool `id` in progress, or -1. */
static int capture_find(const msi_device *d, const uint64_t id[2]) {
  for (int i = 0; i < d->ncaptures; i++)
    if (d->captures[i].id[0] == id[0] && d->captures[i].id[1] == id[1]) return i;
  return -1;
}

static void not_allocating(const msi_device *d, const uint64_t id[2]) {
  msi_error("device %d: not allocating to pool (%llu, %llu)", d->index, (unsigned long long)id[0],
            (unsigned long long)id[1]);
}

static void capture_remove(msi_device *d, int i) {
  memmove(&d->captures[i], &d->captures[i + 1], sizeof *d->captures * (size_t)(d->ncaptures - i - 1));
  d->ncaptures--;
}

/* Whether `id` is a capture msi_captures_drop_ended dropped; forgets it. */
static bool take_ended(msi_device *d, const uint64_t id[2]) {
  for (int i = 0; i < MSI_ENDED_CAPTURES; i++)
    if (d->ended[i].valid && d->ended[i].id[0] == id[0] && d->ended[i].id[1] == id[1]) {
      d->ended[i].valid = false;
      return true;
    }
  return false;
}

int msi_pool_begin(msi_device *d, const uint64_t id[2], msi_pool_filter filter, void *ctx, void (*release_ctx)(void *)) {
  int rc = MEMSNAP_OK;
  pthread_mutex_lock(&d->lock);
  if (d->async && d->ncaptures) msi_captures_drop_ended(d); /* a retry after a failed end: not "already" */
  take_ended(d, id); /* a new capture of a dropped one's pool: a late end is this one's */
  if (capture_find(d, id) >= 0) {
    msi_error("device %d: already allocating to pool (%llu, %llu)", d->index, (unsigned long long)id[0],
              (unsigned long long)id[1]);
    rc = MEMSNAP_EINVAL;
    goto out;
  }
  if (d->ncaptures == d->captures_cap) {
    int cap = d->captures_cap ? d->captures_cap * 2 : 4;
    msi_capture *g = realloc(d->captures, sizeof *g * (size_t)cap);
    if (!g) goto oom;
    d->captures = g;
    d->captures_cap = cap;
  }
  if (!msi_private_pool_incref(d, id)) goto oom;
  d->captures[d->ncaptures++] =
      (msi_capture){.id = {id[0], id[1]}, .filter = filter, .ctx = ctx, .release_ctx = release_ctx};
  ctx = NULL; /* the capture owns it now */
  goto out;
oom:
  msi_error("device %d: out of host memory creating a private pool", d->index);
  rc = MEMSNAP_ENOMEM;
out:
  pthread_mutex_unlock(&d->lock);
  if (ctx && release_ctx) release_ctx(ctx);
  return rc;
}

int msi_pool_end(msi_device *d, const uint64_t id[2]) {
  msi_capture gone = {0};
  int rc = MEMSNAP_EINVAL;
  pthread_mutex_lock(&d->lock);
  int i = capture_find(d, id);
  if (i >= 0) {
    gone = d->captures[i];
    capture_remove(d, i);
    rc = MEMSNAP_OK;
  } else if (take_ended(d, id)) {
    rc = MEMSNAP_OK; /* dropped already: its end was late */
  } else {
    not_allocating(d, id);
  }
  pthread_mutex_unlock(&d->lock);
  if (gone.release_ctx) gone.release_ctx(gone.ctx); /* outside the lock: it may be PyTorch's */
  return rc;
}

int msi_pool_capture_stream(msi_device *d, const uint64_t id[2], memsnap_stream_t stream) {
  pthread_mutex_lock(&d->lock);
  int i = capture_find(d, id);
  if (i >= 0) {
    d->captures[i].stream = stream;
    d->captures[i].seen = false;
  } else {
    not_allocating(d, id);
  }
  pthread_mutex_unlock(&d->lock);
  return i >= 0 ? MEMSNAP_OK : MEMSNAP_EINVAL;
}

void msi_captures_drop_ended(msi_device *d) {
  for (int i = d->ncaptures - 1; i >= 0; i--) {
    msi_capture *c = &d->captures[i];
    if (!c->stream || c->release_ctx) continue;
    uint64_t cid = 0;
    size_t n = 0;
    int on = msi_be->capture_info(d->index, c->stream, &cid, NULL, 0, &n);
    if (on == 1 && !c->seen) {
      c->seen = true;
      c->capture_id = cid;
    } else if (c->seen && (on == 0 || (on == 1 && cid != c->capture_id))) {
      int k = (int)(d->nended++ % MSI_ENDED_CAPTURES);
      memcpy(d->ended[k].id, c->id, sizeof c->id);
      d->ended[k].valid = true;
      capture_remove(d, i);
    }
  }
}

int msi_pool_create(msi_device *d, const uint64_t id[2]) {
  pthread_mutex_lock(&d->lock);
  msi_private_pool *pp = msi_private_pool_incref(d, id);
  if (!pp) msi_error("device %d: out of host memory creating a private pool", d->index);
  pthread_mutex_unlock(&d->lock);
  return pp ? MEMSNAP_OK : MEMSNAP_ENOMEM;
}

int msi_pool_release(msi_device *d, const uint64_t id[2]) {
  int rc = MEMSNAP_OK;
  pthread_mutex_lock(&d->lock);
  msi_private_pool *pp = msi_private_pool_find(d, id);
  if (!pp || pp->use_count == 0) {
    msi_error("device %d: release of pool (%llu, %llu), which %s", d->index, (unsigned long long)id[0],
              (unsigned long long)id[1], pp ? "is released already" : "does not exist");
    rc = MEMSNAP_EINVAL;
  } else {
    pp->use_count--;
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int msi_pool_set_provider(msi_device *d, const uint64_t id[2], memsnap_segment_alloc_fn alloc,
                          memsnap_segment_free_fn free_fn, void *ctx, void (*release)(void *)) {
  int rc = MEMSNAP_EINVAL;
  pthread_mutex_lock(&d->lock);
  msi_private_pool *pp = msi_private_pool_find(d, id);
  if (!pp)
    msi_error("device %d: no pool (%llu, %llu)", d->index, (unsigned long long)id[0], (unsigned long long)id[1]);
  else if (pp->malloc_count || pp->provider_alloc)
    msi_error("device %d: pool (%llu, %llu) %s", d->index, (unsigned long long)id[0], (unsigned long long)id[1],
              pp->provider_alloc ? "has a provider already" : "holds segments already");
  else if (!alloc || !free_fn)
    msi_error("memsnap_pool_set_provider: both functions are needed");
  else {
    pp->provider_alloc = alloc;
    pp->provider_free = free_fn;
    pp->provider_ctx = ctx;
    pp->provider_release = release;
    rc = MEMSNAP_OK;
  }
  pthread_mutex_unlock(&d->lock);
  if (rc != MEMSNAP_OK && release) release(ctx);
  return rc;
}

int msi_pool_set_flags(msi_device *d, const uint64_t id[2], int use_on_oom, int no_split) {
  pthread_mutex_lock(&d->lock);
  msi_private_pool *pp = msi_private_pool_find(d, id);
  if (pp) {
    if (use_on_oom >= 0) pp->use_on_oom = use_on_oom != 0;
    if (no_split >= 0) pp->no_split = no_split != 0;
  } else {
    msi_error("device %d: no pool (%llu, %llu)", d->index, (unsigned long long)id[0], (unsigned long long)id[1]);
  }
  pthread_mutex_unlock(&d->lock);
  return pp ? MEMSNAP_OK : MEMSNAP_EINVAL;
}

int msi_pool_use_count(msi_device *d, const uint64_t id[2]) {
  pthread_mutex_lock(&d->lock);
  msi_private_pool *pp = msi_private_pool_find(d, id);
  int rc = pp ? (int)pp->use_count : MEMSNAP_EINVAL;
  if (!pp) msi_error("device %d: no pool (%llu, %llu)", d->index, (unsigned long long)id[0], (unsigned long long)id[1]);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

/* PyTorch's checkPoolLiveAllocations: whether the pool's allocated blocks are exactly `ptrs`
 * (sorted ascending). 1 yes, 0 no, MEMSNAP_EINVAL for an unknown pool. */
int msi_pool_live_match(msi_device *d, const uint64_t id[2], const uint64_t *ptrs, size_t n) {
  int rc = 1;
  size_t found = 0;
  pthread_mutex_lock(&d->lock);
  msi_private_pool *pp = msi_private_pool_find(d, id);
  if (!pp) {
    msi_error("device %d: no pool (%llu, %llu)", d->index, (unsigned long long)id[0], (unsigned long long)id[1]);
    rc = MEMSNAP_EINVAL;
    goto out;
  }
  for (size_t i = 0; i <= d->live.mask && rc == 1; i++) {
    msi_block *b = d->live.slots[i].block;
    if (!b || b->pool->owner != pp) continue;
    size_t lo = 0, hi = n; /* binary search for b->ptr */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (ptrs[mid] < b->ptr) lo = mid + 1;
      else hi = mid;
    }
    if (lo == n || ptrs[lo] != b->ptr) rc = 0;
    else found++;
  }
  if (rc == 1 && found != n) rc = 0;
out:
  pthread_mutex_unlock(&d->lock);
  return rc;
}
