/* categories.c: memory by category, as torch.profiler's memory timeline defines them, decided
 * for each block by its lifetime: when it was made (in which phase of the program: forward,
 * backward, an optimizer's step) and what it lived through (a backward pass beginning, an
 * optimizer's step beginning or ending, the iterations), with the stack rules of code_kinds.c as
 * a help. What was live at the allocated peak and at each iteration's peak is summed from the
 * blocks as they die, in the analysis's one pass (analyze.c drives it; a block counts at a peak
 * when it was made by then and died after it): memory follows the live
 * blocks and the iterations, never the history's length. docs/categories.md has the rules with
 * examples.
 *
 * The rules, the first that holds wins:
 *   external         memory outside memsnap's allocator (memsnap run's interposer)
 *   the user's       --category NAME=PATTERN: a frame of the stack matches
 *   the tensors'     a tensor event (PyTorch's layer, at each optimizer step and a model's first
 *                    forward) named the block a parameter's or buffer's (parameter), a parameter's
 *                    .grad (gradient: DDP's buckets, whose views the gradients are, too) or an
 *                    optimizer's state (optimizer_state); the rules below are for what tensor
 *                    events cannot see (imported snapshots, JAX, CuPy, recordings made before them)
 *   other            a library's workspace (cuBLAS, cuDNN): made once, kept for reuse
 *   parameter        FSDP's sharded parameters and the unsharded ones it gathers (any phase); a
 *                    module's parameters made or moved to the device (Module._apply, ...), not in
 *                    a backward pass or an optimizer's step
 *   made in an optimizer's step:
 *     optimizer_state  it outlives the step (or _init_group made it)
 *     temporary        freed within the step
 *   made in a backward pass:
 *     gradient         still alive when an optimizer's step begins (set_to_none either way,
 *                      accumulation over micro-batches, FSDP's reduce-scattered shards); or an
 *                      AccumulateGrad frame made it (the history ended before any step)
 *     temporary        freed by the operation that made it
 *     autograd         the rest: gradients of activations, the engine's buffers
 *   made in any other code (forward, data, set-up):
 *     temporary        freed by the operation that made it, or freed in the iteration that made
 *                      it before any backward pass began
 *     activation       alive when a backward pass began, and dead by the end of the next
 *                      iteration (or the history ended before then): what autograd saved, the
 *                      batch, the outputs the loop rebinds
 *     other            the rest: what outlives the iterations (caches, inputs kept, leaks),
 *                      memory from before recording, blocks without a stack
 * A site's category (the stacks' view) is what most of the bytes it made were.
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static const char *const names[MS_CAT_BUILTIN] = {
    [MS_CAT_PARAMETER] = "parameter", [MS_CAT_GRADIENT] = "gradient", [MS_CAT_OPTIMIZER_STATE] = "optimizer_state",
    [MS_CAT_ACTIVATION] = "activation", [MS_CAT_TEMPORARY] = "temporary", [MS_CAT_AUTOGRAD] = "autograd",
    [MS_CAT_OTHER] = "other",           [MS_CAT_EXTERNAL] = "external"};

static const char *const meanings[MS_CAT_BUILTIN] = {
    [MS_CAT_PARAMETER] = "a module's parameters and buffers, made or moved to the device; with FSDP, the sharded "
                         "parameters and the unsharded copies it gathers",
    [MS_CAT_GRADIENT] = "made by a backward pass and still alive when an optimizer's step begins: the parameters' "
                        "gradients",
    [MS_CAT_OPTIMIZER_STATE] = "made by an optimizer's step and outliving it: momentum, Adam's moments",
    [MS_CAT_ACTIVATION] = "made outside backward and the optimizer, alive when a backward pass begins and gone by "
                          "the next iteration's end: what autograd saved, the batch",
    [MS_CAT_TEMPORARY] = "freed by the operation that made it, within an optimizer's step, or within the forward "
                         "part of its iteration",
    [MS_CAT_AUTOGRAD] = "made by a backward pass and freed before any optimizer's step: gradients of activations, "
                        "the engine's buffers",
    [MS_CAT_OTHER] = "the rest: what outlives the iterations (caches, kept inputs, leaks), libraries' workspaces, "
                     "memory from before recording or without a stack",
    [MS_CAT_EXTERNAL] = "outside memsnap's allocator: another library's cudaMalloc, seen by memsnap run's interposer"};

static const char *const parameter_kinds[MS_PARAM_KINDS] = {"module", "fsdp_sharded", "fsdp_gathered"};

int ms_category_count(const ms_analysis *a) { return MS_CAT_BUILTIN + (int)a->categories.n; }

const char *ms_category_name(const ms_analysis *a, int category) {
  if (category >= 0 && category < MS_CAT_BUILTIN) return names[category];
  if (category >= MS_CAT_BUILTIN && category < ms_category_count(a)) return a->categories.rule[category - MS_CAT_BUILTIN].name;
  return names[MS_CAT_OTHER];
}

const char *ms_category_meaning(const ms_analysis *a, int category) {
  (void)a;
  return category >= 0 && category < MS_CAT_BUILTIN ? meanings[category] : "";
}

const char *ms_parameter_kind_name(int kind) { return kind >= 0 && kind < MS_PARAM_KINDS ? parameter_kinds[kind] : "module"; }

const char *ms_category_missing_evidence(const ms_analysis *a, int category) {
  if (category < 0 || category >= MS_CAT_BUILTIN || category == MS_CAT_OTHER || category == MS_CAT_EXTERNAL ||
      category == MS_CAT_TEMPORARY)
    return NULL;
  if (a->category_evidence[category] & 1) return NULL; /* tensor events named some */
  if (a->stacked_events == 0) return "no stacks recorded (categories need them: MEMSNAP_STACKS=all)";
  switch (category) {
    case MS_CAT_PARAMETER:
      return a->parameter_blocks ? NULL : "no module set-up or FSDP sharding in the stacks";
    case MS_CAT_GRADIENT:
      if (!a->backward_passes) return "no backward pass recorded";
      return a->optimizer_steps ? NULL : "no optimizer step after the backward passes (AccumulateGrad's blocks only)";
    case MS_CAT_OPTIMIZER_STATE:
      return a->optimizer_steps ? NULL : "no optimizer step recorded";
    case MS_CAT_ACTIVATION:
    case MS_CAT_AUTOGRAD:
      return a->backward_passes ? NULL : "no backward pass recorded";
    default:
      return NULL;
  }
}

