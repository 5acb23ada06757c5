/* cmd_info.c: `memsnap info SNAPSHOT.db...`: what a snapshot is (its meta table, devices,
 * counts), without analysing the history. */
#include <stdio.h>

#include "analyzer.h"
#include "commands.h"

static void print_count(ms_snapshot *s, const char *label, const char *sql) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    printf("  %-18s %lld\n", label, (long long)sqlite3_column_int64(st, 0));
  sqlite3_finalize(st);
}

/* What the driver still had free on `device` at the last out-of-memory error, when there was one
 * (an imported PyTorch snapshot says nothing else about the device's memory). */
static void print_oom_free(ms_snapshot *s, int64_t device) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(s->db, "select address, time_ns from events where kind = 6 and device = ? order by id desc limit 1", -1,
                         &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, device);
    if (sqlite3_step(st) == SQLITE_ROW) {
      char b[32], t[32];
      ms_format_bytes(sqlite3_column_int64(st, 0), b, sizeof b);
      ms_format_ns(sqlite3_column_int64(st, 1) - s->first_ns, t, sizeof t);
      printf("  %-18s %s free on the device at the out-of-memory error at %s\n", "", b, t);
    }
  }
  sqlite3_finalize(st);
}

int cmd_info(int argc, char **argv) {
  if (argc < 2) return ms_usage_error("info", "no snapshot given");
  for (int i = 1; i < argc; i++)
    if (argv[i][0] == '-' && argv[i][1]) {
      return ms_unknown_option("info", argv[i], i + 1 == argc);
    }
  int rc = 0;
  for (int i = 1; i < argc; i++) {
    ms_snapshot s;
    if (ms_open(&s, argv[i]) != 0) {
      fprintf(stderr, "error: %s\n", s.error);
      rc = 1;
      continue;
    }
    ms_events_extent(&s); /* no pass reads the events here */
    char t[32];
    ms_format_ns(s.last_ns - s.first_ns, t, sizeof t);
    printf("%s\n", argv[i]);
    printf("  %-18s %d\n", "format", s.format_version);
    printf("  %-18s memsnap %s\n", "written by", s.tool_version);
    char process[sizeof s.host + 64];
    ms_process_text(&s, process, sizeof process);
    printf("  %-18s %s\n", "process", process);
    printf("  %-18s %s\n", "command line", s.command_line);
    printf("  %-18s %s, %lld device(s)\n", "backend", s.backend, (long long)s.device_count);
    printf("  %-18s %s\n", "stacks", s.stacks_mode);
    printf("  %-18s %lld kept of %lld recorded (%lld dropped; ring of %lld)\n", "events", (long long)s.nevents,
           (long long)s.recorded, (long long)s.dropped, (long long)s.max_entries);
    printf("  %-18s %s\n", "history spans", t);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s.db, "select device, name, total_bytes from devices order by device", -1, &st, NULL) == SQLITE_OK) {
      while (sqlite3_step(st) == SQLITE_ROW) {
        char b[32];
        ms_format_bytes(sqlite3_column_int64(st, 2), b, sizeof b);
        char name[256];
        snprintf(name, sizeof name, "%s", sqlite3_column_text(st, 1) ? (const char *)sqlite3_column_text(st, 1) : "");
        ms_neutralise(name);
        if (sqlite3_column_type(st, 2) == SQLITE_NULL) snprintf(b, sizeof b, "memory unknown");
        printf("  %-18s %lld: %s, %s\n", "device", (long long)sqlite3_column_int64(st, 0), name[0] ? name : "name unknown", b);
        print_oom_free(&s, sqlite3_column_int64(st, 0));
      }
    }
    sqlite3_finalize(st);
    print_count(&s, "segments", "select count(*) from segments");
    print_count(&s, "  of them external", "select count(*) from segments where pool = 'external'");
    print_count(&s, "live blocks", "select count(*) from blocks where state = 'allocated'");
    print_count(&s, "marks", "select count(*) from marks");
    print_count(&s, "ranges", "select count(*) from ranges");
    print_count(&s, "distinct stacks", "select count(*) from stacks");
    ms_close(&s);
  }
  return rc ? rc : ms_output_status();
}
