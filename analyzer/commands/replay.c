/* replay.c: `memsnap replay SNAPSHOT [--set KEY=VALUE]... [--capacity SIZE | --device CARD] [--json]
 * [--sweep [--jobs N]]`: what memsnap's allocator (PyTorch's decisions) would do with a recorded
 * trace under other settings or on another card (replay/engine.c does the replaying), as text or
 * JSON; --sweep tries a documented grid of settings in parallel (replay/sweep.c: one worker
 * process per core) and ranks them, the best first, with the PYTORCH_CUDA_ALLOC_CONF line to use.
 *
 * The replay runs libmemsnap on its simulated device inside this process (or the sweep's
 * workers): no GPU, no CUDA driver is touched.
 */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "replay/replay.h"
#include "report/report.h"


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

/* The note on memory outside the allocator into out (memsnap predict says it its own way); false
 * when the replay held none. */
static bool external_note(const ms_replay_result *r, char *out, size_t len) {
  if (!r->external_blocks) return false;
  snprintf(out, len, "%lld blocks of external memory (outside the allocator: memsnap run's interposer) were held beside "
           "the replayed allocator as the program held them: the card held them too (the peaks count them)",
           (long long)r->external_blocks);
  return true;
}

static void print_text(const ms_snapshot *s, const ms_replay_result *r, const ms_replay_config *recorded) {
  char conf[1200], rec[1200], cap[32];
  ms_replay_describe_config(&r->config, conf, sizeof conf);
  ms_replay_describe_config(recorded, rec, sizeof rec);
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
  char ext[400];
  if (r->nnotes || external_note(r, ext, sizeof ext)) printf("\nnotes:\n");
  if (external_note(r, ext, sizeof ext)) printf("  - %s\n", ext);
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
  cJSON_AddNumberToObject(o, "external_blocks", (double)r->external_blocks);
  cJSON_AddNumberToObject(o, "preloaded_blocks", (double)r->preloaded_blocks);
  cJSON_AddNumberToObject(o, "unknown_frees", (double)r->unknown_frees);
  cJSON_AddNumberToObject(o, "duplicate_allocs", (double)r->duplicate_allocs);
  cJSON_AddNumberToObject(o, "skipped_events", (double)r->bad_events);
  cJSON *notes = cJSON_AddArrayToObject(o, "notes");
  char ext[400];
  if (external_note(r, ext, sizeof ext)) cJSON_AddItemToArray(notes, cJSON_CreateString(ext));
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

static int run_sweep(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *base, bool json, int jobs) {
  ms_sweep sw;
  char err[512];
  if (ms_replay_sweep(s, p, base, jobs, 0, isatty(2), &sw, err, sizeof err) != 0) {
    fprintf(stderr, "error: replay: %s\n", err);
    return 1;
  }
  int nrows = sw.nrows, started = sw.workers;
  const int *order = sw.order;
  const ms_replay_result *res = sw.results;
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
    ms_format_bytes(ms_replay_worst_peak(rec), recpeak, sizeof recpeak);
    printf("sweep of %s: %d settings on %s per device, %d at a time; recorded peak reserved %s\n", s->shown_path, nrows,
           cap, started, recpeak);
    printf("%4s  %12s  %8s  %20s  %10s  %7s  %4s  %s\n", "rank", "peak reserved", "vs rec.", "fragmentation at peak",
           "cudaMalloc", "retries", "OOM", "PYTORCH_CUDA_ALLOC_CONF");
    for (int k = 0; k < nrows; k++) {
      const ms_replay_result *r = &res[order[k]];
      char peak[32], frag[48], conf[1200], delta[16];
      int64_t pk = ms_replay_worst_peak(r), alloc_at = 0;
      for (int i = 0; i < r->ndevices; i++)
        if (r->dev[i].peak_reserved == pk) alloc_at = r->dev[i].allocated_at_peak;
      ms_format_bytes(pk, peak, sizeof peak);
      fragmentation_cell(pk, alloc_at, frag, sizeof frag);
      ms_replay_describe_config(&r->config, conf, sizeof conf);
      int64_t rp = ms_replay_worst_peak(rec);
      if (rp > 0) snprintf(delta, sizeof delta, "%+.1f%%", 100.0 * (double)(pk - rp) / (double)rp);
      else snprintf(delta, sizeof delta, "-");
      if (r->failed) {
        printf("%4d  %-60s  %s\n", k + 1, "failed", conf);
        continue;
      }
      printf("%4d  %13s  %8s  %21s  %10lld  %7lld  %4s  %s%s\n", k + 1, peak, delta, frag,
             (long long)ms_replay_sum(r, offsetof(ms_replay_device, device_allocs)), (long long)ms_replay_sum(r, offsetof(ms_replay_device, retries)),
             ms_replay_sum(r, offsetof(ms_replay_device, failed_allocs)) ? "yes" : "-", conf, order[k] == 0 ? "  [recorded]" : "");
    }
    const ms_replay_result *best = &res[order[0]];
    char line[1024];
    ms_replay_conf_line(&best->config, line, sizeof line);
    if (best->failed || ms_replay_sum(best, offsetof(ms_replay_device, failed_allocs))) {
      printf("\nno setting fits: every one runs out of memory at this capacity\n");
    } else {
      printf("\nbest: PYTORCH_CUDA_ALLOC_CONF=%s", line[0] ? line : "(unset: the defaults)");
      const char *fraction = ms_replay_config_get(&best->config, "memory_fraction");
      if (fraction) printf(" with torch.cuda.set_per_process_memory_fraction(%s)", fraction);
      printf("\n");
    }
    char ext[400];
    if (external_note(rec, ext, sizeof ext)) printf("note: %s\n", ext);
    for (int i = 0; i < rec->nnotes; i++) printf("note: %s\n", rec->notes[i]);
  }
  for (int i = 0; i < nrows; i++)
    if (res[i].failed) {
      char conf[1200];
      ms_replay_describe_config(&res[i].config, conf, sizeof conf);
      fprintf(stderr, "error: replay under %s: %s\n", conf, res[i].error);
      rc = 1;
    }
  ms_sweep_free(&sw);
  return rc ? rc : ms_output_status();
}

