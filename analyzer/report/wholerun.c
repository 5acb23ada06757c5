/* wholerun.c: the whole run in the reports (the analysis' a->run, from the snapshot's run log):
 * the text report's summary of every iteration since recording started (or, without iterations,
 * every second) above the window's detail, and the JSON's `run` object and the iterations before
 * the window (docs/analysis-json.md). Nothing without a run log.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "report.h"

enum { SUMMARY_ROWS = 20 }; /* the text's rows for the whole run */

/* Entries e[0..n) summarised in at most SUMMARY_ROWS rows (adjacent ones merged as the recorder
 * merges them: peaks the highest, ends the last's). */
static void print_rows(const ms_run_entry *e, size_t n, bool seconds, FILE *out) {
  size_t per = (n + SUMMARY_ROWS - 1) / SUMMARY_ROWS;
  fprintf(out, "    %-17s %16s %16s %18s %18s%s\n", seconds ? "seconds" : "iterations", "peak allocated", "peak reserved",
          "allocated at end", "reserved at end", seconds ? "" : "  skipped");
  for (size_t i = 0; per && i < n; i += per) {
    ms_run_entry m = e[i];
    size_t j = i + 1;
    for (; j < n && j < i + per; j++) {
      if (e[j].peak_allocated > m.peak_allocated) m.peak_allocated = e[j].peak_allocated;
      if (e[j].peak_reserved > m.peak_reserved) m.peak_reserved = e[j].peak_reserved;
      m.end_allocated = e[j].end_allocated;
      m.end_reserved = e[j].end_reserved;
      m.skipped += e[j].skipped;
    }
    int64_t last = e[j - 1].first + e[j - 1].count - 1;
    char range[48], pa[32], pr[32], ea[32], er[32];
    if (last > m.first) snprintf(range, sizeof range, "%lld-%lld", (long long)m.first, (long long)last);
    else snprintf(range, sizeof range, "%lld", (long long)m.first);
    ms_format_bytes(m.peak_allocated, pa, sizeof pa);
    ms_format_bytes(m.peak_reserved, pr, sizeof pr);
    ms_format_bytes(m.end_allocated, ea, sizeof ea);
    ms_format_bytes(m.end_reserved, er, sizeof er);
    fprintf(out, "    %-17s %16s %16s %18s %18s", range, pa, pr, ea, er);
    if (!seconds && m.skipped) fprintf(out, "  %lld", (long long)m.skipped);
    if (e[j - 1].in_progress) fprintf(out, "  (the last in progress)");
    fprintf(out, "\n");
  }
}

bool ms_text_whole_run(const ms_analysis *a, FILE *out) {
  const ms_whole_run *r = &a->run;
  char b1[32], b2[32], b3[32];
  /* shown where the window is not the whole run: iterations before it, or a history cut short */
  bool iterations = r->completed && (r->window_first > 0 || (a->truncated && r->iterations > (int64_t)a->niters));
  if (iterations) {
    ms_format_bytes(r->peak_allocated, b1, sizeof b1);
    ms_format_bytes(r->peak_reserved, b2, sizeof b2);
    fprintf(out, "  the whole run (the run log): %lld iterations since recording started, %lld skipped steps; %s\n",
            (long long)r->iterations, (long long)r->skipped,
            r->width <= 1 ? "every iteration apart" : "older ones merged by the recorder to bound the log");
    if (r->width > 1)
      fprintf(out, "    (the log's coarsest entries hold %lld iterations each: docs/recover.md)\n", (long long)r->width);
    fprintf(out, "    peak allocated %s in iteration %lld; peak reserved %s\n", b1, (long long)r->peak_iteration, b2);
    const ms_run_entry *f = &r->iters[0], *l = &r->iters[r->completed - 1];
    ms_format_bytes(f->end_allocated, b1, sizeof b1);
    ms_format_bytes(l->end_allocated, b2, sizeof b2);
    ms_format_bytes((int64_t)(r->growth_per_iteration < 0 ? -r->growth_per_iteration : r->growth_per_iteration), b3,
                    sizeof b3);
    fprintf(out, "    allocated at iteration ends: %s after iteration %lld, %s after iteration %lld (%s%s per iteration)\n",
            b1, (long long)(f->first + f->count - 1), b2, (long long)(l->first + l->count - 1),
            r->growth_per_iteration < 0 ? "-" : "+", b3);
    print_rows(r->iters, r->niters, false, out);
    if (r->window_first >= 0)
      fprintf(out, "  the window (the ring's events): iterations %lld to %lld in detail, numbered from 0 below\n",
              (long long)r->window_first, (long long)(r->window_first + (int64_t)a->niters - 1));
    else
      fprintf(out, "  the window (the ring's events), in detail below\n");
    return true;
  }
  if (!r->niters && r->nsecs && (a->truncated || a->niters == 0) && r->seconds > 1) {
    ms_format_bytes(r->peak_allocated_time, b1, sizeof b1);
    ms_format_bytes(r->peak_reserved_time, b2, sizeof b2);
    fprintf(out, "  the whole run by time (the run log, no optimizer step recorded): %lld seconds since recording started;\n"
                 "    peak allocated %s, peak reserved %s%s\n",
            (long long)r->seconds, b1, b2,
            r->seconds_width > 1 ? "; older seconds merged by the recorder to bound the log" : "");
    print_rows(r->secs, r->nsecs, true, out);
    return true;
  }
  return false;
}

