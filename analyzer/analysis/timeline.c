/* timeline.c: what the report page draws beyond the analysis, in one more streaming pass over
 * the events (memory follows the live blocks and what the page keeps, never the history):
 *
 *   bands        allocated memory by site per time bucket, split at the bucket's peak moment, and
 *                by category (categories.c) at the same moment;
 *   detail       the largest allocations one by one (at most MS_DETAIL_MAX: the size threshold
 *                comes from the analysis's size histogram), for hover, pin and address search;
 *   checkpoints  the allocator's segments as runs of allocated, pending and free blocks, and the
 *                live bytes by site, at evenly spaced times, the peak, each iteration's peak,
 *                each OOM and the end: the page's allocator-state view and flame graph;
 *   steps        the allocator's events one by one, when there are at most MS_STEPS_MAX of them
 *                (the page steps its state event by event); none otherwise;
 *   spans        each segment's life with the stack that allocated it (at most MS_SPANS_MAX):
 *                the page's segment timeline, and a segment's stack in the allocator state.
 *
 * A checkpoint at time t holds the state after every event at or before t (the peak's, after
 * the peak event itself). Blocks freed with free_requested but not yet free_completed are
 * pending (waiting on other streams' work). Segments and blocks from before the kept history
 * (prehistory.c) are in the replay from its first instant; with expandable segments only their
 * totals are (the mapped ranges of that time are unknown).
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

typedef struct target {
  int64_t time_ns, event_id; /* event_id > 0: right after that event */
  ms_checkpoint_kind kind;
  int index;
} target;

typedef struct seg {
  uint64_t address, stream;
  int64_t size;
  int device;
} seg;

typedef struct timeline_pass {
  ms_analysis *a;
  ms_timeline *t;
  ms_live_map live, pending; /* pending: free_requested, waiting for free_completed */
  ms_live_map rounded;       /* live blocks allocated beyond their request: by how much (size) */
  int64_t rounding;          /* their sum: internal fragmentation (blocks from before: none) */
  int8_t *band_of_site;      /* site -> band (nsites: other) */
  int64_t band_live[MS_BANDS + 1];
  int64_t category_live[MS_CATEGORIES];
  int64_t allocated, reserved, pending_bytes, width, best; /* best: highest total in the bucket */
  int64_t allocs; /* allocations seen: the ordinal of the next (a->alloc_category's index) */
  seg *segs;                                                /* live segments, by address */
  size_t nsegs, capsegs;
  size_t *open;        /* spans not ended yet, by address (indices into t->spans) */
  size_t nopen, capopen, capspans;
  int64_t unknown;     /* the span of reserved memory from before the history whose ranges are unknown; -1 */
  target *targets;
  size_t ntargets, next;
  int64_t *site_live; /* by site, scratch for checkpoints */
  int64_t *site_now;  /* by site, live bytes now (for the leak series) */
  size_t next_iteration; /* the iteration whose end the leak series records next */
  ms_live_slot *scratch;
  size_t capscratch, capdetail, capcheckpoints, capsegments, capruns, capsites, capsteps; /* of t's arrays */
  bool failed;
} timeline_pass;

/* ---- segments ------------------------------------------------------------------------------ */

/* Index of the first segment at or above address. */
static size_t seg_lower(const timeline_pass *p, uint64_t address) {
  size_t lo = 0, hi = p->nsegs;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if (p->segs[m].address < address) lo = m + 1;
    else hi = m;
  }
  return lo;
}

static void seg_add(timeline_pass *p, const ms_event *e) {
  size_t i = seg_lower(p, e->address);
  if (i < p->nsegs && p->segs[i].address == e->address) { /* a segment we missed the free of */
    p->reserved -= p->segs[i].size;
    p->segs[i] = (seg){e->address, e->stream, e->size, e->device};
    p->reserved += e->size;
    return;
  }
  if (!ms_grow(&p->segs, &p->capsegs, p->nsegs + 1, sizeof *p->segs)) {
    p->failed = true;
    return;
  }
  memmove(&p->segs[i + 1], &p->segs[i], (p->nsegs - i) * sizeof *p->segs);
  p->segs[i] = (seg){e->address, e->stream, e->size, e->device};
  p->nsegs++;
  p->reserved += e->size;
}

/* Expandable segments: pages mapped at [address, address + size) join the segment that ends or
 * starts there (PyTorch shows each contiguous mapped range as one segment), else start one. A
 * range that overlaps a known segment (the async mode's pool growth, which has no layout) only
 * counts as reserved. */
