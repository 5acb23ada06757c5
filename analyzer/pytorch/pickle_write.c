/* pickle_write.c: the pickle writer of pickle.h, for `memsnap export --format pytorch`.
 *
 * It emits protocol 4 with the opcodes that both Python and PyTorch's JavaScript unpickler
 * (MemoryViz.js) read, buffered through the caller's write function; the first failed write
 * makes every later call a no-op and pkw_finish return -1.
 */
#include "pickle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(pk_writer *w, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n > 0 && !w->failed) {
    if (w->n == sizeof w->buf) {
      if (w->write(w->ctx, w->buf, w->n) != 0) w->failed = true;
      w->n = 0;
    }
    size_t k = sizeof w->buf - w->n < n ? sizeof w->buf - w->n : n;
    memcpy(w->buf + w->n, b, k);
    w->n += k;
    b += k;
    n -= k;
  }
}

static void put_le(pk_writer *w, uint64_t v, size_t n) {
  unsigned char b[8];
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
  put(w, b, n);
}

void pkw_init(pk_writer *w, int (*write)(void *ctx, const void *buf, size_t n), void *ctx) {
  w->write = write;
  w->ctx = ctx;
  w->memo = 0;
  w->n = 0;
  w->failed = false;
}

void pkw_op(pk_writer *w, int op) {
  unsigned char c = (unsigned char)op;
  put(w, &c, 1);
}

void pkw_proto(pk_writer *w) {
  pkw_op(w, 0x80);
  pkw_op(w, 4);
}

void pkw_int(pk_writer *w, int64_t v) {
  if (v >= 0 && v < 256) {
    pkw_op(w, 'K');
    put_le(w, (uint64_t)v, 1);
  } else if (v >= 0 && v < 65536) {
    pkw_op(w, 'M');
    put_le(w, (uint64_t)v, 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    pkw_op(w, 'J');
    put_le(w, (uint64_t)v, 4);
  } else { /* LONG1, the fewest bytes that keep the sign */
    size_t n = 8;
    while (n > 1) {
      int64_t top = v >> (8 * (n - 1) - 1); /* the bits that a shorter form would drop, and its sign bit */
      if (top != 0 && top != -1) break;
      n--;
    }
    pkw_op(w, 0x8a);
    pkw_op(w, (int)n);
    put_le(w, (uint64_t)v, n);
  }
}

void pkw_float(pk_writer *w, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(u >> (56 - 8 * i));
  pkw_op(w, 'G');
  put(w, b, 8);
}

void pkw_str(pk_writer *w, const char *s, size_t len) {
  if (len < 256) {
    pkw_op(w, 0x8c);
    put_le(w, len, 1);
  } else {
    pkw_op(w, 'X');
    put_le(w, len > UINT32_MAX ? UINT32_MAX : len, 4);
    if (len > UINT32_MAX) len = UINT32_MAX;
  }
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    size_t k = pk_utf8_len(p + i, len - i);
    if (k) {
      put(w, p + i, k);
      i += k;
    } else {
      put(w, "?", 1);
      i++;
    }
  }
}

void pkw_cstr(pk_writer *w, const char *s) { pkw_str(w, s, strlen(s)); }

uint64_t pkw_memoize(pk_writer *w) {
  pkw_op(w, 0x94);
  return w->memo++;
}

void pkw_get(pk_writer *w, uint64_t index) {
  if (index < 256) {
    pkw_op(w, 'h');
    put_le(w, index, 1);
  } else {
    pkw_op(w, 'j');
    put_le(w, index, 4);
  }
}

int pkw_finish(pk_writer *w) {
  pkw_op(w, '.');
  if (!w->failed && w->n && w->write(w->ctx, w->buf, w->n) != 0) w->failed = true;
  w->n = 0;
  return w->failed ? -1 : 0;
}
