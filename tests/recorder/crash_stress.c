/* crash_stress.c: a recorded stress run to be killed at random instants (tests/intercept/test_crash.sh).
 *
 * THREADS threads (default 2) each make PAIRS allocate+free pairs of sizes from 512 B to 2 MiB on
 * the simulated devices (thread t on device t % DEVICES; MEMSNAP_SIM_DEVICES=DEVICES), keeping one
 * block in 16 until the end, and after each allocation and each free returns, count it in a shared
 * progress file (plain stores into a MAP_SHARED page, no system call): per thread [4t] allocations,
 * [4t+1] frees completed, [4t+2] the bytes asked for that it holds, [4t+3] its device. Every block
 * it keeps is told once as a parameter of module "layer.T" (one in four as an optimizer's state),
 * as PyTorch's layer tells a model's tensors, so the roles must outlive the ring's wraps. Whatever
 * kills the process, every allocation and free counted there had recorded its events before.
 * After the pairs it prints "done" and waits for its end. It sleeps 1 ms every 16 pairs; thread 0
 * empties the cache every 700 pairs (a gc run: segments freed, or unmapped with expandable ones).
 *
 * With DUMP_AT and DUMP_PATH: once thread 0 has made DUMP_AT pairs, it frees the blocks it kept and
 * empties the cache (segments freed, or unmapped), every thread stops after its
 * current pair, thread 0 writes memsnap_dump(DUMP_PATH), sets word 255 of the progress file to 1,
 * ends an iteration (memsnap_step_event: the live mapping's state taken again, stalled half way
 * for CRASH_STRESS_STALL_MS: MEMSNAP_TEST_STATE_STALL_MS set for it alone) and waits: killed now, its recovered snapshot must
 * say what the dump says.
 *
 * usage: MEMSNAP_BACKEND=sim MEMSNAP_RECORD=1 crash_stress PROGRESS_FILE [PAIRS [THREADS [DEVICES [DUMP_AT DUMP_PATH]]]]
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "memsnap.h"

static volatile uint64_t *progress;
static long pairs = 4000, devices = 1, dump_at = -1;
static const char *dump_path;
static atomic_int stop, stopped;
static long nthreads;

/* Tells the block at p of `size` bytes on `device` a parameter (or optimizer state) of layer.T. */
static void tell(void *p, size_t size, int device, long t, bool state) {
  char name[32];
  snprintf(name, sizeof name, "layer.%ld", t);
  uint64_t storage = (uint64_t)(uintptr_t)p, bytes = size;
  uint8_t role = state ? MEMSNAP_TENSOR_OPTIMIZER_STATE : MEMSNAP_TENSOR_PARAMETER;
  int32_t label = memsnap_label(name);
  int16_t dev = (int16_t)device;
  memsnap_tensor_events(1, &storage, &bytes, &role, &label, &dev);
}

static void *worker(void *arg) {
  long t = (long)arg;
  int device = (int)(t % devices);
  progress[4 * t + 3] = (uint64_t)device;
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
  void *kept[64];
  int nkept = 0;
  for (long i = 0; i < pairs; i++) {
    if (atomic_load(&stop)) break;
    if (t == 0 && i == dump_at) { /* its blocks freed and the cache emptied: segments freed (unmapped) */
      for (int k = 0; k < nkept; k++) memsnap_free(kept[k], 0, device, NULL);
      progress[4 * t + 1] += (uint64_t)nkept;
      progress[4 * t + 2] = 0;
      nkept = 0;
      memsnap_empty_cache();
      atomic_store(&stop, 1);
      break;
    }
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: a seeded PRNG per thread */
    ssize_t size = (ssize_t)(512u << (x % 13));
    void *p = memsnap_malloc(size, device, NULL);
    if (!p) continue;
    progress[4 * t]++;
    progress[4 * t + 2] += (uint64_t)size;
    if (i % 16 == 0 && nkept < 64) {
      kept[nkept++] = p;
      tell(p, (size_t)size, device, t, nkept % 4 == 0);
      continue;
    }
    memsnap_free(p, size, device, NULL);
    progress[4 * t + 1]++;
    progress[4 * t + 2] -= (uint64_t)size;
    if (i % 16 == 15) nanosleep(&(struct timespec){0, 1000000}, NULL); /* a run of a second or so, to kill at any instant */
    if (t == 0 && i % 700 == 699) memsnap_empty_cache(); /* a gc run now and then: segments freed (unmapped) */
  }
  (void)kept;
  atomic_fetch_add(&stopped, 1);
  if (t == 0 && dump_path && atomic_load(&stop)) {
    while (atomic_load(&stopped) < nthreads) nanosleep(&(struct timespec){0, 100000}, NULL);
    if (memsnap_dump(dump_path) != MEMSNAP_OK) fprintf(stderr, "crash_stress: dump: %s\n", memsnap_last_error());
    progress[255] = 1;
    if (getenv("CRASH_STRESS_STALL_MS")) /* this state's write stalled: the kill lands in it */
      setenv("MEMSNAP_TEST_STATE_STALL_MS", getenv("CRASH_STRESS_STALL_MS"), 1);
    memsnap_step_event(memsnap_label("crash_stress.step"), MEMSNAP_STEP_END); /* the state taken again: killed in it */
    progress[255] = 2;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: crash_stress PROGRESS_FILE [PAIRS [THREADS [DEVICES [DUMP_AT DUMP_PATH]]]]\n");
    return 2;
  }
  if (argc > 2) pairs = atol(argv[2]);
  nthreads = argc > 3 ? atol(argv[3]) : 2;
  if (nthreads < 1 || nthreads > 32) nthreads = 2;
  if (argc > 4) devices = atol(argv[4]);
  if (devices < 1 || devices > 8) devices = 1;
  if (argc > 6) {
    dump_at = atol(argv[5]);
    dump_path = argv[6];
  }
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0) return 1;
  progress = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (progress == MAP_FAILED) return 1;
  pthread_t tid[32];
  for (long t = 0; t < nthreads; t++) pthread_create(&tid[t], NULL, worker, (void *)t);
  for (long t = 0; t < nthreads; t++) pthread_join(tid[t], NULL);
  printf("done\n");
  fflush(stdout);
  for (;;) pause();
}
