/* stream.c: the events of a snapshot, streamed in order to a pass (ms_events_each), read on
 * every core.
 *
 * Decoding rows is most of an analysis's time, and SQLite's virtual machine spends some 2,800
 * instructions on each of the events' rows. So the rows are read straight from the file's
 * b-tree pages (tablescan.c: some 700) when the file allows it: the events table as
 * memsnap writes it, no write-ahead log or hot journal beside the file. Otherwise, and from the
 * first row the page reader finds anomalous (a value that is not an integer, a damaged page, ids
 * out of order), the rest is read through SQLite, which has an answer for every file.
 *
 * A long history is cut into chunks (leaf pages of about SLOT_EVENTS rows, or CHUNK ids through
 * range queries on the primary key), which the reader threads decode into NSLOTS buffers, each
 * SQLite reader through its own read-only connection; the calling thread hands the buffers'
 * events to the pass in id order. Memory is NSLOTS chunks (a buffer grows, at most SLOT_GROWTH
 * times, for a chunk of rows smaller than ROW_BYTES), whatever the history's length (and the
 * leaves' page numbers, 4 bytes per leaf page). A short history is read on the calling thread.
 * However a row is read, it is checked the same way (fill_event) and malformed ones are skipped.
 *
 * The history's extent (how many events, the first and last time) is counted by the first pass
 * that reads every row, so that no pass is spent on it; ms_events_extent runs a pass for it
 * only for a command that needs it before any other (memsnap info).
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "read.h"
#include "tablescan.h"

#define CHUNK 8192             /* ids per chunk, read through SQLite */
#define SLOT_EVENTS 8192       /* events a buffer holds (grown for a chunk of pages with more rows) */
#define ROW_BYTES 32           /* a row of memsnap's events table in its leaf page, about: how many
                                  leaves a chunk of the page reader spans (SLOT_EVENTS rows) */
#define NSLOTS 4               /* chunks buffered (read ahead of the pass): 2.5 MiB */
#define SLOT_GROWTH 8          /* a buffer grows to at most SLOT_GROWTH * SLOT_EVENTS events (rows of 4
                                  bytes; more in a chunk is an anomaly: SQLite reads the rest) */
#define MAX_READERS 4
#define PARALLEL_MIN 200000    /* histories shorter than this are read on the calling thread */
#define PARALLEL_MIN_BYTES (6 << 20) /* ... as many in leaf pages (memsnap's rows: some 32 bytes) */

/* No coalesce(): a NULL reads as 0 through sqlite3_column_int64, and only a NULL device differs. */
static const char events_sql[] = "select id, time_ns, kind, device, stream, address, size, requested_size, extra, "
                                 "thread, stack_id from events";
/* The columns events_sql reads, in the table's order (the page reader needs exactly these). */
static const char *const event_columns[MS_TABLESCAN_COLUMNS] = {
    "id", "time_ns", "kind", "device", "stream", "address", "size", "requested_size", "extra", "thread", "stack_id"};
enum { TIME_NOT_INTEGER = 1u << 1, DEVICE_NULL = 1u << 3 }; /* fill_event's flags, by column */

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

/* One row's values v (in event_columns' order; flags TIME_NOT_INTEGER, DEVICE_NULL) into e, its
 * time counted into t; false for a row of another device than the snapshot's only_device, and for
 * a malformed row, which are skipped: sizes must be plausible (no
 * device has 2^40 bytes, a TiB), which keeps sums over them from overflowing short of 8 million
 * such blocks at once. */
static bool fill_event(const ms_snapshot *s, const int64_t *v, uint32_t flags, ms_event *e, tally *t) {
  if (s->only_device >= 0 && !(flags & DEVICE_NULL) && v[3] != s->only_device) return false; /* ms_only_device */
  e->id = v[0];
  e->time_ns = v[1];
  if (!(flags & TIME_NOT_INTEGER)) { /* as ms_events_extent counts */
    if (t->count == 0 || e->time_ns < t->first) t->first = e->time_ns;
    if (t->count == 0 || e->time_ns > t->last) t->last = e->time_ns;
    t->count++;
  }
  e->kind = (int)v[2];
  e->device = flags & DEVICE_NULL ? -1 : (int)v[3];
  e->stream = (uint64_t)v[4];
  e->address = (uint64_t)v[5];
  e->size = v[6];
  e->requested = v[7];
  e->extra = v[8];
  e->thread = v[9];
  e->stack_id = v[10] > 0 && (uint64_t)v[10] < s->nstacks ? (uint32_t)v[10] : 0;
  return ms_event_plausible(e->size, e->requested);
}

