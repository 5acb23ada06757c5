/* main.c: the memsnap command-line tool: one table of commands, one function each.
 *
 * Exit codes: 0 success, 1 error, 2 usage. Messages: "error: ..." on stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands/commands.h"
#include "read/read.h"

static int cmd_help(int argc, char **argv);
static const ms_command help_command, version_command;

static int cmd_version(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[0], "version")) return ms_usage_error(&version_command, "no arguments expected ('%s')", argv[1]);
  (void)argv;
  printf("memsnap %s\n", MEMSNAP_VERSION);
  return 0;
}

static const ms_command help_command = {"help", cmd_help, "memsnap help [COMMAND]      show this help, or a command's", "  COMMAND             a command\n", false};
static const ms_command version_command = {"version", cmd_version, "memsnap version             print the version", "", false};

/* The command table: `memsnap help` lists them in this order. */
static const ms_command *const commands[] = {
    &ms_analyze_command, &ms_diff_command, &ms_info_command, &ms_import_command, &ms_export_command,
    &ms_run_command,     &ms_replay_command, &ms_predict_command, &help_command,  &version_command,   &ms_options_command,
    &ms_recover_command, &ms_top_command,    &ms_dump_command,
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
  fprintf(out, "usage: memsnap <command> [<args>]\n\ncommands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++) fprintf(out, "  %s\n", commands[i]->usage);
}

/* `memsnap help [COMMAND]` (argv[0] "help"), `memsnap --help`, `memsnap COMMAND --help`. */
static int cmd_help(int argc, char **argv) {
  bool asked = !strcmp(argv[0], "help");
  if (!asked || argc == 1) {
    usage(stdout);
    return 0;
  }
  if (argc > 2) return ms_usage_error(&help_command, "one command at most ('%s')", argv[2]);
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(commands[i]->name, argv[1]) != 0) continue;
    printf("usage: %s\n%s%s", commands[i]->usage, commands[i]->details[0] ? "\n" : "", commands[i]->details);
    if (commands[i]->folds) {
      printf("\nframes folded in any case (--full-stacks shows them):\n");
      ms_fold_print_builtin(stdout);
    }
    return 0;
  }
  return ms_usage_error(&help_command, "unknown command '%s'", argv[1]);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(argv[1], commands[i]->name) != 0) continue;
    if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) /* memsnap diff --help */
      return cmd_help(2, (char *[]){"help", argv[1], NULL});
    return commands[i]->run(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return cmd_help(argc, argv);
  if (!strcmp(argv[1], "--version")) return cmd_version(argc, argv);
  fprintf(stderr, "error: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
