/* import_stage.c: the SQLite side of an import. The file is set up (a private file until it is
 * renamed: no journal, no syncs), events are staged in a temporary table with their PyTorch
 * time (µs) and the list they came from; once the pickle has been read, and so each list is
 * known as device_traces[i], they are copied into `events` in time order (devices interleaved,
 * annotations as range_push/range_pop) with times in ns since the first event, followed by the
 * ranges, devices, statistics, event kinds and meta.
 */
#include <inttypes.h>
#include <stdio.h>

#include "pytorch.h"
#include "importer.h"
#include "snapshot_schema.h"

/* ---- the file set up ------------------------------------------------------------------ */

/* Before the schema: a private file until it is renamed, so no journal and no syncs (the
 * caller syncs the finished file); 64 KiB pages as the recorder writes; 16 MiB of cache each for
 * the file and the temporary tables, which spill to a temporary file beyond that. */
static const char *const setup_sql =
    "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA page_size = 65536; PRAGMA temp_store = FILE;"
    "PRAGMA cache_size = -16384; PRAGMA temp.cache_size = -16384; BEGIN;";

static const char *const stage_sql =
    "CREATE TEMP TABLE stage(seq INTEGER PRIMARY KEY, t INTEGER, kind INTEGER, list INTEGER, stream INTEGER,"
    " address INTEGER, size INTEGER, requested INTEGER, extra INTEGER, stack INTEGER);"
    "CREATE TEMP TABLE stage_lists(id INTEGER PRIMARY KEY, device INTEGER);"
    "CREATE TEMP TABLE stage_ranges(id INTEGER PRIMARY KEY, label INTEGER, depth INTEGER, start_t INTEGER,"
    " end_t INTEGER);";

int imp_stage_begin(importer *im) {
  if (sqlite3_exec(im->db, setup_sql, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(im->db, memsnap_schema_sql, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(im->db, stage_sql, NULL, NULL, NULL) != SQLITE_OK)
    return imp_db_fail(im);
  struct { sqlite3_stmt **st; const char *sql; } stmts[] = {
      {&im->stage, "INSERT INTO temp.stage VALUES(NULL,?,?,?,?,?,?,?,?,?)"},
      {&im->segment, memsnap_insert_segment_sql},
      {&im->block, "INSERT INTO blocks(id, segment_id, address, size, requested_size, state, stack_id) VALUES(NULL,?,?,?,?,?,?)"},
      {&im->frame, "INSERT INTO frames VALUES(?,?,?,?,?,?,NULL,NULL,0)"},
      {&im->stack, "INSERT INTO stacks VALUES(?,?)"},
      {&im->stack_frame, "INSERT INTO stack_frames VALUES(?,?,?)"},
      {&im->label, "INSERT INTO labels VALUES(?,?)"},
      {&im->range_open, "INSERT INTO temp.stage_ranges VALUES(NULL,?,?,?,NULL)"},
      {&im->range_close, "UPDATE temp.stage_ranges SET end_t = ? WHERE id = ?"},
      {&im->option, "INSERT OR REPLACE INTO options VALUES(?,?)"},
  };
  for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++)
    if (sqlite3_prepare_v2(im->db, stmts[i].sql, -1, stmts[i].st, NULL) != SQLITE_OK) return imp_db_fail(im);
  return 0;
}

void imp_stage_end(importer *im) {
  sqlite3_stmt *sts[] = {im->stage, im->segment, im->block, im->frame, im->stack, im->stack_frame, im->label,
                         im->range_open, im->range_close, im->option};
  for (size_t i = 0; i < sizeof sts / sizeof sts[0]; i++) sqlite3_finalize(sts[i]);
}

/* ---- rows and staged events ----------------------------------------------------------- */

int imp_stage_event(importer *im, int64_t t, int kind, int64_t list, int64_t stream, int64_t address, int64_t size,
                    int64_t requested, int64_t extra, bool has_extra, int64_t stack) {
  sqlite3_stmt *st = im->stage;
  sqlite3_bind_int64(st, 1, t);
  sqlite3_bind_int64(st, 2, kind);
  imp_bind_int_or_null(st, 3, list, list == 0);
  sqlite3_bind_int64(st, 4, stream);
  sqlite3_bind_int64(st, 5, address);
  sqlite3_bind_int64(st, 6, size);
  sqlite3_bind_int64(st, 7, requested);
  imp_bind_int_or_null(st, 8, extra, !has_extra);
  sqlite3_bind_int64(st, 9, stack);
  return imp_step(im, st);
}

/* ---- after the STOP ------------------------------------------------------------------- */

static int query_int(importer *im, const char *sql, int64_t *out) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(im->db, sql, -1, &st, NULL) != SQLITE_OK) return imp_db_fail(im);
  int rc = sqlite3_step(st);
  *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : imp_db_fail(im);
}

