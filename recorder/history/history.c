/* history.c: the event ring: what the allocator did, in order, in constant memory.
 *
 * Each event is 64 bytes (msi_event in internal.h). The ring holds the last max_entries events;
 * older ones are overwritten and counted as dropped, so a week-long job records in constant
 * memory.
 *
 * Writing takes no lock (msi_history_add_n): a thread claims its slots with one atomic add on
 * the ring's count of events, writes them, and publishes each with its sequence number (the
 * event's index + 1, stored last, with release order). A reader takes an event whose number it
 * finds before and after reading it, and whose slot was not claimed again meanwhile (the count
 * of events tells: a newer writer claims before it writes). The
 * allocator writes with its device lock held, so a device's events are claimed in the order it
 * made them; the snapshot writer (msi_history_copy) copies with every device lock held, and
 * waits for, or counts as dropped, what a writer without one (a mark, a range) has claimed and
 * not yet published. Starting with another size replaces the ring; a replaced ring is kept
 * until msi_history_reset (memsnap_shutdown), since a writer may still hold it; clearing moves
 * the ring's base, so an event claimed before the clear is never taken for one after it.
 *
 * Labels of marks and ranges are interned in a string table (marks are not on the allocation
 * path, so they may allocate); an event refers to its label by id in `aux`. The model's events
 * (model_events.c: modules, tensors, optimizer steps) name theirs in the same table.
 *
 * Event times are CLOCK_MONOTONIC nanoseconds. Reading the clock costs 15 to 35 ns (the upper end
 * on a VM's kvm-clock), about as much as the rest of an event, and an allocate+free pair records
 * three events: where the CPU's TSC is invariant (it ticks at one rate in every power state,
 * CPUID 0x80000007), an event's time is the thread's last clock read plus the ticks since, at
 * the rate measured between two reads (one rate for the process), and each thread reads the
 * clock again every half millisecond of ticks (event_time). The rate is taken a little slow, so
 * such a time is never ahead of the clock. Two threads' estimates may differ by a few hundred
 * nanoseconds, so the copy makes times non-decreasing in the events' order, and never earlier
 * than the recording's start. The events of one call with no device call between them are
 * added together, at one time: a free completed at once records its two events with one read of
 * the clock and one claim.
 *
 * A trace observer (memsnap_set_trace_observer: PyTorch's recorder in recorder/pytorch/) sees the
 * allocator's events as they are added, whether the ring records or not: msi_recording says which
 * of the two wants them, and the allocator adds events while either does. Allocations memsnap did
 * not make (external.c) go to the ring only (msi_history_add_unobserved).
 *
 * Entry points: msi_history_start/stop (memsnap_record_start/stop), msi_history_add (the
 * allocator), memsnap_mark / memsnap_range_push / memsnap_range_pop, msi_history_copy,
 * memsnap_set_trace_observer.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "history.h"
#include "internal.h"
#include "livemap.h"
#include "runlog.h"

atomic_int msi_recording; /* read on the hot path: MSI_REC_RING | MSI_REC_OBSERVER */
_Atomic uint64_t msi_state_due_at = UINT64_MAX;
atomic_bool msi_state_wanted;

/* The trace observer (memsnap_set_trace_observer) with its argument, swapped as one pointer; a
 * replaced one is never freed (a writer may still be calling it), and observers are set rarely:
 * it joins the list of retired ones, which keeps it reachable (no leak to LeakSanitizer). */
typedef struct observer {
  memsnap_trace_observer_t fn;
  void *arg;
  struct observer *retired_next;
} observer;
static _Atomic(observer *) cur_observer;
static _Atomic(observer *) retired_observers;

