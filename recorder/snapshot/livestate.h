/* livestate.h: the allocator's state in the live mapping (livestate.c writes it, recover.c reads
 * it back), so that a snapshot written from the mapping at any instant holds what memsnap_dump
 * would have written then, however often the ring wrapped. docs/recover.md says why this design
 * and how far back a torn update can put the state; docs/snapshot-format.md ("The live mapping")
 * has the same layout in prose.
 *
 * Two slots (livemap.h: header.state_offset), written in turn; each:
 *   offset 0   msi_state_head (64 bytes) below
 *   64         devices[ndevs]:   int32 index, int32 nstats, uint64 cap, int64 stats[nstats]
 *              segments[nsegs]:  msi_state_segment
 *              blocks[nblocks]:  msi_state_block (the allocated and pending_free ones, by segment,
 *                                by address; the free ones are the segments' gaps)
 * A slot is published by its generation: odd while it is written, even once whole (0: never
 * written), with a checksum of everything after the head. A reader takes the slot of the higher
 * even generation whose checksum matches and whose generation did not change while it read; a
 * process killed while writing one leaves the other, the previous state, whole.
 */
#ifndef MEMSNAP_LIVESTATE_H
#define MEMSNAP_LIVESTATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "history/history.h"

typedef struct msi_state_head {
  _Atomic uint64_t gen;  /* odd: being written; even: whole; 0: never written */
  uint64_t ring_index;   /* the ring's count of events claimed at the state's instant: events of
                            this absolute index on come after it (history.c) */
  uint64_t time_ns;      /* CLOCK_MONOTONIC at the instant */
  uint64_t bytes;        /* after the head */
  uint64_t checksum;     /* of those bytes (livestate.c: state_sum) */
  uint32_t ndevs, nsegs;
  uint64_t nblocks;
  uint64_t reserved0;
} msi_state_head;
_Static_assert(sizeof(msi_state_head) == 64, "the state's head is 64 bytes");

enum { MSI_STATE_SMALL = 0, MSI_STATE_LARGE, MSI_STATE_ASYNC, MSI_STATE_EXTERNAL }; /* a segment's pool */
enum { MSI_STATE_EXPANDABLE = 1, MSI_STATE_PRIVATE = 2 };                           /* its flags */

typedef struct msi_state_segment {
  int32_t device;
  uint8_t pool, flags;
  uint16_t reserved0;
  uint64_t address, size, stream, caller, pool_id[2];
  uint32_t source;  /* external: the label of the API that allocated it */
  uint32_t nblocks; /* its blocks that follow (allocated, pending_free) */
} msi_state_segment;
_Static_assert(sizeof(msi_state_segment) == 64, "a state segment is 64 bytes");

typedef struct msi_state_block {
  uint64_t address, size, requested;
  uint32_t stack_id, module_label;
  uint8_t state, role; /* 0 allocated, 2 pending_free; MEMSNAP_TENSOR_* (0: none) */
  uint8_t reserved0[6];
} msi_state_block;
_Static_assert(sizeof(msi_state_block) == 40, "a state block is 40 bytes");

/* ---- writing, in the recorded process (livestate.c) --------------------------------------- */

/* Takes the state now unless another thread is taking it: every device locked for the copy
 * (msi_devices_locked, as memsnap_dump), written into the older slot with no lock of the
 * allocator held, the next one wanted half a ring later. Nothing without a live mapping. */
void msi_live_state_take(void);
/* At an iteration's end: the state, when an eighth of the ring was claimed since the last one, or a
 * second passed and any event was. */
void msi_live_state_iteration_end(void);
/* The allocation path's test, its device lock released: the state, when the ring has claimed
 * enough events since the last one (history.h: msi_state_wanted). One load when not. */
static inline void msi_live_state_check(void) {
  if (__builtin_expect(atomic_load_explicit(&msi_state_wanted, memory_order_relaxed), 0)) msi_live_state_take();
}
/* fork(): its lock taken (prepare, before the devices'), released (parent, child); the child
 * writes no state of its parent's. */
void msi_live_state_fork(int phase);

/* ---- reading, in any process (livestate.c) ------------------------------------------------ */

/* The newest whole state in a mapping of `len` bytes at `base` (its header checked already):
 * its head copied into *head and its bytes into a new array (*payload, caller frees); *torn says
 * whether a newer slot was found half written (a process killed while it wrote it, or one that
 * writes it now). true when one is found; false when none is (never written, torn, damaged) or
 * out of host memory. */
bool msi_live_state_read(const char *base, uint64_t len, msi_state_head *head, char **payload, bool *torn);

#endif
