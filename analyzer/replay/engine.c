/* engine.c: plays a snapshot's recorded allocations and frees through memsnap's own
 * caching allocator (libmemsnap) on the simulated device, under settings of the user's choosing,
 * and measures what that allocator does: peak allocated and reserved memory, fragmentation at
 * the peak, device allocations and frees, retries, the first out of memory and what was live.
 *
 * Passes over the events (streamed; memory follows the live blocks):
 *   plan (ms_replay_plan_new)  once per snapshot: the devices and their capacity, the recorded
 *       settings, what was held when the history began (the snapshot's state less the
 *       history's net change); only when that is not nothing (a late start: ring overflow,
 *       recording started mid-run) the blocks and segments live before the history began, as
 *       prehistory.c reconstructs them for the analysis too (ms_prehistory_build, the replay's
 *       view of the history).
 *   run (ms_replay_run)        once per setting: every allocation is asked of the allocator
 *       with the recorded request, device and stream; every free is returned on its recorded
 *       stream. The recorded addresses are only keys: the allocator places blocks itself. The
 *       recorded peaks are followed in the same pass.
 *
 * Faithfulness rules (docs/replay.md says what they imply):
 *   - A free whose free_completed came later is given a stream use (record_stream on a stream
 *     of its own) and that stream is completed when the recorded free_completed comes: the
 *     allocator reuses the block when the recorded one did.
 *   - Segment frees the allocator did not cause are empty_cache calls: a run of segment_free
 *     (or segment_unmap) events is the allocator's own (retry after out of memory, garbage
 *     collection, oversize release) when its events say so (their extra: why memsnap released
 *     them), else when the next event of that device is the segment allocation or the out of
 *     memory of the same call (same stack when stacks were recorded; analysis/retries.c's
 *     ms_release_cause); an empty_cache (or a pool emptied) is replayed as empty_cache; the
 *     program's frees of external memory and the async driver's own are not replayed.
 *   - External memory (memsnap run's interposer: a segment_alloc whose extra names the API, then
 *     the alloc of its block) is not the allocator's: it is not replayed through it, but held
 *     beside it, in the replay's figures as in the recorded ones, until the program frees it.
 *   - Blocks live before the history began are allocated first, in address order.
 * A plan may take its events from a source instead of the snapshot's history (predict.c's
 * history synthesised at another size): the same rules apply to them.
 * Hostile or inconsistent traces (frees of unknown addresses, an allocation at a live address,
 * devices out of range, too many streams) are counted and skipped, with a note; nothing here
 * trusts a value from the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay.h"

#define MAX_STREAMS 1024                          /* distinct streams replayed per snapshot */
#define PSEUDO_STREAM_BASE 0x7ead000000000000ull  /* streams standing for record_stream uses */

/* What the recording did on one device, relative to the history's start. */
typedef struct rec_device {
  int64_t net_reserved, max_reserved, alloc_at_max;
  int64_t net_allocated, max_allocated;
  int64_t seg_allocs, seg_frees, ooms;
} rec_device;

typedef struct plan_device {
  int64_t start_reserved, start_allocated;           /* held when the history began (late start) */
  int64_t end_reserved, end_allocated, end_segments; /* the snapshot's state */
} plan_device;

struct ms_replay_plan {
  ms_replay_config recorded;
  uint64_t capacity;
  int ndevices; /* highest device seen + 1 */
  plan_device dev[MS_REPLAY_DEVICES];
  ms_prehistory before; /* held when the history began (late start), as laid out: the blocks
                           with an address, the classic segments; each by device and address */
  bool late;    /* something was held when the history began */
  bool checked; /* a replay found the history complete */
  bool capacity_known; /* the snapshot says how much memory its devices have */
  int64_t held_most;   /* without that: the most the history held reserved on one device */
  bool inconsistent; /* the events do not add up to the snapshot's state, and nothing was held before */
  bool imported, private_pools, stacks_recorded;
  char import_source[128];
  ms_replay_source source; /* events in place of the snapshot's history (predict.c); NULL: the history */
  void *source_arg;
  ms_replay_timeline *timeline; /* drawn into by each replay (the page of a prediction); NULL: none */
};

/* ---- settings ---------------------------------------------------------------------------- */

static const struct {
  const char *key, *var; /* PYTORCH_CUDA_ALLOC_CONF key, MEMSNAP_ variable */
} keys[] = {
    {"max_split_size_mb", "MEMSNAP_MAX_SPLIT_SIZE_MB"},
    {"max_non_split_rounding_mb", "MEMSNAP_MAX_NON_SPLIT_ROUNDING_MB"},
    {"roundup_power2_divisions", "MEMSNAP_ROUNDUP_POWER2_DIVISIONS"},
    {"garbage_collection_threshold", "MEMSNAP_GARBAGE_COLLECTION_THRESHOLD"},
    {"expandable_segments", "MEMSNAP_EXPANDABLE_SEGMENTS"},
    {"backend", "MEMSNAP_ALLOCATOR"},
    {"memory_fraction", "MEMSNAP_MEMORY_FRACTION"},
};
#define NKEYS (sizeof keys / sizeof keys[0])

int ms_replay_config_set(ms_replay_config *c, const char *key, const char *value, char *err, size_t errlen) {
  size_t k = 0;
  for (; k < NKEYS; k++)
    if (!strcmp(key, keys[k].key) || !strcasecmp(key, keys[k].var)) break;
  if (k == NKEYS) {
    snprintf(err, errlen, "unknown setting '%.64s' (known: max_split_size_mb, max_non_split_rounding_mb, "
             "roundup_power2_divisions, garbage_collection_threshold, expandable_segments, backend, memory_fraction)", key);
    return -1;
  }
  if (strlen(value) >= sizeof c->set[0].value) {
    snprintf(err, errlen, "the value of %s is too long", keys[k].key);
    return -1;
  }
  int i = 0;
  while (i < c->n && strcmp(c->set[i].key, keys[k].key)) i++;
  if (i == c->n) {
    if (c->n == MS_REPLAY_MAX_SETTINGS) {
      snprintf(err, errlen, "too many settings");
      return -1;
    }
    c->n++;
  }
  snprintf(c->set[i].key, sizeof c->set[i].key, "%s", keys[k].key);
  snprintf(c->set[i].value, sizeof c->set[i].value, "%s", value);
  return 0;
}

/* "default" (and "unlimited" for max_split_size_mb) stands for the default: the key is kept, so
 * that it replaces a recorded value, but sets nothing. */
