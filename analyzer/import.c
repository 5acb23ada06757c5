/* import.c: a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot: a pickle, gzip-compressed
 * or not) into a memsnap snapshot that `memsnap analyze`, `diff`, `info` and the page read like
 * any other; `memsnap import` (cmd_import.c) runs it on a file, the fuzzing target on a buffer.
 * docs/pytorch-snapshots.md has the mapping, field by field.
 *
 * The pickle is read by pickle_read.c's strict reader (it never runs code) while it is inflated, and
 * streamed: each device trace entry, segment and annotation is written to SQLite when the list
 * that holds it receives it, then freed. Memory holds one batch of entries (picklers append 1000
 * at a time), the distinct frames and stacks (each once), and the strings that the pickle's memo
 * may refer to again; frames lists and frame dicts leave the memo as small handles once
 * interned. Anything the stream did not take (a pickle built in another order) is taken from
 * the finished tree.
 *
 * Events are staged in a temporary table with their PyTorch time (us) and the list they came
 * from. Once the pickle has been read, and so each list is known as device_traces[i], they are
 * copied into `events` in time order (devices interleaved, annotations as range_push/range_pop)
 * with times in ns since the first event.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "analyzer.h"
#include "pickle.h"
#include "snapshot_schema.h"

/* Tags on pickle objects and handles in the memo: what an object became (kind in 2 bits). */
enum { TAG_FRAME = 1, TAG_STACK = 2, TAG_LIST = 3 };
/* Lists tagged TAG_LIST with these ids gave segments or annotations; trace lists have ids from 1
 * to their count, far below. */
#define LIST_SEGMENTS ((int64_t)1 << 40)
#define LIST_ANNOTATIONS (LIST_SEGMENTS + 1)
#define TAG(kind, id) ((int64_t)(id) << 2 | (kind))
#define TAG_KIND(t) ((int)((t) & 3))
#define TAG_ID(t) ((t) >> 2)

#define MAX_DEPTH 4096          /* frames kept per stack (the innermost) */
#define MAX_DEVICES 4096
#define MAX_TIME_US 4000000000000000LL /* year 2096: times stay exact in ns */
#define MAX_SIZE ((int64_t)1 << 56)

/* An open-addressing index of ids (1-based) into an array the caller owns, by hash. */
typedef struct id_index {
  uint32_t *slots;
  size_t mask, count;
} id_index;

typedef struct frame_rec {
  char *name, *file;
  int64_t line;
  bool python;
  uint64_t hash;
} frame_rec;

typedef struct stack_rec {
  uint32_t *frames;
  uint32_t depth;
  uint64_t hash;
} stack_rec;

typedef struct label_rec {
  char *text;
  uint64_t hash;
} label_rec;

typedef struct trace_list {
  int64_t reserved, allocated; /* replayed from the entries: what the cache held at an OOM */
} trace_list;

typedef struct open_range {
  int64_t row, label, depth;
} open_range;

typedef struct device_ranges {
  open_range *v;
  size_t n, cap;
} device_ranges;

typedef struct importer {
  sqlite3 *db;
  pk_reader *r;
  sqlite3_stmt *stage, *segment, *block, *frame, *stack, *stack_frame, *label, *range_open, *range_close, *option;
  frame_rec *frames;
  size_t nframes, cframes;
  id_index frame_index;
  stack_rec *stacks;
  size_t nstacks, cstacks;
  id_index stack_index;
  label_rec *labels;
  size_t nlabels, clabels;
  id_index label_index;
  trace_list *lists;
  size_t nlists, clists;
  device_ranges *ranges; /* open annotations, per device */
  size_t nranges;
  uint32_t *scratch;
  int64_t entries, segments, blocks, annotations, unmatched_ends, skipped, last_time;
  bool claimed[2]; /* a list gave segments, annotations (see claim_list) */
  char skipped_action[64];
  bool failed, streaming; /* streaming: the reader runs (errors stop it) */
  char error[600];
  void (*note)(void *ctx, const char *phase); /* progress of the steps after reading; may be NULL */
  void *note_ctx;
} importer;

