/* stacks.c: call stacks of allocations, captured cheaply and interned (the hot path).
 *
 * Capture (on the allocation path, only while recording; no I/O, and no allocation but when a
 * stack, or a frame of one, is seen for the first time):
 *   - native: program counters (unwind.c: walked with .eh_frame's rules, the thread's earlier
 *     walks reused where the stack still holds them; libunwind's unw_backtrace where the walk
 *     cannot go), frames inside libmemsnap itself dropped;
 *   - python: the interpreter's frames of the calling thread as (code object, instruction
 *     offset) pairs (lines are computed at snapshot time), read by pyframes.c from the
 *     interpreter's frame records, or through the C API found with dlsym (libmemsnap does not
 *     link libpython; in a process without Python this finds nothing). Python frames are read
 *     when the thread holds the GIL, or when it released it around an op and may take it back
 *     (as PyTorch's recorder does): the GIL is then taken only to intern a frame never seen
 *     before, not to read the thread's own frames, which no other thread changes. A thread
 *     without Python frames (PyTorch's autograd threads: a thread state, no frames) gets native
 *     frames only; while a backward pass is open, it borrows that pass's (below).
 * MEMSNAP_STACKS chooses none, native, python or all (both); MEMSNAP_CONTEXT=alloc leaves the
 * stacks of frees out (msi_stack_capture_for_free).
 *
 * Interning, as trees (heaptrack's trace tree, memray's frame tree): a native frame is a node
 * (its caller's node, pc), a Python frame a node (its caller's node, code, offset), so a stack's
 * native part and Python part are each one node; a stack is the pair of them, and equal pairs
 * get the same id, in the order stacks are first seen (ids from 1; 0 is "no stack"). A stack's
 * words [pcs..., code, offset, code, offset, ...] are written once, when its id is made, for
 * msi_stacks_copy. Each thread keeps what it found last (stacks.c: its previous Python frames
 * with their nodes, a cache of Python nodes by (caller, code, offset) and of stack ids by pair;
 * unwind.c: its walked native stacks with their nodes), so a capture that repeats an earlier
 * one, or differs from the previous one in its innermost frames only, looks nothing up in the
 * shared tables and takes no lock. Code objects in Python nodes are kept alive (one reference
 * each), so an address never names two code objects.
 *
 * Threads: the tables are shared under stack_lock (the GIL, when taken, before it); each
 * thread's caches are its own, made at its first capture and freed when it exits (listed in
 * all_threads meanwhile). A reset (memsnap_shutdown) makes every thread drop its caches at its
 * next capture (a generation). Fork: the child keeps the tables and its thread's caches (its
 * stack is its parent's), and frees the other threads'.
 * Signals and recursion: a capture inside a capture (a signal handler that allocates) gets no
 * stack, as before.
 *
 * MEMSNAP_TEST_STACKS (for tests only, read once at load): "reference" captures as before this
 * design (unw_backtrace for every native stack, the C API for every Python one); "check"
 * captures both ways and compares every stack, printing the counts at exit
 * ("memsnap: stack check: N captures, M differ (native: W walked, F by libunwind; python: R read
 * from frame records)").
 *
 * Counters (memsnap_stack_counters): what the captures did, each thread counting in its own caches
 * (a relaxed store by their one writer: no atomic add, no shared line), summed when asked; they tell a capture that took a lock or the GIL
 * from one that found everything in its thread's caches.
 *
 * Borrowed Python frames: PyTorch's autograd runs a backward pass's nodes on threads of its own
 * (one per device) that have a thread state and no Python frames, so their allocations would
 * read as native frames alone. memsnap_backward_begin (model_events.c, called by the Python
 * package around torch.autograd's engine) pushes the calling thread's Python part, the node of
 * the frames of the backward() call, on a small global stack (msi_stacks_lend_push: at most
 * MSI_STACKS_LEND_MAX deep, atomics, no lock); memsnap_backward_end pops it. A capture whose
 * thread has no Python frames of its own (Python part 0) while one is open takes the innermost
 * one's, so the stack reads as its native frames, then the backward() call's Python frames. A
 * begin on a thread without frames (a reentrant backward from C++) lends the enclosing one's.
 * When none is open this costs one relaxed atomic load, and only in captures that found no
 * Python frames. The stack is global, not per pass: concurrent backward passes on several
 * threads lend the frames of the innermost open one. A reset and a fork child empty it.
 *
 * Names come later, when a snapshot is written (symbolize.c, from msi_stacks_copy's copy of the
 * interned stacks and the C API table msi_python_api gives), never while allocating.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "livemap.h"

#define MAX_NATIVE MSI_STACK_MAX_NATIVE
#define MAX_PYTHON MSI_STACK_MAX_PYTHON
#define CHILD_SLOTS 512 /* a thread's Python nodes by (caller, code, offset) */
#define PAIR_SLOTS 512  /* a thread's stack ids by (native node, Python node) */

/* ---- the shared tables (stack_lock) ----------------------------------------------------- */

static pthread_mutex_t stack_lock = PTHREAD_MUTEX_INITIALIZER;

