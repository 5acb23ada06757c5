/* json.c: the analysis as JSON (docs/analysis-json.md), the only code that writes it.
 *
 *   ms_report_json          `memsnap analyze --json`: the document, its stacks as frames
 *   ms_json_analysis        the same sections into a caller's object: the report page (page.c)
 *                           embeds them, its stacks as numbers into its own tables, beside the
 *                           data only the page draws (docs/viewer.md)
 *   ms_report_json_matched  several snapshots: their leak candidates matched by site
 *   ms_json_site_stacks, ms_json_process   the stack and process keys, for `memsnap diff --json`
 *
 * The keys and their meanings are the contract's, whoever asks: a caller chooses only how an
 * entry refers to its stack and how long the long lists are (ms_json_options), never a key.
 */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay.h"
#include "report.h"

typedef struct doc {
  const ms_analysis *a;
  const ms_json_options *o;
} doc;

static const ms_json_options as_frames; /* every list whole, stacks as their frames */

/* ---- stacks ------------------------------------------------------------------------------ */

static cJSON *json_frames(const ms_snapshot *s, const uint32_t *ids, size_t n) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; arr && i < n; i++) {
    const ms_frame *f = &s->frames[ids[i]];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", f->name);
    cJSON_AddStringToObject(o, "short_name", f->short_name);
    cJSON_AddStringToObject(o, "file", f->file);
    cJSON_AddNumberToObject(o, "line", (double)f->line);
    cJSON_AddStringToObject(o, "kind", f->python ? "python" : "native");
    if (!f->python) cJSON_AddStringToObject(o, "module", f->module);
    if (!f->python) cJSON_AddBoolToObject(o, "inlined", f->inlined);
    cJSON_AddItemToArray(arr, o);
  }
  return arr;
}

/* The stack keys of an entry: `stack` (its frames that matter, or the caller's number for it),
 * `full_stack` (with frames), `stack_id`, and `stack_note` (`note`, or "no stack recorded" when
 * NULL) when it has none. `site` is the analysis site the entry is about, -1 for one event's. */
static void stack_keys(const doc *d, cJSON *o, int64_t site, uint32_t stack_id, const char *note) {
  const ms_snapshot *s = d->a->snap;
  if (d->o->stack_ref) {
    cJSON_AddNumberToObject(o, "stack", (double)d->o->stack_ref(d->o->ctx, site, stack_id));
  } else {
    uint32_t ids[256];
    size_t n = ms_stack_frames_that_matter(s, stack_id, ids, 256);
    cJSON_AddItemToObject(o, "stack", json_frames(s, ids, n));
    if (stack_id && stack_id < s->nstacks)
      cJSON_AddItemToObject(o, "full_stack", json_frames(s, s->stacks[stack_id].frames, s->stacks[stack_id].depth));
    else
      cJSON_AddItemToObject(o, "full_stack", cJSON_CreateArray());
  }
  cJSON_AddNumberToObject(o, "stack_id", stack_id);
  if (!stack_id) cJSON_AddStringToObject(o, "stack_note", note ? note : "no stack recorded");
}

static void site_keys(const doc *d, cJSON *o, uint32_t site) {
  const ms_site *st = &d->a->sites[site];
  cJSON_AddStringToObject(o, "category", ms_category_name(d->a, st->category));
  if (st->module) cJSON_AddStringToObject(o, "module", d->a->modules[st->module - 1].name);
  else cJSON_AddNullToObject(o, "module");
  stack_keys(d, o, site, st->stack_id, ms_site_note(d->a, st));
}

/* Bytes by category, as an object from each category's name to its bytes (every category of a,
 * zeros too, in their order). */
static cJSON *categories_object(const ms_analysis *a, const int64_t *bytes) {
  cJSON *o = cJSON_CreateObject();
  for (int c = 0; o && c < ms_category_count(a); c++) cJSON_AddNumberToObject(o, ms_category_name(a, c), (double)bytes[c]);
  return o;
}

void ms_json_site_stacks(cJSON *o, const ms_analysis *a, uint32_t site) { site_keys(&(doc){a, &as_frames}, o, site); }

void ms_json_process(cJSON *o, const ms_snapshot *s) {
  if (s->pid > 0) cJSON_AddNumberToObject(o, "pid", (double)s->pid);
  else cJSON_AddNullToObject(o, "pid");
  if (s->host[0]) cJSON_AddStringToObject(o, "host", s->host);
  else cJSON_AddNullToObject(o, "host");
}

