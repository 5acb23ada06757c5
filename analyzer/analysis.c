/* analysis.c: what a snapshot says about memory: peaks, iterations, leak candidates, OOMs.
 *
 * One streaming pass over the events (memory follows the live blocks and the number of
 * allocation sites, never the length of the history) replays allocations and frees: allocated
 * and reserved totals and their peaks, the peak of every iteration, per site (= allocation
 * stack) its live bytes at every iteration boundary (the evidence for leaks), what was live at
 * each OOM, and what was live at the allocated peak (each site's value saved at its first change
 * after a new peak: before_change). Then the blocks table (the state at the snapshot) gives what is alive at the end.
 *
 * Iterations come from marks, else from ranges: the label that repeats most (outermost ranges
 * first), labels that differ only by numbers ("step 1", "step 2") counting as one; with neither,
 * from the period of the allocation pattern (infer_iterations), and the report says so.
 *
 * Leak kinds: `growing` (live bytes rose at most iteration boundaries and end above where they
 * started), `growing, released` (the same up to the boundary where they were highest, then freed
 * before the snapshot: what made the peak climb), `retained` (what it holds at the end was allocated before or in the first two
 * iterations, and held since: weights, optimizer state, gradients, caches), `alive` (alive at the snapshot, neither: e.g. the last
 * batch of a site that allocates every iteration). Growing sites rank first whatever their size
 * (that is the evidence a leak leaves), then growth that was released, then the rest.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"

/* ---- labels and iterations --------------------------------------------------------------- */

void ms_label_key(const char *label, char *out, size_t len) {
  size_t o = 0;
  for (const char *p = label; *p && o + 1 < len; p++) {
    if (isdigit((unsigned char)*p)) continue;
    out[o++] = *p;
  }
  while (o > 0 && (out[o - 1] == ' ' || out[o - 1] == '#' || out[o - 1] == '-' || out[o - 1] == '_' ||
                   out[o - 1] == ':' || out[o - 1] == '.'))
    o--;
  out[o] = '\0';
  ms_neutralise(out); /* shown in reports: untrusted */
}

/* Keeps a group of external segments (the largest MS_EXTERNAL_MAX) and counts its bytes. */
static int add_external(const ms_external *e, void *arg) {
  ms_analysis *a = arg;
  a->external_bytes += e->bytes;
  if (a->nexternal < MS_EXTERNAL_MAX) a->external[a->nexternal++] = *e;
  return 0;
}

typedef struct boundary {
  int64_t id;    /* mark: its event id; else 0 */
  int64_t time;  /* range: start time */
  int64_t alloc; /* inferred: the ordinal of the allocation that starts it; else -1 */
  int64_t end;   /* range: its end (read by ranges_to_steps) */
} boundary;

/* Allocations in [from, to) (0 when the events cannot be read). */
static int64_t allocations_between(ms_snapshot *s, int64_t from, int64_t to) {
  int64_t n = ms_count_allocations(s, from, to);
  return n < 0 ? 0 : n;
}

/* Ranges that last, but cover only part of each step (Optimizer.step, a data loader's fetch) must still
 * give iterations covering the whole loop: each runs from one range's start to the next one's,
 * or, when the work comes before each range (more allocations before the first range than after
 * the last: forward and backward, then the optimizer step), from one range's end to the next
 * one's, the first from the history's start. Rewrites b's times in that case. */
static void ranges_to_steps(ms_analysis *a, boundary *b, size_t n, int64_t covered, int64_t last_end) {
  ms_snapshot *s = a->snap;
  /* instants (marks exported as annotations) start their steps; ranges that fill the loop are its steps */
  if (covered == 0 || covered * 2 >= last_end - b[0].time) return;
  int64_t before = allocations_between(s, s->first_ns, b[0].time);
  int64_t after = allocations_between(s, last_end + 1, INT64_MAX);
  if (before <= after) return; /* the work follows each range's start: starts are the boundaries */
  for (size_t i = n - 1; i > 0; i--) b[i].time = b[i - 1].end;
  b[0].time = s->first_ns;
  a->iterations_from_range_ends = true;
}

/* A label (its key) and how often it came, at which outermost range depth. */
typedef struct tally {
  char key[256];
  int64_t n;
  int depth;
} tally;

static const char *tally_key(const void *ctx, size_t i) { return ((const tally *)ctx)[i].key; }

/* The label keys of one source (marks or ranges), counted. */
typedef struct tallies {
  tally *t;
  size_t n, cap;
  ms_str_index index;
} tallies;

