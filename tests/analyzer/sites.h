/* sites.h: named allocation sites for the snapshot generators (gen_snapshots.c, gen_releases.c,
 * gen_ranks.c): SITE(name) defines `void *name(size_t n)`, memsnap_malloc of n bytes on device
 * 0's default stream (NULL when it fails), a frame of its own (noipa and the barrier: no
 * inlining, folding or tail call), so that the tests find an allocation's stack by its name.
 */
#ifndef MEMSNAP_TESTS_SITES_H
#define MEMSNAP_TESTS_SITES_H

#include <stddef.h>

#include "memsnap.h"

#define SITE(name)                                     \
  static __attribute__((noipa)) void *name(size_t n) { \
    void *p = memsnap_malloc((ssize_t)n, 0, NULL);     \
    __asm__ volatile("" ::: "memory");                 \
    return p;                                          \
  }

#endif
