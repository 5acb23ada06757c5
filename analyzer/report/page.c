/* page.c: the report page that `memsnap analyze --html` writes: web/viewer.html with web/'s
 * style and scripts inlined (embedded into the CLI when it is built: see the Makefile's
 * web_assets.o) and one JSON document (format "memsnap-viewer-2", read by web/model.js;
 * docs/viewer.md): the analysis as json.c writes it, its stacks by id into the page's
 * tables of strings, frames and stacks, with what only the page draws beside it (curves, bands,
 * allocations, checkpoints, steps: timeline.c). Every "<", ">" and "&" of the JSON is written as
 * a \u escape, so nothing from a snapshot can end the data block or start markup; the page's
 * scripts show it with textContent.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"

#define MS_PAGE_LEAKS 200  /* leak candidates listed on the page */
#define MS_PAGE_FRAMES 128 /* frames that matter kept per stack */
#define MS_PAGE_INVALID_FREES 200 /* sites of invalid frees listed on the page */
#define MS_PAGE_RETRIES 500       /* retries listed on the page (the first ones; releases counts them all) */
#define MS_PAGE_TABLE 500    /* sites in the page's table (the most bytes allocated first) */

#define ASSET(name)                                  \
  extern const char _binary_##name##_start[];        \
  extern const char _binary_##name##_end[];
ASSET(viewer_html)
ASSET(predict_html)
ASSET(viewer_css)
ASSET(model_js)
ASSET(view_js)
ASSET(predict_js)

/* The string table: each distinct string once, numbered, and the JSON array of them. */
typedef struct strtab {
  cJSON *array;
  ms_strtab table;
} strtab;

/* Index of s in the string table, adding it; -1 when out of memory. */
static int str_index(strtab *t, const char *s) {
  bool added;
  int64_t i = ms_strtab_add(&t->table, s, &added);
  if (added) cJSON_AddItemToArray(t->array, cJSON_CreateString(s));
  return (int)i;
}

typedef struct page_data {
  const ms_analysis *a;
  const ms_snapshot *s;
  strtab strings;
  cJSON *frames, *stacks, *sites;
  uint32_t *frame_of; /* snapshot frame id -> page frame index + 1 */
  uint32_t *site_of;  /* analysis site -> page site index + 1 */
  int cut_frame;      /* the page frame "(outer frames not shown)"; -1 until needed */
} page_data;

/* A frame that is a remark, not code ("(outer frames not shown)"): its page index. */
static int marker_frame(page_data *p, const char *text) {
  cJSON *fr = cJSON_CreateArray();
  cJSON_AddItemToArray(fr, cJSON_CreateNumber(str_index(&p->strings, text)));
  cJSON_AddItemToArray(fr, cJSON_CreateNumber(str_index(&p->strings, "")));
  cJSON_AddItemToArray(fr, cJSON_CreateNumber(0));
  cJSON_AddItemToArray(p->frames, fr);
  return cJSON_GetArraySize(p->frames) - 1;
}

/* The page index of snapshot frame `id`, adding it to the frame table. */
static int page_frame(page_data *p, uint32_t id) {
  if (!p->frame_of[id]) {
    const ms_frame *f = &p->s->frames[id];
    cJSON *fr = cJSON_CreateArray();
    cJSON_AddItemToArray(fr, cJSON_CreateNumber(str_index(&p->strings, f->short_name)));
    cJSON_AddItemToArray(fr, cJSON_CreateNumber(str_index(&p->strings, f->file)));
    cJSON_AddItemToArray(fr, cJSON_CreateNumber((double)f->line));
    if (strcmp(f->name, f->short_name) != 0 || f->inlined) /* the whole name, for the hover */
      cJSON_AddItemToArray(fr, cJSON_CreateNumber(str_index(&p->strings, f->name)));
    if (f->inlined) cJSON_AddItemToArray(fr, cJSON_CreateNumber(1));
    cJSON_AddItemToArray(p->frames, fr);
    p->frame_of[id] = (uint32_t)cJSON_GetArraySize(p->frames);
  }
  return (int)p->frame_of[id] - 1;
}

/* The page index of the frame "(outer frames not shown)", adding it when first needed. */
static int cut_frame(page_data *p) {
  if (p->cut_frame < 0) p->cut_frame = marker_frame(p, "(outer frames not shown)");
  return p->cut_frame;
}

