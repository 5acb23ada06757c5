/* analyze.c: what a snapshot says about memory: peaks, iterations, leak candidates, OOMs
 * (ms_analyze, the analysis's entry point).
 *
 * One streaming pass over the events (memory follows the live blocks and the number of
 * allocation sites, never the length of the history) replays allocations and frees: allocated
 * and reserved totals and their peaks, the peak of every iteration, per site (= allocation
 * stack) its live bytes at every iteration boundary (the evidence for leaks), what was live at
 * each OOM, and what was live at the allocated peak (each site's value saved at its first change
 * after a new peak: before_change). Then the blocks table (the state at the snapshot) gives what
 * is alive at the end. Where iterations start comes from iterations.c before the pass; the sites
 * are ranked as leak candidates by leaks.c after it; the allocator's own releases (retries,
 * empty_cache...) are retries.c's, which the pass hands the events it wants.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

/* Keeps a group of external segments (the largest MS_EXTERNAL_MAX) and counts its bytes. */
static int add_external(const ms_external *e, void *arg) {
  ms_analysis *a = arg;
  a->external_bytes += e->bytes;
  if (a->nexternal < MS_EXTERNAL_MAX) a->external[a->nexternal++] = *e;
  return 0;
}

/* ---- pass 1 ------------------------------------------------------------------------------ */

typedef struct pass {
  ms_analysis *a;
  ms_live_map live;
  int64_t *site_of_stack; /* stack id -> site index + 1 (0: none yet) */
  size_t sites_cap;
  ms_boundary *bounds;
  size_t nbounds, next_bound;
  int cur_iter; /* -1 before the first boundary */
  int64_t allocated, reserved;
  int64_t allocs;  /* allocations seen: the clock of inferred iterations */
  /* Each site's live bytes and count at the latest allocated peak, kept as the pass goes (no
     second pass): a site's value is saved at its first change after a new peak (peak_version
     counts the peaks; saved_at is the version of a site's saved value). */
  int64_t *peak_bytes, *peak_count;
  uint64_t *saved_at, peak_version;
  ms_lifetimes life; /* categories by lifetime (categories.c) */
  uint64_t external_at; /* the address of an external segment just made: its block is external */
  ms_release_pass *releases; /* the allocator's own releases (retries.c): apart, the pass stays small */
  ms_module_pass modules;    /* memory by module (modules.c) */
  ms_graph_pass graphs;      /* the blocks forwards made alive at the end (kept_graphs.c) */
  bool failed;
} pass;

/* Before a change of site i's live memory: keeps its value at the latest peak if this is its
 * first change since. */
static inline void before_change(pass *p, uint32_t i) {
  if (p->saved_at[i] == p->peak_version) return;
  p->saved_at[i] = p->peak_version;
  p->peak_bytes[i] = p->a->sites[i].live_bytes;
  p->peak_count[i] = p->a->sites[i].live_count;
}

/* Appends a site for stack_id; its index, or -1 when out of memory. */
static int64_t add_site(pass *p, uint32_t stack_id) {
  ms_analysis *a = p->a;
  if (a->nsites == p->sites_cap) {
    size_t cap = p->sites_cap ? p->sites_cap * 2 : 256;
    ms_site *g = realloc(a->sites, sizeof *g * cap);
    if (g) a->sites = g;
    int64_t *b = realloc(p->peak_bytes, sizeof *b * cap), *c = b ? realloc(p->peak_count, sizeof *c * cap) : NULL;
    if (b) p->peak_bytes = b;
    if (c) p->peak_count = c;
    uint64_t *v = c ? realloc(p->saved_at, sizeof *v * cap) : NULL;
    if (v) p->saved_at = v;
    if (!g || !v) return -1;
    p->sites_cap = cap;
  }
  p->saved_at[a->nsites] = 0; /* live 0 until now: its value at any earlier peak */
  p->peak_bytes[a->nsites] = p->peak_count[a->nsites] = 0;
  ms_site *s = &a->sites[a->nsites];
  memset(s, 0, sizeof *s);
  s->stack_id = stack_id;
  s->first_iteration = p->cur_iter;
  s->newest_live_iteration = -1;
  s->released_ns = -1;
  return (int64_t)a->nsites++;
}

static int64_t site_index(pass *p, uint32_t stack_id) {
  if (p->site_of_stack[stack_id]) return p->site_of_stack[stack_id] - 1;
  int64_t i = add_site(p, stack_id);
  if (i >= 0) p->site_of_stack[stack_id] = i + 1;
  return i;
}

