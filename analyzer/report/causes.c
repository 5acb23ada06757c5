/* causes.c: what holds a site's memory, written out: the holders the Python package found at the
 * snapshot (chains of references from a root to a tensor) and the garbage collector's share of its
 * frees, under each leak candidate (text and JSON), and the collector's runs as a section of their
 * own with the sites only it frees: held by reference cycles (docs/guide.md, "What holds a leak";
 * docs/analysis-json.md, `holders`, `gc`), with the cycles the runs found where the process kept
 * them (MEMSNAP_GC_CYCLES: their objects' types and the attributes joining them, alike ones
 * grouped) under the sites they held.
 *
 * A kept autograd graph (kept_graphs.c) gets the chains of the sites it holds: those through the
 * autograd graph of a tensor that Python holds (the loss in a list: "global `eval_outputs` -> list[2]
 * -> tensor () float32 -> through its autograd graph (grad_fn ...) -> saved `self` of ..."), grouped
 * by what holds that tensor.
 *
 * A site's blocks often share one chain but for a list index or a dict key ("list[3]", "list[4]"):
 * chains are grouped by their text with every [...] read alike, the first one shown with the count
 * of blocks alike. Text from the snapshot is neutralised by the reader (read/holders.c).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "report.h"

#define SHOWN_CHAINS 3

/* The chain's text with every [...] emptied, for grouping: out holds it. */
static void chain_key(const char *text, char *out, size_t len) {
  size_t o = 0;
  bool inside = false;
  for (const char *p = text; *p && o + 1 < len; p++) {
    if (*p == '[') inside = true;
    else if (*p == ']') inside = false;
    else if (inside) continue;
    out[o++] = *p;
  }
  out[o] = 0;
}

typedef struct chain_group {
  const ms_holder_row *first;
  int blocks;
} chain_group;

/* The site's chains grouped (at most SHOWN_CHAINS groups, in the order found); how many groups. */
/* Counts row h under its chain's key among the ng groups so far (keys[k] group g[k]'s key), or
 * starts a group for it while there are fewer than SHOWN_CHAINS. */
static void add_to_group(char keys[][512], chain_group *g, int *ng, const char *chain, const ms_holder_row *h) {
  char key[512];
  chain_key(chain, key, sizeof key);
  int k = 0;
  while (k < *ng && strcmp(keys[k], key) != 0) k++;
  if (k < *ng) {
    g[k].blocks++;
  } else if (*ng < SHOWN_CHAINS) {
    snprintf(keys[*ng], 512, "%s", key);
    g[(*ng)++] = (chain_group){h, 1};
  }
}

static int group_chains(const ms_holder_row *h, size_t n, chain_group *g) {
  char keys[SHOWN_CHAINS][512];
  int ng = 0;
  for (size_t i = 0; i < n; i++) add_to_group(keys, g, &ng, h[i].holder, &h[i]);
  return ng;
}

/* ---- a kept autograd graph's holders -------------------------------------------------------- */

#define THROUGH_GRAPH " -> through its autograd graph"

/* What holds the tensor whose graph keeps a block: the chain before THROUGH_GRAPH (the whole chain
 * where it has none), into out. */
static void kept_by(const char *holder, char *out, size_t len) {
  const char *cut = strstr(holder, THROUGH_GRAPH);
  size_t n = cut ? (size_t)(cut - holder) : strlen(holder);
  if (n >= len) n = len - 1;
  memcpy(out, holder, n);
  out[n] = 0;
}

/* The chains of kept graph i's blocks (the sites it holds), grouped: those through a tensor's
 * autograd graph (root "autograd": the block saved for backward, held from C++) by what holds
 * that tensor, else any other found (the graph's own output held by a variable); at most
 * SHOWN_CHAINS groups, how many. */
static int graph_chains(const ms_analysis *a, size_t i, chain_group *g) {
  char keys[SHOWN_CHAINS][512], by[512];
  int ng = 0;
  for (int pass = 0; pass < 2 && ng == 0; pass++)
    for (size_t s = 0; s < a->nsites; s++) {
      if (a->sites[s].graph != (int32_t)i + 1) continue;
      const ms_holder_row *h;
      size_t n = ms_site_holders(a, (uint32_t)s, &h);
      for (size_t r = 0; r < n; r++) {
        bool through = strcmp(h[r].root, "autograd") == 0;
        if (pass == 0 ? !through : strcmp(h[r].root, "none") == 0) continue;
        kept_by(h[r].holder, by, sizeof by);
        add_to_group(keys, g, &ng, by, &h[r]);
      }
    }
  return ng;
}

