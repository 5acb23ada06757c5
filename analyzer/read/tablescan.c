/* tablescan.c: the rows of one SQLite table read straight from the database file's b-tree
 * pages, without SQLite's virtual machine: some 700 instructions a row of events where SQLite
 * spends 2,800 (callgrind, 1 million events).
 *
 * SQLite's file format is public and stable (https://www.sqlite.org/fileformat2.html). A rowid
 * table is a b-tree: interior pages (type 0x05) hold child page numbers in rowid order, leaf
 * pages (0x0d) hold the rows as cells: varint payload size, varint rowid, then a record (a header
 * of varint serial types, then the values). ms_tablescan_open walks the interior pages once and
 * keeps the leaves' page numbers in order (4 bytes per leaf: some 30 KB per million rows); the
 * leaves are then decoded in ranges, by several threads at once (pread on one descriptor).
 *
 * Every byte is untrusted. This reader handles only what memsnap's tables hold: integer and NULL
 * values in records that fit on their page. Anything else (a text or real value, an overflowing
 * record, a page number outside the file, a cycle, a tree deeper than SQLite allows, a bad
 * offset) is an anomaly: the call reports it and the caller reads the rest through SQLite, which
 * has its own answer for every case. The file must not change while it is read: the caller uses
 * this only for a database without a write-ahead log or a hot journal.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tablescan.h"

#define MAX_DEPTH 20 /* SQLite's own limit on a b-tree's depth (BTCURSOR_MAX_DEPTH) */

struct ms_tablescan {
  int fd;
  uint32_t page_size, usable; /* usable: the page less its reserved bytes */
  uint64_t npages;            /* in the file */
  uint32_t *leaves;
  size_t nleaves, capleaves;
};

