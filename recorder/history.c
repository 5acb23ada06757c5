/* history.c: the event ring: what the allocator did, in order, in constant memory.
 *
 * Each event is 64 bytes (msi_event in internal.h). The ring holds the last max_entries events;
 * older ones are overwritten and counted as dropped, so a week-long job records in constant
 * memory. A slot is claimed and written under one short lock (ring_lock); the allocator calls
 * msi_history_add() with its device lock held, so the lock order is device lock, then ring
 * lock, which msi_history_copy() (the snapshot writer) follows too.
 *
 * Labels of marks and ranges are interned in a string table (marks are not on the allocation
 * path, so they may allocate); an event refers to its label by id in `aux`.
 *
 * Event times are CLOCK_MONOTONIC nanoseconds, taken under the ring lock, so ids and times
 * increase together. Reading the clock costs 15 to 35 ns (the upper end on a VM's kvm-clock),
 * about as much as the rest of an event, and an allocate+free pair records three events: where
 * the CPU's TSC is invariant (it ticks at one rate in every power state, CPUID 0x80000007), an
 * event's time is the last clock read plus the ticks since, at the rate measured between the
 * last two reads, and the clock is read again every half millisecond of ticks (event_time).
 * The rate is taken a little slow, so such a time is never ahead of the clock. The events of one
 * call with no device call between them are added together, at one time (msi_history_add_n): a
 * free completed at once records its two events with one read of the clock and one take of the
 * lock.
 *
 * Entry points: msi_history_start/stop (memsnap_record_start/stop), msi_history_add (the
 * allocator), memsnap_mark / memsnap_range_push / memsnap_range_pop, msi_history_copy.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "history.h"
#include "internal.h"

atomic_int msi_recording;        /* read on the hot path: 0 off, 1 on */
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static msi_event *ring;
static uint64_t ring_cap;        /* max_entries */
static uint64_t ring_total;      /* events ever added since start; next slot = total % cap */
static uint64_t ring_next;       /* ring_total % ring_cap, kept without a division per event */
static uint64_t ring_start_ns;   /* monotonic time when recording started */
static uint64_t last_time;       /* the last event's time: times never go backwards, nor before the start */

static char **labels;            /* label id -> text; id 0 is "" */
static uint32_t nlabels, labels_cap;
static uint32_t *label_index;    /* open addressing: label id + 1 by hash of the text */
static size_t label_mask;
static pthread_mutex_t label_lock = PTHREAD_MUTEX_INITIALIZER;

static __thread uint32_t tls_tid;
static __thread uint32_t tls_range_depth;

uint64_t msi_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- event times (ring_lock held) ------------------------------------------------------ */

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>

static int tsc_usable = -1;       /* -1: not asked yet */
static uint64_t anchor_tsc, anchor_ns; /* the last clock read */
static uint64_t ns_per_tick_32;   /* nanoseconds per tick << 32; 0: not measured yet */
static uint64_t reread_ticks;     /* ticks after which the clock is read again */

static uint64_t event_time(void) {
  if (MSI_UNLIKELY(tsc_usable < 0)) {
    unsigned a, b, c, d;
    tsc_usable = __get_cpuid_max(0x80000000u, NULL) >= 0x80000007u && __get_cpuid(0x80000007u, &a, &b, &c, &d) &&
                 (d & (1u << 8));
  }
  if (!tsc_usable) return msi_now_ns();
  uint64_t t = __rdtsc(), ns;
  if (MSI_LIKELY(t - anchor_tsc < reread_ticks)) { /* reread_ticks is 0 until a rate is measured */
    ns = anchor_ns + (uint64_t)((unsigned __int128)(t - anchor_tsc) * ns_per_tick_32 >> 32);
  } else {
    ns = msi_now_ns();
    t = __rdtsc();
    if (!anchor_tsc) {
      anchor_tsc = t;
      anchor_ns = ns;
    } else if (t > anchor_tsc && ns >= anchor_ns + 100000) { /* 0.1 ms apart at least: a rate */
      double ns_per_tick = (double)(ns - anchor_ns) / (double)(t - anchor_tsc) * (1.0 - 5e-4);
      ns_per_tick_32 = (uint64_t)(ns_per_tick * 4294967296.0);
      reread_ticks = (uint64_t)(500000.0 / ns_per_tick);
      anchor_tsc = t;
      anchor_ns = ns;
    }
  }
  return ns;
}
#else
static uint64_t event_time(void) { return msi_now_ns(); }
#endif

