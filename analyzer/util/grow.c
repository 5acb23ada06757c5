/* grow.c: arrays that grow by doubling (ms_grow), for every list the analyzer's passes build
 * while they read: one helper instead of a realloc dance in each file. */
#include <stdlib.h>

#include "util.h"

bool ms_grow(void *array, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void *g = realloc(*(void **)array, c * size);
  if (!g) return false;
  *(void **)array = g;
  *cap = c;
  return true;
}
