/* code_kinds.c: what kind of code each frame and each stack of a snapshot is, from one table of
 * patterns (docs/categories.md lists it): the program's own code, an optimizer's step and the
 * making of its state, autograd's backward pass, a parameter's gradient accumulated, a module's
 * parameters made or moved to the device, FSDP's sharded and gathered parameters, a library's
 * workspace; and the user's own categories (--category NAME=PATTERN). From them, the phase of the
 * program each stack belongs to (forward, backward, an optimizer's step). Where iterations start
 * (iterations.c) and memory by category (categories.c) read it.
 *
 * Patterns are --fold's: NAME or NAME@FILE, globs over a frame's short name (without "()") and
 * its source file or module (ms_frame_matches), so one pattern serves PyTorch's native frames
 * (torch::autograd::AccumulateGrad::apply) and Python's (AccumulateGrad.apply in a stand-in).
 * Each frame is classified once; a stack's kinds are the union of its frames'.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

/* The built-in patterns, by kind (docs/categories.md has the same table). */
static const struct {
  const char *pattern;
  unsigned kind;
} patterns[] = {
    /* an optimizer's step: PyTorch's optimizers live in torch/optim (its LR schedulers do not
       count: not_optimizer below) */
    {"*@*/torch/optim/*", MS_CODE_OPTIMIZER},
    {"*_init_group@*/torch/optim/*", MS_CODE_OPTIMIZER_STATE},
    {"*fused_adam*", MS_CODE_OPTIMIZER},
    /* autograd's backward pass: its engine's frames (a device thread's), and Python's entry */
    {"torch::autograd::Engine::*", MS_CODE_BACKWARD},
    {"torch::autograd::generated::*Backward*", MS_CODE_BACKWARD},
    {"backward@*/torch/autograd/__init__.py", MS_CODE_BACKWARD},
    {"*backward@*/torch/_tensor.py", MS_CODE_BACKWARD},
    {"_engine_run_backward@*/torch/autograd/graph.py", MS_CODE_BACKWARD},
    /* a parameter's gradient: accumulated into .grad */
    {"*AccumulateGrad*", MS_CODE_GRADIENT | MS_CODE_BACKWARD},
    {"*accumulateGrad*", MS_CODE_GRADIENT | MS_CODE_BACKWARD},
    /* a module's parameters and buffers, made on the device or moved there */
    {"*Module._apply@*/torch/nn/modules/module.py", MS_CODE_PARAMETER},
    {"*Module.to_empty@*/torch/nn/modules/module.py", MS_CODE_PARAMETER},
    {"*.__init__@*/torch/nn/modules/*", MS_CODE_PARAMETER},
    {"*reset_parameters@*/torch/nn/modules/*", MS_CODE_PARAMETER},
    {"*@*/torch/nn/init.py", MS_CODE_PARAMETER},
    {"*set_module_tensor_to_device@*/accelerate/*", MS_CODE_PARAMETER},
    {"*_load_state_dict_into_meta_model@*/transformers/*", MS_CODE_PARAMETER},
    /* FSDP2 (fully_shard): the sharded parameters it keeps, and the unsharded ones it gathers for
       forward and backward (its reduce-scatter's output is a gradient, by lifetime) */
    {"*_init_sharded_param@*/fsdp/_fully_shard/*", MS_CODE_SHARDED},
    {"*reset_sharded_param@*/fsdp/_fully_shard/*", MS_CODE_SHARDED},
    {"*foreach_all_gather*@*/fsdp/_fully_shard/*", MS_CODE_GATHERED},
    {"*all_gather_copy_in*@*/fsdp/_fully_shard/*", MS_CODE_GATHERED},
    {"*alloc_all_gather_outputs@*/fsdp/_fully_shard/*", MS_CODE_GATHERED},
    {"*init_all_gather_outputs@*/fsdp/_fully_shard/*", MS_CODE_GATHERED},
    {"*all_gather_inputs@*/fsdp/_fully_shard/*", MS_CODE_GATHERED},
    {"*init_unsharded_param@*/fsdp/_fully_shard/*", MS_CODE_GATHERED},
    /* FSDP1: its flat parameters, sharded and gathered */
    {"*_init_flat_param*@*/torch/distributed/fsdp/_flat_param.py", MS_CODE_SHARDED},
    {"*_all_gather_flat_param@*/torch/distributed/fsdp/_flat_param.py", MS_CODE_GATHERED},
    {"*_alloc_padded_unsharded_flat_param@*/torch/distributed/fsdp/_flat_param.py", MS_CODE_GATHERED},
    /* libraries' workspaces, made once and kept for reuse whatever the phase */
    {"at::cuda::getCUDABlasLtWorkspace", MS_CODE_WORKSPACE},
    {"at::cuda::setWorkspaceForHandle", MS_CODE_WORKSPACE},
    {"at::cuda::getNewWorkspace", MS_CODE_WORKSPACE},
    {"cublasCreate*", MS_CODE_WORKSPACE},
    {"cublasLtCreate*", MS_CODE_WORKSPACE},
    {"cudnnCreate*", MS_CODE_WORKSPACE},
};

