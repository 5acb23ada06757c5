/* commands.h: the CLI's commands, one file each in commands/ (main.c's table lists them), and what
 * they share (usage.c): usage errors, the stack options, the output's exit status. Commands sit
 * on top: they call down into report/, replay/, pytorch/, analysis/, read/ and util/, and
 * nothing calls into them but main.c. */
#ifndef MEMSNAP_COMMANDS_H
#define MEMSNAP_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A command: its name, what runs it (argv[0] is the command name; it returns the exit code: 0 ok,
 * 1 error, 2 usage), its usage line and the help on its arguments (`memsnap help COMMAND`), one a
 * line; folds: it prints stacks (`help` lists the built-in frames it folds). Each command's file
 * defines its own; main.c's table lists them. */
typedef struct ms_command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *usage;
  const char *details;
  bool folds;
} ms_command;

extern const ms_command ms_analyze_command, ms_diff_command, ms_info_command, ms_import_command, ms_export_command,
    ms_run_command, ms_replay_command, ms_predict_command, ms_options_command, ms_recover_command, ms_top_command,
    ms_dump_command;

/* The help of the options that ms_stack_option reads. */
#define MS_STACK_OPTIONS_HELP                                                                                       \
  "  --full-stacks       every frame of every stack (default: the frames that matter)\n"                     \
  "  --full-names        whole C++ names (default: short, templates and parameters collapsed: f<>())\n"      \
  "  --frames N          frames that matter shown per stack, 1 to 4096 (default 4)\n"                        \
  "  --fold PATTERNS     more frames to fold: comma-separated globs over a frame's short name without\n"     \
  "                      its \"()\", or NAME@FILE to match its source file or module too\n"          \
  "                      (repeatable, 16 at most)\n"

/* Exit status for what was written to stdout: 0, or 1 (with a message) if writing failed (a
 * full disk, a closed pipe). */
int ms_output_status(void);

/* Prints "error: <command>: <message>" (printf-style) and the command's usage on stderr;
 * returns 2. */
int ms_usage_error(const ms_command *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for an argument no option of `command` matched: "needs a value" when it is
 * one of the command's options that takes one and it came `last`, else "unknown option". 2. */
int ms_unknown_option(const ms_command *command, const char *arg, bool last);

/* The options of every command that prints stacks: --full-stacks, --full-names, --frames N,
 * --fold PATTERNS. Returns 1 when argv[*i] is one of them (*i then past its value), 0 when it is
 * none, 2 after a usage error (printed). */
/* --capacity SIZE or --device CARD (`option`, its `value`) into *capacity, in bytes; *given is
 * the one given before (NULL at first: both, or one twice, is a usage error). 0, or 2 after a
 * usage error (printed). */
int ms_capacity_option(const ms_command *command, const char *option, const char *value, uint64_t *capacity,
                       const char **given);

struct ms_report_options;
struct ms_fold;
int ms_stack_option(const ms_command *command, int argc, char **argv, int *i, struct ms_report_options *o, struct ms_fold *fold);

#endif
