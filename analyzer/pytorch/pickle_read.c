/* pickle_read.c: a strict, streaming reader of data-only Python pickles (pickle.h; the writer
 * is pickle_write.c).
 *
 * The reader is the pickle virtual machine restricted to data: a value stack with marks (a
 * mark is the stack length when MARK ran; an opcode sees only the values above the top mark,
 * as Python's current stack), a memo, and the opcodes listed in run_op. Everything else is
 * refused by name. Invariants:
 *   - every object is in the reader's list of live objects (so that cycles made through the
 *     memo are freed by pk_reader_free) and counts its references: the stack, the memo and
 *     containers hold one each; freeing is iterative (no recursion over the input's nesting);
 *   - the memo is dense (an index may be set only if it is at most the number of entries, as
 *     every pickler writes it) and costs 4 bytes an entry: a slot is 0 (empty), FORGOTTEN, a
 *     handle h >= 1 as (h << 1) | 1, or an object the memo holds as (k + 1) << 1, k its place
 *     in `held` (8 bytes per object held; places are reused);
 *   - every allocation is counted against limits.max_memory before it is made, and a length
 *     read from the input is checked against what is left of the input when its size is known;
 *     strings longer than 1 MiB grow as their bytes arrive, so a lying length costs nothing.
 * Errors are "offset N: ..." with the opcode's name and offset.
 */
#include "pickle.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const pk_limits pk_default_limits = {(size_t)1 << 30, 200, (size_t)1 << 20, (size_t)1 << 26};

#define FORGOTTEN 1u
#define MAX_HANDLE ((int64_t)0x7fffffff)
#define BIG_STRING ((size_t)1 << 20)

struct pk_reader {
  pk_read_fn read;
  void *read_ctx;
  uint64_t input_size; /* 0: unknown */
  pk_limits lim;
  pk_append_fn on_append;
  void *ctx;
  size_t pos, end;   /* unread bytes are buf[pos..end) */
  uint64_t base;     /* input offset of buf[0] */
  bool eof;
  uint64_t op_offset; /* the running opcode: its offset and byte */
  uint64_t frame_end; /* input offset where the current FRAME ends; 0: none */
  int op;
  int proto;
  pk_value *stack;
  size_t nstack, cstack;
  size_t *marks;
  size_t nmarks, cmarks;
  uint32_t *memo;
  size_t nmemo, cmemo;
  pk_obj **held; /* the objects the memo holds */
  size_t nheld, cheld;
  uint32_t *free_held; /* places of `held` to reuse */
  size_t nfree, cfree;
  pk_obj *objects; /* every live object */
  pk_obj **freeq;  /* worklist of release() */
  size_t nfreeq, cfreeq;
  size_t memory;
  bool failed;
  char error[512];
  unsigned char buf[1 << 16];
};

/* ---- values ------------------------------------------------------------------------------ */

bool pk_is(const pk_value *v, pk_type type) { return v && v->kind == PK_OBJ && v->o->type == type; }

const char *pk_type_name(const pk_value *v) {
  static const char *const kinds[] = {"None", "bool", "int", "int", "float", "handle", "object"};
  static const char *const types[] = {"?", "str", "bytes", "list", "tuple", "dict", "boxed"};
  if (!v) return "nothing";
  if (v->kind == PK_OBJ) return v->o->type <= PK_BOXED ? types[v->o->type] : "?";
  return v->kind <= PK_OBJ ? kinds[v->kind] : "?";
}

bool pk_dict_small(const pk_obj *d) { return d->type == PK_DICT && d->len <= 2 * PK_SMALL_DICT_PAIRS; }

const pk_value *pk_dict_get(const pk_obj *d, const char *key) {
  if (!d || d->type != PK_DICT) return NULL;
  size_t klen = strlen(key);
  for (size_t i = d->len; i >= 2; i -= 2) {
    const pk_value *k = &d->items[i - 2];
    if (pk_is(k, PK_STR) && k->o->len == klen && memcmp(k->o->s, key, klen) == 0) return &d->items[i - 1];
  }
  return NULL;
}

/* ---- errors ------------------------------------------------------------------------------ */

static const char *op_name(int op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'N': return "NONE";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'M': return "BININT2";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 'G': return "BINFLOAT";
    case 'X': return "BINUNICODE";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x8e: return "BINBYTES8";
    case 0x96: return "BYTEARRAY8";
    case ')': return "EMPTY_TUPLE";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 't': return "TUPLE";
    case ']': return "EMPTY_LIST";
    case 'l': return "LIST";
    case 'a': return "APPEND";
    case 'e': return "APPENDS";
    case '}': return "EMPTY_DICT";
    case 'd': return "DICT";
    case 's': return "SETITEM";
    case 'u': return "SETITEMS";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 0x94: return "MEMOIZE";
    case 'h': return "BINGET";
    case 'j': return "LONG_BINGET";
    case 'p': return "PUT";
    case 'g': return "GET";
    case 0x80: return "PROTO";
    case 0x95: return "FRAME";
    /* refused */
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    default: return NULL;
  }
}

uint64_t pk_offset(const pk_reader *r) { return r->base + r->pos; }
const char *pk_error(const pk_reader *r) { return r->error; }
int pk_protocol(const pk_reader *r) { return r->proto; }