/* An entry of a site's list: `bytes_key` and `count_key` (what it holds), then its stack keys. */
static cJSON *site_entry(const doc *d, uint32_t site, const char *bytes_key, int64_t bytes, const char *count_key,
                         int64_t count) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, bytes_key, (double)bytes);
  cJSON_AddNumberToObject(o, count_key, (double)count);
  site_keys(d, o, site);
  return o;
}

/* ---- the sections, in the contract's order ------------------------------------------------ */

static void add_before_history(cJSON *o, const ms_analysis *a) {
  const ms_prehistory *h = &a->before;
  cJSON *b = cJSON_AddObjectToObject(o, "before_history");
  cJSON_AddNumberToObject(b, "allocated_bytes", (double)h->allocated);
  cJSON_AddNumberToObject(b, "blocks", (double)h->nblocks);
  cJSON_AddNumberToObject(b, "allocated_at_snapshot_bytes", (double)h->end_bytes);
  cJSON_AddNumberToObject(b, "blocks_at_snapshot", (double)h->end_count);
  cJSON_AddNumberToObject(b, "reserved_bytes", (double)h->reserved);
  cJSON_AddBoolToObject(b, "segments_known", h->layout_known);
  cJSON_AddNumberToObject(b, "segments", (double)h->nsegments);
}

/* "death": how the process died, for a snapshot written from its live mapping after it ended;
 * null for the process's own snapshot (docs/analysis-json.md). */
static void add_death(cJSON *summary, const ms_snapshot *s) {
  char text[512], name[32];
  if (!ms_snapshot_death(s, text, sizeof text)) {
    cJSON_AddNullToObject(summary, "death");
    return;
  }
  cJSON *d = cJSON_AddObjectToObject(summary, "death");
  cJSON_AddStringToObject(d, "description", text);
  if (s->ended[0]) cJSON_AddStringToObject(d, "how", s->ended);
  else cJSON_AddNullToObject(d, "how");
  if (s->end_signal) {
    ms_signal_name((int)s->end_signal, name, sizeof name);
    cJSON_AddNumberToObject(d, "signal", (double)s->end_signal);
    cJSON_AddStringToObject(d, "signal_name", name);
  } else {
    cJSON_AddNullToObject(d, "signal");
    cJSON_AddNullToObject(d, "signal_name");
  }
  if (s->exit_status >= 0) cJSON_AddNumberToObject(d, "exit_status", (double)s->exit_status);
  else cJSON_AddNullToObject(d, "exit_status");
  if (s->end_ns) cJSON_AddNumberToObject(d, "end_ns", (double)s->end_ns);
  else cJSON_AddNullToObject(d, "end_ns");
  if (s->last_alloc_ns) cJSON_AddNumberToObject(d, "last_allocation_ns", (double)s->last_alloc_ns);
  else cJSON_AddNullToObject(d, "last_allocation_ns");
  if (s->end_ns && s->last_alloc_ns && s->end_ns >= s->last_alloc_ns)
    cJSON_AddNumberToObject(d, "after_last_allocation_ns", (double)(s->end_ns - s->last_alloc_ns));
  else cJSON_AddNullToObject(d, "after_last_allocation_ns");
  cJSON_AddNumberToObject(d, "last_event_ns", (double)s->last_event_ns);
}

