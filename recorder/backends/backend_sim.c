/* backend_sim.c: a simulated CUDA device, for tests, for the demo without a GPU and for
 * replaying recorded traces.
 *
 * Each simulated device owns the address range [base, base + capacity) with
 * base = 0x100000000000 * (device + 1): addresses look like device pointers and are never
 * dereferenced (touching one faults). Segments are placed first-fit in that range, so the
 * device runs out of memory exactly when the real one would at that capacity: from the bottom
 * (the lowest free range, at its start), or with MEMSNAP_SIM_PLACEMENT=top from the top (the
 * highest free range, at its end), as CUDA's driver hands out cudaMalloc's memory on the GPUs
 * measured (each new segment below the last, gaps filled). The order matters to the allocator:
 * of two free blocks of one size it takes the one at the lower address, so the replay, which
 * follows a recorded run, places from the top (docs/replay.md).
 *
 * Streams are opaque values. Each has a count of work submitted and of work completed; an
 * event records the submitted count and is complete once the completed count reaches it.
 * Work is "submitted" by every event record and completed by memsnap_sim_synchronize(stream)
 * (or event_synchronize), so a test decides exactly when cross-stream uses finish.
 *
 * Virtual memory (expandable segments): reservations of address space come from a window of
 * their own per device, [VA_BASE + device * VA_WINDOW, + VA_WINDOW), and cost no capacity;
 * mapping a page takes page_size bytes of the device's capacity (out of memory past it) and
 * must land inside a reservation on a page that is not mapped; unmapping gives them back. The
 * mapped pages are kept so that a wrong map, unmap or free is an error, as with the driver.
 *
 * The stream-ordered pool (async mode), like the driver's default pool with a release threshold
 * of UINT64_MAX: it takes chunks of the device's capacity (the request rounded up to 2 MiB) and
 * carves allocations out of them best fit, 512-byte aligned. A freed range remembers its stream
 * and the stream's submitted count: the same stream reuses it at once, another stream once that
 * count completed (memsnap_sim_synchronize). Nothing goes back to the device until trim
 * (empty_cache), which completes every stream and returns the chunks left wholly free; an
 * allocation that finds no room trims once and retries, as the driver may. Cross-stream waits
 * (stream_wait) are not modelled: a test completes streams itself. Reading the pool's counters
 * (async_usage) while a capture is underway invalidates it, as the driver does: its
 * memsnap_sim_capture_end then fails. The one exception to "a test completes streams": the
 * side stream (side_stream, the async mode's unifying free stream) does nothing but wait and
 * free, so its work completes by itself once the streams it waited for reached what they had
 * submitted at the wait (stream_wait is modelled for it alone).
 *
 * CUDA IPC: a classic segment's handle is the simulated cudaIpcMemHandle_t (a magic, the pid, the
 * device, the address and the size); opening one takes an address range of that size in a window
 * of its own, [IPC_BASE + device * VA_WINDOW, ...). A page of an expandable segment is exported
 * as a memfd of its size (a real descriptor, which another process can fetch with pidfd_getfd),
 * and a page received that way maps like any page but takes none of the capacity. The memory is
 * not shared (nothing is): the tests check the handles, the mappings and what is recorded.
 *
 * MEMSNAP_SIM_OLD_DRIVER=1 simulates a driver with neither (for the fallback tests).
 *
 * CUDA graph capture: a test begins a capture on a stream (memsnap_sim_capture_begin), puts work
 * on streams (memsnap_sim_launch: a node of the capture's graph, after the stream's terminal
 * nodes, which it then replaces), makes a stream wait for another (memsnap_sim_stream_wait: it
 * joins the other's capture, after the other's terminal nodes, as an event record and wait do)
 * and ends it (memsnap_sim_capture_end: every stream of the capture). The graph is what
 * capture_info and node_parents read (graph_capture_record_stream_reuse, capture.c). Nodes are
 * numbered from 1 and kept until shutdown.
 *
 * Peer access: every simulated device can access every other one (as GPUs on NVLink can), and
 * memsnap_sim_peer_access says whether one may access a given address. Classic segments are
 * accessible from every device (PyTorch enables peer access for the whole context, which covers
 * cuMemAlloc's memory); mapped pages and async pool chunks only from the devices they were
 * mapped for, as with the driver's cuMemSetAccess and cuMemPoolSetAccess: their own, and every
 * other device with MEMSNAP_PEER_ACCESS=1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#define SIM_BASE 0x100000000000ull

typedef struct range {
  uintptr_t start;
  size_t size;
  bool imported; /* a mapped page another process exported (no capacity of this device's) */
} range;

typedef struct apool_range { /* a piece of an async pool chunk */
  uintptr_t start;
  size_t size;
  int chunk;               /* index into chunks */
  bool free;
  memsnap_stream_t stream; /* free ranges: freed on this stream ... */
  uint64_t ticket;         /* ... at this submitted count */
} apool_range;

