/* export.c: a snapshot as a PyTorch memory snapshot, the pickle that
 * torch.cuda.memory._dump_snapshot writes, for PyTorch's tools (python -m torch.cuda._memory_viz
 * stats|trace|trace_plot, the memory viz page): `memsnap export` (commands/export.c) runs it.
 * docs/pytorch-snapshots.md says what goes where.
 *
 *   {'segments': [{device, address, total_size, allocated_size, active_size, requested_size,
 *                  stream, segment_type, segment_pool_id, is_expandable, frames,
 *                  blocks: [{address, size, requested_size, state, frames}]}],
 *    'device_traces': [[{action, addr (device_free for oom), size, stream, time_us, frames,
 *                        compile_context, user_metadata}] per device],
 *    'allocator_settings': {...},
 *    'external_annotations': [{stage: START|END, name, device, time_us}]}
 *
 * Written as protocol 4 with only the opcodes that PyTorch's JavaScript unpickler (MemoryViz.js)
 * reads as well as Python's; list items in batches of 1000 as Python writes them. Each frame
 * dict, each frames list and each key string is written once and referred to through the memo
 * after that, as PyTorch shares them. The events are read in order and written as they are
 * read: memory holds the frames and stacks, not the history.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "pytorch.h"
#include "pickle.h"

#define BATCH 1000
#define MAX_DEVICES 4096

/* Strings written once and then through the memo. */
static const char *const keys[] = {
    "segments", "device_traces", "allocator_settings", "external_annotations", "device", "address", "total_size",
    "allocated_size", "active_size", "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable",
    "frames", "blocks", "size", "state", "action", "addr", "time_us", "compile_context", "user_metadata",
    "device_free", "name", "filename", "line", "stage", "START", "END", "small", "large", "active_allocated",
    "inactive", "active_pending_free", "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "oom", "snapshot", "segment_map", "segment_unmap", "N/A", "", "??"};
#define NKEYS (sizeof keys / sizeof keys[0])

typedef struct exporter {
  ms_snapshot *s;
  pk_writer w;
  uint64_t key_memo[NKEYS]; /* memo index + 1 */
  uint64_t *frame_memo, *stack_memo;
  int64_t start_unix_ns;
  gzFile out;
} exporter;

static void key(exporter *e, const char *k) {
  for (size_t i = 0; i < NKEYS; i++)
    if (strcmp(keys[i], k) == 0) {
      if (e->key_memo[i]) {
        pkw_get(&e->w, e->key_memo[i] - 1);
      } else {
        pkw_cstr(&e->w, k);
        e->key_memo[i] = pkw_memoize(&e->w) + 1;
      }
      return;
    }
  pkw_cstr(&e->w, k);
}

static void key_int(exporter *e, const char *k, int64_t v) {
  key(e, k);
  pkw_int(&e->w, v);
}

/* A list written in batches: start_list, then batch_item after each item, then end_list. */
typedef struct list_writer {
  size_t pending;
} list_writer;

static void start_list(exporter *e, list_writer *l) {
  pkw_op(&e->w, PK_OP_EMPTY_LIST);
  pkw_memoize(&e->w);
  l->pending = 0;
}
static void before_item(exporter *e, list_writer *l) {
  if (l->pending == 0) pkw_op(&e->w, PK_OP_MARK);
}
static void after_item(exporter *e, list_writer *l) {
  if (++l->pending == BATCH) {
    pkw_op(&e->w, PK_OP_APPENDS);
    l->pending = 0;
  }
}
/* A dict as the next item of a list: its items go between the two. */
static void begin_dict_item(exporter *e, list_writer *l) {
  before_item(e, l);
  pkw_op(&e->w, PK_OP_EMPTY_DICT);
  pkw_op(&e->w, PK_OP_MARK);
}
static void end_dict_item(exporter *e, list_writer *l) {
  pkw_op(&e->w, PK_OP_SETITEMS);
  after_item(e, l);
}
static void end_list(exporter *e, list_writer *l) {
  if (l->pending) pkw_op(&e->w, PK_OP_APPENDS);
  l->pending = 0;
}

/* A container written once: the first time, starts it with `op` and records its memo index in
 * *memo (+1) and returns false (the caller fills it); later, refers to it and returns true. */
static bool shared(exporter *e, uint64_t *memo, int op) {
  if (*memo) {
    pkw_get(&e->w, *memo - 1);
    return true;
  }
  pkw_op(&e->w, op);
  *memo = pkw_memoize(&e->w) + 1;
  return false;
}

/* A frame as PyTorch spells it: {name, filename, line}; native frames without a source file
 * name their module, or "??". */
static void write_frame(exporter *e, uint32_t id) {
  if (shared(e, &e->frame_memo[id], PK_OP_EMPTY_DICT)) return;
  const ms_frame *f = &e->s->frames[id];
  pkw_op(&e->w, PK_OP_MARK);
  key(e, "name");
  pkw_cstr(&e->w, f->name);
  key(e, "filename");
  if (f->file[0]) pkw_cstr(&e->w, f->file);
  else if (!f->python && f->module[0]) pkw_cstr(&e->w, f->module);
  else key(e, "??");
  key_int(e, "line", f->line);
  pkw_op(&e->w, PK_OP_SETITEMS);
}

static void write_frames(exporter *e, int64_t stack_id) {
  key(e, "frames");
  if (stack_id <= 0 || (size_t)stack_id >= e->s->nstacks || e->s->stacks[stack_id].depth == 0) {
    pkw_op(&e->w, PK_OP_EMPTY_LIST);
    return;
  }
  if (shared(e, &e->stack_memo[stack_id], PK_OP_EMPTY_LIST)) return;
  const ms_stack *k = &e->s->stacks[stack_id];
  list_writer l = {0};
  for (uint32_t i = 0; i < k->depth; i++) {
    before_item(e, &l);
    write_frame(e, k->frames[i]);
    after_item(e, &l);
  }
  end_list(e, &l);
}

/* ---- segments ----------------------------------------------------------------------------- */

static int db_error(exporter *e) {
  fprintf(stderr, "error: '%s': %s\n", e->s->shown_path, sqlite3_errmsg(e->s->db));
  return -1;
}

/* A statement on the snapshot, or NULL after reporting the error. */
static sqlite3_stmt *prepare(exporter *e, const char *sql) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(e->s->db, sql, -1, &st, NULL) == SQLITE_OK) return st;
  db_error(e);
  return NULL;
}