static void add_summary(cJSON *root, const ms_analysis *a) {
  const ms_snapshot *s = a->snap;
  cJSON *summary = cJSON_AddObjectToObject(root, "summary");
  cJSON_AddStringToObject(summary, "path", s->shown_path);
  cJSON_AddNumberToObject(summary, "format_version", s->format_version);
  ms_json_process(summary, s);
  cJSON_AddStringToObject(summary, "backend", s->backend);
  add_death(summary, s);
  cJSON_AddNumberToObject(summary, "events", (double)s->nevents);
  cJSON_AddNumberToObject(summary, "recorded_events", (double)s->recorded);
  cJSON_AddNumberToObject(summary, "dropped_events", (double)s->dropped);
  cJSON_AddBoolToObject(summary, "truncated", a->truncated);
  cJSON_AddNumberToObject(summary, "duration_ns", (double)(s->last_ns - s->first_ns));
  cJSON_AddNumberToObject(summary, "first_ns", (double)s->first_ns);
  cJSON_AddNumberToObject(summary, "last_ns", (double)s->last_ns);
  cJSON_AddNumberToObject(summary, "peak_allocated_bytes", (double)a->peak_allocated);
  cJSON_AddNumberToObject(summary, "peak_allocated_ns", (double)a->peak_allocated_ns);
  cJSON_AddNumberToObject(summary, "peak_reserved_bytes", (double)a->peak_reserved);
  cJSON_AddNumberToObject(summary, "peak_reserved_ns", (double)a->peak_reserved_ns);
  cJSON_AddNumberToObject(summary, "allocated_bytes", (double)a->end_allocated);
  cJSON_AddNumberToObject(summary, "reserved_bytes", (double)a->end_reserved);
  add_before_history(summary, a);
  cJSON_AddNumberToObject(summary, "segments", (double)a->segments);
  cJSON_AddStringToObject(summary, "iteration_source", a->iteration_source);
  cJSON_AddStringToObject(summary, "iteration_edges", a->iterations_from_range_ends            ? "range ends"
                                                     : strcmp(a->iteration_source, "steps") == 0 ? "step ends"
                                                                                                 : "starts");
  cJSON_AddStringToObject(summary, "iteration_label", a->iteration_label);
  cJSON_AddStringToObject(summary, "growth", ms_growth_name(ms_analysis_growth(a)));
  cJSON_AddNumberToObject(summary, "backward_passes", (double)a->backward_passes);
  cJSON_AddNumberToObject(summary, "optimizer_steps", (double)a->optimizer_steps);
  cJSON_AddNumberToObject(summary, "skipped_steps", (double)a->skipped_steps);
  cJSON_AddStringToObject(summary, "steps_from", a->steps_recorded ? "recorded" : "stacks");
  cJSON_AddStringToObject(summary, "backward_passes_from", a->backward_recorded ? "recorded" : "stacks");
  cJSON_AddNumberToObject(summary, "module_events", (double)a->module_events);
  cJSON_AddNumberToObject(summary, "tensor_events", (double)a->tensor_events);
}

/* What the categories rest on: the parameters at the peak by kind, each category's meaning, and
 * the categories whose rule has no evidence in this snapshot, with why. */
static void add_category_notes(cJSON *root, const ms_analysis *a) {
  cJSON *params = cJSON_AddObjectToObject(root, "parameters_at_peak");
  for (int k = 0; params && k < MS_PARAM_KINDS; k++)
    cJSON_AddNumberToObject(params, ms_parameter_kind_name(k), (double)a->parameter_at_peak[k]);
  cJSON *meanings = cJSON_AddObjectToObject(root, "category_meanings");
  for (int c = 0; meanings && c < ms_category_count(a); c++) {
    char rule[1100];
    if (c >= MS_CAT_BUILTIN) snprintf(rule, sizeof rule, "--category: a frame matches %s", a->categories.rule[c - MS_CAT_BUILTIN].patterns);
    cJSON_AddStringToObject(meanings, ms_category_name(a, c), c < MS_CAT_BUILTIN ? ms_category_meaning(a, c) : rule);
  }
  static const char *const evidence[] = {"none", "tensors", "stacks", "tensors and stacks"};
  cJSON *on = cJSON_AddObjectToObject(root, "category_evidence");
  for (int c = 0; on && c < ms_category_count(a); c++)
    cJSON_AddStringToObject(on, ms_category_name(a, c), evidence[a->category_evidence[c] & 3]);
  cJSON *missing = cJSON_AddObjectToObject(root, "categories_without_evidence");
  for (int c = 0; missing && c < MS_CAT_BUILTIN; c++) {
    const char *why = ms_category_missing_evidence(a, c);
    if (why) cJSON_AddStringToObject(missing, ms_category_name(a, c), why);
  }
}

static void add_iterations(cJSON *root, const ms_analysis *a) {
  cJSON *iters = cJSON_AddArrayToObject(root, "iterations");
  for (size_t i = 0; iters && i < a->niters; i++) {
    const ms_iteration *it = &a->iters[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", (double)i);
    cJSON_AddStringToObject(o, "label", a->iteration_label);
    cJSON_AddNumberToObject(o, "start_ns", (double)it->start_ns);
    cJSON_AddNumberToObject(o, "end_ns", (double)it->end_ns);
    cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)it->peak_allocated);
    cJSON_AddNumberToObject(o, "peak_allocated_ns", (double)it->peak_ns);
    cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)it->peak_reserved);
    cJSON_AddNumberToObject(o, "end_allocated_bytes", (double)it->end_allocated);
    cJSON_AddNumberToObject(o, "unallocated_at_end_bytes", (double)it->end_unallocated);
    cJSON_AddBoolToObject(o, "skipped", it->skipped);
    if (it->categories_known) cJSON_AddItemToObject(o, "categories", categories_object(a, it->category_bytes));
    else cJSON_AddNullToObject(o, "categories");
    cJSON_AddItemToArray(iters, o);
  }
}

