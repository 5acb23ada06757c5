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
 * Entry points: msi_history_start/stop (memsnap_record_start/stop), msi_history_add (the
 * allocator), memsnap_mark / memsnap_range_push / memsnap_range_pop, msi_history_copy.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

atomic_int msi_recording;        /* read on the hot path: 0 off, 1 on */
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static msi_event *ring;
static uint64_t ring_cap;        /* max_entries */
static uint64_t ring_total;      /* events ever added since start; next slot = total % cap */
static uint64_t ring_start_ns;   /* monotonic time when recording started */

static char **labels;            /* label id -> text; id 0 is "" */
static uint32_t nlabels, labels_cap;
static pthread_mutex_t label_lock = PTHREAD_MUTEX_INITIALIZER;

static __thread uint32_t tls_tid;
static __thread uint32_t tls_range_depth;

uint64_t msi_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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
    ring_total = 0;
  }
  if (ring_total == 0) ring_start_ns = msi_now_ns();
  atomic_store(&msi_recording, 1);
out:
  pthread_mutex_unlock(&ring_lock);
  return rc;
}

void msi_history_stop(void) { atomic_store(&msi_recording, 0); }

void msi_history_reset(void) {
  atomic_store(&msi_recording, 0);
  pthread_mutex_lock(&ring_lock);
  free(ring);
  ring = NULL;
  ring_cap = ring_total = 0;
  pthread_mutex_unlock(&ring_lock);
  pthread_mutex_lock(&label_lock);
  for (uint32_t i = 0; i < nlabels; i++) free(labels[i]);
  free(labels);
  labels = NULL;
  nlabels = labels_cap = 0;
  pthread_mutex_unlock(&label_lock);
}

void msi_history_add(msi_event_kind kind, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                     uint64_t requested, uint64_t aux, uint32_t stack_id) {
  uint64_t now = msi_now_ns();
  uint32_t tid = msi_thread_id();
  pthread_mutex_lock(&ring_lock);
  if (ring) {
    msi_event *e = &ring[ring_total % ring_cap];
    e->time_ns = now;
    e->addr = addr;
    e->size = size;
    e->requested = requested;
    e->stream = (uint64_t)(uintptr_t)stream;
    e->aux = aux;
    e->stack_id = stack_id;
    e->tid = tid;
    e->device = (int16_t)device;
    e->kind = (uint8_t)kind;
    ring_total++;
  }
  pthread_mutex_unlock(&ring_lock);
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

static uint32_t label_id(const char *label) {
  if (!label) label = "";
  pthread_mutex_lock(&label_lock);
  uint32_t id = UINT32_MAX;
  for (uint32_t i = 0; i < nlabels; i++)
    if (strcmp(labels[i], label) == 0) {
      id = i;
      goto out;
    }
  if (nlabels == labels_cap) {
    uint32_t cap = labels_cap ? labels_cap * 2 : 64;
    char **grown = realloc(labels, sizeof *grown * cap);
    if (!grown) goto out;
    labels = grown;
    labels_cap = cap;
  }
  labels[nlabels] = strdup(label);
  if (labels[nlabels]) id = nlabels++;
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
  uint32_t id = label_id(label);
  if (id == UINT32_MAX) {
    msi_error("mark: out of host memory");
    return MEMSNAP_ENOMEM;
  }
  msi_history_add(kind, -1, NULL, 0, 0, tls_range_depth, id, msi_stack_capture());
  return MEMSNAP_OK;
}

int memsnap_mark(const char *label) { return add_label_event(MSI_EV_MARK, label); }

int memsnap_range_push(const char *label) {
  int rc = add_label_event(MSI_EV_RANGE_PUSH, label);
  tls_range_depth++;
  return rc;
}

int memsnap_range_pop(void) {
  if (tls_range_depth == 0) {
    msi_error("memsnap_range_pop without a matching memsnap_range_push on this thread");
    return MEMSNAP_EINVAL;
  }
  tls_range_depth--;
  return add_label_event(MSI_EV_RANGE_POP, NULL);
}
