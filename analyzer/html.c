/* html.c: the report page that `memsnap analyze --html` writes: web/viewer.html with web/'s
 * style and scripts inlined (embedded into the CLI when it is built: see the Makefile's
 * web_assets.o) and the analysis as one JSON document (format "memsnap-viewer-1", read by
 * web/model.js). Every "<", ">" and "&" of the JSON is written as a \u escape, so nothing from a
 * snapshot can end the data block or start markup; the page's scripts show it with textContent.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"

#define ASSET(name)                                  \
  extern const char _binary_##name##_start[];        \
  extern const char _binary_##name##_end[];
ASSET(viewer_html)
ASSET(viewer_css)
ASSET(model_js)
ASSET(view_js)

typedef struct strtab {
  cJSON *array;
  char **keys;
  size_t n, cap;
} strtab;

/* Index of s in the string table, adding it; -1 when out of memory. */
static int str_index(strtab *t, const char *s) {
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->keys[i], s) == 0) return (int)i;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    char **g = realloc(t->keys, sizeof *g * cap);
    if (!g) return -1;
    t->keys = g;
    t->cap = cap;
  }
  t->keys[t->n] = strdup(s);
  if (!t->keys[t->n]) return -1;
  cJSON_AddItemToArray(t->array, cJSON_CreateString(s));
  return (int)t->n++;
}

typedef struct page_data {
  const ms_snapshot *s;
  strtab strings;
  cJSON *frames, *stacks;
  uint32_t *frame_of; /* snapshot frame id -> page frame index + 1 */
} page_data;

/* Adds a stack (its frames that matter) to the document; returns the id to refer to it by. */
static uint32_t add_stack(page_data *p, uint32_t stack_id) {
  char key[16];
  snprintf(key, sizeof key, "%u", stack_id);
  if (stack_id == 0 || cJSON_GetObjectItemCaseSensitive(p->stacks, key)) return stack_id;
  uint32_t ids[16];
  size_t n = ms_stack_frames_that_matter(p->s, stack_id, ids, 16);
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) {
    if (!p->frame_of[ids[i]]) {
      const ms_frame *f = &p->s->frames[ids[i]];
      cJSON *fr = cJSON_CreateArray();
      cJSON_AddItemToArray(fr, cJSON_CreateNumber(str_index(&p->strings, f->name)));
      cJSON_AddItemToArray(fr, cJSON_CreateNumber(str_index(&p->strings, f->file)));
      cJSON_AddItemToArray(fr, cJSON_CreateNumber((double)f->line));
      cJSON_AddItemToArray(p->frames, fr);
      p->frame_of[ids[i]] = (uint32_t)cJSON_GetArraySize(p->frames);
    }
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(p->frame_of[ids[i]] - 1));
  }
  cJSON_AddItemToObject(p->stacks, key, arr);
  return stack_id;
}

static cJSON *curve_json(const ms_curve *c) {
  cJSON *o = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(o, "t"), *lo = cJSON_AddArrayToObject(o, "lo"),
        *hi = cJSON_AddArrayToObject(o, "hi");
  for (int i = 0; c && i < c->n; i++) {
    cJSON_AddItemToArray(t, cJSON_CreateNumber((double)c->t[i]));
    cJSON_AddItemToArray(lo, cJSON_CreateNumber((double)c->lo[i]));
    cJSON_AddItemToArray(hi, cJSON_CreateNumber((double)c->hi[i]));
  }
  return o;
}

