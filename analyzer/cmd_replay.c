/* cmd_replay.c: `memsnap replay SNAPSHOT [--set KEY=VALUE]... [--capacity SIZE] [--json]
 * [--sweep [--jobs N]]`: what memsnap's allocator (PyTorch's decisions) would do with a recorded
 * trace under other settings or on another card (replay_engine.c does the replaying), as text or
 * JSON; --sweep tries a documented grid of settings in parallel (one worker process per core)
 * and ranks them, the best first, with the PYTORCH_CUDA_ALLOC_CONF line to use.
 *
 * The replay runs libmemsnap on its simulated device inside this process (or the sweep's
 * workers): no GPU, no CUDA driver is touched.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analyzer.h"
#include "commands.h"

/* The sweep's grid (docs/replay.md lists it): each row on top of the --set settings. The first
 * row, the recorded settings, is added in front. */
static const char *const grid[] = {
    "expandable_segments=True",
    "max_split_size_mb=64",
    "max_split_size_mb=128",
    "max_split_size_mb=256",
    "max_split_size_mb=512",
    "max_split_size_mb=1024",
    "roundup_power2_divisions=2",
    "roundup_power2_divisions=4",
    "roundup_power2_divisions=8",
    "roundup_power2_divisions=16",
    "roundup_power2_divisions=[256:1,512:2,1024:4,>:8]",
    "max_split_size_mb=128,roundup_power2_divisions=4",
    "max_split_size_mb=256,roundup_power2_divisions=4",
    "max_split_size_mb=512,roundup_power2_divisions=8",
    "expandable_segments=True,roundup_power2_divisions=4",
    "garbage_collection_threshold=0.6,memory_fraction=0.95",
    "garbage_collection_threshold=0.8,memory_fraction=0.95",
    "max_split_size_mb=256,garbage_collection_threshold=0.8,memory_fraction=0.95",
    "backend=cudaMallocAsync",
};
#define NGRID (sizeof grid / sizeof grid[0])

/* Parses "40G", "512M", "1.5T", "80GB", "80GiB" or bytes. 0 or -1. */
static int parse_capacity(const char *text, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno || !(v > 0) || !isfinite(v)) return -1;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1048576.0; end++; break;
    case 'G': mult = 1073741824.0; end++; break;
    case 'T': mult = 1099511627776.0; end++; break;
    default: break;
  }
  if (mult > 1 && (!strcmp(end, "B") || !strcmp(end, "iB") || !strcmp(end, "b"))) end += strlen(end);
  if (*end || v * mult < (2 << 20) || v * mult > 1125899906842624.0) return -1; /* 2 MiB .. 1 PiB */
  *out = (uint64_t)(v * mult);
  return 0;
}

/* Applies "k=v,k=v" (a grid row) or one "k=v" to c. 0, or -1 with err set. */
static int apply_settings(ms_replay_config *c, const char *list, bool one, char *err, size_t errlen) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *item = buf, *next; item; item = next) {
    next = one ? NULL : strchr(item, ',');
    /* a bracketed value holds commas */
    char *bracket = strchr(item, '[');
    if (next && bracket && bracket < next) next = strchr(bracket, ']') ? strchr(strchr(bracket, ']'), ',') : NULL;
    if (next) *next++ = '\0';
    char *eq = strchr(item, '=');
    if (!eq || eq == item || !eq[1]) {
      snprintf(err, errlen, "'%.100s' is not KEY=VALUE", item);
      return -1;
    }
    *eq = '\0';
    if (ms_replay_config_set(c, item, eq + 1, err, errlen) != 0) return -1;
  }
  return 0;
}

static void describe_config(const ms_replay_config *c, char *out, size_t len) {
  char line[1024];
  ms_replay_conf_line(c, line, sizeof line);
  const char *fraction = ms_replay_config_get(c, "memory_fraction");
  if (fraction) snprintf(out, len, "%s%s(memory fraction %s)", line, line[0] ? " " : "", fraction);
  else snprintf(out, len, "%s", line[0] ? line : "(defaults)");
}

/* ---- the answer, as text ------------------------------------------------------------------ */

static void bytes_cell(int64_t v, char *out, size_t len) { ms_format_bytes(v, out, len); }

static void print_row(const char *label, const char *replay, const char *recorded) {
  printf("  %-34s %20s  %20s\n", label, replay, recorded);
}