static int write_segments(exporter *e) {
  /* Snapshots from before the expandable and pool columns existed: they were never either. */
  bool extra = ms_has_column(e->s, "segments", "expandable") && ms_has_column(e->s, "segments", "pool_id1");
  char sql[1024];
  snprintf(sql, sizeof sql,
           "SELECT s.id, coalesce(s.device, 0), coalesce(s.address, 0), coalesce(s.size, 0), "
           "s.pool, coalesce(s.stream, 0), "
           "coalesce(sum(CASE WHEN b.state = 'allocated' THEN b.size END), 0), "
           "coalesce(sum(CASE WHEN b.state IN ('allocated', 'pending_free') THEN b.size END), 0), "
           "coalesce(sum(CASE WHEN b.state IN ('allocated', 'pending_free') THEN b.requested_size "
           "END), 0), %s FROM segments s LEFT JOIN blocks b ON b.segment_id = s.id GROUP BY s.id "
           "ORDER BY s.id",
           extra ? "coalesce(s.expandable, 0), coalesce(s.pool_id0, 0), coalesce(s.pool_id1, 0)" : "0, 0, 0");
  sqlite3_stmt *seg = prepare(e, sql);
  sqlite3_stmt *blk = seg ? prepare(e, "SELECT segment_id, coalesce(address, 0), coalesce(size, 0), "
                                       "coalesce(requested_size, 0), state, coalesce(stack_id, 0) FROM blocks "
                                       "WHERE segment_id IN (SELECT id FROM segments) ORDER BY segment_id, address")
                          : NULL;
  if (!blk) {
    sqlite3_finalize(seg);
    return -1;
  }
  key(e, "segments");
  list_writer segs;
  start_list(e, &segs);
  int brc = sqlite3_step(blk), rc;
  while ((rc = sqlite3_step(seg)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(seg, 0);
    const unsigned char *pool = sqlite3_column_text(seg, 4);
    begin_dict_item(e, &segs);
    key_int(e, "device", sqlite3_column_int64(seg, 1));
    key_int(e, "address", sqlite3_column_int64(seg, 2));
    key_int(e, "total_size", sqlite3_column_int64(seg, 3));
    key_int(e, "allocated_size", sqlite3_column_int64(seg, 6));
    key_int(e, "active_size", sqlite3_column_int64(seg, 7));
    key_int(e, "requested_size", sqlite3_column_int64(seg, 8));
    key_int(e, "stream", sqlite3_column_int64(seg, 5));
    key(e, "segment_type");
    key(e, pool && strcmp((const char *)pool, "small") == 0 ? "small" : "large");
    key(e, "segment_pool_id");
    pkw_int(&e->w, sqlite3_column_int64(seg, 10));
    pkw_int(&e->w, sqlite3_column_int64(seg, 11));
    pkw_op(&e->w, PK_OP_TUPLE2);
    key(e, "is_expandable");
    pkw_op(&e->w, sqlite3_column_int64(seg, 9) ? PK_OP_NEWTRUE : PK_OP_NEWFALSE);
    write_frames(e, 0);
    key(e, "blocks");
    list_writer blocks;
    start_list(e, &blocks);
    while (brc == SQLITE_ROW && sqlite3_column_int64(blk, 0) < id) brc = sqlite3_step(blk); /* orphans */
    for (; brc == SQLITE_ROW && sqlite3_column_int64(blk, 0) == id; brc = sqlite3_step(blk)) {
      const unsigned char *state = sqlite3_column_text(blk, 4);
      const char *pt = !state ? "inactive"
                       : strcmp((const char *)state, "allocated") == 0    ? "active_allocated"
                       : strcmp((const char *)state, "pending_free") == 0 ? "active_pending_free"
                                                                           : "inactive";
      begin_dict_item(e, &blocks);
      key_int(e, "address", sqlite3_column_int64(blk, 1));
      key_int(e, "size", sqlite3_column_int64(blk, 2));
      key_int(e, "requested_size", sqlite3_column_int64(blk, 3));
      key(e, "state");
      key(e, pt);
      write_frames(e, strcmp(pt, "inactive") ? sqlite3_column_int64(blk, 5) : 0);
      end_dict_item(e, &blocks);
    }
    end_list(e, &blocks);
    end_dict_item(e, &segs);
  }
  end_list(e, &segs);
  bool ok = rc == SQLITE_DONE && (brc == SQLITE_DONE || brc == SQLITE_ROW);
  sqlite3_finalize(seg);
  sqlite3_finalize(blk);
  return ok ? 0 : db_error(e);
}

/* ---- device traces ------------------------------------------------------------------------ */

static const char *action_of(int kind) {
  switch (kind) {
    case MS_ALLOC: return "alloc";
    case MS_FREE_REQUESTED: return "free_requested";
    case MS_FREE_COMPLETED: return "free_completed";
    case MS_SEGMENT_ALLOC: return "segment_alloc";
    case MS_SEGMENT_FREE: return "segment_free";
    case MS_OOM: return "oom";
    case MS_SNAPSHOT: return "snapshot";
    case MS_SEGMENT_MAP: return "segment_map";
    case MS_SEGMENT_UNMAP: return "segment_unmap";
    default: return NULL;
  }
}

static int64_t time_us(const exporter *e, int64_t ns) {
  /* wall-clock µs, as PyTorch records; computed without overflow for any stored value */
  return (int64_t)(((__int128)e->start_unix_ns + ns) / 1000);
}

static int write_traces(exporter *e, int64_t ndevices) {
  sqlite3_stmt *st = prepare(e, "SELECT coalesce(time_ns, 0), kind, coalesce(stream, 0), coalesce(address, 0), "
                                "coalesce(size, 0), coalesce(requested_size, 0), coalesce(stack_id, 0) FROM events "
                                "WHERE (device = ?1 OR (device IS NULL AND kind = 7 AND ?2)) "
                                "AND kind IN (1, 2, 3, 4, 5, 6, 7, 11, 12) ORDER BY id");
  if (!st) return -1;
  /* A snapshot event (no device) goes into the list of every device that has events. */
  bool has_events[MAX_DEVICES] = {false};
  sqlite3_stmt *dev = prepare(e, "SELECT DISTINCT device FROM events WHERE typeof(device) = 'integer'");
  while (dev && sqlite3_step(dev) == SQLITE_ROW) {
    int64_t d = sqlite3_column_int64(dev, 0);
    if (d >= 0 && d < ndevices) has_events[d] = true;
  }
  sqlite3_finalize(dev);
  key(e, "device_traces");
  list_writer devices;
  start_list(e, &devices);
  int rc = SQLITE_DONE;
  for (int64_t d = 0; d < ndevices && rc == SQLITE_DONE; d++) {
    before_item(e, &devices);
    list_writer trace;
    start_list(e, &trace);
    sqlite3_bind_int64(st, 1, d);
    sqlite3_bind_int(st, 2, has_events[d]);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      int kind = sqlite3_column_int(st, 1);
      int64_t size = sqlite3_column_int64(st, 4), requested = sqlite3_column_int64(st, 5);
      const char *action = action_of(kind);
      if (!action) continue; /* a kind the query let through by another spelling */
      begin_dict_item(e, &trace);
      key(e, "action");
      key(e, action);
      key_int(e, kind == MS_OOM ? "device_free" : "addr", sqlite3_column_int64(st, 3));
      /* PyTorch's alloc and free entries hold the size asked for; segments their size. */
      bool blockwise = kind == MS_ALLOC || kind == MS_FREE_REQUESTED || kind == MS_FREE_COMPLETED;
      key_int(e, "size", blockwise && requested > 0 ? requested : size);
      key_int(e, "stream", sqlite3_column_int64(st, 2));
      key_int(e, "time_us", time_us(e, sqlite3_column_int64(st, 0)));
      write_frames(e, sqlite3_column_int64(st, 6));
      key(e, "compile_context");
      key(e, "N/A");
      key(e, "user_metadata");
      key(e, "");
      end_dict_item(e, &trace);
    }
    sqlite3_reset(st);
    end_list(e, &trace);
    after_item(e, &devices);
  }
  end_list(e, &devices);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : db_error(e);
}