/* An open-addressing set of ids (0: an empty slot), each placed by the hash of its key. */
typedef struct idset {
  uint32_t *slot;
  size_t mask, count;
} idset;

typedef struct native_node {
  uint64_t pc;
  uint32_t parent;
  uint16_t depth;
} native_node;
typedef struct python_node {
  uint64_t code, pos;
  uint32_t parent;
  uint16_t depth;
} python_node;
typedef struct stack_pair {
  uint32_t native, python;
} stack_pair;

static native_node *nnodes; /* [0] is the root: no frame */
static uint32_t n_nnodes, nnodes_cap;
static idset native_set;
static python_node *pnodes;
static uint32_t n_pnodes, pnodes_cap;
static idset python_set;
static msi_stack_rec *recs; /* recs[0] unused: id 0 is "no stack" */
static stack_pair *pairs;   /* by stack id */
static uint32_t nrecs, recs_cap;
static idset stack_set;
static uint64_t *words;
static size_t nwords, words_cap;
static atomic_uint tables_generation = 1; /* changes when the tables are reset */

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^ c * 0x94d049bb133111ebull;
  h ^= h >> 31;
  h *= 0xd6e8feb86659fd93ull;
  return h ^ (h >> 32);
}
static uint64_t native_hash(uint32_t id) { return mix(nnodes[id].parent, nnodes[id].pc, 1); }
static uint64_t python_hash(uint32_t id) { return mix(pnodes[id].parent, pnodes[id].code, pnodes[id].pos); }
static uint64_t stack_hash(uint32_t id) { return mix(pairs[id].native, pairs[id].python, 2); }

/* Makes room for one more id (the set at most half full). False when out of host memory. */
static bool idset_reserve(idset *s, uint64_t (*hash_of)(uint32_t)) {
  if ((s->count + 1) * 2 <= (s->mask ? s->mask + 1 : 0)) return true;
  size_t cap = s->mask ? (s->mask + 1) * 2 : 1024;
  uint32_t *t = calloc(cap, sizeof *t);
  if (!t) return false;
  for (size_t i = 0; s->mask && i <= s->mask; i++) {
    if (!s->slot[i]) continue;
    size_t k = hash_of(s->slot[i]) & (cap - 1);
    while (t[k]) k = (k + 1) & (cap - 1);
    t[k] = s->slot[i];
  }
  free(s->slot);
  s->slot = t;
  s->mask = cap - 1;
  return true;
}

static void idset_free(idset *s) {
  free(s->slot);
  *s = (idset){NULL, 0, 0};
}

/* Grows an array of `size`-byte elements to hold n + 1. False when out of host memory. */
static bool room_for(void **array, uint32_t *cap, uint32_t n, size_t size) {
  if (n < *cap) return true;
  uint32_t grown = *cap ? *cap * 2 : 1024;
  void *p = realloc(*array, size * grown);
  if (!p) return false;
  *array = p;
  *cap = grown;
  return true;
}

/* The native node (parent, pc), made if new; 0 when out of host memory. */
static uint32_t native_child(uint32_t parent, uint64_t pc) {
  if (!idset_reserve(&native_set, native_hash)) return 0;
  size_t k = mix(parent, pc, 1) & native_set.mask;
  for (uint32_t id; (id = native_set.slot[k]); k = (k + 1) & native_set.mask)
    if (nnodes[id].pc == pc && nnodes[id].parent == parent) return id;
  if (n_nnodes == 0) n_nnodes = 1; /* node 0 is the root */
  if (!room_for((void **)&nnodes, &nnodes_cap, n_nnodes, sizeof *nnodes)) return 0;
  nnodes[n_nnodes] = (native_node){pc, parent, (uint16_t)(parent ? nnodes[parent].depth + 1 : 1)};
  native_set.slot[k] = n_nnodes;
  native_set.count++;
  msi_live_note_pc(pc); /* its module named in the live mapping (a new node only) */
  return n_nnodes++;
}

/* The Python node (parent, code, pos), made if new when `make` (the GIL held: the node keeps
 * its code object alive); 0 if absent or out of host memory. */
static uint32_t python_child(uint32_t parent, uint64_t code, uint64_t pos, bool make) {
  if (!python_set.mask && !make) return 0;
  if (!idset_reserve(&python_set, python_hash)) return 0;
  size_t k = mix(parent, code, pos) & python_set.mask;
  for (uint32_t id; (id = python_set.slot[k]); k = (k + 1) & python_set.mask)
    if (pnodes[id].code == code && pnodes[id].pos == pos && pnodes[id].parent == parent) return id;
  if (!make) return 0;
  if (n_pnodes == 0) n_pnodes = 1;
  if (!room_for((void **)&pnodes, &pnodes_cap, n_pnodes, sizeof *pnodes)) return 0;
  pnodes[n_pnodes] = (python_node){code, pos, parent, (uint16_t)(parent ? pnodes[parent].depth + 1 : 1)};
  python_set.slot[k] = n_pnodes;
  python_set.count++;
  msi_python_api()->IncRef((PyObject *)(uintptr_t)code); /* keep code alive */
  if (msi_live_wants_pyframe(code, pos)) { /* its names, for a snapshot written after the process died */
    char *name = NULL, *file = NULL;
    int64_t line = -1;
    msi_pyframes_name(code, pos, &name, &file, &line);
    msi_live_log_pyframe(code, pos, line, name ? name : "<python code>", file ? file : "");
    free(name);
    free(file);
  }
  return n_pnodes++;
}

