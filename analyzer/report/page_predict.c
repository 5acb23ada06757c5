/* page_predict.c: the page of a prediction (`memsnap predict --html`): web/predict.html with
 * web/'s style and scripts inlined (page.c's template) and one JSON document, format
 * "memsnap-prediction-1" (read by web/model.js, drawn by web/predict.js with web/view.js's
 * timeline drawing; docs/predict.md, "The page"):
 *
 *   answer     the answer as `memsnap predict --json` prints it (the commands' object, whole)
 *   recorded   the run whose history is synthesised: its path, size, device, peaks, and its memory
 *              over time as the analysis's curves (the report page's: MS_BUCKETS buckets of
 *              lowest and highest value)
 *   predicted  each history drawn: its size, change, setting, card, whether it fits, its peaks
 *              (its replay's, which the answer's rows are), why it is drawn, and its memory over
 *              time as the replay's timeline (replay/engine.c), in the same buckets
 *
 * Nothing here is sent raw: a million events are at most MS_BUCKETS buckets per curve. Every "<",
 * ">" and "&" of the document is written as a \u escape (page.c), and the page's scripts show
 * its text with textContent: paths and module names come from untrusted snapshots.
 */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "report.h"

static cJSON *curves_json(const ms_curve *allocated, const ms_curve *reserved) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "allocated", ms_page_curve_json(allocated));
  cJSON_AddItemToObject(o, "reserved", ms_page_curve_json(reserved));
  return o;
}

static cJSON *predicted_json(const ms_prediction_timeline *p) {
  const ms_replay_result *r = p->result;
  const ms_replay_device *d = &r->dev[p->timeline->device];
  char conf[1200], change[2048];
  ms_replay_describe_config(&r->config, conf, sizeof conf);
  ms_change_describe(p->whatif, &r->change, change, sizeof change);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "at", (double)r->at);
  cJSON_AddStringToObject(o, "why", p->why);
  cJSON_AddStringToObject(o, "change", change);
  cJSON_AddBoolToObject(o, "changed", ms_change_any(&r->change));
  cJSON_AddStringToObject(o, "setting", conf);
  cJSON_AddNumberToObject(o, "device", p->timeline->device);
  cJSON_AddNumberToObject(o, "capacity_bytes", (double)d->capacity);
  cJSON_AddBoolToObject(o, "fits", p->fits);
  cJSON_AddBoolToObject(o, "over_capacity", r->over_capacity);
  cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)d->peak_allocated);
  cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)d->peak_reserved);
  cJSON_AddNumberToObject(o, "external_bytes", (double)d->external_peak); /* in both peaks: the card's */
  if (r->failed) cJSON_AddStringToObject(o, "error", r->error);
  else cJSON_AddNullToObject(o, "error");
  cJSON_AddItemToObject(o, "curves", curves_json(&p->timeline->allocated, &p->timeline->reserved));
  return o;
}

/* The page's document, or NULL when out of memory. */
static char *prediction_json(const ms_prediction_page *pg) {
  const ms_analysis *a = pg->recorded;
  cJSON *root = cJSON_CreateObject(), *rec = cJSON_CreateObject(), *list = cJSON_CreateArray();
  cJSON *answer = cJSON_Duplicate(pg->answer, true);
  if (!root || !rec || !list || !answer) {
    cJSON_Delete(root), cJSON_Delete(rec), cJSON_Delete(list), cJSON_Delete(answer);
    return NULL;
  }
  cJSON_AddStringToObject(root, "format", "memsnap-prediction-1");
  cJSON_AddItemToObject(root, "answer", answer);
  if (pg->capacity) cJSON_AddNumberToObject(root, "card_bytes", (double)pg->capacity);
  else cJSON_AddNullToObject(root, "card_bytes");
  cJSON_AddItemToObject(root, "recorded", rec);
  cJSON_AddStringToObject(rec, "path", a->snap->shown_path);
  cJSON_AddNumberToObject(rec, "at", (double)pg->recorded_at);
  cJSON_AddNumberToObject(rec, "device", pg->recorded_device);
  cJSON_AddNumberToObject(rec, "devices", pg->recorded_devices);
  cJSON_AddNumberToObject(rec, "events", (double)a->snap->nevents);
  cJSON_AddNumberToObject(rec, "first_ns", (double)a->snap->first_ns);
  cJSON_AddNumberToObject(rec, "last_ns", (double)a->snap->last_ns);
  cJSON_AddNumberToObject(rec, "peak_allocated_bytes", (double)a->peak_allocated);
  cJSON_AddNumberToObject(rec, "peak_reserved_bytes", (double)a->peak_reserved);
  cJSON_AddItemToObject(rec, "curves", curves_json(a->allocated_curve, a->reserved_curve));
  cJSON_AddItemToObject(root, "predicted", list);
  for (int i = 0; i < pg->npredicted; i++) cJSON_AddItemToArray(list, predicted_json(&pg->predicted[i]));
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return text;
}

static int fill_prediction(FILE *f, void *arg) {
  char *json = prediction_json(arg);
  int rc = json ? ms_report_prediction_html(json, f) : -1;
  cJSON_free(json);
  return rc;
}

int ms_write_prediction_html(const char *out, const ms_prediction_page *pg, const char *const *inputs, size_t n) {
  if (ms_refuse_overwrite("--html", out, inputs, n)) return 1;
  return ms_write_page(out, fill_prediction, (void *)pg, NULL);
}
