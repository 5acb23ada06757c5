/* gen_releases.c DIR: records snapshots of the allocator releasing cached memory by itself, with
 * known answers, on a simulated 1 GiB device (tests/analyzer/test_releases.sh and test_replay.sh
 * check them):
 *   retry.db        600 MiB allocated and freed (cached), then a 700 MiB request: the device
 *                   refuses it, the allocator releases the 600 MiB segment and retries: served;
 *   retry_oom.db    300 MiB held, 200 MiB cached, then an 800 MiB request: the 200 MiB are
 *                   released, the retry fails: out of memory;
 *   oversize.db     max_split_size_mb 256: 600 MiB cached (an oversize block), then 700 MiB: the
 *                   oversize block is released first (not the whole cache), then the retry;
 *   empty_cache.db  100 MiB and 50 MiB cached, then memsnap_empty_cache(): one call, 150 MiB
 *                   in two segments; then a 10 MiB allocation;
 *   gc.db           memory fraction 0.5 (512 MiB), garbage_collection_threshold 0.5: three
 *                   100 MiB segments cached, then a 150 MiB request: garbage collection releases
 *                   them (300 MiB) before the device is asked, and no retry happens;
 *   expandable.db   expandable segments: 600 MiB cached on a side stream, then 700 MiB on the
 *                   default stream: the retry unmaps the side stream's 600 MiB of pages; then the
 *                   700 MiB are freed and memsnap_empty_cache() unmaps them;
 *   async.db        the async mode: 100 MiB allocated and freed (the driver's pool keeps it),
 *                   then memsnap_empty_cache() trims the pool: one unmap of 100 MiB;
 *   frag.db         the replay's suggestion: 11 blocks of 9 MiB live together, each pair in a
 *                   20 MiB segment (120 MiB reserved); expandable segments map 100 MiB;
 *   frag_oom.db     400 MiB cached, 100 MiB taken from it (the segment is split and cannot be
 *                   released), then 700 MiB: out of memory; expandable segments make it
 *                   fit (the 300 MiB free pages are unmapped, 700 MiB mapped).
 * Each site is a function of its own (sites.h), so the tests find the stacks by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memsnap.h"
#include "sites.h"

#define MiB ((size_t)1 << 20)

SITE(cached_block)
SITE(big_request)
SITE(held_block)
SITE(small_block)
SITE(activation)

/* A cached block's site on another stream than the default one. */
static __attribute__((noipa)) void *side_block(size_t n, memsnap_stream_t stream) {
  void *p = memsnap_malloc((ssize_t)n, 0, stream);
  __asm__ volatile("" ::: "memory");
  return p;
}

static __attribute__((noipa)) void empty_cache_call(void) {
  memsnap_empty_cache();
  __asm__ volatile("" ::: "memory");
}

static void release(void *p) { memsnap_free(p, 0, 0, NULL); }

/* Starts a recording on a fresh 1 GiB simulated device with `env` set (NAME=VALUE or NULL). */
static void start(const char *env, const char *env2) {
  setenv("MEMSNAP_BACKEND", "sim", 1);
  setenv("MEMSNAP_STACKS", "native", 1);
  setenv("MEMSNAP_SIM_CAPACITY", "1G", 1);
  unsetenv("MEMSNAP_EXPANDABLE_SEGMENTS");
  unsetenv("MEMSNAP_MEMORY_FRACTION");
  unsetenv("MEMSNAP_GARBAGE_COLLECTION_THRESHOLD");
  unsetenv("MEMSNAP_MAX_SPLIT_SIZE_MB");
  unsetenv("MEMSNAP_ALLOCATOR");
  const char *sets[] = {env, env2};
  for (int i = 0; i < 2; i++)
    if (sets[i]) {
      char name[128];
      const char *eq = strchr(sets[i], '=');
      snprintf(name, sizeof name, "%.*s", (int)(eq - sets[i]), sets[i]);
      setenv(name, eq + 1, 1);
    }
  memsnap_record_start(0, NULL);
}

static int dump(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int rc = memsnap_dump(path) != MEMSNAP_OK;
  if (rc) fprintf(stderr, "gen_releases: %s\n", memsnap_last_error());
  memsnap_shutdown();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gen_releases DIR\n");
    return 2;
  }
  const char *dir = argv[1];
  int rc = 0;

  start(NULL, NULL);
  release(cached_block(600 * MiB));
  rc |= big_request(700 * MiB) == NULL;
  rc |= dump(dir, "retry.db");

  start(NULL, NULL);
  rc |= held_block(300 * MiB) == NULL;
  release(cached_block(200 * MiB));
  rc |= big_request(800 * MiB) != NULL; /* must fail */
  rc |= dump(dir, "retry_oom.db");

  start("MEMSNAP_MAX_SPLIT_SIZE_MB=256", NULL);
  release(cached_block(600 * MiB));
  rc |= big_request(700 * MiB) == NULL;
  rc |= dump(dir, "oversize.db");

  start(NULL, NULL);
  void *a = cached_block(100 * MiB), *b = cached_block(50 * MiB);
  release(a);
  release(b);
  empty_cache_call();
  rc |= small_block(10 * MiB) == NULL;
  rc |= dump(dir, "empty_cache.db");

  start("MEMSNAP_MEMORY_FRACTION=0.5", "MEMSNAP_GARBAGE_COLLECTION_THRESHOLD=0.5");
  void *c[3];
  for (int i = 0; i < 3; i++) c[i] = cached_block(100 * MiB);
  for (int i = 0; i < 3; i++) release(c[i]);
  rc |= big_request(150 * MiB) == NULL;
  rc |= dump(dir, "gc.db");

  start("MEMSNAP_EXPANDABLE_SEGMENTS=1", NULL);
  memsnap_stream_t side = (memsnap_stream_t)(uintptr_t)0x5100;
  void *s = side_block(600 * MiB, side);
  memsnap_free(s, 0, 0, side);
  void *big = big_request(700 * MiB);
  rc |= big == NULL;
  release(big);
  empty_cache_call();
  rc |= dump(dir, "expandable.db");

  start("MEMSNAP_ALLOCATOR=async", NULL);
  release(cached_block(100 * MiB));
  empty_cache_call();
  rc |= dump(dir, "async.db");

  start(NULL, NULL);
  void *blocks[11];
  for (int i = 0; i < 11; i++) blocks[i] = activation(9 * MiB);
  for (int i = 0; i < 11; i++) release(blocks[i]);
  rc |= dump(dir, "frag.db");

  start(NULL, NULL);
  release(cached_block(400 * MiB));
  rc |= held_block(100 * MiB) == NULL;
  rc |= big_request(700 * MiB) != NULL; /* must fail */
  rc |= dump(dir, "frag_oom.db");
  return rc;
}
