/* export.c: `memsnap export [--format pytorch] SNAPSHOT.db -o OUT.pickle[.gz]`: a snapshot as a
 * PyTorch memory snapshot (pytorch/export.c does the work; docs/pytorch-snapshots.md). */
#include <string.h>

#include "commands.h"
#include "pytorch/pytorch.h"

static int cmd_export(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *format = "pytorch";
  for (int i = 1; i < argc; i++) {
    if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
    else if (argv[i][0] == '-' && argv[i][1]) {
      return ms_unknown_option(&ms_export_command, argv[i], i + 1 == argc);
    } else if (in) return ms_usage_error(&ms_export_command, "one snapshot at a time");
    else in = argv[i];
  }
  if (strcmp(format, "pytorch") != 0) return ms_usage_error(&ms_export_command, "the only format is 'pytorch'");
  if (!in) return ms_usage_error(&ms_export_command, "no snapshot given");
  if (!out) return ms_usage_error(&ms_export_command, "no output given (-o OUT.pickle)");
  return ms_export_to(in, out);
}

const ms_command ms_export_command = {"export", cmd_export,
     "memsnap export [--format pytorch] SNAPSHOT.db -o OUT.pickle[.gz]\n"
     "                            a snapshot as a PyTorch memory snapshot",
     "  SNAPSHOT.db         the snapshot to export\n"
     "  --format pytorch    the only format: PyTorch's snapshot pickle (torch.cuda._memory_viz)\n"
     "  -o, --output FILE   the pickle to write, gzip-compressed when it ends in .gz\n",
     false};
