/* runlog.h: the run log's layout (the whole run, bounded: every iteration since recording started
 * and every second, each coarser as the run grows) and the functions that keep it (runlog.c) and
 * read it back (snapshot.c for a dump, recover.c from a live mapping). docs/recover.md ("The
 * whole run") and docs/snapshot-format.md (the run_log table) are the same in prose.
 *
 * The region is one fixed-size struct (msi_runlog_region), in the live mapping after the ring
 * (livemap.h: header.runlog_offset) or, without a mapping, in the library's own memory. It holds
 * two logs of the same shape: iterations (an optimizer's step ended or was skipped) and seconds
 * (since the recording started). A log is
 *   slot[0 .. closed)   closed entries, each covering `width` units (iterations or seconds) when
 *                       every unit was seen (a second with no sample is folded into the next)
 *   tail[cur].open      units finished since the last closed entry (count < width)
 *   tail[cur].unit      the unit in progress: its peak so far
 * An entry says which units it covers (first, count), so a reader needs no width. When the
 * slots are full, adjacent entries are merged pairwise in place (slot[i] = slot[2i] + slot[2i+1]:
 * peaks the larger, ends the later entry's, counts summed) and the width doubles: the log keeps
 * the whole run at a resolution that halves each time it fills.
 *
 * Torn updates (a process killed mid-write): the tail is double-buffered; a writer fills
 * tail[1 - cur] and, after any slot it closes, publishes closed, cur and the width with one
 * 64-bit store (state). A merge stores its progress (merging = 1 + entries written) after each
 * merged entry and clears it after the state: a reader that finds merging set reads the merged
 * slot[0 .. merging - 1) and the untouched slot[2 (merging - 1) .. closed). Every field is
 * untrusted to a reader (recover.c checks each index against the slots).
 */
#ifndef MEMSNAP_RUNLOG_H
#define MEMSNAP_RUNLOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MSI_RUNLOG_MAGIC "MSRUNLOG"
#define MSI_RUNLOG_VERSION 1
#define MSI_RUNLOG_SLOTS 16384 /* closed entries per log (even): 1.5 MiB a log */

enum { MSI_RUNLOG_ITERATIONS = 0, MSI_RUNLOG_SECONDS = 1, MSI_RUNLOG_LOGS = 2 };
/* The roles whose bytes an entry keeps at its peak (memsnap.h's MEMSNAP_TENSOR_* less one). */
enum { MSI_RUNLOG_PARAMETER, MSI_RUNLOG_GRADIENT, MSI_RUNLOG_OPTIMIZER, MSI_RUNLOG_ROLES };

/* One entry: `count` units from unit `first` (iterations counted from 0 at the recording's
 * start; seconds since it). Times are CLOCK_MONOTONIC nanoseconds. 96 bytes. */
typedef struct msi_runlog_entry {
  uint64_t first;
  uint32_t count;            /* units covered (0: an empty entry) */
  uint32_t skipped;          /* iterations among them whose optimizer step GradScaler skipped */
  uint64_t start_ns, end_ns;
  int64_t peak_allocated, peak_reserved;  /* the highest in any of its units */
  int64_t end_allocated, end_reserved;    /* at its last unit's end */
  int64_t role_bytes[MSI_RUNLOG_ROLES];   /* at the allocated peak: the told roles' bytes */
  int64_t peak_ns;                        /* when the allocated peak was seen (a sample's time) */
} msi_runlog_entry;
_Static_assert(sizeof(msi_runlog_entry) == 96, "an entry is 96 bytes");

typedef struct msi_runlog_tail {
  msi_runlog_entry open; /* finished units not yet in a slot */
  msi_runlog_entry unit; /* the unit in progress (count 0 until it has begun) */
} msi_runlog_tail;

/* state: closed (bits 0-31), cur (bit 32), log2 of the width (bits 40-47). */
#define MSI_RUNLOG_CLOSED(s) ((uint32_t)((s) & 0xffffffffu))
#define MSI_RUNLOG_CUR(s) ((int)(((s) >> 32) & 1))
#define MSI_RUNLOG_WIDTH_LOG2(s) ((int)(((s) >> 40) & 0xff))

typedef struct msi_runlog_log {
  _Atomic uint64_t state;
  _Atomic uint64_t merging; /* 0, or 1 + the merged entries written by a merge in progress */
  uint64_t units;           /* units finished, all told */
  uint64_t reserved_;
  msi_runlog_tail tail[2];
  msi_runlog_entry slot[MSI_RUNLOG_SLOTS];
} msi_runlog_log;

typedef struct msi_runlog_region {
  char magic[8];     /* MSI_RUNLOG_MAGIC */
  uint32_t version;  /* MSI_RUNLOG_VERSION */
  uint32_t entry_size, slots, logs;
  uint64_t start_ns; /* the recording's start: second 0 */
  uint64_t reserved_[4];
  msi_runlog_log log[MSI_RUNLOG_LOGS];
} msi_runlog_region;

/* What the allocator reports at a sample (devices.c's sampler, summed over the devices): now, and
 * the highest since the previous sample (peaks the allocator tracks; the sampler starts them
 * again from now). */
typedef struct msi_runlog_sample {
  int64_t allocated, reserved, peak_allocated, peak_reserved;
} msi_runlog_sample;

/* ---- keeping it (runlog.c), in the recorded process -------------------------------------- */

/* The function that samples the devices (devices.c registers it at load; none: no sample). It
 * takes each device's lock in turn: never call into the run log with a device lock held. */
void msi_runlog_set_sampler(void (*fn)(msi_runlog_sample *out));
/* Starts keeping the log (msi_history_start; again: nothing). */
void msi_runlog_start(void);
/* An optimizer step (model_events.c): its label, MEMSNAP_STEP_*. The steps of the first optimizer
 * whose step ends (or is skipped) end iterations. */
void msi_runlog_step(int label, int what);
/* Tensors told in their roles (model_events.c: memsnap_tensor_events' arrays, checked). */
void msi_runlog_tensors(size_t n, const uint64_t *storage, const uint64_t *bytes, const uint8_t *role);
/* A sample now, into both logs (the live mapping's watcher, a few times a second; a dump). */
void msi_runlog_tick(void);
/* Moves the log into `region` (the live mapping's, zeroed; NULL: back into the library's own
 * memory), copying what it holds. */
void msi_runlog_move(void *region);
/* Copies the region (a sample taken first) into *out (malloc'd, the caller frees it); NULL when
 * the log never started or out of memory. */
msi_runlog_region *msi_runlog_copy(void);
/* fork(): its lock taken before the devices' (the sampler takes theirs under it), released; the
 * child keeps a copy in its own memory. */
void msi_runlog_fork(int phase);
/* memsnap_shutdown: forgets everything. */
void msi_runlog_reset(void);

/* ---- reading it (runlog.c, used by the snapshot writer and recover.c) -------------------- */

/* The entries of log `which` of a region that may be torn or hostile (`bytes` of it readable):
 * closed ones, then the open one and the unit in progress (when they hold anything), in order,
 * into *out (malloc'd). Returns how many, 0 with none, or -1 when the region is not one (magic,
 * version or sizes) or out of memory. */
long msi_runlog_entries(const void *region, size_t bytes, int which, msi_runlog_entry **out, bool *in_progress_last);

#endif
