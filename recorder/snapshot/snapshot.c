/* snapshot.c: writes a snapshot (memsnap_dump) as an SQLite file; docs/snapshot-format.md is
 * the specification of the file, table by table and column by column.
 *
 * Steps:
 *   1. with every device locked (one consistent instant): copy the segments and blocks, the
 *      statistics and the device facts; add a `snapshot` event; copy the event ring;
 *   2. with no allocator lock held: symbolize the stacks that the blocks and events name;
 *   3. write everything into "<path>.tmp-<pid>-<n>" in one transaction with prepared statements
 *      (no journal: the file is private until renamed; write_all, one helper a table: meta,
 *      options, devices with their statistics, segments with their blocks, event kinds, events
 *      with marks and ranges, labels, stacks, frames), fsync it, rename it over <path>, fsync
 *      the directory. A reader sees the old file or the new one, never half of one; a crash
 *      leaves the old file and at worst a stray temporary.
 *
 * Paths may hold %p (pid), %r (rank: $RANK, $LOCAL_RANK, $OMPI_COMM_WORLD_RANK, $PMI_RANK or
 * $SLURM_PROCID; else 0), %h (host name), %t (Unix time in seconds) and %% (a percent sign), so
 * the processes of a job never write the same file.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "history/history.h"
#include "history/livefile.h"
#include "history/runlog.h"
#include "internal.h"
#include "snapshot_data.h"
#include "snapshot_schema.h"


/* ---- 1. gather ------------------------------------------------------------------------- */

static bool grow_blocks(msi_snapshot *s) {
  size_t cap = s->blocks_cap ? s->blocks_cap * 2 : 1024;
  msi_snap_block *g = realloc(s->blocks, sizeof *g * cap);
  if (!g) return false;
  s->blocks = g;
  s->blocks_cap = cap;
  return true;
}

static bool push_block(msi_snapshot *s, msi_device *d, const msi_block *b) {
  if (s->nblocks == s->blocks_cap && !grow_blocks(s)) return false;
  uint8_t state = b->allocated ? 0 : b->in_tree ? 1 : 2;
  bool in_use = b->allocated || state == 2; /* a free block's stack_id is a stale leftover */
  const msi_role *told = b->told ? msi_roles_get(&d->roles, b->ptr) : NULL;
  s->blocks[s->nblocks++] = (msi_snap_block){b->ptr, b->size, in_use ? b->requested_size : 0, in_use ? b->stack_id : 0,
                                             state, told ? told->role : 0, told ? told->label : 0};
  return true;
}

/* Appends a segment; NULL (and s->failed) when out of host memory. */
static msi_snap_segment *push_segment(msi_snapshot *s, msi_snap_segment seg) {
  if (s->nsegs == s->segs_cap) {
    size_t cap = s->segs_cap ? s->segs_cap * 2 : 256;
    msi_snap_segment *g = realloc(s->segs, sizeof *g * cap);
    if (!g) {
      s->failed = true;
      return NULL;
    }
    s->segs = g;
    s->segs_cap = cap;
  }
  s->segs[s->nsegs] = seg;
  return &s->segs[s->nsegs++];
}

/* Appends one segment holding one allocated block (the async mode's live blocks, external
 * allocations). */
static void push_whole(msi_snapshot *s, msi_snap_segment seg, uint32_t stack_id, const msi_role *told) {
  seg.first_block = s->nblocks;
  seg.nblocks = 1;
  if (!push_segment(s, seg)) return;
  if (s->nblocks == s->blocks_cap && !grow_blocks(s)) {
    s->failed = true;
    return;
  }
  s->blocks[s->nblocks++] = (msi_snap_block){seg.address, seg.size, seg.size, stack_id, 0, told ? told->role : 0,
                                             told ? told->label : 0};
}

/* Allocations memsnap's allocator did not make (external.c): one segment each, pool "external". */
typedef struct external_gather {
  msi_snapshot *s;
  bool facts;
} external_gather;

static void gather_one_external(const msi_external_block *v, void *arg) {
  external_gather *g = arg;
  msi_snapshot *s = g->s;
  if (s->failed) return;
  push_whole(s, (msi_snap_segment){v->device, v->ptr, v->size, (uint64_t)(uintptr_t)v->stream, "external", v->source,
                                   v->caller, false, false, {0, 0}, 0, 0, NULL}, v->stack_id, NULL);
  /* a device with external allocations is listed even when memsnap's allocator never ran on it */
  bool listed = false;
  for (int k = 0; k < s->ndevs; k++) listed |= s->devs[k].index == v->device;
  if (!listed && v->device >= 0 && v->device < MSI_MAX_DEVICES && s->ndevs < MSI_MAX_DEVICES) {
    msi_snap_device *sd = &s->devs[s->ndevs++];
    sd->index = v->device;
    if (!g->facts) return;
    if (v->device >= msi_device_count_ready() ||
        msi_be->device_info(v->device, &sd->free_bytes, &sd->total, sd->name, sizeof sd->name) != MSI_BE_OK)
      snprintf(sd->name, sizeof sd->name, "device %d", v->device);
  }
}

static void gather_external(msi_snapshot *s, bool facts) {
  external_gather g = {s, facts};
  msi_external_each(gather_one_external, &g); /* no copy: the live state takes this every half ring */
}

/* Async mode: the driver's pool has no segments to show, so each live allocation is a segment
 * of its own (pool "async") holding one allocated block. */
