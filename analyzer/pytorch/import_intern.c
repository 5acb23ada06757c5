/* import_intern.c: the frames, stacks and labels of an import, each distinct one kept once and
 * written once (frames, stacks, stack_frames, labels), by hash in an open-addressing index.
 *
 * A frame dict or frames list, once interned, is tagged with its id and replaced in the pickle's
 * memo by a handle: later references to it (PyTorch's pickles share frames and frames lists)
 * cost neither memory nor a lookup. Frames are told apart by name, file, line and whether they
 * are Python's; stacks by their frame ids, innermost first.
 */
#include <stdlib.h>
#include <string.h>

#include "importer.h"

/* ---- the index ---------------------------------------------------------------------------- */

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Finds the id whose record `same` says equals the key, or the slot to put it in. */
typedef bool (*same_fn)(const importer *im, uint32_t id, const void *key);
static uint32_t *index_find(const importer *im, id_index *x, uint64_t hash, same_fn same, const void *key) {
  for (size_t i = hash & x->mask;; i = (i + 1) & x->mask)
    if (!x->slots[i] || same(im, x->slots[i], key)) return &x->slots[i];
}

/* Makes room for one more id in x; 0 or -1. hash_of gives the hash of an existing id. */
static int index_reserve(importer *im, id_index *x, uint64_t (*hash_of)(const importer *, uint32_t)) {
  if ((x->count + 1) * 2 <= x->mask + 1 && x->slots) return 0;
  size_t cap = x->slots ? (x->mask + 1) * 2 : 1024;
  uint32_t *s = calloc(cap, sizeof *s);
  if (!s) return imp_fail(im, "out of memory");
  for (size_t i = 0; x->slots && i <= x->mask; i++)
    if (x->slots[i]) {
      size_t j = hash_of(im, x->slots[i]) & (cap - 1);
      while (s[j]) j = (j + 1) & (cap - 1);
      s[j] = x->slots[i];
    }
  free(x->slots);
  x->slots = s;
  x->mask = cap - 1;
  return 0;
}

/* ---- frames and stacks -------------------------------------------------------------------- */

typedef struct frame_key {
  const char *name, *file;
  size_t name_len, file_len;
  int64_t line;
  bool python;
} frame_key;

static bool same_frame(const importer *im, uint32_t id, const void *key) {
  const frame_rec *f = &im->frames[id - 1];
  const frame_key *k = key;
  return f->line == k->line && f->python == k->python && strlen(f->name) == k->name_len &&
         strlen(f->file) == k->file_len && memcmp(f->name, k->name, k->name_len) == 0 &&
         memcmp(f->file, k->file, k->file_len) == 0;
}
static uint64_t frame_hash_of(const importer *im, uint32_t id) { return im->frames[id - 1].hash; }