/* The current row of events_sql through fill_event. */
static bool read_row(const ms_snapshot *s, sqlite3_stmt *st, ms_event *e, tally *t) {
  int64_t v[MS_TABLESCAN_COLUMNS];
  for (int c = 0; c < MS_TABLESCAN_COLUMNS; c++) v[c] = sqlite3_column_int64(st, c);
  uint32_t flags = (sqlite3_column_type(st, 1) != SQLITE_INTEGER ? TIME_NOT_INTEGER : 0) |
                   (sqlite3_column_type(st, 3) == SQLITE_NULL ? DEVICE_NULL : 0);
  return fill_event(s, v, flags, e, t);
}

/* A row from the pages through fill_event (the id is the rowid: the record holds NULL there). */
static bool page_row(const ms_snapshot *s, const ms_tablescan_row *row, ms_event *e, tally *t) {
  int64_t v[MS_TABLESCAN_COLUMNS];
  memcpy(v, row->values, sizeof v);
  v[0] = row->rowid;
  return fill_event(s, v, row->nulls & (TIME_NOT_INTEGER | DEVICE_NULL), e, t);
}

/* Progress on stderr for long work, when a person watches (stderr is a terminal). */
typedef struct progress {
  bool on;
  int64_t total; /* units expected: rows, or leaf pages */
  int64_t done, shown;
} progress;

static progress progress_start(int64_t total, int64_t worth_showing) {
  return (progress){total > worth_showing && isatty(2), total, 0, -1};
}

static void progress_step(ms_snapshot *s, progress *p, int64_t units) {
  int64_t before = p->done;
  p->done += units;
  if (!p->on || (before >> 16) == (p->done >> 16) || p->done * 100 / p->total == p->shown) return;
  p->shown = p->done * 100 / p->total;
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

/* Where a pass stands: what it handed on, so that another reader can go on after it. */
typedef struct delivery {
  int (*fn)(const ms_event *e, void *arg);
  void *arg;
  tally extent;   /* of the rows handed on */
  int64_t last;   /* the last id handed on */
  bool any;       /* one was */
} delivery;

/* SQLite on the calling thread, from id `from` on, through the snapshot's connection. */
static int each_serial(ms_snapshot *s, delivery *d, progress *pg, int64_t from) {
  sqlite3_stmt *st;
  char sql[sizeof events_sql + 32];
  snprintf(sql, sizeof sql, "%s where id >= ?1 order by id", events_sql);
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return fail_read(s, "cannot read events", s->db);
  sqlite3_bind_int64(st, 1, from);
  int rc = 0, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    ms_event e;
    progress_step(s, pg, 1);
    if (!read_row(s, st, &e, &d->extent)) continue;
    if ((rc = d->fn(&e, d->arg)) != 0) break;
  }
  if (step != SQLITE_ROW && step != SQLITE_DONE) rc = fail_read(s, "reading events failed", s->db);
  sqlite3_finalize(st);
  return rc;
}

/* The page reader on the calling thread: each row handed on as it is decoded. */
typedef struct serial_pages {
  const ms_snapshot *s;
  delivery *d;
  int stopped; /* fn's non-zero value */
} serial_pages;

static int serial_page_row(const ms_tablescan_row *row, void *arg) {
  serial_pages *sp = arg;
  delivery *d = sp->d;
  if (d->any && row->rowid <= d->last) return -1; /* ids out of order: an anomaly */
  ms_event e;
  if (!page_row(sp->s, row, &e, &d->extent)) return 0;
  d->last = e.id;
  d->any = true;
  sp->stopped = d->fn(&e, d->arg);
  return sp->stopped ? 1 : 0;
}

/* Returns fn's non-zero value when it stopped, else 0 with *anomaly set when the pages could not
 * be read to the end (the rows before handed on). */