/* Adds a stack (its frames that matter) to the document; returns the id to refer to it by. */
static uint32_t add_stack(page_data *p, uint32_t stack_id) {
  char key[16];
  snprintf(key, sizeof key, "%u", stack_id);
  if (stack_id == 0 || cJSON_GetObjectItemCaseSensitive(p->stacks, key)) return stack_id;
  /* Whole stacks (the flame graph lays them out from the outermost frame), up to a bound: a
     deeper stack keeps its innermost frames and ends in a marker frame saying so. */
  uint32_t ids[MS_PAGE_FRAMES + 1];
  size_t n = ms_stack_frames_that_matter(p->s, stack_id, ids, MS_PAGE_FRAMES + 1);
  bool cut = n > MS_PAGE_FRAMES;
  if (cut) n = MS_PAGE_FRAMES;
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(page_frame(p, ids[i])));
  if (cut) cJSON_AddItemToArray(arr, cJSON_CreateNumber(cut_frame(p)));
  cJSON_AddItemToObject(p->stacks, key, arr);
  return stack_id;
}

/* The page's stack of analysis site `site`: its own, or for a site without one a stack (with an
 * id past the snapshot's) of one frame that says why: "(allocated before recording started)". */
static uint32_t site_stack(page_data *p, uint32_t site) {
  const ms_site *st = &p->a->sites[site];
  if (st->stack_id) return add_stack(p, st->stack_id);
  uint32_t id = (uint32_t)p->s->nstacks + (st->before_history ? 1 : 0);
  char key[16], text[128];
  snprintf(key, sizeof key, "%u", id);
  if (!cJSON_GetObjectItemCaseSensitive(p->stacks, key)) {
    snprintf(text, sizeof text, "(%s)", ms_site_note(p->a, st));
    cJSON *arr = cJSON_CreateArray();
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(marker_frame(p, text)));
    cJSON_AddItemToObject(p->stacks, key, arr);
  }
  return id;
}

/* The index of analysis site `site` in the page's candidates (the JSON's `leaks`, then its `held`,
 * MS_PAGE_LEAKS of each: the analysis lists the growing ones first), or -1. */
static int leak_index(const ms_analysis *a, uint32_t site) {
  size_t growing = 0, shown = 0;
  while (growing < a->nleaks && ms_leak_grows(&a->sites[a->leaks[growing]])) growing++;
  for (size_t i = 0; i < a->nleaks; i++) {
    bool listed = i < growing ? i < MS_PAGE_LEAKS : i - growing < MS_PAGE_LEAKS;
    if (listed && a->leaks[i] == site) return (int)shown;
    shown += listed;
  }
  return -1;
}

/* The page's index of analysis site `site` ([stack, leak-list index or -1, band]), adding it. */
static int page_site(page_data *p, uint32_t site) {
  if (p->site_of[site]) return (int)p->site_of[site] - 1;
  const ms_analysis *a = p->a;
  int leak = leak_index(a, site), band = a->timeline->bands.nsites;
  for (int k = 0; k < a->timeline->bands.nsites; k++)
    if (a->timeline->bands.site[k] == site) band = k;
  cJSON *row = cJSON_CreateArray();
  cJSON_AddItemToArray(row, cJSON_CreateNumber(site_stack(p, site)));
  cJSON_AddItemToArray(row, cJSON_CreateNumber(leak));
  cJSON_AddItemToArray(row, cJSON_CreateNumber(band));
  cJSON_AddItemToArray(p->sites, row);
  p->site_of[site] = (uint32_t)cJSON_GetArraySize(p->sites);
  return (int)p->site_of[site] - 1;
}

/* ---- the large columns, written as text directly (a cJSON node per number would not scale) */

typedef struct sbuf {
  char *s;
  size_t n, cap;
  bool failed;
} sbuf;

