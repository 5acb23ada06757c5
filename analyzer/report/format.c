/* format.c: how the text reports write numbers and stacks: bytes and times in the units that
 * read (ms_format_bytes, ms_format_ns) and a stack as its frames that matter (ms_print_stack), for
 * text.c and the reports beside it (causes.c, diff.c, ranks.c, live.c) and the commands.
 */
#include <stdio.h>
#include <string.h>

#include "report.h"

void ms_format_bytes(int64_t bytes, char *out, size_t len) {
  const char *sign = bytes < 0 ? "-" : "";
  double v = (double)(bytes < 0 ? 0 - (uint64_t)bytes : (uint64_t)bytes); /* INT64_MIN too */
  if (v < 1024) snprintf(out, len, "%s%.0f B", sign, v);
  else if (v < 1048576.0) snprintf(out, len, "%s%.2f KiB", sign, v / 1024.0);
  else if (v < 1073741824.0) snprintf(out, len, "%s%.2f MiB", sign, v / 1048576.0);
  else snprintf(out, len, "%s%.2f GiB", sign, v / 1073741824.0);
}

void ms_format_ns(int64_t ns, char *out, size_t len) {
  double v = (double)ns;
  if (ns < 1000) snprintf(out, len, "%lld ns", (long long)ns);
  else if (ns < 1000000) snprintf(out, len, "%.1f us", v / 1e3);
  else if (ns < 1000000000) snprintf(out, len, "%.1f ms", v / 1e6);
  else snprintf(out, len, "%.2f s", v / 1e9);
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

void ms_print_stack(const ms_snapshot *s, uint32_t stack_id, const char *note, const ms_report_options *o,
                    const char *indent, FILE *out) {
  if (stack_id == 0 || stack_id >= s->nstacks) {
    fprintf(out, "%s(%s)\n", indent, note ? note : "no stack recorded");
    return;
  }
  uint32_t ids[4096];
  size_t n;
  uint32_t program = 0; /* the innermost frame of the program's own code, when folding cuts it */
  bool cut = false;
  if (o->full_stacks) {
    const ms_stack *k = &s->stacks[stack_id];
    n = k->depth < 4096 ? k->depth : 4096;
    memcpy(ids, k->frames, sizeof *ids * n);
  } else {
    size_t all = ms_stack_frames_that_matter(s, stack_id, ids, 4096);
    n = all < (size_t)o->max_frames ? all : (size_t)o->max_frames;
    size_t i = ms_first_program_frame(s, ids, all);
    if (i < all && i >= n) cut = true, program = ids[i];
    if (cut && n == 1) n = 0; /* one line (a brief summary): the program's own line */
  }
  for (size_t i = 0; i < n + cut; i++) {
    const ms_frame *f = &s->frames[i == n ? program : ids[i]];
    const char *name = o->full_names ? f->name : f->short_name;
    const char *more = i == n ? "... " : ""; /* frames left out before the program's line */
    if (i == n && n > 0) fprintf(out, "%s...\n", indent), more = "";
    if (f->file[0] && f->line > 0)
      fprintf(out, "%s%s%s (%s:%lld%s)\n", indent, more, name, o->full_stacks ? f->file : base_name(f->file),
              (long long)f->line, f->inlined ? ", inlined" : "");
    else if (!f->python && f->module[0]) fprintf(out, "%s%s%s [%s]\n", indent, more, name, base_name(f->module));
    else fprintf(out, "%s%s%s\n", indent, more, name);
  }
}