/* Files of torch/optim that are no optimizer's step. */
static const char *const not_optimizer[] = {"*/torch/optim/lr_scheduler.py", "*/torch/optim/swa_utils.py"};

int ms_category_rule_add(ms_category_rules *r, const char *rule) {
  const char *eq = strchr(rule, '=');
  if (!eq || eq == rule || !eq[1] || r->n == MS_CATEGORY_RULES || (size_t)(eq - rule) >= sizeof r->rule[0].name) return -1;
  for (const char *c = rule; c < eq; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("_-.", *c))) return -1;
  snprintf(r->rule[r->n].name, sizeof r->rule[r->n].name, "%.*s", (int)(eq - rule), rule);
  r->rule[r->n].patterns = eq + 1;
  r->n++;
  return 0;
}

/* The index + 1 of the first user rule a frame matches (0: none). */
static uint8_t user_rule(const ms_category_rules *r, const ms_frame *f) {
  for (size_t i = 0; r && i < r->n; i++)
    for (const char *p = r->rule[i].patterns; *p;) {
      size_t len = strcspn(p, ",");
      char pattern[1024];
      snprintf(pattern, sizeof pattern, "%.*s", (int)(len < sizeof pattern ? len : sizeof pattern - 1), p);
      if (len && ms_frame_matches(pattern, f)) return (uint8_t)(i + 1);
      p += len + (p[len] == ',');
    }
  return 0;
}

/* Each frame id's first id with the same function, file and line (Python frames of one line
 * differ by their instruction's offset, native ones by their address), into same[]: the
 * operation a frame names. 0, or -1 when out of memory. */
static int canonical_frames(const ms_snapshot *s, uint32_t *same) {
  ms_strtab t = {0};
  uint32_t *first = malloc(sizeof *first * (s->nframes + 1));
  int rc = first ? 0 : -1;
  for (size_t i = 1; rc == 0 && i < s->nframes; i++) {
    const ms_frame *f = &s->frames[i];
    same[i] = (uint32_t)i;
    if (!f->name) continue;
    char key[2 * MS_TEXT_MAX + 64];
    snprintf(key, sizeof key, "%c%s@%s:%lld", f->python ? 'p' : 'n', f->name, f->file, (long long)f->line);
    bool added;
    int64_t n = ms_strtab_add(&t, key, &added);
    if (n < 0) rc = -1;
    else if (added) first[n] = (uint32_t)i;
    else same[i] = first[n];
  }
  ms_strtab_free(&t);
  free(first);
  return rc;
}

