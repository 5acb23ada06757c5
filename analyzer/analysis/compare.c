/* compare.c: what changed between two analyses, by allocation site: the bytes and blocks each
 * site holds at each snapshot (the analysis's, so a site without a stack says why), and the
 * change. The two may come from two processes (two runs of a program, two ranks of a job): sites
 * are matched by what identifies them in any process (match.c), never by addresses or row ids.
 * Every site that changed counts, so the changes add up to the change of the total. `memsnap
 * diff` prints a comparison (report/diff.c), and so does the table of ranks for the rank that
 * stands out against the median one (ranks.c).
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static bool alive(const ms_analysis *a, uint32_t site) { return a->sites[site].end_count > 0; }

static int64_t change(const ms_match_row *r) { return r->bytes[1] - r->bytes[0]; }

int ms_compare_change_order(const void *x, const void *y) {
  const ms_match_row *a = x, *b = y;
  int64_t ca = change(a), cb = change(b);
  if (ca != cb) return ca < cb ? 1 : -1;
  return strcmp(a->key, b->key);
}

int ms_compare(const ms_analysis *a, ms_comparison *c) {
  memset(c, 0, sizeof *c);
  if (ms_match_sites(a, 2, alive, &c->m) != 0) return -1;
  /* the rows that changed (the others add nothing to the change), as copies to sort */
  c->rows = malloc(sizeof *c->rows * (c->m.n ? c->m.n : 1));
  if (!c->rows) {
    ms_comparison_free(c);
    return -1;
  }
  for (size_t r = 0; r < c->m.n; r++) {
    const ms_match_row *x = &c->m.rows[r];
    for (int k = 0; k < 2; k++) c->bytes[k] += x->bytes[k], c->blocks[k] += x->count[k];
    if (x->site[0] && x->site[1]) c->both++;
    else c->only[x->site[0] ? 0 : 1]++;
    if (x->bytes[0] != x->bytes[1] || x->count[0] != x->count[1]) c->rows[c->n++] = *x;
  }
  qsort(c->rows, c->n, sizeof *c->rows, ms_compare_change_order);
  return 0;
}

void ms_comparison_free(ms_comparison *c) {
  free(c->rows);
  ms_matches_free(&c->m);
  memset(c, 0, sizeof *c);
}
