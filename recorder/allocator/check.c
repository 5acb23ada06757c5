/* check.c: verifies every invariant of a device's allocator state (memsnap_check).
 *
 * Used by the tests and the stress test after every step, and available to users who suspect
 * memory corruption. It walks all blocks (live, cached, waiting on events), rebuilds each
 * segment from its address-ordered links, and recomputes every current statistic from
 * scratch. It allocates host memory and takes time proportional to the number of blocks, so it
 * belongs in tests and debugging, never in the allocation path.
 *
 * Invariants:
 *   - every block is in exactly one state: allocated (in the pointer map), cached (in the tree
 *     of its pool and stream), waiting on events (event_count > 0), freed during a capture with
 *     its events deferred (in the deferred list), or an unmapped range of an expandable segment
 *     (in its stream set's unmapped list, ordered by address);
 *   - a segment's blocks are contiguous, share pool and stream, and two cached neighbours never
 *     sit side by side (they would have merged);
 *   - sizes and addresses are multiples of 512; blocks of different segments never overlap;
 *   - trees are ordered by (size, address), heap-ordered by priority, with consistent links;
 *   - the current value of every statistic equals what the walk counts (expandable segments
 *     count in reserved bytes by their mapped pages, not in the segment count or inactive_split);
 *   - an expandable segment's blocks tile its reservation; its mapped runs start and end on page
 *     boundaries, exactly the pages under mapped blocks are mapped;
 *   - a private pool's blocks stay in its own pools, and its count of segments and pages held
 *     equals what the walk finds;
 *   - async mode: the pointer map is consistent (the driver's pool has no blocks to walk).
 */
#include <stdlib.h>

#include "internal.h"

typedef struct walk {
  msi_block **blocks;
  size_t n, cap;
  bool failed;
} walk;

static void push(walk *w, msi_block *b) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 256;
    msi_block **grown = realloc(w->blocks, sizeof *grown * cap);
    if (!grown) {
      w->failed = true;
      return;
    }
    w->blocks = grown;
    w->cap = cap;
  }
  w->blocks[w->n++] = b;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (*(msi_block *const *)a)->ptr, y = (*(msi_block *const *)b)->ptr;
  return x < y ? -1 : x > y;
}

#define FAIL(...)           \
  do {                      \
    msi_error(__VA_ARGS__); \
    rc = MEMSNAP_EINVAL;    \
    goto out;               \
  } while (0)

/* Checks one tree; appends its nodes to w. Returns 0 or -1 (error set). */
static int check_tree(const msi_stream_set *set, msi_pool *pool, walk *w) {
  size_t count = 0;
  for (int c = 0; c < MSI_BINS; c++) {
    bool bit = set->nonempty[c >> 6] & (1ull << (c & 63));
    if (bit != (set->bins[c] != NULL) || (bit && !(set->summary & (1ull << (c >> 6))))) {
      msi_error("free-set bitmaps disagree with size class %d", c);
      return -1;
    }
  }
  for (int wd = 0; wd < MSI_BINS / 64; wd++)
    if (!set->nonempty[wd] != !(set->summary & (1ull << wd))) {
      msi_error("free-set summary bit %d is wrong", wd);
      return -1;
    }
  msi_block *prev = NULL;
  for (msi_block *b = msi_set_first(set); b; b = msi_set_next(set, b)) {
    if (!b->in_tree || b->allocated || b->event_count || b->pool != pool || b->stream != set->stream ||
        &pool->sets[b->set_index] != set) {
      msi_error("cached block %#lx has a wrong state, pool or stream", (unsigned long)b->ptr);
      return -1;
    }
    if (prev && !(prev->size < b->size || (prev->size == b->size && prev->ptr < b->ptr))) {
      msi_error("free tree out of order at block %#lx", (unsigned long)b->ptr);
      return -1;
    }
    if ((b->left && (b->left->parent != b || b->left->prio > b->prio)) ||
        (b->right && (b->right->parent != b || b->right->prio > b->prio))) {
      msi_error("free tree links or priorities broken at block %#lx", (unsigned long)b->ptr);
      return -1;
    }
    int c = msi_set_bin_of(b->size);
    msi_block *root = b;
    while (root->parent) root = root->parent;
    if (set->bins[c] != root || !(set->nonempty[c >> 6] & (1ull << (c & 63)))) {
      msi_error("block %#lx of %zu bytes is not in its size class %d", (unsigned long)b->ptr, b->size, c);
      return -1;
    }
    push(w, b);
    prev = b;
    count++;
  }
  if (count != set->count) {
    msi_error("free tree holds %zu blocks but counts %zu", count, set->count);
    return -1;
  }
  return 0;
}

