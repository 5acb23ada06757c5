/* runlog.c: the run log: the whole run at iteration resolution (every iteration since recording
 * started) and by time (every second), in constant memory: runlog.h gives the layout, the
 * merging that keeps it bounded and how a torn update is read.
 *
 * Samples: the allocator keeps, per device, its allocated and reserved bytes' highest since the
 * last sample (alloc.c: a compare and a store beside the statistics, the only cost on its path);
 * devices.c's sampler reads them with the current bytes under each device's lock and starts them
 * again. A sample is taken at each iteration's end (an optimizer step's end or skip, told by
 * model_events.c), before tensors are told in their roles (so that the roles at a peak are those
 * before the telling), a few times a second by the live mapping's watcher (livemap.c) where it
 * runs, and at a dump. A sample's peak covers the time since the previous sample: folded into
 * the unit in progress of each log, it raises the unit's peak (with the roles' bytes then) and
 * sets its end. Without the watcher (a single-threaded program, MEMSNAP_LIVE=0 or
 * MEMSNAP_LIVE_WATCH=0) the seconds log has a sample at those cold points only: a stretch
 * without one is one entry covering its seconds.
 *
 * Roles: tensors told (memsnap_tensor_events) are kept by storage address with their role and
 * bytes; an address told again takes its new role. Gradients and optimizer state, which PyTorch's
 * layer tells in full at each step (torch_model.py: the gradients at its beginning, the state
 * before its end), replace those the same optimizer's step told before: their sums are the
 * optimizer's current ones. Parameters are kept till told otherwise. The sums are what an entry
 * keeps at its peak; frees are not seen here (a freed parameter still counts).
 *
 * Locks: run_lock guards the region and the roles; the sampler takes device locks under it, so
 * nothing calls in here with a device lock held (fork: run_lock is taken before the devices').
 * Entry points: runlog.h.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "runlog.h"

static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*sampler)(msi_runlog_sample *out);
static msi_runlog_region own;      /* the region without a mapping (pages touched as used) */
static msi_runlog_region *region;  /* NULL until started */
static msi_runlog_region *home = &own; /* where it lives once started: own, or the mapping's */
static int iteration_label;        /* the optimizer whose steps end iterations (0: none yet) */
static int step_label;             /* the step begun and not ended (0: none) */

/* Told tensors: by storage address, open addressing over `told`. */
typedef struct told_tensor {
  uint64_t addr, bytes;
  uint8_t role;  /* MEMSNAP_TENSOR_* */
  int owner;     /* the step's label it was told in (0: outside a step) */
} told_tensor;
static told_tensor *told;
static size_t ntold, told_cap;
static uint32_t *told_index; /* index + 1 by hash of addr; 0 empty */
static size_t told_mask;
static int64_t role_sum[MSI_RUNLOG_ROLES];

void msi_runlog_set_sampler(void (*fn)(msi_runlog_sample *out)) { sampler = fn; }

/* A valid empty region. The library's own is cleared (it may hold a log from before a shutdown); a
 * mapping's is a new file's, zeros already: its 3 MiB are not touched (a page fault each), which
 * would keep the mapping without its ring's header for longer at the recording's start. */
static void init_region(msi_runlog_region *r, uint64_t start_ns) {
  if (r == &own) memset(r, 0, sizeof *r);
  memcpy(r->magic, MSI_RUNLOG_MAGIC, 8);
  r->version = MSI_RUNLOG_VERSION;
  r->entry_size = sizeof(msi_runlog_entry);
  r->slots = MSI_RUNLOG_SLOTS;
  r->logs = MSI_RUNLOG_LOGS;
  r->start_ns = start_ns;
}

void msi_runlog_start(void) {
  pthread_mutex_lock(&run_lock);
  if (!region) {
    uint64_t now = msi_now_ns();
    init_region(home, now);
    for (int k = 0; k < MSI_RUNLOG_LOGS; k++) home->log[k].tail[0].unit.start_ns = home->log[k].tail[0].unit.end_ns = now;
    region = home;
  }
  pthread_mutex_unlock(&run_lock);
}

/* ---- entries ----------------------------------------------------------------------------- */

/* b appended to a (a's units, then b's). */
static void merge_into(msi_runlog_entry *a, const msi_runlog_entry *b) {
  if (!b->count) return;
  if (!a->count) {
    *a = *b;
    return;
  }
  if (b->peak_allocated > a->peak_allocated) {
    a->peak_allocated = b->peak_allocated;
    a->peak_ns = b->peak_ns;
    memcpy(a->role_bytes, b->role_bytes, sizeof a->role_bytes);
  }
  if (b->peak_reserved > a->peak_reserved) a->peak_reserved = b->peak_reserved;
  a->count += b->count;
  a->skipped += b->skipped;
  a->end_ns = b->end_ns;
  a->end_allocated = b->end_allocated;
  a->end_reserved = b->end_reserved;
}