static void seg_map(timeline_pass *p, const ms_event *e) {
  uint64_t end = e->address + (uint64_t)e->size;
  size_t i = seg_lower(p, e->address);
  bool joins_prev = i > 0 && p->segs[i - 1].device == e->device &&
                    p->segs[i - 1].address + (uint64_t)p->segs[i - 1].size == e->address;
  bool joins_next = i < p->nsegs && p->segs[i].device == e->device && p->segs[i].address == end;
  bool overlaps = (i < p->nsegs && p->segs[i].address < end && !joins_next) ||
                  (i > 0 && p->segs[i - 1].address + (uint64_t)p->segs[i - 1].size > e->address);
  if (overlaps || e->size <= 0) {
    p->reserved += e->size;
  } else if (joins_prev) {
    p->segs[i - 1].size += e->size;
    p->reserved += e->size;
    if (joins_next) { /* the two ranges are one now */
      p->segs[i - 1].size += p->segs[i].size;
      memmove(&p->segs[i], &p->segs[i + 1], (p->nsegs - i - 1) * sizeof *p->segs);
      p->nsegs--;
    }
  } else if (joins_next) {
    p->segs[i].address = e->address;
    p->segs[i].size += e->size;
    p->reserved += e->size;
  } else {
    seg_add(p, e);
  }
}

/* Pages unmapped at [address, address + size): cut out of the segment holding them, which may
 * leave two. */
static void seg_unmap(timeline_pass *p, const ms_event *e) {
  uint64_t end = e->address + (uint64_t)e->size;
  size_t i = seg_lower(p, e->address + 1);
  p->reserved -= e->size;
  if (i == 0 || e->size <= 0) return;
  seg *g = &p->segs[i - 1];
  uint64_t gend = g->address + (uint64_t)g->size;
  if (g->device != e->device || e->address < g->address || end > gend) return; /* not a known range */
  if (e->address == g->address && end == gend) {
    memmove(&p->segs[i - 1], &p->segs[i], (p->nsegs - i) * sizeof *p->segs);
    p->nsegs--;
  } else if (e->address == g->address) {
    g->address = end;
    g->size = (int64_t)(gend - end);
  } else if (end == gend) {
    g->size = (int64_t)(e->address - g->address);
  } else { /* a hole: the part after becomes a segment of its own */
    if (!ms_grow(&p->segs, &p->capsegs, p->nsegs + 1, sizeof *p->segs)) {
      p->failed = true;
      return;
    }
    g = &p->segs[i - 1];
    memmove(&p->segs[i + 1], &p->segs[i], (p->nsegs - i) * sizeof *p->segs);
    p->segs[i] = (seg){end, g->stream, (int64_t)(gend - end), g->device};
    g->size = (int64_t)(e->address - g->address);
    p->nsegs++;
  }
}

static void seg_remove(timeline_pass *p, uint64_t address) {
  size_t i = seg_lower(p, address);
  if (i == p->nsegs || p->segs[i].address != address) return;
  p->reserved -= p->segs[i].size;
  memmove(&p->segs[i], &p->segs[i + 1], (p->nsegs - i - 1) * sizeof *p->segs);
  p->nsegs--;
}

/* ---- segment spans ------------------------------------------------------------------------- */

/* Index into open of the first span at or above address. */
static size_t open_lower(const timeline_pass *p, uint64_t address) {
  size_t lo = 0, hi = p->nopen;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if (p->t->spans[p->open[m]].address < address) lo = m + 1;
    else hi = m;
  }
  return lo;
}

/* Starts span sp (into the open list by address unless it is the unknown one); past
 * MS_SPANS_MAX, counts it as omitted. Returns its index, or -1. */
static int64_t span_start(timeline_pass *p, ms_span sp, bool unknown) {
  ms_timeline *t = p->t;
  if (sp.size <= 0) return -1;
  if (t->nspans >= MS_SPANS_MAX) {
    t->omitted_spans++;
    return -1;
  }
  if (!ms_grow(&t->spans, &p->capspans, t->nspans + 1, sizeof *t->spans) || !ms_grow(&p->open, &p->capopen, p->nopen + 1, sizeof *p->open)) {
    p->failed = true;
    return -1;
  }
  t->spans[t->nspans] = sp;
  if (unknown) return p->unknown = (int64_t)t->nspans++;
  size_t i = open_lower(p, sp.address);
  memmove(&p->open[i + 1], &p->open[i], (p->nopen - i) * sizeof *p->open);
  p->open[i] = t->nspans;
  p->nopen++;
  return (int64_t)t->nspans++;
}

