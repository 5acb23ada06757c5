/* retries.c: the allocator's own releases of cached memory, explained: the requests it released
 * the cache for and retried (served, or out of memory), empty_cache calls, garbage collection,
 * private pools emptied, expandable segments' pages unmapped (ms_releases in analysis.h).
 *
 * When the device refuses a request, the caching allocator (PyTorch's, and memsnap's in
 * recorder/allocator/alloc.c) releases oversize cached blocks and retries, then every unsplit cached
 * segment and retries, then fails; with a memory fraction and garbage_collection_threshold it
 * releases the oldest cached segments before asking at all. The snapshot holds the
 * segment_free and segment_unmap events each release caused, with the stack of the call that
 * caused them. memsnap's recorder writes why into their `extra` (MEMSNAP_RELEASE_*,
 * recorder/snapshot_schema.h); where a file does not say (imported PyTorch snapshots, older
 * files), the pattern does (ms_release_cause): a run of releases on a device followed by that
 * device's segment allocation and allocation of the same call is a retry that succeeded,
 * followed by its out of memory one that failed; any other run is an empty_cache call.
 *
 * The analysis's pass (analyze.c) hands every segment event here, and every event of a device
 * while something is open on it (ms_releases_pending): a run of releases without a reason, a call
 * (empty_cache...) whose releases may go on, or a request whose releases came and whose alloc or
 * oom is awaited. Nothing else costs more than that test. Memory: per device, a few counters;
 * the retries listed (at most MS_RETRIES_MAX); the external segments alive.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

_Static_assert(MS_MAX_DEVICES <= 64, "ms_release_pass.pending has a bit per device");

int ms_release_cause(int recorded, uint32_t run_stack, int64_t reserved, const ms_event *next, const ms_release_limits *l) {
  if (recorded > 0 && recorded < MEMSNAP_RELEASE_REASONS) return recorded;
  if (!next || (next->kind != MS_SEGMENT_ALLOC && next->kind != MS_SEGMENT_MAP && next->kind != MS_OOM))
    return MEMSNAP_RELEASE_EMPTY_CACHE;
  double fraction = l->fraction > 0 && l->fraction < 1 ? l->fraction : 1.0, limit = l->capacity * fraction;
  bool full = l->capacity > 0 && (double)reserved + (double)next->size > limit; /* the segment did not fit */
  bool gc = l->gc_threshold > 0 && fraction < 1 && l->capacity > 0 && (double)reserved > l->gc_threshold * limit;
  if (run_stack && next->stack_id) { /* the same call, or not */
    if (run_stack != next->stack_id) return MEMSNAP_RELEASE_EMPTY_CACHE;
    return next->kind != MS_OOM && !full && gc ? MEMSNAP_RELEASE_GC : MEMSNAP_RELEASE_RETRY;
  }
  if (next->kind == MS_OOM || full) return MEMSNAP_RELEASE_RETRY;
  return gc ? MEMSNAP_RELEASE_GC : MEMSNAP_RELEASE_EMPTY_CACHE;
}

/* ---- the pass's start: each device's limits and reserved bytes ---------------------------- */

static int limits_option(const char *name, const char *value, void *arg) {
  ms_release_pass *p = arg;
  double v = strtod(value, NULL);
  for (int d = 0; d < MS_MAX_DEVICES; d++) {
    if (!strcmp(name, "MEMSNAP_MEMORY_FRACTION") && v > 0 && v <= 1) p->limits[d].fraction = v;
    if (!strcmp(name, "MEMSNAP_GARBAGE_COLLECTION_THRESHOLD") && v > 0 && v < 1) p->limits[d].gc_threshold = v;
  }
  return 0;
}

static int limits_device(const ms_device_row *r, void *arg) {
  ms_release_pass *p = arg;
  if (r->device >= 0 && r->device < MS_MAX_DEVICES && r->total_bytes > 0) p->limits[r->device].capacity = (double)r->total_bytes;
  return 0;
}

/* Reserved at the snapshot, by device (the history's change is taken off afterwards). */
static int reserved_at_end(const ms_segment_row *r, void *arg) {
  ms_release_pass *p = arg;
  if (r->device >= 0 && r->device < MS_MAX_DEVICES) p->reserved[r->device] += r->size;
  return 0;
}

