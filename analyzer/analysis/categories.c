/* categories.c: memory by category, as torch.profiler's memory timeline has it: each allocation
 * site (stack) gets one category, from the kind of code its stack is (code_kinds.c) and from
 * what became of its blocks (the analysis's pass counts, per site, the bytes freed by the
 * operation that made them, during a backward pass and during an optimizer's step); the
 * categories of what was live at the allocated peak, and at each iteration's peak, are sums over
 * the sites. docs/categories.md has the table below with examples.
 *
 * The rules, the first that holds wins:
 *   external         memory outside memsnap's allocator (memsnap run's interposer)
 *   the user's       --category NAME=PATTERN: a frame of the stack matches
 *   parameter        made by a module's set-up or moved to the device (Module._apply, ...)
 *   gradient         a parameter's gradient (AccumulateGrad)
 *   optimizer_state  made by an optimizer's step and outliving it (_init_group, or a step's
 *                    blocks that its own code did not free)
 *   temporary        most of its bytes freed by the operation (the line, or the native operator)
 *                    that made them
 *   autograd         made during a backward pass (not a gradient): gradients of activations,
 *                    the engine's buffers
 *   activation       made outside backward and the optimizer, most of its bytes freed by a
 *                    backward pass: what autograd saved
 *   other            the rest: inputs, outputs the program keeps, caches, memory from before
 *                    recording without a stack
 * A site is one category, so a stack that makes memory of two kinds counts as the kind most of
 * its bytes were.
 */
#include <string.h>

#include "analysis.h"

static const char *const names[MS_CAT_BUILTIN] = {
    [MS_CAT_PARAMETER] = "parameter", [MS_CAT_GRADIENT] = "gradient", [MS_CAT_OPTIMIZER_STATE] = "optimizer_state",
    [MS_CAT_ACTIVATION] = "activation", [MS_CAT_TEMPORARY] = "temporary", [MS_CAT_AUTOGRAD] = "autograd",
    [MS_CAT_OTHER] = "other",           [MS_CAT_EXTERNAL] = "external"};

int ms_category_count(const ms_analysis *a) { return MS_CAT_BUILTIN + (int)a->categories.n; }

const char *ms_category_name(const ms_analysis *a, int category) {
  if (category >= 0 && category < MS_CAT_BUILTIN) return names[category];
  if (category >= MS_CAT_BUILTIN && category < ms_category_count(a)) return a->categories.rule[category - MS_CAT_BUILTIN].name;
  return names[MS_CAT_OTHER];
}

/* Site s's category by the rules above. */
static int decide(const ms_analysis *a, const ms_site *s) {
  if (s->external) return MS_CAT_EXTERNAL;
  const ms_code_kinds *k = &a->kinds;
  uint32_t id = s->stack_id < k->nstacks ? s->stack_id : 0;
  unsigned kind = id ? k->kind[id] : 0;
  if (id && k->rule[id]) return MS_CAT_BUILTIN + k->rule[id] - 1;
  if ((kind & MS_CODE_PARAMETER) && !(kind & (MS_CODE_BACKWARD | MS_CODE_OPTIMIZER))) return MS_CAT_PARAMETER;
  if (kind & MS_CODE_GRADIENT) return MS_CAT_GRADIENT;
  int64_t made = s->alloc_bytes;
  if (kind & MS_CODE_OPTIMIZER_STATE) return MS_CAT_OPTIMIZER_STATE;
  if (kind & MS_CODE_OPTIMIZER) return s->freed_in_optimizer * 2 > made ? MS_CAT_TEMPORARY : MS_CAT_OPTIMIZER_STATE;
  if (made > 0 && s->freed_same_op * 2 > made) return MS_CAT_TEMPORARY;
  if (kind & MS_CODE_BACKWARD) return MS_CAT_AUTOGRAD;
  if (made > 0 && s->freed_in_backward * 2 > made) return MS_CAT_ACTIVATION;
  return MS_CAT_OTHER;
}

void ms_categories_decide(ms_analysis *a) {
  for (size_t i = 0; i < a->nsites; i++) a->sites[i].category = (uint8_t)decide(a, &a->sites[i]);
  for (size_t k = 0; k < a->niters; k++) {
    ms_iteration *it = &a->iters[k];
    memset(it->category_bytes, 0, sizeof it->category_bytes);
    for (size_t e = it->first_site_bytes; e < it->first_site_bytes + it->nsite_bytes; e++)
      it->category_bytes[a->sites[a->iter_site_bytes[e].site].category] += a->iter_site_bytes[e].bytes;
  }
}

void ms_categories_at_peak(const ms_analysis *a, int64_t bytes[MS_CATEGORIES]) {
  memset(bytes, 0, sizeof(int64_t) * MS_CATEGORIES);
  for (size_t i = 0; i < a->nsites; i++) bytes[a->sites[i].category] += a->sites[i].live_bytes;
}
