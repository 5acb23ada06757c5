/* dbhelper.h: reading a snapshot back in the allocator tests (test_modes.c, test_host_api.c):
 * the count of one kind of event, and the integer an SQL query answers. */
#ifndef MEMSNAP_DBHELPER_H
#define MEMSNAP_DBHELPER_H

#include <sqlite3.h>
#include <stdint.h>

/* Counts the events of `kind` in snapshot `path`; -1 if it cannot be read. */
static inline int count_events(const char *path, const char *kind) {
  sqlite3 *db;
  sqlite3_stmt *st;
  int n = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "SELECT count(*) FROM events e JOIN event_kinds k ON k.id = e.kind WHERE k.name = ?",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n;
}

/* The value of an SQL query on snapshot `path` (an integer), or -1. */
static inline int64_t query(const char *path, const char *sql) {
  sqlite3 *db;
  sqlite3_stmt *st;
  int64_t v = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

#endif
