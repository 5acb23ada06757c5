/* stacks.c: call stacks of allocations, captured cheaply and interned (the hot path).
 *
 * Capture (on the allocation path, only while recording; no I/O, and no allocation but when a
 * new stack is interned):
 *   - native: program counters from libunwind's unw_backtrace, frames inside libmemsnap itself
 *     dropped;
 *   - python: the interpreter's frames of the calling thread as (code object, instruction
 *     offset) pairs (lines are computed at snapshot time), read through the C API found with
 *     dlsym (libmemsnap does not link libpython; in a process without Python this finds
 *     nothing). A Python thread that released the GIL around an op takes it back for the read,
 *     as PyTorch's recorder does; a thread without a Python thread state (PyTorch's autograd
 *     threads) gets native frames only.
 * MEMSNAP_STACKS chooses none, native, python or all (both).
 *
 * Interning: a stack is the word array [pcs..., code, offset, code, offset, ...]; equal arrays get
 * the same id, so a loop that allocates from one place stores its stack once. Ids start at 1
 * (0 means "no stack"). Code objects of interned stacks are kept alive (one reference each), so
 * an address never names two code objects.
 *
 * Names come later, when a snapshot is written (symbolize.c, from msi_stacks_copy's copy of the
 * interned stacks and the C API table msi_python_api gives), never while allocating.
 */
#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_NATIVE 128 /* PyTorch's dispatcher alone puts ~50 frames between an op and Python */
#define MAX_PYTHON MSI_STACK_MAX_PYTHON

static pthread_mutex_t stack_lock = PTHREAD_MUTEX_INITIALIZER;
static msi_stack_rec *recs;   /* recs[0] unused: id 0 is "no stack" */
static uint32_t nrecs, recs_cap;
static uint64_t *words;
static size_t nwords, words_cap;
static uint32_t *table;       /* open addressing: stack ids by hash */
static size_t table_mask;
static __thread int in_capture; /* recursion guard */

/* ---- the Python C API, found at run time ------------------------------------------------ */

static msi_python py;

static void python_resolve(void) {
#define SYM(field, name) *(void **)&py.field = dlsym(RTLD_DEFAULT, name)
  SYM(IsInitialized, "Py_IsInitialized");
  SYM(GILState_Check, "PyGILState_Check");
  SYM(GILState_GetThisThreadState, "PyGILState_GetThisThreadState");
  SYM(ThreadState_GetFrame, "PyThreadState_GetFrame");
  SYM(Frame_GetBack, "PyFrame_GetBack");
  SYM(Frame_GetCode, "PyFrame_GetCode");
  SYM(Frame_GetLineNumber, "PyFrame_GetLineNumber");
  SYM(Frame_GetLasti, "PyFrame_GetLasti");
  SYM(Code_Addr2Line, "PyCode_Addr2Line");
  if (!py.Code_Addr2Line) py.Frame_GetLasti = NULL;
  SYM(IncRef, "Py_IncRef");
  SYM(DecRef, "Py_DecRef");
  SYM(GILState_Ensure, "PyGILState_Ensure");
  SYM(GILState_Release, "PyGILState_Release");
  SYM(GetAttrString, "PyObject_GetAttrString");
  SYM(Unicode_AsUTF8, "PyUnicode_AsUTF8");
  SYM(Unicode_AsEncodedString, "PyUnicode_AsEncodedString");
  SYM(Bytes_AsString, "PyBytes_AsString");
  SYM(Err_Clear, "PyErr_Clear");
#undef SYM
  /* PyThreadState_GetFrame and friends exist from Python 3.9 on. */
  bool ok = py.IsInitialized && py.GILState_Check && py.GILState_GetThisThreadState && py.ThreadState_GetFrame &&
            py.Frame_GetBack && py.Frame_GetCode && py.Frame_GetLineNumber && py.IncRef && py.DecRef &&
            py.GILState_Ensure && py.GILState_Release && py.GetAttrString && py.Unicode_AsUTF8 && py.Err_Clear;
  py.state = ok ? 1 : -1;
}

const msi_python *msi_python_api(void) {
  if (MSI_UNLIKELY(py.state == 0)) python_resolve();
  return &py;
}

/* Takes the GIL for reading this thread's Python frames, if the thread has any: returns 1 and
 * sets *gil when it took it, 0 when the thread holds it already, -1 when there is nothing to
 * read (no Python, or a thread that never ran Python), PYTHON_ELSEWHERE when the thread released
 * it and may not take it back (its frames are read by gil_helper.c's thread). A Python thread
 * inside an op that released the GIL (PyTorch's bindings do, around ATen) takes it back, as
 * PyTorch's own recorder does; a thread without a thread state (PyTorch's autograd workers, C++
 * threads) never waits for it. Lock order: the GIL before stack_lock, everywhere. */
