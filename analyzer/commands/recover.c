/* recover.c: `memsnap recover FILE...`: the snapshot of a process that died while recording,
 * written from its live mapping (MEMSNAP_LIVE_DIR/memsnap-PID.live; docs/recover.md), for a
 * program recorded without `memsnap run` (memsnap.record(), MEMSNAP_RECORD=1). With no FILE, every
 * mapping in the live directory whose process is gone. Only the caller's own files are read (a
 * link or another user's file is refused: docs/RELIABILITY.md), unless --any-owner names one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "report/report.h"

static int recover_one(const char *path, const char *output, bool keep) {
  memsnap_recover_options o = {0, -1, 0, 0, keep};
  memsnap_live_info_t info;
  char shown[1200], ended[200];
  snprintf(shown, sizeof shown, "%s", path);
  ms_neutralise(shown);
  if (memsnap_live_info(path, &info) == MEMSNAP_OK && info.alive) {
    fprintf(stderr, "error: recover: process %d ('%s') still runs: memsnap top %d shows it, memsnap dump %d asks it "
            "for a snapshot\n", info.pid, shown, info.pid, info.pid);
    return 1;
  }
  if (memsnap_recover(path, output, &o, &info) != MEMSNAP_OK) {
    fprintf(stderr, "error: recover: %s\n", memsnap_last_error());
    return 1;
  }
  ms_live_describe_end(&info, info.end_signal, -1, ended, sizeof ended);
  char snap[1100];
  snprintf(snap, sizeof snap, "%s", info.snapshot);
  ms_neutralise(snap);
  printf("recovered %s: process %d (%s) %s\n", snap, info.pid, info.program, ended);
  printf("  %llu events%s", (unsigned long long)info.events, info.dropped ? "" : "\n");
  if (info.dropped) printf(", %llu earlier ones dropped (--max-entries keeps more)\n", (unsigned long long)info.dropped);
  printf("  report: memsnap analyze %s\n", snap);
  return 0;
}

static int cmd_recover(int argc, char **argv) {
  const char *output = NULL;
  bool keep = false, any_owner = false;
  int first = argc;
  for (int i = 1; i < argc; i++) {
    if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc) output = argv[++i];
    else if (!strcmp(argv[i], "--keep")) keep = true;
    else if (!strcmp(argv[i], "--any-owner")) any_owner = true;
    else if (argv[i][0] == '-') return ms_unknown_option(&ms_recover_command, argv[i], i + 1 == argc);
    else {
      first = i;
      break;
    }
  }
  for (int i = first; i < argc; i++)
    if (argv[i][0] == '-') return ms_usage_error(&ms_recover_command, "options go before the files ('%s')", argv[i]);
  if (output && argc - first > 1) return ms_usage_error(&ms_recover_command, "-o takes one FILE");
  if (any_owner && first == argc)
    return ms_usage_error(&ms_recover_command, "--any-owner reads only the FILEs named (none is)");
  if (any_owner) memsnap_live_any_owner(1); /* on purpose: the files named, whoever owns them */
  int rc = 0;
  ms_live_sweep_unfinished(ms_live_dir()); /* half-made mappings of dead processes: nothing to recover */
  if (first < argc) {
    for (int i = first; i < argc; i++) rc |= recover_one(argv[i], output, keep);
    return rc;
  }
  ms_live_entry *e;
  size_t n = ms_live_list(ms_live_dir(), false, &e), done = 0;
  for (size_t i = 0; i < n; i++) {
    if (e[i].info.alive) continue;
    rc |= recover_one(e[i].path, output, keep);
    done++;
  }
  free(e);
  if (!done) {
    fprintf(stderr, "error: recover: no live mapping of a process that ended in '%s'\n", ms_live_dir());
    return 1;
  }
  return rc;
}

const ms_command ms_recover_command = {"recover", cmd_recover,
     "memsnap recover [-o PATH] [--keep] [--any-owner] [FILE...]\n"
     "                            the snapshot of a process that died, from its live mapping",
     "  FILE                a live mapping (MEMSNAP_LIVE_DIR, default /dev/shm/memsnap-UID:\n"
     "                      memsnap-PID.live); with none, every one of yours whose process has ended\n"
     "  -o, --output PATH   the snapshot to write (default: the process's MEMSNAP_DUMP, else\n"
     "                      memsnap-PID.db); %p is the process's pid\n"
     "  --keep              keep the mapping (by default it is removed once the snapshot is written)\n"
     "  --any-owner         read the FILEs named even when another user owns them (by default\n"
     "                      refused: their bytes are that user's; docs/RELIABILITY.md)\n"
     "  docs/recover.md says what a recovered snapshot holds and lacks\n",
     false};
