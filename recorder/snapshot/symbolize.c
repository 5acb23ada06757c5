/* symbolize.c: the frames of the interned stacks named when a snapshot is written (the cold
 * path: never while allocating; stacks.c captures and interns).
 *
 * msi_stacks_symbolize works on a copy of the interned stacks (msi_stacks_copy), so recording
 * goes on meanwhile:
 *   1. every stack's frames entered in a frame table, each distinct frame once (native ones by
 *      pc, Python ones by code object and position);
 *   2. native frames named through the modules' ELF symbol tables (symbols.c; dladdr as a
 *      fallback) and the C++ demangler (function, module, offset); the Python frames put in
 *      place of the interpreter's native frames;
 *   3. Python frames named through their code objects (function, file, line), with the GIL
 *      taken, through the C API table stacks.c found (msi_python_api);
 *   4. file and line of native frames from DWARF line tables where the module has them
 *      (symbols.c, through addr2line), started here and read by msi_stacks_symbolize_finish
 *      while the snapshot's other tables are written; the functions the compiler inlined there
 *      become frames of their own (flagged `inlined`).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* From libstdc++ (linked for oom_throw.cc): the C++ ABI's demangler. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

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
static void symbolize_native(msi_frame *f, const msi_resolved *r, bool foreign) {
  Dl_info info;
  uint64_t pc = f->pc;
  f->python = false;
  if (r->path) {
    f->module = strdup(r->path);
    f->name = r->name ? demangle(r->name) : NULL;
    f->offset = r->offset + 1;
  }
  if (!f->name && !foreign && dladdr((void *)(uintptr_t)(pc - 1), &info) && info.dli_fname) {
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

static void symbolize_python(msi_frame *f, uint64_t code, uint64_t position, bool have_gil) {
  f->python = true;
  f->line = -1;
  if (position & MSI_PY_LINE_FLAG) f->line = (int64_t)(int32_t)(uint32_t)position;
  if (have_gil) msi_pyframes_name(code, position, &f->name, &f->file, &f->line);
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

/* 1. Every stack's frames entered in the frame table (native ones by pc, Python ones by code
 *    and position), with no lock held; each stack of `out` holds its native then its Python
 *    frame ids. 0, or -1 when out of host memory. */
static int enter_frames(frame_tab *t, const msi_stack_rec *recs, const uint64_t *words, uint32_t count,
                        msi_symbolized *out) {
  for (uint32_t id = 1; id < count; id++) {
    const msi_stack_rec *r = &recs[id];
    const uint64_t *w = &words[r->offset];
    size_t total = (size_t)r->n_native + r->n_python;
    int64_t *ids = malloc(sizeof *ids * (total ? total : 1));
    if (!ids) return -1;
    out->stacks[id].frames = ids;
    out->stacks[id].depth = (uint32_t)total;
    for (int k = 0; k < r->n_native; k++) {
      bool added;
      int64_t f = frame_find_or_add(t, w[k], UINT64_MAX, &added);
      if (f < 0) return -1;
      if (added) t->frames[f].pc = w[k]; /* named in step 2, in one batch */
      ids[k] = f;
    }
    for (int k = 0; k < r->n_python; k++) {
      bool added;
      int64_t f = frame_find_or_add(t, w[r->n_native + 2 * k], w[r->n_native + 2 * k + 1], &added);
      if (f < 0) return -1;
      if (added) t->frames[f].python = true; /* named in step 3 */
      ids[r->n_native + k] = f;
    }
  }
  return 0;
}

/* 2. Native frames named in one pass over each module's symbol table. 0, or -1 when out of host
 *    memory. */
static int name_native(frame_tab *t, msi_symbols *syms, bool foreign) {
  size_t nnative = 0;
  for (size_t f = 0; f < t->n; f++) nnative += !t->frames[f].python;
  uint64_t *pcs = malloc(sizeof *pcs * (nnative ? nnative : 1));
  msi_resolved *res = malloc(sizeof *res * (nnative ? nnative : 1));
  size_t *which = malloc(sizeof *which * (nnative ? nnative : 1));
  bool failed = !pcs || !res || !which;
  size_t k = 0;
  for (size_t f = 0; f < t->n && !failed; f++)
    if (!t->frames[f].python) {
      which[k] = f;
      pcs[k++] = t->frames[f].pc - 1;
    }
  failed = failed || msi_symbols_resolve(syms, pcs, k, res) != 0;
  for (size_t i = 0; i < k && !failed; i++) {
    symbolize_native(&t->frames[which[i]], &res[i], foreign);
    failed = frame_incomplete(&t->frames[which[i]]);
  }
  free(pcs);
  free(res);
  free(which);
  return failed ? -1 : 0;
}

