/* reader.c: opens a snapshot for the CLI's commands and reads it (docs/snapshot-format.md).
 *
 * Everything in the file is untrusted: the reader checks that it is a file, that it is SQLite,
 * its format version (refusing newer ones, naming both versions), the tables it needs, and the
 * types of what it reads. Events are streamed (stream.c: ms_events_each) rather than loaded, so memory
 * follows what a command keeps, not the length of the history. Stacks and frames, which are
 * small (each distinct stack once), are loaded whole by ms_load_stacks. Segments, blocks,
 * devices and options come as checked rows (ms_*_each); the other tables and the event queries
 * beside the stream are in tables.c and events.c, which run their
 * SQL through ms_read_rows (read_private.h). Commands read through these, not SQL.
 *
 * Every function returns 0 on success or -1 with a message in the reader's `error`.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "read.h"
#include "read_private.h"


static const char *const required_tables[] = {"meta", "devices", "stats", "segments", "blocks", "events",
                                              "labels", "marks", "ranges", "stacks", "stack_frames", "frames"};

static int fail(ms_snapshot *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ms_snapshot *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->error, sizeof s->error, fmt, ap);
  va_end(ap);
  return -1;
}

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0 if it is not one. */
static int utf8_length(const unsigned char *s) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (!n) return 0;
  unsigned lo = 0x80, hi = 0xbf; /* the second byte's range: no overlongs, surrogates, > U+10FFFF */
  if (c == 0xe0) lo = 0xa0;
  else if (c == 0xed) hi = 0x9f;
  else if (c == 0xf0) lo = 0x90;
  else if (c == 0xf4) hi = 0x8f;
  if (s[1] < lo || s[1] > hi) return 0;
  for (int i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return n;
}

/* True for the code point at s (a valid sequence of n bytes) that must not reach a terminal or
 * a page as is: C0 and C1 controls (C1 ones, U+0080 to U+009F, drive some terminals too) and the
 * bidirectional overrides and isolates (U+202A to U+202E, U+2066 to U+2069), which reorder what
 * is shown around them. */
static bool dangerous(const unsigned char *s, int n) {
  if (n == 1) return *s < 0x20 || *s == 0x7f;
  if (n == 2) return s[0] == 0xc2 && s[1] < 0xa0;
  if (n == 3 && s[0] == 0xe2 && s[1] == 0x80) return s[2] >= 0xaa && s[2] <= 0xae;
  if (n == 3 && s[0] == 0xe2 && s[1] == 0x81) return s[2] >= 0xa6 && s[2] <= 0xa9;
  return false;
}

/* Makes untrusted text safe to print and to write as JSON, in place: control characters,
 * bidirectional overrides (see dangerous()) and every byte of invalid UTF-8 become '?'. */
void ms_neutralise(char *text) {
  unsigned char *s = (unsigned char *)text;
  while (s && *s) {
    int n = utf8_length(s);
    if (n == 0) {
      *s++ = '?';
      continue;
    }
    if (dangerous(s, n)) memset(s, '?', (size_t)n);
    s += n;
  }
}

void ms_process_text(const ms_snapshot *s, char *out, size_t len) {
  char pid[32] = "unknown";
  if (s->pid > 0) snprintf(pid, sizeof pid, "%lld", (long long)s->pid);
  snprintf(out, len, "pid %s on %s", pid, s->host[0] ? s->host : "unknown host");
}

/* The meta table's value for `key` through `st` ("select value from meta where key = ?",
 * prepared once for all the keys), or the fallback. */
static int64_t meta_int(sqlite3_stmt *st, const char *key, int64_t fallback) {
  int64_t v = fallback;
  if (!st) return v;
  sqlite3_reset(st);
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) v = sqlite3_column_int64(st, 0);
  return v;
}

static void meta_text(sqlite3_stmt *st, const char *key, char *out, size_t len) {
  out[0] = '\0';
  if (!st) return;
  sqlite3_reset(st);
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    if (t) snprintf(out, len, "%s", (const char *)t);
  }
}