/* The sample folded into a unit in progress (its peak, with the roles then, and its end). */
static void fold(msi_runlog_entry *u, const msi_runlog_sample *s, uint64_t now) {
  int64_t peak = s->peak_allocated > s->allocated ? s->peak_allocated : s->allocated;
  int64_t peak_res = s->peak_reserved > s->reserved ? s->peak_reserved : s->reserved;
  if (peak > u->peak_allocated || u->peak_ns == 0) {
    u->peak_allocated = peak;
    u->peak_ns = (int64_t)now;
    memcpy(u->role_bytes, role_sum, sizeof role_sum);
  }
  if (peak_res > u->peak_reserved) u->peak_reserved = peak_res;
  u->end_allocated = s->allocated;
  u->end_reserved = s->reserved;
  u->end_ns = now;
}

/* Halves the resolution of a full log: slot[i] = slot[2i] + slot[2i+1], progress stored as it
 * goes (runlog.h). */
static void halve(msi_runlog_log *l) {
  for (uint32_t i = 0; i < MSI_RUNLOG_SLOTS / 2; i++) {
    msi_runlog_entry m = l->slot[2 * i];
    merge_into(&m, &l->slot[2 * i + 1]);
    l->slot[i] = m;
    atomic_store_explicit(&l->merging, i + 2, memory_order_release);
  }
}

/* The tail of log `k` after the sample: `end_unit` finishes the unit in progress (an iteration
 * ends: `skipped` says how; seconds: the unit ends at second `next_first`, which the next one
 * starts at). Published with one store; a slot closed and, when the slots are full, merged. */
static void update(int k, const msi_runlog_sample *s, uint64_t now, bool end_unit, bool skipped, uint64_t next_first) {
  msi_runlog_log *l = &region->log[k];
  uint64_t state = atomic_load_explicit(&l->state, memory_order_relaxed);
  int cur = MSI_RUNLOG_CUR(state), width_log2 = MSI_RUNLOG_WIDTH_LOG2(state);
  uint32_t closed = MSI_RUNLOG_CLOSED(state);
  msi_runlog_tail *t = &l->tail[1 - cur];
  *t = l->tail[cur];
  fold(&t->unit, s, now);
  if (end_unit) {
    msi_runlog_entry *u = &t->unit;
    u->count = k == MSI_RUNLOG_ITERATIONS ? 1 : (uint32_t)(next_first > u->first ? next_first - u->first : 1);
    u->skipped = skipped;
    l->units += u->count;
    merge_into(&t->open, u);
    /* the next unit starts where this one ended, at the values it ended with */
    msi_runlog_entry next = {.first = u->first + u->count, .start_ns = now, .end_ns = now};
    next.peak_allocated = s->allocated;
    next.peak_reserved = s->reserved;
    next.end_allocated = s->allocated;
    next.end_reserved = s->reserved;
    next.peak_ns = (int64_t)now;
    memcpy(next.role_bytes, role_sum, sizeof role_sum);
    *u = next;
    if (t->open.count >= (1u << width_log2)) { /* a slot's worth: closed */
      l->slot[closed++] = t->open;
      memset(&t->open, 0, sizeof t->open);
    }
  }
  atomic_store_explicit(&l->state, (uint64_t)closed | (uint64_t)(1 - cur) << 32 | (uint64_t)width_log2 << 40,
                        memory_order_release);
  if (closed == MSI_RUNLOG_SLOTS) { /* full: halved, the progress published as it goes */
    atomic_store_explicit(&l->merging, 1, memory_order_release);
    halve(l);
    atomic_store_explicit(&l->state,
                          (uint64_t)(MSI_RUNLOG_SLOTS / 2) | (uint64_t)(1 - cur) << 32 | (uint64_t)(width_log2 + 1) << 40,
                          memory_order_release);
    atomic_store_explicit(&l->merging, 0, memory_order_release);
  }
}

/* A sample into both logs (run_lock held); `iteration_end`: the unit in progress of the
 * iterations ends (`skipped` how). */
static void sample_locked(bool iteration_end, bool skipped) {
  if (!region || !sampler) return;
  msi_runlog_sample s = {0};
  sampler(&s);
  uint64_t now = msi_now_ns();
  update(MSI_RUNLOG_ITERATIONS, &s, now, iteration_end, skipped, 0);
  msi_runlog_log *secs = &region->log[MSI_RUNLOG_SECONDS];
  const msi_runlog_entry *u = &secs->tail[MSI_RUNLOG_CUR(atomic_load(&secs->state))].unit;
  uint64_t second = now > region->start_ns ? (now - region->start_ns) / 1000000000u : 0;
  update(MSI_RUNLOG_SECONDS, &s, now, second > u->first, false, second);
}