uint32_t msi_thread_id(void) {
  if (MSI_UNLIKELY(!tls_tid)) tls_tid = (uint32_t)syscall(SYS_gettid);
  return tls_tid;
}

int msi_history_start(uint64_t max_entries) {
  if (max_entries < 16) max_entries = 16;
  pthread_mutex_lock(&ring_lock);
  int rc = MEMSNAP_OK;
  if (!ring || ring_cap != max_entries) {
    msi_event *grown = calloc(max_entries, sizeof *grown);
    if (!grown) {
      msi_error("cannot record: out of host memory for %llu events (%llu MiB)", (unsigned long long)max_entries,
                (unsigned long long)(max_entries * sizeof *grown >> 20));
      rc = MEMSNAP_ENOMEM;
      goto out;
    }
    free(ring);
    ring = grown;
    ring_cap = max_entries;
    ring_total = ring_next = 0;
  }
  if (ring_total == 0) {
    ring_start_ns = msi_now_ns();
    if (last_time < ring_start_ns) last_time = ring_start_ns; /* event_time may run a little behind */
  }
  atomic_store(&msi_recording, 1);
out:
  pthread_mutex_unlock(&ring_lock);
  return rc;
}

void msi_history_stop(void) { atomic_store(&msi_recording, 0); }

void msi_history_clear(void) {
  pthread_mutex_lock(&ring_lock);
  ring_total = ring_next = 0;
  ring_start_ns = msi_now_ns();
  if (last_time < ring_start_ns) last_time = ring_start_ns; /* as at the start: no event before it */
  pthread_mutex_unlock(&ring_lock);
}

void msi_history_reset(void) {
  atomic_store(&msi_recording, 0);
  pthread_mutex_lock(&ring_lock);
  free(ring);
  ring = NULL;
  ring_cap = ring_total = ring_next = 0;
  pthread_mutex_unlock(&ring_lock);
  pthread_mutex_lock(&label_lock);
  for (uint32_t i = 0; i < nlabels; i++) free(labels[i]);
  free(labels);
  free(label_index);
  labels = NULL;
  label_index = NULL;
  nlabels = labels_cap = 0;
  label_mask = 0;
  pthread_mutex_unlock(&label_lock);
}

void msi_history_add_n(const uint8_t *kinds, int n, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                       uint64_t requested, uint64_t aux, uint32_t stack_id) {
  uint32_t tid = msi_thread_id();
  pthread_mutex_lock(&ring_lock);
  if (ring) {
    uint64_t time = event_time(); /* under the lock: ids and times increase together */
    if (time < last_time) time = last_time;
    last_time = time;
    for (int i = 0; i < n; i++) {
      msi_event *e = &ring[ring_next];
      e->time_ns = time;
      e->addr = addr;
      e->size = size;
      e->requested = requested;
      e->stream = (uint64_t)(uintptr_t)stream;
      e->aux = aux;
      e->stack_id = stack_id;
      e->tid = tid;
      e->device = (int16_t)device;
      e->kind = kinds[i];
      ring_total++;
      if (++ring_next == ring_cap) ring_next = 0;
    }
  }
  pthread_mutex_unlock(&ring_lock);
}

void msi_history_add(msi_event_kind kind, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                     uint64_t requested, uint64_t aux, uint32_t stack_id) {
  uint8_t k = (uint8_t)kind;
  msi_history_add_n(&k, 1, device, stream, addr, size, requested, aux, stack_id);
}

void msi_history_add_free(bool completed, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                          uint64_t requested, uint32_t stack_id) {
  static const uint8_t kinds[] = {MSI_EV_FREE_REQUESTED, MSI_EV_FREE_COMPLETED};
  msi_history_add_n(kinds, completed ? 2 : 1, device, stream, addr, size, requested, 0, stack_id);
}

uint64_t msi_history_total(void) {
  pthread_mutex_lock(&ring_lock);
  uint64_t n = ring_total;
  pthread_mutex_unlock(&ring_lock);
  return n;
}

