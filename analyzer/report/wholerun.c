/* wholerun.c: the whole run in the JSON (the analysis' a->run, from the snapshot's run log): the
 * `run` object and the iterations before the window (docs/analysis-json.md), for `--json` and
 * the page (whose strip draws them: web/model.js runStrip). The text report's summary is
 * text.c's (print_whole_run). Nothing without a run log.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "report.h"

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
  int64_t before = r->window_first >= 0 ? r->window_first : a->niters == 0 && a->truncated ? r->iterations : 0;
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
  number_or_null(o, "leak_bytes_per_iteration", r->leak_from >= 0 && r->leak_rate > 0, r->leak_rate);
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
