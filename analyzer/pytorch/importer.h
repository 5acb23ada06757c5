/* importer.h: the state of `memsnap import` (a PyTorch memory snapshot pickle into a memsnap
 * snapshot) and what its files share (prefix imp_). The entry points, ms_import_file and
 * ms_import_buffer, are in pytorch.h; docs/pytorch-snapshots.md has the mapping, field by field.
 *
 * Its files, from the top down (each calls only the ones below it):
 *   import.c         the entry points: the input (a file, gzip-compressed or not, or memory),
 *                    progress on stderr, the run
 *   import_map.c     PyTorch's objects to memsnap's rows: trace entries, segments and their
 *                    blocks, annotations, allocator settings; the reader's hook that takes them
 *                    as they stream, and what the stream left
 *   import_intern.c  frames, stacks and labels, each distinct one kept and written once
 *   import_stage.c   the SQLite side: the file set up, events staged with their PyTorch times,
 *                    then written in time order with the ranges, devices, statistics and meta
 *   import_base.c    what they all share: the first error kept, arrays grown, fields read and
 *                    checked, statements run
 *
 * The pickle is read by pickle_read.c's strict reader (it never runs code) while it is inflated,
 * and streamed: each device trace entry, segment and annotation is written to SQLite when the
 * list that holds it receives it, then freed. Memory holds one batch of entries (picklers append
 * 1000 at a time), the distinct frames and stacks (each once), and the strings that the pickle's
 * memo may refer to again; frames lists and frame dicts leave the memo as small handles once
 * interned. Anything the stream did not take (a pickle built in another order) is taken from the
 * finished tree.
 *
 * Every imp_ function that can fail records the first error in im->error (imp_fail) and returns
 * -1; later failures keep the first message.
 */
#ifndef MEMSNAP_IMPORTER_H
#define MEMSNAP_IMPORTER_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "pickle.h"

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
  bool claimed[2]; /* a list gave segments, annotations (see claim_list in import_map.c) */
  char skipped_action[64];
  bool failed, streaming; /* streaming: the reader runs (errors stop it) */
  char error[600];
  void (*note)(void *ctx, const char *phase); /* progress of the steps after reading; may be NULL */
  void *note_ctx;
} importer;

/* ---- import_base.c: below the other files ------------------------------------------------ */

/* Records the first error in im->error (and stops the reader while it runs); returns -1. */
int imp_fail(importer *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows *arr to hold n + 1 elements of `size` bytes; 0, or -1 when out of memory. */
int imp_reserve(importer *im, void **arr, size_t *cap, size_t n, size_t size);

/* What is being read, for messages: "device_traces entry 12", "segment 3 block 5", ... */
typedef struct where {
  const char *what;
  int64_t id_index, sub;
} where;

/* w as text in buf; returns buf. */
const char *imp_where_text(const where *w, char *buf, size_t len);
/* "<where>: '<key>' is missing" (v NULL) or "... is a <type>, expected <expected>"; returns -1. */
int imp_field_error(importer *im, const where *w, const char *key, const pk_value *v, const char *expected);
/* d[key] as an integer in [lo, hi]: *out, or def when absent (or None) and not required. 0 or -1. */
int imp_get_int(importer *im, const pk_obj *d, const char *key, const where *w, bool required, int64_t def, int64_t lo,
                int64_t hi, int64_t *out);
/* d[key] as a string (sanitized to UTF-8 in place): *out and *len, or "" when absent (or None)
 * and not required. 0 or -1. */
int imp_get_str(importer *im, const pk_obj *d, const char *key, const where *w, bool required, const char **out,
                size_t *len);
/* Runs a prepared statement with its bindings, then resets it; 0 or -1. */
int imp_step(importer *im, sqlite3_stmt *st);
/* "cannot write the snapshot: <SQLite's message>"; returns -1. */
int imp_db_fail(importer *im);

/* ---- import_map.c ------------------------------------------------------------------------ */

/* The reader's hook (pk_append_fn): takes entries, segments and annotations as their lists
 * receive them; 1 when taken, 0 when not one of those, -1 on error. */
int imp_on_append(pk_reader *r, pk_obj *list, const pk_value *item, void *ctx);
/* After the STOP: takes what the stream left in the finished tree `root`, maps device_traces[i]
 * to device i and takes the allocator settings. 0 or -1. */
int imp_take_tree(importer *im, const pk_value *root);

/* ---- import_intern.c --------------------------------------------------------------------- */

/* The stack id of a frames list (innermost first, as PyTorch's and memsnap's are) or of a stack
 * handle, its frames and the stack written the first time: 0 for none or an empty list; -1 on
 * error. */
int64_t imp_stack_id(importer *im, const pk_value *v, const where *w);
/* The id of a label, written the first time; -1 on error. */
int64_t imp_label_id(importer *im, const char *text);
/* Frees the interned frames, stacks and labels. */
void imp_intern_free(importer *im);

/* ---- import_stage.c ---------------------------------------------------------------------- */

/* Sets the open, empty database up: pragmas, the schema, the staging tables, the statements
 * (im->stage, ...) and an open transaction. 0 or -1. */
int imp_stage_begin(importer *im);
/* Finalizes the statements imp_stage_begin prepared. */
void imp_stage_end(importer *im);
/* Stages one event: (time µs, kind, list, stream, address, size, requested, extra, stack); list
 * 0 and !has_extra store NULL. 0 or -1. */
int imp_stage_event(importer *im, int64_t t, int kind, int64_t list, int64_t stream, int64_t address, int64_t size,
                    int64_t requested, int64_t extra, bool has_extra, int64_t stack);
/* Once the tree is taken: the events in time order, the ranges, devices, statistics, event
 * kinds and meta (the file's name as `source`), then COMMIT. 0 or -1. */
int imp_stage_finish(importer *im, const char *source);

static inline void imp_bind_int_or_null(sqlite3_stmt *st, int col, int64_t v, bool null) {
  if (null) sqlite3_bind_null(st, col);
  else sqlite3_bind_int64(st, col, v);
}

#endif
