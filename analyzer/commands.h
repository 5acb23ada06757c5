/* commands.h: the CLI's subcommands (one file each) and their shared usage handling. */
#ifndef MEMSNAP_COMMANDS_H
#define MEMSNAP_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

/* Each returns the exit code: 0 ok, 1 error, 2 usage. argv[0] is the command name. */
int cmd_info(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_run(int argc, char **argv);

/* Exit status for what was written to stdout: 0, or 1 (with a message) if writing failed (a
 * full disk, a closed pipe). */
int ms_output_status(void);

/* Prints "error: <command>: <message>" (printf-style) and the command's usage on stderr;
 * returns 2. */
int ms_usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for an argument no option of `command` matched: "needs a value" when it is
 * one of the command's options that takes one and it came `last`, else "unknown option". 2. */
int ms_unknown_option(const char *command, const char *arg, bool last);

/* The options of every command that prints stacks: --full-stacks, --full-names, --frames N,
 * --fold PATTERNS. Returns 1 when argv[*i] is one of them (*i then past its value), 0 when it is
 * none, 2 after a usage error (printed). */
struct ms_report_options;
struct ms_fold;
int ms_stack_option(const char *command, int argc, char **argv, int *i, struct ms_report_options *o, struct ms_fold *fold);

/* outfile.c. Prints "error: OPTION 'out' is an input: refusing to overwrite it" and returns 1
 * when `out` is the same file as one of inputs[0..n) (by device and inode, so links count);
 * else 0. */
int ms_refuse_overwrite(const char *option, const char *out, const char *const *inputs, size_t n);
/* The temporary name that `out` is written under: "<out>.tmp-<pid>", in the same directory. */
void ms_temp_path(const char *out, char *tmp, size_t len);
/* Syncs tmp and renames it over out (then syncs the directory). 0, or -1 with errno set and tmp
 * removed. */
int ms_commit(const char *tmp, const char *out);

/* Writes the report page of the n analyses (html.c; a snapshot on several devices gives a
 * document per device, analyzed with `label`: devsplit.c) to `out`, atomically, never over one
 * of the snapshots. 0, or 1 (message printed). */
struct ms_analysis;
int ms_write_html(const char *out, struct ms_analysis *a, size_t n, const char *label);
/* Imports the PyTorch snapshot pickle `in` into the snapshot `out` (import.c), atomically,
 * printing warnings, and with show_progress the progress and a line saying what was imported.
 * 0, or 1 (message printed). */
int ms_import_to(const char *in, const char *out, bool show_progress);

#endif
