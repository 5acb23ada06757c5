/* testhelper.h: the tests' minimal harness (after mimalloc's test/testhelper.h).
 *
 *   CHECK(name, expr)   one named check; prints "ok name" or "FAIL name (file:line)"
 *   TEST_DONE()         prints "N passed, N failed" and returns the failure count
 *
 * run_tests.sh sums the counts of every test program.
 */
#ifndef MEMSNAP_TESTHELPER_H
#define MEMSNAP_TESTHELPER_H

#include <stdio.h>

static int th_passed, th_failed;

#define CHECK(name, expr)                                                   \
  do {                                                                      \
    if (expr) {                                                             \
      th_passed++;                                                          \
      printf("ok   %s\n", name);                                            \
    } else {                                                                \
      th_failed++;                                                          \
      printf("FAIL %s (%s:%d: %s)\n", name, __FILE__, __LINE__, #expr);     \
    }                                                                       \
    fflush(stdout);                                                         \
  } while (0)

#define TEST_DONE()                                             \
  do {                                                          \
    printf("%d passed, %d failed\n", th_passed, th_failed);     \
    return th_failed ? 1 : 0;                                   \
  } while (0)

#endif
