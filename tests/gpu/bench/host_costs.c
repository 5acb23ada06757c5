/* host_costs.c: what the basic operations the recorder's hot path uses cost on this host, in ns
 * (rdtsc, clock_gettime, an atomic add, a thread-local of this program: not through
 * __tls_get_addr as the library's are, a cache-line write).
 * Issue 26: the GPU host runs memsnap's capture path several times slower than the development
 * machine even with its caches warm; this tells which operation is slow there.
 *
 * usage: make gpu-bench (tests/gpu/prepare.sh makes it) && taskset -c 5 build/host_costs
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static __thread uint64_t tls_word;
static _Atomic uint64_t counter;
static uint64_t ring[1 << 20];

#define N 2000000
#define TIME(name, body)                                          \
  do {                                                            \
    uint64_t t0 = now_ns();                                       \
    for (long i = 0; i < N; i++) { body; }                        \
    printf("%-28s %8.2f ns\n", name, (double)(now_ns() - t0) / N); \
  } while (0)

int main(void) {
  volatile uint64_t sink = 0;
  struct timespec ts;
  TIME("loop alone", sink += i);
  TIME("rdtsc", sink += __rdtsc());
  TIME("rdtscp", { unsigned a; sink += __rdtscp(&a); });
  TIME("clock_gettime(MONOTONIC)", { clock_gettime(CLOCK_MONOTONIC, &ts); sink += ts.tv_nsec; });
  TIME("atomic fetch_add", sink += atomic_fetch_add(&counter, 1));
  TIME("thread-local increment", { tls_word++; __asm__ volatile("" ::: "memory"); });
  TIME("sequential 64 B writes", { uint64_t *p = &ring[(i * 8) & ((1 << 20) - 1)]; for (int k = 0; k < 8; k++) p[k] = i; });
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  char cs[64] = "?";
  if (f && fgets(cs, sizeof cs, f)) printf("clocksource: %s", cs);
  if (f) fclose(f);
  return (int)(sink & 0);
}
