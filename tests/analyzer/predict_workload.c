/* predict_workload.c MODE SIZE [STEPS]: a training-like program whose requests follow a known law
 * of SIZE, for `memsnap predict`'s tests (tests/analyzer/test_predict.sh): recorded on the
 * simulated device at two or three sizes, the prediction at another size must be what recording
 * it at that size gives, exactly.
 *
 *   batch  SIZE is the batch: every activation's request is linear in it (odd sizes, so that the
 *          allocator rounds them differently at each size), the weights and the optimizer's
 *          state do not change, and a workspace is allocated once only from SIZE 6 up (so runs
 *          at 4 and 8 differ by one allocation)
 *   seq    SIZE is the sequence length: the same, with attention scores of SIZE x SIZE per head
 *          (a quadratic term)
 *   other  another program: different sites, for the refusals
 *
 * Each step runs a forward pass (activations kept for the backward), a loss, a backward pass
 * (gradients, the activations freed in reverse), an optimizer step (temporaries); some blocks
 * are used on a second stream (record_stream, completed a step later); the cache is emptied
 * every third step; with two simulated devices, the odd layers live on the second. Exits 1 when
 * an allocation fails (the device is full), so that a run tells whether a size fits.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memsnap.h"

#define LAYERS 6
#define HIDDEN 768
#define HEADS 4

static int devices = 1;

static void *need(int64_t bytes, int device, memsnap_stream_t stream) {
  void *p = memsnap_malloc((ssize_t)bytes, device, stream);
  if (!p) {
    fprintf(stderr, "predict_workload: %lld bytes on device %d: %s\n", (long long)bytes, device, memsnap_last_error());
    exit(1);
  }
  return p;
}

static void release(void *p, int device, memsnap_stream_t stream) { memsnap_free(p, 0, device, stream); }

static int layer_device(int l) { return devices > 1 && l % 2 ? 1 : 0; }

/* The program whose requests follow its laws. batch x seq tokens. */
static int train(int64_t batch, int64_t seq, bool attention, int steps) {
  memsnap_stream_t side = (memsnap_stream_t)(uintptr_t)0x5100;
  void *weight[LAYERS], *grad[LAYERS] = {0}, *exp_avg[LAYERS] = {0}, *exp_sq[LAYERS] = {0};
  for (int l = 0; l < LAYERS; l++) weight[l] = need((int64_t)HIDDEN * HIDDEN * 4 + 4096 * l + 1000, layer_device(l), NULL);
  void *embedding = need((int64_t)8000 * HIDDEN * 4, 0, NULL);
  void *workspace = !attention && batch >= 6 ? need((int64_t)8 << 20, 0, NULL) : NULL; /* allocated once, from batch 6 */
  for (int step = 0; step < steps; step++) {
    memsnap_mark("step");
    int64_t tokens = batch * seq;
    void *act[LAYERS], *scores[LAYERS] = {0};
    void *x = need(tokens * HIDDEN * 4 + 37 * tokens + 12, 0, NULL);
    for (int l = 0; l < LAYERS; l++) {
      int d = layer_device(l);
      void *tmp = need(tokens * 4096 + 512, d, NULL); /* a temporary: freed at once */
      act[l] = need(tokens * HIDDEN * 4 + 37 * tokens + 1000 * l + 12, d, NULL);
      if (attention) scores[l] = need(batch * HEADS * seq * seq * 2 + seq * 64, d, NULL);
      void *small = need(tokens * 16 + 200, d, l % 3 == 0 ? side : NULL); /* small-pool blocks */
      release(tmp, d, NULL);
      release(small, d, l % 3 == 0 ? side : NULL);
    }
    void *logits = need(tokens * 8000 * 4 + 4 * tokens, 0, NULL);
    void *loss = need(512, 0, NULL);
    release(logits, 0, NULL);
    for (int l = LAYERS - 1; l >= 0; l--) {
      int d = layer_device(l);
      void *g = need(tokens * HIDDEN * 4 + 37 * tokens + 1000 * l + 12, d, NULL);
      if (!grad[l]) grad[l] = need((int64_t)HIDDEN * HIDDEN * 4 + 4096 * l + 1000, d, NULL); /* kept */
      if (scores[l]) release(scores[l], d, NULL);
      release(act[l], d, NULL);
      if (l == 1) memsnap_record_stream(g, side); /* used on the side stream: its free completes below */
      release(g, d, NULL);
    }
    release(x, 0, NULL);
    release(loss, 0, NULL);
    memsnap_sim_synchronize(side);
    for (int l = 0; l < LAYERS; l++) { /* the optimizer: state made at the first step, temporaries */
      int d = layer_device(l);
      if (!exp_avg[l]) exp_avg[l] = need((int64_t)HIDDEN * HIDDEN * 4 + 4096 * l + 1000, d, NULL);
      if (!exp_sq[l]) exp_sq[l] = need((int64_t)HIDDEN * HIDDEN * 4 + 4096 * l + 1000, d, NULL);
      void *t = need((int64_t)HIDDEN * HIDDEN * 4 + 4096 * l + 1000, d, NULL);
      release(t, d, NULL);
    }
    if (step % 3 == 2) memsnap_empty_cache();
  }
  for (int l = 0; l < LAYERS; l++) {
    int d = layer_device(l);
    release(weight[l], d, NULL);
    if (grad[l]) release(grad[l], d, NULL);
    if (exp_avg[l]) release(exp_avg[l], d, NULL);
    if (exp_sq[l]) release(exp_sq[l], d, NULL);
  }
  release(embedding, 0, NULL);
  if (workspace) release(workspace, 0, NULL);
  return 0;
}

/* Another program: other sites, other sizes. */
static int other(int64_t size, int steps) {
  for (int step = 0; step < steps; step++) {
    void *a = need(size * 100000 + 7, 0, NULL), *b = need(size * 3000 + 5, 0, NULL);
    void *c = need(size * 250000, 0, NULL);
    release(b, 0, NULL);
    release(a, 0, NULL);
    release(c, 0, NULL);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: predict_workload batch|seq|other SIZE [STEPS]\n");
    return 2;
  }
  int64_t size = strtoll(argv[2], NULL, 10);
  int steps = argc > 3 ? atoi(argv[3]) : 4;
  devices = memsnap_device_count() > 1 ? 2 : 1;
  int rc;
  if (!strcmp(argv[1], "batch")) rc = train(size, 128, false, steps);
  else if (!strcmp(argv[1], "seq")) rc = train(2, size, true, steps);
  else rc = other(size, steps);
  memsnap_shutdown(); /* writes MEMSNAP_DUMP */
  return rc;
}