static void print_bytes_row(const char *label, int64_t replay, int64_t recorded) {
  char a[32], b[32];
  bytes_cell(replay, a, sizeof a);
  bytes_cell(recorded, b, sizeof b);
  print_row(label, a, b);
}

static void print_count_row(const char *label, int64_t replay, int64_t recorded, bool known) {
  char a[32], b[32];
  snprintf(a, sizeof a, "%lld", (long long)replay);
  snprintf(b, sizeof b, known ? "%lld" : "-", (long long)recorded);
  print_row(label, a, b);
}

static void fragmentation_cell(int64_t reserved, int64_t allocated, char *out, size_t len) {
  char b[32];
  bytes_cell(reserved - allocated, b, sizeof b);
  snprintf(out, len, "%s (%.1f%%)", b, reserved > 0 ? 100.0 * (double)(reserved - allocated) / (double)reserved : 0.0);
}

static void print_oom(const ms_snapshot *s, const ms_replay_device *d) {
  char req[32], al[32], res[32], when[32];
  ms_format_bytes(d->oom_request, req, sizeof req);
  ms_format_bytes(d->oom_allocated, al, sizeof al);
  ms_format_bytes(d->oom_reserved, res, sizeof res);
  ms_format_ns(d->oom_time_ns, when, sizeof when);
  printf("  out of memory: first at event %lld (%s), %s requested with %s allocated and %s reserved%s\n",
         (long long)d->oom_event_id, when, req, al, res, d->oom_was_recorded ? " (as recorded)" : "");
  printf("  %lld allocations failed; what was live then, largest sites first:\n", (long long)d->failed_allocs);
  ms_report_options o = {.max_frames = 3};
  for (int k = 0; k < d->oom_ntop; k++) {
    char b[32];
    ms_format_bytes(d->oom_top_bytes[k], b, sizeof b);
    printf("    %s in %lld blocks\n", b, (long long)d->oom_top_count[k]);
    ms_print_stack(s, d->oom_top_stack[k], NULL, &o, "      ", stdout);
  }
}

static void print_text(const ms_snapshot *s, const ms_replay_result *r, const ms_replay_config *recorded) {
  char conf[1200], rec[1200], cap[32];
  describe_config(&r->config, conf, sizeof conf);
  describe_config(recorded, rec, sizeof rec);
  ms_format_bytes(r->dev[0].capacity, cap, sizeof cap);
  printf("replay of %s\n", s->shown_path);
  printf("  settings   %s\n", conf);
  printf("  recorded   %s\n", rec);
  printf("  capacity   %s per device (simulated)\n", cap);
  printf("  events     %lld read, %lld allocations and frees replayed\n", (long long)r->events, (long long)r->replayed);
  bool any = false;
  for (int i = 0; i < r->ndevices; i++) any |= r->dev[i].used;
  if (!any) printf("\nno allocation in the history and no segment at the snapshot: nothing to replay\n");
  for (int i = 0; i < r->ndevices; i++) {
    const ms_replay_device *d = &r->dev[i];
    if (!d->used) continue;
    char a[48], b[48];
    printf("\ndevice %-29d %20s  %20s\n", i, "replay", "recorded");
    print_bytes_row("peak allocated", d->peak_allocated, d->rec_peak_allocated);
    print_bytes_row("peak reserved", d->peak_reserved, d->rec_peak_reserved);
    fragmentation_cell(d->peak_reserved, d->allocated_at_peak, a, sizeof a);
    fragmentation_cell(d->rec_peak_reserved, d->rec_allocated_at_peak, b, sizeof b);
    print_row("fragmentation at the peak", a, b);
    print_count_row("device allocations (cudaMalloc)", d->device_allocs, d->rec_device_allocs, true);
    print_count_row("device frees (cudaFree)", d->device_frees, d->rec_device_frees, true);
    print_count_row("retries after freeing the cache", d->retries, 0, false);
    print_count_row("segments at the end", d->segments_end, d->rec_segments_end, true);
    print_count_row("out of memory errors", d->ooms, d->rec_ooms, true);
    if (d->oom) print_oom(s, d);
  }
  if (r->empty_caches || r->deferred_frees || r->unknown_frees || r->duplicate_allocs || r->bad_events)
    printf("\nreplayed as recorded: %lld empty_cache calls, %lld frees completed later (record_stream); skipped: "
           "%lld unknown frees, %lld allocations at a live address, %lld bad events\n",
           (long long)r->empty_caches, (long long)r->deferred_frees, (long long)r->unknown_frees,
           (long long)r->duplicate_allocs, (long long)r->bad_events);
  if (r->nnotes) printf("\nnotes:\n");
  for (int i = 0; i < r->nnotes; i++) printf("  - %s\n", r->notes[i]);
}

