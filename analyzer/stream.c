/* stream.c: the events of a snapshot, streamed in order to a pass (ms_events_each), read on
 * every core.
 *
 * Decoding SQLite rows is most of an analysis's time. A long history is cut into chunks of
 * CHUNK ids (range queries on the events' primary key), which NREADERS threads read, each
 * through its own read-only connection, into NSLOTS buffers; the calling thread hands the
 * buffers' events to the pass in id order. Memory is NSLOTS chunks, whatever the history's
 * length. A short history (or a file the readers cannot open again) is read on the calling
 * thread through the snapshot's own connection. Either way a row is checked the same way
 * (read_row) and malformed ones are skipped.
 *
 * The history's extent (how many events, the first and last time) is counted by the first pass
 * that reads every row, so that no pass is spent on it; ms_events_extent counts it on its own
 * only for a command that needs it before any pass (memsnap info).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer.h"

#define CHUNK 8192             /* ids per chunk */
#define NSLOTS 6               /* chunks buffered (read ahead of the pass): 3.8 MiB */
#define MAX_READERS 4
#define PARALLEL_MIN 200000    /* histories shorter than this are read on the calling thread */

/* No coalesce(): a NULL reads as 0 through sqlite3_column_int64, and only a NULL device differs. */
static const char events_sql[] = "select id, time_ns, kind, device, stream, address, size, requested_size, extra, "
                                 "thread, stack_id from events";

/* The extent of what a pass read: rows with an integer time, the first and last of them. */
typedef struct tally {
  int64_t count, first, last;
} tally;

static void tally_add(tally *t, const tally *u) {
  if (u->count == 0) return;
  if (t->count == 0 || u->first < t->first) t->first = u->first;
  if (t->count == 0 || u->last > t->last) t->last = u->last;
  t->count += u->count;
}

/* Reads the current row into e, counting its time into t; false for a malformed row, which is
 * skipped: sizes must be plausible (no device has 2^40 bytes, a TiB), which keeps sums over them
 * from overflowing short of 8 million such blocks at once. */
static bool read_row(const ms_snapshot *s, sqlite3_stmt *st, ms_event *e, tally *t) {
  e->id = sqlite3_column_int64(st, 0);
  e->time_ns = sqlite3_column_int64(st, 1);
  if (sqlite3_column_type(st, 1) == SQLITE_INTEGER) { /* as ms_events_extent counts */
    if (t->count == 0 || e->time_ns < t->first) t->first = e->time_ns;
    if (t->count == 0 || e->time_ns > t->last) t->last = e->time_ns;
    t->count++;
  }
  e->kind = (int)sqlite3_column_int64(st, 2);
  e->device = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : (int)sqlite3_column_int64(st, 3);
  e->stream = (uint64_t)sqlite3_column_int64(st, 4);
  e->address = (uint64_t)sqlite3_column_int64(st, 5);
  e->size = sqlite3_column_int64(st, 6);
  e->requested = sqlite3_column_int64(st, 7);
  e->extra = sqlite3_column_int64(st, 8);
  e->thread = sqlite3_column_int64(st, 9);
  int64_t stack = sqlite3_column_int64(st, 10);
  e->stack_id = stack > 0 && (size_t)stack < s->nstacks ? (uint32_t)stack : 0;
  return !(e->size < 0 || e->requested < 0 || e->size > ((int64_t)1 << 40) || e->requested > ((int64_t)1 << 40));
}

/* Progress on stderr for long work, when a person watches (stderr is a terminal). */
typedef struct progress {
  bool on;
  int64_t total; /* rows expected (the id range when the extent is not known yet) */
  int64_t rows, shown;
} progress;

static void progress_step(ms_snapshot *s, progress *p, int64_t rows) {
  int64_t before = p->rows;
  p->rows += rows;
  if (!p->on || (before >> 16) == (p->rows >> 16) || p->rows * 100 / p->total == p->shown) return;
  p->shown = p->rows * 100 / p->total;
  if (p->shown > 100) p->shown = 100;
  fprintf(stderr, "\rreading %s: %3lld%%", s->shown_path, (long long)p->shown);
}

