/* test_stress.c: many threads allocating, freeing and crossing streams at once.
 *
 * THREADS threads (default 8) each run ITER operations (default 200000) with a seeded PRNG:
 * allocate a random size on one of four streams, free a random live block, sometimes mark a
 * block used on another stream, sometimes complete a stream's work. Each thread checks that its
 * live blocks never overlap anyone's (a shared interval table would serialise the threads, so
 * each block is filled with its owner's tag in a shadow map keyed by address instead: a block
 * handed out twice would be seen by the second owner). A checker thread runs memsnap_check()
 * throughout, and a dumper thread writes snapshots of the recorded history while the workers
 * run; each one must read back whole. At the end everything is freed, statistics return to
 * zero and invariants hold. The environment chooses the allocator mode
 * (MEMSNAP_EXPANDABLE_SEGMENTS=1, MEMSNAP_ALLOCATOR=async): run_tests.sh runs all three.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memsnap.h"
#include "testhelper.h"

#define LIVE 64
#define SHADOW_BITS 22

static int threads = 8;
static long iters = 200000;
static atomic_int stop_checker;
static atomic_int check_failures, overlap_failures, alloc_failures;
static _Atomic(uintptr_t) shadow[1 << SHADOW_BITS]; /* block address -> owner tag */

static size_t shadow_slot(uintptr_t p) { return (size_t)((p >> 9) * 0x9E3779B97F4A7C15ull >> (64 - SHADOW_BITS)); }

/* The shadow map: an insert-only open-addressing table of every block address ever handed
 * out, each slot (address << 8 | owner tag), tag 0 when no one holds it. Addresses are never
 * removed (no tombstones, so probe chains stay as short as the set of distinct addresses). */

/* Claims address p for `tag`; fails if another live owner holds the same address. */
static bool claim(uintptr_t p, uintptr_t tag) {
  size_t i = shadow_slot(p);
  for (;;) {
    uintptr_t cur = atomic_load(&shadow[i]);
    if (cur == 0) { /* a new address */
      if (atomic_compare_exchange_strong(&shadow[i], &cur, (p << 8) | tag)) return true;
      continue; /* someone took the slot: look at it again */
    }
    if ((cur >> 8) == p) {
      uintptr_t free_slot = p << 8;
      if (atomic_compare_exchange_strong(&shadow[i], &free_slot, (p << 8) | tag)) return true;
      return false; /* held by a live owner: the same address handed out twice */
    }
    i = (i + 1) & ((1u << SHADOW_BITS) - 1);
  }
}

static void unclaim(uintptr_t p) {
  size_t i = shadow_slot(p);
  while ((atomic_load(&shadow[i]) >> 8) != p) i = (i + 1) & ((1u << SHADOW_BITS) - 1);
  atomic_store(&shadow[i], p << 8);
}

static void *worker(void *arg) {
  uintptr_t tag = (uintptr_t)arg + 2;
  unsigned seed = (unsigned)tag * 2654435761u;
  void *live[LIVE] = {0};
  memsnap_stream_t streams[4] = {(memsnap_stream_t)(uintptr_t)0x10, (memsnap_stream_t)(uintptr_t)0x20,
                                 (memsnap_stream_t)(uintptr_t)(0x100 * tag), (memsnap_stream_t)(uintptr_t)0x40};
  memsnap_stream_t used_on[LIVE];
  for (long it = 0; it < iters; it++) {
    seed = seed * 1103515245u + 12345u;
    int slot = (int)((seed >> 8) % LIVE);
    unsigned r = (seed >> 16) & 0xff;
    if (live[slot]) {
      if (r < 16) memsnap_record_stream(live[slot], streams[(r >> 2) & 3]);
      unclaim((uintptr_t)live[slot]);
      memsnap_free(live[slot], 0, 0, used_on[slot]);
      live[slot] = NULL;
    } else {
      seed = seed * 1103515245u + 12345u;
      size_t size = (seed & 7) == 0 ? 1 + (seed >> 8) % (16u << 20) : 1 + (seed >> 8) % (256u << 10);
      memsnap_stream_t s = streams[(seed >> 4) & 3];
      void *p = memsnap_malloc((ssize_t)size, 0, s);
      if (!p) {
        atomic_fetch_add(&alloc_failures, 1);
        continue;
      }
      if (!claim((uintptr_t)p, tag)) atomic_fetch_add(&overlap_failures, 1);
      live[slot] = p;
      used_on[slot] = s;
    }
    if (r == 0xff) memsnap_sim_synchronize(streams[it & 3]);
  }
  for (int i = 0; i < LIVE; i++)
    if (live[i]) {
      unclaim((uintptr_t)live[i]);
      memsnap_free(live[i], 0, 0, used_on[i]);
    }
  return NULL;
}

