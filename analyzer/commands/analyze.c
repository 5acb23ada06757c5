/* analyze.c: `memsnap analyze [options] SNAPSHOT.db...`: the analysis as a report (analysis/analyze.c,
 * report/text.c, report/json.c). With 2 to 7 snapshots: a table side by side, then each report;
 * with --json, {"snapshots": [analysis, ...]}; with --html, one page with a selector between them
 * (and between the devices of a snapshot on several: report/page_set.c). With 8 to 1000 (a job's
 * ranks): the table of ranks, the rank that stands out and what makes its difference against the
 * median rank (analysis/ranks.c, report/ranks.c); with --json, {"ranks": ...}. For one snapshot,
 * the replay's suggestions (replay/suggest.c) run after the analysis, and the reports write them
 * (--no-suggest: not run). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "replay/replay.h"
#include "report/report.h"

/* With MS_RANKS_MIN snapshots or more (a job's ranks): the table of ranks, the rank that stands
 * out and what makes its difference against the median rank (analysis/ranks.c, report/ranks.c),
 * instead of a report each. */
static int analyze_ranks(const char *const *paths, size_t n, const ms_fold *fold, const ms_analyze_options *ao,
                         const ms_report_options *o, bool json) {
  ms_rank *r = calloc(n, sizeof *r);
  char err[256];
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (!r) {
    fprintf(stderr, "error: out of memory\n");
    return 1;
  }
  if (ms_ranks_summarize(paths, n, fold, ao, cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus, isatty(2), r, err, sizeof err) != 0) {
    fprintf(stderr, "error: %s\n", err);
    free(r);
    return 1;
  }
  ms_ranks_verdict v;
  ms_ranks_judge(r, n, &v);
  /* the difference: the median rank's analysis against the outlier's */
  ms_snapshot s[2];
  ms_analysis pair[2];
  ms_comparison c = {0};
  int opened = 0;
  bool compared = false;
  for (; v.outlier >= 0 && opened < 2; opened++) {
    ptrdiff_t which = opened ? v.outlier : v.median;
    if (ms_open_analyzed(&s[opened], &pair[opened], paths[which], fold, ao) != 0) {
      fprintf(stderr, "warning: %s\n", s[opened].error);
      break;
    }
  }
  if (opened == 2) compared = ms_compare(pair, &c) == 0;
  int rc = 0;
  if (json) {
    cJSON *root = ms_ranks_json(r, paths, n, &v, compared ? pair : NULL, compared ? &c : NULL);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (text) puts(text);
    else fprintf(stderr, "error: out of memory writing JSON\n"), rc = 1;
    cJSON_free(text);
  } else {
    ms_report_ranks_text(r, paths, n, &v, compared ? pair : NULL, compared ? &c : NULL, o, stdout);
  }
  ms_comparison_free(&c);
  for (int k = 0; k < opened; k++) {
    ms_analysis_free(&pair[k]);
    ms_close(&s[k]);
  }
  free(r);
  return rc ? rc : ms_output_status();
}

