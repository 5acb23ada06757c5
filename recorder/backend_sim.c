/* backend_sim.c: a simulated CUDA device, for tests, for the demo without a GPU and for
 * replaying recorded traces.
 *
 * Each simulated device owns the address range [base, base + capacity) with
 * base = 0x100000000000 * (device + 1): addresses look like device pointers and are never
 * dereferenced (touching one faults). Segments are placed first-fit in that range, so the
 * device runs out of memory exactly when the real one would at that capacity.
 *
 * Streams are opaque values. Each has a count of work submitted and of work completed; an
 * event records the submitted count and is complete once the completed count reaches it.
 * Work is "submitted" by every event record and completed by memsnap_sim_synchronize(stream)
 * (or event_synchronize), so a test decides exactly when cross-stream uses finish.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SIM_BASE 0x100000000000ull

typedef struct range {
  uintptr_t start;
  size_t size;
} range;

typedef struct sim_device {
  range *free;     /* free address ranges sorted by start, coalesced */
  int nfree, cap;
  size_t used;
} sim_device;

typedef struct sim_stream {
  memsnap_stream_t stream;
  uint64_t submitted, completed;
} sim_stream;

typedef struct sim_event {
  memsnap_stream_t stream;
  uint64_t ticket;
} sim_event;

static sim_device *devs;
static int ndevs;
static sim_stream *streams;
static int nstreams, streams_cap;
static pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;

static int sim_init(void) {
  ndevs = msi_opt.sim_devices;
  devs = calloc((size_t)ndevs, sizeof *devs);
  if (!devs) goto oom;
  for (int i = 0; i < ndevs; i++) {
    devs[i].free = malloc(sizeof(range) * 8);
    if (!devs[i].free) goto oom;
    devs[i].cap = 8;
    devs[i].nfree = 1;
    devs[i].free[0].start = (uintptr_t)(SIM_BASE * (uint64_t)(i + 1));
    devs[i].free[0].size = msi_opt.sim_capacity;
  }
  return MSI_BE_OK;
oom:
  msi_error("sim backend: out of host memory");
  return MSI_BE_ERR;
}

static void sim_shutdown(void) {
  for (int i = 0; i < ndevs && devs; i++) free(devs[i].free);
  free(devs);
  free(streams);
  devs = NULL;
  streams = NULL;
  ndevs = nstreams = streams_cap = 0;
}

static int sim_device_count(void) { return ndevs; }

static int sim_device_info(int dev, size_t *free_bytes, size_t *total, char *name, size_t len) {
  pthread_mutex_lock(&sim_lock);
  if (free_bytes) *free_bytes = msi_opt.sim_capacity - devs[dev].used;
  pthread_mutex_unlock(&sim_lock);
  if (total) *total = msi_opt.sim_capacity;
  if (name) snprintf(name, len, "memsnap simulated device %d", dev);
  return MSI_BE_OK;
}

