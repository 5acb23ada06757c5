/* predict.c: `memsnap predict A.db=SIZE B.db=SIZE [C.db=SIZE] [--at N]... [--capacity SIZE |
 * --device CARD] [--set KEY=VALUE]... [--sweep] [--jobs N] [--json]`: a program's peaks at sizes
 * it was not run at (batch, sequence length), from runs recorded at two or three sizes
 * (replay/align.c aligns them, replay/predict.c fits each allocation's request and replays the
 * history synthesised at each size), under the recorded settings or each setting of the replay's
 * sweep; and, for a card, the largest size that fits under each setting. docs/predict.md.
 *
 * Its options are memsnap replay's (--set, --capacity, --device, --sweep, --jobs, --json), read
 * the same way; a prediction that cannot be made (runs that do not align, a history that starts
 * late) is an error (exit 1) that says why; arguments that cannot mean anything (one run, a size
 * given twice, sizes that are not whole numbers) are usage errors (exit 2).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "replay/replay.h"
#include "report/report.h"

#define MAX_AT 16 /* --at options */

typedef struct predict_args {
  ms_predict_input runs[MS_PREDICT_MAX_RUNS + 1];
  int nruns;
  int64_t at[MAX_AT];
  int nat;
  ms_replay_config base; /* --set, and --capacity/--device as its capacity */
  const char *card_option;
  bool json, sweep;
  int jobs;
} predict_args;

/* A size as the user writes it: a whole number from 1 to MS_PREDICT_MAX_SIZE. 0 or -1. */
static int parse_size(const char *text, int64_t *out) {
  int64_t v = 0;
  if (!*text) return -1;
  for (const char *c = text; *c; c++) {
    if (*c < '0' || *c > '9') return -1;
    v = v * 10 + (*c - '0');
    if (v > MS_PREDICT_MAX_SIZE) return -1;
  }
  if (v < 1) return -1;
  *out = v;
  return 0;
}

static int cmp_size(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Reads argv into *a. 0, or 2 after a usage error (printed). */
static int parse_args(int argc, char **argv, predict_args *a) {
  char err[512];
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--json")) a->json = true;
    else if (!strcmp(arg, "--sweep")) a->sweep = true;
    else if (!strcmp(arg, "--set") && i + 1 < argc) {
      if (ms_replay_config_apply(&a->base, argv[++i], true, err, sizeof err) != 0)
        return ms_usage_error(&ms_predict_command, "--set: %s", err);
    } else if ((!strcmp(arg, "--capacity") || !strcmp(arg, "--device")) && i + 1 < argc) {
      if (ms_capacity_option(&ms_predict_command, arg, argv[++i], &a->base.capacity, &a->card_option) != 0) return 2;
    } else if (!strcmp(arg, "--jobs") && i + 1 < argc) {
      a->jobs = atoi(argv[++i]);
      if (a->jobs < 1 || a->jobs > 256) return ms_usage_error(&ms_predict_command, "--jobs takes 1 to 256");
    } else if (!strcmp(arg, "--at") && i + 1 < argc) {
      int64_t n;
      if (parse_size(argv[++i], &n) != 0)
        return ms_usage_error(&ms_predict_command, "--at: '%.64s' is not a whole number from 1 to %d", argv[i], MS_PREDICT_MAX_SIZE);
      bool seen = false;
      for (int k = 0; k < a->nat; k++) seen |= a->at[k] == n;
      if (seen) continue;
      if (a->nat == MAX_AT) return ms_usage_error(&ms_predict_command, "at most %d sizes (--at)", MAX_AT);
      a->at[a->nat++] = n;
    } else if (arg[0] == '-' && arg[1]) {
      return ms_unknown_option(&ms_predict_command, arg, i + 1 == argc);
    } else {
      const char *eq = strrchr(arg, '=');
      if (!eq || eq == arg)
        return ms_usage_error(&ms_predict_command, "'%.200s': give each run with the size it was recorded at, as run.db=8", arg);
      if (a->nruns == MS_PREDICT_MAX_RUNS)
        return ms_usage_error(&ms_predict_command, "at most %d runs (a fourth: '%.200s')", MS_PREDICT_MAX_RUNS, arg);
      ms_predict_input *r = &a->runs[a->nruns];
      if (parse_size(eq + 1, &r->at) != 0)
        return ms_usage_error(&ms_predict_command, "'%.200s': the size '%.64s' is not a whole number from 1 to %d", arg,
                              eq + 1, MS_PREDICT_MAX_SIZE);
      char *path = strndup(arg, (size_t)(eq - arg));
      if (!path) return ms_usage_error(&ms_predict_command, "out of memory");
      r->path = path;
      a->nruns++;
    }
  }
  if (a->nruns == 0) return ms_usage_error(&ms_predict_command, "no runs given");
  if (a->nruns == 1)
    return ms_usage_error(&ms_predict_command, "one run ('%.200s') cannot tell how memory grows with the size: give the "
                          "program recorded at two sizes (or three), as small.db=4 large.db=8", a->runs[0].path);
  for (int x = 0; x < a->nruns; x++)
    for (int y = x + 1; y < a->nruns; y++) {
      struct stat sx, sy;
      if (a->runs[x].at == a->runs[y].at)
        return ms_usage_error(&ms_predict_command, "'%.200s' and '%.200s' are both at size %lld: give runs at different sizes",
                              a->runs[x].path, a->runs[y].path, (long long)a->runs[x].at);
      if (stat(a->runs[x].path, &sx) == 0 && stat(a->runs[y].path, &sy) == 0 && sx.st_dev == sy.st_dev && sx.st_ino == sy.st_ino)
        return ms_usage_error(&ms_predict_command, "'%.200s' and '%.200s' are the same file: give one run at each size",
                              a->runs[x].path, a->runs[y].path);
    }
  if (a->nat == 0 && !a->card_option)
    return ms_usage_error(&ms_predict_command, "nothing to predict: give --at N (a size) or --capacity SIZE or --device "
                          "CARD (the largest size that fits)");
  qsort(a->at, (size_t)a->nat, sizeof a->at[0], cmp_size);
  return 0;
}