/* The snapshot format's ids are the public trace kinds. */
_Static_assert((int)MEMSNAP_TRACE_ALLOC == (int)MSI_EV_ALLOC &&
                   (int)MEMSNAP_TRACE_FREE_REQUESTED == (int)MSI_EV_FREE_REQUESTED &&
                   (int)MEMSNAP_TRACE_FREE_COMPLETED == (int)MSI_EV_FREE_COMPLETED &&
                   (int)MEMSNAP_TRACE_SEGMENT_ALLOC == (int)MSI_EV_SEGMENT_ALLOC &&
                   (int)MEMSNAP_TRACE_SEGMENT_FREE == (int)MSI_EV_SEGMENT_FREE &&
                   (int)MEMSNAP_TRACE_OOM == (int)MSI_EV_OOM &&
                   (int)MEMSNAP_TRACE_SNAPSHOT == (int)MSI_EV_SNAPSHOT &&
                   (int)MEMSNAP_TRACE_SEGMENT_MAP == (int)MSI_EV_SEGMENT_MAP &&
                   (int)MEMSNAP_TRACE_SEGMENT_UNMAP == (int)MSI_EV_SEGMENT_UNMAP,
               "memsnap.h's MEMSNAP_TRACE_* are the snapshot format's event ids");

int memsnap_set_trace_observer(memsnap_trace_observer_t fn, void *arg) {
  observer *o = NULL;
  if (fn) {
    o = malloc(sizeof *o);
    if (!o) {
      msi_error("memsnap_set_trace_observer: out of host memory");
      return MEMSNAP_ENOMEM;
    }
    o->fn = fn;
    o->arg = arg;
    o->retired_next = NULL;
  }
  observer *old = atomic_exchange_explicit(&cur_observer, o, memory_order_acq_rel);
  if (old) { /* kept for a caller still inside it */
    old->retired_next = atomic_load_explicit(&retired_observers, memory_order_relaxed);
    while (!atomic_compare_exchange_weak(&retired_observers, &old->retired_next, old)) {}
  }
  if (o) atomic_fetch_or(&msi_recording, MSI_REC_OBSERVER);
  else atomic_fetch_and(&msi_recording, ~MSI_REC_OBSERVER);
  return MEMSNAP_OK;
}

static void notify(const uint8_t *kinds, int n, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                   uint64_t requested) {
  observer *o = atomic_load_explicit(&cur_observer, memory_order_acquire);
  if (!o) return;
  memsnap_trace_event ev = {0, device, addr, size, requested, stream};
  for (int i = 0; i < n; i++) {
    ev.kind = kinds[i];
    o->fn(&ev, o->arg);
  }
}

/* One ring. Slot i % cap holds event i; base is the first event of the recording (a clear moves
 * it), so the recording holds events [max(base, total - cap), total). */
typedef struct ring {
  _Alignas(64) _Atomic uint64_t total; /* events ever claimed: the next event's index */
  _Alignas(64) _Atomic uint64_t base;
  _Atomic uint64_t start_ns;           /* monotonic time when the recording started */
  uint64_t cap;                        /* max_entries */
  uint64_t inv;                        /* (2^64 - 1) / cap: a slot without a division (slot_of) */
  struct ring *retired;                /* rings this one replaced (freed by msi_history_reset) */
  void *allocation;                    /* what calloc returned (the ring is aligned inside it); NULL: the live mapping's */
  msi_event ev[];
} ring_t;

/* idx % r->cap by Barrett's reduction: the quotient from a multiplication is at most one short. */
static inline uint64_t slot_of(const ring_t *r, uint64_t idx) {
  uint64_t q = (uint64_t)(((unsigned __int128)idx * r->inv) >> 64), s = idx - q * r->cap;
  return s >= r->cap ? s - r->cap : s;
}

static _Atomic(ring_t *) cur;                              /* NULL until recording first starts */
static pthread_mutex_t admin_lock = PTHREAD_MUTEX_INITIALIZER; /* start, clear, reset, copy */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER; /* start's, taken before any other */

static char **labels;            /* label id -> text; id 0 is "" */
static uint32_t nlabels, labels_cap;
static uint32_t *label_index;    /* open addressing: label id + 1 by hash of the text */
static size_t label_mask;
static pthread_mutex_t label_lock = PTHREAD_MUTEX_INITIALIZER;

