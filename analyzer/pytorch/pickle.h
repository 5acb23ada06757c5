/* pickle.h: a strict, streaming reader of Python pickles that hold only data, and a writer of
 * such pickles (pickle_read.c, pickle_write.c). `memsnap import` and `memsnap export` use them for PyTorch's memory
 * snapshots; nothing here knows about snapshots.
 *
 * The reader understands the data opcodes of protocols 2 to 5 (None, booleans, integers of any
 * size, floats, str, bytes, tuples, lists, dicts, sets, the memo, MARK, FRAME, PROTO, STOP) and
 * refuses every other opcode (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID,
 * EXT*, out-of-band buffers, and protocol 0's text values) with an error naming the opcode and its
 * offset: reading a pickle never imports a module nor calls anything. Memory is bounded by
 * pk_limits, checked before anything is allocated (a length field larger than what is left of
 * the input, or than the memory limit, is an error). Values are reference-counted so that a
 * consumer can stream: a hook sees every item about to be appended to a list, may take it (it is
 * then freed, and its memo entry forgotten), and may replace the memo entry of an object it has
 * digested by a small integer handle, so that later references (BINGET) cost no memory.
 */
#ifndef MEMSNAP_PICKLE_H
#define MEMSNAP_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- values ------------------------------------------------------------------------------ */

typedef enum { PK_NONE, PK_BOOL, PK_INT, PK_BIGINT, PK_FLOAT, PK_HANDLE, PK_OBJ } pk_kind;
typedef enum { PK_STR = 1, PK_BYTES, PK_LIST, PK_TUPLE, PK_DICT, PK_BOXED } pk_type;

typedef struct pk_obj pk_obj;

/* A value: scalars inline (PK_BIGINT: an integer outside int64, whose value is not kept;
 * PK_HANDLE: a consumer's handle, see pk_memo_replace), objects by reference. */
typedef struct pk_value {
  pk_kind kind;
  union {
    int64_t i; /* PK_BOOL, PK_INT, PK_HANDLE */
    double f;  /* PK_FLOAT */
    pk_obj *o; /* PK_OBJ */
  };
} pk_value;

struct pk_obj {
  pk_type type;
  uint32_t refs, depth; /* depth: 0 for str/bytes, 1 + the deepest item for containers */
  uint64_t memo;        /* 1 + the memo index that holds it; 0 when none */
  int64_t tag;          /* free for the consumer; 0 until it sets it */
  size_t len, cap;      /* str/bytes: bytes (s is NUL-terminated); list/tuple: items; dict: 2 x pairs */
  char *s;
  pk_value *items;      /* dict: key, value, key, value, ... in insertion order */
  pk_value boxed;       /* PK_BOXED: a scalar that was memoized */
  pk_obj *prev, *next;  /* every live object of its reader */
};

/* Dicts of at most this many pairs read as Python reads them (a repeated key replaces the value);
 * larger ones keep every pair. The importer looks only into small dicts. */
#define PK_SMALL_DICT_PAIRS 64
bool pk_dict_small(const pk_obj *d);
/* The value of `key` in dict `d` (the last one set, as in Python); NULL when absent. */
const pk_value *pk_dict_get(const pk_obj *d, const char *key);
bool pk_is(const pk_value *v, pk_type type);
/* "None", "int", "str", "list", ...: for messages. */
const char *pk_type_name(const pk_value *v);

/* Replaces, in place, every byte of s[0..len) that is not part of valid UTF-8 (and NUL) by '?'. */
void pk_utf8_sanitize(char *s, size_t len);

/* The length of the valid UTF-8 sequence at s (at most n bytes): 1 to 4, or 0 if invalid
 * (overlong forms and surrogates are invalid, as Python's strict codec has them). */
size_t pk_utf8_len(const unsigned char *s, size_t n);

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct pk_reader pk_reader;

/* Reads up to n bytes into buf; returns the count, 0 at the end of the input, or -1 with a
 * message in err[errlen]. */
typedef long (*pk_read_fn)(void *ctx, void *buf, size_t n, char *err, size_t errlen);

typedef struct pk_limits {
  size_t max_memory; /* bytes of strings, containers, stack and memo alive at once */
  size_t max_depth;  /* containers nested in containers */
  size_t max_stack;  /* values and marks on the unpickling stack */
  size_t max_memo;   /* memo entries */
} pk_limits;

