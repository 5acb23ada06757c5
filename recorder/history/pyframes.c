/* pyframes.c: the Python interpreter found at run time: its C API, and the calling thread's frames.
 *
 * libmemsnap does not link libpython: the C API is looked up with dlsym (msi_python_api; in a
 * process without Python it finds nothing). A stack's Python frames are (code object, position)
 * pairs, innermost first: the position is the instruction offset where Python has
 * PyFrame_GetLasti (3.11+; lines are computed when a snapshot is written), else the line with
 * MSI_PY_LINE_FLAG set. Two readers give them:
 *   - msi_pyframes_api walks the frames with the C API (PyThreadState_GetFrame, PyFrame_GetBack,
 *     PyFrame_GetCode, PyFrame_GetLasti), with the GIL held. Since 3.11 that walk makes a frame
 *     object for every frame that has none yet and costs a handful of calls a frame;
 *   - msi_pyframes_read reads the same from the interpreter's own frame records (the
 *     _PyInterpreterFrame chain of the thread state, as the C API does inside), for the layouts
 *     of 3.11, 3.12 and 3.13: a few loads a frame, nothing allocated, no call. It reads only
 *     the calling thread's own frames, which no other thread changes while this one is inside
 *     an allocation, so the GIL is not needed. The layout is checked against the C API once per
 *     process (the first read made with the GIL held compares the two readers); when they
 *     differ, or on other versions, or on a debug or free-threaded build, it returns -1 and
 *     stacks.c uses the C API.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- the C API -------------------------------------------------------------------------- */

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

