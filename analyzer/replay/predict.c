/* predict.c: a program's peaks at a size it was not run at (batch, sequence length), from runs at
 * two or three sizes (`memsnap predict`, docs/predict.md).
 *
 * The model: the runs are read and aligned allocation by allocation (align.c) with the run at the
 * largest size, the base. Each allocation of the base is a law of the size through the points it
 * has: its request in each run where it is aligned. Through two points a line, through three a
 * parabola (Lagrange's polynomial, in exact integers: requests that follow the law exactly are
 * predicted exactly, others to the nearest byte); an allocation with the same request in every run
 * keeps it (parameters, optimizer state), and one aligned with no other run keeps the base's.
 * The history at size N is the base's, event for event (its order, frees, streams, devices,
 * empty_cache calls, external memory), with each allocation's request taken from its law at N;
 * an allocation whose law gives 0 bytes or less at N is left out, with its free. The recorded
 * run's out-of-memory events are left out too: whether N runs out of memory is the replay's to say.
 *
 * That history is never stored: it is made as the replay reads it (ms_replay_plan_set_source),
 * from the base's events streamed again, so memory follows the runs' allocations (a few words
 * each), not a copy of the history per size. Replays at several sizes and settings run on the
 * sweep's workers (sweep.c's ms_replay_rows), one row each; the search for the largest size that
 * fits is a row too: from the base's size, doubling until a size does not fit, then bisecting
 * (fits: no allocation failed, and no device's peak reserved, external memory included, passed
 * its capacity), which takes about 2 log2(N) replays.
 *
 * Refused, with the reason: a run whose history starts late (a ring that dropped events; blocks
 * live before recording started or frees of blocks no allocation made, past MS_PREDICT_MAX_BEFORE
 * of its bytes or frees: fewer are said in a note), runs whose histories do not
 * align (less than MS_PREDICT_MIN_ALIGNED of a run's allocations or bytes aligned: another program,
 * other control flow, other steps), a run without allocations.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay.h"

struct ms_predict {
  ms_predict_info info;
  ms_whatif *whatif; /* what a change to the program acts on (NULL: none asked) */
  ms_shard *shard;   /* what sharding acts on (NULL: none asked) */
  ms_candidates found; /* the modules advise may checkpoint, when none is named (find_modules) */
  bool finding;
  ms_change current; /* the change being synthesised */
  ms_snapshot base; /* the run at the largest size: opened, stacks loaded */
  bool base_open;
  ms_replay_plan *plan;
  int64_t *size[MS_PREDICT_MAX_RUNS]; /* by run: each base allocation's request in that run, -1 not aligned */
  size_t nalloc;
  int64_t at;      /* the size being synthesised */
  int64_t dropped; /* allocations left out at `at`: 0 bytes or less */
};

/* Adds a note (printf-style) to the model's, unless MS_PREDICT_NOTES are there already. */
#define INFO_NOTE(in, ...)                                     \
  do {                                                         \
    char note_[sizeof (in)->notes[0]];                         \
    snprintf(note_, sizeof note_, __VA_ARGS__);                \
    if ((in)->nnotes < MS_PREDICT_NOTES)                       \
      memcpy((in)->notes[(in)->nnotes++], note_, sizeof note_); \
  } while (0)

/* ---- the law of an allocation -------------------------------------------------------------- */

/* a / b rounded to the nearest integer (halves up), b != 0. */
static __int128 round_div(__int128 a, __int128 b) {
  if (b < 0) a = -a, b = -b;
  __int128 q = a / b, r = a % b;
  if (r < 0) q--, r += b; /* floor */
  return 2 * r >= b ? q + 1 : q;
}

