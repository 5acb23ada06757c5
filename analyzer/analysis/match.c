/* match.c: allocation sites of several snapshots matched by what identifies them in any process.
 *
 * Stack ids, frame ids and addresses are private to one process (ASLR moves every module), so a
 * site's key is its whole stack as frame keys (frames.c, ms_frame_key: function, file, line;
 * module name and offset for unnamed frames), each frame key numbered once for all snapshots. Sites without a stack are keyed by why they
 * have none: blocks allocated before recording started (or before the kept history) apart from
 * those recorded without a stack. Two stacks of one snapshot with the same key (a function
 * without line information reached at two offsets) are one row: their bytes add up, so the rows'
 * sums stay the snapshots' totals. Used by `memsnap diff` and `memsnap analyze A.db B.db`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

/* The number of a frame's key among every snapshot's (ms_frame_key); -1 when out of memory. */
static int64_t frame_ident(ms_matches *m, const ms_frame *f) {
  char key[2 * MS_TEXT_MAX + 64];
  bool added;
  ms_frame_key(f, key, sizeof key);
  return ms_strtab_add(&m->frame_keys, key, &added);
}

/* The key of a site, a new string (its frames' key numbers, so a deep stack of long names stays
 * small); NULL when out of memory. ident caches the numbers of analysis a's frames (+ 1). */
static char *site_key(ms_matches *m, const ms_analysis *a, uint32_t site, uint32_t *ident) {
  const ms_snapshot *s = a->snap;
  const ms_site *st = &a->sites[site];
  if (st->stack_id == 0 || st->stack_id >= s->nstacks) return strdup(st->before_history ? "(before)" : "(none)");
  const ms_stack *k = &s->stacks[st->stack_id];
  char *key = malloc((size_t)k->depth * 9 + 1), *at = key;
  if (!key) return NULL;
  *at = '\0';
  for (uint32_t i = 0; i < k->depth; i++) {
    uint32_t fid = k->frames[i];
    if (!ident[fid]) {
      int64_t id = frame_ident(m, &s->frames[fid]);
      if (id < 0) {
        free(key);
        return NULL;
      }
      ident[fid] = (uint32_t)id + 1;
    }
    at += sprintf(at, "%x,", ident[fid]); /* at most 8 digits and a comma */
  }
  return key;
}

static const char *row_key(const void *ctx, size_t i) { return ((const ms_matches *)ctx)->rows[i].key; }

/* The row of `key`, added if new (taking the key); -1 when out of memory. */
static int64_t row_of(ms_matches *m, char *key) {
  size_t slot;
  int64_t found = ms_str_find(&m->index, key, m->n, row_key, m, &slot);
  if (found >= 0) free(key);
  if (found != -1) return found == -2 ? -1 : found;
  if (m->n == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 256;
    ms_match_row *g = realloc(m->rows, sizeof *g * cap);
    if (!g) return -1;
    m->rows = g;
    m->cap = cap;
  }
  ms_match_row *r = &m->rows[m->n];
  memset(r, 0, sizeof *r);
  r->key = key;
  if (!(r->site = calloc(m->nanalyses, sizeof *r->site)) || !(r->bytes = calloc(m->nanalyses, sizeof *r->bytes)) ||
      !(r->count = calloc(m->nanalyses, sizeof *r->count))) {
    free(r->site), free(r->bytes), free(r->count);
    return -1;
  }
  m->index.slots[slot] = (uint32_t)m->n + 1;
  return (int64_t)m->n++;
}

int ms_match_sites(const ms_analysis *a, size_t n, bool (*want)(const ms_analysis *a, uint32_t site), ms_matches *m) {
  memset(m, 0, sizeof *m);
  m->nanalyses = n;
  for (size_t k = 0; k < n; k++) {
    uint32_t *ident = calloc(a[k].snap->nframes + 1, sizeof *ident);
    for (uint32_t site = 0; site < a[k].nsites; site++) {
      if (!want(&a[k], site)) continue;
      char *key = ident ? site_key(m, &a[k], site, ident) : NULL;
      int64_t r = key ? row_of(m, key) : -1;
      if (r < 0) {
        free(key);
        free(ident);
        ms_matches_free(m);
        return -1;
      }
      ms_match_row *row = &m->rows[r];
      if (!row->site[k]) row->site[k] = site + 1;
      row->bytes[k] += a[k].sites[site].end_bytes;
      row->count[k] += a[k].sites[site].end_count;
    }
    free(ident);
  }
  return 0;
}

void ms_matches_free(ms_matches *m) {
  for (size_t r = 0; r < m->n; r++) {
    free(m->rows[r].key);
    free(m->rows[r].site);
    free(m->rows[r].bytes);
    free(m->rows[r].count);
  }
  free(m->rows);
  ms_str_index_free(&m->index);
  ms_strtab_free(&m->frame_keys);
  memset(m, 0, sizeof *m);
}

/* ---- leak candidates matched: the rows ranked ---------------------------------------------- */

static bool is_leak(const ms_analysis *a, uint32_t site) { return a->sites[site].score > 0; }

static const ms_analysis *rank_ctx;
static size_t rank_n;

/* The best score a row has in any snapshot, and its most bytes. */
static void row_rank(const ms_match_row *r, double *score, int64_t *bytes) {
  *score = 0, *bytes = 0;
  for (size_t k = 0; k < rank_n; k++) {
    if (!r->site[k]) continue;
    const ms_site *st = &rank_ctx[k].sites[r->site[k] - 1];
    if (st->score > *score) *score = st->score;
    if (r->bytes[k] > *bytes) *bytes = r->bytes[k];
  }
}

static int compare_rows(const void *x, const void *y) {
  const ms_match_row *a = *(const ms_match_row *const *)x, *b = *(const ms_match_row *const *)y;
  double sa, sb;
  int64_t ba, bb;
  row_rank(a, &sa, &ba);
  row_rank(b, &sb, &bb);
  if (sa != sb) return sa < sb ? 1 : -1;
  if (ba != bb) return ba < bb ? 1 : -1;
  return strcmp(a->key, b->key);
}

ptrdiff_t ms_match_leaks(const ms_analysis *a, size_t n, ms_matches *m, const ms_match_row ***rows) {
  *rows = NULL;
  if (ms_match_sites(a, n, is_leak, m) != 0 || !(*rows = malloc(sizeof **rows * (m->n ? m->n : 1)))) {
    ms_matches_free(m);
    return -1;
  }
  for (size_t r = 0; r < m->n; r++) (*rows)[r] = &m->rows[r];
  rank_ctx = a, rank_n = n;
  qsort(*rows, m->n, sizeof **rows, compare_rows);
  return (ptrdiff_t)m->n;
}