/* The candidates: `leaks` those that grew (growing, growing_released), `held` what is held since
 * the start and does not grow (retained, alive), each best first (max_leaks each). */
static void add_leaks(cJSON *root, const doc *d) {
  const ms_analysis *a = d->a;
  cJSON *leaks = cJSON_AddArrayToObject(root, "leaks"), *held = cJSON_AddArrayToObject(root, "held");
  size_t shown[2] = {0, 0};
  for (size_t i = 0; leaks && held && i < a->nleaks; i++) {
    const ms_site *st = &a->sites[a->leaks[i]];
    int list = ms_leak_grows(st) ? 0 : 1;
    if (d->o->max_leaks && shown[list] >= d->o->max_leaks) continue;
    shown[list]++;
    bool released = st->kind == MS_LEAK_GROWING_RELEASED;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", ms_leak_kind_name(st->kind));
    cJSON_AddNumberToObject(o, "score", st->score);
    cJSON_AddNumberToObject(o, "live_bytes", (double)st->end_bytes);
    cJSON_AddNumberToObject(o, "live_count", (double)st->end_count);
    cJSON_AddNumberToObject(o, "bytes_per_iteration", st->kind == MS_LEAK_GROWING || released ? st->bytes_per_iteration : 0);
    cJSON_AddNumberToObject(o, "iterations_grown", released ? st->increases_at_peak : st->increases);
    if (i == 0 && list == 0 && a->run.leak_from >= 0) {
      cJSON_AddNumberToObject(o, "from_iteration", (double)a->run.leak_from);
      cJSON_AddNumberToObject(o, "whole_run_bytes_per_iteration", a->run.leak_rate);
    }
    cJSON_AddNumberToObject(o, "released_ns", released ? (double)st->released_ns : -1);
    cJSON_AddNumberToObject(o, "peak_iteration", released ? st->peak_boundary : -1);
    cJSON_AddNumberToObject(o, "peak_iteration_live_bytes", released ? (double)st->peak_iter_live : -1);
    cJSON_AddNumberToObject(o, "first_seen_ns", (double)st->first_ns);
    cJSON_AddNumberToObject(o, "last_seen_ns", (double)st->last_ns);
    cJSON_AddStringToObject(o, "held_category", ms_category_name(a, st->held_category));
    if (st->held_module) cJSON_AddStringToObject(o, "held_module", a->modules[st->held_module - 1].name);
    else cJSON_AddNullToObject(o, "held_module");
    if (st->every) { /* growth in steps every few iterations */
      cJSON *e = cJSON_AddObjectToObject(o, "every");
      cJSON_AddNumberToObject(e, "iterations", st->step_every);
      cJSON_AddNumberToObject(e, "min_iterations", st->min_step_gap);
      cJSON_AddNumberToObject(e, "max_iterations", st->max_step_gap);
      cJSON_AddNumberToObject(e, "steps", st->steps);
      cJSON_AddNumberToObject(e, "bytes_per_step", (double)(st->step_bytes / st->steps));
      cJSON_AddNumberToObject(e, "fell_bytes", (double)st->fall_bytes);
    } else {
      cJSON_AddNullToObject(o, "every");
    }
    if (st->graph) cJSON_AddNumberToObject(o, "kept_graph", st->graph - 1);
    else cJSON_AddNullToObject(o, "kept_graph");
    cJSON_AddNumberToObject(o, "kept_graph_bytes", (double)st->graph_bytes);
    site_keys(d, o, a->leaks[i]);
    ms_json_causes_site(o, a, a->leaks[i]); /* what holds it (causes.c) */
    cJSON_AddItemToArray(list ? held : leaks, o);
  }
}

/* Autograd graphs kept without a backward (kept_graphs.c), the largest first. */
static void add_kept_graphs(cJSON *root, const doc *d) {
  const ms_analysis *a = d->a;
  const ms_snapshot *s = a->snap;
  cJSON *graphs = cJSON_AddArrayToObject(root, "kept_graphs");
  for (size_t i = 0; graphs && i < a->ngraphs; i++) {
    const ms_kept_graph *g = &a->graphs[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "graphs", g->graphs);
    cJSON_AddNumberToObject(o, "live_bytes", (double)g->bytes);
    cJSON_AddNumberToObject(o, "live_count", (double)g->blocks);
    if (g->module >= 0) cJSON_AddStringToObject(o, "forward_module", a->modules[g->module].name);
    else cJSON_AddNullToObject(o, "forward_module");
    cJSON *at = g->frame && g->frame < s->nframes ? json_frames(s, &g->frame, 1) : NULL; /* [the frame] */
    if (at && cJSON_GetArraySize(at) == 1) cJSON_AddItemToObject(o, "forward_called_at", cJSON_DetachItemFromArray(at, 0));
    else cJSON_AddNullToObject(o, "forward_called_at");
    cJSON_Delete(at);
    cJSON_AddNumberToObject(o, "first_iteration", g->first_iteration);
    cJSON_AddNumberToObject(o, "last_iteration", g->last_iteration);
    cJSON_AddNumberToObject(o, "saved_bytes_per_call", (double)g->saved_per_call);
    cJSON_AddNumberToObject(o, "largest_site_bytes", (double)a->sites[g->top_site].graph_bytes);
    site_keys(d, o, g->top_site);
    ms_json_causes_graph(o, a, i); /* what keeps it (causes.c) */
    cJSON_AddItemToArray(graphs, o);
  }
}