static void progress_end(ms_snapshot *s, progress *p) {
  if (p->on) fprintf(stderr, "\r%*s\r", (int)strlen(s->shown_path) + 20, "");
}

static int fail_read(ms_snapshot *s, const char *what, sqlite3 *db) {
  snprintf(s->error, sizeof s->error, "'%s': %s: %s", s->shown_path, what, sqlite3_errmsg(db));
  return -1;
}

/* The calling thread alone, through the snapshot's connection. */
static int each_serial(ms_snapshot *s, int (*fn)(const ms_event *e, void *arg), void *arg, progress *pg, tally *t) {
  sqlite3_stmt *st;
  char sql[sizeof events_sql + 16];
  snprintf(sql, sizeof sql, "%s order by id", events_sql);
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return fail_read(s, "cannot read events", s->db);
  int rc = 0, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    ms_event e;
    progress_step(s, pg, 1);
    if (!read_row(s, st, &e, t)) continue;
    if ((rc = fn(&e, arg)) != 0) break;
  }
  if (step != SQLITE_ROW && step != SQLITE_DONE) rc = fail_read(s, "reading events failed", s->db);
  sqlite3_finalize(st);
  return rc;
}

/* The lowest and highest event ids (hi < lo when there are none). Two subqueries: each is one
 * step down the primary key, where "min(id), max(id)" in one select reads every row. */