/* ---- the pass ---------------------------------------------------------------------------- */

int ms_lifetimes_begin(ms_analysis *a, ms_lifetimes *l, size_t niters) {
  memset(l, 0, sizeof *l);
  l->ncat = ms_category_count(a);
  l->cur = -1;
  l->niters = niters;
  if (niters == 0 || niters > MS_ITER_CATEGORIES_MAX) return 0; /* no iterations' categories */
  l->iter_peak_marks = malloc(sizeof *l->iter_peak_marks * niters);
  l->diff = calloc((niters + 1) * (size_t)l->ncat, sizeof *l->diff);
  if (!l->iter_peak_marks || !l->diff) {
    free(l->iter_peak_marks);
    free(l->diff);
    l->iter_peak_marks = NULL, l->diff = NULL;
    return -1;
  }
  return 0;
}

/* Site i's bytes by category (then those alive at the end, from [ncat]); NULL when none yet. */
static int64_t *site_row(const ms_lifetimes *l, uint32_t i) {
  size_t row = 2 * (size_t)l->ncat;
  return i < l->site_cap / row ? &l->site_bytes[(size_t)i * row] : NULL;
}

/* The category of block b, dying now (freed by e; NULL: alive at the history's end), by the rules
 * at the top; *param its kind of parameter. */