/* 1 GiB of memory, depth 200, 1M stack entries, 64M memo entries. */
extern const pk_limits pk_default_limits;

/* Called for each item about to be appended to `list` (APPEND, APPENDS). Returns 0 to let it be
 * appended, 1 when the consumer took it (it is not appended; the reader drops its reference and
 * forgets its memo entry), or -1 to stop (after pk_fail). */
typedef int (*pk_append_fn)(pk_reader *r, pk_obj *list, const pk_value *item, void *ctx);

/* A reader of the pickle that `read` returns. input_size is the length of the input when known
 * (lengths are then checked against what is left of it), else 0. limits NULL: the defaults.
 * on_append may be NULL. Returns NULL when out of memory. */
pk_reader *pk_reader_new(pk_read_fn read, void *read_ctx, uint64_t input_size, const pk_limits *limits,
                         pk_append_fn on_append, void *ctx);
/* Runs the pickle to its STOP. Returns 0 with the top-level value in *root (valid until
 * pk_reader_free), or -1 with pk_error() set. Never runs code. */
int pk_run(pk_reader *r, pk_value *root);
/* The error: "offset N: ..." (offsets count bytes of the uncompressed pickle). */
const char *pk_error(const pk_reader *r);
/* Bytes consumed so far. */
uint64_t pk_offset(const pk_reader *r);
int pk_protocol(const pk_reader *r);
/* Frees every value the reader made. NULL is fine. */
void pk_reader_free(pk_reader *r);

/* For hooks: records an error at the current offset (the first one wins); returns -1. */
int pk_fail(pk_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Replaces the memo entry that holds object o (if any) by a handle (1 <= handle < 2^31; others
 * are ignored): later references to it push the handle instead of the object, and o is freed
 * once nothing else holds it. */
void pk_memo_replace(pk_reader *r, pk_obj *o, int64_t handle);
/* Forgets the memo entry that holds o: a later reference to it is an error. */
void pk_forget(pk_reader *r, pk_obj *o);

/* Parses a whole pickle held in memory with no hook (the fuzzing entry point); 0 or -1 with a
 * message in err[errlen]. */
int pk_parse_buffer(const uint8_t *data, size_t len, const pk_limits *limits, char *err, size_t errlen);

/* ---- writer ------------------------------------------------------------------------------ */

/* Opcodes the writer uses (protocol 4; PyTorch's memory viewer reads these and few others). */
enum {
  PK_OP_MARK = '(', PK_OP_STOP = '.', PK_OP_NONE = 'N', PK_OP_NEWTRUE = 0x88, PK_OP_NEWFALSE = 0x89,
  PK_OP_EMPTY_DICT = '}', PK_OP_EMPTY_LIST = ']', PK_OP_APPEND = 'a', PK_OP_APPENDS = 'e',
  PK_OP_SETITEMS = 'u', PK_OP_TUPLE2 = 0x86, PK_OP_MEMOIZE = 0x94,
};

/* Writes through `write` (returns 0, or -1 on failure) in 64 KiB pieces. Errors are sticky:
 * check pkw_finish. */
typedef struct pk_writer {
  int (*write)(void *ctx, const void *buf, size_t n);
  void *ctx;
  uint64_t memo; /* memo entries made so far (the next MEMOIZE's index) */
  size_t n;
  bool failed;
  unsigned char buf[1 << 16];
} pk_writer;

void pkw_init(pk_writer *w, int (*write)(void *ctx, const void *buf, size_t n), void *ctx);
void pkw_proto(pk_writer *w); /* PROTO 4 */
void pkw_op(pk_writer *w, int op);
void pkw_int(pk_writer *w, int64_t v);
void pkw_float(pk_writer *w, double v);
void pkw_str(pk_writer *w, const char *s, size_t len); /* UTF-8; invalid bytes are written as '?' */
void pkw_cstr(pk_writer *w, const char *s);
/* MEMOIZE: the top of the stack becomes memo entry pkw_memoize's return value. */
uint64_t pkw_memoize(pk_writer *w);
void pkw_get(pk_writer *w, uint64_t index);
/* Writes STOP and flushes; 0, or -1 if any write failed. */
int pkw_finish(pk_writer *w);

#endif
