/* advise.c: what makes a size fit a card (`memsnap predict --advise`, docs/predict.md): the
 * changes a user would make, each replayed as predict.c synthesises it, smallest first.
 *
 * The candidates: the allocator's settings (the sweep's 20 rows, the recorded ones first);
 * for each set of modules (those --checkpoint names, or each module candidates.c found and chose
 * to try: ms_change's `modules`), checkpointing the fewest of its instances (whatif.c's, ranked by
 * what one call saves for backward, the most first, as PyTorch's SAC estimator ranks its
 * candidates by memory), found by bisection over their number under the recorded settings and
 * with expandable segments; each optimizer lighter than the recorded one (less state per
 * parameter), alone and with the fewest checkpointed instances of each set. Each candidate is
 * one row on the sweep's workers (a bisection's replays run in its row), then, with more than one
 * run, a second set of rows searches the largest size that fits with each (predict.c's search). The bisection assumes that checkpointing one more
 * instance never raises the peak, as freeing what a forward saved does not. With --shard's
 * strategies (ms_advise_shards), each strategy is one more candidate, the last kind: its Ns tried
 * from the fewest ranks up, the first that fits kept; a strategy given without N has its Ns
 * searched as fewest_ranks.c searches them (1, 2, 4, ..., stopping when rank 0's peak stops falling).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

typedef struct candidate {
  int kind;
  ms_replay_config config;
  ms_change change;
  bool fewest; /* checkpoint: the fewest instances that fit (bisection); shard: its N searched (fewest_ranks.c) */
} candidate;

typedef struct advise_ctx {
  ms_predict *m;
  const candidate *cand;
  const ms_advice_row *rows; /* the second set: the changes the first found */
  int64_t at;
  const ms_change *shards;   /* --shard's strategies and Ns */
  int nshards;
} advise_ctx;

/* The module instances a change may checkpoint (those of the modules its `modules` names). */
static int instances_of(const ms_predict *m, const ms_change *c) {
  const ms_whatif *w = ms_predict_whatif_for(m, c);
  return w ? ms_whatif_info_of(w)->ninstances : 0;
}

/* A candidate at the size asked; with `fewest`, the fewest instances checkpointed that fit (all
 * of them when none does). */
static int at_row(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, int row, ms_replay_result *r, void *arg) {
  const advise_ctx *x = arg;
  const candidate *k = &x->cand[row];
  ms_change ch = k->change;
  if (k->kind == MS_ADVICE_SHARD && k->fewest) { /* the fewest ranks that fit, searched */
    ms_fewest search;
    ms_fewest_start(&search, ch.strategy);
    for (;;) {
      ch.ranks = search.ranks;
      int rc = ms_predict_replay(x->m, s, p, c, &ch, x->at, r);
      if (rc != 0 || !ms_fewest_step(&search, r)) return rc;
    }
  }
  if (k->kind == MS_ADVICE_SHARD) { /* the fewest ranks given that fit: the Ns from the smallest up */
    int32_t tried = 0;
    for (;;) {
      int32_t next = 0;
      for (int i = 0; i < x->nshards; i++)
        if (x->shards[i].strategy == ch.strategy && x->shards[i].ranks > tried && (!next || x->shards[i].ranks < next))
          next = x->shards[i].ranks;
      if (!next) return 0;
      ch.ranks = tried = next;
      int rc = ms_predict_replay(x->m, s, p, c, &ch, x->at, r);
      if (rc != 0 || ms_replay_fits(r)) return rc;
    }
  }
  if (!k->fewest) return ms_predict_replay(x->m, s, p, c, &ch, x->at, r);
  int ninstances = instances_of(x->m, &ch);
  ch.checkpoint = ninstances;
  int rc = ms_predict_replay(x->m, s, p, c, &ch, x->at, r);
  if (rc != 0 || !ms_replay_fits(r)) return rc;
  ms_replay_result *probe = malloc(sizeof *probe);
  if (!probe) return rc; /* the answer with every instance stands */
  int lo = 0, hi = ninstances;
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    ch.checkpoint = mid;
    if ((rc = ms_predict_probe(x->m, s, p, c, &ch, x->at, probe)) != 0) break;
    if (ms_replay_fits(probe)) hi = mid, *r = *probe;
    else lo = mid;
  }
  free(probe);
  return rc;
}

