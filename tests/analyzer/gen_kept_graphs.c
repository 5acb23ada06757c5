/* gen_kept_graphs.c DIR: records snapshots of leaks that grow every k iterations and of autograd
 * graphs kept without a backward, on the simulated device (exact sizes, no GPU), for
 * tests/analyzer/test_kept_graphs.py. Each is shaped like a real run: the model's events
 * (module forward and backward, backward passes) as PyTorch's layer records them, an irregular
 * step (a temporary whose size changes every step), and the known answer stated here.
 *   eval.db        12 steps marked "step N" of a model "Net" of 4 layers (Net.l0..Net.l3): each
 *                  training step's forward saves 4 x 40 MiB for backward, its backward frees them;
 *                  an evaluation after steps 3, 7 and 11 (0-based) runs the forward with grad
 *                  enabled and no backward and keeps its loss, so its graph stays: 3 graphs of
 *                  160 MiB (+ a 512-byte loss), from evaluate()'s call of forward(). Beside them a
 *                  sawtooth (16 MiB kept each step, all freed every 4th: as gc.collect() does)
 *                  that is no leak.
 *   eval_nograd.db the same with the evaluation under no_grad: its forward frees each layer's
 *                  output as the next is made and the loss is kept (512 bytes each): no graph, no
 *                  leak (1.5 KiB in three steps is below MS_STEP_GROWTH_MIN).
 *   midstep.db     three training steps of the same model, then a fourth dumped in its backward pass
 *                  (as an out of memory there dumps): its forward's tensors alive, no graph kept.
 *   hook.db        a forward hook keeps the last layer's output (12 MiB a step, one module's) for
 *                  five steps; the fifth is dumped between its forward and its backward: the hook's
 *                  site grows, and neither its outputs nor the forward in flight are a kept graph.
 *   every.db       24 steps, no model events: 300 MiB kept at steps 3, 8, 11, 16, 19, 23 (every
 *                  4 to 5: jitter) and never freed; a sawtooth of 100 MiB a step freed every 4th
 *                  step; a temporary whose size changes every step, alive at the boundaries.
 *   long.db        1000 steps through a ring of 6000 events (wrapped many times): 8 MiB kept
 *                  every 100th step; the history keeps the last ~400 steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memsnap.h"
#include "sites.h"

#define MiB ((size_t)1 << 20)

SITE(linear_out)
SITE(gelu_out)
SITE(norm_out)
SITE(attn_out)
SITE(loss_out)
SITE(grad_out)
SITE(jitter_temp)
SITE(checkpoint_copy)
SITE(cycle_buffer)
SITE(log_buffer)

static int net, layer[4];
static int rc;

static void *keep_graph[64], *sawtooth[8], *eval_loss[64];
static int nkept, nsaw, nloss;

static void step_mark(int i) {
  char label[32];
  snprintf(label, sizeof label, "step %d", i + 1);
  memsnap_mark(label);
}

/* One layer's forward: its output (saved for backward when grad is on). Each layer kind its own
 * site, on its own line: a graph's blocks come from several sites, as a real model's do. */
static __attribute__((noipa)) void *layer_forward(int l, size_t bytes) {
  memsnap_module_event(layer[l], MEMSNAP_MODULE_FORWARD);
  void *out;
  if (l == 0) out = linear_out(bytes);
  else if (l == 1) out = gelu_out(bytes);
  else if (l == 2) out = norm_out(bytes);
  else out = attn_out(bytes);
  memsnap_module_event(layer[l], MEMSNAP_MODULE_FORWARD_END);
  return out;
}

/* One layer's output into saved[l] (grad), or freeing the previous one (no_grad). */
static void layer_output(void **saved, int grad, int l, void *out) {
  if (!grad && l > 0) memsnap_free(saved[l - 1], 0, 0, NULL);
  saved[l] = out;
}

/* The model's forward, each layer called on its own line (as a model written out is): its blocks
 * share no line inside the forward, and evaluate()'s call is the line that called it. */