int ms_code_kinds_build(const ms_snapshot *s, const ms_category_rules *rules, ms_code_kinds *k) {
  memset(k, 0, sizeof *k);
  size_t nf = s->nframes + 1, ns = s->nstacks ? s->nstacks : 1;
  unsigned *frame_kind = k->frame_kind = calloc(nf, sizeof *frame_kind);
  uint8_t *frame_rule = calloc(nf, 1);
  uint32_t *same = calloc(nf, sizeof *same);
  k->kind = calloc(ns, sizeof *k->kind);
  k->rule = calloc(ns, 1);
  k->op = calloc(ns, sizeof *k->op);
  k->phase = calloc(ns, 1);
  k->chain = calloc(ns * MS_CHAIN, sizeof *k->chain);
  k->chain_len = calloc(ns, 1);
  if (!frame_kind || !frame_rule || !same || !k->kind || !k->rule || !k->op || !k->phase || !k->chain || !k->chain_len ||
      canonical_frames(s, same) != 0) {
    free(frame_rule);
    free(same);
    ms_code_kinds_free(k);
    return -1;
  }
  k->nstacks = s->nstacks;
  k->nframes = nf;
  for (size_t i = 1; i < s->nframes && s->frames; i++) {
    const ms_frame *f = &s->frames[i];
    if (!f->name || !f->short_name) continue; /* an id no frame has */
    for (size_t j = 0; j < sizeof patterns / sizeof *patterns; j++)
      if (ms_frame_matches(patterns[j].pattern, f)) frame_kind[i] |= patterns[j].kind;
    for (size_t j = 0; j < sizeof not_optimizer / sizeof *not_optimizer; j++)
      if (fnmatch(not_optimizer[j], f->file, 0) == 0) frame_kind[i] &= ~(unsigned)(MS_CODE_OPTIMIZER | MS_CODE_OPTIMIZER_STATE);
    if (f->node) frame_kind[i] |= MS_CODE_BACKWARD; /* an autograd node's apply, shown by its name */
    if (ms_frame_is_program(f)) frame_kind[i] |= MS_CODE_PROGRAM;
    frame_rule[i] = user_rule(rules, f);
  }
  for (size_t id = 1; id < s->nstacks; id++) {
    const ms_stack *st = &s->stacks[id];
    uint32_t python_op = 0, len = 0;
    unsigned python_side = 0; /* the first of an optimizer's frame and the program's, innermost first */
    for (uint32_t j = 0; j < st->depth; j++) { /* innermost first */
      uint32_t f = st->frames[j];
      if (f >= nf) continue;
      k->kind[id] |= frame_kind[f];
      if (!k->rule[id] && frame_rule[f]) k->rule[id] = frame_rule[f];
      if (!python_op && s->frames[f].python && !s->frames[f].machinery) python_op = f;
      if (!python_side && s->frames[f].python) python_side = frame_kind[f] & (MS_CODE_OPTIMIZER | MS_CODE_PROGRAM);
    }
    /* The phase: autograd's wherever its frames are (a closure's backward inside an optimizer's
       step too); an optimizer's when its frame comes before the program's, innermost first (a
       closure's forward pass runs the program's code under the step); native frames alone: a
       fused optimizer's kernel */
    if (k->kind[id] & MS_CODE_BACKWARD) k->phase[id] = MS_PHASE_BACKWARD;
    else if (python_side ? (python_side & MS_CODE_OPTIMIZER) : (k->kind[id] & MS_CODE_OPTIMIZER) != 0)
      k->phase[id] = MS_PHASE_OPTIMIZER;
    else if (st->depth) k->phase[id] = MS_PHASE_FORWARD;
    /* the op: the innermost Python frame that matters, else the first frame that matters; in an
       autograd node's stack its innermost native frame that is no machinery (the operator inside
       the node), as its Python frames are the backward() call's, the same for every node */
    bool node = false;
    for (uint32_t j = 0; j < st->depth && !node; j++) node = st->frames[j] < nf && s->frames[st->frames[j]].node;
    uint32_t native_op = 0;
    for (uint32_t j = 0; node && j < st->depth && !native_op; j++) {
      const ms_frame *f = st->frames[j] < nf ? &s->frames[st->frames[j]] : NULL;
      if (f && !f->python && !f->machinery) native_op = st->frames[j];
    }
    if (native_op) k->op[id] = native_op;
    else if (python_op) k->op[id] = python_op;
    else ms_stack_frames_that_matter(s, (uint32_t)id, &k->op[id], 1);
    if (k->op[id] < nf) k->op[id] = same[k->op[id]];
    /* the program's frames, outermost first (the outermost MS_CHAIN of them) */
    for (uint32_t j = st->depth; j-- > 0 && len < MS_CHAIN;) {
      uint32_t f = st->frames[j];
      if (f < nf && (frame_kind[f] & MS_CODE_PROGRAM)) k->chain[id * MS_CHAIN + len++] = same[f]; /* by line */
    }
    k->chain_len[id] = (uint8_t)len;
  }
  free(frame_rule);
  free(same);
  return 0;
}

void ms_code_kinds_free(ms_code_kinds *k) {
  free(k->frame_kind);
  free(k->kind);
  free(k->rule);
  free(k->op);
  free(k->phase);
  free(k->chain);
  free(k->chain_len);
  memset(k, 0, sizeof *k);
}
