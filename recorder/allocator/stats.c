/* stats.c: the allocator statistics, in torch.cuda.memory_stats() spelling.
 *
 * The counters themselves live in memsnap_stats_t and are updated inline by alloc.c
 * (msi_stat_inc/msi_stat_dec in internal.h). Here: the resets, and the flat table that
 * names each value with the dotted key PyTorch's memory_stats() uses, which the Python
 * module turns back into PyTorch's nested dict.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define ARRAY_STATS(X) X(allocation) X(segment) X(active) X(inactive_split) X(allocated_bytes) \
  X(reserved_bytes) X(active_bytes) X(inactive_split_bytes) X(requested_bytes)
#define SINGLE_STATS(X) X(oversize_allocations) X(oversize_segments)
#define COUNTERS(X) X(num_alloc_retries) X(num_ooms) X(num_sync_all_streams) X(num_device_alloc) \
  X(num_device_free) X(max_split_size) X(num_invalid_frees)

static void reset_peak(memsnap_stat_t *s) { s->peak = s->current; }
static void reset_accumulated(memsnap_stat_t *s) { s->allocated = s->freed = 0; }

void msi_stats_reset_peak(memsnap_stats_t *s) {
#define X(name) for (int k = 0; k < MEMSNAP_POOL_KINDS; k++) reset_peak(&s->name[k]);
  ARRAY_STATS(X)
#undef X
#define X(name) reset_peak(&s->name);
  SINGLE_STATS(X)
#undef X
}

void msi_stats_reset_accumulated(memsnap_stats_t *s) {
#define X(name) for (int k = 0; k < MEMSNAP_POOL_KINDS; k++) reset_accumulated(&s->name[k]);
  ARRAY_STATS(X)
#undef X
#define X(name) reset_accumulated(&s->name);
  SINGLE_STATS(X)
#undef X
  s->num_alloc_retries = s->num_ooms = s->num_sync_all_streams = 0;
  s->num_device_alloc = s->num_device_free = s->num_invalid_frees = 0;
}

/* ---- the flat table -------------------------------------------------------------------- */

#define N_ARRAY (9 * MEMSNAP_POOL_KINDS * 4)
#define N_SINGLE (2 * 4)
#define N_COUNTERS 7
#define N_STATS (N_ARRAY + N_SINGLE + N_COUNTERS)

static const char *const pool_names[MEMSNAP_POOL_KINDS] = {"all", "small_pool", "large_pool"};
static const char *const field_names[4] = {"current", "peak", "allocated", "freed"};

typedef struct flat_entry {
  char key[80];
  size_t offset; /* of the int64_t value in memsnap_stats_t */
} flat_entry;

static flat_entry flat[N_STATS];
static pthread_once_t flat_once = PTHREAD_ONCE_INIT;

static void add_stat(int *n, const char *key, size_t stat_offset) { /* key: at most 40 chars */
  for (int f = 0; f < 4; f++) {
    snprintf(flat[*n].key, sizeof flat[*n].key, "%s.%s", key, field_names[f]);
    flat[*n].offset = stat_offset + (size_t)f * sizeof(int64_t);
    (*n)++;
  }
}

static void build_flat(void) {
  int n = 0;
  char key[48];
#define X(name)                                                                        \
  for (int k = 0; k < MEMSNAP_POOL_KINDS; k++) {                                       \
    snprintf(key, sizeof key, "%s.%s", #name, pool_names[k]);                          \
    add_stat(&n, key, offsetof(memsnap_stats_t, name) + (size_t)k * sizeof(memsnap_stat_t)); \
  }
  ARRAY_STATS(X)
#undef X
#define X(name) add_stat(&n, #name, offsetof(memsnap_stats_t, name));
  SINGLE_STATS(X)
#undef X
#define X(name)                                                   \
  snprintf(flat[n].key, sizeof flat[n].key, "%s", #name);         \
  flat[n].offset = offsetof(memsnap_stats_t, name);               \
  n++;
  COUNTERS(X)
#undef X
}

int memsnap_stat_count(void) { return N_STATS; }

const char *memsnap_stat_key(int i) {
  pthread_once(&flat_once, build_flat);
  return i >= 0 && i < N_STATS ? flat[i].key : NULL;
}

int msi_stats_flatten(const memsnap_stats_t *s, int64_t *values, int capacity) {
  pthread_once(&flat_once, build_flat);
  int n = capacity < N_STATS ? capacity : N_STATS;
  for (int i = 0; i < n; i++) memcpy(&values[i], (const char *)s + flat[i].offset, sizeof(int64_t));
  return n;
}

