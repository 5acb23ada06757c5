/* fewest_ranks.c: the fewest ranks that fit a card (`memsnap predict --shard STRATEGY` without N, and
 * --advise's strategies so given; docs/predict.md, "Sharded").
 *
 * The search: rank 0's history under the strategy at N = 1, 2, 4, ... MS_FEWEST_MAX (powers of
 * two, as clusters are sized), each replayed on the card, the first N that fits kept. It stops
 * early when rank 0's peak reserved has stopped falling: at N it is no lower than at N / 2, nor
 * that than at N / 4. What sharding divides by N is then too small to move the peak (DDP keeps a
 * whole replica on every rank, so its peak never falls; under ZeRO-1 and 2 the parameters stay
 * whole; under FSDP2 and ZeRO-3 the activations and a unit's gathered parameters do). Two
 * doublings, not one: reserved memory moves in segments (2 MiB, 20 MiB), so a step can stay on
 * one rounding and the next fall again (88, 88, 86 MiB at 8, 16, 32 in the tests' synthetic
 * recording). The search costs a replay per N tried (two where it does not fit: predict.c
 * replays it again without a limit, for what it needs, which is the peak compared), 11 Ns at
 * most. The rule is one
 * function (ms_fewest_step), used by both callers: ms_predict_fewest here, which replays one N of
 * every strategy still searching per round on the sweep's workers (predict.c's ms_predict_at),
 * keeping every row tried for the table, and advise.c, which walks one strategy's Ns in one row.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

enum { STEPS = 11 }; /* the Ns a search may try: 1, 2, 4, ... MS_FEWEST_MAX */
_Static_assert(1 << (STEPS - 1) == MS_FEWEST_MAX, "STEPS counts the powers of two up to MS_FEWEST_MAX");

void ms_fewest_start(ms_fewest *s, int32_t strategy) {
  memset(s, 0, sizeof *s);
  s->strategy = strategy;
  s->ranks = 1;
  s->peak = -1;
}

bool ms_fewest_step(ms_fewest *s, const ms_replay_result *r) {
  if (r->failed) {
    s->stop = MS_FEWEST_FAILED;
    return false;
  }
  if (ms_replay_fits(r)) {
    s->fewest = s->ranks;
    s->stop = MS_FEWEST_FITS;
    return false;
  }
  int64_t peak = ms_replay_worst_peak(r); /* what it needs: a replay that does not fit is replayed without a limit */
  s->flat = s->peak >= 0 && peak >= s->peak ? s->flat + 1 : 0;
  s->peak = peak;
  if (s->flat >= 2) {
    s->stop = MS_FEWEST_FLAT;
    return false;
  }
  if (s->ranks >= MS_FEWEST_MAX) {
    s->stop = MS_FEWEST_LIMIT;
    return false;
  }
  s->ranks *= 2;
  return true;
}

void ms_fewest_of_result(const ms_replay_result *r, ms_fewest *s) {
  ms_fewest_start(s, r->change.strategy);
  s->ranks = r->change.ranks;
  s->peak = ms_replay_worst_peak(r);
  if (r->failed) s->stop = MS_FEWEST_FAILED;
  else if (ms_replay_fits(r)) s->stop = MS_FEWEST_FITS, s->fewest = s->ranks;
  else s->stop = s->ranks >= MS_FEWEST_MAX ? MS_FEWEST_LIMIT : MS_FEWEST_FLAT;
}

void ms_fewest_why(const ms_fewest *s, char *out, size_t len) {
  const char *name = ms_shard_name(s->strategy);
  if (s->stop == MS_FEWEST_FITS) {
    snprintf(out, len, "%s:%d fits", name, (int)s->fewest);
  } else if (s->stop == MS_FEWEST_FAILED) {
    snprintf(out, len, "the replay at %s:%d failed", name, (int)s->ranks);
  } else if (s->stop == MS_FEWEST_LIMIT) {
    snprintf(out, len, "none up to %s:%d fits, and the search stops there", name, MS_FEWEST_MAX);
  } else {
    static const char *const why[MS_SHARDS] = {
        "",
        "what FSDP2 leaves whole on each rank (the activations of its own batch, a unit's gathered parameters) no longer "
        "shrinks with N",
        "DDP keeps a whole replica (parameters, gradients, optimizer state) on every rank, so rank 0's memory does not "
        "fall with N",
        "ZeRO-1 shards only the optimizer state: the parameters, the gradients and the activations stay whole on each rank",
        "ZeRO-2 shards the optimizer state and the gradients: the parameters and the activations stay whole on each rank",
        "what ZeRO-3 leaves whole on each rank (the activations of its own batch, a module's gathered parameters) no "
        "longer shrinks with N"};
    snprintf(out, len, "rank 0's peak reserved stopped falling (at %s:%d no lower than at %s:%d): %s", name, (int)s->ranks,
             name, (int)(s->ranks / 4), s->strategy > 0 && s->strategy < MS_SHARDS ? why[s->strategy] : "");
  }
}

