/* match.c: allocation sites of several snapshots matched by what identifies them in any process.
 *
 * Stack ids, frame ids and addresses are private to one process (ASLR moves every module), so a
 * site's key is its whole stack written as frame keys (frames.c, ms_frame_key: function, file,
 * line; module name and offset for unnamed frames). Sites without a stack are keyed by why they
 * have none: blocks allocated before recording started (or before the kept history) apart from
 * those recorded without a stack. Two stacks of one snapshot with the same key (a function
 * without line information reached at two offsets) are one row: their bytes add up, so the rows'
 * sums stay the snapshots' totals. Used by `memsnap diff` and `memsnap analyze A.db B.db`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"

/* The key of a site, a new string; NULL when out of memory. */
static char *site_key(const ms_analysis *a, uint32_t site) {
  const ms_snapshot *s = a->snap;
  const ms_site *st = &a->sites[site];
  if (st->stack_id == 0 || st->stack_id >= s->nstacks) return strdup(st->before_history ? "(before)" : "(none)");
  const ms_stack *k = &s->stacks[st->stack_id];
  size_t cap = 256, len = 0;
  char *key = malloc(cap);
  if (!key) return NULL;
  key[0] = '\0';
  for (uint32_t i = 0; i < k->depth; i++) {
    const ms_frame *f = &s->frames[k->frames[i]];
    for (;;) {
      int n = ms_frame_key(f, key + len, cap - len - 1);
      if (n >= 0 && len + (size_t)n + 1 < cap - 1) {
        len += (size_t)n;
        key[len++] = '\n'; /* no frame key holds one: the reader neutralised control bytes */
        key[len] = '\0';
        break;
      }
      char *g = n < 0 ? NULL : realloc(key, cap = cap * 2 + (size_t)n);
      if (!g) {
        free(key);
        return NULL;
      }
      key = g;
    }
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
  for (size_t k = 0; k < n; k++)
    for (uint32_t site = 0; site < a[k].nsites; site++) {
      if (!want(&a[k], site)) continue;
      char *key = site_key(&a[k], site);
      int64_t r = key ? row_of(m, key) : -1;
      if (r < 0) {
        free(key);
        ms_matches_free(m);
        return -1;
      }
      ms_match_row *row = &m->rows[r];
      if (!row->site[k]) row->site[k] = site + 1;
      row->bytes[k] += a[k].sites[site].end_bytes;
      row->count[k] += a[k].sites[site].end_count;
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
  memset(m, 0, sizeof *m);
}