/* Counts a mark's or range's label key; stops (1) when out of memory, with what was counted. */
static int count_label(const ms_label_row *r, void *arg) {
  tallies *c = arg;
  char key[256];
  ms_label_key(r->label, key, sizeof key);
  int depth = (int)r->depth;
  size_t slot;
  int64_t found = ms_str_find(&c->index, key, c->n, tally_key, c->t, &slot);
  if (found == -2) return 1;
  size_t i = (size_t)found;
  if (found < 0) {
    if (!ms_grow(&c->t, &c->cap, c->n + 1, sizeof *c->t)) return 1;
    i = c->n++;
    snprintf(c->t[i].key, sizeof c->t[i].key, "%s", key);
    c->t[i].n = 0;
    c->t[i].depth = depth;
    c->index.slots[slot] = (uint32_t)i + 1;
  }
  c->t[i].n++;
  if (depth < c->t[i].depth) c->t[i].depth = depth;
  return 0;
}

/* The boundaries of the chosen label: its marks or ranges (ranges at its depth). */
typedef struct bounds {
  const char *key;
  bool ranges;
  int depth;
  boundary *b;
  size_t n, cap;
  int64_t covered, last_end; /* ranges: time inside them, and where the last ends */
} bounds;

/* Adds a mark or range of the chosen label as a boundary; stops (1) when out of memory. */
static int add_boundary(const ms_label_row *r, void *arg) {
  bounds *c = arg;
  char key[256];
  ms_label_key(r->label, key, sizeof key);
  if (strcmp(key, c->key) != 0 || (c->ranges && r->depth != c->depth)) return 0;
  if (!ms_grow(&c->b, &c->cap, c->n + 1, sizeof *c->b)) return 1;
  boundary *b = &c->b[c->n++];
  *b = (boundary){r->event_id, r->start_ns, -1, r->end_ns};
  if (r->end_ns > b->time) c->covered += r->end_ns - b->time;
  if (r->end_ns > c->last_end) c->last_end = r->end_ns;
  return 0;
}

/* Chooses the iteration label and fills the boundaries; returns how many (0: none). */
static size_t choose_iterations(ms_analysis *a, const char *forced, boundary **out) {
  ms_snapshot *s = a->snap;
  int (*const source[2])(ms_snapshot *, int (*)(const ms_label_row *, void *), void *) = {ms_marks_each, ms_ranges_each};
  char best[256] = "";
  int best_source = -1, best_depth = 1 << 30;
  int64_t best_count = 1;
  char forced_key[256] = "";
  if (forced) ms_label_key(forced, forced_key, sizeof forced_key);
  /* Count label keys in each source, pick the most repeated (outermost depth first for ranges). */
  for (int src = 0; src < 2 && best_source < 0; src++) {
    tallies c = {0};
    source[src](s, count_label, &c); /* unreadable: what was counted (none) */
    ms_str_index_free(&c.index);
    for (size_t i = 0; i < c.n; i++) {
      const tally *t = &c.t[i];
      bool better = forced ? strcmp(t->key, forced_key) == 0
                           : t->n >= 2 && (t->depth < best_depth || (t->depth == best_depth && t->n > best_count));
      if (better) {
        snprintf(best, sizeof best, "%s", t->key);
        best_count = t->n;
        best_depth = t->depth;
        best_source = src;
      }
    }
    free(c.t);
  }
  if (best_source < 0) return 0;
  snprintf(a->iteration_label, sizeof a->iteration_label, "%s", best);
  snprintf(a->iteration_source, sizeof a->iteration_source, "%s", best_source == 0 ? "marks" : "ranges");
  bounds c = {.key = best, .ranges = best_source == 1, .depth = best_depth};
  source[best_source](s, add_boundary, &c); /* out of memory or unreadable: the boundaries read */
  if (c.ranges && c.n >= 2) ranges_to_steps(a, c.b, c.n, c.covered, c.last_end);
  *out = c.b;
  return c.n;
}

enum { MAX_TOKENS = 400000 };

/* The allocations as tokens: the first MAX_TOKENS kept, all counted. */
typedef struct tokens {
  uint64_t *tok;
  size_t n;
  int64_t total;
} tokens;

static int add_token(int64_t stack_id, int64_t size, void *arg) {
  tokens *t = arg;
  if (t->n < MAX_TOKENS) t->tok[t->n++] = (uint64_t)stack_id * 0x9E3779B97F4A7C15ull ^ (uint64_t)size;
  t->total++;
  return 0;
}

/* With no repeated mark or range: the period of the allocation pattern. Each allocation is a
 * token (its stack and size); anchored in the middle of the run (past any set-up), the period is
 * the distance to the anchor's next occurrence if at least 90% of a window repeats at that
 * distance and the run holds it three times. Iterations then start every `period` allocations
 * from the earliest position the pattern reaches going back from the anchor. Returns the number
 * of boundaries (0: no period found). */