int ms_open(ms_snapshot *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->only_device = -1;
  snprintf(s->shown_path, sizeof s->shown_path, "%s", path); /* a file name is untrusted text too */
  ms_neutralise(s->shown_path);
  struct stat stt;
  if (stat(path, &stt) != 0) return fail(s, "cannot open '%s': %s", s->shown_path, strerror(errno));
  if (!S_ISREG(stt.st_mode)) return fail(s, "cannot open '%s': not a regular file", s->shown_path);
  /* NOMUTEX: one thread uses the connection (stream.c's readers open their own), so SQLite's
     lock around every column read is only cost */
  if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
    fail(s, "cannot open '%s': %s", s->shown_path, sqlite3_errmsg(s->db));
    ms_close(s);
    return -1;
  }
  /* One read transaction for the connection's life: each statement outside one takes the
     file's shared lock and checks for a hot journal (fcntl, fstat) on its own, which was most of
     the time a small snapshot took (the table of ranks reads hundreds); closing ends it. */
  sqlite3_exec(s->db, "begin", NULL, NULL, NULL);
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(s->db, "pragma user_version", -1, &st, NULL);
  if (rc != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
    fail(s, "cannot open '%s': %s", s->shown_path, rc == SQLITE_NOTADB || sqlite3_errcode(s->db) == SQLITE_NOTADB ? "file is not a database" : sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    ms_close(s);
    return -1;
  }
  int version = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  if (version > MEMSNAP_FORMAT_VERSION) {
    fail(s, "'%s' has snapshot format %d; this memsnap (%s) reads format %d: use a newer memsnap", s->shown_path, version,
         MEMSNAP_VERSION, MEMSNAP_FORMAT_VERSION);
    ms_close(s);
    return -1;
  }
  if (version < 1) {
    fail(s, "'%s' is an SQLite file but not a memsnap snapshot (format version %d)", s->shown_path, version);
    ms_close(s);
    return -1;
  }
  /* one statement for every name and key below: preparing one costs more than running it */
  if (sqlite3_prepare_v2(s->db, "select 1 from sqlite_master where type = 'table' and name = ?", -1, &st, NULL) != SQLITE_OK)
    st = NULL;
  for (size_t i = 0; i < sizeof required_tables / sizeof required_tables[0]; i++) {
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, required_tables[i], -1, SQLITE_STATIC);
    if (!st || sqlite3_step(st) != SQLITE_ROW) {
      fail(s, "'%s' is not a complete snapshot: table '%s' is missing", s->shown_path, required_tables[i]);
      sqlite3_finalize(st);
      ms_close(s);
      return -1;
    }
  }
  sqlite3_finalize(st);
  s->format_version = version;
  if (sqlite3_prepare_v2(s->db, "select value from meta where key = ?", -1, &st, NULL) != SQLITE_OK) st = NULL;
  s->pid = meta_int(st, "pid", 0);
  s->rank = meta_int(st, "rank", -1);
  s->dropped = meta_int(st, "dropped_events", 0);
  s->recorded = meta_int(st, "recorded_events", 0);
  s->max_entries = meta_int(st, "max_entries", 0);
  s->snapshot_ns = meta_int(st, "snapshot_ns", 0);
  s->device_count = meta_int(st, "device_count", 0);
  meta_text(st, "host", s->host, sizeof s->host);
  meta_text(st, "backend", s->backend, sizeof s->backend);
  meta_text(st, "tool_version", s->tool_version, sizeof s->tool_version);
  meta_text(st, "command_line", s->command_line, sizeof s->command_line);
  meta_text(st, "stacks", s->stacks_mode, sizeof s->stacks_mode);
  meta_text(st, "import_file", s->import_file, sizeof s->import_file);
  meta_text(st, "import_source", s->import_source, sizeof s->import_source);
  s->recovered = (int)meta_int(st, "recovered", 0);
  meta_text(st, "ended", s->ended, sizeof s->ended);
  s->end_signal = meta_int(st, "end_signal", 0);
  s->exit_status = meta_int(st, "exit_status", -1);
  s->end_ns = meta_int(st, "end_ns", 0);
  s->last_event_ns = meta_int(st, "last_event_ns", 0);
  s->last_alloc_ns = meta_int(st, "last_alloc_ns", 0);
  if (s->end_signal < 0 || s->end_signal > 64) s->end_signal = 0; /* the file is untrusted */
  if (s->end_ns < 0) s->end_ns = 0;
  if (s->last_event_ns < 0) s->last_event_ns = 0;
  if (s->last_alloc_ns < 0) s->last_alloc_ns = 0;
  sqlite3_finalize(st);
  ms_neutralise(s->ended);
  ms_neutralise(s->import_file);
  ms_neutralise(s->import_source);
  ms_neutralise(s->host);
  ms_neutralise(s->backend);
  ms_neutralise(s->tool_version);
  ms_neutralise(s->command_line);
  ms_neutralise(s->stacks_mode);
  return 0; /* the history's extent: counted by the first pass (ms_events_each) */
}