/* ---- the answer, as text ------------------------------------------------------------------ */

/* The largest peaks of a result's devices. */
static int64_t peak_allocated(const ms_replay_result *r) {
  int64_t m = 0;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].peak_allocated > m) m = r->dev[i].peak_allocated;
  return m;
}

static bool fits(const ms_replay_result *r) {
  return !r->failed && !r->over_capacity && !ms_replay_sum(r, offsetof(ms_replay_device, failed_allocs));
}

static double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : 100.0; }

static void print_model(const ms_predict_info *in, uint64_t card, bool card_given, const char *recorded) {
  char b[32], c[32];
  printf("prediction from %d runs of one program: each allocation's request %s in the size\n", in->nruns,
         in->quadratic_fit ? "a polynomial of degree 2 or less" : "linear");
  for (int r = 0; r < in->nruns; r++) {
    const ms_predict_run *run = &in->run[r];
    ms_format_bytes(run->bytes, b, sizeof b);
    printf("  %-24s at %-6lld %lld allocations (%s in all), %.1f%% of them and %.1f%% of their bytes aligned%s\n", run->shown,
           (long long)run->at, (long long)run->allocations, b, pct(run->aligned_allocs, run->allocations),
           pct(run->aligned_bytes, run->bytes), r == in->base ? "; the history synthesised is this run's" : "");
  }
  printf("  aligned: %.1f%% of the runs' bytes allocated, %.1f%% of their frees; %lld place%s where a run differs\n",
         100 * in->aligned_share, 100 * in->aligned_frees_share, (long long)in->differences, in->differences == 1 ? "" : "s");
  const ms_predict_run *base = &in->run[in->base];
  printf("  laws of its %lld allocations: %lld linear (%.1f%% of its bytes)", (long long)base->allocations,
         (long long)in->linear, pct(in->linear_bytes, base->bytes));
  if (in->quadratic_fit) printf(", %lld quadratic (%.1f%%)", (long long)in->quadratic, pct(in->quadratic_bytes, base->bytes));
  printf(", %lld constant (%.1f%%), %lld not aligned, kept as recorded (%.1f%%)\n", (long long)in->constant,
         pct(in->constant_bytes, base->bytes), (long long)in->unaligned, pct(in->unaligned_bytes, base->bytes));
  ms_format_bytes((int64_t)card, c, sizeof c);
  printf("  card: %s per device (%s); recorded settings: %s\n", c, card_given ? "as given" : "recorded", recorded);
}