/* A candidate's change (as the first rows found it): the largest size that fits. */
static int fit_row(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, int row, ms_replay_result *r, void *arg) {
  const advise_ctx *x = arg;
  return ms_predict_search(x->m, s, p, c, &x->rows[row].at.change, r);
}

static const ms_advice_row *rank_rows;
static int cmp_row(const void *a, const void *b) {
  const ms_advice_row *x = &rank_rows[*(const int *)a], *y = &rank_rows[*(const int *)b];
  if (x->fits != y->fits) return x->fits ? -1 : 1;
  if (x->kind != y->kind) return x->kind - y->kind;
  if (x->at.change.checkpoint != y->at.change.checkpoint) return x->at.change.checkpoint < y->at.change.checkpoint ? -1 : 1;
  if (x->at.change.ranks != y->at.change.ranks) return x->at.change.ranks < y->at.change.ranks ? -1 : 1;
  if (x->largest.at != y->largest.at) return x->largest.at > y->largest.at ? -1 : 1;
  int64_t px = ms_replay_worst_peak(&x->at), py = ms_replay_worst_peak(&y->at);
  if (px != py) return px < py ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

int ms_advise(ms_predict *m, int64_t at, const ms_replay_config *base, const ms_rows_options *o, ms_advice *out, char *err,
              size_t errlen) {
  return ms_advise_shards(m, at, base, NULL, 0, o, out, err, errlen);
}

int ms_advise_shards(ms_predict *m, int64_t at, const ms_replay_config *base, const ms_change *shards, int nshards,
                     const ms_rows_options *o, ms_advice *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  out->at = at;
  out->best = -1;
  ms_replay_plan *p = ms_predict_plan(m);
  out->capacity = base->capacity ? base->capacity : ms_replay_recorded_capacity(p);
  const ms_whatif *w = ms_predict_whatif(m);
  const ms_whatif_info *in = w ? ms_whatif_info_of(w) : NULL;
  candidate *cand = calloc(MS_ADVICE_MAX, sizeof *cand);
  ms_replay_config grid[MS_SWEEP_GRID_ROWS];
  ms_sweep first, second;
  memset(&first, 0, sizeof first);
  memset(&second, 0, sizeof second);
  int n = 0, rc = -1;
  if (!cand) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  int ngrid = ms_replay_grid(p, base, grid, err, errlen);
  if (ngrid < 0) goto cleanup;
  const ms_change none = {0, 0, MS_OPT_KEEP, 0, MS_SHARD_NONE, 0};
  for (int i = 0; i < ngrid; i++) cand[n++] = (candidate){i ? MS_ADVICE_SETTING : MS_ADVICE_NONE, grid[i], none, false};
  /* the modules whose instances may be checkpointed: those --checkpoint names (0), or those found
     and tried (1, 2, ...) */
  const ms_candidates *found = ms_predict_candidates(m);
  int32_t sets[MS_CANDIDATES_TRIED + 1];
  int nsets = 0;
  if (found)
    for (int k = 1; k <= found->ntried; k++) sets[nsets++] = k;
  else if (in && in->ninstances > 0)
    sets[nsets++] = 0;
  ms_replay_config expandable = grid[0];
  ms_replay_config_set(&expandable, "expandable_segments", "True", NULL, 0);
  for (int k = 0; k < nsets; k++) {
    ms_change ch = {0, sets[k], MS_OPT_KEEP, 0, MS_SHARD_NONE, 0};
    cand[n++] = (candidate){MS_ADVICE_CHECKPOINT, grid[0], ch, true};
    cand[n++] = (candidate){MS_ADVICE_CHECKPOINT_SETTING, expandable, ch, true};
  }
  if (in && in->optimizer && in->steps > 0) {
    static const int lighter[] = {MS_OPT_ADAFACTOR, MS_OPT_SGD_MOMENTUM, MS_OPT_SGD};
    static const int lighter_than[] = {1, 2, 1}; /* the recorded state tensors per parameter each is lighter than */
    for (int i = 0; i < 3; i++) {
      if (in->tensors_per_param < lighter_than[i]) continue;
      ms_change ch = {0, 0, lighter[i], 0, MS_SHARD_NONE, 0};
      cand[n++] = (candidate){MS_ADVICE_OPTIMIZER, grid[0], ch, false};
      for (int k = 0; k < nsets; k++) {
        ch.modules = sets[k];
        cand[n++] = (candidate){MS_ADVICE_OPTIMIZER_CHECKPOINT, grid[0], ch, true};
      }
    }
  }
  for (int s = MS_SHARD_FSDP2; s < MS_SHARDS && n < MS_ADVICE_MAX; s++) { /* each strategy given, once */
    int32_t most = 0;
    bool search = false;
    for (int i = 0; i < nshards; i++) {
      if (shards[i].strategy == s && shards[i].ranks > most) most = shards[i].ranks;
      search |= shards[i].strategy == s && shards[i].ranks == 0;
    }
    if (search) cand[n++] = (candidate){MS_ADVICE_SHARD, grid[0], {0, 0, MS_OPT_KEEP, 0, s, 1}, true};
    else if (most) cand[n++] = (candidate){MS_ADVICE_SHARD, grid[0], {0, 0, MS_OPT_KEEP, 0, s, most}, false};
  }
  ms_replay_config *configs = malloc(sizeof *configs * (size_t)n);
  if (!configs) {
    snprintf(err, errlen, "out of memory");
    goto cleanup;
  }
  for (int i = 0; i < n; i++) configs[i] = cand[i].config;
  advise_ctx x = {m, cand, NULL, at, shards, nshards};
  ms_rows_options ro = o ? *o : (ms_rows_options){0};
  if (ms_replay_rows(ms_predict_base(m), p, configs, n, at_row, &x, &ro, &first, err, errlen) != 0) {
    free(configs);
    goto cleanup;
  }
  if (!(out->row = calloc((size_t)n, sizeof *out->row))) {
    free(configs);
    snprintf(err, errlen, "out of memory");
    goto cleanup;
  }
  out->n = n;
  for (int i = 0; i < n; i++) {
    out->row[i].kind = cand[i].kind;
    out->row[i].at = first.results[i];
    out->row[i].fits = ms_replay_fits(&first.results[i]);
    out->row[i].searched = cand[i].kind == MS_ADVICE_SHARD && cand[i].fewest;
    out->row[i].largest.at = 0;
  }
  out->searched = ms_predict_info_of(m)->nruns > 1;
  if (out->searched) {
    x.rows = out->row;
    if (ro.progress) ro.progress = "predict: changes searched";
    if (ms_replay_rows(ms_predict_base(m), p, configs, n, fit_row, &x, &ro, &second, err, errlen) != 0) {
      free(configs);
      goto cleanup;
    }
    for (int i = 0; i < n; i++) out->row[i].largest = second.results[i];
  }
  free(configs);
  int *order = malloc(sizeof *order * (size_t)n);
  ms_advice_row *ranked = malloc(sizeof *ranked * (size_t)n);
  if (!order || !ranked) {
    free(order);
    free(ranked);
    snprintf(err, errlen, "out of memory");
    goto cleanup;
  }
  for (int i = 0; i < n; i++) order[i] = i;
  rank_rows = out->row;
  qsort(order, (size_t)n, sizeof *order, cmp_row);
  for (int i = 0; i < n; i++) ranked[i] = out->row[order[i]];
  free(out->row);
  free(order);
  out->row = ranked;
  out->best = n > 0 && out->row[0].fits ? 0 : -1;
  rc = 0;
cleanup:
  if (first.results) ms_sweep_free(&first);
  if (second.results) ms_sweep_free(&second);
  free(cand);
  if (rc != 0) ms_advice_free(out);
  return rc;
}

void ms_advice_free(ms_advice *a) {
  free(a->row);
  a->row = NULL;
  a->n = 0;
}