/* ---- the answer, as JSON ------------------------------------------------------------------ */

static cJSON *json_result(const ms_snapshot *s, const ms_replay_result *r) {
  cJSON *o = cJSON_CreateObject(), *set = cJSON_AddObjectToObject(o, "settings");
  for (int i = 0; i < r->config.n; i++) {
    const char *v = ms_replay_config_get(&r->config, r->config.set[i].key);
    if (v) cJSON_AddStringToObject(set, r->config.set[i].key, v);
  }
  char line[1024];
  ms_replay_conf_line(&r->config, line, sizeof line);
  cJSON_AddStringToObject(o, "pytorch_cuda_alloc_conf", line);
  const char *fraction = ms_replay_config_get(&r->config, "memory_fraction");
  cJSON_AddNumberToObject(o, "memory_fraction", fraction ? strtod(fraction, NULL) : 1.0);
  cJSON_AddNumberToObject(o, "capacity_bytes", (double)r->dev[0].capacity);
  cJSON_AddNumberToObject(o, "events", (double)r->events);
  cJSON_AddNumberToObject(o, "replayed", (double)r->replayed);
  cJSON *devs = cJSON_AddArrayToObject(o, "devices");
  for (int i = 0; i < r->ndevices; i++) {
    const ms_replay_device *d = &r->dev[i];
    if (!d->used) continue;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToArray(devs, j);
    cJSON_AddNumberToObject(j, "device", i);
    cJSON_AddNumberToObject(j, "peak_allocated_bytes", (double)d->peak_allocated);
    cJSON_AddNumberToObject(j, "peak_reserved_bytes", (double)d->peak_reserved);
    cJSON_AddNumberToObject(j, "fragmentation_bytes", (double)(d->peak_reserved - d->allocated_at_peak));
    cJSON_AddNumberToObject(j, "device_allocs", (double)d->device_allocs);
    cJSON_AddNumberToObject(j, "device_frees", (double)d->device_frees);
    cJSON_AddNumberToObject(j, "retries", (double)d->retries);
    cJSON_AddNumberToObject(j, "segments", (double)d->segments_end);
    cJSON_AddNumberToObject(j, "ooms", (double)d->ooms);
    cJSON_AddNumberToObject(j, "failed_allocs", (double)d->failed_allocs);
    if (d->oom) {
      cJSON *oom = cJSON_AddObjectToObject(j, "oom");
      cJSON_AddNumberToObject(oom, "event_id", (double)d->oom_event_id);
      cJSON_AddNumberToObject(oom, "time_ns", (double)d->oom_time_ns);
      cJSON_AddNumberToObject(oom, "requested_bytes", (double)d->oom_request);
      cJSON_AddNumberToObject(oom, "allocated_bytes", (double)d->oom_allocated);
      cJSON_AddNumberToObject(oom, "reserved_bytes", (double)d->oom_reserved);
      cJSON_AddBoolToObject(oom, "recorded", d->oom_was_recorded);
      cJSON *live = cJSON_AddArrayToObject(oom, "live");
      for (int k = 0; k < d->oom_ntop; k++) {
        cJSON *site = cJSON_CreateObject();
        cJSON_AddItemToArray(live, site);
        cJSON_AddNumberToObject(site, "bytes", (double)d->oom_top_bytes[k]);
        cJSON_AddNumberToObject(site, "count", (double)d->oom_top_count[k]);
        cJSON_AddNumberToObject(site, "stack_id", d->oom_top_stack[k]);
        uint32_t ids[8];
        size_t n = ms_stack_frames_that_matter(s, d->oom_top_stack[k], ids, 8);
        cJSON *frames = cJSON_AddArrayToObject(site, "stack");
        for (size_t f = 0; f < n; f++) cJSON_AddItemToArray(frames, cJSON_CreateString(s->frames[ids[f]].short_name));
      }
    } else {
      cJSON_AddNullToObject(j, "oom");
    }
    cJSON *rec = cJSON_AddObjectToObject(j, "recorded");
    cJSON_AddNumberToObject(rec, "peak_allocated_bytes", (double)d->rec_peak_allocated);
    cJSON_AddNumberToObject(rec, "peak_reserved_bytes", (double)d->rec_peak_reserved);
    cJSON_AddNumberToObject(rec, "fragmentation_bytes", (double)(d->rec_peak_reserved - d->rec_allocated_at_peak));
    cJSON_AddNumberToObject(rec, "device_allocs", (double)d->rec_device_allocs);
    cJSON_AddNumberToObject(rec, "device_frees", (double)d->rec_device_frees);
    cJSON_AddNumberToObject(rec, "segments", (double)d->rec_segments_end);
    cJSON_AddNumberToObject(rec, "ooms", (double)d->rec_ooms);
  }
  cJSON_AddNumberToObject(o, "empty_caches", (double)r->empty_caches);
  cJSON_AddNumberToObject(o, "deferred_frees", (double)r->deferred_frees);
  cJSON_AddNumberToObject(o, "preloaded_blocks", (double)r->preloaded_blocks);
  cJSON_AddNumberToObject(o, "unknown_frees", (double)r->unknown_frees);
  cJSON_AddNumberToObject(o, "duplicate_allocs", (double)r->duplicate_allocs);
  cJSON_AddNumberToObject(o, "skipped_events", (double)r->bad_events);
  cJSON *notes = cJSON_AddArrayToObject(o, "notes");
  for (int i = 0; i < r->nnotes; i++) cJSON_AddItemToArray(notes, cJSON_CreateString(r->notes[i]));
  if (r->failed) cJSON_AddStringToObject(o, "error", r->error);
  else cJSON_AddNullToObject(o, "error");
  return o;
}

