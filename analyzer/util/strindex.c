/* strindex.c: an index of strings kept elsewhere, found by hash (open addressing, at most half
 * full). The caller owns the entries (0 to n-1 of its own array) and says how to read an entry's
 * key; the index holds entry numbers only. Used by the label tally that chooses iterations
 * (analysis/analyze.c) and the sites matched across snapshots (match.c); ms_strtab, each distinct string
 * once and numbered, by the page's string table (report/page.c) and the frame keys of match.c.
 */
#include <stdlib.h>
#include <string.h>

#include "util.h"

static uint64_t hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

int64_t ms_str_find(ms_str_index *ix, const char *key, size_t n, const char *(*key_of)(const void *ctx, size_t i),
                    const void *ctx, size_t *slot) {
  if ((n + 1) * 2 > ix->mask + 1 || !ix->slots) { /* grow (and rehash) before it is half full */
    size_t cap = ix->mask ? (ix->mask + 1) * 2 : 256;
    while ((n + 1) * 2 > cap) cap *= 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -2;
    for (size_t i = 0; i < n; i++) {
      size_t j = hash(key_of(ctx, i)) & (cap - 1);
      while (slots[j]) j = (j + 1) & (cap - 1);
      slots[j] = (uint32_t)i + 1;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->mask = cap - 1;
  }
  size_t j = hash(key) & ix->mask;
  for (; ix->slots[j]; j = (j + 1) & ix->mask)
    if (strcmp(key_of(ctx, ix->slots[j] - 1), key) == 0) return ix->slots[j] - 1;
  *slot = j;
  return -1;
}

void ms_str_index_free(ms_str_index *ix) {
  free(ix->slots);
  ix->slots = NULL;
  ix->mask = 0;
}

static const char *strtab_key(const void *ctx, size_t i) { return ((const ms_strtab *)ctx)->keys[i]; }

int64_t ms_strtab_add(ms_strtab *t, const char *s, bool *added) {
  size_t slot;
  *added = false;
  int64_t found = ms_str_find(&t->index, s, t->n, strtab_key, t, &slot);
  if (found != -1) return found == -2 ? -1 : found;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    char **keys = realloc(t->keys, sizeof *keys * cap);
    if (!keys) return -1;
    t->keys = keys;
    t->cap = cap;
  }
  if (!(t->keys[t->n] = strdup(s))) return -1;
  t->index.slots[slot] = (uint32_t)t->n + 1;
  *added = true;
  return (int64_t)t->n++;
}

void ms_strtab_free(ms_strtab *t) {
  for (size_t i = 0; i < t->n; i++) free(t->keys[i]);
  free(t->keys);
  ms_str_index_free(&t->index);
  memset(t, 0, sizeof *t);
}