/* Memory by module (the module record), the modules in the order they were first seen (a parent
 * before its submodules; each entry names its parent). */
static void add_modules(cJSON *root, const ms_analysis *a) {
  cJSON *mods = cJSON_AddArrayToObject(root, "modules");
  for (size_t i = 0; mods && i < a->nmodules; i++) {
    const ms_module *m = &a->modules[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddStringToObject(o, "shown", ms_module_shown(a, (int32_t)i));
    cJSON_AddNumberToObject(o, "parent", m->parent);
    cJSON_AddBoolToObject(o, "called", m->called);
    cJSON_AddNumberToObject(o, "forward_calls", (double)m->forward_calls);
    cJSON_AddNumberToObject(o, "backward_calls", (double)m->backward_calls);
    cJSON_AddNumberToObject(o, "parameter_bytes", (double)m->parameter_bytes);
    cJSON_AddNumberToObject(o, "gradient_bytes", (double)m->gradient_bytes);
    cJSON_AddNumberToObject(o, "buffer_bytes", (double)m->buffer_bytes);
    cJSON_AddNumberToObject(o, "activation_bytes", (double)m->activation_bytes);
    cJSON_AddNumberToObject(o, "saved_bytes", (double)m->saved_bytes);
    cJSON_AddNumberToObject(o, "forward_peak_bytes", (double)m->forward_peak);
    cJSON_AddNumberToObject(o, "backward_peak_bytes", (double)m->backward_peak);
    cJSON_AddNumberToObject(o, "at_peak_bytes", (double)m->at_peak);
    cJSON_AddItemToArray(mods, o);
  }
}

static void add_ooms(cJSON *root, const doc *d) {
  const ms_analysis *a = d->a;
  cJSON *ooms = cJSON_AddArrayToObject(root, "oom");
  for (size_t i = 0; ooms && i < a->nooms; i++) {
    const ms_oom *m = &a->ooms[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "time_ns", (double)m->time_ns);
    cJSON_AddNumberToObject(o, "device", m->device);
    cJSON_AddNumberToObject(o, "requested_bytes", (double)m->requested);
    cJSON_AddNumberToObject(o, "device_free_bytes", (double)m->device_free);
    cJSON_AddNumberToObject(o, "cached_unallocated_bytes", (double)m->cached_unallocated);
    cJSON_AddNumberToObject(o, "live_bytes", (double)m->live_bytes);
    stack_keys(d, o, -1, m->stack_id, NULL);
    cJSON *top = cJSON_AddArrayToObject(o, "live_by_site");
    for (int k = 0; top && k < m->ntop; k++)
      cJSON_AddItemToArray(top, site_entry(d, m->top[k].site, "live_bytes", m->top[k].bytes, "live_count", m->top[k].count));
    cJSON_AddItemToArray(ooms, o);
  }
}

static void add_invalid_frees(cJSON *root, const doc *d) {
  const ms_analysis *a = d->a;
  cJSON *o = cJSON_AddObjectToObject(root, "invalid_frees");
  if (!o) return;
  cJSON_AddNumberToObject(o, "count", (double)a->invalid_free_total);
  for (int k = 1; k <= 3; k++) cJSON_AddNumberToObject(o, ms_invalid_free_kind_name(k), (double)a->invalid_free_by_kind[k]);
  size_t n = d->o->max_invalid_sites && d->o->max_invalid_sites < a->ninvalid_frees ? d->o->max_invalid_sites
                                                                                     : a->ninvalid_frees;
  cJSON *sites = cJSON_AddArrayToObject(o, "sites");
  for (size_t i = 0; sites && i < n; i++) {
    const ms_invalid_free *f = &a->invalid_frees[i];
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "kind", ms_invalid_free_kind_name(f->kind));
    cJSON_AddNumberToObject(s, "count", (double)f->count);
    cJSON_AddNumberToObject(s, "first_ns", (double)f->first_ns);
    cJSON_AddNumberToObject(s, "last_ns", (double)f->last_ns);
    cJSON_AddNumberToObject(s, "device", f->device);
    cJSON_AddNumberToObject(s, "address", (double)f->address);
    cJSON_AddNumberToObject(s, "offset", (double)f->offset);
    stack_keys(d, s, -1, f->stack_id, NULL);
    if (f->block_site >= 0) {
      cJSON *b = cJSON_AddObjectToObject(s, "block");
      cJSON_AddNumberToObject(b, "size", (double)f->block_size);
      site_keys(d, b, (uint32_t)f->block_site);
    }
    cJSON_AddItemToArray(sites, s);
  }
}

