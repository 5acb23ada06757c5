/* holders.c: the holders table (what the Python package found keeping the snapshot's largest and
 * growing sites' tensors alive: recorder/python/memsnap/holders.py) and its meta keys
 * (holders_ms, holders_cut, holders_blocks), and the reference cycles the collector's runs found
 * (the gc_cycles table, MEMSNAP_GC_CYCLES), read for the analysis (docs/snapshot-format.md,
 * "holders", "gc_cycles").
 *
 * The tables are absent (or empty) from files written without Python, by older versions, or imported: it then
 * reads as empty (0 rows, no walk). Text is neutralised (ms_read_text_into) and cut to its field.
 * Returns what the row function returned, 0 at the end, or -1 with the message in s->error.
 */
#include <string.h>

#include "read.h"
#include "read_private.h"

static int holder_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  ms_holder_row r;
  memset(&r, 0, sizeof r);
  r.stack_id = sqlite3_column_int64(st, 0);
  r.address = (uint64_t)sqlite3_column_int64(st, 1);
  r.size = sqlite3_column_int64(st, 2);
  r.tensor_bytes = sqlite3_column_int64(st, 3);
  r.rank = (int)sqlite3_column_int64(st, 4);
  ms_read_text_into(st, 5, r.root, sizeof r.root);
  ms_read_text_into(st, 6, r.holder, sizeof r.holder);
  return ((int (*)(const ms_holder_row *, void *))c->fn)(&r, c->arg);
}

static bool has_table(ms_snapshot *s, const char *name) {
  int64_t n = 0;
  ms_sql_arg arg = {name, 0};
  return ms_read_rows_args(s, "select count(*) from sqlite_master where type = 'table' and name = ?1", &arg, 1,
                           "the table list", ms_read_first_int64, &n) == 0 && n > 0;
}

int ms_holders_each(ms_snapshot *s, int (*fn)(const ms_holder_row *r, void *arg), void *arg) {
  if (!has_table(s, "holders")) return 0;
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s,
                      "select coalesce(stack_id, 0), coalesce(address, 0), coalesce(size, 0), coalesce(tensor_bytes, 0),"
                      " coalesce(rank, 0), root, holder from holders order by stack_id, address, rank, id",
                      "holders", holder_row, &c);
}

static int cycle_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  ms_gc_cycle_row r;
  memset(&r, 0, sizeof r);
  r.run = sqlite3_column_int64(st, 0);
  r.generation = sqlite3_column_int64(st, 1);
  r.objects = sqlite3_column_int64(st, 2);
  r.tensors = sqlite3_column_int64(st, 3);
  r.tensor_bytes = sqlite3_column_int64(st, 4);
  r.address = (uint64_t)sqlite3_column_int64(st, 5);
  ms_read_text_into(st, 6, r.types, sizeof r.types);
  ms_read_text_into(st, 7, r.edges, sizeof r.edges);
  return ((int (*)(const ms_gc_cycle_row *, void *))c->fn)(&r, c->arg);
}

int ms_gc_cycles_each(ms_snapshot *s, int (*fn)(const ms_gc_cycle_row *r, void *arg), void *arg) {
  if (!has_table(s, "gc_cycles")) return 0;
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s,
                      "select coalesce(run, 0), coalesce(generation, 0), coalesce(objects, 0), coalesce(tensors, 0),"
                      " coalesce(tensor_bytes, 0), coalesce(address, 0), types, edges from gc_cycles order by id",
                      "gc_cycles", cycle_row, &c);
}

static int meta_row(sqlite3_stmt *st, void *arg) {
  int64_t *v = arg;
  const unsigned char *key = sqlite3_column_text(st, 0);
  int64_t value = sqlite3_column_int64(st, 1);
  if (!key) return 0;
  if (strcmp((const char *)key, "holders_ms") == 0) v[0] = value;
  else if (strcmp((const char *)key, "holders_cut") == 0) v[1] = value;
  else if (strcmp((const char *)key, "holders_blocks") == 0) v[2] = value;
  return 0;
}

int ms_holders_walk(ms_snapshot *s, ms_holders_meta *out) {
  int64_t v[3] = {-1, 0, 0};
  memset(out, 0, sizeof *out);
  out->ms = -1;
  if (ms_read_rows(s, "select key, value from meta where key in ('holders_ms', 'holders_cut', 'holders_blocks')",
                   "meta", meta_row, v) != 0)
    return -1;
  out->ms = v[0];
  out->cut = v[1] != 0;
  out->blocks = v[2];
  return 0;
}