static char *page_json(const ms_analysis *a) {
  const ms_snapshot *s = a->snap;
  page_data p = {s, {cJSON_CreateArray(), NULL, 0, 0}, NULL, NULL, calloc(s->nframes + 1, sizeof(uint32_t))};
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", "memsnap-viewer-1");
  cJSON *sum = cJSON_AddObjectToObject(root, "summary");
  cJSON_AddStringToObject(sum, "path", s->path);
  cJSON_AddNumberToObject(sum, "pid", (double)s->pid);
  cJSON_AddStringToObject(sum, "host", s->host);
  cJSON_AddNumberToObject(sum, "events", (double)s->nevents);
  cJSON_AddNumberToObject(sum, "dropped", (double)s->dropped);
  cJSON_AddNumberToObject(sum, "first_ns", (double)s->first_ns);
  cJSON_AddNumberToObject(sum, "last_ns", (double)s->last_ns);
  cJSON_AddNumberToObject(sum, "peak_allocated", (double)a->peak_allocated);
  cJSON_AddNumberToObject(sum, "peak_reserved", (double)a->peak_reserved);
  cJSON_AddStringToObject(sum, "iteration_source", a->iteration_source);
  cJSON_AddStringToObject(sum, "iteration_label", a->iteration_label);
  cJSON *curves = cJSON_AddObjectToObject(root, "curves");
  cJSON_AddItemToObject(curves, "allocated", curve_json(a->allocated_curve));
  cJSON_AddItemToObject(curves, "reserved", curve_json(a->reserved_curve));
  cJSON *iters = cJSON_AddArrayToObject(root, "iterations");
  for (size_t i = 0; i < a->niters; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "start_ns", (double)a->iters[i].start_ns);
    cJSON_AddNumberToObject(o, "end_ns", (double)a->iters[i].end_ns);
    cJSON_AddNumberToObject(o, "peak_ns", (double)a->iters[i].peak_ns);
    cJSON_AddNumberToObject(o, "peak_allocated", (double)a->iters[i].peak_allocated);
    cJSON_AddNumberToObject(o, "peak_reserved", (double)a->iters[i].peak_reserved);
    cJSON_AddItemToArray(iters, o);
  }
  p.frames = cJSON_AddArrayToObject(root, "frames");
  p.stacks = cJSON_AddObjectToObject(root, "stacks");
  cJSON *leaks = cJSON_AddArrayToObject(root, "leaks");
  static const char *const kinds[] = {"growing", "retained", "alive"};
  for (size_t i = 0; i < a->nleaks && i < 200; i++) {
    const ms_site *st = &a->sites[a->leaks[i]];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", kinds[st->kind]);
    cJSON_AddNumberToObject(o, "score", st->score);
    cJSON_AddNumberToObject(o, "live_bytes", (double)st->end_bytes);
    cJSON_AddNumberToObject(o, "live_count", (double)st->end_count);
    cJSON_AddNumberToObject(o, "bytes_per_iteration", st->kind == MS_LEAK_GROWING ? st->bytes_per_iteration : 0);
    cJSON_AddNumberToObject(o, "first_ns", (double)st->first_ns);
    cJSON_AddNumberToObject(o, "last_ns", (double)st->last_ns);
    cJSON_AddNumberToObject(o, "stack", add_stack(&p, st->stack_id));
    cJSON_AddItemToArray(leaks, o);
  }
  cJSON *ooms = cJSON_AddArrayToObject(root, "oom");
  for (size_t i = 0; i < a->nooms; i++) {
    const ms_oom *m = &a->ooms[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "time_ns", (double)m->time_ns);
    cJSON_AddNumberToObject(o, "requested", (double)m->requested);
    cJSON_AddNumberToObject(o, "device_free", (double)m->device_free);
    cJSON_AddNumberToObject(o, "cached", (double)m->cached_unallocated);
    cJSON_AddNumberToObject(o, "live", (double)m->live_bytes);
    cJSON_AddNumberToObject(o, "stack", add_stack(&p, m->stack_id));
    cJSON_AddItemToArray(ooms, o);
  }
  /* Allocated memory by site: bands[k] is {site: leak-list index or -1, stack, kind} and
     bytes[k] its column over bands_t; the last band is every other site. */
  const ms_bands *b = a->bands;
  cJSON *bands = cJSON_AddObjectToObject(root, "bands"), *bt = cJSON_AddArrayToObject(bands, "t");
  cJSON *sites = cJSON_AddArrayToObject(bands, "sites"), *cols = cJSON_AddArrayToObject(bands, "bytes");
  for (int i = 0; b && i < b->n; i++) cJSON_AddItemToArray(bt, cJSON_CreateNumber((double)b->t[i]));
  for (int k = 0; b && k <= b->nsites; k++) {
    cJSON *site = cJSON_CreateObject();
    if (k < b->nsites) {
      const ms_site *st = &a->sites[b->site[k]];
      int leak = -1;
      for (size_t i = 0; i < a->nleaks && i < 200; i++)
        if (a->leaks[i] == b->site[k]) leak = (int)i;
      cJSON_AddNumberToObject(site, "leak", leak);
      cJSON_AddNumberToObject(site, "stack", add_stack(&p, st->stack_id));
    } else {
      cJSON_AddNumberToObject(site, "leak", -1);
      cJSON_AddNumberToObject(site, "stack", 0);
      cJSON_AddBoolToObject(site, "other", 1);
    }
    cJSON_AddItemToArray(sites, site);
    cJSON *col = cJSON_CreateArray();
    for (int i = 0; i < b->n; i++) cJSON_AddItemToArray(col, cJSON_CreateNumber((double)b->bytes[i][k]));
    cJSON_AddItemToArray(cols, col);
  }
  cJSON_AddItemToObject(root, "strings", p.strings.array);
  char *text = p.frame_of ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  for (size_t i = 0; i < p.strings.n; i++) free(p.strings.keys[i]);
  free(p.strings.keys);
  free(p.frame_of);
  return text;
}

static void put_asset(FILE *out, const char *start, const char *end) { fwrite(start, 1, (size_t)(end - start), out); }

int ms_report_html(ms_analysis *a, FILE *out) {
  if (ms_analyze_bands(a) != 0) return -1;
  char *json = page_json(a);
  if (!json) return -1;
  const char *t = _binary_viewer_html_start, *end = _binary_viewer_html_end;
  static const char mark[] = "/*MEMSNAP:";
  while (t < end) {
    const char *m = memmem(t, (size_t)(end - t), mark, sizeof mark - 1);
    if (!m) {
      put_asset(out, t, end);
      break;
    }
    put_asset(out, t, m);
    const char *name = m + sizeof mark - 1, *close = memmem(name, (size_t)(end - name), "*/", 2);
    if (!close) break;
    size_t len = (size_t)(close - name);
    if (len == 10 && !memcmp(name, "viewer.css", len)) put_asset(out, _binary_viewer_css_start, _binary_viewer_css_end);
    else if (len == 8 && !memcmp(name, "model.js", len)) put_asset(out, _binary_model_js_start, _binary_model_js_end);
    else if (len == 7 && !memcmp(name, "view.js", len)) put_asset(out, _binary_view_js_start, _binary_view_js_end);
    else if (len == 4 && !memcmp(name, "data", len))
      for (const char *c = json; *c; c++) {
        if (*c == '<') fputs("\\u003c", out);
        else if (*c == '>') fputs("\\u003e", out);
        else if (*c == '&') fputs("\\u0026", out);
        else fputc(*c, out);
      }
    t = close + 2;
  }
  cJSON_free(json);
  return ferror(out) ? -1 : 0;
}
