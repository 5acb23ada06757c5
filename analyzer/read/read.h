/* read.h: a snapshot as the analyzer's stages read it (prefix ms_): opened and checked
 * (reader.c), its tables as rows (reader.c, tables.c), its events streamed in order on every core
 * (stream.c, tablescan.c, events.c), its stacks and frames, and how frames read (frames.c).
 * docs/snapshot-format.md is the format; this folder is its one reader, and the only code
 * above the PyTorch format's (pytorch/) that runs SQL. Everything in a snapshot is untrusted.
 *
 * A device filter (ms_snapshot.device) makes every row and event of other devices invisible, so
 * that any pass reads one device of a snapshot on several as it reads a snapshot of one.
 */
#ifndef MEMSNAP_READ_H
#define MEMSNAP_READ_H

#include <limits.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memsnap.h"
#include "snapshot_schema.h"

/* Event kinds, as recorder/snapshot_schema.h lists them (MS_ALLOC = 1, ...); segment_map/unmap
 * come from expandable segments and imported PyTorch snapshots. */
#define MS_KIND_(id, name) MS_##id,
enum { MS_NO_KIND, MEMSNAP_EVENT_KIND_LIST(MS_KIND_) MS_KINDS };
#undef MS_KIND_

/* Text from a snapshot (names, files, labels) longer than this is cut by the reader. */
#define MS_TEXT_MAX 4096

typedef struct ms_frame {
  bool python;
  bool inlined;   /* native: inlined by the compiler into the next frame of its stack */
  bool machinery; /* allocator, dispatcher, interpreter...: folded in reports (frames.c) */
  bool node;      /* native: an autograd node's apply (NllLossBackward0, AccumulateGrad): a
                     backward allocation reads as its node (frames.c) */
  char *name, *file, *module;
  char *short_name; /* the name as reports show it (frames.c: ms_short_name) */
  int64_t line;
  int64_t offset; /* native: from the function's start, or from the module's when unnamed */
} ms_frame;

typedef struct ms_stack {
  uint32_t *frames; /* frame ids, innermost first */
  uint32_t depth;
} ms_stack;

/* Frames to fold in reports beyond the built-in ones (frames.c): lists of comma-separated
 * globs NAME or NAME@FILE, as given (not owned: argv's). */
#define MS_FOLD_LISTS 16
typedef struct ms_fold {
  const char *lists[MS_FOLD_LISTS];
  size_t n;
} ms_fold;

typedef struct ms_snapshot {
  const char *path;       /* as given: to open files with */
  const ms_fold *fold;    /* the user's frames to fold (NULL: none); set before ms_load_stacks */
  char shown_path[512];   /* neutralised (and cut): to print */
  sqlite3 *db;
  char error[2048];
  int format_version;
  int64_t pid, dropped, recorded, max_entries, snapshot_ns, device_count;
  int64_t rank; /* the process's rank in its job (meta's rank: RANK, LOCAL_RANK...), -1 unknown */
  /* The history's extent: known after the first complete pass over the events (ms_events_each)
   * or ms_events_extent; 0 until then. */
  int64_t nevents, first_ns, last_ns;
  bool extent_known;
  /* -1 (ms_open's choice): every device. Else the one device whose rows and events every reader
   * function gives (events of no device too: marks, ranges): ms_only_device. */
  int only_device;
  char host[256], backend[32], tool_version[32], stacks_mode[16], command_line[4096];
  char import_file[256], import_source[128]; /* set when `memsnap import` made it */
  /* written from a live mapping (meta's recovered, docs/snapshot-format.md): 1 after the process
   * ended, 2 while it ran; 0 its own snapshot (an exit snapshot, a dump). How it ended: */
  int recovered;
  char ended[256];           /* "killed by SIGKILL", ... (neutralised); "" not said */
  int64_t end_signal;        /* 0 none */
  int64_t exit_status;       /* -1 none */
  int64_t end_ns, last_event_ns, last_alloc_ns; /* since the start; 0 not known */
  ms_frame *frames; /* by id; [0] unused */
  size_t nframes;
  ms_stack *stacks; /* by id; [0] is "no stack" */
  size_t nstacks;
} ms_snapshot;

