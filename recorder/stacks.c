/* stacks.c: call stacks of allocations: captured cheaply, interned, symbolized when written.
 *
 * Capture (on the allocation path, only while recording):
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
 * Symbolization (msi_stacks_symbolize, at snapshot time, never while allocating): native frames
 * through the modules' ELF symbol tables (symbols.c; dladdr as a fallback) and the C++
 * demangler (function, module, offset); Python frames through the
 * code objects (function, file, line), with the GIL taken; file and line of native frames from
 * DWARF line tables where the module has them (symbols.c, through addr2line), and the functions
 * the compiler inlined there as frames of their own (flagged `inlined`).
 */
#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* From libstdc++ (linked for oom_throw.cc): the C++ ABI's demangler. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define MAX_NATIVE 128 /* PyTorch's dispatcher alone puts ~50 frames between an op and Python */
#define MAX_PYTHON 64

typedef struct stack_rec {
  uint64_t hash;
  uint32_t offset;  /* first word in `words` */
  uint16_t n_native, n_python;
} stack_rec;

static pthread_mutex_t stack_lock = PTHREAD_MUTEX_INITIALIZER;
static stack_rec *recs;       /* recs[0] unused: id 0 is "no stack" */
static uint32_t nrecs, recs_cap;
static uint64_t *words;
static size_t nwords, words_cap;
static uint32_t *table;       /* open addressing: stack ids by hash */
static size_t table_mask;
static __thread int in_capture; /* recursion guard */

/* ---- the Python C API, found at run time ---------------------------------------------- */

typedef struct _object PyObject;
static struct {
  int state; /* 0 unknown, 1 usable, -1 absent */
  int (*IsInitialized)(void);
  int (*GILState_Check)(void);
  void *(*GILState_GetThisThreadState)(void);
  PyObject *(*ThreadState_GetFrame)(void *);
  PyObject *(*Frame_GetBack)(PyObject *);
  PyObject *(*Frame_GetCode)(PyObject *);
  int (*Frame_GetLineNumber)(PyObject *);
  int (*Frame_GetLasti)(PyObject *);         /* 3.11+: the instruction offset, cheap */
  int (*Code_Addr2Line)(PyObject *, int);    /* offset -> line, at snapshot time */
  void (*IncRef)(PyObject *);
  void (*DecRef)(PyObject *);
  int (*GILState_Ensure)(void);
  void (*GILState_Release)(int);
  PyObject *(*GetAttrString)(PyObject *, const char *);
  const char *(*Unicode_AsUTF8)(PyObject *);
  PyObject *(*Unicode_AsEncodedString)(PyObject *, const char *, const char *); /* optional */
  char *(*Bytes_AsString)(PyObject *);                                          /* optional */
  void (*Err_Clear)(void);
} py;

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

/* Appends (code, position) pairs of the calling thread's Python stack, innermost first. The
 * position is the instruction offset where Python has PyFrame_GetLasti (3.11+; the line is
 * computed when the snapshot is written, which spares a scan of the line table per frame), else
 * the line number with bit 63 set. */
#define LINE_FLAG (1ull << 63)
/* Takes the GIL for reading this thread's Python frames, if the thread has any: returns 1 and
 * sets *gil when it took it, 0 when the thread holds it already, -1 when there is nothing to
 * read (no Python, or a thread that never ran Python). A Python thread inside an op that released
 * the GIL (PyTorch's bindings do, around ATen) takes it back, as PyTorch's own recorder does; a
 * thread without a thread state (PyTorch's autograd workers, C++ threads) never waits for it.
 * Lock order: the GIL before stack_lock, everywhere. */
static int python_enter(int *gil, bool may_take) {
  if (MSI_UNLIKELY(py.state == 0)) python_resolve();
  if (py.state < 0 || !py.IsInitialized() || !py.GILState_GetThisThreadState()) return -1;
  if (py.GILState_Check()) return 0;
  if (!may_take) return -1;
  *gil = py.GILState_Ensure();
  return 1;
}