static void gather_async(msi_snapshot *s, msi_device *d) {
  msi_async_block *v;
  size_t n = msi_async_blocks(d, &v);
  if (n == SIZE_MAX) {
    s->failed = true;
    return;
  }
  for (size_t i = 0; i < n && !s->failed; i++)
    push_whole(s, (msi_snap_segment){d->index, v[i].ptr, v[i].size, (uint64_t)(uintptr_t)v[i].stream, "async", 0, 0,
                                 false, false, {0, 0}, 0, 0, NULL}, v[i].stack_id, msi_roles_get(&d->roles, v[i].ptr));
  free(v);
}

void msi_snapshot_gather(msi_device **devs, int n, msi_snapshot *s, bool facts) {
  for (int i = 0; i < n; i++) {
    msi_device *d = devs[i];
    if (!d) continue;
    msi_snap_device *sd = &s->devs[s->ndevs++];
    sd->index = d->index;
    if (facts) msi_be->device_info(d->index, &sd->free_bytes, &sd->total, sd->name, sizeof sd->name);
    sd->cap = d->set_fraction ? d->allowed_memory_maximum : 0;
    memsnap_stats_t st = d->stats;
    if (d->async) msi_async_stats(d, &st); /* the stream-ordered pool's counters */
    sd->nstats = memsnap_stat_count();
    msi_stats_flatten(&st, sd->stats, sd->nstats);
    if (d->async) {
      gather_async(s, d);
      continue;
    }
    size_t nh = msi_device_segments_into(d, &s->heads, &s->heads_cap);
    msi_block **heads = s->heads;
    if (nh == SIZE_MAX) {
      s->failed = true;
      continue;
    }
    for (size_t h = 0; h < nh && !s->failed; h++) {
      const msi_block *head = heads[h];
      msi_private_pool *owner = head->pool->owner;
      msi_snap_segment *seg = push_segment(s, (msi_snap_segment){d->index, head->ptr, 0, (uint64_t)(uintptr_t)head->stream,
                                                         head->pool->is_small ? "small" : "large", 0, 0, head->seg != NULL,
                                                         owner != NULL, {owner ? owner->id[0] : 0, owner ? owner->id[1] : 0},
                                                         s->nblocks, 0, NULL});
      /* An expandable segment's mapped runs are one segment each, as PyTorch lists them. */
      for (const msi_block *b = head; seg && b && b->mapped; b = b->next) {
        if (!push_block(s, d, b)) {
          s->failed = true;
          break;
        }
        seg->size += b->size;
        seg->nblocks++;
      }
    }
  }
  gather_external(s, facts);
}

static void gather(msi_device **devs, int n, void *arg) {
  msi_snapshot *s = arg;
  msi_snapshot_gather(devs, n, s, true);
  /* Still under every device lock: the snapshot event and the ring copy see the same instant
   * as the blocks (lock order: device locks, then the ring's). */
  if (msi_ring_recording()) msi_history_add_unobserved(MSI_EV_SNAPSHOT, -1, NULL, 0, 0, 0, 0, 0);
  s->nev = msi_history_copy(&s->ev, &s->dropped, &s->before, &s->max_entries, &s->start_ns);
}

/* ---- paths ----------------------------------------------------------------------------- */

int msi_expand_path_for(const char *pattern, int pid, const char *rank, const char *host, char *out, size_t len) {
  size_t o = 0;
  for (const char *p = pattern; *p; p++) {
    char buf[256] = "";
    const char *piece = buf;
    if (*p != '%') {
      buf[0] = *p;
      buf[1] = '\0';
    } else {
      p++;
      switch (*p) {
        case 'p': snprintf(buf, sizeof buf, "%d", pid); break;
        case 'h': snprintf(buf, sizeof buf, "%s", host && *host ? host : "host"); break;
        case 't': snprintf(buf, sizeof buf, "%lld", (long long)time(NULL)); break;
        case '%': snprintf(buf, sizeof buf, "%%"); break;
        case 'r': snprintf(buf, sizeof buf, "%s", rank ? rank : "0"); break;
        default:
          msi_error("snapshot path '%s': unknown pattern '%%%c' (use %%p, %%r, %%h, %%t or %%%%)", pattern, *p ? *p : ' ');
          return MEMSNAP_EINVAL;
      }
    }
    size_t l = strlen(piece);
    if (o + l + 1 > len) {
      msi_error("snapshot path '%s' is too long", pattern);
      return MEMSNAP_EINVAL;
    }
    memcpy(out + o, piece, l);
    o += l;
  }
  out[o] = '\0';
  if (o == 0) {
    msi_error("snapshot path is empty");
    return MEMSNAP_EINVAL;
  }
  return MEMSNAP_OK;
}

int msi_expand_path(const char *pattern, char *out, size_t len) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return msi_expand_path_for(pattern, (int)getpid(), msi_process_rank(), host, out, len);
}

/* The file name of the module holding `pc` (libnccl.so.2, the program), or "" if none does. */
static void library_of(uint64_t pc, char *out, size_t len) {
  Dl_info info;
  out[0] = '\0';
  if (!pc || !dladdr((void *)(uintptr_t)pc, &info) || !info.dli_fname) return;
  const char *name = info.dli_fname;
  char exe[1024];
  if (!name[0]) { /* the main program */
    if (!msi_process_exe(exe, sizeof exe)) return;
    name = exe;
  }
  const char *slash = strrchr(name, '/');
  snprintf(out, len, "%.*s", (int)len - 1, slash ? slash + 1 : name);
}

