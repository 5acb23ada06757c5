/* bench_workload.h: the allocation workloads of the allocator benchmarks, shared by
 * bench_alloc.c (memsnap) and bench_native.cc (PyTorch's c10 CUDACachingAllocator) so both
 * sides run exactly the same sequence of sizes.
 *
 *   same:    one size, malloc then free, ITERS times (the cached fast path)
 *   random:  LIVE blocks alive; each step frees a random one and allocates a random size in
 *            its place (sizes log-uniform from 256 B to 4 MiB, so both pools, splits and
 *            merges are exercised)
 *
 * The including file defines BENCH_ALLOC(size) and BENCH_FREE(ptr) before including this.
 * Times are wall-clock nanoseconds per malloc+free pair; the median of REPS repetitions.
 */
#ifndef BENCH_WORKLOAD_H
#define BENCH_WORKLOAD_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define BENCH_LIVE 20000
#define BENCH_REPS 7

static inline uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t bench_rng(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}

static inline size_t bench_random_size(uint64_t *s) {
  double u = (double)(bench_rng(s) >> 11) / 9007199254740992.0;
  return (size_t)exp(log(256.0) + u * (log(4194304.0) - log(256.0)));
}

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return v[n / 2];
}

/* ns per pair for one size. */
static double bench_same(size_t size, long iters) {
  double t[BENCH_REPS];
  for (long i = 0; i < 1000; i++) BENCH_FREE(BENCH_ALLOC(size)); /* warm: segment cached */
  for (int r = 0; r < BENCH_REPS; r++) {
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < iters; i++) BENCH_FREE(BENCH_ALLOC(size));
    t[r] = (double)(bench_now_ns() - t0) / (double)iters;
  }
  return bench_median(t, BENCH_REPS);
}

/* ns per pair with BENCH_LIVE random blocks alive. */
static double bench_random(long iters) {
  static void *live[BENCH_LIVE];
  static size_t sizes[2 * 1024 * 1024];
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < BENCH_LIVE; i++) live[i] = BENCH_ALLOC(bench_random_size(&s));
  long n = iters < (long)(sizeof sizes / sizeof sizes[0]) ? iters : (long)(sizeof sizes / sizeof sizes[0]);
  uint32_t *slots = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)n);
  for (long i = 0; i < n; i++) { /* draw outside the timed loop */
    sizes[i] = bench_random_size(&s);
    slots[i] = (uint32_t)(bench_rng(&s) % BENCH_LIVE);
  }
  for (long i = 0; i < n; i++) { /* warm: reach a steady state of the cache */
    BENCH_FREE(live[slots[i]]);
    live[slots[i]] = BENCH_ALLOC(sizes[i]);
  }
  double t[BENCH_REPS];
  for (int r = 0; r < BENCH_REPS; r++) {
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
      BENCH_FREE(live[slots[i]]);
      live[slots[i]] = BENCH_ALLOC(sizes[i]);
    }
    t[r] = (double)(bench_now_ns() - t0) / (double)n;
  }
  for (int i = 0; i < BENCH_LIVE; i++) BENCH_FREE(live[i]);
  free(slots);
  return bench_median(t, BENCH_REPS);
}

#endif
