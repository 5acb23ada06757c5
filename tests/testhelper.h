/* testhelper.h: the tests' minimal harness (after mimalloc's test/testhelper.h).
 *
 *   CHECK(name, expr)   one named check; prints "ok name" or "FAIL name (file:line)"
 *   TEST_DONE()         prints "N passed, N failed" and returns the failure count
 *   th_environment()    sets the environment of one test configuration
 *
 * run_tests.sh sums the counts of every test program.
 */
#ifndef MEMSNAP_TESTHELPER_H
#define MEMSNAP_TESTHELPER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Unsets the variables of `names` (NULL-terminated), then sets "NAME=value;NAME=value". */
static inline void th_environment(const char *const *names, const char *settings) {
  for (; *names; names++) unsetenv(*names);
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", settings);
  for (char *item = strtok(buf, ";"); item; item = strtok(NULL, ";")) {
    char *eq = strchr(item, '=');
    if (!eq) continue;
    *eq = '\0';
    setenv(item, eq + 1, 1);
  }
}

#endif
