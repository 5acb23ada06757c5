/* analyzer.h: what the memsnap CLI's files share (prefix ms_).
 *
 *   main.c      the command table and usage
 *   reader.c    opening and reading a snapshot (docs/snapshot-format.md): stacks, and the
 *               segments, blocks, devices and options as rows; snapshot_read_tables.c its
 *               other tables, snapshot_read_events.c events beside the stream (with stream.c,
 *               the files that read a snapshot's SQL; snapshot_read.h is what they share)
 *   stream.c    its events streamed in order to a pass, read by several threads
 *   analysis.c  the analysis: peaks, iterations, leak candidates, OOMs, top sites
 *   frames.c    how frames read (short C++ names), which matter (machinery folded), identity
 *   match.c     sites of several snapshots matched by identity (diff, side by side)
 *   strindex.c  an index of strings kept elsewhere (string table, labels, matched sites)
 *   misuse.c    invalid frees by site (double, foreign, interior pointers)
 *   report.c    the analysis as text for a terminal
 *   analysis_json.c  the analysis as JSON (docs/analysis-json.md): --json, the page's data, diff
 *   livemap.c   the live-block map and time buckets every pass over the events shares
 *   prehistory.c  the state when the history starts (memory from before recording)
 *   timeline.c  what the page draws beyond the analysis: bands, single allocations, checkpoints,
 *               segment spans
 *   html.c      the report page (web/ inlined, the analyses embedded)
 *   page_more.c the page's segment spans and whole stacks (for html.c)
 *   devsplit.c  a snapshot's devices apart, one analysis each (for the page's selector)
 *   cmd_info.c  `memsnap info`
 *   import.c    PyTorch snapshots in (import_map.c, import_intern.c and import_stage.c: importer.h; pickle_read.c
 *               and pickle_write.c read and write pickles); cmd_import.c runs it
 *   cmd_export.c  snapshots out as PyTorch snapshots
 *   replay_engine.c  a snapshot's trace replayed through libmemsnap's allocator on the simulated
 *               device under other settings; cmd_replay.c is `memsnap replay` (and --sweep)
 *   outfile.c   output files written atomically, never over an input
 */
#ifndef MEMSNAP_ANALYZER_H
#define MEMSNAP_ANALYZER_H

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
  /* The history's extent: known after the first complete pass over the events (ms_events_each)
   * or ms_events_extent; 0 until then. */
  int64_t nevents, first_ns, last_ns;
  bool extent_known;
  char host[256], backend[32], tool_version[32], stacks_mode[16], command_line[4096];
  char import_file[256], import_source[128]; /* set when `memsnap import` made it */
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

/* ---- more of the snapshot as rows and totals (snapshot_read_tables.c) -------------------- */

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

/* Memory outside memsnap's allocator at the snapshot (segments of pool "external": memsnap run
 * --mode intercept), by the API that allocated it and the library that called that API. */
typedef struct ms_external {
  char source[64], library[128]; /* neutralised; "" when unknown (and in files written before the columns) */
  int64_t count, bytes;
} ms_external;
/* The groups of external segments, largest first (then by source and library); as
 * ms_segments_each for fn's return and failure. */
int ms_external_each(ms_snapshot *s, int (*fn)(const ms_external *r, void *arg), void *arg);

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

/* ---- events beside the stream (snapshot_read_events.c) ------------------------------------ */

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

/* ---- an index of strings kept elsewhere (strindex.c) ------------------------------------- */

typedef struct ms_str_index {
  uint32_t *slots; /* entry + 1; 0 empty */
  size_t mask;
} ms_str_index;

/* Finds `key` among the caller's entries 0 to n-1 (key_of(ctx, i) is entry i's key): its number;
 * or -1 when absent, with *slot where the caller records entry n if it adds it
 * (ix->slots[*slot] = n + 1); or -2 when out of memory. */
int64_t ms_str_find(ms_str_index *ix, const char *key, size_t n, const char *(*key_of)(const void *ctx, size_t i),
                    const void *ctx, size_t *slot);
void ms_str_index_free(ms_str_index *ix);

/* Each distinct string once, numbered in the order added (copies, owned). */
typedef struct ms_strtab {
  char **keys;
  size_t n, cap;
  ms_str_index index;
} ms_strtab;
/* The number of s, added (*added true) if new; -1 when out of memory. */
int64_t ms_strtab_add(ms_strtab *t, const char *s, bool *added);
void ms_strtab_free(ms_strtab *t);

/* ---- how frames read, and which matter (frames.c) --------------------------------------- */

/* A C++ name as reports show it: no return type, template arguments and parameter lists
 * collapsed to <> and (), qualifiers after the parameters and [clone ...] suffixes dropped;
 * other names unchanged. Writes at most len bytes (cut). */