/* The id of the stack (native node, python node), made if new with its words; 0 if out of host
 * memory. */
static uint32_t stack_of(uint32_t native, uint32_t python) {
  if (!idset_reserve(&stack_set, stack_hash)) return 0;
  uint64_t h = mix(native, python, 2);
  size_t k = h & stack_set.mask;
  for (uint32_t id; (id = stack_set.slot[k]); k = (k + 1) & stack_set.mask)
    if (pairs[id].native == native && pairs[id].python == python) return id;
  if (nrecs == 0) nrecs = 1; /* id 0 stays unused */
  uint32_t cap = recs_cap;
  if (!room_for((void **)&recs, &cap, nrecs, sizeof *recs) || !room_for((void **)&pairs, &recs_cap, nrecs, sizeof *pairs))
    return 0;
  recs_cap = cap;
  size_t nn = native ? nnodes[native].depth : 0, np = python ? pnodes[python].depth : 0, n = nn + 2 * np;
  if (nwords + n > words_cap) {
    size_t grown = words_cap ? words_cap * 2 : 65536;
    while (grown < nwords + n) grown *= 2;
    uint64_t *w = realloc(words, sizeof *w * grown);
    if (!w) return 0;
    words = w;
    words_cap = grown;
  }
  uint64_t *w = &words[nwords];
  for (uint32_t v = native; v; v = nnodes[v].parent) *w++ = nnodes[v].pc;
  for (uint32_t v = python; v; v = pnodes[v].parent) {
    *w++ = pnodes[v].code;
    *w++ = pnodes[v].pos;
  }
  msi_live_log_stack(nrecs, (uint16_t)nn, (uint16_t)np, &words[nwords]);
  recs[nrecs] = (msi_stack_rec){(uint32_t)nwords, (uint16_t)nn, (uint16_t)np};
  pairs[nrecs] = (stack_pair){native, python};
  nwords += n;
  stack_set.slot[k] = nrecs;
  stack_set.count++;
  return nrecs++;
}

/* ---- each thread's caches --------------------------------------------------------------- */

/* What memsnap_stack_counters reports, in its order (docs/allocator.md, "Stack counters"). */
enum {
  SC_CAPTURES,       /* stacks captured */
  SC_NATIVE_CACHED,  /* native parts found in the thread's walks, nothing locked */
  SC_NATIVE_LOCKED,  /* native parts that took the tables' lock (a new stack, libunwind's) */
  SC_PYTHON_RECORDS, /* Python parts read from the interpreter's frame records */
  SC_PYTHON_API,     /* Python parts walked with the C API (the GIL held) */
  SC_PYTHON_SAME,    /* Python parts the same as the thread's previous capture */
  SC_PYTHON_LOCKED,  /* Python nodes looked up under the tables' lock (a thread cache's miss) */
  SC_GIL_TAKEN,      /* captures that took the GIL themselves */
  SC_GIL_HELPER,     /* captures that asked gil_helper.c's thread */
  SC_PAIRS_LOCKED,   /* stack ids looked up under the tables' lock */
#ifdef MSI_PHASE_TIMING
  /* A diagnostic build's (make phase-timing): the TSC ticks each part of the captures took. */
  SC_TICKS_CAPTURE,        /* whole captures (msi_stack_capture_from) */
  SC_TICKS_NATIVE,         /* native parts */
  SC_TICKS_PYTHON_PRESENT, /* asking the interpreter for the thread's state and the GIL */
  SC_TICKS_PYTHON_READ,    /* reading the frames (pyframes.c) */
  SC_TICKS_PYTHON_NODES,   /* comparing them with the previous capture's, their nodes */
  SC_TICKS_PAIR,           /* the stack id of the native and Python parts */
#endif
  SC_COUNT
};
static const char *const counter_names[] = {"captures",       "native_cached", "native_locked",
                                            "python_records", "python_api",    "python_same",
                                            "python_locked",  "gil_taken",     "gil_helper",
                                            "pairs_locked",
#ifdef MSI_PHASE_TIMING
                                            "ticks_capture", "ticks_native", "ticks_python_present",
                                            "ticks_python_read", "ticks_python_nodes", "ticks_pair",
#endif
};
_Static_assert(sizeof counter_names / sizeof *counter_names == SC_COUNT, "a name for each counter");
/* Only the thread itself (or gil_helper.c's thread while it waits) adds to its counters; relaxed
 * atomics (plain moves) because memsnap_stack_counters reads them from another thread. */
#define COUNT_ADD(t, which, n) \
  ((t) ? __atomic_store_n(&(t)->count[which], (t)->count[which] + (n), __ATOMIC_RELAXED) : (void)0)