static int print_json(cJSON *o) {
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!text) {
    fprintf(stderr, "error: replay: out of memory writing JSON\n");
    return 1;
  }
  printf("%s\n", text);
  free(text);
  return 0;
}

/* ---- the sweep ---------------------------------------------------------------------------- */

static int64_t worst_peak(const ms_replay_result *r) {
  int64_t m = 0;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].peak_reserved > m) m = r->dev[i].peak_reserved;
  return m;
}

static int64_t sum_of(const ms_replay_result *r, size_t offset) {
  int64_t t = 0;
  for (int i = 0; i < r->ndevices; i++) t += *(const int64_t *)((const char *)&r->dev[i] + offset);
  return t;
}

static const ms_replay_result *rank_base;
static int cmp_rank(const void *a, const void *b) {
  const ms_replay_result *x = &rank_base[*(const int *)a], *y = &rank_base[*(const int *)b];
  int64_t ox = sum_of(x, offsetof(ms_replay_device, ooms)) != 0, oy = sum_of(y, offsetof(ms_replay_device, ooms)) != 0;
  if (x->failed != y->failed) return x->failed - y->failed;
  if (ox != oy) return ox < oy ? -1 : 1;
  int64_t px = worst_peak(x), py = worst_peak(y);
  if (px != py) return px < py ? -1 : 1;
  int64_t dx = sum_of(x, offsetof(ms_replay_device, device_allocs)), dy = sum_of(y, offsetof(ms_replay_device, device_allocs));
  if (dx != dy) return dx < dy ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

/* Runs rows [w, w + jobs, ...] in a worker process; results land in shared memory. */
static void sweep_worker(const char *path, ms_replay_plan *p, const ms_replay_config *rows, int nrows, int w, int jobs,
                         ms_replay_result *out, volatile int *done) {
  ms_snapshot s;
  if (ms_open(&s, path) != 0 || ms_load_stacks(&s) != 0) _exit(3);
  for (int i = w; i < nrows; i += jobs) {
    ms_replay_run(&s, p, &rows[i], &out[i]);
    __atomic_add_fetch(done, 1, __ATOMIC_SEQ_CST);
  }
  ms_close(&s);
  fflush(NULL);
  _exit(0);
}

static int run_sweep(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *base, const ms_replay_config *recorded,
                     bool json, int jobs) {
  int nrows = (int)NGRID + 1;
  ms_replay_config rows[NGRID + 1];
  rows[0] = *recorded;
  for (int i = 0; i < base->n; i++) ms_replay_config_set(&rows[0], base->set[i].key, base->set[i].value, NULL, 0);
  rows[0].capacity = base->capacity;
  for (size_t g = 0; g < NGRID; g++) {
    char err[256];
    rows[g + 1] = *base;
    if (apply_settings(&rows[g + 1], grid[g], false, err, sizeof err) != 0) {
      fprintf(stderr, "error: replay: sweep row '%s': %s\n", grid[g], err);
      return 1;
    }
  }
  size_t bytes = sizeof(ms_replay_result) * (size_t)nrows + 64;
  void *shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    fprintf(stderr, "error: replay: cannot map shared memory: %s\n", strerror(errno));
    return 1;
  }
  volatile int *done = shared;
  ms_replay_result *res = (ms_replay_result *)((char *)shared + 64);
  for (int i = 0; i < nrows; i++) res[i].failed = true, snprintf(res[i].error, sizeof res[i].error, "not run");
  if (jobs > nrows) jobs = nrows;
  int started = 0;
  fflush(NULL);
  for (int w = 0; w < jobs; w++) {
    pid_t pid = fork();
    if (pid == 0) sweep_worker(s->path, p, rows, nrows, w, jobs, res, done);
    if (pid < 0) break;
    started++;
  }
  if (started == 0) {
    fprintf(stderr, "error: replay: cannot start workers: %s\n", strerror(errno));
    munmap(shared, bytes);
    return 1;
  }
  if (started < jobs) /* run what the missing workers had, here, serially */
    for (int w = started; w < jobs; w++)
      for (int i = w; i < nrows; i += jobs) ms_replay_run(s, p, &rows[i], &res[i]);
  bool progress = isatty(2);
  int alive = started, shown = -1;
  while (alive > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      alive--;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "memsnap: replay: a sweep worker %s %d; its settings are marked failed\n",
                WIFSIGNALED(status) ? "died of signal" : "exited with", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (progress && *done != shown) {
      shown = *done;
      fprintf(stderr, "\rsweep: %d of %d settings replayed", shown, nrows);
    }
    usleep(20000);
  }
  if (progress) fprintf(stderr, "\r%40s\r", "");
  int order[NGRID + 1];
  for (int i = 0; i < nrows; i++) order[i] = i;
  rank_base = res;
  qsort(order, (size_t)nrows, sizeof order[0], cmp_rank);
  const ms_replay_result *rec = &res[0];
  int rc = 0;
  if (json) {
    cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "ranked");
    cJSON_AddStringToObject(o, "snapshot", s->shown_path);
    for (int k = 0; k < nrows; k++) {
      cJSON *j = json_result(s, &res[order[k]]);
      cJSON_AddNumberToObject(j, "rank", k + 1);
      cJSON_AddBoolToObject(j, "recorded_settings", order[k] == 0);
      cJSON_AddItemToArray(list, j);
    }
    rc = print_json(o);
  } else {
    char cap[32], recpeak[32];
    ms_format_bytes(res[0].dev[0].capacity, cap, sizeof cap);
    ms_format_bytes(worst_peak(rec), recpeak, sizeof recpeak);
    printf("sweep of %s: %d settings on %s per device, %d at a time; recorded peak reserved %s\n", s->shown_path, nrows,
           cap, started, recpeak);
    printf("%4s  %12s  %8s  %20s  %10s  %7s  %4s  %s\n", "rank", "peak reserved", "vs rec.", "fragmentation at peak",
           "cudaMalloc", "retries", "OOM", "PYTORCH_CUDA_ALLOC_CONF");
    for (int k = 0; k < nrows; k++) {
      const ms_replay_result *r = &res[order[k]];
      char peak[32], frag[48], conf[1200], delta[16];
      int64_t pk = worst_peak(r), alloc_at = 0;
      for (int i = 0; i < r->ndevices; i++)
        if (r->dev[i].peak_reserved == pk) alloc_at = r->dev[i].allocated_at_peak;
      ms_format_bytes(pk, peak, sizeof peak);
      fragmentation_cell(pk, alloc_at, frag, sizeof frag);
      describe_config(&r->config, conf, sizeof conf);
      int64_t rp = worst_peak(rec);
      if (rp > 0) snprintf(delta, sizeof delta, "%+.1f%%", 100.0 * (double)(pk - rp) / (double)rp);
      else snprintf(delta, sizeof delta, "-");
      if (r->failed) {
        printf("%4d  %-60s  %s\n", k + 1, "failed", conf);
        continue;
      }
      printf("%4d  %13s  %8s  %21s  %10lld  %7lld  %4s  %s%s\n", k + 1, peak, delta, frag,
             (long long)sum_of(r, offsetof(ms_replay_device, device_allocs)), (long long)sum_of(r, offsetof(ms_replay_device, retries)),
             sum_of(r, offsetof(ms_replay_device, ooms)) ? "yes" : "-", conf, order[k] == 0 ? "  [recorded]" : "");
    }
    const ms_replay_result *best = &res[order[0]];
    char line[1024];
    ms_replay_conf_line(&best->config, line, sizeof line);
    if (best->failed || sum_of(best, offsetof(ms_replay_device, ooms))) {
      printf("\nno setting fits: every one runs out of memory at this capacity\n");
    } else {
      printf("\nbest: PYTORCH_CUDA_ALLOC_CONF=%s", line[0] ? line : "(unset: the defaults)");
      const char *fraction = ms_replay_config_get(&best->config, "memory_fraction");
      if (fraction) printf(" with torch.cuda.set_per_process_memory_fraction(%s)", fraction);
      printf("\n");
    }
    for (int i = 0; i < rec->nnotes; i++) printf("note: %s\n", rec->notes[i]);
  }
  for (int i = 0; i < nrows; i++)
    if (res[i].failed) {
      char conf[1200];
      describe_config(&res[i].config, conf, sizeof conf);
      fprintf(stderr, "error: replay under %s: %s\n", conf, res[i].error);
      rc = 1;
    }
  munmap(shared, bytes);
  return rc ? rc : ms_output_status();
}