int ms_predict_fewest(ms_predict *m, const int64_t *ats, int nat, const ms_replay_config *configs, int nconf,
                     const ms_change *changes, int nchange, const ms_change *search, int nsearch, ms_fewest *found,
                     const ms_rows_options *o, ms_sweep *out, int *nrows_change, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (!changes) nchange = 0;
  size_t per = (size_t)nat * (size_t)nconf; /* rows per change: each size and setting */
  /* each round's rows, kept until all are known: by change in the order replayed, per rows each */
  ms_replay_result *kept = NULL;
  int *owner = malloc(sizeof *owner * (size_t)(nchange + nsearch * STEPS)); /* a kept change's search (-1: a fixed change) */
  ms_change *round = malloc(sizeof *round * (size_t)(nchange + nsearch + 1));
  int *which = malloc(sizeof *which * (size_t)(nchange + nsearch + 1)), *slot = NULL;
  int nkept = 0, rc = -1;
  if (!owner || !round || !which) {
    snprintf(err, errlen, "out of memory");
    goto cleanup;
  }
  for (int i = 0; i < nsearch; i++) ms_fewest_start(&found[i], search[i].strategy);
  for (bool first = true;; first = false) { /* STEPS rounds at most */
    int n = 0;
    for (int h = 0; first && h < nchange; h++) round[n] = changes[h], which[n++] = -1;
    for (int i = 0; i < nsearch; i++)
      if (found[i].stop == MS_FEWEST_SEARCHING) {
        round[n] = search[i];
        round[n].ranks = found[i].ranks;
        which[n++] = i;
      }
    if (n == 0) break;
    ms_replay_result *grown = realloc(kept, sizeof *kept * per * (size_t)(nkept + n));
    if (!grown) {
      snprintf(err, errlen, "out of memory");
      goto cleanup;
    }
    kept = grown;
    ms_sweep sw;
    if (ms_predict_at(m, ats, nat, configs, nconf, round, n, o, &sw, err, errlen) != 0) goto cleanup;
    for (int h = 0; h < n; h++) { /* ms_predict_at's row of size a, change h, setting c: (a * n + h) * nconf + c */
      for (int a = 0; a < nat; a++)
        for (int c = 0; c < nconf; c++) kept[(size_t)nkept * per + (size_t)(a * nconf + c)] = sw.results[(a * n + h) * nconf + c];
      owner[nkept++] = which[h];
      if (which[h] >= 0) ms_fewest_step(&found[which[h]], &sw.results[h * nconf]); /* at ats[0] under configs[0] */
    }
    ms_sweep_free(&sw);
  }
  /* out: the fixed changes as given, then each search's Ns in order */
  if (!(slot = malloc(sizeof *slot * (size_t)(nkept ? nkept : 1)))) {
    snprintf(err, errlen, "out of memory");
    goto cleanup;
  }
  int total = 0;
  for (int k = 0; k < nkept; k++)
    if (owner[k] < 0) slot[total++] = k;
  for (int i = 0; i < nsearch; i++)
    for (int k = 0; k < nkept; k++)
      if (owner[k] == i) slot[total++] = k;
  if (ms_sweep_alloc(out, (int)((size_t)total * per), err, errlen) != 0) goto cleanup;
  for (int h = 0; h < total; h++)
    for (int a = 0; a < nat; a++)
      for (int c = 0; c < nconf; c++)
        out->results[(a * total + h) * nconf + c] = kept[(size_t)slot[h] * per + (size_t)(a * nconf + c)];
  ms_replay_rank(out->results, out->nrows, out->order);
  *nrows_change = total;
  rc = 0;
cleanup:
  free(kept);
  free(owner);
  free(round);
  free(which);
  free(slot);
  return rc;
}
