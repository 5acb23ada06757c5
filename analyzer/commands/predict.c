/* predict.c: `memsnap predict A.db=SIZE B.db=SIZE [C.db=SIZE] [--at N]... [--capacity SIZE |
 * --device CARD] [--set KEY=VALUE]... [--sweep] [--jobs N] [--json | --html OUT]`: a program's peaks at sizes
 * it was not run at (batch, sequence length), from runs recorded at two or three sizes
 * (replay/align.c aligns them, replay/predict.c fits each allocation's request and replays the
 * history synthesised at each size), under the recorded settings or each setting of the replay's
 * sweep; and, for a card, the largest size that fits under each setting. docs/predict.md.
 *
 * With --checkpoint, --optimizer (replay/whatif.c) the history is synthesised as if the program had
 * changed, from one run at its own size or from the laws; --advise (replay/advise.c) tries the
 * changes that make a size fit a card. --shard (replay/shard.c) synthesises rank 0's history under
 * data parallelism at each N given, or at N = 1, 2, 4, ... until one fits the card
 * (replay/fewest_ranks.c), and the largest size that fits is searched for each strategy and N.
 * --html writes the answer as a page (report/page_predict.c): the JSON's answer above the
 * recorded run's memory over time and each predicted history's, replayed once more in this
 * process to draw it.
 *
 * Its options are memsnap replay's (--set, --capacity, --device, --sweep, --jobs, --json), read
 * the same way; a prediction that cannot be made (runs that do not align, a history that starts
 * late) is an error (exit 1) that says why; arguments that cannot mean anything (one run without a
 * change to the program, a size given twice, sizes that are not whole numbers) are usage errors
 * (exit 2).
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
#define MAX_SHARDS 16 /* strategies and Ns (--shard) */
#define MAX_FIT_ROWS 64 /* searches for the largest size that fits: changes (strategies and Ns) times settings */

typedef struct predict_args {
  ms_predict_input runs[MS_PREDICT_MAX_RUNS + 1];
  int nruns;
  int64_t at[MAX_AT];
  int nat;
  ms_replay_config base; /* --set, and --capacity/--device as its capacity */
  const char *card_option;
  const char *html; /* --html OUT.html */
  bool json, sweep;
  int jobs;
  /* a change to the program */
  const char *checkpoint[MS_WHATIF_PATTERNS]; /* pieces of --checkpoint's lists (owned by lists[]) */
  int ncheckpoint;
  char *lists[MS_WHATIF_PATTERNS];
  int nlists;
  ms_change change;
  bool advise;
  bool one_run; /* one run: its own size only */
  bool size_given; /* one run: given with its size (run.db=8) */
  /* sharding (--shard STRATEGY:N,...) */
  ms_change shard[MAX_SHARDS]; /* strategy and ranks */
  int nshards;
  const char *units[MS_WHATIF_PATTERNS]; /* pieces of --units' lists (owned by lists[]) */
  int nunits;
  ms_shard_options so;
  /* found while answering (cmd_predict) */
  ms_fewest found[MS_SHARDS]; /* the searches of the strategies given without N, in the order given */
  int nfound;
  int nfit;                  /* the changes the largest size was searched with (fit's groups of rows) */
  char fit_note[512];        /* those left out past MAX_FIT_ROWS ("": none) */
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

/* An element's bytes for a dtype's name (fp32, bf16, fp16, and PyTorch's names): 0 unknown. */
static int dtype_bytes(const char *name) {
  static const struct { const char *name; int bytes; } d[] = {
      {"fp32", 4}, {"float32", 4}, {"float", 4}, {"torch.float32", 4}, {"bf16", 2}, {"bfloat16", 2},
      {"torch.bfloat16", 2}, {"fp16", 2}, {"float16", 2}, {"half", 2}, {"torch.float16", 2}};
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
    if (!strcmp(name, d[i].name)) return d[i].bytes;
  return 0;
}

/* Adds strategy (MS_SHARD_*) at n ranks (0: the fewest that fit, searched) to a->shard, once.
 * 0, or 2 after a usage error (printed). */
static int add_shard(predict_args *a, int32_t strategy, int64_t n) {
  for (int k = 0; k < a->nshards; k++)
    if (a->shard[k].strategy == strategy && a->shard[k].ranks == n) return 0;
  if (a->nshards == MAX_SHARDS) return ms_usage_error(&ms_predict_command, "at most %d strategies and Ns (--shard)", MAX_SHARDS);
  a->shard[a->nshards].strategy = strategy, a->shard[a->nshards++].ranks = (int32_t)n;
  return 0;
}

/* --shard's value into a->shard: STRATEGY:N, a list of Ns (fsdp2:2,4,8) or of both (fsdp2:4,ddp:2);
 * a strategy without N or with N `auto` (fsdp2, fsdp2:auto) has its N searched (ranks 0); `all`
 * is each strategy. 0, or 2 after a usage error (printed). */
static int parse_shard(const char *text, predict_args *a) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", text);
  int32_t strategy = -1; /* the strategy the Ns that follow are of (MS_SHARDS: all of them) */
  for (char *save = NULL, *piece = strtok_r(buf, ",", &save); piece; piece = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(piece, ':'), *num = piece;
    if (colon) *colon = '\0';
    int32_t named = !strcmp(piece, "all") ? MS_SHARDS : ms_shard_strategy(piece);
    if (colon && named < 0)
      return ms_usage_error(&ms_predict_command, "--shard: '%.64s' is none of fsdp2, ddp, zero1, zero2, zero3, all (give "
                            "STRATEGY:N, as fsdp2:4, or STRATEGY alone: the fewest ranks that fit the card)", piece);
    if (named >= 0) strategy = named, num = colon ? colon + 1 : NULL;
    else if (strategy < 0)
      return ms_usage_error(&ms_predict_command, "--shard: '%.64s' is none of fsdp2, ddp, zero1, zero2, zero3, all (give "
                            "STRATEGY:N, as fsdp2:4, or STRATEGY alone: the fewest ranks that fit the card)", piece);
    int64_t n = 0; /* 0: searched */
    if (num && strcmp(num, "auto")) {
      const char *c = num;
      for (; *c >= '0' && *c <= '9' && n <= MS_SHARD_MAX_RANKS; c++) n = n * 10 + (*c - '0');
      if (*c || c == num || n < 1 || n > MS_SHARD_MAX_RANKS)
        return ms_usage_error(&ms_predict_command, "--shard: the number of ranks '%.64s' is not a whole number from 1 to "
                              "%d (nor auto: the fewest that fit the card)", num, MS_SHARD_MAX_RANKS);
    }
    int32_t first = strategy == MS_SHARDS ? MS_SHARD_FSDP2 : strategy, last = strategy == MS_SHARDS ? MS_SHARD_ZERO3 : strategy;
    for (int32_t s = first; s <= last; s++)
      if (add_shard(a, s, n) != 0) return 2;
  }
  if (strategy < 0) return ms_usage_error(&ms_predict_command, "--shard: give STRATEGY:N, as fsdp2:4, or STRATEGY alone");
  return 0;
}

