/* read_private.h: what the snapshot reader's files share (reader.c, tables.c, events.c), and
 * nothing outside read/ includes: the one place where SQL is run against a snapshot. The other
 * stages get rows and totals from read.h's ms_*_each and getters instead.
 */
#ifndef MEMSNAP_READ_PRIVATE_H
#define MEMSNAP_READ_PRIVATE_H

#include "read.h"

/* Runs `sql` and calls row(st, arg) for each row until it returns non-zero, and returns that.
 * A table that does not exist (a damaged or foreign file the reader opened all the same) reads
 * as empty. On failure returns -1 with "'PATH': cannot read WHAT: ..." (or "reading WHAT
 * failed") in s->error. A :device parameter in `sql` is bound to s->only_device. */
int ms_read_rows(ms_snapshot *s, const char *sql, const char *what, int (*row)(sqlite3_stmt *st, void *arg), void *arg);
/* A query's condition that keeps the rows of the snapshot's only_device (ms_only_device), or all
 * of them: ms_read_rows binds :device. */
#define MS_ON_DEVICE(column) "(:device < 0 or " column " = :device)"
/* The same for a block, by its segment's device. */
#define MS_BLOCK_ON_DEVICE "(:device < 0 or segment_id in (select id from segments where device = :device))"

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