void ms_short_name(const char *name, char *out, size_t len);
/* How a frame's name reads: a C++ name short, an unnamed native frame as its offset in its
 * module ("0x1b2d", shown with the module), a Python name as it is. */
void ms_frame_short_name(const ms_frame *f, char *out, size_t len);
/* Adds a list of comma-separated patterns to f (kept by reference); 0, or -1 when f holds
 * MS_FOLD_LISTS lists already. */
int ms_fold_add(ms_fold *f, const char *list);
/* Prints the built-in patterns of machinery frames (for `memsnap help`). */
void ms_fold_print_builtin(FILE *out);
/* True for a frame that says nothing about the program (built-in patterns, then fold's). Needs
 * f->short_name. */
bool ms_frame_is_machinery(const ms_fold *fold, const ms_frame *f);
/* The frames of a stack that matter, innermost first, into ids[max]; returns how many. Machinery
 * is left out; a stack with Python frames keeps its first native frame that is not machinery
 * (the operator that allocated), then its Python frames. */
size_t ms_stack_frames_that_matter(const ms_snapshot *s, uint32_t stack_id, uint32_t *ids, size_t max);
/* What identifies a frame in any process (function, file, line; module name and offset when
 * unnamed), as text into out[len]; returns snprintf's count. */
int ms_frame_key(const ms_frame *f, char *out, size_t len);

/* ---- replaying the history into live blocks (livemap.c) -------------------------------------------------- */

/* A live block: address (0: empty slot), its allocation site, a word the pass attaches. */
/* livemap.c: grows the array at *array (*cap elements of `size` bytes, doubling) to hold `need`
 * elements; false when out of memory (*array and *cap unchanged). Every pass's growing lists. */
bool ms_grow(void *array, size_t *cap, size_t need, size_t size);

typedef struct ms_live_slot {
  uint64_t key;
  uint32_t site, aux;
  int64_t size;
} ms_live_slot;

typedef struct ms_live_map {
  ms_live_slot *slots;
  size_t mask, count;
} ms_live_map;

/* Adds or replaces slot.key's entry; 0, or -1 when out of memory. */
int ms_live_put(ms_live_map *m, ms_live_slot slot);
/* Removes key into *out; false if absent (allocated before the kept history). */
bool ms_live_take(ms_live_map *m, uint64_t key, ms_live_slot *out);
void ms_live_free(ms_live_map *m);
/* Replays an event into the live map: an allocation (of site `alloc_site`, which the caller
 * resolved, with `aux` attached) adds its block, a free_requested removes it. Returns the bytes
 * live memory changed by (negative for a free; 0 for other events and for frees of blocks from
 * before the kept history) and sets *taken to the block added or removed; sets *failed when out
 * of memory. Every pass replays through this. */
int64_t ms_replay(ms_live_map *m, const ms_event *e, int64_t alloc_site, uint32_t aux, ms_live_slot *taken,
                  bool *failed);

/* A total over time in at most MS_BUCKETS time buckets, each with the lowest and highest value
 * it took: drawn at any zoom, a peak is never lost. */
#define MS_BUCKETS 4000
/* The bucket width for the snapshot's time span: at least 1, computed without overflow. */
int64_t ms_bucket_width(const ms_snapshot *s);
/* Start of the bucket holding t (clamped into the snapshot's span). */
int64_t ms_bucket_start(const ms_snapshot *s, int64_t width, int64_t t);

/* Allocation size classes: 4 per power of two. */
#define MS_SIZE_BINS 256
static inline int ms_size_bin(int64_t size) {
  if (size < 4) return size < 0 ? 0 : (int)size;
  int msb = 63 - __builtin_clzll((unsigned long long)size);
  return msb * 4 + (int)((size >> (msb - 2)) & 3);
}
/* The smallest size in class `bin`. */
static inline int64_t ms_size_bin_floor(int bin) {
  if (bin < 4) return bin;
  if (bin < 8) return 4; /* classes 4 to 7 are unused: sizes 4 to 7 are in classes 8 to 11 */
  int msb = bin / 4;
  return ((int64_t)4 + (bin & 3)) << (msb - 2);
}

/* ---- the state when the history starts (prehistory.c) ------------------------------------ */

/* A block allocated before the kept history: freed by it, or still allocated at the snapshot. */
typedef struct ms_prior_block {
  uint64_t address, stream;
  int64_t size, requested;
  int device;        /* -1 when its event named none */
  uint32_t stack_id; /* still allocated: its allocation's (blocks table); freed by the history: the
                        free's, its allocation's being unknown; 0: none */
  uint32_t site;     /* the analysis's site for it (set by ms_analyze) */
  bool alive_at_end;
} ms_prior_block;