int pk_fail(pk_reader *r, const char *fmt, ...) {
  if (r->failed) return -1;
  r->failed = true;
  const char *name = op_name(r->op);
  int n;
  if (r->op < 0) n = snprintf(r->error, sizeof r->error, "offset %llu: ", (unsigned long long)pk_offset(r));
  else if (name) n = snprintf(r->error, sizeof r->error, "offset %llu: %s: ", (unsigned long long)r->op_offset, name);
  else n = snprintf(r->error, sizeof r->error, "offset %llu: opcode 0x%02x: ", (unsigned long long)r->op_offset, r->op);
  if (n < 0 || (size_t)n >= sizeof r->error) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error + n, sizeof r->error - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- memory ------------------------------------------------------------------------------ */

/* Counts n more bytes against the limit; 0 or -1 (error set). */
static int charge(pk_reader *r, size_t n) {
  if (n > r->lim.max_memory || r->memory > r->lim.max_memory - n)
    return pk_fail(r, "the pickle needs more than the memory limit of %zu MiB at once", r->lim.max_memory >> 20);
  r->memory += n;
  return 0;
}

/* Grows *arr (elements of `size` bytes, *cap of them) to hold at least `need`; 0 or -1. */
static int grow(pk_reader *r, void **arr, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t ncap = *cap ? *cap : 16;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2 / size) return pk_fail(r, "out of memory");
    ncap *= 2;
  }
  if (charge(r, (ncap - *cap) * size) != 0) return -1;
  void *g = realloc(*arr, ncap * size);
  if (!g) {
    r->memory -= (ncap - *cap) * size;
    return pk_fail(r, "out of memory");
  }
  *arr = g;
  *cap = ncap;
  return 0;
}

static pk_obj *new_obj(pk_reader *r, pk_type type) {
  if (charge(r, sizeof(pk_obj)) != 0) return NULL;
  pk_obj *o = calloc(1, sizeof *o);
  if (!o) {
    r->memory -= sizeof(pk_obj);
    pk_fail(r, "out of memory");
    return NULL;
  }
  o->type = type;
  o->refs = 1;
  o->depth = type == PK_STR || type == PK_BYTES || type == PK_BOXED ? 0 : 1;
  o->next = r->objects;
  if (r->objects) r->objects->prev = o;
  r->objects = o;
  return o;
}

static void free_obj(pk_reader *r, pk_obj *o) {
  if (o->prev) o->prev->next = o->next;
  else r->objects = o->next;
  if (o->next) o->next->prev = o->prev;
  r->memory -= sizeof(pk_obj) + (o->type == PK_STR || o->type == PK_BYTES ? o->cap : o->cap * sizeof(pk_value));
  free(o->s);
  free(o->items);
  free(o);
}

/* Drops one reference to o; frees what nothing holds any more, iteratively. An object that
 * cannot be queued (no memory for the worklist) stays in the live list until pk_reader_free. */
static void release_obj(pk_reader *r, pk_obj *o) {
  if (--o->refs > 0) return;
  size_t base = r->nfreeq;
  if (r->nfreeq == r->cfreeq) {
    size_t cap = r->cfreeq ? r->cfreeq * 2 : 256;
    pk_obj **g = realloc(r->freeq, sizeof *g * cap);
    if (!g) return;
    r->freeq = g;
    r->cfreeq = cap;
  }
  r->freeq[r->nfreeq++] = o;
  while (r->nfreeq > base) {
    pk_obj *d = r->freeq[--r->nfreeq];
    if (d->type != PK_STR && d->type != PK_BYTES)
      for (size_t i = 0; i < d->len; i++) {
        pk_obj *c = d->items[i].kind == PK_OBJ ? d->items[i].o : NULL;
        if (!c || --c->refs > 0) continue;
        if (r->nfreeq == r->cfreeq) {
          size_t cap = r->cfreeq * 2;
          pk_obj **g = realloc(r->freeq, sizeof *g * cap);
          if (!g) continue;
          r->freeq = g;
          r->cfreeq = cap;
        }
        r->freeq[r->nfreeq++] = c;
      }
    free_obj(r, d);
  }
}

static void release(pk_reader *r, pk_value v) {
  if (v.kind == PK_OBJ) release_obj(r, v.o);
}

/* ---- input -------------------------------------------------------------------------------- */

/* Makes at least one byte available; 0, or -1 at the end of the input or on a read error. */
static int fill(pk_reader *r) {
  if (r->pos < r->end) return 0;
  if (r->eof || r->failed) return -1;
  r->base += r->end;
  r->pos = r->end = 0;
  char err[256] = "";
  long n = r->read(r->read_ctx, r->buf, sizeof r->buf, err, sizeof err);
  if (n < 0) return pk_fail(r, "cannot read the input: %s", err[0] ? err : "read error");
  if (n == 0) {
    r->eof = true;
    return -1;
  }
  r->end = (size_t)n;
  return 0;
}

static int truncated(pk_reader *r) {
  if (r->failed) return -1;
  return pk_fail(r, "the pickle ends at offset %llu, inside this opcode (truncated file?)",
                 (unsigned long long)pk_offset(r));
}

