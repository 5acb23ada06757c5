/* misuse.c: frees of pointers memsnap did not hand out, or no longer owns (invalid frees).
 *
 * PyTorch's pluggable ABI gives memsnap_free no way to report an error, so a double free, a
 * free of a foreign pointer or of an interior pointer would otherwise vanish into
 * memsnap_last_error(). Here such a free is classified (by the block, if any, whose range holds
 * the pointer), counted in the device's statistics (num_invalid_frees), recorded as an
 * invalid_free event with the caller's stack while recording, and reported on stderr once per
 * site (the caller's stack, else its return address), at most WARN_MAX times a process.
 * MEMSNAP_INVALID_FREE chooses: warn (the default), silent (count and record only), or abort
 * (api.c writes the exit snapshot and aborts, as PyTorch's "invalid device pointer" ends the
 * process).
 *
 * Nothing in the allocator's state changes on an invalid free besides the counter: the block
 * lookup only reads (the invariant checker, memsnap_check, proves it in tests/recorder/test_alloc.c).
 * This is never the hot path: it runs only after the free found no block.
 */
#include <stdio.h>
#include <stdlib.h>

#include "history/history.h"
#include "internal.h"

#define WARN_MAX 16   /* warnings printed per process; the rest are counted and recorded */
#define SITES_MAX 64  /* sites remembered as warned */

static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t warned_sites[SITES_MAX];
static int nwarned_sites, nwarnings;
static uint64_t total_invalid; /* every invalid free of the process, under warn_lock */

const char *msi_invalid_free_name(int kind) {
  switch (kind) {
    case MSI_FREE_DOUBLE: return "double_free";
    case MSI_FREE_INTERIOR: return "interior_pointer";
    default: return "foreign_pointer";
  }
}

/* Finds the block of `d` whose range holds ptr. Lock held. Returns the kind (MSI_FREE_DOUBLE for
 * a block that is not allocated, MSI_FREE_INTERIOR for inside an allocated one) and fills *found,
 * or 0 when no mapped block of d holds it. */
static int classify_on(msi_device *d, uintptr_t ptr, msi_block *found) {
  msi_block **heads;
  size_t n = msi_device_segments(d, &heads);
  if (n == SIZE_MAX) return 0;
  int kind = 0;
  for (size_t i = 0; i < n && !kind; i++)
    for (msi_block *b = heads[i]; b && !kind; b = b->next)
      if (ptr >= b->ptr && ptr - b->ptr < b->size && b->mapped) {
        kind = b->allocated ? MSI_FREE_INTERIOR : MSI_FREE_DOUBLE;
        *found = *b;
      }
  free(heads);
  return kind;
}

/* Whether this site was warned about already (remembers it if not, while there is room). */
static bool site_warned(uint64_t site) {
  for (int i = 0; i < nwarned_sites; i++)
    if (warned_sites[i] == site) return true;
  if (nwarned_sites < SITES_MAX) warned_sites[nwarned_sites++] = site;
  return false;
}

static void describe(char *out, size_t len, int kind, uintptr_t ptr, const msi_block *b) {
  if (kind == MSI_FREE_INTERIOR)
    snprintf(out, len, "an interior pointer, %lu bytes into the %zu-byte block at %#lx", (unsigned long)(ptr - b->ptr),
             b->size, (unsigned long)b->ptr);
  else if (kind == MSI_FREE_DOUBLE && ptr == b->ptr)
    snprintf(out, len, "a double free: the block at %#lx is free already", (unsigned long)ptr);
  else if (kind == MSI_FREE_DOUBLE)
    snprintf(out, len, "a double free: %lu bytes into the free block at %#lx", (unsigned long)(ptr - b->ptr),
             (unsigned long)b->ptr);
  else
    snprintf(out, len, "a pointer memsnap did not allocate (or freed and gave back to the device)");
}

bool msi_invalid_free(void *ptr, int hint, uint64_t size_arg, memsnap_stream_t stream, uint32_t stack, uint64_t site,
                      bool loud) {
  uintptr_t p = (uintptr_t)ptr;
  int kind = 0, device = -1, n = msi_device_count_ready();
  msi_block block = {0};
  for (int i = 0; i < n && !kind; i++) {
    msi_device *d = msi_device_peek(i);
    if (!d) continue;
    pthread_mutex_lock(&d->lock);
    if ((kind = classify_on(d, p, &block)) != 0) device = i;
    pthread_mutex_unlock(&d->lock);
  }
  if (!kind) kind = MSI_FREE_FOREIGN;
  /* Counted on the device that holds the pointer, else the one the caller named, else device 0. */
  int counted = device >= 0 ? device : hint >= 0 && hint < n && msi_device_peek(hint) ? hint : 0;
  msi_device *d = msi_device_peek(counted);
  if (d) {
    pthread_mutex_lock(&d->lock);
    d->stats.num_invalid_frees++;
    pthread_mutex_unlock(&d->lock);
  }
  if (msi_ring_recording())
    msi_history_add_unobserved(MSI_EV_INVALID_FREE, device >= 0 ? device : hint, stream, p, kind == MSI_FREE_FOREIGN ? 0 : p - block.ptr,
                    size_arg, (uint64_t)kind, stack);
  char what[160];
  describe(what, sizeof what, kind, p, &block);
  msi_error("free of %p: %s; nothing was freed", ptr, what);
  if (!loud || msi_opt.invalid_free == MSI_INVALID_FREE_SILENT) return false;
  bool fatal = msi_opt.invalid_free == MSI_INVALID_FREE_ABORT;
  pthread_mutex_lock(&warn_lock);
  total_invalid++;
  bool print = fatal || (!site_warned(stack ? stack : site) && nwarnings < WARN_MAX);
  if (print && !fatal) nwarnings++;
  if (print) {
    char where[48] = "";
    if (device >= 0) snprintf(where, sizeof where, " on device %d", device);
    fprintf(stderr, "memsnap: %s: invalid free of %p%s: %s; nothing was freed\n", fatal ? "fatal" : "warning", ptr, where,
            what);
    if (!fatal)
      fprintf(stderr,
              "memsnap: %llu invalid free(s) so far; further ones from this site are not printed. "
              "num_invalid_frees in the statistics counts them; %s; MEMSNAP_INVALID_FREE=abort stops at the first\n",
              (unsigned long long)total_invalid,
              msi_ring_recording() ? "`memsnap analyze` of a snapshot lists each with its stack"
                                 : "record (MEMSNAP_RECORD=1) and `memsnap analyze` the snapshot to see each one's stack");
    if (!fatal && nwarnings == WARN_MAX)
      fprintf(stderr, "memsnap: %d invalid-free warnings printed: no more will be\n", WARN_MAX);
  }
  pthread_mutex_unlock(&warn_lock);
  return fatal;
}

void msi_invalid_free_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) pthread_mutex_lock(&warn_lock);
  else pthread_mutex_unlock(&warn_lock);
}

void msi_invalid_free_reset(void) {
  pthread_mutex_lock(&warn_lock);
  nwarned_sites = nwarnings = 0;
  total_invalid = 0;
  pthread_mutex_unlock(&warn_lock);
}