#define COUNT(t, which) COUNT_ADD(t, which, 1)
#ifdef MSI_PHASE_TIMING
#include <x86intrin.h>
#define PHASE_START() __rdtsc()
#define PHASE_ADD(t, which, since) COUNT_ADD(t, which, __rdtsc() - (since))
#else
#define PHASE_START() 0
#define PHASE_ADD(t, which, since) ((void)(since))
#endif

typedef struct thread_stacks {
  unsigned generation;        /* tables_generation the caches below were filled under */
  uint64_t count[SC_COUNT];   /* this thread's counters (memsnap_stack_counters) */
  msi_unwind_cache *native;   /* NULL: libunwind for every stack */
  /* The previous capture's Python frames and their nodes (py[py_prev]), and the buffer the
   * next capture reads into (the other one): they change roles when the frames differ, so
   * nothing is copied. */
  struct python_frames {
    int n;
    uint64_t words[2 * MAX_PYTHON];
    uint32_t nodes[MAX_PYTHON];
  } py[2];
  int py_prev;
  struct {
    uint64_t code, pos;
    uint32_t parent, node;
  } children[CHILD_SLOTS];
  struct {
    uint32_t native, python, id;
  } stacks[PAIR_SLOTS];
  struct thread_stacks *next, *prev; /* all_threads */
} thread_stacks;

/* Every thread's caches (stack_lock): a fork child frees those of the threads it has not got,
 * and a leak checker sees them. */
static thread_stacks *all_threads;
static uint64_t exited_counts[SC_COUNT]; /* the counters of threads that exited (stack_lock) */

#define GONE ((thread_stacks *)1) /* the thread is exiting: its caches are freed */
/* The thread's storage, one look-up a capture (a shared library's thread-locals are reached
 * through __tls_get_addr). */
typedef struct thread_slot {
  thread_stacks *stacks;
  volatile int in_capture; /* recursion guard (a signal handler's capture too) */
} thread_slot;
static __thread thread_slot tls;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void link_thread(thread_stacks *t) {
  pthread_mutex_lock(&stack_lock);
  t->next = all_threads;
  if (all_threads) all_threads->prev = t;
  all_threads = t;
  pthread_mutex_unlock(&stack_lock);
}

/* stack_lock held. */
static void free_thread(thread_stacks *t) {
  for (int i = 0; i < SC_COUNT; i++) exited_counts[i] += t->count[i];
  if (t->prev) t->prev->next = t->next;
  else all_threads = t->next;
  if (t->next) t->next->prev = t->prev;
  msi_unwind_cache_free(t->native);
  free(t);
}

static void thread_exits(void *arg) {
  pthread_mutex_lock(&stack_lock);
  free_thread(arg);
  pthread_mutex_unlock(&stack_lock);
  tls.stacks = GONE; /* a capture from a later destructor uses no cache */
}
static bool exit_key_made;
static void make_exit_key(void) {
  exit_key_made = pthread_key_create(&exit_key, thread_exits) == 0;
}
/* Unloaded (dlclose): no thread's exit may call into this library any more. */
__attribute__((destructor)) static void delete_exit_key(void) {
  if (exit_key_made) pthread_key_delete(exit_key);
}

static void forget_thread(thread_stacks *t, unsigned generation) {
  t->generation = generation;
  t->py[0].n = t->py[1].n = 0;
  memset(t->children, 0, sizeof t->children);
  memset(t->stacks, 0, sizeof t->stacks);
}

/* The calling thread's caches, made at its first capture; NULL when they cannot be. */
static thread_stacks *thread_state(thread_slot *slot) {
  thread_stacks *t = slot->stacks;
  if (MSI_UNLIKELY(t == NULL)) {
    pthread_once(&exit_key_once, make_exit_key);
    if (!exit_key_made || !(t = calloc(1, sizeof *t))) return NULL;
    if (pthread_setspecific(exit_key, t) != 0) {
      free(t);
      return NULL;
    }
    t->native = msi_unwind_cache_new();
    t->generation = atomic_load_explicit(&tables_generation, memory_order_relaxed);
    link_thread(t);
    slot->stacks = t;
  } else if (MSI_UNLIKELY(t == GONE)) {
    return NULL;
  }
  unsigned g = atomic_load_explicit(&tables_generation, memory_order_relaxed);
  if (MSI_UNLIKELY(t->generation != g)) forget_thread(t, g);
  return t;
}

/* ---- native part ------------------------------------------------------------------------ */

/* The node of the calling thread's native frames, from return address first_pc on when that is
 * among the first frames outside the library: the cached walk, or libunwind (`reference`). */
