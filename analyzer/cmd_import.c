/* cmd_import.c: `memsnap import SNAPSHOT.pickle[.gz] -o SNAPSHOT.db`: a PyTorch memory snapshot
 * as a memsnap snapshot (import.c does the work). The output is written under a temporary name
 * beside it and renamed over it, so a failed import leaves what was there; it is never the
 * input. */
#include <stdio.h>
#include <string.h>

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
  if (ms_import_to(in, out, true) != 0) return 1;
  return ms_output_status();
}