/* Ends the span at open[i] at time now. */
static void span_end(timeline_pass *p, size_t i, int64_t now) {
  p->t->spans[p->open[i]].end_ns = now;
  memmove(&p->open[i], &p->open[i + 1], (p->nopen - i - 1) * sizeof *p->open);
  p->nopen--;
}

/* Reserved memory released from no known span: from before the history, ranges unknown. That
 * span ends, and what is left of it starts anew. */
static void span_shrink_unknown(timeline_pass *p, int64_t size, int64_t now) {
  if (p->unknown < 0 || size <= 0 || p->t->omitted_spans) return; /* omitted: it may have been one of those */
  ms_span sp = p->t->spans[p->unknown];
  p->t->spans[p->unknown].end_ns = now;
  p->unknown = -1;
  sp.size -= size;
  sp.start_ns = now;
  span_start(p, sp, true);
}

/* Reserved memory released from no span of the history's ranges, when none from before it is
 * left to take it from: the async mode's pool trimmed (its unmap names no range: the pool gives
 * back whichever chunks are wholly free). Taken from the device's open spans, the newest first;
 * each ends, and what is left of it starts anew. */
static void span_shrink_newest(timeline_pass *p, int device, int64_t size, int64_t now) {
  while (size > 0 && !p->failed && !p->t->omitted_spans) {
    size_t newest = p->nopen;
    for (size_t i = 0; i < p->nopen; i++)
      if (p->t->spans[p->open[i]].device == device && (newest == p->nopen || p->open[i] > p->open[newest])) newest = i;
    if (newest == p->nopen) return;
    ms_span sp = p->t->spans[p->open[newest]];
    span_end(p, newest, now);
    int64_t taken = sp.size < size ? sp.size : size;
    size -= taken;
    sp.size -= taken;
    sp.start_ns = now;
    span_start(p, sp, false);
  }
}

/* The open span overlapping [a, b): its index into open, or nopen. */
static size_t open_overlapping(const timeline_pass *p, uint64_t a, uint64_t b) {
  size_t i = open_lower(p, a);
  for (i = i > 0 ? i - 1 : 0; i < p->nopen && p->t->spans[p->open[i]].address < b; i++) {
    const ms_span *sp = &p->t->spans[p->open[i]];
    if (sp->address + (uint64_t)sp->size > a) return i;
  }
  return p->nopen;
}

/* Pages unmapped at [address, address + size): the spans holding them end; the parts of them
 * outside the range start anew. */
static void span_unmap(timeline_pass *p, const ms_event *e) {
  uint64_t a = e->address, b = e->address + (uint64_t)e->size;
  int64_t unknown = e->size;
  for (size_t i; (i = open_overlapping(p, a, b)) < p->nopen && !p->failed;) {
    ms_span sp = p->t->spans[p->open[i]], rest = sp;
    uint64_t end = sp.address + (uint64_t)sp.size;
    span_end(p, i, e->time_ns);
    unknown -= (int64_t)((end < b ? end : b) - (sp.address > a ? sp.address : a));
    rest.start_ns = e->time_ns;
    rest.end_ns = -1;
    if (sp.address < a) {
      rest.size = (int64_t)(a - sp.address);
      span_start(p, rest, false);
    }
    if (end > b) {
      rest.address = b;
      rest.size = (int64_t)(end - b);
      span_start(p, rest, false);
    }
  }
  if (p->unknown >= 0) span_shrink_unknown(p, unknown, e->time_ns);
  else span_shrink_newest(p, e->device, unknown, e->time_ns);
}

/* A segment event: its span starts or ends. */
static void span_event(timeline_pass *p, const ms_event *e) {
  size_t i = open_lower(p, e->address);
  bool found = i < p->nopen && p->t->spans[p->open[i]].address == e->address;
  if (e->kind == MS_SEGMENT_ALLOC && found) span_end(p, i, e->time_ns); /* a segment we missed the free of */
  if (e->kind == MS_SEGMENT_ALLOC || e->kind == MS_SEGMENT_MAP)
    span_start(p, (ms_span){e->address, e->stream, e->size, e->time_ns, -1, e->stack_id, e->device, false}, false);
  else if (e->kind == MS_SEGMENT_FREE && found) span_end(p, i, e->time_ns);
  else if (e->kind == MS_SEGMENT_FREE) span_shrink_unknown(p, e->size, e->time_ns);
  else if (e->kind == MS_SEGMENT_UNMAP) span_unmap(p, e);
}

