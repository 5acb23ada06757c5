/* train_loop.c: a training-like loop on memsnap's allocator, with a deliberate leak.
 *
 * Mimics the memory pattern of a small model's training step: weights allocated once,
 * activations allocated layer by layer in the forward pass and freed in the backward pass,
 * gradients per step, optimizer state made in the first step, and one bug: the loss of each
 * step is kept in a list on the device and never freed (LEAK_BYTES per step).
 *
 * Runs on the simulated device (MEMSNAP_BACKEND=sim, what `make demo` does without a GPU) or on
 * the GPU (MEMSNAP_BACKEND=cuda). Prints one line per iteration and the statistics at the end.
 * Each iteration starts with a mark ("iteration") and has forward, backward and optimizer
 * ranges; with MEMSNAP_RECORD=1 (or --record) they are recorded, and --dump PATH writes a
 * snapshot after the last iteration, while the leaked buffers are still alive.
 *
 * usage: train_loop [--iterations N] [--no-leak] [--record] [--dump PATH]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memsnap.h"

#define LAYERS 8
#define LEAK_BYTES (256 << 10)
static const size_t weight_bytes[LAYERS] = {4 << 20, 16 << 20, 16 << 20, 16 << 20, 16 << 20, 16 << 20, 16 << 20, 1 << 20};
static const size_t activation_bytes[LAYERS] = {24 << 20, 24 << 20, 12 << 20, 12 << 20, 6 << 20, 6 << 20, 3 << 20, 64 << 10};

static inline __attribute__((always_inline)) void *xalloc(size_t size);

/* Named allocation sites, so that stacks in a snapshot say what each allocation is for. noipa
 * and the barrier keep each one a frame of its own (no inlining, folding or tail call). */
#define ALLOCATION_SITE(name)                                 \
  static __attribute__((noipa)) void *name(size_t size) {     \
    void *p = xalloc(size);                                   \
    __asm__ volatile("" ::: "memory");                        \
    return p;                                                 \
  }
ALLOCATION_SITE(alloc_weights)
ALLOCATION_SITE(alloc_activation)
ALLOCATION_SITE(alloc_gradient)
ALLOCATION_SITE(alloc_optimizer_state)
ALLOCATION_SITE(keep_loss_for_logging) /* the leak */

static inline __attribute__((always_inline)) void *xalloc(size_t size) {
  void *p = memsnap_malloc((ssize_t)size, 0, NULL);
  if (!p) {
    fprintf(stderr, "train_loop: %s\n", memsnap_last_error());
    exit(1);
  }
  return p;
}

static void xfree(void *p) { memsnap_free(p, 0, 0, NULL); }

static void print_mib(const char *label, int64_t bytes) { printf(" %s %8.2f MiB", label, (double)bytes / 1048576.0); }

int main(int argc, char **argv) {
  int iterations = 10;
  int leak = 1, record = 0;
  const char *dump = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-leak")) leak = 0;
    else if (!strcmp(argv[i], "--record")) record = 1;
    else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
    else {
      fprintf(stderr, "usage: train_loop [--iterations N] [--no-leak] [--record] [--dump PATH]\n");
      return 2;
    }
  }
  if (iterations < 1 || iterations > 1000000) {
    fprintf(stderr, "error: --iterations must be between 1 and 1000000\n");
    return 2;
  }
  if (!memsnap_backend_name()) {
    fprintf(stderr, "train_loop: %s\n", memsnap_last_error());
    return 1;
  }
  if (record && memsnap_record_start(0, NULL) != MEMSNAP_OK) {
    fprintf(stderr, "train_loop: %s\n", memsnap_last_error());
    return 1;
  }
  printf("memsnap %s, backend %s, %d iterations%s\n", MEMSNAP_VERSION, memsnap_backend_name(), iterations,
         leak ? ", leaking the loss of every step" : "");

  void *weights[LAYERS], *momentum[LAYERS] = {0};
  for (int l = 0; l < LAYERS; l++) weights[l] = alloc_weights(weight_bytes[l]);
  void **losses = calloc((size_t)iterations, sizeof *losses);
  if (!losses) return 1;

  for (int it = 0; it < iterations; it++) {
    memsnap_reset_peak_stats(0);
    memsnap_mark("iteration");
    void *act[LAYERS], *grad[LAYERS];
    memsnap_range_push("forward");
    for (int l = 0; l < LAYERS; l++) act[l] = alloc_activation(activation_bytes[l]);
    void *loss = alloc_activation(4);
    memsnap_range_pop();
    memsnap_range_push("backward");
    for (int l = LAYERS - 1; l >= 0; l--) {
      grad[l] = alloc_gradient(weight_bytes[l]);
      void *tmp = alloc_activation(activation_bytes[l] / 2); /* a temporary of the layer's backward */
      xfree(tmp);
      xfree(act[l]);
    }
    memsnap_range_pop();
    memsnap_range_push("optimizer");
    for (int l = 0; l < LAYERS; l++) {
      if (!momentum[l]) momentum[l] = alloc_optimizer_state(weight_bytes[l]);
      xfree(grad[l]);
    }
    memsnap_range_pop();
    if (leak) losses[it] = keep_loss_for_logging(LEAK_BYTES); /* the bug: kept forever */
    xfree(loss);
    memsnap_stats_t s;
    memsnap_get_stats(0, &s);
    printf("iter %3d", it);
    print_mib("allocated", s.allocated_bytes[MEMSNAP_POOL_ALL].current);
    print_mib("peak", s.allocated_bytes[MEMSNAP_POOL_ALL].peak);
    print_mib("reserved", s.reserved_bytes[MEMSNAP_POOL_ALL].current);
    printf("  allocated_bytes %lld\n", (long long)s.allocated_bytes[MEMSNAP_POOL_ALL].current);
  }

  int64_t v[256];
  int n = memsnap_get_stats_flat(0, v, 256);
  printf("\nstatistics (torch.cuda.memory_stats() keys):\n");
  for (int i = 0; i < n; i++) {
    const char *key = memsnap_stat_key(i);
    if (strstr(key, ".all.current") || strstr(key, ".all.peak") || strncmp(key, "num_", 4) == 0)
      printf("  %-32s %lld\n", key, (long long)v[i]);
  }
  if (dump) {
    if (memsnap_dump(dump) != MEMSNAP_OK) {
      fprintf(stderr, "train_loop: %s\n", memsnap_last_error());
      return 1;
    }
    printf("\nsnapshot written to %s\n", dump);
  }
  if (memsnap_check(0) != 0) {
    fprintf(stderr, "train_loop: allocator invariant broken: %s\n", memsnap_last_error());
    return 1;
  }
  for (int it = 0; it < iterations; it++)
    if (losses[it]) xfree(losses[it]);
  for (int l = 0; l < LAYERS; l++) xfree(weights[l]), xfree(momentum[l]);
  free(losses);
  memsnap_shutdown();
  return 0;
}
