/* diff.c: `memsnap diff [--json] A.db B.db`: what changed between two snapshots, by
 * allocation site: the bytes and blocks each site holds at each snapshot (the analysis's, so a
 * site without a stack says why), and the change.
 *
 * A and B may come from two processes (two runs of a program, two ranks of a job): sites are
 * matched by what identifies them in any process (match.c), never by addresses or row ids. Every
 * site that changed counts, so the changes add up to the change of the total: the text lists the
 * 15 largest changes and sums the rest on one line; the JSON lists them all
 * (docs/analysis-json.md, "memsnap diff --json"), each site's stack keys and each side's process
 * keys as report/json.c writes them for `analyze --json`. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "report/report.h"

#define SHOWN 15 /* sites the text lists */

static bool alive(const ms_analysis *a, uint32_t site) { return a->sites[site].end_count > 0; }

static int64_t change(const ms_match_row *r) { return r->bytes[1] - r->bytes[0]; }

static int by_change(const void *x, const void *y) {
  const ms_match_row *a = x, *b = y;
  int64_t ca = change(a), cb = change(b);
  if (ca != cb) return ca < cb ? 1 : -1;
  return strcmp(a->key, b->key);
}

static int by_size_of_change(const void *x, const void *y) {
  const ms_match_row *a = x, *b = y;
  int64_t ca = llabs(change(a)), cb = llabs(change(b));
  if (ca != cb) return ca < cb ? 1 : -1;
  return by_change(x, y);
}

/* The side whose stack shows a row: B's when the site is there. */
static int side_of(const ms_match_row *r) { return r->site[1] ? 1 : 0; }

/* Totals over every matched site: bytes and blocks at A and B, sites in both and only in one. */
typedef struct totals {
  int64_t bytes[2], blocks[2];
  size_t both, only[2];
} totals;

static totals count(const ms_matches *m) {
  totals t = {{0, 0}, {0, 0}, 0, {0, 0}};
  for (size_t r = 0; r < m->n; r++) {
    const ms_match_row *x = &m->rows[r];
    for (int k = 0; k < 2; k++) t.bytes[k] += x->bytes[k], t.blocks[k] += x->count[k];
    if (x->site[0] && x->site[1]) t.both++;
    else t.only[x->site[0] ? 0 : 1]++;
  }
  return t;
}

static void print_text(const ms_analysis *a, const char *const *paths, ms_match_row *rows, size_t n, const ms_matches *m,
                       const ms_report_options *o) {
  totals t = count(m);
  int64_t *total = t.bytes, *blocks = t.blocks;
  size_t both = t.both, *only = t.only;
  char b0[32], b1[32], bd[32];
  ms_format_bytes(total[0], b0, sizeof b0);
  ms_format_bytes(total[1], b1, sizeof b1);
  ms_format_bytes(total[1] - total[0], bd, sizeof bd);
  printf("memsnap diff\n  A: %s (pid %lld)\n  B: %s (pid %lld)\n", paths[0], (long long)a[0].snap->pid, paths[1],
         (long long)a[1].snap->pid);
  printf("  allocated: %s -> %s (%s%s), %lld -> %lld blocks\n", b0, b1, total[1] >= total[0] ? "+" : "", bd,
         (long long)blocks[0], (long long)blocks[1]);
  printf("  sites matched by function, file and line: %zu in both, %zu only in A, %zu only in B\n\n", both, only[0],
         only[1]);
  printf("sites by change (allocated at the snapshot)\n");
  size_t shown = n < SHOWN ? n : SHOWN;
  qsort(rows, n, sizeof *rows, by_size_of_change); /* the largest changes, then in order of change */
  qsort(rows, shown, sizeof *rows, by_change);
  for (size_t i = 0; i < shown; i++) {
    const ms_match_row *x = &rows[i];
    ms_format_bytes(x->bytes[0], b0, sizeof b0);
    ms_format_bytes(x->bytes[1], b1, sizeof b1);
    ms_format_bytes(change(x), bd, sizeof bd);
    printf("  %s%-12s %12s -> %-12s (%lld -> %lld blocks)%s\n", change(x) >= 0 ? "+" : "", bd, b0, b1, (long long)x->count[0],
           (long long)x->count[1], !x->site[0] ? "  new in B" : !x->site[1] ? "  gone in B" : "");
    int k = side_of(x);
    const ms_site *st = &a[k].sites[x->site[k] - 1];
    ms_print_stack(a[k].snap, st->stack_id, ms_site_note(&a[k], st), o, "      ", stdout);
  }
  if (n > shown) {
    int64_t rest = 0, rest_blocks[2] = {0, 0};
    for (size_t i = shown; i < n; i++) rest += change(&rows[i]), rest_blocks[0] += rows[i].count[0], rest_blocks[1] += rows[i].count[1];
    ms_format_bytes(rest, bd, sizeof bd);
    printf("  (%zu more sites changed: %s%s in all, %lld -> %lld blocks)\n", n - shown, rest >= 0 ? "+" : "", bd,
           (long long)rest_blocks[0], (long long)rest_blocks[1]);
  }
  if (!n) printf("  no site changed\n");
}

