/* gen_runlog.c MODE OUT [N]: programs shaped like long runs, on the simulated device, for the run
 * log's tests (tests/analyzer/test_runlog.py) and its benchmark (docs/BENCHMARKS.md):
 *   leak OUT [N]   N training iterations (400): parameters and optimizer state told once, gradients
 *                  told at each step; activations made and freed; every 7th iteration an
 *                  evaluation (a large temporary), every 50th an empty_cache, every 37th step
 *                  skipped (GradScaler); 1.57 MiB leaked each iteration from iteration 0 (the
 *                  site `leaky_cache`); the snapshot written to OUT at the end. Run it with a small
 *                  MEMSNAP_MAX_ENTRIES and the ring wraps many times;
 *   kill OUT       the same, for ever, printing "iteration K" once step K has ended: the test
 *                  kills it with SIGKILL and recovers its live mapping (OUT unused);
 *   many OUT [N]   N iterations (10,000,000) of one allocation and its free: the log's bound;
 *                  prints "ns_per_iteration X" (the step's cost with its run log sample);
 *   tells OUT [N]  N iterations (100,000) told as PyTorch's layer tells a model of 150 parameters:
 *                  each a step's beginning, the 150 parameters with their gradients, the optimizer
 *                  state (300 tensors), the step's end; prints "ns_per_iteration X" (the model's
 *                  events' cost an iteration, the run log's roles and samples with them);
 *   time OUT [S]   no steps: S seconds (3.5) of allocations rising then falling, a server's
 *                  load; the snapshot written to OUT.
 * Each site is a function of its own (sites.h), so the tests find the stacks by name.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memsnap.h"
#include "sites.h"

#define MiB ((size_t)1 << 20)
#define LEAK_BYTES ((size_t)1646264) /* 1.57 MiB */

SITE(parameter)
SITE(optimizer_state)
SITE(gradient)
SITE(activation)
SITE(evaluation)
SITE(leaky_cache)
SITE(request)

static void release(void *p) { memsnap_free(p, 0, 0, NULL); }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void tell(void *p, size_t bytes, uint8_t role) {
  uint64_t storage = (uint64_t)(uintptr_t)p, b = bytes;
  int32_t label = 0;
  int16_t device = 0;
  memsnap_tensor_events(1, &storage, &b, &role, &label, &device);
}