const char *ms_site_note(const ms_analysis *a, const ms_site *site) {
  if (site->stack_id != 0) return NULL;
  if (!site->before_history) return "no stack recorded";
  return a->truncated ? "allocated before the kept history (the oldest events were dropped)"
                      : "allocated before recording started";
}

/* Counts an allocated block of the snapshot under its site: its stack's, or for a block without
 * one the site the replay holds it under (the one of memory from before recording for blocks no
 * kept event allocated: see seed_prehistory). Stops (1) when out of memory. */
static int end_block(const ms_block_row *r, void *arg) {
  pass *p = arg;
  if (r->state != MS_BLOCK_ALLOCATED) return 0;
  ms_live_slot taken;
  int64_t site = r->stack_id == 0 && ms_live_take(&p->live, r->address, &taken) ? (int64_t)taken.site
                                                                                 : site_index(p, r->stack_id);
  if (site < 0) {
    p->failed = true;
    return 1;
  }
  p->a->sites[site].end_bytes += r->size;
  p->a->sites[site].end_count++;
  return 0;
}

/* Closes the current iteration: records every site's live bytes at the boundary. */
static void close_iteration(pass *p, int64_t end_ns) {
  ms_analysis *a = p->a;
  if (p->cur_iter >= 0) {
    ms_lifetimes_iteration_close(&p->life);
    a->iters[p->cur_iter].end_ns = end_ns;
    a->iters[p->cur_iter].end_unallocated = p->reserved - p->allocated;
    a->iters[p->cur_iter].end_allocated = p->allocated;
    for (size_t i = 0; i < a->nsites; i++) {
      ms_site *s = &a->sites[i];
      if (p->cur_iter == 0) s->first_iter_live = s->peak_iter_live = s->live_bytes;
      if (p->cur_iter > 0) {
        s->observed++;
        if (s->live_bytes > s->prev_iter_live) s->increases++;
        else if (s->live_bytes < s->prev_iter_live) s->decreases++;
        ms_leak_step(s, p->cur_iter, s->live_bytes - s->prev_iter_live);
        if (s->live_bytes > s->peak_iter_live) {
          s->peak_iter_live = s->live_bytes;
          s->peak_boundary = p->cur_iter;
          s->increases_at_peak = s->increases;
          s->decreases_at_peak = s->decreases;
          s->released_ns = -1;
        }
      }
      /* a release counts when it still holds at the boundary (not a dip inside an iteration) */
      if (s->released_ns >= 0 && s->live_bytes >= s->first_iter_live + (s->peak_iter_live - s->first_iter_live) / 2)
        s->released_ns = -1;
      s->prev_iter_live = s->live_bytes;
      s->last_iter_live = s->live_bytes;
    }
  }
}

static void open_iteration(pass *p, int64_t start_ns, int64_t event_id) {
  ms_analysis *a = p->a;
  p->cur_iter++;
  ms_iteration *it = &a->iters[p->cur_iter];
  it->index = p->cur_iter;
  it->start_ns = start_ns;
  it->start_event_id = event_id;
  it->end_ns = start_ns;
  it->peak_allocated = p->allocated;
  it->peak_reserved = p->reserved;
  it->peak_ns = start_ns;
  it->skipped = p->bounds[p->next_bound].skipped;
  ms_lifetimes_iteration_open(&p->life, p->cur_iter, p->allocs); /* its first instant is its first peak */
}

static int compare_live(const void *x, const void *y) {
  const ms_site_bytes *a = x, *b = y;
  return a->bytes < b->bytes ? 1 : a->bytes > b->bytes ? -1 : (a->site > b->site) - (a->site < b->site);
}

/* The largest live sites now, into out[max]. */
static int top_live(ms_analysis *a, ms_site_bytes *out, int max) {
  int n = 0;
  for (size_t i = 0; i < a->nsites; i++) {
    if (a->sites[i].live_bytes <= 0) continue;
    ms_site_bytes c = {(uint32_t)i, a->sites[i].live_bytes, a->sites[i].live_count};
    if (n < max) out[n++] = c;
    else if (c.bytes > out[n - 1].bytes) out[n - 1] = c;
    else continue;
    qsort(out, (size_t)n, sizeof *out, compare_live);
  }
  return n;
}

