/* livestate.c: the allocator's state written into the live mapping, and read back from it, so that
 * a snapshot written from the mapping (recover.c: a process killed by SIGKILL, `memsnap top`) says
 * what memsnap_dump would have said at that instant, however often the ring wrapped.
 *
 * The state is a checkpoint, the ring its log: recover.c takes the newest whole state and applies
 * the ring's events from the state's instant on. livestate.h draws the slots' layout.
 *
 * Taking it (msi_live_state_take): with every device locked (msi_devices_locked, the dump's one
 * consistent instant), the segments, their allocated and pending blocks with their stacks and the
 * roles told of them (roles.c), each device's statistics, and the ring's count of events claimed
 * (msi_history_position: every event of a device below it is published, since a device's events
 * are added under its lock; none above it is in the copy) are copied into this file's buffers,
 * kept from one state to the next (host memory is allocated only when the state outgrows its
 * largest size yet). The locks released, the copy goes into the older slot: its generation made
 * odd, the bytes written, the checksum, the generation made even. The next state is wanted once
 * the ring has claimed half its capacity more (history.c raises msi_state_wanted; the entry point
 * that added the event takes it after releasing its device lock: api.c), so the ring always still
 * holds every event after the newer state, and after the older one too (a process killed while it
 * writes a slot: the other is half a ring older, plus what the threads claimed between the event
 * that asked for the state and its copy, and while it was written: far less than the other half;
 * were it more, recover.c finds the older state's events gone from the window and says so).
 *
 * Taken also when recording starts (what was allocated before: no event tells it), after a
 * clear (the events before it leave the log), and at an iteration's end when an eighth of the
 * ring was claimed since, or a second passed and an event was (api.c: memsnap_step_event).
 *
 * MEMSNAP_TEST_STATE_STALL_MS (tests only, read at each state: a test may set it when it wants):
 * each write stalls that long half way through its slot, and every iteration's end takes one, so
 * a kill from outside lands in a torn update (tests/intercept/test_crash.sh).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "history/livemap.h"
#include "internal.h"
#include "livestate.h"
#include "snapshot_data.h"

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static msi_snapshot copy;  /* the buffers, reused (state_lock) */
static uint64_t written;   /* slots written by this process */
static int stall_ms;       /* MEMSNAP_TEST_STATE_STALL_MS (state_lock) */
static uint64_t last_index, last_ns; /* the last state's ring index and time */

/* A 64-bit checksum of n bytes (n a multiple of 8): a multiply-xor per word, fast enough for a
 * state of a million blocks (40 MB) in some milliseconds. */