typedef struct ms_prior_segment {
  uint64_t address, stream;
  int64_t size;
  int device;
  bool classic; /* a device allocation of its own (segment_free, or a row neither an expandable
                   segment's mapped range nor the async pool's) */
  bool small;   /* of the small pool (freed by the history: of its segment size, 2 MiB) */
} ms_prior_segment;

typedef struct ms_prehistory {
  ms_prior_block *blocks; /* those the history freed, in its order, then those of the snapshot */
  size_t nblocks;
  ms_prior_segment *segments; /* for the allocator's layout; the analysis draws them only when layout_known */
  size_t nsegments;
  int64_t allocated, reserved; /* when the history starts */
  int64_t end_bytes, end_count; /* of the blocks, what is still allocated at the snapshot */
  int64_t device_reserved_change[MS_MAX_DEVICES]; /* what the history's segment events added to
                                                     each device's reserved memory */
  bool layout_known; /* false with expandable segments' map/unmap: totals only */
} ms_prehistory;

/* Which pass starts from the state: the reconstruction reads the history as that pass does. */
typedef enum {
  MS_PREHISTORY_ANALYSIS, /* every event counts (analysis.c, timeline.c) */
  MS_PREHISTORY_REPLAY,   /* only what the replay can replay (replay_engine.c): events with an
                             address, on devices 0 to MS_MAX_DEVICES - 1; and a second free of an
                             address the history allocated is inconsistent, not a block from before */
} ms_prehistory_view;

/* Reconstructs the state when the kept history starts (one pass over its allocation and segment
 * events, and the snapshot's blocks and segments) into h. Returns 0; -1 when the snapshot cannot
 * be read, or -2 out of memory, each with s->error set and h empty. */
int ms_prehistory_build(ms_snapshot *s, ms_prehistory_view view, ms_prehistory *h);
/* Puts the blocks into a replay's live map (their sites as set); sets *failed out of memory. */
void ms_prehistory_seed(const ms_prehistory *h, ms_live_map *live, bool *failed);
void ms_prehistory_free(ms_prehistory *h);

/* ---- the analysis (analysis.c) ---------------------------------------------------------- */

typedef enum { MS_LEAK_GROWING, MS_LEAK_GROWING_RELEASED, MS_LEAK_RETAINED, MS_LEAK_ALIVE } ms_leak_kind;

typedef struct ms_site {
  uint32_t stack_id;
  int64_t allocs, alloc_bytes;     /* over the recorded history */
  int64_t live_bytes, live_count;  /* replayed, at the end of the history */
  int64_t end_bytes, end_count;    /* allocated at the snapshot (blocks table) */
  int64_t first_ns, last_ns;       /* first and last allocation */
  int64_t thread;                  /* of the first allocation */
  uint64_t stream;                 /* of the first allocation */
  bool several_threads, several_streams; /* later allocations came from others too */
  /* per-iteration evidence */
  int64_t prev_iter_live, first_iter_live, last_iter_live;
  int increases, decreases, observed; /* iteration boundaries seen after the first */
  /* the highest live bytes at a boundary, that boundary (the iteration it ends), the counts
     above when it was reached, and when live bytes then fell below halfway between the first
     boundary's and that peak (-1: they did not): the evidence of growth released later */
  int64_t peak_iter_live, released_ns;
  int peak_boundary, increases_at_peak, decreases_at_peak;
  int first_iteration;                /* iteration of the first allocation (-1: before) */
  int last_iteration;                 /* iteration of the last allocation */
  int newest_live_iteration;          /* latest iteration that allocated a block still live at the end
                                         of the history (-1: before the first, or none) */
  bool before_history;                /* the site of blocks alive at the snapshot that no kept event
                                         allocated: from before recording (or the kept history) */
  ms_leak_kind kind;
  double score, bytes_per_iteration;
} ms_site;

typedef struct ms_iteration {
  int index;
  int64_t start_ns, end_ns;
  int64_t start_event_id; /* its first event */
  int64_t peak_allocated, peak_reserved;
  int64_t peak_ns;
  int64_t end_unallocated; /* reserved but unallocated at the iteration's end: fragmentation */
  int64_t end_allocated;   /* allocated at the iteration's end: what a leak adds to, iteration by iteration */
} ms_iteration;

typedef struct ms_site_bytes {
  uint32_t site; /* index into sites */
  int64_t bytes, count;
} ms_site_bytes;

typedef struct ms_oom {
  int64_t time_ns, requested, device_free, cached_unallocated, live_bytes;
  int device;
  uint32_t stack_id;
  ms_site_bytes top[5]; /* what was live, largest sites first */
  int ntop;
} ms_oom;