bool ms_graph_kept_by(const ms_analysis *a, size_t i, char *out, size_t len) {
  chain_group g[SHOWN_CHAINS];
  if (len) *out = 0;
  if (!len || graph_chains(a, i, g) == 0) return false;
  kept_by(g[0].first->holder, out, len);
  return true;
}

void ms_report_causes_graph(const ms_analysis *a, size_t i, const char *indent, FILE *out) {
  chain_group g[SHOWN_CHAINS];
  int ng = graph_chains(a, i, g);
  for (int k = 0; k < ng; k++) {
    fprintf(out, "%s%s %s", indent, k ? "        " : "held by:", g[k].first->holder);
    if (g[k].blocks > 1) fprintf(out, " (%d blocks alike)", g[k].blocks);
    fprintf(out, "\n");
  }
}

/* ---- the cycles the collector's runs found (MEMSNAP_GC_CYCLES) ------------------------------- */

typedef struct cycle_group {
  const ms_gc_cycle *first;
  int64_t count, bytes, tensors;
} cycle_group;

/* The site's cycles grouped by their objects' types and the edges joining them (at most
 * SHOWN_CHAINS groups, the order found); how many groups. */
static int group_cycles(const ms_analysis *a, uint32_t site, cycle_group *g) {
  const ms_gc_cycle *cy;
  size_t n = ms_site_gc_cycles(a, site, &cy);
  int ng = 0;
  for (size_t i = 0; i < n; i++) {
    int k = 0;
    while (k < ng && (strcmp(g[k].first->row.types, cy[i].row.types) != 0 || strcmp(g[k].first->row.edges, cy[i].row.edges) != 0)) k++;
    if (k == ng) {
      if (ng == SHOWN_CHAINS) continue;
      g[ng++] = (cycle_group){&cy[i], 0, 0, 0};
    }
    g[k].count++;
    g[k].bytes += cy[i].row.tensor_bytes;
    g[k].tensors += cy[i].row.tensors;
  }
  return ng;
}

static void cycle_lines(const ms_analysis *a, uint32_t site, const char *indent, FILE *out) {
  cycle_group g[SHOWN_CHAINS];
  int ng = group_cycles(a, site, g);
  for (int k = 0; k < ng; k++) {
    char b1[32];
    ms_format_bytes(g[k].bytes, b1, sizeof b1);
    fprintf(out, "%s  %s %s: %s (%lld cycle%s, %lld CUDA tensor%s, %s)\n", indent, k ? "     " : "cycles:", g[k].first->row.types,
            g[k].first->row.edges, (long long)g[k].count, g[k].count == 1 ? "" : "s", (long long)g[k].tensors,
            g[k].tensors == 1 ? "" : "s", b1);
  }
}

static void json_cycles(cJSON *o, const ms_analysis *a, uint32_t site) {
  cycle_group g[SHOWN_CHAINS];
  int ng = group_cycles(a, site, g);
  cJSON *list = cJSON_AddArrayToObject(o, "cycles");
  for (int k = 0; list && k < ng; k++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "types", g[k].first->row.types);
    cJSON_AddStringToObject(e, "edges", g[k].first->row.edges);
    cJSON_AddNumberToObject(e, "objects", (double)g[k].first->row.objects);
    cJSON_AddNumberToObject(e, "cycles", (double)g[k].count);
    cJSON_AddNumberToObject(e, "tensors", (double)g[k].tensors);
    cJSON_AddNumberToObject(e, "tensor_bytes", (double)g[k].bytes);
    cJSON_AddNumberToObject(e, "generation", (double)g[k].first->row.generation);
    cJSON_AddItemToArray(list, e);
  }
}

/* "freed only by the garbage collector: N runs freed X", the cycles found, and the fix, for a
 * site held by cycles. */