/* A run log entry as JSON. */
static cJSON *entry_object(const ms_run_entry *e, bool seconds) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddNumberToObject(o, seconds ? "first_second" : "run_index", (double)e->first);
  cJSON_AddNumberToObject(o, "count", (double)e->count);
  cJSON_AddNumberToObject(o, "start_ns", (double)e->start_ns);
  cJSON_AddNumberToObject(o, "end_ns", (double)e->end_ns);
  cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)e->peak_allocated);
  cJSON_AddNumberToObject(o, "peak_allocated_ns", (double)e->peak_ns);
  cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)e->peak_reserved);
  cJSON_AddNumberToObject(o, "end_allocated_bytes", (double)e->end_allocated);
  cJSON_AddNumberToObject(o, "end_reserved_bytes", (double)e->end_reserved);
  if (!seconds) {
    cJSON_AddBoolToObject(o, "skipped", e->skipped > 0);
    cJSON_AddNumberToObject(o, "skipped_count", (double)e->skipped);
  }
  cJSON *told = cJSON_AddObjectToObject(o, "told_at_peak");
  static const char *const roles[MS_RUN_ROLES] = {"parameter", "gradient", "optimizer_state"};
  for (int k = 0; told && k < MS_RUN_ROLES; k++) cJSON_AddNumberToObject(told, roles[k], (double)e->role_bytes[k]);
  cJSON_AddBoolToObject(o, "in_progress", e->in_progress);
  return o;
}

static void number_or_null(cJSON *o, const char *key, bool known, double v) {
  if (known) cJSON_AddNumberToObject(o, key, v);
  else cJSON_AddNullToObject(o, key);
}

void ms_json_whole_run(cJSON *root, cJSON *iterations, const ms_analysis *a) {
  const ms_whole_run *r = &a->run;
  /* the iterations before the window, first in `iterations` (the window's follow) */
  int64_t before = r->window_first >= 0 ? r->window_first : a->niters == 0 ? r->iterations : 0;
  cJSON *window = cJSON_CreateArray(); /* the window's, moved behind them */
  while (window && iterations && iterations->child)
    cJSON_AddItemToArray(window, cJSON_DetachItemViaPointer(iterations, iterations->child));
  for (size_t i = 0; window && iterations && i < r->completed && r->iters[i].first < before; i++) {
    cJSON *o = entry_object(&r->iters[i], false);
    if (!o) break;
    cJSON_AddNullToObject(o, "index");
    cJSON_AddBoolToObject(o, "before_window", true);
    cJSON_AddItemToArray(iterations, o);
  }
  cJSON *first_window = window ? window->child : NULL;
  while (window && window->child) cJSON_AddItemToArray(iterations, cJSON_DetachItemViaPointer(window, window->child));
  cJSON_Delete(window);
  for (cJSON *w = first_window; w; w = w->next) {
    cJSON *index = cJSON_GetObjectItemCaseSensitive(w, "index");
    number_or_null(w, "run_index", r->window_first >= 0 && cJSON_IsNumber(index),
                   (double)r->window_first + (cJSON_IsNumber(index) ? index->valuedouble : 0));
    cJSON_AddBoolToObject(w, "before_window", false);
  }
  if (!r->niters && !r->nsecs) {
    cJSON_AddNullToObject(root, "run");
    return;
  }
  cJSON *o = cJSON_AddObjectToObject(root, "run");
  if (!o) return;
  cJSON_AddNumberToObject(o, "iterations", (double)r->iterations);
  cJSON_AddNumberToObject(o, "skipped_steps", (double)r->skipped);
  cJSON_AddNumberToObject(o, "iterations_per_entry", (double)(r->width ? r->width : 1));
  number_or_null(o, "window_first_iteration", r->window_first >= 0, (double)r->window_first);
  cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)r->peak_allocated);
  cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)r->peak_reserved);
  number_or_null(o, "peak_iteration", r->peak_iteration >= 0, (double)r->peak_iteration);
  cJSON_AddNumberToObject(o, "end_allocated_growth_per_iteration_bytes", r->growth_per_iteration);
  number_or_null(o, "leak_from_iteration", r->leak_from >= 0, (double)r->leak_from);
  cJSON_AddNumberToObject(o, "seconds", (double)r->seconds);
  cJSON_AddNumberToObject(o, "seconds_per_entry", (double)(r->seconds_width ? r->seconds_width : 1));
  cJSON_AddNumberToObject(o, "peak_allocated_bytes_by_time", (double)r->peak_allocated_time);
  cJSON_AddNumberToObject(o, "peak_reserved_bytes_by_time", (double)r->peak_reserved_time);
  cJSON *by_time = cJSON_AddArrayToObject(o, "by_time");
  for (size_t i = 0; by_time && i < r->nsecs; i++) {
    cJSON *x = entry_object(&r->secs[i], true);
    if (x) cJSON_AddItemToArray(by_time, x);
  }
}