/* GIL held. */
static int python_frames(uint64_t *out, int max) {
  void *ts = py.GILState_GetThisThreadState();
  PyObject *f = ts ? py.ThreadState_GetFrame(ts) : NULL; /* new reference */
  int n = 0;
  while (f && n < max) {
    PyObject *code = py.Frame_GetCode(f); /* new reference; the frame keeps it alive */
    out[2 * n] = (uint64_t)(uintptr_t)code;
    out[2 * n + 1] = py.Frame_GetLasti ? (uint64_t)(uint32_t)py.Frame_GetLasti(f)
                                       : LINE_FLAG | (uint64_t)(uint32_t)py.Frame_GetLineNumber(f);
    py.DecRef(code);
    n++;
    PyObject *back = py.Frame_GetBack(f);
    py.DecRef(f);
    f = back;
  }
  if (f) py.DecRef(f);
  return n;
}

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
    stack_rec *r = &recs[table[i]];
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
    stack_rec *grown = realloc(recs, sizeof *grown * cap);
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
  recs[nrecs] = (stack_rec){h, (uint32_t)nwords, (uint16_t)n_native, (uint16_t)n_python};
  nwords += n;
  for (int k = 0; k < n_python; k++) py.IncRef((PyObject *)(uintptr_t)w[n_native + 2 * k]); /* keep code alive */
  table[i] = nrecs;
  return nrecs++;
}

uint32_t msi_stack_capture(void) { return msi_stack_capture_from(0, true); }

uint32_t msi_stack_capture_from(uint64_t first_pc, bool may_take_gil) {
  int mode = msi_opt.stacks;
  if (mode == MSI_STACKS_NONE || in_capture) return 0;
  in_capture = 1;
  uint64_t w[MAX_NATIVE + 2 * MAX_PYTHON];
  int nn = (mode & MSI_STACKS_NATIVE) ? native_frames(w, MAX_NATIVE, first_pc) : 0;
  int gil = 0, entered = (mode & MSI_STACKS_PYTHON) ? python_enter(&gil, may_take_gil) : -1;
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

/* ---- symbolization ---------------------------------------------------------------------- */

static char *demangle(const char *name) {
  int status = 0;
  char *d = (name && name[0] == '_' && name[1] == 'Z') ? __cxa_demangle(name, NULL, NULL, &status) : NULL;
  if (d && status == 0) return d;
  free(d);
  return strdup(name ? name : "");
}

static bool is_interpreter(const char *name) {
  return name && (strncmp(name, "_PyEval_EvalFrame", 17) == 0 || strncmp(name, "PyEval_EvalCode", 15) == 0);
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

/* Frame table under construction: dedups frames by key (pc, or code and line). */
typedef struct frame_tab {
  msi_frame *frames;
  size_t n, cap;
  uint64_t *keys; /* 2 per frame */
  uint32_t *index;
  size_t mask;
} frame_tab;

static int64_t frame_find_or_add(frame_tab *t, uint64_t k0, uint64_t k1, bool *added) {
  *added = false;
  if ((t->n + 1) * 2 > t->mask + 1) {
    size_t cap = t->mask ? (t->mask + 1) * 2 : 4096;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return -1;
    for (size_t f = 0; f < t->n; f++) {
      size_t i = (t->keys[2 * f] * 0x9E3779B97F4A7C15ull ^ t->keys[2 * f + 1]) & (cap - 1);
      while (idx[i]) i = (i + 1) & (cap - 1);
      idx[i] = (uint32_t)f + 1;
    }
    free(t->index);
    t->index = idx;
    t->mask = cap - 1;
  }
  size_t i = (k0 * 0x9E3779B97F4A7C15ull ^ k1) & t->mask;
  for (; t->index[i]; i = (i + 1) & t->mask) {
    size_t f = t->index[i] - 1;
    if (t->keys[2 * f] == k0 && t->keys[2 * f + 1] == k1) return (int64_t)f;
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    msi_frame *fr = realloc(t->frames, sizeof *fr * cap);
    uint64_t *ks = realloc(t->keys, sizeof *ks * 2 * cap);
    if (fr) t->frames = fr;
    if (ks) t->keys = ks;
    if (!fr || !ks) return -1;
    t->cap = cap;
  }
  t->keys[2 * t->n] = k0;
  t->keys[2 * t->n + 1] = k1;
  memset(&t->frames[t->n], 0, sizeof t->frames[t->n]);
  t->index[i] = (uint32_t)t->n + 1;
  *added = true;
  return (int64_t)t->n++;
}

/* Names a native frame from what msi_symbols_resolve found at pc - 1 (pc is a return address:
 * pc - 1 lies inside the calling function), else from dladdr. */
static void symbolize_native(msi_frame *f, const msi_resolved *r) {
  Dl_info info;
  uint64_t pc = f->pc;
  f->python = false;
  if (r->path) {
    f->module = strdup(r->path);
    f->name = r->name ? demangle(r->name) : NULL;
    f->offset = r->offset + 1;
  }
  if (!f->name && dladdr((void *)(uintptr_t)(pc - 1), &info) && info.dli_fname) {
    free(f->module);
    f->module = strdup(info.dli_fname);
    f->name = info.dli_sname ? demangle(info.dli_sname) : NULL;
    f->offset = info.dli_sname ? pc - (uint64_t)(uintptr_t)info.dli_saddr : pc - (uint64_t)(uintptr_t)info.dli_fbase;
  }
  if (!f->name) {
    char buf[32];
    snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)pc);
    f->name = strdup(buf);
  }
  if (!f->module) f->module = strdup("");
  f->file = strdup("");
}

