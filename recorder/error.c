/* error.c: error messages of the library.
 *
 * Every failure leaves a message in a thread-local buffer that memsnap_last_error() returns.
 * Nothing here runs on the allocation fast path: only failures and option warnings format.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static __thread char last_error[512];
__thread msi_oom_info msi_last_oom;

static void vformat(const char *fmt, va_list ap) {
  vsnprintf(last_error, sizeof last_error, fmt, ap);
}

void msi_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vformat(fmt, ap);
  va_end(ap);
}

void msi_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vformat(fmt, ap);
  va_end(ap);
  fprintf(stderr, "memsnap: warning: %s\n", last_error);
}

void msi_clear_error(void) { last_error[0] = '\0'; }

const char *memsnap_last_error(void) { return last_error; }