static void add_external(cJSON *root, const ms_analysis *a) {
  cJSON *ext = cJSON_AddArrayToObject(root, "external");
  for (size_t i = 0; ext && i < a->nexternal; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", a->external[i].source);
    cJSON_AddStringToObject(o, "library", a->external[i].library);
    cJSON_AddNumberToObject(o, "count", (double)a->external[i].count);
    cJSON_AddNumberToObject(o, "bytes", (double)a->external[i].bytes);
    cJSON_AddItemToArray(ext, o);
  }
}

/* ---- the allocator's own releases (analysis/retries.c) and the replay's suggestions ------- */

/* Adds keys[i] = values[i] to o, for the keys up to the NULL that ends them. */
static void add_numbers(cJSON *o, const char *const *keys, const double *values) {
  for (size_t k = 0; keys[k]; k++) cJSON_AddNumberToObject(o, keys[k], values[k]);
}

/* What was released for a retry, in JSON's words. */
static const char *released_what(const ms_retry *r) {
  if (!r->reason_recorded) return "unknown";
  if (r->whole_cache) return r->oversize ? "oversize_blocks_then_whole_cache" : "whole_cache";
  return "oversize_blocks";
}

static cJSON *count_object(const ms_release_count *c, const char *calls_key) {
  cJSON *o = cJSON_CreateObject();
  if (calls_key) cJSON_AddNumberToObject(o, calls_key, (double)c->calls);
  cJSON_AddNumberToObject(o, "segments", (double)c->segments);
  cJSON_AddNumberToObject(o, "bytes", (double)c->bytes);
  return o;
}

/* "recorded", "inferred", "mixed", or "none" (nothing released). */
static const char *reasons_source(const ms_releases *R) {
  return R->recorded && R->inferred ? "mixed" : R->recorded ? "recorded" : R->inferred ? "inferred" : "none";
}

/* "retries" (each request the allocator released cached memory for and retried) and "releases"
 * (every release by cause). */
static void add_releases(cJSON *root, const doc *d) {
  const ms_analysis *a = d->a;
  const ms_json_options *o = d->o;
  const ms_releases *R = &a->releases;
  cJSON *list = cJSON_AddArrayToObject(root, "retries");
  size_t n = o && o->max_retries && o->max_retries < R->nretries ? o->max_retries : R->nretries;
  for (size_t i = 0; list && i < n; i++) {
    const ms_retry *r = &R->retries[i];
    static const char *const keys[] = {"time_ns",        "request_ns",        "device",         "requested_bytes",
                                       "released_bytes", "segments_released", "unmapped_bytes", "reserved_before_bytes", NULL};
    const double values[] = {(double)r->time_ns,  (double)r->request_ns, r->device,   (double)r->requested,
                             (double)r->released, (double)r->segments,   (double)r->unmapped, (double)r->reserved_before};
    cJSON *e = cJSON_CreateObject();
    add_numbers(e, keys, values);
    cJSON_AddBoolToObject(e, "succeeded", r->succeeded);
    cJSON_AddStringToObject(e, "released", released_what(r));
    cJSON_AddBoolToObject(e, "reason_recorded", r->reason_recorded);
    stack_keys(d, e, -1, r->stack_id, NULL);
    cJSON_AddItemToArray(list, e);
  }
  cJSON *rel = cJSON_AddObjectToObject(root, "releases");
  if (!rel) return;
  cJSON_AddStringToObject(rel, "reasons", reasons_source(R));
  cJSON_AddNumberToObject(rel, "recorded_events", (double)R->recorded);
  cJSON_AddNumberToObject(rel, "inferred_events", (double)R->inferred);
  cJSON *retries = count_object(&R->retried, "count");
  cJSON_AddNumberToObject(retries, "failed", (double)R->retries_failed);
  cJSON_AddNumberToObject(retries, "listed", (double)n);
  cJSON_AddItemToObject(rel, "retries", retries);
  cJSON_AddItemToObject(rel, "empty_cache", count_object(&R->empty_cache, "calls"));
  cJSON_AddItemToObject(rel, "garbage_collection", count_object(&R->gc, "calls"));
  cJSON_AddItemToObject(rel, "private_pool", count_object(&R->pool, "calls"));
  cJSON_AddItemToObject(rel, "other", count_object(&R->other, NULL));
  cJSON_AddItemToObject(rel, "external_frees", count_object(&R->external, NULL));
  cJSON *unmaps = cJSON_AddObjectToObject(rel, "unmaps");
  cJSON_AddNumberToObject(unmaps, "count", (double)R->unmaps);
  cJSON_AddNumberToObject(unmaps, "bytes", (double)R->unmapped_bytes);
}

