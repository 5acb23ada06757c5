/* prehistory.c: the allocator's state when the kept history starts, reconstructed from the state
 * at the snapshot (segments and blocks) minus what the history did, as PyTorch's memory viz does
 * ("block was allocated before _record_history was enabled").
 *
 * A snapshot whose history starts after memory was already in use (recording turned on late, or
 * the ring dropped the oldest events) holds segments and blocks no kept event created. Without
 * them the curves, bands and peaks would count only what the history allocated, and contradict
 * the snapshot (reserved below allocated, a peak below the final state). One streaming pass over
 * the allocation and segment events finds them:
 *
 *   blocks    freed by the history but never allocated in it, and allocated at the snapshot but
 *             not live at the end of the replay;
 *   segments  freed (unmapped) by the history but never created in it, and present at the
 *             snapshot but not live at the end of the replay.
 *
 * Totals: allocated at the start is what those blocks hold; reserved at the start is reserved at
 * the snapshot minus the history's net segment change (exact also for expandable segments, whose
 * mapped ranges merge and split). Memory follows the live blocks and segments, not the history.
 */
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"

/* Grows *p (of *cap elements of `size` bytes) to hold one more than n; false out of memory. */
static bool room_for_one_more(void *p, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return true;
  size_t c = *cap ? *cap * 2 : 64;
  void *g = realloc(*(void **)p, c * size);
  if (!g) return false;
  *(void **)p = g;
  *cap = c;
  return true;
}

static bool add_block(ms_prehistory *h, size_t *cap, ms_prior_block b) {
  if (!room_for_one_more(&h->blocks, cap, h->nblocks, sizeof b)) return false;
  h->blocks[h->nblocks++] = b;
  return true;
}

static bool add_segment(ms_prehistory *h, size_t *cap, ms_prior_segment g) {
  if (!room_for_one_more(&h->segments, cap, h->nsegments, sizeof g)) return false;
  h->segments[h->nsegments++] = g;
  return true;
}

/* One integer from a query (fallback when it fails or gives no row). */
static int64_t query_int(ms_snapshot *s, const char *sql, int64_t fallback) {
  sqlite3_stmt *st;
  int64_t v = fallback;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
      sqlite3_column_type(st, 0) != SQLITE_NULL)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* The replay of the allocation and segment events (the rows every other pass sees: malformed
 * ones skipped alike, MS_EVENT_PLAUSIBLE_SQL). */
typedef struct prior_pass {
  ms_prehistory *h;
  ms_live_map blocks, segs; /* live in the replay: block and segment addresses */
  size_t capblocks, capsegs;
  int64_t segment_change; /* reserved memory the history added (less what it released) */
  bool failed;
} prior_pass;

static int prior_event(const ms_event *e, void *arg) {
  prior_pass *p = arg;
  ms_prehistory *h = p->h;
  ms_live_slot taken;
  switch (e->kind) {
    case MS_ALLOC:
      p->failed = e->address && ms_live_put(&p->blocks, (ms_live_slot){e->address, 0, 0, e->size}) != 0;
      break;
    case MS_FREE_REQUESTED:
      if (e->address && !ms_live_take(&p->blocks, e->address, &taken) && e->size > 0)
        p->failed = !add_block(h, &p->capblocks, (ms_prior_block){e->address, e->size, 0, 0, false});
      break;
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_MAP:
      p->segment_change += e->size;
      if (e->kind == MS_SEGMENT_MAP) h->layout_known = false; /* mapped ranges merge: totals only */
      p->failed = e->address && ms_live_put(&p->segs, (ms_live_slot){e->address, 0, 0, e->size}) != 0;
      break;
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_UNMAP:
      p->segment_change -= e->size;
      if (e->kind == MS_SEGMENT_UNMAP) h->layout_known = false;
      if (e->address && !ms_live_take(&p->segs, e->address, &taken) && e->size > 0)
        p->failed = !add_segment(h, &p->capsegs, (ms_prior_segment){e->address, e->stream, e->size, e->device});
      break;
    default:
      break;
  }
  return p->failed;
}