/* The training loop: `n` iterations (0: for ever), `announce` prints each step's end. */
static int train(int n, int announce) {
  int adam = memsnap_label("AdamW");
  void *params[4], *state[8];
  for (int i = 0; i < 4; i++) {
    params[i] = parameter(8 * MiB);
    tell(params[i], 8 * MiB, MEMSNAP_TENSOR_PARAMETER);
  }
  for (int i = 0; i < 8; i++) {
    state[i] = optimizer_state(8 * MiB);
    tell(state[i], 8 * MiB, MEMSNAP_TENSOR_OPTIMIZER_STATE);
  }
  for (int it = 0; n == 0 || it < n; it++) {
    void *act[6], *grads[4];
    for (int k = 0; k < 6; k++) act[k] = activation((size_t)(3 + k) * MiB);
    if (it % 7 == 3) release(evaluation(64 * MiB)); /* an evaluation: a spike */
    for (int k = 6; k-- > 0;) release(act[k]);
    for (int k = 0; k < 4; k++) grads[k] = gradient(8 * MiB);
    leaky_cache(LEAK_BYTES); /* kept for ever: the leak */
    memsnap_step_event(adam, MEMSNAP_STEP_BEGIN);
    {
      uint64_t st[4], b[4];
      uint8_t r[4];
      int32_t l[4] = {0};
      int16_t d[4] = {0};
      for (int k = 0; k < 4; k++) st[k] = (uint64_t)(uintptr_t)grads[k], b[k] = 8 * MiB, r[k] = MEMSNAP_TENSOR_GRADIENT;
      memsnap_tensor_events(4, st, b, r, l, d);
    }
    memsnap_step_event(adam, it % 37 == 36 ? MEMSNAP_STEP_SKIPPED : MEMSNAP_STEP_END);
    for (int k = 0; k < 4; k++) release(grads[k]);
    if (it % 50 == 49) memsnap_empty_cache();
    if (announce) {
      printf("iteration %d\n", it);
      fflush(stdout);
    }
  }
  (void)state;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: gen_runlog leak|kill|many|time OUT [N]\n");
    return 2;
  }
  const char *mode = argv[1], *out = argv[2];
  setenv("MEMSNAP_BACKEND", "sim", 0);
  setenv("MEMSNAP_RECORD", "1", 0);
  setenv("MEMSNAP_STACKS", "native", 0);
  setenv("MEMSNAP_SIM_CAPACITY", "8G", 0);
  if (!strcmp(mode, "leak")) {
    train(argc > 3 ? atoi(argv[3]) : 400, 0);
  } else if (!strcmp(mode, "kill")) {
    train(0, 1);
  } else if (!strcmp(mode, "many")) {
    long n = argc > 3 ? atol(argv[3]) : 10000000;
    int label = memsnap_label("SGD");
    double t0 = now_s();
    for (long it = 0; it < n; it++) {
      void *p = request(it % 1000 == 0 ? 4 * MiB : 1024);
      release(p);
      memsnap_step_event(label, MEMSNAP_STEP_END);
    }
    double t1 = now_s();
    for (long it = 0; it < n; it++) release(request(it % 1000 == 0 ? 4 * MiB : 1024));
    double t2 = now_s();
    printf("ns_per_iteration %.1f (an allocation, its free and a step: %.1f ns; without the step %.1f ns)\n",
           ((t1 - t0) - (t2 - t1)) * 1e9 / (double)n, (t1 - t0) * 1e9 / (double)n, (t2 - t1) * 1e9 / (double)n);
  } else if (!strcmp(mode, "tells")) {
    long n = argc > 3 ? atol(argv[3]) : 100000;
    enum { P = 150 };
    int label = memsnap_label("AdamW");
    static uint64_t st[2 * P], b[2 * P];
    static uint8_t r[2 * P];
    static int32_t l[2 * P];
    static int16_t d[2 * P];
    void *params[P], *state[2 * P], *grads[P];
    for (int k = 0; k < P; k++) params[k] = parameter(MiB);
    for (int k = 0; k < 2 * P; k++) state[k] = optimizer_state(MiB);
    for (int k = 0; k < P; k++) grads[k] = gradient(MiB);
    double t0 = now_s();
    for (long it = 0; it < n; it++) {
      memsnap_step_event(label, MEMSNAP_STEP_BEGIN);
      for (int k = 0; k < P; k++) {
        st[k] = (uint64_t)(uintptr_t)params[k], r[k] = MEMSNAP_TENSOR_PARAMETER;
        st[P + k] = (uint64_t)(uintptr_t)grads[k], r[P + k] = MEMSNAP_TENSOR_GRADIENT;
        b[k] = b[P + k] = MiB;
      }
      memsnap_tensor_events(2 * P, st, b, r, l, d);
      for (int k = 0; k < 2 * P; k++) st[k] = (uint64_t)(uintptr_t)state[k], r[k] = MEMSNAP_TENSOR_OPTIMIZER_STATE;
      memsnap_tensor_events(2 * P, st, b, r, l, d);
      memsnap_step_event(label, MEMSNAP_STEP_END);
    }
    printf("ns_per_iteration %.1f (a step's beginning, 300 tensors told twice, its end)\n", (now_s() - t0) * 1e9 / (double)n);
  } else if (!strcmp(mode, "time")) {
    double seconds = argc > 3 ? atof(argv[3]) : 3.5, t0 = now_s();
    void *held[64];
    int nheld = 0;
    while (now_s() - t0 < seconds) {
      double t = now_s() - t0;
      int want = (int)(t < seconds / 2 ? 64 * t / (seconds / 2) : 64 * (seconds - t) / (seconds / 2));
      if (want > 64) want = 64;
      while (nheld < want) held[nheld++] = request(2 * MiB);
      while (nheld > want) release(held[--nheld]);
      release(request(512 * 1024));
      struct timespec pause = {0, 2000000};
      nanosleep(&pause, NULL);
    }
    while (nheld) release(held[--nheld]);
  } else {
    fprintf(stderr, "gen_runlog: unknown mode '%s'\n", mode);
    return 2;
  }
  if (strcmp(mode, "kill") && memsnap_dump(out) != MEMSNAP_OK) {
    fprintf(stderr, "gen_runlog: %s\n", memsnap_last_error());
    return 1;
  }
  return 0;
}