static bool is_default(const ms_replay_setting *set) {
  return !strcmp(set->value, "default") || (!strcmp(set->key, "max_split_size_mb") && !strcmp(set->value, "unlimited"));
}

const char *ms_replay_config_get(const ms_replay_config *c, const char *key) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->set[i].key, key)) return is_default(&c->set[i]) ? NULL : c->set[i].value;
  return NULL;
}

void ms_replay_conf_line(const ms_replay_config *c, char *out, size_t len) {
  size_t o = 0;
  out[0] = '\0';
  for (size_t k = 0; k < NKEYS; k++) { /* the table's order, whatever order they were given in */
    const char *v = ms_replay_config_get(c, keys[k].key);
    if (!v || !strcmp(keys[k].key, "memory_fraction") || o >= len) continue;
    o += (size_t)snprintf(out + o, len - o, "%s%s:%s", o ? "," : "", keys[k].key, v);
  }
}

void ms_replay_describe_config(const ms_replay_config *c, char *out, size_t len) {
  char line[1024];
  ms_replay_conf_line(c, line, sizeof line);
  const char *fraction = ms_replay_config_get(c, "memory_fraction");
  if (fraction) snprintf(out, len, "%s%s(memory fraction %s)", line, line[0] ? " " : "", fraction);
  else snprintf(out, len, "%s", line[0] ? line : "(defaults)");
}

/* A recorded option value as a setting, or nothing when it is the default. */
static void recorded_setting(ms_replay_config *c, const char *var, const char *value) {
  char v[216], err[64];
  snprintf(v, sizeof v, "%s", value);
  ms_neutralise(v); /* untrusted: an invalid value comes back in the library's message, printed */
  if (!strcmp(var, "MEMSNAP_MAX_SPLIT_SIZE_MB") && !strcmp(v, "unlimited")) return;
  if (!strcmp(var, "MEMSNAP_MAX_NON_SPLIT_ROUNDING_MB") && !strcmp(v, "20")) return;
  if (!strcmp(var, "MEMSNAP_GARBAGE_COLLECTION_THRESHOLD") && strtod(v, NULL) == 0) return;
  if (!strcmp(var, "MEMSNAP_MEMORY_FRACTION") && strtod(v, NULL) >= 1) return;
  if (!strcmp(var, "MEMSNAP_EXPANDABLE_SEGMENTS")) {
    if (strcmp(v, "1") && strcmp(v, "true") && strcmp(v, "True")) return;
    snprintf(v, sizeof v, "True");
  }
  if (!strcmp(var, "MEMSNAP_ALLOCATOR")) {
    if (strcmp(v, "async")) return;
    snprintf(v, sizeof v, "cudaMallocAsync");
  }
  if (!strcmp(var, "MEMSNAP_ROUNDUP_POWER2_DIVISIONS") && v[0] == '[') {
    /* the list form memsnap writes: one number when every interval has the same, as PyTorch's
       users write it (0 and 1 both mean off) */
    unsigned first = 0, d, start;
    bool same = true;
    int n = 0;
    for (const char *p = v + 1; sscanf(p, "%u:%u", &start, &d) == 2; n++) {
      if (d == 1) d = 0;
      if (n == 0) first = d;
      else if (d != first) same = false;
      p = strchr(p, ',');
      if (!p) break;
      p++;
    }
    if (n == 0) return;
    if (same && first == 0) return;
    if (same) snprintf(v, sizeof v, "%u", first);
  } else if (!strcmp(var, "MEMSNAP_ROUNDUP_POWER2_DIVISIONS") && strtoul(v, NULL, 10) <= 1) {
    return;
  }
  for (size_t k = 0; k < NKEYS; k++)
    if (!strcmp(var, keys[k].var)) ms_replay_config_set(c, keys[k].key, v, err, sizeof err);
}

void ms_replay_recorded_config(const ms_replay_plan *p, ms_replay_config *out) { *out = p->recorded; }
uint64_t ms_replay_recorded_capacity(const ms_replay_plan *p) { return p->capacity; }

/* ---- the plan: a first pass ---------------------------------------------------------------- */

static int cmp_device_address(int dx, uint64_t ax, int dy, uint64_t ay) {
  if (dx != dy) return dx - dy;
  return (ax > ay) - (ax < ay);
}

static int cmp_block(const void *a, const void *b) {
  const ms_prior_block *x = a, *y = b;
  return cmp_device_address(x->device, x->address, y->device, y->address);
}

static int cmp_segment(const void *a, const void *b) {
  const ms_prior_segment *x = a, *y = b;
  return cmp_device_address(x->device, x->address, y->device, y->address);
}

/* The snapshot's tables beside the events: settings, capacity, state at the snapshot. */
static int plan_late(ms_snapshot *s, ms_replay_plan *p);

static int plan_option(const char *name, const char *value, void *arg) {
  recorded_setting(&((ms_replay_plan *)arg)->recorded, name, value);
  return 0;
}

static int plan_device_row(const ms_device_row *r, void *arg) {
  ms_replay_plan *p = arg;
  /* the largest device's memory (replays give every device the same capacity) */
  if (r->total_bytes >= (2 << 20) && (!p->capacity_known || (uint64_t)r->total_bytes > p->capacity))
    p->capacity = (uint64_t)r->total_bytes, p->capacity_known = true;
  if (r->device < MS_REPLAY_DEVICES && r->device + 1 > p->ndevices) p->ndevices = r->device + 1;
  return 0;
}

/* Segments: classic ones are counted (an expandable segment's rows are its mapped ranges, and
   PyTorch's segment statistic leaves them out too); all of them are reserved. */
static int plan_segment(const ms_segment_row *r, void *arg) {
  ms_replay_plan *p = arg;
  if (r->device >= MS_REPLAY_DEVICES) return 0;
  p->dev[r->device].end_reserved += r->size;
  p->dev[r->device].end_segments += !r->expandable && strcmp(r->pool, "async") != 0 && strcmp(r->pool, "external") != 0;
  if (r->private_pool) p->private_pools = true;
  if (r->device + 1 > p->ndevices) p->ndevices = r->device + 1;
  return 0;
}

static int plan_block(const ms_block_row *r, void *arg) {
  ms_replay_plan *p = arg;
  if (r->state == MS_BLOCK_ALLOCATED && r->device < MS_REPLAY_DEVICES) p->dev[r->device].end_allocated += r->size;
  return 0;
}

/* The snapshot's tables beside the events: settings, capacity, the devices it names (events on
 * others are skipped), the state at the snapshot. 0, -1 out of memory, -2 unreadable (s->error). */