int64_t ms_predict_law(const int64_t *xs, const int64_t *ys, int n, int64_t at) {
  __int128 v;
  if (n <= 1) {
    v = n == 1 ? ys[0] : 0;
  } else if (n == 2) {
    v = ys[0] + round_div((__int128)(ys[1] - ys[0]) * (at - xs[0]), xs[1] - xs[0]);
  } else { /* Lagrange over the common denominator (x0-x1)(x0-x2)(x1-x2): |terms| < 2^40 * 2^48 * 2^24 */
    __int128 d = (__int128)(xs[0] - xs[1]) * (xs[0] - xs[2]) * (xs[1] - xs[2]);
    __int128 t = (__int128)ys[0] * (at - xs[1]) * (at - xs[2]) * (xs[1] - xs[2]) -
                 (__int128)ys[1] * (at - xs[0]) * (at - xs[2]) * (xs[0] - xs[2]) +
                 (__int128)ys[2] * (at - xs[0]) * (at - xs[1]) * (xs[0] - xs[1]);
    v = round_div(t, d);
  }
  if (v > MS_PREDICT_MAX_BYTES) v = MS_PREDICT_MAX_BYTES;
  if (v < -MS_PREDICT_MAX_BYTES) v = -MS_PREDICT_MAX_BYTES;
  return (int64_t)v;
}

/* The points of base allocation k: the runs where it is aligned, by size. */
static int points(const ms_predict *m, size_t k, int64_t *xs, int64_t *ys) {
  int n = 0;
  for (int r = 0; r < m->info.nruns; r++)
    if (m->size[r][k] >= 0) xs[n] = m->info.run[r].at, ys[n++] = m->size[r][k];
  return n;
}

/* Sorts out the base's allocations by their law, for the report. */
static void classify(ms_predict *m) {
  ms_predict_info *in = &m->info;
  for (size_t k = 0; k < m->nalloc; k++) {
    int64_t xs[MS_PREDICT_MAX_RUNS], ys[MS_PREDICT_MAX_RUNS], bytes = m->size[in->base][k];
    int n = points(m, k, xs, ys);
    bool same = true;
    for (int i = 1; i < n; i++) same &= ys[i] == ys[0];
    if (n < 2) {
      in->unaligned++, in->unaligned_bytes += bytes;
      continue;
    }
    if (same) {
      in->constant++, in->constant_bytes += bytes;
      continue;
    }
    int lo = 0, hi = 0;
    for (int i = 1; i < n; i++) {
      if (xs[i] < xs[lo]) lo = i;
      if (xs[i] > xs[hi]) hi = i;
    }
    if (ys[hi] < ys[lo]) in->shrinking++;
    if (n == 3 && (__int128)ys[0] * (xs[1] - xs[2]) - (__int128)ys[1] * (xs[0] - xs[2]) + (__int128)ys[2] * (xs[0] - xs[1]) != 0)
      in->quadratic++, in->quadratic_bytes += bytes;
    else
      in->linear++, in->linear_bytes += bytes;
  }
}

/* ---- the synthesised history ------------------------------------------------------------- */

/* Base allocation k's request at the size being synthesised: its law there. */
static int64_t law_size(void *arg, size_t k) {
  ms_predict *m = arg;
  if (k >= m->nalloc) return INT64_MIN; /* not read: the file changed since */
  int64_t xs[MS_PREDICT_MAX_RUNS], ys[MS_PREDICT_MAX_RUNS];
  int n = points(m, k, xs, ys);
  return ms_predict_law(xs, ys, n, m->at);
}

/* The history at m->at, as if the program had changed by m->current (whatif.c makes it). */
static int synth_each(ms_snapshot *s, void *arg, int (*fn)(const ms_event *e, void *fnarg), void *fnarg) {
  ms_predict *m = arg;
  return ms_shard_each(m->shard, ms_predict_whatif_for(m, &m->current), &m->current, s, law_size, m, &m->dropped, fn, fnarg);
}

/* ---- reading and aligning the runs -------------------------------------------------------- */

static double share(int64_t part, int64_t whole) { return whole > 0 ? (double)part / (double)whole : 1.0; }