/* Copies n bytes of input into dst (NULL: skips them); 0 or -1. */
static int read_bytes(pk_reader *r, void *dst, size_t n) {
  while (n > 0) {
    if (fill(r) != 0) return truncated(r);
    size_t k = r->end - r->pos < n ? r->end - r->pos : n;
    if (dst) {
      memcpy(dst, r->buf + r->pos, k);
      dst = (char *)dst + k;
    }
    r->pos += k;
    n -= k;
  }
  return 0;
}

static int read_u8(pk_reader *r, uint64_t *v) {
  unsigned char b;
  if (read_bytes(r, &b, 1) != 0) return -1;
  *v = b;
  return 0;
}

/* A little-endian unsigned integer of n bytes (n <= 8). */
static int read_le(pk_reader *r, size_t n, uint64_t *v) {
  unsigned char b[8];
  if (read_bytes(r, b, n) != 0) return -1;
  *v = 0;
  for (size_t i = n; i-- > 0;) *v = *v << 8 | b[i];
  return 0;
}

/* A length field's value checked against the input that is left and the memory limit. */
static int check_length(pk_reader *r, uint64_t len) {
  uint64_t off = pk_offset(r), left = r->input_size > off ? r->input_size - off : 0;
  if (r->input_size && len > left)
    return pk_fail(r, "a length of %llu bytes, but only %llu bytes of input are left", (unsigned long long)len,
                   (unsigned long long)left);
  if (len > r->lim.max_memory)
    return pk_fail(r, "a length of %llu bytes is more than the memory limit of %zu MiB", (unsigned long long)len,
                   r->lim.max_memory >> 20);
  return 0;
}

/* ---- the stack ---------------------------------------------------------------------------- */

/* Values above the top mark: what an opcode may use. */
static size_t avail(const pk_reader *r) { return r->nstack - (r->nmarks ? r->marks[r->nmarks - 1] : 0); }

/* Pushes v, taking over its reference; on failure v is released. */
static int push(pk_reader *r, pk_value v) {
  if (r->nstack + r->nmarks >= r->lim.max_stack) {
    release(r, v);
    return pk_fail(r, "more than %zu values on the stack", r->lim.max_stack);
  }
  if (grow(r, (void **)&r->stack, &r->cstack, r->nstack + 1, sizeof *r->stack) != 0) {
    release(r, v);
    return -1;
  }
  r->stack[r->nstack++] = v;
  return 0;
}

static int push_int(pk_reader *r, int64_t i) { return push(r, (pk_value){.kind = PK_INT, .i = i}); }

static int need(pk_reader *r, size_t n) {
  if (avail(r) >= n) return 0;
  return pk_fail(r, "needs %zu value%s on the stack above the last MARK, which has %zu", n, n == 1 ? "" : "s",
                 avail(r));
}

/* Pops the top mark; returns the stack position it marked, or SIZE_MAX (error set). */
static size_t pop_mark(pk_reader *r) {
  if (!r->nmarks) {
    pk_fail(r, "no MARK to close");
    return SIZE_MAX;
  }
  return r->marks[--r->nmarks];
}

/* The object below the mark at position m (the target of APPENDS, SETITEMS, ADDITEMS), which
 * must be of `type`; NULL with the error set. */
static pk_obj *target_below(pk_reader *r, size_t m, pk_type type, const char *what) {
  size_t floor = r->nmarks ? r->marks[r->nmarks - 1] : 0;
  if (m == 0 || m - 1 < floor) {
    pk_fail(r, "no %s below the MARK", what);
    return NULL;
  }
  pk_value *t = &r->stack[m - 1];
  if (!pk_is(t, type)) {
    pk_fail(r, "the target is a %s, not a %s", pk_type_name(t), what);
    return NULL;
  }
  return t->o;
}

/* ---- containers --------------------------------------------------------------------------- */

/* Adds v to container o's items, taking over its reference (released on failure). */
static int add_item(pk_reader *r, pk_obj *o, pk_value v) {
  if (v.kind == PK_OBJ && v.o->depth + 1 > o->depth) {
    if (v.o->depth + 1 > r->lim.max_depth) {
      release(r, v);
      return pk_fail(r, "containers nested deeper than %zu levels", r->lim.max_depth);
    }
    o->depth = v.o->depth + 1;
  }
  if (grow(r, (void **)&o->items, &o->cap, o->len + 1, sizeof *o->items) != 0) {
    release(r, v);
    return -1;
  }
  o->items[o->len++] = v;
  return 0;
}

/* Whether Python could hash k: no list or dict in it, at any depth (sets read as lists, so a set
 * in a key is refused too; Python's frozenset keys do not occur in memory snapshots). Tuples are
 * walked to the reader's depth limit, which bounds the recursion. */
static bool hashable(const pk_value *k) {
  if (k->kind != PK_OBJ) return true;
  if (k->o->type == PK_LIST || k->o->type == PK_DICT) return false;
  if (k->o->type == PK_TUPLE)
    for (size_t i = 0; i < k->o->len; i++)
      if (!hashable(&k->o->items[i])) return false;
  return true;
}

/* d[k] = v, taking over both references. A str key already in a small dict (pk_dict_small)
 * replaces its value, as in Python; larger dicts keep every pair and lookups take the last (the
 * importer looks only into small dicts: PyTorch's have a dozen keys). */