static int exec(importer *im, const char *sql) {
  return sqlite3_exec(im->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : imp_db_fail(im);
}

/* The statistics that the segments and blocks at the snapshot give (the .current values). */
static int write_stats(importer *im) {
  static const char *const pools[3][2] = {{"all", "1"}, {"small_pool", "s.pool = 'small'"}, {"large_pool", "s.pool = 'large'"}};
  static const char *const block_stats[][2] = {
      {"allocated_bytes", "sum(CASE WHEN b.state = 'allocated' THEN b.size ELSE 0 END)"},
      {"active_bytes", "sum(CASE WHEN b.state != 'free' THEN b.size ELSE 0 END)"},
      {"requested_bytes", "sum(CASE WHEN b.state = 'allocated' THEN b.requested_size ELSE 0 END)"},
      {"allocation", "sum(b.state = 'allocated')"},
      {"active", "sum(b.state != 'free')"}};
  char sql[700];
  for (int p = 0; p < 3; p++) {
    for (size_t k = 0; k < sizeof block_stats / sizeof block_stats[0]; k++) {
      snprintf(sql, sizeof sql, "INSERT INTO stats SELECT s.device, '%s.%s.current', coalesce(%s, 0) FROM segments s "
               "LEFT JOIN blocks b ON b.segment_id = s.id WHERE %s GROUP BY s.device", block_stats[k][0], pools[p][0],
               block_stats[k][1], pools[p][1]);
      if (exec(im, sql) != 0) return -1;
    }
    snprintf(sql, sizeof sql, "INSERT INTO stats SELECT s.device, 'reserved_bytes.%s.current', sum(s.size) FROM segments s "
             "WHERE %s GROUP BY s.device; INSERT INTO stats SELECT s.device, 'segment.%s.current', count(*) FROM segments s "
             "WHERE %s GROUP BY s.device", pools[p][0], pools[p][1], pools[p][0], pools[p][1]);
    if (exec(im, sql) != 0) return -1;
  }
  return exec(im, "INSERT OR REPLACE INTO stats SELECT device, 'num_ooms', count(*) FROM events WHERE kind = 6 GROUP BY device");
}

static int put_meta(importer *im, const char *key, const char *text, int64_t num) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(im->db, "INSERT OR REPLACE INTO meta VALUES(?,?)", -1, &st, NULL) != SQLITE_OK) return imp_db_fail(im);
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  if (text) sqlite3_bind_text(st, 2, text, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_int64(st, 2, num);
  int rc = imp_step(im, st);
  sqlite3_finalize(st);
  return rc;
}

/* PyTorch's trace holds the request, the blocks at the snapshot their size (up to 1 MiB more when
 * the allocator did not split the rest off): a block still allocated at the snapshot gets its
 * size in the event that allocated it (the last event at its address, an alloc), so the history
 * replayed ends with what the snapshot says is allocated. */
static const char *const block_sizes_sql =
    "CREATE TEMP TABLE last_at(address INTEGER PRIMARY KEY, id INTEGER);"
    "INSERT INTO temp.last_at SELECT address, max(id) FROM events WHERE kind IN (1, 2) AND address IS NOT NULL GROUP BY address;"
    "CREATE TEMP TABLE grown(id INTEGER PRIMARY KEY, size INTEGER);"
    "INSERT OR IGNORE INTO temp.grown SELECT e.id, b.size FROM blocks b JOIN temp.last_at l ON l.address = b.address "
    "JOIN events e ON e.id = l.id WHERE b.state = 'allocated' AND e.kind = 1 AND b.size > e.size;"
    "UPDATE events SET size = (SELECT g.size FROM temp.grown g WHERE g.id = events.id) WHERE id IN (SELECT id FROM temp.grown);"
    "DROP TABLE temp.last_at; DROP TABLE temp.grown;";

/* Every list that received entries must be one of device_traces' lists. 0 or -1. */
static int check_lists(importer *im) {
  int64_t stray;
  if (query_int(im, "SELECT count(*) FROM temp.stage s WHERE s.list IS NOT NULL AND s.list NOT IN "
                "(SELECT id FROM temp.stage_lists)", &stray) != 0)
    return -1;
  if (stray) return imp_fail(im, "%" PRId64 " trace entries are not in a list of 'device_traces'", stray);
  return 0;
}

