/* gen_snapshots.c DIR: records snapshots with known answers for the analyzer's tests, on the
 * simulated device (exact sizes, no GPU):
 *   leak.db       six iterations marked "step 1".."step 6": weights and optimizer state held from
 *                 the start (retained, 96 MiB and 64 MiB), one site growing by 1 MiB per step (the
 *                 leak), and 2 x 8 MiB of activations freed every step; early.db: the same run
 *                 after step 2;
 *   oom.db        a 40 MiB request on a 64 MiB device that holds 40 MiB: one OOM;
 *   truncated.db  the same steps through a ring of 32 events: history truncated;
 *   nomarks.db    the leak run without marks: iterations must be inferred;
 *   repeats.db    no marks; 30 iterations of 50 identical 4 KiB temporaries and one 1 MiB block
 *                 kept: the period is 51 allocations, not the 1 the temporaries suggest;
 *   released.db   the leak run, but the kept blocks are freed after the last step, before the
 *                 snapshot (as when a job dumps at its end): growth that was released;
 *   late.db       weights (96 MiB) allocated before recording started, then the leak run;
 *   empty.db      a snapshot of a library that never recorded; misuse, devices, loop, optimizer.db below.
 * With a second argument N: only big.db, about N events of a training-like loop (100 steps,
 * activations, a slow leak, the cache emptied every step), for the analyzer's and the page's speed
 * benchmarks (tests/analyzer/bench_analyze.sh, tests/web/bench_viewer.js).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memsnap.h"
#include "sites.h"

static int dump(const char *dir, const char *name);

#define MiB ((size_t)1 << 20)

/* Allocation sites, each its own frame (sites.h). */
SITE(load_weights)
SITE(make_optimizer_state)
SITE(keep_history)
SITE(activation)

static const char *early_dir; /* set: write early.db after step 2 */
static int with_marks = 1;
static void *kept[64]; /* what the leak keeps, to release it */
static int nkept;

/* Waits `us` microseconds. PyTorch's format keeps times in whole microseconds and its
 * annotations apart from the trace, so a step that fits in one (the simulated device's do) loses
 * its order against its mark when exported (docs/pytorch-snapshots.md): the steps that are
 * exported keep 3 us of quiet on each side of their marks, as a real step's milliseconds do. */
static void quiet_us(int64_t us) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < us * 1000);
}

static __attribute__((noipa)) void train(int steps) { /* one name whatever the flags: no clone */
  void *w = load_weights(96 * MiB), *state = NULL;
  for (int i = 0; i < steps; i++) {
    char label[32];
    snprintf(label, sizeof label, "step %d", i + 1);
    if (with_marks) {
      quiet_us(3);
      memsnap_mark(label);
      quiet_us(3);
    }
    void *a = activation(8 * MiB), *b = activation(8 * MiB);
    if (!state) state = make_optimizer_state(64 * MiB);
    void *k = keep_history(1 * MiB); /* the leak */
    if (nkept < 64) kept[nkept++] = k;
    memsnap_free(a, 0, 0, NULL);
    memsnap_free(b, 0, 0, NULL);
    if (i == 1 && early_dir) dump(early_dir, "early.db");
  }
  (void)w;
}

static int dump(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (memsnap_dump(path) != MEMSNAP_OK) {
    fprintf(stderr, "gen_snapshots: %s\n", memsnap_last_error());
    return 1;
  }
  return 0;
}