/* Whether --shard searches strategy's N (given without N; MS_SHARDS: any strategy's). */
static bool searched(const predict_args *a, int32_t strategy) {
  for (int k = 0; k < a->nshards; k++)
    if (a->shard[k].ranks == 0 && (strategy == MS_SHARDS || a->shard[k].strategy == strategy)) return true;
  return false;
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
    else if (!strcmp(arg, "--html") && i + 1 < argc) a->html = argv[++i];
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
    } else if (!strcmp(arg, "--checkpoint") && i + 1 < argc) {
      if (a->nlists == MS_WHATIF_PATTERNS) return ms_usage_error(&ms_predict_command, "at most %d --checkpoint options", MS_WHATIF_PATTERNS);
      char *list = a->lists[a->nlists++] = strdup(argv[++i]);
      if (!list) return ms_usage_error(&ms_predict_command, "out of memory");
      int before = a->ncheckpoint;
      for (char *save = NULL, *piece = strtok_r(list, ",", &save); piece; piece = strtok_r(NULL, ",", &save)) {
        if (a->ncheckpoint == MS_WHATIF_PATTERNS)
          return ms_usage_error(&ms_predict_command, "at most %d modules to checkpoint", MS_WHATIF_PATTERNS);
        a->checkpoint[a->ncheckpoint++] = piece;
      }
      if (a->ncheckpoint == before) return ms_usage_error(&ms_predict_command, "--checkpoint: no module named");
      a->change.checkpoint = MS_CHANGE_ALL;
    } else if (!strcmp(arg, "--optimizer") && i + 1 < argc) {
      if (ms_optimizer_parse(argv[++i], &a->change.optimizer, &a->change.optimizer_bytes) != 0)
        return ms_usage_error(&ms_predict_command, "--optimizer: '%.64s' is none of sgd, sgd-momentum, adam, adamw, "
                              "adagrad, rmsprop, adafactor, or bytes per parameter (8B)", argv[i]);
    } else if (!strcmp(arg, "--advise")) {
      a->advise = true;
    } else if (!strcmp(arg, "--recorded-shard") && i + 1 < argc) {
      const char *v = argv[++i];
      if (strncmp(v, "fsdp2:", 6))
        return ms_usage_error(&ms_predict_command, "--recorded-shard: '%.64s': only a recorded FSDP2 run is read (fsdp2:N)", v);
      int64_t n = 0;
      const char *c = v + 6;
      for (; *c >= '0' && *c <= '9' && n <= MS_SHARD_MAX_RANKS; c++) n = n * 10 + (*c - '0');
      if (*c || c == v + 6 || n < 1 || n > MS_SHARD_MAX_RANKS)
        return ms_usage_error(&ms_predict_command, "--recorded-shard: the number of ranks '%.64s' is not a whole number from 1 to %d",
                              v + 6, MS_SHARD_MAX_RANKS);
      a->so.recorded_ranks = (int32_t)n;
    } else if (!strcmp(arg, "--shard") && i + 1 < argc) {
      if (parse_shard(argv[++i], a) != 0) return 2;
    } else if (!strcmp(arg, "--units") && i + 1 < argc) {
      if (a->nlists == MS_WHATIF_PATTERNS) return ms_usage_error(&ms_predict_command, "at most %d --checkpoint and --units options", MS_WHATIF_PATTERNS);
      char *list = a->lists[a->nlists++] = strdup(argv[++i]);
      if (!list) return ms_usage_error(&ms_predict_command, "out of memory");
      for (char *save = NULL, *piece = strtok_r(list, ",", &save); piece; piece = strtok_r(NULL, ",", &save)) {
        if (a->nunits == MS_WHATIF_PATTERNS) return ms_usage_error(&ms_predict_command, "at most %d --units patterns", MS_WHATIF_PATTERNS);
        a->units[a->nunits++] = piece;
      }
    } else if ((!strcmp(arg, "--param-dtype") || !strcmp(arg, "--reduce-dtype") || !strcmp(arg, "--recorded-dtype") ||
                !strcmp(arg, "--orig-dtype")) && i + 1 < argc) {
      int bytes = dtype_bytes(argv[++i]);
      if (bytes <= 0) return ms_usage_error(&ms_predict_command, "%s: '%.64s' is none of fp32, bf16, fp16", arg, argv[i]);
      if (!strcmp(arg, "--param-dtype")) a->so.param_bytes = bytes;
      else if (!strcmp(arg, "--reduce-dtype")) a->so.reduce_bytes = bytes;
      else if (!strcmp(arg, "--orig-dtype")) a->so.orig_bytes = bytes;
      else a->so.recorded_bytes = bytes;
    } else if (!strcmp(arg, "--bucket-mb") && i + 1 < argc) {
      char *end;
      a->so.bucket_mb = strtod(argv[++i], &end);
      if (end == argv[i] || *end || !(a->so.bucket_mb > 0) || a->so.bucket_mb > 1048576)
        return ms_usage_error(&ms_predict_command, "--bucket-mb takes a number of MiB above 0");
    } else if (!strcmp(arg, "--shard-init") && i + 1 < argc) {
      const char *v = argv[++i];
      if (strcmp(v, "gpu") && strcmp(v, "meta"))
        return ms_usage_error(&ms_predict_command, "--shard-init: '%.64s' is neither gpu (the model made on the GPU, then "
                              "sharded) nor meta (made on the meta device, sharded, then materialised)", v);
      a->so.meta_init = !strcmp(v, "meta");
    } else if (!strcmp(arg, "--bucket-view")) {
      a->so.bucket_view = true;
    } else if ((!strcmp(arg, "--reduce-bucket-size") || !strcmp(arg, "--allgather-bucket-size")) && i + 1 < argc) {
      int64_t n = 0;
      const char *c = argv[++i];
      for (; *c >= '0' && *c <= '9' && n < ((int64_t)1 << 50); c++) n = n * 10 + (*c - '0');
      if (*c || n < 1 || c == argv[i]) return ms_usage_error(&ms_predict_command, "%s takes a whole number of elements", arg);
      if (!strcmp(arg, "--reduce-bucket-size")) a->so.reduce_bucket = n;
      else a->so.allgather_bucket = n;
    } else if (!strcmp(arg, "--overlap-comm")) {
      a->so.overlap_comm = true;
    } else if (arg[0] == '-' && arg[1]) {
      return ms_unknown_option(&ms_predict_command, arg, i + 1 == argc);
    } else {
      const char *eq = strrchr(arg, '=');
      if (eq == arg)
        return ms_usage_error(&ms_predict_command, "'%.200s': give each run with the size it was recorded at, as run.db=8", arg);
      if (a->nruns == MS_PREDICT_MAX_RUNS)
        return ms_usage_error(&ms_predict_command, "at most %d runs (a fourth: '%.200s')", MS_PREDICT_MAX_RUNS, arg);
      ms_predict_input *r = &a->runs[a->nruns];
      if (!eq) { /* a size is needed with more than one run: checked below */
        if (!(r->path = strdup(arg))) return ms_usage_error(&ms_predict_command, "out of memory");
        r->at = 0;
        a->nruns++;
        continue;
      }
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
  if (a->html && a->json) return ms_usage_error(&ms_predict_command, "--html and --json: choose one");
  bool changed = ms_change_any(&a->change) || a->nshards > 0;
  if (a->nunits && !a->nshards) return ms_usage_error(&ms_predict_command, "--units names FSDP2's units: give --shard too");
  if (a->so.recorded_ranks && !a->nshards)
    return ms_usage_error(&ms_predict_command, "--recorded-shard says how the run was sharded: give --shard fsdp2:N too");
  for (int k = 0; k < a->nshards; k++)
    if (a->shard[k].ranks && searched(a, a->shard[k].strategy))
      return ms_usage_error(&ms_predict_command, "--shard: %s is given with N (%s:%d) and without (its N searched): give "
                            "one", ms_shard_name(a->shard[k].strategy), ms_shard_name(a->shard[k].strategy),
                            (int)a->shard[k].ranks);
  if (searched(a, MS_SHARDS) && !a->card_option)
    return ms_usage_error(&ms_predict_command, "--shard without N searches the fewest ranks that fit a card: give --capacity "
                          "SIZE or --device CARD (or N, as fsdp2:4)");
  if (searched(a, MS_SHARDS) && a->nruns > 1 && a->nat == 0)
    return ms_usage_error(&ms_predict_command, "--shard without N searches the fewest ranks that fit a size: give --at N");
  for (int k = 0; a->so.recorded_ranks && k < a->nshards; k++)
    if (a->shard[k].strategy != MS_SHARD_FSDP2)
      return ms_usage_error(&ms_predict_command, "from a recorded FSDP2 run (--recorded-shard) only fsdp2:N is predicted, not %s",
                            ms_shard_name(a->shard[k].strategy));
  if (a->nruns == 1 && !changed && !a->advise)
    return ms_usage_error(&ms_predict_command, "one run ('%.200s') cannot tell how memory grows with the size: give the "
                          "program recorded at two sizes (or three), as small.db=4 large.db=8 (or change the program at "
                          "its own size: --checkpoint, --optimizer, --advise)", a->runs[0].path);
  for (int x = 0; x < a->nruns && a->nruns > 1; x++)
    if (a->runs[x].at == 0)
      return ms_usage_error(&ms_predict_command, "'%.200s': give each run with the size it was recorded at, as run.db=8",
                            a->runs[x].path);
  if (a->nruns == 1) { /* its own size, the only one it can say */
    a->one_run = true;
    a->size_given = a->runs[0].at != 0;
    int64_t own = a->runs[0].at ? a->runs[0].at : 1;
    for (int k = 0; k < a->nat; k++)
      if (a->at[k] != own)
        return ms_usage_error(&ms_predict_command, "one run predicts at its own size only%s: --at %lld needs the program "
                              "recorded at two sizes", a->runs[0].at ? "" : " (give it, as run.db=8)", (long long)a->at[k]);
    a->runs[0].at = own;
    a->at[0] = own, a->nat = 1;
  }
  if (a->advise && (a->nat != 1 || !a->card_option))
    return ms_usage_error(&ms_predict_command, "--advise needs one size and a card: --at N and --capacity SIZE (or --device CARD)");
  if (a->advise && a->sweep) return ms_usage_error(&ms_predict_command, "--advise tries the sweep's settings itself: leave --sweep out");
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

/* The peaks shown: the allocator's own, without the memory outside it (libraries' cudaMalloc,
 * cuBLAS's workspace, seen by `memsnap run`), so that they compare with torch.cuda.max_memory_*;
 * that memory is shown apart (external_note). Allocated: the largest device's; reserved: the
 * device whose whole reserved memory peaked highest (the one that decides whether it fits). */
static int64_t peak_allocated(const ms_replay_result *r) {
  int64_t m = 0;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].allocator_peak_allocated > m) m = r->dev[i].allocator_peak_allocated;
  return m;
}

static int64_t peak_reserved(const ms_replay_result *r) {
  return r->ndevices > 0 ? r->dev[ms_replay_worst_device(r)].allocator_peak_reserved : 0;
}

/* The most memory outside the allocator held at once on one device (0: none). */
static int64_t external_peak(const ms_replay_result *r) {
  int64_t m = 0;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].external_peak > m) m = r->dev[i].external_peak;
  return m;
}

static int64_t shown_external; /* the most of it in any row printed */

static void external_note(void) {
  if (!shown_external) return;
  char b[32];
  ms_format_bytes(shown_external, b, sizeof b);
  printf("  (peaks are the allocator's, as torch.cuda.max_memory_allocated/reserved report them; besides them the\n"
         "   program held up to %s outside the allocator (libraries' own cudaMalloc, cuBLAS's workspace), which\n"
         "   the card must hold too: \"fits\" counts it)\n", b);
}

static double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : 100.0; }

/* One run: no law of the size, only the run itself, changed as asked (print_change). */
static void print_one_run(const ms_predict_info *in, bool size_given) {
  const ms_predict_run *run = &in->run[0];
  char b[32], at[48] = "";
  ms_format_bytes(run->bytes, b, sizeof b);
  if (size_given) snprintf(at, sizeof at, " at %lld", (long long)run->at);
  printf("prediction from one run of the program (%s%s): its own history, %lld allocations (%s in all), changed as "
         "below and replayed; the size stays the recorded one (another size needs the program recorded at two sizes)\n",
         run->shown, at, (long long)run->allocations, b);
}