#define PYTHON_ELSEWHERE (-2)
static int python_enter(int *gil, bool may_take) {
  if (MSI_UNLIKELY(py.state == 0)) python_resolve();
  if (py.state < 0 || !py.IsInitialized() || !py.GILState_GetThisThreadState()) return -1;
  if (py.GILState_Check()) return 0;
  if (!may_take) return PYTHON_ELSEWHERE;
  *gil = py.GILState_Ensure();
  return 1;
}

/* Appends (code, position) pairs of thread state ts's Python stack, innermost first. The
 * position is the instruction offset where Python has PyFrame_GetLasti (3.11+; the line is
 * computed when the snapshot is written, which spares a scan of the line table per frame), else
 * the line number with MSI_PY_LINE_FLAG (bit 63) set. GIL held (by the thread of ts, or by
 * gil_helper.c's while the thread of ts waits). */
static int python_frames_of(void *ts, uint64_t *out, int max) {
  PyObject *f = ts ? py.ThreadState_GetFrame(ts) : NULL; /* new reference */
  int n = 0;
  while (f && n < max) {
    PyObject *code = py.Frame_GetCode(f); /* new reference; the frame keeps it alive */
    out[2 * n] = (uint64_t)(uintptr_t)code;
    out[2 * n + 1] = py.Frame_GetLasti ? (uint64_t)(uint32_t)py.Frame_GetLasti(f)
                                       : MSI_PY_LINE_FLAG | (uint64_t)(uint32_t)py.Frame_GetLineNumber(f);
    py.DecRef(code);
    n++;
    PyObject *back = py.Frame_GetBack(f);
    py.DecRef(f);
    f = back;
  }
  if (f) py.DecRef(f);
  return n;
}

/* The calling thread's frames, as python_frames_of. */
static int python_frames(uint64_t *out, int max) { return python_frames_of(py.GILState_GetThisThreadState(), out, max); }

/* ---- native frames ---------------------------------------------------------------------- */

/* libmemsnap's code, whose frames are dropped: found once when the library is loaded (a
 * constructor), so no capture pays for a check and no two threads race to set them. */
static uintptr_t self_start, self_end;

static int find_self(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t probe = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (probe >= lo && probe < hi) {
      self_start = lo;
      self_end = hi;
      return 1;
    }
  }
  return 0;
}

__attribute__((constructor)) static void find_self_at_load(void) {
  dl_iterate_phdr(find_self, (void *)(uintptr_t)&find_self_at_load);
}

#ifdef __SANITIZE_THREAD__
/* libunwind frees its per-thread cache in a thread-exit destructor that locks a mutex after
 * ThreadSanitizer has retired the thread, which crashes TSan (make sanitize): under TSan,
 * glibc's backtrace() (libgcc's unwinder) gives the same frames, more slowly. */
#include <execinfo.h>
#define unw_backtrace backtrace
#endif

/* The calling thread's return addresses outside this library; from `first_pc` on when it is
 * among the next few (the interposer's own frames are left out: the stack starts in the code
 * that called cudaMalloc). */
static int native_frames(uint64_t *out, int max, uint64_t first_pc) {
  void *pcs[MAX_NATIVE + 8];
  int got = unw_backtrace(pcs, MAX_NATIVE + 8), n = 0;
  int i = 0;
  while (i < got && (uintptr_t)pcs[i] >= self_start && (uintptr_t)pcs[i] < self_end) i++;
  for (int k = i; first_pc && k < got && k < i + 8; k++)
    if ((uint64_t)(uintptr_t)pcs[k] == first_pc) {
      i = k;
      break;
    }
  for (; i < got && n < max; i++) out[n++] = (uint64_t)(uintptr_t)pcs[i];
  return n;
}

/* ---- interning -------------------------------------------------------------------------- */

