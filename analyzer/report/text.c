/* text.c: an analysis as a text report for a terminal (the JSON is json.c's), the one line
 * of the replay's best suggestion that `memsnap run`'s summary prints, and how a process ended in
 * words (ms_describe_end: memsnap run's summary, memsnap recover, a recovered snapshot's reports).
 *
 * Stacks are shortened to the frames that matter and C++ names to their short form (frames.c),
 * so that a PyTorch stack reads as its operator and the Python line, and an autograd thread's as
 * its operator and backward node. The full stack and whole names stay available (--full-stacks,
 * --full-names, and always in JSON's `full_stack` and `name`).
 */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay.h"
#include "report.h"

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static void print_site(const ms_analysis *a, uint32_t site, const ms_report_options *o, const char *indent, FILE *out) {
  ms_print_stack(a->snap, a->sites[site].stack_id, ms_site_note(a, &a->sites[site]), o, indent, out);
}


/* What the snapshot held that no kept event made: counted from the history's first instant. */
static void print_before_history(const ms_analysis *a, FILE *out) {
  const ms_prehistory *h = &a->before;
  if (h->allocated == 0 && h->reserved == 0) return;
  char b1[32], b2[32], b3[32];
  ms_format_bytes(h->allocated, b1, sizeof b1);
  ms_format_bytes(h->reserved, b2, sizeof b2);
  ms_format_bytes(h->end_bytes, b3, sizeof b3);
  fprintf(out, "  before the history: %s allocated in %zu blocks (%s of it still allocated at the snapshot),\n"
               "    %s reserved (reconstructed from the snapshot; counted from the history's first instant)\n",
          b1, h->nblocks, b3, b2);
}

/* Byte amounts of one column as text, in one unit with as many decimals as it takes for values
 * that differ to read differently (up to 6, then exact bytes): a leak's +2 MiB beside 1 GiB shows. */
static void format_column(const int64_t *v, size_t n, size_t stride, char (*out)[40]) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int64_t max = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t x = *(const int64_t *)((const char *)v + i * stride);
    if (x < 0) x = x == INT64_MIN ? INT64_MAX : -x; /* the unit by magnitude: -16 MiB reads so */
    if (x > max) max = x;
  }
  int u = 0;
  while (u < 4 && max >= ((int64_t)1024 << (10 * u))) u++;
  double scale = (double)((int64_t)1 << (10 * u));
  for (int decimals = u ? 2 : 0; decimals <= 6; decimals++) {
    bool distinct = true;
    for (size_t i = 0; i < n; i++) {
      int64_t x = *(const int64_t *)((const char *)v + i * stride);
      snprintf(out[i], sizeof out[i], "%.*f %s", decimals, (double)x / scale, units[u]);
      for (size_t k = 0; k < i && distinct; k++)
        if (strcmp(out[k], out[i]) == 0 && *(const int64_t *)((const char *)v + k * stride) != x) distinct = false;
    }
    if (distinct) return;
  }
  for (size_t i = 0; i < n; i++) snprintf(out[i], sizeof out[i], "%lld B", (long long)*(const int64_t *)((const char *)v + i * stride));
}

/* The iteration table: each byte column in one unit, with the digits its differences need. */
static void print_iterations(const ms_analysis *a, FILE *out) {
  enum { ROWS = 4096 }; /* more iterations: the first and last ROWS / 2 */
  char (*cols)[40] = malloc(sizeof *cols * a->niters * 4);
  if (!cols) return;
  const ms_iteration *it = a->iters;
  format_column(&it->peak_allocated, a->niters, sizeof *it, cols);
  format_column(&it->peak_reserved, a->niters, sizeof *it, cols + a->niters);
  format_column(&it->end_allocated, a->niters, sizeof *it, cols + 2 * a->niters);
  format_column(&it->end_unallocated, a->niters, sizeof *it, cols + 3 * a->niters);
  fprintf(out, "  %5s %12s %16s %16s %18s %22s\n", "#", "start", "peak allocated", "peak reserved", "allocated at end",
          "cached unused at end");
  for (size_t i = 0; i < a->niters; i++) {
    if (a->niters > ROWS && i == ROWS / 2) {
      fprintf(out, "  %5s (%zu iterations not shown: --json lists them all)\n", "...", a->niters - ROWS);
      i = a->niters - ROWS / 2;
    }
    char t[32];
    ms_format_ns(it[i].start_ns, t, sizeof t);
    fprintf(out, "  %5zu %12s %16s %16s %18s %22s%s\n", i, t, cols[i], cols[a->niters + i], cols[2 * a->niters + i],
            cols[3 * a->niters + i], it[i].skipped ? "  skipped step" : "");
  }
  free(cols);
  for (size_t i = 0; i < a->niters; i++)
    if (it[i].end_unallocated < 0) { /* say once why a column reads below zero */
      fprintf(out, "  (cached unused below zero: more allocated than reserved, memory that no segment counts, such as\n"
                   "   the async mode's allocations inside CUDA graph captures: CUDA's graph memory holds them, not the pool)\n");
      break;
    }
}

/* The iteration the first leak candidate's growth goes back to, by the whole run's log, and the
 * growth over it (nothing without one): "; from iteration 0, +1.57 MiB per iteration over the
 * whole run's log of 400". */
static void print_leak_from(const ms_analysis *a, FILE *out) {
  if (a->run.leak_from < 0) return;
  fprintf(out, "; from iteration %lld", (long long)a->run.leak_from);
  if (a->run.leak_rate > 0) {
    char b[32];
    ms_format_bytes((int64_t)(a->run.leak_rate + 0.5), b, sizeof b);
    fprintf(out, ", +%s per iteration over", b);
  } else {
    fprintf(out, ", by");
  }
  fprintf(out, " the whole run's log of %lld", (long long)a->run.iterations);
}