typedef struct sim_device {
  range *free;     /* free address ranges sorted by start, coalesced */
  int nfree, cap;
  size_t used;
  uintptr_t va_next;  /* next reservation's address */
  range *reserved;    /* live reservations */
  int nreserved, reserved_cap;
  range *mapped;      /* mapped pages, sorted by start */
  int nmapped, mapped_cap;
  range *opened;      /* classic segments of other processes opened (CUDA IPC), in their window */
  int nopened, opened_cap;
  uintptr_t ipc_next; /* next opened segment's address */
  range *chunks;      /* async pool chunks (size 0: released) */
  int nchunks;
  apool_range *pieces; /* async pool ranges, by address */
  int npieces, pieces_cap;
  uint64_t pool_reserved, pool_used, pool_reserved_high, pool_used_high;
} sim_device;

#define VA_BASE 0x8000000000000ull
#define VA_WINDOW 0x100000000000ull
#define IPC_BASE 0xC000000000000ull /* opened IPC handles: a window of VA_WINDOW per device */
#define SIM_IPC_MAGIC "MSIMIPC1"     /* a simulated cudaIpcMemHandle_t: magic, pid, device, address, size */

typedef struct sim_wait { /* a side stream's wait: for stream idx to reach ticket, made at `at` */
  int idx;
  uint64_t ticket, at;
} sim_wait;

typedef struct sim_stream {
  memsnap_stream_t stream;
  sim_wait *waits; /* side streams only (side_stream): the waits not yet satisfied, in order */
  size_t nwaits, waits_cap;
  uint64_t submitted, completed;
  uint64_t capture;  /* the capture it takes part in (0: none) */
  bool invalidated;  /* its capture broken by a call a capture forbids (the pool read) */
  uintptr_t *deps;   /* while capturing: the nodes its next work depends on (its terminal nodes) */
  size_t ndeps, deps_cap;
} sim_stream;

typedef struct sim_node { /* a node of a simulated capture graph: node k is the value k + 1 */
  uintptr_t *parents;
  size_t nparents;
} sim_node;

typedef struct sim_event {
  memsnap_stream_t stream;
  uint64_t ticket;
} sim_event;

static sim_device *devs;
static int ndevs;
static sim_stream *streams;
static int nstreams, streams_cap;
static sim_node *nodes; /* every capture's graph nodes, kept until shutdown */
static size_t nnodes, nodes_cap;
static uint64_t last_capture;
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
    devs[i].va_next = (uintptr_t)(VA_BASE + VA_WINDOW * (uint64_t)i);
    devs[i].ipc_next = (uintptr_t)(IPC_BASE + VA_WINDOW * (uint64_t)i);
  }
  return MSI_BE_OK;
oom:
  msi_error("sim backend: out of host memory");
  return MSI_BE_ERR;
}