static inline __attribute__((always_inline)) uint32_t native_part(thread_stacks *t, uint64_t entry, uint64_t first_pc,
                                                                  bool reference) {
  uint64_t raw[MSI_UNWIND_MAX_RAW + 1];
  msi_native_stack s;
  msi_unwind_stack(t && !reference ? t->native : NULL, entry, raw, &s);
  int start = s.lib_end;
  for (int k = start; first_pc && k < s.n && k < s.lib_end + 8; k++)
    if (s.pcs[k] == first_pc) {
      start = k;
      break;
    }
  int end = s.n < start + MAX_NATIVE ? s.n : start + MAX_NATIVE;
  /* A stack longer than a stack keeps is cut at MAX_NATIVE frames from its start: its nodes
   * (s.cut) serve only a capture that starts where the library's frames end. */
  bool cut = s.n - s.lib_end > MAX_NATIVE;
  if (MSI_LIKELY(s.known && cut == s.cut && (!cut || start == s.lib_end))) {
    COUNT(t, SC_NATIVE_CACHED);
    return start < end ? s.nodes[start] : 0;
  }
  uint32_t node = 0;
  COUNT(t, SC_NATIVE_LOCKED);
  pthread_mutex_lock(&stack_lock);
  if (s.nodes && (!cut || start == s.lib_end)) { /* every frame's node, for the thread's cache */
    int last = cut ? s.lib_end + MAX_NATIVE : s.n;
    bool all = true;
    for (int i = last - 1; i >= s.lib_end && all; i--)
      if (cut || !s.nodes[i]) all = (s.nodes[i] = native_child(i + 1 < last ? s.nodes[i + 1] : 0, s.pcs[i])) != 0;
    for (int i = last; i < s.n; i++) s.nodes[i] = 0;
    node = all && start < end ? s.nodes[start] : 0;
    pthread_mutex_unlock(&stack_lock);
    if (all) msi_unwind_keep(t->native, cut);
    return node;
  }
  for (int i = end - 1; i >= start; i--) /* libunwind's frames, or a cut stack from further in */
    if (!(node = native_child(node, s.pcs[i]))) break;
  pthread_mutex_unlock(&stack_lock);
  return node;
}

/* ---- Python part ------------------------------------------------------------------------ */

/* Whether the thread has Python frames to read now: 1 with the GIL held, 0 when it released it
 * and may take it back, PYTHON_ELSEWHERE when it released it and may not take it (it may hold
 * another library's lock, PyTorch's allocator mutex around cudaMalloc, that a thread holding the
 * GIL waits for: what needs the GIL is done by gil_helper.c's thread while this one waits), -1
 * when there is nothing to read (no Python, a thread that never ran Python). */
#define PYTHON_ELSEWHERE 2
static int python_present(const msi_python *py, void **ts, bool may_take) {
  if (py->state < 0 || !py->IsInitialized() || !(*ts = py->GILState_GetThisThreadState())) return -1;
  if (py->GILState_Check()) return 1;
  return may_take ? 0 : PYTHON_ELSEWHERE;
}

/* The node of frames w[0..n) given the node of frames i.. (known[i]); the GIL held when
 * `make`. Returns 0 when a node is missing (absent and not `make`, or out of host memory). */
static uint32_t python_nodes(thread_stacks *t, const uint64_t *w, int n, uint32_t *nodes, int from, bool make) {
  for (int i = from - 1; i >= 0; i--) {
    uint32_t parent = i + 1 < n ? nodes[i + 1] : 0;
    uint64_t code = w[2 * i], pos = w[2 * i + 1];
    size_t k = mix(parent, code, pos) & (CHILD_SLOTS - 1);
    if (t && t->children[k].node && t->children[k].parent == parent && t->children[k].code == code &&
        t->children[k].pos == pos) {
      nodes[i] = t->children[k].node;
      continue;
    }
    COUNT(t, SC_PYTHON_LOCKED);
    pthread_mutex_lock(&stack_lock);
    nodes[i] = python_child(parent, code, pos, make);
    pthread_mutex_unlock(&stack_lock);
    if (!nodes[i]) return 0;
    if (t) {
      t->children[k].code = code;
      t->children[k].pos = pos;
      t->children[k].parent = parent;
      t->children[k].node = nodes[i];
    }
  }
  return n ? nodes[0] : 0;
}

#define PYTHON_NEEDS_GIL UINT32_MAX

/* The node of the Python frames of thread state ts (the calling thread's, or the one
 * gil_helper.c's thread works for while it waits): 0 for none. held: 1 when the GIL is held, 0
 * when it may be taken, PYTHON_ELSEWHERE when it may not: then PYTHON_NEEDS_GIL where it would
 * be needed (frames the records cannot give, a frame never seen). `reference` reads the frames
 * through the C API with the GIL, as before pyframes.c's reader. */