/* ---- small helpers ------------------------------------------------------------------------ */

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Records the first error in im->error (and stops the reader while it runs); returns -1. */
static int failf(importer *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(importer *im, const char *fmt, ...) {
  if (im->failed) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(im->error, sizeof im->error, fmt, ap);
  va_end(ap);
  im->failed = true;
  if (im->streaming) pk_fail(im->r, "%s", im->error);
  return -1;
}

static int db_fail(importer *im) { return failf(im, "cannot write the snapshot: %s", sqlite3_errmsg(im->db)); }

/* Runs a prepared statement with its bindings, then resets it; 0 or -1. */
static int step(importer *im, sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : db_fail(im);
}

static void bind_int_or_null(sqlite3_stmt *st, int col, int64_t v, bool null) {
  if (null) sqlite3_bind_null(st, col);
  else sqlite3_bind_int64(st, col, v);
}

/* Finds the id whose record `same` says equals the key, or the slot to put it in. */
typedef bool (*same_fn)(const importer *im, uint32_t id, const void *key);
static uint32_t *index_find(const importer *im, id_index *x, uint64_t hash, same_fn same, const void *key) {
  for (size_t i = hash & x->mask;; i = (i + 1) & x->mask)
    if (!x->slots[i] || same(im, x->slots[i], key)) return &x->slots[i];
}

/* Makes room for one more id in x; 0 or -1. hash_of gives the hash of an existing id. */
static int index_reserve(importer *im, id_index *x, uint64_t (*hash_of)(const importer *, uint32_t)) {
  if ((x->count + 1) * 2 <= x->mask + 1 && x->slots) return 0;
  size_t cap = x->slots ? (x->mask + 1) * 2 : 1024;
  uint32_t *s = calloc(cap, sizeof *s);
  if (!s) return failf(im, "out of memory");
  for (size_t i = 0; x->slots && i <= x->mask; i++)
    if (x->slots[i]) {
      size_t j = hash_of(im, x->slots[i]) & (cap - 1);
      while (s[j]) j = (j + 1) & (cap - 1);
      s[j] = x->slots[i];
    }
  free(x->slots);
  x->slots = s;
  x->mask = cap - 1;
  return 0;
}

/* Grows *arr to hold n + 1 elements; 0 or -1. */
static int reserve(importer *im, void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return 0;
  size_t c = *cap ? *cap * 2 : 64;
  void *g = realloc(*arr, c * size);
  if (!g) return failf(im, "out of memory");
  *arr = g;
  *cap = c;
  return 0;
}

/* ---- reading fields ------------------------------------------------------------------------ */

/* What is being read, for messages: "device_traces entry 12", "segment 3 block 5", ... */
typedef struct where {
  const char *what;
  int64_t id_index, sub;
} where;

static const char *where_text(const where *w, char *buf, size_t len) {
  if (w->sub >= 0) snprintf(buf, len, "%s %" PRId64 " block %" PRId64, w->what, w->id_index, w->sub);
  else snprintf(buf, len, "%s %" PRId64, w->what, w->id_index);
  return buf;
}

static int field_error(importer *im, const where *w, const char *key, const pk_value *v, const char *expected) {
  char buf[96];
  if (!v) return failf(im, "%s: '%s' is missing", where_text(w, buf, sizeof buf), key);
  return failf(im, "%s: '%s' is %s %s, expected %s", where_text(w, buf, sizeof buf), key,
               v->kind == PK_BIGINT ? "an integer out of range, an" : "a", pk_type_name(v), expected);
}

/* d[key] as an integer in [lo, hi]: *out, or def when absent and not required. 0 or -1. */
static int get_int(importer *im, const pk_obj *d, const char *key, const where *w, bool required, int64_t def,
                   int64_t lo, int64_t hi, int64_t *out) {
  const pk_value *v = pk_dict_get(d, key);
  if (!v || v->kind == PK_NONE) {
    if (required) return field_error(im, w, key, NULL, "an integer");
    *out = def;
    return 0;
  }
  if (v->kind == PK_INT || v->kind == PK_BOOL) *out = v->i;
  else if (v->kind == PK_FLOAT && v->f >= -9.2e18 && v->f <= 9.2e18) *out = (int64_t)v->f;
  else return field_error(im, w, key, v, "an integer");
  if (*out < lo || *out > hi) {
    char buf[96];
    return failf(im, "%s: '%s' is %" PRId64 ", outside %" PRId64 "..%" PRId64, where_text(w, buf, sizeof buf), key,
                 *out, lo, hi);
  }
  return 0;
}

/* d[key] as a string (sanitized to UTF-8 in place): *out and *len, or "" when absent. */
static int get_str(importer *im, const pk_obj *d, const char *key, const where *w, bool required, const char **out,
                   size_t *len) {
  const pk_value *v = pk_dict_get(d, key);
  if (!v || v->kind == PK_NONE) {
    if (required) return field_error(im, w, key, NULL, "a string");
    *out = "";
    *len = 0;
    return 0;
  }
  if (!pk_is(v, PK_STR)) return field_error(im, w, key, v, "a string");
  pk_utf8_sanitize(v->o->s, v->o->len);
  *out = v->o->s;
  *len = v->o->len;
  return 0;
}

/* ---- frames and stacks ------------------------------------------------------------------- */

typedef struct frame_key {
  const char *name, *file;
  size_t name_len, file_len;
  int64_t line;
  bool python;
} frame_key;

static bool same_frame(const importer *im, uint32_t id, const void *key) {
  const frame_rec *f = &im->frames[id - 1];
  const frame_key *k = key;
  return f->line == k->line && f->python == k->python && strlen(f->name) == k->name_len &&
         strlen(f->file) == k->file_len && memcmp(f->name, k->name, k->name_len) == 0 &&
         memcmp(f->file, k->file, k->file_len) == 0;
}
static uint64_t frame_hash_of(const importer *im, uint32_t id) { return im->frames[id - 1].hash; }

static bool ends_with(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* The frame id of a frame dict ({name, filename, line}) or of a frame handle; 0 with an error. */
static int64_t frame_id(importer *im, const pk_value *v, const where *w) {
  if (v->kind == PK_HANDLE && TAG_KIND(v->i) == TAG_FRAME) return TAG_ID(v->i);
  if (!pk_is(v, PK_DICT)) {
    char buf[96];
    failf(im, "%s: a frame is a %s, expected a dict", where_text(w, buf, sizeof buf), pk_type_name(v));
    return 0;
  }
  pk_obj *d = v->o;
  if (d->tag && TAG_KIND(d->tag) == TAG_FRAME) return TAG_ID(d->tag);
  frame_key k;
  if (get_str(im, d, "name", w, false, &k.name, &k.name_len) != 0 ||
      get_str(im, d, "filename", w, false, &k.file, &k.file_len) != 0 ||
      get_int(im, d, "line", w, false, 0, INT32_MIN, INT32_MAX, &k.line) != 0)
    return 0;
  /* PyTorch's frames: Python ones name a .py file (or <string>, <frozen ...>); C++ ones a
     source file, "??" or "" (unknown), with line 0. */
  k.python = ends_with(k.file, k.file_len, ".py") || (k.file_len > 1 && k.file[0] == '<');
  if (!k.python && k.file_len == 2 && memcmp(k.file, "??", 2) == 0) k.file_len = 0, k.file = "";
  uint64_t h = hash_bytes(hash_bytes(0xcbf29ce484222325ull, k.name, k.name_len), k.file, k.file_len);
  h = hash_bytes(h, &k.line, sizeof k.line) ^ k.python;
  if (index_reserve(im, &im->frame_index, frame_hash_of) != 0) return 0;
  uint32_t *slot = index_find(im, &im->frame_index, h, same_frame, &k);
  if (!*slot) {
    if (reserve(im, (void **)&im->frames, &im->cframes, im->nframes, sizeof *im->frames) != 0) return 0;
    frame_rec *f = &im->frames[im->nframes];
    f->name = strndup(k.name, k.name_len);
    f->file = strndup(k.file, k.file_len);
    if (!f->name || !f->file) {
      free(f->name), free(f->file);
      failf(im, "out of memory");
      return 0;
    }
    f->line = k.line;
    f->python = k.python;
    f->hash = h;
    *slot = (uint32_t)++im->nframes;
    im->frame_index.count++;
    sqlite3_stmt *st = im->frame;
    sqlite3_bind_int64(st, 1, *slot);
    sqlite3_bind_text(st, 2, k.python ? "python" : "native", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, f->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, f->file, -1, SQLITE_STATIC);
    bind_int_or_null(st, 5, k.line, !k.python && k.line <= 0);
    sqlite3_bind_text(st, 6, "", -1, SQLITE_STATIC);
    if (step(im, st) != 0) return 0;
  }
  d->tag = TAG(TAG_FRAME, *slot);
  pk_memo_replace(im->r, d, d->tag);
  return *slot;
}

typedef struct stack_key {
  const uint32_t *frames;
  uint32_t depth;
} stack_key;

static bool same_stack(const importer *im, uint32_t id, const void *key) {
  const stack_rec *s = &im->stacks[id - 1];
  const stack_key *k = key;
  return s->depth == k->depth && memcmp(s->frames, k->frames, sizeof *k->frames * k->depth) == 0;
}
static uint64_t stack_hash_of(const importer *im, uint32_t id) { return im->stacks[id - 1].hash; }

/* The stack id of a frames list (innermost first, as PyTorch's and memsnap's are) or of a stack
 * handle: 0 for none or an empty list; -1 with an error. */
static int64_t stack_id(importer *im, const pk_value *v, const where *w) {
  if (!v || v->kind == PK_NONE) return 0;
  if (v->kind == PK_HANDLE && TAG_KIND(v->i) == TAG_STACK) return TAG_ID(v->i);
  if (!pk_is(v, PK_LIST) && !pk_is(v, PK_TUPLE)) {
    field_error(im, w, "frames", v, "a list");
    return -1;
  }
  pk_obj *l = v->o;
  if (l->tag) {
    if (TAG_KIND(l->tag) == TAG_STACK) return TAG_ID(l->tag);
    char buf[96];
    failf(im, "%s: its frames list is also a device trace", where_text(w, buf, sizeof buf));
    return -1;
  }
  uint32_t depth = l->len < MAX_DEPTH ? (uint32_t)l->len : MAX_DEPTH;
  for (uint32_t i = 0; i < depth; i++) {
    int64_t f = frame_id(im, &l->items[i], w);
    if (f <= 0) return -1;
    im->scratch[i] = (uint32_t)f;
  }
  int64_t id = 0;
  if (depth > 0) {
    stack_key k = {im->scratch, depth};
    uint64_t h = hash_bytes(0xcbf29ce484222325ull, im->scratch, sizeof *im->scratch * depth);
    if (index_reserve(im, &im->stack_index, stack_hash_of) != 0) return -1;
    uint32_t *slot = index_find(im, &im->stack_index, h, same_stack, &k);
    if (!*slot) {
      if (reserve(im, (void **)&im->stacks, &im->cstacks, im->nstacks, sizeof *im->stacks) != 0) return -1;
      stack_rec *s = &im->stacks[im->nstacks];
      s->frames = malloc(sizeof *s->frames * depth);
      if (!s->frames) return failf(im, "out of memory");
      memcpy(s->frames, im->scratch, sizeof *s->frames * depth);
      s->depth = depth;
      s->hash = h;
      *slot = (uint32_t)++im->nstacks;
      im->stack_index.count++;
      sqlite3_bind_int64(im->stack, 1, *slot);
      sqlite3_bind_int64(im->stack, 2, depth);
      if (step(im, im->stack) != 0) return -1;
      for (uint32_t i = 0; i < depth; i++) {
        sqlite3_bind_int64(im->stack_frame, 1, *slot);
        sqlite3_bind_int64(im->stack_frame, 2, i);
        sqlite3_bind_int64(im->stack_frame, 3, im->scratch[i]);
        if (step(im, im->stack_frame) != 0) return -1;
      }
    }
    id = *slot;
  }
  l->tag = TAG(TAG_STACK, id);
  pk_memo_replace(im->r, l, l->tag);
  return id;
}

/* ---- labels ------------------------------------------------------------------------------- */

static bool same_label(const importer *im, uint32_t id, const void *key) {
  return strcmp(im->labels[id - 1].text, key) == 0;
}
static uint64_t label_hash_of(const importer *im, uint32_t id) { return im->labels[id - 1].hash; }

static int64_t label_id(importer *im, const char *text) {
  uint64_t h = hash_bytes(0xcbf29ce484222325ull, text, strlen(text));
  if (index_reserve(im, &im->label_index, label_hash_of) != 0) return -1;
  uint32_t *slot = index_find(im, &im->label_index, h, same_label, text);
  if (*slot) return *slot;
  if (reserve(im, (void **)&im->labels, &im->clabels, im->nlabels, sizeof *im->labels) != 0) return -1;
  label_rec *l = &im->labels[im->nlabels];
  if (!(l->text = strdup(text))) return failf(im, "out of memory");
  l->hash = h;
  *slot = (uint32_t)++im->nlabels;
  im->label_index.count++;
  sqlite3_bind_int64(im->label, 1, *slot);
  sqlite3_bind_text(im->label, 2, text, -1, SQLITE_STATIC);
  return step(im, im->label) != 0 ? -1 : (int64_t)*slot;
}

/* ---- the three kinds of records ----------------------------------------------------------- */

/* Stages one event: (time µs, kind, list, stream, address, size, requested, extra, stack). */
static int stage_event(importer *im, int64_t t, int kind, int64_t list, int64_t stream, int64_t address, int64_t size,
                       int64_t requested, int64_t extra, bool has_extra, int64_t stack) {
  sqlite3_stmt *st = im->stage;
  sqlite3_bind_int64(st, 1, t);
  sqlite3_bind_int64(st, 2, kind);
  bind_int_or_null(st, 3, list, list == 0);
  sqlite3_bind_int64(st, 4, stream);
  sqlite3_bind_int64(st, 5, address);
  sqlite3_bind_int64(st, 6, size);
  sqlite3_bind_int64(st, 7, requested);
  bind_int_or_null(st, 8, extra, !has_extra);
  sqlite3_bind_int64(st, 9, stack);
  return step(im, st);
}

/* a + b, held at the int64 limits (sums of a hostile file's sizes must not overflow). */
static int64_t saturated(int64_t a, int64_t b) {
  int64_t sum;
  return __builtin_add_overflow(a, b, &sum) ? (b > 0 ? INT64_MAX : INT64_MIN) : sum;
}

/* A block's size as PyTorch's allocator rounds a request (the trace holds the request). */
static int64_t rounded(int64_t size) { return size < 512 ? 512 : (size + 511) / 512 * 512; }

static int entry_time(importer *im, const pk_obj *e, const where *w, int64_t *t) {
  if (get_int(im, e, "time_us", w, false, im->last_time, 0, MAX_TIME_US, t) != 0) return -1;
  im->last_time = *t;
  return 0;
}

/* One device_traces entry, appended to `list`. */
static int take_entry(importer *im, pk_obj *list, const pk_obj *e) {
  where w = {"device_traces entry", im->entries, -1};
  if (!list->tag) {
    if (reserve(im, (void **)&im->lists, &im->clists, im->nlists, sizeof *im->lists) != 0) return -1;
    im->lists[im->nlists] = (trace_list){0, 0};
    list->tag = TAG(TAG_LIST, ++im->nlists);
  } else if (TAG_KIND(list->tag) != TAG_LIST || TAG_ID(list->tag) >= LIST_SEGMENTS) {
    return failf(im, "device_traces entry %" PRId64 ": in a list that is also a frames, segments or annotations list",
                 im->entries);
  }
  trace_list *tl = &im->lists[TAG_ID(list->tag) - 1];
  const char *action;
  size_t alen;
  if (get_str(im, e, "action", &w, true, &action, &alen) != 0) return -1;
  int kind = 0;
  for (int k = 1; k < MEMSNAP_EVENT_KINDS; k++)
    if (k != MS_MARK && k != MS_RANGE_PUSH && k != MS_RANGE_POP && strcmp(action, memsnap_event_kind_names[k]) == 0)
      kind = k;
  im->entries++;
  if (!kind) { /* an action memsnap has no kind for (a newer PyTorch's): counted, named once */
    if (!im->skipped++) snprintf(im->skipped_action, sizeof im->skipped_action, "%s", action);
    return 0;
  }
  int64_t t, addr = 0, size = 0, stream, stack;
  if (entry_time(im, e, &w, &t) != 0 ||
      get_int(im, e, kind == MS_OOM ? "device_free" : "addr", &w, kind != MS_SNAPSHOT, 0, INT64_MIN, INT64_MAX,
              &addr) != 0 ||
      get_int(im, e, "size", &w, kind != MS_SNAPSHOT, 0, 0, MAX_SIZE, &size) != 0 ||
      get_int(im, e, "stream", &w, false, 0, INT64_MIN, INT64_MAX, &stream) != 0 ||
      (stack = stack_id(im, pk_dict_get(e, "frames"), &w)) < 0)
    return -1;
  int64_t block = rounded(size), extra = 0;
  switch (kind) {
    case MS_ALLOC: tl->allocated = saturated(tl->allocated, block); break;
    case MS_FREE_COMPLETED: tl->allocated = saturated(tl->allocated, -block); break;
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_MAP: tl->reserved = saturated(tl->reserved, size); break;
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_UNMAP: tl->reserved = saturated(tl->reserved, -size); break;
    case MS_OOM: extra = tl->reserved > tl->allocated ? tl->reserved - tl->allocated : 0; break;
    default: break;
  }
  bool blockwise = kind == MS_ALLOC || kind == MS_FREE_REQUESTED || kind == MS_FREE_COMPLETED;
  return stage_event(im, t, kind, TAG_ID(list->tag), stream, addr, blockwise ? block : size, size, extra,
                     kind == MS_OOM, stack);
}

/* One segment with its blocks. */
static int take_segment(importer *im, const pk_obj *s) {
  where w = {"segment", im->segments, -1};
  int64_t device, address, total, stream;
  const char *type;
  size_t tlen;
  if (get_int(im, s, "device", &w, false, 0, 0, MAX_DEVICES - 1, &device) != 0 ||
      get_int(im, s, "address", &w, true, 0, INT64_MIN, INT64_MAX, &address) != 0 ||
      get_int(im, s, "total_size", &w, true, 0, 0, MAX_SIZE, &total) != 0 ||
      get_int(im, s, "stream", &w, false, 0, INT64_MIN, INT64_MAX, &stream) != 0 ||
      get_str(im, s, "segment_type", &w, false, &type, &tlen) != 0)
    return -1;
  const pk_value *blocks = pk_dict_get(s, "blocks");
  if (!pk_is(blocks, PK_LIST)) return field_error(im, &w, "blocks", blocks, "a list");
  int64_t id = ++im->segments;
  sqlite3_bind_int64(im->segment, 1, id);
  sqlite3_bind_int64(im->segment, 2, device);
  sqlite3_bind_int64(im->segment, 3, address);
  sqlite3_bind_int64(im->segment, 4, total);
  /* PyTorch's small pool allocates 2 MiB segments; its segment_type says so when present. */
  bool small = tlen ? strcmp(type, "small") == 0 : total == 2 << 20;
  sqlite3_bind_text(im->segment, 5, small ? "small" : "large", -1, SQLITE_STATIC);
  sqlite3_bind_int64(im->segment, 6, stream);
  /* Expandable segments and private pools (CUDA graphs, MemPool): is_expandable, and a
   * segment_pool_id other than (0, 0). */
  int64_t expandable;
  if (get_int(im, s, "is_expandable", &w, false, 0, 0, 1, &expandable) != 0) return -1;
  sqlite3_bind_int(im->segment, 7, (int)expandable);
  const pk_value *pool_id = pk_dict_get(s, "segment_pool_id");
  bool private_pool = pk_is(pool_id, PK_TUPLE) && pool_id->o->len == 2 && pool_id->o->items[0].kind == PK_INT &&
                      pool_id->o->items[1].kind == PK_INT && (pool_id->o->items[0].i || pool_id->o->items[1].i);
  bind_int_or_null(im->segment, 8, private_pool ? pool_id->o->items[0].i : 0, !private_pool);
  bind_int_or_null(im->segment, 9, private_pool ? pool_id->o->items[1].i : 0, !private_pool);
  if (step(im, im->segment) != 0) return -1;
  int64_t at = address;
  for (size_t i = 0; i < blocks->o->len; i++) {
    w.sub = (int64_t)i;
    const pk_value *bv = &blocks->o->items[i];
    if (!pk_is(bv, PK_DICT)) {
      char buf[96];
      return failf(im, "%s: a %s, expected a dict", where_text(&w, buf, sizeof buf), pk_type_name(bv));
    }
    const pk_obj *b = bv->o;
    int64_t size, requested, baddr, stack;
    const char *state;
    size_t slen;
    if (get_int(im, b, "size", &w, true, 0, 0, MAX_SIZE, &size) != 0 ||
        get_int(im, b, "address", &w, false, at, INT64_MIN, INT64_MAX, &baddr) != 0 ||
        get_str(im, b, "state", &w, true, &state, &slen) != 0 ||
        get_int(im, b, "requested_size", &w, false, size, 0, MAX_SIZE, &requested) != 0 ||
        (stack = stack_id(im, pk_dict_get(b, "frames"), &w)) < 0)
      return -1;
    const char *mstate = strcmp(state, "active_allocated") == 0      ? "allocated"
                         : strcmp(state, "active_pending_free") == 0 ? "pending_free"
                         : strcmp(state, "inactive") == 0            ? "free"
                                                                     : NULL;
    if (!mstate) {
      char buf[96];
      return failf(im, "%s: unknown state '%.40s'", where_text(&w, buf, sizeof buf), state);
    }
    bool freed = strcmp(mstate, "free") == 0;
    sqlite3_bind_int64(im->block, 1, id);
    sqlite3_bind_int64(im->block, 2, baddr);
    sqlite3_bind_int64(im->block, 3, size);
    sqlite3_bind_int64(im->block, 4, freed ? 0 : requested);
    sqlite3_bind_text(im->block, 5, mstate, -1, SQLITE_STATIC);
    bind_int_or_null(im->block, 6, stack, freed || stack == 0);
    if (step(im, im->block) != 0) return -1;
    im->blocks++;
    at = (int64_t)((uint64_t)baddr + (uint64_t)size); /* the next block's, when it does not say */
    if (pk_is(bv, PK_DICT)) pk_forget(im->r, bv->o);
  }
  pk_forget(im->r, blocks->o);
  return 0;
}

/* One external annotation ({stage: START|END, name, device, time_us}): a range. */
static int take_annotation(importer *im, const pk_obj *a) {
  where w = {"external_annotations entry", im->annotations++, -1};
  const char *stage, *name;
  size_t slen, nlen;
  int64_t device, t;
  if (get_str(im, a, "stage", &w, true, &stage, &slen) != 0 || get_str(im, a, "name", &w, false, &name, &nlen) != 0 ||
      get_int(im, a, "device", &w, false, 0, 0, MAX_DEVICES - 1, &device) != 0 || entry_time(im, a, &w, &t) != 0)
    return -1;
  bool start = strcmp(stage, "START") == 0;
  if (!start && strcmp(stage, "END") != 0) {
    char buf[96];
    return failf(im, "%s: 'stage' is '%.40s', expected START or END", where_text(&w, buf, sizeof buf), stage);
  }
  int64_t label = label_id(im, name);
  if (label < 0) return -1;
  if ((size_t)device >= im->nranges) {
    size_t n = (size_t)device + 1;
    device_ranges *g = realloc(im->ranges, sizeof *g * n);
    if (!g) return failf(im, "out of memory");
    memset(g + im->nranges, 0, sizeof *g * (n - im->nranges));
    im->ranges = g;
    im->nranges = n;
  }
  device_ranges *open = &im->ranges[device];
  if (start) {
    if (reserve(im, (void **)&open->v, &open->cap, open->n, sizeof *open->v) != 0) return -1;
    sqlite3_bind_int64(im->range_open, 1, label);
    sqlite3_bind_int64(im->range_open, 2, (int64_t)open->n);
    sqlite3_bind_int64(im->range_open, 3, t);
    if (step(im, im->range_open) != 0) return -1;
    open->v[open->n] = (open_range){sqlite3_last_insert_rowid(im->db), label, (int64_t)open->n};
    open->n++;
    return stage_event(im, t, MS_RANGE_PUSH, 0, 0, 0, 0, (int64_t)open->n - 1, label, true, 0);
  }
  /* END closes the innermost open range of its name; ranges opened inside it and never closed
     stay open. An END whose START came before recording matches nothing. The search looks at
     the 64 innermost open ranges (record_function nests a few deep): a file of unmatched ENDs
     must not cost a scan of everything open each. */
  for (size_t k = open->n; k-- > 0 && open->n - k <= 64;)
    if (open->v[k].label == label) {
      sqlite3_bind_int64(im->range_close, 1, t);
      sqlite3_bind_int64(im->range_close, 2, open->v[k].row);
      if (step(im, im->range_close) != 0) return -1;
      open->n = k;
      return stage_event(im, t, MS_RANGE_POP, 0, 0, 0, 0, (int64_t)k, 0, false, 0);
    }
  im->unmatched_ends++;
  return 0;
}

/* Marks `list` as the one list that gives segments (which: LIST_SEGMENTS) or annotations
 * (LIST_ANNOTATIONS). A second such list, or one that holds something else too, is an error;
 * finish() checks that it is the top level's 'segments' (or 'external_annotations'). */
static int claim_list(importer *im, pk_obj *list, int64_t which, const char *what) {
  int64_t tag = TAG(TAG_LIST, which);
  if (list->tag == tag) return 0;
  if (list->tag) return failf(im, "%s in a list that holds something else", what);
  if (im->claimed[which - LIST_SEGMENTS]) return failf(im, "%s in more than one list", what);
  im->claimed[which - LIST_SEGMENTS] = true;
  list->tag = tag;
  return 0;
}

/* The reader's hook: takes entries, segments and annotations as their lists receive them. */
static int on_append(pk_reader *r, pk_obj *list, const pk_value *item, void *ctx) {
  (void)r;
  importer *im = ctx;
  if (!pk_is(item, PK_DICT) || !pk_dict_small(item->o)) return 0; /* PyTorch's have a dozen keys */
  const pk_obj *d = item->o;
  if (pk_dict_get(d, "action")) return take_entry(im, list, d) ? -1 : 1;
  if (pk_dict_get(d, "blocks") && pk_dict_get(d, "total_size"))
    return claim_list(im, list, LIST_SEGMENTS, "a segment") || take_segment(im, d) ? -1 : 1;
  if (pk_dict_get(d, "stage") && pk_dict_get(d, "time_us"))
    return claim_list(im, list, LIST_ANNOTATIONS, "an annotation") || take_annotation(im, d) ? -1 : 1;
  return 0;
}

/* ---- allocator settings ------------------------------------------------------------------- */

/* A scalar as the options table keeps it: Python's spelling, so export can tell the types. */
static bool scalar_text(const pk_value *v, char *out, size_t len) {
  switch (v->kind) {
    case PK_NONE: snprintf(out, len, "None"); return true;
    case PK_BOOL: snprintf(out, len, "%s", v->i ? "True" : "False"); return true;
    case PK_INT: snprintf(out, len, "%" PRId64, v->i); return true;
    case PK_FLOAT:
      if (isnan(v->f) || isinf(v->f)) {
        snprintf(out, len, "%s", isnan(v->f) ? "nan" : v->f > 0 ? "inf" : "-inf");
        return true;
      }
      for (int prec = 1; prec <= 17; prec++) { /* the shortest that reads back the same, as Python's repr */
        snprintf(out, len, "%.*g", prec, v->f);
        if (strtod(out, NULL) == v->f) break;
      }
      if (!strpbrk(out, ".en")) strncat(out, ".0", len - strlen(out) - 1);
      return true;
    default:
      if (!pk_is(v, PK_STR)) return false;
      pk_utf8_sanitize(v->o->s, v->o->len);
      snprintf(out, len, "%s", v->o->s);
      return true;
  }
}

static int put_option(importer *im, const char *name, const char *value) {
  sqlite3_bind_text(im->option, 1, name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(im->option, 2, value, -1, SQLITE_TRANSIENT);
  return step(im, im->option);
}

/* allocator_settings: every setting as "pytorch.KEY" (a dict's items as "pytorch.KEY.SUBKEY"),
 * and the MEMSNAP_* options that mean the same. */
static int take_settings(importer *im, const pk_value *settings) {
  if (!settings || settings->kind == PK_NONE) return 0;
  if (!pk_is(settings, PK_DICT)) return failf(im, "'allocator_settings' is a %s, expected a dict", pk_type_name(settings));
  const pk_obj *d = settings->o;
  char name[300], value[4096];
  for (size_t i = 0; i + 1 < d->len; i += 2) {
    const pk_value *k = &d->items[i], *v = &d->items[i + 1];
    if (!pk_is(k, PK_STR)) continue;
    pk_utf8_sanitize(k->o->s, k->o->len);
    if (scalar_text(v, value, sizeof value)) {
      snprintf(name, sizeof name, "pytorch.%.200s", k->o->s);
      if (put_option(im, name, value) != 0) return -1;
    } else if (pk_is(v, PK_DICT)) {
      size_t o = 0;
      value[o++] = '[';
      for (size_t j = 0; j + 1 < v->o->len; j += 2) {
        char sub[256];
        const pk_value *sk = &v->o->items[j], *sv = &v->o->items[j + 1];
        if (!scalar_text(sk, sub, sizeof sub)) continue;
        snprintf(name, sizeof name, "pytorch.%.200s.%.80s", k->o->s, sub);
        char sval[256];
        if (!scalar_text(sv, sval, sizeof sval)) continue;
        if (put_option(im, name, sval) != 0) return -1;
        o += (size_t)snprintf(value + o, sizeof value - o, "%s%s:%s", o > 1 ? "," : "", sub, sval);
        if (o >= sizeof value - 2) o = sizeof value - 2;
      }
      snprintf(value + o, sizeof value - o, "]");
      if (strcmp(k->o->s, "roundup_power2_divisions") == 0 && put_option(im, "MEMSNAP_ROUNDUP_POWER2_DIVISIONS", value))
        return -1;
    }
  }
  /* The equivalents, in memsnap's units (options.c). */
  const pk_value *v;
  if ((v = pk_dict_get(d, "max_split_size")) && v->kind == PK_INT) {
    if (v->i < 0 || v->i >= ((int64_t)1 << 60)) snprintf(value, sizeof value, "unlimited");
    else snprintf(value, sizeof value, "%" PRId64, v->i >> 20);
    if (put_option(im, "MEMSNAP_MAX_SPLIT_SIZE_MB", value) != 0) return -1;
  }
  if ((v = pk_dict_get(d, "max_non_split_rounding_size")) && v->kind == PK_INT && v->i >= 0) {
    snprintf(value, sizeof value, "%" PRId64, v->i >> 20);
    if (put_option(im, "MEMSNAP_MAX_NON_SPLIT_ROUNDING_MB", value) != 0) return -1;
  }
  if ((v = pk_dict_get(d, "garbage_collection_threshold")) && (v->kind == PK_FLOAT || v->kind == PK_INT)) {
    snprintf(value, sizeof value, "%g", v->kind == PK_FLOAT ? v->f : (double)v->i);
    if (put_option(im, "MEMSNAP_GARBAGE_COLLECTION_THRESHOLD", value) != 0) return -1;
  }
  if ((v = pk_dict_get(d, "roundup_power2_divisions")) && v->kind == PK_INT) {
    snprintf(value, sizeof value, "%" PRId64, v->i);
    if (put_option(im, "MEMSNAP_ROUNDUP_POWER2_DIVISIONS", value) != 0) return -1;
  }
  return 0;
}

/* ---- the finished tree -------------------------------------------------------------------- */

/* Takes what the stream left in list `key` of the root (dicts of a kind), with `take`. */
static int take_rest(importer *im, const pk_obj *root, const char *key, int (*take)(importer *, const pk_obj *)) {
  const pk_value *l = pk_dict_get(root, key);
  if (!l || l->kind == PK_NONE) return 0;
  if (!pk_is(l, PK_LIST)) return failf(im, "'%s' is a %s, expected a list", key, pk_type_name(l));
  for (size_t i = 0; i < l->o->len; i++) {
    if (!pk_is(&l->o->items[i], PK_DICT)) return failf(im, "'%s' holds a %s, expected dicts", key, pk_type_name(&l->o->items[i]));
    if (take(im, l->o->items[i].o) != 0) return -1;
  }
  return 0;
}

static int query_int(importer *im, const char *sql, int64_t *out) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(im->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(im);
  int rc = sqlite3_step(st);
  *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : db_fail(im);
}

static int exec(importer *im, const char *sql) {
  return sqlite3_exec(im->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : db_fail(im);
}

/* device_traces[i] is device i: records which staged list each is (and takes any entries the
 * stream left in them). */
static int map_devices(importer *im, const pk_obj *root) {
  const pk_value *traces = pk_dict_get(root, "device_traces");
  size_t n = 0;
  if (traces && traces->kind != PK_NONE) {
    if (!pk_is(traces, PK_LIST)) return failf(im, "'device_traces' is a %s, expected a list", pk_type_name(traces));
    n = traces->o->len;
  }
  if (n > MAX_DEVICES) return failf(im, "'device_traces' has %zu lists: more devices than %d", n, MAX_DEVICES);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(im->db, "INSERT INTO temp.stage_lists VALUES(?,?)", -1, &st, NULL) != SQLITE_OK) return db_fail(im);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    pk_value *dv = &traces->o->items[i];
    if (!pk_is(dv, PK_LIST)) {
      rc = failf(im, "device_traces[%zu] is a %s, expected a list", i, pk_type_name(dv));
      break;
    }
    pk_obj *l = dv->o;
    for (size_t k = 0; k < l->len && rc == 0; k++) {
      if (!pk_is(&l->items[k], PK_DICT) || !pk_dict_get(l->items[k].o, "action"))
        rc = failf(im, "device_traces[%zu] holds a %s that is not a trace entry", i, pk_type_name(&l->items[k]));
      else rc = take_entry(im, l, l->items[k].o);
    }
    if (rc == 0 && l->tag) {
      if (TAG_KIND(l->tag) != TAG_LIST || TAG_ID(l->tag) >= LIST_SEGMENTS) {
        rc = failf(im, "device_traces[%zu] is also a frames, segments or annotations list", i);
        break;
      }
      sqlite3_bind_int64(st, 1, TAG_ID(l->tag));
      sqlite3_bind_int64(st, 2, (int64_t)i);
      rc = step(im, st);
    }
  }
  sqlite3_finalize(st);
  if (rc) return -1;
  return 0;
}


/* The statistics that the segments and blocks at the snapshot give (the .current values). */
static int write_stats(importer *im) {
  static const char *const pools[3][2] = {{"all", "1"}, {"small_pool", "s.pool = 'small'"}, {"large_pool", "s.pool = 'large'"}};
  static const char *const block_stats[][2] = {
      {"allocated_bytes", "sum(CASE WHEN b.state = 'allocated' THEN b.size ELSE 0 END)"},
      {"active_bytes", "sum(CASE WHEN b.state != 'free' THEN b.size ELSE 0 END)"},
      {"requested_bytes", "sum(CASE WHEN b.state = 'allocated' THEN b.requested_size ELSE 0 END)"},
      {"allocation", "sum(b.state = 'allocated')"},
      {"active", "sum(b.state != 'free')"}};
  char sql[700];
  for (int p = 0; p < 3; p++) {
    for (size_t k = 0; k < sizeof block_stats / sizeof block_stats[0]; k++) {
      snprintf(sql, sizeof sql, "INSERT INTO stats SELECT s.device, '%s.%s.current', coalesce(%s, 0) FROM segments s "
               "LEFT JOIN blocks b ON b.segment_id = s.id WHERE %s GROUP BY s.device", block_stats[k][0], pools[p][0],
               block_stats[k][1], pools[p][1]);
      if (exec(im, sql) != 0) return -1;
    }
    snprintf(sql, sizeof sql, "INSERT INTO stats SELECT s.device, 'reserved_bytes.%s.current', sum(s.size) FROM segments s "
             "WHERE %s GROUP BY s.device; INSERT INTO stats SELECT s.device, 'segment.%s.current', count(*) FROM segments s "
             "WHERE %s GROUP BY s.device", pools[p][0], pools[p][1], pools[p][0], pools[p][1]);
    if (exec(im, sql) != 0) return -1;
  }
  return exec(im, "INSERT OR REPLACE INTO stats SELECT device, 'num_ooms', count(*) FROM events WHERE kind = 6 GROUP BY device");
}

static int put_meta(importer *im, const char *key, const char *text, int64_t num) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(im->db, "INSERT OR REPLACE INTO meta VALUES(?,?)", -1, &st, NULL) != SQLITE_OK) return db_fail(im);
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  if (text) sqlite3_bind_text(st, 2, text, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_int64(st, 2, num);
  int rc = step(im, st);
  sqlite3_finalize(st);
  return rc;
}

/* PyTorch's trace holds the request, the blocks at the snapshot their size (up to 1 MiB more when
 * the allocator did not split the rest off): a block still allocated at the snapshot gets its
 * size in the event that allocated it (the last event at its address, an alloc), so the history
 * replayed ends with what the snapshot says is allocated. */
static const char *const block_sizes_sql =
    "CREATE TEMP TABLE last_at(address INTEGER PRIMARY KEY, id INTEGER);"
    "INSERT INTO temp.last_at SELECT address, max(id) FROM events WHERE kind IN (1, 2) AND address IS NOT NULL GROUP BY address;"
    "CREATE TEMP TABLE grown(id INTEGER PRIMARY KEY, size INTEGER);"
    "INSERT OR IGNORE INTO temp.grown SELECT e.id, b.size FROM blocks b JOIN temp.last_at l ON l.address = b.address "
    "JOIN events e ON e.id = l.id WHERE b.state = 'allocated' AND e.kind = 1 AND b.size > e.size;"
    "UPDATE events SET size = (SELECT g.size FROM temp.grown g WHERE g.id = events.id) WHERE id IN (SELECT id FROM temp.grown);"
    "DROP TABLE temp.last_at; DROP TABLE temp.grown;";

/* After the STOP: what the stream left, the devices, events in time order, ranges, statistics,
 * meta. */
static int finish(importer *im, const pk_value *root, const char *source) {
  if (pk_is(root, PK_LIST)) { /* an old form: the segments alone */
    for (size_t i = 0; i < root->o->len; i++)
      if (!pk_is(&root->o->items[i], PK_DICT) || take_segment(im, root->o->items[i].o) != 0)
        return im->failed ? -1 : failf(im, "not a PyTorch memory snapshot: the top level is a list of something other than segments");
  } else if (!pk_is(root, PK_DICT) || (!pk_dict_get(root->o, "segments") && !pk_dict_get(root->o, "device_traces"))) {
    return failf(im, "not a PyTorch memory snapshot: the top level is a %s without 'segments' or 'device_traces'",
                 pk_type_name(root));
  } else if (take_rest(im, root->o, "segments", take_segment) != 0 ||
             take_rest(im, root->o, "external_annotations", take_annotation) != 0 || map_devices(im, root->o) != 0 ||
             take_settings(im, pk_dict_get(root->o, "allocator_settings")) != 0) {
    return -1;
  }
  /* Segments and annotations taken as they came must have come from the top level's lists. */
  static const char *const keys[2] = {"segments", "external_annotations"};
  for (int w = 0; w < 2 && pk_is(root, PK_DICT); w++) {
    const pk_value *l = pk_dict_get(root->o, keys[w]);
    if (im->claimed[w] && (!pk_is(l, PK_LIST) || l->o->tag != TAG(TAG_LIST, LIST_SEGMENTS + w)))
      return failf(im, "%s found outside the top level's '%s' list", w ? "annotations" : "segments", keys[w]);
  }
  /* Every list that received entries must be one of device_traces' lists. */
  int64_t stray, t0, t1, nevents;
  if (query_int(im, "SELECT count(*) FROM temp.stage s WHERE s.list IS NOT NULL AND s.list NOT IN "
                "(SELECT id FROM temp.stage_lists)", &stray) != 0)
    return -1;
  if (stray) return failf(im, "%" PRId64 " trace entries are not in a list of 'device_traces'", stray);
  if (im->note) im->note(im->note_ctx, "writing events in time order");
  if (query_int(im, "SELECT coalesce(min(t), 0) FROM temp.stage", &t0) != 0 ||
      query_int(im, "SELECT coalesce(max(t), 0) FROM temp.stage", &t1) != 0)
    return -1;
  char sql[1200];
  snprintf(sql, sizeof sql,
           "INSERT INTO events(time_ns, kind, device, stream, address, size, requested_size, extra, thread, stack_id) "
           "SELECT (s.t - %" PRId64 ") * 1000, s.kind, l.device, CASE WHEN s.kind IN (9, 10) THEN NULL ELSE s.stream END, "
           "s.address, s.size, s.requested, s.extra, NULL, nullif(s.stack, 0) FROM temp.stage s "
           "LEFT JOIN temp.stage_lists l ON l.id = s.list AND s.kind != 7 ORDER BY s.t, s.seq;"
           "INSERT INTO ranges(label_id, thread, depth, start_ns, end_ns, stack_id) SELECT label, NULL, depth, "
           "(start_t - %" PRId64 ") * 1000, (end_t - %" PRId64 ") * 1000, NULL FROM temp.stage_ranges ORDER BY start_t, id;"
           "INSERT INTO devices SELECT device, '', NULL, NULL, NULL FROM (SELECT device FROM temp.stage_lists UNION "
           "SELECT device FROM segments);",
           t0, t0, t0);
  if (exec(im, sql) != 0 || exec(im, block_sizes_sql) != 0 || query_int(im, "SELECT count(*) FROM events", &nevents) != 0 ||
      write_stats(im) != 0)
    return -1;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(im->db, "INSERT INTO event_kinds VALUES(?,?)", -1, &st, NULL) != SQLITE_OK) return db_fail(im);
  for (int k = 1; k < MEMSNAP_EVENT_KINDS; k++) {
    sqlite3_bind_int(st, 1, k);
    sqlite3_bind_text(st, 2, memsnap_event_kind_names[k], -1, SQLITE_STATIC);
    if (step(im, st) != 0) break;
  }
  sqlite3_finalize(st);
  int64_t ndevices;
  char protocol[64];
  snprintf(protocol, sizeof protocol, "PyTorch snapshot, pickle protocol %d", pk_protocol(im->r));
  if (im->failed || query_int(im, "SELECT count(*) FROM devices", &ndevices) != 0 ||
      put_meta(im, "format_version", NULL, MEMSNAP_FORMAT_VERSION) || put_meta(im, "tool", "memsnap", 0) ||
      put_meta(im, "tool_version", MEMSNAP_VERSION, 0) || put_meta(im, "pid", NULL, 0) || put_meta(im, "host", "", 0) ||
      put_meta(im, "command_line", "", 0) || put_meta(im, "backend", "pytorch", 0) ||
      put_meta(im, "device_count", NULL, ndevices) || put_meta(im, "recording", NULL, 1) ||
      put_meta(im, "stacks", "all", 0) || put_meta(im, "max_entries", NULL, 0) ||
      put_meta(im, "recorded_events", NULL, nevents) || put_meta(im, "dropped_events", NULL, 0) ||
      put_meta(im, "start_unix_ns", NULL, t0 * 1000) || put_meta(im, "snapshot_ns", NULL, (t1 - t0) * 1000) ||
      put_meta(im, "import_source", protocol, 0) || put_meta(im, "import_file", source, 0))
    return -1;
  return exec(im, "COMMIT");
}