typedef struct ms_event {
  int64_t id, time_ns, size, requested, extra, thread;
  uint64_t address, stream;
  int kind, device;
  uint32_t stack_id;
} ms_event;

/* Whether e made a segment of external memory (memsnap run's interposer: a segment_alloc whose
 * extra names the API that allocated it, a label id); its one block follows it. The analysis,
 * its retries and the replay ask the same. */
static inline bool ms_event_external_segment(const ms_event *e) {
  return e->kind == MS_SEGMENT_ALLOC && e->extra > 0 && e->address;
}

/* Whether an event is of the model's language (module, tensor, step, backward: PyTorch's layer's
 * record of modules, tensors' roles, optimizer steps and backward passes; gc: the Python layer's
 * garbage collector runs): it holds no memory and no replay, retry or device needs it. */
static inline bool ms_event_is_model(int kind) {
  return kind == MS_MODULE || kind == MS_TENSOR || kind == MS_STEP || kind == MS_BACKWARD || kind == MS_GC;
}

/* An annotation: what the program said about its memory (marks, ranges, the model's events),
 * which holds none and asks the allocator for nothing. */
static inline bool ms_event_is_annotation(int kind) {
  return kind == MS_MARK || kind == MS_RANGE_PUSH || kind == MS_RANGE_POP || ms_event_is_model(kind);
}

/* Makes untrusted text safe to print and to write as JSON, in place: control bytes and the bytes
 * of invalid UTF-8 become '?' (reader.c). */
void ms_neutralise(char *text);
/* reader.c: whether table `table` of the snapshot has column `column` (columns added to format 1
 * after its first files, such as segments.expandable, are missing from old files). */
bool ms_has_column(ms_snapshot *s, const char *table, const char *column);
/* reader.c: "pid N on HOST", each "unknown" where the snapshot does not say (PyTorch's has
 * neither: an imported snapshot's pid is 0 and its host empty). */
void ms_process_text(const ms_snapshot *s, char *out, size_t len);
/* reader.c: 0 on success, -1 with s->error set. */
int ms_open(ms_snapshot *s, const char *path);
void ms_close(ms_snapshot *s);
/* Makes every row and event of another device than `device` invisible to the reader's functions
 * (ms_events_each, ms_segments_each, the counts and totals...), or none with -1, so that every
 * pass reads one device of a snapshot as it reads a snapshot of one; the extent is counted again
 * by the next pass. Events of no device (marks, ranges) stay; segments, blocks, devices and
 * statistics of no device do not. */
void ms_only_device(ms_snapshot *s, int device);
int ms_load_stacks(ms_snapshot *s);
/* Events whose sizes are implausible (negative, or over 2^40 bytes: no device has a TiB) are
 * malformed and skipped by every pass (ms_events_each), sizes read as
 * integers (NULL and text: 0). */
static inline bool ms_event_plausible(int64_t size, int64_t requested) {
  return size >= 0 && requested >= 0 && size <= ((int64_t)1 << 40) && requested <= ((int64_t)1 << 40);
}
/* ---- the snapshot's tables as rows (reader.c): commands read them here, never in SQL ---- */

#define MS_MAX_DEVICES 64 /* devices a snapshot may name (the library's MSI_MAX_DEVICES) */

/* A segment at the snapshot. Rows with an implausible device (outside 0..MS_MAX_DEVICES-1) or
 * size (negative, or over 2^40 bytes) are skipped by the reader. */
typedef struct ms_segment_row {
  int64_t id;
  int device;
  uint64_t address, stream;
  int64_t size;
  char pool[16];     /* "small", "large", "async", "external", "private", ...; "" when missing */
  bool expandable;   /* a mapped range of an expandable segment (format 1 files without the column: no) */
  bool private_pool; /* in a private pool (CUDA graphs, MemPool): pool_id0 set */
} ms_segment_row;

typedef enum { MS_BLOCK_FREE, MS_BLOCK_ALLOCATED, MS_BLOCK_PENDING } ms_block_state;

/* A block at the snapshot, with its segment's device and stream. Rows with implausible sizes,
 * or whose segment is missing, are skipped. */
