/* iterations.c: where the iterations of a program start, for the analysis (analyze.c) to measure
 * peaks and growth per iteration: the training steps. From marks, else from ranges: an
 * optimizer's step ranges when there are (PyTorch's "Optimizer.step#AdamW.step": whatever else
 * repeats, FSDP's, DDP's or a module's ranges, and one per optimizer step under gradient
 * accumulation), else the label that repeats most (outermost ranges first), labels that differ
 * only by numbers ("step 1", "step 2") counting as one. With neither, from the allocations: an
 * optimizer's steps, else the outermost repeated line of the program's own code (inference: a
 * generate() call, whatever repeats inside it), else the period of the allocation pattern; the
 * analysis says which (iteration_source).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

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

/* Allocations in [from, to) (0 when the events cannot be read). */
static int64_t allocations_between(ms_snapshot *s, int64_t from, int64_t to) {
  int64_t n = ms_count_allocations(s, from, to);
  return n < 0 ? 0 : n;
}

/* Ranges that last, but cover only part of each step (Optimizer.step, a data loader's fetch) must still
 * give iterations covering the whole loop (ranges that cover less than half the time between the
 * first one's start and the last one's end, and an optimizer's step whatever its share): each runs from one range's start to the next one's,
 * or, when the work comes before each range (more allocations before the first range than after
 * the last: forward and backward, then the optimizer step), from one range's end to the next
 * one's, the first from the history's start. Rewrites b's times in that case. */
static void ranges_to_steps(ms_analysis *a, ms_boundary *b, size_t n, int64_t covered, int64_t last_end) {
  ms_snapshot *s = a->snap;
  /* instants (marks exported as annotations) start their steps; ranges that fill the loop are its
     steps; an optimizer's step (PyTorch's "Optimizer.step#AdamW.step") covers only the end of one,
     however long it takes */
  bool optimizer = strncmp(a->iteration_label, "Optimizer.step", 14) == 0;
  if (covered == 0 || (!optimizer && covered * 2 >= last_end - b[0].time)) return;
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
  ms_boundary *b;
  size_t n, cap;
  int64_t covered, last_end; /* ranges: time inside them, and where the last ends */
} bounds;

/* Adds a mark or range of the chosen label as a ms_boundary; stops (1) when out of memory. */
static int add_ms_boundary(const ms_label_row *r, void *arg) {
  bounds *c = arg;
  char key[256];
  ms_label_key(r->label, key, sizeof key);
  if (strcmp(key, c->key) != 0 || (c->ranges && r->depth != c->depth)) return 0;
  if (!ms_grow(&c->b, &c->cap, c->n + 1, sizeof *c->b)) return 1;
  ms_boundary *b = &c->b[c->n++];
  *b = (ms_boundary){r->event_id, r->start_ns, -1, r->end_ns, false};
  if (r->end_ns > b->time) c->covered += r->end_ns - b->time;
  if (r->end_ns > c->last_end) c->last_end = r->end_ns;
  return 0;
}

/* ---- the optimizer steps PyTorch's layer recorded ----------------------------------------- */

/* The steps table's rows: an optimizer's step beginning, ending or skipped, with its class. */
typedef struct step_row {
  int64_t event_id;
  int what;
  char label[64];
} step_row;

typedef struct step_rows {
  step_row *r;
  size_t n, cap;
} step_rows;

static int add_step(const ms_label_row *r, void *arg) {
  step_rows *c = arg;
  if (r->depth < 1 || r->depth > 3) return 0;
  if (!ms_grow(&c->r, &c->cap, c->n + 1, sizeof *c->r)) return 1;
  step_row *x = &c->r[c->n++];
  x->event_id = r->event_id;
  x->what = (int)r->depth;
  snprintf(x->label, sizeof x->label, "%s", r->label);
  ms_neutralise(x->label);
  return 0;
}

/* Reads the recorded steps: counts them into a (optimizer_steps, skipped_steps, steps_recorded)
 * and, unless `counts_only`, gives the iterations they end: each from one step's end (or skip) to
 * the next one's, the first from the history's start, of the optimizer whose steps end most often
 * (a skipped step is an iteration that ends in it, marked skipped). Returns how many (0: fewer
 * than two, or none recorded). */
