/* history.h: whether the history is recording, read on every allocation's path (inlined there).
 * With history.c, which sets it; internal.h declares the rest of the history. Kept apart from
 * internal.h so that internal.h reads nothing history.c defines (the files call down only). */
#ifndef MEMSNAP_HISTORY_H
#define MEMSNAP_HISTORY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* history.c: MSI_REC_RING while the ring records, MSI_REC_OBSERVER while a trace observer is
 * attached (memsnap_set_trace_observer). */
extern atomic_int msi_recording;
enum { MSI_REC_RING = 1, MSI_REC_OBSERVER = 2 };

/* Whether the allocator's decisions are wanted as events (the ring or an observer): the
 * allocation paths test it before adding one. */
static inline bool msi_is_recording(void) { return atomic_load_explicit(&msi_recording, memory_order_relaxed) != 0; }

/* Whether the ring records: stacks are captured, and what only the ring keeps (marks, external
 * allocations) is added, only then. */
static inline bool msi_ring_recording(void) {
  return (atomic_load_explicit(&msi_recording, memory_order_relaxed) & MSI_REC_RING) != 0;
}

/* The live mapping's state (snapshot/livestate.c) is taken again once the ring has claimed event
 * msi_state_due_at (an absolute index; UINT64_MAX: never, the ring is not in a mapping): the
 * event's writer raises msi_state_wanted, and the entry point that made it, its device lock
 * released, takes the state (api.c: msi_live_state_check). */
extern _Atomic uint64_t msi_state_due_at;
extern atomic_bool msi_state_wanted;

#endif