/* ---- the run ------------------------------------------------------------------------------ */

/* Before the schema: a private file until it is renamed, so no journal and no syncs (the
 * caller syncs the finished file); 64 KiB pages as the recorder writes; 16 MiB of cache each for
 * the file and the temporary tables, which spill to a temporary file beyond that. */
static const char *const setup_sql =
    "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA page_size = 65536; PRAGMA temp_store = FILE;"
    "PRAGMA cache_size = -16384; PRAGMA temp.cache_size = -16384; BEGIN;";

static const char *const stage_sql =
    "CREATE TEMP TABLE stage(seq INTEGER PRIMARY KEY, t INTEGER, kind INTEGER, list INTEGER, stream INTEGER,"
    " address INTEGER, size INTEGER, requested INTEGER, extra INTEGER, stack INTEGER);"
    "CREATE TEMP TABLE stage_lists(id INTEGER PRIMARY KEY, device INTEGER);"
    "CREATE TEMP TABLE stage_ranges(id INTEGER PRIMARY KEY, label INTEGER, depth INTEGER, start_t INTEGER,"
    " end_t INTEGER);";

static void importer_free(importer *im) {
  sqlite3_stmt *sts[] = {im->stage, im->segment, im->block, im->frame, im->stack, im->stack_frame, im->label,
                         im->range_open, im->range_close, im->option};
  for (size_t i = 0; i < sizeof sts / sizeof sts[0]; i++) sqlite3_finalize(sts[i]);
  for (size_t i = 0; i < im->nframes; i++) free(im->frames[i].name), free(im->frames[i].file);
  for (size_t i = 0; i < im->nstacks; i++) free(im->stacks[i].frames);
  for (size_t i = 0; i < im->nlabels; i++) free(im->labels[i].text);
  for (size_t i = 0; i < im->nranges; i++) free(im->ranges[i].v);
  free(im->frames), free(im->stacks), free(im->labels), free(im->lists), free(im->ranges), free(im->scratch);
  free(im->frame_index.slots), free(im->stack_index.slots), free(im->label_index.slots);
  pk_reader_free(im->r);
}