static int plan_tables(ms_snapshot *s, ms_replay_plan *p) {
  if (ms_options_each(s, plan_option, p) != 0 || ms_devices_each(s, plan_device_row, p) != 0 ||
      ms_segments_each(s, plan_segment, p) != 0 || ms_blocks_each(s, plan_block, p) != 0)
    return -2;
  if (s->device_count > p->ndevices) p->ndevices = s->device_count < MS_REPLAY_DEVICES ? (int)s->device_count : MS_REPLAY_DEVICES;
  if (p->ndevices == 0) p->ndevices = 1;
  p->late = s->dropped > 0;
  return p->late ? plan_late(s, p) : 0;
}

_Static_assert(MS_REPLAY_DEVICES == MS_MAX_DEVICES, "the reconstruction's devices are the replay's");

/* A history that starts late: what was held when it began (prehistory.c, as the replay reads the
 * history), kept as the replay lays it out. 0, -1 out of memory, -2 unreadable (s->error). */
static int plan_late(ms_snapshot *s, ms_replay_plan *p) {
  ms_prehistory *h = &p->before;
  int rc = ms_prehistory_build(s, MS_PREHISTORY_REPLAY, h);
  if (rc != 0) return rc == -2 ? -1 : -2;
  for (int i = 0; i < MS_REPLAY_DEVICES; i++) p->dev[i].start_reserved = ms_prehistory_start_reserved(h, i, p->dev[i].end_reserved);
  /* Blocks with an address (the snapshot's devices count as used), and the classic segments:
     an expandable segment's mapped ranges and the async pool's are the allocator's to make. */
  size_t n = 0;
  for (size_t i = 0; i < h->nblocks; i++) {
    const ms_prior_block *b = &h->blocks[i];
    if (!b->address) continue;
    if (b->alive_at_end && b->device + 1 > p->ndevices) p->ndevices = b->device + 1;
    h->blocks[n++] = *b;
  }
  h->nblocks = n;
  n = 0;
  for (size_t i = 0; i < h->nsegments; i++)
    if (h->segments[i].classic && h->segments[i].address) h->segments[n++] = h->segments[i];
  h->nsegments = n;
  if (h->nblocks) qsort(h->blocks, h->nblocks, sizeof *h->blocks, cmp_block);
  if (h->nsegments) qsort(h->segments, h->nsegments, sizeof *h->segments, cmp_segment);
  return 0;
}

/* Follows each device's reserved memory through the history (from what it held when the history
 * began), for the most any device held. */
typedef struct held_scan {
  int64_t reserved[MS_REPLAY_DEVICES], most;
} held_scan;

static int held_event(const ms_event *e, void *arg) {
  held_scan *h = arg;
  if (e->device < 0 || e->device >= MS_REPLAY_DEVICES) return 0;
  if (e->kind == MS_SEGMENT_ALLOC || e->kind == MS_SEGMENT_MAP) h->reserved[e->device] += e->size;
  else if (e->kind == MS_SEGMENT_FREE || e->kind == MS_SEGMENT_UNMAP) h->reserved[e->device] -= e->size;
  if (h->reserved[e->device] > h->most) h->most = h->reserved[e->device];
  return 0;
}

ms_replay_plan *ms_replay_plan_new(ms_snapshot *s) {
  ms_replay_plan *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(s->error, sizeof s->error, "out of memory planning the replay of '%s'", s->shown_path);
    return NULL;
  }
  p->capacity = (uint64_t)16 << 30;
  p->imported = s->import_source[0] != '\0';
  snprintf(p->import_source, sizeof p->import_source, "%s", s->import_source);
  int rc = plan_tables(s, p);
  if (rc == 0 && !p->capacity_known) {
    /* A snapshot that does not say its card's memory (a PyTorch pickle imported by hand): the
       card had at least what the program held, so the replay gets that (in whole GiB), or the
       default when that is more. One pass over the events, without the allocator. */
    held_scan h = {{0}, 0};
    for (int i = 0; i < MS_REPLAY_DEVICES; i++) {
      h.reserved[i] = p->dev[i].start_reserved;
      if (h.reserved[i] > h.most) h.most = h.reserved[i];
    }
    if (ms_events_each(s, held_event, &h) != 0) rc = -2;
    p->held_most = h.most;
    uint64_t gib = (uint64_t)1 << 30, need = ((uint64_t)h.most + gib - 1) / gib * gib;
    if (rc == 0 && need > p->capacity) p->capacity = need;
  }
  if (rc == -1) snprintf(s->error, sizeof s->error, "out of memory planning the replay of '%s'", s->shown_path);
  if (rc != 0) {
    ms_replay_plan_free(p);
    return NULL;
  }
  return p;
}

void ms_replay_plan_set_source(ms_replay_plan *p, ms_replay_source source, void *arg) {
  p->source = source;
  p->source_arg = arg;
  p->checked = source != NULL; /* a synthesised history starts at the program's start */
}

void ms_replay_plan_set_timeline(ms_replay_plan *p, ms_replay_timeline *t) { p->timeline = t; }

void ms_replay_plan_free(ms_replay_plan *p) {
  if (!p) return;
  ms_prehistory_free(&p->before);
  free(p);
}

/* ---- the run ------------------------------------------------------------------------------ */

/* What the replay holds for a recorded block: the allocator's pointer and device. Indexed by the
 * live map's aux; free entries chain through `next`. */
typedef struct held {
  uint64_t ptr; /* 0: the allocation failed in the replay */
  int32_t device;
  uint32_t next;
} held;

typedef struct run_state {
  ms_snapshot *s;
  const ms_replay_plan *p;
  ms_replay_result *r;
  ms_live_map live;     /* recorded address -> held (aux), size = recorded size, site = stack */
  ms_live_map deferred; /* frees waiting for their recorded completion: aux = pseudo stream */
  held *held;
  size_t nheld, held_cap;
  uint32_t free_held; /* index + 1 of the first free entry; 0 none */
  uint32_t *pseudo_free;
  size_t npseudo_free, pseudo_cap, npseudo;
  ms_event pending_free[MS_REPLAY_DEVICES]; /* a free whose completion may come later */
  bool has_pending_free[MS_REPLAY_DEVICES];
  rec_device rec[MS_REPLAY_DEVICES];         /* what the recording did */
  uint64_t streams[MAX_STREAMS];
  int nstreams;
  int seg_run[MS_REPLAY_DEVICES];          /* segment frees seen and not yet explained */
  uint32_t seg_run_stack[MS_REPLAY_DEVICES];
  uint8_t seg_run_reason[MS_REPLAY_DEVICES];   /* why, as recorded (its first event's extra; 0: not) */
  int64_t seg_run_reserved[MS_REPLAY_DEVICES]; /* recorded reserved bytes before the run */
  bool host_oom;
  /* external memory (outside the allocator): live blocks (aux: device), bytes held per device,
     the external segment whose block comes next, the one whose segment_free comes next */
  ms_live_map external;
  int64_t external_bytes[MS_REPLAY_DEVICES];
  bool external_seen[MS_REPLAY_DEVICES];
  uint64_t external_next[MS_REPLAY_DEVICES], external_freed[MS_REPLAY_DEVICES];
  int64_t allocator_peak_seen[MS_REPLAY_DEVICES]; /* the allocator's reserved peak at the last look */
  /* the timeline (the plan's, when it has one): the current event's time, the buckets' width */
  int64_t now, bucket_width;
} run_state;