/* Reads run r into h (s left open): 0, or -1 with err set (why it cannot be predicted from). */
static int read_run(ms_predict *m, int r, ms_snapshot *s, ms_history *h, char *settings, size_t slen, uint64_t *capacity,
                    char *err, size_t errlen) {
  ms_predict_run *run = &m->info.run[r];
  if (ms_open(s, run->path) != 0 || ms_load_stacks(s) != 0) {
    snprintf(err, errlen, "%s", s->error);
    return -1;
  }
  snprintf(run->shown, sizeof run->shown, "%s", s->shown_path);
  if (s->dropped > 0) {
    snprintf(err, errlen, "cannot predict from '%s': its history starts late (the ring dropped its %lld oldest events); "
             "record it again keeping every event (memsnap run --max-entries, MEMSNAP_MAX_ENTRIES)", s->shown_path,
             (long long)s->dropped);
    return -1;
  }
  ms_replay_plan *p = ms_replay_plan_new(s);
  if (!p || ms_history_read(s, h) != 0) {
    snprintf(err, errlen, "%s", s->error);
    ms_replay_plan_free(p);
    return -1;
  }
  ms_replay_config c;
  ms_replay_recorded_config(p, &c);
  ms_replay_describe_config(&c, settings, slen);
  *capacity = ms_replay_recorded_capacity(p);
  if (r == m->info.base) m->plan = p;
  else ms_replay_plan_free(p);
  run->events = h->events;
  run->allocations = (int64_t)h->nalloc;
  run->frees = h->frees;
  run->bytes = h->bytes;
  run->ooms = h->ooms;
  run->devices = __builtin_popcountll(h->devices);
  run->before_blocks = h->before_blocks;
  run->before_bytes = h->before_bytes;
  run->unknown_frees = h->unknown_frees;
  if (h->nalloc == 0) {
    snprintf(err, errlen, "cannot predict from '%s': its history has no allocation", s->shown_path);
    return -1;
  }
  /* a few blocks from before the history are said in a note; more make the prediction wrong */
  if ((double)h->before_bytes > MS_PREDICT_MAX_BEFORE * (double)h->live_peak ||
      (double)h->unknown_frees > MS_PREDICT_MAX_BEFORE * (double)(h->frees + h->unknown_frees)) {
    snprintf(err, errlen, "cannot predict from '%s': its history does not start at the program's start (%lld blocks "
             "of %lld bytes live at the snapshot were allocated before it, %lld frees are of blocks it did not "
             "allocate); record the whole run (memsnap run records from the first allocation)", s->shown_path,
             (long long)h->before_blocks, (long long)h->before_bytes, (long long)h->unknown_frees);
    return -1;
  }
  return 0;
}

/* Whether the runs align well enough; err says why not. */
static int check_alignment(ms_predict *m, const ms_alignment *al, char *err, size_t errlen) {
  const ms_predict_info *in = &m->info;
  for (int r = 0; r < in->nruns; r++) {
    const ms_predict_run *run = &in->run[r];
    double sa = share(run->aligned_allocs, run->allocations), sb = share(run->aligned_bytes, run->bytes);
    if (sa >= MS_PREDICT_MIN_ALIGNED && sb >= MS_PREDICT_MIN_ALIGNED) continue;
    const ms_predict_run *base = &in->run[in->base];
    const ms_alignment *a = &al[r == in->base ? (in->base == 0 ? 1 : 0) : r];
    const ms_predict_run *other = r == in->base ? &in->run[in->base == 0 ? 1 : 0] : run;
    char where[1200] = "";
    if (a->parted)
      snprintf(where, sizeof where, "; they part at event %lld of '%s' and event %lld of '%s' and do not agree again",
               (long long)a->part_x, base->shown, (long long)a->part_y, other->shown);
    else if (a->differences)
      snprintf(where, sizeof where, "; the first difference is at event %lld of '%s' and event %lld of '%s'",
               (long long)a->first_x, base->shown, (long long)a->first_y, other->shown);
    snprintf(err, errlen, "cannot predict: the histories do not align: %.1f%% of the allocations of '%s' (%.1f%% of its "
             "bytes) have a counterpart in the other run%s, and %.0f%% of both are needed%s; record the same program "
             "(same steps, same code path) at each size", 100 * sa, run->shown, 100 * sb, in->nruns > 2 ? "s" : "",
             100 * MS_PREDICT_MIN_ALIGNED, where);
    return -1;
  }
  return 0;
}