/* A varint at p (at most 9 bytes, none past end); its length, 0 when it runs past end. */
static inline int varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
  if (p < end && !(*p & 0x80)) { /* one byte: every serial type of an integer, most sizes */
    *v = *p;
    return 1;
  }
  uint64_t x = 0;
  for (int i = 0; i < 8; i++) {
    if (p + i >= end) return 0;
    x = (x << 7) | (p[i] & 0x7f);
    if (!(p[i] & 0x80)) {
      *v = x;
      return i + 1;
    }
  }
  if (p + 8 >= end) return 0;
  *v = (x << 8) | p[8];
  return 9;
}

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Page n (1-based) into buf; false when it cannot be read whole. */
static bool read_page(const ms_tablescan *t, uint32_t n, uint8_t *buf) {
  if (n == 0 || n > t->npages) return false;
  off_t off = (off_t)(n - 1) * t->page_size;
  size_t got = 0;
  while (got < t->page_size) {
    ssize_t r = pread(t->fd, buf + got, t->page_size - got, off + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

/* Where page n's b-tree header starts (page 1 holds the file header first). */
static size_t header_offset(uint32_t n) { return n == 1 ? 100 : 0; }

/* The page's cell count and where its cell pointers start; false for a header that does not
 * fit the page. */
static bool cells(const ms_tablescan *t, uint32_t n, const uint8_t *page, uint32_t *ncells, size_t *pointers) {
  size_t h = header_offset(n);
  size_t header = page[h] == 0x05 ? 12 : 8;
  *ncells = be16(page + h + 3);
  *pointers = h + header;
  return *pointers + (size_t)*ncells * 2 <= t->usable;
}

static bool add_leaf(ms_tablescan *t, uint32_t n) {
  if (t->nleaves == t->capleaves) {
    size_t c = t->capleaves ? t->capleaves * 2 : 256;
    uint32_t *g = realloc(t->leaves, c * sizeof *g);
    if (!g) return false;
    t->leaves = g;
    t->capleaves = c;
  }
  t->leaves[t->nleaves++] = n;
  return true;
}

/* Collects the leaves under page n in order; false at an anomaly. `seen` marks the interior
 * pages visited (each at most once: a cycle or a shared child is an anomaly). */
static bool walk(ms_tablescan *t, uint32_t n, int depth, uint8_t *seen, uint8_t *buf) {
  if (depth > MAX_DEPTH || n == 0 || n > t->npages || (seen[(n - 1) / 8] & (1u << ((n - 1) % 8)))) return false;
  seen[(n - 1) / 8] |= (uint8_t)(1u << ((n - 1) % 8));
  uint8_t *page = buf + (size_t)depth * t->page_size;
  if (!read_page(t, n, page)) return false;
  size_t h = header_offset(n);
  if (page[h] == 0x0d) return add_leaf(t, n);
  if (page[h] != 0x05) return false;
  uint32_t ncells;
  size_t ptrs;
  if (!cells(t, n, page, &ncells, &ptrs)) return false;
  for (uint32_t i = 0; i < ncells; i++) {
    size_t at = be16(page + ptrs + 2 * (size_t)i);
    if (at < ptrs + 2 * (size_t)ncells || at + 4 > t->usable) return false;
    if (!walk(t, be32(page + at), depth + 1, seen, buf)) return false;
  }
  return walk(t, be32(page + h + 8), depth + 1, seen, buf);
}

ms_tablescan *ms_tablescan_open(const char *path, uint32_t root) {
  ms_tablescan *t = calloc(1, sizeof *t);
  uint8_t header[100], *seen = NULL, *buf = NULL;
  struct stat st;
  if (!t) return NULL;
  t->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (t->fd < 0 || fstat(t->fd, &st) != 0 || pread(t->fd, header, sizeof header, 0) != (ssize_t)sizeof header ||
      memcmp(header, "SQLite format 3", 16) != 0)
    goto fail;
  t->page_size = be16(header + 16) == 1 ? 65536 : be16(header + 16);
  if (t->page_size < 512 || (t->page_size & (t->page_size - 1)) || header[20] > t->page_size - 480)
    goto fail;
  t->usable = t->page_size - header[20];
  t->npages = (uint64_t)st.st_size / t->page_size;
  if (t->npages == 0 || t->npages > UINT32_MAX) goto fail;
  seen = calloc((size_t)(t->npages + 7) / 8, 1);
  buf = malloc((size_t)(MAX_DEPTH + 1) * t->page_size);
  if (!seen || !buf || !walk(t, root, 0, seen, buf)) goto fail;
  free(seen);
  free(buf);
  return t;
fail:
  free(seen);
  free(buf);
  ms_tablescan_close(t);
  return NULL;
}

size_t ms_tablescan_leaves(const ms_tablescan *t) { return t->nleaves; }

size_t ms_tablescan_page_size(const ms_tablescan *t) { return t->page_size; }

/* One record: up to MS_TABLESCAN_COLUMNS values; columns the record lacks are NULL. False at an
 * anomaly (a value that is not an integer or NULL, a header past the payload). */
static bool record(const uint8_t *p, const uint8_t *end, ms_tablescan_row *row) {
  uint64_t hsize;
  int k = varint(p, end, &hsize);
  if (!k || hsize > (uint64_t)(end - p) || hsize < (uint64_t)k) return false;
  const uint8_t *types = p + k, *types_end = p + hsize, *value = types_end;
  row->nulls = 0;
  for (int c = 0; c < MS_TABLESCAN_COLUMNS; c++) {
    uint64_t type = 0; /* past the header's end: NULL */
    if (types < types_end) {
      int n = varint(types, types_end, &type);
      if (!n) return false;
      types += n;
    }
    static const uint8_t width[10] = {0, 1, 2, 3, 4, 6, 8, 0, 0, 0};
    if (type == 7 || type > 9) return false; /* a real, text or blob: SQLite converts those */
    if ((uint64_t)(end - value) < width[type]) return false;
    int64_t v = 0;
    if (type == 0) {
      row->nulls |= 1u << c;
    } else if (type >= 8) {
      v = (int64_t)type - 8;
    } else {
      uint64_t u = value[0] & 0x80 ? UINT64_MAX : 0; /* big-endian two's complement, sign-extended */
      for (int i = 0; i < width[type]; i++) u = (u << 8) | value[i];
      v = (int64_t)u;
      value += width[type];
    }
    row->values[c] = v;
  }
  return true;
}

int ms_tablescan_rows(const ms_tablescan *t, size_t from, size_t to, uint8_t *page,
                      int (*fn)(const ms_tablescan_row *row, void *arg), void *arg) {
  if (to > t->nleaves) to = t->nleaves;
  size_t max_local = t->usable - 35; /* a table leaf's payload above this overflows */
  for (size_t l = from; l < to; l++) {
    uint32_t n = t->leaves[l];
    if (!read_page(t, n, page) || page[header_offset(n)] != 0x0d) return -1;
    uint32_t ncells;
    size_t ptrs;
    if (!cells(t, n, page, &ncells, &ptrs)) return -1;
    const uint8_t *end = page + t->usable;
    for (uint32_t i = 0; i < ncells; i++) {
      size_t at = be16(page + ptrs + 2 * (size_t)i);
      if (at < ptrs + 2 * (size_t)ncells || at >= t->usable) return -1;
      const uint8_t *p = page + at;
      uint64_t payload, rowid;
      int a = varint(p, end, &payload);
      int b = a ? varint(p + a, end, &rowid) : 0;
      if (!b || payload > max_local || payload > (uint64_t)(end - (p + a + b))) return -1;
      ms_tablescan_row row;
      row.rowid = (int64_t)rowid;
      if (!record(p + a + b, p + a + b + payload, &row)) return -1;
      int rc = fn(&row, arg);
      if (rc) return rc;
    }
  }
  return 0;
}

void ms_tablescan_close(ms_tablescan *t) {
  if (!t) return;
  if (t->fd >= 0) close(t->fd);
  free(t->leaves);
  free(t);
}