int ms_releases_begin(ms_analysis *a, ms_release_pass *p) {
  memset(p, 0, sizeof *p);
  for (int d = 0; d < MS_MAX_DEVICES; d++) p->limits[d].fraction = 1;
  ms_snapshot *s = a->snap;
  if (ms_options_each(s, limits_option, p) != 0 || ms_devices_each(s, limits_device, p) != 0 ||
      ms_segments_each(s, reserved_at_end, p) != 0)
    return -1;
  for (int d = 0; d < MS_MAX_DEVICES; d++) p->reserved[d] = ms_prehistory_start_reserved(&a->before, d, p->reserved[d]);
  return 0;
}

/* ---- what a run, a call and a request add up to ------------------------------------------- */

static void count(ms_release_count *c, bool new_call, int64_t segments, int64_t bytes) {
  c->calls += new_call;
  c->segments += segments;
  c->bytes += bytes;
}

/* The request's alloc (served) or oom (not) came: its retry is listed, its garbage collection
 * counted. */
static int finish_request(ms_analysis *a, ms_release_pass *p, ms_release_device *r, const ms_event *e) {
  ms_releases *R = &a->releases;
  if (r->gc_segments) count(&R->gc, true, r->gc_segments, r->gc_bytes);
  if (r->req_segments) {
    bool served = e->kind == MS_ALLOC;
    count(&R->retried, true, r->req_segments, r->req_bytes);
    R->retries_failed += !served;
    if (R->nretries < MS_RETRIES_MAX) {
      if (!ms_grow(&R->retries, &p->retries_cap, R->nretries + 1, sizeof *R->retries)) return -1;
      R->retries[R->nretries++] = (ms_retry){
          .time_ns = r->req_ns, .request_ns = e->time_ns, .requested = e->requested > 0 ? e->requested : e->size,
          .released = r->req_bytes, .segments = r->req_segments, .unmapped = r->req_unmapped,
          .reserved_before = r->req_reserved, .device = e->device, .stack_id = e->stack_id, .succeeded = served,
          .whole_cache = r->req_whole, .oversize = r->req_oversize, .reason_recorded = r->req_recorded && !r->req_inferred};
    }
  }
  r->awaiting = false;
  return 0;
}

/* A request's releases with no request after them (a trace that does not add up): counted. */
static void abandon_request(ms_analysis *a, ms_release_device *r) {
  if (r->gc_segments) count(&a->releases.gc, true, r->gc_segments, r->gc_bytes);
  if (r->req_segments) count(&a->releases.other, true, r->req_segments, r->req_bytes);
  r->awaiting = false;
}

/* Opens the device's request (its releases come first) if none is open. */
static void open_request(ms_release_pass *p, int device, int64_t t, int64_t reserved) {
  ms_release_device *r = &p->dev[device];
  if (r->awaiting) return;
  memset(&r->req_ns, 0, sizeof *r - offsetof(ms_release_device, req_ns));
  r->awaiting = true;
  r->req_ns = t;
  r->req_reserved = reserved;
}

/* Closes the device's run of releases without a reason, `next` the device's event after it. */
static void close_run(ms_analysis *a, ms_release_pass *p, int device, const ms_event *next) {
  ms_release_device *r = &p->dev[device];
  int cause = ms_release_cause(0, r->run_stack, r->run_reserved, next, &p->limits[device]);
  a->releases.inferred += r->run_segments;
  r->run_open = false;
  if (cause == MEMSNAP_RELEASE_EMPTY_CACHE) {
    count(&a->releases.empty_cache, true, r->run_segments, r->run_bytes);
    return;
  }
  open_request(p, device, r->run_ns, r->run_reserved);
  if (cause == MEMSNAP_RELEASE_GC) {
    r->gc_bytes += r->run_bytes;
    r->gc_segments += r->run_segments;
  } else {
    r->req_bytes += r->run_bytes;
    r->req_segments += r->run_segments;
    r->req_unmapped += r->run_unmapped;
    r->req_inferred = true;
  }
}

