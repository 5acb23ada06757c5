/* import_base.c: what the importer's files share, below all of them: the first error kept
 * (imp_fail), arrays grown (imp_reserve), a pickle's fields read and checked with the object and
 * key named in the error (imp_get_int, imp_get_str), and statements run (imp_step). It calls
 * nothing of the importer; import_stage.c, import_intern.c, import_map.c and import.c sit
 * above it in that order (importer.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "importer.h"

/* ---- errors and arrays ------------------------------------------------------------------- */

int imp_fail(importer *im, const char *fmt, ...) {
  if (im->failed) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(im->error, sizeof im->error, fmt, ap);
  va_end(ap);
  im->failed = true;
  if (im->streaming) pk_fail(im->r, "%s", im->error);
  return -1;
}

int imp_reserve(importer *im, void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return 0;
  size_t c = *cap ? *cap * 2 : 64;
  void *g = realloc(*arr, c * size);
  if (!g) return imp_fail(im, "out of memory");
  *arr = g;
  *cap = c;
  return 0;
}

/* ---- reading fields ----------------------------------------------------------------------- */

const char *imp_where_text(const where *w, char *buf, size_t len) {
  if (w->sub >= 0) snprintf(buf, len, "%s %" PRId64 " block %" PRId64, w->what, w->id_index, w->sub);
  else snprintf(buf, len, "%s %" PRId64, w->what, w->id_index);
  return buf;
}

int imp_field_error(importer *im, const where *w, const char *key, const pk_value *v, const char *expected) {
  char buf[96];
  if (!v) return imp_fail(im, "%s: '%s' is missing", imp_where_text(w, buf, sizeof buf), key);
  return imp_fail(im, "%s: '%s' is %s %s, expected %s", imp_where_text(w, buf, sizeof buf), key,
                  v->kind == PK_BIGINT ? "an integer out of range, an" : "a", pk_type_name(v), expected);
}

/* d[key] as an integer in [lo, hi]: *out, or def when absent and not required. 0 or -1. */
int imp_get_int(importer *im, const pk_obj *d, const char *key, const where *w, bool required, int64_t def,
                int64_t lo, int64_t hi, int64_t *out) {
  const pk_value *v = pk_dict_get(d, key);
  if (!v || v->kind == PK_NONE) {
    if (required) return imp_field_error(im, w, key, NULL, "an integer");
    *out = def;
    return 0;
  }
  if (v->kind == PK_INT || v->kind == PK_BOOL) *out = v->i;
  else if (v->kind == PK_FLOAT && v->f >= -9.2e18 && v->f <= 9.2e18) *out = (int64_t)v->f;
  else return imp_field_error(im, w, key, v, "an integer");
  if (*out < lo || *out > hi) {
    char buf[96];
    return imp_fail(im, "%s: '%s' is %" PRId64 ", outside %" PRId64 "..%" PRId64, imp_where_text(w, buf, sizeof buf),
                    key, *out, lo, hi);
  }
  return 0;
}

/* d[key] as a string (sanitized to UTF-8 in place): *out and *len, or "" when absent. */
int imp_get_str(importer *im, const pk_obj *d, const char *key, const where *w, bool required, const char **out,
                size_t *len) {
  const pk_value *v = pk_dict_get(d, key);
  if (!v || v->kind == PK_NONE) {
    if (required) return imp_field_error(im, w, key, NULL, "a string");
    *out = "";
    *len = 0;
    return 0;
  }
  if (!pk_is(v, PK_STR)) return imp_field_error(im, w, key, v, "a string");
  pk_utf8_sanitize(v->o->s, v->o->len);
  *out = v->o->s;
  *len = v->o->len;
  return 0;
}

/* ---- statements -------------------------------------------------------------------------- */

int imp_db_fail(importer *im) { return imp_fail(im, "cannot write the snapshot: %s", sqlite3_errmsg(im->db)); }

int imp_step(importer *im, sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : imp_db_fail(im);
}
