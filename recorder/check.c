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
 *     of its pool and stream), or waiting on events (event_count > 0);
 *   - a segment's blocks are contiguous, share pool and stream, and two cached neighbours never
 *     sit side by side (they would have merged);
 *   - sizes and addresses are multiples of 512; blocks of different segments never overlap;
 *   - trees are ordered by (size, address), heap-ordered by priority, with consistent links;
 *   - the current value of every statistic equals what the walk counts.
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

int memsnap_check(int device) {
  msi_device *d = msi_device_get(device);
  if (!d) return MEMSNAP_EINVAL;
  int rc = MEMSNAP_OK;
  walk w = {0};
  pthread_mutex_lock(&d->lock);
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
  msi_pool *pools[2] = {&d->small, &d->large};
  for (int p = 0; p < 2; p++)
    for (int s = 0; s < pools[p]->nsets; s++)
      if (check_tree(&pools[p]->sets[s], pools[p], &w) != 0) {
        rc = MEMSNAP_EINVAL;
        goto out;
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
    for (msi_block *b = head; b; b = b->next) {
      reached++;
      if (b->size == 0 || b->size % MSI_MIN_BLOCK_SIZE || b->ptr % MSI_MIN_BLOCK_SIZE)
        FAIL("block %#lx has size %zu: not a multiple of 512", (unsigned long)b->ptr, b->size);
      if (b->next && (b->next->prev != b || b->ptr + b->size != b->next->ptr || b->next->pool != b->pool ||
                      b->next->stream != b->stream))
        FAIL("segment links broken after block %#lx", (unsigned long)b->ptr);
      if (b->next && b->in_tree && b->next->in_tree) FAIL("cached neighbours %#lx and %#lx were not merged", (unsigned long)b->ptr, (unsigned long)b->next->ptr);
      bool waiting = !b->allocated && !b->in_tree;
      if (waiting && b->event_count == 0) FAIL("block %#lx is neither allocated, cached nor waiting", (unsigned long)b->ptr);
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
      if (b->in_tree && (b->prev || b->next)) {
        c.inactive_split[k].current++;
        c.inactive_split_bytes[k].current += (int64_t)b->size;
      }
    }
    c.segment[k].current++;
    c.reserved_bytes[k].current += (int64_t)seg_size;
    if (seg_size >= msi_opt.max_split_size) c.oversize_segments.current++;
    reserved_total += seg_size;
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
