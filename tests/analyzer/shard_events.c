/* shard_events.c SNAPSHOT STRATEGY:N [--param-dtype B] [--reduce-dtype B] [--bucket-view]
 * [--units PATTERN] [--overlap-comm] [--reduce-bucket-size N] [--recorded N] [--meta] [--recorded-dtype B] [--orig-dtype B]:
 * prints rank 0's history as
 * analyzer/replay/shard.c synthesises it (`memsnap predict --shard`), one line per allocation and
 * per free requested: "alloc|free ID STREAM TAG INDEX BYTES" (TAG: the address's high byte, 0x41 a
 * shard, 0x42 an unsharded parameter, 0x43 an all-gather output, 0x44 a reduce-scatter input,
 * 0x45 a reduce-scatter output, 0x46 sharded gradients, 0x47 a copy-in, 0x48 a DDP bucket, 0x49 a
 * ZeRO reduce bucket, 0 a recorded block; INDEX: the address's low 56 bits, or the address), for
 * tests/analyzer/test_predict_shard.sh to check the synthesis itself (units, padding, buffers per
 * unit, streams), not only the peaks of its replay. Exits 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay.h"

static int64_t recorded(void *arg, size_t k) {
  (void)arg, (void)k;
  return INT64_MIN;
}

static int print_event(const ms_event *e, void *arg) {
  (void)arg;
  if (e->kind != MS_ALLOC && e->kind != MS_FREE_REQUESTED) return 0;
  unsigned tag = (unsigned)(e->address >> 56);
  printf("%s %lld %llu %#x %llu %lld\n", e->kind == MS_ALLOC ? "alloc" : "free", (long long)e->id,
         (unsigned long long)e->stream, tag, (unsigned long long)(tag ? e->address & 0x00FFFFFFFFFFFFFFull : e->address),
         (long long)e->size);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: shard_events SNAPSHOT STRATEGY:N [options]\n");
    return 2;
  }
  ms_shard_options o = {.bucket_mb = 25, .reduce_bucket = 500000000, .allgather_bucket = 500000000};
  const char *units[8];
  int nunits = 0;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--param-dtype") && i + 1 < argc) o.param_bytes = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reduce-dtype") && i + 1 < argc) o.reduce_bytes = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--bucket-view")) o.bucket_view = true;
    else if (!strcmp(argv[i], "--overlap-comm")) o.overlap_comm = true;
    else if (!strcmp(argv[i], "--reduce-bucket-size") && i + 1 < argc) o.reduce_bucket = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--units") && i + 1 < argc && nunits < 8) units[nunits++] = argv[++i];
    else if (!strcmp(argv[i], "--recorded") && i + 1 < argc) o.recorded_ranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--meta")) o.meta_init = true;
    else if (!strcmp(argv[i], "--recorded-dtype") && i + 1 < argc) o.recorded_bytes = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--orig-dtype") && i + 1 < argc) o.orig_bytes = atoi(argv[++i]);
  }
  o.units = nunits ? units : NULL, o.nunits = nunits;
  char name[32];
  snprintf(name, sizeof name, "%s", argv[2]);
  char *colon = strchr(name, ':');
  if (!colon) return 2;
  *colon = '\0';
  ms_change c = {0, 0, MS_OPT_KEEP, 0, ms_shard_strategy(name), atoi(colon + 1)};
  ms_snapshot s;
  char err[2048];
  if (ms_open(&s, argv[1]) != 0 || ms_load_stacks(&s) != 0) {
    fprintf(stderr, "error: %s\n", s.error);
    return 1;
  }
  ms_shard *h = ms_shard_new(&s, &o, err, sizeof err);
  if (!h) {
    fprintf(stderr, "error: %s\n", err);
    ms_close(&s);
    return 1;
  }
  const ms_shard_info *in = ms_shard_info_of(h);
  printf("units %d", in->nunits);
  for (int i = 0; i < in->nunits && i < MS_SHARD_UNITS_SHOWN; i++) printf(" %s", in->unit_names[i]);
  printf("\nparams %lld %lld grads %lld state %lld modules %lld\n", (long long)in->params, (long long)in->param_bytes,
         (long long)in->grads, (long long)in->state_blocks, (long long)in->param_modules);
  int64_t dropped = 0;
  int rc = ms_shard_each(h, NULL, &c, &s, recorded, NULL, &dropped, print_event, NULL);
  if (rc != 0) fprintf(stderr, "error: %s\n", s.error);
  ms_shard_free(h);
  ms_close(&s);
  return rc != 0;
}
