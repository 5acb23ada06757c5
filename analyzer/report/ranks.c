/* ranks.c: the table of a job's ranks (analysis/ranks.c summarizes and judges them) written out:
 * one row per rank (peak allocated and reserved, when the peak came, iterations, growth per
 * iteration), the median rank, the rank that stands out and the sites that make the difference
 * between it and the median rank (a comparison, as `memsnap diff` prints one: diff.c); as text,
 * or as JSON's `ranks` (docs/analysis-json.md).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

static const char *const metric_names[MS_RANK_METRICS] = {"peak allocated", "peak reserved", "growth per iteration"};
static const char *const metric_keys[MS_RANK_METRICS] = {"peak_allocated_bytes", "peak_reserved_bytes", "growth_per_iteration_bytes"};

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* "rank 11 (rank11.db)", or the file alone when the snapshot names no rank. */
static void rank_name(const ms_rank *r, const char *path, char *out, size_t len) {
  char shown[256];
  snprintf(shown, sizeof shown, "%s", base_name(path));
  ms_neutralise(shown);
  if (r->rank >= 0) snprintf(out, len, "rank %lld (%s)", (long long)r->rank, shown);
  else snprintf(out, len, "%s", shown);
}

static void format_growth(int64_t g, char *out, size_t len) {
  char b[32];
  ms_format_bytes(g, b, sizeof b);
  snprintf(out, len, "%s%s", g >= 0 ? "+" : "", b);
}

/* The order the ranks are shown in: by rank where the snapshots say it, else as given. */
static const ms_rank *order_base;
static int by_rank(const void *x, const void *y) {
  size_t a = *(const size_t *)x, b = *(const size_t *)y;
  int64_t ra = order_base[a].rank, rb = order_base[b].rank;
  if ((ra >= 0) != (rb >= 0)) return ra >= 0 ? -1 : 1;
  if (ra != rb) return ra < rb ? -1 : 1;
  return (a > b) - (a < b);
}

/* order[0..n), the ranks in the order shown; false when out of memory. */
static size_t *shown_order(const ms_rank *r, size_t n) {
  size_t *order = malloc(sizeof *order * (n ? n : 1));
  if (!order) return NULL;
  for (size_t i = 0; i < n; i++) order[i] = i;
  order_base = r;
  qsort(order, n, sizeof *order, by_rank);
  return order;
}

void ms_report_ranks_text(const ms_rank *r, const char *const *paths, size_t n, const ms_ranks_verdict *v,
                          const ms_analysis *pair, ms_comparison *c, const ms_report_options *o, FILE *out) {
  size_t *order = shown_order(r, n);
  fprintf(out, "memsnap analyze: %zu ranks of a job side by side (%zu read)\n", n, v->readable);
  fprintf(out, "  %6s  %-24s %8s %11s %15s %15s %10s %6s %17s\n", "rank", "snapshot", "pid", "events", "peak allocated",
          "peak reserved", "peak at", "iters", "growth/iteration");
  for (size_t k = 0; k < n; k++) {
    size_t i = order ? order[k] : k;
    char shown[256], rank[24] = "?";
    snprintf(shown, sizeof shown, "%s", base_name(paths[i]));
    ms_neutralise(shown);
    if (r[i].rank >= 0) snprintf(rank, sizeof rank, "%lld", (long long)r[i].rank);
    if (!r[i].ok) {
      fprintf(out, "  %6s  %-24s %s\n", rank, shown, r[i].error);
      continue;
    }
    char pa[32], pr[32], at[32], g[40];
    ms_format_bytes(r[i].peak_allocated, pa, sizeof pa);
    ms_format_bytes(r[i].peak_reserved, pr, sizeof pr);
    ms_format_ns(r[i].peak_ns, at, sizeof at);
    format_growth(r[i].growth, g, sizeof g);
    fprintf(out, "  %6s  %-24s %8lld %11lld %15s %15s %10s %6lld %17s%s%s\n", rank, shown, (long long)r[i].pid,
            (long long)r[i].events, pa, pr, at, (long long)r[i].iterations, r[i].iterations >= 2 ? g : "-",
            (ptrdiff_t)i == v->outlier ? "  <- stands out" : "", (ptrdiff_t)i == v->median ? "  (median)" : "");
  }
  free(order);
  if (v->median < 0) {
    fprintf(out, "\n  no rank could be read\n");
    return;
  }
  char name[300], b[32], g[40];
  rank_name(&r[v->median], paths[v->median], name, sizeof name);
  ms_format_bytes(v->median_value[MS_RANK_PEAK_ALLOCATED], b, sizeof b);
  format_growth(v->median_value[MS_RANK_GROWTH], g, sizeof g);
  fprintf(out, "\n  median: peak allocated %s, growth %s per iteration; the median rank is %s\n", b, g, name);
  if (v->outlier < 0) {
    fprintf(out, "  no rank stands out: none exceeds the median's peaks or growth by more than the ranks' spread\n"
                 "  (3 median absolute deviations), 5%% of the median and 1 MiB\n");
    return;
  }
  const ms_rank *x = &r[v->outlier];
  rank_name(x, paths[v->outlier], name, sizeof name);
  fprintf(out, "  %s stands out by its %s:", name, metric_names[v->metric]);
  for (int m = 0; m < MS_RANK_METRICS; m++) {
    char mine[40], theirs[40];
    int64_t value = m == MS_RANK_PEAK_ALLOCATED ? x->peak_allocated : m == MS_RANK_PEAK_RESERVED ? x->peak_reserved : x->growth;
    if (m == MS_RANK_GROWTH) format_growth(value, mine, sizeof mine), format_growth(v->median_value[m], theirs, sizeof theirs);
    else ms_format_bytes(value, mine, sizeof mine), ms_format_bytes(v->median_value[m], theirs, sizeof theirs);
    fprintf(out, "%s %s %s against the median's %s", m ? ";" : "", metric_names[m], mine, theirs);
  }
  fprintf(out, "\n");
  if (!pair || !c) return;
  char median_name[300];
  rank_name(&r[v->median], paths[v->median], median_name, sizeof median_name);
  fprintf(out, "\n  what makes the difference, by site (allocated at the snapshot: %s -> %s)\n", median_name, name);
  char short_name[64];
  if (x->rank >= 0) snprintf(short_name, sizeof short_name, "rank %lld", (long long)x->rank);
  else snprintf(short_name, sizeof short_name, "the rank that stands out");
  ms_report_diff_sites(pair, c, 10, (const char *const[]){"the median rank", short_name}, o, "    ", out);
}

