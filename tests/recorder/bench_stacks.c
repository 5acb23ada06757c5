/* bench_stacks.c: what recording stacks costs an allocate+free pair made N calls deep, on the
 * simulated device (docs/BENCHMARKS.md, "Stacks at depth").
 *
 * Built twice: as the program build/tests/bench_stacks (native frames: the pairs are made from
 * a C function DEPTH calls below main) and as build/tests/libbench_stacks.so, whose
 * bench_stacks_pairs() tests/recorder/bench_stacks.py calls through ctypes from a Python
 * function DEPTH calls deep (Python frames).
 *
 * usage: bench_stacks [--callers N] [ITERS [DEPTH...]]
 *   prints one line per depth: "depth D  off X  none X  native X  python X  all X" in ns per
 *   pair (the median of REPS repetitions; within a repetition the modes take turns, so a drift
 *   of the machine's speed moves them together). "off" is not recording; the others record with
 *   MEMSNAP_STACKS set to that mode. Depth counts the benchmark's own frames between main and
 *   the function that allocates (main and libc's start add four more). With --callers N the
 *   pairs are made at one site, 10 calls below one of N caller functions taken in turn (one
 *   allocation path under many ops, as PyTorch's): N stacks that begin alike and differ far
 *   out; depth then counts the frames above the callers.
 *   BENCH_EVICT_KB=N (environment): N KiB of other memory written after each allocation and
 *   each free of bench_stacks_pairs (not --callers), as a program's own work between two
 *   allocations pushes the recorder's data out of the nearest cache (32: the first-level
 *   cache's size; docs/BENCHMARKS.md, "Cold caches double a capture's cost").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memsnap.h"

#define REPS 7

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* BENCH_EVICT_KB=N: N KiB of other memory written between the allocation and the free and after
 * the free, as a program's own work between two allocations (PyTorch's dispatcher, the driver)
 * pushes the recorder's data out of the nearest caches; the same work in every mode. */
static volatile uint64_t *evict_buf;
static size_t evict_words;

static void evict_setup(void) {
  const char *kb = getenv("BENCH_EVICT_KB");
  if (evict_buf || !kb || !*kb) return;
  char *end;
  long n = strtol(kb, &end, 10);
  if (*end || n < 0 || n > 1024 * 1024) {
    fprintf(stderr, "bench_stacks: BENCH_EVICT_KB takes 0 to 1048576 (KiB), not '%s'\n", kb);
    exit(2);
  }
  if (n == 0) return;
  evict_words = (size_t)n * 1024 / sizeof(uint64_t);
  evict_buf = calloc(evict_words, sizeof(uint64_t));
  if (!evict_buf) {
    fprintf(stderr, "bench_stacks: no memory for BENCH_EVICT_KB=%ld\n", n);
    exit(1);
  }
}

static inline void evict(void) {
  for (size_t i = 0; i < evict_words; i += 8) evict_buf[i]++;
}

/* ns per pair of `iters` pairs of 512 bytes (the cached fast path), made from this frame.
 * Exported for the Python driver. */
__attribute__((noipa)) double bench_stacks_pairs(long iters) {
  evict_setup();
  uint64_t t0 = now_ns();
  for (long i = 0; i < iters; i++) {
    void *p = memsnap_malloc(512, 0, NULL);
    evict();
    memsnap_free(p, 512, 0, NULL);
    evict();
  }
  return (double)(now_ns() - t0) / (double)iters;
}

/* --callers: one pair at the end of a common path 10 frames long, from one of NCALLERS callers
 * (many_callers.h). */
static inline __attribute__((always_inline)) void sites_leaf(void) {
  void *p = memsnap_malloc(512, 0, NULL);
  memsnap_free(p, 512, 0, NULL);
}
#define MANY_CALLERS_LEAF() sites_leaf()
#include "many_callers.h"
static int ncallers; /* 0: bench_stacks_pairs */

static __attribute__((noipa)) double sites_pairs(long iters) {
  uint64_t t0 = now_ns();
  for (long i = 0; i < iters; i++) callers[i % ncallers](10);
  return (double)(now_ns() - t0) / (double)iters;
}

/* Calls bench_stacks_pairs (or sites_pairs) `depth` - 1 frames further down. */
static __attribute__((noipa)) double descend(int depth, long iters) {
  double r = depth > 1 ? descend(depth - 1, iters) : ncallers ? sites_pairs(iters) : bench_stacks_pairs(iters);
  __asm__ volatile("" ::: "memory"); /* not a tail call: keep this frame */
  return r;
}

#ifndef BENCH_LIBRARY
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static const char *const modes[] = {"off", "none", "native", "python", "all"};
enum { NMODES = sizeof modes / sizeof modes[0] };

/* One pair run at `depth` with recording as `mode` says. */
static double run_mode(const char *mode, int depth, long iters) {
  if (strcmp(mode, "off") == 0) memsnap_record_stop();
  else if (memsnap_record_start(0, mode) != MEMSNAP_OK) {
    fprintf(stderr, "bench_stacks: %s\n", memsnap_last_error());
    exit(1);
  }
  double ns = descend(depth, iters);
  memsnap_record_stop();
  return ns;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--callers") == 0) {
    ncallers = argc > 2 ? atoi(argv[2]) : 0;
    if (ncallers < 1 || ncallers > NCALLERS) {
      fprintf(stderr, "bench_stacks: --callers takes 1 to %d\n", NCALLERS);
      return 2;
    }
    argc -= 2;
    argv += 2;
  }
  long iters = argc > 1 ? atol(argv[1]) : 1000000;
  int depths[16] = {5, 30, 100}, ndepths = 3;
  if (argc > 2) {
    ndepths = 0;
    for (int i = 2; i < argc && ndepths < 16; i++) depths[ndepths++] = atoi(argv[i]);
  }
  setenv("MEMSNAP_BACKEND", "sim", 0);
  if (!memsnap_backend_name()) {
    fprintf(stderr, "bench_stacks: %s\n", memsnap_last_error());
    return 1;
  }
  for (int d = 0; d < ndepths; d++) {
    double t[NMODES][REPS];
    for (int m = 0; m < NMODES; m++) run_mode(modes[m], depths[d], iters / 10 + 1); /* warm */
    for (int r = 0; r < REPS; r++)
      for (int m = 0; m < NMODES; m++) t[m][r] = run_mode(modes[m], depths[d], iters);
    printf("depth %3d", depths[d]);
    for (int m = 0; m < NMODES; m++) {
      qsort(t[m], REPS, sizeof t[m][0], cmp_double);
      printf("  %s %.1f", modes[m], t[m][REPS / 2]);
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}
#else
/* The Python driver's entry point: `depth` - 1 C frames below the caller, then the pairs. */
double bench_stacks_descend(int depth, long iters) { return descend(depth, iters); }
#endif
