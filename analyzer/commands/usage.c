/* usage.c: what every command shares when it reads its arguments and ends: usage errors that
 * name the command and print its usage line (each command's ms_command, defined in its file),
 * the options of the commands that print stacks, the card's memory of the commands that replay
 * (--capacity, --device), and the exit status for what went to stdout. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "replay/replay.h"
#include "report/report.h"

int ms_output_status(void) {
  if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
  fprintf(stderr, "error: cannot write the output: %s\n", strerror(errno));
  return 1;
}

int ms_usage_error(const ms_command *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "error: %s: ", c->name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fprintf(stderr, "usage: %s\n", c->usage);
  return 2;
}

int ms_unknown_option(const ms_command *c, const char *arg, bool last) {
  /* An option that takes a value, given last: its usage line shows it followed by the value's
     name ("--html OUT.html", "-o SNAPSHOT.db"). */
  size_t n = strlen(arg);
  for (const char *u = last && n ? strstr(c->usage, arg) : NULL; u; u = strstr(u + 1, arg)) {
    bool whole = (u == c->usage || u[-1] == ' ' || u[-1] == '[') && u[n] == ' ';
    if (whole && u[n + 1] && strchr("-|[]", u[n + 1]) == NULL) return ms_usage_error(c, "option '%s' needs a value", arg);
  }
  return ms_usage_error(c, "unknown option '%s'", arg);
}

int ms_stack_option(const ms_command *c, int argc, char **argv, int *i, ms_report_options *o, ms_fold *fold) {
  const char *arg = argv[*i];
  if (!strcmp(arg, "--full-stacks")) o->full_stacks = true;
  else if (!strcmp(arg, "--full-names")) o->full_names = true;
  else if (*i + 1 == argc || (strcmp(arg, "--frames") && strcmp(arg, "--fold"))) return 0;
  else if (!strcmp(arg, "--frames")) {
    o->max_frames = atoi(argv[++*i]);
    if (o->max_frames < 1 || o->max_frames > 4096) return ms_usage_error(c, "--frames takes 1 to 4096");
  } else if (ms_fold_add(fold, argv[++*i]) != 0) {
    return ms_usage_error(c, "at most %d --fold options", MS_FOLD_LISTS);
  }
  return 1;
}

int ms_capacity_option(const ms_command *c, const char *option, const char *value, uint64_t *capacity, const char **given) {
  if (*given)
    return ms_usage_error(c, "%s and %s both give the card's memory: one of them, once", *given, option);
  *given = !strcmp(option, "--device") ? "--device" : "--capacity";
  if (!strcmp(option, "--device")) {
    if (ms_replay_card(value, capacity, NULL) == 0) return 0;
    char names[512];
    ms_replay_card_names(names, sizeof names);
    return ms_usage_error(c, "--device: unknown card '%.64s' (known: %s; or --capacity SIZE)", value, names);
  }
  if (ms_replay_parse_size(value, capacity) == 0) return 0;
  return ms_usage_error(c, "--capacity: '%.64s' is not a size from 2M to 1024T (such as 40G)", value);
}