static void cycles_line(const ms_analysis *a, uint32_t site, const char *indent, FILE *out) {
  const ms_site_gc *g = ms_site_gc_counts(a, site);
  char b1[32];
  fprintf(out, "%sheld by reference cycles: ", indent);
  if (g && g->gc_frees) {
    ms_format_bytes(g->gc_bytes, b1, sizeof b1);
    fprintf(out, "only the garbage collector freed it (%lld of its %lld frees, %s, in %lld runs)", (long long)g->gc_frees,
            (long long)g->frees, b1, (long long)g->runs);
  } else {
    fprintf(out, "its tensors are reachable only from objects that refer to each other");
  }
  fprintf(out, "\n");
  cycle_lines(a, site, indent, out);
  fprintf(out, "%s  fix: break the cycle where it is made (the line above: keep a weakref, or drop the reference at the "
               "step's end), or call gc.collect() every N steps\n",
          indent);
}

void ms_report_causes_site(const ms_analysis *a, uint32_t site, const char *indent, FILE *out) {
  const ms_holder_row *h;
  size_t n = ms_site_holders(a, site, &h);
  chain_group g[SHOWN_CHAINS];
  int ng = group_chains(h, n, g);
  for (int k = 0; k < ng; k++) {
    fprintf(out, "%s%s %s", indent, k ? "        " : "held by:", g[k].first->holder);
    if (g[k].blocks > 1) fprintf(out, " (%d blocks alike)", g[k].blocks);
    fprintf(out, "\n");
  }
  if (ms_site_cycles(a, site)) cycles_line(a, site, indent, out);
}

void ms_report_causes_text(const ms_analysis *a, const ms_report_options *o, FILE *out) {
  const ms_causes *c = a->causes;
  if (!c) return;
  char b1[32], t1[32], t2[32];
  if (c->walk.ms >= 0)
    fprintf(out, "\nholders: %lld blocks of the largest and growing sites walked at the snapshot in %lld ms%s\n",
            (long long)c->walk.blocks, (long long)c->walk.ms,
            c->walk.cut ? "; the time ran out before the rest (MEMSNAP_HOLDERS_TIME)" : "");
  if (c->runs_total == 0) return;
  ms_format_bytes(c->freed_bytes, b1, sizeof b1);
  fprintf(out, "\ngarbage collector\n  %lld runs recorded; %lld freed device memory (%s in all)\n", (long long)c->runs_total,
          (long long)c->runs_freeing, b1);
  int shown = 0;
  for (size_t i = 0; i < a->nsites && shown < 5; i++) {
    const ms_site_gc *g = ms_site_gc_counts(a, (uint32_t)i);
    if (!g || !g->gc_frees || !ms_site_cycles(a, (uint32_t)i)) continue;
    if (!shown++) fprintf(out, "  held by reference cycles (sites whose memory only the collector freed)\n");
    ms_format_bytes(g->gc_bytes, b1, sizeof b1);
    fprintf(out, "  %d. %s freed by %lld run%s", shown, b1, (long long)g->runs, g->runs == 1 ? "" : "s");
    ms_format_ns(g->first_run_ns, t1, sizeof t1);
    ms_format_ns(g->last_run_ns, t2, sizeof t2);
    if (g->runs > 1) fprintf(out, ", the first at %s, the last at %s", t1, t2);
    else fprintf(out, " at %s", t1);
    ms_format_bytes(a->sites[i].end_bytes, b1, sizeof b1);
    fprintf(out, "; %s live at the snapshot\n", b1);
    ms_print_stack(a->snap, a->sites[i].stack_id, ms_site_note(a, &a->sites[i]), o, "       ", out);
    cycles_line(a, (uint32_t)i, "     ", out);
  }
}

/* ---- JSON -------------------------------------------------------------------------------- */

void ms_json_causes_site(cJSON *o, const ms_analysis *a, uint32_t site) {
  const ms_holder_row *h;
  size_t n = ms_site_holders(a, site, &h);
  chain_group g[SHOWN_CHAINS];
  int ng = group_chains(h, n, g);
  cJSON *list = cJSON_AddArrayToObject(o, "holders");
  for (int k = 0; list && k < ng; k++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "root", g[k].first->root);
    cJSON_AddStringToObject(e, "holder", g[k].first->holder);
    cJSON_AddNumberToObject(e, "blocks", g[k].blocks);
    cJSON_AddItemToArray(list, e);
  }
  cJSON_AddBoolToObject(o, "reference_cycles", ms_site_cycles(a, site));
  json_cycles(o, a, site);
  const ms_site_gc *gc = ms_site_gc_counts(a, site);
  cJSON *f = cJSON_AddObjectToObject(o, "gc_frees");
  if (f) {
    cJSON_AddNumberToObject(f, "frees", gc ? (double)gc->frees : 0);
    cJSON_AddNumberToObject(f, "by_collector", gc ? (double)gc->gc_frees : 0);
    cJSON_AddNumberToObject(f, "bytes", gc ? (double)gc->gc_bytes : 0);
    cJSON_AddNumberToObject(f, "runs", gc ? (double)gc->runs : 0);
  }
}