static int each_serial_pages(ms_snapshot *s, const ms_tablescan *scan, delivery *d, bool *anomaly) {
  uint8_t *page = malloc(ms_tablescan_page_size(scan));
  serial_pages sp = {s, d, 0};
  *anomaly = !page || ms_tablescan_rows(scan, 0, ms_tablescan_leaves(scan), page, serial_page_row, &sp) < 0;
  free(page);
  return sp.stopped;
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

/* A chunk's buffer. Each on cache lines of its own: a reader fills one while another reader
 * fills the next and the pass empties a third (a slot's fields are written once a chunk; the
 * counts a reader keeps row by row stay on its own stack: slot_fill). */
typedef struct slot {
  int64_t chunk; /* the chunk it holds or is to hold next */
  bool full;     /* read, waiting for the pass */
  bool anomaly;  /* the page reader stopped in it: nothing of it is handed on */
  size_t n;
  int64_t units; /* progress: rows read (malformed ones included) or leaf pages */
  tally extent;  /* of the events it holds */
  ms_event *events;
  size_t cap;    /* events the buffer holds: SLOT_EVENTS, more once a chunk needed it */
} __attribute__((aligned(64))) slot;

typedef struct readers {
  ms_snapshot *s;
  const ms_tablescan *scan; /* the pages, or NULL: SQLite range queries */
  int64_t first_id, last_id; /* SQLite: the ids */
  size_t leaves_per_chunk;   /* pages: about SLOT_EVENTS rows of ROW_BYTES */
  int64_t nchunks;
  int nreaders;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  slot slots[NSLOTS];
  bool stop;    /* the pass is over (done, stopped or failed) */
  char error[512];
} __attribute__((aligned(64))) readers;

typedef struct reader_arg {
  readers *r;
  int index;
} reader_arg;

/* A chunk read into a slot's events, counted here (the reader's own stack) and handed to the
 * slot once the chunk is read. */
typedef struct slot_fill {
  const ms_snapshot *s;
  slot *sl; /* whose buffer grows when the page reader's chunk has more rows */
  ms_event *events;
  size_t n;
  tally extent;
  int64_t last;
  bool any;
} slot_fill;

/* Doubles the slot's buffer (its reader's alone while it fills it); false when out of memory or
 * at its bound. */
static bool slot_grow(slot_fill *f) {
  if (f->sl->cap >= (size_t)SLOT_GROWTH * SLOT_EVENTS) return false;
  ms_event *g = realloc(f->sl->events, sizeof *g * f->sl->cap * 2);
  if (!g) return false;
  f->sl->events = f->events = g;
  f->sl->cap *= 2;
  return true;
}

/* The page reader's row: -1 (an anomaly) for ids out of order, or rows past what memory holds. */
static int slot_page_row(const ms_tablescan_row *row, void *arg) {
  slot_fill *f = arg;
  if ((f->any && row->rowid <= f->last) || (f->n == f->sl->cap && !slot_grow(f))) return -1;
  f->last = row->rowid;
  f->any = true;
  if (page_row(f->s, row, &f->events[f->n], &f->extent)) f->n++;
  return 0;
}

/* Reads chunk c into sl; a message when reading through SQLite failed. */
static const char *read_chunk(readers *r, int64_t c, slot *sl, sqlite3_stmt *st, uint8_t *page) {
  slot_fill f = {r->s, sl, sl->events, 0, {0, 0, 0}, 0, false};
  if (r->scan) {
    size_t from = (size_t)c * r->leaves_per_chunk, to = from + r->leaves_per_chunk;
    sl->anomaly = ms_tablescan_rows(r->scan, from, to, page, slot_page_row, &f) != 0;
    sl->units = (int64_t)((to < ms_tablescan_leaves(r->scan) ? to : ms_tablescan_leaves(r->scan)) - from);
    sl->n = f.n;
    sl->extent = f.extent;
    return NULL;
  }
  uint64_t from = (uint64_t)r->first_id + (uint64_t)c * CHUNK; /* no signed overflow near the ends */
  uint64_t to = (uint64_t)r->last_id - from < CHUNK - 1 ? (uint64_t)r->last_id : from + CHUNK - 1;
  sqlite3_bind_int64(st, 1, (int64_t)from);
  sqlite3_bind_int64(st, 2, (int64_t)to);
  int step;
  int64_t units = 0;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    units++;
    if (read_row(r->s, st, &f.events[f.n], &f.extent)) f.n++;
  }
  sl->units = units;
  sl->n = f.n;
  sl->extent = f.extent;
  sqlite3_reset(st);
  return step == SQLITE_DONE ? NULL : "reading events failed";
}