bool ms_has_column(ms_snapshot *s, const char *table, const char *column) {
  sqlite3_stmt *st;
  bool found = false;
  if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM pragma_table_info(?) WHERE name = ?", -1, &st, NULL) != SQLITE_OK)
    return false;
  sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
  found = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return found;
}

void ms_close(ms_snapshot *s) {
  if (s->db) sqlite3_close(s->db);
  s->db = NULL;
  for (size_t i = 0; i < s->nframes; i++) {
    free(s->frames[i].name);
    free(s->frames[i].file);
    free(s->frames[i].module);
    free(s->frames[i].short_name);
  }
  free(s->frames);
  for (size_t i = 0; i < s->nstacks; i++) free(s->stacks[i].frames);
  free(s->stacks);
  s->frames = NULL;
  s->stacks = NULL;
  s->nframes = s->nstacks = 0;
}

/* A text column, neutralised and cut to MS_TEXT_MAX bytes (at a character boundary, with "..."
 * at the end: a megabyte-long name serves no reader); NULL when out of memory. */
static char *column_text(sqlite3_stmt *st, int col) {
  const unsigned char *t = sqlite3_column_text(st, col);
  size_t n = t ? strlen((const char *)t) : 0;
  if (n <= MS_TEXT_MAX) {
    char *s = strdup(t ? (const char *)t : "");
    ms_neutralise(s);
    return s;
  }
  size_t cut = MS_TEXT_MAX;
  while (cut > MS_TEXT_MAX - 4 && (t[cut] & 0xc0) == 0x80) cut--; /* not inside a character */
  char *s = malloc(cut + 4);
  if (!s) return NULL;
  memcpy(s, t, cut);
  s[cut] = '\0';
  ms_neutralise(s);
  strcat(s, "...");
  return s;
}