/* A frame whose strings could not all be allocated. */
static bool frame_incomplete(const msi_frame *f) { return !f->name || !f->file || !f->module; }

/* A code object's string attribute, copied; NULL if it has none. A name that is not valid UTF-8
 * (a file name Python decoded with surrogateescape, a lone surrogate) is copied as the bytes
 * surrogateescape gives back, invalid UTF-8 and all: readers of the snapshot must cope (the
 * analyzer does). Any Python error raised here is cleared. */
static char *code_attr(PyObject *code, const char *attr) {
  PyObject *v = py.GetAttrString(code, attr);
  const char *s = v ? py.Unicode_AsUTF8(v) : NULL;
  char *copy = s ? strdup(s) : NULL;
  if (!s) py.Err_Clear();
  if (v && !s && py.Unicode_AsEncodedString && py.Bytes_AsString) {
    PyObject *b = py.Unicode_AsEncodedString(v, "utf-8", "surrogateescape");
    const char *raw = b ? py.Bytes_AsString(b) : NULL;
    copy = raw ? strdup(raw) : NULL;
    if (b) py.DecRef(b);
    if (!raw) py.Err_Clear();
  }
  if (v) py.DecRef(v);
  return copy;
}

static void symbolize_python(msi_frame *f, uint64_t code, uint64_t position, bool have_gil) {
  f->python = true;
  f->line = -1;
  if (position & LINE_FLAG) f->line = (int64_t)(int32_t)(uint32_t)position;
  else if (have_gil) f->line = py.Code_Addr2Line((PyObject *)(uintptr_t)code, (int)position);
  if (have_gil) {
    f->name = code_attr((PyObject *)(uintptr_t)code, "co_qualname");
    if (!f->name) f->name = code_attr((PyObject *)(uintptr_t)code, "co_name");
    f->file = code_attr((PyObject *)(uintptr_t)code, "co_filename");
  }
  if (!f->name) f->name = strdup("<python code>");
  if (!f->file) f->file = strdup("");
  f->module = strdup("");
}

/* File and line of native frames, and the functions inlined at their pcs (symbols.c, from
 * DWARF) as frames of their own: each stack gets them before the frame they were inlined into,
 * innermost first, as `addr2line -i` lists them. 0, or -1 when out of host memory. */
static int add_inlined(frame_tab *t, msi_lines *lines, const bool *wanted, msi_symbolized *out) {
  size_t nphysical = t->n;
  msi_inline *inl = NULL;
  size_t ninl = msi_symbols_lines_finish(lines, t->frames, nphysical, wanted, &inl);
  uint32_t *first = ninl ? calloc(nphysical, sizeof *first) : NULL; /* frame -> first inlined + 1 */
  uint16_t *count = ninl ? calloc(nphysical, sizeof *count) : NULL;
  int rc = ninl && (!first || !count) ? -1 : 0;
  for (size_t k = 0; k < ninl && rc == 0; k++) {
    size_t f = inl[k].frame;
    bool added;
    int64_t id = frame_find_or_add(t, t->frames[f].pc, UINT64_MAX - 1 - count[f], &added);
    if (id < 0 || !added) { /* a pc is asked once, so its inlined frames are new */
      rc = id < 0 ? -1 : 0;
      continue;
    }
    msi_frame *g = &t->frames[id], *phys = &t->frames[f];
    g->pc = phys->pc;
    g->offset = phys->offset;
    g->line = inl[k].line;
    g->inlined = true;
    g->name = demangle(inl[k].name);
    g->file = strdup(inl[k].file ? inl[k].file : "");
    g->module = strdup(phys->module);
    if (frame_incomplete(g)) rc = -1;
    if (!first[f]) first[f] = (uint32_t)id + 1;
    count[f]++;
  }
  for (size_t k = 0; k < ninl; k++) free(inl[k].name), free(inl[k].file);
  free(inl);
  for (uint32_t id = 1; id < out->nstacks && rc == 0 && first; id++) {
    uint32_t depth = out->stacks[id].depth, grown = depth;
    for (uint32_t p = 0; p < depth; p++)
      if ((size_t)out->stacks[id].frames[p] < nphysical) grown += count[out->stacks[id].frames[p]];
    if (grown == depth) continue;
    int64_t *g = malloc(sizeof *g * grown);
    if (!g) {
      rc = -1;
      break;
    }
    uint32_t m = 0;
    for (uint32_t p = 0; p < depth; p++) {
      int64_t f = out->stacks[id].frames[p];
      for (uint16_t c = 0; (size_t)f < nphysical && c < count[f]; c++) g[m++] = first[f] - 1 + c;
      g[m++] = f;
    }
    free(out->stacks[id].frames);
    out->stacks[id].frames = g;
    out->stacks[id].depth = m;
  }
  free(first);
  free(count);
  return rc;
}