static void *reader_main(void *p) {
  reader_arg *ra = p;
  readers *r = ra->r;
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  uint8_t *page = NULL;
  char sql[sizeof events_sql + 64];
  snprintf(sql, sizeof sql, "%s where id >= ?1 and id <= ?2 order by id", events_sql);
  const char *failed = NULL;
  if (r->scan) {
    if (!(page = malloc(ms_tablescan_page_size(r->scan)))) failed = "out of memory";
  } else if (sqlite3_open_v2(r->s->path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
             sqlite3_exec(db, "PRAGMA cache_size=-512", NULL, NULL, NULL) != SQLITE_OK || /* a scan reuses no page */
             sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    failed = "cannot read events";
  }
  for (int64_t c = ra->index; c < r->nchunks && !failed; c += r->nreaders) {
    slot *sl = &r->slots[c % NSLOTS];
    pthread_mutex_lock(&r->lock);
    while (!r->stop && (sl->chunk != c || sl->full)) pthread_cond_wait(&r->changed, &r->lock);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->lock);
    if (stop) break;
    sl->n = 0;
    sl->units = 0;
    sl->anomaly = false;
    sl->extent = (tally){0, 0, 0};
    failed = read_chunk(r, c, sl, st, page);
    if (failed) break;
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
  free(page);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return NULL;
}

/* The readers over r's chunks, the pass on the calling thread. Returns false when they could not
 * start (nothing was handed on); else true with *rc the pass's result, and *anomaly set when the
 * page reader stopped at a chunk (everything before it was handed on, nothing of it). */
static bool run_readers(readers *r, delivery *d, progress *pg, int *rc, bool *anomaly) {
  ms_snapshot *s = r->s;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  r->nreaders = cpus > MAX_READERS ? MAX_READERS : cpus < 2 ? 2 : (int)cpus;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->changed, NULL);
  bool ok = true;
  for (int k = 0; k < NSLOTS; k++) {
    r->slots[k].chunk = k;
    r->slots[k].cap = SLOT_EVENTS;
    ok &= (r->slots[k].events = malloc(sizeof(ms_event) * SLOT_EVENTS)) != NULL;
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
    if (sl->anomaly || (sl->n && d->any && sl->events[0].id <= d->last)) {
      *anomaly = true;
      break;
    }
    progress_step(s, pg, sl->units);
    tally_add(&d->extent, &sl->extent);
    for (size_t i = 0; i < sl->n && result == 0; i++) result = d->fn(&sl->events[i], d->arg);
    if (sl->n) {
      d->last = sl->events[sl->n - 1].id;
      d->any = true;
    }
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
  *rc = result;
  return ran;
}

/* ---- the two sources -------------------------------------------------------------------- */

/* The events' pages, when the file is the whole database and its events table is memsnap's:
 * these columns in this order, `id` the rowid, no defaults (a column added later with one would
 * be missing from older records). NULL otherwise, or with MEMSNAP_READER=sqlite (SQLite only;
 * MEMSNAP_READER=pages: the pages only, a pass fails where they cannot be read: for tests). */
static ms_tablescan *open_pages(ms_snapshot *s) {
  const char *how = getenv("MEMSNAP_READER");
  if (how && !strcmp(how, "sqlite")) return NULL;
  char side[PATH_MAX];
  struct stat st;
  static const char *const sides[] = {"-wal", "-journal"};
  for (size_t i = 0; i < sizeof sides / sizeof *sides; i++) {
    if (snprintf(side, sizeof side, "%s%s", s->path, sides[i]) >= (int)sizeof side) return NULL;
    if (stat(side, &st) == 0 && st.st_size > 0) return NULL; /* pages that are not in the file yet */
  }
  sqlite3_stmt *q;
  int n = 0;
  bool same = true;
  if (sqlite3_prepare_v2(s->db, "select name, type, dflt_value is null, pk from pragma_table_info('events') order by cid",
                         -1, &q, NULL) != SQLITE_OK)
    return NULL;
  while (same && sqlite3_step(q) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(q, 0), *type = (const char *)sqlite3_column_text(q, 1);
    same = n < MS_TABLESCAN_COLUMNS && name && !strcmp(name, event_columns[n]) && sqlite3_column_int(q, 2) &&
           sqlite3_column_int(q, 3) == (n == 0) && (n > 0 || (type && !strcasecmp(type, "INTEGER")));
    n++;
  }
  sqlite3_finalize(q);
  if (!same || n != MS_TABLESCAN_COLUMNS) return NULL;
  int64_t root = 0;
  if (sqlite3_prepare_v2(s->db, "select rootpage from sqlite_master where type = 'table' and name = 'events'", -1, &q,
                         NULL) == SQLITE_OK &&
      sqlite3_step(q) == SQLITE_ROW)
    root = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return root > 0 && root <= UINT32_MAX ? ms_tablescan_open(s->path, (uint32_t)root) : NULL;
}

/* Through the pages: 0 when every row was handed on or *anomaly is set (rows before it handed
 * on), fn's non-zero value when it stopped, -1 with s->error set when reading failed. */
static int each_pages(ms_snapshot *s, const ms_tablescan *scan, delivery *d, bool *anomaly) {
  size_t leaves = ms_tablescan_leaves(scan);
  if (leaves * ms_tablescan_page_size(scan) < PARALLEL_MIN_BYTES) return each_serial_pages(s, scan, d, anomaly);
  readers *r = aligned_alloc(64, sizeof *r); /* its slots on cache lines of their own */
  if (r) memset(r, 0, sizeof *r);
  if (!r) return each_serial_pages(s, scan, d, anomaly);
  /* about SLOT_EVENTS rows a chunk: a chunk is handed from a reader to the pass under the lock,
   * so one leaf a chunk (1,700 rows of 64 KiB pages) spent a tenth of the time in wake-ups; a
   * chunk of smaller rows grows its slot (SLOT_GROWTH) */
  size_t per_page = ms_tablescan_page_size(scan) / ROW_BYTES;
  r->s = s;
  r->scan = scan;
  r->leaves_per_chunk = per_page >= SLOT_EVENTS ? 1 : SLOT_EVENTS / per_page;
  r->nchunks = (int64_t)((leaves + r->leaves_per_chunk - 1) / r->leaves_per_chunk);
  progress pg = progress_start((int64_t)leaves, 4000);
  int rc = 0;
  bool ran = run_readers(r, d, &pg, &rc, anomaly);
  progress_end(s, &pg);
  free(r);
  return ran ? rc : each_serial_pages(s, scan, d, anomaly);
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

/* Through SQLite, the rows from id `from` on. */
static int each_sqlite(ms_snapshot *s, delivery *d, int64_t from) {
  int64_t lo, hi;
  id_range(s, &lo, &hi);
  if (lo < from) lo = from;
  int64_t rows = row_count(s);
  progress pg = progress_start(rows, 500000);
  int rc = 0;
  /* ids far sparser than the rows (a crafted file): chunks would be mostly empty queries */
  uint64_t span = (uint64_t)hi - (uint64_t)lo; /* ids in the range, less one */
  bool parallel = rows >= PARALLEL_MIN && hi >= lo && span / 4 <= (uint64_t)rows;
  readers *r = parallel ? aligned_alloc(64, sizeof *r) : NULL;
  if (r) memset(r, 0, sizeof *r);
  bool anomaly = false;
  if (r) {
    r->s = s;
    r->first_id = lo;
    r->last_id = hi;
    r->nchunks = (int64_t)(span / CHUNK + 1);
  }
  if (!r || !run_readers(r, d, &pg, &rc, &anomaly)) rc = each_serial(s, d, &pg, from);
  free(r);
  progress_end(s, &pg);
  return rc;
}

/* ---- the extent of the history: count, first and last time ------------------------------ */

static int count_only(const ms_event *e, void *arg) {
  (void)e;
  (void)arg;
  return 0;
}

void ms_events_extent(ms_snapshot *s) {
  if (s->extent_known) return;
  if (ms_events_each(s, count_only, NULL) != 0) s->error[0] = '\0'; /* unreadable: none (0) */
  s->extent_known = true;
}

int ms_events_each(ms_snapshot *s, int (*fn)(const ms_event *e, void *arg), void *arg) {
  delivery d = {fn, arg, {0, 0, 0}, 0, false};
  ms_tablescan *scan = open_pages(s);
  bool anomaly = false;
  int rc = scan ? each_pages(s, scan, &d, &anomaly) : 0;
  ms_tablescan_close(scan);
  const char *how = getenv("MEMSNAP_READER");
  if ((!scan || anomaly) && rc == 0 && how && !strcmp(how, "pages")) { /* the tests' way to see which reader ran */
    snprintf(s->error, sizeof s->error, "'%s': MEMSNAP_READER=pages: %s", s->shown_path,
             scan ? "an anomaly in the events' pages" : "the events cannot be read from the file's pages");
    return -1;
  }
  if ((!scan || anomaly) && rc == 0) /* SQLite: all of it, or the rest after the last row the pages gave */
    rc = d.any && d.last == INT64_MAX ? 0 : each_sqlite(s, &d, d.any ? d.last + 1 : INT64_MIN);
  if (rc == 0 && !s->extent_known) { /* every row was read: the extent, for free */
    s->extent_known = true;
    s->nevents = d.extent.count;
    s->first_ns = d.extent.count ? d.extent.first : 0;
    s->last_ns = d.extent.count ? d.extent.last : 0;
  }
  return rc;
}