int ms_load_stacks(ms_snapshot *s) {
  sqlite3_stmt *st;
  int64_t max_frame = 0, max_stack = 0, nframe_rows = 0, nstack_rows = 0;
  if (sqlite3_prepare_v2(s->db, "select coalesce(max(id), 0), count(*) from frames", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    max_frame = sqlite3_column_int64(st, 0), nframe_rows = sqlite3_column_int64(st, 1);
  sqlite3_finalize(st);
  if (sqlite3_prepare_v2(s->db, "select coalesce(max(id), 0), count(*) from stacks", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    max_stack = sqlite3_column_int64(st, 0), nstack_rows = sqlite3_column_int64(st, 1);
  sqlite3_finalize(st);
  /* Ids are dense (1..N) in every snapshot memsnap writes; tables are indexed by id, so ids far
     beyond the row count (a crafted file) would cost memory for nothing: refuse them. */
  if (max_frame < 0 || max_frame > 100000000 || max_frame > 2 * nframe_rows + 1024 || max_stack < 0 ||
      max_stack > 100000000 || max_stack > 2 * nstack_rows + 1024)
    return fail(s, "'%s': implausible frame or stack ids (largest %lld and %lld for %lld frames and %lld stacks)",
                s->shown_path, (long long)max_frame, (long long)max_stack, (long long)nframe_rows, (long long)nstack_rows);
  s->frames = calloc((size_t)max_frame + 1, sizeof *s->frames);
  s->stacks = calloc((size_t)max_stack + 1, sizeof *s->stacks);
  if (!s->frames || !s->stacks) return fail(s, "out of memory loading stacks of '%s'", s->shown_path);
  s->nframes = (size_t)max_frame + 1;
  s->nstacks = (size_t)max_stack + 1;
  /* `inlined` came later (snapshots written before it have no inlined frames). */
  if (sqlite3_prepare_v2(s->db, "select id, kind, name, file, line, module, offset, inlined from frames", -1, &st, NULL) != SQLITE_OK &&
      sqlite3_prepare_v2(s->db, "select id, kind, name, file, line, module, offset, 0 from frames", -1, &st, NULL) != SQLITE_OK)
    return fail(s, "'%s': cannot read frames: %s", s->shown_path, sqlite3_errmsg(s->db));
  while (sqlite3_step(st) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    if (id < 1 || id > max_frame) continue;
    ms_frame *f = &s->frames[id];
    if (f->name || f->file || f->module) continue; /* an id twice (a damaged file): its first row stands */
    const unsigned char *kind = sqlite3_column_text(st, 1);
    f->python = kind && strcmp((const char *)kind, "python") == 0;
    f->name = column_text(st, 2);
    f->file = column_text(st, 3);
    f->line = sqlite3_column_type(st, 4) == SQLITE_INTEGER ? sqlite3_column_int64(st, 4) : 0;
    f->module = column_text(st, 5);
    f->offset = sqlite3_column_type(st, 6) == SQLITE_INTEGER ? sqlite3_column_int64(st, 6) : 0;
    f->inlined = sqlite3_column_type(st, 7) == SQLITE_INTEGER && sqlite3_column_int64(st, 7) != 0;
  }
  sqlite3_finalize(st);
  for (size_t i = 1; i < s->nframes; i++) /* ids with no row (a damaged file) read as unnamed */
    if (!s->frames[i].name || !s->frames[i].file || !s->frames[i].module) {
      free(s->frames[i].name), free(s->frames[i].file), free(s->frames[i].module);
      s->frames[i].name = strdup(""), s->frames[i].file = strdup(""), s->frames[i].module = strdup("");
      if (!s->frames[i].name || !s->frames[i].file || !s->frames[i].module)
        return fail(s, "out of memory loading stacks of '%s'", s->shown_path);
    }
  for (size_t i = 1; i < s->nframes; i++) { /* how each reads in reports, and whether it matters */
    ms_frame *f = &s->frames[i];
    char shown[MS_TEXT_MAX + 8];
    ms_frame_short_name(f, shown, sizeof shown);
    if (!(f->short_name = strdup(shown))) return fail(s, "out of memory loading stacks of '%s'", s->shown_path);
    f->machinery = ms_frame_is_machinery(s->fold, f);
    f->node = ms_frame_is_node(f);
  }
  if (sqlite3_prepare_v2(s->db, "select stack_id, position, frame_id from stack_frames order by stack_id, position", -1,
                         &st, NULL) != SQLITE_OK)
    return fail(s, "'%s': cannot read stacks: %s", s->shown_path, sqlite3_errmsg(s->db));
  while (sqlite3_step(st) == SQLITE_ROW) {
    int64_t sid = sqlite3_column_int64(st, 0), pos = sqlite3_column_int64(st, 1), fid = sqlite3_column_int64(st, 2);
    if (sid < 1 || sid > max_stack || fid < 1 || fid > max_frame || pos < 0 || pos > 4096) continue;
    ms_stack *k = &s->stacks[sid];
    if ((size_t)pos != k->depth) continue; /* positions must count up from 0 */
    uint32_t *g = realloc(k->frames, sizeof *g * (k->depth + 1));
    if (!g) {
      sqlite3_finalize(st);
      return fail(s, "out of memory loading stacks of '%s'", s->shown_path);
    }
    k->frames = g;
    k->frames[k->depth++] = (uint32_t)fid;
  }
  sqlite3_finalize(st);
  return 0;
}

/* ---- tables as rows ---------------------------------------------------------------------- */

#define PLAUSIBLE_SIZE(v) ((v) >= 0 && (v) <= ((int64_t)1 << 40)) /* no device has a TiB */

void ms_only_device(ms_snapshot *s, int device) {
  s->only_device = device < 0 ? -1 : device;
  s->extent_known = false;
  s->nevents = s->first_ns = s->last_ns = 0;
}

int ms_read_rows_args(ms_snapshot *s, const char *sql, const ms_sql_arg *args, int nargs, const char *what,
                      int (*row)(sqlite3_stmt *st, void *arg), void *arg) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
    if (strstr(sqlite3_errmsg(s->db), "no such")) return 0;
    return fail(s, "'%s': cannot read %s: %s", s->shown_path, what, sqlite3_errmsg(s->db));
  }
  for (int i = 0; i < nargs; i++)
    if (args[i].text) sqlite3_bind_text(st, i + 1, args[i].text, -1, SQLITE_STATIC);
    else sqlite3_bind_int64(st, i + 1, args[i].value);
  int device = sqlite3_bind_parameter_index(st, ":device"); /* MS_ON_DEVICE's */
  if (device) sqlite3_bind_int64(st, device, s->only_device);
  int rc = 0, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW)
    if ((rc = row(st, arg)) != 0) break;
  if (rc == 0 && step != SQLITE_ROW && step != SQLITE_DONE)
    rc = fail(s, "'%s': reading %s failed: %s", s->shown_path, what, sqlite3_errmsg(s->db));
  sqlite3_finalize(st);
  return rc;
}

int ms_read_rows(ms_snapshot *s, const char *sql, const char *what, int (*row)(sqlite3_stmt *st, void *arg), void *arg) {
  return ms_read_rows_args(s, sql, NULL, 0, what, row, arg);
}

int ms_read_first_int64(sqlite3_stmt *st, void *out) {
  *(int64_t *)out = sqlite3_column_int64(st, 0);
  return 0;
}

void ms_read_text_into(sqlite3_stmt *st, int col, char *out, size_t len) {
  const unsigned char *t = sqlite3_column_text(st, col);
  snprintf(out, len, "%s", t ? (const char *)t : "");
  ms_neutralise(out);
}

static int segment_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  ms_segment_row r;
  r.id = sqlite3_column_int64(st, 0);
  int64_t dev = sqlite3_column_int64(st, 1);
  r.address = (uint64_t)sqlite3_column_int64(st, 2);
  r.size = sqlite3_column_int64(st, 3);
  ms_read_text_into(st, 4, r.pool, sizeof r.pool);
  r.stream = (uint64_t)sqlite3_column_int64(st, 5);
  r.expandable = sqlite3_column_int64(st, 6) != 0;
  r.private_pool = sqlite3_column_int64(st, 7) != 0;
  if (dev < 0 || dev >= MS_MAX_DEVICES || !PLAUSIBLE_SIZE(r.size)) return 0;
  r.device = (int)dev;
  return ((int (*)(const ms_segment_row *, void *))c->fn)(&r, c->arg);
}

