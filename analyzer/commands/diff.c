/* diff.c: `memsnap diff [--json] A.db B.db`: what changed between two snapshots, by
 * allocation site (analysis/compare.c compares, report/diff.c writes it out). The text lists
 * the 15 largest changes and sums the rest on one line; the JSON lists them all
 * (docs/analysis-json.md, "memsnap diff --json"). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "report/report.h"

#define SHOWN 15 /* sites the text lists */

static void print_text(const ms_analysis *a, const char *const *paths, ms_comparison *c, const ms_report_options *o) {
  char b0[32], b1[32], bd[32];
  ms_format_bytes(c->bytes[0], b0, sizeof b0);
  ms_format_bytes(c->bytes[1], b1, sizeof b1);
  ms_format_bytes(c->bytes[1] - c->bytes[0], bd, sizeof bd);
  printf("memsnap diff\n  A: %s (pid %lld)\n  B: %s (pid %lld)\n", paths[0], (long long)a[0].snap->pid, paths[1],
         (long long)a[1].snap->pid);
  printf("  allocated: %s -> %s (%s%s), %lld -> %lld blocks\n", b0, b1, c->bytes[1] >= c->bytes[0] ? "+" : "", bd,
         (long long)c->blocks[0], (long long)c->blocks[1]);
  printf("  sites matched by function, file and line: %zu in both, %zu only in A, %zu only in B\n\n", c->both, c->only[0],
         c->only[1]);
  printf("sites by change (allocated at the snapshot)\n");
  ms_report_diff_sites(a, c, SHOWN, (const char *const[]){"A", "B"}, o, "  ", stdout);
}

static int print_json(const ms_analysis *a, const ms_comparison *c) {
  cJSON *root = ms_diff_json(a, c);
  char *text = root ? cJSON_Print(root) : NULL;
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
  ms_comparison c = {0};
  int rc = 1, done = 0;
  for (; done < 2; done++)
    if (ms_open_analyzed(&s[done], &a[done], paths[done], &fold, NULL) != 0) {
      fprintf(stderr, "error: %s\n", s[done].error);
      goto out;
    }
  if (ms_compare(a, &c) != 0) {
    fprintf(stderr, "error: out of memory comparing '%s' and '%s'\n", s[0].shown_path, s[1].shown_path);
    goto out;
  }
  if ((json ? print_json(a, &c) : (print_text(a, paths, &c, &o), 0)) != 0) {
    fprintf(stderr, "error: out of memory\n");
    goto out;
  }
  rc = ms_output_status();
out:
  ms_comparison_free(&c);
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
