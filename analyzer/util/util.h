/* util.h: the analyzer's helpers that know nothing of snapshots (prefix ms_): growing arrays
 * (grow.c), an index of strings kept elsewhere and a table of distinct strings (strindex.c),
 * output files written atomically (outfile.c). Everything above may call them; they call
 * nothing of the analyzer.
 */
#ifndef MEMSNAP_UTIL_H
#define MEMSNAP_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- growing arrays (grow.c) ------------------------------------------------------------- */

/* Grows the array at *array (*cap elements of `size` bytes, doubling) to hold `need` elements;
 * false when out of memory (*array and *cap unchanged). Every pass's growing lists. */
bool ms_grow(void *array, size_t *cap, size_t need, size_t size);

/* ---- an index of strings kept elsewhere (strindex.c) ------------------------------------- */

typedef struct ms_str_index {
  uint32_t *slots; /* entry + 1; 0 empty */
  size_t mask;
} ms_str_index;

/* Finds `key` among the caller's entries 0 to n-1 (key_of(ctx, i) is entry i's key): its number;
 * or -1 when absent, with *slot where the caller records entry n if it adds it
 * (ix->slots[*slot] = n + 1); or -2 when out of memory. */
int64_t ms_str_find(ms_str_index *ix, const char *key, size_t n, const char *(*key_of)(const void *ctx, size_t i),
                    const void *ctx, size_t *slot);
void ms_str_index_free(ms_str_index *ix);

/* Each distinct string once, numbered in the order added (copies, owned). */
typedef struct ms_strtab {
  char **keys;
  size_t n, cap;
  ms_str_index index;
} ms_strtab;
/* The number of s, added (*added true) if new; -1 when out of memory. */
int64_t ms_strtab_add(ms_strtab *t, const char *s, bool *added);
void ms_strtab_free(ms_strtab *t);

/* ---- output files (outfile.c) ------------------------------------------------------------ */

/* Prints "error: OPTION 'out' is an input: refusing to overwrite it" and returns 1 when `out` is
 * the same file as one of inputs[0..n) (by device and inode, so links count); else 0. */
int ms_refuse_overwrite(const char *option, const char *out, const char *const *inputs, size_t n);
/* The temporary name that `out` is written under: "<out>.tmp-<pid>", in the same directory. */
void ms_temp_path(const char *out, char *tmp, size_t len);
/* Syncs tmp and renames it over out (then syncs the directory). 0, or -1 with errno set and tmp
 * removed. */
int ms_commit(const char *tmp, const char *out);

#endif