int ms_segments_each(ms_snapshot *s, int (*fn)(const ms_segment_row *r, void *arg), void *arg) {
  char sql[512];
  snprintf(sql, sizeof sql,
           "select id, coalesce(device, -1), coalesce(address, 0), coalesce(size, -1), pool, coalesce(stream, 0), %s, %s "
           "from segments where " MS_ON_DEVICE("device") " order by id",
           ms_has_column(s, "segments", "expandable") ? "coalesce(expandable, 0)" : "0",
           ms_has_column(s, "segments", "pool_id0") ? "pool_id0 is not null" : "0");
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s, sql, "segments", segment_row, &c);
}

static int block_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  ms_block_row r;
  r.segment_id = sqlite3_column_int64(st, 0);
  int64_t dev = sqlite3_column_int64(st, 1);
  r.address = (uint64_t)sqlite3_column_int64(st, 2);
  r.size = sqlite3_column_int64(st, 3);
  r.requested = sqlite3_column_int64(st, 4);
  const unsigned char *state = sqlite3_column_text(st, 5);
  r.stream = (uint64_t)sqlite3_column_int64(st, 6);
  int64_t stack = sqlite3_column_int64(st, 7);
  r.stack_id = stack > 0 && (size_t)stack < c->s->nstacks ? (uint32_t)stack : 0;
  int64_t role = sqlite3_column_int64(st, 8);
  r.role = role >= 1 && role <= 4 ? (uint8_t)role : 0;
  r.module_label = sqlite3_column_int64(st, 9);
  if (r.module_label < 0) r.module_label = 0;
  if (dev < 0 || dev >= MS_MAX_DEVICES || !PLAUSIBLE_SIZE(r.size) || !PLAUSIBLE_SIZE(r.requested)) return 0;
  r.device = (int)dev;
  r.state = state && !strcmp((const char *)state, "allocated") ? MS_BLOCK_ALLOCATED
            : state && !strcmp((const char *)state, "free")    ? MS_BLOCK_FREE
                                                                : MS_BLOCK_PENDING;
  return ((int (*)(const ms_block_row *, void *))c->fn)(&r, c->arg);
}