/* What msi_stacks_symbolize leaves under way for msi_stacks_symbolize_finish. */
struct msi_symbolize_pending {
  frame_tab tab;
  msi_symbols *syms;
  msi_lines *lines;
  bool *wanted; /* by frame: some stack keeps it */
};

int msi_stacks_symbolize(msi_symbolized *out) {
  memset(out, 0, sizeof *out);
  struct msi_symbolize_pending *pending = NULL;
  frame_tab t = {0};
  /* 1. Copy the interned stacks; recording goes on meanwhile (code objects stay alive: every
   *    interned one holds a reference). */
  pthread_mutex_lock(&stack_lock);
  uint32_t n = nrecs ? nrecs : 1;
  stack_rec *r_copy = malloc(sizeof *r_copy * n);
  uint64_t *w_copy = malloc(sizeof *w_copy * (nwords ? nwords : 1));
  if (r_copy && w_copy) {
    if (nrecs) memcpy(r_copy, recs, sizeof *r_copy * nrecs);
    if (nwords) memcpy(w_copy, words, sizeof *w_copy * nwords);
  }
  uint32_t count = nrecs;
  pthread_mutex_unlock(&stack_lock);
  msi_symbols *syms = msi_symbols_open();
  if (!r_copy || !w_copy || !syms) goto oom;
  out->stacks = calloc(n, sizeof *out->stacks);
  if (!out->stacks) goto oom;
  out->nstacks = n;
  /* 2. Every stack's frames entered in the frame table (native ones by pc, Python ones by code
   *    and line), with no lock held; the stack holds its native then its Python frame ids. */
  for (uint32_t id = 1; id < count; id++) {
    stack_rec *r = &r_copy[id];
    const uint64_t *w = &w_copy[r->offset];
    size_t total = (size_t)r->n_native + r->n_python;
    int64_t *ids = malloc(sizeof *ids * (total ? total : 1));
    if (!ids) goto oom;
    out->stacks[id].frames = ids;
    out->stacks[id].depth = (uint32_t)total;
    for (int k = 0; k < r->n_native; k++) {
      bool added;
      int64_t f = frame_find_or_add(&t, w[k], UINT64_MAX, &added);
      if (f < 0) goto oom;
      if (added) t.frames[f].pc = w[k]; /* named below, in one batch */
      ids[k] = f;
    }
    for (int k = 0; k < r->n_python; k++) {
      bool added;
      int64_t f = frame_find_or_add(&t, w[r->n_native + 2 * k], w[r->n_native + 2 * k + 1], &added);
      if (f < 0) goto oom;
      if (added) t.frames[f].python = true; /* named in step 3 */
      ids[r->n_native + k] = f;
    }
  }
  /* Native frames named in one pass over each module's symbol table. */
  {
    size_t nnative = 0;
    for (size_t f = 0; f < t.n; f++) nnative += !t.frames[f].python;
    uint64_t *pcs = malloc(sizeof *pcs * (nnative ? nnative : 1));
    msi_resolved *res = malloc(sizeof *res * (nnative ? nnative : 1));
    size_t *which = malloc(sizeof *which * (nnative ? nnative : 1));
    bool failed = !pcs || !res || !which;
    size_t k = 0;
    for (size_t f = 0; f < t.n && !failed; f++)
      if (!t.frames[f].python) {
        which[k] = f;
        pcs[k++] = t.frames[f].pc - 1;
      }
    failed = failed || msi_symbols_resolve(syms, pcs, k, res) != 0;
    for (size_t i = 0; i < k && !failed; i++) {
      symbolize_native(&t.frames[which[i]], &res[i]);
      failed = frame_incomplete(&t.frames[which[i]]);
    }
    free(pcs);
    free(res);
    free(which);
    if (failed) goto oom;
  }
  /* Stacks merged: native frames down to the first interpreter frame, the Python frames there,
   * then the native frames after the last interpreter frame. */
  for (uint32_t id = 1; id < count; id++) {
    stack_rec *r = &r_copy[id];
    int64_t *ids = out->stacks[id].frames, python_ids[MAX_PYTHON];
    int first = -1, last = -1;
    for (int k = 0; k < r->n_native; k++)
      if (is_interpreter(t.frames[ids[k]].name)) {
        if (first < 0) first = k;
        last = k;
      }
    if (!r->n_python || first < 0) continue; /* native then Python frames, as entered */
    memcpy(python_ids, ids + r->n_native, sizeof *python_ids * r->n_python);
    int64_t *tail = ids + last + 1; /* native frames after the last interpreter frame */
    size_t ntail = (size_t)(r->n_native - last - 1), m = (size_t)first;
    memmove(ids + first + r->n_python, tail, sizeof *ids * ntail);
    memcpy(ids + m, python_ids, sizeof *python_ids * r->n_python);
    out->stacks[id].depth = (uint32_t)(m + r->n_python + ntail);
  }
  /* 3. Python frames, with the GIL (only for this). */
  bool have_gil = false;
  int gil = 0;
  if (MSI_UNLIKELY(py.state == 0)) python_resolve();
  if (py.state == 1 && py.IsInitialized()) {
    gil = py.GILState_Ensure();
    have_gil = true;
  }
  bool failed = false;
  for (size_t f = 0; f < t.n; f++) {
    if (!t.frames[f].python) continue;
    symbolize_python(&t.frames[f], t.keys[2 * f], t.keys[2 * f + 1], have_gil);
    failed |= frame_incomplete(&t.frames[f]);
  }
  if (have_gil) py.GILState_Release(gil);
  if (failed) goto oom;
  /* 4. File and line from DWARF: only for the frames that some stack keeps (the interpreter's
   *    frames between its Python frames are left out of the stacks: nobody reads their lines),
   *    in addr2line processes that run while the caller writes its other tables. */
  pending = calloc(1, sizeof *pending);
  bool *wanted = pending ? calloc(t.n ? t.n : 1, sizeof *wanted) : NULL;
  if (!wanted) goto oom;
  for (uint32_t id = 1; id < count; id++)
    for (uint32_t p = 0; p < out->stacks[id].depth; p++) wanted[out->stacks[id].frames[p]] = true;
  pending->wanted = wanted;
  pending->lines = msi_symbols_lines_start(syms, t.frames, t.n, wanted);
  pending->syms = syms;
  pending->tab = t;
  out->pending = pending;
  out->frames = t.frames; /* the frames belong to `out` from here on, also to free them */
  out->nframes = t.n;
  free(r_copy);
  free(w_copy);
  return MEMSNAP_OK;
oom:
  free(pending);
  msi_symbols_close(syms);
  free(r_copy);
  free(w_copy);
  out->frames = t.frames;
  out->nframes = t.n;
  free(t.keys);
  free(t.index);
  msi_symbolized_free(out);
  msi_error("snapshot: out of host memory while symbolizing stacks");
  return MEMSNAP_ENOMEM;
}