/* The thread's own: one look-up of a shared library's thread-locals (__tls_get_addr) per event. */
typedef struct thread_history {
  uint32_t tid;
  uint32_t range_depth;
  uint64_t anchor_tsc, anchor_ns; /* event_time: the thread's last clock read */
} thread_history;
static __thread thread_history tls;

/* ---- event times ------------------------------------------------------------------------ */

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>

static atomic_int tsc_usable = -1;        /* -1: not asked yet */
static _Atomic uint64_t ns_per_tick_32;   /* nanoseconds per tick << 32; 0: not measured yet */
static _Atomic uint64_t reread_ticks;     /* ticks after which a thread reads the clock again */

static uint64_t event_time(thread_history *th) {
  int usable = atomic_load_explicit(&tsc_usable, memory_order_relaxed);
  if (MSI_UNLIKELY(usable < 0)) {
    unsigned a, b, c, d;
    usable = __get_cpuid_max(0x80000000u, NULL) >= 0x80000007u && __get_cpuid(0x80000007u, &a, &b, &c, &d) &&
             (d & (1u << 8));
    atomic_store_explicit(&tsc_usable, usable, memory_order_relaxed);
  }
  if (!usable) return msi_now_ns();
  uint64_t t = __rdtsc(), ns;
  uint64_t reread = atomic_load_explicit(&reread_ticks, memory_order_relaxed);
  if (MSI_LIKELY(th->anchor_tsc && t - th->anchor_tsc < reread)) { /* reread is 0 until a rate is measured */
    ns = th->anchor_ns + (uint64_t)((unsigned __int128)(t - th->anchor_tsc) *
                                    atomic_load_explicit(&ns_per_tick_32, memory_order_relaxed) >> 32);
  } else {
    ns = msi_now_ns();
    t = __rdtsc();
    if (th->anchor_tsc && t > th->anchor_tsc && ns >= th->anchor_ns + 100000) { /* 0.1 ms apart at least: a rate */
      double ns_per_tick = (double)(ns - th->anchor_ns) / (double)(t - th->anchor_tsc) * (1.0 - 5e-4);
      atomic_store_explicit(&ns_per_tick_32, (uint64_t)(ns_per_tick * 4294967296.0), memory_order_relaxed);
      atomic_store_explicit(&reread_ticks, (uint64_t)(500000.0 / ns_per_tick), memory_order_relaxed);
      th->anchor_tsc = t;
      th->anchor_ns = ns;
    } else if (!th->anchor_tsc || t <= th->anchor_tsc) { /* the thread's first read (or the TSC went back) */
      th->anchor_tsc = t;
      th->anchor_ns = ns;
    }
  }
  return ns;
}
#else
static uint64_t event_time(thread_history *th) {
  (void)th;
  return msi_now_ns();
}
#endif

/* ---- the ring ---------------------------------------------------------------------------- */

/* Event idx's sequence number: idx + 1, truncated, never 0 (an unpublished slot). */
static inline uint32_t seq_of(uint64_t idx) {
  uint32_t s = (uint32_t)(idx + 1);
  return s ? s : 1;
}

/* The thread's id (Linux's tid), asked of the kernel once. */
static inline uint32_t tid_of(thread_history *th) {
  if (MSI_UNLIKELY(!th->tid)) th->tid = (uint32_t)syscall(SYS_gettid);
  return th->tid;
}

uint32_t msi_thread_id(void) { return tid_of(&tls); }