void ms_replay_note(ms_replay_result *r, const char *fmt, ...) {
  if (r->nnotes >= MS_REPLAY_NOTES) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->notes[r->nnotes++], sizeof r->notes[0], fmt, ap);
  va_end(ap);
}

static uint32_t held_new(run_state *st, uint64_t ptr, int device) {
  uint32_t i;
  if (st->free_held) {
    i = st->free_held - 1;
    st->free_held = st->held[i].next;
  } else {
    if (!ms_grow(&st->held, &st->held_cap, st->nheld + 1, sizeof *st->held)) {
      st->host_oom = true;
      return UINT32_MAX;
    }
    i = (uint32_t)st->nheld++;
  }
  st->held[i] = (held){ptr, device, 0};
  return i;
}

static void held_release(run_state *st, uint32_t i) {
  st->held[i].next = st->free_held;
  st->free_held = i + 1;
}

/* Whether the stream may be replayed (a trace with more distinct streams than MAX_STREAMS is
 * refused past that: each costs the allocator a free set). */
static bool stream_ok(run_state *st, uint64_t stream) {
  for (int i = st->nstreams - 1; i >= 0; i--)
    if (st->streams[i] == stream) return true;
  if (st->nstreams == MAX_STREAMS) return false;
  st->streams[st->nstreams++] = stream;
  return true;
}

/* Adds a device's allocated and reserved memory now to the plan's timeline, when it follows that
 * device: the buckets of the analysis's curves, each keeping its lowest and highest value. */
static void timeline_add(run_state *st, int device, int64_t allocated, int64_t reserved) {
  ms_replay_timeline *t = st->p->timeline;
  if (!t || device != t->device) return;
  int64_t start = ms_bucket_start(st->s, st->bucket_width, st->now);
  ms_curve_add(&t->allocated, start, allocated);
  ms_curve_add(&t->reserved, start, reserved);
}

/* The timeline after an event of `device` (a free lowers what update_peak saw last). */
static void timeline_sample(run_state *st, int device) {
  memsnap_stats_t stats;
  if (!st->p->timeline || device != st->p->timeline->device || memsnap_get_stats(device, &stats) != MEMSNAP_OK) return;
  int64_t external = st->external_bytes[device];
  timeline_add(st, device, stats.allocated_bytes[MEMSNAP_POOL_ALL].current + external,
               stats.reserved_bytes[MEMSNAP_POOL_ALL].current + external);
}

/* Follows the device's peaks: the allocator's memory plus the external memory held. A reserved
 * peak the allocator reached inside a call since the last look (a segment allocated, then the
 * cache released to retry) counts with the external memory held during that call. */
static void update_peak(run_state *st, int device) {
  ms_replay_device *d = &st->r->dev[device];
  memsnap_stats_t stats;
  if (memsnap_get_stats(device, &stats) != MEMSNAP_OK) return;
  int64_t external = st->external_bytes[device];
  int64_t reserved = stats.reserved_bytes[MEMSNAP_POOL_ALL].current + external;
  int64_t allocated = stats.allocated_bytes[MEMSNAP_POOL_ALL].current + external;
  int64_t inner = stats.reserved_bytes[MEMSNAP_POOL_ALL].peak;
  if (inner > st->allocator_peak_seen[device]) {
    st->allocator_peak_seen[device] = inner;
    if (inner + external > reserved) reserved = inner + external;
  }
  timeline_add(st, device, allocated, reserved); /* the peaks' values, so that the timeline's highest is the peak */
  if (allocated > d->peak_allocated) d->peak_allocated = allocated;
  if (reserved > d->peak_reserved || (reserved == d->peak_reserved && allocated > d->allocated_at_peak)) {
    d->peak_reserved = reserved;
    d->allocated_at_peak = allocated;
  }
}

/* An external block (of the segment allocated just before it): held beside the allocator. */
static void external_alloc(run_state *st, const ms_event *e) {
  st->external_next[e->device] = 0;
  if (ms_live_put(&st->external, (ms_live_slot){.key = e->address, .site = 0, .aux = (uint32_t)e->device, .size = e->size}) != 0) {
    st->host_oom = true;
    return;
  }
  st->external_bytes[e->device] += e->size;
  if (st->external_bytes[e->device] > st->r->dev[e->device].external_peak)
    st->r->dev[e->device].external_peak = st->external_bytes[e->device];
  st->external_seen[e->device] = true;
  st->r->external_blocks++;
  update_peak(st, e->device);
}

/* A free of an external block: true when e frees one (and it is let go). */
static bool external_free(run_state *st, const ms_event *e) {
  ms_live_slot slot;
  if (!st->external.count || !ms_live_take(&st->external, e->address, &slot)) return false;
  st->external_bytes[slot.aux] -= slot.size;
  st->external_freed[slot.aux] = e->address;
  return true;
}

static int cmp_slot_site(const void *a, const void *b) {
  const ms_live_slot *x = a, *y = b;
  return (x->site > y->site) - (x->site < y->site);
}

