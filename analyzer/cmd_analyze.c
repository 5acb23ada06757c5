/* cmd_analyze.c: `memsnap analyze [options] SNAPSHOT.db...`: the analysis as a report (analysis.c,
 * report.c). With several snapshots (one per rank, say): a table side by side, then each
 * report; with --json, {"snapshots": [analysis, ...]}. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer.h"
#include "commands.h"

/* Writes text as HTML with every character that could open markup escaped. */
static void write_escaped(FILE *out, const char *text, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '<') fputs("&lt;", out);
    else if (c == '>') fputs("&gt;", out);
    else if (c == '&') fputs("&amp;", out);
    else if (c == '"') fputs("&quot;", out);
    else if (c == '\'') fputs("&#39;", out);
    else if (c < 32 && c != '\n' && c != '\t') fprintf(out, "&#%u;", c);
    else fputc(c, out);
  }
}

/* The report page (until the viewer exists: the text report in a page that loads nothing).
 * Written beside `out` and renamed over it; never over one of the inputs. 0, or 1 (message). */
static int write_html(const char *out, ms_analysis *a, size_t n, const ms_report_options *o) {
  char real_out[PATH_MAX], real_in[PATH_MAX], tmp[PATH_MAX + 32];
  for (size_t i = 0; i < n; i++)
    if (realpath(a[i].snap->path, real_in) && realpath(out, real_out) && strcmp(real_in, real_out) == 0) {
      fprintf(stderr, "error: --html '%s' is an input snapshot: refusing to overwrite it\n", out);
      return 1;
    }
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) {
    fprintf(stderr, "error: out of memory\n");
    return 1;
  }
  if (n > 1) ms_report_side_by_side(a, n, mem);
  for (size_t i = 0; i < n; i++) ms_report_text(&a[i], o, mem);
  fclose(mem);
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", out, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
    free(text);
    return 1;
  }
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
        "<title>memsnap report</title>\n<style>body{font:14px system-ui,sans-serif;margin:2em}"
        "pre{font:13px ui-monospace,monospace;background:#f6f6f6;padding:1em;overflow:auto}</style>\n"
        "</head><body>\n<h1>memsnap report</h1>\n<pre>", f);
  write_escaped(f, text, len);
  fputs("</pre>\n</body></html>\n", f);
  free(text);
  bool ok = !ferror(f);
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, out) != 0) {
    fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
    unlink(tmp);
    return 1;
  }
  return 0;
}

int cmd_analyze(int argc, char **argv) {
  ms_report_options o = {false, 4};
  bool json = false;
  const char *label = NULL, *html = NULL;
  const char *paths[64];
  int npaths = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--full-stacks")) o.full_stacks = true;
    else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) label = argv[++i];
    else if (!strcmp(argv[i], "--html") && i + 1 < argc) html = argv[++i];
    else if (!strcmp(argv[i], "--frames") && i + 1 < argc) {
      o.max_frames = atoi(argv[++i]);
      if (o.max_frames < 1 || o.max_frames > 4096) return ms_usage_error("analyze", "--frames takes 1 to 4096");
    } else if (argv[i][0] == '-' && argv[i][1]) {
      char msg[128];
      snprintf(msg, sizeof msg, "unknown option '%s'", argv[i]);
      return ms_usage_error("analyze", msg);
    } else if (npaths == 64) {
      return ms_usage_error("analyze", "at most 64 snapshots at once");
    } else {
      paths[npaths++] = argv[i];
    }
  }
  if (!npaths) return ms_usage_error("analyze", "no snapshot given");
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
    if (ms_open(&s[done], paths[done]) != 0 || ms_analyze(&s[done], &a[done], label) != 0) {
      fprintf(stderr, "error: %s\n", s[done].error);
      ms_close(&s[done]);
      rc = 1;
      break;
    }
  }
  if (rc == 0 && html) {
    rc = write_html(html, a, (size_t)npaths, &o);
  } else if (rc == 0 && json) {
    if (npaths > 1) printf("{\"snapshots\": [\n");
    for (int i = 0; i < npaths && rc == 0; i++) {
      if (i) printf(",\n");
      if (ms_report_json(&a[i], stdout) != 0) {
        fprintf(stderr, "error: out of memory writing JSON\n");
        rc = 1;
      }
    }
    if (npaths > 1) printf("]}\n");
  } else if (rc == 0) {
    if (npaths > 1) ms_report_side_by_side(a, (size_t)npaths, stdout);
    for (int i = 0; i < npaths; i++) {
      if (npaths > 1) printf("\n");
      ms_report_text(&a[i], &o, stdout);
    }
  }
  for (int i = 0; i < done; i++) {
    ms_analysis_free(&a[i]);
    ms_close(&s[i]);
  }
  free(s);
  free(a);
  return rc;
}
