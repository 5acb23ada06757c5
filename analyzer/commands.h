/* commands.h: the CLI's subcommands (one file each) and their shared usage handling. */
#ifndef MEMSNAP_COMMANDS_H
#define MEMSNAP_COMMANDS_H

/* Each returns the exit code: 0 ok, 1 error, 2 usage. argv[0] is the command name. */
int cmd_info(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_diff(int argc, char **argv);

/* Exit status for what was written to stdout: 0, or 1 (with a message) if writing failed (a
 * full disk, a closed pipe). */
int ms_output_status(void);

/* Prints "error: <command>: <message>" and the command's usage on stderr; returns 2. */
int ms_usage_error(const char *command, const char *message);

#endif