static size_t recorded_steps(ms_analysis *a, bool counts_only, ms_boundary **out) {
  step_rows c = {0};
  ms_steps_each(a->snap, add_step, &c); /* unreadable or out of memory: what was read */
  /* the optimizer whose steps end (or are skipped) most often */
  const char *best = NULL;
  size_t best_count = 0;
  for (size_t i = 0; i < c.n; i++) {
    a->steps_recorded = true;
    a->optimizer_steps += c.r[i].what == 1;
    a->skipped_steps += c.r[i].what == 3;
    if (c.r[i].what == 1 || (best && strcmp(best, c.r[i].label) == 0)) continue;
    size_t count = 0;
    for (size_t k = i; k < c.n; k++) count += c.r[k].what != 1 && strcmp(c.r[k].label, c.r[i].label) == 0;
    if (count > best_count) best_count = count, best = c.r[i].label;
  }
  size_t n_out = 0;
  ms_boundary *b = !counts_only && best_count >= 2 ? malloc(sizeof *b * best_count) : NULL;
  int64_t start = 0; /* the first iteration starts with the history, the next after each step */
  for (size_t i = 0; b && i < c.n; i++) {
    if (c.r[i].what == 1 || strcmp(c.r[i].label, best) != 0) continue;
    b[n_out++] = (ms_boundary){start, 0, -1, 0, c.r[i].what == 3};
    start = c.r[i].event_id + 1;
  }
  if (n_out) {
    snprintf(a->iteration_label, sizeof a->iteration_label, "%s.step", best[0] ? best : "optimizer");
    snprintf(a->iteration_source, sizeof a->iteration_source, "steps");
    *out = b;
  } else {
    free(b);
  }
  free(c.r);
  return n_out;
}

/* Whether a label key is an optimizer's step as PyTorch's optimizers label it
 * ("Optimizer.step#AdamW.step"). */
static bool is_optimizer_step(const char *key) { return strncmp(key, "Optimizer.step#", 15) == 0; }