static void print_row(const ms_replay_result *r, const char *lead, const char *vs, bool recorded) {
  char a[32], b[32], frag[32], conf[1200], vs_cell[16] = "";
  int64_t pk = ms_replay_worst_peak(r), at_peak = 0;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].peak_reserved == pk) at_peak = r->dev[i].allocated_at_peak;
  ms_format_bytes(peak_allocated(r), a, sizeof a);
  ms_format_bytes(pk, b, sizeof b);
  ms_format_bytes(pk - at_peak, frag, sizeof frag);
  ms_replay_describe_config(&r->config, conf, sizeof conf);
  if (vs) snprintf(vs_cell, sizeof vs_cell, "  %8s", vs);
  if (r->failed) {
    printf("%s  %-70s  %s\n", lead, "failed (below)", conf);
    return;
  }
  printf("%s  %14s  %14s%s  %13s  %10lld  %-4s  %s%s\n", lead, a, b, vs_cell, frag,
         (long long)ms_replay_sum(r, offsetof(ms_replay_device, device_allocs)), fits(r) ? "yes" : "no", conf,
         recorded && vs ? "  [recorded]" : "");
}

static void print_predictions(const ms_sweep *sw, const int64_t *ats, int nat, int nconf) {
  bool sweep = nconf > 1, over = false;
  if (!sweep)
    printf("\n%6s  %14s  %14s  %13s  %10s  %-4s  %s\n", "at", "peak allocated", "peak reserved", "fragmentation",
           "cudaMalloc", "fits", "PYTORCH_CUDA_ALLOC_CONF");
  for (int a = 0; a < nat; a++) {
    const ms_replay_result *rows = &sw->results[a * nconf];
    int order[MS_SWEEP_GRID_ROWS];
    ms_replay_rank(rows, nconf, order);
    int64_t rec = ms_replay_worst_peak(&rows[0]);
    if (sweep)
      printf("\nat %lld: %d settings, best first\n%6s  %14s  %14s  %8s  %13s  %10s  %-4s  %s\n", (long long)ats[a], nconf,
             "rank", "peak allocated", "peak reserved", "vs rec.", "fragmentation", "cudaMalloc", "fits",
             "PYTORCH_CUDA_ALLOC_CONF");
    for (int k = 0; k < nconf; k++) {
      const ms_replay_result *r = &rows[order[k]];
      char lead[32], vs[16] = "-";
      if (sweep) snprintf(lead, sizeof lead, "%6d", k + 1);
      else snprintf(lead, sizeof lead, "%6lld", (long long)ats[a]);
      if (rec > 0 && order[k] != 0) snprintf(vs, sizeof vs, "%+.1f%%", 100.0 * (double)(ms_replay_worst_peak(r) - rec) / (double)rec);
      print_row(r, lead, sweep ? vs : NULL, order[k] == 0);
      over |= r->over_capacity;
    }
  }
  if (over) printf("  (fits no: out of memory on the card; its figures are what it needs, from a replay without a limit)\n");
}

static void print_best(const ms_replay_config *c) {
  char line[1024];
  ms_replay_conf_line(c, line, sizeof line);
  printf("PYTORCH_CUDA_ALLOC_CONF=%s", line[0] ? line : "(unset: the defaults)");
  const char *fraction = ms_replay_config_get(c, "memory_fraction");
  if (fraction) printf(" with torch.cuda.set_per_process_memory_fraction(%s)", fraction);
}