void msi_runlog_tick(void) {
  pthread_mutex_lock(&run_lock);
  sample_locked(false, false);
  pthread_mutex_unlock(&run_lock);
}

void msi_runlog_step(int label, int what) {
  pthread_mutex_lock(&run_lock);
  if (what == MEMSNAP_STEP_BEGIN) {
    step_label = label;
  } else {
    if (!iteration_label) iteration_label = label;
    if (label == iteration_label) sample_locked(true, what == MEMSNAP_STEP_SKIPPED);
    if (label == step_label) step_label = 0;
  }
  pthread_mutex_unlock(&run_lock);
}

/* ---- roles ------------------------------------------------------------------------------ */

static int role_slot(uint8_t role) {
  return role == MEMSNAP_TENSOR_PARAMETER ? MSI_RUNLOG_PARAMETER
         : role == MEMSNAP_TENSOR_GRADIENT ? MSI_RUNLOG_GRADIENT
         : role == MEMSNAP_TENSOR_OPTIMIZER_STATE ? MSI_RUNLOG_OPTIMIZER
                                                  : -1;
}

static size_t addr_hash(uint64_t a) { return (size_t)((a >> 6) * 0x9E3779B97F4A7C15ull >> 20); }

/* Rebuilds the index for ntold entries in a table of at least twice as many slots; false when
 * out of memory (the index is then dropped: lookups find nothing, entries may repeat). */
static bool reindex(void) {
  size_t want = 64;
  while (want < ntold * 2 + 2) want *= 2;
  if (want - 1 != told_mask) {
    uint32_t *idx = calloc(want, sizeof *idx);
    if (!idx) return false;
    free(told_index);
    told_index = idx;
    told_mask = want - 1;
  } else {
    memset(told_index, 0, sizeof *told_index * want);
  }
  for (size_t i = 0; i < ntold; i++) {
    size_t h = addr_hash(told[i].addr) & told_mask;
    while (told_index[h]) h = (h + 1) & told_mask;
    told_index[h] = (uint32_t)i + 1;
  }
  return true;
}

static void add_to_sums(const told_tensor *t, int sign) {
  int r = role_slot(t->role);
  if (r >= 0) role_sum[r] += sign * (int64_t)t->bytes;
}

/* Drops the tensors of `role` a step of `owner` told (they are told again in full). */
static void drop_role(uint8_t role, int owner) {
  size_t kept = 0;
  for (size_t i = 0; i < ntold; i++) {
    if (told[i].role == role && told[i].owner == owner) add_to_sums(&told[i], -1);
    else told[kept++] = told[i];
  }
  if (kept != ntold) {
    ntold = kept;
    reindex();
  }
}

/* Room for one more told tensor, its index at most half full; false when out of memory. */
static bool room_for_one(void) {
  if (ntold == told_cap) {
    size_t cap = told_cap ? told_cap * 2 : 256;
    told_tensor *grown = realloc(told, sizeof *told * cap);
    if (!grown) return false;
    told = grown;
    told_cap = cap;
  }
  return told_index && (ntold + 1) * 2 <= told_mask + 1 ? true : reindex();
}

static void tell(uint64_t addr, uint64_t bytes, uint8_t role, int owner) {
  if (!room_for_one()) return; /* out of memory: the tensor is not counted */
  size_t h = addr_hash(addr) & told_mask;
  for (; told_index[h]; h = (h + 1) & told_mask) {
    told_tensor *t = &told[told_index[h] - 1];
    if (t->addr != addr) continue;
    add_to_sums(t, -1);
    *t = (told_tensor){addr, bytes, role, owner};
    add_to_sums(t, 1);
    return;
  }
  told[ntold] = (told_tensor){addr, bytes, role, owner};
  told_index[h] = (uint32_t)++ntold;
  add_to_sums(&told[ntold - 1], 1);
}

void msi_runlog_tensors(size_t n, const uint64_t *storage, const uint64_t *bytes, const uint8_t *role) {
  pthread_mutex_lock(&run_lock);
  sample_locked(false, false); /* the peak so far with the roles before these (none unstarted) */
  {
    if (step_label) { /* a step tells its gradients, or its optimizer state, in full */
      bool has[MEMSNAP_TENSOR_BUFFER + 1] = {false};
      for (size_t i = 0; i < n; i++) has[role[i] <= MEMSNAP_TENSOR_BUFFER ? role[i] : 0] = true;
      if (has[MEMSNAP_TENSOR_GRADIENT]) drop_role(MEMSNAP_TENSOR_GRADIENT, step_label);
      if (has[MEMSNAP_TENSOR_OPTIMIZER_STATE]) drop_role(MEMSNAP_TENSOR_OPTIMIZER_STATE, step_label);
    }
    for (size_t i = 0; i < n; i++) tell(storage[i], bytes[i], role[i], step_label);
  }
  pthread_mutex_unlock(&run_lock);
}