typedef struct ms_curve {
  int64_t t[MS_BUCKETS], lo[MS_BUCKETS], hi[MS_BUCKETS];
  int n; /* buckets used, in time order */
} ms_curve;

/* Invalid frees from one site (stack) of one kind (analyzer/misuse.c). */
typedef struct ms_invalid_free {
  uint32_t stack_id;
  int kind;              /* 1 double free, 2 foreign pointer, 3 interior pointer (0 unknown) */
  int device;
  int64_t count, first_ns, last_ns;
  uint64_t address;      /* the first one's */
  int64_t offset;        /* into the block that holds it */
  int64_t block_site;    /* interior: site that allocated the block (-1 unknown) */
  int64_t block_size;
} ms_invalid_free;
#define MS_EXTERNAL_MAX 16 /* groups of external memory the analysis keeps */

typedef struct ms_analysis {
  ms_snapshot *snap;
  ms_curve *allocated_curve, *reserved_curve;
  struct ms_timeline *timeline; /* NULL until ms_analyze_timeline */
  int64_t size_hist[MS_SIZE_BINS]; /* allocations by size class (ms_size_bin) */
  int64_t *site_of_stack;   /* stack id -> site index + 1 */
  ms_site *sites; /* sites[i].stack_id; index 0 is the site of allocations without a stack */
  size_t nsites;
  int64_t peak_allocated, peak_reserved, peak_allocated_ns, peak_reserved_ns, peak_event_id;
  int64_t end_allocated, end_reserved;
  ms_site_bytes *at_peak; /* live by site at the allocated peak, largest first */
  size_t nat_peak;
  ms_iteration *iters;
  size_t niters;
  char iteration_label[256];
  char iteration_source[32]; /* "marks", "ranges", "inferred" or "none" */
  bool iterations_from_range_ends; /* ranges covering part of each step, ending it: see ranges_to_steps */
  ms_oom *ooms;
  size_t nooms;
  uint32_t *leaks; /* site indices, best candidate first */
  size_t nleaks;
  uint32_t *top; /* site indices by bytes allocated, largest first */
  size_t ntop;
  int64_t segments, free_blocks_in_split_segments, split_free_bytes; /* at the snapshot */
  ms_prehistory before; /* the state when the history starts: counted from its first instant */
  ms_external external[MS_EXTERNAL_MAX]; /* the largest groups, largest first */
  size_t nexternal;
  int64_t external_bytes;                 /* all of it */
  bool truncated;
  ms_invalid_free *invalid_frees; /* by count, largest first */
  size_t ninvalid_frees;
  int64_t invalid_free_total, invalid_free_by_kind[4];
} ms_analysis;

/* The kind's name in JSON and the page: growing, growing_released, retained, alive. */
const char *ms_leak_kind_name(ms_leak_kind kind);
/* Why a site shows no stack ("allocated before recording started", "no stack recorded", ...);
 * NULL when it has one. */
const char *ms_site_note(const ms_analysis *a, const ms_site *site);
/* Runs the analysis; `label` forces the iteration label (NULL: choose). 0 or -1 (s->error). */
int ms_analyze(ms_snapshot *s, ms_analysis *a, const char *label);
void ms_analysis_free(ms_analysis *a);
/* Opens the snapshot at `path` and analyzes it, folding `fold`'s frames too (NULL: none): 0, or
 * -1 with the message in s->error and nothing left to free or close. */
int ms_open_analyzed(ms_snapshot *s, ms_analysis *a, const char *path, const ms_fold *fold, const char *label);
/* Normalises a label for grouping: digits and the separators before them dropped. */
void ms_label_key(const char *label, char *out, size_t len);

/* ---- invalid frees (misuse.c) ------------------------------------------------------------ */

const char *ms_invalid_free_kind_name(int kind);
/* Adds an invalid_free event (first pass; `live` is its live-block map). 0, or -1 out of memory. */
int ms_misuse_add(ms_analysis *a, const ms_event *e, ms_live_map *live);
/* Orders the sites, most frequent first (after the pass). */
void ms_misuse_finish(ms_analysis *a);

/* ---- sites matched across snapshots (match.c) -------------------------------------------- */

/* One site in every analysis that has it: site[k] is its index in analysis k + 1 (0: absent);
 * bytes[k] and count[k] what it holds at snapshot k (sums when several stacks share the key). */
typedef struct ms_match_row {
  char *key; /* what identifies it in any process */
  uint32_t *site;
  int64_t *bytes, *count;
} ms_match_row;

typedef struct ms_matches {
  size_t nanalyses;
  ms_match_row *rows; /* in the order first seen */
  size_t n, cap;
  ms_str_index index; /* rows by key */
  ms_strtab frame_keys; /* every frame key seen, numbered: site keys are lists of these numbers */
} ms_matches;