/* The first out of memory of a device: what was live there, largest sites first. */
static void first_oom(run_state *st, const ms_event *e, int64_t request, bool recorded) {
  ms_replay_device *d = &st->r->dev[e->device];
  memsnap_stats_t stats;
  d->oom = true;
  d->oom_was_recorded = recorded;
  d->oom_event_id = e->id;
  d->oom_time_ns = e->time_ns;
  d->oom_request = request;
  d->oom_stream = (int64_t)e->stream;
  d->oom_stack = e->stack_id;
  if (memsnap_get_stats(e->device, &stats) == MEMSNAP_OK) {
    d->oom_allocated = stats.allocated_bytes[MEMSNAP_POOL_ALL].current;
    d->oom_reserved = stats.reserved_bytes[MEMSNAP_POOL_ALL].current;
  }
  ms_live_slot *v = malloc(sizeof *v * (st->live.count + 1));
  size_t n = 0;
  if (!v) return;
  for (size_t i = 0; st->live.slots && i <= st->live.mask; i++) {
    const ms_live_slot *sl = &st->live.slots[i];
    if (sl->key && st->held[sl->aux].ptr && st->held[sl->aux].device == e->device) v[n++] = *sl;
  }
  qsort(v, n, sizeof *v, cmp_slot_site);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    int64_t bytes = 0, count = 0;
    for (; j < n && v[j].site == v[i].site; j++) bytes += v[j].size, count++;
    int k = d->oom_ntop < MS_REPLAY_TOP ? d->oom_ntop++ : MS_REPLAY_TOP - 1;
    if (k == MS_REPLAY_TOP - 1 && d->oom_ntop == MS_REPLAY_TOP && bytes <= d->oom_top_bytes[k]) {
      i = j;
      continue;
    }
    while (k > 0 && d->oom_top_bytes[k - 1] < bytes) { /* insertion into the sorted top */
      d->oom_top_bytes[k] = d->oom_top_bytes[k - 1];
      d->oom_top_count[k] = d->oom_top_count[k - 1];
      d->oom_top_stack[k] = d->oom_top_stack[k - 1];
      k--;
    }
    d->oom_top_bytes[k] = bytes;
    d->oom_top_count[k] = count;
    d->oom_top_stack[k] = v[i].site;
    i = j;
  }
  free(v);
}

/* Allocates `request` bytes for the recorded block at e->address. */
static void replay_alloc(run_state *st, const ms_event *e, int64_t request, uint64_t address, uint32_t stack) {
  ms_replay_result *r = st->r;
  ms_replay_device *d = &r->dev[e->device];
  ms_live_slot old;
  if (ms_live_take(&st->live, address, &old)) { /* two live blocks at one address */
    if (r->duplicate_allocs++ == 0)
      ms_replay_note(r, "event %lld allocates at 0x%llx, which a block still held (its free is missing): that block was "
           "freed first", (long long)e->id, (unsigned long long)address);
    if (st->held[old.aux].ptr) memsnap_release((void *)(uintptr_t)st->held[old.aux].ptr);
    held_release(st, old.aux);
  }
  void *ptr = NULL;
  int rc = memsnap_alloc(&ptr, (size_t)request, e->device, (memsnap_stream_t)(uintptr_t)e->stream);
  if (rc == MEMSNAP_ENOMEM) {
    d->failed_allocs++;
    if (!d->oom) first_oom(st, e, request, false);
  } else if (rc != MEMSNAP_OK) {
    r->bad_events++;
    return;
  }
  uint32_t h = held_new(st, (uint64_t)(uintptr_t)ptr, e->device);
  if (h == UINT32_MAX || ms_live_put(&st->live, (ms_live_slot){.key = address, .site = stack, .aux = h, .size = e->size}) != 0) {
    st->host_oom = true;
    return;
  }
  if (ptr) update_peak(st, e->device);
}

/* Frees the recorded block of free_requested event e; `deferred`: its completion comes later
 * (stream uses), so the replay's block waits for it on a stream of its own. */
static void replay_free(run_state *st, const ms_event *e, bool deferred) {
  ms_replay_result *r = st->r;
  ms_live_slot slot;
  if (!ms_live_take(&st->live, e->address, &slot)) {
    if (r->unknown_frees++ == 0)
      ms_replay_note(r, "event %lld frees 0x%llx, which no allocation of the history or of the snapshot's state holds: "
           "skipped", (long long)e->id, (unsigned long long)e->address);
    return;
  }
  held h = st->held[slot.aux];
  held_release(st, slot.aux);
  if (!h.ptr) return; /* its allocation failed in the replay */
  void *ptr = (void *)(uintptr_t)h.ptr;
  if (deferred) {
    uint32_t ps;
    if (st->npseudo_free) ps = st->pseudo_free[--st->npseudo_free];
    else ps = (uint32_t)st->npseudo++;
    memsnap_record_stream(ptr, (memsnap_stream_t)(uintptr_t)(PSEUDO_STREAM_BASE + ps));
    if (ms_live_put(&st->deferred, (ms_live_slot){.key = e->address, .site = 0, .aux = ps, .size = 0}) != 0) st->host_oom = true;
    r->deferred_frees++;
  }
  memsnap_free(ptr, 0, h.device, (memsnap_stream_t)(uintptr_t)e->stream);
}

static void replay_free_completed(run_state *st, const ms_event *e) {
  ms_live_slot slot;
  if (!ms_live_take(&st->deferred, e->address, &slot)) return; /* completed with its request */
  memsnap_sim_synchronize((memsnap_stream_t)(uintptr_t)(PSEUDO_STREAM_BASE + slot.aux));
  if (!ms_grow(&st->pseudo_free, &st->pseudo_cap, st->npseudo_free + 1, sizeof *st->pseudo_free)) {
    st->host_oom = true;
    return;
  }
  st->pseudo_free[st->npseudo_free++] = slot.aux;
}

/* Whether the run of segment frees before `next` was an empty_cache call (or a pool's cache
 * emptied): as the snapshot recorded it, else as its pattern says (analysis/retries.c's
 * ms_release_cause, which the analysis reads runs with too): the allocator's own when the
 * device's next event is the segment allocation or out of memory of the same call. */
static bool was_empty_cache(const run_state *st, int device, const ms_event *next) {
  const char *f = ms_replay_config_get(&st->p->recorded, "memory_fraction");
  const char *gc = ms_replay_config_get(&st->p->recorded, "garbage_collection_threshold");
  /* the card's memory as the analysis reads runs with it (retries.c): none when the snapshot does
     not say, not the capacity the replay assumed then */
  ms_release_limits l = {st->p->capacity_known ? (double)st->p->capacity : 0, f ? strtod(f, NULL) : 1.0,
                         gc ? strtod(gc, NULL) : 0};
  int cause = ms_release_cause(st->seg_run_reason[device], st->seg_run_stack[device], st->seg_run_reserved[device], next, &l);
  return cause == MEMSNAP_RELEASE_EMPTY_CACHE || cause == MEMSNAP_RELEASE_POOL;
}

/* A run of segment frees the allocator did not cause: an empty_cache call. */
static void explain_segment_frees(run_state *st, int device, const ms_event *next) {
  if (!st->seg_run[device]) return;
  bool empty_cache = was_empty_cache(st, device, next);
  st->seg_run[device] = 0;
  if (empty_cache) { /* empty_cache releases every device's cache: their runs are this call's */
    memsnap_empty_cache();
    st->r->empty_caches++;
    memset(st->seg_run, 0, sizeof st->seg_run);
  }
}

