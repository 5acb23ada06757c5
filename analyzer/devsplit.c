/* devsplit.c: the documents of a report page: each snapshot's analysis, or, for a snapshot whose
 * memory is on several devices (a process using several GPUs, an imported PyTorch snapshot with
 * several device traces), one analysis per device, so that the page's selector switches every
 * view from one device to the next as PyTorch's memory viz does. The page's own pass over the
 * events (timeline.c) says which devices hold memory, so a snapshot of one costs nothing more.
 *
 * The analysis knows nothing of devices (it sums them), so each device is analyzed from a copy
 * of the snapshot, in a temporary file, that holds only that device: its events (and every event
 * of no device: marks, ranges), its segments and their blocks, its stats and device row, and the
 * other tables (stacks, frames, labels, meta...) whole. The copy has the schema of
 * snapshot_schema.h and the original's format version, so the reader and every pass read it as
 * they read any snapshot. The copies are removed by ms_page_set_free.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer.h"

/* Runs one statement of db (with ?1 bound to `device` when it has one); false on failure. */
static bool run(sqlite3 *db, const char *sql, int device) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return false;
  if (sqlite3_bind_parameter_count(st)) sqlite3_bind_int(st, 1, device);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW;
}

/* Copies table `table` of the attached snapshot `src` into db's, the rows that `where` keeps
 * (?1: the device), through the columns both have (older files lack later columns). */
static bool copy_table(sqlite3 *db, const char *table, const char *where, int device) {
  char cols[1024] = "", sql[2048];
  sqlite3_stmt *st;
  snprintf(sql, sizeof sql, "select m.name from pragma_table_info('%s', 'main') m join pragma_table_info('%s', 'src') s on s.name = m.name",
           table, table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return false;
  while (sqlite3_step(st) == SQLITE_ROW) {
    size_t n = strlen(cols);
    snprintf(cols + n, sizeof cols - n, "%s\"%s\"", n ? "," : "", (const char *)sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  if (!cols[0]) return true; /* a table the original lacks: left empty */
  snprintf(sql, sizeof sql, "insert into main.%s(%s) select %s from src.%s %s", table, cols, cols, table, where);
  return run(db, sql, device);
}

/* Writes the copy of snapshot `src_path` (format `version`) holding device `device` to `path`. */
static bool copy_device(const char *src_path, int version, int device, const char *path) {
  static const struct {
    const char *table, *where;
  } tables[] = {
      {"meta", ""}, {"options", ""}, {"devices", "where device = ?1"}, {"stats", "where device = ?1"},
      {"segments", "where device = ?1"},
      {"blocks", "where segment_id in (select id from src.segments where device = ?1)"},
      {"event_kinds", ""}, {"events", "where device = ?1 or device is null"}, {"labels", ""}, {"marks", ""},
      {"ranges", ""}, {"stacks", ""}, {"stack_frames", ""}, {"frames", ""},
  };
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  char pragma[64];
  snprintf(pragma, sizeof pragma, "pragma user_version = %d", version);
  bool ok = sqlite3_open(path, &db) == SQLITE_OK && sqlite3_exec(db, "pragma journal_mode = off; pragma synchronous = off", NULL, NULL, NULL) == SQLITE_OK &&
            sqlite3_exec(db, memsnap_schema_sql, NULL, NULL, NULL) == SQLITE_OK && run(db, pragma, 0) &&
            sqlite3_prepare_v2(db, "attach database ?1 as src", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_bind_text(st, 1, src_path, -1, SQLITE_STATIC) == SQLITE_OK && sqlite3_step(st) == SQLITE_DONE;
  sqlite3_finalize(st);
  ok = ok && sqlite3_exec(db, "begin", NULL, NULL, NULL) == SQLITE_OK;
  for (size_t i = 0; ok && i < sizeof tables / sizeof tables[0]; i++) ok = copy_table(db, tables[i].table, tables[i].where, device);
  ok = ok && sqlite3_exec(db, "commit", NULL, NULL, NULL) == SQLITE_OK;
  return sqlite3_close(db) == SQLITE_OK && ok;
}

/* Adds an analysis to the page's documents; false when out of memory. */
static bool add_doc(ms_page_set *ps, ms_analysis *a) {
  ms_analysis **g = realloc(ps->docs, (ps->ndocs + 1) * sizeof *g);
  if (!g) return false;
  ps->docs = g;
  ps->docs[ps->ndocs++] = a;
  return true;
}

/* One device of analysis a: copied, opened and analyzed, added to the documents. */
static int add_device(ms_page_set *ps, const ms_analysis *a, int version, int device, const char *label) {
  ms_page_copy *c = calloc(1, sizeof *c), **g = realloc(ps->copies, (ps->ncopies + 1) * sizeof *g);
  if (g) ps->copies = g;
  if (!c || !g) {
    free(c);
    snprintf(ps->error, sizeof ps->error, "out of memory");
    return -1;
  }
  ps->copies[ps->ncopies++] = c;
  const char *dir = getenv("TMPDIR");
  snprintf(c->path, sizeof c->path, "%s/memsnap-device-XXXXXX", dir && dir[0] ? dir : "/tmp");
  int fd = mkstemp(c->path);
  if (fd < 0) {
    c->path[0] = '\0';
    snprintf(ps->error, sizeof ps->error, "cannot make a temporary file for '%s', device %d", a->snap->shown_path, device);
    return -1;
  }
  close(fd);
  if (!copy_device(a->snap->path, version, device, c->path)) {
    snprintf(ps->error, sizeof ps->error, "cannot copy device %d of '%s' to a temporary file (TMPDIR)", device, a->snap->shown_path);
    return -1;
  }
  if (ms_open(&c->snap, c->path) != 0) {
    snprintf(ps->error, sizeof ps->error, "%s", c->snap.error);
    return -1;
  }
  c->opened = true;
  c->snap.fold = a->snap->fold;
  snprintf(c->snap.shown_path, sizeof c->snap.shown_path, "%.480s, device %d", a->snap->shown_path, device);
  if (ms_analyze(&c->snap, &c->analysis, label) != 0) {
    snprintf(ps->error, sizeof ps->error, "%s", c->snap.error);
    return -1;
  }
  c->analyzed = true;
  return add_doc(ps, &c->analysis) ? 0 : -1;
}

int ms_page_set_build(ms_page_set *ps, ms_analysis *a, size_t n, const char *label) {
  memset(ps, 0, sizeof *ps);
  for (size_t i = 0; i < n; i++) {
    if (ms_analyze_timeline(&a[i]) != 0) { /* the page's pass, which also finds the devices */
      snprintf(ps->error, sizeof ps->error, "%s", a[i].snap->error);
      return -1;
    }
    uint64_t devices = a[i].timeline->devices;
    if (!(devices & (devices - 1))) { /* one device, or none */
      if (!add_doc(ps, &a[i])) {
        snprintf(ps->error, sizeof ps->error, "out of memory");
        return -1;
      }
      continue;
    }
    for (int d = 0; d < MS_MAX_DEVICES; d++)
      if ((devices >> d & 1) && add_device(ps, &a[i], a[i].snap->format_version, d, label) != 0) return -1;
  }
  return 0;
}

void ms_page_set_free(ms_page_set *ps) {
  for (size_t i = 0; i < ps->ncopies; i++) {
    ms_page_copy *c = ps->copies[i];
    if (c->analyzed) ms_analysis_free(&c->analysis);
    if (c->opened) ms_close(&c->snap);
    if (c->path[0]) unlink(c->path);
    free(c);
  }
  free(ps->copies);
  free(ps->docs);
  memset(ps, 0, sizeof *ps);
}