static void sb_put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_put(sbuf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = b->failed ? 0 : vsnprintf(b->s ? b->s + b->n : NULL, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (b->failed || k < 0) {
      b->failed = true;
      return;
    }
    if (b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 1 << 16;
    while (cap <= b->n + (size_t)k) cap *= 2;
    char *g = realloc(b->s, cap);
    if (!g) {
      b->failed = true;
      return;
    }
    b->s = g;
    b->cap = cap;
  }
}

/* Writes `"name":[v0,v1,...]` for n values of an int64 column read at base + i * stride. */
static void sb_column(sbuf *b, const char *name, const void *base, size_t n, size_t stride) {
  sb_put(b, "%s\"%s\":[", b->n && b->s[b->n - 1] != '{' ? "," : "", name);
  for (size_t i = 0; i < n; i++) {
    int64_t v;
    memcpy(&v, (const char *)base + i * stride, sizeof v);
    sb_put(b, i ? ",%lld" : "%lld", (long long)v);
  }
  sb_put(b, "]");
}

cJSON *ms_page_curve_json(const ms_curve *c) {
  cJSON *o = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(o, "t"), *lo = cJSON_AddArrayToObject(o, "lo"),
        *hi = cJSON_AddArrayToObject(o, "hi");
  for (int i = 0; c && i < c->n; i++) {
    cJSON_AddItemToArray(t, cJSON_CreateNumber((double)c->t[i]));
    cJSON_AddItemToArray(lo, cJSON_CreateNumber((double)c->lo[i]));
    cJSON_AddItemToArray(hi, cJSON_CreateNumber((double)c->hi[i]));
  }
  return o;
}

/* The bands, the detailed allocations and the checkpoints (timeline.c), as `,"name":...` text. */
static void page_columns(page_data *p, sbuf *b) {
  const ms_timeline *t = p->a->timeline;
  const ms_bands *bd = &t->bands;
  /* Allocated memory by site: sites[k] is {site: page site, leak, stack} (the last band is
     every other site: {site: -1, other: true}) and bytes[k] its column over t. */
  sb_put(b, ",\"bands\":{");
  sb_column(b, "t", bd->t, (size_t)bd->n, sizeof bd->t[0]);
  sb_column(b, "tp", bd->tp, (size_t)bd->n, sizeof bd->tp[0]);
  sb_put(b, ",\"sites\":[");
  for (int k = 0; k <= bd->nsites; k++) {
    if (k == bd->nsites) {
      sb_put(b, "%s{\"site\":-1,\"leak\":-1,\"stack\":0,\"other\":true}", k ? "," : "");
      break;
    }
    int ps = page_site(p, bd->site[k]);
    sb_put(b, "%s{\"site\":%d,\"leak\":%d,\"stack\":%u}", k ? "," : "", ps, leak_index(p->a, bd->site[k]),
           site_stack(p, bd->site[k]));
  }
  sb_put(b, "],\"bytes\":[");
  for (int k = 0; k <= bd->nsites; k++) {
    sb_put(b, k ? ",[" : "[");
    for (int i = 0; i < bd->n; i++) sb_put(b, i ? ",%lld" : "%lld", (long long)bd->bytes[i][k]);
    sb_put(b, "]");
  }
  sb_put(b, "]");
  /* The same buckets by category: names[k] (the categories that hold memory at some time, in
     their order) and bytes[k] its column. */
  int64_t seen[MS_CATEGORIES] = {0};
  for (int i = 0; i < bd->n; i++)
    for (int c = 0; c < ms_category_count(p->a); c++) seen[c] |= bd->categories[i][c];
  sb_put(b, ",\"categories\":{\"names\":[");
  for (int c = 0, k = 0; c < ms_category_count(p->a); c++)
    if (seen[c]) sb_put(b, "%s\"%s\"", k++ ? "," : "", ms_category_name(p->a, c)); /* [A-Za-z0-9_.-]: no escape */
  sb_put(b, "],\"bytes\":[");
  for (int c = 0, k = 0; c < ms_category_count(p->a); c++) {
    if (!seen[c]) continue;
    sb_put(b, k++ ? ",[" : "[");
    for (int i = 0; i < bd->n; i++) sb_put(b, i ? ",%lld" : "%lld", (long long)bd->categories[i][c]);
    sb_put(b, "]");
  }
  sb_put(b, "]}}");

  /* The largest allocations one by one, as columns. */
  sb_put(b, ",\"detail\":{\"min_size\":%lld,\"allocations\":%lld", (long long)t->detail_min_size,
         (long long)t->allocations);
  static const ms_detail none; /* no allocations: the columns are empty, their base must be valid */
  const ms_detail *d = t->detail ? t->detail : &none;
  sb_column(b, "alloc", &d->alloc_ns, t->ndetail, sizeof *d);
  sb_column(b, "free", &d->free_ns, t->ndetail, sizeof *d);
  sb_column(b, "size", &d->size, t->ndetail, sizeof *d);
  sb_column(b, "requested", &d->requested, t->ndetail, sizeof *d);
  sb_column(b, "addr", &d->address, t->ndetail, sizeof *d);
  sb_column(b, "stream", &d->stream, t->ndetail, sizeof *d);
  sb_put(b, ",\"site\":[");
  for (size_t i = 0; i < t->ndetail; i++) sb_put(b, i ? ",%d" : "%d", page_site(p, d[i].site));
  sb_put(b, "]}");

  /* Checkpoints: segs is [address, size, stream, device, runs] per segment, runs is
     [state, size, blocks] per run, sites is [page site, bytes] largest first. */
  static const char *const kinds[] = {"time", "peak", "iteration peak", "oom", "end"};
  sb_put(b, ",\"checkpoints\":[");
  for (size_t c = 0; c < t->ncheckpoints; c++) {
    const ms_checkpoint *cp = &t->checkpoints[c];
    int64_t rounding = cp->rounding < 0 ? 0 : cp->rounding > cp->allocated ? cp->allocated : cp->rounding;
    sb_put(b, "%s{\"t\":%lld,\"kind\":\"%s\",\"index\":%d,\"allocated\":%lld,\"reserved\":%lld,"
              "\"pending\":%lld,\"rounding\":%lld,\"other\":%lld,\"omitted\":%zu,\"segs\":[",
           c ? "," : "", (long long)cp->time_ns, kinds[cp->kind], cp->index, (long long)cp->allocated,
           (long long)cp->reserved, (long long)cp->pending, (long long)rounding, (long long)cp->other_bytes,
           cp->omitted_segments);
    for (size_t i = 0; i < cp->nsegments; i++) {
      const ms_segment_state *sg = &t->segments[cp->first_segment + i];
      sb_put(b, "%s%llu,%lld,%llu,%d,%zu", i ? "," : "", (unsigned long long)sg->address, (long long)sg->size,
             (unsigned long long)sg->stream, sg->device, sg->nruns);
    }
    sb_put(b, "],\"runs\":[");
    size_t first_run = cp->nsegments ? t->segments[cp->first_segment].first_run : 0, nruns = 0;
    for (size_t i = 0; i < cp->nsegments; i++) nruns += t->segments[cp->first_segment + i].nruns;
    for (size_t i = 0; i < nruns; i++) {
      const ms_run *r = &t->runs[first_run + i];
      sb_put(b, "%s%d,%lld,%u", i ? "," : "", r->state, (long long)r->size, r->count);
    }
    sb_put(b, "],\"sites\":[");
    for (size_t i = 0; i < cp->nsites; i++) {
      const ms_site_bytes *sb = &t->site_bytes[cp->first_site + i];
      sb_put(b, "%s%d,%lld", i ? "," : "", page_site(p, sb->site), (long long)sb->bytes);
    }
    sb_put(b, "]}");
  }
  sb_put(b, "]");
}

/* `"site_table":[...]`: the sites that allocated most (and every leak candidate), each
 * [page site, bytes allocated, allocations, bytes live at the snapshot, blocks, thread, stream]
 * (thread and stream -1 when several; thread 0 when not recorded). */
static void page_site_table(page_data *p, sbuf *b) {
  const ms_analysis *a = p->a;
  sb_put(b, ",\"site_table\":[");
  size_t n = 0;
  for (size_t i = 0; i < a->ntop; i++) {
    const ms_site *st = &a->sites[a->top[i]];
    if ((i >= MS_PAGE_TABLE && leak_index(a, a->top[i]) < 0) || (st->allocs == 0 && st->end_bytes == 0)) continue;
    sb_put(b, "%s[%d,%lld,%lld,%lld,%lld,%lld,%lld]", n++ ? "," : "", page_site(p, a->top[i]), (long long)st->alloc_bytes,
           (long long)st->allocs, (long long)st->end_bytes, (long long)st->end_count,
           st->several_threads ? -1LL : (long long)st->thread, st->several_streams ? -1LL : (long long)st->stream);
  }
  sb_put(b, "]");
}

/* `"steps":{...}`: the allocator's events (alloc, frees, segments: the timeline pass keeps them)
 * as columns and the state when the history starts (prehistory.c), for the page to replay the
 * state at any event; null past MS_STEPS_MAX events (the page then steps through the checkpoints). */
static void page_steps(page_data *p, sbuf *b) {
  const ms_timeline *t = p->a->timeline;
  if (!t->steps_kept) {
    sb_put(b, ",\"steps\":null");
    return;
  }
  static const ms_step none; /* no events: the columns are empty, their base must be valid */
  const ms_step *st = t->steps ? t->steps : &none;
  size_t n = t->nsteps;
  sb_put(b, ",\"steps\":{");
  sb_column(b, "t", &st->time_ns, n, sizeof *st);
  sb_put(b, ",\"kind\":[");
  for (size_t i = 0; i < n; i++) sb_put(b, i ? ",%d" : "%d", st[i].kind);
  sb_put(b, "],\"addr\":[");
  for (size_t i = 0; i < n; i++) sb_put(b, i ? ",%llu" : "%llu", (unsigned long long)st[i].address);
  sb_put(b, "]");
  sb_column(b, "size", &st->size, n, sizeof *st);
  sb_put(b, ",\"site\":[");
  for (size_t i = 0; i < n; i++) sb_put(b, i ? ",%d" : "%d", st[i].site < 0 ? -1 : page_site(p, (uint32_t)st[i].site));
  sb_put(b, "]");
  sb_column(b, "req", &st->requested, n, sizeof *st);
  const ms_prehistory *h = &p->a->before;
  sb_put(b, ",\"start\":{\"allocated\":%lld,\"reserved\":%lld,\"segments_known\":%s,\"blocks\":[", (long long)h->allocated,
         (long long)h->reserved, h->layout_known ? "true" : "false");
  for (size_t i = 0; i < h->nblocks; i++)
    sb_put(b, "%s%llu,%lld,%d", i ? "," : "", (unsigned long long)h->blocks[i].address, (long long)h->blocks[i].size,
           page_site(p, h->blocks[i].site));
  sb_put(b, "],\"segs\":[");
  for (size_t i = 0; h->layout_known && i < h->nsegments; i++)
    sb_put(b, "%s%llu,%lld,%llu,%d", i ? "," : "", (unsigned long long)h->segments[i].address, (long long)h->segments[i].size,
           (unsigned long long)h->segments[i].stream, h->segments[i].device);
  sb_put(b, "]}}");
}

/* ---- the rest (page_more.c: segment spans, whole stacks), through page.c's tables ---------- */

static uint32_t ref_stack(void *p, uint32_t stack_id) { return add_stack(p, stack_id); }
static int ref_frame(void *p, uint32_t frame_id) { return page_frame(p, frame_id); }
static int ref_cut(void *p) { return cut_frame(p); }

static void page_more(page_data *p, sbuf *b) {
  ms_page_refs r = {p, ref_stack, ref_frame, ref_cut, p->stacks};
  char *text = ms_page_more(p->a, &r);
  if (text) sb_put(b, "%s", text);
  else b->failed = true;
  free(text);
}

/* ---- the document: the analysis (json.c), then what only the page draws ------------ */

/* How the analysis's entries refer to their stacks on the page: by id into `stacks`. */
static int64_t page_stack_ref(void *ctx, int64_t site, uint32_t stack_id) {
  page_data *p = ctx;
  return site >= 0 ? site_stack(p, (uint32_t)site) : add_stack(p, stack_id);
}

/* Adds item to root as `name`; false (item deleted) when out of memory or item is NULL. */
static bool attach(cJSON *root, const char *name, cJSON *item) {
  if (item && cJSON_AddItemToObject(root, name, item)) return true;
  cJSON_Delete(item);
  return false;
}

/* The page's data document (format memsnap-viewer-2, read by web/model.js; docs/viewer.md): the
 * analysis as `memsnap analyze --json` has it, its stacks by id into the page's tables, and the
 * page's own data beside it. NULL when out of memory. */
static char *page_json(const ms_analysis *a) {
  const ms_snapshot *s = a->snap;
  page_data p = {a, s, {cJSON_CreateArray(), {0}}, cJSON_CreateArray(), cJSON_CreateObject(), cJSON_CreateArray(),
                 calloc(s->nframes + 1, sizeof(uint32_t)), calloc(a->nsites + 1, sizeof(uint32_t)), -1};
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", "memsnap-viewer-2");
  ms_json_options shape = {.max_leaks = MS_PAGE_LEAKS, .max_invalid_sites = MS_PAGE_INVALID_FREES,
                           .max_retries = MS_PAGE_RETRIES, .stack_ref = page_stack_ref, .ctx = &p};
  bool ok = root && p.strings.array && p.frames && p.stacks && p.sites && p.frame_of && p.site_of &&
            ms_json_analysis(root, a, &shape) == 0;
  const ms_timeline *tl = a->timeline;
  size_t i = 0; /* each candidate's live bytes at the end of each iteration: the growth chart (the
                   analysis lists the growing ones first, then what is held: the page's order) */
  for (int list = 0; list < 2; list++) {
    cJSON *leaks = ok ? cJSON_GetObjectItemCaseSensitive(root, list ? "held" : "leaks") : NULL, *leak;
    cJSON_ArrayForEach(leak, leaks) {
      if (i >= tl->leak_series) break;
      cJSON *series = cJSON_AddArrayToObject(leak, "per_iteration");
      for (size_t k = 0; k < tl->leak_iterations; k++)
        cJSON_AddItemToArray(series, cJSON_CreateNumber((double)tl->leak_live[i * tl->leak_iterations + k]));
      i++;
    }
  }
  cJSON *curves = cJSON_AddObjectToObject(root, "curves");
  cJSON_AddItemToObject(curves, "allocated", ms_page_curve_json(a->allocated_curve));
  cJSON_AddItemToObject(curves, "reserved", ms_page_curve_json(a->reserved_curve));
  sbuf cols = {0};
  if (ok) { /* adds sites, stacks and strings */
    page_columns(&p, &cols);
    page_steps(&p, &cols);
    page_site_table(&p, &cols);
    page_more(&p, &cols); /* last: it writes every stack added before */
  }
  ok &= attach(root, "frames", p.frames) & attach(root, "stacks", p.stacks) & attach(root, "sites", p.sites) &
        attach(root, "strings", p.strings.array);
  char *head = ok && !cols.failed ? cJSON_PrintUnformatted(root) : NULL, *text = NULL;
  if (head) { /* head's closing brace, then the columns */
    size_t n = strlen(head);
    text = malloc(n + cols.n + 1);
    if (text) {
      memcpy(text, head, n - 1);
      memcpy(text + n - 1, cols.s, cols.n);
      strcpy(text + n - 1 + cols.n, "}");
    }
  }
  cJSON_free(head);
  free(cols.s);
  cJSON_Delete(root);
  ms_strtab_free(&p.strings.table);
  free(p.frame_of);
  free(p.site_of);
  return text;
}

static void put_asset(FILE *out, const char *start, const char *end) { fwrite(start, 1, (size_t)(end - start), out); }

/* Writes a document as the inside of a data block: "<", ">" and "&" as \u escapes. */
static void put_json(FILE *out, const char *json) {
  for (const char *c = json; *c; c++) {
    if (*c == '<') fputs("\\u003c", out);
    else if (*c == '>') fputs("\\u003e", out);
    else if (*c == '&') fputs("\\u0026", out);
    else fputc(*c, out);
  }
}

/* With several analyses: what each is, for the page's selector (the block memsnap-sources, their
 * paths), then the second and later documents, a block each (memsnap-data-1, ...), built one at
 * a time. Nothing for one. 0, or -1 when out of memory. */
static int put_more_data(ms_analysis *const *a, size_t n, FILE *out) {
  if (n < 2) return 0;
  cJSON *list = cJSON_CreateArray();
  for (size_t k = 0; k < n; k++) cJSON_AddItemToArray(list, cJSON_CreateString(a[k]->snap->shown_path));
  char *text = cJSON_PrintUnformatted(list);
  cJSON_Delete(list);
  if (!text) return -1;
  fputs("<script type=\"application/json\" id=\"memsnap-sources\">", out);
  put_json(out, text);
  fputs("</script>\n", out);
  cJSON_free(text);
  for (size_t k = 1; k < n; k++) {
    char *json = ms_analyze_timeline(a[k]) == 0 ? page_json(a[k]) : NULL;
    if (!json) return -1;
    fprintf(out, "<script type=\"application/json\" id=\"memsnap-data-%zu\">", k);
    put_json(out, json);
    fputs("</script>\n", out);
    free(json);
  }
  return 0;
}

/* Writes a template with its marks filled: web/'s style and scripts inlined, `json` as its data
 * block, and its more-data mark by more(out, arg) (NULL: nothing). 0, what more returned, or -1
 * when writing fails. */
static int put_template(FILE *out, const char *t, const char *end, const char *json, int (*more)(FILE *, void *), void *arg) {
  static const char mark[] = "/*MEMSNAP:";
  int rc = 0;
  while (t < end && rc == 0) {
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
    else if (len == 10 && !memcmp(name, "predict.js", len)) put_asset(out, _binary_predict_js_start, _binary_predict_js_end);
    else if (len == 4 && !memcmp(name, "data", len)) put_json(out, json);
    else if (len == 9 && !memcmp(name, "more-data", len) && more) rc = more(out, arg);
    t = close + 2;
  }
  return rc == 0 && !ferror(out) ? 0 : -1;
}

typedef struct report_docs {
  ms_analysis *const *a;
  size_t n;
} report_docs;

static int put_report_more(FILE *out, void *arg) {
  const report_docs *r = arg;
  return put_more_data(r->a, r->n, out);
}

int ms_report_html(ms_analysis *const *a, size_t n, FILE *out) {
  if (n == 0 || ms_analyze_timeline(a[0]) != 0) return -1;
  char *json = page_json(a[0]);
  if (!json) return -1;
  report_docs docs = {a, n};
  int rc = put_template(out, _binary_viewer_html_start, _binary_viewer_html_end, json, put_report_more, &docs);
  free(json);
  return rc;
}

int ms_report_prediction_html(const char *json, FILE *out) {
  return put_template(out, _binary_predict_html_start, _binary_predict_html_end, json, NULL, NULL);
}

int ms_write_page(const char *out, int (*fill)(FILE *f, void *arg), void *arg, const char *(*why)(void *arg)) {
  char tmp[PATH_MAX + 32];
  ms_temp_path(out, tmp, sizeof tmp);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
    return 1;
  }
  if (fill(f, arg) != 0) {
    fclose(f);
    unlink(tmp);
    const char *reason = why ? why(arg) : NULL;
    fprintf(stderr, "error: writing '%s': %s\n", out, reason && reason[0] ? reason : "out of memory");
    return 1;
  }
  bool ok = !ferror(f);
  ok = (fclose(f) == 0) && ok;
  if (!ok) unlink(tmp);
  if (!ok || ms_commit(tmp, out) != 0) {
    fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
    return 1;
  }
  return 0;
}

static int fill_report(FILE *f, void *arg) {
  const ms_page_set *ps = arg;
  return ms_report_html(ps->docs, ps->ndocs, f);
}

/* Why a report page could not be written: a document's snapshot's error (its page pass failed). */
static const char *report_error(void *arg) {
  const ms_page_set *ps = arg;
  for (size_t i = 0; i < ps->ndocs; i++)
    if (ps->docs[i]->snap->error[0]) return ps->docs[i]->snap->error;
  return NULL;
}

int ms_write_html(const char *out, ms_analysis *a, size_t n, const ms_analyze_options *o) {
  const char *inputs[64];
  for (size_t i = 0; i < n && i < 64; i++) inputs[i] = a[i].snap->path;
  if (ms_refuse_overwrite("--html", out, inputs, n < 64 ? n : 64)) return 1;
  ms_page_set ps;
  int rc = 1;
  if (ms_page_set_build(&ps, a, n, o) != 0) fprintf(stderr, "error: %s\n", ps.error);
  else rc = ms_write_page(out, fill_report, &ps, report_error);
  ms_page_set_free(&ps);
  return rc;
}