static size_t infer_iterations(ms_analysis *a, boundary **out) {
  enum { WINDOW = 20000, MAX_PERIOD = 50000 };
  tokens t = {malloc(sizeof *t.tok * MAX_TOKENS), 0, 0};
  if (!t.tok) return 0;
  ms_allocations_each(a->snap, add_token, &t); /* unreadable: the tokens read (none) */
  uint64_t *tok = t.tok;
  size_t n = t.n;
  int64_t total = t.total;
  /* Screen every shift at which the anchor's token recurs on a short window, keep the best
   * matching one (the smallest among equals: not a sub-period that repetition inside an
   * iteration makes look good, nor a multiple), then check it on a long window. */
  size_t period = 0, anchor = n / 2;
  enum { SCREEN = 512 };
  size_t best_same = 0, best_d = 0;
  for (size_t d = 2; n >= 8 && d <= MAX_PERIOD && anchor + d < n && 3 * d <= n; d++) {
    if (tok[anchor + d] != tok[anchor]) continue;
    size_t w = n - anchor - d < SCREEN ? n - anchor - d : SCREEN, same = 0;
    for (size_t i = 0; i < w; i++) same += tok[anchor + i] == tok[anchor + i + d];
    if (w && same * 1000 / w > best_same) {
      best_same = same * 1000 / w;
      best_d = d;
    }
  }
  if (best_d) {
    size_t w = n - anchor - best_d < WINDOW ? n - anchor - best_d : WINDOW, same = 0;
    for (size_t i = 0; i < w; i++) same += tok[anchor + i] == tok[anchor + i + best_d];
    if (w >= best_d && same * 10 >= w * 9) period = best_d;
  }
  size_t n_out = 0;
  if (period) {
    size_t first = anchor;
    while (first >= period && tok[first - period] == tok[first]) first -= period;
    size_t count = (size_t)((total - (int64_t)first + (int64_t)period - 1) / (int64_t)period);
    boundary *b = count ? malloc(sizeof *b * count) : NULL;
    for (size_t k = 0; b && k < count; k++) b[k] = (boundary){0, 0, (int64_t)(first + k * period), 0};
    if (b && count >= 3) {
      *out = b;
      n_out = count;
      snprintf(a->iteration_label, sizeof a->iteration_label, "a period of %zu allocations", period);
      snprintf(a->iteration_source, sizeof a->iteration_source, "inferred");
    } else {
      free(b);
    }
  }
  free(tok);
  return n_out;
}

/* ---- pass 1 ------------------------------------------------------------------------------ */