ms_predict *ms_predict_new(const ms_predict_input *inputs, int n, const ms_predict_options *opt, char *err, size_t errlen) {
  static const ms_predict_options none = {0};
  if (!opt) opt = &none;
  bool progress = opt->progress;
  ms_predict *m = calloc(1, sizeof *m);
  ms_history h[MS_PREDICT_MAX_RUNS];
  ms_alignment al[MS_PREDICT_MAX_RUNS];
  memset(h, 0, sizeof h);
  memset(al, 0, sizeof al);
  if (!m) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  ms_predict_info *in = &m->info;
  if (n < 1 || n > MS_PREDICT_MAX_RUNS) {
    snprintf(err, errlen, "one to three runs are needed, not %d", n);
    goto cleanup;
  }
  in->nruns = n;
  for (int r = 0; r < n; r++) {
    snprintf(in->run[r].path, sizeof in->run[r].path, "%s", inputs[r].path);
    in->run[r].at = inputs[r].at;
    if (inputs[r].at > in->run[in->base].at) in->base = r;
  }
  char settings[MS_PREDICT_MAX_RUNS][1200];
  uint64_t capacity[MS_PREDICT_MAX_RUNS];
  for (int r = 0; r < n; r++) {
    ms_snapshot other, *s = r == in->base ? &m->base : &other;
    if (progress) fprintf(stderr, "\rpredict: reading %d of %d: %.200s", r + 1, n, in->run[r].path);
    int rc = read_run(m, r, s, &h[r], settings[r], sizeof settings[r], &capacity[r], err, errlen);
    if (s == &m->base) m->base_open = s->db != NULL;
    else if (s->db) ms_close(s);
    if (rc != 0) goto cleanup;
  }
  if (progress) fprintf(stderr, "\rpredict: aligning the runs%60s\r", "");
  const ms_history *b = &h[in->base];
  m->nalloc = b->nalloc;
  for (int r = 0; r < n; r++) {
    if (!(m->size[r] = malloc(sizeof *m->size[r] * (m->nalloc + 1)))) {
      snprintf(err, errlen, "out of memory aligning the runs");
      goto cleanup;
    }
    if (r == in->base) {
      memcpy(m->size[r], b->size, sizeof *b->size * m->nalloc);
      continue;
    }
    if (ms_histories_align(b, &h[r], &al[r]) != 0) {
      snprintf(err, errlen, "out of memory aligning the runs");
      goto cleanup;
    }
    memcpy(m->size[r], al[r].size_in_y, sizeof *al[r].size_in_y * m->nalloc);
    in->run[r].aligned_allocs = al[r].allocs;
    in->run[r].aligned_frees = al[r].frees;
    in->run[r].aligned_bytes = al[r].y_bytes;
    in->differences += al[r].differences;
  }
  /* the base: its allocations aligned with every other run */
  ms_predict_run *br = &in->run[in->base];
  for (size_t k = 0; k < m->nalloc; k++) {
    bool all = true;
    for (int r = 0; r < n; r++) all &= m->size[r][k] >= 0;
    if (all) br->aligned_allocs++, br->aligned_bytes += m->size[in->base][k];
  }
  br->aligned_frees = b->frees;
  for (int r = 0; r < n; r++)
    if (r != in->base && al[r].frees < br->aligned_frees) br->aligned_frees = al[r].frees;
  int64_t all_bytes = 0, aligned_bytes = 0, all_frees = 0, aligned_frees = 0;
  for (int r = 0; r < n; r++) {
    all_bytes += in->run[r].bytes, aligned_bytes += in->run[r].aligned_bytes;
    all_frees += in->run[r].frees, aligned_frees += in->run[r].aligned_frees;
  }
  in->aligned_share = share(aligned_bytes, all_bytes);
  in->aligned_frees_share = share(aligned_frees, all_frees);
  if (n > 1 && check_alignment(m, al, err, errlen) != 0) goto cleanup;
  classify(m);
  in->quadratic_fit = n == 3;
  bool find = opt->find_modules && opt->ncheckpoint == 0;
  if (opt->ncheckpoint > 0 || opt->optimizer || find) {
    if (progress) fprintf(stderr, "\rpredict: finding what the change acts on%40s", "");
    ms_whatif_options wo = {opt->checkpoint, opt->ncheckpoint, NULL, opt->optimizer, find};
    if (!(m->whatif = ms_whatif_new(&m->base, &wo, err, errlen))) goto cleanup;
    if (ms_whatif_info_of(m->whatif)->allocations != (int64_t)m->nalloc) {
      snprintf(err, errlen, "'%s' changed while it was read", br->shown);
      goto cleanup;
    }
    if (find && ms_candidates_find(&m->base, m->whatif, opt->optimizer, m->nalloc, progress, &m->found, err, errlen) != 0)
      goto cleanup;
    m->finding = find;
  }
  if (opt->shard) {
    if (progress) fprintf(stderr, "\rpredict: finding what sharding acts on%40s", "");
    if (!(m->shard = ms_shard_new(&m->base, opt->shard, err, errlen))) goto cleanup;
  }
  ms_replay_plan_set_source(m->plan, synth_each, m);

  /* what to know about the runs */
  for (int r = 0; r < n; r++)
    if (r != in->base && strcmp(settings[r], settings[in->base]))
      INFO_NOTE(in, "the runs were recorded under other settings ('%.120s': %.120s; '%.120s': %.120s): the prediction's "
                "recorded settings are those of '%.120s', the run its history is made from", in->run[r].shown, settings[r],
                br->shown, settings[in->base], br->shown);
  for (int r = 0; r < n; r++)
    if (r != in->base && capacity[r] != capacity[in->base])
      INFO_NOTE(in, "the runs were recorded on cards of other sizes: the prediction's card is that of '%s' "
                "(%.2f GiB) unless --capacity or --device says otherwise", br->shown, (double)capacity[in->base] / (1 << 30));
  for (int r = 0; r < n; r++)
    if (in->run[r].ooms)
      INFO_NOTE(in, "'%s' ran out of memory %lld times: what the program did then is in its history, and a "
                "prediction from a run that ran out of memory is only as good as that run's history", in->run[r].shown,
                (long long)in->run[r].ooms);
  for (int r = 0; r < n; r++)
    if (in->run[r].before_blocks || in->run[r].unknown_frees)
      INFO_NOTE(in, "the history of '%s' does not quite start at the program's start: %lld blocks (%lld bytes) live at "
                "the snapshot were allocated before it and %lld frees are of blocks it did not allocate; they are not "
                "in the prediction", in->run[r].shown, (long long)in->run[r].before_blocks,
                (long long)in->run[r].before_bytes, (long long)in->run[r].unknown_frees);
  for (int r = 0; r < n; r++)
    if (h[r].with_stacks == 0) {
      INFO_NOTE(in, "'%s' was recorded without stacks: the runs were aligned by the order of their allocations and "
                "frees alone; record with stacks (memsnap run's default) for an alignment by site", in->run[r].shown);
      break;
    }
  if (n > 1 && in->linear + in->quadratic == 0)
    INFO_NOTE(in, "no allocation changes with the size between the runs: every size predicts the same; are the runs "
              "really at the sizes given?");
  if (in->shrinking)
    INFO_NOTE(in, "%lld allocations get smaller as the size grows: their laws reach 0 bytes at some size and are left "
              "out past it; a misaligned run can cause this", (long long)in->shrinking);
  if (progress) fprintf(stderr, "\r%80s\r", "");
  for (int r = 0; r < n; r++) ms_history_free(&h[r]), ms_alignment_free(&al[r]);
  return m;

cleanup:
  if (progress) fprintf(stderr, "\r%80s\r", "");
  for (int r = 0; r < MS_PREDICT_MAX_RUNS; r++) ms_history_free(&h[r]), ms_alignment_free(&al[r]);
  ms_predict_free(m);
  return NULL;
}