/* The staged events into `events` in time order, the ranges, the devices; the first and last
 * PyTorch times in *t0 and *t1 (µs). 0 or -1. */
static int write_events(importer *im, int64_t *t0, int64_t *t1) {
  if (query_int(im, "SELECT coalesce(min(t), 0) FROM temp.stage", t0) != 0 ||
      query_int(im, "SELECT coalesce(max(t), 0) FROM temp.stage", t1) != 0)
    return -1;
  char sql[1200];
  snprintf(sql, sizeof sql,
           "INSERT INTO events(time_ns, kind, device, stream, address, size, requested_size, extra, thread, stack_id) "
           "SELECT (s.t - %" PRId64 ") * 1000, s.kind, l.device, CASE WHEN s.kind IN (9, 10) THEN NULL ELSE s.stream END, "
           "s.address, s.size, s.requested, s.extra, NULL, nullif(s.stack, 0) FROM temp.stage s "
           "LEFT JOIN temp.stage_lists l ON l.id = s.list AND s.kind != 7 ORDER BY s.t, s.seq;"
           "INSERT INTO ranges(label_id, thread, depth, start_ns, end_ns, stack_id) SELECT label, NULL, depth, "
           "(start_t - %" PRId64 ") * 1000, (end_t - %" PRId64 ") * 1000, NULL FROM temp.stage_ranges ORDER BY start_t, id;"
           "INSERT INTO devices SELECT device, '', NULL, NULL, NULL FROM (SELECT device FROM temp.stage_lists UNION "
           "SELECT device FROM segments);",
           *t0, *t0, *t0);
  return exec(im, sql);
}

/* event_kinds: the names of the event kinds. 0 or -1. */
static int write_kinds(importer *im) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(im->db, "INSERT INTO event_kinds VALUES(?,?)", -1, &st, NULL) != SQLITE_OK) return imp_db_fail(im);
  for (int k = 1; k < MEMSNAP_EVENT_KINDS; k++) {
    sqlite3_bind_int(st, 1, k);
    sqlite3_bind_text(st, 2, memsnap_event_kind_names[k], -1, SQLITE_STATIC);
    if (imp_step(im, st) != 0) break;
  }
  sqlite3_finalize(st);
  return 0;
}

/* meta: an imported snapshot's (no process; times from the first event). 0 or -1. */
static int write_meta(importer *im, const char *source, int64_t nevents, int64_t t0, int64_t t1) {
  int64_t ndevices;
  char protocol[64];
  snprintf(protocol, sizeof protocol, "PyTorch snapshot, pickle protocol %d", pk_protocol(im->r));
  if (im->failed || query_int(im, "SELECT count(*) FROM devices", &ndevices) != 0 ||
      put_meta(im, "format_version", NULL, MEMSNAP_FORMAT_VERSION) || put_meta(im, "tool", "memsnap", 0) ||
      put_meta(im, "tool_version", MEMSNAP_VERSION, 0) || put_meta(im, "pid", NULL, 0) || put_meta(im, "host", "", 0) ||
      put_meta(im, "command_line", "", 0) || put_meta(im, "backend", "pytorch", 0) ||
      put_meta(im, "device_count", NULL, ndevices) || put_meta(im, "recording", NULL, 1) ||
      put_meta(im, "stacks", "all", 0) || put_meta(im, "max_entries", NULL, 0) ||
      put_meta(im, "recorded_events", NULL, nevents) || put_meta(im, "dropped_events", NULL, 0) ||
      put_meta(im, "start_unix_ns", NULL, t0 * 1000) || put_meta(im, "snapshot_ns", NULL, (t1 - t0) * 1000) ||
      put_meta(im, "import_source", protocol, 0) || put_meta(im, "import_file", source, 0))
    return -1;
  return 0;
}

int imp_stage_finish(importer *im, const char *source) {
  int64_t t0, t1, nevents;
  if (check_lists(im) != 0) return -1;
  if (im->note) im->note(im->note_ctx, "writing events in time order");
  if (write_events(im, &t0, &t1) != 0 || exec(im, block_sizes_sql) != 0 ||
      query_int(im, "SELECT count(*) FROM events", &nevents) != 0 || write_stats(im) != 0 || write_kinds(im) != 0 ||
      write_meta(im, source, nevents, t0, t1) != 0)
    return -1;
  return exec(im, "COMMIT");
}