/* ---- checkpoints ----------------------------------------------------------------------------- */

static int compare_slot_address(const void *x, const void *y) {
  uint64_t a = ((const ms_live_slot *)x)->key, b = ((const ms_live_slot *)y)->key;
  return a < b ? -1 : a > b;
}

static int compare_site_bytes(const void *x, const void *y) {
  int64_t a = ((const ms_site_bytes *)x)->bytes, b = ((const ms_site_bytes *)y)->bytes;
  return a > b ? -1 : a < b;
}

/* Appends a run to the current segment, merging it with the last one in the same state. */
static bool add_run(timeline_pass *p, ms_segment_state *sg, int state, int64_t size) {
  ms_timeline *t = p->t;
  if (size <= 0) return true;
  if (sg->nruns && t->runs[t->nruns - 1].state == state) {
    t->runs[t->nruns - 1].size += size;
    t->runs[t->nruns - 1].count += state != MS_RUN_FREE;
    return true;
  }
  if (!ms_grow(&t->runs, &p->capruns, t->nruns + 1, sizeof *t->runs)) return false;
  t->runs[t->nruns++] = (ms_run){size, state != MS_RUN_FREE, state};
  sg->nruns++;
  return true;
}

/* Lays the live and pending blocks (sorted by address, n of them) into the live segments. */
static bool lay_out_segments(timeline_pass *p, ms_checkpoint *c, const ms_live_slot *blocks, size_t n) {
  ms_timeline *t = p->t;
  size_t b = 0, first_run = t->nruns;
  for (size_t s = 0; s < p->nsegs; s++) {
    const seg *g = &p->segs[s];
    if (t->nruns - first_run > MS_CHECKPOINT_RUNS_EACH) { /* bounded: say how many are left out */
      c->omitted_segments = p->nsegs - s;
      break;
    }
    if (!ms_grow(&t->segments, &p->capsegments, t->nsegments + 1, sizeof *t->segments)) return false;
    ms_segment_state *sg = &t->segments[t->nsegments++];
    *sg = (ms_segment_state){g->address, g->stream, g->size, g->device, t->nruns, 0};
    while (b < n && blocks[b].key < g->address) b++; /* blocks outside any known segment */
    uint64_t at = g->address, end = g->address + (uint64_t)g->size;
    for (; b < n && blocks[b].key < end; b++) {
      uint64_t bend = blocks[b].key + (uint64_t)blocks[b].size;
      if (blocks[b].key < at || bend > end) continue; /* overlapping garbage: skip it */
      if (!add_run(p, sg, MS_RUN_FREE, (int64_t)(blocks[b].key - at)) ||
          !add_run(p, sg, blocks[b].aux == UINT32_MAX ? MS_RUN_PENDING : MS_RUN_ALLOCATED, blocks[b].size))
        return false;
      at = bend;
    }
    if (!add_run(p, sg, MS_RUN_FREE, (int64_t)(end - at))) return false;
  }
  return true;
}

/* Live bytes by site, largest first, into t->site_bytes; returns false when out of memory. */
static bool list_sites(timeline_pass *p, ms_checkpoint *c) {
  ms_timeline *t = p->t;
  ms_analysis *a = p->a;
  memset(p->site_live, 0, a->nsites * sizeof *p->site_live);
  for (size_t i = 0; i <= p->live.mask && p->live.slots; i++)
    if (p->live.slots[i].key) p->site_live[p->live.slots[i].site] += p->live.slots[i].size;
  size_t first = t->nsite_bytes;
  for (size_t s = 0; s < a->nsites; s++) {
    if (!p->site_live[s]) continue;
    if (!ms_grow(&t->site_bytes, &p->capsites, t->nsite_bytes + 1, sizeof *t->site_bytes)) return false;
    t->site_bytes[t->nsite_bytes++] = (ms_site_bytes){(uint32_t)s, p->site_live[s], 0};
  }
  size_t n = t->nsite_bytes - first;
  if (n > 1) qsort(&t->site_bytes[first], n, sizeof *t->site_bytes, compare_site_bytes);
  c->first_site = first;
  c->nsites = n < MS_CHECKPOINT_SITES ? n : MS_CHECKPOINT_SITES;
  for (size_t i = c->nsites; i < n; i++) c->other_bytes += t->site_bytes[first + i].bytes;
  t->nsite_bytes = first + c->nsites;
  return true;
}