static int dict_set(pk_reader *r, pk_obj *d, pk_value k, pk_value v) {
  if (!hashable(&k)) {
    pk_fail(r, "a dict key of type %s (unhashable)", pk_type_name(&k));
    release(r, k);
    release(r, v);
    return -1;
  }
  if (pk_is(&k, PK_STR) && pk_dict_small(d))
    for (size_t i = 0; i < d->len; i += 2)
      if (pk_is(&d->items[i], PK_STR) && d->items[i].o->len == k.o->len && memcmp(d->items[i].o->s, k.o->s, k.o->len) == 0) {
        release(r, d->items[i]); /* the old pair goes; the new one is added below, as any other */
        release(r, d->items[i + 1]);
        memmove(&d->items[i], &d->items[i + 2], (d->len - i - 2) * sizeof *d->items);
        d->len -= 2;
        break;
      }
  if (add_item(r, d, k) != 0) {
    release(r, v);
    return -1;
  }
  return add_item(r, d, v);
}

/* A new container of `type` from the values above position m, which it takes over (on an
 * error, what is left on the stack is freed with the reader). */
static int build_from(pk_reader *r, pk_type type, size_t m) {
  if (type == PK_DICT && (r->nstack - m) % 2)
    return pk_fail(r, "an odd number of values (%zu) for key/value pairs", r->nstack - m);
  pk_obj *o = new_obj(r, type);
  if (!o) return -1;
  for (size_t i = m; i < r->nstack; i += type == PK_DICT ? 2 : 1) {
    pk_value v = r->stack[i];
    r->stack[i].kind = PK_NONE;
    int rc;
    if (type == PK_DICT) {
      pk_value w = r->stack[i + 1];
      r->stack[i + 1].kind = PK_NONE;
      rc = dict_set(r, o, v, w);
    } else {
      rc = add_item(r, o, v);
    }
    if (rc != 0) {
      release_obj(r, o);
      return -1;
    }
  }
  r->nstack = m;
  return push(r, (pk_value){.kind = PK_OBJ, .o = o});
}

/* Appends v to list l (APPEND, APPENDS), asking the hook first; takes over v's reference. */
static int append(pk_reader *r, pk_obj *l, pk_value v) {
  if (r->on_append) {
    int rc = r->on_append(r, l, &v, r->ctx);
    if (rc < 0) {
      release(r, v);
      return r->failed ? -1 : pk_fail(r, "stopped by the reader's consumer");
    }
    if (rc == 1) {
      if (v.kind == PK_OBJ) pk_forget(r, v.o);
      release(r, v);
      return 0;
    }
  }
  return add_item(r, l, v);
}

/* ---- memo --------------------------------------------------------------------------------- */

/* Makes the memo hold o (taking over a reference): *word is the slot's value. 0 or -1. */
static int hold(pk_reader *r, pk_obj *o, uint32_t *word) {
  size_t k;
  if (r->nfree) {
    k = r->free_held[--r->nfree];
  } else {
    if (r->nheld >= 0x7ffffffe) return pk_fail(r, "the memo holds too many objects");
    if (grow(r, (void **)&r->held, &r->cheld, r->nheld + 1, sizeof *r->held) != 0) return -1;
    k = r->nheld++;
  }
  r->held[k] = o;
  *word = (uint32_t)((k + 1) << 1);
  return 0;
}

/* The object a slot's value holds, or NULL (empty, forgotten, a handle). */
static pk_obj *held_obj(const pk_reader *r, uint32_t word) { return word && !(word & 1) ? r->held[(word >> 1) - 1] : NULL; }

/* Lets go of the object a slot's value holds (its place is reused). */
static void unhold(pk_reader *r, uint32_t word) {
  size_t k = (word >> 1) - 1;
  pk_obj *o = r->held[k];
  r->held[k] = NULL;
  if (r->nfree == r->cfree) { /* at most one per place of `held`, which is counted: not counted again */
    size_t cap = r->cfree ? r->cfree * 2 : 64;
    uint32_t *g = realloc(r->free_held, sizeof *g * cap);
    if (g) r->free_held = g, r->cfree = cap;
  }
  if (r->nfree < r->cfree) r->free_held[r->nfree++] = (uint32_t)k; /* else the place is not reused */
  release_obj(r, o);
}

static int memo_put(pk_reader *r, uint64_t index) {
  if (need(r, 1) != 0) return -1;
  if (index > r->nmemo)
    return pk_fail(r, "memo index %llu skips ahead of the memo (%zu entries)", (unsigned long long)index, r->nmemo);
  if (index == r->nmemo) {
    if (r->nmemo >= r->lim.max_memo) return pk_fail(r, "more than %zu memo entries", r->lim.max_memo);
    if (grow(r, (void **)&r->memo, &r->cmemo, r->nmemo + 1, sizeof *r->memo) != 0) return -1;
    r->memo[r->nmemo++] = 0;
  }
  pk_value *top = &r->stack[r->nstack - 1];
  uint32_t word = 0;
  pk_obj *o = NULL;
  if (top->kind == PK_HANDLE) { /* pushed by a GET of a handle: valid */
    word = (uint32_t)top->i << 1 | 1;
  } else {
    if (top->kind == PK_OBJ) {
      o = top->o;
      if (o->memo && o->memo != index + 1) /* a pickler memoizes an object once; two slots would let a
                                               later reference change what was already imported */
        return pk_fail(r, "memo index %llu: the object is memoized already (index %u)", (unsigned long long)index,
                       (unsigned)(o->memo - 1));
      o->refs++;
    } else { /* a scalar: boxed */
      if (!(o = new_obj(r, PK_BOXED))) return -1;
      o->boxed = *top;
    }
    if (hold(r, o, &word) != 0) {
      release_obj(r, o);
      return -1;
    }
  }
  uint32_t old = r->memo[index];
  r->memo[index] = word;
  pk_obj *p = held_obj(r, old);
  if (p) {
    if (p != o && p->memo == index + 1) p->memo = 0;
    unhold(r, old);
  }
  if (o && o->type != PK_BOXED) o->memo = index + 1;
  return 0;
}