static void print_model(const ms_predict_info *in, uint64_t card, bool card_given, const char *recorded, bool size_given) {
  char b[32], c[32];
  if (in->nruns == 1) {
    print_one_run(in, size_given);
    ms_format_bytes((int64_t)card, c, sizeof c);
    printf("  card: %s per device (%s); recorded settings: %s\n", c, card_given ? "as given" : "recorded", recorded);
    return;
  }
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

static void print_row(const ms_replay_result *r, const char *lead, const char *vs, bool recorded, const char *program) {
  char a[32], b[32], frag[32], conf[1200], vs_cell[24] = "";
  int64_t pk = ms_replay_worst_peak(r), at_peak = r->ndevices > 0 ? r->dev[ms_replay_worst_device(r)].allocated_at_peak : 0;
  ms_format_bytes(peak_allocated(r), a, sizeof a);
  ms_format_bytes(peak_reserved(r), b, sizeof b);
  if (!r->failed && external_peak(r) > shown_external) shown_external = external_peak(r);
  ms_format_bytes(pk - at_peak, frag, sizeof frag);
  ms_replay_describe_config(&r->config, conf, sizeof conf);
  if (vs) snprintf(vs_cell, sizeof vs_cell, "  %8s", vs);
  if (r->failed) {
    printf("%s  %-70s  %s\n", lead, "failed (below)", conf);
    return;
  }
  char prog[48] = "";
  if (program) snprintf(prog, sizeof prog, "%-20s", program);
  printf("%s  %14s  %14s%s  %13s  %10lld  %-4s  %s%s%s\n", lead, a, b, vs_cell, frag,
         (long long)ms_replay_sum(r, offsetof(ms_replay_device, device_allocs)), ms_replay_fits(r) ? "yes" : "no", prog, conf,
         recorded && vs ? "  [recorded]" : "");
}

/* A row's program in the table: "as recorded", "changed", or the strategy and its ranks
 * ("fsdp2:4", "fsdp2:4, changed"). */
static void program_label(const ms_change *c, char *out, size_t len) {
  ms_change rest = *c;
  rest.strategy = MS_SHARD_NONE;
  if (c->strategy == MS_SHARD_NONE) snprintf(out, len, "%s", ms_change_any(c) ? "changed" : "as recorded");
  else snprintf(out, len, "%s:%d%s", ms_shard_name(c->strategy), (int)c->ranks, ms_change_any(&rest) ? ", changed" : "");
}

/* What --shard with a card found for one strategy: the smallest N that fits, from the Ns given
 * or searched (fewest_ranks.c), and the Ns tried. */
typedef struct shard_outcome {
  int32_t strategy;
  bool searched;
  int32_t fewest; /* 0: none fits */
  int32_t tried[MAX_SHARDS + 11];
  int ntried;
  ms_fewest search; /* searched: how it stopped */
} shard_outcome;

/* The outcome of each strategy --shard names, in MS_SHARD_* order, into out[MS_SHARDS]: from the
 * predictions at the first size under the first setting (pred: their rows of nchange changes and
 * nconf settings; a->found for those searched) or from the advice's rows. Returns how many. */
static int shard_outcomes(const predict_args *a, const ms_sweep *pred, int nconf, int nchange, const ms_advice *adv,
                          shard_outcome *out) {
  int n = 0;
  for (int32_t s = MS_SHARD_FSDP2; s < MS_SHARDS; s++) {
    shard_outcome *x = &out[n];
    memset(x, 0, sizeof *x);
    x->strategy = s;
    bool named = false;
    for (int k = 0; k < a->nshards; k++) named |= a->shard[k].strategy == s;
    if (!named) continue;
    x->searched = searched(a, s);
    const ms_advice_row *row = NULL;
    for (int i = 0; adv && i < adv->n; i++)
      if (adv->row[i].kind == MS_ADVICE_SHARD && adv->row[i].at.change.strategy == s) row = &adv->row[i];
    if (adv && !row) continue;
    if (x->searched) {
      for (int k = 0; k < a->nfound && !row; k++)
        if (a->found[k].strategy == s) x->search = a->found[k];
      if (row) ms_fewest_of_result(&row->at, &x->search);
      x->fewest = x->search.fewest;
      for (int32_t r = 1; r <= x->search.ranks && x->ntried < (int)(sizeof x->tried / sizeof x->tried[0]); r *= 2)
        x->tried[x->ntried++] = r;
    } else { /* the Ns given, from the fewest up (advice: up to the first that fits) */
      for (int k = 0; k < a->nshards; k++)
        if (a->shard[k].strategy == s && (!row || a->shard[k].ranks <= row->at.change.ranks)) {
          int j = x->ntried++;
          for (; j > 0 && x->tried[j - 1] > a->shard[k].ranks; j--) x->tried[j] = x->tried[j - 1];
          x->tried[j] = a->shard[k].ranks;
        }
      if (row && row->fits) x->fewest = row->at.change.ranks;
      for (int h = 0; !row && pred && h < nchange; h++) {
        const ms_replay_result *r = &pred->results[h * nconf];
        if (r->change.strategy == s && ms_replay_fits(r) && (!x->fewest || r->change.ranks < x->fewest))
          x->fewest = r->change.ranks;
      }
    }
    n++;
  }
  return n;
}

/* The Ns tried, "1, 2, 4", into out[len]. */
static void tried_list(const shard_outcome *x, char *out, size_t len) {
  int used = 0;
  out[0] = '\0';
  for (int i = 0; i < x->ntried && used >= 0 && (size_t)used < len; i++)
    used += snprintf(out + used, len - (size_t)used, "%s%d", i ? ", " : "", (int)x->tried[i]);
}

/* The smallest N of each strategy that fits the card, or why none does: a line each (at: " at 8",
 * or "" where the size goes unsaid). */
static void print_smallest_n(const shard_outcome *x, int n, uint64_t capacity, const char *at) {
  char cap[32], list[256], why[512];
  ms_format_bytes((int64_t)capacity, cap, sizeof cap);
  for (int i = 0; i < n; i++, x++) {
    tried_list(x, list, sizeof list);
    if (x->fewest && x->searched)
      printf("the smallest N that fits %s%s: %s:%d (searched: %s)\n", cap, at, ms_shard_name(x->strategy), (int)x->fewest, list);
    else if (x->fewest) printf("the smallest N that fits %s%s: %s:%d\n", cap, at, ms_shard_name(x->strategy), (int)x->fewest);
    else if (!x->searched) printf("no N tried fits %s%s with %s\n", cap, at, ms_shard_name(x->strategy));
    else {
      ms_fewest_why(&x->search, why, sizeof why);
      printf("no N fits %s%s with %s (searched: %s): %s\n", cap, at, ms_shard_name(x->strategy), list, why);
    }
  }
}

/* What sharding acts on: the units, the parameters, the assumptions. */
static void print_shard(const ms_predict *m, const predict_args *a) {
  const ms_shard *h = ms_predict_shard(m);
  if (!h) return;
  const ms_shard_info *si = ms_shard_info_of(h);
  char b[32], g[32], st[32];
  ms_format_bytes(si->param_bytes, b, sizeof b);
  ms_format_bytes(si->grad_bytes, g, sizeof g);
  ms_format_bytes(si->state_bytes, st, sizeof st);
  printf("\nsharding (rank 0's memory; every rank holds as much or less):\n");
  if (si->recorded_ranks)
    printf("  recorded: rank 0 of an FSDP2 run at %d ranks (%s); the blocks 1/N of the parameters' resized to each N asked\n",
           (int)si->recorded_ranks, a->so.recorded_ranks && si->detected_ranks != si->recorded_ranks ? "as --recorded-shard says"
                                    : "its all-gather outputs over its units' shards say so");
  printf("  parameters: %lld blocks (%s) in %lld modules, told by tensor events; gradients: %lld blocks (%s); "
         "optimizer state: %lld blocks (%s, %s)\n", (long long)si->params, b, (long long)si->param_modules,
         (long long)si->grads, g, (long long)si->state_blocks, st,
         si->state_from_events ? "tensor events" : "made in a step, outliving it");
  printf("  FSDP2's units (%d): %s:", si->nunits, si->units_rule);
  for (int i = 0; i < si->nunits && i < MS_SHARD_UNITS_SHOWN; i++) printf(" %s", si->unit_names[i]);
  printf("%s\n", si->nunits > MS_SHARD_UNITS_SHOWN ? " ..." : "");
  static const char *const dt[] = {"?", "?", "bf16/fp16", "?", "fp32"};
  int rec = a->so.recorded_bytes ? a->so.recorded_bytes : 4, orig = a->so.orig_bytes ? a->so.orig_bytes : rec;
  int pb = a->so.param_bytes ? a->so.param_bytes : orig, rb = a->so.reduce_bytes ? a->so.reduce_bytes : pb;
  printf("  set-up: %s\n", a->so.meta_init ? "the model made on the meta device, sharded, then materialised (--shard-init "
         "meta): each parameter's allocation is its shard's" : "the model made on the GPU as recorded, then sharded after "
         "its last parameter's allocation (fully_shard: per unit, the shards made, then the full parameters freed)");
  if (a->so.meta_init && si->setup_blocks && !si->recorded_ranks) {
    char bytes[32];
    ms_format_bytes(si->setup_bytes, bytes, sizeof bytes);
    printf("  left out with it (fsdp2, zero3): the %lld blocks (%s) the recording made and freed before the first forward "
           "(the model's making on the GPU: a dtype conversion, initialisation's temporaries)\n", (long long)si->setup_blocks, bytes);
  }
  printf("  assumed: parameters recorded in %s, sharded on dim 0 with rows of one element (padding within N-1 rows); "
         "FSDP2's sharded dtype %s, param dtype %s, reduce dtype %s; DDP's buckets %g MiB%s; ZeRO's reduce bucket %lld "
         "elements%s\n", dt[rec], dt[orig], dt[pb], dt[rb], a->so.bucket_mb, a->so.bucket_view ? " (gradient_as_bucket_view)" : "",
         (long long)a->so.reduce_bucket, a->so.overlap_comm ? " (two: overlap_comm)" : "");
  if (si->cast_blocks)
    printf("  autocast's casts in the recording (%lld blocks made under at::autocast::cached_cast in a unit's forward, of "
           "weights and activations; without native frames, of a parameter's elements in the param dtype): left out under "
           "fsdp2, whose compute in the param dtype makes none; autocast's activations stay as recorded (some in fp32, "
           "where FSDP2's compute makes them in the param dtype): the model recorded in the param dtype "
           "(model.to(torch.bfloat16), then --recorded-dtype bf16 --orig-dtype fp32) answers closer (docs/predict.md)\n",
           (long long)si->cast_blocks);
  printf("  left out: NCCL's own buffers and the communicator's workspace (outside PyTorch's allocator)\n");
}

static void print_predictions(const ms_sweep *sw, const int64_t *ats, int nat, int nconf, int nchange, bool own_size) {
  bool sweep = nconf > 1, over = false;
  if (!sweep)
    printf("\n%6s  %14s  %14s  %13s  %10s  %-4s  %s%s\n", "at", "peak allocated", "peak reserved", "fragmentation",
           "cudaMalloc", "fits", nchange > 1 || sw->results[0].change.strategy ? "program (ranks)     " : "",
           "PYTORCH_CUDA_ALLOC_CONF");
  for (int a = 0; a < nat; a++)
    for (int h = 0; h < nchange; h++) {
      const ms_replay_result *rows = &sw->results[(a * nchange + h) * nconf];
      int order[MS_SWEEP_GRID_ROWS];
      ms_replay_rank(rows, nconf, order);
      int64_t rec = ms_replay_worst_peak(&rows[0]);
      char label[40] = "";
      if (rows[0].change.strategy) program_label(&rows[0].change, label, sizeof label);
      else if (ms_change_any(&rows[0].change)) snprintf(label, sizeof label, "changed");
      if (sweep)
        printf("\nat %lld%s%s: %d settings, best first\n%6s  %14s  %14s  %8s  %13s  %10s  %-4s  %s\n", (long long)ats[a],
               label[0] ? ", " : "", label, nconf, "rank", "peak allocated", "peak reserved", "vs rec.", "fragmentation",
               "cudaMalloc", "fits", "PYTORCH_CUDA_ALLOC_CONF");
      for (int k = 0; k < nconf; k++) {
        const ms_replay_result *r = &rows[order[k]];
        char lead[64], vs[16] = "-";
        if (sweep) snprintf(lead, sizeof lead, "%6d", k + 1);
        else if (own_size) snprintf(lead, sizeof lead, "%6s", "rec."); /* one run given without its size */
        else snprintf(lead, sizeof lead, "%6lld", (long long)ats[a]);
        if (rec > 0 && order[k] != 0) snprintf(vs, sizeof vs, "%+.1f%%", 100.0 * (double)(ms_replay_worst_peak(r) - rec) / (double)rec);
        char prog[40];
        program_label(&r->change, prog, sizeof prog);
        print_row(r, lead, sweep ? vs : NULL, order[k] == 0, nchange > 1 || r->change.strategy ? prog : NULL);
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

/* The largest sizes that fit: sw's rows in ngroups groups (one per change: with --shard, per
 * strategy and N) of nconf settings each, each group ranked, and its best. */
static void print_capacity(const ms_sweep *sw, uint64_t capacity, int ngroups, int nconf) {
  char cap[32];
  bool sharded = false;
  for (int i = 0; i < sw->nrows; i++) sharded |= sw->results[i].change.strategy != MS_SHARD_NONE;
  ms_format_bytes((int64_t)capacity, cap, sizeof cap);
  printf("\nlargest size that fits in %s per device (bisection over synthesised histories), the most first%s\n", cap,
         ngroups > 1 ? ", for each strategy and N" : "");
  printf("%6s  %8s  %14s  %14s  %s%s\n", "rank", "at", "peak allocated", "peak reserved", sharded ? "program (ranks)     " : "",
         "PYTORCH_CUDA_ALLOC_CONF");
  for (int k = 0; k < sw->nrows; k++) {
    const ms_replay_result *r = &sw->results[sw->order[k]];
    char a[32], b[32], conf[1200], at[24], prog[48] = "", label[40];
    ms_replay_describe_config(&r->config, conf, sizeof conf);
    program_label(&r->change, label, sizeof label);
    if (sharded) snprintf(prog, sizeof prog, "%-20s", label);
    if (nconf > 1 && k && k % nconf == 0) printf("\n"); /* the next group's settings */
    if (r->failed) {
      printf("%6d  %-40s  %s%s\n", k % nconf + 1, "failed (below)", prog, conf);
      continue;
    }
    ms_format_bytes(peak_allocated(r), a, sizeof a);
    ms_format_bytes(peak_reserved(r), b, sizeof b);
    if (r->at && external_peak(r) > shown_external) shown_external = external_peak(r);
    snprintf(at, sizeof at, "%lld", (long long)r->at);
    printf("%6d  %8s  %14s  %14s  %s%s%s\n", k % nconf + 1, r->at ? at : "none", r->at ? a : "-", r->at ? b : "-", prog,
           conf, sw->order[k] % nconf == 0 && nconf > 1 ? "  [recorded]" : "");
  }
  for (int g = 0; g < ngroups; g++) {
    const ms_replay_result *best = &sw->results[sw->order[g * nconf]];
    char label[40], with[64] = "";
    program_label(&best->change, label, sizeof label);
    if (sharded) snprintf(with, sizeof with, " with %s", label);
    if (best->failed || best->at == 0) {
      printf("%snothing fits%s: not even size 1 under any setting on this card\n", g ? "" : "\n", with);
      continue;
    }
    printf("%sbest%s: %lld with ", g ? "" : "\n", with, (long long)best->at);
    print_best(&best->config);
    printf("\n");
  }
}

/* The modules --advise found to checkpoint when none was named, as candidates.c ranks them. */
static void print_candidates(const ms_candidates *f) {
  char b[32], d[32], r[32];
  printf("\nmodules that may be checkpointed: none named, so the %d found in %s, ranked as PyTorch's SAC estimator ranks "
         "its candidates: the most memory freed per second of recompute first (no time known: by memory)\n", f->n,
         f->module_events ? "the module events' paths (those differing only in their numbers as one)" : "the Python frames CLASS.forward");
  if (f->n == 0) {
    printf("  none: %s\n", f->module_events ? "no module's forward in the module events" : "no frame CLASS.forward in the stacks of forward allocations");
    return;
  }
  printf("  %4s  %-36s  %9s  %6s  %12s  %12s  %10s  %12s  %s\n", "rank", "module", "instances", "calls", "saved", "freed",
         "forward", "freed/s", "tried");
  for (int i = 0; i < f->n; i++) {
    const ms_candidate *c = &f->c[i];
    char fw[32] = "-", rate[40] = "-";
    ms_format_bytes(c->saved_bytes, b, sizeof b);
    ms_format_bytes(c->freed_bytes, d, sizeof d);
    if (c->forward_ns > 0) snprintf(fw, sizeof fw, "%.2f ms", (double)c->forward_ns / 1e6);
    if (c->forward_ns > 0 && c->freed_bytes > 0) {
      ms_format_bytes((int64_t)c->bytes_per_s, r, sizeof r);
      snprintf(rate, sizeof rate, "%s/s", r);
    }
    printf("  %4d  %-36s  %9d  %6lld  %12s  %12s  %10s  %12s  %s\n", i + 1, c->module.shown, c->instances,
           (long long)c->calls, c->instances ? b : "-", c->instances ? d : "-", c->instances ? fw : "-", c->instances ? rate : "-",
           c->tried ? "yes" : c->instances == 0 ? "no (no call with a backward after it)" : c->freed_bytes <= 0 ? "no (frees nothing)" : "no");
  }
  if (f->ntried == 0) printf("  none frees anything: no checkpointing tried\n");
}

/* What the change acts on: the module calls found and what each saved, the optimizer's state. */
static void print_change(const ms_predict *m, const ms_change *c, const ms_predict_info *in, const predict_args *a) {
  const ms_whatif *w = ms_predict_whatif(m);
  if (!w) return;
  if (ms_predict_candidates(m)) print_candidates(ms_predict_candidates(m));
  const ms_whatif_info *wi = ms_whatif_info_of(w);
  char b[32], d[32];
  if (wi->checkpointing) {
    printf("\n%s:", a->advise ? "modules that may be checkpointed" : "change: checkpointing");
    for (int i = 0; i < a->ncheckpoint; i++) printf(" %s", a->checkpoint[i]);
    printf(" (%s)\n", wi->module_events ? "the module events' paths, class names by their Python frames" : "their calls told by the Python frames CLASS.forward");
    printf("  %lld calls of %d module instances before %lld backward passes; what one call saved for backward at %lld "
           "(the most saved first):\n", (long long)wi->calls, wi->ninstances, (long long)wi->backward_passes,
           (long long)in->run[in->base].at);
    printf("  %4s  %-40s  %6s  %14s  %7s\n", "rank", "instance", "calls", "saved", "blocks");
    for (int i = 0; i < wi->ninstances; i++) {
      ms_format_bytes(wi->instance[i].saved_bytes, b, sizeof b);
      printf("  %4d  %-40s  %6lld  %14s  %7lld\n", i + 1, wi->instance[i].name, (long long)wi->instance[i].calls, b,
             (long long)wi->instance[i].saved_blocks);
    }
  }
  if (wi->optimizer && (c->optimizer != MS_OPT_KEEP || a->advise)) {
    char name[32];
    ms_optimizer_name(c->optimizer, c->optimizer_bytes, name, sizeof name);
    ms_format_bytes(wi->state_bytes, b, sizeof b);
    if (c->optimizer != MS_OPT_KEEP) printf("\nchange: optimizer %s in place of %s", name, wi->recorded_optimizer[0] ? wi->recorded_optimizer : "the recorded one");
    else printf("\nthe optimizer: %s", wi->recorded_optimizer[0] ? wi->recorded_optimizer : "not named");
    printf(" (%s)\n  its state: %lld blocks (%s) and %lld step counts, %d tensors per parameter; evidence: %s\n", wi->optimizer_source,
           (long long)wi->state_blocks, b, (long long)wi->counter_blocks, wi->tensors_per_param, wi->state_evidence);
    ms_format_bytes(wi->temp_bytes, b, sizeof b);
    ms_format_bytes(wi->param_bytes, d, sizeof d);
    printf("  its temporaries in %lld steps: %lld blocks (%s); the parameters: %lld blocks (%s)\n", (long long)wi->steps,
           (long long)wi->temp_blocks, b, (long long)wi->param_blocks, d);
  }
  for (int i = 0; i < wi->nnotes; i++) printf("note: %s\n", wi->notes[i]);
}

static const char *const advice_kinds[MS_ADVICE_KINDS] = {"none", "setting", "checkpoint", "checkpoint+setting", "optimizer",
                                                          "optimizer+checkpoint", "shard"};

/* A row of the advice in words: its settings and its change. */
static void advice_text(const ms_predict *m, const ms_advice_row *r, char *out, size_t len) {
  char conf[1200], change[2048];
  ms_replay_describe_config(&r->at.config, conf, sizeof conf);
  ms_change_describe(ms_predict_whatif_for(m, &r->at.change), &r->at.change, change, sizeof change);
  if (r->kind == MS_ADVICE_NONE) snprintf(out, len, "nothing (the recorded settings, %s)", conf);
  else if (r->kind == MS_ADVICE_SHARD && r->searched)
    snprintf(out, len, "%s:%d (%s)", ms_shard_name(r->at.change.strategy), (int)r->at.change.ranks,
             r->fits ? "the fewest ranks that fit, of 1, 2, 4, ... searched" : "the last of 1, 2, 4, ... searched: none fits");
  else if (r->kind == MS_ADVICE_SHARD)
    snprintf(out, len, "%s:%d (the fewest ranks of those --shard gives%s)", ms_shard_name(r->at.change.strategy),
             (int)r->at.change.ranks, r->fits ? " that fit" : ": none fits");
  else if (!ms_change_any(&r->at.change)) snprintf(out, len, "PYTORCH_CUDA_ALLOC_CONF %s", conf);
  else if (r->kind == MS_ADVICE_CHECKPOINT_SETTING) snprintf(out, len, "%s, with %s", change, conf);
  else snprintf(out, len, "%s", change);
}

static void print_advice(const ms_predict *m, const ms_advice *adv) {
  char cap[32];
  ms_format_bytes((int64_t)adv->capacity, cap, sizeof cap);
  printf("\nwhat makes %lld fit %s per device: %d changes tried, those that fit first, the smallest first\n", (long long)adv->at,
         cap, adv->n);
  printf("%6s  %-4s  %14s  %14s  %8s  %s\n", "rank", "fits", "peak allocated", "peak reserved", "largest", "change");
  for (int i = 0; i < adv->n; i++) {
    const ms_advice_row *r = &adv->row[i];
    char a[32], b[32], largest[24], text[3300];
    ms_format_bytes(peak_allocated(&r->at), a, sizeof a);
    ms_format_bytes(peak_reserved(&r->at), b, sizeof b);
    if (external_peak(&r->at) > shown_external) shown_external = external_peak(&r->at);
    if (!adv->searched) snprintf(largest, sizeof largest, "-");
    else if (r->largest.failed || r->largest.at == 0) snprintf(largest, sizeof largest, "none");
    else snprintf(largest, sizeof largest, "%lld", (long long)r->largest.at);
    advice_text(m, r, text, sizeof text);
    if (r->at.failed) printf("%6d  %-4s  %-40s  %s\n", i + 1, "-", "failed", text);
    else printf("%6d  %-4s  %14s  %14s  %8s  %s\n", i + 1, r->fits ? "yes" : "no", a, b, largest, text);
  }
  if (adv->best < 0) {
    printf("\nnothing tried makes %lld fit %s\n", (long long)adv->at, cap);
    return;
  }
  char text[3300];
  const ms_advice_row *best = &adv->row[adv->best];
  advice_text(m, best, text, sizeof text);
  printf("\nsmallest change that fits: %s", text);
  if (adv->searched && best->largest.at) printf("; with it the largest size that fits is %lld", (long long)best->largest.at);
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

/* recorded: the conf line; size_given: false for one run given without its size (it then reads
 * "at 1": its own size, unknown) */
static cJSON *json_model(const ms_predict_info *in, uint64_t card, const char *recorded, bool size_given) {
  cJSON *o = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(o, "runs");
  for (int r = 0; r < in->nruns; r++) {
    const ms_predict_run *run = &in->run[r];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToArray(runs, j);
    cJSON_AddStringToObject(j, "path", run->shown);
    cJSON_AddNumberToObject(j, "at", (double)run->at);
    cJSON_AddBoolToObject(j, "base", r == in->base);
    cJSON_AddBoolToObject(j, "size_given", in->nruns > 1 || size_given);
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

/* The change a row makes, for its JSON: "change" (in words, "none"), "strategy" and "ranks"
 * (--shard's; "none" and 1), "checkpointed" (the instances' names), "optimizer" (null: the
 * recorded one). */
static void add_change(cJSON *j, const ms_predict *m, const ms_change *c) {
  char text[2048];
  const ms_whatif *w = ms_predict_whatif_for(m, c);
  ms_change_describe(w, c, text, sizeof text);
  cJSON_AddStringToObject(j, "change", text);
  cJSON_AddStringToObject(j, "strategy", ms_shard_name(c->strategy));
  cJSON_AddNumberToObject(j, "ranks", c->strategy ? c->ranks : 1);
  cJSON *list = cJSON_AddArrayToObject(j, "checkpointed");
  const ms_whatif_info *wi = w ? ms_whatif_info_of(w) : NULL;
  if (c->checkpoint > 0 && c->modules > 0 && wi) cJSON_AddStringToObject(j, "checkpoint_module", wi->name);
  else cJSON_AddNullToObject(j, "checkpoint_module");
  for (int i = 0; wi && i < wi->ninstances && i < c->checkpoint; i++)
    cJSON_AddItemToArray(list, cJSON_CreateString(wi->instance[i].name));
  if (c->optimizer == MS_OPT_KEEP) {
    cJSON_AddNullToObject(j, "optimizer");
  } else {
    char name[32];
    ms_optimizer_name(c->optimizer, c->optimizer_bytes, name, sizeof name);
    cJSON_AddStringToObject(j, "optimizer", name);
  }
}

static cJSON *json_whatif(const ms_predict *m, const predict_args *a) {
  const ms_whatif *w = ms_predict_whatif(m);
  if (!w) return cJSON_CreateNull();
  const ms_whatif_info *wi = ms_whatif_info_of(w);
  cJSON *o = cJSON_CreateObject();
  if (wi->checkpointing) {
    cJSON *c = cJSON_AddObjectToObject(o, "checkpoint");
    cJSON *pats = cJSON_AddArrayToObject(c, "modules");
    for (int i = 0; i < a->ncheckpoint; i++) cJSON_AddItemToArray(pats, cJSON_CreateString(a->checkpoint[i]));
    cJSON_AddBoolToObject(c, "module_events", wi->module_events);
    cJSON_AddNumberToObject(c, "calls", (double)wi->calls);
    cJSON_AddNumberToObject(c, "calls_without_backward", (double)wi->calls_without_backward);
    cJSON_AddNumberToObject(c, "backward_passes", (double)wi->backward_passes);
    cJSON *list = cJSON_AddArrayToObject(c, "instances");
    for (int i = 0; i < wi->ninstances; i++) {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddItemToArray(list, x);
      cJSON_AddStringToObject(x, "name", wi->instance[i].name);
      cJSON_AddNumberToObject(x, "calls", (double)wi->instance[i].calls);
      cJSON_AddNumberToObject(x, "saved_bytes", (double)wi->instance[i].saved_bytes);
      cJSON_AddNumberToObject(x, "saved_blocks", (double)wi->instance[i].saved_blocks);
    }
  }
  if (wi->optimizer) {
    cJSON *c = cJSON_AddObjectToObject(o, "optimizer");
    char name[32];
    ms_optimizer_name(a->change.optimizer, a->change.optimizer_bytes, name, sizeof name);
    if (a->change.optimizer == MS_OPT_KEEP) cJSON_AddNullToObject(c, "name");
    else cJSON_AddStringToObject(c, "name", name);
    cJSON_AddStringToObject(c, "recorded", wi->recorded_optimizer);
    cJSON_AddStringToObject(c, "recorded_source", wi->optimizer_source);
    cJSON_AddStringToObject(c, "state_evidence", wi->state_evidence);
    cJSON_AddNumberToObject(c, "tensors_per_parameter", wi->tensors_per_param);
    cJSON_AddNumberToObject(c, "steps", (double)wi->steps);
    cJSON_AddNumberToObject(c, "state_blocks", (double)wi->state_blocks);
    cJSON_AddNumberToObject(c, "state_bytes", (double)wi->state_bytes);
    cJSON_AddNumberToObject(c, "step_count_blocks", (double)wi->counter_blocks);
    cJSON_AddNumberToObject(c, "temporary_blocks", (double)wi->temp_blocks);
    cJSON_AddNumberToObject(c, "temporary_bytes", (double)wi->temp_bytes);
    cJSON_AddNumberToObject(c, "parameter_blocks", (double)wi->param_blocks);
    cJSON_AddNumberToObject(c, "parameter_bytes", (double)wi->param_bytes);
  }
  cJSON *notes = cJSON_AddArrayToObject(o, "notes");
  for (int i = 0; i < wi->nnotes; i++) cJSON_AddItemToArray(notes, cJSON_CreateString(wi->notes[i]));
  return o;
}

/* What sharding acts on (null: no --shard). */
static cJSON *json_shard(const ms_predict *m, const predict_args *a) {
  const ms_shard *h = ms_predict_shard(m);
  if (!h) return cJSON_CreateNull();
  const ms_shard_info *si = ms_shard_info_of(h);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "root", si->root);
  cJSON_AddStringToObject(o, "units_rule", si->units_rule);
  cJSON_AddNumberToObject(o, "unit_count", si->nunits);
  cJSON *list = cJSON_AddArrayToObject(o, "units");
  for (int i = 0; i < si->nunits && i < MS_SHARD_UNITS_SHOWN; i++) cJSON_AddItemToArray(list, cJSON_CreateString(si->unit_names[i]));
  cJSON_AddNumberToObject(o, "parameter_blocks", (double)si->params);
  cJSON_AddNumberToObject(o, "parameter_bytes", (double)si->param_bytes);
  cJSON_AddNumberToObject(o, "parameter_modules", (double)si->param_modules);
  cJSON_AddNumberToObject(o, "gradient_blocks", (double)si->grads);
  cJSON_AddNumberToObject(o, "gradient_bytes", (double)si->grad_bytes);
  cJSON_AddNumberToObject(o, "state_blocks", (double)si->state_blocks);
  cJSON_AddNumberToObject(o, "state_bytes", (double)si->state_bytes);
  cJSON_AddBoolToObject(o, "state_from_events", si->state_from_events);
  cJSON_AddNumberToObject(o, "autocast_cast_blocks", (double)si->cast_blocks);
  cJSON_AddNumberToObject(o, "setup_blocks", (double)si->setup_blocks);
  cJSON_AddNumberToObject(o, "setup_bytes", (double)si->setup_bytes);
  cJSON_AddNumberToObject(o, "recorded_ranks", si->recorded_ranks);
  cJSON_AddStringToObject(o, "init", a->so.meta_init ? "meta" : "gpu");
  cJSON_AddNumberToObject(o, "detected_ranks", si->detected_ranks);
  int rec = a->so.recorded_bytes ? a->so.recorded_bytes : 4, orig = a->so.orig_bytes ? a->so.orig_bytes : rec;
  int pb = a->so.param_bytes ? a->so.param_bytes : orig;
  cJSON_AddNumberToObject(o, "recorded_element_bytes", rec);
  cJSON_AddNumberToObject(o, "orig_element_bytes", orig);
  cJSON_AddNumberToObject(o, "param_element_bytes", pb);
  cJSON_AddNumberToObject(o, "reduce_element_bytes", a->so.reduce_bytes ? a->so.reduce_bytes : pb);
  cJSON_AddNumberToObject(o, "bucket_mb", a->so.bucket_mb);
  cJSON_AddBoolToObject(o, "gradient_as_bucket_view", a->so.bucket_view);
  cJSON_AddNumberToObject(o, "reduce_bucket_size", (double)a->so.reduce_bucket);
  cJSON_AddBoolToObject(o, "overlap_comm", a->so.overlap_comm);
  cJSON_AddStringToObject(o, "left_out", "NCCL's own buffers and the communicator's workspace (outside PyTorch's allocator)");
  return o;
}

static cJSON *json_advice_row(const ms_predict *m, const ms_advice *adv, int i) {
  const ms_advice_row *r = &adv->row[i];
  cJSON *j = cJSON_CreateObject();
  char text[3300];
  advice_text(m, r, text, sizeof text);
  cJSON_AddNumberToObject(j, "rank", i + 1);
  cJSON_AddStringToObject(j, "kind", advice_kinds[r->kind]);
  cJSON_AddBoolToObject(j, "ranks_searched", r->searched);
  cJSON_AddStringToObject(j, "description", text);
  cJSON_AddBoolToObject(j, "fits", r->fits);
  add_setting(j, &r->at.config, r->kind == MS_ADVICE_NONE);
  add_change(j, m, &r->at.change);
  cJSON_AddNumberToObject(j, "peak_allocated_bytes", (double)peak_allocated(&r->at));
  cJSON_AddNumberToObject(j, "peak_reserved_bytes", (double)peak_reserved(&r->at));
  cJSON_AddNumberToObject(j, "external_bytes", (double)external_peak(&r->at));
  if (adv->searched && !r->largest.failed && r->largest.at) {
    cJSON *l = cJSON_AddObjectToObject(j, "largest_that_fits");
    cJSON_AddNumberToObject(l, "at", (double)r->largest.at);
    cJSON_AddNumberToObject(l, "peak_allocated_bytes", (double)peak_allocated(&r->largest));
    cJSON_AddNumberToObject(l, "peak_reserved_bytes", (double)peak_reserved(&r->largest));
    cJSON_AddNumberToObject(l, "external_bytes", (double)external_peak(&r->largest));
  } else {
    cJSON_AddNullToObject(j, "largest_that_fits");
  }
  if (r->at.failed) cJSON_AddStringToObject(j, "error", r->at.error);
  return j;
}

/* The modules found to checkpoint (advice's "modules"; null when --checkpoint named them). */
static cJSON *json_candidates(const ms_candidates *f) {
  if (!f) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "found_in", f->module_events ? "module events" : "python frames");
  cJSON *list = cJSON_AddArrayToObject(o, "considered");
  for (int i = 0; i < f->n; i++) {
    const ms_candidate *c = &f->c[i];
    cJSON *x = cJSON_CreateObject();
    cJSON_AddItemToArray(list, x);
    cJSON_AddNumberToObject(x, "rank", i + 1);
    cJSON_AddStringToObject(x, "module", c->module.shown);
    cJSON_AddStringToObject(x, "pattern", c->module.pattern);
    cJSON_AddNumberToObject(x, "paths", c->module.paths);
    cJSON_AddNumberToObject(x, "instances", c->instances);
    cJSON_AddNumberToObject(x, "calls", (double)c->calls);
    cJSON_AddNumberToObject(x, "saved_bytes", (double)c->saved_bytes);
    cJSON_AddNumberToObject(x, "freed_bytes", (double)c->freed_bytes);
    cJSON_AddNumberToObject(x, "forward_ns", (double)c->forward_ns);
    if (c->forward_ns > 0) cJSON_AddNumberToObject(x, "freed_bytes_per_s", c->bytes_per_s);
    else cJSON_AddNullToObject(x, "freed_bytes_per_s");
    cJSON_AddBoolToObject(x, "tried", c->tried > 0);
  }
  return o;
}

static cJSON *json_advice(const ms_predict *m, const ms_advice *adv) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "modules", json_candidates(ms_predict_candidates(m)));
  cJSON_AddNumberToObject(o, "at", (double)adv->at);
  cJSON_AddNumberToObject(o, "capacity_bytes", (double)adv->capacity);
  cJSON_AddBoolToObject(o, "searched", adv->searched);
  cJSON *list = cJSON_AddArrayToObject(o, "changes");
  for (int i = 0; i < adv->n; i++) cJSON_AddItemToArray(list, json_advice_row(m, adv, i));
  if (adv->best >= 0) cJSON_AddItemToObject(o, "best", json_advice_row(m, adv, adv->best));
  else cJSON_AddNullToObject(o, "best");
  return o;
}

static cJSON *json_prediction(const ms_predict *m, const ms_replay_result *r, bool recorded) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "at", (double)r->at);
  add_setting(j, &r->config, recorded);
  add_change(j, m, &r->change);
  cJSON_AddBoolToObject(j, "changed", ms_change_any(&r->change));
  int64_t pk = ms_replay_worst_peak(r), at_peak = r->ndevices > 0 ? r->dev[ms_replay_worst_device(r)].allocated_at_peak : 0;
  cJSON_AddNumberToObject(j, "peak_allocated_bytes", (double)peak_allocated(r));
  cJSON_AddNumberToObject(j, "peak_reserved_bytes", (double)peak_reserved(r));
  cJSON_AddNumberToObject(j, "fragmentation_bytes", (double)(pk - at_peak));
  cJSON_AddNumberToObject(j, "device_allocs", (double)ms_replay_sum(r, offsetof(ms_replay_device, device_allocs)));
  cJSON_AddNumberToObject(j, "external_bytes", (double)external_peak(r));
  cJSON_AddNumberToObject(j, "card_peak_bytes", (double)pk);
  cJSON_AddBoolToObject(j, "fits", ms_replay_fits(r));
  cJSON *devs = cJSON_AddArrayToObject(j, "devices");
  for (int i = 0; i < r->ndevices; i++) {
    if (!r->dev[i].used) continue;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToArray(devs, d);
    cJSON_AddNumberToObject(d, "device", i);
    cJSON_AddNumberToObject(d, "peak_allocated_bytes", (double)r->dev[i].allocator_peak_allocated);
    cJSON_AddNumberToObject(d, "peak_reserved_bytes", (double)r->dev[i].allocator_peak_reserved);
    cJSON_AddNumberToObject(d, "external_bytes", (double)r->dev[i].external_peak);
  }
  if (r->failed) cJSON_AddStringToObject(j, "error", r->error);
  else cJSON_AddNullToObject(j, "error");
  return j;
}

static void json_note(const char *note, void *arg) { cJSON_AddItemToArray((cJSON *)arg, cJSON_CreateString(note)); }

/* smallest_fitting_ranks: per strategy --shard names, the smallest N that fits the card (null:
 * none), whether it was searched, the Ns tried, why the search stopped. */
static cJSON *json_outcomes(const predict_args *a, const ms_sweep *pred, int nconf, int nchange, const ms_advice *adv) {
  static const char *const stops[] = {"searching", "fits", "peak_not_falling", "limit", "failed"};
  shard_outcome x[MS_SHARDS];
  int n = shard_outcomes(a, pred, nconf, nchange, adv, x);
  cJSON *list = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    cJSON *j = cJSON_CreateObject(), *tried = cJSON_CreateArray();
    cJSON_AddItemToArray(list, j);
    cJSON_AddStringToObject(j, "strategy", ms_shard_name(x[i].strategy));
    cJSON_AddNumberToObject(j, "at", (double)(adv ? adv->at : a->at[0]));
    if (x[i].fewest) cJSON_AddNumberToObject(j, "ranks", x[i].fewest);
    else cJSON_AddNullToObject(j, "ranks");
    cJSON_AddBoolToObject(j, "searched", x[i].searched);
    for (int k = 0; k < x[i].ntried; k++) cJSON_AddItemToArray(tried, cJSON_CreateNumber(x[i].tried[k]));
    cJSON_AddItemToObject(j, "tried", tried);
    if (x[i].searched) {
      char why[512];
      ms_fewest_why(&x[i].search, why, sizeof why);
      cJSON_AddStringToObject(j, "stopped", stops[x[i].search.stop]);
      cJSON_AddStringToObject(j, "why", why);
    } else {
      cJSON_AddStringToObject(j, "stopped", x[i].fewest ? "fits" : "all_given_tried");
      cJSON_AddNullToObject(j, "why");
    }
  }
  return list;
}