/* Records the state now as a checkpoint for target tg. */
static void take_checkpoint(timeline_pass *p, const target *tg, int64_t now) {
  ms_timeline *t = p->t;
  if (tg->kind != MS_CP_PEAK && tg->kind != MS_CP_END && t->nruns > MS_CHECKPOINT_RUNS) { /* enough: skip */
    t->skipped_checkpoints++;
    return;
  }
  size_t n = p->live.count + p->pending.count;
  if (!ms_grow(&p->scratch, &p->capscratch, n + 1, sizeof *p->scratch) ||
      !ms_grow(&t->checkpoints, &p->capcheckpoints, t->ncheckpoints + 1, sizeof *t->checkpoints)) {
    p->failed = true;
    return;
  }
  size_t k = 0;
  for (size_t i = 0; i <= p->live.mask && p->live.slots; i++)
    if (p->live.slots[i].key) p->scratch[k++] = p->live.slots[i];
  for (size_t i = 0; i <= p->pending.mask && p->pending.slots; i++)
    if (p->pending.slots[i].key) {
      p->scratch[k] = p->pending.slots[i];
      p->scratch[k++].aux = UINT32_MAX; /* marks it pending */
    }
  if (k > 1) qsort(p->scratch, k, sizeof *p->scratch, compare_slot_address);
  ms_checkpoint *c = &t->checkpoints[t->ncheckpoints++];
  *c = (ms_checkpoint){now, tg->kind, tg->index, p->allocated, p->reserved, p->pending_bytes, p->rounding, t->nsegments,
                       0, 0, 0, 0, 0};
  if (!lay_out_segments(p, c, p->scratch, k) || !list_sites(p, c)) p->failed = true;
  c->nsegments = t->nsegments - c->first_segment;
}

static int compare_targets(const void *x, const void *y) {
  const target *a = x, *b = y;
  if (a->time_ns != b->time_ns) return a->time_ns < b->time_ns ? -1 : 1;
  /* At one time, the one after an event first: a by-time one waits for every event at its time.
   * Then the named ones (iteration peaks, out of memory) before the evenly spaced, so that the
   * order does not rest on qsort's. */
  if ((a->event_id > 0) != (b->event_id > 0)) return (b->event_id > 0) - (a->event_id > 0);
  if ((a->kind == MS_CP_EVEN) != (b->kind == MS_CP_EVEN)) return (a->kind == MS_CP_EVEN) - (b->kind == MS_CP_EVEN);
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  return (a->index > b->index) - (a->index < b->index);
}

/* The times to take checkpoints at, in order. */
static bool choose_targets(timeline_pass *p) {
  ms_analysis *a = p->a;
  const ms_snapshot *s = a->snap;
  size_t iters = a->niters < 64 ? a->niters : 64, ooms = a->nooms < 16 ? a->nooms : 16;
  p->targets = calloc(MS_CHECKPOINTS_EVEN + iters + ooms + 1, sizeof *p->targets);
  if (!p->targets) return false;
  target *tg = p->targets;
  size_t n = 0;
  int64_t span = s->last_ns > s->first_ns ? s->last_ns - s->first_ns : 0;
  for (int i = 1; span && i <= MS_CHECKPOINTS_EVEN; i++)
    tg[n++] = (target){s->first_ns + (int64_t)((double)span * i / (MS_CHECKPOINTS_EVEN + 1)), 0, MS_CP_EVEN, i};
  if (a->peak_event_id > 0) tg[n++] = (target){a->peak_allocated_ns, a->peak_event_id, MS_CP_PEAK, 0};
  for (size_t i = 0; i < iters; i++) { /* spread over all iterations when there are more */
    size_t it = a->niters <= 64 ? i : i * (a->niters - 1) / 63;
    tg[n++] = (target){a->iters[it].peak_ns, 0, MS_CP_ITERATION_PEAK, (int)it};
  }
  for (size_t i = 0; i < ooms; i++) tg[n++] = (target){a->ooms[i].time_ns, 0, MS_CP_OOM, (int)i};
  qsort(tg, n, sizeof *tg, compare_targets);
  size_t kept = 0; /* an evenly spaced time that falls on another by-time checkpoint adds nothing */
  for (size_t i = 0; i < n; i++)
    if (!(tg[i].kind == MS_CP_EVEN && kept && tg[kept - 1].time_ns == tg[i].time_ns && !tg[kept - 1].event_id)) tg[kept++] = tg[i];
  p->ntargets = kept;
  return true;
}

