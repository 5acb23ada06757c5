/* causes.c: why a site's memory stays alive, beside how much: the holders the Python package found
 * at the snapshot (the holders table: read/holders.c), and the garbage collector's runs (gc
 * events) with the blocks freed during each, so that a site whose memory only the collector frees
 * reads as held by reference cycles (docs/guide.md, "What holds a leak").
 *
 * The analysis's pass calls ms_causes_gc for each gc event and ms_causes_free for each free that
 * released a live block, in order; ms_causes_load reads the holders after it. A free is the run's
 * when it comes on the run's thread between its begin and its end (the collector frees what it
 * collects there, as the objects it deletes drop their tensors). Runs that freed device memory are
 * kept (MS_GC_RUNS_MAX of them, the earliest), the others counted. On out of host memory what
 * could not be kept is left out: the causes are evidence beside the analysis, never its failure.
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static ms_causes *causes(ms_analysis *a) {
  if (!a->causes && (a->causes = calloc(1, sizeof *a->causes))) a->causes->open = -1;
  return a->causes;
}

/* The site's gc counters, grown to hold index `site`; NULL on out of memory. */
static ms_site_gc *site_gc(ms_causes *c, uint32_t site) {
  if (site >= c->nsites) {
    size_t n = c->nsites ? c->nsites : 64;
    while (n <= site) n *= 2;
    ms_site_gc *grown = realloc(c->sites, sizeof *grown * n);
    if (!grown) return NULL;
    memset(grown + c->nsites, 0, sizeof *grown * (n - c->nsites));
    c->sites = grown;
    c->nsites = n;
  }
  return &c->sites[site];
}

void ms_causes_gc(ms_analysis *a, const ms_event *e) {
  ms_causes *c = causes(a);
  if (!c) return;
  if (e->size == 0) { /* begins */
    c->runs_total++;
    c->open = e->thread;
    memset(&c->cur, 0, sizeof c->cur);
    c->cur.start_ns = c->cur.end_ns = e->time_ns;
    c->cur.generation = (int)e->extra;
    c->cur.thread = e->thread;
    return;
  }
  if (c->open < 0 || e->thread != c->open) return; /* an end without its begin (before the kept history) */
  c->open = -1;
  c->cur.end_ns = e->time_ns;
  c->cur.collected = e->requested;
  if (e->extra >= 0 && e->extra <= 2) c->cur.generation = (int)e->extra;
  if (c->cur.freed_blocks == 0) return;
  c->runs_freeing++;
  c->freed_bytes += c->cur.freed_bytes;
  if (c->nruns < MS_GC_RUNS_MAX && ms_grow(&c->runs, &c->runs_cap, c->nruns + 1, sizeof *c->runs))
    c->runs[c->nruns++] = c->cur;
}

void ms_causes_free(ms_analysis *a, uint32_t site, int64_t bytes, const ms_event *e) {
  ms_causes *c = causes(a);
  if (!c) return;
  bool in_run = c->open >= 0 && e->thread == c->open;
  ms_site_gc *g = site_gc(c, site);
  if (!g) return;
  g->frees++;
  if (!in_run) return;
  g->gc_frees++;
  g->gc_bytes += bytes;
  if (g->last_run != c->runs_total) {
    g->last_run = c->runs_total;
    if (!g->runs++) g->first_run_ns = c->cur.start_ns;
    g->last_run_ns = c->cur.start_ns;
  }
  c->cur.freed_bytes += bytes;
  c->cur.freed_blocks++;
}

static int add_holder(const ms_holder_row *r, void *arg) {
  ms_causes *c = arg;
  if (!ms_grow(&c->holders, &c->holders_cap, c->nholders + 1, sizeof *c->holders)) return 1;
  c->holders[c->nholders++] = *r;
  return 0;
}

void ms_causes_load(ms_analysis *a) {
  ms_causes *c = causes(a);
  if (!c) return;
  ms_holders_walk(a->snap, &c->walk); /* unreadable: no walk */
  ms_holders_each(a->snap, add_holder, c); /* sorted by stack id; what could not be kept is left out */
}

size_t ms_site_holders(const ms_analysis *a, uint32_t site, const ms_holder_row **first) {
  const ms_causes *c = a->causes;
  *first = NULL;
  if (!c || !c->nholders || site >= a->nsites) return 0;
  int64_t stack = a->sites[site].stack_id;
  size_t lo = 0, hi = c->nholders; /* the first row of the stack */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->holders[mid].stack_id < stack) lo = mid + 1;
    else hi = mid;
  }
  size_t n = 0;
  while (lo + n < c->nholders && c->holders[lo + n].stack_id == stack) n++;
  if (n) *first = &c->holders[lo];
  return n;
}

const ms_site_gc *ms_site_gc_counts(const ms_analysis *a, uint32_t site) {
  const ms_causes *c = a->causes;
  return c && site < c->nsites ? &c->sites[site] : NULL;
}

bool ms_site_cycles(const ms_analysis *a, uint32_t site) {
  const ms_site_gc *g = ms_site_gc_counts(a, site);
  /* every free of it the collector's (90% of them at least: a stray free by the program's own del) */
  if (g && g->gc_frees > 0 && g->gc_frees * 10 >= g->frees * 9) return true;
  const ms_holder_row *h;
  size_t n = ms_site_holders(a, site, &h);
  for (size_t i = 0; i < n; i++)
    if (strcmp(h[i].root, "cycle") == 0) return true;
  return false;
}

void ms_causes_free_all(ms_analysis *a) {
  ms_causes *c = a->causes;
  if (!c) return;
  free(c->runs);
  free(c->sites);
  free(c->holders);
  free(c);
  a->causes = NULL;
}