/* Matches the sites of a[0..n) for which want() is true, by what identifies them (function,
 * file and line of every frame; module name and offset for unnamed frames; never addresses or
 * ids), into m. 0, or -1 when out of memory (m left empty). */
int ms_match_sites(const ms_analysis *a, size_t n, bool (*want)(const ms_analysis *a, uint32_t site), ms_matches *m);
/* The leak candidates of a[0..n) matched by site, best first (the best score a site has in any
 * snapshot, then its most bytes): m is filled as by ms_match_sites and *rows (malloc'd, the
 * caller frees it and then m) points into it. Returns how many rows, or -1 when out of memory
 * (m left empty, *rows NULL). */
ptrdiff_t ms_match_leaks(const ms_analysis *a, size_t n, ms_matches *m, const ms_match_row ***rows);
void ms_matches_free(ms_matches *m);

/* ---- what the report page draws (timeline.c) --------------------------------------------- */

/* Allocated memory split by allocation site, for the timeline's stacked bands: per time bucket
 * (those of allocated_curve), each band's bytes at the moment allocated memory was highest in
 * that bucket (tp), so the bands add up to the curve's peaks. Band k < nsites is
 * sites[site[k]]; band nsites is every other site. */
#define MS_BANDS 12
typedef struct ms_bands {
  uint32_t site[MS_BANDS];
  int nsites;
  int n; /* buckets */
  int64_t t[MS_BUCKETS], tp[MS_BUCKETS];
  int64_t bytes[MS_BUCKETS][MS_BANDS + 1];
} ms_bands;

/* One allocation the page knows by itself (the largest ones: hover, pin, search by address). */
#define MS_DETAIL_MAX 20000
typedef struct ms_detail {
  int64_t alloc_ns, free_ns; /* free_ns -1: alive at the end of the history */
  int64_t size, requested;
  uint64_t address, stream;
  uint32_t site;
} ms_detail;

/* The allocator's state at a checkpoint: each segment as runs of blocks in one state. */
enum { MS_RUN_FREE, MS_RUN_ALLOCATED, MS_RUN_PENDING };
typedef struct ms_run {
  int64_t size;
  uint32_t count; /* blocks merged into the run (free runs: 1) */
  int state;
} ms_run;

typedef struct ms_segment_state {
  uint64_t address, stream;
  int64_t size;
  int device;
  size_t first_run, nruns;
} ms_segment_state;

typedef enum { MS_CP_EVEN, MS_CP_PEAK, MS_CP_ITERATION_PEAK, MS_CP_OOM, MS_CP_END } ms_checkpoint_kind;

#define MS_CHECKPOINTS_EVEN 48
#define MS_CHECKPOINT_SITES 200 /* sites listed per checkpoint; the rest are summed */
#define MS_CHECKPOINT_RUNS 200000     /* runs past which only the peak and the end are kept */
#define MS_CHECKPOINT_RUNS_EACH 50000 /* runs in one checkpoint; its other segments are left out */
typedef struct ms_checkpoint {
  int64_t time_ns;
  ms_checkpoint_kind kind;
  int index; /* the iteration or OOM it marks */
  int64_t allocated, reserved, pending;
  int64_t rounding; /* allocated beyond the requests in live blocks (internal fragmentation) */
  size_t first_segment, nsegments;
  size_t first_site, nsites; /* into site_bytes: live bytes by site, largest first */
  int64_t other_bytes;       /* live in the sites past MS_CHECKPOINT_SITES */
  size_t omitted_segments;   /* segments left out past MS_CHECKPOINT_RUNS_EACH runs */
} ms_checkpoint;

/* Live bytes of the leading leak candidates at the end of every iteration (the page's growth
 * chart): at most MS_LEAK_SERIES candidates, and none past MS_LEAK_SERIES_ITERATIONS iterations. */
#define MS_LEAK_SERIES 64
#define MS_LEAK_SERIES_ITERATIONS 4096

/* The allocator's events (alloc, free_requested, free_completed, segment events) one by one, for
 * the page to step through its state: kept only when there are at most MS_STEPS_MAX of them. */
#define MS_STEPS_MAX 120000
typedef struct ms_step {
  int64_t time_ns, size, requested; /* requested: an allocation's request (its size when unknown) */
  uint64_t address;
  int64_t site; /* an allocation's site; -1 for other events */
  int kind;
} ms_step;

/* One segment's life, for the page's segment timeline ("Active Cached Segment Timeline") and the
 * stack that allocated a segment in its allocator state: from its segment_alloc (or
 * segment_map: each mapped range of an expandable segment is a span) to its segment_free (or the
 * unmap of its pages: a range unmapped in part ends, and what is left of it starts anew). A
 * segment from before the history starts at its first instant (before_history); reserved memory
 * from before it whose ranges are unknown (expandable segments) is one span at address 0. */