static int memo_get(pk_reader *r, uint64_t index) {
  uint32_t word = index < r->nmemo ? r->memo[index] : 0;
  if (word == 0) return pk_fail(r, "memo index %llu is not defined", (unsigned long long)index);
  if (word == FORGOTTEN)
    return pk_fail(r, "memo index %llu refers back to an entry that was already imported and freed (not supported)",
                   (unsigned long long)index);
  if (word & 1) return push(r, (pk_value){.kind = PK_HANDLE, .i = (int64_t)(word >> 1)});
  pk_obj *o = held_obj(r, word);
  if (o->type == PK_BOXED) return push(r, o->boxed);
  o->refs++;
  return push(r, (pk_value){.kind = PK_OBJ, .o = o});
}

/* Sets the memo slot that holds o to `word`, letting go of o; false when no slot holds it. */
static bool rewrite_slot(pk_reader *r, pk_obj *o, uint32_t word) {
  if (!o->memo || o->memo > r->nmemo || held_obj(r, r->memo[o->memo - 1]) != o) return false;
  uint32_t old = r->memo[o->memo - 1];
  r->memo[o->memo - 1] = word;
  o->memo = 0;
  unhold(r, old);
  return true;
}

void pk_memo_replace(pk_reader *r, pk_obj *o, int64_t handle) {
  if (handle >= 1 && handle <= MAX_HANDLE) rewrite_slot(r, o, (uint32_t)handle << 1 | 1);
}

void pk_forget(pk_reader *r, pk_obj *o) { rewrite_slot(r, o, FORGOTTEN); }

/* ---- values read from the input ----------------------------------------------------------- */

/* A str or bytes object of len bytes read from the input. Longer strings grow as their bytes
 * arrive, so a length field larger than the input costs no memory. */
static int read_string(pk_reader *r, pk_type type, uint64_t len) {
  if (check_length(r, len) != 0) return -1;
  pk_obj *o = new_obj(r, type);
  if (!o) return -1;
  size_t want = (size_t)len, have = 0;
  while (true) {
    size_t step = want - have < BIG_STRING ? want - have : BIG_STRING;
    if (o->cap < have + step + 1) {
      size_t cap = have + step + 1;
      if (charge(r, cap - o->cap) != 0) break;
      char *g = realloc(o->s, cap);
      if (!g) {
        r->memory -= cap - o->cap;
        pk_fail(r, "out of memory");
        break;
      }
      o->s = g;
      o->cap = cap;
    }
    if (read_bytes(r, o->s + have, step) != 0) break;
    have += step;
    o->s[have] = '\0';
    if (have == want) {
      o->len = have;
      return push(r, (pk_value){.kind = PK_OBJ, .o = o});
    }
  }
  release_obj(r, o);
  return -1;
}

/* LONG1/LONG4: a little-endian two's complement integer of n bytes; outside int64 it is a
 * PK_BIGINT (its bytes are read and dropped, never held). */
static int read_long(pk_reader *r, uint64_t n) {
  if (check_length(r, n) != 0) return -1;
  unsigned char b[8];
  size_t head = n < 8 ? (size_t)n : 8;
  if (read_bytes(r, b, head) != 0) return -1;
  if (head == 0) return push_int(r, 0);
  bool negative = b[head - 1] & 0x80, fits = true;
  unsigned char ext = negative ? 0xff : 0, chunk[4096];
  for (uint64_t left = n - head; left > 0;) { /* beyond 8 bytes, only sign extension fits */
    size_t k = left < sizeof chunk ? (size_t)left : sizeof chunk;
    if (read_bytes(r, chunk, k) != 0) return -1;
    for (size_t i = 0; i < k; i++) fits &= chunk[i] == ext;
    left -= k;
  }
  if (!fits) return push(r, (pk_value){.kind = PK_BIGINT});
  uint64_t u = 0;
  for (size_t i = head; i-- > 0;) u = u << 8 | b[i];
  if (negative && head < 8) u |= UINT64_MAX << (8 * head);
  return push_int(r, (int64_t)u);
}

/* PUT/GET's decimal argument, a line of at most 20 digits. */
static int read_decimal_line(pk_reader *r, uint64_t *v) {
  *v = 0;
  for (int i = 0;; i++) {
    unsigned char c;
    if (read_bytes(r, &c, 1) != 0) return -1;
    if (c == '\n' && i > 0) return 0;
    if (c < '0' || c > '9' || i >= 19) return pk_fail(r, "its argument is not a decimal number");
    *v = *v * 10 + (c - '0');
  }
}