static int decide(const ms_analysis *a, const ms_lifetimes *l, const ms_live_slot *b, const ms_event *e, int *param) {
  const ms_site *s = &a->sites[b->site];
  if (s->external) return MS_CAT_EXTERNAL;
  const ms_code_kinds *k = &a->kinds;
  uint32_t id = s->stack_id < k->nstacks ? s->stack_id : 0;
  bool stacked = id && k->kind;
  if (stacked && k->rule[id]) return MS_CAT_BUILTIN + k->rule[id] - 1;
  unsigned kind = stacked ? k->kind[id] : 0;
  const ms_birth *born = &b->birth;
  switch (born->role) { /* a tensor event said what it holds: that is the evidence */
    case MS_ROLE_PARAMETER:
    case MS_ROLE_BUFFER:
      *param = kind & MS_CODE_GATHERED ? MS_PARAM_GATHERED : kind & MS_CODE_SHARDED ? MS_PARAM_SHARDED : MS_PARAM_MODULE;
      return MS_CAT_PARAMETER;
    case MS_ROLE_GRADIENT:
      return MS_CAT_GRADIENT;
    case MS_ROLE_OPTIMIZER_STATE:
      return MS_CAT_OPTIMIZER_STATE;
    default:
      break;
  }
  if (!stacked) return MS_CAT_OTHER;
  if (kind & MS_CODE_WORKSPACE) return MS_CAT_OTHER;
  if (kind & (MS_CODE_GATHERED | MS_CODE_SHARDED)) {
    *param = kind & MS_CODE_GATHERED ? MS_PARAM_GATHERED : MS_PARAM_SHARDED;
    return MS_CAT_PARAMETER;
  }
  if ((kind & MS_CODE_PARAMETER) && born->phase != MS_PHASE_BACKWARD && born->phase != MS_PHASE_OPTIMIZER) {
    *param = MS_PARAM_MODULE;
    return MS_CAT_PARAMETER;
  }
  uint32_t freed = e && e->stack_id < k->nstacks ? e->stack_id : 0;
  bool same_op = freed && k->op[id] && k->op[id] == k->op[freed];
  int died_in = l->cur < (int)l->niters ? l->cur : (int)l->niters - 1; /* the iteration of its death */
  switch (born->phase) {
    case MS_PHASE_OPTIMIZER:
      if ((kind & MS_CODE_OPTIMIZER_STATE) || l->optimizer_ends > born->optimizer_ends) return MS_CAT_OPTIMIZER_STATE;
      return MS_CAT_TEMPORARY;
    case MS_PHASE_BACKWARD:
      if (l->optimizer_begins > born->optimizer_begins || (kind & MS_CODE_GRADIENT)) return MS_CAT_GRADIENT;
      return same_op ? MS_CAT_TEMPORARY : MS_CAT_AUTOGRAD;
    case MS_PHASE_FORWARD: {
      if (same_op) return MS_CAT_TEMPORARY;
      bool through_backward = l->backward_begins > born->backward_begins;
      if (through_backward && (l->niters == 0 || (born->iteration >= 0 && died_in <= born->iteration + 1))) {
        /* alive at the history's end, made in its last iterations: its site's earlier blocks tell
           whether it is kept (more of them outlived their iterations than were activations) */
        const int64_t *v = site_row(l, b->site);
        if (!e && l->niters > 0 && v && v[MS_CAT_OTHER] > v[MS_CAT_ACTIVATION]) return MS_CAT_OTHER;
        return MS_CAT_ACTIVATION;
      }
      if (!through_backward && e && died_in == born->iteration) return MS_CAT_TEMPORARY;
      return MS_CAT_OTHER;
    }
    default:
      return MS_CAT_OTHER;
  }
}

