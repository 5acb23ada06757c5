/* iterations.c: where the iterations of a program start, for the analysis (analyze.c) to measure
 * peaks and growth per iteration: from marks, else from ranges, the label that repeats most
 * (outermost ranges first), labels that differ only by numbers ("step 1", "step 2") counting as
 * one; with neither, from the period of the allocation pattern, and the analysis says which
 * (iteration_source).
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
 * give iterations covering the whole loop: each runs from one range's start to the next one's,
 * or, when the work comes before each range (more allocations before the first range than after
 * the last: forward and backward, then the optimizer step), from one range's end to the next
 * one's, the first from the history's start. Rewrites b's times in that case. */
static void ranges_to_steps(ms_analysis *a, ms_boundary *b, size_t n, int64_t covered, int64_t last_end) {
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
  *b = (ms_boundary){r->event_id, r->start_ns, -1, r->end_ns};
  if (r->end_ns > b->time) c->covered += r->end_ns - b->time;
  if (r->end_ns > c->last_end) c->last_end = r->end_ns;
  return 0;
}

/* Chooses the iteration label and fills the boundaries; returns how many (0: none). */
size_t ms_iterations_from_labels(ms_analysis *a, const char *forced, ms_boundary **out) {
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
  source[best_source](s, add_ms_boundary, &c); /* out of memory or unreadable: the boundaries read */
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
size_t ms_iterations_inferred(ms_analysis *a, ms_boundary **out) {
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
    ms_boundary *b = count ? malloc(sizeof *b * count) : NULL;
    for (size_t k = 0; b && k < count; k++) b[k] = (ms_boundary){0, 0, (int64_t)(first + k * period), 0};
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
