/* cmd_analyze.c: `memsnap analyze [options] SNAPSHOT.db`: the analysis as a report (analysis.c,
 * report.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"
#include "commands.h"

int cmd_analyze(int argc, char **argv) {
  ms_report_options o = {false, 4};
  bool json = false;
  const char *label = NULL, *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--full-stacks")) o.full_stacks = true;
    else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) label = argv[++i];
    else if (!strcmp(argv[i], "--frames") && i + 1 < argc) {
      o.max_frames = atoi(argv[++i]);
      if (o.max_frames < 1 || o.max_frames > 4096) return ms_usage_error("analyze", "--frames takes 1 to 4096");
    } else if (argv[i][0] == '-' && argv[i][1]) {
      char msg[128];
      snprintf(msg, sizeof msg, "unknown option '%s'", argv[i]);
      return ms_usage_error("analyze", msg);
    } else if (path) {
      return ms_usage_error("analyze", "one snapshot at a time");
    } else {
      path = argv[i];
    }
  }
  if (!path) return ms_usage_error("analyze", "no snapshot given");
  ms_snapshot s;
  if (ms_open(&s, path) != 0) {
    fprintf(stderr, "error: %s\n", s.error);
    return 1;
  }
  ms_analysis a;
  int rc = 0;
  if (ms_analyze(&s, &a, label) != 0) {
    fprintf(stderr, "error: %s\n", s.error);
    rc = 1;
  } else if (json) {
    if (ms_report_json(&a, stdout) != 0) {
      fprintf(stderr, "error: out of memory writing JSON\n");
      rc = 1;
    }
  } else {
    ms_report_text(&a, &o, stdout);
  }
  ms_analysis_free(&a);
  ms_close(&s);
  return rc;
}