/* The answer as JSON (docs/predict.md, "JSON"): the predictions at each size (pred, NULL: none),
 * the largest sizes that fit (fit, NULL: none), the advice (adv, NULL: none). NULL when out of
 * memory. */
static cJSON *answer_json(const ms_predict *m, const predict_args *a, uint64_t card, const char *recorded_line,
                          const ms_sweep *pred, int nconf, int nchange, const ms_sweep *fit, const ms_advice *adv) {
  cJSON *o = json_model(ms_predict_info_of(m), card, recorded_line, a->size_given), *list = cJSON_AddArrayToObject(o, "predictions");
  cJSON_AddItemToObject(o, "what_if", json_whatif(m, a));
  cJSON_AddItemToObject(o, "shard", json_shard(m, a));
  for (int at = 0; pred && at < a->nat; at++)
    for (int h = 0; h < nchange; h++) {
      const ms_replay_result *rows = &pred->results[(at * nchange + h) * nconf];
      int order[MS_SWEEP_GRID_ROWS];
      ms_replay_rank(rows, nconf, order);
      for (int k = 0; k < nconf; k++) cJSON_AddItemToArray(list, json_prediction(m, &rows[order[k]], order[k] == 0));
    }
  cJSON *fits_list = cJSON_AddArrayToObject(o, "largest_that_fits");
  for (int k = 0; fit && k < fit->nrows; k++) {
    const ms_replay_result *r = &fit->results[fit->order[k]];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToArray(fits_list, j);
    add_setting(j, &r->config, fit->order[k] % nconf == 0);
    add_change(j, m, &r->change);
    if (r->at && !r->failed) {
      cJSON_AddNumberToObject(j, "at", (double)r->at);
      cJSON_AddNumberToObject(j, "peak_allocated_bytes", (double)peak_allocated(r));
      cJSON_AddNumberToObject(j, "peak_reserved_bytes", (double)peak_reserved(r));
      cJSON_AddNumberToObject(j, "external_bytes", (double)external_peak(r));
    } else {
      cJSON_AddNullToObject(j, "at");
    }
    if (r->failed) cJSON_AddStringToObject(j, "error", r->error);
  }
  if (fit) {
    cJSON_AddNumberToObject(o, "fit_capacity_bytes", (double)a->base.capacity);
    const ms_replay_result *best = &fit->results[fit->order[0]];
    if (best->at && !best->failed) {
      cJSON *b = cJSON_AddObjectToObject(o, "best_fit");
      add_setting(b, &best->config, fit->order[0] == 0);
      cJSON_AddStringToObject(b, "strategy", ms_shard_name(best->change.strategy));
      cJSON_AddNumberToObject(b, "ranks", best->change.strategy ? best->change.ranks : 1);
      cJSON_AddNumberToObject(b, "at", (double)best->at);
    } else {
      cJSON_AddNullToObject(o, "best_fit");
    }
  }
  if (adv) cJSON_AddItemToObject(o, "advice", json_advice(m, adv));
  if ((pred || adv) && a->nshards && a->card_option)
    cJSON_AddItemToObject(o, "smallest_fitting_ranks", json_outcomes(a, pred, nconf, nchange, adv));
  cJSON *notes = cJSON_AddArrayToObject(o, "notes");
  const ms_sweep *sweeps[2] = {pred, fit};
  collect_notes(m, sweeps, 2, json_note, notes);
  if (a->one_run && a->card_option && !a->advise)
    json_note("one run: the prediction is at its own size on the card; the largest size that fits needs runs at two sizes", notes);
  if (a->fit_note[0]) json_note(a->fit_note, notes);
  if (!o || !notes) { /* cJSON's adders fail quietly: an object without its last key is out of memory */
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* ---- the answer, as a page ---------------------------------------------------------------- */

#define PAGE_MAX 48 /* histories drawn: one per size (with --shard one per size, strategy and N), or the advice's two */

/* The page (--html): the base run's memory over time above each history the answer is about,
 * replayed again in this process to draw it (engine.c's timeline), on the device whose peaks the
 * answer gives. Which histories: each --at size as changed (with --shard: as recorded, then rank
 * 0's under each strategy and N), under the first setting (the recorded
 * ones with --set over them); with --advise, the size as recorded and with the smallest change
 * that fits; with only a card, the largest size that fits under its best setting. 0, or 1. */
static int write_page(ms_predict *m, const predict_args *a, const cJSON *answer, int nconf, int nchange, const ms_sweep *pred, const ms_sweep *fit, const ms_advice *adv) {
  const ms_predict_info *in = ms_predict_info_of(m);
  const ms_replay_result *rows[PAGE_MAX];
  const char *why[PAGE_MAX];
  char whys[PAGE_MAX][64];
  int n = 0;
  for (int k = 0; pred && k < a->nat; k++) {
    /* by row: the first setting, the change; with --shard each strategy and N, the program on one GPU above them */
    for (int h = a->nshards ? 0 : nchange - 1; h < nchange && n < PAGE_MAX - 2; h++, n++) {
      rows[n] = &pred->results[(k * nchange + h) * nconf];
      char prog[40] = "";
      if (a->nshards) program_label(&rows[n]->change, prog, sizeof prog);
      if (a->one_run && !a->size_given) snprintf(whys[n], sizeof whys[n], "its own size%s%s", prog[0] ? ", " : "", prog);
      else snprintf(whys[n], sizeof whys[n], "--at %lld%s%s", (long long)a->at[k], prog[0] ? ", " : "", prog);
      why[n] = whys[n];
    }
  }
  for (int i = 0; adv && i < adv->n; i++) /* the size as recorded, then the smallest change that fits */
    if (adv->row[i].kind == MS_ADVICE_NONE) rows[n] = &adv->row[i].at, why[n++] = "--advise: the size as recorded";
  if (adv && adv->best >= 0 && adv->row[adv->best].kind != MS_ADVICE_NONE)
    rows[n] = &adv->row[adv->best].at, why[n++] = "--advise: the smallest change that fits";
  if (!pred && fit && fit->results[fit->order[0]].at && !fit->results[fit->order[0]].failed)
    rows[n] = &fit->results[fit->order[0]], why[n++] = "--capacity: the largest size that fits, under its best setting";
  ms_replay_timeline *tl = calloc((size_t)(n ? n : 1), sizeof *tl);
  ms_replay_result *res = calloc((size_t)(n ? n : 1), sizeof *res);
  ms_prediction_timeline drawn[PAGE_MAX];
  ms_snapshot s;
  ms_analysis rec;
  bool opened = false, analyzed = false;
  int rc = 1;
  if (!tl || !res) {
    fprintf(stderr, "error: predict: out of memory\n");
    goto cleanup;
  }
  for (int i = 0; i < n; i++) {
    if (ms_predict_timeline(m, &rows[i]->config, &rows[i]->change, rows[i]->at, ms_replay_worst_device(rows[i]), &tl[i], &res[i]) != 0) {
      fprintf(stderr, "error: predict: the replay at %lld drawn for the page: %s\n", (long long)rows[i]->at, res[i].error);
      goto cleanup;
    }
    drawn[i] = (ms_prediction_timeline){&tl[i], &res[i], ms_replay_fits(&res[i]), why[i], ms_predict_whatif_for(m, &rows[i]->change)};
  }
  const ms_predict_run *base = &in->run[in->base];
  int device = n ? tl[0].device : 0;
  if (ms_open(&s, base->path) != 0) {
    fprintf(stderr, "error: %s\n", s.error);
    goto cleanup;
  }
  opened = true;
  if (base->devices > 1) ms_only_device(&s, device);
  if (ms_analyze(&s, &rec, NULL) != 0) {
    fprintf(stderr, "error: %s\n", s.error);
    goto cleanup;
  }
  analyzed = true;
  const char *inputs[MS_PREDICT_MAX_RUNS];
  for (int r = 0; r < in->nruns; r++) inputs[r] = in->run[r].path;
  ms_prediction_page pg = {answer, &rec, base->at, device, base->devices, a->base.capacity, drawn, n};
  rc = ms_write_prediction_html(a->html, &pg, inputs, (size_t)in->nruns);

cleanup:
  if (analyzed) ms_analysis_free(&rec);
  if (opened) ms_close(&s);
  free(tl);
  free(res);
  return rc;
}

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
  a.change.optimizer = MS_OPT_KEEP;
  ms_predict *m = NULL;
  ms_sweep pred, fit;
  ms_advice adv;
  memset(&pred, 0, sizeof pred);
  memset(&fit, 0, sizeof fit);
  memset(&adv, 0, sizeof adv);
  bool have_pred = false, have_fit = false, have_adv = false;
  char err[2048];
  ms_replay_config configs[MS_SWEEP_GRID_ROWS];
  int nconf = 1, rc = parse_args(argc, argv, &a);
  if (rc != 0) goto cleanup;
  const char *inputs[MS_PREDICT_MAX_RUNS + 1];
  for (int i = 0; i < a.nruns; i++) inputs[i] = a.runs[i].path;
  if (a.html && ms_refuse_overwrite("--html", a.html, inputs, (size_t)a.nruns)) { /* before the work, not after */
    rc = 1;
    goto cleanup;
  }
  bool progress = isatty(2);
  a.so.units = a.units, a.so.nunits = a.nunits;
  if (a.so.bucket_mb <= 0) a.so.bucket_mb = 25;
  if (a.so.reduce_bucket <= 0) a.so.reduce_bucket = 500000000;
  if (a.so.allgather_bucket <= 0) a.so.allgather_bucket = 500000000;
  ms_predict_options po = {a.checkpoint, a.ncheckpoint, a.change.optimizer != MS_OPT_KEEP || a.advise, a.advise, progress,
                           a.nshards ? &a.so : NULL};
  m = ms_predict_new(a.runs, a.nruns, &po, err, sizeof err);
  if (!m) {
    fprintf(stderr, "error: %s\n", err);
    rc = 1;
    goto cleanup;
  }
  const ms_predict_info *in = ms_predict_info_of(m);
  const ms_whatif *w = ms_predict_whatif(m);
  if (a.change.optimizer != MS_OPT_KEEP && ms_whatif_info_of(w)->steps == 0) {
    fprintf(stderr, "error: predict: cannot change the optimizer: no optimizer step in the history of '%s' (its stacks name "
            "none, and it has no step events)\n", in->run[in->base].shown);
    rc = 1;
    goto cleanup;
  }
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
  bool changed = ms_change_any(&a.change);
  ms_change changes[1 + MAX_SHARDS] = {{0, 0, MS_OPT_KEEP, 0, MS_SHARD_NONE, 0}, a.change};
  int nchange = changed && !a.sweep ? 2 : 1; /* without the sweep: as recorded beside the change */
  const ms_change *row_changes = nchange == 2 ? changes : &changes[1];
  ms_change search[MS_SHARDS]; /* the strategies whose N is searched, with the change */
  int given = 0;                /* strategies and Ns given: changes[1..given] */
  if (a.nshards) {
    for (int i = 0; i < a.nshards; i++) { /* each strategy and N given, with the change */
      if (!a.shard[i].ranks) continue;
      changes[1 + given] = a.change;
      changes[1 + given].strategy = a.shard[i].strategy, changes[1 + given++].ranks = a.shard[i].ranks;
    }
    for (int i = 0; i < a.nshards; i++) {
      bool seen = false;
      for (int k = 0; k < a.nfound; k++) seen |= search[k].strategy == a.shard[i].strategy;
      if (a.shard[i].ranks || seen) continue;
      search[a.nfound] = a.change;
      search[a.nfound++].strategy = a.shard[i].strategy;
    }
    nchange = a.sweep ? given : 1 + given, row_changes = a.sweep ? &changes[1] : changes;
  }
  if (a.advise) {
    o.progress = progress ? "predict: changes tried" : NULL;
    if (ms_advise_shards(m, a.at[0], &configs[0], a.shard, a.nshards, &o, &adv, err, sizeof err) != 0) {
      fprintf(stderr, "error: predict: %s\n", err);
      rc = 1;
      goto cleanup;
    }
    have_adv = true;
  } else {
    if (a.nat && a.nfound) rc = ms_predict_fewest(m, a.at, a.nat, configs, nconf, row_changes, nchange, search, a.nfound, a.found,
                                                 &o, &pred, &nchange, err, sizeof err);
    else if (a.nat) rc = ms_predict_at(m, a.at, a.nat, configs, nconf, row_changes, nchange, &o, &pred, err, sizeof err);
    if (rc != 0) {
      fprintf(stderr, "error: predict: %s\n", err);
      rc = 1;
      goto cleanup;
    }
    have_pred = a.nat > 0;
    /* the largest size that fits: with the change, or with each strategy and N given, then each N found */
    ms_change fit_changes[MAX_SHARDS + MS_SHARDS];
    int wanted = 0, most = MAX_FIT_ROWS / nconf > 0 ? MAX_FIT_ROWS / nconf : 1;
    if (!a.nshards) fit_changes[wanted++] = a.change;
    for (int i = 0; i < given; i++) fit_changes[wanted++] = changes[1 + i];
    for (int i = 0; i < a.nfound; i++) {
      bool seen = false;
      for (int k = 0; k < wanted; k++)
        seen |= fit_changes[k].strategy == a.found[i].strategy && fit_changes[k].ranks == a.found[i].fewest;
      if (a.found[i].fewest && !seen) fit_changes[wanted] = search[i], fit_changes[wanted++].ranks = a.found[i].fewest;
    }
    a.nfit = wanted < most ? wanted : most;
    if (wanted > most && a.card_option && !a.one_run) {
      int len = snprintf(a.fit_note, sizeof a.fit_note, "the largest size that fits is searched with the first %d of the %d "
                         "strategies and Ns (at most %d searches, one per strategy and N and setting, each about 2 "
                         "log2(size) replays), not with", most, wanted, MAX_FIT_ROWS);
      for (int k = most; k < wanted && len > 0 && (size_t)len < sizeof a.fit_note; k++)
        len += snprintf(a.fit_note + len, sizeof a.fit_note - (size_t)len, "%s %s:%d", k > most ? "," : "",
                        ms_shard_name(fit_changes[k].strategy), (int)fit_changes[k].ranks);
    }
    o.progress = progress ? "predict: settings searched" : NULL;
    have_fit = a.card_option != NULL && !a.one_run && a.nfit > 0;
    if (have_fit && ms_predict_capacity(m, fit_changes, a.nfit, configs, nconf, &o, &fit, err, sizeof err) != 0) {
      have_fit = false;
      fprintf(stderr, "error: predict: %s\n", err);
      rc = 1;
      goto cleanup;
    }
  }
  uint64_t card = a.base.capacity ? a.base.capacity : ms_replay_recorded_capacity(p);
  char rec[1200];
  ms_replay_describe_config(&recorded, rec, sizeof rec);
  const ms_sweep *sweeps[2] = {have_pred ? &pred : NULL, have_fit ? &fit : NULL};
  if (a.json || a.html) {
    char line[1024];
    ms_replay_conf_line(&recorded, line, sizeof line);
    cJSON *answer = answer_json(m, &a, card, line, sweeps[0], nconf, nchange, sweeps[1], have_adv ? &adv : NULL);
    char *text = answer && a.json ? cJSON_PrintUnformatted(answer) : NULL;
    if (!answer || (a.json && !text)) {
      fprintf(stderr, "error: predict: out of memory writing JSON\n");
      rc = 1;
    } else if (a.json) {
      printf("%s\n", text);
    } else {
      rc = write_page(m, &a, answer, nconf, nchange, sweeps[0], sweeps[1], have_adv ? &adv : NULL);
    }
    cJSON_free(text);
    cJSON_Delete(answer);
    if (rc != 0) goto cleanup;
  } else {
    print_model(in, card, a.base.capacity != 0, rec, a.size_given);
    print_change(m, &a.change, in, &a);
    print_shard(m, &a);
    if (have_pred) print_predictions(&pred, a.at, a.nat, nconf, nchange, a.one_run && !a.size_given);
    shard_outcome outcomes[MS_SHARDS];
    int noutcomes = (have_pred || have_adv) && a.nshards && a.card_option
                        ? shard_outcomes(&a, have_pred ? &pred : NULL, nconf, nchange, have_adv ? &adv : NULL, outcomes) : 0;
    char at[40] = "";
    if (!have_adv && (!a.one_run || a.size_given)) snprintf(at, sizeof at, " at %lld", (long long)a.at[0]);
    if (have_pred) print_smallest_n(outcomes, noutcomes, a.base.capacity, at);
    if (have_fit) print_capacity(&fit, a.base.capacity, a.nfit, nconf);
    if (have_adv) print_advice(m, &adv);
    if (have_adv) print_smallest_n(outcomes, noutcomes, a.base.capacity, at);
    external_note();
    collect_notes(m, sweeps, 2, print_note, NULL);
    if (a.fit_note[0]) print_note(a.fit_note, NULL);
    if (a.one_run && a.card_option && !a.advise)
      print_note("one run: the prediction is at its own size on the card; the largest size that fits needs runs at two sizes", NULL);
  }
  rc = row_errors(have_pred ? &pred : NULL) | row_errors(have_fit ? &fit : NULL);
  if (rc == 0) rc = ms_output_status();

cleanup:
  if (have_pred) ms_sweep_free(&pred);
  if (have_fit) ms_sweep_free(&fit);
  if (have_adv) ms_advice_free(&adv);
  ms_predict_free(m);
  for (int i = 0; i < a.nruns; i++) free((char *)a.runs[i].path);
  for (int i = 0; i < a.nlists; i++) free(a.lists[i]);
  return rc;
}

const ms_command ms_predict_command = {"predict", cmd_predict,
     "memsnap predict A.db=SIZE B.db=SIZE [C.db=SIZE] [--at N]... [--capacity SIZE | --device CARD]\n"
     "                [--set KEY=VALUE]... [--sweep [--jobs N]] [--checkpoint MODULES]... [--optimizer NAME]\n"
     "                [--advise] [--shard STRATEGY[:N[,N]...]]... [--units PATTERNS] [--param-dtype DTYPE]\n"
     "                [--reduce-dtype DTYPE] [--recorded-shard fsdp2:N] [--json | --html OUT.html]\n"
     "                            peaks at sizes not run (batch, sequence length) from runs at two or\n"
     "                            three, and the largest size that fits a card; as if modules were\n"
     "                            checkpointed or another optimizer used (one run: at its own size);\n"
     "                            what makes a size fit (docs/predict.md)",
     "  A.db=SIZE           a run of the program recorded at SIZE (a whole number: the batch, the\n"
     "                      sequence length...); two runs at different sizes (three: laws of degree 2)\n"
     "  --at N              a size to predict peak allocated and reserved memory at (repeatable, 16)\n"
     "  --capacity SIZE     the card's memory (40G, 80GiB, 24000M): the predictions run on it, and the\n"
     "                      largest size that fits it is searched under each setting (with --shard:\n"
     "                      for each strategy and N given or found; 64 searches at most)\n"
     "  --device CARD       the same with a card's memory by name: H100, H200, A100-80GB, A100-40GB,\n"
     "                      A10G, V100-32GB, V100-16GB, T4, RTX-4090, RTX-3090\n"
     "  --set KEY=VALUE     a setting over the recorded ones, as memsnap replay takes it (repeatable)\n"
     "  --sweep             every setting of memsnap replay's sweep (20), ranked at each size\n"
     "  --jobs N            worker processes (default: one per core)\n"
     "  --checkpoint MODULES  as if these modules' forwards were checkpointed (repeatable, or a\n"
     "                      comma list): class names as the Python frames give them (GPT2Block), or\n"
     "                      module paths with globs (transformer.h.*; layer*: the root's children)\n"
     "                      where the history has module events\n"
     "  --optimizer NAME    as if another optimizer held the state: sgd, sgd-momentum, adam, adamw,\n"
     "                      adagrad, rmsprop, adafactor, or bytes per parameter (8B)\n"
     "  --advise            with one --at N and a card: the smallest changes that make N fit (settings,\n"
     "                      the fewest instances checkpointed of the modules it finds, or of those\n"
     "                      --checkpoint names; lighter optimizers), and the largest size with each\n"
     "  --shard STRATEGY:N  rank 0's peaks under data parallelism over N ranks: fsdp2, ddp, zero1,\n"
     "                      zero2, zero3 (a list: fsdp2:2,4,8; repeatable), from the one-GPU run's\n"
     "                      parameter, gradient, state and module events\n"
     "  --shard STRATEGY    with a card: the fewest ranks that fit it, searched (N = 1, 2, 4, ... 1024,\n"
     "                      stopping when rank 0's peak stops falling); STRATEGY:auto the same; all:\n"
     "                      each strategy\n"
     "  --units PATTERNS    FSDP2's units beside the root (classes, GPT2Block, or module paths; default:\n"
     "                      each instance of the repeated block)\n"
     "  --param-dtype D, --reduce-dtype D  FSDP2's MixedPrecisionPolicy: fp32, bf16, fp16\n"
     "  --recorded-dtype D  the recorded parameters' dtype (fp32)\n"
     "  --orig-dtype D      FSDP2's sharded parameters' dtype (the model's at fully_shard; default: recorded)\n"
     "  --shard-init gpu|meta  the model made on the GPU then sharded (gpu, default), or on the meta\n"
     "                      device, sharded, then materialised (meta: no full parameters at set-up)\n"
     "  --bucket-mb MB, --bucket-view  DDP's bucket_cap_mb (25), gradient_as_bucket_view\n"
     "  --reduce-bucket-size N, --allgather-bucket-size N, --overlap-comm  DeepSpeed ZeRO's\n"
     "  --recorded-shard fsdp2:N  the run was FSDP2's at N: predict --shard fsdp2:M from it\n"
     "  --json              the answer as JSON (docs/predict.md)\n"
     "  --html OUT.html     the answer as a self-contained page: its table above the recorded run's\n"
     "                      memory over time and, one above the other on the same scale, each\n"
     "                      predicted history's (replayed), its peaks and the card marked\n"
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
     "  $ memsnap predict b4.db=4 b8.db=8 --capacity 24G --sweep\n"
     "  $ memsnap predict b4.db=4 b8.db=8 --checkpoint GPT2Block --at 32 --capacity 24G --advise\n"
     "  $ memsnap predict b4.db=4 b8.db=8 --at 32 --shard all --device H100\n",
     false};