uint64_t msi_history_copy(msi_event **out, uint64_t *dropped, uint64_t *max_entries, uint64_t *start_ns) {
  pthread_mutex_lock(&ring_lock);
  uint64_t n = ring_total < ring_cap ? ring_total : ring_cap;
  *out = n ? malloc(n * sizeof **out) : NULL;
  if (n && !*out) {
    pthread_mutex_unlock(&ring_lock);
    msi_error("snapshot: out of host memory copying %llu events", (unsigned long long)n);
    return UINT64_MAX;
  }
  uint64_t first = ring_total - n; /* oldest kept */
  for (uint64_t i = 0; i < n; i++) (*out)[i] = ring[(first + i) % ring_cap];
  *dropped = first;
  *max_entries = ring_cap;
  *start_ns = ring_start_ns;
  pthread_mutex_unlock(&ring_lock);
  return n;
}

/* ---- labels, marks and ranges ---------------------------------------------------------- */

static size_t label_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return (size_t)h;
}

/* Adds `text` as the next id; label_lock held. Returns false when out of host memory. */
static bool label_add(const char *text) {
  if ((nlabels + 1) * 2 > label_mask + 1 || !label_index) {
    size_t cap = label_mask ? (label_mask + 1) * 2 : 256;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return false;
    for (uint32_t i = 0; i < nlabels; i++) {
      size_t k = label_hash(labels[i]) & (cap - 1);
      while (idx[k]) k = (k + 1) & (cap - 1);
      idx[k] = i + 1;
    }
    free(label_index);
    label_index = idx;
    label_mask = cap - 1;
  }
  if (nlabels == labels_cap) {
    uint32_t cap = labels_cap ? labels_cap * 2 : 64;
    char **grown = realloc(labels, sizeof *grown * cap);
    if (!grown) return false;
    labels = grown;
    labels_cap = cap;
  }
  char *copy = strdup(text);
  if (!copy) return false;
  size_t k = label_hash(copy) & label_mask;
  while (label_index[k]) k = (k + 1) & label_mask;
  labels[nlabels] = copy;
  label_index[k] = ++nlabels;
  return true;
}

uint32_t msi_label_id(const char *label) {
  if (!label) label = "";
  uint32_t id = UINT32_MAX;
  pthread_mutex_lock(&label_lock);
  if (nlabels == 0 && !label_add("")) goto out; /* id 0 is "" */
  for (size_t k = label_hash(label) & label_mask; label_index[k]; k = (k + 1) & label_mask)
    if (strcmp(labels[label_index[k] - 1], label) == 0) {
      id = label_index[k] - 1;
      goto out;
    }
  if (label_add(label)) id = nlabels - 1;
out:
  pthread_mutex_unlock(&label_lock);
  return id;
}

const char *msi_label(uint32_t id) {
  pthread_mutex_lock(&label_lock);
  const char *s = id < nlabels ? labels[id] : "";
  pthread_mutex_unlock(&label_lock);
  return s;
}

static int add_label_event(msi_event_kind kind, const char *label) {
  if (!atomic_load_explicit(&msi_recording, memory_order_relaxed)) return MEMSNAP_OK;
  uint32_t id = msi_label_id(label);
  if (id == UINT32_MAX) {
    msi_error("mark: out of host memory");
    return MEMSNAP_ENOMEM;
  }
  msi_history_add(kind, -1, NULL, 0, 0, tls_range_depth, id, msi_stack_capture());
  return MEMSNAP_OK;
}

int msi_history_mark(const char *label) { return add_label_event(MSI_EV_MARK, label); }

int msi_history_range_push(const char *label) {
  int rc = add_label_event(MSI_EV_RANGE_PUSH, label);
  tls_range_depth++;
  return rc;
}

int msi_history_range_pop(void) {
  if (tls_range_depth == 0) {
    msi_error("memsnap_range_pop without a matching memsnap_range_push on this thread");
    return MEMSNAP_EINVAL;
  }
  tls_range_depth--;
  return add_label_event(MSI_EV_RANGE_POP, NULL);
}

void msi_history_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) {
    pthread_mutex_lock(&ring_lock);
    pthread_mutex_lock(&label_lock);
    return;
  }
  if (phase == MSI_FORK_CHILD) {
    /* The child is not the recorded process: its history starts empty (memsnap_record_start). */
    atomic_store(&msi_recording, 0);
    ring_total = ring_next = 0;
    tls_tid = 0;
    tls_range_depth = 0;
  }
  pthread_mutex_unlock(&label_lock);
  pthread_mutex_unlock(&ring_lock);
}