void ms_predict_free(ms_predict *m) {
  if (!m) return;
  ms_whatif_free(m->whatif);
  ms_shard_free(m->shard);
  ms_candidates_free(&m->found);
  ms_replay_plan_free(m->plan);
  if (m->base_open) ms_close(&m->base);
  for (int r = 0; r < MS_PREDICT_MAX_RUNS; r++) free(m->size[r]);
  free(m);
}

const ms_predict_info *ms_predict_info_of(const ms_predict *m) { return &m->info; }
const ms_whatif *ms_predict_whatif(const ms_predict *m) { return m->whatif; }
const ms_shard *ms_predict_shard(const ms_predict *m) { return m->shard; }
const ms_whatif *ms_predict_whatif_for(const ms_predict *m, const ms_change *c) {
  return c && c->modules > 0 && c->modules <= m->found.ntried ? m->found.tried[c->modules - 1] : m->whatif;
}
const ms_candidates *ms_predict_candidates(const ms_predict *m) { return m->finding ? &m->found : NULL; }
ms_snapshot *ms_predict_base(ms_predict *m) { return &m->base; }

void ms_predict_far_note(const ms_predict *m, const int64_t *sizes, int n, char *out, size_t len) {
  const ms_predict_info *in = &m->info;
  int64_t lo = in->run[0].at, hi = in->run[0].at;
  for (int i = 1; i < in->nruns; i++) {
    if (in->run[i].at < lo) lo = in->run[i].at;
    if (in->run[i].at > hi) hi = in->run[i].at;
  }
  int64_t pick[64];
  int far = 0;
  for (int i = 0; i < n && far < 64; i++) { /* the far ones, distinct, in order */
    if (!sizes[i] || (sizes[i] <= MS_PREDICT_FAR * hi && sizes[i] * MS_PREDICT_FAR >= lo)) continue;
    int k = far;
    while (k > 0 && pick[k - 1] > sizes[i]) k--;
    if (k > 0 && pick[k - 1] == sizes[i]) continue;
    memmove(pick + k + 1, pick + k, sizeof *pick * (size_t)(far - k));
    pick[k] = sizes[i], far++;
  }
  char list[512] = "";
  for (size_t o = 0, i = 0; i < (size_t)far && o < sizeof list - 32; i++)
    o += (size_t)snprintf(list + o, sizeof list - o, "%s%lld", i ? ", " : "", (long long)pick[i]);
  out[0] = '\0';
  if (far)
    snprintf(out, len, "%s %s far from the recorded sizes (%lld to %lld: more than %d times the largest or under "
             "1/%d of the smallest): a law that is not exactly a polynomial of the size errs the more, the farther it "
             "is taken; record nearer sizes for a surer answer", list, far == 1 ? "is" : "are", (long long)lo,
             (long long)hi, MS_PREDICT_FAR, MS_PREDICT_FAR);
}
ms_replay_plan *ms_predict_plan(ms_predict *m) { return m->plan; }

