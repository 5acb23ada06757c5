/* causes.c: why a site's memory stays alive, beside how much: the holders the Python package found
 * at the snapshot (the holders table: read/holders.c), and the garbage collector's runs (gc
 * events) with the blocks freed during each, so that a site whose memory only the collector frees
 * reads as held by reference cycles (docs/guide.md, "What holds a leak").
 *
 * The analysis's pass calls ms_causes_gc for each gc event and ms_causes_free for each free that
 * released a live block, in order; ms_causes_load reads the holders after it, and the reference
 * cycles the runs found (the gc_cycles table, MEMSNAP_GC_CYCLES), each linked to the site whose
 * block its largest tensor was in, by the blocks freed during runs (MS_GC_FREED_MAX kept). A free is the run's
 * when it comes on the run's thread between its begin and its end (the collector frees what it
 * collects there, as the objects it deletes drop their tensors; runs on different threads may
 * overlap: MEMSNAP_GC_CYCLES finishes a run on a thread of its own). Runs that freed device memory are
 * kept (MS_GC_RUNS_MAX of them, the earliest), the others counted. On out of host memory what
 * could not be kept is left out: the causes are evidence beside the analysis, never its failure.
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static ms_causes *causes(ms_analysis *a) {
  if (!a->causes) a->causes = calloc(1, sizeof *a->causes);
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

/* The slot of the run open on `thread`, -1 none. */
static int open_run(const ms_causes *c, int64_t thread) {
  for (int i = 0; i < c->nopen; i++)
    if (c->cur[i].thread == thread) return i;
  return -1;
}

void ms_causes_gc(ms_analysis *a, const ms_event *e) {
  ms_causes *c = causes(a);
  if (!c) return;
  int i = open_run(c, e->thread);
  if (e->size == 0) { /* begins: a begin without its end on that thread is forgotten */
    if (i < 0) i = c->nopen < MS_GC_OPEN_MAX ? c->nopen++ : 0;
    c->runs_total++;
    memset(&c->cur[i], 0, sizeof c->cur[i]);
    c->cur[i].start_ns = c->cur[i].end_ns = e->time_ns;
    c->cur[i].generation = (int)e->extra;
    c->cur[i].thread = e->thread;
    c->cur_number[i] = c->runs_total;
    return;
  }
  if (i < 0) return; /* an end without its begin (before the kept history) */
  ms_gc_run run = c->cur[i];
  c->nopen--;
  c->cur[i] = c->cur[c->nopen];
  c->cur_number[i] = c->cur_number[c->nopen];
  run.end_ns = e->time_ns;
  run.collected = e->requested;
  if (e->extra >= 0 && e->extra <= 2) run.generation = (int)e->extra;
  if (run.freed_blocks == 0) return;
  c->runs_freeing++;
  c->freed_bytes += run.freed_bytes;
  if (c->nruns < MS_GC_RUNS_MAX && ms_grow(&c->runs, &c->runs_cap, c->nruns + 1, sizeof *c->runs))
    c->runs[c->nruns++] = run;
}

void ms_causes_free(ms_analysis *a, uint32_t site, int64_t bytes, const ms_event *e) {
  ms_causes *c = causes(a);
  if (!c) return;
  int i = open_run(c, e->thread);
  ms_site_gc *g = site_gc(c, site);
  if (!g) return;
  g->frees++;
  if (i < 0) return;
  ms_gc_run *run = &c->cur[i];
  g->gc_frees++;
  g->gc_bytes += bytes;
  if (g->last_run != c->cur_number[i]) {
    g->last_run = c->cur_number[i];
    if (!g->runs++) g->first_run_ns = run->start_ns;
    g->last_run_ns = run->start_ns;
  }
  run->freed_bytes += bytes;
  run->freed_blocks++;
  if (c->nfreed < MS_GC_FREED_MAX && ms_grow(&c->freed, &c->freed_cap, c->nfreed + 1, sizeof *c->freed))
    c->freed[c->nfreed++] = (ms_gc_freed){e->address, site, c->cur_number[i]};
}

static int add_holder(const ms_holder_row *r, void *arg) {
  ms_causes *c = arg;
  if (!ms_grow(&c->holders, &c->holders_cap, c->nholders + 1, sizeof *c->holders)) return 1;
  c->holders[c->nholders++] = *r;
  return 0;
}

static int compare_freed(const void *x, const void *y) {
  const ms_gc_freed *a = x, *b = y;
  if (a->address != b->address) return a->address < b->address ? -1 : 1;
  return (a->run > b->run) - (a->run < b->run);
}

typedef struct cycle_link {
  ms_causes *c;
  int64_t last_run; /* the run the previous row was linked to: rows come in time order */
} cycle_link;

/* A gc_cycles row linked to the block its largest tensor was in: the first free of that address
 * during a run not before the previous row's (an address is reused once freed). */
static int add_cycle(const ms_gc_cycle_row *r, void *arg) {
  cycle_link *l = arg;
  ms_causes *c = l->c;
  size_t lo = 0, hi = c->nfreed;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const ms_gc_freed *f = &c->freed[mid];
    if (f->address < r->address || (f->address == r->address && f->run < l->last_run)) lo = mid + 1;
    else hi = mid;
  }
  if (lo == c->nfreed || c->freed[lo].address != r->address) {
    c->cycles_unlinked++;
    return 0;
  }
  if (!ms_grow(&c->cycles, &c->cycles_cap, c->ncycles + 1, sizeof *c->cycles)) return 1;
  l->last_run = c->freed[lo].run;
  c->cycles[c->ncycles++] = (ms_gc_cycle){*r, c->freed[lo].site, c->freed[lo].run};
  return 0;
}

static int compare_cycle(const void *x, const void *y) {
  const ms_gc_cycle *a = x, *b = y;
  if (a->site != b->site) return a->site < b->site ? -1 : 1;
  return (a->run > b->run) - (a->run < b->run);
}

void ms_causes_load(ms_analysis *a) {
  ms_causes *c = causes(a);
  if (!c) return;
  ms_holders_walk(a->snap, &c->walk); /* unreadable: no walk */
  ms_holders_each(a->snap, add_holder, c); /* sorted by stack id; what could not be kept is left out */
  if (c->nfreed) { /* the reference cycles (MEMSNAP_GC_CYCLES), by the blocks the runs freed */
    qsort(c->freed, c->nfreed, sizeof *c->freed, compare_freed);
    cycle_link l = {c, 0};
    ms_gc_cycles_each(a->snap, add_cycle, &l);
    if (c->ncycles) qsort(c->cycles, c->ncycles, sizeof *c->cycles, compare_cycle); /* stable enough: runs ordered */
  }
}

size_t ms_site_gc_cycles(const ms_analysis *a, uint32_t site, const ms_gc_cycle **first) {
  const ms_causes *c = a->causes;
  *first = NULL;
  if (!c || !c->ncycles) return 0;
  size_t lo = 0, hi = c->ncycles;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->cycles[mid].site < site) lo = mid + 1;
    else hi = mid;
  }
  size_t n = 0;
  while (lo + n < c->ncycles && c->cycles[lo + n].site == site) n++;
  if (n) *first = &c->cycles[lo];
  return n;
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
  free(c->freed);
  free(c->cycles);
  free(c);
  a->causes = NULL;
}
