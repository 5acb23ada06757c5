/* snapshot_schema.h: the format version, tables and event kinds of a snapshot file
 * (docs/snapshot-format.md), each defined here once: the recorder's writer (snapshot.c), the
 * CLI's importer (analyzer/pytorch/import.c) and its reader (analyzer/read/reader.c) all use them. */
#ifndef MEMSNAP_SNAPSHOT_SCHEMA_H
#define MEMSNAP_SNAPSHOT_SCHEMA_H

#define MEMSNAP_FORMAT_VERSION 1 /* the file's user_version; readers refuse newer ones */
#define MEMSNAP_STRINGIFY_(x) #x
#define MEMSNAP_STRINGIFY(x) MEMSNAP_STRINGIFY_(x)

/* Creates every table of an empty snapshot and sets its format version. Columns added after
 * version 1's first files (segments.expandable, pool_id0, pool_id1) are at the end of their table:
 * (and segments.source, library) readers of old files find them missing (see docs/snapshot-format.md).
 * The steps table (the step events again, by event id, for readers that want the optimizer's
 * steps without reading every event) came later too: a file without it has none recorded. The
 * run_log table (the whole run by iteration and by second: recorder/history/runlog.h) came later
 * still: a file without it has no run log. The gc_cycles table (the reference cycles holding CUDA
 * tensors that the garbage collector's runs freed, filled by the Python package with
 * MEMSNAP_GC_CYCLES=1: recorder/python/memsnap/cycles.py, whose CYCLES_SQL makes it in files of an
 * older writer) came last: a file without it, or with it empty, has none recorded. */
__attribute__((unused)) static const char memsnap_schema_sql[] =
    "PRAGMA user_version = " MEMSNAP_STRINGIFY(MEMSNAP_FORMAT_VERSION) ";"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
    "CREATE TABLE options(name TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;"
    "CREATE TABLE devices(device INTEGER PRIMARY KEY, name TEXT, total_bytes INTEGER, free_bytes INTEGER,"
    " cap_bytes INTEGER);"
    "CREATE TABLE stats(device INTEGER, key TEXT, value INTEGER, PRIMARY KEY(device, key)) WITHOUT ROWID;"
    "CREATE TABLE segments(id INTEGER PRIMARY KEY, device INTEGER, address INTEGER, size INTEGER, pool TEXT,"
    " stream INTEGER, expandable INTEGER, pool_id0 INTEGER, pool_id1 INTEGER, source TEXT, library TEXT);"
    "CREATE TABLE blocks(id INTEGER PRIMARY KEY, segment_id INTEGER, address INTEGER, size INTEGER,"
    " requested_size INTEGER, state TEXT, stack_id INTEGER, role INTEGER, module_label_id INTEGER);"
    "CREATE TABLE event_kinds(id INTEGER PRIMARY KEY, name TEXT);"
    "CREATE TABLE events(id INTEGER PRIMARY KEY, time_ns INTEGER, kind INTEGER, device INTEGER, stream INTEGER,"
    " address INTEGER, size INTEGER, requested_size INTEGER, extra INTEGER, thread INTEGER, stack_id INTEGER);"
    "CREATE TABLE labels(id INTEGER PRIMARY KEY, text TEXT);"
    "CREATE TABLE marks(event_id INTEGER PRIMARY KEY, time_ns INTEGER, label_id INTEGER, thread INTEGER,"
    " stack_id INTEGER);"
    "CREATE TABLE ranges(id INTEGER PRIMARY KEY, label_id INTEGER, thread INTEGER, depth INTEGER,"
    " start_ns INTEGER, end_ns INTEGER, stack_id INTEGER);"
    "CREATE TABLE steps(event_id INTEGER PRIMARY KEY, time_ns INTEGER, label_id INTEGER, what INTEGER);"
    "CREATE TABLE stacks(id INTEGER PRIMARY KEY, depth INTEGER);"
    "CREATE TABLE stack_frames(stack_id INTEGER, position INTEGER, frame_id INTEGER,"
    " PRIMARY KEY(stack_id, position)) WITHOUT ROWID;"
    "CREATE TABLE frames(id INTEGER PRIMARY KEY, kind TEXT, name TEXT, file TEXT, line INTEGER, module TEXT,"
    " pc INTEGER, offset INTEGER, inlined INTEGER);"
    "CREATE TABLE run_log(log INTEGER, first INTEGER, count INTEGER, skipped INTEGER, start_ns INTEGER, end_ns INTEGER,"
    " peak_allocated INTEGER, peak_reserved INTEGER, end_allocated INTEGER, end_reserved INTEGER, parameter_bytes INTEGER,"
    " gradient_bytes INTEGER, optimizer_bytes INTEGER, peak_ns INTEGER, in_progress INTEGER, PRIMARY KEY(log, first))"
    " WITHOUT ROWID;"
    "CREATE TABLE gc_cycles(id INTEGER PRIMARY KEY, run INTEGER, generation INTEGER, objects INTEGER, tensors INTEGER,"
    " tensor_bytes INTEGER, address INTEGER, addresses TEXT, types TEXT, edges TEXT);";

