/* snapshot_read_events.c: the snapshot's events as the commands need them beside the full stream
 * (stream.c: ms_events_each): the memory events alone with fewer columns (the reconstruction of
 * the state before the history), the allocations as tokens (inferred iterations), a count of
 * allocations in a span of time, and a device's last out-of-memory event.
 *
 * Events are untrusted like every value of a snapshot: ms_memory_events_each checks its rows as
 * ms_events_each does (ms_event_plausible; stack ids outside the stacks table read as 0), so that
 * passes over either see the same events. Every function returns what it says, or -1 with the
 * message in s->error.
 */
#include <string.h>

#include "analyzer.h"
#include "snapshot_read.h"

static int memory_event_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  int64_t stack = sqlite3_column_count(st) > 6 ? sqlite3_column_int64(st, 6) : 0;
  /* No coalesce(): a NULL reads as 0 through sqlite3_column_int64 (cheaper), and only a NULL
     device differs. */
  ms_event e = {.kind = sqlite3_column_int(st, 0),
                .address = (uint64_t)sqlite3_column_int64(st, 1),
                .size = sqlite3_column_int64(st, 2),
                .device = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 3),
                .stream = (uint64_t)sqlite3_column_int64(st, 4),
                .requested = sqlite3_column_int64(st, 5),
                .stack_id = stack > 0 && (size_t)stack < c->s->nstacks ? (uint32_t)stack : 0};
  if (!ms_event_plausible(e.size, e.requested)) return 0;
  return ((int (*)(const ms_event *, void *))c->fn)(&e, c->arg);
}

int ms_memory_events_each(ms_snapshot *s, bool stacks, int (*fn)(const ms_event *e, void *arg), void *arg) {
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s,
                      stacks ? "select kind, address, size, device, stream, requested_size, stack_id from events "
                               "where kind in (1, 2, 4, 5, 11, 12) order by id"
                             : "select kind, address, size, device, stream, requested_size from events "
                               "where kind in (1, 2, 4, 5, 11, 12) order by id",
                      "events", memory_event_row, &c);
}

static int allocation_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  return ((int (*)(int64_t, int64_t, void *))c->fn)(sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), c->arg);
}

int ms_allocations_each(ms_snapshot *s, int (*fn)(int64_t stack_id, int64_t size, void *arg), void *arg) {
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s, "select coalesce(stack_id, 0), size from events where kind = 1 order by id", "events",
                      allocation_row, &c);
}

int64_t ms_count_allocations(ms_snapshot *s, int64_t from_ns, int64_t to_ns) {
  ms_sql_arg span[2] = {{NULL, from_ns}, {NULL, to_ns}};
  int64_t n = -1;
  if (ms_read_rows_args(s, "select count(*) from events where kind = 1 and time_ns >= ? and time_ns < ?", span, 2,
                        "events", ms_read_first_int64, &n) != 0)
    return -1;
  return n;
}

static int oom_row(sqlite3_stmt *st, void *arg) {
  ms_event *e = arg;
  e->kind = MS_OOM;
  e->address = (uint64_t)sqlite3_column_int64(st, 0);
  e->time_ns = sqlite3_column_int64(st, 1);
  return 1;
}

int ms_last_oom(ms_snapshot *s, int64_t device, ms_event *e) {
  ms_sql_arg d = {NULL, device};
  memset(e, 0, sizeof *e);
  e->device = (int)device;
  return ms_read_rows_args(s, "select address, time_ns from events where kind = 6 and device = ? order by id desc limit 1",
                           &d, 1, "events", oom_row, e);
}
