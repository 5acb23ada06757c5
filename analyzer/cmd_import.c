/* cmd_import.c: `memsnap import SNAPSHOT.pickle[.gz] -o SNAPSHOT.db`: a PyTorch memory snapshot
 * as a memsnap snapshot (import.c does the work). The output is written under a temporary name
 * beside it and renamed over it, so a failed import leaves what was there; it is never the
 * input. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "analyzer.h"
#include "commands.h"

int cmd_import(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  for (int i = 1; i < argc; i++) {
    if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc) out = argv[++i];
    else if (argv[i][0] == '-' && argv[i][1]) return ms_unknown_option("import", argv[i], i + 1 == argc);
    else if (in) return ms_usage_error("import", "one snapshot at a time");
    else in = argv[i];
  }
  if (!in) return ms_usage_error("import", "no PyTorch snapshot given");
  if (!out) return ms_usage_error("import", "no output given (-o SNAPSHOT.db)");
  if (ms_refuse_overwrite("-o", out, &in, 1)) return 1;
  char tmp[PATH_MAX + 32];
  ms_temp_path(out, tmp, sizeof tmp);
  unlink(tmp);
  ms_import_result r;
  if (ms_import_file(in, tmp, true, &r) != 0) {
    unlink(tmp);
    fprintf(stderr, "error: %s\n", r.error);
    return 1;
  }
  if (ms_commit(tmp, out) != 0) {
    fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
    return 1;
  }
  if (r.skipped)
    fprintf(stderr, "warning: '%s': %" PRId64 " trace entries with actions memsnap has no kind for (the first: '%s') "
            "were left out\n", in, r.skipped, r.skipped_action);
  if (r.unmatched_ends)
    fprintf(stderr, "warning: '%s': %" PRId64 " annotation ENDs had no START (started before recording)\n", in,
            r.unmatched_ends);
  printf("imported %s: %" PRId64 " trace entries, %" PRId64 " segments, %" PRId64 " blocks -> %s\n", in, r.entries,
         r.segments, r.blocks, out);
  return ms_output_status();
}
