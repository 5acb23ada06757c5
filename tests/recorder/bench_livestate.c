/* bench_livestate.c: what the live mapping's state costs (docs/BENCHMARKS.md, "The live mapping's
 * state"): with LIVE blocks held on the simulated device, (1) one state taken (memsnap_record_clear
 * takes one at once: the copy under the device locks and the write into the mapping), the median of
 * 21; (2) allocate+free pairs with the ring in the mapping, which takes a state each quarter ring,
 * ns per pair (median of 7 repetitions of ITERS pairs). Compare (2) with MEMSNAP_LIVE=0 (the ring
 * on the heap, no state).
 *
 * usage: MEMSNAP_BACKEND=sim bench_livestate [LIVE [ITERS [MAX_ENTRIES]]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "memsnap.h"

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  long live = argc > 1 ? atol(argv[1]) : 10000, iters = argc > 2 ? atol(argv[2]) : 200000;
  long entries = argc > 3 ? atol(argv[3]) : 100000;
  if (memsnap_record_start((size_t)entries, "none") != MEMSNAP_OK) {
    fprintf(stderr, "bench_livestate: %s\n", memsnap_last_error());
    return 1;
  }
  void **held = malloc(sizeof *held * (size_t)live);
  for (long i = 0; i < live; i++) held[i] = memsnap_malloc(512 * (1 + i % 64), 0, NULL);
  double take[21], pair[7];
  for (int r = 0; r < 21; r++) {
    double t0 = now_ns();
    memsnap_record_clear();
    take[r] = now_ns() - t0;
  }
  for (int r = 0; r < 7; r++) {
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) memsnap_free(memsnap_malloc(4096, 0, NULL), 4096, 0, NULL);
    pair[r] = (now_ns() - t0) / (double)iters;
  }
  qsort(take, 21, sizeof *take, cmp);
  qsort(pair, 7, sizeof *pair, cmp);
  printf("live blocks %ld  max_entries %ld  state taken: %.1f us  pair: %.1f ns\n", live, entries, take[10] / 1e3, pair[3]);
  for (long i = 0; i < live; i++) memsnap_free(held[i], 0, 0, NULL);
  free(held);
  return 0;
}