static int cmd_analyze(int argc, char **argv) {
  ms_report_options o = {.max_frames = 4};
  ms_fold fold = {0};
  bool json = false;
  const char *html = NULL;
  ms_category_rules categories = {0};
  ms_analyze_options ao = {.categories = &categories};
  ms_suggest_options so = {0};
  const char *paths[MS_RANKS_MAX];
  int npaths = 0;
  for (int i = 1; i < argc; i++) {
    int taken = ms_stack_option(&ms_analyze_command, argc, argv, &i, &o, &fold);
    if (taken == 2) return 2;
    if (taken) continue;
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) ao.label = argv[++i];
    else if (!strcmp(argv[i], "--category") && i + 1 < argc) {
      if (ms_category_rule_add(&categories, argv[++i]) != 0)
        return ms_usage_error(&ms_analyze_command, "--category takes NAME=PATTERN[,PATTERN...] (NAME of letters, digits, '_', '-', '.'; at most %d): '%s'",
                              MS_CATEGORY_RULES, argv[i]);
    }
    else if (!strcmp(argv[i], "--html") && i + 1 < argc) html = argv[++i];
    else if (!strcmp(argv[i], "--no-suggest")) so.disabled = true;
    else if (!strcmp(argv[i], "--suggest-time") && i + 1 < argc) {
      char *end;
      so.time_limit_s = strtod(argv[++i], &end);
      if (*end || !(so.time_limit_s >= 0.001 && so.time_limit_s <= 86400))
        return ms_usage_error(&ms_analyze_command, "--suggest-time takes seconds, from 0.001 to 86400: '%s'", argv[i]);
    }
    else if (argv[i][0] == '-' && argv[i][1]) {
      return ms_unknown_option(&ms_analyze_command, argv[i], i + 1 == argc);
    } else if (npaths == MS_RANKS_MAX) {
      return ms_usage_error(&ms_analyze_command, "at most %d snapshots at once", MS_RANKS_MAX);
    } else {
      paths[npaths++] = argv[i];
    }
  }
  if (!npaths) return ms_usage_error(&ms_analyze_command, "no snapshot given");
  if (html && json) return ms_usage_error(&ms_analyze_command, "--html and --json: choose one");
  if (html && npaths > 64) return ms_usage_error(&ms_analyze_command, "--html: at most 64 snapshots in one page");
  if (npaths >= MS_RANKS_MIN && !html) return analyze_ranks(paths, (size_t)npaths, &fold, &ao, &o, json);
  ms_snapshot *s = calloc((size_t)npaths, sizeof *s);
  ms_analysis *a = calloc((size_t)npaths, sizeof *a);
  if (!s || !a) {
    free(s);
    free(a);
    fprintf(stderr, "error: out of memory\n");
    return 1;
  }
  int rc = 0, done = 0;
  for (; done < npaths; done++) {
    if (ms_open_analyzed(&s[done], &a[done], paths[done], &fold, &ao) != 0) {
      fprintf(stderr, "error: %s\n", s[done].error);
      rc = 1;
      break;
    }
  }
  ms_suggestions *suggestions = rc == 0 && npaths == 1 ? malloc(sizeof *suggestions) : NULL;
  if (suggestions) { /* the replay's, after the analysis: the reports write them */
    ms_suggest(&a[0], &so, suggestions);
    a[0].suggestions = suggestions;
  }
  if (rc == 0 && html) {
    rc = ms_write_html(html, a, (size_t)npaths, &ao);
  } else if (rc == 0 && json) {
    if (npaths > 1) printf("{\"snapshots\": [\n");
    for (int i = 0; i < npaths && rc == 0; i++) {
      if (i) printf(",\n");
      if (ms_report_json(&a[i], stdout) != 0) {
        fprintf(stderr, "error: out of memory writing JSON\n");
        rc = 1;
      }
    }
    if (npaths > 1 && rc == 0) {
      printf("],\n\"matched_leaks\": ");
      if (ms_report_json_matched(a, (size_t)npaths, stdout) != 0) {
        fprintf(stderr, "error: out of memory writing JSON\n");
        rc = 1;
      }
      printf("}\n");
    }
  } else if (rc == 0) {
    if (npaths > 1) ms_report_side_by_side(a, (size_t)npaths, stdout);
    for (int i = 0; i < npaths; i++) {
      if (npaths > 1) printf("\n");
      ms_report_text(&a[i], &o, stdout);
    }
  }
  if (rc == 0 && !html) rc = ms_output_status();
  for (int i = 0; i < done; i++) {
    ms_analysis_free(&a[i]);
    ms_close(&s[i]);
  }
  free(suggestions);
  free(s);
  free(a);
  return rc;
}

const ms_command ms_analyze_command = {"analyze", cmd_analyze,
     "memsnap analyze [--json | --html OUT.html] [--full-stacks] [--full-names] [--frames N]\n"
     "                [--fold PATTERNS] [--iterations LABEL] [--category NAME=PATTERN]...\n"
     "                [--no-suggest] [--suggest-time SECONDS] SNAPSHOT.db...\n"
     "                            peaks, iterations, leak candidates, OOMs, retries, suggestions, top sites",
     "  SNAPSHOT.db...      snapshots to analyze; 2 to 7: a table side by side and their leak\n"
     "                      candidates matched by site, then each report; 8 to 1000 (a job's ranks):\n"
     "                      the table of ranks, the rank that stands out and the sites that make\n"
     "                      its difference against the median rank\n"
     "  --json              the analysis as JSON (docs/analysis-json.md)\n"
     "  --html OUT.html     the report as a self-contained page (docs/viewer.md); several snapshots,\n"
     "                      or one with memory on several devices: one page, a selector in its header\n"
     "                      switching every view between them (a snapshot's devices one by one)\n" MS_STACK_OPTIONS_HELP
     "  --iterations LABEL  the mark or range label that starts an iteration (default: the one\n"
     "                      that repeats most, else from the stacks or the allocation pattern)\n"
     "  --category NAME=PATTERN[,PATTERN...]\n"
     "                      memory of the allocation sites whose stack has a frame matching a\n"
     "                      pattern (--fold's: NAME or NAME@FILE globs) is category NAME, before the\n"
     "                      built-in rules (docs/categories.md; repeatable, 16 at most)\n"
     "  --no-suggest        no suggestions: the replay's sweep of allocator settings is not run (it\n"
     "                      runs for one snapshot of at most 500000 events, on every core; else\n"
     "                      memsnap replay --sweep gives them; docs/replay.md)\n"
     "  --suggest-time SECONDS\n"
     "                      the sweep's time limit (default 3); settings not replayed by then are\n"
     "                      left out, and the report says so\n",
     true};