static __attribute__((noipa)) void forward(void **saved, int grad, size_t bytes) {
  memsnap_module_event(net, MEMSNAP_MODULE_FORWARD);
  layer_output(saved, grad, 0, layer_forward(0, bytes));
  layer_output(saved, grad, 1, layer_forward(1, bytes));
  layer_output(saved, grad, 2, layer_forward(2, bytes));
  layer_output(saved, grad, 3, layer_forward(3, bytes));
  if (!grad) memsnap_free(saved[3], 0, 0, NULL);
  memsnap_module_event(net, MEMSNAP_MODULE_FORWARD_END);
}

static __attribute__((noipa)) void backward(void **saved) {
  memsnap_backward_begin();
  for (int l = 3; l >= 0; l--) {
    memsnap_module_event(layer[l], MEMSNAP_MODULE_BACKWARD);
    void *g = grad_out(2 * MiB);
    memsnap_free(saved[l], 0, 0, NULL);
    memsnap_free(g, 0, 0, NULL);
    memsnap_module_event(layer[l], MEMSNAP_MODULE_BACKWARD_END);
  }
  memsnap_backward_end();
}

/* The evaluation: the forward, with grad or not, and its loss kept in a list. */
static __attribute__((noipa)) void evaluate(int grad) {
  void *saved[4];
  forward(saved, grad, 40 * MiB);
  eval_loss[nloss++] = loss_out(512); /* a scalar's block */
  for (int l = 0; grad && l < 4; l++) keep_graph[nkept++] = saved[l]; /* the loss's graph holds them */
}

static __attribute__((noipa)) void train_step(int i) {
  void *saved[4];
  void *temp = jitter_temp((size_t)(1 + (i * 7) % 5) * MiB); /* a different size every step */
  forward(saved, 1, 40 * MiB);
  void *loss = loss_out(MiB);
  backward(saved);
  memsnap_free(loss, 0, 0, NULL);
  memsnap_free(temp, 0, 0, NULL);
  /* the sawtooth: a buffer of a reference cycle each step, collected every 4th */
  sawtooth[nsaw++] = cycle_buffer(16 * MiB);
  if (nsaw == 4) {
    while (nsaw) memsnap_free(sawtooth[--nsaw], 0, 0, NULL);
  }
}

static void dump(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (memsnap_dump(path) != MEMSNAP_OK) {
    fprintf(stderr, "gen_kept_graphs: cannot write %s\n", path);
    rc = 1;
  }
}

static void release_all(void) {
  while (nkept) memsnap_free(keep_graph[--nkept], 0, 0, NULL);
  while (nloss) memsnap_free(eval_loss[--nloss], 0, 0, NULL);
  while (nsaw) memsnap_free(sawtooth[--nsaw], 0, 0, NULL);
}

static void model_run(const char *dir, const char *name, int grad) {
  memsnap_record_start(0, NULL);
  net = memsnap_label("Net");
  for (int l = 0; l < 4; l++) {
    char path[32];
    snprintf(path, sizeof path, "Net.l%d", l);
    layer[l] = memsnap_label(path);
  }
  for (int i = 0; i < 12; i++) {
    step_mark(i);
    train_step(i);
    if (i % 4 == 3) evaluate(grad);
  }
  dump(dir, name);
  release_all();
  memsnap_shutdown();
}

/* midstep.db: three training steps, then one dumped in its backward pass (as an out of memory
 * there dumps): its forward's saved tensors are alive, and no graph is kept. */
static __attribute__((noipa)) void midstep_run(const char *dir) {
  void *saved[4];
  memsnap_record_start(0, NULL);
  net = memsnap_label("Net");
  for (int l = 0; l < 4; l++) {
    char path[32];
    snprintf(path, sizeof path, "Net.l%d", l);
    layer[l] = memsnap_label(path);
  }
  for (int i = 0; i < 3; i++) {
    step_mark(i);
    train_step(i);
  }
  step_mark(3);
  forward(saved, 1, 40 * MiB);
  memsnap_backward_begin();
  memsnap_module_event(layer[3], MEMSNAP_MODULE_BACKWARD);
  dump(dir, "midstep.db");
  memsnap_backward_end();
  for (int l = 0; l < 4; l++) memsnap_free(saved[l], 0, 0, NULL);
  release_all();
  memsnap_shutdown();
}

/* hook.db: a forward hook keeps the last layer's output every step (12 MiB, one module's), then a
 * fifth step is dumped after its forward, before its backward (as an out of memory there dumps). */