/* Keeps category c for the block of birth ordinal `ordinal`: the history's allocation ordinal - 1
 * (a->alloc_category, the timeline's), or the prehistory's block -ordinal - 1. */
static void note_category(ms_analysis *a, ms_lifetimes *l, int64_t ordinal, int c) {
  if (ordinal > 0) {
    size_t i = (size_t)(ordinal - 1);
    if (i >= a->nalloc_category) { /* grown by doubling, the new part unknown (0xff) until its deaths */
      size_t n = a->nalloc_category;
      if (!ms_grow(&a->alloc_category, &l->alloc_cap, i + 1, 1)) {
        l->failed = true;
        return;
      }
      memset(a->alloc_category + n, 0xff, l->alloc_cap - n);
      a->nalloc_category = l->alloc_cap;
    }
    a->alloc_category[i] = (uint8_t)c;
  } else if (ordinal < 0 && (size_t)(-ordinal - 1) < a->before.nblocks) {
    a->before.blocks[-ordinal - 1].category = (uint8_t)c;
  }
}

void ms_lifetimes_death(ms_analysis *a, ms_lifetimes *l, const ms_live_slot *b, const ms_event *e) {
  int param = MS_PARAM_MODULE;
  int c = decide(a, l, b, e, &param);
  if (c >= l->ncat) c = MS_CAT_OTHER;
  const ms_birth *born = &b->birth;
  a->category_evidence[c] |= born->role ? 1 : 2;
  int64_t bytes = b->size;
  note_category(a, l, born->ordinal, c);
  if (c == MS_CAT_PARAMETER) a->parameter_blocks++;
  /* the site's bytes by category, and of what it holds at the end */
  size_t row = 2 * (size_t)l->ncat;
  if (b->site >= l->site_cap / row) {
    size_t old = l->site_cap;
    if (ms_grow(&l->site_bytes, &l->site_cap, ((size_t)b->site + 1) * row, sizeof *l->site_bytes))
      memset(l->site_bytes + old, 0, sizeof *l->site_bytes * (l->site_cap - old));
    else
      l->failed = true;
  }
  int64_t *v = site_row(l, b->site);
  if (v) {
    v[c] += bytes;
    if (!e) v[l->ncat + c] += bytes;
  }
  /* the allocated peak: live there when made by then (it dies after it: the sums restart at each
     new peak) */
  if (born->ordinal <= l->peak_mark) {
    l->at_peak[c] += bytes;
    l->asked_at_peak[c] += bytes - born->slack;
    if (c == MS_CAT_TEMPORARY && born->phase < 4) {
      l->temporary_at_peak[born->phase][0] += bytes;
      l->temporary_at_peak[born->phase][1] += bytes - born->slack;
    }
    if (c == MS_CAT_PARAMETER) l->param_at_peak[param] += bytes;
  }
  /* the closed iterations whose peaks it lived through: those from the first whose peak came at
     or after its birth (their peaks are in order) to the current one */
  size_t closed = l->cur < 0 ? 0 : (size_t)l->cur;
  const int64_t *marks = l->iter_peak_marks;
  if (l->diff && closed > 0 && born->ordinal <= marks[closed - 1]) { /* most die before a peak passes */
    /* the first mark >= its birth: galloping back from the last (blocks live a few iterations),
       then halving */
    size_t hi = closed - 1, step = 1, lo;
    while (hi >= step && marks[hi - step] >= born->ordinal) hi -= step, step *= 2;
    lo = hi >= step ? hi - step + 1 : 0;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (born->ordinal > marks[mid]) lo = mid + 1;
      else hi = mid;
    }
    l->diff[lo * (size_t)l->ncat + (size_t)c] += bytes;
    l->diff[closed * (size_t)l->ncat + (size_t)c] -= bytes;
  }
  if (l->cur >= 0 && l->cur < (int)l->niters && born->ordinal <= l->iter_peak_mark) l->iter_at_peak[c] += bytes;
}