/* ---- replaying at a size ------------------------------------------------------------------ */


/* Replays the history synthesised at `at` under c into r. A card smaller than the recorded one
 * (c's capacity) is the recorded card capped at it, as PyTorch's memory fraction caps it: the
 * allocator's limit, without the simulated device's first-fit placement of segments in its
 * address range (which can refuse a segment that fits in total, as a real card's cudaMalloc,
 * mapping pages anywhere, does not). r's config and capacity are then c's. */
static int replay_at(ms_predict *m, ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, const ms_change *ch,
                     int64_t at, ms_replay_result *r) {
  ms_replay_config run = *c;
  uint64_t card = ms_replay_recorded_capacity(p);
  if (c->capacity && c->capacity < card) {
    const char *f = ms_replay_config_get(c, "memory_fraction");
    char v[64];
    snprintf(v, sizeof v, "%.17g", (f ? strtod(f, NULL) : 1.0) * ((double)c->capacity / (double)card));
    ms_replay_config_set(&run, "memory_fraction", v, NULL, 0);
    run.capacity = 0;
  }
  m->at = at;
  m->dropped = 0;
  m->current = *ch;
  int rc = ms_replay_run(s, p, &run, r);
  int64_t dropped = m->dropped;
  r->at = at;
  r->config = *c;
  r->change = *ch;
  for (int i = 0; c->capacity && i < r->ndevices; i++) r->dev[i].capacity = (int64_t)c->capacity;
  if (dropped && !ms_change_any(ch))
    ms_replay_note(r, "at %lld, %lld allocations would be of 0 bytes or less (their laws cross 0 below the recorded "
                "sizes): they were left out, with their frees", (long long)at, (long long)dropped);
  return rc;
}