static uint64_t state_sum(const char *p, uint64_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

typedef struct taking {
  msi_snapshot *s;
  uint64_t ring_index, cap;
} taking;

/* The ring's index first: no device's event can come meanwhile (every device is locked); an
 * external allocation's (external.c, under its own lock) may, between the index and the copy of
 * the external ones, and is then both in the state and after it: applied twice, which leaves it
 * as once (recover.c counts no statistic for it, and a block or segment at an address is one). */
static void under_locks(msi_device **devs, int n, void *arg) {
  taking *t = arg;
  t->ring_index = msi_history_position(&t->cap);
  msi_snapshot_gather(devs, n, t->s, false);
}

static uint8_t pool_code(const char *pool) {
  return !strcmp(pool, "small") ? MSI_STATE_SMALL : !strcmp(pool, "async") ? MSI_STATE_ASYNC
                                                  : !strcmp(pool, "external") ? MSI_STATE_EXTERNAL : MSI_STATE_LARGE;
}

/* The copy in `s` into `out` (the slot's bytes after its head, `bytes` of them); the counts into
 * *head. */
static void serialize(const msi_snapshot *s, char *out, msi_state_head *head) {
  char *p = out;
  for (int i = 0; i < s->ndevs; i++) {
    const msi_snap_device *d = &s->devs[i];
    int32_t v[2] = {d->index, d->nstats};
    uint64_t cap = d->cap;
    memcpy(p, v, 8);
    memcpy(p + 8, &cap, 8);
    memcpy(p + 16, d->stats, 8 * (size_t)d->nstats);
    p += 16 + 8 * (size_t)d->nstats;
  }
  uint64_t nblocks = 0;
  for (size_t i = 0; i < s->nsegs; i++) {
    const msi_snap_segment *g = &s->segs[i];
    msi_state_segment *o = (msi_state_segment *)p;
    memset(o, 0, sizeof *o);
    o->device = g->device;
    o->pool = pool_code(g->pool);
    o->flags = (uint8_t)((g->expandable ? MSI_STATE_EXPANDABLE : 0) | (g->private_pool ? MSI_STATE_PRIVATE : 0));
    o->address = g->address;
    o->size = g->size;
    o->stream = g->stream;
    o->caller = g->caller;
    o->pool_id[0] = g->pool_id[0];
    o->pool_id[1] = g->pool_id[1];
    o->source = g->source;
    p += sizeof *o;
    for (size_t b = g->first_block; b < g->first_block + g->nblocks; b++) {
      const msi_snap_block *k = &s->blocks[b];
      if (k->state == 1) continue; /* free: a gap */
      msi_state_block *ob = (msi_state_block *)p;
      memset(ob, 0, sizeof *ob);
      *ob = (msi_state_block){k->address, k->size, k->requested, k->stack_id, k->module_label, k->state, k->role, {0}};
      p += sizeof *ob;
      o->nblocks++;
      nblocks++;
    }
  }
  head->ndevs = (uint32_t)s->ndevs;
  head->nsegs = (uint32_t)s->nsegs;
  head->nblocks = nblocks;
}

/* The bytes the copy takes after the head. */
static uint64_t size_of(const msi_snapshot *s) {
  uint64_t n = 0;
  for (int i = 0; i < s->ndevs; i++) n += 16 + 8 * (uint64_t)s->devs[i].nstats;
  n += (uint64_t)s->nsegs * sizeof(msi_state_segment);
  for (size_t b = 0; b < s->nblocks; b++)
    if (s->blocks[b].state != 1) n += sizeof(msi_state_block);
  return n;
}

static void take(bool iteration_end);

void msi_live_state_take(void) { take(false); }

void msi_live_state_iteration_end(void) { take(true); }

static void take(bool iteration_end) {
  if (!msi_live_state_slot(0, 0) || pthread_mutex_trylock(&state_lock) != 0) return; /* none, or being taken */
  const char *stall = getenv("MEMSNAP_TEST_STATE_STALL_MS"); /* read each time: a test sets it when it wants */
  stall_ms = stall ? atoi(stall) : 0;
  if (iteration_end && stall_ms <= 0) { /* an eighth of the ring since the last, or a second and any event */
    uint64_t cap, at = msi_history_position(&cap);
    if (at == last_index || (at - last_index < cap / 8 && msi_now_ns() - last_ns < 1000000000ull)) {
      pthread_mutex_unlock(&state_lock);
      return;
    }
  }
  atomic_store_explicit(&msi_state_wanted, false, memory_order_relaxed);
  copy.nsegs = copy.nblocks = 0;
  copy.ndevs = 0;
  copy.failed = false;
  taking t = {&copy, 0, 0};
  msi_devices_locked(under_locks, &t);
  last_index = t.ring_index;
  last_ns = msi_now_ns();
  /* the next one half a ring on (the ring holds every event after the older slot's) */
  atomic_store(&msi_state_due_at, t.cap ? t.ring_index + (t.cap / 2 ? t.cap / 2 : 1) : UINT64_MAX);
  if (!copy.failed) {
    if (copy.nsegs > 1) qsort(copy.segs, copy.nsegs, sizeof *copy.segs, msi_snapshot_segment_order);
    uint64_t bytes = size_of(&copy);
    int k = (int)(written & 1);
    char *slot = msi_live_state_slot(k, sizeof(msi_state_head) + bytes);
    if (slot) {
      msi_state_head *head = (msi_state_head *)slot;
      uint64_t gen = 2 * ++written; /* odd while written, then this even one */
      atomic_store_explicit(&head->gen, gen - 1, memory_order_relaxed);
      atomic_thread_fence(memory_order_release); /* a reader that sees the bytes change sees it odd */
      head->ring_index = t.ring_index;
      head->time_ns = msi_now_ns();
      head->bytes = bytes;
      char *body = slot + sizeof *head;
      serialize(&copy, body, head);
      if (stall_ms > 0) /* tests: a kill from outside lands in a torn slot */
        nanosleep(&(struct timespec){stall_ms / 1000, (long)(stall_ms % 1000) * 1000000L}, NULL);
      head->checksum = state_sum(body, bytes);
      atomic_store_explicit(&head->gen, gen, memory_order_release);
    }
  }
  pthread_mutex_unlock(&state_lock);
}

void msi_live_state_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) {
    pthread_mutex_lock(&state_lock);
    return;
  }
  if (phase == MSI_FORK_CHILD) written = 0; /* its own mapping's slots, when it records */
  pthread_mutex_unlock(&state_lock);
}

/* ---- reading ---------------------------------------------------------------------------- */

bool msi_live_state_read(const char *base, uint64_t len, msi_state_head *head, char **payload, bool *torn) {
  const msi_live_header *h = (const msi_live_header *)base;
  *payload = NULL;
  uint64_t best = 0, torn_gen = 0;
  for (int k = 0; k < 2; k++) {
    uint64_t cap = atomic_load((_Atomic uint64_t *)&h->state_capacity[k]);
    if (h->state_offset > len || h->state_reserve > len || cap < sizeof(msi_state_head) || cap > h->state_reserve ||
        (uint64_t)k * h->state_reserve > len - h->state_offset ||
        cap > len - h->state_offset - (uint64_t)k * h->state_reserve)
      continue; /* outside the file (a damaged header, or never written) */
    const char *slot = base + h->state_offset + (uint64_t)k * h->state_reserve;
    const msi_state_head *sh = (const msi_state_head *)slot;
    uint64_t gen = atomic_load_explicit((_Atomic uint64_t *)&sh->gen, memory_order_acquire);
    if (gen & 1) torn_gen = gen;
    if (gen == 0 || gen & 1 || gen <= best) continue;
    msi_state_head got;
    memcpy(&got, sh, sizeof got);
    if (got.bytes > cap - sizeof got || got.bytes % 8) continue;
    char *bytes = malloc(got.bytes ? got.bytes : 1);
    if (!bytes) continue;
    memcpy(bytes, slot + sizeof got, got.bytes);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit((_Atomic uint64_t *)&sh->gen, memory_order_relaxed) != gen ||
        state_sum(bytes, got.bytes) != got.checksum) {
      free(bytes); /* torn: written meanwhile, or killed half way */
      torn_gen = gen + 1;
      continue;
    }
    free(*payload);
    *payload = bytes;
    *head = got;
    best = gen;
  }
  *torn = torn_gen > best;
  return best != 0;
}