static int sim_mem_alloc(int dev, size_t size, uintptr_t *out) {
  sim_device *d = &devs[dev];
  int rc = MSI_BE_OOM;
  pthread_mutex_lock(&sim_lock);
  for (int i = 0; i < d->nfree; i++) {
    if (d->free[i].size < size) continue;
    *out = d->free[i].start;
    d->free[i].start += size;
    d->free[i].size -= size;
    if (d->free[i].size == 0) {
      memmove(&d->free[i], &d->free[i + 1], sizeof(range) * (size_t)(d->nfree - i - 1));
      d->nfree--;
    }
    d->used += size;
    rc = MSI_BE_OK;
    break;
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_mem_free(int dev, uintptr_t ptr, size_t size) {
  sim_device *d = &devs[dev];
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  int i = 0;
  while (i < d->nfree && d->free[i].start < ptr) i++;
  bool join_prev = i > 0 && d->free[i - 1].start + d->free[i - 1].size == ptr;
  bool join_next = i < d->nfree && ptr + size == d->free[i].start;
  if ((i > 0 && d->free[i - 1].start + d->free[i - 1].size > ptr) ||
      (i < d->nfree && ptr + size > d->free[i].start)) {
    msi_error("sim backend: free of %#lx (%zu bytes) overlaps free memory", (unsigned long)ptr, size);
    rc = MSI_BE_ERR;
  } else if (join_prev && join_next) {
    d->free[i - 1].size += size + d->free[i].size;
    memmove(&d->free[i], &d->free[i + 1], sizeof(range) * (size_t)(d->nfree - i - 1));
    d->nfree--;
  } else if (join_prev) {
    d->free[i - 1].size += size;
  } else if (join_next) {
    d->free[i].start = ptr;
    d->free[i].size += size;
  } else {
    if (d->nfree == d->cap) {
      range *grown = realloc(d->free, sizeof(range) * (size_t)d->cap * 2);
      if (!grown) {
        msi_error("sim backend: out of host memory");
        rc = MSI_BE_ERR;
        goto out;
      }
      d->free = grown;
      d->cap *= 2;
    }
    memmove(&d->free[i + 1], &d->free[i], sizeof(range) * (size_t)(d->nfree - i));
    d->free[i].start = ptr;
    d->free[i].size = size;
    d->nfree++;
  }
  if (rc == MSI_BE_OK) d->used -= size;
out:
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

/* Caller holds sim_lock. Returns NULL only when out of host memory. */
static sim_stream *stream_of(memsnap_stream_t s) {
  for (int i = 0; i < nstreams; i++)
    if (streams[i].stream == s) return &streams[i];
  if (nstreams == streams_cap) {
    int cap = streams_cap ? streams_cap * 2 : 8;
    sim_stream *grown = realloc(streams, sizeof *grown * (size_t)cap);
    if (!grown) return NULL;
    streams = grown;
    streams_cap = cap;
  }
  streams[nstreams] = (sim_stream){s, 0, 0};
  return &streams[nstreams++];
}

static int sim_event_create(int dev, void **ev) {
  (void)dev;
  *ev = calloc(1, sizeof(sim_event));
  if (*ev) return MSI_BE_OK;
  msi_error("sim backend: out of host memory");
  return MSI_BE_ERR;
}

static int sim_event_record(int dev, void *ev, memsnap_stream_t stream) {
  (void)dev;
  sim_event *e = ev;
  pthread_mutex_lock(&sim_lock);
  sim_stream *s = stream_of(stream);
  if (s) {
    e->stream = stream;
    e->ticket = ++s->submitted;
  }
  pthread_mutex_unlock(&sim_lock);
  if (s) return MSI_BE_OK;
  msi_error("sim backend: out of host memory");
  return MSI_BE_ERR;
}

static int sim_event_query(int dev, void *ev) {
  (void)dev;
  sim_event *e = ev;
  pthread_mutex_lock(&sim_lock);
  sim_stream *s = stream_of(e->stream);
  int done = s && s->completed >= e->ticket;
  pthread_mutex_unlock(&sim_lock);
  return done;
}

static int sim_event_synchronize(int dev, void *ev) {
  (void)dev;
  sim_event *e = ev;
  pthread_mutex_lock(&sim_lock);
  sim_stream *s = stream_of(e->stream);
  if (s && s->completed < e->ticket) s->completed = e->ticket;
  pthread_mutex_unlock(&sim_lock);
  return MSI_BE_OK;
}

static void sim_event_destroy(int dev, void *ev) {
  (void)dev;
  free(ev);
}

int msi_sim_synchronize(memsnap_stream_t stream) {
  pthread_mutex_lock(&sim_lock);
  sim_stream *s = stream_of(stream);
  if (s) s->completed = s->submitted;
  pthread_mutex_unlock(&sim_lock);
  return s ? MEMSNAP_OK : MEMSNAP_ENOMEM;
}

const msi_backend msi_backend_sim = {
    .name = "sim",
    .init = sim_init,
    .device_count = sim_device_count,
    .device_info = sim_device_info,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .event_create = sim_event_create,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_synchronize = sim_event_synchronize,
    .event_destroy = sim_event_destroy,
    .shutdown = sim_shutdown,
};