typedef struct ms_span {
  uint64_t address, stream;
  int64_t size, start_ns, end_ns; /* end_ns -1: still reserved at the end of the history */
  uint32_t stack_id;              /* of the event that made it (0: none) */
  int device;
  bool before_history;
} ms_span;
#define MS_SPANS_MAX 20000 /* spans kept (the first ones); later ones are counted as omitted */

typedef struct ms_timeline {
  ms_bands bands;
  ms_span *spans; /* in start order */
  size_t nspans;
  int64_t omitted_spans;
  uint64_t devices; /* bit d: device d (below MS_MAX_DEVICES) has memory events or segments */
  ms_step *steps; /* in order */
  size_t nsteps;
  bool steps_kept; /* false: too many (steps empty) */
  int64_t *leak_live; /* [candidate * leak_iterations + iteration], candidates in a->leaks' order */
  size_t leak_series, leak_iterations;
  ms_detail *detail; /* in allocation order */
  size_t ndetail;
  int64_t detail_min_size, allocations; /* allocations smaller than detail_min_size are only in bands */
  ms_checkpoint *checkpoints;           /* in time order */
  size_t ncheckpoints, skipped_checkpoints;
  ms_segment_state *segments;
  size_t nsegments;
  ms_run *runs;
  size_t nruns;
  ms_site_bytes *site_bytes;
  size_t nsite_bytes;
} ms_timeline;

/* Fills a->timeline with one more pass over the events; 0, or -1 (s->error set). */
int ms_analyze_timeline(ms_analysis *a);
void ms_timeline_free(ms_timeline *t);

/* ---- the page's data beyond html.c's (page_more.c) ----------------------------------------- */

/* html.c's tables, which page_more.c adds to and refers to. */
struct cJSON;
typedef struct ms_page_refs {
  void *ctx;
  uint32_t (*stack)(void *ctx, uint32_t stack_id); /* adds a stack (its frames that matter): its page id */
  int (*frame)(void *ctx, uint32_t frame_id);      /* adds a frame: its page index */
  int (*cut)(void *ctx);                           /* the frame "(outer frames not shown)": its index */
  const struct cJSON *stacks;                      /* the page's stacks, keyed by id */
} ms_page_refs;
/* The segment spans and the whole stacks behind the frames that matter, as the text
 * `,"segment_spans":{...},"all_stacks":{...}` to append to the page's document (docs/viewer.md;
 * a->timeline built). NULL when out of memory; the caller frees it. */
char *ms_page_more(const ms_analysis *a, const ms_page_refs *r);
/* ---- PyTorch snapshots in (import.c) --------------------------------------------------- */

typedef struct ms_import_result {
  int64_t entries, segments, blocks; /* what was imported */
  int64_t skipped;                   /* trace entries whose action memsnap has no kind for */
  char skipped_action[64];           /* the first of those actions */
  int64_t unmatched_ends;            /* annotation ENDs without a START */
  char error[700];
} ms_import_result;

/* Imports the PyTorch snapshot pickle at in_path (gzip-compressed or not) into a new snapshot
 * file db_path, with progress on stderr if show_progress. Returns 0, or -1 with res->error
 * ("'in_path': offset N: ..."); on failure db_path may hold a partial file for the caller to
 * remove. */
int ms_import_file(const char *in_path, const char *db_path, bool show_progress, ms_import_result *res);
/* The same for a pickle held in memory (the fuzzing entry point); db_path may be ":memory:". */
int ms_import_buffer(const unsigned char *data, size_t len, const char *db_path, ms_import_result *res);

/* ---- replaying a trace through memsnap's allocator (replay_engine.c) -------------------
 *
 * `memsnap replay` (cmd_replay.c) plays a snapshot's allocations and frees, in their recorded
 * order, per device and stream, into libmemsnap's own caching allocator running on the simulated
 * device, under settings of the user's choosing, and reports what that allocator did. Not to be
 * confused with livemap.c, which only follows which blocks are live. */

#define MS_REPLAY_MAX_SETTINGS 16
#define MS_REPLAY_DEVICES 64 /* the simulated device's limit (MEMSNAP_SIM_DEVICES) */
#define MS_REPLAY_TOP 5      /* sites listed as live at the first out of memory */
#define MS_REPLAY_NOTES 8

/* One setting, keyed by PyTorch's PYTORCH_CUDA_ALLOC_CONF name (max_split_size_mb,
 * roundup_power2_divisions, garbage_collection_threshold, expandable_segments,
 * max_non_split_rounding_mb, backend) or memory_fraction. */
