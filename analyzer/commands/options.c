/* options.c: `memsnap options`: the options table of libmemsnap (recorder/options.c), each
 * MEMSNAP_* environment variable with its default and what it does. */
#include <stdio.h>

#include "commands.h"
#include "memsnap.h"

static int cmd_options(int argc, char **argv) {
  if (argc > 1) return ms_usage_error(&ms_options_command, "no arguments expected ('%s')", argv[1]);
  (void)argv;
  const char *var, *def, *comment;
  for (int i = 0; (var = memsnap_option_info(i, &def, &comment)) != NULL; i++)
    printf("%-40s %-10s %s\n", var, def, comment);
  return 0;
}

const ms_command ms_options_command = {"options", cmd_options, "memsnap options             list the MEMSNAP_* environment variables", "", false};
