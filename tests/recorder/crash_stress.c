/* crash_stress.c: a recorded stress run to be killed at random instants (tests/intercept/test_crash.sh).
 *
 * THREADS threads (default 2) each make PAIRS allocate+free pairs of sizes from 512 B to 2 MiB on
 * the simulated device, keeping one block in 16 until the end, and after each allocation and each
 * free returns, count it in a shared progress file (two 64-bit counters a thread: allocations and
 * frees completed; plain stores into a MAP_SHARED page, no system call). Whatever kills the
 * process, every allocation and free counted there had recorded its events before. After the
 * pairs it prints "done" and waits for its end. It sleeps 1 ms every 16 pairs, so that a run of 4000
 * pairs lasts a few hundred milliseconds.
 *
 * usage: MEMSNAP_BACKEND=sim MEMSNAP_RECORD=1 crash_stress PROGRESS_FILE [PAIRS [THREADS]]
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "memsnap.h"

static volatile uint64_t *progress; /* [2 * thread]: allocations, [2 * thread + 1]: frees */
static long pairs = 4000;

static void *worker(void *arg) {
  long t = (long)arg;
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
  void *kept[64];
  int nkept = 0;
  for (long i = 0; i < pairs; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: a seeded PRNG per thread */
    ssize_t size = (ssize_t)(512u << (x % 13));
    void *p = memsnap_malloc(size, 0, NULL);
    if (!p) continue;
    progress[2 * t]++;
    if (i % 16 == 0 && nkept < 64) {
      kept[nkept++] = p;
      continue;
    }
    memsnap_free(p, size, 0, NULL);
    progress[2 * t + 1]++;
    if (i % 16 == 15) nanosleep(&(struct timespec){0, 1000000}, NULL); /* a run of a second or so, to kill at any instant */
  }
  (void)kept;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: crash_stress PROGRESS_FILE [PAIRS [THREADS]]\n");
    return 2;
  }
  if (argc > 2) pairs = atol(argv[2]);
  long threads = argc > 3 ? atol(argv[3]) : 2;
  if (threads < 1 || threads > 32) threads = 2;
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0) return 1;
  progress = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (progress == MAP_FAILED) return 1;
  pthread_t tid[32];
  for (long t = 0; t < threads; t++) pthread_create(&tid[t], NULL, worker, (void *)t);
  for (long t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  printf("done\n");
  fflush(stdout);
  for (;;) pause();
}