/* Ends the work msi_stacks_symbolize left under way; with `complete`, adds what the line
 * lookups found (0, or -1 when out of host memory). */
static int end_pending(msi_symbolized *out, bool complete) {
  struct msi_symbolize_pending *p = out->pending;
  if (!p) return 0;
  out->pending = NULL;
  int rc = 0;
  if (complete) rc = add_inlined(&p->tab, p->lines, p->wanted, out);
  else msi_symbols_lines_cancel(p->lines);
  out->frames = p->tab.frames; /* add_inlined may have grown the table */
  out->nframes = p->tab.n;
  msi_symbols_close(p->syms);
  free(p->tab.keys);
  free(p->tab.index);
  free(p->wanted);
  free(p);
  return rc;
}

int msi_stacks_symbolize_finish(msi_symbolized *out) {
  if (end_pending(out, true) == 0) return MEMSNAP_OK;
  msi_symbolized_free(out);
  msi_error("snapshot: out of host memory while symbolizing stacks");
  return MEMSNAP_ENOMEM;
}

void msi_symbolized_free(msi_symbolized *s) {
  end_pending(s, false);
  for (size_t i = 0; i < s->nframes; i++) {
    free(s->frames[i].name);
    free(s->frames[i].file);
    free(s->frames[i].module);
  }
  for (uint32_t i = 0; i < s->nstacks && s->stacks; i++) free(s->stacks[i].frames);
  free(s->frames);
  free(s->stacks);
  memset(s, 0, sizeof *s);
}

void msi_stacks_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) pthread_mutex_lock(&stack_lock);
  else pthread_mutex_unlock(&stack_lock);
  if (phase == MSI_FORK_CHILD) in_capture = 0;
}