void ms_json_causes_graph(cJSON *o, const ms_analysis *a, size_t i) {
  chain_group g[SHOWN_CHAINS];
  int ng = graph_chains(a, i, g);
  cJSON *list = cJSON_AddArrayToObject(o, "holders");
  for (int k = 0; list && k < ng; k++) {
    char by[512];
    cJSON *e = cJSON_CreateObject();
    kept_by(g[k].first->holder, by, sizeof by);
    cJSON_AddStringToObject(e, "root", g[k].first->root);
    cJSON_AddStringToObject(e, "holder", g[k].first->holder);
    cJSON_AddStringToObject(e, "kept_by", by);
    cJSON_AddNumberToObject(e, "blocks", g[k].blocks);
    cJSON_AddItemToArray(list, e);
  }
}

void ms_json_causes(cJSON *root, const ms_analysis *a, void (*site_keys)(cJSON *o, const ms_analysis *a, uint32_t site)) {
  const ms_causes *c = a->causes;
  cJSON *w = cJSON_AddObjectToObject(root, "holders_walk");
  if (w) {
    bool ran = c && c->walk.ms >= 0;
    if (ran) cJSON_AddNumberToObject(w, "ms", (double)c->walk.ms);
    else cJSON_AddNullToObject(w, "ms");
    cJSON_AddNumberToObject(w, "blocks", ran ? (double)c->walk.blocks : 0);
    cJSON_AddBoolToObject(w, "cut", ran && c->walk.cut);
  }
  cJSON *g = cJSON_AddObjectToObject(root, "gc");
  if (!g) return;
  cJSON_AddNumberToObject(g, "runs", c ? (double)c->runs_total : 0);
  cJSON_AddNumberToObject(g, "runs_freeing", c ? (double)c->runs_freeing : 0);
  cJSON_AddNumberToObject(g, "freed_bytes", c ? (double)c->freed_bytes : 0);
  cJSON_AddNumberToObject(g, "cycles_recorded", c ? (double)(c->ncycles + c->cycles_unlinked) : 0);
  cJSON_AddNumberToObject(g, "cycles_unlinked", c ? (double)c->cycles_unlinked : 0);
  cJSON *runs = cJSON_AddArrayToObject(g, "freeing_runs");
  for (size_t i = 0; runs && c && i < c->nruns; i++) {
    const ms_gc_run *r = &c->runs[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "start_ns", (double)r->start_ns);
    cJSON_AddNumberToObject(e, "end_ns", (double)r->end_ns);
    cJSON_AddNumberToObject(e, "generation", r->generation);
    cJSON_AddNumberToObject(e, "collected", (double)r->collected);
    cJSON_AddNumberToObject(e, "freed_bytes", (double)r->freed_bytes);
    cJSON_AddNumberToObject(e, "freed_blocks", (double)r->freed_blocks);
    cJSON_AddItemToArray(runs, e);
  }
  cJSON *sites = cJSON_AddArrayToObject(g, "cycle_sites");
  for (size_t i = 0; sites && c && i < a->nsites; i++) {
    const ms_site_gc *s = ms_site_gc_counts(a, (uint32_t)i);
    if (!s || !s->gc_frees || !ms_site_cycles(a, (uint32_t)i)) continue;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "freed_bytes", (double)s->gc_bytes);
    cJSON_AddNumberToObject(e, "runs", (double)s->runs);
    cJSON_AddNumberToObject(e, "end_bytes", (double)a->sites[i].end_bytes);
    json_cycles(e, a, (uint32_t)i);
    if (site_keys) site_keys(e, a, (uint32_t)i);
    cJSON_AddItemToArray(sites, e);
  }
}