void ms_lifetimes_peak(ms_lifetimes *l, int64_t allocations) {
  l->peak_mark = allocations;
  memset(l->at_peak, 0, sizeof *l->at_peak * (size_t)l->ncat);
  memset(l->asked_at_peak, 0, sizeof l->asked_at_peak);
  memset(l->temporary_at_peak, 0, sizeof l->temporary_at_peak);
  memset(l->param_at_peak, 0, sizeof l->param_at_peak);
}

void ms_lifetimes_iteration_open(ms_lifetimes *l, int k, int64_t allocations) {
  l->cur = k;
  l->iter_peak_mark = allocations; /* its first instant */
  memset(l->iter_at_peak, 0, sizeof *l->iter_at_peak * (size_t)l->ncat);
}

void ms_lifetimes_iteration_peak(ms_lifetimes *l, int64_t allocations) {
  l->iter_peak_mark = allocations;
  memset(l->iter_at_peak, 0, sizeof *l->iter_at_peak * (size_t)l->ncat);
}

void ms_lifetimes_iteration_close(ms_lifetimes *l) {
  if (l->cur < 0 || l->cur >= (int)l->niters) return;
  if (l->diff) {
    l->iter_peak_marks[l->cur] = l->iter_peak_mark;
    /* what died after its peak, within it: a difference of one iteration */
    for (int c = 0; c < l->ncat; c++) {
      l->diff[(size_t)l->cur * (size_t)l->ncat + (size_t)c] += l->iter_at_peak[c];
      l->diff[((size_t)l->cur + 1) * (size_t)l->ncat + (size_t)c] -= l->iter_at_peak[c];
    }
  }
  l->cur++;
}

void ms_lifetimes_end(ms_analysis *a, ms_lifetimes *l) {
  memcpy(a->category_at_peak, l->at_peak, sizeof a->category_at_peak);
  memcpy(a->category_at_peak_asked, l->asked_at_peak, sizeof a->category_at_peak_asked);
  memcpy(a->temporary_at_peak, l->temporary_at_peak, sizeof a->temporary_at_peak);
  memcpy(a->parameter_at_peak, l->param_at_peak, sizeof a->parameter_at_peak);
  if (!a->backward_recorded) a->backward_passes = l->backward_begins; /* else the recorded passes */
  if (!a->steps_recorded) a->optimizer_steps = l->optimizer_begins;
  int64_t sum[MS_CATEGORIES] = {0};
  for (size_t k = 0; k < a->niters; k++) {
    ms_iteration *it = &a->iters[k];
    memset(it->category_bytes, 0, sizeof it->category_bytes);
    it->categories_known = l->diff && !l->failed;
    for (int c = 0; it->categories_known && c < l->ncat; c++)
      it->category_bytes[c] = sum[c] += l->diff[k * (size_t)l->ncat + (size_t)c];
  }
  for (size_t i = 0; i < a->nsites; i++) {
    int best = MS_CAT_OTHER, held = MS_CAT_OTHER;
    const int64_t *v = site_row(l, (uint32_t)i);
    for (int c = 0; v && c < l->ncat; c++) {
      if (v[c] > v[best]) best = c;
      if (v[l->ncat + c] > v[l->ncat + held]) held = c;
    }
    a->sites[i].category = (uint8_t)best;
    a->sites[i].held_category = (uint8_t)held;
  }
  ms_lifetimes_free(l);
}

void ms_lifetimes_free(ms_lifetimes *l) {
  free(l->iter_peak_marks);
  free(l->diff);
  free(l->site_bytes);
  l->iter_peak_marks = NULL, l->diff = NULL, l->site_bytes = NULL;
  l->site_cap = 0;
}

void ms_categories_at_peak(const ms_analysis *a, int64_t bytes[MS_CATEGORIES]) {
  memcpy(bytes, a->category_at_peak, sizeof(int64_t) * MS_CATEGORIES);
}