int msi_history_start(uint64_t max_entries) {
  if (max_entries < 16) max_entries = 16;
  void *runlog_at = NULL; /* the run log's place in a new mapping */
  pthread_mutex_lock(&start_lock);
  pthread_mutex_lock(&admin_lock);
  int rc = MEMSNAP_OK;
  ring_t *r = atomic_load_explicit(&cur, memory_order_relaxed);
  if (!r || r->cap != max_entries) {
    /* In the live mapping (livemap.c: it outlives the process), else calloc: every slot
       unpublished (seq 0), its pages touched only as the ring fills */
    bool fits = max_entries <= (SIZE_MAX - sizeof(ring_t) - 64) / sizeof(msi_event);
    ring_t *grown = fits ? msi_live_ring(sizeof(ring_t) + max_entries * sizeof(msi_event), max_entries,
                                         (uint32_t)offsetof(ring_t, ev), &runlog_at)
                         : NULL;
    void *mem = NULL;
    if (!grown && fits) {
      mem = calloc(1, sizeof(ring_t) + max_entries * sizeof(msi_event) + 64);
      grown = mem ? (ring_t *)(((uintptr_t)mem + 63) & ~(uintptr_t)63) : NULL;
    }
    if (!grown) {
      msi_error("cannot record: out of host memory for %llu events (%llu MiB)", (unsigned long long)max_entries,
                (unsigned long long)(max_entries * sizeof(msi_event) >> 20));
      rc = MEMSNAP_ENOMEM;
      goto out;
    }
    grown->allocation = mem;
    grown->cap = max_entries;
    grown->inv = UINT64_MAX / max_entries;
    grown->retired = r; /* a writer may still hold it */
    /* a ring in a new mapping: its state is wanted at once (none is there yet) */
    atomic_store(&msi_state_due_at, mem ? UINT64_MAX : 0);
    atomic_store_explicit(&grown->start_ns, msi_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&cur, grown, memory_order_release);
  } else if (atomic_load(&r->total) == atomic_load(&r->base)) {
    atomic_store_explicit(&r->start_ns, msi_now_ns(), memory_order_relaxed); /* nothing recorded yet */
  }
  atomic_fetch_or(&msi_recording, MSI_REC_RING);
out:
  pthread_mutex_unlock(&admin_lock);
  /* The run log after admin_lock: its lock comes before the devices' (it samples them), which
     come before admin_lock (a snapshot copies the ring under them) */
  if (runlog_at) msi_runlog_move(runlog_at);
  if (rc == MEMSNAP_OK) msi_runlog_start(); /* the whole run's log (runlog.c), from the first start */
  pthread_mutex_unlock(&start_lock);
  return rc;
}

void msi_history_stop(void) { atomic_fetch_and(&msi_recording, ~MSI_REC_RING); }

void msi_history_clear(void) {
  pthread_mutex_lock(&admin_lock);
  ring_t *r = atomic_load_explicit(&cur, memory_order_relaxed);
  if (r) {
    atomic_store(&r->start_ns, msi_now_ns()); /* no event before it, as at the start */
    atomic_store(&r->base, atomic_load(&r->total));
  }
  pthread_mutex_unlock(&admin_lock);
}

