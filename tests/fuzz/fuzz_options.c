/* fuzz_options.c: libFuzzer target for the options parser (recorder/options.c): every MEMSNAP_*
 * variable and PYTORCH_CUDA_ALLOC_CONF set to the input, then loaded; the size and
 * roundup_power2_divisions parsers and the dump path patterns (%p, %r, %h, %t) on it directly.
 * The first byte picks the variable; the rest, up to a NUL, is the value.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int n = msi_option_count();
  char *value = malloc(size);
  if (!value) return 0;
  memcpy(value, data + 1, size - 1);
  value[size - 1] = '\0';
  int k = data[0] % (n + 1);
  char var[64];
  if (k == n) snprintf(var, sizeof var, "PYTORCH_CUDA_ALLOC_CONF");
  else snprintf(var, sizeof var, "%s", memsnap_option_info(k, NULL, NULL));
  setenv(var, value, 1);
  msi_options_load();
  unsetenv(var);
  size_t bytes;
  msi_parse_size(value, &bytes);
  uint32_t div[MSI_POWER2_INTERVALS];
  msi_parse_power2_divisions(value, div);
  if (msi_option_set("dump", value) == MEMSNAP_OK) {
    char out[4096];
    msi_dump_path(false, out, sizeof out);
  }
  char shown[4096];
  for (int i = 0; i < n; i++) msi_option_value(i, shown, sizeof shown);
  free(value);
  return 0;
}