/* Checks a set's unmapped list and appends its blocks to w. 0 or -1 (error set). */
static int check_unmapped(const msi_stream_set *set, msi_pool *pool, walk *w) {
  uintptr_t last = 0;
  for (msi_block *b = set->unmapped; b; b = b->right) {
    if (b->mapped || b->allocated || b->in_tree || b->event_count || !b->seg || b->pool != pool ||
        &pool->sets[b->set_index] != set || b->stream != set->stream) {
      msi_error("unmapped range %#lx has a wrong state, pool or stream", (unsigned long)b->ptr);
      return -1;
    }
    if (b->ptr < last) {
      msi_error("unmapped ranges out of order at %#lx", (unsigned long)b->ptr);
      return -1;
    }
    last = b->ptr;
    push(w, b);
  }
  return 0;
}

static int check_pool(msi_pool *p, walk *w) {
  for (int s = 0; s < p->nsets; s++)
    if (check_tree(&p->sets[s], p, w) != 0 || check_unmapped(&p->sets[s], p, w) != 0) return -1;
  return 0;
}

/* Async mode: every live block is in the pointer map once. */
static int check_async(msi_device *d) {
  size_t n = 0;
  for (size_t i = 0; i <= d->live.mask; i++) {
    msi_block *b = d->live.slots[i].block;
    if (!b) continue;
    n++;
    if (d->live.slots[i].key != b->ptr || !b->allocated || msi_ptrmap_get(&d->live, b->ptr) != b) {
      msi_error("async allocation %#lx is not in the pointer map as it should be", (unsigned long)b->ptr);
      return MEMSNAP_EINVAL;
    }
  }
  if (n != d->live.count) {
    msi_error("pointer map counts %zu but holds %zu", d->live.count, n);
    return MEMSNAP_EINVAL;
  }
  return MEMSNAP_OK;
}

/* The pages under a segment's blocks: mapped exactly where mapped blocks lie, runs on page
 * boundaries. 0 or -1 (error set). */
static int check_pages(const msi_block *head) {
  const msi_expseg *seg = head->seg;
  if (head->ptr != seg->base) {
    msi_error("expandable segment %#lx does not start at its reservation", (unsigned long)head->ptr);
    return -1;
  }
  size_t total = 0;
  for (const msi_block *b = head; b; b = b->next) {
    total += b->size;
    bool run_edge_before = !b->prev || b->prev->mapped != b->mapped;
    if (run_edge_before && (b->ptr - seg->base) % seg->page_size) {
      msi_error("expandable segment %#lx: a mapped run starts inside a page at %#lx", (unsigned long)seg->base,
                (unsigned long)b->ptr);
      return -1;
    }
    for (uintptr_t a = b->ptr; a < b->ptr + b->size; a += seg->page_size) {
      size_t page = (a - seg->base) / seg->page_size;
      bool has = page < seg->nhandles && seg->handles[page];
      if (has != b->mapped) { /* runs start and end on page boundaries: a page is all one kind */
        msi_error("expandable segment %#lx: page %zu is %smapped under a%s block", (unsigned long)seg->base, page,
                  has ? "" : "not ", b->mapped ? " mapped" : "n unmapped");
        return -1;
      }
    }
    if (b->next && !b->mapped && !b->next->mapped) {
      msi_error("unmapped neighbours %#lx and %#lx were not merged", (unsigned long)b->ptr, (unsigned long)b->next->ptr);
      return -1;
    }
  }
  if (total != seg->size) {
    msi_error("expandable segment %#lx: blocks cover %zu of its %zu bytes", (unsigned long)seg->base, total, seg->size);
    return -1;
  }
  return 0;
}