/* A segment_free or segment_unmap. */
static void release(ms_analysis *a, ms_release_pass *p, const ms_event *e) {
  ms_release_device *r = &p->dev[e->device];
  ms_releases *R = &a->releases;
  int reason = e->extra > 0 && e->extra < MEMSNAP_RELEASE_REASONS ? (int)e->extra : 0;
  bool unmap = e->kind == MS_SEGMENT_UNMAP;
  ms_live_slot taken;
  if (unmap) {
    R->unmaps++;
    R->unmapped_bytes += e->size;
  }
  if (!unmap && p->external.slots && ms_live_take(&p->external, e->address, &taken) && !reason) {
    reason = MEMSNAP_RELEASE_EXTERNAL; /* the program's cudaFree of an intercepted allocation */
    R->inferred++;
  } else if (reason) {
    R->recorded++;
  }
  if (r->run_open && (reason || e->stack_id != r->run_stack)) close_run(a, p, e->device, e); /* another call's */
  if (r->call_reason && (reason != r->call_reason || e->stack_id != r->call_stack)) r->call_reason = 0;
  int64_t reserved = p->reserved[e->device];
  switch (reason) {
    case 0:
      if (!r->run_open) {
        r->run_open = true;
        r->run_stack = e->stack_id;
        r->run_ns = e->time_ns;
        r->run_reserved = reserved;
        r->run_bytes = r->run_segments = r->run_unmapped = 0;
      }
      r->run_bytes += e->size;
      r->run_segments++;
      r->run_unmapped += unmap ? e->size : 0;
      break;
    case MEMSNAP_RELEASE_RETRY:
    case MEMSNAP_RELEASE_OVERSIZE:
      open_request(p, e->device, e->time_ns, reserved);
      r->req_bytes += e->size;
      r->req_segments++;
      r->req_unmapped += unmap ? e->size : 0;
      r->req_whole |= reason == MEMSNAP_RELEASE_RETRY;
      r->req_oversize |= reason == MEMSNAP_RELEASE_OVERSIZE;
      r->req_recorded = true;
      break;
    case MEMSNAP_RELEASE_GC:
      open_request(p, e->device, e->time_ns, reserved);
      r->gc_bytes += e->size;
      r->gc_segments++;
      break;
    default: { /* a call of its own: empty_cache, a pool emptied, shutdown, external, the driver */
      ms_release_count *c = reason == MEMSNAP_RELEASE_EMPTY_CACHE ? &R->empty_cache
                            : reason == MEMSNAP_RELEASE_POOL      ? &R->pool
                            : reason == MEMSNAP_RELEASE_EXTERNAL  ? &R->external
                                                                  : &R->other;
      count(c, r->call_reason == 0, 1, e->size);
      r->call_reason = (uint8_t)reason;
      r->call_stack = e->stack_id;
      break;
    }
  }
}

int ms_releases_event(ms_analysis *a, ms_release_pass *p, const ms_event *e) {
  if (e->device < 0 || e->device >= MS_MAX_DEVICES) return 0;
  int d = e->device;
  ms_release_device *r = &p->dev[d];
  switch (e->kind) {
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_UNMAP:
      release(a, p, e);
      p->reserved[d] -= e->size;
      break;
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_MAP:
      if (ms_event_external_segment(e) && ms_live_put(&p->external, (ms_live_slot){.key = e->address, .site = 0, .aux = 0, .size = e->size}) != 0)
        return -1;
      if (r->run_open) close_run(a, p, d, e);
      r->call_reason = 0;
      p->reserved[d] += e->size;
      break;
    default:
      if (r->run_open) close_run(a, p, d, e);
      r->call_reason = 0;
      if (r->awaiting && (e->kind == MS_ALLOC || e->kind == MS_OOM)) {
        if (finish_request(a, p, r, e) != 0) return -1;
      } else if (r->awaiting && e->kind != MS_SNAPSHOT && e->kind != MS_INVALID_FREE && e->kind != MS_IPC_SHARE &&
                 !ms_event_is_model(e->kind)) {
        abandon_request(a, r);
      }
      break;
  }
  bool open = r->run_open || r->awaiting || r->call_reason;
  p->pending = open ? p->pending | (uint64_t)1 << d : p->pending & ~((uint64_t)1 << d);
  return 0;
}

void ms_releases_end(ms_analysis *a, ms_release_pass *p) {
  for (int d = 0; d < MS_MAX_DEVICES; d++) {
    ms_release_device *r = &p->dev[d];
    if (r->run_open) close_run(a, p, d, NULL);
    if (r->awaiting) abandon_request(a, r);
  }
  p->pending = 0;
  ms_live_free(&p->external);
}