void msi_history_reset(void) {
  atomic_store(&msi_recording, 0);
  atomic_store(&msi_state_due_at, UINT64_MAX);
  atomic_store(&cur_observer, NULL);
  pthread_mutex_lock(&admin_lock);
  ring_t *r = atomic_exchange(&cur, NULL);
  while (r) {
    ring_t *older = r->retired;
    free(r->allocation); /* NULL for the live mapping's, which msi_live_close unmaps */
    r = older;
  }
  msi_runlog_reset(); /* before its region in the mapping is unmapped */
  msi_live_close();
  pthread_mutex_unlock(&admin_lock);
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

/* Adds the events to the ring while it records, and shows them to the observer when `observed`. */
static void add_events(const uint8_t *kinds, int n, int device, memsnap_stream_t stream, uintptr_t addr,
                       uint64_t size, uint64_t requested, uint64_t aux, uint32_t stack_id, bool observed) {
  int flags = atomic_load_explicit(&msi_recording, memory_order_relaxed);
  if (MSI_UNLIKELY(flags & MSI_REC_OBSERVER) && observed) notify(kinds, n, device, stream, addr, size, requested);
  if (!(flags & MSI_REC_RING)) return;
  ring_t *r = atomic_load_explicit(&cur, memory_order_acquire);
  if (!r) return;
  thread_history *th = &tls;
  __asm__("" : "+r"(th)); /* one look-up of the thread's storage */
  uint32_t tid = tid_of(th);
  uint64_t time = event_time(th);
  uint64_t idx = atomic_fetch_add_explicit(&r->total, (uint64_t)n, memory_order_acquire);
  if (MSI_UNLIKELY(idx + (uint64_t)n > atomic_load_explicit(&msi_state_due_at, memory_order_relaxed)))
    atomic_store_explicit(&msi_state_wanted, true, memory_order_relaxed);
  uint64_t slot = slot_of(r, idx);
  for (int i = 0; i < n; i++, idx++, slot = slot + 1 == r->cap ? 0 : slot + 1) {
    msi_event *e = &r->ev[slot];
    /* the fields, then published as event idx; the claim (acquire) comes before them */
    /* relaxed atomic stores (plain moves): when the ring goes round during a slow write, two
       writers may write one slot; the reader then discards it */
#define PUT(field, value) __atomic_store_n(&e->field, (value), __ATOMIC_RELAXED)
    PUT(time_ns, time);
    PUT(addr, addr);
    PUT(size, size);
    PUT(requested, requested);
    PUT(stream, (uint64_t)(uintptr_t)stream);
    PUT(aux, aux);
    PUT(stack_id, stack_id);
    PUT(tid, tid);
    PUT(device, (int16_t)device);
    PUT(kind, kinds[i]);
#undef PUT
    atomic_store_explicit((_Atomic uint32_t *)&e->seq, seq_of(idx), memory_order_release);
  }
}

void msi_history_add_n(const uint8_t *kinds, int n, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                       uint64_t requested, uint64_t aux, uint32_t stack_id) {
  add_events(kinds, n, device, stream, addr, size, requested, aux, stack_id, true);
}

void msi_history_add(msi_event_kind kind, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                     uint64_t requested, uint64_t aux, uint32_t stack_id) {
  uint8_t k = (uint8_t)kind;
  add_events(&k, 1, device, stream, addr, size, requested, aux, stack_id, true);
}

void msi_history_add_unobserved(msi_event_kind kind, int device, memsnap_stream_t stream, uintptr_t addr,
                                uint64_t size, uint64_t requested, uint64_t aux, uint32_t stack_id) {
  uint8_t k = (uint8_t)kind;
  add_events(&k, 1, device, stream, addr, size, requested, aux, stack_id, false);
}

static const uint8_t free_kinds[] = {MSI_EV_FREE_REQUESTED, MSI_EV_FREE_COMPLETED};

void msi_history_add_free(bool completed, int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                          uint64_t requested, uint32_t stack_id) {
  add_events(free_kinds, completed ? 2 : 1, device, stream, addr, size, requested, 0, stack_id, true);
}

void msi_history_add_free_unobserved(int device, memsnap_stream_t stream, uintptr_t addr, uint64_t size,
                                     uint32_t stack_id) {
  add_events(free_kinds, 2, device, stream, addr, size, size, 0, stack_id, false);
}

uint64_t msi_history_total(void) {
  ring_t *r = atomic_load_explicit(&cur, memory_order_acquire);
  return r ? atomic_load(&r->total) - atomic_load(&r->base) : 0;
}

uint64_t msi_history_position(uint64_t *cap) {
  ring_t *r = atomic_load_explicit(&cur, memory_order_acquire);
  if (cap) *cap = r ? r->cap : 0;
  return r ? atomic_load(&r->total) : 0;
}

/* Event idx from its slot (slot idx % cap of r) into *out, as its writer published it: 1, or 0
 * when it was not published (a `patient` reader, this process's, waits some milliseconds for a
 * writer between its claim and its publication; a mapped ring is read as it is), its slot was
 * claimed meanwhile for a newer event (the ring went round during the copy), or it is of no kind
 * this version writes (a damaged file). */
static int read_event(const ring_t *r, uint64_t cap, uint64_t slot, uint64_t idx, bool patient, msi_event *out) {
  const msi_event *e = &r->ev[slot];
  uint32_t want = seq_of(idx);
  for (int tries = 0; tries < (patient ? 10000 : 1); tries++) {
    uint32_t s1 = atomic_load_explicit((_Atomic uint32_t *)&e->seq, memory_order_acquire);
    if (s1 == want) {
      /* a newer event's writer may be writing it meanwhile: then its claim shows */
#define GET(field) out->field = __atomic_load_n(&e->field, __ATOMIC_RELAXED)
      GET(time_ns);
      GET(addr);
      GET(size);
      GET(requested);
      GET(stream);
      GET(aux);
      GET(stack_id);
      GET(tid);
      GET(device);
      GET(kind);
#undef GET
      atomic_thread_fence(memory_order_acquire);
      return atomic_load_explicit((_Atomic uint64_t *)&r->total, memory_order_relaxed) <= idx + cap &&
             atomic_load_explicit((_Atomic uint32_t *)&e->seq, memory_order_relaxed) == want && out->kind != 0 &&
             out->kind < MSI_EV_KINDS;
    }
    if ((int32_t)(s1 - want) > 0) return 0; /* a newer event is there */
    if (tries >= 100) sched_yield();        /* its writer is between claim and publish */
  }
  return 0;
}

/* The window of the recording that ring r holds, copied into a new array (*out), oldest first,
 * times made non-decreasing and never before the start, each event's seq its place in the window:
 * msi_history_copy's and msi_history_read_mapped's one loop. `own`: this process's ring (slots by
 * Barrett's reduction; writers waited for), else a mapped one (slots by division: its header is
 * untrusted). The count kept, or UINT64_MAX when out of host memory. */
static uint64_t copy_window(const ring_t *r, uint64_t cap, bool own, msi_event **out, uint64_t *dropped,
                            uint64_t *before, uint64_t *start_ns) {
  uint64_t total = atomic_load_explicit((_Atomic uint64_t *)&r->total, memory_order_acquire);
  uint64_t base = atomic_load_explicit((_Atomic uint64_t *)&r->base, memory_order_relaxed);
  uint64_t n = total - base < cap ? total - base : cap;
  *out = n ? malloc(n * sizeof **out) : NULL;
  if (n && !*out) return UINT64_MAX;
  uint64_t first = total - n, kept = 0; /* oldest kept */
  uint64_t start = atomic_load_explicit((_Atomic uint64_t *)&r->start_ns, memory_order_relaxed), last = start;
  for (uint64_t i = 0; i < n; i++) {
    msi_event *e = &(*out)[kept];
    uint64_t idx = first + i;
    if (!read_event(r, cap, own ? slot_of(r, idx) : idx % cap, idx, own, e)) continue;
    if (e->time_ns < last) e->time_ns = last; /* non-decreasing in order, never before the start */
    last = e->time_ns;
    e->seq = (uint32_t)i; /* its place in the window, for its id */
    kept++;
  }
  *dropped = first - base + (n - kept);
  *before = first - base;
  *start_ns = start;
  return kept;
}

uint64_t msi_history_copy(msi_event **out, uint64_t *dropped, uint64_t *before, uint64_t *max_entries,
                          uint64_t *start_ns) {
  pthread_mutex_lock(&admin_lock);
  ring_t *r = atomic_load_explicit(&cur, memory_order_acquire);
  uint64_t kept = 0;
  *out = NULL;
  *dropped = *before = *max_entries = 0;
  *start_ns = 0;
  if (r) {
    kept = copy_window(r, r->cap, true, out, dropped, before, start_ns);
    *max_entries = r->cap;
  }
  pthread_mutex_unlock(&admin_lock);
  if (kept == UINT64_MAX) msi_error("snapshot: out of host memory copying %llu events", (unsigned long long)r->cap);
  return kept;
}

int msi_history_read_mapped(const void *ring, uint64_t bytes, uint64_t cap, uint32_t events_offset, msi_event **out,
                            uint64_t *n_out, uint64_t *dropped, uint64_t *before, uint64_t *start_ns, uint64_t *base) {
  const ring_t *r = ring;
  *out = NULL;
  *n_out = *dropped = *before = *base = 0;
  *start_ns = 0;
  if (events_offset == offsetof(ring_t, ev) && bytes >= sizeof(ring_t) && r->cap == 0 &&
      atomic_load_explicit((_Atomic uint64_t *)&r->total, memory_order_acquire) == 0)
    return MEMSNAP_OK; /* the process died between making its mapping and starting its ring: no event */
  if (events_offset != offsetof(ring_t, ev) || bytes < sizeof(ring_t) || cap < 16 ||
      cap > (bytes - sizeof(ring_t)) / sizeof(msi_event) || r->cap != cap) {
    msi_error("the ring's sizes do not match its header (another version of memsnap, or a damaged file)");
    return MEMSNAP_EINVAL;
  }
  uint64_t total = atomic_load_explicit((_Atomic uint64_t *)&r->total, memory_order_acquire);
  *base = atomic_load_explicit((_Atomic uint64_t *)&r->base, memory_order_relaxed);
  if (*base > total) {
    msi_error("the ring's counts are damaged (base %llu after total %llu)", (unsigned long long)*base,
              (unsigned long long)total);
    return MEMSNAP_EINVAL;
  }
  uint64_t kept = copy_window(r, cap, false, out, dropped, before, start_ns);
  if (kept == UINT64_MAX) {
    msi_error("out of host memory reading %llu events", (unsigned long long)cap);
    return MEMSNAP_ENOMEM;
  }
  *n_out = kept;
  return MEMSNAP_OK;
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
  msi_live_log_label(nlabels - 1, copy);
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

uint32_t msi_label_count(void) {
  pthread_mutex_lock(&label_lock);
  uint32_t n = nlabels;
  pthread_mutex_unlock(&label_lock);
  return n;
}

const char *msi_label(uint32_t id) {
  pthread_mutex_lock(&label_lock);
  const char *s = id < nlabels ? labels[id] : "";
  pthread_mutex_unlock(&label_lock);
  return s;
}

static int add_label_event(msi_event_kind kind, const char *label) {
  if (!msi_ring_recording()) return MEMSNAP_OK;
  uint32_t id = msi_label_id(label);
  if (id == UINT32_MAX) {
    msi_error("mark: out of host memory");
    return MEMSNAP_ENOMEM;
  }
  msi_history_add_unobserved(kind, -1, NULL, 0, 0, tls.range_depth, id, msi_stack_capture());
  return MEMSNAP_OK;
}

int msi_history_mark(const char *label) { return add_label_event(MSI_EV_MARK, label); }

int msi_history_range_push(const char *label) {
  int rc = add_label_event(MSI_EV_RANGE_PUSH, label);
  tls.range_depth++;
  return rc;
}

int msi_history_range_pop(void) {
  if (tls.range_depth == 0) {
    msi_error("memsnap_range_pop without a matching memsnap_range_push on this thread");
    return MEMSNAP_EINVAL;
  }
  tls.range_depth--;
  return add_label_event(MSI_EV_RANGE_POP, NULL);
}

/* fork(): start's lock, taken first of all (api.c's fork_phase) and released last. */
void msi_history_start_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) pthread_mutex_lock(&start_lock);
  else pthread_mutex_unlock(&start_lock);
}

void msi_history_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) {
    pthread_mutex_lock(&admin_lock);
    pthread_mutex_lock(&label_lock);
    return;
  }
  if (phase == MSI_FORK_CHILD) {
    /* The child is not the recorded process: its history starts empty (memsnap_record_start). */
    atomic_fetch_and(&msi_recording, ~MSI_REC_RING);
    ring_t *r = atomic_load(&cur);
    if (r && !r->allocation) atomic_store(&cur, NULL); /* the parent's live mapping: never written here */
    else if (r) atomic_store(&r->base, atomic_load(&r->total));
    tls.tid = 0;
    tls.range_depth = 0;
  }
  pthread_mutex_unlock(&label_lock);
  pthread_mutex_unlock(&admin_lock);
}