static __attribute__((noipa)) void hook_run(const char *dir) {
  void *saved[4], *hooked[8];
  int nh = 0;
  memsnap_record_start(0, NULL);
  net = memsnap_label("Net");
  for (int l = 0; l < 4; l++) {
    char path[32];
    snprintf(path, sizeof path, "Net.l%d", l);
    layer[l] = memsnap_label(path);
  }
  for (int i = 0; i < 5; i++) {
    step_mark(i);
    memsnap_module_event(net, MEMSNAP_MODULE_FORWARD);
    /* the layers and the hook's copy on one line, as Python's stacks show both at the line that
       called the model (the hook's frames are inside the module call): one forward's group */
    for (int l = 0; l < 5; l++) *(l < 4 ? &saved[l] : &hooked[nh++]) = l < 4 ? layer_forward(l, 40 * MiB) : memsnap_malloc((ssize_t)(12 * MiB), 0, NULL);
    memsnap_module_event(net, MEMSNAP_MODULE_FORWARD_END);
    if (i == 4) break; /* dumped here, its backward to come */
    backward(saved);
  }
  dump(dir, "hook.db");
  for (int l = 0; l < 4; l++) memsnap_free(saved[l], 0, 0, NULL);
  while (nh) memsnap_free(hooked[--nh], 0, 0, NULL);
  memsnap_shutdown();
}

/* every.db: growth every 4 or 5 steps, never freed; a sawtooth; jitter. */
static __attribute__((noipa)) void every_run(const char *dir) {
  static const int leak_at[] = {3, 8, 11, 16, 19, 23};
  void *kept[8], *saw[8];
  int nk = 0, ns = 0;
  memsnap_record_start(0, NULL);
  for (int i = 0; i < 24; i++) {
    step_mark(i);
    void *temp = jitter_temp((size_t)(1 + (i * 7) % 5) * MiB);
    void *act = linear_out(64 * MiB);
    memsnap_free(act, 0, 0, NULL);
    for (size_t k = 0; k < sizeof leak_at / sizeof *leak_at; k++)
      if (leak_at[k] == i) kept[nk++] = checkpoint_copy(300 * MiB);
    saw[ns++] = cycle_buffer(100 * MiB);
    if (ns == 4) {
      while (ns) memsnap_free(saw[--ns], 0, 0, NULL);
    }
    (void)temp; /* alive at the boundary, freed at the next step's start: below */
    memsnap_free(temp, 0, 0, NULL);
    if (i % 2) { /* a temporary caught in flight at every other boundary */
      static void *flight;
      flight = jitter_temp((size_t)(2 + i % 3) * MiB);
      memsnap_free(flight, 0, 0, NULL);
    }
  }
  dump(dir, "every.db");
  while (nk) memsnap_free(kept[--nk], 0, 0, NULL);
  while (ns) memsnap_free(saw[--ns], 0, 0, NULL);
  memsnap_shutdown();
}

/* long.db: a log buffer kept every 100th step over 1000 steps, the ring wrapped. */
static __attribute__((noipa)) void long_run(const char *dir) {
  void *kept[16];
  int nk = 0;
  memsnap_record_start(6000, NULL);
  for (int i = 0; i < 1000; i++) {
    step_mark(i);
    void *temp = jitter_temp((size_t)(1 + (i * 7) % 5) * MiB);
    void *act = linear_out(8 * MiB);
    memsnap_free(act, 0, 0, NULL);
    memsnap_free(temp, 0, 0, NULL);
    if (i % 100 == 50) kept[nk++] = log_buffer(8 * MiB);
  }
  dump(dir, "long.db");
  while (nk) memsnap_free(kept[--nk], 0, 0, NULL);
  memsnap_shutdown();
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gen_kept_graphs DIR\n");
    return 2;
  }
  setenv("MEMSNAP_BACKEND", "sim", 1);
  setenv("MEMSNAP_STACKS", "native", 1);
  setenv("MEMSNAP_SIM_CAPACITY", "16G", 1);
  model_run(argv[1], "eval.db", 1);
  model_run(argv[1], "eval_nograd.db", 0);
  midstep_run(argv[1]);
  hook_run(argv[1]);
  every_run(argv[1]);
  long_run(argv[1]);
  return rc;
}