/* Sizes as plausible as the reader requires of events' (more than 0, at most 2^40 bytes). */
#define PLAUSIBLE "size > 0 and size <= 1099511627776"

int ms_prehistory_build(ms_snapshot *s, ms_prehistory *h) {
  memset(h, 0, sizeof *h);
  h->layout_known = true;
  prior_pass p = {.h = h};
  sqlite3_stmt *st;
  /* The analysis's first pass: on every core, and it counts the history's extent on the way. */
  if (ms_events_each(s, prior_event, &p) < 0) return -1;
  bool failed = p.failed;
  ms_live_map *blocks = &p.blocks, *segs = &p.segs;
  /* At the snapshot: allocated blocks and segments the replay does not hold came from before. */
  if (!failed && sqlite3_prepare_v2(s->db, "select address, size, coalesce(stack_id, 0) from blocks where state = 'allocated' and " PLAUSIBLE,
                                    -1, &st, NULL) == SQLITE_OK) {
    while (!failed && sqlite3_step(st) == SQLITE_ROW) {
      uint64_t address = (uint64_t)sqlite3_column_int64(st, 0);
      int64_t size = sqlite3_column_int64(st, 1), stack = sqlite3_column_int64(st, 2);
      ms_live_slot taken;
      if (ms_live_take(blocks, address, &taken)) continue;
      if (stack < 0 || (size_t)stack >= s->nstacks) stack = 0;
      failed = !add_block(h, &p.capblocks, (ms_prior_block){address, size, (uint32_t)stack, 0, true});
    }
    sqlite3_finalize(st);
  }
  int64_t segments_total = 0;
  if (!failed && sqlite3_prepare_v2(s->db, "select address, size, coalesce(device, -1), coalesce(stream, 0) from segments where " PLAUSIBLE,
                                    -1, &st, NULL) == SQLITE_OK) {
    while (!failed && sqlite3_step(st) == SQLITE_ROW) {
      uint64_t address = (uint64_t)sqlite3_column_int64(st, 0);
      int64_t size = sqlite3_column_int64(st, 1);
      ms_live_slot taken;
      segments_total += size;
      if (ms_live_take(segs, address, &taken)) continue;
      failed = !add_segment(h, &p.capsegs, (ms_prior_segment){address, (uint64_t)sqlite3_column_int64(st, 3), size,
                                                             sqlite3_column_int(st, 2)});
    }
    sqlite3_finalize(st);
  }
  ms_live_free(blocks);
  ms_live_free(segs);
  if (failed) {
    ms_prehistory_free(h);
    snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    return -1;
  }
  for (size_t i = 0; i < h->nblocks; i++) {
    h->allocated += h->blocks[i].size;
    if (h->blocks[i].alive_at_end) {
      h->end_bytes += h->blocks[i].size;
      h->end_count++;
    }
  }
  /* Reserved at the snapshot as its statistics say (the segments' sum when it has none). */
  int64_t reserved_end =
      query_int(s, "select sum(value) from stats where key = 'reserved_bytes.all.current'", segments_total);
  if (reserved_end < 0 || reserved_end > ((int64_t)1 << 50)) reserved_end = segments_total; /* a damaged statistic */
  h->reserved = reserved_end - p.segment_change;
  if (h->reserved < 0) h->reserved = 0; /* a history that released more than the snapshot explains */
  return 0;
}

void ms_prehistory_seed(const ms_prehistory *h, ms_live_map *live, bool *failed) {
  for (size_t i = 0; i < h->nblocks && !*failed; i++)
    if (ms_live_put(live, (ms_live_slot){h->blocks[i].address, h->blocks[i].site, 0, h->blocks[i].size}) != 0) *failed = true;
}

void ms_prehistory_free(ms_prehistory *h) {
  free(h->blocks);
  free(h->segments);
  memset(h, 0, sizeof *h);
}