/* ---- annotations and settings ------------------------------------------------------------- */

/* Ranges as START/END pairs, marks as a START and an END at the same time, in time order. */
static int write_annotations(exporter *e) {
  sqlite3_stmt *st = prepare(e, "SELECT t, stage, coalesce(label, '') FROM ("
                                " SELECT r.start_ns t, 0 ord, r.id k, 'START' stage, l.text label FROM ranges r"
                                "  LEFT JOIN labels l ON l.id = r.label_id WHERE r.start_ns IS NOT NULL"
                                " UNION ALL SELECT r.end_ns, 1, r.id, 'END', l.text FROM ranges r"
                                "  LEFT JOIN labels l ON l.id = r.label_id WHERE r.end_ns IS NOT NULL"
                                " UNION ALL SELECT m.time_ns, 0, -m.event_id, 'START', l.text FROM marks m"
                                "  LEFT JOIN labels l ON l.id = m.label_id WHERE m.time_ns IS NOT NULL"
                                " UNION ALL SELECT m.time_ns, 1, -m.event_id, 'END', l.text FROM marks m"
                                "  LEFT JOIN labels l ON l.id = m.label_id WHERE m.time_ns IS NOT NULL"
                                ") ORDER BY t, ord, k");
  if (!st) return -1;
  key(e, "external_annotations");
  list_writer l;
  start_list(e, &l);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const unsigned char *stage = sqlite3_column_text(st, 1), *label = sqlite3_column_text(st, 2);
    char text[1024];
    snprintf(text, sizeof text, "%s", label ? (const char *)label : "");
    begin_dict_item(e, &l);
    key(e, "stage");
    key(e, stage && stage[0] == 'E' ? "END" : "START");
    key(e, "name");
    pkw_cstr(&e->w, text);
    key_int(e, "device", 0);
    key_int(e, "time_us", time_us(e, sqlite3_column_int64(st, 0)));
    end_dict_item(e, &l);
  }
  end_list(e, &l);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : db_error(e);
}

