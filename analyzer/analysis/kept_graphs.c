/* kept_graphs.c: autograd graphs kept alive without a backward, from the module record (module and
 * backward events: docs/snapshot-format.md) and the blocks alive at the history's end.
 *
 * A forward run with grad enabled saves tensors for its backward; the backward frees them. A
 * forward whose backward never runs (an evaluation without torch.no_grad()) frees them only when
 * its graph dies: when nothing holds its output or loss any more. A program that keeps its loss
 * (`eval_losses.append(loss)`) keeps the whole graph, every saved activation of every module.
 *
 * Evidence, from the blocks alive at the history's end that a module's forward made (its
 * outermost open forward call: ms_birth.forward), leaving out parameters, gradients, optimizer
 * state and buffers (tensor events), libraries' workspaces and what a backward made:
 *   - per forward call: its blocks, their bytes, the modules whose calls made them, and the
 *     program's line that called it (the innermost program frame all its blocks' stacks share);
 *   - the backward passes begun after a forward's blocks (the recorded ones where backward events
 *     were recorded, else the backward phases of the stacks): two or more, they survived a
 *     backward that was not theirs (their own, then another); one, their own backward ran, and
 *     what is left is its output, held by a variable, not what it saved (and a dump during that
 *     backward, as an out of memory there, is no kept graph either); none, it never ran.
 * Forwards are grouped by module and calling line. A forward looks like a graph when its blocks
 * came from two modules at least (a graph saves every layer's activations; a kept output alone is
 * one module's), add up to MS_STEP_GROWTH_MIN at least and, where the module's other forwards saved for backward
 * (modules.c: saved_bytes per call), to a quarter of that at least. A group is a kept graph
 * candidate when one of its forwards looks like a graph and survived; its graphs are those that
 * look like one and survived or whose backward never ran (not those after their own backward).
 * So the graph of the last evaluation, which no backward has passed yet, counts with the ones
 * before it; a forward in flight when the snapshot was taken (an out of memory in it) counts only
 * where graphs of its line were kept before, not beside a hook's kept outputs.
 *
 * Memory: one record per block alive at the end that a forward made, freed at the end.
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

void ms_graphs_block(ms_analysis *a, ms_graph_pass *p, const ms_live_slot *b, uint32_t backward_begins) {
  const ms_birth *h = &b->birth;
  if (p->failed || !h->forward || h->in_backward || h->role != MS_ROLE_NONE || b->site >= a->nsites) return;
  uint32_t stack = a->sites[b->site].stack_id;
  const ms_code_kinds *k = &a->kinds;
  if (stack && stack < k->nstacks && (k->kind[stack] & (MS_CODE_WORKSPACE | MS_CODE_PARAMETER | MS_CODE_SHARDED |
                                                         MS_CODE_GATHERED | MS_CODE_OPTIMIZER_STATE)))
    return;
  if (p->n == p->cap && !ms_grow(&p->blocks, &p->cap, p->n + 1, sizeof *p->blocks)) {
    p->failed = true;
    return;
  }
  int64_t after = a->backward_recorded ? a->backward_passes - (int64_t)h->backward_passes
                                        : (int64_t)backward_begins - (int64_t)h->backward_begins;
  p->blocks[p->n++] = (ms_graph_block){h->forward, h->forward_module, b->site, stack, h->module, h->iteration, b->size,
                                       after < 0 ? 0 : (uint32_t)after};
}

void ms_graphs_free_pass(ms_graph_pass *p) {
  free(p->blocks);
  memset(p, 0, sizeof *p);
}

/* One forward call's blocks (a run of p->blocks). */
typedef struct forward {
  size_t first, n;
  int64_t bytes;
  uint32_t module; /* index + 1 */
  uint32_t frame;  /* the program's line that called it (0: none) */
  uint32_t stack;  /* its largest block's */
  int modules;     /* distinct modules of its blocks, counted up to 2 */
  uint32_t after;  /* backward passes begun after it (its first block's) */
  int32_t group;   /* its candidate, -1: none */
} forward;

/* Whether frame id f is PyTorch's module-call plumbing (Module._call_impl): the frames outside
 * it called the module. plumbing[f]: 0 not known yet, 1 no, 2 yes. */