/* GLOBAL's "module\nname\n", for the message only (printable, bounded). */
static void describe_global(pk_reader *r, char *out, size_t len) {
  size_t o = 0;
  for (int line = 0; line < 2; line++) {
    for (int i = 0; i < 120; i++) {
      unsigned char c;
      if (fill(r) != 0) goto done;
      c = r->buf[r->pos++];
      if (c == '\n') break;
      if (o + 2 < len) out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (line == 0 && o + 2 < len) out[o++] = '.';
  }
done:
  out[o] = '\0';
}

/* ---- the machine -------------------------------------------------------------------------- */

static int refuse(pk_reader *r) {
  char what[300] = "";
  if (r->op == 'c') {
    describe_global(r, what, sizeof what);
    return pk_fail(r, "refused: the pickle imports '%s'; a memory snapshot holds only data, and loading it must "
                      "never run code", what);
  }
  if (r->op == 0x93 && avail(r) >= 2 && pk_is(&r->stack[r->nstack - 2], PK_STR) && pk_is(&r->stack[r->nstack - 1], PK_STR)) {
    return pk_fail(r, "refused: the pickle imports '%.100s.%.100s'; a memory snapshot holds only data, and loading it "
                      "must never run code", r->stack[r->nstack - 2].o->s, r->stack[r->nstack - 1].o->s);
  }
  if (op_name(r->op))
    return pk_fail(r, "refused: this opcode builds objects or text values that a memory snapshot never holds; only "
                      "data opcodes of protocols 2 to 5 are read");
  return pk_fail(r, "unknown opcode (not a pickle, or a damaged one)");
}

/* Each group of opcodes returns 0, -1 on error (r->error set), or NOT_MINE for an opcode of
 * another group. */
#define NOT_MINE 1

/* PROTO, FRAME, STOP, MARK, POP, POP_MARK, DUP: the machine itself. */
static int run_machine_op(pk_reader *r, int op, pk_value *root, bool *stop) {
  uint64_t n;
  size_t m;
  switch (op) {
    case 0x80: /* PROTO */
      if (read_u8(r, &n) != 0) return -1;
      if (r->op_offset != 0) return pk_fail(r, "not at the start of the pickle");
      if (n < 2 || n > 5) return pk_fail(r, "protocol %llu; this reader reads protocols 2 to 5", (unsigned long long)n);
      r->proto = (int)n;
      return 0;
    case 0x95: /* FRAME: a hint for buffering, checked */
      if (r->frame_end) return pk_fail(r, "a new frame begins before the current one ends (offset %llu)",
                                       (unsigned long long)r->frame_end);
      if (read_le(r, 8, &n) != 0) return -1;
      if (r->input_size && n > r->input_size) return pk_fail(r, "a frame of %llu bytes: longer than the input", (unsigned long long)n);
      r->frame_end = n ? pk_offset(r) + n : 0;
      return 0;
    case '.':
      if (r->nmarks || r->nstack != 1)
        return pk_fail(r, "the pickle stops with %zu values and %zu marks on the stack (expected one value)",
                       r->nstack, r->nmarks);
      *root = r->stack[--r->nstack];
      *stop = true;
      return 0;
    case '(':
      if (r->nstack + r->nmarks >= r->lim.max_stack) return pk_fail(r, "more than %zu values on the stack", r->lim.max_stack);
      if (grow(r, (void **)&r->marks, &r->cmarks, r->nmarks + 1, sizeof *r->marks) != 0) return -1;
      r->marks[r->nmarks++] = r->nstack;
      return 0;
    case '0': /* POP: the top value, or the top mark when nothing is above it */
      if (avail(r)) release(r, r->stack[--r->nstack]);
      else if (pop_mark(r) == SIZE_MAX) return -1;
      return 0;
    case '1': /* POP_MARK */
      if ((m = pop_mark(r)) == SIZE_MAX) return -1;
      while (r->nstack > m) release(r, r->stack[--r->nstack]);
      return 0;
    case '2': /* DUP */
      if (need(r, 1) != 0) return -1;
      if (r->stack[r->nstack - 1].kind == PK_OBJ) r->stack[r->nstack - 1].o->refs++;
      return push(r, r->stack[r->nstack - 1]);
    default: return NOT_MINE;
  }
}

/* None, booleans, integers, floats, str and bytes. */
static int run_scalar_op(pk_reader *r, int op) {
  uint64_t n;
  switch (op) {
    case 'N': return push(r, (pk_value){.kind = PK_NONE});
    case 0x88: return push(r, (pk_value){.kind = PK_BOOL, .i = 1});
    case 0x89: return push(r, (pk_value){.kind = PK_BOOL, .i = 0});
    case 'J':
      if (read_le(r, 4, &n) != 0) return -1;
      return push_int(r, (int32_t)(uint32_t)n);
    case 'K':
      if (read_le(r, 1, &n) != 0) return -1;
      return push_int(r, (int64_t)n);
    case 'M':
      if (read_le(r, 2, &n) != 0) return -1;
      return push_int(r, (int64_t)n);
    case 0x8a:
      if (read_le(r, 1, &n) != 0) return -1;
      return read_long(r, n);
    case 0x8b:
      if (read_le(r, 4, &n) != 0) return -1;
      if (n & 0x80000000u) return pk_fail(r, "a negative byte count");
      return read_long(r, n);
    case 'G': {
      unsigned char b[8];
      if (read_bytes(r, b, 8) != 0) return -1;
      uint64_t u = 0;
      for (int i = 0; i < 8; i++) u = u << 8 | b[i];
      double d;
      memcpy(&d, &u, sizeof d);
      return push(r, (pk_value){.kind = PK_FLOAT, .f = d});
    }
    case 'X':
      if (read_le(r, 4, &n) != 0) return -1;
      return read_string(r, PK_STR, n);
    case 0x8c:
      if (read_le(r, 1, &n) != 0) return -1;
      return read_string(r, PK_STR, n);
    case 0x8d:
      if (read_le(r, 8, &n) != 0) return -1;
      return read_string(r, PK_STR, n);
    case 'T':
      if (read_le(r, 4, &n) != 0) return -1;
      if (n & 0x80000000u) return pk_fail(r, "a negative length");
      return read_string(r, PK_STR, n);
    case 'U':
      if (read_le(r, 1, &n) != 0) return -1;
      return read_string(r, PK_STR, n);
    case 'B':
      if (read_le(r, 4, &n) != 0) return -1;
      return read_string(r, PK_BYTES, n);
    case 'C':
      if (read_le(r, 1, &n) != 0) return -1;
      return read_string(r, PK_BYTES, n);
    case 0x8e:
    case 0x96:
      if (read_le(r, 8, &n) != 0) return -1;
      return read_string(r, PK_BYTES, n);
    default: return NOT_MINE;
  }
}

/* Tuples, lists, dicts and sets (lists here), built or added to. */
static int run_container_op(pk_reader *r, int op) {
  size_t m;
  pk_obj *o;
  switch (op) {
    case ')': return build_from(r, PK_TUPLE, r->nstack);
    case 0x85:
    case 0x86:
    case 0x87:
      if (need(r, (size_t)(op - 0x84)) != 0) return -1;
      return build_from(r, PK_TUPLE, r->nstack - (size_t)(op - 0x84));
    case 't':
    case 'l':
    case 'd':
    case 0x91: /* FROZENSET: a tuple here */
      if ((m = pop_mark(r)) == SIZE_MAX) return -1;
      return build_from(r, op == 'd' ? PK_DICT : op == 'l' ? PK_LIST : PK_TUPLE, m);
    case ']':
    case 0x8f: /* EMPTY_SET: a list here */
    case '}':
      if (!(o = new_obj(r, op == '}' ? PK_DICT : PK_LIST))) return -1;
      return push(r, (pk_value){.kind = PK_OBJ, .o = o});
    case 'a': {
      if (need(r, 2) != 0) return -1;
      pk_value *t = &r->stack[r->nstack - 2];
      if (!pk_is(t, PK_LIST)) return pk_fail(r, "the target is a %s, not a list", pk_type_name(t));
      pk_value v = r->stack[--r->nstack];
      return append(r, t->o, v);
    }
    case 'e':
    case 0x90: /* ADDITEMS: to a set, which is a list here */
      if ((m = pop_mark(r)) == SIZE_MAX) return -1;
      if (!(o = target_below(r, m, PK_LIST, op == 'e' ? "list" : "set"))) return -1;
      for (size_t i = m; i < r->nstack; i++) {
        pk_value v = r->stack[i];
        r->stack[i].kind = PK_NONE; /* taken: the rest stays on the stack until freed */
        if (op == 0x90 && !hashable(&v)) { /* a set's items must be hashable, as in Python */
          pk_fail(r, "a set item of type %s (unhashable)", pk_type_name(&v));
          release(r, v);
          return -1;
        }
        if ((op == 'e' ? append(r, o, v) : add_item(r, o, v)) != 0) return -1;
      }
      r->nstack = m;
      return 0;
    case 's': {
      if (need(r, 3) != 0) return -1;
      pk_value *t = &r->stack[r->nstack - 3];
      if (!pk_is(t, PK_DICT)) return pk_fail(r, "the target is a %s, not a dict", pk_type_name(t));
      pk_value v = r->stack[--r->nstack], k = r->stack[--r->nstack];
      return dict_set(r, t->o, k, v);
    }
    case 'u':
      if ((m = pop_mark(r)) == SIZE_MAX) return -1;
      if (!(o = target_below(r, m, PK_DICT, "dict"))) return -1;
      if ((r->nstack - m) % 2) return pk_fail(r, "an odd number of values (%zu) for key/value pairs", r->nstack - m);
      for (size_t i = m; i < r->nstack; i += 2) {
        pk_value k = r->stack[i], v = r->stack[i + 1];
        r->stack[i].kind = r->stack[i + 1].kind = PK_NONE;
        if (dict_set(r, o, k, v) != 0) return -1;
      }
      r->nstack = m;
      return 0;
    default: return NOT_MINE;
  }
}

/* PUT, GET and MEMOIZE in their forms. */
static int run_memo_op(pk_reader *r, int op) {
  uint64_t n;
  switch (op) {
    case 'q': /* BINPUT, LONG_BINPUT, BINGET, LONG_BINGET: 1- or 4-byte index */
    case 'r':
    case 'h':
    case 'j':
      if (read_le(r, op == 'q' || op == 'h' ? 1 : 4, &n) != 0) return -1;
      return op == 'q' || op == 'r' ? memo_put(r, n) : memo_get(r, n);
    case 'p': /* PUT, GET: a decimal line */
    case 'g':
      if (read_decimal_line(r, &n) != 0) return -1;
      return op == 'p' ? memo_put(r, n) : memo_get(r, n);
    case 0x94: return memo_put(r, r->nmemo);
    default: return NOT_MINE;
  }
}

/* Runs one opcode: the groups in the order of how often snapshots use them. */
static int run_op(pk_reader *r, int op, pk_value *root, bool *stop) {
  int rc = run_scalar_op(r, op);
  if (rc == NOT_MINE) rc = run_container_op(r, op);
  if (rc == NOT_MINE) rc = run_memo_op(r, op);
  if (rc == NOT_MINE) rc = run_machine_op(r, op, root, stop);
  return rc == NOT_MINE ? refuse(r) : rc;
}

pk_reader *pk_reader_new(pk_read_fn read, void *read_ctx, uint64_t input_size, const pk_limits *limits,
                         pk_append_fn on_append, void *ctx) {
  pk_reader *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->read = read;
  r->read_ctx = read_ctx;
  r->input_size = input_size;
  r->lim = limits ? *limits : pk_default_limits;
  r->on_append = on_append;
  r->ctx = ctx;
  r->op = -1;
  return r;
}

int pk_run(pk_reader *r, pk_value *root) {
  root->kind = PK_NONE;
  for (bool stop = false; !stop;) {
    r->op = -1;
    r->op_offset = pk_offset(r);
    if (fill(r) != 0) {
      if (r->failed) return -1;
      return pk_offset(r) == 0 ? pk_fail(r, "the input is empty") : pk_fail(r, "the pickle ends without STOP (truncated file?)");
    }
    int op = r->buf[r->pos++];
    r->op = op;
    /* Frames (protocol 4+) tile the pickle: no opcode may cross a frame's end, and a frame begins
       only where the one before ended, as Python's unpickler requires. */
    if (r->frame_end && r->op_offset > r->frame_end)
      return pk_fail(r, "an opcode crosses the end of its frame (offset %llu)", (unsigned long long)r->frame_end);
    if (r->frame_end && r->op_offset == r->frame_end) r->frame_end = 0;
    if (r->op_offset == 0 && op != 0x80) {
      if (op == 0x1f) return pk_fail(r, "gzip data inside the gzip data: decompress it first");
      return pk_fail(r, "not a pickle of protocol 2 to 5 (they start with PROTO, 0x80)");
    }
    if (run_op(r, op, root, &stop) != 0) return -1;
  }
  r->op = -1;
  return 0;
}

void pk_reader_free(pk_reader *r) {
  if (!r) return;
  while (r->objects) {
    pk_obj *o = r->objects;
    r->objects = o->next;
    free(o->s);
    free(o->items);
    free(o);
  }
  free(r->stack);
  free(r->marks);
  free(r->memo);
  free(r->held);
  free(r->free_held);
  free(r->freeq);
  free(r);
}

/* ---- text ------------------------------------------------------------------------------- */

size_t pk_utf8_len(const unsigned char *s, size_t n) {
  size_t k = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
  if (k == 0 || k > n || (k == 2 && s[0] < 0xc2) || (k == 4 && s[0] > 0xf4)) return 0;
  for (size_t i = 1; i < k; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (k == 3 && s[0] == 0xe0 && s[1] < 0xa0) return 0; /* overlong */
  if (k == 3 && s[0] == 0xed && s[1] > 0x9f) return 0; /* a surrogate (Python's surrogatepass) */
  if (k == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))) return 0;
  return k;
}

void pk_utf8_sanitize(char *s, size_t len) {
  unsigned char *p = (unsigned char *)s;
  for (size_t i = 0; i < len;) {
    size_t k = p[i] ? pk_utf8_len(p + i, len - i) : 0;
    if (k) {
      i += k;
    } else {
      p[i++] = '?';
    }
  }
}

/* ---- in memory ---------------------------------------------------------------------------- */

typedef struct mem_source {
  const uint8_t *data;
  size_t len, pos;
} mem_source;

static long mem_read(void *ctx, void *buf, size_t n, char *err, size_t errlen) {
  (void)err;
  (void)errlen;
  mem_source *m = ctx;
  size_t k = m->len - m->pos < n ? m->len - m->pos : n;
  memcpy(buf, m->data + m->pos, k);
  m->pos += k;
  return (long)k;
}

int pk_parse_buffer(const uint8_t *data, size_t len, const pk_limits *limits, char *err, size_t errlen) {
  mem_source m = {data, len, 0};
  pk_reader *r = pk_reader_new(mem_read, &m, len, limits, NULL, NULL);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  pk_value root;
  int rc = pk_run(r, &root);
  if (rc != 0) snprintf(err, errlen, "%s", pk_error(r));
  pk_reader_free(r);
  return rc;
}