static int cmd_replay(int argc, char **argv) {
  ms_replay_config base = {0};
  bool json = false, sweep = false;
  const char *path = NULL, *card = NULL;
  int jobs = 0;
  char err[512];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) json = true;
    else if (!strcmp(a, "--sweep")) sweep = true;
    else if (!strcmp(a, "--set") && i + 1 < argc) {
      if (ms_replay_config_apply(&base, argv[++i], true, err, sizeof err) != 0) return ms_usage_error(&ms_replay_command, "--set: %s", err);
    } else if ((!strcmp(a, "--capacity") || !strcmp(a, "--device")) && i + 1 < argc) {
      if (ms_capacity_option(&ms_replay_command, a, argv[++i], &base.capacity, &card) != 0) return 2;
    } else if (!strcmp(a, "--jobs") && i + 1 < argc) {
      jobs = atoi(argv[++i]);
      if (jobs < 1 || jobs > 256) return ms_usage_error(&ms_replay_command, "--jobs takes 1 to 256");
    } else if (a[0] == '-' && a[1]) {
      return ms_unknown_option(&ms_replay_command, a, i + 1 == argc);
    } else if (path) {
      return ms_usage_error(&ms_replay_command, "one snapshot at a time ('%s' and '%s')", path, a);
    } else {
      path = a;
    }
  }
  if (!path) return ms_usage_error(&ms_replay_command, "no snapshot given");
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
    rc = ms_usage_error(&ms_replay_command, "%s", err);
  } else if (sweep) {
    rc = run_sweep(&s, p, &base, json, jobs);
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
        rc = ms_usage_error(&ms_replay_command, "%s", r->error);
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

const ms_command ms_replay_command = {"replay", cmd_replay,
     "memsnap replay [--set KEY=VALUE]... [--capacity SIZE | --device CARD] [--json] [--sweep [--jobs N]]\n"
     "               SNAPSHOT.db\n"
     "                            the recorded allocations replayed through memsnap's allocator under\n"
     "                            other settings: peak reserved, fragmentation, OOM (docs/replay.md)",
     "  SNAPSHOT.db         a memsnap snapshot, or a PyTorch snapshot made one by `memsnap import`\n"
     "  --set KEY=VALUE     a setting, over the recorded ones (repeatable; VALUE default: the\n"
     "                      default, whatever was recorded): max_split_size_mb,\n"
     "                      max_non_split_rounding_mb, roundup_power2_divisions (N or [256:1,>:4]),\n"
     "                      garbage_collection_threshold, expandable_segments (True/False),\n"
     "                      backend (native or cudaMallocAsync): PYTORCH_CUDA_ALLOC_CONF's keys;\n"
     "                      memory_fraction (set_per_process_memory_fraction)\n"
     "  --capacity SIZE     memory of each device (40G, 80GiB, 24000M; default: the recorded card's)\n"
     "  --device CARD       the same, a card by name: H100, H200, A100-80GB, A100-40GB, A10G,\n"
     "                      V100-32GB, V100-16GB, T4, RTX-4090, RTX-3090 (docs/predict.md#cards)\n"
     "  --json              the answer as JSON (docs/replay.md)\n"
     "  --sweep             try the grid of docs/replay.md (19 settings and the recorded ones) on all\n"
     "                      cores; a table ranked by peak reserved, the best first, and the\n"
     "                      PYTORCH_CUDA_ALLOC_CONF line to use\n"
     "  --jobs N            sweep workers (default: one per core)\n"
     "\n"
     "\n"
     "example: the resnet50 PyTorch snapshot of tests/data (memsnap import), on a 3.5 GiB card:\n"
     "  $ memsnap replay --sweep --capacity 3.5G r50.db\n"
     "  sweep of r50.db: 20 settings on 3.50 GiB per device, 2 at a time; recorded peak reserved 3.38 GiB\n"
     "  rank  peak reserved   vs rec.  fragmentation at peak  cudaMalloc  retries   OOM  PYTORCH_CUDA_ALLOC_CONF\n"
     "     1       2.96 GiB    -12.2%       31.95 MiB (1.1%)          24        0     -  expandable_segments:True\n"
     "     2       3.03 GiB    -10.1%       84.70 MiB (2.7%)         144        0     -  garbage_collection_threshold:0.6 (memory fraction 0.95)\n"
     "     5       3.26 GiB     -3.5%      142.63 MiB (4.3%)          24        0     -  roundup_power2_divisions:8\n"
     "    ...\n"
     "  best: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n",
     false};