typedef struct at_rows {
  ms_predict *m;
  const int64_t *ats;
  const ms_change *changes;
  int nconf, nchange;
} at_rows;

int ms_predict_probe(ms_predict *m, ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, const ms_change *ch,
                     int64_t at, ms_replay_result *r) {
  return replay_at(m, s, p, c, ch, at, r);
}

int ms_predict_replay(ms_predict *m, ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, const ms_change *ch,
                      int64_t at, ms_replay_result *r) {
  int rc = replay_at(m, s, p, c, ch, at, r);
  if (rc != 0 || ms_replay_fits(r)) return rc;
  ms_replay_config unlimited = *c;
  unlimited.capacity = MS_PREDICT_UNLIMITED;
  uint64_t card = (uint64_t)r->dev[0].capacity;
  rc = replay_at(m, s, p, &unlimited, ch, at, r);
  r->config = *c;
  r->over_capacity = true;
  for (int i = 0; i < r->ndevices; i++) r->dev[i].capacity = (int64_t)card;
  return rc;
}

int ms_predict_timeline(ms_predict *m, const ms_replay_config *c, const ms_change *ch, int64_t at, int device,
                        ms_replay_timeline *t, ms_replay_result *r) {
  t->device = device;
  ms_replay_plan_set_timeline(m->plan, t);
  int rc = ms_predict_replay(m, &m->base, m->plan, c, ch, at, r);
  ms_replay_plan_set_timeline(m->plan, NULL);
  return rc;
}

/* A row of predictions: the size's history replayed on the card, and, when it does not fit
 * there, again on a device without a limit, for what it needs. */
static int at_row(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, int row, ms_replay_result *r, void *arg) {
  const at_rows *ar = arg;
  int per_at = ar->nconf * ar->nchange;
  return ms_predict_replay(ar->m, s, p, c, &ar->changes[row % per_at / ar->nconf], ar->ats[row / per_at], r);
}

int ms_predict_at(ms_predict *m, const int64_t *ats, int nat, const ms_replay_config *configs, int nconf,
                  const ms_change *changes, int nchange, const ms_rows_options *o, ms_sweep *out, char *err, size_t errlen) {
  static const ms_change none = {0};
  if (!changes || nchange < 1) changes = &none, nchange = 1;
  int nrows = nat * nchange * nconf;
  ms_replay_config *rows = malloc(sizeof *rows * (size_t)(nrows ? nrows : 1));
  if (!rows) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < nrows; i++) rows[i] = configs[i % nconf];
  at_rows ar = {m, ats, changes, nconf, nchange};
  int rc = ms_replay_rows(&m->base, m->plan, rows, nrows, at_row, &ar, o, out, err, errlen);
  free(rows);
  return rc;
}

