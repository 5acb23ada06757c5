/* uncached.c: the cache turned off. With memsnap_set_caching(0) (PyTorch's
 * caching_allocator_enable(False)) or MEMSNAP_NO_CACHING=1 (which PYTORCH_NO_CUDA_MEMORY_CACHING=1
 * sets), each request is a device allocation of its own (cuMemAlloc) and each free gives it back
 * at once (cuMemFree, which waits for the device), as PyTorch's allocator does then: memory
 * checkers (compute-sanitizer) see every tensor, nothing is cached.
 *
 * PyTorch leaves such allocations out of its statistics; so does memsnap. They are recorded: each
 * is an external allocation (external.c) whose source is "uncached", so a snapshot shows it as a
 * segment of pool "external" with its stack, and `memsnap analyze` counts it.
 *
 * The live ones are kept by address in a sorted array (this mode is for debugging, not speed),
 * under their own lock; nothing else is touched. api.c routes memsnap_alloc and the frees here
 * while the cache is off (and a free of an address the caching allocator does not know, so that
 * blocks made before a switch are freed the way they were made).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct uncached_block {
  uintptr_t ptr;
  size_t size;
  int device;
} uncached_block;

static pthread_mutex_t uncached_lock = PTHREAD_MUTEX_INITIALIZER;
static uncached_block *live;
static size_t nlive, live_cap;

/* Index of the first block at or above p. Lock held. */
static size_t lower_bound(uintptr_t p) { return msi_lower_bound_addr(live, nlive, sizeof *live, p); }

int msi_uncached_alloc(int device, size_t size, memsnap_stream_t stream, void **out, void *caller) {
  size_t rounded = (size + MSI_MIN_BLOCK_SIZE - 1) / MSI_MIN_BLOCK_SIZE * MSI_MIN_BLOCK_SIZE;
  uintptr_t p;
  pthread_mutex_lock(&uncached_lock);
  if (nlive == live_cap) {
    size_t cap = live_cap ? live_cap * 2 : 64;
    uncached_block *g = realloc(live, sizeof *g * cap);
    if (!g) {
      pthread_mutex_unlock(&uncached_lock);
      msi_error("device %d: out of host memory", device);
      return MEMSNAP_ENOMEM;
    }
    live = g;
    live_cap = cap;
  }
  int be = msi_be->mem_alloc(device, rounded, &p);
  if (be != MSI_BE_OK) {
    pthread_mutex_unlock(&uncached_lock);
    if (be == MSI_BE_OOM) {
      size_t free_bytes = 0, total = 0;
      msi_be->device_info(device, &free_bytes, &total, NULL, 0);
      msi_error("CUDA out of memory. Tried to allocate %zu bytes with the cache turned off (caching_allocator_enable"
                "(False) or PYTORCH_NO_CUDA_MEMORY_CACHING). GPU %d has a total capacity of %zu bytes of which %zu "
                "bytes are free.", size, device, total, free_bytes);
      return MEMSNAP_ENOMEM;
    }
    return MEMSNAP_EBACKEND;
  }
  size_t at = lower_bound(p);
  memmove(&live[at + 1], &live[at], sizeof *live * (nlive - at));
  live[at] = (uncached_block){p, rounded, device};
  nlive++;
  pthread_mutex_unlock(&uncached_lock);
  memsnap_external_alloc((void *)p, rounded, device, stream, "uncached", caller);
  *out = (void *)p;
  return MEMSNAP_OK;
}

int msi_uncached_free(void *ptr) {
  uintptr_t p = (uintptr_t)ptr;
  pthread_mutex_lock(&uncached_lock);
  size_t at = lower_bound(p);
  if (at == nlive || live[at].ptr != p) {
    pthread_mutex_unlock(&uncached_lock);
    return MEMSNAP_EINVAL;
  }
  uncached_block b = live[at];
  memmove(&live[at], &live[at + 1], sizeof *live * (nlive - at - 1));
  nlive--;
  pthread_mutex_unlock(&uncached_lock);
  memsnap_external_free(ptr, 0, NULL, NULL);
  return msi_be->mem_free(b.device, b.ptr, b.size) == MSI_BE_OK ? MEMSNAP_OK : MEMSNAP_EBACKEND;
}

bool msi_uncached_any(void) { return __atomic_load_n(&nlive, __ATOMIC_RELAXED) != 0; }

void msi_uncached_reset(void) {
  pthread_mutex_lock(&uncached_lock);
  for (size_t i = 0; i < nlive; i++) msi_be->mem_free(live[i].device, live[i].ptr, live[i].size);
  free(live);
  live = NULL;
  nlive = live_cap = 0;
  pthread_mutex_unlock(&uncached_lock);
}