void ms_curve_add(ms_curve *c, int64_t start, int64_t v) {
  if (!c) return;
  if (c->n > 0 && c->t[c->n - 1] == start) {
    if (v < c->lo[c->n - 1]) c->lo[c->n - 1] = v;
    if (v > c->hi[c->n - 1]) c->hi[c->n - 1] = v;
  } else if (c->n < MS_BUCKETS) {
    c->t[c->n] = start;
    c->lo[c->n] = c->hi[c->n] = v;
    c->n++;
  }
}

static void curves_add(pass *p, int64_t t) {
  ms_snapshot *s = p->a->snap;
  int64_t start = ms_bucket_start(s, ms_bucket_width(s), t);
  ms_curve_add(p->a->allocated_curve, start, p->allocated);
  ms_curve_add(p->a->reserved_curve, start, p->reserved);
}

/* Puts what was allocated before the history into the replay, each block under its site: its
 * stack's when the snapshot has one, else the one site of memory from before recording (created
 * on the first pass). Returns false when out of memory. */
static bool seed_prehistory(pass *p) {
  ms_analysis *a = p->a;
  int64_t before = -1;
  for (size_t i = 0; i < a->before.nblocks; i++) {
    ms_prior_block *b = &a->before.blocks[i];
    uint32_t stack = b->alive_at_end ? b->stack_id : 0; /* a free's stack is not its allocation's */
    int64_t site = stack ? site_index(p, stack) : before;
    if (site < 0 && !stack && (site = before = add_site(p, 0)) >= 0) a->sites[site].before_history = true;
    if (site < 0) return false;
    b->site = (uint32_t)site;
    a->sites[b->site].live_bytes += b->size;
    a->sites[b->site].live_count++;
  }
  ms_prehistory_seed(&a->before, &p->live, &p->failed);
  for (size_t i = 0; i < a->before.nblocks && !p->failed; i++) { /* roles told before the history */
    const ms_prior_block *b = &a->before.blocks[i];
    if (b->alive_at_end && b->role && ms_modules_told(a, &p->modules, b->module_label, b->role, b->size) != 0) p->failed = true;
  }
  const ms_code_kinds *k = &a->kinds; /* their phase, from their stacks (those still allocated) */
  for (size_t i = 0; i < a->before.nblocks && !p->failed && k->phase; i++) {
    const ms_prior_block *b = &a->before.blocks[i];
    ms_live_slot slot;
    if (!b->alive_at_end || !b->stack_id || b->stack_id >= k->nstacks || !ms_live_take(&p->live, b->address, &slot)) continue;
    slot.birth.phase = k->phase[b->stack_id];
    if (ms_live_put(&p->live, slot) != 0) p->failed = true;
  }
  p->allocated = a->before.allocated;
  p->reserved = a->before.reserved;
  return !p->failed;
}