int memsnap_check(int device) {
  msi_device *d = msi_device_get(device);
  if (!d) return MEMSNAP_EINVAL;
  int rc = MEMSNAP_OK;
  walk w = {0};
  pthread_mutex_lock(&d->lock);
  if (d->async) {
    rc = check_async(d);
    goto out;
  }
  size_t nlive = 0;
  for (size_t i = 0; i <= d->live.mask; i++) {
    msi_block *b = d->live.slots[i].block;
    if (!b) continue;
    if (d->live.slots[i].key != b->ptr) FAIL("pointer map key %#lx differs from its block %#lx", (unsigned long)d->live.slots[i].key, (unsigned long)b->ptr);
    if (!b->allocated || b->in_tree) FAIL("live block %#lx is not marked allocated", (unsigned long)b->ptr);
    if (msi_ptrmap_get(&d->live, b->ptr) != b) FAIL("pointer map cannot find block %#lx", (unsigned long)b->ptr);
    push(&w, b);
    nlive++;
  }
  if (nlive != d->live.count) FAIL("pointer map counts %zu but holds %zu", d->live.count, nlive);
  if (check_pool(&d->small, &w) != 0 || check_pool(&d->large, &w) != 0) {
    rc = MEMSNAP_EINVAL;
    goto out;
  }
  for (msi_private_pool *pp = d->private_pools; pp; pp = pp->next) {
    if (pp->small.owner != pp || pp->large.owner != pp) FAIL("private pool (%llu, %llu) has a wrong owner", (unsigned long long)pp->id[0], (unsigned long long)pp->id[1]);
    if (check_pool(&pp->small, &w) != 0 || check_pool(&pp->large, &w) != 0) {
      rc = MEMSNAP_EINVAL;
      goto out;
    }
  }
  for (size_t i = 0; i < d->ndeferred; i++) {
    msi_block *b = d->deferred[i];
    if (b->allocated || b->in_tree || b->event_count || !b->nuses) FAIL("block %#lx deferred in a wrong state", (unsigned long)b->ptr);
    push(&w, b);
  }
  size_t npending_events = 0;
  for (int q = 0; q < d->nqueues; q++)
    for (msi_pending_event *pe = d->queues[q].head; pe; pe = pe->next) {
      msi_block *b = pe->block;
      npending_events++;
      if (b->allocated || b->in_tree || b->event_count == 0) FAIL("block %#lx waits on an event in a wrong state", (unsigned long)b->ptr);
      bool seen = false;
      for (size_t i = 0; i < w.n && !seen; i++) seen = w.blocks[i] == b;
      if (!seen) push(&w, b);
    }
  if (npending_events != d->pending_events) FAIL("%zu events queued but %zu counted", npending_events, d->pending_events);
  if (w.failed) FAIL("out of host memory while checking");

  /* Recompute the statistics from the segments. */
  memsnap_stats_t c = {0};
  size_t reached = 0, reserved_total = 0;
  if (w.n) qsort(w.blocks, w.n, sizeof *w.blocks, cmp_ptr);
  for (size_t i = 0; i < w.n; i++) {
    msi_block *head = w.blocks[i];
    if (i && w.blocks[i - 1]->ptr + w.blocks[i - 1]->size > head->ptr)
      FAIL("blocks %#lx and %#lx overlap", (unsigned long)w.blocks[i - 1]->ptr, (unsigned long)head->ptr);
    if (head->prev) continue;
    int k = head->pool->stat_kind;
    size_t seg_size = 0;
    if (head->seg && check_pages(head) != 0) {
      rc = MEMSNAP_EINVAL;
      goto out;
    }
    for (msi_block *b = head; b; b = b->next) {
      reached++;
      if (b->size == 0 || b->size % MSI_MIN_BLOCK_SIZE || b->ptr % MSI_MIN_BLOCK_SIZE)
        FAIL("block %#lx has size %zu: not a multiple of 512", (unsigned long)b->ptr, b->size);
      if (b->next && (b->next->prev != b || b->ptr + b->size != b->next->ptr || b->next->pool != b->pool ||
                      b->next->stream != b->stream))
        FAIL("segment links broken after block %#lx", (unsigned long)b->ptr);
      if (b->next && b->in_tree && b->next->in_tree) FAIL("cached neighbours %#lx and %#lx were not merged", (unsigned long)b->ptr, (unsigned long)b->next->ptr);
      if (b->seg != head->seg) FAIL("block %#lx lies in another segment than its neighbours", (unsigned long)b->ptr);
      if (!b->mapped) continue;
      bool waiting = !b->allocated && !b->in_tree;
      if (waiting && b->event_count == 0 && b->nuses == 0)
        FAIL("block %#lx is neither allocated, cached nor waiting", (unsigned long)b->ptr);
      seg_size += b->size;
      if (b->allocated) {
        c.allocation[k].current++;
        c.allocated_bytes[k].current += (int64_t)b->size;
        if (b->size >= msi_opt.max_split_size) c.oversize_allocations.current++;
      }
      if (b->allocated || waiting) {
        c.active[k].current++;
        c.active_bytes[k].current += (int64_t)b->size;
        c.requested_bytes[k].current += (int64_t)b->requested_size;
      }
      if (b->in_tree && (b->prev || b->next) && !b->seg) {
        c.inactive_split[k].current++;
        c.inactive_split_bytes[k].current += (int64_t)b->size;
      }
    }
    if (!head->seg) {
      c.segment[k].current++;
      if (seg_size >= msi_opt.max_split_size) c.oversize_segments.current++;
    }
    c.reserved_bytes[k].current += (int64_t)seg_size;
    reserved_total += seg_size;
  }
  for (msi_private_pool *pp = d->private_pools; pp; pp = pp->next) {
    int64_t held = 0; /* classic segments, and mapped pages of expandable ones */
    for (size_t i = 0; i < w.n; i++) {
      const msi_block *head = w.blocks[i];
      if (head->prev || head->pool->owner != pp) continue;
      if (!head->seg) held++;
      else
        for (size_t p = 0; p < head->seg->nhandles; p++) held += head->seg->handles[p] != NULL;
    }
    if (held != pp->malloc_count)
      FAIL("private pool (%llu, %llu) counts %lld segments and pages but holds %lld", (unsigned long long)pp->id[0],
           (unsigned long long)pp->id[1], (long long)pp->malloc_count, (long long)held);
  }
  if (reached != w.n) FAIL("%zu blocks belong to no segment", w.n - reached);
  if (reserved_total != d->total_allocated_memory)
    FAIL("segments hold %zu bytes but %zu are counted reserved", reserved_total, d->total_allocated_memory);
#define CHECK_STAT(name)                                                                             \
  for (int k = 1; k < MEMSNAP_POOL_KINDS; k++) c.name[MEMSNAP_POOL_ALL].current += c.name[k].current; \
  for (int k = 0; k < MEMSNAP_POOL_KINDS; k++)                                                       \
    if (c.name[k].current != d->stats.name[k].current)                                               \
      FAIL("%s[%d] is %lld but the blocks give %lld", #name, k, (long long)d->stats.name[k].current,  \
           (long long)c.name[k].current);
  CHECK_STAT(allocation)
  CHECK_STAT(allocated_bytes)
  CHECK_STAT(active)
  CHECK_STAT(active_bytes)
  CHECK_STAT(requested_bytes)
  CHECK_STAT(inactive_split)
  CHECK_STAT(inactive_split_bytes)
  CHECK_STAT(segment)
  CHECK_STAT(reserved_bytes)
  if (c.oversize_allocations.current != d->stats.oversize_allocations.current ||
      c.oversize_segments.current != d->stats.oversize_segments.current)
    FAIL("oversize counts differ from the blocks");
out:
  pthread_mutex_unlock(&d->lock);
  free(w.blocks);
  return rc;
}
