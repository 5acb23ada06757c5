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

/* The command table, grouped by what a user wants to do: `memsnap help` lists it in this order, a
 * line a command: its shortest form and what it does (the full forms: `memsnap help COMMAND`). A
 * group's heading starts its first command. */
static const struct {
  const char *group, *form, *what;
  const ms_command *command;
} commands[] = {
    {"record: what a program does with GPU memory", "run -- PROGRAM [ARGS...]",
     "record a program, unchanged", &ms_run_command},
    {"understand: where the memory went", "analyze SNAPSHOT.db...",
     "peaks, leaks, OOMs: text, JSON, page", &ms_analyze_command},
    {NULL, "diff A.db B.db", "what changed, by allocation site", &ms_diff_command},
    {NULL, "info SNAPSHOT.db...", "what a snapshot holds", &ms_info_command},
    {"predict: will it fit, and with which settings", "replay SNAPSHOT.db",
     "under other settings, or --sweep", &ms_replay_command},
    {NULL, "predict A.db=SIZE B.db=SIZE", "peaks at other sizes; what fits", &ms_predict_command},
    {"convert: PyTorch's memory snapshots", "import SNAPSHOT.pickle -o OUT.db",
     "PyTorch's snapshot as memsnap's", &ms_import_command},
    {NULL, "export SNAPSHOT.db -o OUT.pickle", "for PyTorch's memory viz", &ms_export_command},
    {"watch: a program while it runs, or after it died", "top [PID]",
     "its memory live, once a second", &ms_top_command},
    {NULL, "dump PID", "ask a running program for a snapshot", &ms_dump_command},
    {NULL, "recover [FILE...]", "a killed program's snapshot", &ms_recover_command},
    {"more", "options", "the MEMSNAP_* variables", &ms_options_command},
    {NULL, "help [COMMAND]", "this list, or a command's full form", &help_command},
    {NULL, "version", "the version", &version_command},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
  fprintf(out, "usage: memsnap <command> [<args>]\n");
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (commands[i].group) fprintf(out, "\n%s\n", commands[i].group);
    fprintf(out, "  memsnap %-33s %s\n", commands[i].form, commands[i].what);
  }
  fprintf(out, "\n'memsnap help COMMAND' shows a command's full form and its options.\n");
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
    const ms_command *c = commands[i].command;
    if (strcmp(c->name, argv[1]) != 0) continue;
    printf("usage: %s\n%s%s", c->usage, c->details[0] ? "\n" : "", c->details);
    if (c->folds) {
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
    if (strcmp(argv[1], commands[i].command->name) != 0) continue;
    if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) /* memsnap diff --help */
      return cmd_help(2, (char *[]){"help", argv[1], NULL});
    return commands[i].command->run(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return cmd_help(argc, argv);
  if (!strcmp(argv[1], "--version")) return cmd_version(argc, argv);
  fprintf(stderr, "error: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
