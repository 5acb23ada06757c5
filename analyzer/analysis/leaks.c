/* leaks.c: the allocation sites ranked as leak candidates, from the evidence the analysis's pass
 * gathered at iteration boundaries (analyze.c), and the sites ranked by bytes allocated.
 *
 * Leak kinds: `growing` (live bytes rose at most iteration boundaries and end above where they
 * started), `growing, released` (the same up to the boundary where they were highest, the third
 * or later and halfway through at least, then freed before the snapshot: what made the peak
 * climb), `retained` (what it holds at the end was
 * allocated before or in the first two iterations, and held since: weights, optimizer state,
 * gradients, caches), `alive` (alive at the snapshot, neither: e.g. the last batch of a site that
 * allocates every iteration). Growing sites rank first whatever their size (that is the evidence
 * a leak leaves), then growth that was released, then the rest.
 *
 * Growth in steps (`growing` with `every` set): a leak made every k iterations (an evaluation that
 * keeps its graph, a checkpoint or a log every 100 steps) rises at a few boundaries only, and
 * never falls. It counts when its large rises (ms_leak_step: a quarter of the largest at least;
 * smaller ones are jitter) are three or more, what fell at any boundary is a quarter of what rose
 * at most, it ends at least half its steps' bytes above where it started (MS_STEP_GROWTH_MIN at
 * least), and its last step is no older than two of its longest gaps (a cache that grew three times
 * at the start and stopped is no leak). A sawtooth, memory the collector or the program frees
 * every few iterations, falls as much as it rises: none. It ranks after steady growth (score 0.75).
 */
#include <stdlib.h>

#include "analysis.h"

const char *ms_leak_kind_name(ms_leak_kind kind) {
  static const char *const names[] = {"growing", "growing_released", "retained", "alive"};
  return kind >= 0 && kind < 4 ? names[kind] : "alive";
}

static const ms_analysis *sort_ctx;

/* The candidates that grew first (the reports list them apart from what is held), each part by
 * score, then by bytes. */
static int compare_leaks(const void *x, const void *y) {
  const ms_site *a = &sort_ctx->sites[*(const uint32_t *)x], *b = &sort_ctx->sites[*(const uint32_t *)y];
  if (ms_leak_grows(a) != ms_leak_grows(b)) return ms_leak_grows(a) ? -1 : 1;
  if (a->score != b->score) return a->score < b->score ? 1 : -1;
  if (a->end_bytes != b->end_bytes) return a->end_bytes < b->end_bytes ? 1 : -1;
  return (a->stack_id > b->stack_id) - (a->stack_id < b->stack_id);
}

static int compare_top(const void *x, const void *y) {
  const ms_site *a = &sort_ctx->sites[*(const uint32_t *)x], *b = &sort_ctx->sites[*(const uint32_t *)y];
  if (a->alloc_bytes != b->alloc_bytes) return a->alloc_bytes < b->alloc_bytes ? 1 : -1;
  return (a->stack_id > b->stack_id) - (a->stack_id < b->stack_id);
}

/* Growth over `transitions` iteration boundaries: live bytes rose at 60% of them at least and
 * fell at 20% at most. */
static bool grew(int transitions, int increases, int decreases) {
  return transitions >= 2 && increases * 10 >= transitions * 6 && decreases * 5 <= transitions;
}

void ms_leak_step(ms_site *s, int boundary, int64_t change) {
  if (change < 0) s->fall_bytes -= change;
  if (change <= 0) return;
  s->rise_bytes += change;
  if (change < s->max_rise / 4) return; /* jitter beside the steps */
  if (change / 4 > s->max_rise) s->steps = 0, s->step_bytes = 0; /* the earlier ones were jitter */
  if (change > s->max_rise) s->max_rise = change;
  if (s->steps == 0) {
    s->first_step = boundary;
    s->min_step_gap = s->max_step_gap = 0;
  } else {
    int gap = boundary - s->last_step;
    if (s->steps == 1 || gap < s->min_step_gap) s->min_step_gap = gap;
    if (gap > s->max_step_gap) s->max_step_gap = gap;
  }
  s->steps++;
  s->step_bytes += change;
  s->last_step = boundary;
}

/* Growth in steps every few iterations, as the file's opening says. */
static bool grew_in_steps(const ms_site *s, int transitions) {
  int64_t net = s->last_iter_live - s->first_iter_live;
  return s->steps >= 3 && s->fall_bytes * 4 <= s->rise_bytes && net * 2 >= s->step_bytes && net >= MS_STEP_GROWTH_MIN &&
         transitions - s->last_step <= 2 * s->max_step_gap;
}