/* Chooses the iteration label and fills the boundaries; returns how many (0: none). */
size_t ms_iterations_from_labels(ms_analysis *a, const char *forced, ms_boundary **out) {
  ms_snapshot *s = a->snap;
  int (*const source[2])(ms_snapshot *, int (*)(const ms_label_row *, void *), void *) = {ms_marks_each, ms_ranges_each};
  char best[256] = "";
  int best_source = -1, best_depth = 1 << 30;
  int64_t best_count = 1;
  char forced_key[256] = "";
  if (forced) ms_label_key(forced, forced_key, sizeof forced_key);
  /* the optimizer steps PyTorch's layer recorded (counted whatever gives the iterations) */
  ms_boundary *step_bounds = NULL;
  size_t nsteps = recorded_steps(a, forced != NULL, &step_bounds);
  /* Count label keys in each source, pick the most repeated (outermost depth first for ranges). */
  for (int src = 0; src < 2 && best_source < 0; src++) {
    /* no mark repeats: the recorded steps, skipped ones too (an optimizer's step ranges miss those
       GradScaler skips) */
    if (src == 1 && nsteps) {
      *out = step_bounds;
      return nsteps;
    }
    tallies c = {0};
    source[src](s, count_label, &c); /* unreadable: what was counted (none) */
    ms_str_index_free(&c.index);
    bool steps = false; /* an optimizer's step ranges are the training steps, whatever else repeats */
    for (size_t i = 0; !forced && src == 1 && i < c.n; i++) steps |= c.t[i].n >= 2 && is_optimizer_step(c.t[i].key);
    for (size_t i = 0; i < c.n; i++) {
      const tally *t = &c.t[i];
      bool better = forced ? strcmp(t->key, forced_key) == 0
                    : steps ? t->n >= 2 && is_optimizer_step(t->key) && (best_source < 0 || t->n > best_count)
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
  free(step_bounds);
  if (best_source < 0) return 0;
  snprintf(a->iteration_label, sizeof a->iteration_label, "%s", best);
  snprintf(a->iteration_source, sizeof a->iteration_source, "%s", best_source == 0 ? "marks" : "ranges");
  bounds c = {.key = best, .ranges = best_source == 1, .depth = best_depth};
  source[best_source](s, add_ms_boundary, &c); /* out of memory or unreadable: the boundaries read */
  if (c.ranges && c.n >= 2) ranges_to_steps(a, c.b, c.n, c.covered, c.last_end);
  *out = c.b;
  return c.n;
}

/* ---- without marks or ranges: one pass over the allocations ------------------------------- */

enum { MAX_TOKENS = 400000, LOOP_LEVELS = 6, MAX_RUNS = 500000, MAX_CANDIDATES = 64 };

/* A run of allocations, in order, whose frame at one level of the program's frames is one frame
 * (allocations without a frame at that level, such as autograd's on its own thread, do not end
 * it). */
typedef struct run {
  uint32_t token; /* the frame */
  int64_t start;  /* the ordinal of its first allocation */
} run;

/* One level of the program's frames (level 0: the outermost, usually the script's <module>). */
typedef struct level {
  uint32_t *token; /* by stack id: its frame at this level when its outer frames are the levels
                      above's most common ones, else 0 */
  run *runs;
  size_t n, cap;
  bool overflow; /* more than MAX_RUNS runs: not used */
} level;

/* What the pass gathers. */
typedef struct scan {
  const ms_snapshot *s;
  const ms_code_kinds *k;
  /* the period: each allocation a token of its stack and size (exact) or of its stack (tolerant) */
  uint64_t *tok, *stack_tok;
  size_t n;
  int64_t total; /* allocations: the ordinal of the next */
  /* the optimizer's steps: runs of allocations in an optimizer's code, each ending at end[k] */
  int64_t *end;
  size_t nsteps, cap;
  bool in_step;
  uint32_t step_stack; /* the first step's first allocation's */
  /* the allocations of backward passes, by ordinal (iterations must hold one each) */
  int64_t *backward;
  size_t nbackward, backward_cap;
  /* the loop's line */
  level lv[LOOP_LEVELS];
  int nlevels;
  bool failed;
} scan;

static int scan_allocation(int64_t stack_id, int64_t size, void *arg) {
  scan *c = arg;
  uint32_t id = stack_id > 0 && (size_t)stack_id < c->s->nstacks ? (uint32_t)stack_id : 0;
  if (c->n < MAX_TOKENS) {
    c->tok[c->n] = (uint64_t)stack_id * 0x9E3779B97F4A7C15ull ^ (uint64_t)size;
    c->stack_tok[c->n++] = (uint64_t)stack_id;
  }
  if (id && c->k->kind) {
    if (c->k->phase[id] == MS_PHASE_BACKWARD) {
      if (!ms_grow(&c->backward, &c->backward_cap, c->nbackward + 1, sizeof *c->backward)) c->failed = true;
      else c->backward[c->nbackward++] = c->total;
    }
    if (c->k->phase[id] == MS_PHASE_OPTIMIZER) { /* not a closure's forward pass inside the step */
      if (!c->in_step && !ms_grow(&c->end, &c->cap, c->nsteps + 1, sizeof *c->end)) c->failed = true;
      else if (!c->in_step && c->nsteps++ == 0) c->step_stack = id;
      c->in_step = !c->failed;
      if (c->in_step) c->end[c->nsteps - 1] = c->total;
    } else if (c->s->stacks[id].depth) {
      c->in_step = false;
    }
    for (int d = 0; d < c->nlevels; d++) {
      level *l = &c->lv[d];
      uint32_t t = l->token[id];
      if (!t || l->overflow || (l->n && l->runs[l->n - 1].token == t)) continue;
      if (l->n == MAX_RUNS || !ms_grow(&l->runs, &l->cap, l->n + 1, sizeof *l->runs)) {
        l->overflow = true;
        continue;
      }
      l->runs[l->n++] = (run){t, c->total};
    }
  }
  c->total++;
  return c->failed ? 1 : 0;
}

static int compare_u32(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return (a > b) - (a < b);
}

/* The levels of the program's frames: level d holds each stack's frame at depth d when its outer
 * frames are the most common ones of the levels above (a script's main() called from <module>:
 * level 0 is that call's line for every stack, level 1 the lines of main). 0, or -1 out of
 * memory. */
static int scan_levels(scan *c) {
  const ms_code_kinds *k = c->k;
  size_t ns = k->nstacks;
  uint32_t prefix[LOOP_LEVELS] = {0};
  uint32_t *seen = malloc(sizeof *seen * (ns ? ns : 1));
  if (!seen) return -1;
  for (int d = 0; d < LOOP_LEVELS; d++) {
    size_t n = 0;
    for (size_t id = 1; id < ns; id++) {
      if (k->chain_len[id] <= d) continue;
      const uint32_t *ch = &k->chain[id * MS_CHAIN];
      if (memcmp(ch, prefix, sizeof *prefix * (size_t)d) == 0) seen[n++] = ch[d];
    }
    if (n == 0) break;
    level *l = &c->lv[d];
    if (!(l->token = calloc(ns, sizeof *l->token))) {
      free(seen);
      return -1;
    }
    c->nlevels = d + 1;
    for (size_t id = 1; id < ns; id++) {
      const uint32_t *ch = &k->chain[id * MS_CHAIN];
      if (k->chain_len[id] > d && memcmp(ch, prefix, sizeof *prefix * (size_t)d) == 0) l->token[id] = ch[d];
    }
    /* the most common frame at this level leads to the next */
    qsort(seen, n, sizeof *seen, compare_u32);
    size_t best = 0, count = 0;
    for (size_t i = 0; i < n; i++) {
      count = i && seen[i] == seen[i - 1] ? count + 1 : 1;
      if (count > best) best = count, prefix[d] = seen[i];
    }
  }
  free(seen);
  return 0;
}

static int compare_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

/* FNV-1a, a 64-bit value at a time. */
static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull; }

/* The loop at level l: the frame (a line of the program) whose runs cut the level's runs into
 * iterations, chosen as the one that cuts them into the most segments (at least 3) such that in
 * 80% of the segments every other line that runs as often as it (the lines that run once an
 * iteration; within 5% from 20 runs) runs exactly once; or, where no other line runs as often, that 80% of the
 * segments are the same sequence of lines. Lines that run only in some iterations (a branch, a
 * log every N steps) or several times in one vary from segment to segment and are no anchor.
 * The earliest such frame among equals. Its runs' first allocations start the iterations: their
 * ordinals into *out (malloc'd) and their number; 0 when there is none. */
static size_t loop_anchor(const level *l, uint32_t *anchor, int64_t **out) {
  if (l->overflow || l->n < 3) return 0;
  size_t n = l->n, ndistinct = 0, best = 0;
  uint32_t *distinct = malloc(sizeof *distinct * n), *index = malloc(sizeof *index * n);
  size_t *count = calloc(n, sizeof *count), *seen = calloc(n, sizeof *seen);
  uint64_t *sig = malloc(sizeof *sig * n), *sorted = malloc(sizeof *sorted * n);
  bool *core = calloc(n, sizeof *core);
  if (!distinct || !index || !count || !seen || !sig || !sorted || !core) goto done;
  /* each run's frame as an index into the distinct frames, and how many runs each has */
  for (size_t i = 0; i < n; i++) distinct[i] = l->runs[i].token;
  qsort(distinct, n, sizeof *distinct, compare_u32);
  for (size_t i = 0; i < n; i++)
    if (i == 0 || distinct[i] != distinct[ndistinct - 1]) distinct[ndistinct++] = distinct[i];
  for (size_t i = 0; i < n; i++) {
    uint32_t *at = bsearch(&l->runs[i].token, distinct, ndistinct, sizeof *distinct, compare_u32);
    index[i] = (uint32_t)(at - distinct);
    count[index[i]]++;
  }
  size_t ncand = 0;
  for (size_t i = 0; i < n && ncand < MAX_CANDIDATES; i++) { /* in order of first run */
    size_t x = index[i];
    if (count[x] < 3 || seen[x]) continue;
    seen[x] = 1;
    ncand++;
    size_t m = count[x], tol = m / 20, ncore = 0;
    if (m <= best) continue;
    for (size_t t = 0; t < ndistinct; t++) {
      core[t] = t != x && count[t] + tol >= m && count[t] <= m + tol;
      ncore += core[t];
    }
    /* segments: from each run of x to the next; the last may hold what follows the loop */
    size_t segments = 0, regular = 0, same = 0;
    bool in_segment = false;
    size_t *hits = calloc(ndistinct, sizeof *hits);
    if (!hits) break;
    for (size_t r = 0; r <= n; r++) {
      if (r == n || index[r] == x) {
        if (in_segment) { /* the segment that ends here: every core line exactly once? */
          bool ok = true;
          for (size_t t = 0; t < ndistinct && ok; t++) ok = !core[t] || hits[t] == 1;
          regular += ok;
          memset(hits, 0, sizeof *hits * ndistinct);
        }
        if (r == n) break;
        in_segment = true;
        sig[segments++] = 0xCBF29CE484222325ull;
      }
      if (!in_segment) continue;
      hits[index[r]]++;
      sig[segments - 1] = mix(sig[segments - 1], l->runs[r].token);
    }
    free(hits);
    if (ncore) {
      if (regular * 5 < segments * 4) continue;
    } else { /* no other line runs as often: the segments must repeat one sequence of lines */
      memcpy(sorted, sig, sizeof *sig * (segments - 1));
      qsort(sorted, segments - 1, sizeof *sorted, compare_u64);
      size_t run_length = 0;
      for (size_t k = 0; k + 1 < segments; k++) {
        run_length = k && sorted[k] == sorted[k - 1] ? run_length + 1 : 1;
        if (run_length > same) same = run_length;
      }
      if ((same + 1) * 5 < segments * 4) continue; /* the last segment given the benefit of the doubt */
    }
    best = segments;
    *anchor = l->runs[i].token;
  }
  if (best) {
    int64_t *b = malloc(sizeof *b * best);
    size_t k = 0;
    for (size_t i = 0; b && i < n && k < best; i++)
      if (l->runs[i].token == *anchor) b[k++] = l->runs[i].start;
    *out = b;
    if (!b) best = 0;
  }
done:
  free(distinct);
  free(index);
  free(count);
  free(seen);
  free(sig);
  free(sorted);
  free(core);
  return best;
}

/* Iterations starting at the allocations of ordinals starts[0..n) into boundaries. */
static size_t boundaries_at(const int64_t *starts, size_t n, ms_boundary **out) {
  ms_boundary *b = malloc(sizeof *b * (n ? n : 1));
  if (!b) return 0;
  for (size_t k = 0; k < n; k++) b[k] = (ms_boundary){0, 0, starts[k], 0, false};
  *out = b;
  return n;
}

/* The period of tokens tok[0..n) (of `total` allocations) where at least `per_mille` of a window
 * repeats: the boundaries, or 0 when there is none. Anchored in the middle of the run (past any
 * set-up), the period is the distance to the anchor's next occurrence; the run must hold it
 * three times. Iterations then start every `period` allocations from the earliest position the
 * pattern reaches going back from the anchor. */
static size_t period_of(const uint64_t *tok, size_t n, int64_t total, size_t per_mille, size_t *period_out,
                        ms_boundary **out) {
  enum { WINDOW = 20000, MAX_PERIOD = 50000, SCREEN = 512 };
  /* Screen every shift at which the anchor's token recurs on a short window, keep the best
   * matching one (the smallest among equals: not a sub-period that repetition inside an
   * iteration makes look good, nor a multiple), then check it on a long window. */
  size_t period = 0, anchor = n / 2;
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
    if (w >= best_d && same * 1000 >= w * per_mille) period = best_d;
  }
  if (!period) return 0;
  size_t first = anchor;
  while (first >= period && tok[first - period] == tok[first]) first -= period;
  size_t count = (size_t)((total - (int64_t)first + (int64_t)period - 1) / (int64_t)period);
  if (count < 3) return 0;
  ms_boundary *b = malloc(sizeof *b * count);
  if (!b) return 0;
  for (size_t k = 0; k < count; k++) b[k] = (ms_boundary){0, 0, (int64_t)(first + k * period), 0, false};
  *period_out = period;
  *out = b;
  return count;
}

