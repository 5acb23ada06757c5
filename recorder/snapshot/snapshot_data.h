/* snapshot_data.h: what a snapshot holds before snapshot.c writes it: the allocator's state,
 * the ring's events, the devices, and for a snapshot of another process (recover.c: one that
 * died, or runs elsewhere) the facts about it that this process cannot ask for itself. */
#ifndef MEMSNAP_SNAPSHOT_DATA_H
#define MEMSNAP_SNAPSHOT_DATA_H

#include "internal.h"

typedef struct msi_snap_block {
  uint64_t address, size, requested;
  uint32_t stack_id;
  uint8_t state; /* 0 allocated, 1 free (cached), 2 pending_free (waiting on stream events) */
  uint8_t role;  /* the role a framework told of it (MEMSNAP_TENSOR_*; 0: none: roles.c) */
  uint32_t module_label; /* its module's label (0: none) */
} msi_snap_block;

typedef struct msi_snap_segment {
  int device;
  uint64_t address, size, stream;
  const char *pool;            /* "small", "large", "async" or "external" */
  uint32_t source;             /* external: label id of the API that allocated it */
  uint64_t caller;             /* external: return address of the allocating call */
  bool expandable;
  bool private_pool;           /* pool_id is a graph or MemPool pool's */
  uint64_t pool_id[2];
  size_t first_block, nblocks; /* in the block array */
  const char *library;         /* external, another process's: its calling module's file name (else from caller) */
} msi_snap_segment;

typedef struct msi_snap_device {
  int index;
  char name[256];
  size_t total, free_bytes;
  size_t cap; /* memory fraction cap, 0 for none */
  int64_t stats[256];
  int nstats;
} msi_snap_device;

/* Another process's facts (recover.c). */
typedef struct msi_snap_origin {
  int pid, rank;               /* rank -1: none */
  const char *host, *command_line, *backend;
  int stacks;                  /* MSI_STACKS_* */
  uint64_t start_unix_ns;      /* wall-clock time of the recording's start */
  uint64_t snapshot_ns;        /* the snapshot's time since the start */
  const char *const *labels;   /* by id */
  uint32_t nlabels;
  const char *const *option_names, *const *option_values;
  size_t noptions;
  const char *ended;           /* how it ended ("killed by SIGKILL", "running"), NULL unknown */
  int end_signal, exit_status; /* 0 / -1 unknown */
  uint64_t end_ns;             /* when it ended, since the start (0 unknown) */
  uint64_t last_event_ns, last_alloc_ns; /* the last event's and last allocation's times */
  bool live;                   /* read while the process ran */
  const char *state;           /* "exact": the mapping's state and the events since; "events": no
                                  state yet, every event since the recording's start; "window": the
                                  ring's events alone (no state, or one older than the window) */
  bool state_torn;             /* a newer state was found half written (the older one was used) */
} msi_snap_origin;

typedef struct msi_snapshot {
  msi_event *ev;                 /* the ring, copied under the device locks */
  uint64_t nev, dropped, max_entries, start_ns; /* start_ns: now when nothing was recorded */
  uint64_t before;               /* events of the recording before the copied window: ids from before + 1 */
  msi_snap_segment *segs;
  size_t nsegs, segs_cap;
  msi_snap_block *blocks;
  size_t nblocks, blocks_cap;
  msi_snap_device devs[MSI_MAX_DEVICES];
  int ndevs;
  bool failed;
  struct msi_block **heads;      /* gather's list of segment heads, kept for the next gather (freed with segs) */
  size_t heads_cap;
  const msi_snap_origin *origin; /* NULL: this process, now */
  const void *runlog;            /* the run log's region (history/runlog.h; a copy, or a mapping's, untrusted), NULL none */
  size_t runlog_bytes;
} msi_snapshot;

/* snapshot.c: appends to `s` the allocator's state on the devices given, whose locks the caller
 * holds (msi_devices_locked): each device's statistics, its segments with their blocks (and
 * roles), then the allocations memsnap did not make. With `facts`, each device's name, free and
 * total memory too (a backend call: the dump's; the live mapping's state leaves them). s->failed
 * when out of host memory. The ring is not copied. */
void msi_snapshot_gather(msi_device **devs, int n, msi_snapshot *s, bool facts);
/* By device, then address, as the format lists segments (qsort). */
int msi_snapshot_segment_order(const void *a, const void *b);

/* snapshot.c: `pattern` expanded as memsnap_dump's paths are (%p, %r, %h, %t, %%) into out[len],
 * with the pid, rank (NULL: 0) and host given (recover.c: another process's). MEMSNAP_OK, or
 * MEMSNAP_EINVAL (error set) for an unknown pattern, an empty or a too long result. */
int msi_expand_path_for(const char *pattern, int pid, const char *rank, const char *host, char *out, size_t len);

/* snapshot.c: writes `s` with its symbolized stacks to `path` (expanded already) as memsnap_dump
 * does: a temporary file renamed into place. MEMSNAP_OK, or an error code (error set). The
 * segments must be in the format's order (device, then address). */
int msi_snapshot_write(const char *path, const msi_snapshot *s, msi_symbolized *sym);

#endif