/* A setting's value from its text as import keeps it: an int, a float, True/False/None or a
 * string. */
static void write_setting_value(exporter *e, const char *v) {
  char *end;
  errno = 0;
  long long i = strtoll(v, &end, 10);
  if (*v && !*end && errno == 0) {
    pkw_int(&e->w, i);
    return;
  }
  double d = strtod(v, &end);
  if (*v && !*end && strpbrk(v, ".eEn")) pkw_float(&e->w, d);
  else if (!strcmp(v, "True") || !strcmp(v, "False")) pkw_op(&e->w, v[0] == 'T' ? PK_OP_NEWTRUE : PK_OP_NEWFALSE);
  else if (!strcmp(v, "None")) pkw_op(&e->w, PK_OP_NONE);
  else pkw_cstr(&e->w, v);
}

/* allocator_settings: the "pytorch.*" options an import kept ("pytorch.KEY.SUB" rows make the
 * dict KEY), else what memsnap's own options say in PyTorch's terms. */
static int write_settings(exporter *e) {
  static const char *const derived =
      "SELECT 'pytorch.max_split_size', CASE WHEN value GLOB '[0-9]*' THEN CAST(value AS INTEGER) * 1048576 ELSE -1 "
      "END FROM options WHERE name = 'MEMSNAP_MAX_SPLIT_SIZE_MB' "
      "UNION ALL SELECT 'pytorch.garbage_collection_threshold', CAST(value AS REAL) FROM options "
      "WHERE name = 'MEMSNAP_GARBAGE_COLLECTION_THRESHOLD' "
      "UNION ALL SELECT 'pytorch.expandable_segments', CASE WHEN value = '1' THEN 'True' ELSE 'False' END "
      "FROM options WHERE name = 'MEMSNAP_EXPANDABLE_SEGMENTS' "
      "UNION ALL SELECT 'pytorch.expandable_segments', 'False' WHERE NOT EXISTS "
      "(SELECT 1 FROM options WHERE name = 'MEMSNAP_EXPANDABLE_SEGMENTS')";
  sqlite3_stmt *st;
  int64_t kept = 0;
  if (sqlite3_prepare_v2(e->s->db, "SELECT count(*) FROM options WHERE name LIKE 'pytorch.%'", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    kept = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  /* Grouped by KEY; a dict's items in the order of their numbers where they are numbers (as
     roundup_power2_divisions' interval starts are), else of their names. */
  static const char *const kept_sql =
      "SELECT name, value FROM (SELECT name, value, substr(name, 9) rest FROM options WHERE name LIKE 'pytorch.%') "
      "ORDER BY CASE WHEN instr(rest, '.') THEN substr(rest, 1, instr(rest, '.') - 1) ELSE rest END, "
      "CASE WHEN instr(rest, '.') THEN CAST(substr(rest, instr(rest, '.') + 1) AS INTEGER) END, name";
  if (!(st = prepare(e, kept ? kept_sql : derived))) return -1;
  key(e, "allocator_settings");
  pkw_op(&e->w, PK_OP_EMPTY_DICT);
  pkw_op(&e->w, PK_OP_MARK);
  /* The KEY whose dict is being written (rows come sorted by it), kept whole: a cut key would
     close and reopen the dict, writing its KEY twice. Rows with an empty KEY or SUB are skipped. */
  char *open_dict = NULL;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0), *value = (const char *)sqlite3_column_text(st, 1);
    if (!name || !value) continue;
    name += strlen("pytorch.");
    const char *dot = strchr(name, '.');
    size_t klen = dot ? (size_t)(dot - name) : strlen(name);
    if (klen == 0 || (dot && !dot[1])) continue;
    if (open_dict && (!dot || strlen(open_dict) != klen || strncmp(open_dict, name, klen) != 0)) {
      pkw_op(&e->w, PK_OP_SETITEMS);
      free(open_dict);
      open_dict = NULL;
    }
    if (dot && !open_dict) {
      if (!(open_dict = strndup(name, klen))) break;
      pkw_str(&e->w, name, klen);
      pkw_op(&e->w, PK_OP_EMPTY_DICT);
      pkw_op(&e->w, PK_OP_MARK);
    }
    pkw_cstr(&e->w, dot ? dot + 1 : name);
    write_setting_value(e, value);
  }
  if (open_dict) pkw_op(&e->w, PK_OP_SETITEMS);
  free(open_dict);
  if (!kept) { /* roundup_power2_divisions from memsnap's list form "[1:d,2:d,...]" */
    sqlite3_stmt *r;
    if (sqlite3_prepare_v2(e->s->db, "SELECT value FROM options WHERE name = 'MEMSNAP_ROUNDUP_POWER2_DIVISIONS'", -1, &r,
                           NULL) == SQLITE_OK &&
        sqlite3_step(r) == SQLITE_ROW && sqlite3_column_text(r, 0) && sqlite3_column_text(r, 0)[0] == '[') {
      key(e, "roundup_power2_divisions");
      pkw_op(&e->w, PK_OP_EMPTY_DICT);
      pkw_op(&e->w, PK_OP_MARK);
      const char *p = (const char *)sqlite3_column_text(r, 0) + 1;
      while (*p && *p != ']') {
        const char *colon = strchr(p, ':'), *next = strpbrk(p, ",]");
        if (!colon || !next || colon > next) break;
        pkw_str(&e->w, p, (size_t)(colon - p));
        pkw_int(&e->w, strtoll(colon + 1, NULL, 10));
        p = *next == ',' ? next + 1 : next;
      }
      pkw_op(&e->w, PK_OP_SETITEMS);
    }
    sqlite3_finalize(r);
  }
  pkw_op(&e->w, PK_OP_SETITEMS);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : db_error(e);
}

