/* many_callers.h: one allocation site reached from NCALLERS caller functions at the same depth
 * (PyTorch: one allocation path under many ops), so that stacks begin alike and differ only far
 * out; for test_stacks.c (their stacks checked) and bench_stacks.c (their cost). The including
 * file defines MANY_CALLERS_LEAF(), the allocation made at the end of the path, first. */
#ifndef MANY_CALLERS_H
#define MANY_CALLERS_H

/* depth - 1 frames of itself, then the leaf. */
static __attribute__((noipa)) void common_path(int depth) {
  if (depth > 1) common_path(depth - 1);
  else MANY_CALLERS_LEAF();
  __asm__ volatile("" ::: "memory"); /* not a tail call: keep this frame */
}

#define CALLER(i) \
  static __attribute__((noipa)) void caller_##i(int depth) { \
    common_path(depth); \
    __asm__ volatile("" ::: "memory"); \
  }
CALLER(0) CALLER(1) CALLER(2) CALLER(3) CALLER(4) CALLER(5) CALLER(6) CALLER(7) CALLER(8) CALLER(9) CALLER(10)
CALLER(11) CALLER(12) CALLER(13) CALLER(14) CALLER(15) CALLER(16) CALLER(17) CALLER(18) CALLER(19)
#undef CALLER
static void (*const callers[])(int) = {caller_0,  caller_1,  caller_2,  caller_3,  caller_4,  caller_5,  caller_6,
                                       caller_7,  caller_8,  caller_9,  caller_10, caller_11, caller_12, caller_13,
                                       caller_14, caller_15, caller_16, caller_17, caller_18, caller_19};
enum { NCALLERS = sizeof callers / sizeof callers[0] };

#endif
