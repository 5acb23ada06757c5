/* events.c: the snapshot's events as the commands need them beside the full stream
 * (stream.c: ms_events_each): the allocations as tokens (inferred iterations), a count of
 * allocations in a span of time, and a device's last out-of-memory event.
 *
 * Events are untrusted like every value of a snapshot: passes over all of them go through
 * ms_events_each (stream.c), which checks every row the same way. Every function returns what it
 * says, or -1 with the message in s->error.
 */
#include <string.h>

#include "read.h"
#include "read_private.h"

/* ms_allocations_each's pass: the allocations among the events. */
typedef struct allocation_call {
  int (*fn)(int64_t stack_id, int64_t size, void *arg);
  void *arg;
} allocation_call;

static int allocation_event(const ms_event *e, void *arg) {
  allocation_call *c = arg;
  return e->kind == MS_ALLOC ? c->fn(e->stack_id, e->size, c->arg) : 0;
}

int ms_allocations_each(ms_snapshot *s, int (*fn)(int64_t stack_id, int64_t size, void *arg), void *arg) {
  allocation_call c = {fn, arg};
  return ms_events_each(s, allocation_event, &c); /* the page reader, on every core */
}

int64_t ms_count_allocations(ms_snapshot *s, int64_t from_ns, int64_t to_ns) {
  ms_sql_arg span[2] = {{NULL, from_ns}, {NULL, to_ns}};
  int64_t n = -1;
  if (ms_read_rows_args(s, "select count(*) from events where kind = 1 and time_ns >= ?1 and time_ns < ?2 and "
                        "(" MS_ON_DEVICE("device") " or device is null)", span, 2,
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
