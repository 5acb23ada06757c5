/* history.h: whether the history is recording, read on every allocation's path (inlined there).
 * With history.c, which sets it; internal.h declares the rest of the history. Kept apart from
 * internal.h so that internal.h reads nothing history.c defines (the files call down only). */
#ifndef MEMSNAP_HISTORY_H
#define MEMSNAP_HISTORY_H

#include <stdatomic.h>
#include <stdbool.h>

extern atomic_int msi_recording; /* history.c: 1 while recording */

static inline bool msi_is_recording(void) { return atomic_load_explicit(&msi_recording, memory_order_relaxed); }

#endif