typedef struct ms_replay_setting {
  char key[40];
  char value[216];
} ms_replay_setting;

typedef struct ms_replay_config {
  ms_replay_setting set[MS_REPLAY_MAX_SETTINGS];
  int n;
  uint64_t capacity; /* bytes of each simulated device; 0: the recorded capacity */
} ms_replay_config;

typedef struct ms_replay_device {
  bool used;
  /* the replay */
  int64_t peak_allocated, peak_reserved, allocated_at_peak; /* allocated when reserved peaked */
  int64_t device_allocs, device_frees, retries, ooms, failed_allocs, segments_end;
  /* the first out of memory in the replay */
  bool oom;
  int64_t oom_event_id, oom_time_ns, oom_request, oom_allocated, oom_reserved, oom_stream;
  uint32_t oom_stack;
  uint32_t oom_top_stack[MS_REPLAY_TOP];
  int64_t oom_top_bytes[MS_REPLAY_TOP], oom_top_count[MS_REPLAY_TOP];
  int oom_ntop;
  bool oom_was_recorded; /* the recorded program ran out of memory at this event too */
  /* the recording, from its events (and the snapshot's state for a history that starts late) */
  int64_t rec_peak_allocated, rec_peak_reserved, rec_allocated_at_peak, rec_device_allocs, rec_device_frees;
  int64_t rec_segments_end, rec_ooms;
  int64_t capacity; /* the simulated device's bytes */
} ms_replay_device;

/* What one replay found: flat (no pointers), so that sweep workers can hand it back through
 * shared memory. */
typedef struct ms_replay_result {
  ms_replay_config config;
  int ndevices;
  ms_replay_device dev[MS_REPLAY_DEVICES];
  int64_t events, replayed;          /* events read; allocations and frees replayed */
  int64_t unknown_frees, duplicate_allocs, bad_events, preloaded_blocks, preloaded_bytes, empty_caches;
  int64_t deferred_frees;            /* frees completed later (record_stream uses) */
  bool failed;                       /* the replay stopped early: error says why */
  bool invalid_setting;              /* failed because a setting's value is invalid */
  char error[512];
  char notes[MS_REPLAY_NOTES][512];  /* what could not be known, what was skipped */
  int nnotes;
} ms_replay_result;

/* What a first pass over the snapshot learns, shared by every replay of it: the devices and
 * their recorded capacity, the recorded settings, the blocks live before the history began, the
 * frees that completed later. */
typedef struct ms_replay_plan ms_replay_plan;

/* Reads the snapshot once (s opened, stacks loaded). Returns the plan, or NULL with s->error set
 * (out of memory, unreadable events). */
ms_replay_plan *ms_replay_plan_new(ms_snapshot *s);
void ms_replay_plan_free(ms_replay_plan *p);
/* The recorded settings (from the snapshot's options table) as a config. */
void ms_replay_recorded_config(const ms_replay_plan *p, ms_replay_config *out);
/* The recorded capacity of the largest device, in bytes. */
uint64_t ms_replay_recorded_capacity(const ms_replay_plan *p);
/* Sets key=value in c (replacing that key; the value "default", or "unlimited" for
 * max_split_size_mb, removes it). Returns 0, or -1 with a message in err for an unknown key or a
 * full config. */
int ms_replay_config_set(ms_replay_config *c, const char *key, const char *value, char *err, size_t errlen);
/* The setting's value in c, or NULL when unset. */
const char *ms_replay_config_get(const ms_replay_config *c, const char *key);
/* c as PYTORCH_CUDA_ALLOC_CONF's line ("max_split_size_mb:64,roundup_power2_divisions:4"; ""
 * for the defaults); memory_fraction is left out (set_per_process_memory_fraction). */
void ms_replay_conf_line(const ms_replay_config *c, char *out, size_t len);
/* Whether libmemsnap accepts c's values: 0, or -1 with its message in err. */
int ms_replay_check_config(const ms_replay_plan *p, const ms_replay_config *c, char *err, size_t errlen);
/* Replays the snapshot under config c, in this process: it sets the MEMSNAP_ environment
 * variables (backend sim) and re-initialises libmemsnap, whose state it leaves shut down.
 * The first replay of a plan finds whether the history starts late (the snapshot's state is
 * not what its events add up to) and then completes the plan and replays again. Always fills
 * *r; returns 0, or -1 when the replay could not run or stopped early (r->error, with what was
 * replayed until then). */
int ms_replay_run(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, ms_replay_result *r);

/* ---- the documents of a report page (devsplit.c) ------------------------------------------- */