typedef struct ms_block_row {
  int64_t segment_id;
  int device;
  uint64_t address, stream;
  int64_t size, requested;
  ms_block_state state;
  uint32_t stack_id; /* 0: none (or one the stacks table lacks) */
  uint8_t role;      /* the role a framework told of it, kept for its life (MEMSNAP_TENSOR_*, 1 to 4;
                        0: none, or a file older than the column) */
  int64_t module_label; /* its module's label id (0: none) */
} ms_block_row;

/* A device the snapshot describes; total_bytes -1 when unknown (imported snapshots). */
typedef struct ms_device_row {
  int device;
  char name[256]; /* neutralised; "" when unknown */
  int64_t total_bytes;
} ms_device_row;

/* Each calls fn for every row; stops when fn returns non-zero and returns that, or -1 with
 * s->error set when the table cannot be read (a missing table reads as empty). */
int ms_segments_each(ms_snapshot *s, int (*fn)(const ms_segment_row *r, void *arg), void *arg);
int ms_blocks_each(ms_snapshot *s, int (*fn)(const ms_block_row *r, void *arg), void *arg);
int ms_devices_each(ms_snapshot *s, int (*fn)(const ms_device_row *r, void *arg), void *arg);
/* The options table's rows (name, value; neither NULL). */
int ms_options_each(ms_snapshot *s, int (*fn)(const char *name, const char *value, void *arg), void *arg);

/* ---- more of the snapshot as rows and totals (tables.c) -------------------- */

/* A mark or a range, with its label's text. */
typedef struct ms_label_row {
  int64_t event_id;  /* a mark's events.id; 0 for a range */
  int64_t start_ns;  /* a mark's time; a range's start */
  int64_t end_ns;    /* a range's end (its start while open); a mark's time */
  int64_t depth;     /* a range's nesting depth as stored (0 outermost); 0 for a mark */
  const char *label; /* as stored, not neutralised ("" for NULL); valid during the call */
} ms_label_row;
/* Marks in event order, ranges in order of start; rows whose label is missing are left out.
 * As ms_segments_each: fn's non-zero stops and is returned; -1 with s->error when unreadable. */
int ms_marks_each(ms_snapshot *s, int (*fn)(const ms_label_row *r, void *arg), void *arg);
int ms_ranges_each(ms_snapshot *s, int (*fn)(const ms_label_row *r, void *arg), void *arg);
/* Every label, by id (event_id holds the id), in id order. */
int ms_labels_each(ms_snapshot *s, int (*fn)(const ms_label_row *r, void *arg), void *arg);
/* The optimizer steps PyTorch's layer recorded (the steps table; none in files without it), in
 * event order: event_id, start_ns its time, depth what (1 begins, 2 ends, 3 skipped), label the
 * optimizer's class. */
int ms_steps_each(ms_snapshot *s, int (*fn)(const ms_label_row *r, void *arg), void *arg);

/* The run log (runlog.c; the run_log table): log 0 every iteration since recording started, log
 * 1 every second, each entry `count` units from unit `first`, in order (coarser entries where the
 * recorder merged them); the last may be the unit in progress. */
enum { MS_RUN_ITERATIONS = 0, MS_RUN_SECONDS = 1, MS_RUN_ROLES = 3 };
typedef struct ms_run_entry {
  int64_t first, count, skipped;
  int64_t start_ns, end_ns; /* since the recording's start (the events' clock) */
  int64_t peak_allocated, peak_reserved, end_allocated, end_reserved;
  int64_t role_bytes[MS_RUN_ROLES]; /* at the allocated peak: parameters, gradients, optimizer state */
  int64_t peak_ns;
  bool in_progress;
} ms_run_entry;
/* The entries of one log into *out (malloc'd; NULL and 0 when the file has none); -1 with
 * s->error when unreadable or out of memory. */
long ms_run_log_read(ms_snapshot *s, int log, ms_run_entry **out);

/* Memory outside memsnap's allocator at the snapshot (segments of pool "external": memsnap run
 * --mode intercept), by the API that allocated it and the library that called that API. */