static int big(const char *dir, long events) {
  setenv("MEMSNAP_SIM_CAPACITY", "64G", 1);
  memsnap_record_start((size_t)events + (size_t)events / 4 + 1024, NULL); /* room for every event */
  void *w = load_weights(512 * MiB);
  long pairs = events / 3, per_step = pairs / 100 > 1 ? pairs / 100 : 1;
  for (long i = 0; i < pairs; i++) {
    if (i % per_step == 0) {
      char label[32];
      snprintf(label, sizeof label, "step %ld", i / per_step);
      memsnap_mark(label);
      keep_history(4096);
      memsnap_empty_cache(); /* each step's segments come and go, as when memory runs short */
    }
    memsnap_free(activation((size_t)(1 + i % 97) * 65536), 0, 0, NULL);
  }
  (void)w;
  return dump(dir, "big.db");
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: gen_snapshots DIR [EVENTS]\n");
    return 2;
  }
  setenv("MEMSNAP_BACKEND", "sim", 1);
  if (argc == 3) {
    setenv("MEMSNAP_STACKS", "native", 1);
    return big(argv[1], atol(argv[2]));
  }
  setenv("MEMSNAP_STACKS", "native", 1);
  setenv("MEMSNAP_SIM_CAPACITY", "4G", 1);
  memsnap_record_start(0, NULL);
  early_dir = argv[1];
  train(6);
  early_dir = NULL;
  int rc = dump(argv[1], "leak.db");
  memsnap_shutdown();

  setenv("MEMSNAP_SIM_CAPACITY", "64M", 1);
  memsnap_record_start(0, NULL);
  void *held = keep_history(40 * MiB);
  if (activation(40 * MiB) != NULL) rc = 1;
  rc |= dump(argv[1], "oom.db");
  (void)held;
  memsnap_shutdown();

  setenv("MEMSNAP_SIM_CAPACITY", "4G", 1);
  memsnap_record_start(32, NULL);
  train(6);
  rc |= dump(argv[1], "truncated.db");
  memsnap_shutdown();

  memsnap_record_start(0, NULL);
  with_marks = 0;
  train(6);
  rc |= dump(argv[1], "nomarks.db");
  memsnap_shutdown();

  memsnap_record_start(0, NULL);
  for (int it = 0; it < 30; it++) {
    for (int k = 0; k < 50; k++) memsnap_free(activation(4096), 0, 0, NULL);
    keep_history(1 * MiB);
  }
  rc |= dump(argv[1], "repeats.db");
  memsnap_shutdown();

  memsnap_record_start(0, NULL);
  with_marks = 1;
  nkept = 0;
  train(6);
  while (nkept > 0) memsnap_free(kept[--nkept], 0, 0, NULL);
  rc |= dump(argv[1], "released.db");
  memsnap_shutdown();

  void *before = load_weights(96 * MiB);
  memsnap_record_start(0, NULL);
  nkept = 0;
  train(6);
  rc |= dump(argv[1], "late.db");
  (void)before;
  memsnap_shutdown();

  memsnap_backend_name();
  rc |= dump(argv[1], "empty.db");
  memsnap_shutdown();

  int misuse(const char *dir); /* declared here: the lines above stay where the golden report has them */
  rc |= misuse(argv[1]);
  int devices(const char *dir);
  rc |= devices(argv[1]);
  int unmarked(const char *dir);
  rc |= unmarked(argv[1]);
  int unframed(const char *dir);
  rc |= unframed(argv[1]);
  return rc;
}

/* misuse.db: three invalid frees from free_twice (a double free of a 4 KiB activation, twice) and
 * one from free_inside (1 MiB into a 4 MiB block of keep_history, which stays allocated), one
 * foreign pointer; warnings silenced. */
static __attribute__((noipa)) void free_twice(void *p) {
  memsnap_free(p, 4096, 0, NULL);
  __asm__ volatile("" ::: "memory");
}
static __attribute__((noipa)) void free_inside(void *p) {
  memsnap_free(p, 0, 0, NULL);
  __asm__ volatile("" ::: "memory");
}

int misuse(const char *dir) {
  setenv("MEMSNAP_INVALID_FREE", "silent", 1);
  memsnap_record_start(0, NULL);
  void *a = activation(4096), *kept_block = keep_history(4 * MiB);
  free_twice(a);
  free_twice(a);
  free_twice(a);
  free_inside((char *)kept_block + MiB);
  static int foreign;
  free_inside(&foreign);
  int rc = dump(dir, "misuse.db");
  memsnap_shutdown();
  unsetenv("MEMSNAP_INVALID_FREE");
  return rc;
}

