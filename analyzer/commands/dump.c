/* dump.c: `memsnap dump PID`: asks a recording process for a snapshot, through its live mapping
 * (the process's watcher thread writes it, as --signal would, without a signal chosen at start). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "report/report.h"

static int cmd_dump(int argc, char **argv) {
  int timeout_s = 60;
  const char *pid = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 86400) return ms_usage_error(&ms_dump_command, "--timeout takes seconds, 1 to 86400");
      timeout_s = (int)v;
    } else if (argv[i][0] == '-') {
      return ms_unknown_option(&ms_dump_command, argv[i], i + 1 == argc);
    } else if (pid) {
      return ms_usage_error(&ms_dump_command, "one PID ('%s')", argv[i]);
    } else {
      pid = argv[i];
    }
  }
  if (!pid || strspn(pid, "0123456789") != strlen(pid))
    return ms_usage_error(&ms_dump_command, "a PID is needed (memsnap top lists the recorded processes)");
  char path[1100], written[1100];
  snprintf(path, sizeof path, "%s/memsnap-%s.live", ms_live_dir(), pid);
  if (memsnap_live_request_dump(path, timeout_s * 1000, written, sizeof written) != MEMSNAP_OK) {
    fprintf(stderr, "error: dump: %s\n", memsnap_last_error());
    return 1;
  }
  ms_neutralise(written);
  printf("%s\n", written);
  return 0;
}

const ms_command ms_dump_command = {"dump", cmd_dump,
     "memsnap dump [--timeout S] PID\n"
     "                            ask a recording process for a snapshot now",
     "  PID                 a process recording with memsnap (memsnap top lists them)\n"
     "  --timeout S         wait at most S seconds for it (default 60)\n"
     "  prints the snapshot's path (its MEMSNAP_DUMP, else memsnap-PID.db in its directory)\n",
     false};
