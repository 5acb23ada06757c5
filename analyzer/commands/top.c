/* top.c: `memsnap top [PID]`: a recorded program's memory while it runs, read from its live
 * mapping (docs/recover.md) once a second, without stopping or slowing it: allocated and reserved
 * now and their peaks, the iterations with their peaks, the sites growing fastest (the leak
 * analysis of the history so far) and the largest live sites. ANSI only (ssh, tmux); q quits.
 * --once prints one frame; --json one frame as JSON (an array when several processes). */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "report/report.h"

static volatile sig_atomic_t stop;
static void on_stop(int sig) {
  (void)sig;
  stop = 1;
}

static int print_json(char **paths, size_t n) {
  cJSON *all = n == 1 ? NULL : cJSON_CreateArray();
  int rc = 0;
  bool oom = n != 1 && !all;
  for (size_t i = 0; i < n; i++) {
    ms_live_view v;
    char err[512];
    if (ms_live_frame(paths[i], &v, err, sizeof err) != 0) {
      fprintf(stderr, "error: top: %s\n", err);
      rc = 1;
      continue;
    }
    cJSON *o = ms_live_json(&v);
    if (all) cJSON_AddItemToArray(all, o);
    else if (ms_json_print(o, true, stdout) != 0) oom = true;
  }
  if (all && ms_json_print(all, true, stdout) != 0) oom = true;
  if (oom) fprintf(stderr, "error: top: out of memory writing JSON\n");
  return rc || oom ? 1 : ms_output_status();
}

static int cmd_top(int argc, char **argv) {
  bool once = false, json = false;
  double interval = 1.0;
  const char *pid = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--once")) once = true;
    else if (!strcmp(argv[i], "--json")) json = once = true;
    else if (!strcmp(argv[i], "--interval") && i + 1 < argc) {
      char *end;
      interval = strtod(argv[++i], &end);
      if (*end || interval < 0.1 || interval > 3600) return ms_usage_error(&ms_top_command, "--interval takes seconds, 0.1 to 3600");
    } else if (argv[i][0] == '-') {
      return ms_unknown_option(&ms_top_command, argv[i], i + 1 == argc);
    } else if (pid) {
      return ms_usage_error(&ms_top_command, "one PID ('%s')", argv[i]);
    } else {
      pid = argv[i];
    }
  }
  if (pid && (!*pid || strspn(pid, "0123456789") != strlen(pid)))
    return ms_usage_error(&ms_top_command, "PID is a process id ('%s')", pid);
  char one[1100], *paths[64];
  size_t n = 0;
  ms_live_entry *e = NULL;
  if (pid) {
    snprintf(one, sizeof one, "%s/memsnap-%s.live", ms_live_dir(), pid);
    memsnap_live_info_t info;
    if (memsnap_live_info(one, &info) != MEMSNAP_OK) {
      fprintf(stderr, "error: top: process %s records nothing memsnap can read ('%s': %s)\n", pid, one, memsnap_last_error());
      return 1;
    }
    paths[n++] = one;
  } else {
    size_t found = ms_live_list(ms_live_dir(), true, &e);
    for (size_t i = 0; i < found && n < 64; i++) paths[n++] = e[i].path;
    if (!n) {
      fprintf(stderr, "error: top: no recorded process is running (none has a live mapping in '%s')\n", ms_live_dir());
      free(e);
      return 1;
    }
  }
  int rc = 0;
  if (json) {
    rc = print_json(paths, n);
  } else if (once) {
    ms_live_draw((const char *const *)paths, n, "", stdout);
    rc = ms_output_status();
  } else {
    struct sigaction sa = {0};
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    ms_term_raw(true);
    fputs("\033[2J", stdout);
    while (!stop) {
      ms_live_draw((const char *const *)paths, n, n > 1 ? "several processes: memsnap top PID shows one" : "", stdout);
      bool any = false;
      for (size_t i = 0; i < n; i++) {
        memsnap_live_info_t info;
        any |= memsnap_live_info(paths[i], &info) == MEMSNAP_OK && info.alive;
      }
      if (!any) break; /* every process ended (its mapping is gone or left for memsnap recover) */
      int key = ms_term_key((int)(interval * 1000));
      if (key == 'q' || key == 'Q' || key == -2) break;
    }
    ms_term_raw(false);
  }
  free(e);
  return rc;
}

const ms_command ms_top_command = {"top", cmd_top,
     "memsnap top [--once] [--json] [--interval S] [PID]\n"
     "                            a recorded program's memory, live, while it runs",
     "  PID                 a process recording with memsnap (default: the recorded processes\n"
     "                      running now; several, such as a job's ranks, are shown together)\n"
     "  --once              print one frame and end\n"
     "  --json              one frame as JSON: pid, program, allocated_bytes, reserved_bytes,\n"
     "                      peak_allocated_bytes, peak_reserved_bytes, iterations, growing...\n"
     "                      (an array with several processes)\n"
     "  --interval S        seconds between frames (default 1)\n"
     "  q quits; the program is read, never stopped (docs/recover.md)\n",
     false};