static cJSON *rank_json(const ms_rank *r, const char *path, size_t index) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "index", (double)index);
  char shown[4096];
  snprintf(shown, sizeof shown, "%s", path);
  ms_neutralise(shown);
  cJSON_AddStringToObject(o, "path", shown);
  if (r->rank >= 0) cJSON_AddNumberToObject(o, "rank", (double)r->rank);
  else cJSON_AddNullToObject(o, "rank");
  if (!r->ok) {
    cJSON_AddStringToObject(o, "error", r->error);
    return o;
  }
  cJSON_AddNumberToObject(o, "pid", (double)r->pid);
  cJSON_AddNumberToObject(o, "events", (double)r->events);
  cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)r->peak_allocated);
  cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)r->peak_reserved);
  cJSON_AddNumberToObject(o, "peak_allocated_ns", (double)r->peak_ns);
  cJSON_AddNumberToObject(o, "iterations", (double)r->iterations);
  cJSON_AddNumberToObject(o, "growth_per_iteration_bytes", (double)r->growth);
  return o;
}

struct cJSON *ms_ranks_json(const ms_rank *r, const char *const *paths, size_t n, const ms_ranks_verdict *v,
                            const ms_analysis *pair, const ms_comparison *c) {
  cJSON *root = cJSON_CreateObject(), *ranks = cJSON_AddObjectToObject(root, "ranks");
  cJSON *list = cJSON_AddArrayToObject(ranks, "snapshots");
  size_t *order = shown_order(r, n);
  for (size_t k = 0; list && order && k < n; k++) cJSON_AddItemToArray(list, rank_json(&r[order[k]], paths[order[k]], order[k]));
  if (!order) cJSON_Delete(root), root = NULL;
  free(order);
  if (!root) return NULL;
  cJSON *med = cJSON_AddObjectToObject(ranks, "median");
  for (int m = 0; med && m < MS_RANK_METRICS; m++) cJSON_AddNumberToObject(med, metric_keys[m], (double)v->median_value[m]);
  if (v->median >= 0) cJSON_AddNumberToObject(med, "index", (double)v->median);
  else cJSON_AddNullToObject(med, "index");
  if (v->outlier < 0) {
    cJSON_AddNullToObject(ranks, "outlier");
  } else {
    cJSON *x = cJSON_AddObjectToObject(ranks, "outlier");
    cJSON_AddNumberToObject(x, "index", (double)v->outlier);
    cJSON_AddStringToObject(x, "by", metric_keys[v->metric]);
    cJSON_AddNumberToObject(x, "score", v->score);
  }
  if (pair && c) cJSON_AddItemToObject(ranks, "difference", ms_diff_json(pair, c));
  else cJSON_AddNullToObject(ranks, "difference");
  return root;
}