/* ---- the pass ------------------------------------------------------------------------------ */

static void add_detail(timeline_pass *p, const ms_event *e, uint32_t site, uint32_t *aux) {
  ms_timeline *t = p->t;
  *aux = 0;
  if (e->size < t->detail_min_size || t->ndetail >= MS_DETAIL_MAX) return;
  if (!ms_grow(&t->detail, &p->capdetail, t->ndetail + 1, sizeof *t->detail)) {
    p->failed = true;
    return;
  }
  t->detail[t->ndetail++] = (ms_detail){e->time_ns, -1, e->size, e->requested, e->address, e->stream, site};
  *aux = (uint32_t)t->ndetail;
}

/* Keeps an allocator event for the page's stepping, dropping them all past MS_STEPS_MAX. */
static void add_step(timeline_pass *p, const ms_event *e, uint32_t site) {
  ms_timeline *t = p->t;
  if (!t->steps_kept || !(e->kind == MS_ALLOC || e->kind == MS_FREE_REQUESTED || e->kind == MS_FREE_COMPLETED ||
                          e->kind == MS_SEGMENT_ALLOC || e->kind == MS_SEGMENT_FREE || e->kind == MS_SEGMENT_MAP ||
                          e->kind == MS_SEGMENT_UNMAP))
    return;
  if (t->nsteps == MS_STEPS_MAX) {
    free(t->steps);
    t->steps = NULL, t->nsteps = 0, p->capsteps = 0, t->steps_kept = false;
    return;
  }
  if (!ms_grow(&t->steps, &p->capsteps, t->nsteps + 1, sizeof *t->steps)) {
    p->failed = true;
    return;
  }
  bool alloc = e->kind == MS_ALLOC;
  t->steps[t->nsteps++] = (ms_step){e->time_ns, e->size, alloc && e->requested > 0 ? e->requested : e->size, e->address,
                                    alloc ? (int64_t)site : -1, e->kind};
}

/* After an event at time t (or the history's first instant): the bands of t's bucket. */
static void band_bucket(timeline_pass *p, int64_t t) {
  ms_bands *b = &p->t->bands;
  int64_t start = ms_bucket_start(p->a->snap, p->width, t); /* the curves' buckets */
  if (b->n == 0 || b->t[b->n - 1] != start) {
    if (b->n == MS_BUCKETS) return;
    b->t[b->n++] = start;
    p->best = -1;
  }
  if (p->allocated > p->best) { /* the bucket's peak so far: record how it splits by site */
    p->best = p->allocated;
    b->tp[b->n - 1] = t;
    memcpy(b->bytes[b->n - 1], p->band_live, sizeof p->band_live);
    memcpy(b->categories[b->n - 1], p->category_live, sizeof p->category_live);
  }
}

static int compare_segment_address(const void *x, const void *y) {
  uint64_t a = ((const seg *)x)->address, b = ((const seg *)y)->address;
  return a < b ? -1 : a > b;
}

/* Starts the replay from the state when the history starts: the blocks and segments from before
 * it, and its totals. False when out of memory. */
static bool seed_prehistory(timeline_pass *p) {
  const ms_prehistory *h = &p->a->before;
  ms_prehistory_seed(h, &p->live, &p->failed);
  for (size_t i = 0; i < h->nblocks; i++) {
    p->band_live[p->band_of_site[h->blocks[i].site]] += h->blocks[i].size;
    p->category_live[h->blocks[i].category] += h->blocks[i].size;
    p->site_now[h->blocks[i].site] += h->blocks[i].size;
  }
  if (h->layout_known && h->nsegments) {
    if (!ms_grow(&p->segs, &p->capsegs, h->nsegments, sizeof *p->segs)) return false;
    for (size_t i = 0; i < h->nsegments; i++)
      p->segs[i] = (seg){h->segments[i].address, h->segments[i].stream, h->segments[i].size, h->segments[i].device};
    p->nsegs = h->nsegments;
    qsort(p->segs, p->nsegs, sizeof *p->segs, compare_segment_address);
  }
  int64_t known = 0, first = p->a->snap->first_ns; /* the segments' spans, from the first instant */
  for (size_t i = 0; i < p->nsegs; i++) {
    span_start(p, (ms_span){p->segs[i].address, p->segs[i].stream, p->segs[i].size, first, -1, 0, p->segs[i].device, true}, false);
    known += p->segs[i].size;
    if (p->segs[i].device >= 0 && p->segs[i].device < MS_MAX_DEVICES) p->t->devices |= 1ULL << p->segs[i].device;
  }
  if (h->reserved > known) span_start(p, (ms_span){0, 0, h->reserved - known, first, -1, 0, -1, true}, true);
  p->allocated = h->allocated;
  p->reserved = h->reserved;
  band_bucket(p, p->a->snap->first_ns); /* the first instant, as the curves have it */
  return !p->failed;
}