/* Imports the pickle that `read` returns into the open, empty database im->db; 0, or -1 with
 * the message in im->error. */
static int import_run(importer *im, pk_read_fn read, void *ctx, uint64_t size, const char *source) {
  if (sqlite3_exec(im->db, setup_sql, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(im->db, memsnap_schema_sql, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(im->db, stage_sql, NULL, NULL, NULL) != SQLITE_OK)
    return db_fail(im);
  struct { sqlite3_stmt **st; const char *sql; } stmts[] = {
      {&im->stage, "INSERT INTO temp.stage VALUES(NULL,?,?,?,?,?,?,?,?,?)"},
      {&im->segment, memsnap_insert_segment_sql},
      {&im->block, "INSERT INTO blocks VALUES(NULL,?,?,?,?,?,?)"},
      {&im->frame, "INSERT INTO frames VALUES(?,?,?,?,?,?,NULL,NULL,0)"},
      {&im->stack, "INSERT INTO stacks VALUES(?,?)"},
      {&im->stack_frame, "INSERT INTO stack_frames VALUES(?,?,?)"},
      {&im->label, "INSERT INTO labels VALUES(?,?)"},
      {&im->range_open, "INSERT INTO temp.stage_ranges VALUES(NULL,?,?,?,NULL)"},
      {&im->range_close, "UPDATE temp.stage_ranges SET end_t = ? WHERE id = ?"},
      {&im->option, "INSERT OR REPLACE INTO options VALUES(?,?)"},
  };
  for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++)
    if (sqlite3_prepare_v2(im->db, stmts[i].sql, -1, stmts[i].st, NULL) != SQLITE_OK) return db_fail(im);
  if (!(im->scratch = malloc(sizeof *im->scratch * MAX_DEPTH))) return failf(im, "out of memory");
  if (!(im->r = pk_reader_new(read, ctx, size, NULL, on_append, im))) return failf(im, "out of memory");
  pk_value root;
  im->streaming = true;
  int rc = pk_run(im->r, &root);
  im->streaming = false;
  if (rc != 0) { /* the reader's message names the offset */
    snprintf(im->error, sizeof im->error, "%s", pk_error(im->r));
    im->failed = true;
    return -1;
  }
  return finish(im, &root, source);
}

/* ---- entry points ------------------------------------------------------------------------- */

static void result_of(const importer *im, ms_import_result *res) {
  res->entries = im->entries;
  res->segments = im->segments;
  res->blocks = im->blocks;
  res->skipped = im->skipped;
  res->unmatched_ends = im->unmatched_ends;
  snprintf(res->skipped_action, sizeof res->skipped_action, "%s", im->skipped_action);
}

/* Opens db_path, imports, closes; the message names `name`. 0 or -1 (res->error). */
static int import_into(const char *db_path, pk_read_fn read, void *ctx, uint64_t size, const char *name,
                       void (*note)(void *, const char *), ms_import_result *res) {
  importer im = {0};
  im.note = note;
  im.note_ctx = ctx;
  int rc = -1;
  const char *base = strrchr(name, '/');
  if (sqlite3_open_v2(db_path, &im.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
    snprintf(res->error, sizeof res->error, "cannot write '%s': %s", db_path, sqlite3_errmsg(im.db));
  else if (import_run(&im, read, ctx, size, base ? base + 1 : name) != 0)
    snprintf(res->error, sizeof res->error, "'%s': %s", name, im.error);
  else
    rc = 0;
  result_of(&im, res);
  importer_free(&im);
  if (sqlite3_close(im.db) != SQLITE_OK && rc == 0) {
    snprintf(res->error, sizeof res->error, "cannot write '%s': %s", db_path, sqlite3_errmsg(im.db));
    rc = -1;
  }
  return rc;
}

typedef struct mem_input {
  const unsigned char *data;
  size_t len, pos;
} mem_input;

static long mem_read(void *ctx, void *buf, size_t n, char *err, size_t errlen) {
  (void)err, (void)errlen;
  mem_input *m = ctx;
  size_t k = m->len - m->pos < n ? m->len - m->pos : n;
  memcpy(buf, m->data + m->pos, k);
  m->pos += k;
  return (long)k;
}

int ms_import_buffer(const unsigned char *data, size_t len, const char *db_path, ms_import_result *res) {
  memset(res, 0, sizeof *res);
  mem_input m = {data, len, 0};
  return import_into(db_path, mem_read, &m, len, "memory", NULL, res);
}

/* ---- from a file, gzip or not ------------------------------------------------------------- */

typedef struct file_input {
  gzFile gz;
  const char *path;
  uint64_t file_size;
  bool progress, tty, shown;
  struct timespec start, last;
} file_input;

static double since(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

/* Progress on stderr: on a terminal, a line rewritten in place; otherwise, once the import has
 * taken more than 5 s, a line every 10 s. `phase` names a step after reading; NULL: reading. */
static void progress(file_input *in, const char *phase) {
  if (!in->progress) return;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double elapsed = since(&in->start, &now), quiet = since(&in->last, &now);
  if (!phase && (in->tty ? quiet < 0.2 : elapsed < 5 || (in->shown && quiet < 10))) return;
  if (phase && !in->tty && elapsed < 5) return;
  in->last = now;
  in->shown = true;
  char what[64];
  if (phase) snprintf(what, sizeof what, "%s", phase);
  else snprintf(what, sizeof what, "%d%% read", in->file_size ? (int)(100.0 * (double)gzoffset(in->gz) / (double)in->file_size) : 0);
  if (in->tty) fprintf(stderr, "\rimporting %s: %-40s", in->path, what);
  else fprintf(stderr, "memsnap import: %s: %s (%.0f s)\n", in->path, what, elapsed);
}

static void note_phase(void *ctx, const char *phase) { progress(ctx, phase); }

static long file_read(void *ctx, void *buf, size_t n, char *err, size_t errlen) {
  file_input *in = ctx;
  int k = gzread(in->gz, buf, (unsigned)(n > INT_MAX ? INT_MAX : n));
  int code = Z_OK;
  const char *msg = gzerror(in->gz, &code);
  if (k < 0 || (code != Z_OK && code != Z_STREAM_END)) {
    snprintf(err, errlen, "%s", code == Z_BUF_ERROR ? "the gzip data ends early (truncated file?)" : msg);
    return -1;
  }
  progress(in, NULL);
  return k;
}

int ms_import_file(const char *in_path, const char *db_path, bool show_progress, ms_import_result *res) {
  memset(res, 0, sizeof *res);
  struct stat st;
  if (stat(in_path, &st) != 0 || !S_ISREG(st.st_mode)) {
    bool missing = stat(in_path, &st) != 0;
    snprintf(res->error, sizeof res->error, "cannot open '%s': %s", in_path, missing ? strerror(errno) : "not a regular file");
    return -1;
  }
  int fd = open(in_path, O_RDONLY | O_CLOEXEC);
  unsigned char magic[2] = {0, 0};
  bool gz = fd >= 0 && pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  file_input in = {fd >= 0 ? gzdopen(fd, "rb") : NULL, in_path, (uint64_t)st.st_size, show_progress, isatty(2), false,
                   {0, 0}, {0, 0}};
  if (!in.gz) {
    snprintf(res->error, sizeof res->error, "cannot open '%s': %s", in_path, strerror(errno ? errno : ENOMEM));
    if (fd >= 0) close(fd);
    return -1;
  }
  gzbuffer(in.gz, 1 << 17);
  clock_gettime(CLOCK_MONOTONIC, &in.start);
  in.last = in.start;
  /* A plain pickle's size bounds its lengths; a gzip one's is not known until the end. */
  int rc = import_into(db_path, file_read, &in, gz ? 0 : (uint64_t)st.st_size, in_path, note_phase, res);
  if (in.shown && in.tty) fprintf(stderr, rc == 0 ? "\r%*s\r" : "\n", (int)strlen(in_path) + 52, "");
  gzclose(in.gz);
  return rc;
}