static void id_range(ms_snapshot *s, int64_t *lo, int64_t *hi) {
  sqlite3_stmt *st;
  *lo = 0;
  *hi = -1;
  if (sqlite3_prepare_v2(s->db, "select (select min(id) from events), (select max(id) from events)", -1, &st, NULL) ==
          SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
    *lo = sqlite3_column_int64(st, 0);
    *hi = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
}

/* ---- several readers -------------------------------------------------------------------- */

typedef struct slot {
  int64_t chunk; /* the chunk it holds or is to hold next */
  bool full;     /* read, waiting for the pass */
  size_t n;
  int64_t rows;  /* rows read, malformed ones included (progress) */
  tally extent;  /* of those rows */
  ms_event *events;
} slot;

typedef struct readers {
  ms_snapshot *s;
  int64_t first_id, last_id, nchunks;
  int nreaders;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  slot slots[NSLOTS];
  bool stop;    /* the pass is over (done, stopped or failed) */
  char error[512];
} readers;

typedef struct reader_arg {
  readers *r;
  int index;
} reader_arg;

static void *reader_main(void *p) {
  reader_arg *ra = p;
  readers *r = ra->r;
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  char sql[sizeof events_sql + 64];
  snprintf(sql, sizeof sql, "%s where id >= ?1 and id <= ?2 order by id", events_sql);
  const char *failed = NULL;
  if (sqlite3_open_v2(r->s->path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
      sqlite3_exec(db, "PRAGMA cache_size=-512", NULL, NULL, NULL) != SQLITE_OK || /* a scan reuses no page */
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
    failed = "cannot read events";
  for (int64_t c = ra->index; c < r->nchunks && !failed; c += r->nreaders) {
    slot *sl = &r->slots[c % NSLOTS];
    pthread_mutex_lock(&r->lock);
    while (!r->stop && (sl->chunk != c || sl->full)) pthread_cond_wait(&r->changed, &r->lock);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->lock);
    if (stop) break;
    sl->n = 0;
    sl->rows = 0;
    sl->extent = (tally){0, 0, 0};
    uint64_t from = (uint64_t)r->first_id + (uint64_t)c * CHUNK; /* no signed overflow near the ends */
    uint64_t to = (uint64_t)r->last_id - from < CHUNK - 1 ? (uint64_t)r->last_id : from + CHUNK - 1;
    sqlite3_bind_int64(st, 1, (int64_t)from);
    sqlite3_bind_int64(st, 2, (int64_t)to);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
      sl->rows++;
      if (read_row(r->s, st, &sl->events[sl->n], &sl->extent)) sl->n++;
    }
    if (step != SQLITE_DONE) failed = "reading events failed";
    sqlite3_reset(st);
    pthread_mutex_lock(&r->lock);
    sl->full = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
  }
  if (failed) {
    pthread_mutex_lock(&r->lock);
    if (!r->error[0]) snprintf(r->error, sizeof r->error, "%s: %s", failed, db ? sqlite3_errmsg(db) : "out of memory");
    r->stop = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return NULL;
}

/* 1 when the readers ran the pass (rc set), 0 when they could not start (read serially). */
static int each_parallel(ms_snapshot *s, int (*fn)(const ms_event *e, void *arg), void *arg, progress *pg, int *rc,
                         int64_t lo, int64_t hi, int64_t rows, tally *t) {
  /* ids far sparser than the rows (a crafted file): chunks would be mostly empty queries */
  uint64_t span = (uint64_t)hi - (uint64_t)lo; /* ids in the range, less one */
  if (hi < lo || span / 4 > (uint64_t)rows) return 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  readers *r = calloc(1, sizeof *r);
  if (!r) return 0;
  r->s = s;
  r->first_id = lo;
  r->last_id = hi;
  r->nchunks = (int64_t)(span / CHUNK + 1);
  r->nreaders = cpus > MAX_READERS ? MAX_READERS : cpus < 2 ? 2 : (int)cpus;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->changed, NULL);
  bool ok = true;
  for (int k = 0; k < NSLOTS; k++) {
    r->slots[k].chunk = k;
    ok &= (r->slots[k].events = malloc(sizeof(ms_event) * CHUNK)) != NULL;
  }
  pthread_t threads[MAX_READERS];
  reader_arg args[MAX_READERS];
  int started = 0;
  for (; ok && started < r->nreaders; started++) {
    args[started] = (reader_arg){r, started};
    if (pthread_create(&threads[started], NULL, reader_main, &args[started]) != 0) break;
  }
  if (started < r->nreaders) { /* a reader is missing: its chunks would never come */
    pthread_mutex_lock(&r->lock);
    r->stop = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
  }
  int result = 0;
  bool ran = started == r->nreaders;
  for (int64_t c = 0; ran && c < r->nchunks && result == 0; c++) {
    slot *sl = &r->slots[c % NSLOTS];
    pthread_mutex_lock(&r->lock);
    while (!sl->full && !r->stop) pthread_cond_wait(&r->changed, &r->lock);
    bool have = sl->full && sl->chunk == c;
    pthread_mutex_unlock(&r->lock);
    if (!have) {
      result = -1;
      break;
    }
    progress_step(s, pg, sl->rows);
    tally_add(t, &sl->extent);
    for (size_t i = 0; i < sl->n && result == 0; i++) result = fn(&sl->events[i], arg);
    pthread_mutex_lock(&r->lock);
    sl->full = false;
    sl->chunk = c + NSLOTS;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
  }
  pthread_mutex_lock(&r->lock);
  r->stop = true;
  pthread_cond_broadcast(&r->changed);
  pthread_mutex_unlock(&r->lock);
  for (int k = 0; k < started; k++) pthread_join(threads[k], NULL);
  if (ran && result < 0 && r->error[0]) snprintf(s->error, sizeof s->error, "'%s': %s", s->shown_path, r->error);
  else if (ran && result < 0 && !s->error[0]) snprintf(s->error, sizeof s->error, "'%s': reading events failed", s->shown_path);
  for (int k = 0; k < NSLOTS; k++) free(r->slots[k].events);
  pthread_cond_destroy(&r->changed);
  pthread_mutex_destroy(&r->lock);
  free(r);
  *rc = result;
  return ran;
}

/* ---- the extent of the history: count, first and last time ------------------------------ */

typedef struct extent {
  const char *path;
  sqlite3 *db;            /* the snapshot's connection, or NULL: open one */
  int64_t from, to;       /* ids */
  int64_t count, first, last;
  bool ok;
} extent;

static void *extent_main(void *p) {
  extent *x = p;
  sqlite3 *db = x->db;
  sqlite3_stmt *st = NULL;
  if (!db && (sqlite3_open_v2(x->path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
              sqlite3_exec(db, "PRAGMA cache_size=-512", NULL, NULL, NULL) != SQLITE_OK))
    goto out;
  if (sqlite3_prepare_v2(db, "select count(*), min(time_ns), max(time_ns) from events where typeof(time_ns) = 'integer' "
                         "and id >= ?1 and id <= ?2", -1, &st, NULL) != SQLITE_OK)
    goto out;
  sqlite3_bind_int64(st, 1, x->from);
  sqlite3_bind_int64(st, 2, x->to);
  if (sqlite3_step(st) == SQLITE_ROW) {
    x->count = sqlite3_column_int64(st, 0);
    x->first = sqlite3_column_int64(st, 1);
    x->last = sqlite3_column_int64(st, 2);
    x->ok = true;
  }
out:
  sqlite3_finalize(st);
  if (db != x->db) sqlite3_close(db);
  return NULL;
}

void ms_events_extent(ms_snapshot *s) {
  if (s->extent_known) return;
  s->extent_known = true;
  int64_t lo, hi;
  id_range(s, &lo, &hi);
  if (hi < lo) return;
  /* Long histories: the halves of the id range counted at once, each through its own connection. */
  int64_t mid = (int64_t)((uint64_t)lo + ((uint64_t)hi - (uint64_t)lo) / 2);
  bool split = (uint64_t)hi - (uint64_t)lo >= PARALLEL_MIN;
  extent x[2] = {{s->path, s->db, lo, split ? mid : hi, 0, 0, 0, false}, {s->path, NULL, mid + 1, hi, 0, 0, 0, false}};
  pthread_t other;
  bool threaded = split && pthread_create(&other, NULL, extent_main, &x[1]) == 0;
  if (split && !threaded) x[0].to = hi; /* no thread: all of it here */
  extent_main(&x[0]);
  if (threaded) pthread_join(other, NULL);
  if (threaded && !x[1].ok) { /* the other connection failed: count its half here */
    x[1].db = s->db;
    extent_main(&x[1]);
  }
  for (int k = 0; k < 2; k++) {
    if (!x[k].ok || x[k].count == 0) continue;
    if (s->nevents == 0 || x[k].first < s->first_ns) s->first_ns = x[k].first;
    if (s->nevents == 0 || x[k].last > s->last_ns) s->last_ns = x[k].last;
    s->nevents += x[k].count;
  }
}

/* Rows in the events table, without reading them (SQLite counts a table's cells page by page);
 * -1 when it cannot say. */
static int64_t row_count(ms_snapshot *s) {
  sqlite3_stmt *st;
  int64_t n = -1;
  if (sqlite3_prepare_v2(s->db, "select count(*) from events", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

int ms_events_each(ms_snapshot *s, int (*fn)(const ms_event *e, void *arg), void *arg) {
  int64_t lo, hi;
  id_range(s, &lo, &hi);
  int64_t rows = s->extent_known ? s->nevents : row_count(s);
  progress pg = {rows > 500000 && isatty(2), rows, 0, -1};
  tally t = {0, 0, 0};
  int rc = 0;
  if (rows < PARALLEL_MIN || !each_parallel(s, fn, arg, &pg, &rc, lo, hi, rows, &t)) {
    t = (tally){0, 0, 0};
    rc = each_serial(s, fn, arg, &pg, &t);
  }
  progress_end(s, &pg);
  if (rc == 0 && !s->extent_known) { /* every row was read: the extent, for free */
    s->extent_known = true;
    s->nevents = t.count;
    s->first_ns = t.count ? t.first : 0;
    s->last_ns = t.count ? t.last : 0;
  }
  return rc;
}
