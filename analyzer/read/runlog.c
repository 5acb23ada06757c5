/* runlog.c: the snapshot's run log (the run_log table, docs/snapshot-format.md): the whole run by
 * iteration and by second, as the recorder kept it (recorder/history/runlog.h), read for the
 * analysis. A file without the table has none (older files, imported pickles). Values are
 * untrusted: rows out of order or overlapping, or with no units, are left out.
 */
#include <stdint.h>
#include <stdlib.h>

#include "read.h"
#include "read_private.h"

typedef struct run_rows {
  ms_run_entry *e;
  size_t n, cap;
  bool failed;
} run_rows;

static int run_row(sqlite3_stmt *st, void *arg) {
  run_rows *r = arg;
  ms_run_entry x;
  x.first = sqlite3_column_int64(st, 0);
  x.count = sqlite3_column_int64(st, 1);
  x.skipped = sqlite3_column_int64(st, 2);
  x.start_ns = sqlite3_column_int64(st, 3);
  x.end_ns = sqlite3_column_int64(st, 4);
  x.peak_allocated = sqlite3_column_int64(st, 5);
  x.peak_reserved = sqlite3_column_int64(st, 6);
  x.end_allocated = sqlite3_column_int64(st, 7);
  x.end_reserved = sqlite3_column_int64(st, 8);
  for (int k = 0; k < MS_RUN_ROLES; k++) x.role_bytes[k] = sqlite3_column_int64(st, 9 + k);
  x.peak_ns = sqlite3_column_int64(st, 12);
  x.in_progress = sqlite3_column_int64(st, 13) != 0;
  if (x.count <= 0 || x.first < 0 || x.count > INT64_MAX - x.first || x.skipped < 0 || x.skipped > x.count) return 0;
  if (r->n && x.first < r->e[r->n - 1].first + r->e[r->n - 1].count) return 0; /* overlapping: a hostile file */
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 256;
    ms_run_entry *grown = realloc(r->e, sizeof *grown * cap);
    if (!grown) {
      r->failed = true;
      return 1;
    }
    r->e = grown;
    r->cap = cap;
  }
  r->e[r->n++] = x;
  return 0;
}

long ms_run_log_read(ms_snapshot *s, int log, ms_run_entry **out) {
  *out = NULL;
  run_rows r = {0};
  ms_sql_arg arg = {NULL, log};
  int rc = ms_read_rows_args(s,
                             "select first, count, skipped, start_ns, end_ns, peak_allocated, peak_reserved, "
                             "end_allocated, end_reserved, parameter_bytes, gradient_bytes, optimizer_bytes, peak_ns, "
                             "in_progress from run_log where log = ?1 order by first",
                             &arg, 1, "the run log", run_row, &r);
  if (rc < 0 || r.failed) {
    free(r.e);
    return -1;
  }
  *out = r.e;
  return (long)r.n;
}