/* A device of a snapshot, copied to a temporary file and analyzed by itself. */
typedef struct ms_page_copy {
  char path[PATH_MAX];
  ms_snapshot snap;
  ms_analysis analysis;
  bool opened, analyzed;
} ms_page_copy;

typedef struct ms_page_set {
  ms_analysis **docs; /* what the page shows, in order: the caller's analyses and the copies' */
  size_t ndocs;
  ms_page_copy **copies;
  size_t ncopies;
  char error[2600];
} ms_page_set;

/* The page's documents for analyses a[0..n): each one, or for a snapshot with events or
 * segments on several devices, one per device (shown as "PATH, device N"), analyzed with
 * `label` (NULL: each chooses). 0, or -1 with ps->error set; either way ms_page_set_free
 * closes and removes the copies. */
int ms_page_set_build(ms_page_set *ps, ms_analysis *a, size_t n, const char *label);
void ms_page_set_free(ms_page_set *ps);

/* ---- output (report.c) ------------------------------------------------------------------ */

typedef struct ms_report_options {
  bool full_stacks;
  bool full_names; /* whole C++ names, not short ones */
  int max_frames;  /* frames shown per stack when not full */
} ms_report_options;

/* Prints a stack, one frame a line after `indent` (the frames that matter, or all of them with
 * full_stacks), or `note` in parentheses when stack_id is 0 ("no stack recorded" if NULL). */
void ms_print_stack(const ms_snapshot *s, uint32_t stack_id, const char *note, const ms_report_options *o,
                    const char *indent, FILE *out);

void ms_report_text(const ms_analysis *a, const ms_report_options *o, FILE *out);
/* One line per snapshot (one per rank, say): peaks, iterations, the first leak candidate; then
 * the leading leak candidates matched across the snapshots (match.c), one row each. */
void ms_report_side_by_side(const ms_analysis *a, size_t n, FILE *out);
/* Writes the report page (html.c): web/viewer.html with the analyses embedded, a data document
 * each (several: the page has a selector between them); 0, or -1 when out of memory, when the
 * page's pass over the events fails (s->error set) or when writing to out fails (out may then
 * hold part of the page). */
int ms_report_html(ms_analysis *const *a, size_t n, FILE *out);
/* The invalid frees as a section of the text report when there are any (misuse.c). */
void ms_misuse_report_text(const ms_analysis *a, const ms_report_options *o, FILE *out);
/* Bytes ("1.50 MiB") and times ("12.3 ms") as the text reports write them, into out[len]. */
void ms_format_bytes(int64_t bytes, char *out, size_t len);
void ms_format_ns(int64_t ns, char *out, size_t len);

/* ---- the analysis as JSON (analysis_json.c; docs/analysis-json.md) ----------------------- */

struct cJSON;
/* What a caller of ms_json_analysis chooses; {0} (or NULL) is `memsnap analyze --json`. */
typedef struct ms_json_options {
  size_t max_leaks;         /* leak candidates listed; 0: all */
  size_t max_invalid_sites; /* invalid_frees' sites listed; 0: all */
  /* NULL: each entry's `stack` and `full_stack` hold its frames. Else its `stack` is
     stack_ref(ctx, site, stack_id), a number into the caller's own table of stacks (site: the
     analysis site of a site's entry, -1 for one event's stack), and full_stack is left out. */
  int64_t (*stack_ref)(void *ctx, int64_t site, uint32_t stack_id);
  void *ctx;
} ms_json_options;

/* Adds the analysis's sections (summary, live_at_peak, iterations, leaks, oom, invalid_frees,
 * top_sites, fragmentation, external) to the object `root`, as options `o` (NULL: as --json)
 * say. 0, or -1 when out of memory (root may hold part of them; the caller deletes it). */
int ms_json_analysis(struct cJSON *root, const ms_analysis *a, const ms_json_options *o);
/* Prints the analysis as JSON (`memsnap analyze --json`) and a newline; 0, or -1 when out of
 * memory (nothing printed). */
int ms_report_json(const ms_analysis *a, FILE *out);
/* The leak candidates of several analyses matched across them, as a JSON array (the
 * "matched_leaks" of analyze --json with several snapshots); 0, or -1 when out of memory
 * (nothing printed). */
int ms_report_json_matched(const ms_analysis *a, size_t n, FILE *out);
/* Adds a site's stack keys to a JSON object (stack and full_stack with frames, stack_id, and
 * stack_note for a site without a stack); a key that cannot be allocated is left out. */
void ms_json_site_stacks(struct cJSON *o, const ms_analysis *a, uint32_t site);
/* Adds "pid" and "host" to a JSON object, null where the snapshot does not say (imported); a key
 * that cannot be allocated is left out. */
void ms_json_process(struct cJSON *o, const ms_snapshot *s);

#endif