static int pass1_event(const ms_event *e, void *arg) {
  pass *p = arg;
  ms_analysis *a = p->a;
  /* Iteration boundaries: marks by event id, ranges by start time. */
  while (p->next_bound < p->nbounds &&
         (p->bounds[p->next_bound].alloc >= 0 ? e->kind == MS_ALLOC && p->allocs >= p->bounds[p->next_bound].alloc
          : p->bounds[p->next_bound].id      ? e->id >= p->bounds[p->next_bound].id
                                             : e->time_ns >= p->bounds[p->next_bound].time)) {
    close_iteration(p, e->time_ns);
    open_iteration(p, e->time_ns, e->id);
    p->next_bound++;
  }
  ms_lifetimes_event(&a->stacked_events, &a->kinds, &p->life, e);
  if (e->kind == MS_GC) ms_causes_gc(a, e); /* the garbage collector's runs (causes.c) */
  if ((e->kind == MS_MODULE || e->kind == MS_TENSOR || e->kind == MS_BACKWARD) &&
      ms_modules_event(a, &p->modules, e, &p->live, p->allocated) != 0) {
    p->failed = true;
    return 1;
  }
  ms_live_slot block = {0}, replaced; /* aux: the allocation's iteration + 1 (0: before the first) */
  ms_birth birth;
  if (e->kind == MS_ALLOC) {
    birth = ms_lifetimes_birth(&a->kinds, &p->life, e, p->allocs);
    ms_modules_alloc(a, &p->modules, &birth, e->size, p->allocated + e->size);
  }
  int64_t delta = ms_replay(&p->live, e, e->kind == MS_ALLOC ? site_index(p, e->stack_id) : -1,
                            (uint32_t)(p->cur_iter + 1), e->kind == MS_ALLOC ? &birth : NULL, &block, &replaced, &p->failed);
  uint32_t site = block.site;
  if (p->failed) return 1;
  if (e->kind == MS_ALLOC && replaced.key) { /* a damaged history */
    ms_lifetimes_death(a, &p->life, &replaced, e);
    ms_modules_death(a, &p->modules, &replaced, p->life.peak_mark);
  }
  if (__builtin_expect(ms_releases_pending(p->releases, e), 0) && e->kind != MS_SEGMENT_ALLOC && e->kind != MS_SEGMENT_MAP &&
      e->kind != MS_SEGMENT_FREE && e->kind != MS_SEGMENT_UNMAP && ms_releases_event(a, p->releases, e) != 0) {
    p->failed = true; /* a device with a release open: its other events too (segment events below) */
    return 1;
  }
  switch (e->kind) {
    case MS_ALLOC: {
      ms_site *s = &a->sites[site];
      before_change(p, site);
      if (s->allocs == 0) {
        s->first_ns = e->time_ns;
        s->thread = e->thread;
        s->stream = e->stream;
      }
      if (birth.module) { /* the module its allocations share */
        int32_t m = (int32_t)birth.module - 1;
        s->module = s->allocs == 0 || !s->module ? m + 1 : ms_module_common(a, s->module - 1, m) + 1;
      }
      s->several_threads |= e->thread != s->thread;
      s->several_streams |= e->stream != s->stream;
      s->allocs++;
      s->alloc_bytes += e->size;
      a->size_hist[ms_size_bin(e->size)]++;
      s->live_bytes += e->size;
      s->live_count++;
      s->last_ns = e->time_ns;
      s->last_iteration = p->cur_iter;
      p->allocs++;
      p->allocated += e->size;
      if (p->allocated > a->peak_allocated) {
        a->peak_allocated = p->allocated;
        a->peak_allocated_ns = e->time_ns;
        a->peak_event_id = e->id;
        p->peak_version++;
        ms_lifetimes_peak(&p->life, p->allocs);
      }
      if (p->cur_iter >= 0 && p->allocated > a->iters[p->cur_iter].peak_allocated) {
        a->iters[p->cur_iter].peak_allocated = p->allocated;
        a->iters[p->cur_iter].peak_ns = e->time_ns;
        ms_lifetimes_iteration_peak(&p->life, p->allocs);
      }
      if (e->address == p->external_at) s->external = true;
      p->external_at = 0;
      break;
    }
    case MS_FREE_REQUESTED:
      if (delta) {
        ms_site *s = &a->sites[site];
        before_change(p, site);
        ms_modules_free(a, &p->modules, &block);
        ms_lifetimes_death(a, &p->life, &block, e);
        ms_modules_death(a, &p->modules, &block, p->life.peak_mark);
        s->live_bytes += delta;
        s->live_count--;
        p->allocated += delta;
        ms_causes_free(a, site, -delta, e);
        /* fallen below halfway from the first boundary's level to the highest since: released, if
           it still is at the next boundary (close_iteration) */
        if (s->released_ns < 0 && s->peak_iter_live > s->first_iter_live &&
            s->live_bytes < s->first_iter_live + (s->peak_iter_live - s->first_iter_live) / 2)
          s->released_ns = e->time_ns;
      }
      break;
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_MAP:
      if (ms_releases_event(a, p->releases, e) != 0) {
        p->failed = true;
        return 1;
      }
      if (ms_event_external_segment(e)) p->external_at = e->address; /* its block is next */
      p->reserved += e->size;
      if (p->reserved > a->peak_reserved) {
        a->peak_reserved = p->reserved;
        a->peak_reserved_ns = e->time_ns;
      }
      if (p->cur_iter >= 0 && p->reserved > a->iters[p->cur_iter].peak_reserved) a->iters[p->cur_iter].peak_reserved = p->reserved;
      break;
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_UNMAP:
      if (ms_releases_event(a, p->releases, e) != 0) {
        p->failed = true;
        return 1;
      }
      p->reserved -= e->size;
      break;
    case MS_OOM: {
      ms_oom *g = realloc(a->ooms, sizeof *g * (a->nooms + 1));
      if (!g) {
        p->failed = true;
        return 1;
      }
      a->ooms = g;
      ms_oom *o = &a->ooms[a->nooms++];
      memset(o, 0, sizeof *o);
      o->time_ns = e->time_ns;
      o->requested = e->requested;
      o->device_free = (int64_t)e->address;
      o->cached_unallocated = e->extra;
      o->live_bytes = p->allocated;
      o->device = e->device;
      o->stack_id = e->stack_id;
      o->ntop = top_live(a, o->top, 5);
      break;
    }
    case MS_INVALID_FREE:
      if (ms_misuse_add(a, e, &p->live) != 0) {
        p->failed = true;
        return 1;
      }
      break;
    default:
      break;
  }
  curves_add(p, e->time_ns);
  return 0;
}