/* Label `id`'s text: this process's, or the one another process's live mapping holds. */
static const char *label_text(const msi_snapshot *s, uint32_t id) {
  if (!s->origin) return msi_label(id);
  return id < s->origin->nlabels && s->origin->labels[id] ? s->origin->labels[id] : "";
}

/* By device, then address, as the format lists segments (external allocations interleave with
 * the allocator's). */
int msi_snapshot_segment_order(const void *a, const void *b) {
  const msi_snap_segment *x = a, *y = b;
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  return x->address < y->address ? -1 : x->address > y->address;
}

/* ---- 3. write -------------------------------------------------------------------------- */

typedef struct writer {
  sqlite3 *db;
  const char *path;
  int rc;
} writer;

static bool ok(writer *w, int rc, const char *what) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return true;
  if (w->rc == MEMSNAP_OK)
    msi_error("snapshot '%s': %s failed: %s", w->path, what, w->db ? sqlite3_errmsg(w->db) : sqlite3_errstr(rc));
  w->rc = MEMSNAP_EBACKEND;
  return false;
}

static sqlite3_stmt *prepare(writer *w, const char *sql) {
  sqlite3_stmt *st = NULL;
  ok(w, sqlite3_prepare_v2(w->db, sql, -1, &st, NULL), sql);
  return st;
}

/* Binds the values in order (those at positions in `null_if_zero`, a bit mask, as NULL when 0)
 * and runs the statement. */
static void insert_ints(writer *w, sqlite3_stmt *st, const int64_t *v, int n, unsigned null_if_zero) {
  if (!st || w->rc) return;
  for (int i = 0; i < n; i++) {
    if ((null_if_zero >> i & 1) && v[i] == 0) sqlite3_bind_null(st, i + 1);
    else sqlite3_bind_int64(st, i + 1, v[i]);
  }
  ok(w, sqlite3_step(st), "insert");
  sqlite3_reset(st);
}