/* Whether iterations starting at boundaries b[0..n) (by allocation ordinal) miss the backward
 * passes a program that has them runs in every training step: more than one without any
 * allocation of a backward pass (a period found in the layers of one forward pass, say). */
static bool without_backward(const scan *c, const ms_boundary *b, size_t n) {
  if (c->nbackward == 0) return false;
  size_t missing = 0, j = 0;
  for (size_t k = 0; k < n; k++) {
    int64_t from = b[k].alloc, to = k + 1 < n ? b[k + 1].alloc : c->total;
    while (j < c->nbackward && c->backward[j] < from) j++;
    missing += !(j < c->nbackward && c->backward[j] < to);
  }
  return missing > 1;
}

/* A frame as the report names it: "function (file:line)". */
static void frame_text(const ms_snapshot *s, uint32_t id, char *out, size_t len) {
  const ms_frame *f = &s->frames[id];
  const char *slash = strrchr(f->file, '/');
  if (f->file[0]) snprintf(out, len, "%s (%s:%lld)", f->short_name, slash ? slash + 1 : f->file, (long long)f->line);
  else snprintf(out, len, "%s", f->short_name);
}

static void set_source(ms_analysis *a, const char *source, const char *fmt, const char *what) {
  snprintf(a->iteration_source, sizeof a->iteration_source, "%s", source);
  snprintf(a->iteration_label, sizeof a->iteration_label, fmt, what);
}

