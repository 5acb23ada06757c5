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

/* The replay of the allocation and segment events (the rows every other pass sees: malformed
 * ones skipped alike, ms_event_plausible), then of the snapshot's rows. */
typedef struct prior_pass {
  ms_prehistory *h;
  ms_live_map blocks, segs; /* live in the replay: block and segment addresses */
  size_t capblocks, capsegs;
  int64_t segment_change; /* reserved memory the history added (less what it released) */
  int64_t segments_total; /* the snapshot's segments */
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

/* At the snapshot: allocated blocks the replay does not hold came from before. */
static int prior_block_row(const ms_block_row *r, void *arg) {
  prior_pass *p = arg;
  ms_live_slot taken;
  if (r->state != MS_BLOCK_ALLOCATED || r->size <= 0 || ms_live_take(&p->blocks, r->address, &taken)) return 0;
  p->failed = !add_block(p->h, &p->capblocks, (ms_prior_block){r->address, r->size, r->stack_id, 0, true});
  return p->failed;
}

/* At the snapshot: segments the replay does not hold came from before. */
static int prior_segment_row(const ms_segment_row *r, void *arg) {
  prior_pass *p = arg;
  ms_live_slot taken;
  if (r->size <= 0) return 0;
  p->segments_total += r->size;
  if (ms_live_take(&p->segs, r->address, &taken)) return 0;
  p->failed = !add_segment(p->h, &p->capsegs, (ms_prior_segment){r->address, r->stream, r->size, r->device});
  return p->failed;
}

int ms_prehistory_build(ms_snapshot *s, ms_prehistory *h) {
  memset(h, 0, sizeof *h);
  h->layout_known = true;
  prior_pass p = {.h = h};
  int rc = ms_memory_events_each(s, false, prior_event, &p);
  if (rc == 0) rc = ms_blocks_each(s, prior_block_row, &p);
  if (rc == 0) rc = ms_segments_each(s, prior_segment_row, &p);
  ms_live_free(&p.blocks);
  ms_live_free(&p.segs);
  if (rc != 0) {
    ms_prehistory_free(h);
    if (p.failed) snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
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
  int64_t reserved_end = p.segments_total;
  ms_stat_total(s, "reserved_bytes.all.current", &reserved_end);
  if (reserved_end < 0 || reserved_end > ((int64_t)1 << 50)) reserved_end = p.segments_total; /* a damaged statistic */
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