static int compare_birth(const void *x, const void *y) {
  int64_t a = ((const ms_live_slot *)x)->birth.ordinal, b = ((const ms_live_slot *)y)->birth.ordinal;
  return (a > b) - (a < b);
}

/* What is alive at the history's end dies there, oldest first (a site's older blocks tell what its
 * newest are: categories.c). False when out of memory. */
static bool end_of_history(pass *p) {
  ms_live_slot *v = malloc(sizeof *v * (p->live.count + 1));
  if (!v) return false;
  size_t n = 0;
  for (size_t i = 0; p->live.slots && i <= p->live.mask; i++)
    if (p->live.slots[i].key) v[n++] = p->live.slots[i];
  qsort(v, n, sizeof *v, compare_birth);
  for (size_t i = 0; i < n; i++) {
    ms_site *st = &p->a->sites[v[i].site];
    if (v[i].birth.module) { /* the module of what it holds */
      int32_t m = (int32_t)v[i].birth.module - 1;
      st->held_module = !st->held_module ? m + 1 : ms_module_common(p->a, st->held_module - 1, m) + 1;
    }
    ms_lifetimes_death(p->a, &p->life, &v[i], NULL);
    ms_modules_death(p->a, &p->modules, &v[i], p->life.peak_mark);
    ms_graphs_block(p->a, &p->graphs, &v[i], p->life.backward_begins);
  }
  free(v);
  return true;
}