static cJSON *side_json(const ms_analysis *a, const totals *t, int k) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "path", a->snap->shown_path);
  ms_json_process(o, a->snap);
  cJSON_AddNumberToObject(o, "allocated_bytes", (double)t->bytes[k]);
  cJSON_AddNumberToObject(o, "blocks", (double)t->blocks[k]);
  return o;
}

static int print_json(const ms_analysis *a, ms_match_row *rows, size_t n, const ms_matches *m) {
  totals t = count(m);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddItemToObject(root, "a", side_json(&a[0], &t, 0));
  cJSON_AddItemToObject(root, "b", side_json(&a[1], &t, 1));
  cJSON_AddNumberToObject(root, "change_bytes", (double)(t.bytes[1] - t.bytes[0]));
  cJSON_AddNumberToObject(root, "change_blocks", (double)(t.blocks[1] - t.blocks[0]));
  cJSON_AddNumberToObject(root, "sites_in_both", (double)t.both);
  cJSON_AddNumberToObject(root, "sites_only_in_a", (double)t.only[0]);
  cJSON_AddNumberToObject(root, "sites_only_in_b", (double)t.only[1]);
  qsort(rows, n, sizeof *rows, by_change);
  cJSON *sites = cJSON_AddArrayToObject(root, "sites");
  for (size_t i = 0; i < n; i++) {
    const ms_match_row *x = &rows[i];
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
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text) return -1;
  puts(text);
  cJSON_free(text);
  return 0;
}

static int cmd_diff(int argc, char **argv) {
  ms_report_options o = {.max_frames = 4};
  ms_fold fold = {0};
  bool json = false;
  const char *paths[2] = {NULL, NULL};
  int np = 0;
  for (int i = 1; i < argc; i++) {
    int taken = ms_stack_option(&ms_diff_command, argc, argv, &i, &o, &fold);
    if (taken == 2) return 2;
    if (taken) continue;
    if (!strcmp(argv[i], "--json")) json = true;
    else if (argv[i][0] == '-' && argv[i][1]) return ms_unknown_option(&ms_diff_command, argv[i], i + 1 == argc);
    else if (np < 2) paths[np++] = argv[i];
    else return ms_usage_error(&ms_diff_command, "two snapshots: A.db B.db");
  }
  if (np != 2) return ms_usage_error(&ms_diff_command, "two snapshots: A.db B.db");
  ms_snapshot s[2];
  ms_analysis a[2];
  ms_matches m = {0};
  ms_match_row *rows = NULL;
  int rc = 1, done = 0;
  for (; done < 2; done++)
    if (ms_open_analyzed(&s[done], &a[done], paths[done], &fold, NULL) != 0) {
      fprintf(stderr, "error: %s\n", s[done].error);
      goto out;
    }
  if (ms_match_sites(a, 2, alive, &m) != 0) {
    fprintf(stderr, "error: out of memory comparing '%s' and '%s'\n", s[0].shown_path, s[1].shown_path);
    goto out;
  }
  /* The rows that changed (the others add nothing to the change), as copies to sort. */
  size_t n = 0;
  rows = malloc(sizeof *rows * (m.n ? m.n : 1));
  for (size_t r = 0; rows && r < m.n; r++)
    if (m.rows[r].bytes[0] != m.rows[r].bytes[1] || m.rows[r].count[0] != m.rows[r].count[1]) rows[n++] = m.rows[r];
  if (!rows || (json ? print_json(a, rows, n, &m) : (print_text(a, paths, rows, n, &m, &o), 0)) != 0) {
    fprintf(stderr, "error: out of memory\n");
    goto out;
  }
  rc = ms_output_status();
out:
  free(rows);
  ms_matches_free(&m);
  for (int k = 0; k < done; k++) {
    ms_analysis_free(&a[k]);
    ms_close(&s[k]);
  }
  return rc;
}

const ms_command ms_diff_command = {"diff", cmd_diff,
     "memsnap diff [--json] [--full-stacks] [--full-names] [--frames N] [--fold PATTERNS] A.db B.db\n"
     "                            what changed between two snapshots, by allocation site",
     "  A.db B.db           two snapshots, of one process or of two (two runs, two ranks): sites are\n"
     "                      matched by function, file and line (module and offset when unnamed)\n"
     "  --json              the comparison as JSON (docs/analysis-json.md)\n" MS_STACK_OPTIONS_HELP,
     true};