static uint32_t python_node_of(const msi_python *py, thread_stacks *t, void *ts, int held, bool reference) {
  struct python_frames local, *next = t ? &t->py[t->py_prev ^ 1] : &local;
  const struct python_frames *prev = t ? &t->py[t->py_prev] : NULL;
  uint64_t *w = next->words;
  uint32_t *nodes = next->nodes;
  uint64_t phase = PHASE_START();
  int n = reference ? -1 : msi_pyframes_read(ts, w, MAX_PYTHON, held == 1), gil = 0;
  PHASE_ADD(t, SC_TICKS_PYTHON_READ, phase);
  phase = PHASE_START();
  bool taken = false, api = reference; /* the frames come from the C API */
  if (n < 0) { /* the C API, with the GIL */
    if (held == PYTHON_ELSEWHERE) return PYTHON_NEEDS_GIL;
    if (!held) {
      gil = py->GILState_Ensure();
      COUNT(t, SC_GIL_TAKEN);
      taken = true;
      held = 1;
    }
    n = reference ? msi_pyframes_api(ts, w, MAX_PYTHON) : msi_pyframes_read(ts, w, MAX_PYTHON, true);
    if (n < 0) {
      n = msi_pyframes_api(ts, w, MAX_PYTHON);
      api = true;
    }
  }
  COUNT(t, api ? SC_PYTHON_API : SC_PYTHON_RECORDS);
  uint32_t node = 0;
  if (n <= 0) {
    /* no frames (a thread state made from C): no node; py_nodes may be an older generation's */
  } else if (prev && n == prev->n && memcmp(w, prev->words, sizeof *w * 2 * (size_t)n) == 0) {
    node = prev->nodes[0]; /* the previous capture's frames */
    COUNT(t, SC_PYTHON_SAME);
  } else {
    /* The frames the previous capture shares with this one, from the outermost in: all but the
       innermost when only it moved (an allocation and a free of one function), else counted. */
    int same = 0, pn = prev ? prev->n : 0;
    if (n == pn && memcmp(w + 2, prev->words + 2, sizeof *w * 2 * (size_t)(n - 1)) == 0)
      same = n - 1;
    else
      while (same < n && same < pn && w[2 * (n - 1 - same)] == prev->words[2 * (pn - 1 - same)] &&
             w[2 * (n - 1 - same) + 1] == prev->words[2 * (pn - 1 - same) + 1])
        same++;
    if (same) memcpy(nodes + n - same, prev->nodes + pn - same, sizeof *nodes * (size_t)same);
    node = python_nodes(t, w, n, nodes, n - same, held == 1);
    if (!node && held == PYTHON_ELSEWHERE) return PYTHON_NEEDS_GIL; /* a frame never seen */
    if (!node && held != 1) { /* a frame never seen: its node needs the GIL */
      gil = py->GILState_Ensure();
      COUNT(t, SC_GIL_TAKEN);
      taken = true;
      node = python_nodes(t, w, n, nodes, n - same, true);
    }
    if (t && node) { /* these frames are now the previous capture's */
      next->n = n;
      t->py_prev ^= 1;
    }
  }
  if (taken) py->GILState_Release(gil);
  PHASE_ADD(t, SC_TICKS_PYTHON_NODES, phase);
  return node;
}

/* What gil_helper.c's thread does, GIL held, for a thread that released it and waits. */
typedef struct python_job {
  const msi_python *py;
  thread_stacks *t;
  void *ts;
  bool reference;
  uint32_t node; /* out */
} python_job;

static void python_job_run(void *arg) {
  python_job *j = arg;
  j->node = python_node_of(j->py, j->t, j->ts, 1, j->reference);
}

/* The node of the calling thread's Python frames (0: none). A thread that released the GIL and
 * may not take it reads them itself when it can (pyframes.c's records, frames seen before), else
 * asks gil_helper.c's thread; native frames only (0 here) when the GIL is not had in time. */
static __attribute__((noinline)) uint32_t python_part(thread_stacks *t, bool may_take, bool reference) {
  const msi_python *py = msi_python_api();
  void *ts = NULL;
  uint64_t phase = PHASE_START();
  int held = python_present(py, &ts, may_take);
  PHASE_ADD(t, SC_TICKS_PYTHON_PRESENT, phase);
  if (held < 0) return 0;
  uint32_t node = python_node_of(py, t, ts, held, reference);
  if (node != PYTHON_NEEDS_GIL) return node;
  python_job job = {py, t, ts, reference, 0};
  COUNT(t, SC_GIL_HELPER);
  return msi_gil_helper_run(python_job_run, &job) == 0 ? job.node : 0;
}

/* ---- Python frames lent by backward passes ---------------------------------------------- */

/* lend_depth counts the open begins; lent[i] is the Python node of begin i (the first
 * MSI_STACKS_LEND_MAX). A node stays valid until msi_stacks_reset, which empties this too. */
static atomic_uint lend_depth;
static _Atomic uint32_t lent[MSI_STACKS_LEND_MAX];

/* The innermost open begin's Python node, 0 when none is open (one relaxed load then). */
static inline uint32_t lent_python(void) {
  unsigned d = atomic_load_explicit(&lend_depth, memory_order_relaxed);
  if (MSI_LIKELY(d == 0)) return 0;
  return atomic_load_explicit(&lent[(d > MSI_STACKS_LEND_MAX ? MSI_STACKS_LEND_MAX : d) - 1], memory_order_relaxed);
}

/* ---- capture ---------------------------------------------------------------------------- */

static inline uint32_t stack_id(thread_stacks *t, uint32_t native, uint32_t python) {
  if (!native && !python) return 0;
  size_t k = ((native * 0x9e3779b1u) ^ (python * 0x85ebca77u)) >> 23 & (PAIR_SLOTS - 1);
  if (t && t->stacks[k].id && t->stacks[k].native == native && t->stacks[k].python == python) return t->stacks[k].id;
  COUNT(t, SC_PAIRS_LOCKED);
  pthread_mutex_lock(&stack_lock);
  uint32_t id = stack_of(native, python);
  pthread_mutex_unlock(&stack_lock);
  if (t && id) {
    t->stacks[k].native = native;
    t->stacks[k].python = python;
    t->stacks[k].id = id;
  }
  return id;
}