/* Stacks merged: native frames down to the first interpreter frame, the Python frames there,
 * then the native frames after the last interpreter frame. */
static void merge_python(const frame_tab *t, const msi_stack_rec *recs, uint32_t count, msi_symbolized *out) {
  for (uint32_t id = 1; id < count; id++) {
    const msi_stack_rec *r = &recs[id];
    int64_t *ids = out->stacks[id].frames, python_ids[MSI_STACK_MAX_PYTHON];
    int first = -1, last = -1;
    for (int k = 0; k < r->n_native; k++)
      if (is_interpreter(t->frames[ids[k]].name)) {
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
}

/* 3. Python frames, with the GIL (only for this), or from `src`'s names (another process's).
 *    0, or -1 when out of host memory. */
static int name_python(frame_tab *t, const msi_symbolize_source *src) {
  if (src && src->python_name) {
    bool failed = false;
    for (size_t f = 0; f < t->n; f++) {
      if (!t->frames[f].python) continue;
      msi_frame *fr = &t->frames[f];
      fr->line = -1;
      src->python_name(src->arg, t->keys[2 * f], t->keys[2 * f + 1], fr);
      if (!fr->name) fr->name = strdup("<python code>");
      if (!fr->file) fr->file = strdup("");
      fr->module = strdup("");
      failed |= frame_incomplete(fr);
    }
    return failed ? -1 : 0;
  }
  const msi_python *py = msi_python_api();
  bool have_gil = false;
  int gil = 0;
  if (py->state == 1 && py->IsInitialized()) {
    gil = py->GILState_Ensure();
    have_gil = true;
  }
  bool failed = false;
  for (size_t f = 0; f < t->n; f++) {
    if (!t->frames[f].python) continue;
    symbolize_python(&t->frames[f], t->keys[2 * f], t->keys[2 * f + 1], have_gil);
    failed |= frame_incomplete(&t->frames[f]);
  }
  if (have_gil) py->GILState_Release(gil);
  return failed ? -1 : 0;
}

/* 4. File and line from DWARF: only for the frames that some stack keeps (the interpreter's
 *    frames between its Python frames are left out of the stacks: nobody reads their lines), in
 *    addr2line processes that run while the caller writes its other tables. The pending work,
 *    which from here on holds the frame table and the symbols; NULL when out of host memory. */
static struct msi_symbolize_pending *start_lines(const frame_tab *t, msi_symbols *syms, uint32_t count,
                                                 const msi_symbolized *out, bool no_lines) {
  struct msi_symbolize_pending *pending = calloc(1, sizeof *pending);
  bool *wanted = pending ? calloc(t->n ? t->n : 1, sizeof *wanted) : NULL;
  if (!wanted) {
    free(pending);
    return NULL;
  }
  for (uint32_t id = 1; id < count; id++)
    for (uint32_t p = 0; p < out->stacks[id].depth; p++) wanted[out->stacks[id].frames[p]] = true;
  pending->wanted = wanted;
  pending->lines = no_lines ? NULL : msi_symbols_lines_start(syms, t->frames, t->n, wanted);
  pending->syms = syms;
  pending->tab = *t;
  return pending;
}

int msi_stacks_symbolize(msi_symbolized *out) {
  msi_stack_rec *recs;
  uint64_t *words;
  uint32_t count;
  if (msi_stacks_copy(&recs, &words, &count) != 0) {
    memset(out, 0, sizeof *out);
    msi_error("snapshot: out of host memory while symbolizing stacks");
    return MEMSNAP_ENOMEM;
  }
  msi_symbolize_source src = {recs, words, count, msi_symbols_open(), NULL, NULL, false, false};
  int rc = msi_stacks_symbolize_source(out, &src);
  free(recs);
  free(words);
  return rc;
}

int msi_stacks_symbolize_source(msi_symbolized *out, const msi_symbolize_source *src) {
  memset(out, 0, sizeof *out);
  frame_tab t = {0};
  const msi_stack_rec *recs = src->recs;
  const uint64_t *words = src->words;
  uint32_t count = src->count;
  msi_symbols *syms = src->syms;
  if (!syms) goto oom;
  out->stacks = calloc(count ? count : 1, sizeof *out->stacks);
  if (!out->stacks) goto oom;
  out->nstacks = count ? count : 1;
  if (enter_frames(&t, recs, words, count, out) != 0 || name_native(&t, syms, src->foreign) != 0) goto oom;
  merge_python(&t, recs, count, out);
  if (name_python(&t, src) != 0 || !(out->pending = start_lines(&t, syms, count, out, src->no_lines))) goto oom;
  out->frames = t.frames; /* the frames belong to `out` from here on, also to free them */
  out->nframes = t.n;
  return MEMSNAP_OK;
oom:
  msi_symbols_close(syms);
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

