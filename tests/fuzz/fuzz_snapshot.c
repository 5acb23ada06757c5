/* fuzz_snapshot.c: libFuzzer target for the snapshot reader and everything behind it (analysis,
 * the page's timeline, the text, JSON and HTML reports, and `memsnap replay`'s engine through
 * libmemsnap's allocator on the simulated device), on hostile SQLite files.
 *
 * A file of random bytes is almost never SQLite, so most inputs are edits of a real snapshot
 * (MEMSNAP_FUZZ_SEED, written by tests/analyzer/gen_snapshots.c; `make fuzz` makes it): the input is a
 * list of operations, each setting one cell of one row of one table to an integer, a real, a
 * text (any bytes: markup, control bytes, invalid UTF-8, long), a blob or NULL, or deleting or
 * duplicating a row. An input whose first byte is 0xff is instead the whole file, byte for byte,
 * for the reader's handling of corrupt files; one whose first byte is 0xfe is a list of byte
 * patches to the seed file (3 bytes of offset, counted from the end, then the byte), which
 * damages the pages of a real snapshot: the events' page reader (analyzer/read/tablescan.c) and
 * SQLite behind it must answer every one.
 */
#include <fcntl.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../analyzer/replay/replay.h"
#include "../../analyzer/report/report.h"

static unsigned char *seed;
static size_t seed_len;
static char path[64];
static FILE *sink;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *p = getenv("MEMSNAP_FUZZ_SEED");
  FILE *f = p ? fopen(p, "rb") : NULL;
  if (!f) {
    fprintf(stderr, "fuzz_snapshot: set MEMSNAP_FUZZ_SEED to a snapshot (make fuzz does)\n");
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  seed_len = (size_t)ftell(f);
  rewind(f);
  seed = malloc(seed_len);
  if (!seed || fread(seed, 1, seed_len, f) != seed_len) exit(2);
  fclose(f);
  snprintf(path, sizeof path, "/dev/shm/memsnap-fuzz-%d.db", (int)getpid());
  sink = fopen("/dev/null", "w");
  return 0;
}

static const char *const tables[] = {"meta", "devices", "stats", "segments", "blocks", "events", "event_kinds",
                                     "labels", "marks", "ranges", "stacks", "stack_frames", "frames", "options"};
#define NTABLES (sizeof tables / sizeof tables[0])

/* Applies one edit from the input at *p; returns false when the input is used up. */
static bool edit(sqlite3 *db, const uint8_t **p, const uint8_t *end) {
  if (end - *p < 5) return false;
  const char *table = tables[(*p)[0] % NTABLES];
  unsigned row = (*p)[1], col = (*p)[2], type = (*p)[3] % 8;
  size_t len = (*p)[4];
  *p += 5;
  if (len > (size_t)(end - *p)) len = (size_t)(end - *p);
  const uint8_t *payload = *p;
  *p += len;
  char sql[256];
  sqlite3_stmt *st;
  int ncols = 0;
  snprintf(sql, sizeof sql, "select * from %s limit 0", table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) ncols = sqlite3_column_count(st);
  if (ncols == 0) {
    sqlite3_finalize(st);
    return true;
  }
  char column[64];
  snprintf(column, sizeof column, "%s", sqlite3_column_name(st, (int)(col % (unsigned)ncols)));
  sqlite3_finalize(st);
  const char *where = "rowid = (select rowid from %s limit 1 offset %u)";
  char cond[128];
  snprintf(cond, sizeof cond, where, table, row);
  if (type == 6) snprintf(sql, sizeof sql, "delete from %s where %s", table, cond);
  else if (type == 7) snprintf(sql, sizeof sql, "insert or ignore into %s select * from %s where %s", table, table, cond);
  else snprintf(sql, sizeof sql, "update or ignore %s set \"%s\" = ? where %s", table, column, cond);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return true;
  int64_t v = 0;
  memcpy(&v, payload, len < sizeof v ? len : sizeof v);
  switch (type) {
    case 0: sqlite3_bind_int64(st, 1, v); break;
    case 1: sqlite3_bind_int64(st, 1, (int64_t)(int8_t)v); break; /* small numbers: ids, kinds */
    case 2: sqlite3_bind_double(st, 1, (double)v / 7.0); break;
    case 3: sqlite3_bind_text(st, 1, (const char *)payload, (int)len, SQLITE_TRANSIENT); break;
    case 4: sqlite3_bind_blob(st, 1, payload, (int)len, SQLITE_TRANSIENT); break;
    case 5: sqlite3_bind_null(st, 1); break;
    default: break;
  }
  sqlite3_step(st);
  sqlite3_finalize(st);
  return true;
}

static void write_file(const uint8_t *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) abort();
  while (n) {
    ssize_t k = write(fd, data, n);
    if (k <= 0) abort();
    data += k;
    n -= (size_t)k;
  }
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size && data[0] == 0xff) {
    write_file(data + 1, size - 1);
  } else if (size && data[0] == 0xfe) {
    unsigned char *copy = malloc(seed_len);
    if (!copy) abort();
    memcpy(copy, seed, seed_len);
    for (size_t i = 1; i + 4 <= size; i += 4) { /* the events' pages are the file's last ones */
      size_t back = (size_t)data[i] << 16 | (size_t)data[i + 1] << 8 | data[i + 2];
      if (back < seed_len) copy[seed_len - 1 - back] = data[i + 3];
    }
    write_file(copy, seed_len);
    free(copy);
  } else {
    write_file(seed, seed_len);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) abort();
    sqlite3_exec(db, "begin", NULL, NULL, NULL);
    const uint8_t *p = data, *end = data + size;
    for (int i = 0; i < 64 && edit(db, &p, end); i++) {}
    sqlite3_exec(db, "commit", NULL, NULL, NULL);
    sqlite3_close(db);
  }
  static const ms_fold fold = {{"at::*,*@*.so"}, 1};
  ms_snapshot s;
  ms_analysis a;
  if (ms_open_analyzed(&s, &a, path, &fold, NULL) == 0) {
    ms_report_options o = {.max_frames = 8, .full_names = size & 1};
    ms_report_text(&a, &o, sink);
    ms_report_json(&a, sink);
    ms_report_side_by_side(&a, 1, sink); /* sites matched across snapshots (match.c) */
    ms_report_json_matched(&a, 1, sink);
    ms_analysis *pages[1] = {&a};
    ms_report_html(pages, 1, sink);
    ms_analysis_free(&a);
    ms_close(&s);
  }
  /* memsnap replay: the trace through libmemsnap's allocator on the simulated device */
  if (ms_open(&s, path) == 0 && ms_load_stacks(&s) == 0) {
    ms_replay_plan *plan = ms_replay_plan_new(&s);
    if (plan) {
      ms_replay_config c;
      ms_replay_recorded_config(plan, &c);
      char err[256];
      if (size & 2) ms_replay_config_set(&c, "max_split_size_mb", "64", err, sizeof err);
      if (size & 4) ms_replay_config_set(&c, "expandable_segments", "True", err, sizeof err);
      c.capacity = size & 8 ? (uint64_t)1 << 30 : 0;
      ms_replay_result *r = malloc(sizeof *r);
      if (r && ms_replay_check_config(plan, &c, err, sizeof err) == 0) ms_replay_run(&s, plan, &c, r);
      free(r);
      ms_replay_plan_free(plan);
    }
  }
  if (s.db) ms_close(&s);
  unlink(path);
  return 0;
}