static inline __attribute__((always_inline)) uint32_t capture(thread_stacks *t, int mode, uint64_t entry,
                                                              uint64_t first_pc, bool may_take_gil, bool reference) {
  uint64_t phase = PHASE_START();
  uint32_t native = (mode & MSI_STACKS_NATIVE) ? native_part(t, entry, first_pc, reference) : 0;
  PHASE_ADD(t, SC_TICKS_NATIVE, phase);
  uint32_t python = 0;
  if (mode & MSI_STACKS_PYTHON) {
    python = python_part(t, may_take_gil, reference);
    if (!python) python = lent_python(); /* no frames of its own: a backward pass's, if one is open */
  }
  phase = PHASE_START();
  uint32_t id = stack_id(t, native, python);
  PHASE_ADD(t, SC_TICKS_PAIR, phase);
  return id;
}

/* MEMSNAP_TEST_STACKS: 0 normal, 1 reference, 2 check. */
static int test_mode;
static atomic_ullong checked, differ;

static void report_check(void) {
  const char *keys[SC_COUNT + 3];
  uint64_t v[SC_COUNT + 3];
  int n = memsnap_stack_counters(keys, v, SC_COUNT + 3);
  fprintf(stderr,
          "memsnap: stack check: %llu captures, %llu differ (native: %llu walked, %llu by libunwind; python: %llu read "
          "from frame records)\n",
          (unsigned long long)atomic_load(&checked), (unsigned long long)atomic_load(&differ),
          (unsigned long long)(n > SC_COUNT ? v[SC_COUNT] : 0), (unsigned long long)(n > SC_COUNT + 1 ? v[SC_COUNT + 1] : 0),
          (unsigned long long)v[SC_PYTHON_RECORDS]);
}

__attribute__((constructor)) static void read_test_mode(void) {
  const char *v = getenv("MEMSNAP_TEST_STACKS");
  if (!v) return;
  if (!strcmp(v, "reference")) test_mode = 1;
  else if (!strcmp(v, "check")) {
    test_mode = 2;
    atexit(report_check);
  }
}

/* Both ways, from the same frame; the two ids are equal when the stacks are. */
static __attribute__((noinline)) uint32_t capture_checked(thread_stacks *t, int mode, uint64_t entry, uint64_t first_pc,
                                                          bool may_take) {
  uint32_t id = capture(t, mode, entry, first_pc, may_take, false);
  uint32_t ref = capture(t, mode, entry, first_pc, may_take, true);
  atomic_fetch_add(&checked, 1);
  if (id != ref) atomic_fetch_add(&differ, 1);
  return id;
}

void msi_stacks_lend_push(bool capture) {
  uint32_t node = 0;
  thread_slot *slot = &tls;
  if (capture && (msi_opt.stacks & MSI_STACKS_PYTHON) && !slot->in_capture) {
    slot->in_capture = 1;
    node = python_part(thread_state(slot), true, test_mode == 1);
    slot->in_capture = 0;
  }
  if (!node) node = lent_python(); /* a thread without frames: the enclosing pass's */
  unsigned d = atomic_fetch_add_explicit(&lend_depth, 1, memory_order_relaxed);
  if (d < MSI_STACKS_LEND_MAX) atomic_store_explicit(&lent[d], node, memory_order_relaxed);
}

int msi_stacks_lend_pop(void) {
  unsigned d = atomic_load_explicit(&lend_depth, memory_order_relaxed);
  do {
    if (d == 0) return -1;
  } while (!atomic_compare_exchange_weak_explicit(&lend_depth, &d, d - 1, memory_order_relaxed, memory_order_relaxed));
  return 0;
}

/* Forgets every lent node (a reset: their ids go; a fork child: the passes are the parent's). */
static void lend_forget(void) {
  atomic_store_explicit(&lend_depth, 0, memory_order_relaxed);
  for (int i = 0; i < MSI_STACKS_LEND_MAX; i++) atomic_store_explicit(&lent[i], 0, memory_order_relaxed);
}

uint32_t msi_stack_capture(void) { return msi_stack_capture_from(0, true); }

uint32_t msi_stack_capture_from(uint64_t first_pc, bool may_take_gil) {
  int mode = msi_opt.stacks;
  thread_slot *slot = &tls;
  __asm__("" : "+r"(slot)); /* one look-up of the thread's storage: kept, not computed again */
  if (mode == MSI_STACKS_NONE || slot->in_capture) return 0;
  slot->in_capture = 1;
  uint64_t phase = PHASE_START();
  thread_stacks *t = thread_state(slot);
  COUNT(t, SC_CAPTURES);
  uint64_t entry = (uint64_t)(uintptr_t)__builtin_return_address(0);
  uint32_t id = MSI_LIKELY(!test_mode) ? capture(t, mode, entry, first_pc, may_take_gil, false)
                : test_mode == 1     ? capture(t, mode, entry, first_pc, may_take_gil, true)
                                     : capture_checked(t, mode, entry, first_pc, may_take_gil);
  PHASE_ADD(t, SC_TICKS_CAPTURE, phase);
  slot->in_capture = 0;
  return id;
}