static void print_capacity(const ms_sweep *sw, uint64_t capacity) {
  char cap[32];
  ms_format_bytes((int64_t)capacity, cap, sizeof cap);
  printf("\nlargest size that fits in %s per device (bisection over synthesised histories), the most first\n", cap);
  printf("%6s  %8s  %14s  %14s  %s\n", "rank", "at", "peak allocated", "peak reserved", "PYTORCH_CUDA_ALLOC_CONF");
  for (int k = 0; k < sw->nrows; k++) {
    const ms_replay_result *r = &sw->results[sw->order[k]];
    char a[32], b[32], conf[1200], at[24];
    ms_replay_describe_config(&r->config, conf, sizeof conf);
    if (r->failed) {
      printf("%6d  %-40s  %s\n", k + 1, "failed (below)", conf);
      continue;
    }
    ms_format_bytes(peak_allocated(r), a, sizeof a);
    ms_format_bytes(ms_replay_worst_peak(r), b, sizeof b);
    snprintf(at, sizeof at, "%lld", (long long)r->at);
    printf("%6d  %8s  %14s  %14s  %s%s\n", k + 1, r->at ? at : "none", r->at ? a : "-", r->at ? b : "-", conf,
           sw->order[k] == 0 && sw->nrows > 1 ? "  [recorded]" : "");
  }
  const ms_replay_result *best = &sw->results[sw->order[0]];
  if (best->failed || best->at == 0) {
    printf("\nnothing fits: not even size 1 under any setting on this card\n");
    return;
  }
  printf("\nbest: %lld with ", (long long)best->at);
  print_best(&best->config);
  printf("\n");
}

/* Every note once: the model's, the sizes far from the recorded ones, then the replays'. */
static void collect_notes(const ms_predict *m, const ms_sweep *const *sweeps, int n, void (*put)(const char *note, void *arg),
                          void *arg) {
  const ms_predict_info *in = ms_predict_info_of(m);
  const char *seen[64];
  int nseen = 0;
  for (int i = 0; i < in->nnotes; i++) put(in->notes[i], arg);
  int64_t sizes[256];
  int nsizes = 0;
  for (int w = 0; w < n; w++)
    for (int i = 0; sweeps[w] && i < sweeps[w]->nrows && nsizes < 256; i++) sizes[nsizes++] = sweeps[w]->results[i].at;
  char far[1024];
  ms_predict_far_note(m, sizes, nsizes, far, sizeof far);
  if (far[0]) put(far, arg);
  for (int w = 0; w < n; w++)
    for (int i = 0; sweeps[w] && i < sweeps[w]->nrows; i++)
      for (int k = 0; k < sweeps[w]->results[i].nnotes; k++) {
        const char *note = sweeps[w]->results[i].notes[k];
        bool dup = false;
        for (int j = 0; j < nseen && !dup; j++) dup = !strcmp(seen[j], note);
        if (dup) continue;
        if (nseen < 64) seen[nseen++] = note;
        put(note, arg);
      }
}

static void print_note(const char *note, void *arg) {
  (void)arg;
  printf("note: %s\n", note);
}

/* ---- the answer, as JSON ------------------------------------------------------------------ */

static void add_setting(cJSON *o, const ms_replay_config *c, bool recorded) {
  char line[1024];
  ms_replay_conf_line(c, line, sizeof line);
  cJSON_AddStringToObject(o, "pytorch_cuda_alloc_conf", line);
  const char *fraction = ms_replay_config_get(c, "memory_fraction");
  cJSON_AddNumberToObject(o, "memory_fraction", fraction ? strtod(fraction, NULL) : 1.0);
  cJSON_AddBoolToObject(o, "recorded_settings", recorded);
}