typedef struct ms_external {
  char source[64], library[128]; /* neutralised; "" when unknown (and in files written before the columns) */
  int64_t count, bytes;
} ms_external;
/* The groups of external segments, largest first (then by source and library); as
 * ms_segments_each for fn's return and failure. */
int ms_external_each(ms_snapshot *s, int (*fn)(const ms_external *r, void *arg), void *arg);

/* A row of the holders table (read/holders.c): a block of a site the Python package walked at the
 * snapshot, and one chain of references from a root to a tensor in it (rank 0 the first found). */
typedef struct ms_holder_row {
  int64_t stack_id, size, tensor_bytes;
  uint64_t address;
  int rank;
  char root[16];    /* global, local, hook, module, optimizer, autograd, cycle, none */
  char holder[512]; /* the chain, root first: "global `features` of train.py -> list[3] -> tensor ..." */
} ms_holder_row;
/* Calls fn for each holder row, by site, block and rank; 0 rows for a file without the table. */
int ms_holders_each(ms_snapshot *s, int (*fn)(const ms_holder_row *r, void *arg), void *arg);
/* The walk that made them (meta keys): ms -1 when none ran. */
typedef struct ms_holders_meta {
  int64_t ms, blocks;
  bool cut; /* the time ran out: blocks past `blocks` were not walked */
} ms_holders_meta;
int ms_holders_walk(ms_snapshot *s, ms_holders_meta *out);
/* A reference cycle holding CUDA tensors that a collector run found (the gc_cycles table,
 * MEMSNAP_GC_CYCLES=1: recorder/python/memsnap/cycles.py): its objects, its CUDA tensors, their
 * bytes, the storage pointer of its largest (the block it links to), its objects' types and the
 * attributes joining them, in words. */
typedef struct ms_gc_cycle_row {
  int64_t run, generation, objects, tensors, tensor_bytes;
  uint64_t address;
  char types[256]; /* "2 Node, 1 Tensor" */
  char edges[512]; /* "Node.tensor -> Tensor; Node.other -> Node" */
} ms_gc_cycle_row;
/* Calls fn for each row, in the order recorded; 0 rows for a file without the table. Returns what
 * fn returned, 0 at the end, or -1 with the message in s->error. */
int ms_gc_cycles_each(ms_snapshot *s, int (*fn)(const ms_gc_cycle_row *r, void *arg), void *arg);


typedef enum {
  MS_COUNT_SEGMENTS,
  MS_COUNT_EXTERNAL_SEGMENTS,
  MS_COUNT_ALLOCATED_BLOCKS,
  MS_COUNT_MARKS,
  MS_COUNT_RANGES,
  MS_COUNT_STACKS,
} ms_count_what;
/* How many rows the snapshot has of `what` (the table's rows as stored, unchecked); -1 with
 * s->error set when they cannot be counted. */
int64_t ms_count_rows(ms_snapshot *s, ms_count_what what);

/* The allocator's state at the snapshot in totals. */
typedef struct ms_end_state {
  int64_t segments;                            /* rows of the segments table */
  int64_t split_free_blocks, split_free_bytes; /* free blocks in segments of more than one block */
  int64_t allocated, reserved; /* the statistics' current bytes (0 without them), external segments' added */
} ms_end_state;
/* Fills *out: 0, or -1 with s->error set and *out all 0. */
int ms_read_end_state(ms_snapshot *s, ms_end_state *out);
/* The sum over the devices of statistic `key` (reserved_bytes.all.current, ...) into *sum: 1;
 * 0 when the snapshot has no such statistic (*sum unchanged); -1 with s->error set when the
 * statistics cannot be read (*sum unchanged). */
int ms_stat_total(ms_snapshot *s, const char *key, int64_t *sum);

/* ---- events beside the stream (events.c) ------------------------------------ */

/* Calls fn with every allocation's stack id and size as ms_events_each reads them, in order;
 * fn's non-zero stops and is returned; -1 with s->error set when unreadable. */