int ms_blocks_each(ms_snapshot *s, int (*fn)(const ms_block_row *r, void *arg), void *arg) {
  ms_row_call c = {s, (void *)fn, arg};
  char sql[768];
  bool roles = ms_has_column(s, "blocks", "role"); /* a later column: older files have none */
  snprintf(sql, sizeof sql,
           "select b.segment_id, coalesce(g.device, -1), coalesce(b.address, 0), coalesce(b.size, -1), "
           "coalesce(b.requested_size, 0), b.state, coalesce(g.stream, 0), coalesce(b.stack_id, 0), %s "
           "from blocks b join segments g on g.id = b.segment_id where " MS_ON_DEVICE("g.device") " order by b.id",
           roles ? "coalesce(b.role, 0), coalesce(b.module_label_id, 0)" : "0, 0");
  return ms_read_rows(s, sql, "blocks", block_row, &c);
}

static int device_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  ms_device_row r;
  int64_t dev = sqlite3_column_int64(st, 0);
  if (dev < 0 || dev >= MS_MAX_DEVICES) return 0;
  r.device = (int)dev;
  ms_read_text_into(st, 1, r.name, sizeof r.name);
  r.total_bytes = sqlite3_column_type(st, 2) == SQLITE_INTEGER && sqlite3_column_int64(st, 2) >= 0 ? sqlite3_column_int64(st, 2) : -1;
  return ((int (*)(const ms_device_row *, void *))c->fn)(&r, c->arg);
}

int ms_devices_each(ms_snapshot *s, int (*fn)(const ms_device_row *r, void *arg), void *arg) {
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s, "select device, name, total_bytes from devices where " MS_ON_DEVICE("device") " order by device", "devices", device_row, &c);
}

static int option_row(sqlite3_stmt *st, void *arg) {
  ms_row_call *c = arg;
  const unsigned char *name = sqlite3_column_text(st, 0), *value = sqlite3_column_text(st, 1);
  if (!name || !value) return 0;
  return ((int (*)(const char *, const char *, void *))c->fn)((const char *)name, (const char *)value, c->arg);
}

int ms_options_each(ms_snapshot *s, int (*fn)(const char *name, const char *value, void *arg), void *arg) {
  ms_row_call c = {s, (void *)fn, arg};
  return ms_read_rows(s, "select name, value from options", "options", option_row, &c);
}