/* ---- the largest size that fits ----------------------------------------------------------- */

int ms_predict_search(ms_predict *m, ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, const ms_change *ch,
                      ms_replay_result *r) {
  ms_replay_result *probe = malloc(sizeof *probe);
  if (!probe) {
    memset(r, 0, sizeof *r);
    r->config = *c;
    r->change = *ch;
    r->failed = true;
    snprintf(r->error, sizeof r->error, "out of host memory");
    return -1;
  }
  int64_t lo = 0, hi = MS_PREDICT_MAX_SIZE + 1, at = m->info.run[m->info.base].at;
  int rc = 0;
  bool kept = false;
  for (bool growing = true; hi - lo > 1;) { /* from the base's size: doubling while it fits, then bisecting */
    if (!growing) at = lo + (hi - lo) / 2;
    if ((rc = replay_at(m, s, p, c, ch, at, probe)) != 0) break;
    if (ms_replay_fits(probe)) {
      lo = at;
      *r = *probe, kept = true;
      if (growing) at = at * 2 > MS_PREDICT_MAX_SIZE ? MS_PREDICT_MAX_SIZE : at * 2;
      if (growing && at == lo) break;
    } else {
      hi = at;
      growing = false;
    }
  }
  if (rc != 0 || !kept) {
    *r = *probe;
    if (rc == 0) r->at = 0;
  }
  r->over_capacity = false;
  if (rc == 0 && lo == MS_PREDICT_MAX_SIZE)
    ms_replay_note(r, "every size up to %d fits: the search stops there", MS_PREDICT_MAX_SIZE);
  free(probe);
  return rc;
}

typedef struct capacity_rows {
  ms_predict *m;
  const ms_change *changes;
  int nconf;
} capacity_rows;

/* A row of the search: the largest size whose history, changed by its group's change, fits the
 * row's card. */
static int capacity_row(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, int row, ms_replay_result *r,
                        void *arg) {
  const capacity_rows *cr = arg;
  return ms_predict_search(cr->m, s, p, c, &cr->changes[row / cr->nconf], r);
}

static const ms_replay_result *fit_base; /* qsort has no context argument */
static int cmp_fit(const void *a, const void *b) {
  const ms_replay_result *x = &fit_base[*(const int *)a], *y = &fit_base[*(const int *)b];
  if (x->failed != y->failed) return x->failed - y->failed;
  if (x->at != y->at) return x->at > y->at ? -1 : 1;
  int64_t px = ms_replay_worst_peak(x), py = ms_replay_worst_peak(y);
  if (px != py) return px < py ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

int ms_predict_capacity(ms_predict *m, const ms_change *changes, int nchange, const ms_replay_config *configs, int nconf,
                        const ms_rows_options *o, ms_sweep *out, char *err, size_t errlen) {
  static const ms_change none = {0};
  if (!changes || nchange < 1) changes = &none, nchange = 1;
  int nrows = nchange * nconf;
  ms_replay_config *rows = malloc(sizeof *rows * (size_t)nrows);
  if (!rows) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < nrows; i++) rows[i] = configs[i % nconf];
  capacity_rows cr = {m, changes, nconf};
  int rc = ms_replay_rows(&m->base, m->plan, rows, nrows, capacity_row, &cr, o, out, err, errlen);
  free(rows);
  if (rc != 0) return -1;
  for (int i = 0; i < out->nrows; i++) out->order[i] = i;
  fit_base = out->results;
  for (int h = 0; h < nchange; h++) qsort(&out->order[h * nconf], (size_t)nconf, sizeof *out->order, cmp_fit);
  return 0;
}