static bool ends_with(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* The frame id of a frame dict ({name, filename, line}) or of a frame handle; 0 with an error. */
static int64_t frame_id(importer *im, const pk_value *v, const where *w) {
  if (v->kind == PK_HANDLE && TAG_KIND(v->i) == TAG_FRAME) return TAG_ID(v->i);
  if (!pk_is(v, PK_DICT)) {
    char buf[96];
    imp_fail(im, "%s: a frame is a %s, expected a dict", imp_where_text(w, buf, sizeof buf), pk_type_name(v));
    return 0;
  }
  pk_obj *d = v->o;
  if (d->tag && TAG_KIND(d->tag) == TAG_FRAME) return TAG_ID(d->tag);
  frame_key k;
  if (imp_get_str(im, d, "name", w, false, &k.name, &k.name_len) != 0 ||
      imp_get_str(im, d, "filename", w, false, &k.file, &k.file_len) != 0 ||
      imp_get_int(im, d, "line", w, false, 0, INT32_MIN, INT32_MAX, &k.line) != 0)
    return 0;
  /* PyTorch's frames: Python ones name a .py file (or <string>, <frozen ...>); C++ ones a
     source file, "??" or "" (unknown), with line 0. */
  k.python = ends_with(k.file, k.file_len, ".py") || (k.file_len > 1 && k.file[0] == '<');
  if (!k.python && k.file_len == 2 && memcmp(k.file, "??", 2) == 0) k.file_len = 0, k.file = "";
  uint64_t h = hash_bytes(hash_bytes(0xcbf29ce484222325ull, k.name, k.name_len), k.file, k.file_len);
  h = hash_bytes(h, &k.line, sizeof k.line) ^ k.python;
  if (index_reserve(im, &im->frame_index, frame_hash_of) != 0) return 0;
  uint32_t *slot = index_find(im, &im->frame_index, h, same_frame, &k);
  if (!*slot) {
    if (imp_reserve(im, (void **)&im->frames, &im->cframes, im->nframes, sizeof *im->frames) != 0) return 0;
    frame_rec *f = &im->frames[im->nframes];
    f->name = strndup(k.name, k.name_len);
    f->file = strndup(k.file, k.file_len);
    if (!f->name || !f->file) {
      free(f->name), free(f->file);
      imp_fail(im, "out of memory");
      return 0;
    }
    f->line = k.line;
    f->python = k.python;
    f->hash = h;
    *slot = (uint32_t)++im->nframes;
    im->frame_index.count++;
    sqlite3_stmt *st = im->frame;
    sqlite3_bind_int64(st, 1, *slot);
    sqlite3_bind_text(st, 2, k.python ? "python" : "native", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, f->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, f->file, -1, SQLITE_STATIC);
    imp_bind_int_or_null(st, 5, k.line, !k.python && k.line <= 0);
    sqlite3_bind_text(st, 6, "", -1, SQLITE_STATIC);
    if (imp_step(im, st) != 0) return 0;
  }
  d->tag = TAG(TAG_FRAME, *slot);
  pk_memo_replace(im->r, d, d->tag);
  return *slot;
}

typedef struct stack_key {
  const uint32_t *frames;
  uint32_t depth;
} stack_key;

static bool same_stack(const importer *im, uint32_t id, const void *key) {
  const stack_rec *s = &im->stacks[id - 1];
  const stack_key *k = key;
  return s->depth == k->depth && memcmp(s->frames, k->frames, sizeof *k->frames * k->depth) == 0;
}
static uint64_t stack_hash_of(const importer *im, uint32_t id) { return im->stacks[id - 1].hash; }

/* The stack id of a frames list (innermost first, as PyTorch's and memsnap's are) or of a stack
 * handle: 0 for none or an empty list; -1 with an error. */
int64_t imp_stack_id(importer *im, const pk_value *v, const where *w) {
  if (!v || v->kind == PK_NONE) return 0;
  if (v->kind == PK_HANDLE && TAG_KIND(v->i) == TAG_STACK) return TAG_ID(v->i);
  if (!pk_is(v, PK_LIST) && !pk_is(v, PK_TUPLE)) {
    imp_field_error(im, w, "frames", v, "a list");
    return -1;
  }
  pk_obj *l = v->o;
  if (l->tag) {
    if (TAG_KIND(l->tag) == TAG_STACK) return TAG_ID(l->tag);
    char buf[96];
    imp_fail(im, "%s: its frames list is also a device trace", imp_where_text(w, buf, sizeof buf));
    return -1;
  }
  uint32_t depth = l->len < MAX_DEPTH ? (uint32_t)l->len : MAX_DEPTH;
  for (uint32_t i = 0; i < depth; i++) {
    int64_t f = frame_id(im, &l->items[i], w);
    if (f <= 0) return -1;
    im->scratch[i] = (uint32_t)f;
  }
  int64_t id = 0;
  if (depth > 0) {
    stack_key k = {im->scratch, depth};
    uint64_t h = hash_bytes(0xcbf29ce484222325ull, im->scratch, sizeof *im->scratch * depth);
    if (index_reserve(im, &im->stack_index, stack_hash_of) != 0) return -1;
    uint32_t *slot = index_find(im, &im->stack_index, h, same_stack, &k);
    if (!*slot) {
      if (imp_reserve(im, (void **)&im->stacks, &im->cstacks, im->nstacks, sizeof *im->stacks) != 0) return -1;
      stack_rec *s = &im->stacks[im->nstacks];
      s->frames = malloc(sizeof *s->frames * depth);
      if (!s->frames) return imp_fail(im, "out of memory");
      memcpy(s->frames, im->scratch, sizeof *s->frames * depth);
      s->depth = depth;
      s->hash = h;
      *slot = (uint32_t)++im->nstacks;
      im->stack_index.count++;
      sqlite3_bind_int64(im->stack, 1, *slot);
      sqlite3_bind_int64(im->stack, 2, depth);
      if (imp_step(im, im->stack) != 0) return -1;
      for (uint32_t i = 0; i < depth; i++) {
        sqlite3_bind_int64(im->stack_frame, 1, *slot);
        sqlite3_bind_int64(im->stack_frame, 2, i);
        sqlite3_bind_int64(im->stack_frame, 3, im->scratch[i]);
        if (imp_step(im, im->stack_frame) != 0) return -1;
      }
    }
    id = *slot;
  }
  l->tag = TAG(TAG_STACK, id);
  pk_memo_replace(im->r, l, l->tag);
  return id;
}

/* ---- labels ------------------------------------------------------------------------------- */

static bool same_label(const importer *im, uint32_t id, const void *key) {
  return strcmp(im->labels[id - 1].text, key) == 0;
}
static uint64_t label_hash_of(const importer *im, uint32_t id) { return im->labels[id - 1].hash; }

int64_t imp_label_id(importer *im, const char *text) {
  uint64_t h = hash_bytes(0xcbf29ce484222325ull, text, strlen(text));
  if (index_reserve(im, &im->label_index, label_hash_of) != 0) return -1;
  uint32_t *slot = index_find(im, &im->label_index, h, same_label, text);
  if (*slot) return *slot;
  if (imp_reserve(im, (void **)&im->labels, &im->clabels, im->nlabels, sizeof *im->labels) != 0) return -1;
  label_rec *l = &im->labels[im->nlabels];
  if (!(l->text = strdup(text))) return imp_fail(im, "out of memory");
  l->hash = h;
  *slot = (uint32_t)++im->nlabels;
  im->label_index.count++;
  sqlite3_bind_int64(im->label, 1, *slot);
  sqlite3_bind_text(im->label, 2, text, -1, SQLITE_STATIC);
  return imp_step(im, im->label) != 0 ? -1 : (int64_t)*slot;
}

void imp_intern_free(importer *im) {
  for (size_t i = 0; i < im->nframes; i++) free(im->frames[i].name), free(im->frames[i].file);
  for (size_t i = 0; i < im->nstacks; i++) free(im->stacks[i].frames);
  for (size_t i = 0; i < im->nlabels; i++) free(im->labels[i].text);
  free(im->frames), free(im->stacks), free(im->labels);
  free(im->frame_index.slots), free(im->stack_index.slots), free(im->label_index.slots);
}