/* Records the leak series at the end of iteration k. */
static void record_leak_series(timeline_pass *p, size_t k) {
  ms_timeline *t = p->t;
  for (size_t l = 0; l < t->leak_series; l++) t->leak_live[l * t->leak_iterations + k] = p->site_now[p->a->leaks[l]];
}

static int timeline_event(const ms_event *e, void *arg) {
  timeline_pass *p = arg;
  const ms_analysis *a = p->a;
  while (p->t->leak_series && p->next_iteration + 1 < a->niters && e->id >= a->iters[p->next_iteration + 1].start_event_id)
    record_leak_series(p, p->next_iteration++);
  while (p->next < p->ntargets && !p->targets[p->next].event_id && e->time_ns > p->targets[p->next].time_ns) {
    take_checkpoint(p, &p->targets[p->next], p->targets[p->next].time_ns);
    p->next++;
  }
  ms_live_slot block = {0};
  uint32_t aux = 0, site = 0;
  ms_birth birth = {0};
  if (e->kind == MS_ALLOC) {
    site = (uint32_t)(p->a->site_of_stack[e->stack_id] - 1);
    add_detail(p, e, site, &aux);
    if (ms_live_take(&p->pending, e->address, &block)) p->pending_bytes -= block.size; /* reused */
    /* its category by lifetime, as the analysis's pass decided it at its death */
    size_t n = (size_t)p->allocs++;
    birth.category = n < a->nalloc_category && a->alloc_category[n] < MS_CATEGORIES ? a->alloc_category[n] : MS_CAT_OTHER;
  }
  add_step(p, e, site);
  int64_t delta = ms_replay(&p->live, e, e->kind == MS_ALLOC ? (int64_t)site : -1, aux, &birth, &block, NULL, &p->failed);
  ms_live_slot r;
  if (delta > 0 && e->requested > 0 && e->requested < e->size) { /* rounded up: counted until freed */
    if (ms_live_put(&p->rounded, (ms_live_slot){.key = e->address, .site = 0, .aux = 0, .size = e->size - e->requested}) != 0) p->failed = true;
    p->rounding += e->size - e->requested;
  } else if (delta < 0 && ms_live_take(&p->rounded, block.key, &r)) {
    p->rounding -= r.size;
  }
  if (delta) {
    p->band_live[p->band_of_site[block.site]] += delta;
    p->category_live[block.birth.category] += delta;
    p->site_now[block.site] += delta;
    p->allocated += delta;
    if (delta < 0) {
      if (block.aux) p->t->detail[block.aux - 1].free_ns = e->time_ns;
      if (ms_live_put(&p->pending, block) != 0) p->failed = true;
      p->pending_bytes += block.size;
    }
  }
  if (e->kind == MS_FREE_COMPLETED && ms_live_take(&p->pending, e->address, &block)) p->pending_bytes -= block.size;
  else if (e->kind == MS_SEGMENT_ALLOC) seg_add(p, e);
  else if (e->kind == MS_SEGMENT_FREE) seg_remove(p, e->address);
  else if (e->kind == MS_SEGMENT_MAP) seg_map(p, e);
  else if (e->kind == MS_SEGMENT_UNMAP) seg_unmap(p, e);
  if (e->kind == MS_SEGMENT_ALLOC || e->kind == MS_SEGMENT_FREE || e->kind == MS_SEGMENT_MAP || e->kind == MS_SEGMENT_UNMAP)
    span_event(p, e);
  if (e->device >= 0 && e->device < MS_MAX_DEVICES && !ms_event_is_annotation(e->kind))
    p->t->devices |= 1ULL << e->device; /* annotations name a device in PyTorch's snapshots, but hold no memory */
  band_bucket(p, e->time_ns);
  if (p->next < p->ntargets && p->targets[p->next].event_id == e->id) {
    take_checkpoint(p, &p->targets[p->next], e->time_ns);
    p->next++;
  }
  return p->failed;
}

/* Chooses the sites shown as bands (leak candidates first, then what was live at the peak, then
 * the top allocators); returns the band of every site, or NULL when out of memory. */
