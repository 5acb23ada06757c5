/* import.c: `memsnap import SNAPSHOT.pickle[.gz] -o SNAPSHOT.db`: a PyTorch memory snapshot
 * as a memsnap snapshot (import.c does the work). The output is written under a temporary name
 * beside it and renamed over it, so a failed import leaves what was there; it is never the
 * input. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "pytorch/pytorch.h"

static int cmd_import(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  for (int i = 1; i < argc; i++) {
    if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc) out = argv[++i];
    else if (argv[i][0] == '-' && argv[i][1]) return ms_unknown_option(&ms_import_command, argv[i], i + 1 == argc);
    else if (in) return ms_usage_error(&ms_import_command, "one snapshot at a time");
    else in = argv[i];
  }
  if (!in) return ms_usage_error(&ms_import_command, "no PyTorch snapshot given");
  if (!out) return ms_usage_error(&ms_import_command, "no output given (-o SNAPSHOT.db)");
  if (ms_import_to(in, out, true, NULL, 0) != 0) return 1;
  return ms_output_status();
}

const ms_command ms_import_command = {"import", cmd_import,
     "memsnap import SNAPSHOT.pickle[.gz] -o SNAPSHOT.db\n"
     "                            a PyTorch memory snapshot as a memsnap snapshot",
     "  SNAPSHOT.pickle     what torch.cuda.memory._dump_snapshot() wrote (gzip-compressed or not)\n"
     "  -o, --output FILE   the snapshot to write (docs/pytorch-snapshots.md)\n",
     false};
