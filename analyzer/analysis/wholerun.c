/* wholerun.c: the whole run, from the snapshot's run log (the run_log table: every iteration since
 * recording started and every second, bounded by the recorder's pairwise merging), beside the
 * window the ring kept: how many iterations the run finished, which of them the window holds, its
 * peaks, and how allocated memory at iteration ends grew over the whole run (the leading leak
 * candidate's growth traced back to the iteration it started from). A snapshot without a run log
 * (older files, imported pickles) has none: everything reads as the window alone.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

/* The last iteration an entry covers. */
static int64_t last_of(const ms_run_entry *e) { return e->first + e->count - 1; }

/* The iteration from which allocated memory at the ends of completed entries grew the way the
 * leading candidate grows in the window (`rate` bytes per iteration), walking back from the last
 * entry: an entry stays on the growth while its end is no more than two iterations' growth above
 * the next entry's (no fall the growth did not make up) and, once 8 iterations or more lie between
 * it and the last, the average growth from it to the last is between half and twice `rate`. The
 * window's rate is measured over its iterations alone (a few of them, their blocks rounded): the
 * whole run's is *run_rate, (last end - its end) / iterations between them. -1 when fewer than
 * two entries. */
static int64_t growth_start(const ms_run_entry *e, size_t n, double rate, double *run_rate) {
  *run_rate = 0;
  if (n < 2 || rate <= 0) return -1;
  const ms_run_entry *last = &e[n - 1];
  int64_t from = last->first;
  for (size_t i = n - 1; i-- > 0;) {
    if ((double)e[i].end_allocated > (double)e[i + 1].end_allocated + 2 * rate * (double)e[i + 1].count) break;
    double span = (double)(last_of(last) - last_of(&e[i]));
    double avg = span > 0 ? (double)(last->end_allocated - e[i].end_allocated) / span : 0;
    if (span >= 8 && (avg < rate / 2 || avg > rate * 2)) break;
    from = e[i].first;
    if (span > 0) *run_rate = avg;
  }
  return from;
}

void ms_whole_run_read(ms_analysis *a) {
  ms_whole_run *r = &a->run;
  memset(r, 0, sizeof *r);
  r->window_first = r->leak_from = r->peak_iteration = -1;
  ms_run_entry *e = NULL;
  long n = ms_run_log_read(a->snap, MS_RUN_ITERATIONS, &e); /* unreadable: none */
  if (n > 0) {
    r->iters = e;
    r->niters = (size_t)n;
  }
  n = ms_run_log_read(a->snap, MS_RUN_SECONDS, &e);
  if (n > 0) {
    r->secs = e;
    r->nsecs = (size_t)n;
  }
  /* the iterations finished (the one in progress is not), their peaks, the coarsest entry */
  size_t done = r->niters && r->iters[r->niters - 1].in_progress ? r->niters - 1 : r->niters;
  for (size_t i = 0; i < done; i++) {
    const ms_run_entry *x = &r->iters[i];
    r->iterations = x->first + x->count;
    r->skipped += x->skipped;
    if (x->count > r->width) r->width = x->count;
    if (x->peak_allocated > r->peak_allocated) r->peak_allocated = x->peak_allocated, r->peak_iteration = x->first;
    if (x->peak_reserved > r->peak_reserved) r->peak_reserved = x->peak_reserved;
  }
  r->completed = done;
  for (size_t i = 0; i < r->nsecs; i++) {
    if (r->secs[i].peak_allocated > r->peak_allocated_time) r->peak_allocated_time = r->secs[i].peak_allocated;
    if (r->secs[i].peak_reserved > r->peak_reserved_time) r->peak_reserved_time = r->secs[i].peak_reserved;
    if (r->secs[i].count > r->seconds_width) r->seconds_width = r->secs[i].count;
  }
  if (r->nsecs) r->seconds = r->secs[r->nsecs - 1].first + r->secs[r->nsecs - 1].count;
  /* the window's iterations, when they are the same optimizer steps: its last ones */
  if (strcmp(a->iteration_source, "steps") == 0 && a->niters && (int64_t)a->niters <= r->iterations)
    r->window_first = r->iterations - (int64_t)a->niters;
  if (done >= 2) {
    const ms_run_entry *first = &r->iters[0], *last = &r->iters[done - 1];
    int64_t span = last_of(last) - last_of(first);
    if (span > 0) r->growth_per_iteration = (double)(last->end_allocated - first->end_allocated) / (double)span;
    /* the leading leak candidate's growth, traced back over the whole run */
    if (a->nleaks && ms_leak_grows(&a->sites[a->leaks[0]]))
      r->leak_from = growth_start(r->iters, done, a->sites[a->leaks[0]].bytes_per_iteration, &r->leak_rate);
  }
}

void ms_whole_run_free(ms_whole_run *r) {
  free(r->iters);
  free(r->secs);
  memset(r, 0, sizeof *r);
}