static void insert_kv(writer *w, sqlite3_stmt *st, const char *key, const char *text, int64_t num, bool is_text) {
  if (!st || w->rc) return;
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  if (is_text) sqlite3_bind_text(st, 2, text, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_int64(st, 2, num);
  ok(w, sqlite3_step(st), "insert");
  sqlite3_reset(st);
}

/* meta: the format, the process, the recording. */
/* meta of another process (recover.c): what its live mapping said, and how it ended. */
static void write_origin_meta(writer *w, const msi_snapshot *s, sqlite3_stmt *st) {
  static const char *const stack_modes[] = {"none", "native", "python", "all"};
  const msi_snap_origin *o = s->origin;
  insert_kv(w, st, "format_version", NULL, MEMSNAP_FORMAT_VERSION, false);
  insert_kv(w, st, "tool", "memsnap", 0, true);
  insert_kv(w, st, "tool_version", MEMSNAP_VERSION, 0, true);
  insert_kv(w, st, "pid", NULL, o->pid, false);
  insert_kv(w, st, "host", o->host, 0, true);
  if (o->rank >= 0) insert_kv(w, st, "rank", NULL, o->rank, false);
  insert_kv(w, st, "command_line", o->command_line, 0, true);
  insert_kv(w, st, "backend", o->backend, 0, true);
  insert_kv(w, st, "device_count", NULL, s->ndevs, false);
  insert_kv(w, st, "recording", NULL, 1, false);
  insert_kv(w, st, "stacks", stack_modes[o->stacks & 3], 0, true);
  insert_kv(w, st, "max_entries", NULL, (int64_t)s->max_entries, false);
  insert_kv(w, st, "recorded_events", NULL, (int64_t)(s->nev + s->dropped), false);
  insert_kv(w, st, "dropped_events", NULL, (int64_t)s->dropped, false);
  insert_kv(w, st, "start_unix_ns", NULL, (int64_t)o->start_unix_ns, false);
  insert_kv(w, st, "snapshot_ns", NULL, (int64_t)o->snapshot_ns, false);
  insert_kv(w, st, "recovered", NULL, o->live ? 2 : 1, false);
  if (o->state) insert_kv(w, st, "recovered_state", o->state, 0, true);
  if (o->state_torn) insert_kv(w, st, "recovered_state_torn", NULL, 1, false);
  if (o->ended) insert_kv(w, st, "ended", o->ended, 0, true);
  if (o->end_signal) insert_kv(w, st, "end_signal", NULL, o->end_signal, false);
  if (o->exit_status >= 0) insert_kv(w, st, "exit_status", NULL, o->exit_status, false);
  if (o->end_ns) insert_kv(w, st, "end_ns", NULL, (int64_t)o->end_ns, false);
  insert_kv(w, st, "last_event_ns", NULL, (int64_t)o->last_event_ns, false);
  if (o->last_alloc_ns) insert_kv(w, st, "last_alloc_ns", NULL, (int64_t)o->last_alloc_ns, false);
  sqlite3_finalize(st);
}

static void write_meta(writer *w, const msi_snapshot *s) {
  sqlite3_stmt *st = prepare(w, "INSERT INTO meta VALUES(?,?)");
  if (s->origin) {
    write_origin_meta(w, s, st);
    return;
  }
  char host[256] = "", cmd[4096];
  gethostname(host, sizeof host - 1);
  msi_process_cmdline(cmd, sizeof cmd);
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  uint64_t now = msi_now_ns(), unix_now = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
  static const char *const stack_modes[] = {"none", "native", "python", "all"};
  insert_kv(w, st, "format_version", NULL, MEMSNAP_FORMAT_VERSION, false);
  insert_kv(w, st, "tool", "memsnap", 0, true);
  insert_kv(w, st, "tool_version", MEMSNAP_VERSION, 0, true);
  insert_kv(w, st, "pid", NULL, getpid(), false);
  insert_kv(w, st, "host", host, 0, true);
  const char *rank = msi_process_rank();
  if (rank && strlen(rank) < 19) insert_kv(w, st, "rank", NULL, strtoll(rank, NULL, 10), false);
  insert_kv(w, st, "command_line", cmd, 0, true);
  insert_kv(w, st, "backend", msi_be->name, 0, true);
  insert_kv(w, st, "device_count", NULL, msi_be->device_count(), false);
  insert_kv(w, st, "recording", NULL, msi_ring_recording(), false);
  insert_kv(w, st, "stacks", stack_modes[msi_opt.stacks & 3], 0, true);
  insert_kv(w, st, "max_entries", NULL, (int64_t)s->max_entries, false);
  insert_kv(w, st, "recorded_events", NULL, (int64_t)(s->nev + s->dropped), false);
  insert_kv(w, st, "dropped_events", NULL, (int64_t)s->dropped, false);
  insert_kv(w, st, "start_unix_ns", NULL, (int64_t)(unix_now - (now - s->start_ns)), false);
  insert_kv(w, st, "snapshot_ns", NULL, (int64_t)(now - s->start_ns), false);
  sqlite3_finalize(st);
}

/* options: every variable's effective value. */
static void write_options(writer *w, const msi_snapshot *s) {
  sqlite3_stmt *st = prepare(w, "INSERT INTO options VALUES(?,?)");
  if (s->origin) { /* as they were when its live mapping was made */
    for (size_t i = 0; i < s->origin->noptions; i++)
      insert_kv(w, st, s->origin->option_names[i], s->origin->option_values[i], 0, true);
    sqlite3_finalize(st);
    return;
  }
  const char *var;
  for (int i = 0; (var = memsnap_option_info(i, NULL, NULL)) != NULL; i++) {
    char value[1100];
    msi_option_value(i, value, sizeof value);
    insert_kv(w, st, var, value, 0, true);
  }
  sqlite3_finalize(st);
}

/* devices, each followed by its statistics. */
static void write_devices(writer *w, const msi_snapshot *s) {
  sqlite3_stmt *st = prepare(w, "INSERT INTO devices VALUES(?,?,?,?,?)");
  sqlite3_stmt *st2 = prepare(w, "INSERT INTO stats VALUES(?,?,?)");
  for (int i = 0; i < s->ndevs && !w->rc; i++) {
    const msi_snap_device *d = &s->devs[i];
    sqlite3_bind_int(st, 1, d->index);
    sqlite3_bind_text(st, 2, d->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, (int64_t)d->total);
    sqlite3_bind_int64(st, 4, (int64_t)d->free_bytes);
    if (d->cap) sqlite3_bind_int64(st, 5, (int64_t)d->cap);
    else sqlite3_bind_null(st, 5);
    ok(w, sqlite3_step(st), "insert device");
    sqlite3_reset(st);
    for (int k = 0; k < d->nstats && !w->rc; k++) {
      sqlite3_bind_int(st2, 1, d->index);
      sqlite3_bind_text(st2, 2, memsnap_stat_key(k), -1, SQLITE_STATIC);
      sqlite3_bind_int64(st2, 3, d->stats[k]);
      ok(w, sqlite3_step(st2), "insert stat");
      sqlite3_reset(st2);
    }
  }
  sqlite3_finalize(st);
  sqlite3_finalize(st2);
}

/* One segment's row (id: its 1-based position). */
static void insert_segment(writer *w, const msi_snapshot *s, sqlite3_stmt *st, int64_t id, const msi_snap_segment *g) {
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_int(st, 2, g->device);
  sqlite3_bind_int64(st, 3, (int64_t)g->address);
  sqlite3_bind_int64(st, 4, (int64_t)g->size);
  sqlite3_bind_text(st, 5, g->pool, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 6, (int64_t)g->stream);
  sqlite3_bind_int(st, 7, g->expandable);
  if (g->private_pool) {
    sqlite3_bind_int64(st, 8, (int64_t)g->pool_id[0]);
    sqlite3_bind_int64(st, 9, (int64_t)g->pool_id[1]);
  } else {
    sqlite3_bind_null(st, 8);
    sqlite3_bind_null(st, 9);
  }
  char library[256] = "";
  if (g->source) {
    sqlite3_bind_text(st, 10, label_text(s, g->source), -1, SQLITE_TRANSIENT);
    if (g->library) snprintf(library, sizeof library, "%s", g->library);
    else if (!s->origin) library_of(g->caller, library, sizeof library); /* another process's: not this one's modules */
  } else {
    sqlite3_bind_null(st, 10);
  }
  if (library[0]) sqlite3_bind_text(st, 11, library, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_null(st, 11);
  ok(w, sqlite3_step(st), "insert segment");
  sqlite3_reset(st);
}

/* segments, each followed by its blocks. */
static void write_segments(writer *w, const msi_snapshot *s) {
  static const char *const states[] = {"allocated", "free", "pending_free"};
  sqlite3_stmt *st = prepare(w, memsnap_insert_segment_sql);
  sqlite3_stmt *st2 = prepare(w, "INSERT INTO blocks VALUES(NULL,?,?,?,?,?,?,?,?)");
  for (size_t i = 0; i < s->nsegs && !w->rc; i++) {
    const msi_snap_segment *g = &s->segs[i];
    insert_segment(w, s, st, (int64_t)i + 1, g);
    for (size_t b = g->first_block; b < g->first_block + g->nblocks && !w->rc; b++) {
      const msi_snap_block *k = &s->blocks[b];
      sqlite3_bind_int64(st2, 1, (int64_t)i + 1);
      sqlite3_bind_int64(st2, 2, (int64_t)k->address);
      sqlite3_bind_int64(st2, 3, (int64_t)k->size);
      sqlite3_bind_int64(st2, 4, (int64_t)k->requested);
      sqlite3_bind_text(st2, 5, states[k->state], -1, SQLITE_STATIC);
      if (k->stack_id) sqlite3_bind_int64(st2, 6, k->stack_id);
      else sqlite3_bind_null(st2, 6);
      if (k->role) sqlite3_bind_int64(st2, 7, k->role);
      else sqlite3_bind_null(st2, 7);
      if (k->module_label) sqlite3_bind_int64(st2, 8, k->module_label);
      else sqlite3_bind_null(st2, 8);
      ok(w, sqlite3_step(st2), "insert block");
      sqlite3_reset(st2);
    }
  }
  sqlite3_finalize(st);
  sqlite3_finalize(st2);
}

/* event_kinds: the names of the event kinds. */
static void write_event_kinds(writer *w) {
  sqlite3_stmt *st = prepare(w, "INSERT INTO event_kinds VALUES(?,?)");
  for (int k = 1; k < MSI_EV_KINDS && !w->rc; k++) {
    sqlite3_bind_int(st, 1, k);
    sqlite3_bind_text(st, 2, memsnap_event_kind_names[k], -1, SQLITE_STATIC);
    ok(w, sqlite3_step(st), "insert kind");
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
}

#define EVENT_ROWS 64 /* rows of one events insert: 704 parameters, under SQLite's 999 of old */

/* The events table and, as their events pass, marks and ranges. Events go in EVENT_ROWS to a
 * statement (one step for many rows: the per-statement work of SQLite is most of an insert's
 * cost), the last ones one by one. */
typedef struct event_writer {
  writer *w;
  const msi_snapshot *s;
  sqlite3_stmt *many, *one, *marks, *ranges, *steps;
  int rows; /* rows bound in `many` so far */
  /* Open ranges per thread: a small stack of (push event index) per thread, found by scan. */
  struct open_range { uint32_t tid; uint64_t idx; } *open;
  size_t nopen;
  uint32_t max_label; /* the highest label id the events name */
} event_writer;

/* "INSERT INTO events VALUES(...),(...),..." with EVENT_ROWS rows; NULL when out of memory. */
static sqlite3_stmt *prepare_event_rows(writer *w) {
  char *many = malloc(64 + EVENT_ROWS * 26);
  if (many) {
    size_t o = (size_t)sprintf(many, "INSERT INTO events VALUES");
    for (int r = 0; r < EVENT_ROWS; r++) o += (size_t)sprintf(many + o, "%s(?,?,?,?,?,?,?,?,?,?,?)", r ? "," : "");
  }
  sqlite3_stmt *st = many ? prepare(w, many) : NULL;
  free(many);
  return st;
}

/* Whether an event of `kind` names a label in its extra (aux): the model's events (module,
 * tensor, step: model_events.c), written even when 0 (a tensor of no known module). */
static inline bool names_label(uint8_t kind) {
  return kind == MSI_EV_MODULE || kind == MSI_EV_TENSOR || kind == MSI_EV_STEP;
}

/* A mark's row, a push remembered, a pop's range written; notes the labels events name. */
static void note_mark_or_range(event_writer *x, uint64_t i, int64_t id, int64_t t) {
  const msi_event *ev = x->s->ev, *e = &ev[i];
  if (e->kind == MSI_EV_MARK) {
    int64_t v[] = {id, t, (int64_t)e->aux, e->tid, e->stack_id};
    insert_ints(x->w, x->marks, v, 5, 1u << 4);
    if (e->aux > x->max_label) x->max_label = (uint32_t)e->aux;
  } else if (e->kind == MSI_EV_RANGE_PUSH) {
    if (x->open) x->open[x->nopen++] = (struct open_range){e->tid, i};
    if (e->aux > x->max_label) x->max_label = (uint32_t)e->aux;
  } else if (e->kind == MSI_EV_RANGE_POP && x->open) {
    /* The pop closes the open push of its thread at its depth (a push records the depth
       before it, a pop the depth after it); a pop whose push is not in the ring matches none. */
    for (size_t k = x->nopen; k-- > 0;)
      if (x->open[k].tid == e->tid && ev[x->open[k].idx].requested == e->requested) {
        const msi_event *p = &ev[x->open[k].idx];
        int64_t v[] = {(int64_t)p->aux, p->tid, (int64_t)p->requested, (int64_t)(p->time_ns - x->s->start_ns), t,
                       p->stack_id};
        insert_ints(x->w, x->ranges, v, 6, 1u << 5);
        memmove(&x->open[k], &x->open[k + 1], sizeof *x->open * (x->nopen - k - 1));
        x->nopen--;
        break;
      }
  }
  if (e->kind == MSI_EV_STEP) { /* the steps table: the step events again, for readers of steps alone */
    int64_t v[] = {id, t, (int64_t)e->aux, (int64_t)e->size};
    insert_ints(x->w, x->steps, v, 4, 0);
  }
  if ((e->kind == MSI_EV_SEGMENT_ALLOC || names_label(e->kind)) && e->aux > x->max_label)
    x->max_label = (uint32_t)e->aux; /* external: the API; the model's events: a module, an optimizer */
}

/* Binds event i's row into the batch (or, for the last rows, the one-row statement) and runs the
 * statement once it is full. */
static void put_event(event_writer *x, uint64_t i, int64_t id, int64_t t) {
  const msi_event *e = &x->s->ev[i];
  int64_t v[] = {id, t, e->kind, e->device, (int64_t)e->stream, (int64_t)e->addr, (int64_t)e->size,
                 (int64_t)e->requested, (int64_t)e->aux, e->tid, e->stack_id};
  bool batched = x->s->nev - i + (uint64_t)x->rows >= EVENT_ROWS; /* this row's batch will be full */
  sqlite3_stmt *target = batched ? x->many : x->one;
  int base = batched ? x->rows * 11 : 0;
  for (int k = 0; k < 11; k++) {
    bool null = (k == 3 && e->device < 0) || (k == 10 && e->stack_id == 0) ||
                (k == 8 && e->kind != MSI_EV_OOM && e->kind != MSI_EV_MARK && e->kind != MSI_EV_RANGE_PUSH &&
                 e->kind != MSI_EV_INVALID_FREE && e->kind != MSI_EV_GC && !names_label(e->kind) && !(e->kind == MSI_EV_SEGMENT_ALLOC && e->aux) &&
                 !((e->kind == MSI_EV_SEGMENT_FREE || e->kind == MSI_EV_SEGMENT_UNMAP) && e->aux));
    if (null) sqlite3_bind_null(target, base + k + 1);
    else sqlite3_bind_int64(target, base + k + 1, v[k]);
  }
  if (batched && ++x->rows < EVENT_ROWS) return;
  x->rows = 0;
  ok(x->w, sqlite3_step(target), "insert event");
  sqlite3_reset(target);
}

/* The ranges still open at the snapshot: end_ns NULL. */
static void write_open_ranges(event_writer *x) {
  for (size_t k = 0; k < x->nopen && !x->w->rc; k++) {
    const msi_event *p = &x->s->ev[x->open[k].idx];
    sqlite3_stmt *st = x->ranges;
    sqlite3_bind_int64(st, 1, (int64_t)p->aux);
    sqlite3_bind_int64(st, 2, p->tid);
    sqlite3_bind_int64(st, 3, (int64_t)p->requested);
    sqlite3_bind_int64(st, 4, (int64_t)(p->time_ns - x->s->start_ns));
    sqlite3_bind_null(st, 5);
    if (p->stack_id) sqlite3_bind_int64(st, 6, p->stack_id);
    else sqlite3_bind_null(st, 6);
    ok(x->w, sqlite3_step(st), "insert range");
    sqlite3_reset(st);
  }
}

/* events, marks and ranges; returns the highest label id they name. */
static uint32_t write_events(writer *w, const msi_snapshot *s) {
  event_writer x = {w, s, prepare_event_rows(w), NULL, NULL, NULL, NULL, 0, NULL, 0, 0};
  x.one = prepare(w, "INSERT INTO events VALUES(?,?,?,?,?,?,?,?,?,?,?)");
  x.marks = prepare(w, "INSERT INTO marks VALUES(?,?,?,?,?)");
  x.ranges = prepare(w, "INSERT INTO ranges VALUES(NULL,?,?,?,?,?,?)");
  x.steps = prepare(w, "INSERT INTO steps VALUES(?,?,?,?)");
  x.open = malloc(sizeof *x.open * (s->nev ? s->nev : 1));
  for (uint64_t i = 0; i < s->nev && !w->rc; i++) {
    int64_t id = (int64_t)(s->before + s->ev[i].seq + 1), t = (int64_t)(s->ev[i].time_ns - s->start_ns);
    note_mark_or_range(&x, i, id, t);
    if (!x.one || !x.many || w->rc) break;
    put_event(&x, i, id, t);
  }
  sqlite3_finalize(x.many);
  write_open_ranges(&x);
  free(x.open);
  sqlite3_finalize(x.one);
  sqlite3_finalize(x.marks);
  sqlite3_finalize(x.ranges);
  sqlite3_finalize(x.steps);
  return x.max_label;
}

/* labels: every id up to the highest that the events or the external segments name. */
static void write_labels(writer *w, const msi_snapshot *s, uint32_t max_label) {
  for (size_t i = 0; i < s->nsegs; i++)
    if (s->segs[i].source > max_label) max_label = s->segs[i].source;
  for (size_t i = 0; i < s->nblocks; i++) /* the modules of the blocks' roles */
    if (s->blocks[i].module_label > max_label) max_label = s->blocks[i].module_label;
  sqlite3_stmt *st = prepare(w, "INSERT INTO labels VALUES(?,?)");
  for (uint32_t i = 0; i <= max_label && !w->rc; i++) {
    sqlite3_bind_int(st, 1, (int)i);
    sqlite3_bind_text(st, 2, label_text(s, i), -1, SQLITE_TRANSIENT);
    ok(w, sqlite3_step(st), "insert label");
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
}

/* stacks and their frames' ids, once the line lookups (which ran while the tables above were
 * written) are finished. */
static void write_stacks(writer *w, msi_symbolized *sym) {
  if (!w->rc && msi_stacks_symbolize_finish(sym) != MEMSNAP_OK) w->rc = MEMSNAP_ENOMEM;
  sqlite3_stmt *st = prepare(w, "INSERT INTO stacks VALUES(?,?)");
  sqlite3_stmt *st2 = prepare(w, "INSERT INTO stack_frames VALUES(?,?,?)");
  for (uint32_t id = 1; id < sym->nstacks && !w->rc; id++) {
    int64_t v[] = {id, sym->stacks[id].depth};
    insert_ints(w, st, v, 2, 0);
    for (uint32_t p = 0; p < sym->stacks[id].depth && !w->rc; p++) {
      int64_t f[] = {id, p, sym->stacks[id].frames[p] + 1};
      insert_ints(w, st2, f, 3, 0);
    }
  }
  sqlite3_finalize(st);
  sqlite3_finalize(st2);
}

/* frames: native ones with pc and offset, Python ones with file and line. */
static void write_frames(writer *w, const msi_symbolized *sym) {
  sqlite3_stmt *st = prepare(w, "INSERT INTO frames VALUES(?,?,?,?,?,?,?,?,?)");
  for (size_t i = 0; i < sym->nframes && !w->rc; i++) {
    const msi_frame *f = &sym->frames[i];
    sqlite3_bind_int64(st, 1, (int64_t)i + 1);
    sqlite3_bind_text(st, 2, f->python ? "python" : "native", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, f->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, f->file, -1, SQLITE_STATIC);
    if (f->python || f->line > 0) sqlite3_bind_int64(st, 5, f->line);
    else sqlite3_bind_null(st, 5);
    sqlite3_bind_text(st, 6, f->module, -1, SQLITE_STATIC);
    if (f->python) {
      sqlite3_bind_null(st, 7);
      sqlite3_bind_null(st, 8);
    } else {
      sqlite3_bind_int64(st, 7, (int64_t)f->pc);
      sqlite3_bind_int64(st, 8, (int64_t)f->offset);
    }
    sqlite3_bind_int(st, 9, f->inlined);
    ok(w, sqlite3_step(st), "insert frame");
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
}

/* The whole file in one transaction, table by table (w->rc says how it went). */
/* The run log's entries (history/runlog.h), both logs, times since the recording's start. */
static void write_run_log(writer *w, const msi_snapshot *s) {
  if (!s->runlog) return;
  sqlite3_stmt *st = prepare(w, "INSERT INTO run_log VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  for (int k = 0; k < MSI_RUNLOG_LOGS && st; k++) {
    msi_runlog_entry *e;
    bool in_progress;
    long n = msi_runlog_entries(s->runlog, s->runlog_bytes, k, &e, &in_progress);
    for (long i = 0; i < n && !w->rc; i++) {
      int64_t v[] = {k, (int64_t)e[i].first, e[i].count, e[i].skipped, (int64_t)(e[i].start_ns - s->start_ns),
                     (int64_t)(e[i].end_ns - s->start_ns), e[i].peak_allocated, e[i].peak_reserved,
                     e[i].end_allocated, e[i].end_reserved, e[i].role_bytes[MSI_RUNLOG_PARAMETER],
                     e[i].role_bytes[MSI_RUNLOG_GRADIENT], e[i].role_bytes[MSI_RUNLOG_OPTIMIZER],
                     (int64_t)((uint64_t)e[i].peak_ns - s->start_ns), in_progress && i == n - 1};
      insert_ints(w, st, v, 15, 0);
    }
    free(e);
  }
  sqlite3_finalize(st);
}

static void write_all(writer *w, const msi_snapshot *s, msi_symbolized *sym) {
  ok(w, sqlite3_exec(w->db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA page_size=65536;", NULL, NULL, NULL),
     "pragmas");
  ok(w, sqlite3_exec(w->db, "BEGIN", NULL, NULL, NULL), "begin");
  ok(w, sqlite3_exec(w->db, memsnap_schema_sql, NULL, NULL, NULL), "schema");
  write_meta(w, s);
  write_options(w, s);
  write_devices(w, s);
  write_segments(w, s);
  write_event_kinds(w);
  write_labels(w, s, write_events(w, s));
  write_stacks(w, sym);
  write_frames(w, sym);
  write_run_log(w, s);
  if (!w->rc) ok(w, sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL), "commit");
}

static atomic_uint tmp_counter;

/* `memsnap run` learns which snapshots its program's processes wrote from the file named by
 * MEMSNAP_RUN_MANIFEST: one line "db<TAB>path" per snapshot, each appended with one write
 * (history/livefile.c). */
static void note_in_manifest(const char *path) {
  char line[1200], abs_path[1100] = "";
  if (path[0] != '/' && getcwd(abs_path, 1024)) strcat(abs_path, "/");
  snprintf(line, sizeof line, "db\t%s%s\n", abs_path, path);
  msi_live_manifest_append(line, strlen(line)); /* only into a regular file of this user's, no link followed */
}

/* fsyncs a file or directory by path; returns 0 or -1. */
static int sync_path(const char *path, int flags) {
  int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

static atomic_int oom_dumped; /* MEMSNAP_DUMP_ON_OOM written: once a process */

void msi_dump_on_oom(void) {
  char oom_path[1024];
  if (msi_dump_path(true, oom_path, sizeof oom_path) && atomic_exchange(&oom_dumped, 1) == 0) {
    char message[512];
    snprintf(message, sizeof message, "%s", memsnap_last_error());
    if (memsnap_dump(oom_path) != MEMSNAP_OK)
      fprintf(stderr, "memsnap: error: snapshot at out of memory: %s\n", memsnap_last_error());
    msi_error("%s", message); /* the caller wants the OOM message, not the dump's */
  }
}

int msi_snapshot_write(const char *path, const msi_snapshot *s, msi_symbolized *sym) {
  char tmp[1100];
  int rc;

  snprintf(tmp, sizeof tmp, "%s.tmp-%d-%u", path, (int)getpid(), atomic_fetch_add(&tmp_counter, 1));
  unlink(tmp);
  writer w = {NULL, path, MEMSNAP_OK};
  if (!ok(&w, sqlite3_open_v2(tmp, &w.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL), "open")) {
    rc = w.rc;
    sqlite3_close(w.db);
    unlink(tmp);
    return rc;
  }
  write_all(&w, s, sym);
  if (sqlite3_close(w.db) != SQLITE_OK && !w.rc) ok(&w, SQLITE_ERROR, "close");
  rc = w.rc;
  if (rc == MEMSNAP_OK && sync_path(tmp, O_RDONLY) != 0) {
    msi_error("snapshot '%s': fsync failed: %s", path, strerror(errno));
    rc = MEMSNAP_EBACKEND;
  }
  if (rc == MEMSNAP_OK && rename(tmp, path) != 0) {
    msi_error("snapshot '%s': cannot rename the finished file into place: %s", path, strerror(errno));
    rc = MEMSNAP_EBACKEND;
  }
  if (rc != MEMSNAP_OK) {
    unlink(tmp);
  } else {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    sync_path(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (!s->origin) note_in_manifest(path);
  }
  return rc;
}

/* The dump hook (memsnap_set_dump_hook), and a thread's deferral of it while it holds a lock
 * (api.c's signal thread and `memsnap dump PID`: msi_dump_hook_defer, then msi_dump_hook_run). */
static _Atomic(memsnap_dump_hook_t) dump_hook;
static void *_Atomic dump_hook_arg;
static __thread bool hook_deferred;
static __thread char hook_path[1024];

int memsnap_set_dump_hook(memsnap_dump_hook_t fn, void *arg) {
  atomic_store(&dump_hook_arg, arg);
  atomic_store(&dump_hook, fn);
  return MEMSNAP_OK;
}

void msi_dump_hook_defer(void) {
  hook_deferred = true;
  hook_path[0] = 0;
}

void msi_dump_hook_run(void) {
  hook_deferred = false;
  memsnap_dump_hook_t fn = atomic_load(&dump_hook);
  if (fn && hook_path[0]) fn(hook_path, atomic_load(&dump_hook_arg));
  hook_path[0] = 0;
}

/* After a snapshot is written to `path`: the hook now, or once the thread's lock is released. */
static void after_dump(const char *path) {
  snprintf(hook_path, sizeof hook_path, "%s", path);
  if (!hook_deferred) msi_dump_hook_run();
}

int memsnap_dump(const char *pattern) {
  char path[1024];
  if (!pattern) {
    msi_error("memsnap_dump: no path");
    return MEMSNAP_EINVAL;
  }
  int rc = msi_expand_path(pattern, path, sizeof path);
  if (rc != MEMSNAP_OK) return rc;
  if (msi_ensure_ready() != 0) return MEMSNAP_EBACKEND;

  msi_snapshot s = {0};
  s.start_ns = msi_now_ns();
  msi_runlog_region *run = msi_runlog_copy(); /* before the device locks: it samples them */
  s.runlog = run;
  s.runlog_bytes = run ? sizeof *run : 0;
  msi_devices_locked(gather, &s);
  msi_symbolized sym = {0};
  if (s.failed || s.nev == UINT64_MAX) {
    if (s.failed) msi_error("snapshot '%s': out of host memory", path);
    rc = MEMSNAP_ENOMEM;
    goto cleanup;
  }
  if (!s.max_entries) s.start_ns = msi_now_ns(); /* never recorded: times count from now */
  if (s.nsegs > 1) qsort(s.segs, s.nsegs, sizeof *s.segs, msi_snapshot_segment_order);
  rc = msi_stacks_symbolize(&sym);
  if (rc != MEMSNAP_OK) goto cleanup;
  rc = msi_snapshot_write(path, &s, &sym);
cleanup:
  msi_symbolized_free(&sym);
  free(s.ev);
  free(s.segs);
  free(s.heads);
  free(s.blocks);
  free(run);
  if (rc == MEMSNAP_OK) after_dump(path);
  return rc;
}