static const char *const status_names[] = {"done", "disabled", "too_large", "nothing_to_replay", "failed"};

/* "suggestions" (best first) and "suggestions_sweep" (whether and how the sweep ran, why there are
 * none) from a->suggestions (NULL: not asked). */
static void add_suggestions(cJSON *root, const ms_analysis *a) {
  const ms_suggestions *g = a->suggestions;
  cJSON *list = cJSON_AddArrayToObject(root, "suggestions");
  for (int i = 0; g && list && i < g->n; i++) {
    const ms_suggestion *s = &g->s[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "pytorch_cuda_alloc_conf", s->conf);
    if (s->memory_fraction[0]) cJSON_AddNumberToObject(o, "memory_fraction", atof(s->memory_fraction));
    else cJSON_AddNullToObject(o, "memory_fraction");
    cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)s->peak_reserved);
    cJSON_AddNumberToObject(o, "saved_bytes", (double)s->saved);
    cJSON_AddNumberToObject(o, "saved_fraction",
                            g->baseline_peak_reserved > 0 ? (double)s->saved / (double)g->baseline_peak_reserved : 0);
    cJSON_AddBoolToObject(o, "fits", s->fits);
    cJSON_AddNumberToObject(o, "device_allocs", (double)s->device_allocs);
    cJSON_AddItemToArray(list, o);
  }
  cJSON *sw = cJSON_AddObjectToObject(root, "suggestions_sweep");
  if (!sw) return;
  if (!g) {
    cJSON_AddStringToObject(sw, "status", "not_asked");
    return;
  }
  static const char *const keys[] = {"settings",   "settings_replayed",            "time_limit_s",  "events",
                                     "max_events", "baseline_peak_reserved_bytes", "baseline_ooms", "recorded_ooms", NULL};
  const double values[] = {g->settings,         g->settings_done,
                           g->time_limit_s,     (double)g->events,
                           (double)g->max_events, (double)g->baseline_peak_reserved,
                           (double)g->baseline_ooms, (double)g->recorded_ooms};
  cJSON_AddStringToObject(sw, "status", status_names[g->status]);
  cJSON_AddStringToObject(sw, "note", g->note);
  add_numbers(sw, keys, values);
  cJSON_AddBoolToObject(sw, "time_limit_reached", g->timed_out);
}