/* ---- where it lives ----------------------------------------------------------------------- */

void msi_runlog_move(void *to) {
  pthread_mutex_lock(&run_lock);
  home = to ? to : &own;
  if (region && region != home) memcpy(home, region, sizeof *home);
  if (region) region = home;
  else if (to) init_region(home, msi_now_ns()); /* a valid empty log until recording starts */
  pthread_mutex_unlock(&run_lock);
}

msi_runlog_region *msi_runlog_copy(void) {
  msi_runlog_region *out = NULL;
  pthread_mutex_lock(&run_lock);
  if (region) {
    sample_locked(false, false);
    if ((out = malloc(sizeof *out))) memcpy(out, region, sizeof *out);
  }
  pthread_mutex_unlock(&run_lock);
  return out;
}

void msi_runlog_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) {
    pthread_mutex_lock(&run_lock);
    return;
  }
  if (phase == MSI_FORK_CHILD && region && region != &own) { /* the parent's mapping: never written here */
    memcpy(&own, region, sizeof own);
    region = &own;
  }
  if (phase == MSI_FORK_CHILD) home = &own;
  pthread_mutex_unlock(&run_lock);
}

void msi_runlog_reset(void) {
  pthread_mutex_lock(&run_lock);
  region = NULL;
  home = &own;
  iteration_label = step_label = 0;
  free(told);
  free(told_index);
  told = NULL;
  told_index = NULL;
  ntold = told_cap = told_mask = 0;
  memset(role_sum, 0, sizeof role_sum);
  pthread_mutex_unlock(&run_lock);
}

/* ---- reading a region ---------------------------------------------------------------------- */

long msi_runlog_entries(const void *mem, size_t bytes, int which, msi_runlog_entry **out, bool *in_progress_last) {
  *out = NULL;
  if (in_progress_last) *in_progress_last = false;
  const msi_runlog_region *r = mem;
  if (!mem || bytes < sizeof *r || memcmp(r->magic, MSI_RUNLOG_MAGIC, 8) != 0 || r->version != MSI_RUNLOG_VERSION ||
      r->entry_size != sizeof(msi_runlog_entry) || r->slots != MSI_RUNLOG_SLOTS || r->logs != MSI_RUNLOG_LOGS ||
      which < 0 || which >= MSI_RUNLOG_LOGS)
    return -1;
  const msi_runlog_log *l = &r->log[which];
  /* one read of each: a running writer may change them (its torn state is read as below) */
  uint64_t state = atomic_load_explicit((_Atomic uint64_t *)&l->state, memory_order_acquire);
  uint64_t merging = atomic_load_explicit((_Atomic uint64_t *)&l->merging, memory_order_acquire);
  uint32_t closed = MSI_RUNLOG_CLOSED(state);
  if (closed > MSI_RUNLOG_SLOTS) closed = MSI_RUNLOG_SLOTS;
  msi_runlog_entry *e = malloc(sizeof *e * (MSI_RUNLOG_SLOTS + 2));
  if (!e) return -1;
  long n = 0;
  if (merging && closed == MSI_RUNLOG_SLOTS) { /* killed while halving: the merged ones, then the rest */
    uint64_t done = merging - 1 > MSI_RUNLOG_SLOTS / 2 ? MSI_RUNLOG_SLOTS / 2 : merging - 1;
    for (uint64_t i = 0; i < done; i++) e[n++] = l->slot[i];
    for (uint64_t i = 2 * done; i < MSI_RUNLOG_SLOTS; i++) e[n++] = l->slot[i];
  } else {
    for (uint32_t i = 0; i < closed; i++) e[n++] = l->slot[i];
  }
  const msi_runlog_tail *t = &l->tail[MSI_RUNLOG_CUR(state)];
  if (t->open.count) e[n++] = t->open;
  /* the unit in progress: an iteration only once one has ended (before, the run has none) */
  if ((t->unit.end_ns > t->unit.start_ns || t->unit.peak_allocated) && (which == MSI_RUNLOG_SECONDS || l->units)) {
    e[n] = t->unit;
    e[n].count = 1;
    n++;
    if (in_progress_last) *in_progress_last = true;
  }
  /* entries with no units, or out of order (a hostile file), are dropped */
  long kept = 0;
  for (long i = 0; i < n; i++) {
    if (!e[i].count) continue;
    if (kept && e[i].first < e[kept - 1].first + e[kept - 1].count) {
      if (i == n - 1 && in_progress_last) *in_progress_last = false;
      continue;
    }
    e[kept++] = e[i];
  }
  if (!kept) {
    free(e);
    return 0;
  }
  *out = e;
  return kept;
}
