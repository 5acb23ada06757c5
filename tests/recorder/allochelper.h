/* allochelper.h: what the allocator tests on the simulated device share (test_alloc.c,
 * test_modes.c): a fresh library in a given environment, device 0's statistics, allocation on a
 * stream, and memsnap_check() that prints the broken invariant. */
#ifndef MEMSNAP_ALLOCHELPER_H
#define MEMSNAP_ALLOCHELPER_H

#include <stdint.h>

#include "memsnap.h"
#include "testhelper.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define S1 ((memsnap_stream_t)(uintptr_t)0x1000)
#define S2 ((memsnap_stream_t)(uintptr_t)0x2000)
#define S3 ((memsnap_stream_t)(uintptr_t)0x3000)

/* Every variable a test may set: unset before each configuration. */
static const char *const ah_vars[] = {
    "MEMSNAP_SIM_CAPACITY", "MEMSNAP_SIM_DEVICES", "MEMSNAP_MAX_SPLIT_SIZE_MB", "MEMSNAP_ROUNDUP_POWER2_DIVISIONS",
    "MEMSNAP_GARBAGE_COLLECTION_THRESHOLD", "MEMSNAP_MEMORY_FRACTION", "MEMSNAP_OOM", "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF", "MEMSNAP_MAX_NON_SPLIT_ROUNDING_MB", "MEMSNAP_EXPANDABLE_SEGMENTS", "MEMSNAP_ALLOCATOR",
    "MEMSNAP_SIM_OLD_DRIVER", "MEMSNAP_SIM_PLACEMENT", "MEMSNAP_RECORD", "MEMSNAP_INVALID_FREE", "MEMSNAP_STACKS", "MEMSNAP_NO_CACHING",
    "PYTORCH_NO_CUDA_MEMORY_CACHING", "MEMSNAP_GRAPH_CAPTURE_RECORD_STREAM_REUSE", NULL};

/* Shuts the library down and sets "NAME=value;..." on the simulated device. */
static inline void fresh(const char *settings) {
  memsnap_shutdown();
  th_environment(ah_vars, settings);
  setenv("MEMSNAP_BACKEND", "sim", 1);
}

static inline memsnap_stats_t stats(void) {
  memsnap_stats_t s;
  memsnap_get_stats(0, &s);
  return s;
}

static inline void *alloc_on(size_t size, memsnap_stream_t s) { return memsnap_malloc((ssize_t)size, 0, s); }
static inline void *alloc(size_t size) { return alloc_on(size, S1); }
static inline void release(void *p) { memsnap_free(p, 0, 0, S1); }
static inline uintptr_t addr(void *p) { return (uintptr_t)p; }
static inline int check_ok(void) {
  int rc = memsnap_check(0);
  if (rc) printf("  memsnap_check: %s\n", memsnap_last_error());
  return rc == 0;
}

#endif