int ms_allocations_each(ms_snapshot *s, int (*fn)(int64_t stack_id, int64_t size, void *arg), void *arg);
/* The number of allocations at times in [from_ns, to_ns); -1 with s->error set when unreadable. */
int64_t ms_count_allocations(ms_snapshot *s, int64_t from_ns, int64_t to_ns);
/* The last out-of-memory event on `device` into *e (kind, device, time_ns, and address: what
 * the device had free): 1; 0 when there was none, or -1 with s->error set when the events
 * cannot be read, *e then all 0 but its device. */
int ms_last_oom(ms_snapshot *s, int64_t device, ms_event *e);

/* stream.c: counts the events with an integer time and their first and last times into
 * s->nevents, first_ns, last_ns (0 when none or unreadable) by a pass over them, unless a pass
 * already did (ms_events_each counts them as it reads). */
void ms_events_extent(ms_snapshot *s);
/* stream.c: calls fn for every event in order (on the calling thread; a long history is read
 * by other threads meanwhile); stops when fn returns non-zero and returns that; -1 with
 * s->error set when reading fails. A pass that reads every row sets the extent (s->nevents,
 * first_ns, last_ns) if it was not known. */
int ms_events_each(ms_snapshot *s, int (*fn)(const ms_event *e, void *arg), void *arg);

/* ---- how frames read, and which matter (frames.c) --------------------------------------- */

/* A C++ name as reports show it: no return type, template arguments and parameter lists
 * collapsed to <> and (), qualifiers after the parameters and [clone ...] suffixes dropped;
 * other names unchanged. Writes at most len bytes (cut). */
void ms_short_name(const char *name, char *out, size_t len);
/* How a frame's name reads: a C++ name short, an autograd node's apply as the node's name
 * ("NllLossBackward0", "AccumulateGrad"), an unnamed native frame as its offset in its module
 * ("0x1b2d", shown with the module), a Python name as it is. */
void ms_frame_short_name(const ms_frame *f, char *out, size_t len);
/* Whether a native frame is an autograd node's apply (its short name is then the node's). */
bool ms_frame_is_node(const ms_frame *f);
/* Adds a list of comma-separated patterns to f (kept by reference); 0, or -1 when f holds
 * MS_FOLD_LISTS lists already. */
int ms_fold_add(ms_fold *f, const char *list);
/* Prints the built-in patterns of machinery frames (for `memsnap help`). */
void ms_fold_print_builtin(FILE *out);
/* Whether the frame matches a pattern NAME or NAME@FILE, globs over its short name without "()"
 * and its source file or module (--fold's syntax). Needs f->short_name. */
bool ms_frame_matches(const char *pattern, const ms_frame *f);
/* True for a frame that says nothing about the program (built-in patterns, then fold's). Needs
 * f->short_name. */
bool ms_frame_is_machinery(const ms_fold *fold, const ms_frame *f);
/* The frames of a stack that matter, innermost first, into ids[max]; returns how many. Machinery
 * is left out; a stack with Python frames keeps its first native frame that is not machinery
 * (the operator that allocated), then its Python frames; a stack that runs an autograd node
 * starts at the node (the operator inside it is the node's own work), then its Python frames
 * (the backward() call that ran it, which memsnap gives autograd's threads). */
size_t ms_stack_frames_that_matter(const ms_snapshot *s, uint32_t stack_id, uint32_t *ids, size_t max);
/* Whether a frame is the program's own code: a Python frame outside site-packages,
 * dist-packages, the standard library, PyTorch's and memsnap's packages (and not <frozen ...>);
 * a native frame of an executable rather than a shared library; never machinery. */
bool ms_frame_is_program(const ms_frame *f);
/* The index of the first frame of the program's own code among ids[0..n), n when none. */
size_t ms_first_program_frame(const ms_snapshot *s, const uint32_t *ids, size_t n);
/* The frame a one-line summary names (the report's brief stacks, `memsnap top`): the program's own
 * innermost frame among those that matter ("train.py:12", not the operator it called), else the
 * first that matters. False when the stack has none. */
bool ms_stack_user_frame(const ms_snapshot *s, uint32_t stack_id, uint32_t *frame);
/* What identifies a frame in any process (function, file, line; module name and offset when
 * unnamed), as text into out[len]; returns snprintf's count. */
int ms_frame_key(const ms_frame *f, char *out, size_t len);

#endif
