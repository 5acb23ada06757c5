/* main.c: the memsnap command-line tool: one table of commands, one function each.
 *
 * Exit codes: 0 success, 1 error, 2 usage. Messages: "error: ..." on stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "memsnap.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *usage;
} command;

static int cmd_help(int argc, char **argv);

static int cmd_version(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[0], "version")) return ms_usage_error("version", "no arguments expected ('%s')", argv[1]);
  (void)argv;
  printf("memsnap %s\n", MEMSNAP_VERSION);
  return 0;
}

/* Prints the options table: the environment variable, its default and what it does. */
static int cmd_options(int argc, char **argv) {
  if (argc > 1) return ms_usage_error("options", "no arguments expected ('%s')", argv[1]);
  (void)argv;
  const char *var, *def, *comment;
  for (int i = 0; (var = memsnap_option_info(i, &def, &comment)) != NULL; i++)
    printf("%-40s %-10s %s\n", var, def, comment);
  return 0;
}

static const command commands[] = {
    {"analyze", cmd_analyze,
     "memsnap analyze [--json | --html OUT.html] [--full-stacks] [--frames N] [--iterations LABEL]\n"
     "                SNAPSHOT.db...  peaks, iterations, leak candidates, OOMs, top sites"},
    {"diff", cmd_diff, "memsnap diff [--full-stacks] A.db B.db\n                            what grew between two snapshots, by allocation site"},
    {"info", cmd_info, "memsnap info SNAPSHOT.db... what a snapshot holds"},
    {"import", cmd_import, "memsnap import SNAPSHOT.pickle[.gz] -o SNAPSHOT.db\n"
                           "                            a PyTorch memory snapshot as a memsnap snapshot"},
    {"export", cmd_export, "memsnap export [--format pytorch] SNAPSHOT.db -o OUT.pickle[.gz]\n"
                           "                            a snapshot as a PyTorch memory snapshot"},
    {"help", cmd_help, "memsnap help                show this help"},
    {"version", cmd_version, "memsnap version             print the version"},
    {"options", cmd_options, "memsnap options             list the MEMSNAP_* environment variables"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
  fprintf(out, "usage: memsnap <command> [<args>]\n\ncommands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++) fprintf(out, "  %s\n", commands[i].usage);
}

int ms_output_status(void) {
  if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
  fprintf(stderr, "error: cannot write the output: %s\n", strerror(errno));
  return 1;
}

int ms_unknown_option(const char *name, const char *arg, bool last) {
  /* An option that takes a value, given last: its usage line shows it followed by the value's
     name ("--html OUT.html", "-o SNAPSHOT.db"). */
  size_t n = strlen(arg);
  for (size_t i = 0; last && n && i < NCOMMANDS; i++) {
    if (strcmp(commands[i].name, name) != 0) continue;
    for (const char *u = strstr(commands[i].usage, arg); u; u = strstr(u + 1, arg)) {
      bool whole = (u == commands[i].usage || u[-1] == ' ' || u[-1] == '[') && u[n] == ' ';
      if (whole && u[n + 1] && strchr("-|[]", u[n + 1]) == NULL)
        return ms_usage_error(name, "option '%s' needs a value", arg);
    }
  }
  return ms_usage_error(name, "unknown option '%s'", arg);
}

int ms_usage_error(const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "error: %s: ", name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0) fprintf(stderr, "usage: %s\n", commands[i].usage);
  return 2;
}

static int cmd_help(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[0], "help")) return ms_usage_error("help", "no arguments expected ('%s')", argv[1]);
  (void)argv;
  usage(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return cmd_help(argc, argv);
  if (!strcmp(argv[1], "--version")) return cmd_version(argc, argv);
  fprintf(stderr, "error: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