static cJSON *json_model(const ms_predict_info *in, uint64_t card, const char *recorded) { /* recorded: the conf line */
  cJSON *o = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(o, "runs");
  for (int r = 0; r < in->nruns; r++) {
    const ms_predict_run *run = &in->run[r];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToArray(runs, j);
    cJSON_AddStringToObject(j, "path", run->shown);
    cJSON_AddNumberToObject(j, "at", (double)run->at);
    cJSON_AddBoolToObject(j, "base", r == in->base);
    cJSON_AddNumberToObject(j, "events", (double)run->events);
    cJSON_AddNumberToObject(j, "allocations", (double)run->allocations);
    cJSON_AddNumberToObject(j, "frees", (double)run->frees);
    cJSON_AddNumberToObject(j, "bytes_allocated", (double)run->bytes);
    cJSON_AddNumberToObject(j, "aligned_allocations", (double)run->aligned_allocs);
    cJSON_AddNumberToObject(j, "aligned_frees", (double)run->aligned_frees);
    cJSON_AddNumberToObject(j, "aligned_bytes", (double)run->aligned_bytes);
    cJSON_AddNumberToObject(j, "ooms", (double)run->ooms);
  }
  cJSON_AddStringToObject(o, "fit", in->quadratic_fit ? "quadratic" : "linear");
  cJSON_AddNumberToObject(o, "aligned_share", in->aligned_share);
  cJSON_AddNumberToObject(o, "aligned_frees_share", in->aligned_frees_share);
  cJSON_AddNumberToObject(o, "differences", (double)in->differences);
  cJSON *laws = cJSON_AddObjectToObject(o, "laws");
  const char *names[] = {"constant", "linear", "quadratic", "unaligned"};
  const int64_t counts[] = {in->constant, in->linear, in->quadratic, in->unaligned};
  const int64_t bytes[] = {in->constant_bytes, in->linear_bytes, in->quadratic_bytes, in->unaligned_bytes};
  for (int k = 0; k < 4; k++) {
    cJSON *l = cJSON_AddObjectToObject(laws, names[k]);
    cJSON_AddNumberToObject(l, "allocations", (double)counts[k]);
    cJSON_AddNumberToObject(l, "bytes", (double)bytes[k]);
  }
  cJSON_AddNumberToObject(laws, "shrinking", (double)in->shrinking);
  cJSON_AddStringToObject(o, "recorded_pytorch_cuda_alloc_conf", recorded);
  cJSON_AddNumberToObject(o, "capacity_bytes", (double)card);
  return o;
}

static cJSON *json_prediction(const ms_replay_result *r, bool recorded) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "at", (double)r->at);
  add_setting(j, &r->config, recorded);
  int64_t pk = ms_replay_worst_peak(r), at_peak = 0;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].peak_reserved == pk) at_peak = r->dev[i].allocated_at_peak;
  cJSON_AddNumberToObject(j, "peak_allocated_bytes", (double)peak_allocated(r));
  cJSON_AddNumberToObject(j, "peak_reserved_bytes", (double)pk);
  cJSON_AddNumberToObject(j, "fragmentation_bytes", (double)(pk - at_peak));
  cJSON_AddNumberToObject(j, "device_allocs", (double)ms_replay_sum(r, offsetof(ms_replay_device, device_allocs)));
  int64_t external = 0;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].external_peak > external) external = r->dev[i].external_peak;
  cJSON_AddNumberToObject(j, "external_bytes", (double)external);
  cJSON_AddBoolToObject(j, "fits", fits(r));
  cJSON *devs = cJSON_AddArrayToObject(j, "devices");
  for (int i = 0; i < r->ndevices; i++) {
    if (!r->dev[i].used) continue;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToArray(devs, d);
    cJSON_AddNumberToObject(d, "device", i);
    cJSON_AddNumberToObject(d, "peak_allocated_bytes", (double)r->dev[i].peak_allocated);
    cJSON_AddNumberToObject(d, "peak_reserved_bytes", (double)r->dev[i].peak_reserved);
  }
  if (r->failed) cJSON_AddStringToObject(j, "error", r->error);
  else cJSON_AddNullToObject(j, "error");
  return j;
}

static void json_note(const char *note, void *arg) { cJSON_AddItemToArray((cJSON *)arg, cJSON_CreateString(note)); }

/* ---- the command -------------------------------------------------------------------------- */

/* Errors of the rows that failed, on stderr: 1 when any did, else 0. */
static int row_errors(const ms_sweep *sw) {
  int rc = 0;
  for (int i = 0; sw && i < sw->nrows; i++)
    if (sw->results[i].failed) {
      char conf[1200];
      ms_replay_describe_config(&sw->results[i].config, conf, sizeof conf);
      fprintf(stderr, "error: predict: the replay at %lld under %s: %s\n", (long long)sw->results[i].at, conf,
              sw->results[i].error);
      rc = 1;
    }
  return rc;
}