static bool module_call(const ms_snapshot *s, uint8_t *plumbing, uint32_t f) {
  if (!plumbing[f])
    plumbing[f] = s->frames[f].python && s->frames[f].name && ms_frame_matches("*_call_impl@*torch/nn/modules/module.py", &s->frames[f]) ? 2 : 1;
  return plumbing[f] == 2;
}

/* The line that called the forward of blocks[0..n): the innermost program frame their stacks
 * share, outside the outermost module call where the stacks show one (a model defined in the
 * program has program frames inside its forward too); 0: none. */
static uint32_t calling_frame(const ms_analysis *a, const ms_graph_block *blocks, size_t n, uint8_t *plumbing) {
  const ms_code_kinds *k = &a->kinds;
  const ms_snapshot *s = a->snap;
  size_t common = MS_CHAIN;
  const uint32_t *base = NULL;
  for (size_t i = 0; i < n; i++) {
    uint32_t id = blocks[i].stack_id;
    if (!id || id >= k->nstacks || id >= s->nstacks || !k->chain_len) return 0;
    const uint32_t *chain = &k->chain[(size_t)id * MS_CHAIN];
    size_t len = k->chain_len[id], outside = 0;
    const ms_stack *st = &s->stacks[id];
    for (uint32_t j = st->depth; j-- > 0;) { /* outermost first: the program's frames before the first module call */
      uint32_t f = st->frames[j];
      if (f >= k->nframes) continue;
      if (module_call(s, plumbing, f)) {
        if (outside && outside < len) len = outside;
        break;
      }
      if (k->frame_kind[f] & MS_CODE_PROGRAM) outside++;
    }
    if (!base) base = chain, common = len;
    size_t j = 0;
    while (j < common && j < len && chain[j] == base[j]) j++;
    common = j;
    if (!common) return 0;
  }
  return base && common ? base[common - 1] : 0;
}

/* Whether what is left of a forward looks like a graph: from two modules at least, 1 MiB at least
 * and a quarter of what the module's forwards saved per call (`saved`, 0: unknown). */
static bool graph_like(const forward *w, int64_t saved) {
  return w->modules >= 2 && w->bytes >= MS_STEP_GROWTH_MIN && (saved <= 0 || w->bytes * 4 >= saved);
}

static int compare_forward(const void *x, const void *y) {
  const forward *a = x, *b = y;
  if (a->module != b->module) return a->module < b->module ? -1 : 1;
  if (a->frame != b->frame) return a->frame < b->frame ? -1 : 1;
  return (a->first > b->first) - (a->first < b->first);
}

static int compare_graph(const void *x, const void *y) {
  const ms_kept_graph *a = x, *b = y;
  if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
  return (a->frame > b->frame) - (a->frame < b->frame);
}