int cmd_replay(int argc, char **argv) {
  ms_replay_config base = {0};
  bool json = false, sweep = false;
  const char *path = NULL;
  int jobs = 0;
  char err[512];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) json = true;
    else if (!strcmp(a, "--sweep")) sweep = true;
    else if (!strcmp(a, "--set") && i + 1 < argc) {
      if (apply_settings(&base, argv[++i], true, err, sizeof err) != 0) return ms_usage_error("replay", "--set: %s", err);
    } else if (!strcmp(a, "--capacity") && i + 1 < argc) {
      if (parse_capacity(argv[++i], &base.capacity) != 0)
        return ms_usage_error("replay", "--capacity: '%s' is not a size from 2M to 1024T (such as 40G)", argv[i]);
    } else if (!strcmp(a, "--jobs") && i + 1 < argc) {
      jobs = atoi(argv[++i]);
      if (jobs < 1 || jobs > 256) return ms_usage_error("replay", "--jobs takes 1 to 256");
    } else if (a[0] == '-' && a[1]) {
      return ms_unknown_option("replay", a, i + 1 == argc);
    } else if (path) {
      return ms_usage_error("replay", "one snapshot at a time ('%s' and '%s')", path, a);
    } else {
      path = a;
    }
  }
  if (!path) return ms_usage_error("replay", "no snapshot given");
  if (jobs == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    jobs = n < 1 ? 1 : n > 64 ? 64 : (int)n;
  }
  ms_snapshot s;
  if (ms_open(&s, path) != 0 || ms_load_stacks(&s) != 0) {
    fprintf(stderr, "error: %s\n", s.error);
    if (s.db) ms_close(&s);
    return 1;
  }
  ms_replay_plan *p = ms_replay_plan_new(&s);
  if (!p) {
    fprintf(stderr, "error: %s\n", s.error);
    ms_close(&s);
    return 1;
  }
  ms_replay_config recorded;
  ms_replay_recorded_config(p, &recorded);
  int rc;
  ms_replay_config check = recorded;
  for (int i = 0; i < base.n; i++) ms_replay_config_set(&check, base.set[i].key, base.set[i].value, err, sizeof err);
  if (ms_replay_check_config(p, &check, err, sizeof err) != 0) {
    rc = ms_usage_error("replay", "%s", err);
  } else if (sweep) {
    rc = run_sweep(&s, p, &base, &recorded, json, jobs);
  } else {
    ms_replay_config c = recorded;
    for (int i = 0; i < base.n; i++) ms_replay_config_set(&c, base.set[i].key, base.set[i].value, err, sizeof err);
    c.capacity = base.capacity;
    ms_replay_result *r = malloc(sizeof *r);
    if (!r) {
      fprintf(stderr, "error: replay: out of memory\n");
      rc = 1;
    } else {
      ms_replay_run(&s, p, &c, r);
      if (r->invalid_setting) {
        rc = ms_usage_error("replay", "%s", r->error);
      } else {
        if (json) rc = print_json(json_result(&s, r));
        else print_text(&s, r, &recorded), rc = 0;
        if (r->failed) {
          fprintf(stderr, "error: replay of '%s' stopped early: %s (the numbers above are for the events before it)\n",
                  s.shown_path, r->error);
          rc = 1;
        }
        if (rc == 0) rc = ms_output_status();
      }
      free(r);
    }
  }
  ms_replay_plan_free(p);
  ms_close(&s);
  return rc;
}