static int cmd_predict(int argc, char **argv) {
  predict_args a;
  memset(&a, 0, sizeof a);
  ms_predict *m = NULL;
  ms_sweep pred, fit;
  memset(&pred, 0, sizeof pred);
  memset(&fit, 0, sizeof fit);
  bool have_pred = false, have_fit = false;
  char err[2048];
  ms_replay_config configs[MS_SWEEP_GRID_ROWS];
  int nconf = 1, rc = parse_args(argc, argv, &a);
  if (rc != 0) goto cleanup;
  bool progress = isatty(2);
  m = ms_predict_new(a.runs, a.nruns, &(ms_predict_options){.progress = progress}, err, sizeof err);
  if (!m) {
    fprintf(stderr, "error: %s\n", err);
    rc = 1;
    goto cleanup;
  }
  const ms_predict_info *in = ms_predict_info_of(m);
  ms_replay_plan *p = ms_predict_plan(m);
  ms_replay_config recorded, check;
  ms_replay_recorded_config(p, &recorded);
  check = recorded;
  for (int i = 0; i < a.base.n; i++) ms_replay_config_set(&check, a.base.set[i].key, a.base.set[i].value, err, sizeof err);
  if (ms_replay_check_config(p, &check, err, sizeof err) != 0) {
    rc = ms_usage_error(&ms_predict_command, "%s", err);
    goto cleanup;
  }
  if (a.sweep) {
    nconf = ms_replay_grid(p, &a.base, configs, err, sizeof err);
    if (nconf < 0) {
      fprintf(stderr, "error: predict: %s\n", err);
      rc = 1;
      goto cleanup;
    }
  } else {
    configs[0] = check;
    configs[0].capacity = a.base.capacity;
  }
  ms_rows_options o = {a.jobs, 0, progress ? "predict: replays" : NULL};
  if (a.nat && ms_predict_at(m, a.at, a.nat, configs, nconf, &o, &pred, err, sizeof err) != 0) {
    fprintf(stderr, "error: predict: %s\n", err);
    rc = 1;
    goto cleanup;
  }
  have_pred = a.nat > 0;
  o.progress = progress ? "predict: settings searched" : NULL;
  if (a.card_option && ms_predict_capacity(m, configs, nconf, &o, &fit, err, sizeof err) != 0) {
    fprintf(stderr, "error: predict: %s\n", err);
    rc = 1;
    goto cleanup;
  }
  have_fit = a.card_option != NULL;
  uint64_t card = a.base.capacity ? a.base.capacity : ms_replay_recorded_capacity(p);
  char rec[1200];
  ms_replay_describe_config(&recorded, rec, sizeof rec);
  const ms_sweep *sweeps[2] = {have_pred ? &pred : NULL, have_fit ? &fit : NULL};
  if (a.json) {
    char line[1024];
    ms_replay_conf_line(&recorded, line, sizeof line);
    cJSON *o_json = json_model(in, card, line), *list = cJSON_AddArrayToObject(o_json, "predictions");
    for (int at = 0; have_pred && at < a.nat; at++) {
      int order[MS_SWEEP_GRID_ROWS];
      ms_replay_rank(&pred.results[at * nconf], nconf, order);
      for (int k = 0; k < nconf; k++)
        cJSON_AddItemToArray(list, json_prediction(&pred.results[at * nconf + order[k]], order[k] == 0));
    }
    cJSON *fits_list = cJSON_AddArrayToObject(o_json, "largest_that_fits");
    for (int k = 0; have_fit && k < fit.nrows; k++) {
      const ms_replay_result *r = &fit.results[fit.order[k]];
      cJSON *j = cJSON_CreateObject();
      cJSON_AddItemToArray(fits_list, j);
      add_setting(j, &r->config, fit.order[k] == 0);
      if (r->at && !r->failed) {
        cJSON_AddNumberToObject(j, "at", (double)r->at);
        cJSON_AddNumberToObject(j, "peak_allocated_bytes", (double)peak_allocated(r));
        cJSON_AddNumberToObject(j, "peak_reserved_bytes", (double)ms_replay_worst_peak(r));
      } else {
        cJSON_AddNullToObject(j, "at");
      }
      if (r->failed) cJSON_AddStringToObject(j, "error", r->error);
    }
    if (have_fit) {
      cJSON_AddNumberToObject(o_json, "fit_capacity_bytes", (double)a.base.capacity);
      const ms_replay_result *best = &fit.results[fit.order[0]];
      if (best->at && !best->failed) {
        cJSON *b = cJSON_AddObjectToObject(o_json, "best_fit");
        add_setting(b, &best->config, fit.order[0] == 0);
        cJSON_AddNumberToObject(b, "at", (double)best->at);
      } else {
        cJSON_AddNullToObject(o_json, "best_fit");
      }
    }
    cJSON *notes = cJSON_AddArrayToObject(o_json, "notes");
    collect_notes(m, sweeps, 2, json_note, notes);
    char *text = cJSON_PrintUnformatted(o_json);
    cJSON_Delete(o_json);
    if (!text) {
      fprintf(stderr, "error: predict: out of memory writing JSON\n");
      rc = 1;
      goto cleanup;
    }
    printf("%s\n", text);
    free(text);
  } else {
    print_model(in, card, a.base.capacity != 0, rec);
    if (have_pred) print_predictions(&pred, a.at, a.nat, nconf);
    if (have_fit) print_capacity(&fit, a.base.capacity);
    collect_notes(m, sweeps, 2, print_note, NULL);
  }
  rc = row_errors(have_pred ? &pred : NULL) | row_errors(have_fit ? &fit : NULL);
  if (rc == 0) rc = ms_output_status();

cleanup:
  if (have_pred) ms_sweep_free(&pred);
  if (have_fit) ms_sweep_free(&fit);
  ms_predict_free(m);
  for (int i = 0; i < a.nruns; i++) free((char *)a.runs[i].path);
  return rc;
}