static void sim_shutdown(void) {
  for (int i = 0; i < ndevs && devs; i++) {
    free(devs[i].free);
    free(devs[i].reserved);
    free(devs[i].mapped);
    free(devs[i].opened);
    free(devs[i].chunks);
    free(devs[i].pieces);
  }
  free(devs);
  for (int i = 0; i < nstreams; i++) {
    free(streams[i].deps);
    free(streams[i].waits);
  }
  free(streams);
  for (size_t i = 0; i < nnodes; i++) free(nodes[i].parents);
  free(nodes);
  devs = NULL;
  streams = NULL;
  nodes = NULL;
  ndevs = nstreams = streams_cap = 0;
  nnodes = nodes_cap = 0;
  last_capture = 0;
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

/* First-fit physical memory, from the bottom or from the top (msi_opt.sim_top_down); caller
 * holds sim_lock. MSI_BE_OK or MSI_BE_OOM. */
static int take_range(sim_device *d, size_t size, uintptr_t *out) {
  int rc = MSI_BE_OOM;
  bool top = msi_opt.sim_top_down;
  for (int k = 0; k < d->nfree; k++) {
    int i = top ? d->nfree - 1 - k : k;
    if (d->free[i].size < size) continue;
    if (top) {
      *out = d->free[i].start + d->free[i].size - size;
    } else {
      *out = d->free[i].start;
      d->free[i].start += size;
    }
    d->free[i].size -= size;
    if (d->free[i].size == 0) {
      memmove(&d->free[i], &d->free[i + 1], sizeof(range) * (size_t)(d->nfree - i - 1));
      d->nfree--;
    }
    d->used += size;
    rc = MSI_BE_OK;
    break;
  }
  return rc;
}

static int sim_mem_alloc(int dev, size_t size, uintptr_t *out) {
  pthread_mutex_lock(&sim_lock);
  int rc = take_range(&devs[dev], size, out);
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

/* Gives physical memory back; caller holds sim_lock. MSI_BE_OK or MSI_BE_ERR (error set). */
static int give_range(sim_device *d, uintptr_t ptr, size_t size) {
  int rc = MSI_BE_OK;
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
  return rc;
}

static int sim_mem_free(int dev, uintptr_t ptr, size_t size) {
  pthread_mutex_lock(&sim_lock);
  int rc = give_range(&devs[dev], ptr, size);
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
  streams[nstreams] = (sim_stream){.stream = s};
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

static int sim_stream_synchronize(int dev, memsnap_stream_t stream) {
  (void)dev;
  return msi_sim_synchronize(stream) == MEMSNAP_OK ? MSI_BE_OK : MSI_BE_ERR;
}

static int sim_device_synchronize(int dev) {
  (void)dev;
  pthread_mutex_lock(&sim_lock);
  for (int i = 0; i < nstreams; i++) streams[i].completed = streams[i].submitted;
  pthread_mutex_unlock(&sim_lock);
  return MSI_BE_OK;
}

/* A handle no caller's stream has: the top of the address space, one per device. */
#define SIDE_STREAM_BASE (UINTPTR_MAX - 4095)
static int sim_side_stream(int dev, memsnap_stream_t *out) {
  *out = (memsnap_stream_t)(SIDE_STREAM_BASE + (uintptr_t)dev);
  return MSI_BE_OK;
}

static bool is_side(const sim_stream *s) { return (uintptr_t)s->stream >= SIDE_STREAM_BASE; }

/* A side stream's completion: everything submitted before its first unsatisfied wait. Caller
 * holds sim_lock. */
static void settle(sim_stream *s) {
  size_t done = 0;
  while (done < s->nwaits && streams[s->waits[done].idx].completed >= s->waits[done].ticket) done++;
  memmove(s->waits, s->waits + done, sizeof *s->waits * (s->nwaits - done));
  s->nwaits -= done;
  s->completed = s->nwaits ? s->waits[0].at : s->submitted;
}

/* Modelled for side streams only (see the top of this file); other waiters: nothing. */
static int sim_stream_wait(int dev, memsnap_stream_t waiter, memsnap_stream_t stream) {
  (void)dev;
  if ((uintptr_t)waiter < SIDE_STREAM_BASE) return MSI_BE_OK;
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  if (!stream_of(waiter) || !stream_of(stream)) { /* both registered first: stream_of may move the array */
    rc = MSI_BE_ERR;
    goto out;
  }
  sim_stream *w = stream_of(waiter), *s = stream_of(stream);
  if (w->nwaits == w->waits_cap) {
    size_t cap = w->waits_cap ? w->waits_cap * 2 : 8;
    sim_wait *g = realloc(w->waits, sizeof *g * cap);
    if (!g) {
      rc = MSI_BE_ERR;
      goto out;
    }
    w->waits = g;
    w->waits_cap = cap;
  }
  w->waits[w->nwaits++] = (sim_wait){(int)(s - streams), s->submitted, w->submitted};
out:
  pthread_mutex_unlock(&sim_lock);
  if (rc != MSI_BE_OK) msi_error("sim backend: out of host memory");
  return rc;
}

/* ---- virtual memory ------------------------------------------------------------------------- */

static int old_driver(const char *what) {
  if (!msi_opt.sim_old_driver) return 1;
  msi_error("the simulated driver has no %s (MEMSNAP_SIM_OLD_DRIVER=1)", what);
  return 0;
}

static int sim_vmm_supported(int dev) {
  (void)dev;
  return old_driver("virtual memory management");
}

/* Appends r to a range array; false when out of host memory. */
static bool push_range(range **v, int *n, int *cap, range r) {
  if (*n == *cap) {
    int c = *cap ? *cap * 2 : 8;
    range *g = realloc(*v, sizeof *g * (size_t)c);
    if (!g) return false;
    *v = g;
    *cap = c;
  }
  (*v)[(*n)++] = r;
  return true;
}

static int sim_va_reserve(int dev, size_t size, uintptr_t *out) {
  sim_device *d = &devs[dev];
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  uintptr_t window_end = (uintptr_t)(VA_BASE + VA_WINDOW * (uint64_t)(dev + 1));
  if (size > window_end - d->va_next) {
    msi_error("sim backend: device %d is out of address space for reservations", dev);
    rc = MSI_BE_ERR;
  } else if (!push_range(&d->reserved, &d->nreserved, &d->reserved_cap, (range){d->va_next, size, false})) {
    msi_error("sim backend: out of host memory");
    rc = MSI_BE_ERR;
  } else {
    *out = d->va_next;
    d->va_next += size;
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

/* Index of the first mapped page at or above ptr. Caller holds sim_lock. */
static int mapped_lower(const sim_device *d, uintptr_t ptr) {
  int lo = 0, hi = d->nmapped;
  while (lo < hi) {
    int m = (lo + hi) / 2;
    if (d->mapped[m].start < ptr) lo = m + 1;
    else hi = m;
  }
  return lo;
}

static int sim_va_free(int dev, uintptr_t ptr, size_t size) {
  sim_device *d = &devs[dev];
  int rc = MSI_BE_ERR;
  pthread_mutex_lock(&sim_lock);
  int i = mapped_lower(d, ptr);
  if (i < d->nmapped && d->mapped[i].start < ptr + size) {
    msi_error("sim backend: freeing reserved range %#lx that still has pages mapped", (unsigned long)ptr);
  } else {
    for (int r = 0; r < d->nreserved; r++)
      if (d->reserved[r].start == ptr && d->reserved[r].size == size) {
        d->reserved[r] = d->reserved[--d->nreserved];
        rc = MSI_BE_OK;
        break;
      }
    if (rc != MSI_BE_OK) msi_error("sim backend: %#lx is not a reserved range of %zu bytes", (unsigned long)ptr, size);
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

/* Maps a page at ptr: a new one (taking page_size of the capacity), or one another process
 * exported (`imported`: its memory is the other device's). */
static int map_page(int dev, uintptr_t ptr, size_t page_size, bool imported, void **handle) {
  sim_device *d = &devs[dev];
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  bool inside = false;
  for (int r = 0; r < d->nreserved && !inside; r++)
    inside = ptr >= d->reserved[r].start && ptr + page_size <= d->reserved[r].start + d->reserved[r].size;
  int i = mapped_lower(d, ptr);
  if (!inside || (i < d->nmapped && d->mapped[i].start < ptr + page_size) ||
      (i > 0 && d->mapped[i - 1].start + d->mapped[i - 1].size > ptr)) {
    msi_error("sim backend: mapping %#lx: not in a reservation, or already mapped", (unsigned long)ptr);
    rc = MSI_BE_ERR;
  } else if (!imported && msi_opt.sim_capacity - d->used < page_size) {
    rc = MSI_BE_OOM;
  } else if (!push_range(&d->mapped, &d->nmapped, &d->mapped_cap, (range){0, 0, false})) {
    msi_error("sim backend: out of host memory");
    rc = MSI_BE_ERR;
  } else {
    memmove(&d->mapped[i + 1], &d->mapped[i], sizeof(range) * (size_t)(d->nmapped - 1 - i));
    d->mapped[i] = (range){ptr, page_size, imported};
    if (!imported) d->used += page_size;
    *handle = (void *)ptr; /* the page's handle: its address is enough to check the unmap */
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_page_map(int dev, uintptr_t ptr, size_t page_size, void **handle) {
  return map_page(dev, ptr, page_size, false, handle);
}

/* A page's descriptor: a memfd of the page's size, which another process can fetch with
 * pidfd_getfd as it would the driver's (the simulated memory itself is not shared). */
static int sim_page_export(int dev, void *handle, int *fd) {
  (void)dev;
  (void)handle;
  int f = memfd_create("memsnap-sim-page", MFD_CLOEXEC);
  if (f < 0) {
    msi_error("sim backend: memfd_create: %s", strerror(errno));
    return MSI_BE_ERR;
  }
  *fd = f;
  return MSI_BE_OK;
}

static int sim_page_map_fd(int dev, uintptr_t ptr, size_t page_size, int fd, void **handle) {
  if (fcntl(fd, F_GETFD) < 0) {
    msi_error("sim backend: importing a page from descriptor %d: %s", fd, strerror(errno));
    return MSI_BE_ERR;
  }
  return map_page(dev, ptr, page_size, true, handle);
}

/* ---- CUDA IPC of classic segments --------------------------------------------------------- */

/* Whether [ptr, ptr + size) is wholly handed out by device d (in its range, none of it free). */
static bool allocated_range(const sim_device *d, int dev, uintptr_t ptr, size_t size) {
  uintptr_t base = (uintptr_t)(SIM_BASE * (uint64_t)(dev + 1));
  if (ptr < base || ptr + size > base + msi_opt.sim_capacity || size == 0) return false;
  for (int f = 0; f < d->nfree; f++)
    if (d->free[f].start < ptr + size && ptr < d->free[f].start + d->free[f].size) return false;
  return true;
}

static int sim_ipc_get_handle(int dev, uintptr_t ptr, size_t size, unsigned char out[64]) {
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  if (!allocated_range(&devs[dev], dev, ptr, size)) {
    msi_error("sim backend: %#lx is not a device allocation of %zu bytes", (unsigned long)ptr, size);
    rc = MSI_BE_ERR;
  } else {
    uint32_t pid = (uint32_t)getpid(), d = (uint32_t)dev;
    uint64_t p = ptr, n = size;
    memset(out, 0, 64);
    memcpy(out, SIM_IPC_MAGIC, 8);
    memcpy(out + 8, &pid, 4);
    memcpy(out + 12, &d, 4);
    memcpy(out + 16, &p, 8);
    memcpy(out + 24, &n, 8);
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_ipc_open(int dev, const unsigned char handle[64], uintptr_t *ptr, size_t *size) {
  sim_device *d = &devs[dev];
  uint64_t n;
  if (memcmp(handle, SIM_IPC_MAGIC, 8) != 0) {
    msi_error("sim backend: not a handle of the simulated device (cuIpcOpenMemHandle: invalid argument)");
    return MSI_BE_ERR;
  }
  memcpy(&n, handle + 24, 8);
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  uintptr_t window_end = (uintptr_t)(IPC_BASE + VA_WINDOW * (uint64_t)(dev + 1));
  if (n == 0 || n > window_end - d->ipc_next) {
    msi_error("sim backend: device %d cannot open an IPC handle of %llu bytes", dev, (unsigned long long)n);
    rc = MSI_BE_ERR;
  } else if (!push_range(&d->opened, &d->nopened, &d->opened_cap, (range){d->ipc_next, (size_t)n, true})) {
    msi_error("sim backend: out of host memory");
    rc = MSI_BE_ERR;
  } else {
    *ptr = d->ipc_next;
    *size = (size_t)n;
    d->ipc_next += ((size_t)n + MSI_SMALL_BUFFER - 1) / MSI_SMALL_BUFFER * MSI_SMALL_BUFFER;
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_ipc_close(int dev, uintptr_t ptr) {
  sim_device *d = &devs[dev];
  int rc = MSI_BE_ERR;
  pthread_mutex_lock(&sim_lock);
  for (int i = 0; i < d->nopened; i++)
    if (d->opened[i].start == ptr) {
      d->opened[i] = d->opened[--d->nopened];
      rc = MSI_BE_OK;
      break;
    }
  if (rc != MSI_BE_OK) msi_error("sim backend: closing %#lx, which no IPC handle opened", (unsigned long)ptr);
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_page_unmap(int dev, uintptr_t ptr, size_t page_size, void *handle) {
  sim_device *d = &devs[dev];
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  int i = mapped_lower(d, ptr);
  if (i == d->nmapped || d->mapped[i].start != ptr || d->mapped[i].size != page_size || handle != (void *)ptr) {
    msi_error("sim backend: unmapping %#lx, which is not a mapped page of %zu bytes", (unsigned long)ptr, page_size);
    rc = MSI_BE_ERR;
  } else {
    if (!d->mapped[i].imported) d->used -= page_size;
    memmove(&d->mapped[i], &d->mapped[i + 1], sizeof(range) * (size_t)(d->nmapped - i - 1));
    d->nmapped--;
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

/* ---- the stream-ordered pool (async mode) ---------------------------------------------------- */

static int sim_async_supported(int dev) {
  (void)dev;
  return old_driver("stream-ordered memory pools");
}

/* Whether a free range may serve `stream` now. Caller holds sim_lock. */
static bool piece_ready(const apool_range *p, memsnap_stream_t stream) {
  if (p->stream == stream) return true;
  sim_stream *s = stream_of(p->stream);
  if (s && is_side(s) && s->completed < p->ticket) settle(s);
  return s && s->completed >= p->ticket;
}

static bool insert_piece(sim_device *d, int at, apool_range p) {
  if (d->npieces == d->pieces_cap) {
    int cap = d->pieces_cap ? d->pieces_cap * 2 : 16;
    apool_range *g = realloc(d->pieces, sizeof *g * (size_t)cap);
    if (!g) return false;
    d->pieces = g;
    d->pieces_cap = cap;
  }
  memmove(&d->pieces[at + 1], &d->pieces[at], sizeof *d->pieces * (size_t)(d->npieces - at));
  d->pieces[at] = p;
  d->npieces++;
  return true;
}

static void remove_piece(sim_device *d, int at) {
  memmove(&d->pieces[at], &d->pieces[at + 1], sizeof *d->pieces * (size_t)(d->npieces - at - 1));
  d->npieces--;
}

/* Merges free piece i with its free neighbours of the same chunk that have the same owner
 * stream, or whose frees are complete. */
static void merge_pieces(sim_device *d, int i) {
  for (int side = 0; side < 2; side++) {
    int j = side ? i + 1 : i - 1;
    if (j < 0 || j >= d->npieces) continue;
    apool_range *a = &d->pieces[i], *b = &d->pieces[j];
    if (!b->free || b->chunk != a->chunk) continue;
    bool same = a->stream == b->stream, done = piece_ready(a, (memsnap_stream_t)(uintptr_t)-1) &&
                                                 piece_ready(b, (memsnap_stream_t)(uintptr_t)-1);
    if (!same && !done) continue;
    apool_range *lo = side ? a : b, *hi = side ? b : a;
    lo->size += hi->size;
    if (!same) lo->ticket = 0; /* both complete: ready for any stream */
    else if (lo->ticket < hi->ticket) lo->ticket = hi->ticket;
    remove_piece(d, side ? j : i);
    if (!side) i = j; /* merged into the one before */
  }
}

/* Completes every stream and returns the chunks left wholly free. Caller holds sim_lock. */
static void trim_pool(sim_device *d) {
  for (int i = 0; i < nstreams; i++) {
    streams[i].completed = streams[i].submitted;
    streams[i].nwaits = 0;
  }
  for (int i = 0; i + 1 < d->npieces;) { /* every free is complete now: merge free neighbours */
    apool_range *a = &d->pieces[i], *b = &d->pieces[i + 1];
    if (a->free && b->free && a->chunk == b->chunk) {
      a->size += b->size;
      a->ticket = 0;
      remove_piece(d, i + 1);
    } else {
      i++;
    }
  }
  for (int i = 0; i < d->npieces;) {
    apool_range *p = &d->pieces[i];
    range *c = &d->chunks[p->chunk];
    if (p->free && p->start == c->start && p->size == c->size) {
      give_range(d, c->start, c->size);
      d->pool_reserved -= c->size;
      c->size = 0;
      remove_piece(d, i);
    } else {
      i++;
    }
  }
}

/* Best fit among the ranges ready for `stream`; -1 if none. Caller holds sim_lock. */
static int find_piece(sim_device *d, size_t size, memsnap_stream_t stream) {
  int best = -1;
  for (int i = 0; i < d->npieces; i++) {
    apool_range *p = &d->pieces[i];
    if (p->free && p->size >= size && (best < 0 || p->size < d->pieces[best].size) && piece_ready(p, stream)) {
      best = i;
      if (p->size == size) break; /* nothing fits better: the first exact fit, as the full scan would pick */
    }
  }
  return best;
}

static int add_chunk(sim_device *d, size_t size) {
  size_t bytes = (size + MSI_SMALL_BUFFER - 1) / MSI_SMALL_BUFFER * MSI_SMALL_BUFFER;
  uintptr_t start;
  if (take_range(d, bytes, &start) != MSI_BE_OK) return -2;
  range *g = realloc(d->chunks, sizeof *g * (size_t)(d->nchunks + 1));
  if (!g) {
    give_range(d, start, bytes);
    return -1;
  }
  d->chunks = g;
  d->chunks[d->nchunks] = (range){start, bytes, false};
  int at = 0;
  while (at < d->npieces && d->pieces[at].start < start) at++;
  if (!insert_piece(d, at, (apool_range){start, bytes, d->nchunks, true, NULL, 0})) {
    give_range(d, start, bytes);
    return -1;
  }
  d->nchunks++;
  d->pool_reserved += bytes;
  if (d->pool_reserved > d->pool_reserved_high) d->pool_reserved_high = d->pool_reserved;
  return at;
}

static int sim_async_alloc(int dev, size_t size, memsnap_stream_t stream, uintptr_t *out) {
  sim_device *d = &devs[dev];
  size = (size + MSI_MIN_BLOCK_SIZE - 1) / MSI_MIN_BLOCK_SIZE * MSI_MIN_BLOCK_SIZE;
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  int i = find_piece(d, size, stream);
  if (i < 0) i = add_chunk(d, size);
  if (i == -2) { /* no room: give back what is free, then try once more */
    trim_pool(d);
    i = find_piece(d, size, stream);
    if (i < 0) i = add_chunk(d, size);
  }
  if (i < 0) {
    if (i == -1) msi_error("sim backend: out of host memory");
    rc = i == -2 ? MSI_BE_OOM : MSI_BE_ERR;
    goto out;
  }
  apool_range *p = &d->pieces[i];
  if (p->size > size) { /* split: the rest stays free, with its owner */
    apool_range rest = *p;
    rest.start += size;
    rest.size -= size;
    p->size = size;
    if (!insert_piece(d, i + 1, rest)) {
      p->size += rest.size;
      msi_error("sim backend: out of host memory");
      rc = MSI_BE_ERR;
      goto out;
    }
    p = &d->pieces[i];
  }
  p->free = false;
  p->stream = stream;
  *out = p->start;
  d->pool_used += size;
  if (d->pool_used > d->pool_used_high) d->pool_used_high = d->pool_used;
out:
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_async_free(int dev, uintptr_t ptr, memsnap_stream_t stream) {
  sim_device *d = &devs[dev];
  int rc = MSI_BE_ERR;
  pthread_mutex_lock(&sim_lock);
  int lo = 0, hi = d->npieces;
  while (lo < hi) {
    int m = (lo + hi) / 2;
    if (d->pieces[m].start < ptr) lo = m + 1;
    else hi = m;
  }
  sim_stream *s = stream_of(stream);
  if (lo < d->npieces && d->pieces[lo].start == ptr && !d->pieces[lo].free && s) {
    apool_range *p = &d->pieces[lo];
    p->free = true;
    p->stream = stream;
    p->ticket = ++s->submitted; /* the free is work queued on the stream */
    d->pool_used -= p->size;
    merge_pieces(d, lo);
    rc = MSI_BE_OK;
  } else {
    msi_error("sim backend: async free of %#lx, which the pool did not allocate", (unsigned long)ptr);
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_async_trim(int dev) {
  pthread_mutex_lock(&sim_lock);
  trim_pool(&devs[dev]);
  pthread_mutex_unlock(&sim_lock);
  return MSI_BE_OK;
}

static int sim_async_usage(int dev, uint64_t *reserved, uint64_t *reserved_high, uint64_t *used, uint64_t *used_high) {
  sim_device *d = &devs[dev];
  pthread_mutex_lock(&sim_lock);
  /* as on an H100 (PyTorch's test_graph_capture_simple under the async mode, run 44): reading the
   * pool while a capture is underway invalidates the capture */
  for (int i = 0; i < nstreams; i++)
    if (streams[i].capture) streams[i].invalidated = true;
  *reserved = d->pool_reserved;
  *reserved_high = d->pool_reserved_high;
  *used = d->pool_used;
  *used_high = d->pool_used_high;
  pthread_mutex_unlock(&sim_lock);
  return MSI_BE_OK;
}

static int sim_async_reset_peak(int dev) {
  sim_device *d = &devs[dev];
  pthread_mutex_lock(&sim_lock);
  d->pool_reserved_high = d->pool_reserved;
  d->pool_used_high = d->pool_used;
  pthread_mutex_unlock(&sim_lock);
  return MSI_BE_OK;
}

/* ---- capture graphs ------------------------------------------------------------------------ */

/* Replaces (or, with `add`, extends) the terminal nodes of s. sim_lock held. */
static bool set_deps(sim_stream *s, const uintptr_t *v, size_t n, bool add) {
  size_t keep = add ? s->ndeps : 0;
  if (keep + n > s->deps_cap) {
    size_t cap = s->deps_cap ? s->deps_cap : 4;
    while (cap < keep + n) cap *= 2;
    uintptr_t *grown = realloc(s->deps, cap * sizeof *grown);
    if (!grown) return false;
    s->deps = grown;
    s->deps_cap = cap;
  }
  for (size_t i = 0; i < n; i++) {
    bool seen = false;
    for (size_t k = 0; k < keep && !seen; k++) seen = s->deps[k] == v[i];
    if (!seen) s->deps[keep++] = v[i];
  }
  s->ndeps = keep;
  return true;
}

int msi_sim_capture(memsnap_stream_t stream, int what, memsnap_stream_t other) {
  int rc = MEMSNAP_OK;
  pthread_mutex_lock(&sim_lock);
  sim_stream *s = stream_of(stream), *o = what == MSI_SIM_WAIT ? stream_of(other) : NULL;
  if (!s || (what == MSI_SIM_WAIT && !o)) {
    rc = MEMSNAP_ENOMEM;
    goto out;
  }
  switch (what) {
    case MSI_SIM_BEGIN:
      if (s->capture) {
        msi_error("sim backend: stream %p is capturing already", stream);
        rc = MEMSNAP_EINVAL;
        break;
      }
      s->capture = ++last_capture;
      s->ndeps = 0;
      break;
    case MSI_SIM_LAUNCH:
      s->submitted++;
      if (!s->capture) break;
      if (nnodes == nodes_cap) {
        size_t cap = nodes_cap ? nodes_cap * 2 : 64;
        sim_node *grown = realloc(nodes, cap * sizeof *grown);
        if (!grown) {
          rc = MEMSNAP_ENOMEM;
          break;
        }
        nodes = grown;
        nodes_cap = cap;
      }
      nodes[nnodes].parents = s->ndeps ? malloc(s->ndeps * sizeof(uintptr_t)) : NULL;
      if (s->ndeps && !nodes[nnodes].parents) {
        rc = MEMSNAP_ENOMEM;
        break;
      }
      if (s->ndeps) memcpy(nodes[nnodes].parents, s->deps, s->ndeps * sizeof(uintptr_t));
      nodes[nnodes].nparents = s->ndeps;
      uintptr_t node = (uintptr_t)++nnodes;
      if (!set_deps(s, &node, 1, false)) rc = MEMSNAP_ENOMEM;
      break;
    case MSI_SIM_WAIT:
      if (!o->capture) break; /* outside a capture the simulated streams need no ordering */
      if (s->capture && s->capture != o->capture) {
        msi_error("sim backend: streams of two captures cannot wait for each other");
        rc = MEMSNAP_EINVAL;
        break;
      }
      s->capture = o->capture; /* it joins the capture, after what the other stream did so far */
      if (!set_deps(s, o->deps, o->ndeps, true)) rc = MEMSNAP_ENOMEM;
      break;
    case MSI_SIM_END: {
      uint64_t c = s->capture;
      if (!c) {
        msi_error("sim backend: stream %p is not capturing", stream);
        rc = MEMSNAP_EINVAL;
        break;
      }
      if (s->invalidated) {
        msi_error("sim backend: the capture was invalidated (cudaErrorStreamCaptureInvalidated: the stream-ordered "
                  "pool was read during it)");
        rc = MEMSNAP_EINVAL;
      }
      for (int i = 0; i < nstreams; i++)
        if (streams[i].capture == c) {
          streams[i].capture = 0;
          streams[i].ndeps = 0;
          streams[i].invalidated = false;
        }
      break;
    }
    default:
      rc = MEMSNAP_EINVAL;
  }
out:
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_capture_info(int dev, memsnap_stream_t stream, uint64_t *id, uintptr_t *out, size_t cap, size_t *n) {
  (void)dev;
  int rc = 0;
  pthread_mutex_lock(&sim_lock);
  sim_stream *s = stream_of(stream);
  if (s && s->capture) { /* an invalidated capture: capturing until its end, no graph (as the driver) */
    *id = s->capture;
    *n = s->invalidated ? 0 : s->ndeps;
    for (size_t i = 0; i < *n && i < cap; i++) out[i] = s->deps[i];
    rc = 1;
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

static int sim_node_parents(int dev, uintptr_t node, uintptr_t *out, size_t cap, size_t *n) {
  (void)dev;
  int rc = MSI_BE_OK;
  pthread_mutex_lock(&sim_lock);
  if (node == 0 || node > nnodes) {
    msi_error("sim backend: no graph node %#lx", (unsigned long)node);
    rc = MSI_BE_ERR;
  } else {
    const sim_node *v = &nodes[node - 1];
    *n = v->nparents;
    for (size_t i = 0; i < v->nparents && i < cap; i++) out[i] = v->parents[i];
  }
  pthread_mutex_unlock(&sim_lock);
  return rc;
}

/* ---- peer access ------------------------------------------------------------------------ */

int msi_sim_peer_access(int device, uintptr_t ptr) {
  int rc = -1;
  pthread_mutex_lock(&sim_lock);
  for (int o = 0; o < ndevs && rc < 0; o++) {
    const sim_device *d = &devs[o];
    bool mapped_for_peers = msi_opt.peer_access || device == o;
    int i = mapped_lower(d, ptr + 1);
    if (i > 0 && d->mapped[i - 1].start <= ptr && ptr < d->mapped[i - 1].start + d->mapped[i - 1].size)
      rc = mapped_for_peers;
    for (int c = 0; c < d->nchunks && rc < 0; c++)
      if (d->chunks[c].size && d->chunks[c].start <= ptr && ptr < d->chunks[c].start + d->chunks[c].size)
        rc = mapped_for_peers;
    uintptr_t base = (uintptr_t)(SIM_BASE * (uint64_t)(o + 1));
    if (rc < 0 && ptr >= base && ptr < base + msi_opt.sim_capacity) {
      bool is_free = false;
      for (int f = 0; f < d->nfree && !is_free; f++)
        is_free = d->free[f].start <= ptr && ptr < d->free[f].start + d->free[f].size;
      if (!is_free) rc = 1; /* a classic segment: the context's peer access covers it */
    }
  }
  pthread_mutex_unlock(&sim_lock);
  return device >= 0 && device < ndevs ? rc : -1;
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
    .stream_synchronize = sim_stream_synchronize,
    .device_synchronize = sim_device_synchronize,
    .vmm_supported = sim_vmm_supported,
    .va_reserve = sim_va_reserve,
    .va_free = sim_va_free,
    .page_map = sim_page_map,
    .page_unmap = sim_page_unmap,
    .async_supported = sim_async_supported,
    .async_alloc = sim_async_alloc,
    .async_free = sim_async_free,
    .async_trim = sim_async_trim,
    .async_usage = sim_async_usage,
    .async_reset_peak = sim_async_reset_peak,
    .stream_wait = sim_stream_wait,
    .side_stream = sim_side_stream,
    .ipc_get_handle = sim_ipc_get_handle,
    .ipc_open = sim_ipc_open,
    .ipc_close = sim_ipc_close,
    .page_export = sim_page_export,
    .page_map_fd = sim_page_map_fd,
    .capture_info = sim_capture_info,
    .node_parents = sim_node_parents,
    .shutdown = sim_shutdown,
};