int ms_analyze(ms_snapshot *s, ms_analysis *a, const ms_analyze_options *o) {
  const char *label = o ? o->label : NULL;
  memset(a, 0, sizeof *a);
  a->snap = s;
  if (o && o->categories) a->categories = *o->categories;
  snprintf(a->iteration_source, sizeof a->iteration_source, "none");
  a->truncated = s->dropped > 0;
  if (ms_load_stacks(s) != 0 || ms_prehistory_build(s, MS_PREHISTORY_ANALYSIS, &a->before) != 0) return -1;
  if (ms_code_kinds_build(s, &a->categories, &a->kinds) != 0) {
    snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    ms_prehistory_free(&a->before);
    return -1;
  }
  pass p = {0};
  p.a = a;
  p.cur_iter = -1;
  p.site_of_stack = calloc(s->nstacks ? s->nstacks : 1, sizeof *p.site_of_stack);
  p.nbounds = ms_iterations_from_labels(a, label, &p.bounds);
  if (!label && p.nbounds == 0) p.nbounds = ms_iterations_inferred(a, &p.bounds);
  if (label && p.nbounds == 0) {
    snprintf(s->error, sizeof s->error, "no marks or ranges labelled '%s' in '%s'", label, s->shown_path);
    free(p.site_of_stack);
    ms_prehistory_free(&a->before);
    ms_code_kinds_free(&a->kinds);
    return -1;
  }
  a->iters = calloc(p.nbounds ? p.nbounds : 1, sizeof *a->iters);
  a->allocated_curve = calloc(1, sizeof *a->allocated_curve);
  a->reserved_curve = calloc(1, sizeof *a->reserved_curve);
  if (!p.site_of_stack || !a->iters || !a->allocated_curve || !a->reserved_curve) {
    snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    goto fail;
  }
  a->niters = p.nbounds;
  p.releases = calloc(1, sizeof *p.releases);
  if (!p.releases) {
    snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    goto fail;
  }
  if (ms_releases_begin(a, p.releases) != 0 || ms_modules_begin(a, &p.modules) != 0) goto fail;
  if (ms_lifetimes_begin(a, &p.life, a->niters) != 0 || !seed_prehistory(&p)) {
    snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    goto fail;
  }
  /* The state when the history starts is its first instant: drawn and counted in every peak. */
  a->peak_allocated = p.allocated;
  a->peak_reserved = p.reserved;
  a->peak_allocated_ns = a->peak_reserved_ns = s->first_ns;
  p.peak_version++; /* the first instant is a peak: a site's first change saves its value there */
  curves_add(&p, s->first_ns);
  int rc = ms_events_each(s, pass1_event, &p);
  if (rc < 0 || p.failed) {
    if (p.failed) snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    goto fail;
  }
  close_iteration(&p, s->last_ns);
  ms_releases_end(a, p.releases);
  for (size_t i = 0; p.live.slots && i <= p.live.mask; i++) { /* when what is still live was allocated */
    const ms_live_slot *b = &p.live.slots[i];
    if (!b->key) continue;
    int iteration = (int)b->aux - 1;
    if (iteration > a->sites[b->site].newest_live_iteration) a->sites[b->site].newest_live_iteration = iteration;
  }
  if (!end_of_history(&p)) {
    snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    goto fail;
  }
  /* What is alive at the snapshot, by site (blocks the reader cannot read count as none). */
  if (ms_blocks_each(s, end_block, &p) != 0 && p.failed) {
    snprintf(s->error, sizeof s->error, "out of memory analyzing '%s'", s->shown_path);
    goto fail;
  }
  ms_end_state end; /* all 0 when it cannot be read */
  ms_read_end_state(s, &end);
  a->segments = end.segments;
  a->free_blocks_in_split_segments = end.split_free_blocks;
  a->split_free_bytes = end.split_free_bytes;
  a->end_allocated = end.allocated;
  a->end_reserved = end.reserved;
  ms_external_each(s, add_external, a); /* unreadable: the groups read */
  ms_leaks_classify(a);
  ms_whole_run_read(a);
  ms_causes_load(a);
  ms_modules_end(a, &p.modules, p.life.peak_mark);
  ms_graphs_finish(a, &p.graphs);
  ms_lifetimes_end(a, &p.life);
  ms_misuse_finish(a);
  /* What was live at the allocated peak, as the pass kept it (the history's first instant when
     peak_event_id is 0: what predates it). */
  if (a->peak_allocated > 0) {
    for (size_t i = 0; i < a->nsites; i++)
      if (p.saved_at[i] == p.peak_version) { /* changed since the peak: its saved value */
        a->sites[i].live_bytes = p.peak_bytes[i];
        a->sites[i].live_count = p.peak_count[i];
      }
    a->at_peak = malloc(sizeof *a->at_peak * 8);
    if (a->at_peak) a->nat_peak = (size_t)top_live(a, a->at_peak, 8);
  }
  ms_live_free(&p.live);
  a->site_of_stack = p.site_of_stack; /* for ms_analyze_timeline */
  free(p.bounds);
  free(p.peak_bytes);
  free(p.peak_count);
  free(p.saved_at);
  free(p.releases);
  return 0;
fail:
  ms_live_free(&p.live);
  if (p.releases) ms_releases_end(a, p.releases);
  free(p.site_of_stack);
  free(p.bounds);
  free(p.peak_bytes);
  free(p.peak_count);
  free(p.saved_at);
  free(p.releases);
  ms_lifetimes_free(&p.life);
  ms_modules_free_pass(&p.modules);
  ms_graphs_free_pass(&p.graphs);
  ms_analysis_free(a);
  a->snap = s;
  return -1;
}

int ms_open_analyzed(ms_snapshot *s, ms_analysis *a, const char *path, const ms_fold *fold, const ms_analyze_options *o) {
  memset(a, 0, sizeof *a);
  if (ms_open(s, path) != 0) return -1;
  s->fold = fold;
  if (ms_analyze(s, a, o) == 0) return 0;
  ms_close(s); /* keeps s->error */
  return -1;
}

void ms_analysis_free(ms_analysis *a) {
  ms_whole_run_free(&a->run);
  ms_timeline_free(a->timeline);
  ms_prehistory_free(&a->before);
  ms_code_kinds_free(&a->kinds);
  free(a->site_of_stack);
  free(a->allocated_curve);
  free(a->reserved_curve);
  free(a->sites);
  free(a->at_peak);
  free(a->iters);
  free(a->alloc_category);
  free(a->ooms);
  free(a->releases.retries);
  free(a->invalid_frees);
  for (size_t i = 0; i < a->nmodules; i++) free(a->modules[i].name);
  free(a->modules);
  free(a->graphs);
  free(a->leaks);
  free(a->top);
  ms_causes_free_all(a);
  memset(a, 0, sizeof *a);
}