static int8_t *choose_bands(ms_analysis *a, ms_bands *b) {
  int8_t *band_of = malloc(a->nsites ? a->nsites : 1);
  if (!band_of) return NULL;
  memset(band_of, -1, a->nsites);
  uint32_t order[3 * MS_BANDS];
  size_t norder = 0;
  for (size_t i = 0; i < a->nleaks && i < MS_BANDS / 2; i++) order[norder++] = a->leaks[i];
  for (size_t i = 0; i < a->nat_peak && i < MS_BANDS; i++) order[norder++] = a->at_peak[i].site;
  for (size_t i = 0; i < a->ntop && i < MS_BANDS; i++) order[norder++] = a->top[i];
  for (size_t i = 0; i < norder && b->nsites < MS_BANDS; i++)
    if (band_of[order[i]] < 0) {
      band_of[order[i]] = (int8_t)b->nsites;
      b->site[b->nsites++] = order[i];
    }
  for (size_t i = 0; i < a->nsites; i++)
    if (band_of[i] < 0) band_of[i] = (int8_t)b->nsites;
  return band_of;
}

/* The smallest size such that at most MS_DETAIL_MAX allocations are that large or larger. */
static int64_t detail_threshold(const ms_analysis *a) {
  int64_t n = 0;
  for (int bin = MS_SIZE_BINS - 1; bin >= 0; bin--) {
    n += a->size_hist[bin];
    if (n > MS_DETAIL_MAX) return ms_size_bin_floor(bin + 1);
  }
  return 0;
}

int ms_analyze_timeline(ms_analysis *a) {
  if (a->timeline) return 0;
  ms_snapshot *s = a->snap;
  ms_timeline *t = calloc(1, sizeof *t);
  timeline_pass p = {0};
  p.a = a;
  p.t = t;
  p.width = ms_bucket_width(s);
  p.unknown = -1;
  if (t && a->site_of_stack) {
    for (int bin = 0; bin < MS_SIZE_BINS; bin++) t->allocations += a->size_hist[bin];
    t->detail_min_size = detail_threshold(a);
    t->steps_kept = s->nevents <= 2 * MS_STEPS_MAX; /* more: surely too many (no need to count) */
    p.band_of_site = choose_bands(a, &t->bands);
    p.site_live = calloc(a->nsites ? a->nsites : 1, sizeof *p.site_live);
    p.site_now = calloc(a->nsites ? a->nsites : 1, sizeof *p.site_now);
    if (a->niters && a->niters <= MS_LEAK_SERIES_ITERATIONS) {
      t->leak_series = a->nleaks < MS_LEAK_SERIES ? a->nleaks : MS_LEAK_SERIES;
      t->leak_iterations = a->niters;
      t->leak_live = calloc(t->leak_series * t->leak_iterations + 1, sizeof *t->leak_live);
      if (!t->leak_live) t->leak_series = 0;
    }
  }
  bool ok = t && p.band_of_site && p.site_live && p.site_now && choose_targets(&p) && seed_prehistory(&p);
  if (ok) {
    int rc = ms_events_each(s, timeline_event, &p);
    ok = !p.failed && rc >= 0;
  }
  if (ok) { /* what is left: by-time targets past the last event, and the end */
    for (; p.next < p.ntargets && !p.failed; p.next++) take_checkpoint(&p, &p.targets[p.next], p.targets[p.next].time_ns);
    while (t->leak_series && p.next_iteration < a->niters) record_leak_series(&p, p.next_iteration++);
    target end = {s->last_ns, 0, MS_CP_END, 0};
    if (!p.failed) take_checkpoint(&p, &end, s->last_ns);
    ok = !p.failed;
  }
  ms_live_free(&p.live);
  ms_live_free(&p.pending);
  ms_live_free(&p.rounded);
  free(p.band_of_site);
  free(p.site_live);
  free(p.site_now);
  free(p.segs);
  free(p.open);
  free(p.targets);
  free(p.scratch);
  if (!ok) {
    if (!s->error[0]) snprintf(s->error, sizeof s->error, "out of memory building the page's timeline");
    ms_timeline_free(t);
    return -1;
  }
  a->timeline = t;
  return 0;
}

void ms_timeline_free(ms_timeline *t) {
  if (!t) return;
  free(t->detail);
  free(t->steps);
  free(t->spans);
  free(t->leak_live);
  free(t->checkpoints);
  free(t->segments);
  free(t->runs);
  free(t->site_bytes);
  free(t);
}