/* Follows the recorded reserved and allocated memory (relative to the history's start). */
static void record(rec_device *d, const ms_event *e) {
  switch (e->kind) {
    case MS_ALLOC: d->net_allocated += e->size; break;
    case MS_FREE_REQUESTED: d->net_allocated -= e->size; break;
    /* reserved memory counts external segments too; the device calls only the allocator's */
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_MAP: d->seg_allocs += e->extra <= 0, d->net_reserved += e->size; break;
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_UNMAP: d->seg_frees += e->extra != MEMSNAP_RELEASE_EXTERNAL, d->net_reserved -= e->size; break;
    case MS_OOM: d->ooms++; break;
    default: break;
  }
  if (d->net_allocated > d->max_allocated) d->max_allocated = d->net_allocated;
  if (d->net_reserved > d->max_reserved || (d->net_reserved == d->max_reserved && d->net_allocated > d->alloc_at_max)) {
    d->max_reserved = d->net_reserved;
    d->alloc_at_max = d->net_allocated;
  }
}

static int run_event(const ms_event *e, void *arg) {
  run_state *st = arg;
  ms_replay_result *r = st->r;
  r->events++;
  st->now = e->time_ns;
  if (e->kind == MS_SNAPSHOT || e->kind == MS_IPC_SHARE || ms_event_is_annotation(e->kind)) return 0;
  if (e->kind < MS_ALLOC || e->kind > MS_SEGMENT_UNMAP) {
    r->bad_events++;
    return 0;
  }
  if (e->device < 0 || e->device >= st->r->ndevices) {
    r->bad_events++;
    return 0;
  }
  if ((e->kind == MS_SEGMENT_FREE || e->kind == MS_SEGMENT_UNMAP) && !st->seg_run[e->device])
    st->seg_run_reserved[e->device] = st->p->dev[e->device].start_reserved + st->rec[e->device].net_reserved;
  record(&st->rec[e->device], e);
  if (st->has_pending_free[e->device]) { /* the free before: completed at once, or later? */
    st->has_pending_free[e->device] = false;
    bool now = e->kind == MS_FREE_COMPLETED && e->address == st->pending_free[e->device].address;
    replay_free(st, &st->pending_free[e->device], !now);
    if (now) {
      timeline_sample(st, e->device);
      return 0;
    }
  }
  if (e->kind == MS_SEGMENT_FREE && (e->extra == MEMSNAP_RELEASE_EXTERNAL ||
                                     (e->address && e->address == st->external_freed[e->device]))) {
    st->external_freed[e->device] = 0; /* the program freed external memory: not the allocator's */
    return 0;
  }
  if (e->kind == MS_SEGMENT_FREE || e->kind == MS_SEGMENT_UNMAP) {
    if (st->seg_run[e->device]++ == 0) {
      st->seg_run_stack[e->device] = e->stack_id;
      st->seg_run_reason[e->device] = e->extra > 0 && e->extra < MEMSNAP_RELEASE_REASONS ? (uint8_t)e->extra : 0;
    }
    return 0;
  }
  explain_segment_frees(st, e->device, e);
  if (!stream_ok(st, e->stream)) {
    snprintf(r->error, sizeof r->error, "event %lld: more than %d distinct streams: stopped there", (long long)e->id,
             MAX_STREAMS);
    return 1;
  }
  switch (e->kind) {
    case MS_SEGMENT_ALLOC:
      if (ms_event_external_segment(e)) st->external_next[e->device] = e->address; /* its block comes next */
      break;
    case MS_ALLOC:
      if ((e->size <= 0 && e->requested <= 0) || !e->address) {
        r->bad_events++;
        return 0;
      }
      if (e->address == st->external_next[e->device]) {
        external_alloc(st, e);
        break;
      }
      r->replayed++;
      replay_alloc(st, e, e->requested > 0 ? e->requested : e->size, e->address, e->stack_id);
      break;
    case MS_FREE_REQUESTED: /* done at the device's next event, which says when it completed */
      if (external_free(st, e)) break;
      r->replayed++;
      st->pending_free[e->device] = *e;
      st->has_pending_free[e->device] = true;
      break;
    case MS_FREE_COMPLETED: replay_free_completed(st, e); break;
    case MS_OOM: { /* the recorded program ran out of memory here: does the replay? */
      int64_t request = e->requested > 0 ? e->requested : e->size;
      void *ptr = NULL;
      if (request <= 0) break;
      int rc = memsnap_alloc(&ptr, (size_t)request, e->device, (memsnap_stream_t)(uintptr_t)e->stream);
      if (rc == MEMSNAP_ENOMEM) r->dev[e->device].failed_allocs++;
      if (rc == MEMSNAP_ENOMEM && !r->dev[e->device].oom) first_oom(st, e, request, true);
      if (rc == MEMSNAP_OK && ptr) {
        update_peak(st, e->device);
        memsnap_release(ptr);
        ms_replay_note(r, "device %d: the recorded out of memory at event %lld (%lld bytes) does not happen in this replay; "
             "what the program did after it is replayed as recorded", e->device, (long long)e->id, (long long)request);
      }
      break;
    }
    default: break; /* the allocator's segments: it makes its own */
  }
  if (st->host_oom) {
    snprintf(r->error, sizeof r->error, "out of host memory at event %lld", (long long)e->id);
    return 1;
  }
  timeline_sample(st, e->device);
  return 0;
}

/* Sets the environment for libmemsnap's next initialisation: the sim backend with the plan's
 * devices, no recording, no dumps, and the config's settings (nothing from the caller's
 * environment). */
