/* prehistory.c: the allocator's state when the kept history starts, reconstructed from the state
 * at the snapshot (segments and blocks) minus what the history did, as PyTorch's memory viz does
 * ("block was allocated before _record_history was enabled"). The analysis (analyze.c,
 * timeline.c) and the replay (replay/engine.c) both start from it.
 *
 * A snapshot whose history starts after memory was already in use (recording turned on late, or
 * the ring dropped the oldest events) holds segments and blocks no kept event created. Without
 * them the curves, bands and peaks would count only what the history allocated, and contradict
 * the snapshot (reserved below allocated, a peak below the final state), and a replay would run
 * on an empty device. One streaming pass over the allocation and segment events finds them:
 *
 *   blocks    freed by the history but never allocated in it, and allocated at the snapshot but
 *             not live at the end of the replay;
 *   segments  freed (unmapped) by the history but never created in it, and present at the
 *             snapshot but not live at the end of the replay.
 *
 * Totals: allocated at the start is what those blocks hold; reserved at the start is reserved at
 * the snapshot minus the history's net segment change (exact also for expandable segments, whose
 * mapped ranges merge and split), in all and per device. Memory follows the live blocks and
 * segments, not the history.
 *
 * The analysis and the replay read a damaged or inconsistent history differently, and the
 * reconstruction reads it as the pass it serves does (ms_prehistory_view): the analysis counts
 * every event; the replay leaves out the events it cannot replay (no address, a device out of
 * range), and takes a free of an address the history allocated and freed already for a free too
 * many, not the free of a block from before (that needs a map of the addresses allocated, which
 * the analysis does without). On a history that adds up, both views give the same blocks and
 * segments. What each does with them is its own: the analysis's sites and drawn layout, the
 * replay's layout of classic segments and their blocks (replay/engine.c: plan_late).
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

/* The replay of the allocation and segment events, then of the snapshot's rows. */
typedef struct prior_pass {
  ms_prehistory *h;
  ms_prehistory_view view;
  ms_live_map blocks, segs; /* live in the replay: block and segment addresses */
  ms_live_map seen;         /* the replay's view: addresses allocated and not freed twice since */
  size_t capblocks, capsegs;
  int64_t segment_change; /* reserved memory the history added (less what it released) */
  int64_t segments_total; /* the snapshot's segments */
  bool failed;            /* out of memory */
} prior_pass;

static void add_block(prior_pass *p, ms_prior_block b) {
  ms_prehistory *h = p->h;
  if (!ms_grow(&h->blocks, &p->capblocks, h->nblocks + 1, sizeof b)) p->failed = true;
  else h->blocks[h->nblocks++] = b;
}

static void add_segment(prior_pass *p, ms_prior_segment g) {
  ms_prehistory *h = p->h;
  if (!ms_grow(&h->segments, &p->capsegs, h->nsegments + 1, sizeof g)) p->failed = true;
  else h->segments[h->nsegments++] = g;
}

/* Puts an address into a map (the size kept); failed when out of memory. */
static void put(prior_pass *p, ms_live_map *m, uint64_t address, int64_t size) {
  if (address && ms_live_put(m, (ms_live_slot){.key = address, .site = 0, .aux = 0, .size = size}) != 0) p->failed = true;
}

static void segment_change(prior_pass *p, const ms_event *e, int64_t change) {
  p->segment_change += change;
  if (e->device >= 0 && e->device < MS_MAX_DEVICES) p->h->device_reserved_change[e->device] += change;
  if (e->kind == MS_SEGMENT_MAP || e->kind == MS_SEGMENT_UNMAP) p->h->layout_known = false; /* ranges merge: totals only */
}

static int prior_event(const ms_event *e, void *arg) {
  prior_pass *p = arg;
  bool replay = p->view == MS_PREHISTORY_REPLAY;
  ms_live_slot taken;
  if (replay && (e->device < 0 || e->device >= MS_MAX_DEVICES || !e->address)) return 0;
  switch (e->kind) {
    case MS_ALLOC:
      put(p, &p->blocks, e->address, e->size);
      if (replay) put(p, &p->seen, e->address, 1);
      break;
    case MS_FREE_REQUESTED:
      if (e->address && !ms_live_take(&p->blocks, e->address, &taken) &&
          (replay ? !ms_live_take(&p->seen, e->address, &taken) : e->size > 0))
        add_block(p, (ms_prior_block){e->address, e->stream, e->size, e->requested, e->device, e->stack_id, 0, false, 0, 0, 0});
      break;
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_MAP:
      segment_change(p, e, e->size);
      put(p, &p->segs, e->address, e->size);
      break;
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_UNMAP:
      segment_change(p, e, -e->size);
      if (e->address && !ms_live_take(&p->segs, e->address, &taken) && (replay || e->size > 0))
        add_segment(p, (ms_prior_segment){e->address, e->stream, e->size, e->device, e->kind == MS_SEGMENT_FREE,
                                          e->size == (int64_t)(2 << 20)});
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
  add_block(p, (ms_prior_block){r->address, r->stream, r->size, r->requested, r->device, r->stack_id, 0, true, 0,
                                r->role, r->module_label});
  return p->failed;
}

/* At the snapshot: segments the replay does not hold came from before. */
static int prior_segment_row(const ms_segment_row *r, void *arg) {
  prior_pass *p = arg;
  ms_live_slot taken;
  if (r->size <= 0) return 0;
  p->segments_total += r->size;
  if (ms_live_take(&p->segs, r->address, &taken)) return 0;
  add_segment(p, (ms_prior_segment){r->address, r->stream, r->size, r->device,
                                    !r->expandable && strcmp(r->pool, "async") != 0, strcmp(r->pool, "small") == 0});
  return p->failed;
}

int ms_prehistory_build(ms_snapshot *s, ms_prehistory_view view, ms_prehistory *h) {
  memset(h, 0, sizeof *h);
  h->layout_known = true;
  prior_pass p = {.h = h, .view = view};
  /* the first pass of an analysis or a replay: on every core, and it counts the history's
     extent on the way (ms_events_each) */
  int rc = ms_events_each(s, prior_event, &p);
  ms_live_free(&p.seen);
  if (rc == 0) rc = ms_blocks_each(s, prior_block_row, &p);
  if (rc == 0) rc = ms_segments_each(s, prior_segment_row, &p);
  ms_live_free(&p.blocks);
  ms_live_free(&p.segs);
  if (rc != 0) {
    ms_prehistory_free(h);
    if (!p.failed) return -1;
    snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    return -2;
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
    if (ms_live_put(live, (ms_live_slot){.key = h->blocks[i].address, .site = h->blocks[i].site, .size = h->blocks[i].size,
                                         .birth = {.ordinal = -(int64_t)i - 1, .iteration = -1, .category = h->blocks[i].category,
                                                   .role = h->blocks[i].role}}) != 0)
      *failed = true;
}

int64_t ms_prehistory_start_reserved(const ms_prehistory *h, int device, int64_t at_snapshot) {
  int64_t r = at_snapshot - h->device_reserved_change[device];
  return r < 0 ? 0 : r;
}

void ms_prehistory_free(ms_prehistory *h) {
  free(h->blocks);
  free(h->segments);
  memset(h, 0, sizeof *h);
}