static atomic_int dumps, bad_dumps;

/* Writes snapshots while the workers allocate; each must be a consistent SQLite file whose
 * blocks tile their segments and whose statistics agree with its blocks and segments (all
 * taken at one moment). */
static void *dumper(void *arg) {
  (void)arg;
  char path[128], cmd[512];
  snprintf(path, sizeof path, "/tmp/memsnap-stress-%d.db", (int)getpid());
  while (!atomic_load(&stop_checker)) {
    if (memsnap_dump(path) != MEMSNAP_OK) {
      printf("  dump: %s\n", memsnap_last_error());
      atomic_fetch_add(&bad_dumps, 1);
    } else {
      const char *tests = getenv("MEMSNAP_TESTS_DIR"); /* set by run_tests.sh */
      snprintf(cmd, sizeof cmd, "python3 %s/check_snapshot.py %s", tests ? tests : "tests", path);
      if (system(cmd) != 0) atomic_fetch_add(&bad_dumps, 1);
      atomic_fetch_add(&dumps, 1);
    }
    usleep(50000);
  }
  unlink(path);
  return NULL;
}

static long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

static void *checker(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_checker)) {
    long start = now_us();
    if (memsnap_check(0) != 0) {
      printf("  check: %s\n", memsnap_last_error());
      atomic_fetch_add(&check_failures, 1);
    }
    /* The check holds the device lock for as long as it walks every block: let the workers run
       ten times as long between checks, so the check's cost stays bounded as the cache grows. */
    usleep((useconds_t)(2000 + 10 * (now_us() - start)));
  }
  return NULL;
}

int main(void) {
  if (getenv("THREADS")) threads = atoi(getenv("THREADS"));
  if (getenv("ITER")) iters = atol(getenv("ITER"));
  setenv("MEMSNAP_BACKEND", "sim", 1);
  setenv("MEMSNAP_SIM_CAPACITY", "64G", 1);
  setenv("MEMSNAP_STACKS", "native", 1);
  memsnap_record_start(200000, NULL);
  pthread_t tids[64], check_tid, dump_tid;
  pthread_create(&check_tid, NULL, checker, NULL);
  pthread_create(&dump_tid, NULL, dumper, NULL);
  for (int i = 0; i < threads && i < 64; i++) pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)i);
  for (int i = 0; i < threads && i < 64; i++) pthread_join(tids[i], NULL);
  atomic_store(&stop_checker, 1);
  pthread_join(check_tid, NULL);
  pthread_join(dump_tid, NULL);
  printf("  %d snapshots written during the run\n", atomic_load(&dumps));
  CHECK("stress: snapshots under load are whole and consistent", atomic_load(&dumps) > 0 && atomic_load(&bad_dumps) == 0);
  printf("  %d threads x %ld operations\n", threads, iters);
  CHECK("stress: no allocation failed", atomic_load(&alloc_failures) == 0);
  CHECK("stress: no address handed out twice", atomic_load(&overlap_failures) == 0);
  CHECK("stress: invariants held while running", atomic_load(&check_failures) == 0);
  memsnap_empty_cache();
  memsnap_stats_t s;
  memsnap_get_stats(0, &s);
  CHECK("stress: all freed, nothing reserved after empty_cache",
        s.allocated_bytes[MEMSNAP_POOL_ALL].current == 0 && s.active[MEMSNAP_POOL_ALL].current == 0 &&
            s.reserved_bytes[MEMSNAP_POOL_ALL].current == 0 && s.requested_bytes[MEMSNAP_POOL_ALL].current == 0);
  CHECK("stress: invariants at the end", memsnap_check(0) == 0);
  memsnap_shutdown();
  TEST_DONE();
}
