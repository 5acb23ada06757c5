/* test_options.c: the options parser (options.c), linked from its object files directly so the
 * internal parsers can be called. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testhelper.h"

static bool divisions_are(const char *spec, const uint32_t *want) {
  uint32_t got[MSI_POWER2_INTERVALS];
  if (msi_parse_power2_divisions(spec, got) != 0) return false;
  return memcmp(got, want, sizeof got) == 0;
}

int main(void) {
  size_t v = 0;
  CHECK("size: plain bytes", msi_parse_size("512", &v) == 0 && v == 512);
  CHECK("size: K M G T are binary", msi_parse_size("1G", &v) == 0 && v == ((size_t)1 << 30) &&
                                        msi_parse_size("64K", &v) == 0 && v == 65536 &&
                                        msi_parse_size("2T", &v) == 0 && v == ((size_t)2 << 40));
  CHECK("size: fractions and GiB/gb spellings", msi_parse_size("1.5GiB", &v) == 0 && v == ((size_t)3 << 29) &&
                                                    msi_parse_size("3mb", &v) == 0 && v == ((size_t)3 << 20));
  CHECK("size: garbage refused", msi_parse_size("", &v) && msi_parse_size("12Q", &v) && msi_parse_size("-1", &v) &&
                                     msi_parse_size("nan", &v) && msi_parse_size("1e30", &v));

  uint32_t all4[16], list[16] = {0}, first[16] = {0};
  for (int i = 0; i < 16; i++) all4[i] = 4;
  CHECK("divisions: one value fills every interval", divisions_are("4", all4));
  for (int i = 0; i <= 8; i++) list[i] = 1;
  list[9] = 2;
  for (int i = 10; i < 16; i++) list[i] = 8;
  CHECK("divisions: [256:1,512:2,>:8] as PyTorch reads it", divisions_are("[256:1,512:2,>:8]", list));
  for (int i = 0; i <= 0; i++) first[i] = 2;
  first[6] = 4; /* gaps between named entries stay off */
  CHECK("divisions: gaps after the first entry stay 0", divisions_are("[1:2,64:4]", first));
  uint32_t out[16];
  CHECK("divisions: not a power of two refused", msi_parse_power2_divisions("3", out) != 0 &&
                                                     msi_parse_power2_divisions("[100:2]", out) != 0 &&
                                                     msi_parse_power2_divisions("[256:3]", out) != 0);
  CHECK("divisions: malformed lists refused", msi_parse_power2_divisions("[256:2", out) != 0 &&
                                                  msi_parse_power2_divisions("[]", out) != 0 &&
                                                  msi_parse_power2_divisions("[256]", out) != 0);

  setenv("MEMSNAP_BACKEND", "sim", 1);
  setenv("MEMSNAP_SIM_CAPACITY", "3G", 1);
  setenv("MEMSNAP_MAX_SPLIT_SIZE_MB", "64", 1);
  setenv("MEMSNAP_OOM", "throw", 1);
  msi_options_load();
  CHECK("env: values applied", !strcmp(msi_opt.backend, "sim") && msi_opt.sim_capacity == ((size_t)3 << 30) &&
                                   msi_opt.max_split_size == ((size_t)64 << 20) && msi_opt.oom == MSI_OOM_THROW);

  setenv("MEMSNAP_MAX_SPLIT_SIZE_MB", "10", 1);
  setenv("MEMSNAP_GARBAGE_COLLECTION_THRESHOLD", "1.5", 1);
  setenv("MEMSNAP_BACKEND", "rocm", 1);
  msi_options_load();
  CHECK("env: invalid values keep defaults", msi_opt.max_split_size == SIZE_MAX && msi_opt.gc_threshold == 0 &&
                                                 !strcmp(msi_opt.backend, "cuda"));
  unsetenv("MEMSNAP_MAX_SPLIT_SIZE_MB");
  unsetenv("MEMSNAP_GARBAGE_COLLECTION_THRESHOLD");
  msi_options_load();
  CHECK("env: the warning names the variable and the value",
        strstr(memsnap_last_error(), "'rocm'") && strstr(memsnap_last_error(), "MEMSNAP_BACKEND"));
  setenv("MEMSNAP_BACKEND", "sim", 1);

  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False,max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6", 1);
  msi_options_load();
  CHECK("PYTORCH_CUDA_ALLOC_CONF: knobs applied, other keys ignored",
        msi_opt.max_split_size == ((size_t)128 << 20) && msi_opt.gc_threshold == 0.6 &&
            memcmp(msi_opt.power2_divisions, list, sizeof list) == 0);
  setenv("MEMSNAP_MAX_SPLIT_SIZE_MB", "256", 1);
  msi_options_load();
  CHECK("PYTORCH_CUDA_ALLOC_CONF: MEMSNAP_ variables win", msi_opt.max_split_size == ((size_t)256 << 20));
  setenv("MEMSNAP_MEMORY_FRACTION", "0.3", 1);
  msi_options_load();
  CHECK("env: memory fraction", msi_opt.memory_fraction == 0.3);

  /* Every row of the table: its default is what a fresh load gives, and the value printed back
   * (memsnap options, a snapshot's options) reads in again as the same value. */
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  for (int i = 0; i < msi_option_count(); i++) unsetenv(memsnap_option_info(i, NULL, NULL));
  setenv("MEMSNAP_BACKEND", "sim", 1);
  setenv("MEMSNAP_ROUNDUP_POWER2_DIVISIONS", "[256:1,512:2,>:8]", 1);
  setenv("MEMSNAP_DUMP_SIGNAL", "USR2", 1);
  setenv("MEMSNAP_STACKS", "python", 1);
  setenv("MEMSNAP_ALLOCATOR", "cudaMallocAsync", 1);
  msi_options_load();
  bool round_trips = msi_option_count() > 0;
  for (int i = 0; i < msi_option_count(); i++) {
    char before[512], after[512];
    const char *def, *var = memsnap_option_info(i, &def, NULL);
    msi_option_value(i, before, sizeof before);
    if (before[0] && strcmp(before, def) != 0) setenv(var, before, 1); /* an off default may be unwritable */
    msi_options_load();
    msi_option_value(i, after, sizeof after);
    if (strcmp(before, after) != 0) {
      fprintf(stderr, "  %s: '%s' read back as '%s'\n", var, before, after);
      round_trips = false;
    }
  }
  CHECK("table: every option's printed value reads back as itself", round_trips);
  CHECK("table: the alias cudaMallocAsync prints as async", msi_opt.async_mode);
  char shown[64];
  int row = 0;
  while (memsnap_option_info(row, NULL, NULL) && strcmp(memsnap_option_info(row, NULL, NULL), "MEMSNAP_ALLOCATOR")) row++;
  msi_option_value(row, shown, sizeof shown);
  CHECK("table: allocator's row prints it by its first name", memsnap_option_info(row, NULL, NULL) && !strcmp(shown, "async"));
  CHECK("table: a runtime option is settable, a load-time one refused",
        msi_option_set("stacks", "native") == MEMSNAP_OK && msi_opt.stacks == MSI_STACKS_NATIVE &&
            msi_option_set("max_split_size_mb", "64") == MEMSNAP_EINVAL && strstr(memsnap_last_error(), "read only"));
  TEST_DONE();
}