int msi_pyframes_api(void *tstate, uint64_t *out, int max) {
  PyObject *f = tstate ? py.ThreadState_GetFrame(tstate) : NULL; /* new reference */
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

/* ---- the interpreter's frame records ---------------------------------------------------- */

/* Where the fields the C API reads lie, by minor version (CPython's Include/internal/
 * pycore_frame.h, cpython/pystate.h, cpython/code.h; 64-bit release builds). A
 * process trusts them only after its first comparison with the C API (msi_pyframes_read);
 * tests/recorder/test_pystacks.py compares every capture on each CPython installed. */
typedef struct layout {
  int minor;
  int ts_frame;      /* PyThreadState: cframe (3.11, 3.12) or current_frame (3.13) */
  int cframe_frame;  /* _PyCFrame: current_frame; -1 when ts_frame is the frame itself */
  int f_code;        /* _PyInterpreterFrame: f_code (f_executable in 3.13) */
  int f_previous;
  int f_instr;       /* prev_instr (3.11, 3.12), instr_ptr (3.13) */
  int f_owner;       /* char */
  int co_code;       /* PyCodeObject: co_code_adaptive, the code units */
  int co_firsttraceable; /* int */
} layout;

static const layout layouts[] = {
    {11, 56, 8, 32, 48, 56, 69, 184, 168},
    {12, 56, 0, 0, 8, 56, 70, 192, 176},
    {13, 72, -1, 0, 8, 56, 70, 200, 184},
};
enum { OWNED_BY_GENERATOR = 1, OWNED_BY_CSTACK = 3 };

/* 0 not looked at, 1 usable but not yet compared with the C API, 2 usable, -1 not usable. */
static atomic_int state;
static const layout *lay;

static void choose_layout(void) {
  const msi_python *api = msi_python_api();
  const unsigned long *version = dlsym(RTLD_DEFAULT, "Py_Version"); /* 3.11+ */
  int s = -1;
  /* Debug builds (_Py_NegativeRefcount) and free-threaded ones (_Py_DecRefShared) lay objects
   * out otherwise. */
  if (api->state == 1 && api->Frame_GetLasti && version && !dlsym(RTLD_DEFAULT, "_Py_NegativeRefcount") &&
      !dlsym(RTLD_DEFAULT, "_Py_DecRefShared") && (*version >> 24) == 3) {
    int minor = (int)((*version >> 16) & 0xff);
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
      if (layouts[i].minor == minor) {
        lay = &layouts[i];
        s = 1;
      }
  }
  atomic_store_explicit(&state, s, memory_order_release);
}

#define FIELD(p, off, type) (*(type *)((char *)(p) + (off)))

/* The reading itself: what msi_pyframes_api gives, from the records. The layout's offsets are
 * copied into locals first: stores into `out` could otherwise alias them. */
static int read_records(void *tstate, uint64_t *out, int max) {
  const int f_previous = lay->f_previous, f_owner = lay->f_owner, f_code = lay->f_code, f_instr = lay->f_instr,
            co_code = lay->co_code, co_first = lay->co_firsttraceable;
  void *f = FIELD(tstate, lay->ts_frame, void *);
  if (lay->cframe_frame >= 0) f = f ? FIELD(f, lay->cframe_frame, void *) : NULL;
  int n = 0;
  for (; f && n < max; f = FIELD(f, f_previous, void *)) {
    char owner = FIELD(f, f_owner, char);
    if (owner == OWNED_BY_CSTACK) continue; /* the entry frame of a C call into Python */
    char *code = FIELD(f, f_code, char *);
    /* Bytes from _PyCode_CODE(code): the code unit's index (_PyInterpreterFrame_LASTI) times
     * its size, PyFrame_GetLasti's answer (-1 below 0). */
    ptrdiff_t at = FIELD(f, f_instr, char *) - (code + co_code);
    if (owner != OWNED_BY_GENERATOR && at < 2 * (ptrdiff_t)FIELD(code, co_first, int))
      continue; /* incomplete: not started yet, as _PyFrame_IsIncomplete says */
    out[2 * n] = (uint64_t)(uintptr_t)code;
    out[2 * n + 1] = at < 0 ? 0xffffffffu : (uint64_t)(uint32_t)at;
    n++;
  }
  return n;
}

int msi_pyframes_reader(void) { return atomic_load_explicit(&state, memory_order_relaxed); }


int msi_pyframes_read(void *tstate, uint64_t *out, int max, bool gil_held) {
  int s = atomic_load_explicit(&state, memory_order_acquire);
  if (MSI_LIKELY(s == 2)) {
    return read_records(tstate, out, max);
  }
  if (s == 0) {
    choose_layout();
    s = atomic_load_explicit(&state, memory_order_acquire);
  }
  if (s != 1 || !gil_held) return -1;
  /* Once, with the GIL held: the records must give what the C API gives. */
  uint64_t fast[2 * MSI_STACK_MAX_PYTHON];
  int n = msi_pyframes_api(tstate, out, max), m = read_records(tstate, fast, max);
  bool same = n == m && memcmp(out, fast, sizeof *out * 2 * (size_t)n) == 0;
  if (n > 0 || !same) atomic_store_explicit(&state, same ? 2 : -1, memory_order_release);
  return n;
}

/* ---- names, with the GIL held ---------------------------------------------------------- */

/* A code object's string attribute, copied; NULL if it has none. A name that is not valid UTF-8
 * (a file name Python decoded with surrogateescape, a lone surrogate) is copied as the bytes
 * surrogateescape gives back, invalid UTF-8 and all: readers of the snapshot must cope (the
 * analyzer does). Any Python error raised here is cleared. */
static char *code_attr(const msi_python *api, PyObject *code, const char *attr) {
  PyObject *v = api->GetAttrString(code, attr);
  const char *s = v ? api->Unicode_AsUTF8(v) : NULL;
  char *copy = s ? strdup(s) : NULL;
  if (!s) api->Err_Clear();
  if (v && !s && api->Unicode_AsEncodedString && api->Bytes_AsString) {
    PyObject *b = api->Unicode_AsEncodedString(v, "utf-8", "surrogateescape");
    const char *raw = b ? api->Bytes_AsString(b) : NULL;
    copy = raw ? strdup(raw) : NULL;
    if (b) api->DecRef(b);
    if (!raw) api->Err_Clear();
  }
  if (v) api->DecRef(v);
  return copy;
}

int msi_pyframes_name(uint64_t code, uint64_t pos, char **name, char **file, int64_t *line) {
  const msi_python *api = msi_python_api();
  if (api->state != 1) return -1;
  PyObject *c = (PyObject *)(uintptr_t)code;
  if (pos & MSI_PY_LINE_FLAG) *line = (int64_t)(int32_t)(uint32_t)pos;
  else *line = api->Code_Addr2Line(c, (int)pos);
  *name = code_attr(api, c, "co_qualname");
  if (!*name) *name = code_attr(api, c, "co_name");
  *file = code_attr(api, c, "co_filename");
  return 0;
}
