/* suggest.c: the analysis's suggestions: the replay's sweep (sweep.c) run on an analyzed snapshot,
 * and the settings worth a line in the report kept (ms_suggest).
 *
 * A setting is suggested when the recorded program ran out of memory and its replay does not
 * (fits), or, when none was recorded, when it lowers peak reserved memory (the largest device's)
 * by MS_SUGGEST_SAVING or more. Both are measured against the replay of the recorded settings,
 * not the recorded figures, so that each side is measured the same way; a recorded out of memory
 * that the recorded settings' replay does not reproduce decides nothing (a note says so). Best
 * first is the sweep's ranking.
 *
 * Cost: the sweep replays the history once per setting (20), on every core: about 1 to 2 s per
 * million events on two idle cores (2 to 4 s of CPU), as the history's segments and devices go,
 * more on a busy machine. The analysis runs it for histories of at most MS_SUGGEST_EVENTS
 * events (about half a second to a second there), under a time limit (MS_SUGGEST_SECONDS: the
 * rows not done by then are left out); a longer history costs nothing but a note that names
 * `memsnap replay --sweep`, which has neither limit. The commands
 * (analyze, run) call this after the analysis and hand the result to the reports
 * (ms_analysis.suggestions): the analysis itself never calls up here.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay.h"

/* Allocations the replay could not serve (the ooms statistic stays 0 in the async mode). */
static int64_t ooms_of(const ms_replay_result *r) { return ms_replay_sum(r, offsetof(ms_replay_device, failed_allocs)); }

/* A row's settings as its suggestion's line and memory fraction. */
static void describe(const ms_replay_config *c, ms_suggestion *g) {
  ms_replay_conf_line(c, g->conf, sizeof g->conf);
  const char *f = ms_replay_config_get(c, "memory_fraction");
  snprintf(g->memory_fraction, sizeof g->memory_fraction, "%s", f ? f : "");
}

/* Keeps the sweep's rows worth suggesting, best first. */
static void pick(const ms_sweep *sw, ms_suggestions *out) {
  const ms_replay_result *base = &sw->results[0];
  ms_suggestion recorded;
  describe(&base->config, &recorded);
  out->baseline_peak_reserved = ms_replay_worst_peak(base);
  out->baseline_ooms = ooms_of(base);
  bool oom = out->recorded_ooms > 0 && out->baseline_ooms > 0; /* decided by fitting */
  if (out->recorded_ooms > 0 && out->baseline_ooms == 0)
    snprintf(out->note, sizeof out->note,
             "the recorded out of memory does not happen when the recorded settings are replayed on the simulated "
             "device (memory others held, or a capacity the snapshot does not say): settings are compared by peak "
             "reserved memory only");
  for (int k = 0; k < sw->nrows && out->n < MS_SUGGEST_MAX; k++) {
    const ms_replay_result *r = &sw->results[sw->order[k]];
    if (sw->order[k] == 0 || r->failed) continue;
    ms_suggestion g = {0};
    describe(&r->config, &g);
    if (!strcmp(g.conf, recorded.conf) && !strcmp(g.memory_fraction, recorded.memory_fraction)) continue; /* the same */
    g.peak_reserved = ms_replay_worst_peak(r);
    g.saved = out->baseline_peak_reserved - g.peak_reserved;
    g.device_allocs = ms_replay_sum(r, offsetof(ms_replay_device, device_allocs));
    g.fits = oom && ooms_of(r) == 0;
    bool lower = ooms_of(r) <= out->baseline_ooms && g.saved > 0 &&
                 (double)g.saved >= MS_SUGGEST_SAVING * (double)out->baseline_peak_reserved;
    if (oom ? g.fits : lower && ooms_of(r) == 0) out->s[out->n++] = g;
  }
  if (out->n == 0 && !out->note[0])
    snprintf(out->note, sizeof out->note, "%s",
             oom ? "no setting of the sweep avoids the recorded out of memory"
                 : "no setting of the sweep lowers peak reserved memory by 5% or more");
}

void ms_suggest(const ms_analysis *a, const ms_suggest_options *o, ms_suggestions *out) {
  static const ms_suggest_options defaults;
  if (!o) o = &defaults;
  ms_snapshot *s = a->snap;
  memset(out, 0, sizeof *out);
  out->time_limit_s = o->time_limit_s > 0 ? o->time_limit_s : MS_SUGGEST_SECONDS;
  out->max_events = o->max_events ? o->max_events : MS_SUGGEST_EVENTS;
  out->events = s->nevents;
  out->recorded_ooms = (int64_t)a->nooms;
  snprintf(out->snapshot, sizeof out->snapshot, "%s", s->shown_path);
  int64_t allocations = 0;
  for (size_t i = 0; i < a->nsites; i++) allocations += a->sites[i].allocs;
  if (o->disabled) {
    out->status = MS_SUGGEST_DISABLED;
    snprintf(out->note, sizeof out->note, "not run (--no-suggest)");
    return;
  }
  if (allocations == 0) {
    out->status = MS_SUGGEST_NOTHING;
    snprintf(out->note, sizeof out->note, "not run: the history holds no allocation to replay");
    return;
  }
  if (out->max_events > 0 && s->nevents > out->max_events) {
    out->status = MS_SUGGEST_TOO_LARGE;
    snprintf(out->note, sizeof out->note,
             "not run: %lld events, more than the %lld the analysis replays (about 1 to 2 s per million events on "
             "two cores); memsnap replay --sweep %.512s replays them",
             (long long)s->nevents, (long long)out->max_events, s->shown_path);
    return;
  }
  out->status = MS_SUGGEST_FAILED;
  ms_replay_plan *p = ms_replay_plan_new(s);
  if (!p) {
    snprintf(out->note, sizeof out->note, "not run: %.900s", s->error);
    s->error[0] = '\0';
    return;
  }
  ms_sweep sw;
  ms_replay_config base = {0};
  char err[512];
  if (ms_replay_sweep(s, p, &base, o->jobs, out->time_limit_s, false, &sw, err, sizeof err) != 0) {
    snprintf(out->note, sizeof out->note, "not run: %.900s", err);
    ms_replay_plan_free(p);
    return;
  }
  out->settings = sw.nrows;
  for (int i = 0; i < sw.nrows; i++) out->settings_done += !sw.results[i].failed;
  out->timed_out = sw.timed_out;
  if (sw.results[0].failed) {
    snprintf(out->note, sizeof out->note, "%s: %.512s",
             sw.timed_out ? "the time limit came before the recorded settings were replayed"
                          : "the recorded settings could not be replayed",
             sw.results[0].error);
  } else {
    out->status = MS_SUGGEST_DONE;
    pick(&sw, out);
  }
  ms_sweep_free(&sw);
  ms_replay_plan_free(p);
}