const ms_command ms_predict_command = {"predict", cmd_predict,
     "memsnap predict A.db=SIZE B.db=SIZE [C.db=SIZE] [--at N]... [--capacity SIZE | --device CARD]\n"
     "                [--set KEY=VALUE]... [--sweep [--jobs N]] [--json]\n"
     "                            peaks at sizes not run (batch, sequence length) from runs at two or\n"
     "                            three, and the largest size that fits a card (docs/predict.md)",
     "  A.db=SIZE           a run of the program recorded at SIZE (a whole number: the batch, the\n"
     "                      sequence length...); two runs at different sizes (three: laws of degree 2)\n"
     "  --at N              a size to predict peak allocated and reserved memory at (repeatable, 16)\n"
     "  --capacity SIZE     the card's memory (40G, 80GiB, 24000M): the predictions run on it, and the\n"
     "                      largest size that fits it is searched under each setting\n"
     "  --device CARD       the same with a card's memory by name: H100, H200, A100-80GB, A100-40GB,\n"
     "                      A10G, V100-32GB, V100-16GB, T4, RTX-4090, RTX-3090\n"
     "  --set KEY=VALUE     a setting over the recorded ones, as memsnap replay takes it (repeatable)\n"
     "  --sweep             every setting of memsnap replay's sweep (20), ranked at each size\n"
     "  --jobs N            worker processes (default: one per core)\n"
     "  --json              the answer as JSON (docs/predict.md)\n"
     "\n"
     "The runs must be the same program (the same steps and code path) at different sizes, recorded\n"
     "from its start (memsnap run does): their allocations are aligned by site and order, each\n"
     "aligned allocation's request is a law of the size (linear through two runs, degree 2 through\n"
     "three; the same in every run: constant), and the history at N, made from the run at the\n"
     "largest size, is replayed through memsnap's allocator on the simulated card.\n"
     "\n"
     "example: GPT-2 recorded at batch 4 and 8, on a 24 GiB card:\n"
     "  $ memsnap run -o b4.db -- python train.py --batch 4\n"
     "  $ memsnap run -o b8.db -- python train.py --batch 8\n"
     "  $ memsnap predict b4.db=4 b8.db=8 --at 16 --at 24\n"
     "  $ memsnap predict b4.db=4 b8.db=8 --capacity 24G --sweep\n",
     false};