uint32_t msi_stack_capture_for_free(uint64_t first_pc, bool may_take_gil) {
  return msi_opt.context == MSI_CONTEXT_ALL ? msi_stack_capture_from(first_pc, may_take_gil) : 0;
}

int memsnap_stack_counters(const char **keys, uint64_t *values, int capacity) {
  if (capacity < 0 || (capacity > 0 && !values)) return -1;
  /* the threads' counters, then unwind.c's walks and pyframes.c's choice of reader */
#ifdef MSI_PHASE_TIMING
  static const char *const process_names[] = {"native_walked",     "native_libunwind",  "python_reader",
                                              "ticks_per_us",      "chains_compared",   "chains_held",
                                              "walk_steps",        "walks_joined",      "chain_words"};
  enum { N = SC_COUNT + 4 + MSI_UNWIND_DIAG };
#else
  static const char *const process_names[] = {"native_walked", "native_libunwind", "python_reader"};
  enum { N = SC_COUNT + 3 };
#endif
  uint64_t sum[N];
  pthread_mutex_lock(&stack_lock);
  memcpy(sum, exited_counts, sizeof exited_counts);
  for (thread_stacks *t = all_threads; t; t = t->next) /* other threads' counters, read as they are */
    for (int i = 0; i < SC_COUNT; i++) sum[i] += __atomic_load_n(&t->count[i], __ATOMIC_RELAXED);
  pthread_mutex_unlock(&stack_lock);
  unsigned long long walked, fell_back;
  msi_unwind_counts(&walked, &fell_back);
  sum[SC_COUNT] = walked;
  sum[SC_COUNT + 1] = fell_back;
  sum[SC_COUNT + 2] = (uint64_t)(int64_t)msi_pyframes_reader();
#ifdef MSI_PHASE_TIMING
  { /* the TSC's rate, over 5 ms of the monotonic clock */
    uint64_t ns0 = msi_now_ns(), t0 = __rdtsc();
    struct timespec nap = {0, 5000000};
    nanosleep(&nap, NULL);
    uint64_t ns1 = msi_now_ns(), t1 = __rdtsc();
    sum[SC_COUNT + 3] = ns1 > ns0 ? (t1 - t0) * 1000 / (ns1 - ns0) : 0;
    unsigned long long d[MSI_UNWIND_DIAG];
    msi_unwind_diag(d);
    for (int i = 0; i < MSI_UNWIND_DIAG; i++) sum[SC_COUNT + 4 + i] = d[i];
  }
#endif
  int n = capacity < N ? capacity : N;
  for (int i = 0; i < n; i++) {
    values[i] = sum[i];
    if (keys) keys[i] = i < SC_COUNT ? counter_names[i] : process_names[i - SC_COUNT];
  }
  return n;
}

/* ---- the interned stacks: copied for symbolize.c, freed, kept across fork --------------- */

int msi_stacks_copy(msi_stack_rec **recs_out, uint64_t **words_out, uint32_t *count) {
  pthread_mutex_lock(&stack_lock);
  msi_stack_rec *r_copy = malloc(sizeof *r_copy * (nrecs ? nrecs : 1));
  uint64_t *w_copy = malloc(sizeof *w_copy * (nwords ? nwords : 1));
  if (r_copy && w_copy) {
    if (nrecs) memcpy(r_copy, recs, sizeof *r_copy * nrecs);
    if (nwords) memcpy(w_copy, words, sizeof *w_copy * nwords);
  }
  *count = nrecs;
  pthread_mutex_unlock(&stack_lock);
  if (!r_copy || !w_copy) {
    free(r_copy);
    free(w_copy);
    r_copy = NULL;
    w_copy = NULL;
  }
  *recs_out = r_copy;
  *words_out = w_copy;
  return r_copy ? 0 : -1;
}

void msi_stacks_reset(void) {
  pthread_mutex_lock(&stack_lock);
  free(nnodes);
  free(pnodes);
  free(recs);
  free(pairs);
  free(words);
  idset_free(&native_set);
  idset_free(&python_set);
  idset_free(&stack_set);
  nnodes = NULL;
  pnodes = NULL;
  recs = NULL;
  pairs = NULL;
  words = NULL;
  n_nnodes = nnodes_cap = n_pnodes = pnodes_cap = nrecs = recs_cap = 0;
  nwords = words_cap = 0;
  atomic_fetch_add_explicit(&tables_generation, 1, memory_order_relaxed);
  lend_forget();
  msi_unwind_forget();
  pthread_mutex_unlock(&stack_lock);
}

void msi_stacks_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) {
    pthread_mutex_lock(&stack_lock);
    return;
  }
  if (phase == MSI_FORK_CHILD) { /* the forking thread is the child's only one */
    tls.in_capture = 0;
    lend_forget();
    for (thread_stacks *t = all_threads, *next; t; t = next) {
      next = t->next;
      if (t != tls.stacks) free_thread(t);
    }
  }
  pthread_mutex_unlock(&stack_lock);
}
