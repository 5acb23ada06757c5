/* snapshot_read.h: what the snapshot reader's files share (reader.c, snapshot_read_tables.c,
 * snapshot_read_events.c), and nothing else includes: the one place where SQL is run against a
 * snapshot. Commands get rows and totals from analyzer.h's ms_*_each and getters instead.
 */
#ifndef MEMSNAP_SNAPSHOT_READ_H
#define MEMSNAP_SNAPSHOT_READ_H

#include "analyzer.h"

/* Runs `sql` and calls row(st, arg) for each row until it returns non-zero, and returns that.
 * A table that does not exist (a damaged or foreign file the reader opened all the same) reads
 * as empty. On failure returns -1 with "'PATH': cannot read WHAT: ..." (or "reading WHAT
 * failed") in s->error. */
int ms_read_rows(ms_snapshot *s, const char *sql, const char *what, int (*row)(sqlite3_stmt *st, void *arg), void *arg);
/* A parameter of a query: text when `text` is not NULL, else the integer `value`. */
typedef struct ms_sql_arg {
  const char *text;
  int64_t value;
} ms_sql_arg;
/* ms_read_rows with the query's parameters ?1 to ?nargs bound to args[0] to args[nargs - 1]. */
int ms_read_rows_args(ms_snapshot *s, const char *sql, const ms_sql_arg *args, int nargs, const char *what,
                      int (*row)(sqlite3_stmt *st, void *arg), void *arg);
/* A row function for ms_read_rows: the row's first column into *(int64_t *)out; 0. */
int ms_read_first_int64(sqlite3_stmt *st, void *out);
/* A text column into out[len], cut and neutralised ("" for NULL). */
void ms_read_text_into(sqlite3_stmt *st, int col, char *out, size_t len);

/* A row function's call: the caller's function (cast back by the row reader) and argument. */
typedef struct ms_row_call {
  ms_snapshot *s;
  void *fn, *arg;
} ms_row_call;

#endif