static int configure(const ms_replay_plan *p, const ms_replay_config *c, ms_replay_result *r) {
  const char *var;
  for (int i = 0; (var = memsnap_option_info(i, NULL, NULL)) != NULL; i++) unsetenv(var);
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  char v[64];
  setenv("MEMSNAP_BACKEND", "sim", 1);
  snprintf(v, sizeof v, "%d", r->ndevices);
  setenv("MEMSNAP_SIM_DEVICES", v, 1);
  snprintf(v, sizeof v, "%llu", (unsigned long long)(c->capacity ? c->capacity : p->capacity));
  setenv("MEMSNAP_SIM_CAPACITY", v, 1);
  /* segments placed as CUDA places them: the allocator's choice between free blocks of one
     size goes by address (a DDP run's 1.5 GiB segment was missed with the sim's bottom-up order) */
  setenv("MEMSNAP_SIM_PLACEMENT", "top", 1);
  setenv("MEMSNAP_OOM", "null", 1);
  setenv("MEMSNAP_STACKS", "none", 1);
  for (int i = 0; i < c->n; i++)
    for (size_t k = 0; k < NKEYS; k++)
      if (!strcmp(c->set[i].key, keys[k].key) && !is_default(&c->set[i])) setenv(keys[k].var, c->set[i].value, 1);
  /* Initialise now, with the library's warnings kept off stderr: an invalid value is this
     replay's error, said once by the caller. */
  memsnap_shutdown();
  fflush(stderr);
  int saved = dup(2), null = open("/dev/null", O_WRONLY);
  if (saved >= 0 && null >= 0) dup2(null, 2);
  const char *backend = memsnap_backend_name();
  char message[512];
  snprintf(message, sizeof message, "%s", memsnap_last_error());
  if (saved >= 0) {
    dup2(saved, 2);
    close(saved);
  }
  if (null >= 0) close(null);
  if (!backend || strcmp(backend, "sim") != 0) {
    snprintf(r->error, sizeof r->error, "the simulated device did not start: %.400s", message);
    return -1;
  }
  if (strstr(message, "invalid value")) {
    r->invalid_setting = true;
    snprintf(r->error, sizeof r->error, "%s", message);
    return -1;
  }
  return 0;
}

int ms_replay_check_config(const ms_replay_plan *p, const ms_replay_config *c, char *err, size_t errlen) {
  ms_replay_result *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  r->ndevices = p->ndevices ? p->ndevices : 1;
  int rc = configure(p, c, r);
  if (rc != 0) snprintf(err, errlen, "%s", r->error);
  memsnap_shutdown();
  free(r);
  return rc;
}

/* One block of the start's layout: a live block, or a filler for a free range (kept in *fill
 * to free once every segment is laid out). */
static void lay(run_state *st, const ms_prior_segment *seg, const ms_prior_block *b, int64_t gap, void ***fill, size_t *nfill,
                size_t *fill_cap) {
  if (b) {
    ms_event e = {.kind = MS_ALLOC, .device = b->device, .stream = b->stream, .address = b->address, .size = b->size,
                  .requested = b->requested, .stack_id = b->stack_id};
    replay_alloc(st, &e, b->requested > 0 ? b->requested : b->size, b->address, b->stack_id);
    st->r->preloaded_blocks++;
    st->r->preloaded_bytes += b->size;
    return;
  }
  int64_t chunk = seg->small ? (1 << 20) : gap; /* small pool: requests of 1 MiB at most */
  if (!seg->small && gap <= (1 << 20)) return;  /* a large-pool request is over 1 MiB */
  for (int64_t left = gap; left > 0; left -= chunk) {
    void *ptr = NULL;
    if (memsnap_alloc(&ptr, (size_t)(left < chunk ? left : chunk), seg->device, (memsnap_stream_t)(uintptr_t)seg->stream) != MEMSNAP_OK)
      return;
    if (!ms_grow(fill, fill_cap, *nfill + 1, sizeof **fill)) {
      st->host_oom = true;
      memsnap_release(ptr);
      return;
    }
    (*fill)[(*nfill)++] = ptr;
  }
}

/* Rebuilds what was held when the history began: each classic segment of that time (the
 * snapshot's, rewound through the history) laid out in address order, its live blocks where they
 * were and its free ranges cached; then the live blocks outside them (expandable segments). */
static void preload(run_state *st) {
  const ms_prehistory *h = &st->p->before;
  void **fill = NULL;
  size_t nfill = 0, fill_cap = 0, next = 0;
  bool *done = calloc(h->nblocks + 1, sizeof *done);
  if (!done) {
    st->host_oom = true;
    return;
  }
  for (size_t g = 0; g < h->nsegments && !st->host_oom; g++) {
    const ms_prior_segment *seg = &h->segments[g];
    if (seg->device >= st->r->ndevices || !stream_ok(st, seg->stream)) continue;
    if (!seg->small) { /* a large segment: one block of its size first, cached, then carved */
      void *whole = NULL;
      if (memsnap_alloc(&whole, (size_t)seg->size, seg->device, (memsnap_stream_t)(uintptr_t)seg->stream) == MEMSNAP_OK)
        memsnap_release(whole);
    }
    uint64_t cursor = seg->address, end = seg->address + (uint64_t)seg->size;
    while (next < h->nblocks && (h->blocks[next].device < seg->device ||
                                 (h->blocks[next].device == seg->device && h->blocks[next].address < seg->address)))
      next++;
    for (size_t i = next; i < h->nblocks && h->blocks[i].device == seg->device && h->blocks[i].address < end; i++) {
      const ms_prior_block *b = &h->blocks[i];
      if (b->address < cursor || b->address + (uint64_t)b->size > end) continue; /* overlapping: placed later */
      if (b->address > cursor) lay(st, seg, NULL, (int64_t)(b->address - cursor), &fill, &nfill, &fill_cap);
      lay(st, seg, b, 0, &fill, &nfill, &fill_cap);
      done[i] = true;
      cursor = b->address + (uint64_t)b->size;
    }
    if (cursor < end) lay(st, seg, NULL, (int64_t)(end - cursor), &fill, &nfill, &fill_cap);
  }
  for (size_t i = 0; i < h->nblocks && !st->host_oom; i++)
    if (!done[i] && h->blocks[i].device < st->r->ndevices && stream_ok(st, h->blocks[i].stream))
      lay(st, NULL, &h->blocks[i], 0, NULL, NULL, NULL);
  for (size_t i = 0; i < nfill; i++) memsnap_release(fill[i]);
  free(fill);
  free(done);
}

static void recorded_numbers(const ms_replay_plan *p, const rec_device *rec, ms_replay_result *r) {
  for (int i = 0; i < r->ndevices; i++) {
    const rec_device *d = &rec[i];
    const plan_device *pd = &p->dev[i];
    ms_replay_device *o = &r->dev[i];
    /* What was held when the history began: the state at the snapshot less the history's net. */
    int64_t start_reserved = pd->end_reserved - d->net_reserved, start_allocated = pd->end_allocated - d->net_allocated;
    if (start_reserved < 0) start_reserved = 0;
    if (start_allocated < 0) start_allocated = 0;
    o->used = d->seg_allocs || d->max_allocated || pd->end_segments || d->ooms || d->net_allocated || pd->end_reserved;
    o->rec_peak_reserved = start_reserved + d->max_reserved;
    o->rec_allocated_at_peak = start_allocated + d->alloc_at_max;
    o->rec_peak_allocated = start_allocated + d->max_allocated;
    o->rec_device_allocs = d->seg_allocs;
    o->rec_device_frees = d->seg_frees;
    o->rec_segments_end = pd->end_segments;
    o->rec_ooms = d->ooms;
  }
}