/* ---- the whole run (a->run: the snapshot's run log) ------------------------------------- */

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

/* The whole run's summary above the window's iterations, where the window is not the whole run
 * (iterations before it; else, without iterations, the run by time): whether it printed. */
static bool print_whole_run(const ms_analysis *a, FILE *out) {
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
    for (size_t i = 0; i < r->completed; i++) { /* what the roles told held at that peak */
      const ms_run_entry *x = &r->iters[i];
      if (x->first != r->peak_iteration) continue;
      char p[32], g[32], o[32], rest[32];
      int64_t told = x->role_bytes[0] + x->role_bytes[1] + x->role_bytes[2];
      if (!told) break;
      ms_format_bytes(x->role_bytes[0], p, sizeof p);
      ms_format_bytes(x->role_bytes[1], g, sizeof g);
      ms_format_bytes(x->role_bytes[2], o, sizeof o);
      ms_format_bytes(x->peak_allocated > told ? x->peak_allocated - told : 0, rest, sizeof rest);
      fprintf(out, "    at that peak, as told: parameters %s, gradients %s, optimizer state %s; the rest %s\n", p, g, o, rest);
      break;
    }
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

/* Memory by module (the module record): what each module's calls made that was live at the
 * allocated peak, then per module its tensors, activations, what it saved for backward and its
 * peaks, for the modules down to the depth where there are at most MAX_ROWS rows. */
static void print_modules(const ms_analysis *a, FILE *out) {
  enum { MAX_ROWS = 40, NAME = 34 };
  if (!a->nmodules) return;
  int depth = 0, deepest = 0;
  for (size_t i = 0; i < a->nmodules; i++)
    if (a->modules[i].depth > deepest) deepest = a->modules[i].depth;
  for (int d = 0; d <= deepest; d++) { /* the deepest level that keeps the table short */
    size_t rows = 0;
    for (size_t i = 0; i < a->nmodules; i++) rows += a->modules[i].depth <= d;
    if (rows > MAX_ROWS && d > 0) break;
    depth = d;
  }
  fprintf(out, "\nmemory by module (%zu modules recorded; paths below their root%s)\n", a->nmodules,
          depth < deepest ? ", the deeper ones in --json and the page" : "");
  fprintf(out, "  %-*s %10s %10s %11s %10s %10s %10s %10s\n", NAME, "module", "params", "grads", "activations",
          "saved/call", "fwd peak", "bwd peak", "at peak");
  /* in tree order: each module followed by its submodules (a stack of indices, depth first) */
  size_t *stack = malloc(sizeof *stack * a->nmodules), top = 0;
  if (!stack) return;
  for (size_t i = a->nmodules; i-- > 0;)
    if (a->modules[i].parent < 0) stack[top++] = i;
  while (top) {
    size_t i = stack[--top];
    const ms_module *m = &a->modules[i];
    for (size_t k = a->nmodules; k-- > i + 1;) /* its submodules, the first seen on top */
      if (a->modules[k].parent == (int32_t)i && a->modules[k].depth <= depth) stack[top++] = k;
    char name[NAME + 1], v[7][32];
    const char *shown = ms_module_shown(a, (int32_t)i);
    size_t len = strlen(shown), indent = m->depth > 0 ? (size_t)m->depth - 1 : 0;
    if (indent > 8) indent = 8;
    if (len + indent > NAME) snprintf(name, sizeof name, "%*s...%s", (int)indent, "", shown + len - (NAME - indent - 3));
    else snprintf(name, sizeof name, "%*s%s", (int)indent, "", shown);
    const int64_t value[7] = {m->parameter_bytes, m->gradient_bytes, m->activation_bytes, m->saved_bytes,
                              m->forward_peak, m->backward_peak, m->at_peak};
    for (int k = 0; k < 7; k++)
      if (value[k]) ms_format_bytes(value[k], v[k], sizeof v[k]);
      else snprintf(v[k], sizeof v[k], "-");
    fprintf(out, "  %-*s %10s %10s %11s %10s %10s %10s %10s\n", NAME, name, v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
  }
  free(stack);
}

/* What was live at the allocated peak by category, largest first: "at the peak: 36%
 * optimizer_state (8.00 MiB), ...". */
static void print_categories(const ms_analysis *a, FILE *out) {
  int64_t bytes[MS_CATEGORIES];
  ms_categories_at_peak(a, bytes);
  int order[MS_CATEGORIES], n = 0;
  for (int c = 0; c < ms_category_count(a); c++)
    if (bytes[c] > 0) order[n++] = c;
  for (int i = 1; i < n; i++) /* by bytes, then in the categories' order: stable */
    for (int j = i; j > 0 && bytes[order[j]] > bytes[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  if (n == 0 || a->peak_allocated <= 0) return;
  int col = fprintf(out, "  at the peak:");
  for (int i = 0; i < n; i++) {
    char b[32], item[160];
    ms_format_bytes(bytes[order[i]], b, sizeof b);
    int len = snprintf(item, sizeof item, "%.0f%% %s (%s)",
                       100.0 * (double)bytes[order[i]] / (double)a->peak_allocated, ms_category_name(a, order[i]), b);
    if (i) fputc(',', out), col++;
    if (i && col + 1 + len > 100) /* wrap under the first item, so no line runs past 100 columns */
      col = fprintf(out, "\n               ") - 1;
    col += fprintf(out, " %s", item);
  }
  fprintf(out, "\n");
  if (a->parameter_at_peak[MS_PARAM_SHARDED] || a->parameter_at_peak[MS_PARAM_GATHERED]) {
    fprintf(out, "  the parameters:");
    for (int k = 0; k < MS_PARAM_KINDS; k++) {
      char b[32];
      ms_format_bytes(a->parameter_at_peak[k], b, sizeof b);
      fprintf(out, "%s %s %s", k ? "," : "", b, ms_parameter_kind_name(k));
    }
    fprintf(out, "\n");
  }
  /* a rule without evidence says so rather than guess: one line per reason, its categories named */
  bool said[MS_CAT_BUILTIN] = {false};
  for (int c = 0; c < MS_CAT_BUILTIN; c++) {
    const char *why = ms_category_missing_evidence(a, c);
    if (!why || said[c]) continue;
    int same[MS_CAT_BUILTIN], nsame = 0;
    for (int k = c; k < MS_CAT_BUILTIN; k++) {
      const char *w = ms_category_missing_evidence(a, k);
      if (w && strcmp(w, why) == 0) same[nsame++] = k, said[k] = true;
    }
    fprintf(out, "  no");
    for (int i = 0; i < nsame; i++) fprintf(out, "%s %s", i == 0 ? "" : i == nsame - 1 ? " or" : ",", ms_category_name(a, same[i]));
    fprintf(out, " told: %s\n", why);
  }
}

/* The invalid frees (analysis/misuse.c) as a section of their own, when there are any. */
static void print_invalid_frees(const ms_analysis *a, const ms_report_options *o, FILE *out) {
  if (!a->invalid_free_total) return;
  char t1[32], b1[32];
  fprintf(out, "\ninvalid frees (frees of pointers the allocator did not own; nothing was freed)\n");
  fprintf(out, "  %lld: %lld double free(s), %lld foreign pointer(s), %lld interior pointer(s), at %zu site(s)\n",
          (long long)a->invalid_free_total, (long long)a->invalid_free_by_kind[1], (long long)a->invalid_free_by_kind[2],
          (long long)a->invalid_free_by_kind[3], a->ninvalid_frees);
  for (size_t i = 0; i < a->ninvalid_frees && i < 10; i++) {
    const ms_invalid_free *f = &a->invalid_frees[i];
    ms_format_ns(f->first_ns, t1, sizeof t1);
    fprintf(out, "  %lld x %s, first at %s: %#llx", (long long)f->count, ms_invalid_free_kind_name(f->kind), t1,
            (unsigned long long)f->address);
    if (f->kind == 3) {
      ms_format_bytes(f->block_size, b1, sizeof b1);
      fprintf(out, ", %lld bytes into %s%s block", (long long)f->offset, f->block_site >= 0 ? "a " : "a", f->block_site >= 0 ? b1 : "");
    }
    fputc('\n', out);
    ms_print_stack(a->snap, f->stack_id, "no stack recorded", o, "      ", out);
    if (f->kind == 3 && f->block_site >= 0) {
      fprintf(out, "    the block was allocated at:\n");
      ms_print_stack(a->snap, a->sites[f->block_site].stack_id, ms_site_note(a, &a->sites[f->block_site]), o, "      ", out);
    }
  }
  if (a->ninvalid_frees > 10) fprintf(out, "  ... %zu more site(s) in --json\n", a->ninvalid_frees - 10);
}

/* ---- the allocator's own releases and the replay's suggestions ------------------------- */

#define TEXT_RETRIES 10 /* retries the text report lists; --json lists them all */

/* "N call(s) released X in M segment(s)" for one cause, when it released anything. */
static void print_count(const char *what, const ms_release_count *c, const char *calls, FILE *out) {
  if (!c->segments) return;
  char b[32];
  ms_format_bytes(c->bytes, b, sizeof b);
  fprintf(out, "  %s: %lld %s%s, %s in %lld segment%s\n", what, (long long)c->calls, calls, c->calls == 1 ? "" : "s", b,
          (long long)c->segments, c->segments == 1 ? "" : "s");
}

/* The allocator's own releases of cached memory (analysis/retries.c): each retry with its request's
 * stack, e.g. "at 4.0 ms: 700.00 MiB requested; the allocator released 600.00 MiB of cached
 * segments and retried: served (1 segment, device 0)", then the other causes; nothing when the
 * allocator released nothing (the program's frees of external memory are not its releases). */
static void print_releases(const ms_analysis *a, const ms_report_options *o, FILE *out) {
  const ms_releases *R = &a->releases;
  if (!(R->retried.segments + R->empty_cache.segments + R->gc.segments + R->pool.segments + R->other.segments))
    return; /* nothing, or only the program's frees of external memory */
  char t[32], b1[32], b2[32];
  fprintf(out, "\nreleases of cached memory (%s)\n",
          R->recorded && !R->inferred ? "the reasons memsnap recorded"
          : R->recorded               ? "the reasons memsnap recorded, and for the others the events' pattern"
                                      : "inferred from the events' pattern: the snapshot does not say why");
  for (size_t i = 0; i < R->nretries && i < TEXT_RETRIES; i++) {
    const ms_retry *r = &R->retries[i];
    ms_format_ns(r->time_ns, t, sizeof t);
    ms_format_bytes(r->requested, b1, sizeof b1);
    ms_format_bytes(r->released, b2, sizeof b2);
    fprintf(out, "  at %s: %s requested; the allocator released %s of %s and retried: %s (%lld segment%s%s, device %d)\n", t,
            b1, b2, r->reason_recorded && !r->whole_cache ? "oversize cached blocks" : "cached segments",
            r->succeeded ? "served" : "out of memory", (long long)r->segments, r->segments == 1 ? "" : "s",
            r->unmapped ? ", pages unmapped" : "", r->device);
    ms_print_stack(a->snap, r->stack_id, NULL, o, "      ", out);
  }
  if (R->retried.calls > TEXT_RETRIES)
    fprintf(out, "  ... %lld more retries in --json\n", (long long)(R->retried.calls - TEXT_RETRIES));
  if (R->retried.calls > 1) {
    ms_format_bytes(R->retried.bytes, b1, sizeof b1);
    fprintf(out, "  retries: %lld (%lld out of memory), %s released for them\n", (long long)R->retried.calls,
            (long long)R->retries_failed, b1);
  }
  print_count("empty_cache", &R->empty_cache, "call", out);
  print_count("garbage collection (garbage_collection_threshold)", &R->gc, "time", out);
  print_count("private pools emptied", &R->pool, "call", out);
  print_count("other (shutdown, the driver's pool, no request after them)", &R->other, "time", out);
  if (R->unmaps) {
    ms_format_bytes(R->unmapped_bytes, b1, sizeof b1);
    fprintf(out, "  of them, pages unmapped (expandable segments, the async pool): %lld unmap%s, %s\n", (long long)R->unmaps,
            R->unmaps == 1 ? "" : "s", b1);
  }
}

/* "PYTORCH_CUDA_ALLOC_CONF=..." and, for a row that sets one, the memory fraction. */
static void print_setting(const ms_suggestion *s, FILE *out) {
  fprintf(out, "PYTORCH_CUDA_ALLOC_CONF=%s", s->conf[0] ? s->conf : "(unset: the defaults)");
  if (s->memory_fraction[0]) fprintf(out, " with torch.cuda.set_per_process_memory_fraction(%s)", s->memory_fraction);
}

/* "fits; peak reserved X" or "peak reserved X: Y (Z%) less". */
static void print_effect(const ms_suggestions *g, const ms_suggestion *s, FILE *out) {
  char b1[32], b2[32];
  ms_format_bytes(s->peak_reserved, b1, sizeof b1);
  ms_format_bytes(s->saved, b2, sizeof b2);
  double pct = g->baseline_peak_reserved > 0 ? 100.0 * (double)s->saved / (double)g->baseline_peak_reserved : 0;
  if (s->fits) fprintf(out, "the recorded out of memory does not happen; peak reserved %s", b1);
  else fprintf(out, "peak reserved %s, %s (%.1f%%) less", b1, b2, pct);
}

/* The replay's suggestions (a->suggestions, which the command filled: replay/suggest.c), each
 * with the exact PYTORCH_CUDA_ALLOC_CONF line to use; nothing when not asked, turned off, or
 * nothing to replay. */
static void print_suggestions(const ms_analysis *a, FILE *out) {
  const ms_suggestions *g = a->suggestions;
  if (!g || g->status == MS_SUGGEST_DISABLED || g->status == MS_SUGGEST_NOTHING) return;
  char b[32];
  ms_format_bytes(g->baseline_peak_reserved, b, sizeof b);
  fprintf(out, "\nsuggestions from the replay (the settings of memsnap replay --sweep, on the simulated device)\n");
  if (g->status == MS_SUGGEST_DONE)
    fprintf(out, "  %d of %d settings replayed; the recorded settings replayed reach %s reserved%s\n", g->settings_done,
            g->settings, b, g->baseline_ooms ? " and run out of memory" : "");
  for (int i = 0; i < g->n; i++) {
    fprintf(out, "  %d. ", i + 1);
    print_setting(&g->s[i], out);
    fprintf(out, "\n     ");
    print_effect(g, &g->s[i], out);
    fprintf(out, "\n");
  }
  if (g->note[0]) fprintf(out, "  %s%s\n", g->n ? "note: " : "", g->note);
  if (g->timed_out)
    fprintf(out, "  the time limit (%.3g s) came first: the settings not replayed by then are left out; "
                 "memsnap replay --sweep %s replays them all\n",
            g->time_limit_s, g->snapshot);
}

void ms_print_best_suggestion(const ms_analysis *a, const char *indent, FILE *out) {
  const ms_suggestions *g = a->suggestions;
  if (!g || g->status == MS_SUGGEST_DISABLED || g->status == MS_SUGGEST_NOTHING) return;
  if (g->n == 0) {
    if (g->status != MS_SUGGEST_DONE || g->timed_out)
      fprintf(out, "%ssuggestions: %s\n", indent, g->timed_out && !g->note[0] ? "the sweep's time limit came first" : g->note);
    return;
  }
  fprintf(out, "%ssuggestion: ", indent);
  print_setting(&g->s[0], out);
  fprintf(out, " (");
  print_effect(g, &g->s[0], out);
  fprintf(out, ")\n");
}

void ms_growth_text(const ms_site *st, char *out, size_t len) {
  char b[32];
  if (!st->every) {
    ms_format_bytes((int64_t)st->bytes_per_iteration, b, sizeof b);
    snprintf(out, len, "+%s per iteration", b);
    return;
  }
  ms_format_bytes(st->step_bytes / st->steps, b, sizeof b);
  if (st->min_step_gap == st->max_step_gap) snprintf(out, len, "+%s every %d iterations", b, st->min_step_gap);
  else snprintf(out, len, "+%s every %d to %d iterations", b, st->min_step_gap, st->max_step_gap);
}

void ms_kept_graph_text(const ms_analysis *a, size_t i, char *out, size_t len) {
  const ms_snapshot *s = a->snap;
  const ms_kept_graph *g = &a->graphs[i];
  char b1[32], where[512] = "", module[300] = "", iterations[64];
  ms_format_bytes(g->bytes, b1, sizeof b1);
  if (g->frame && g->frame < s->nframes) {
    const ms_frame *f = &s->frames[g->frame];
    char line[32] = "";
    if (f->line > 0) snprintf(line, sizeof line, ":%lld", (long long)f->line);
    snprintf(where, sizeof where, " at %s (%s%s)", f->short_name, f->file[0] ? base_name(f->file) : base_name(f->module), line);
  }
  if (g->module >= 0) snprintf(module, sizeof module, " of %s", ms_module_shown(a, g->module));
  if (g->first_iteration == g->last_iteration) snprintf(iterations, sizeof iterations, "iteration %d", g->first_iteration);
  else snprintf(iterations, sizeof iterations, "iterations %d to %d", g->first_iteration, g->last_iteration);
  char by[512], held[600] = "(its loss or output) is still held";
  if (ms_graph_kept_by(a, i, by, sizeof by)) snprintf(held, sizeof held, "is kept by %s", by); /* the holders' chain */
  snprintf(out, len,
           "%s in %d autograd graph%s kept alive: the forward%s%s ran with grad enabled and no backward (%s); what it "
           "returned %s, and with it every tensor it saved for backward; use "
           "torch.no_grad() for that forward, or keep loss.item() instead of the loss",
           b1, g->graphs, g->graphs == 1 ? "" : "s", module, where, iterations, held);
}

/* The autograd graphs kept without a backward (kept_graphs.c), before the sites: each with the
 * line that called its forward, what to change, and its largest site. */
static void print_kept_graphs(const ms_analysis *a, const ms_report_options *o, FILE *out) {
  for (size_t i = 0; i < a->ngraphs && i < 10; i++) {
    char b[32], line[2048];
    if (i == 0) fprintf(out, "  autograd graphs kept alive (a forward's saved tensors, its backward never run):\n");
    ms_kept_graph_text(a, i, line, sizeof line);
    ms_format_bytes(a->sites[a->graphs[i].top_site].graph_bytes, b, sizeof b);
    fprintf(out, "  G%zu. %s\n", i + 1, line);
    fprintf(out, "       %lld blocks; the largest site holds %s of it:\n", (long long)a->graphs[i].blocks, b);
    print_site(a, a->graphs[i].top_site, o, "       ", out);
    ms_report_causes_graph(a, i, "     ", out); /* what keeps it (causes.c), under its stack */
  }
  if (a->ngraphs) fprintf(out, "  allocation sites:\n");
}

/* ---- how a process ended (memsnap run, recover, and a recovered snapshot's reports) ---------- */

void ms_describe_end(const char *how, uint64_t end_ns, uint64_t last_alloc_ns, uint64_t last_event_ns, char *out,
                     size_t len) {
  char at[32] = "", gap[32] = "";
  ms_format_ns((int64_t)(end_ns ? end_ns : last_event_ns), at, sizeof at);
  if (!end_ns) snprintf(out, len, "%s (when is not known; its last event at %s)", how, at);
  else if (last_alloc_ns && end_ns >= last_alloc_ns) {
    ms_format_ns((int64_t)(end_ns - last_alloc_ns), gap, sizeof gap);
    snprintf(out, len, "%s at %s, %s after its last allocation", how, at, gap);
  } else {
    snprintf(out, len, "%s at %s", how, at);
  }
}

void ms_signal_name(int sig, char *out, size_t len) {
  const char *abbrev = sig > 0 ? sigabbrev_np(sig) : NULL;
  if (abbrev) snprintf(out, len, "SIG%s", abbrev);
  else snprintf(out, len, "signal %d", sig);
}

bool ms_snapshot_death(const ms_snapshot *s, char *out, size_t len) {
  if (s->recovered != 1 || !strcmp(s->ended, "running")) return false; /* its own snapshot, or read while it ran */
  char how[300], name[32];
  if (s->ended[0]) snprintf(how, sizeof how, "%s", s->ended);
  else if (s->end_signal) ms_signal_name((int)s->end_signal, name, sizeof name), snprintf(how, sizeof how, "killed by %s", name);
  else if (s->exit_status >= 0) snprintf(how, sizeof how, "exited with status %lld", (long long)s->exit_status);
  else snprintf(how, sizeof how, "ended (how is not known)");
  ms_describe_end(how, (uint64_t)s->end_ns, (uint64_t)s->last_alloc_ns, (uint64_t)s->last_event_ns, out, len);
  return true;
}

void ms_report_text(const ms_analysis *a, const ms_report_options *o, FILE *out) {
  const ms_snapshot *s = a->snap;
  char b1[32], b2[32], b3[32], t1[32], t2[32];
  fprintf(out, "memsnap analyze: %s\n", s->shown_path);
  if (s->import_file[0])
    fprintf(out, "  imported from %s (%s) by memsnap %s\n", s->import_file, s->import_source, s->tool_version);
  else
  {
    char process[sizeof s->host + 64];
    ms_process_text(s, process, sizeof process);
    fprintf(out, "  snapshot of %s, %s backend, memsnap %s, stacks %s\n", process, s->backend, s->tool_version,
            s->stacks_mode);
  }
  char death[512];
  if (ms_snapshot_death(s, death, sizeof death))
    fprintf(out, "  %s: %s (this snapshot was written from its live mapping afterwards)\n",
            s->exit_status >= 0 && !s->end_signal ? "ended" : "died", death);
  ms_format_ns(s->last_ns - s->first_ns, t1, sizeof t1);
  fprintf(out, "  history: %lld events over %s, %lld dropped%s\n", (long long)s->nevents, t1, (long long)s->dropped,
          a->truncated ? " (truncated: the oldest events are gone; what they left allocated and reserved is "
                         "reconstructed from the snapshot)"
                       : " (complete since recording started)");
  ms_format_bytes(a->end_allocated, b1, sizeof b1);
  ms_format_bytes(a->end_reserved, b2, sizeof b2);
  fprintf(out, "  at the snapshot: %s allocated, %s reserved in %lld segments\n", b1, b2, (long long)a->segments);
  print_before_history(a, out);

  fprintf(out, "\npeak\n");
  ms_format_bytes(a->peak_allocated, b1, sizeof b1);
  ms_format_bytes(a->peak_reserved, b2, sizeof b2);
  ms_format_ns(a->peak_allocated_ns, t1, sizeof t1);
  ms_format_ns(a->peak_reserved_ns, t2, sizeof t2);
  fprintf(out, "  allocated %s at %s (event %lld); reserved %s at %s\n", b1, t1, (long long)a->peak_event_id, b2, t2);
  print_categories(a, out);
  if (a->nat_peak) fprintf(out, "  live at the allocated peak, by allocation site:\n");
  for (size_t i = 0; i < a->nat_peak; i++) {
    ms_format_bytes(a->at_peak[i].bytes, b1, sizeof b1);
    fprintf(out, "    %12s in %lld blocks\n", b1, (long long)a->at_peak[i].count);
    print_site(a, a->at_peak[i].site, o, "        ", out);
  }
  print_modules(a, out);

  fprintf(out, "\niterations\n");
  print_whole_run(a, out); /* the whole run first, where the window is not all of it */
  if (a->niters == 0) {
    fprintf(out, "  none: the snapshot has no repeated mark or range (memsnap_mark, memsnap.mark, record_function)\n");
  } else {
    if (strcmp(a->iteration_source, "inferred") == 0)
      fprintf(out, "  %zu, inferred from the allocation pattern (%s; no repeated mark or range)\n", a->niters,
              a->iteration_label);
    else if (strcmp(a->iteration_source, "optimizer") == 0)
      fprintf(out, "  %zu, from the stacks: %s (no repeated mark or range);\n"
              "    each ends where a step ends, the first from the history's start\n", a->niters, a->iteration_label);
    else if (strcmp(a->iteration_source, "steps") == 0)
      fprintf(out, "  %zu, the optimizer's steps as recorded (%s), %lld of them skipped (GradScaler found inf or NaN\n"
              "    gradients); each from one step's end to the next one's, the first from the history's start\n",
              a->niters, a->iteration_label, (long long)a->skipped_steps);
    else if (strcmp(a->iteration_source, "loop") == 0)
      fprintf(out, "  %zu, from the stacks: %s, each from one run of that line to the next (no repeated mark or\n"
              "    range)\n", a->niters, a->iteration_label);
    else
      fprintf(out, "  %zu from %s labelled '%s'%s\n", a->niters, a->iteration_source, a->iteration_label,
              a->iterations_from_range_ends ? ",\n    each from one range's end to the next one's, the first from the history's start"
              : strcmp(a->iteration_source, "ranges") == 0 ? ", each from one range's start to the next one's" : "");
    print_iterations(a, out);
  }

  fprintf(out, "\nleak candidates (best first)\n");
  ms_growth growth = ms_analysis_growth(a);
  if (growth == MS_GROWTH_NONE) { /* the verdict first: what is listed below is held, not growing */
    size_t held_sites;
    ptrdiff_t largest;
    ms_format_bytes(ms_held_at_snapshot(a, &held_sites, &largest), b1, sizeof b1);
    fprintf(out, "  no growth across %zu iterations: no site's memory grew from one iteration to the next\n", a->niters);
    if (held_sites) fprintf(out, "  held at the snapshot, not growing: %s in %zu sites, the largest first\n", b1, held_sites);
  } else if (growth == MS_GROWTH_UNKNOWN && a->nleaks) {
    fprintf(out, "  growth cannot be told: %s (two are needed); what is alive at the snapshot, the largest first\n",
            a->niters ? "one iteration" : "no iterations");
  }
  print_kept_graphs(a, o, out);
  if (a->nleaks == 0) fprintf(out, "  none: nothing is alive at the snapshot\n");
  for (size_t i = 0; i < a->nleaks && i < 10; i++) {
    const ms_site *st = &a->sites[a->leaks[i]];
    size_t transitions = a->niters > 1 ? a->niters - 1 : 0;
    char when[96] = "";
    ms_format_bytes(st->end_bytes, b1, sizeof b1);
    ms_format_ns(st->first_ns, t1, sizeof t1);
    ms_format_ns(st->last_ns, t2, sizeof t2);
    ms_format_bytes((int64_t)st->bytes_per_iteration, b2, sizeof b2);
    if (st->allocs) snprintf(when, sizeof when, "; first %s, last %s", t1, t2);
    fprintf(out, "  %zu. ", i + 1);
    if (st->kind == MS_LEAK_GROWING && st->every) {
      char every[96];
      ms_growth_text(st, every, sizeof every);
      fprintf(out, "growing: %s (grew at %d of %zu iterations, never freed", every, st->steps, transitions);
      if (i == 0) print_leak_from(a, out);
      fprintf(out, "); %s live in %lld blocks", b1, (long long)st->end_count);
    } else if (st->kind == MS_LEAK_GROWING) {
      fprintf(out, "growing: +%s per iteration (grew at %d of %zu iterations", b2, st->increases, transitions);
      if (i == 0) print_leak_from(a, out);
      fprintf(out, "); %s live in %lld blocks", b1, (long long)st->end_count);
    } else if (st->kind == MS_LEAK_GROWING_RELEASED) {
      ms_format_ns(st->released_ns, t1, sizeof t1);
      ms_format_bytes(st->peak_iter_live, b3, sizeof b3);
      fprintf(out, "growing, released at %s: +%s per iteration (grew at %d of %zu iterations, to %s after iteration %d); "
                   "%s",
              t1, b2, st->increases_at_peak, transitions, b3, st->peak_boundary, st->end_count ? b1 : "nothing");
      if (st->end_count) fprintf(out, " live in %lld blocks at the snapshot", (long long)st->end_count);
      else fprintf(out, " live at the snapshot");
    } else {
      fprintf(out, "%s %s: %s in %lld blocks%s", ms_leak_kind_name(st->kind), ms_category_name(a, st->held_category), b1,
              (long long)st->end_count,
              st->kind == MS_LEAK_RETAINED && !st->before_history ? ", held since the start" : "");
    }
    fprintf(out, "%s; score %.2f", when, st->score);
    int32_t module = st->held_module ? st->held_module : st->module; /* what it holds was made there */
    if (module) fprintf(out, "; in %s", ms_module_shown(a, module - 1));
    if (st->graph) {
      ms_format_bytes(st->graph_bytes, b3, sizeof b3);
      fprintf(out, "; %s of it in kept graph G%d", b3, st->graph);
    }
    fprintf(out, "\n");
    print_site(a, a->leaks[i], o, "       ", out);
    ms_report_causes_site(a, a->leaks[i], "     ", out); /* what holds it (causes.c), under its stack */
  }
  ms_report_causes_text(a, o, out);

  fprintf(out, "\nout of memory\n");
  if (a->nooms == 0) fprintf(out, "  none recorded\n");
  for (size_t i = 0; i < a->nooms; i++) {
    const ms_oom *m = &a->ooms[i];
    ms_format_ns(m->time_ns, t1, sizeof t1);
    ms_format_bytes(m->requested, b1, sizeof b1);
    ms_format_bytes(m->device_free, b2, sizeof b2);
    ms_format_bytes(m->cached_unallocated, b3, sizeof b3);
    fprintf(out, "  at %s on device %d: %s requested; the device had %s free; the cache held %s reserved but unallocated\n",
            t1, m->device, b1, b2, b3);
    if (m->device_free >= m->requested)
      fprintf(out, "    refused by a cap, not by the device: it had room, so a memory fraction or limit stopped the request "
                   "(torch.cuda.set_per_process_memory_fraction, MEMSNAP_MEMORY_FRACTION)\n");
    ms_print_stack(s, m->stack_id, NULL, o, "      ", out);
    ms_format_bytes(m->live_bytes, b1, sizeof b1);
    fprintf(out, "    %s was allocated, largest sites:\n", b1);
    for (int k = 0; k < m->ntop; k++) {
      const ms_site *st = &a->sites[m->top[k].site];
      ms_format_bytes(m->top[k].bytes, b1, sizeof b1);
      fprintf(out, "      %12s in %lld blocks (%s)\n", b1, (long long)m->top[k].count,
              st->kind == MS_LEAK_GROWING ? "growing" : "site");
      print_site(a, m->top[k].site, o, "          ", out);
    }
    if (m->cached_unallocated >= m->requested)
      fprintf(out, "    would have fit: the cache held enough, but in pieces; try MEMSNAP_MAX_SPLIT_SIZE_MB "
                   "(PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb) or empty_cache() before this step\n");
    for (int k = 0; k < m->ntop; k++)
      if (a->sites[m->top[k].site].kind == MS_LEAK_GROWING && m->top[k].bytes >= m->requested) {
        fprintf(out, "    would have fit: without the growing site listed above (%d), which holds more than the request\n", k + 1);
        break;
      }
  }
  if (a->nooms) /* what would fit: memsnap predict (docs/predict.md) */
    fprintf(out, "  what fits on this card: record the program at two sizes that fit (batch, sequence length) and run\n"
                 "    memsnap predict small.db=SIZE large.db=SIZE --capacity CARD_MEMORY --sweep\n");

  print_releases(a, o, out);
  print_suggestions(a, out);
  print_invalid_frees(a, o, out);

  fprintf(out, "\nfragmentation at the snapshot\n");
  ms_format_bytes(a->end_reserved - a->end_allocated, b1, sizeof b1);
  ms_format_bytes(a->split_free_bytes, b2, sizeof b2);
  fprintf(out, "  %s reserved but unallocated; %lld free blocks inside partly used segments hold %s\n", b1,
          (long long)a->free_blocks_in_split_segments, b2);

  if (a->nexternal) {
    ms_format_bytes(a->external_bytes, b1, sizeof b1);
    fprintf(out, "\noutside memsnap's allocator at the snapshot (intercepted): %s\n", b1);
    for (size_t i = 0; i < a->nexternal; i++) {
      const ms_external *e = &a->external[i];
      ms_format_bytes(e->bytes, b1, sizeof b1);
      fprintf(out, "  %12s in %lld allocations  %s%s%s\n", b1, (long long)e->count, e->source[0] ? e->source : "?",
              e->library[0] ? " from " : "", e->library);
    }
  }

  fprintf(out, "\ntop allocation sites (bytes allocated over the history)\n");
  for (size_t i = 0; i < a->ntop && i < 5; i++) {
    const ms_site *st = &a->sites[a->top[i]];
    if (st->allocs == 0) continue;
    ms_format_bytes(st->alloc_bytes, b1, sizeof b1);
    fprintf(out, "  %12s in %lld allocations\n", b1, (long long)st->allocs);
    print_site(a, a->top[i], o, "      ", out);
  }
}

/* ---- several snapshots ------------------------------------------------------------------- */

/* The kind as the text report names it. */
static const char *kind_text(ms_leak_kind k) { return k == MS_LEAK_GROWING_RELEASED ? "growing, released" : ms_leak_kind_name(k); }

/* A site's first frame that matters as one short line (or why it has none). */
/* True for a frame of a library (site-packages, dist-packages, the interpreter's lib/python*,
 * torch/): not the user's. */
static bool library_frame(const ms_frame *f) {
  return strstr(f->file, "site-packages/") || strstr(f->file, "dist-packages/") || strstr(f->file, "/lib/python") ||
         strncmp(f->file, "torch/", 6) == 0 || strstr(f->file, "/torch/");
}

/* "frame (file:line)"; a <module> frame as its file:line. */
static void frame_where(const ms_frame *f, char *out, size_t len) {
  if (strcmp(f->name, "<module>") == 0) snprintf(out, len, "(%s:%lld)", base_name(f->file), (long long)f->line);
  else snprintf(out, len, "%s (%s:%lld)", f->short_name, base_name(f->file), (long long)f->line);
}

/* How one-line lists name a site (as the page's lists do): the frame that allocated, then the
 * user's frame (the first with a line outside the libraries, else the first with a line) with
 * its file:line: "at::native::clone() <- train (train.py:40)". */
static void site_label(const ms_analysis *a, uint32_t site, char *out, size_t len) {
  const ms_snapshot *s = a->snap;
  uint32_t ids[64];
  size_t n = ms_stack_frames_that_matter(s, a->sites[site].stack_id, ids, 64);
  if (n == 0) {
    snprintf(out, len, "(%s)", ms_site_note(a, &a->sites[site]));
    return;
  }
  const ms_frame *top = &s->frames[ids[0]], *user = NULL, *any = NULL;
  for (size_t i = 0; i < n && !user; i++) {
    const ms_frame *f = &s->frames[ids[i]];
    if (!f->file[0] || f->line <= 0) continue;
    if (!any) any = f;
    if (!library_frame(f)) user = f;
  }
  if (!user) user = any;
  char where[256] = "";
  if (user) frame_where(user, where, sizeof where);
  if (!user || user == top) snprintf(out, len, "%s", user ? where : top->short_name);
  else { /* cut where it must be: the operator, then as much of the user's frame as fits */
    int k = snprintf(out, len, "%s <- ", top->short_name);
    if (k >= 0 && (size_t)k < len) memcpy(out + k, where, strnlen(where, len - (size_t)k - 1) + 1), out[len - 1] = '\0';
  }
}

void ms_report_side_by_side(const ms_analysis *a, size_t n, FILE *out) {
  fprintf(out, "memsnap analyze: %zu snapshots side by side\n", n);
  fprintf(out, "  %-28s %8s %10s %14s %14s %6s  %s\n", "snapshot", "pid", "events", "peak allocated", "peak reserved",
          "iters", "first leak candidate");
  for (size_t i = 0; i < n; i++) {
    const ms_snapshot *s = a[i].snap;
    char b1[32], b2[32], lead[256] = "none";
    ms_format_bytes(a[i].peak_allocated, b1, sizeof b1);
    ms_format_bytes(a[i].peak_reserved, b2, sizeof b2);
    if (a[i].nleaks) {
      const ms_site *st = &a[i].sites[a[i].leaks[0]];
      bool grew = ms_leak_grows(st);
      char bytes[32], where[160];
      ms_format_bytes(grew ? (int64_t)st->bytes_per_iteration : st->end_bytes, bytes, sizeof bytes);
      site_label(&a[i], a[i].leaks[0], where, sizeof where);
      snprintf(lead, sizeof lead, "%s %s%s in %s", kind_text(st->kind), grew ? "+" : "", bytes, where);
    }
    char pid[24] = "unknown";
    if (s->pid > 0) snprintf(pid, sizeof pid, "%lld", (long long)s->pid);
    fprintf(out, "  %-28s %8s %10lld %14s %14s %6zu  %s\n", base_name(s->shown_path), pid, (long long)s->nevents, b1, b2,
            a[i].niters, lead);
  }
  /* The leading candidates of every snapshot, each one row whatever snapshot it is in. */
  ms_matches m;
  const ms_match_row **rows;
  ptrdiff_t nrows = ms_match_leaks(a, n, &m, &rows);
  if (nrows < 0) {
    fprintf(out, "\n  (out of memory matching the leak candidates)\n");
    return;
  }
  fprintf(out, "\n  leak candidates matched across the snapshots (live at each; sites matched by function, file and line)\n  ");
  for (size_t k = 0; k < n; k++) fprintf(out, " %-26.26s", base_name(a[k].snap->shown_path));
  fprintf(out, "\n");
  for (ptrdiff_t r = 0, shown = 0; r < nrows && shown < 15; r++) {
    bool leading = false; /* among the first 10 candidates of a snapshot */
    for (size_t k = 0; k < n; k++)
      for (size_t i = 0; rows[r]->site[k] && i < a[k].nleaks && i < 10; i++) leading |= a[k].leaks[i] == rows[r]->site[k] - 1;
    if (!leading) continue;
    fprintf(out, "  ");
    size_t first = n;
    for (size_t k = 0; k < n; k++) {
      char cell[64] = "-", bytes[32];
      if (rows[r]->site[k]) {
        ms_format_bytes(rows[r]->bytes[k], bytes, sizeof bytes);
        snprintf(cell, sizeof cell, "%s %s", bytes, kind_text(a[k].sites[rows[r]->site[k] - 1].kind));
        if (first == n) first = k;
      }
      fprintf(out, " %-26s", cell);
    }
    char where[256];
    site_label(&a[first], rows[r]->site[first] - 1, where, sizeof where);
    fprintf(out, " %s\n", where);
    shown++;
  }
  free(rows);
  ms_matches_free(&m);
}