typedef struct pass {
  ms_analysis *a;
  ms_live_map live;
  int64_t *site_of_stack; /* stack id -> site index + 1 (0: none yet) */
  size_t sites_cap;
  boundary *bounds;
  size_t nbounds, next_bound;
  int cur_iter; /* -1 before the first boundary */
  int64_t allocated, reserved;
  int64_t allocs;  /* allocations seen: the clock of inferred iterations */
  /* Each site's live bytes and count at the latest allocated peak, kept as the pass goes (no
     second pass): a site's value is saved at its first change after a new peak (peak_version
     counts the peaks; saved_at is the version of a site's saved value). */
  int64_t *peak_bytes, *peak_count;
  uint64_t *saved_at, peak_version;
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

const char *ms_leak_kind_name(ms_leak_kind kind) {
  static const char *const names[] = {"growing", "growing_released", "retained", "alive"};
  return kind >= 0 && kind < 4 ? names[kind] : "alive";
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
        if (s->live_bytes > s->peak_iter_live) {
          s->peak_iter_live = s->live_bytes;
          s->peak_boundary = p->cur_iter;
          s->increases_at_peak = s->increases;
          s->decreases_at_peak = s->decreases;
          s->released_ns = -1;
        }
      }
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

/* Adds the value v to the curve's bucket starting at `start`. */
static void curve_add(ms_curve *c, int64_t start, int64_t v) {
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
  curve_add(p->a->allocated_curve, start, p->allocated);
  curve_add(p->a->reserved_curve, start, p->reserved);
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
  ms_live_slot block = {0}; /* aux: the allocation's iteration + 1 (0: before the first) */
  int64_t delta = ms_replay(&p->live, e, e->kind == MS_ALLOC ? site_index(p, e->stack_id) : -1,
                            (uint32_t)(p->cur_iter + 1), &block, &p->failed);
  uint32_t site = block.site;
  if (p->failed) return 1;
  switch (e->kind) {
    case MS_ALLOC: {
      ms_site *s = &a->sites[site];
      before_change(p, site);
      if (s->allocs == 0) {
        s->first_ns = e->time_ns;
        s->thread = e->thread;
        s->stream = e->stream;
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
      }
      if (p->cur_iter >= 0 && p->allocated > a->iters[p->cur_iter].peak_allocated) {
        a->iters[p->cur_iter].peak_allocated = p->allocated;
        a->iters[p->cur_iter].peak_ns = e->time_ns;
      }
      break;
    }
    case MS_FREE_REQUESTED:
      if (delta) {
        ms_site *s = &a->sites[site];
        before_change(p, site);
        s->live_bytes += delta;
        s->live_count--;
        p->allocated += delta;
        /* fallen below halfway from the first boundary's level to the highest since: released */
        if (s->released_ns < 0 && s->peak_iter_live > s->first_iter_live &&
            s->live_bytes < s->first_iter_live + (s->peak_iter_live - s->first_iter_live) / 2)
          s->released_ns = e->time_ns;
      }
      break;
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_MAP:
      p->reserved += e->size;
      if (p->reserved > a->peak_reserved) {
        a->peak_reserved = p->reserved;
        a->peak_reserved_ns = e->time_ns;
      }
      if (p->cur_iter >= 0 && p->reserved > a->iters[p->cur_iter].peak_reserved) a->iters[p->cur_iter].peak_reserved = p->reserved;
      break;
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_UNMAP:
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

/* ---- ranking ----------------------------------------------------------------------------- */

static const ms_analysis *sort_ctx;

static int compare_leaks(const void *x, const void *y) {
  const ms_site *a = &sort_ctx->sites[*(const uint32_t *)x], *b = &sort_ctx->sites[*(const uint32_t *)y];
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

static void classify(ms_analysis *a) {
  int transitions = a->niters > 1 ? (int)a->niters - 1 : 0;
  a->leaks = malloc(sizeof *a->leaks * (a->nsites ? a->nsites : 1));
  a->top = malloc(sizeof *a->top * (a->nsites ? a->nsites : 1));
  if (!a->leaks || !a->top) return;
  for (size_t i = 0; i < a->nsites; i++) {
    ms_site *s = &a->sites[i];
    a->top[a->ntop++] = (uint32_t)i;
    bool growing = grew(transitions, s->increases, s->decreases) && s->observed > 0 && s->last_iter_live > s->first_iter_live;
    /* the same evidence up to the boundary where it peaked, then freed (before the snapshot) */
    bool released = !growing && grew(s->peak_boundary, s->increases_at_peak, s->decreases_at_peak) &&
                    s->peak_iter_live > s->first_iter_live && s->released_ns >= 0;
    if (growing) {
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

int ms_analyze(ms_snapshot *s, ms_analysis *a, const char *label) {
  memset(a, 0, sizeof *a);
  a->snap = s;
  snprintf(a->iteration_source, sizeof a->iteration_source, "none");
  a->truncated = s->dropped > 0;
  if (ms_load_stacks(s) != 0 || ms_prehistory_build(s, MS_PREHISTORY_ANALYSIS, &a->before) != 0) return -1;
  pass p = {0};
  p.a = a;
  p.cur_iter = -1;
  p.site_of_stack = calloc(s->nstacks ? s->nstacks : 1, sizeof *p.site_of_stack);
  p.nbounds = choose_iterations(a, label, &p.bounds);
  if (!label && p.nbounds == 0) p.nbounds = infer_iterations(a, &p.bounds);
  if (label && p.nbounds == 0) {
    snprintf(s->error, sizeof s->error, "no marks or ranges labelled '%s' in '%s'", label, s->shown_path);
    free(p.site_of_stack);
    ms_prehistory_free(&a->before);
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
  if (!seed_prehistory(&p)) {
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
  for (size_t i = 0; p.live.slots && i <= p.live.mask; i++) { /* when what is still live was allocated */
    const ms_live_slot *b = &p.live.slots[i];
    int iteration = (int)b->aux - 1;
    if (b->key && iteration > a->sites[b->site].newest_live_iteration) a->sites[b->site].newest_live_iteration = iteration;
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
  classify(a);
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
  return 0;
fail:
  ms_live_free(&p.live);
  free(p.site_of_stack);
  free(p.bounds);
  free(p.peak_bytes);
  free(p.peak_count);
  free(p.saved_at);
  ms_analysis_free(a);
  a->snap = s;
  return -1;
}

int ms_open_analyzed(ms_snapshot *s, ms_analysis *a, const char *path, const ms_fold *fold, const char *label) {
  memset(a, 0, sizeof *a);
  if (ms_open(s, path) != 0) return -1;
  s->fold = fold;
  if (ms_analyze(s, a, label) == 0) return 0;
  ms_close(s); /* keeps s->error */
  return -1;
}

void ms_analysis_free(ms_analysis *a) {
  ms_timeline_free(a->timeline);
  ms_prehistory_free(&a->before);
  free(a->site_of_stack);
  free(a->allocated_curve);
  free(a->reserved_curve);
  free(a->sites);
  free(a->at_peak);
  free(a->iters);
  free(a->ooms);
  free(a->invalid_frees);
  free(a->leaks);
  free(a->top);
  memset(a, 0, sizeof *a);
}