int ms_json_analysis(cJSON *root, const ms_analysis *a, const ms_json_options *o) {
  doc d = {a, o ? o : &as_frames};
  add_summary(root, a);
  cJSON *peak = cJSON_AddArrayToObject(root, "live_at_peak");
  for (size_t i = 0; peak && i < a->nat_peak; i++)
    cJSON_AddItemToArray(peak, site_entry(&d, a->at_peak[i].site, "live_bytes", a->at_peak[i].bytes, "live_count",
                                          a->at_peak[i].count));
  int64_t by_category[MS_CATEGORIES];
  ms_categories_at_peak(a, by_category);
  cJSON_AddItemToObject(root, "categories_at_peak", categories_object(a, by_category));
  cJSON_AddItemToObject(root, "categories_at_peak_asked", categories_object(a, a->category_at_peak_asked));
  cJSON *temporary = cJSON_AddObjectToObject(root, "temporary_at_peak_by_phase");
  static const char *const phase_names[4] = {"none", "forward", "backward", "optimizer"};
  for (int ph = 0; temporary && ph < 4; ph++) {
    cJSON *by_phase = cJSON_AddObjectToObject(temporary, phase_names[ph]);
    cJSON_AddNumberToObject(by_phase, "bytes", (double)a->temporary_at_peak[ph][0]);
    cJSON_AddNumberToObject(by_phase, "asked_bytes", (double)a->temporary_at_peak[ph][1]);
  }
  add_category_notes(root, a);
  add_iterations(root, a);
  ms_json_whole_run(root, cJSON_GetObjectItemCaseSensitive(root, "iterations"), a);
  add_leaks(root, &d);
  add_kept_graphs(root, &d);
  ms_json_causes(root, a, ms_json_site_stacks);
  add_modules(root, a);
  add_ooms(root, &d);
  add_invalid_frees(root, &d);
  cJSON *top = cJSON_AddArrayToObject(root, "top_sites");
  for (size_t i = 0; top && i < a->ntop && i < 20; i++) {
    const ms_site *st = &a->sites[a->top[i]];
    if (st->allocs) cJSON_AddItemToArray(top, site_entry(&d, a->top[i], "allocated_bytes", st->alloc_bytes, "allocations", st->allocs));
  }
  cJSON *frag = cJSON_AddObjectToObject(root, "fragmentation");
  cJSON_AddNumberToObject(frag, "reserved_unallocated_bytes", (double)(a->end_reserved - a->end_allocated));
  cJSON_AddNumberToObject(frag, "free_blocks_in_split_segments", (double)a->free_blocks_in_split_segments);
  cJSON_AddNumberToObject(frag, "free_bytes_in_split_segments", (double)a->split_free_bytes);
  add_external(root, a);
  add_releases(root, &d);
  add_suggestions(root, a);
  /* every section is there, or memory ran out on the way */
  static const char *const sections[] = {"summary",          "live_at_peak",        "categories_at_peak",
                                         "parameters_at_peak", "category_meanings", "categories_without_evidence",
                                         "iterations",       "leaks",               "held",
                                         "modules",          "category_evidence",   "oom",
                                         "categories_at_peak_asked", "temporary_at_peak_by_phase",
                                         "invalid_frees",    "top_sites",           "fragmentation",
                                         "external",         "retries",             "releases",
                                         "suggestions",      "suggestions_sweep"};
  for (size_t i = 0; i < sizeof sections / sizeof *sections; i++)
    if (!cJSON_GetObjectItemCaseSensitive(root, sections[i])) return -1;
  return 0;
}

/* Prints `value` as formatted JSON (then a newline if `newline`) and deletes it; 0, or -1 when
 * out of memory (nothing printed). */
int ms_json_print(cJSON *value, bool newline, FILE *out) {
  char *text = value ? cJSON_Print(value) : NULL;
  cJSON_Delete(value);
  if (!text) return -1;
  fputs(text, out);
  if (newline) fputc('\n', out);
  cJSON_free(text);
  return 0;
}

int ms_report_json(const ms_analysis *a, FILE *out) {
  cJSON *root = cJSON_CreateObject();
  if (root && ms_json_analysis(root, a, NULL) != 0) {
    cJSON_Delete(root);
    return -1;
  }
  return ms_json_print(root, true, out);
}

/* ---- several snapshots ------------------------------------------------------------------- */

int ms_report_json_matched(const ms_analysis *a, size_t n, FILE *out) {
  ms_matches m;
  const ms_match_row **rows;
  ptrdiff_t nrows = ms_match_leaks(a, n, &m, &rows);
  if (nrows < 0) return -1;
  cJSON *arr = cJSON_CreateArray();
  for (ptrdiff_t r = 0; arr && r < nrows; r++) {
    cJSON *o = cJSON_CreateObject(), *per = cJSON_CreateArray();
    size_t first = n;
    for (size_t k = 0; k < n; k++) {
      if (!rows[r]->site[k]) {
        cJSON_AddItemToArray(per, cJSON_CreateNull());
        continue;
      }
      const ms_site *st = &a[k].sites[rows[r]->site[k] - 1];
      cJSON *c = cJSON_CreateObject();
      cJSON_AddStringToObject(c, "kind", ms_leak_kind_name(st->kind));
      cJSON_AddNumberToObject(c, "score", st->score);
      cJSON_AddNumberToObject(c, "live_bytes", (double)rows[r]->bytes[k]);
      cJSON_AddNumberToObject(c, "live_count", (double)rows[r]->count[k]);
      cJSON_AddNumberToObject(c, "stack_id", st->stack_id);
      cJSON_AddItemToArray(per, c);
      if (first == n) first = k;
    }
    ms_json_site_stacks(o, &a[first], rows[r]->site[first] - 1);
    cJSON_AddItemToObject(o, "per_snapshot", per);
    cJSON_AddItemToArray(arr, o);
  }
  free(rows);
  ms_matches_free(&m);
  return ms_json_print(arr, false, out);
}