/* The event kinds, the one list of them: X(ID, "name") in id order from 1. The recorder
 * (MSI_EV_*, recorder/internal.h) and the CLI (MS_*, analyzer/analysis/analysis.h) spell their enums
 * from it, and the table event_kinds holds the names. segment_map and segment_unmap are the
 * pages of expandable segments (and, in async mode, the stream-ordered pool's growth);
 * invalid_free a free of a pointer the allocator did not own (extra: 1 double free, 2 foreign
 * pointer, 3 interior pointer; size the offset into the block that holds the address, 0 none;
 * requested the caller's size); ipc_share a block sent to another process (CUDA IPC: address the
 * block, size its size, requested its requested size, extra its offset in what the handle maps);
 * module a module's forward or backward beginning or ending on the event's thread (extra the label
 * of its path, size what: 0 forward begins, 1 forward ends, 2 backward begins, 3 backward ends);
 * tensor a tensor seen in its role (address its storage's data pointer: the block holding it, size
 * the tensor's bytes, requested its role: 1 parameter, 2 gradient, 3 optimizer state, 4 buffer,
 * extra the label of its module, NULL or 0 none, device its device); step an optimizer's step
 * (extra the label of the optimizer's class, size 1 begins, 2 ends, 3 skipped by GradScaler);
 * backward a backward pass (size 0 begins, 1 ends; a begin's stack is the call's);
 * gc a run of Python's garbage collector on the event's thread (size 0 begins, 1 ends; extra its
 * generation; an end's requested the objects it collected, address the uncollectable ones).
 * A new kind goes at the end: ids are part of the format. */
#define MEMSNAP_EVENT_KIND_LIST(X)                                                              \
  X(ALLOC, "alloc") X(FREE_REQUESTED, "free_requested") X(FREE_COMPLETED, "free_completed")      \
  X(SEGMENT_ALLOC, "segment_alloc") X(SEGMENT_FREE, "segment_free") X(OOM, "oom")                 \
  X(SNAPSHOT, "snapshot") X(MARK, "mark") X(RANGE_PUSH, "range_push") X(RANGE_POP, "range_pop") \
  X(SEGMENT_MAP, "segment_map") X(SEGMENT_UNMAP, "segment_unmap") X(INVALID_FREE, "invalid_free")   \
  X(IPC_SHARE, "ipc_share") X(MODULE, "module") X(TENSOR, "tensor") X(STEP, "step") X(BACKWARD, "backward") \
  X(GC, "gc")

/* Why a segment_free or segment_unmap happened: its `extra` (NULL, read as 0: not recorded, as
 * in imported snapshots and files written before these codes). The recorder knows the reason
 * where it releases (recorder/allocator/alloc.c); the analyzer infers it where a file does not say
 * (analyzer/analysis/retries.c). Codes are part of the format: a new one gets the next number. */
enum {
  MEMSNAP_RELEASE_RETRY = 1,       /* a request the device refused: the whole cache released, then retried */
  MEMSNAP_RELEASE_OVERSIZE = 2,    /* a request the device refused: oversize cached blocks released (max_split_size) */
  MEMSNAP_RELEASE_GC = 3,          /* garbage collection (garbage_collection_threshold), before a request */
  MEMSNAP_RELEASE_EMPTY_CACHE = 4, /* an empty_cache call */
  MEMSNAP_RELEASE_POOL = 5,        /* a private pool's cache emptied (memsnap_empty_pool: a MemPool's) */
  MEMSNAP_RELEASE_SHUTDOWN = 6,    /* the allocator shut down (memsnap_shutdown) */
  MEMSNAP_RELEASE_EXTERNAL = 7,    /* an external allocation the program freed (memsnap run --mode intercept) */
  MEMSNAP_RELEASE_DRIVER = 8,      /* the async mode's driver pool shrank by itself (not empty_cache) */
  MEMSNAP_RELEASE_REASONS          /* codes are below this */
};

#define MEMSNAP_KIND_COUNT_(id, name) +1
enum { MEMSNAP_EVENT_KINDS = 1 MEMSNAP_EVENT_KIND_LIST(MEMSNAP_KIND_COUNT_) }; /* ids 1 .. KINDS-1 */
#undef MEMSNAP_KIND_COUNT_

#define MEMSNAP_KIND_NAME_(id, name) name,
/* event_kinds: the name of each kind, by id (0 is none). */
__attribute__((unused)) static const char *const memsnap_event_kind_names[MEMSNAP_EVENT_KINDS] = {
    NULL, MEMSNAP_EVENT_KIND_LIST(MEMSNAP_KIND_NAME_)};
#undef MEMSNAP_KIND_NAME_

/* Inserts one segment, naming its columns (both writers use it). */
__attribute__((unused)) static const char memsnap_insert_segment_sql[] =
    "INSERT INTO segments(id, device, address, size, pool, stream, expandable, pool_id0, pool_id1, source, library) "
    "VALUES(?,?,?,?,?,?,?,?,?,?,?)";

#endif
