/* candidates.c: the modules `memsnap predict --advise` may checkpoint when --checkpoint names none
 * (docs/predict.md, "What makes it fit"): those the base's history shows (whatif.c's
 * ms_whatif_found: the module events' paths, else the classes of the Python frames CLASS.forward),
 * each measured by a reading of its own (ms_whatif_new: its calls, what each saved for backward,
 * its forward's time), ranked as PyTorch's SAC estimator ranks its recompute candidates
 * (torch/distributed/_tools/sac_estimator.py, _get_greedy_order_meta: memory per second of
 * recompute, the most first; one whose time is 0 or unknown first, then by memory), and the first
 * MS_CANDIDATES_TRIED kept for advise to try, with the one that frees the most besides.
 *
 * A module's memory: what checkpointing every call of it frees while the backward runs, the sum of
 * what its instances saved for backward (one call each), less the most one of them saved (its
 * recompute holds that again before its backward): a module called once a step (the root, the
 * head) frees nothing and is not tried. Its recompute time: the sum of its instances' forward
 * times (each a mean over its calls), as recorded: the host's clock from its forward's first
 * event to its last, which is what the recompute repeats.
 *
 * Cost: one streamed pass over the history per module found (at most MS_WHATIF_FOUND); the
 * readings of those tried are kept (about 60 bytes per allocation each), the others freed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

static const ms_candidate *rank_base; /* qsort has no context argument */
static int cmp_candidate(const void *a, const void *b) {
  const ms_candidate *x = &rank_base[*(const int *)a], *y = &rank_base[*(const int *)b];
  bool fx = x->freed_bytes > 0, fy = y->freed_bytes > 0;
  if (fx != fy) return fx ? -1 : 1;
  bool ux = x->forward_ns <= 0, uy = y->forward_ns <= 0; /* no time: free to recompute, as SAC ranks it */
  if (ux != uy) return ux ? -1 : 1;
  if (!ux && x->bytes_per_s != y->bytes_per_s) return x->bytes_per_s > y->bytes_per_s ? -1 : 1;
  if (x->freed_bytes != y->freed_bytes) return x->freed_bytes > y->freed_bytes ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

/* Module f measured into *c, its reading into *w (NULL when it has no call with a backward pass
 * after it). 0, or -1 with err set. */
static int measure(ms_snapshot *s, const ms_whatif_module *f, bool optimizer, size_t nalloc, ms_candidate *c,
                   ms_whatif **w, char *err, size_t errlen) {
  const char *pattern = f->pattern;
  ms_whatif_options o = {&pattern, 1, f->shown, optimizer, false};
  char why[1024];
  memset(c, 0, sizeof *c);
  c->module = *f;
  *w = ms_whatif_new(s, &o, why, sizeof why);
  if (!*w) {
    if (!strncmp(why, "cannot checkpoint", 17)) return 0; /* no call of it with a backward pass after it */
    snprintf(err, errlen, "%s", why);
    return -1;
  }
  const ms_whatif_info *in = ms_whatif_info_of(*w);
  if (in->allocations != (int64_t)nalloc) {
    snprintf(err, errlen, "'%s' changed while it was read", s->shown_path);
    ms_whatif_free(*w);
    *w = NULL;
    return -1;
  }
  int64_t most = 0;
  c->instances = in->ninstances;
  c->calls = in->calls;
  for (int i = 0; i < in->ninstances; i++) {
    c->saved_bytes += in->instance[i].saved_bytes;
    c->forward_ns += in->instance[i].forward_ns;
    if (in->instance[i].saved_bytes > most) most = in->instance[i].saved_bytes;
  }
  c->freed_bytes = c->saved_bytes - most;
  c->bytes_per_s = c->forward_ns > 0 ? (double)c->freed_bytes * 1e9 / (double)c->forward_ns : 0;
  return 0;
}

int ms_candidates_find(ms_snapshot *s, const ms_whatif *found_in, bool optimizer, size_t nalloc, bool progress,
                       ms_candidates *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const ms_whatif_module *found;
  int n = ms_whatif_found(found_in, &found);
  out->module_events = ms_whatif_info_of(found_in)->module_events;
  if (n <= 0) return 0;
  ms_whatif **w = calloc((size_t)n, sizeof *w);
  int *order = malloc(sizeof *order * (size_t)n);
  out->c = calloc((size_t)n, sizeof *out->c);
  out->tried = calloc(MS_CANDIDATES_TRIED + 1, sizeof *out->tried);
  int rc = -1;
  if (!w || !order || !out->c || !out->tried) {
    snprintf(err, errlen, "out of memory");
    goto cleanup;
  }
  for (int i = 0; i < n; i++) {
    if (progress) fprintf(stderr, "\rpredict: measuring the modules found: %d of %d%20s", i + 1, n, "");
    if (measure(s, &found[i], optimizer, nalloc, &out->c[i], &w[i], err, errlen) != 0) goto cleanup;
    order[i] = i;
  }
  rank_base = out->c;
  qsort(order, (size_t)n, sizeof *order, cmp_candidate);
  int most = -1; /* the one that frees the most */
  for (int i = 0; i < n; i++)
    if (out->c[i].freed_bytes > 0 && (most < 0 || out->c[i].freed_bytes > out->c[most].freed_bytes)) most = i;
  for (int r = 0; r < n; r++) {
    int i = order[r];
    bool pick = out->c[i].freed_bytes > 0 && w[i] &&
                (out->ntried < MS_CANDIDATES_TRIED || (i == most && out->ntried == MS_CANDIDATES_TRIED));
    if (!pick) continue;
    out->tried[out->ntried++] = w[i];
    w[i] = NULL;
    out->c[i].tried = out->ntried;
  }
  ms_candidate *ranked = malloc(sizeof *ranked * (size_t)n);
  if (!ranked) {
    snprintf(err, errlen, "out of memory");
    goto cleanup;
  }
  for (int r = 0; r < n; r++) ranked[r] = out->c[order[r]];
  free(out->c);
  out->c = ranked;
  out->n = n;
  rc = 0;
cleanup:
  if (progress) fprintf(stderr, "\r%80s\r", "");
  for (int i = 0; w && i < n; i++) ms_whatif_free(w[i]);
  free(w);
  free(order);
  if (rc != 0) ms_candidates_free(out);
  return rc;
}

void ms_candidates_free(ms_candidates *c) {
  for (int i = 0; c->tried && i < c->ntried; i++) ms_whatif_free(c->tried[i]);
  free(c->tried);
  free(c->c);
  memset(c, 0, sizeof *c);
}
