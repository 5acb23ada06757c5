/* bench_alloc.c: ns per malloc+free pair of memsnap (bench_workload.h), on the backend that
 * MEMSNAP_BACKEND selects (cuda on the GPU machine; sim works anywhere).
 *
 * usage: bench_alloc [ITERS]   prints "memsnap same_1MiB NS", "memsnap same_512B NS",
 *                              "memsnap random_20k NS" lines */
#include <stdio.h>
#include <stdlib.h>

#include "memsnap.h"

static void *bench_alloc_or_die(size_t size) {
  void *p = memsnap_malloc((ssize_t)size, 0, NULL);
  if (!p) {
    fprintf(stderr, "bench_alloc: %s\n", memsnap_last_error());
    exit(1);
  }
  return p;
}
#define BENCH_ALLOC(size) bench_alloc_or_die(size)
#define BENCH_FREE(ptr) memsnap_free((ptr), 0, 0, NULL)
#include "bench_workload.h"

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 1000000;
  if (!memsnap_backend_name()) {
    fprintf(stderr, "bench_alloc: %s\n", memsnap_last_error());
    return 1;
  }
  printf("memsnap same_512B %.1f\n", bench_same(512, iters));
  printf("memsnap same_1MiB %.1f\n", bench_same(1 << 20, iters));
  printf("memsnap random_20k %.1f\n", bench_random(iters));
  memsnap_stats_t s;
  memsnap_get_stats(0, &s);
  fprintf(stderr, "memsnap backend %s: peak reserved %.1f MiB, device allocs %lld\n", memsnap_backend_name(),
          (double)s.reserved_bytes[0].peak / 1048576.0, (long long)s.num_device_alloc);
  return 0;
}
