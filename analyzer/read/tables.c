/* tables.c: the snapshot's tables beyond segments, blocks, devices and options
 * (reader.c), read for the commands: marks and ranges with their labels, external memory by API
 * and library, row counts, and the totals at the snapshot (docs/snapshot-format.md).
 *
 * As everywhere in the reader, values are untrusted: text is neutralised before anyone prints
 * it (labels excepted: ms_label_key neutralises what it keeps), and a missing table reads as
 * empty. Every function returns what it says, or -1 with the message in s->error.
 */
#include <stdio.h>
#include <string.h>

#include "read.h"
#include "read_private.h"

/* ---- marks and ranges -------------------------------------------------------------------- */

static int label_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  const unsigned char *text = sqlite3_column_text(st, 2);
  ms_label_row r = {sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 4),
                    sqlite3_column_int64(st, 3), text ? (const char *)text : ""};
  return ((int (*)(const ms_label_row *, void *))c->fn)(&r, c->arg);
}

static int labels_each(ms_snapshot *s, const char *sql, const char *what, int (*fn)(const ms_label_row *r, void *arg),
                       void *arg) {
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s, sql, what, label_row, &c);
}

int ms_marks_each(ms_snapshot *s, int (*fn)(const ms_label_row *r, void *arg), void *arg) {
  return labels_each(s,
                     "select m.event_id, m.time_ns, l.text, 0, m.time_ns from marks m join labels l on l.id = m.label_id "
                     "order by m.event_id",
                     "marks", fn, arg);
}

int ms_ranges_each(ms_snapshot *s, int (*fn)(const ms_label_row *r, void *arg), void *arg) {
  return labels_each(s,
                     "select 0, r.start_ns, l.text, r.depth, coalesce(r.end_ns, r.start_ns) from ranges r "
                     "join labels l on l.id = r.label_id order by r.start_ns",
                     "ranges", fn, arg);
}

int ms_labels_each(ms_snapshot *s, int (*fn)(const ms_label_row *r, void *arg), void *arg) {
  return labels_each(s, "select id, 0, text, 0, 0 from labels order by id", "labels", fn, arg);
}

/* ---- external memory --------------------------------------------------------------------- */

static int external_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  ms_external r;
  ms_read_text_into(st, 0, r.source, sizeof r.source);
  ms_read_text_into(st, 1, r.library, sizeof r.library);
  r.count = sqlite3_column_int64(st, 2);
  r.bytes = sqlite3_column_int64(st, 3);
  return ((int (*)(const ms_external *, void *))c->fn)(&r, c->arg);
}

int ms_external_each(ms_snapshot *s, int (*fn)(const ms_external *r, void *arg), void *arg) {
  /* the columns are absent from files written before them: then one group of the pool alone */
  bool named = ms_has_column(s, "segments", "source") && ms_has_column(s, "segments", "library");
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s,
                      named ? "select ifnull(source, ''), ifnull(library, ''), count(*), sum(size) from segments "
                              "where pool = 'external' and " MS_ON_DEVICE("device") " group by 1, 2 order by 4 desc, 1, 2"
                            : "select '', '', count(*), sum(size) from segments where pool = 'external' and " MS_ON_DEVICE("device")
                              " having count(*) > 0",
                      "segments", external_row, &c);
}

/* ---- counts and totals ------------------------------------------------------------------- */

int64_t ms_count_rows(ms_snapshot *s, ms_count_what what) {
  static const char *const sql[] = {
      [MS_COUNT_SEGMENTS] = "select count(*) from segments where " MS_ON_DEVICE("device"),
      [MS_COUNT_EXTERNAL_SEGMENTS] = "select count(*) from segments where pool = 'external' and " MS_ON_DEVICE("device"),
      [MS_COUNT_ALLOCATED_BLOCKS] = "select count(*) from blocks where state = 'allocated' and " MS_BLOCK_ON_DEVICE,
      [MS_COUNT_MARKS] = "select count(*) from marks",
      [MS_COUNT_RANGES] = "select count(*) from ranges",
      [MS_COUNT_STACKS] = "select count(*) from stacks",
  };
  int64_t n = -1;
  if (what < 0 || what >= (int)(sizeof sql / sizeof sql[0])) return -1;
  if (ms_read_rows(s, sql[what], "a count", ms_read_first_int64, &n) != 0) return -1;
  return n;
}

static int end_state_row(sqlite3_stmt *st, void *arg) {
  ms_end_state *e = arg;
  e->segments = sqlite3_column_int64(st, 0);
  e->split_free_blocks = sqlite3_column_int64(st, 1);
  e->split_free_bytes = sqlite3_column_int64(st, 2);
  e->allocated = sqlite3_column_int64(st, 3);
  e->reserved = sqlite3_column_int64(st, 4);
  return 0;
}

int ms_read_end_state(ms_snapshot *s, ms_end_state *out) {
  memset(out, 0, sizeof *out);
  int rc = ms_read_rows(
      s,
      "select (select count(*) from segments where " MS_ON_DEVICE("device") "), "
      "(select count(*) from blocks b where state = 'free' and " MS_BLOCK_ON_DEVICE
      " and (select count(*) from blocks c where c.segment_id = b.segment_id) > 1), "
      "(select coalesce(sum(size), 0) from blocks b where state = 'free' and " MS_BLOCK_ON_DEVICE
      " and (select count(*) from blocks c where c.segment_id = b.segment_id) > 1), "
      /* external allocations (memsnap run --mode intercept) are outside the allocator's stats */
      "(select coalesce(sum(value), 0) from stats where key = 'allocated_bytes.all.current' and " MS_ON_DEVICE("device") ") + "
      "(select coalesce(sum(size), 0) from segments where pool = 'external' and " MS_ON_DEVICE("device") "), "
      "(select coalesce(sum(value), 0) from stats where key = 'reserved_bytes.all.current' and " MS_ON_DEVICE("device") ") + "
      "(select coalesce(sum(size), 0) from segments where pool = 'external' and " MS_ON_DEVICE("device") ")",
      "the state at the snapshot", end_state_row, out);
  if (rc != 0) memset(out, 0, sizeof *out);
  return rc;
}

typedef struct stat_total {
  int64_t sum;
  bool found;
} stat_total;

static int stat_total_row(sqlite3_stmt *st, void *arg) {
  stat_total *t = arg;
  if (sqlite3_column_type(st, 0) == SQLITE_NULL) return 0; /* no row had the key */
  t->sum = sqlite3_column_int64(st, 0);
  t->found = true;
  return 0;
}

int ms_stat_total(ms_snapshot *s, const char *key, int64_t *sum) {
  stat_total t = {0, false};
  ms_sql_arg k = {key, 0};
  if (ms_read_rows_args(s, "select sum(value) from stats where key = ?1 and " MS_ON_DEVICE("device"), &k, 1, "stats", stat_total_row, &t) != 0) return -1;
  if (t.found) *sum = t.sum;
  return t.found;
}