/* devices.db: two simulated devices, 4 steps marked "step 1".."step 4": on device 0 the weights
 * (96 MiB) and the leak (keep_history, 1 MiB a step), on device 1 a 32 MiB block from
 * second_device kept and 8 MiB of activations freed each step. */
static __attribute__((noipa)) void *second_device(size_t n) {
  void *p = memsnap_malloc((ssize_t)n, 1, NULL);
  __asm__ volatile("" ::: "memory");
  return p;
}

int devices(const char *dir) {
  setenv("MEMSNAP_SIM_DEVICES", "2", 1);
  setenv("MEMSNAP_SIM_CAPACITY", "1G", 1);
  memsnap_record_start(0, NULL);
  void *w = load_weights(96 * MiB), *kept1 = second_device(32 * MiB);
  for (int i = 0; i < 4; i++) {
    char label[32];
    snprintf(label, sizeof label, "step %d", i + 1);
    memsnap_mark(label);
    keep_history(1 * MiB);
    memsnap_free(second_device(8 * MiB), 0, 0, NULL);
  }
  (void)w;
  (void)kept1;
  int rc = dump(dir, "devices.db");
  memsnap_shutdown();
  unsetenv("MEMSNAP_SIM_DEVICES");
  return rc;
}

/* loop.db and optimizer.db: no marks, and 8 steps that differ from each other (an 8 MiB
 * activation, then 1 to 7 temporaries of 4 to 28 KiB from two sites chosen by a seeded
 * generator), so that no period of the allocations holds; each step keeps 1 MiB (keep_history). In optimizer.db each step ends in
 * fused_adam_step (named as PyTorch's fused AdamW kernels are), which allocates and frees a
 * temporary: the iterations come from the optimizer's steps there, from the loop's line in
 * loop.db. */
SITE(scratch_a)
SITE(scratch_b)
SITE(fused_adam_step)

static __attribute__((noipa)) void uneven_steps(int steps, int optimizer) {
  unsigned seed = 12345;
  for (int i = 0; i < steps; i++) {
    void *input = activation(8 * MiB);
    seed = seed * 1103515245u + 12345u;
    int n = 1 + (int)(seed >> 16) % 7;
    for (int k = 0; k < n; k++) {
      seed = seed * 1103515245u + 12345u;
      size_t size = (size_t)(1 + (seed >> 16) % 7) * 4096;
      memsnap_free((seed >> 8) & 1 ? scratch_a(size) : scratch_b(size), 0, 0, NULL);
    }
    keep_history(1 * MiB);
    if (optimizer) memsnap_free(fused_adam_step(64 * 1024), 0, 0, NULL);
    memsnap_free(input, 0, 0, NULL);
  }
}

int unmarked(const char *dir) {
  int rc = 0;
  for (int optimizer = 0; optimizer < 2; optimizer++) {
    memsnap_record_start(0, NULL);
    uneven_steps(8, optimizer);
    rc |= dump(dir, optimizer ? "optimizer.db" : "loop.db");
    memsnap_shutdown();
  }
  return rc;
}

/* nomarks-nostacks.db, repeats-nostacks.db: nomarks.db's and repeats.db's programs recorded
 * without stacks: no program frames tell the loop, so the iterations come from the period of the
 * allocations (their sizes). */
int unframed(const char *dir) {
  int rc = 0;
  setenv("MEMSNAP_STACKS", "none", 1);
  memsnap_record_start(0, NULL);
  with_marks = 0;
  nkept = 0;
  train(6);
  rc |= dump(dir, "nomarks-nostacks.db");
  memsnap_shutdown();
  memsnap_record_start(0, NULL);
  for (int it = 0; it < 30; it++) {
    for (int k = 0; k < 50; k++) memsnap_free(activation(4096), 0, 0, NULL);
    keep_history(1 * MiB);
  }
  rc |= dump(dir, "repeats-nostacks.db");
  memsnap_shutdown();
  setenv("MEMSNAP_STACKS", "native", 1);
  with_marks = 1;
  return rc;
}