void ms_leaks_classify(ms_analysis *a) {
  int transitions = a->niters > 1 ? (int)a->niters - 1 : 0;
  a->leaks = malloc(sizeof *a->leaks * (a->nsites ? a->nsites : 1));
  a->top = malloc(sizeof *a->top * (a->nsites ? a->nsites : 1));
  if (!a->leaks || !a->top) return;
  for (size_t i = 0; i < a->nsites; i++) {
    ms_site *s = &a->sites[i];
    a->top[a->ntop++] = (uint32_t)i;
    bool growing = grew(transitions, s->increases, s->decreases) && s->observed > 0 && s->last_iter_live > s->first_iter_live;
    /* the same evidence up to the boundary where it peaked, then freed (before the snapshot); the
       growth over three boundaries at least and half of them (two boundaries' worth of a compiled
       graph's buffers caught in flight is no climb of the peak) */
    bool released = !growing && s->peak_boundary >= 3 && s->peak_boundary * 2 >= transitions &&
                    grew(s->peak_boundary, s->increases_at_peak, s->decreases_at_peak) &&
                    s->peak_iter_live > s->first_iter_live && s->released_ns >= 0;
    bool every = !growing && s->observed > 0 && grew_in_steps(s, transitions);
    if (every) {
      s->kind = MS_LEAK_GROWING;
      s->every = true;
      s->step_every = (double)(s->last_step - s->first_step) / (s->steps - 1);
      s->bytes_per_iteration = (double)(s->last_iter_live - s->first_iter_live) / transitions;
      s->score = 0.75;
    } else if (growing) {
      s->kind = MS_LEAK_GROWING;
      s->bytes_per_iteration = (double)(s->last_iter_live - s->first_iter_live) / transitions;
      s->score = 0.6 + 0.4 * (double)s->increases / transitions;
    } else if (released) {
      s->kind = MS_LEAK_GROWING_RELEASED;
      s->bytes_per_iteration = (double)(s->peak_iter_live - s->first_iter_live) / s->peak_boundary;
      s->score = 0.4 + 0.19 * (double)s->increases_at_peak / transitions;
    } else if (s->end_bytes > 0 && a->niters > 0 && s->newest_live_iteration <= 1 && s->increases <= 1) {
      /* what it holds was allocated before or in the first iterations, and held since (it may
         allocate again later, as a backward op's temporaries beside the gradients it made) */
      s->kind = MS_LEAK_RETAINED;
      s->score = 0.3;
    } else if (s->end_bytes > 0) {
      s->kind = MS_LEAK_ALIVE;
      s->score = 0.1;
    } else {
      continue;
    }
    a->leaks[a->nleaks++] = (uint32_t)i;
  }
  sort_ctx = a;
  qsort(a->leaks, a->nleaks, sizeof *a->leaks, compare_leaks);
  qsort(a->top, a->ntop, sizeof *a->top, compare_top);
}

ms_growth ms_analysis_growth(const ms_analysis *a) {
  if (a->nleaks && a->sites[a->leaks[0]].kind == MS_LEAK_GROWING) return MS_GROWTH_GROWING;
  for (size_t i = 0; i < a->ngraphs; i++) /* graphs kept one after another: memory grew with each */
    if (a->graphs[i].graphs >= 2) return MS_GROWTH_GROWING;
  if (a->nleaks && a->sites[a->leaks[0]].kind == MS_LEAK_GROWING_RELEASED) return MS_GROWTH_RELEASED;
  return a->niters >= 2 ? MS_GROWTH_NONE : MS_GROWTH_UNKNOWN;
}

const char *ms_growth_name(ms_growth g) {
  static const char *const names[] = {"unknown", "none", "released", "growing"};
  return g >= 0 && g <= MS_GROWTH_GROWING ? names[g] : "unknown";
}

int64_t ms_held_at_snapshot(const ms_analysis *a, size_t *sites, ptrdiff_t *largest) {
  int64_t bytes = 0, most = 0;
  *sites = 0;
  *largest = -1;
  for (size_t i = 0; i < a->nleaks; i++) {
    const ms_site *s = &a->sites[a->leaks[i]];
    if (s->kind != MS_LEAK_RETAINED && s->kind != MS_LEAK_ALIVE) continue;
    bytes += s->end_bytes;
    ++*sites;
    if (s->end_bytes > most) most = s->end_bytes, *largest = (ptrdiff_t)a->leaks[i];
  }
  return bytes;
}