/* ---- output -------------------------------------------------------------------------- */

static int gz_write(void *ctx, const void *buf, size_t n) {
  exporter *e = ctx;
  return gzwrite(e->out, buf, (unsigned)n) == (int)n ? 0 : -1;
}

static int64_t query_int(ms_snapshot *s, const char *sql) {
  sqlite3_stmt *st;
  int64_t v = 0;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

static int write_all(exporter *e) {
  int64_t max_device = query_int(e->s, "SELECT max(coalesce(m, -1)) FROM (SELECT max(device) m FROM events UNION ALL "
                                       "SELECT max(device) FROM segments UNION ALL SELECT max(device) FROM devices)");
  if (max_device < 0) max_device = 0;
  if (max_device >= MAX_DEVICES) {
    fprintf(stderr, "error: '%s': device %" PRId64 " is more than this exporter writes (%d devices)\n", e->s->shown_path,
            max_device, MAX_DEVICES);
    return -1;
  }
  e->start_unix_ns = query_int(e->s, "SELECT value FROM meta WHERE key = 'start_unix_ns' AND typeof(value) = 'integer'");
  pkw_proto(&e->w);
  pkw_op(&e->w, PK_OP_EMPTY_DICT);
  pkw_memoize(&e->w);
  pkw_op(&e->w, PK_OP_MARK);
  if (write_segments(e) != 0 || write_traces(e, max_device + 1) != 0 || write_settings(e) != 0 ||
      write_annotations(e) != 0)
    return -1;
  pkw_op(&e->w, PK_OP_SETITEMS);
  return 0;
}

/* ---- the entry point ---------------------------------------------------------------------- */

int ms_export_to(const char *in, const char *out) {
  if (ms_refuse_overwrite("-o", out, &in, 1)) return 1;
  ms_snapshot s;
  if (ms_open(&s, in) != 0 || ms_load_stacks(&s) != 0) {
    fprintf(stderr, "error: %s\n", s.error);
    ms_close(&s);
    return 1;
  }
  exporter *e = calloc(1, sizeof *e);
  char tmp[PATH_MAX + 32];
  ms_temp_path(out, tmp, sizeof tmp);
  size_t len = strlen(out);
  bool gz = len > 3 && strcmp(out + len - 3, ".gz") == 0;
  int rc = 1;
  if (!e || !(e->frame_memo = calloc(s.nframes + 1, sizeof *e->frame_memo)) ||
      !(e->stack_memo = calloc(s.nstacks + 1, sizeof *e->stack_memo))) {
    fprintf(stderr, "error: out of memory\n");
  } else if (!(e->out = gzopen(tmp, gz ? "wb6" : "wbT"))) {
    fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
  } else {
    e->s = &s;
    pkw_init(&e->w, gz_write, e);
    bool written = write_all(e) == 0; /* a failure there has been reported */
    errno = 0;
    bool ok = pkw_finish(&e->w) == 0;
    ok = gzclose(e->out) == Z_OK && ok;
    if (written && !ok)
      fprintf(stderr, "error: cannot write '%s'%s%s\n", out, errno ? ": " : "", errno ? strerror(errno) : "");
    if (!written || !ok) {
      unlink(tmp);
    } else if (ms_commit(tmp, out) != 0) {
      fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
    } else {
      rc = 0;
    }
  }
  if (e) free(e->frame_memo), free(e->stack_memo);
  free(e);
  ms_close(&s);
  return rc;
}
