/* diff.c: a comparison of two analyses (analysis/compare.c) written out: the sites by change as
 * text (the 15 largest changes, or as many as asked, and the rest summed on one line) and the
 * whole comparison as JSON (docs/analysis-json.md, "memsnap diff --json"), each site's stack
 * keys and each side's process keys as json.c writes them for `analyze --json`. `memsnap diff`
 * and the table of ranks (ranks.c) print them.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "report.h"

static int64_t change(const ms_match_row *r) { return r->bytes[1] - r->bytes[0]; }

static int by_size_of_change(const void *x, const void *y) {
  const ms_match_row *a = x, *b = y;
  int64_t ca = llabs(change(a)), cb = llabs(change(b));
  if (ca != cb) return ca < cb ? 1 : -1;
  return ms_compare_change_order(x, y);
}

/* The side whose stack shows a row: B's when the site is there. */
static int side_of(const ms_match_row *r) { return r->site[1] ? 1 : 0; }

void ms_report_diff_sites(const ms_analysis *a, ms_comparison *c, size_t most, const char *const names[2],
                          const ms_report_options *o, const char *indent, FILE *out) {
  char b0[32], b1[32], bd[32];
  size_t n = c->n, shown = n < most ? n : most;
  ms_match_row *rows = c->rows;
  qsort(rows, n, sizeof *rows, by_size_of_change); /* the largest changes, then in order of change */
  qsort(rows, shown, sizeof *rows, ms_compare_change_order);
  for (size_t i = 0; i < shown; i++) {
    const ms_match_row *x = &rows[i];
    ms_format_bytes(x->bytes[0], b0, sizeof b0);
    ms_format_bytes(x->bytes[1], b1, sizeof b1);
    ms_format_bytes(change(x), bd, sizeof bd);
    fprintf(out, "%s%s%-12s %12s -> %-12s (%lld -> %lld blocks)%s%s\n", indent, change(x) >= 0 ? "+" : "", bd, b0, b1,
            (long long)x->count[0], (long long)x->count[1], !x->site[0] ? "  new in " : !x->site[1] ? "  gone in " : "",
            !x->site[0] || !x->site[1] ? names[1] : "");
    int k = side_of(x);
    const ms_site *st = &a[k].sites[x->site[k] - 1];
    char deeper[64];
    snprintf(deeper, sizeof deeper, "%s    ", indent);
    ms_print_stack(a[k].snap, st->stack_id, ms_site_note(&a[k], st), o, deeper, out);
  }
  if (n > shown) {
    int64_t rest = 0, rest_blocks[2] = {0, 0};
    for (size_t i = shown; i < n; i++) rest += change(&rows[i]), rest_blocks[0] += rows[i].count[0], rest_blocks[1] += rows[i].count[1];
    ms_format_bytes(rest, bd, sizeof bd);
    fprintf(out, "%s(%zu more sites changed: %s%s in all, %lld -> %lld blocks)\n", indent, n - shown, rest >= 0 ? "+" : "", bd,
            (long long)rest_blocks[0], (long long)rest_blocks[1]);
  }
  if (!n) fprintf(out, "%sno site changed\n", indent);
  qsort(rows, n, sizeof *rows, ms_compare_change_order); /* back in order of change */
}

static cJSON *side_json(const ms_analysis *a, const ms_comparison *c, int k) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "path", a->snap->shown_path);
  ms_json_process(o, a->snap);
  cJSON_AddNumberToObject(o, "allocated_bytes", (double)c->bytes[k]);
  cJSON_AddNumberToObject(o, "blocks", (double)c->blocks[k]);
  return o;
}

cJSON *ms_diff_json(const ms_analysis *a, const ms_comparison *c) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddItemToObject(root, "a", side_json(&a[0], c, 0));
  cJSON_AddItemToObject(root, "b", side_json(&a[1], c, 1));
  cJSON_AddNumberToObject(root, "change_bytes", (double)(c->bytes[1] - c->bytes[0]));
  cJSON_AddNumberToObject(root, "change_blocks", (double)(c->blocks[1] - c->blocks[0]));
  cJSON_AddNumberToObject(root, "sites_in_both", (double)c->both);
  cJSON_AddNumberToObject(root, "sites_only_in_a", (double)c->only[0]);
  cJSON_AddNumberToObject(root, "sites_only_in_b", (double)c->only[1]);
  cJSON *sites = cJSON_AddArrayToObject(root, "sites");
  for (size_t i = 0; sites && i < c->n; i++) {
    const ms_match_row *x = &c->rows[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", !x->site[0] ? "new" : !x->site[1] ? "gone" : "changed");
    cJSON_AddNumberToObject(o, "a_bytes", (double)x->bytes[0]);
    cJSON_AddNumberToObject(o, "b_bytes", (double)x->bytes[1]);
    cJSON_AddNumberToObject(o, "change_bytes", (double)change(x));
    cJSON_AddNumberToObject(o, "a_blocks", (double)x->count[0]);
    cJSON_AddNumberToObject(o, "b_blocks", (double)x->count[1]);
    cJSON_AddNumberToObject(o, "a_stack_id", x->site[0] ? a[0].sites[x->site[0] - 1].stack_id : 0);
    cJSON_AddNumberToObject(o, "b_stack_id", x->site[1] ? a[1].sites[x->site[1] - 1].stack_id : 0);
    int k = side_of(x);
    ms_json_site_stacks(o, &a[k], x->site[k] - 1);
    cJSON_AddItemToArray(sites, o);
  }
  return root;
}