static uint64_t hash_words(const uint64_t *w, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ n;
  for (size_t i = 0; i < n; i++) {
    h ^= w[i];
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

static int grow_table(void) {
  size_t cap = table_mask ? (table_mask + 1) * 2 : 1024;
  uint32_t *t = calloc(cap, sizeof *t);
  if (!t) return -1;
  for (uint32_t id = 1; id < nrecs; id++) {
    size_t i = recs[id].hash & (cap - 1);
    while (t[i]) i = (i + 1) & (cap - 1);
    t[i] = id;
  }
  free(table);
  table = t;
  table_mask = cap - 1;
  return 0;
}

/* Returns the id of the stack, adding it if new; 0 if out of host memory. stack_lock held. */
static uint32_t intern(const uint64_t *w, int n_native, int n_python) {
  size_t n = (size_t)n_native + 2 * (size_t)n_python;
  uint64_t h = hash_words(w, n) ^ ((uint64_t)n_native << 48);
  if (table_mask == 0 && grow_table() != 0) return 0;
  size_t i = h & table_mask;
  for (; table[i]; i = (i + 1) & table_mask) {
    msi_stack_rec *r = &recs[table[i]];
    if (r->hash == h && r->n_native == n_native && r->n_python == n_python &&
        memcmp(&words[r->offset], w, n * sizeof *w) == 0)
      return table[i];
  }
  if ((size_t)(nrecs + 1) * 2 > table_mask + 1) {
    if (grow_table() != 0) return 0;
    return intern(w, n_native, n_python);
  }
  if (nrecs == 0) nrecs = 1; /* id 0 stays unused */
  if (nrecs >= recs_cap) {
    uint32_t cap = recs_cap ? recs_cap * 2 : 1024;
    msi_stack_rec *grown = realloc(recs, sizeof *grown * cap);
    if (!grown) return 0;
    recs = grown;
    recs_cap = cap;
  }
  if (nwords + n > words_cap) {
    size_t cap = words_cap ? words_cap * 2 : 65536;
    while (cap < nwords + n) cap *= 2;
    uint64_t *grown = realloc(words, sizeof *grown * cap);
    if (!grown) return 0;
    words = grown;
    words_cap = cap;
  }
  memcpy(&words[nwords], w, n * sizeof *w);
  recs[nrecs] = (msi_stack_rec){h, (uint32_t)nwords, (uint16_t)n_native, (uint16_t)n_python};
  nwords += n;
  for (int k = 0; k < n_python; k++) py.IncRef((PyObject *)(uintptr_t)w[n_native + 2 * k]); /* keep code alive */
  table[i] = nrecs;
  return nrecs++;
}

/* ---- Python frames of a thread that released the GIL, read by gil_helper.c's thread ------ */

typedef struct elsewhere {
  void *ts;    /* the waiting thread's state */
  uint64_t *w; /* its native words, then room for MAX_PYTHON pairs */
  int nn;
  uint32_t id; /* out */
} elsewhere;

/* On the helper thread, GIL held, while the thread of e->ts waits (runs no Python). */
static void intern_elsewhere(void *arg) {
  elsewhere *e = arg;
  int np = python_frames_of(e->ts, e->w + e->nn, MAX_PYTHON);
  if (e->nn + np == 0) return;
  pthread_mutex_lock(&stack_lock);
  e->id = intern(e->w, e->nn, np);
  pthread_mutex_unlock(&stack_lock);
}

/* The stack of the calling thread, which released the GIL: its native words w[0..nn) and its
 * Python frames read by the helper; native frames only when the GIL cannot be had in time. */
static uint32_t capture_elsewhere(uint64_t *w, int nn) {
  elsewhere e = {py.GILState_GetThisThreadState(), w, nn, 0};
  if (msi_gil_helper_run(intern_elsewhere, &e) == 0) return e.id;
  if (nn == 0) return 0;
  pthread_mutex_lock(&stack_lock);
  uint32_t id = intern(w, nn, 0);
  pthread_mutex_unlock(&stack_lock);
  return id;
}

uint32_t msi_stack_capture(void) { return msi_stack_capture_from(0, true); }

uint32_t msi_stack_capture_from(uint64_t first_pc, bool may_take_gil) {
  int mode = msi_opt.stacks;
  if (mode == MSI_STACKS_NONE || in_capture) return 0;
  in_capture = 1;
  uint64_t w[MAX_NATIVE + 2 * MAX_PYTHON];
  int nn = (mode & MSI_STACKS_NATIVE) ? native_frames(w, MAX_NATIVE, first_pc) : 0;
  int gil = 0, entered = (mode & MSI_STACKS_PYTHON) ? python_enter(&gil, may_take_gil) : -1;
  if (entered == PYTHON_ELSEWHERE) {
    uint32_t id = capture_elsewhere(w, nn);
    in_capture = 0;
    return id;
  }
  int np = entered >= 0 ? python_frames(w + nn, MAX_PYTHON) : 0;
  uint32_t id = 0;
  if (nn + np > 0) { /* with the GIL still held: intern takes references to new code objects */
    pthread_mutex_lock(&stack_lock);
    id = intern(w, nn, np);
    pthread_mutex_unlock(&stack_lock);
  }
  if (entered == 1) py.GILState_Release(gil);
  in_capture = 0;
  return id;
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
  free(recs);
  free(words);
  free(table);
  recs = NULL;
  words = NULL;
  table = NULL;
  nrecs = recs_cap = 0;
  nwords = words_cap = table_mask = 0;
  pthread_mutex_unlock(&stack_lock);
}

void msi_stacks_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) pthread_mutex_lock(&stack_lock);
  else pthread_mutex_unlock(&stack_lock);
  if (phase == MSI_FORK_CHILD) in_capture = 0;
}