size_t ms_iterations_inferred(ms_analysis *a, ms_boundary **out) {
  scan c = {.s = a->snap, .k = &a->kinds};
  c.tok = malloc(sizeof *c.tok * MAX_TOKENS);
  c.stack_tok = malloc(sizeof *c.stack_tok * MAX_TOKENS);
  size_t n_out = 0, period = 0;
  if (c.tok && c.stack_tok && (!a->kinds.kind || scan_levels(&c) == 0)) {
    ms_allocations_each(a->snap, scan_allocation, &c); /* unreadable: what was read */
    char what[200];
    /* 1. an optimizer's steps, the training steps whatever else repeats inside them: the
       iterations end where they end (the first from the start) */
    if (c.nsteps >= 3) {
      int64_t *starts = malloc(sizeof *starts * c.nsteps);
      if (starts) {
        starts[0] = 0;
        for (size_t k = 1; k < c.nsteps; k++) starts[k] = c.end[k - 1] + 1;
        n_out = boundaries_at(starts, c.nsteps, out);
        free(starts);
        uint32_t outer = 0; /* the outermost optimizer frame of the first step */
        const ms_stack *st = &a->snap->stacks[c.step_stack];
        for (uint32_t j = 0; j < st->depth; j++)
          if (st->frames[j] < a->kinds.nframes && (a->kinds.frame_kind[st->frames[j]] & MS_CODE_OPTIMIZER)) outer = st->frames[j];
        frame_text(a->snap, outer, what, sizeof what);
        if (n_out) set_source(a, "optimizer", "the optimizer's steps: %s", what);
      }
    }
    /* 2. the loop: the outermost level of the program's frames with a line that repeats (without an
       optimizer, the outermost repeated unit of the program's own code: a generate() call, say,
       whatever repeats inside it) */
    for (int d = 0; !n_out && d < c.nlevels; d++) {
      uint32_t anchor = 0;
      int64_t *starts = NULL;
      size_t n = loop_anchor(&c.lv[d], &anchor, &starts);
      if (n) n_out = boundaries_at(starts, n, out);
      free(starts);
      if (n_out) {
        frame_text(a->snap, anchor, what, sizeof what);
        set_source(a, "loop", "the loop at %s", what);
      }
    }
    /* 3. the exact period: every allocation's stack and size repeat; 4. a tolerant period: the
       stacks alone, 70% of them repeating. Neither when its iterations miss the program's backward
       passes (the layers of one forward pass are no iterations) */
    for (int tolerant = 0; !n_out && tolerant < 2; tolerant++) {
      n_out = period_of(tolerant ? c.stack_tok : c.tok, c.n, c.total, tolerant ? 700 : 900, &period, out);
      if (n_out && without_backward(&c, *out, n_out)) {
        free(*out);
        *out = NULL;
        n_out = 0;
      }
      if (n_out) {
        snprintf(what, sizeof what, "%zu", period);
        set_source(a, "inferred", tolerant ? "a period of about %s allocations" : "a period of %s allocations", what);
      }
    }
  }
  free(c.tok);
  free(c.stack_tok);
  free(c.end);
  free(c.backward);
  for (int d = 0; d < LOOP_LEVELS; d++) {
    free(c.lv[d].token);
    free(c.lv[d].runs);
  }
  return n_out;
}
