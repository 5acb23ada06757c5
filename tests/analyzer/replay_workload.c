/* replay_workload.c [STEPS [SEED]]: a deterministic training-like program for the replay tests
 * (tests/analyzer/test_replay.sh): run it on the simulated device under some allocator settings with
 * recording on, and `memsnap replay` of its snapshot under other settings must give what running
 * it under those settings records.
 *
 * Each step allocates activations of mixed sizes (small-pool blocks, 1-10 MiB blocks that share
 * 20 MiB segments, large blocks with odd sizes) on two streams and two devices, frees them in a
 * shuffled order, keeps a few blocks across steps, uses some blocks on a second stream
 * (record_stream, completed a step later) and empties the cache every fifth step. The sizes come
 * from a seeded generator, so every run under any settings makes the same requests.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "memsnap.h"

static uint64_t rng_state;
static uint64_t next_random(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static size_t random_size(void) {
  uint64_t r = next_random() % 100;
  if (r < 55) return 512 + next_random() % (1 << 20);               /* small pool */
  if (r < 85) return (1 << 20) + next_random() % (9 << 20);          /* 1 to 10 MiB */
  return (10 << 20) + next_random() % (150 << 20);                   /* large, odd sizes */
}

#define LIVE 64

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 40;
  rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
  memsnap_stream_t side = (memsnap_stream_t)(uintptr_t)0x5100;
  memsnap_stream_t other = (memsnap_stream_t)(uintptr_t)0x5200;
  int devices = memsnap_device_count() > 1 ? 2 : 1;
  void *kept[8] = {0};
  int nused = 0;
  for (int d = 0; d < devices; d++) kept[d] = memsnap_malloc((ssize_t)((37 << 20) + 4096 * d), d, NULL);
  for (int step = 0; step < steps; step++) {
    memsnap_mark("step");
    void *live[LIVE];
    int dev[LIVE];
    memsnap_stream_t str[LIVE];
    int n = 8 + (int)(next_random() % (LIVE - 8));
    for (int i = 0; i < n; i++) {
      dev[i] = devices > 1 && next_random() % 4 == 0 ? 1 : 0;
      str[i] = next_random() % 5 == 0 ? side : NULL;
      live[i] = memsnap_malloc((ssize_t)random_size(), dev[i], str[i]);
      if (!live[i]) {
        fprintf(stderr, "replay_workload: %s\n", memsnap_last_error());
        return 1;
      }
      if (i % 7 == 3) { /* free a few early: holes to reuse */
        memsnap_free(live[i], 0, dev[i], str[i]);
        live[i] = NULL;
      }
    }
    /* the work of last step's blocks on the other stream is done */
    memsnap_sim_synchronize(other);
    nused = 0;
    for (int i = n - 1; i > 0; i--) { /* free in a shuffled order */
      int j = (int)(next_random() % (uint64_t)(i + 1));
      void *t = live[i]; live[i] = live[j]; live[j] = t;
      int td = dev[i]; dev[i] = dev[j]; dev[j] = td;
      memsnap_stream_t ts = str[i]; str[i] = str[j]; str[j] = ts;
    }
    for (int i = 0; i < n; i++) {
      if (!live[i]) continue;
      if (i < 2 && nused < 8) { /* used on another stream, freed before that work is done */
        memsnap_record_stream(live[i], other);
        nused++;
      }
      if (i == n - 1 && step % 3 == 0 && kept[2 + dev[i]] == NULL) { /* kept for a while */
        kept[2 + dev[i]] = live[i];
        continue;
      }
      memsnap_free(live[i], 0, dev[i], str[i]);
    }
    if (step % 3 == 2)
      for (int d = 0; d < devices; d++)
        if (kept[2 + d]) {
          memsnap_release(kept[2 + d]);
          kept[2 + d] = NULL;
        }
    if (step % 5 == 4) memsnap_empty_cache();
  }
  for (int i = 0; i < 8; i++)
    if (kept[i]) memsnap_release(kept[i]);
  memsnap_shutdown(); /* writes MEMSNAP_DUMP */
  return 0;
}