/* Whether the recording's net change differs from the snapshot's state: something was held
 * before the history began. */
static bool started_late(const ms_replay_plan *p, const rec_device *rec) {
  for (int i = 0; i < p->ndevices; i++)
    if (rec[i].net_reserved != p->dev[i].end_reserved || rec[i].net_allocated != p->dev[i].end_allocated) return true;
  return false;
}

int ms_replay_run(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, ms_replay_result *r) {
  memset(r, 0, sizeof *r);
  r->config = *c;
  r->ndevices = p->ndevices ? p->ndevices : 1;
  for (int i = 0; i < r->ndevices; i++) r->dev[i].capacity = (int64_t)(c->capacity ? c->capacity : p->capacity);
  if (configure(p, c, r) != 0) {
    r->failed = true;
    memsnap_shutdown();
    return -1;
  }
  if (p->timeline) ms_events_extent(s); /* the buckets span the history (known after any whole pass) */
  run_state st = {.s = s, .p = p, .r = r, .now = s->first_ns, .bucket_width = ms_bucket_width(s)};
  if (p->timeline) { /* drawn anew: a replay again (late start found, no limit) replaces it */
    int device = p->timeline->device;
    memset(p->timeline, 0, sizeof *p->timeline);
    p->timeline->device = device;
  }
  preload(&st);
  int64_t base_allocs[MS_REPLAY_DEVICES] = {0}, base_frees[MS_REPLAY_DEVICES] = {0};
  for (int i = 0; i < r->ndevices && r->preloaded_blocks; i++) { /* counted from the history's start */
    memsnap_stats_t stats;
    if (memsnap_get_stats(i, &stats) != MEMSNAP_OK) continue;
    base_allocs[i] = stats.num_device_alloc;
    base_frees[i] = stats.num_device_free;
  }
  int rc = st.host_oom ? 1 : p->source ? p->source(s, p->source_arg, run_event, &st) : ms_events_each(s, run_event, &st);
  for (int i = 0; i < r->ndevices && rc == 0; i++) {
    if (st.has_pending_free[i]) replay_free(&st, &st.pending_free[i], true); /* pending at the snapshot */
    explain_segment_frees(&st, i, NULL);
  }
  if (rc != 0) {
    r->failed = true;
    if (!r->error[0]) snprintf(r->error, sizeof r->error, "%.500s", s->error);
  }
  for (int i = 0; i < r->ndevices; i++) {
    memsnap_stats_t stats;
    ms_replay_device *d = &r->dev[i];
    update_peak(&st, i); /* a peak inside the last calls (a free's release, a failed allocation) */
    if (memsnap_get_stats(i, &stats) != MEMSNAP_OK) continue;
    if (!st.external_seen[i]) d->peak_allocated = stats.allocated_bytes[MEMSNAP_POOL_ALL].peak;
    d->allocator_peak_allocated = st.external_seen[i] ? stats.allocated_bytes[MEMSNAP_POOL_ALL].peak : d->peak_allocated;
    d->allocator_peak_reserved = st.external_seen[i] ? stats.reserved_bytes[MEMSNAP_POOL_ALL].peak : d->peak_reserved;
    d->device_allocs = stats.num_device_alloc - base_allocs[i];
    d->device_frees = stats.num_device_free - base_frees[i];
    d->retries = stats.num_alloc_retries;
    d->ooms = stats.num_ooms;
    d->segments_end = stats.segment[MEMSNAP_POOL_ALL].current;
  }
  if (!p->late && !p->checked && !p->inconsistent && !r->failed && started_late(p, st.rec)) {
    /* found late: the blocks live before the history are needed, and this replay again */
    ms_live_free(&st.live);
    ms_live_free(&st.deferred);
    ms_live_free(&st.external);
    free(st.held);
    free(st.pseudo_free);
    memsnap_shutdown();
    p->late = true;
    int prc = plan_late(s, p);
    if (prc != 0) {
      memset(r, 0, sizeof *r);
      r->config = *c;
      r->failed = true;
      snprintf(r->error, sizeof r->error, "%.500s", prc == -1 ? "out of host memory" : s->error);
      return -1;
    }
    if (!s->dropped && p->before.nblocks == 0 && p->before.nsegments == 0) { /* nothing was held: the events do not add up */
      p->late = false;
      p->inconsistent = true;
    }
    return ms_replay_run(s, p, c, r);
  }
  p->checked = true;
  recorded_numbers(p, st.rec, r);
  if (r->bad_events)
    ms_replay_note(r, "%lld events with an unknown kind, no size or address, or a device outside 0 to %d were skipped",
         (long long)r->bad_events, r->ndevices - 1);
  if (p->late)
    ms_replay_note(r, "the history starts late (%s): what was held when it began was rebuilt from the snapshot's state "
         "rewound through the history (%zu segments, %lld live blocks of %lld bytes), laid out as recorded "
         "under every setting; how the program got there, and what the settings would have changed before it, "
         "could not be known",
         s->dropped ? "the ring dropped its oldest events" : "recording started after the first allocations",
         p->before.nsegments, (long long)r->preloaded_blocks, (long long)r->preloaded_bytes);
  if (!p->capacity_known && !c->capacity)
    ms_replay_note(r, "the snapshot does not say how much memory the device has: %llu GiB assumed (the default, 16, or the "
         "most the program held reserved, %.2f GiB, in whole GiB when more; --capacity sets it)",
         (unsigned long long)(p->capacity >> 30), (double)p->held_most / (double)(1 << 30));
  if (p->inconsistent)
    ms_replay_note(r, "the events do not add up to the snapshot's segments and blocks, and no block or segment was held "
         "before them: the trace is inconsistent, and the recorded figures are those of its events");
  if (p->private_pools)
    ms_replay_note(r, "the snapshot holds private pools (CUDA graphs, MemPool); the history does not say which allocations "
         "went to them, so all are replayed in the default pools");
  if (p->imported)
    ms_replay_note(r, "imported from PyTorch (%s): record_stream uses are known only through frees completed later; "
         "the replay keeps the recorded order of events, not the GPU's timing", p->import_source);
  ms_live_free(&st.live);
  ms_live_free(&st.deferred);
  ms_live_free(&st.external);
  free(st.held);
  free(st.pseudo_free);
  memsnap_shutdown();
  return r->failed ? -1 : 0;
}
