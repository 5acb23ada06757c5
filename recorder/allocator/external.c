/* external.c: device allocations that memsnap's caching allocator did not make.
 *
 * The intercept library (intercept/, `memsnap run --mode intercept`) sees every cudaMalloc,
 * cuMemAlloc, cuMemMap... of a process and reports each one here, after the real call
 * succeeded, with the API that made it ("cudaMalloc") and the return address of the call (in
 * the library that asked: libnccl, libcublas, the program). Each live allocation is one record
 * of a table sorted by address; a snapshot shows each as a segment of its own (pool "external")
 * holding one allocated block, with the API and the calling library named (segments.source,
 * segments.library). While recording, an allocation is the events segment_alloc (extra: the
 * API's label) then alloc, and a free is free_requested, free_completed, segment_free, so the
 * analysis counts this memory as reserved and allocated like the allocator's own.
 *
 * Stacks are taken without taking the GIL (Python frames only when the calling thread holds it):
 * these calls come from inside other libraries, which may hold their own locks (PyTorch's
 * allocator mutex around cudaMalloc) that a thread holding the GIL can be waiting for.
 *
 * Lock order: device locks (the snapshot's gather), then ext_lock (the ring takes no lock).
 * The table grows by doubling; a free moves the records above it down one (the live device
 * allocations of a process number in the thousands, not millions).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "history/history.h"
#include "history/livemap.h"
#include "internal.h"

static pthread_mutex_t ext_lock = PTHREAD_MUTEX_INITIALIZER;
static msi_external_block *records; /* the live allocations, sorted by ptr */
static size_t nrecords, records_cap;

/* The label ids of the API names seen, by the name's address: the intercept library passes
 * string literals, so a pointer compare finds the id without hashing the text. */
#define SOURCE_CACHE 64
static struct {
  const char *name;
  uint32_t id;
} source_cache[SOURCE_CACHE];

/* ext_lock held. */
static uint32_t source_id(const char *name) {
  unsigned slot = (unsigned)(((uintptr_t)name >> 3) % SOURCE_CACHE);
  if (source_cache[slot].name == name) return source_cache[slot].id;
  uint32_t id = msi_label_id(name);
  if (id != UINT32_MAX) {
    source_cache[slot].name = name;
    source_cache[slot].id = id;
  }
  return id == UINT32_MAX ? 0 : id;
}

/* Index of the first record with ptr >= p. ext_lock held. */
static size_t lower_bound(uintptr_t p) { return msi_lower_bound_addr(records, nrecords, sizeof *records, p); }

static void record_free_events(const msi_external_block *r, memsnap_stream_t stream, uint32_t stack) {
  if (!msi_ring_recording()) return;
  msi_history_add_free_unobserved(r->device, stream, r->ptr, r->size, stack);
  /* the segment's event carries the reason of its release, which the free's events do not have */
  msi_history_add_unobserved(MSI_EV_SEGMENT_FREE, r->device, stream, r->ptr, r->size, r->size, MEMSNAP_RELEASE_EXTERNAL, stack);
}

int memsnap_external_alloc(void *ptr, size_t size, int device, memsnap_stream_t stream, const char *source,
                           void *caller) {
  if (!ptr) {
    msi_error("memsnap_external_alloc: null pointer");
    return MEMSNAP_EINVAL;
  }
  if (msi_ensure_ready() != 0) return MEMSNAP_EBACKEND;
  uint32_t stack = msi_ring_recording() ? msi_stack_capture_from((uint64_t)(uintptr_t)caller, false) : 0;
  int rc = MEMSNAP_OK;
  pthread_mutex_lock(&ext_lock);
  uint32_t src = source_id(source ? source : "external");
  size_t at = lower_bound((uintptr_t)ptr);
  if (at < nrecords && records[at].ptr == (uintptr_t)ptr) {
    /* The device gave this address again: the free was not seen (made before the library was
     * loaded, or through a path not intercepted). The old record ends here. */
    record_free_events(&records[at], stream, stack);
    memmove(&records[at], &records[at + 1], sizeof *records * (nrecords - at - 1));
    nrecords--;
  }
  if (nrecords == records_cap) {
    size_t cap = records_cap ? records_cap * 2 : 256;
    msi_external_block *grown = realloc(records, sizeof *grown * cap);
    if (!grown) {
      msi_error("memsnap_external_alloc: out of host memory");
      rc = MEMSNAP_ENOMEM;
      goto out;
    }
    records = grown;
    records_cap = cap;
  }
  memmove(&records[at + 1], &records[at], sizeof *records * (nrecords - at));
  records[at] = (msi_external_block){(uintptr_t)ptr, size, stream, (uintptr_t)caller, stack, src, device};
  nrecords++;
  if (msi_ring_recording()) {
    msi_live_note_device(device); /* once a device: its name for a snapshot written after a death */
    msi_history_add_unobserved(MSI_EV_SEGMENT_ALLOC, device, stream, (uintptr_t)ptr, size, size, src, stack);
    msi_history_add_unobserved(MSI_EV_ALLOC, device, stream, (uintptr_t)ptr, size, size, 0, stack);
  }
out:
  pthread_mutex_unlock(&ext_lock);
  return rc;
}

int memsnap_external_free(void *ptr, size_t size, memsnap_stream_t stream, size_t *freed_bytes) {
  if (freed_bytes) *freed_bytes = 0;
  if (!ptr) return MEMSNAP_OK;
  if (msi_ensure_ready() != 0) return MEMSNAP_EBACKEND;
  uint32_t stack = msi_ring_recording() ? msi_stack_capture_for_free(0, false) : 0;
  int found = 0;
  pthread_mutex_lock(&ext_lock);
  uintptr_t lo = (uintptr_t)ptr, hi = size ? lo + size : lo + 1;
  size_t at = lower_bound(lo), end = at;
  while (end < nrecords && records[end].ptr < hi) {
    record_free_events(&records[end], stream, stack);
    if (freed_bytes) *freed_bytes += records[end].size;
    end++;
    found++;
  }
  memmove(&records[at], &records[end], sizeof *records * (nrecords - end));
  nrecords -= end - at;
  pthread_mutex_unlock(&ext_lock);
  if (!found) {
    msi_error("free of %p, which no intercepted allocation returned", ptr);
    return MEMSNAP_EINVAL;
  }
  return MEMSNAP_OK;
}

void msi_external_each(void (*fn)(const msi_external_block *b, void *arg), void *arg) {
  pthread_mutex_lock(&ext_lock);
  for (size_t i = 0; i < nrecords; i++) fn(&records[i], arg);
  pthread_mutex_unlock(&ext_lock);
}

void msi_external_reset(void) {
  pthread_mutex_lock(&ext_lock);
  free(records);
  records = NULL;
  nrecords = records_cap = 0;
  memset(source_cache, 0, sizeof source_cache); /* the labels go with the history */
  pthread_mutex_unlock(&ext_lock);
}

void msi_external_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) pthread_mutex_lock(&ext_lock);
  else pthread_mutex_unlock(&ext_lock);
}