void ms_graphs_finish(ms_analysis *a, ms_graph_pass *p) {
  forward *f = NULL;
  size_t nf = 0, cap = 0;
  ms_kept_graph *g = NULL;
  size_t ng = 0;
  int64_t *site_bytes = NULL;
  uint8_t *plumbing = NULL;
  if (p->failed || !p->n || !(plumbing = calloc(a->kinds.nframes ? a->kinds.nframes : 1, 1))) goto done;
  /* the forwards: runs of one serial (blocks come in the order they were made) */
  for (size_t i = 0; i < p->n;) {
    size_t j = i;
    forward w = {i, 0, 0, p->blocks[i].forward_module, 0, 0, 0, p->blocks[i].after, -1};
    uint32_t first_module = p->blocks[i].module;
    int64_t largest = -1;
    for (; j < p->n && p->blocks[j].forward == p->blocks[i].forward; j++) {
      const ms_graph_block *b = &p->blocks[j];
      w.bytes += b->size;
      if (b->module != first_module) w.modules = 2;
      if (b->size > largest) largest = b->size, w.stack = b->stack_id;
    }
    if (w.modules < 2 && first_module) w.modules = 1;
    w.n = j - i;
    w.frame = calling_frame(a, &p->blocks[i], w.n, plumbing);
    if (nf == cap && !ms_grow(&f, &cap, nf + 1, sizeof *f)) goto done;
    f[nf++] = w;
    i = j;
  }
  qsort(f, nf, sizeof *f, compare_forward);
  /* groups by module and line; a group counts when one of its forwards survived */
  g = calloc(nf, sizeof *g);
  site_bytes = calloc(a->nsites ? a->nsites : 1, sizeof *site_bytes);
  if (!g || !site_bytes) goto done;
  for (size_t i = 0; i < nf;) {
    size_t j = i;
    bool survived = false;
    int32_t m = f[i].module ? (int32_t)f[i].module - 1 : -1;
    int64_t saved = m >= 0 && (size_t)m < a->nmodules ? a->modules[m].saved_bytes : 0;
    for (; j < nf && f[j].module == f[i].module && f[j].frame == f[i].frame; j++) survived |= f[j].after >= 2 && graph_like(&f[j], saved);

    ms_kept_graph *k = &g[ng];
    memset(k, 0, sizeof *k);
    k->module = m;
    k->frame = f[i].frame;
    k->saved_per_call = saved;
    k->top_site = UINT32_MAX; /* chosen below */
    int64_t largest = -1;
    for (size_t x = i; survived && x < j; x++) {
      if (f[x].after == 1 || !graph_like(&f[x], saved))
        continue; /* after one backward, its own: what is left of it is its output, not what it saved */
      int iteration = p->blocks[f[x].first].iteration;
      if (!k->graphs || iteration < k->first_iteration) k->first_iteration = iteration;
      if (!k->graphs || iteration > k->last_iteration) k->last_iteration = iteration;
      if (!k->graphs) k->modules = f[x].modules;
      k->graphs++;
      k->bytes += f[x].bytes;
      k->blocks += (int64_t)f[x].n;
      if (f[x].bytes > largest) largest = f[x].bytes, k->stack_id = f[x].stack;
      f[x].group = (int32_t)ng;
    }
    if (k->graphs) ng++;
    i = j;
  }
  if (!ng) goto done;
  /* the sites' bytes in them, and each candidate's largest site */
  for (size_t x = 0; x < nf; x++) {
    if (f[x].group < 0) continue;
    for (size_t b = f[x].first; b < f[x].first + f[x].n; b++) site_bytes[p->blocks[b].site] += p->blocks[b].size;
  }
  for (size_t x = 0; x < nf; x++) /* each site's candidate: the first that holds some of it */
    for (size_t b = f[x].first; f[x].group >= 0 && b < f[x].first + f[x].n; b++) {
      ms_site *st = &a->sites[p->blocks[b].site];
      st->graph_bytes = site_bytes[p->blocks[b].site];
      if (!st->graph) st->graph = f[x].group + 1; /* renumbered below */
    }
  for (size_t x = 0; x < nf; x++) /* each candidate's site that holds most of it */
    for (size_t b = f[x].first; f[x].group >= 0 && b < f[x].first + f[x].n; b++) {
      ms_kept_graph *k = &g[f[x].group];
      uint32_t s = p->blocks[b].site;
      if (b == f[x].first && k->top_site == UINT32_MAX) k->top_site = s;
      if (site_bytes[s] > site_bytes[k->top_site]) k->top_site = s;
    }
  /* largest first; the sites' candidates renumbered to match */
  int32_t *order = malloc(sizeof *order * ng);
  ms_kept_graph *sorted = malloc(sizeof *sorted * ng);
  if (!order || !sorted) {
    free(order);
    free(sorted);
    goto done;
  }
  memcpy(sorted, g, sizeof *g * ng);
  qsort(sorted, ng, sizeof *sorted, compare_graph);
  for (size_t i = 0; i < ng; i++) /* groups differ by module or line: (module, frame) finds each */
    for (size_t j = 0; j < ng; j++)
      if (g[j].module == sorted[i].module && g[j].frame == sorted[i].frame) order[j] = (int32_t)i + 1;
  for (size_t s = 0; s < a->nsites; s++)
    if (a->sites[s].graph) a->sites[s].graph = order[a->sites[s].graph - 1];
  free(order);
  free(g);
  g = sorted;
  if (ng > MS_KEPT_GRAPHS_MAX) ng = MS_KEPT_GRAPHS_MAX;
  for (size_t s = 0; s < a->nsites; s++)
    if (a->sites[s].graph > (int32_t)ng) a->sites[s].graph = 0;
  a->graphs = g;
  a->ngraphs = ng;
  g = NULL;
done:
  free(plumbing);
  free(g);
  free(f);
  free(site_bytes);
  ms_graphs_free_pass(p);
}
