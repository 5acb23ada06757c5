/* options.c: the one table of options, read from the environment.
 *
 * Each option is a row of `table` below: its name, its default and a one-line comment. The
 * environment variable is MEMSNAP_ followed by the name in upper case. An invalid value is
 * reported with a warning that names the variable and the value, and the default is kept.
 *
 * The allocator's tuning knobs keep PyTorch's names and meanings, so a user's existing
 * PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) "key:value,key:value" string applies too;
 * a MEMSNAP_ variable wins over it.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

msi_options msi_opt;
static pthread_mutex_t path_lock = PTHREAD_MUTEX_INITIALIZER; /* msi_opt.dump, .dump_on_oom */

enum { OPT_BACKEND, OPT_SIM_CAPACITY, OPT_SIM_DEVICES, OPT_SIM_OLD_DRIVER, OPT_ALLOCATOR, OPT_EXPANDABLE_SEGMENTS,
       OPT_MAX_SPLIT_SIZE_MB, OPT_MAX_NON_SPLIT_ROUNDING_MB,
       OPT_ROUNDUP_POWER2_DIVISIONS, OPT_GC_THRESHOLD, OPT_MEMORY_FRACTION, OPT_OOM, OPT_RECORD,
       OPT_MAX_ENTRIES, OPT_STACKS, OPT_DUMP, OPT_DUMP_ON_OOM, OPT_DUMP_SIGNAL, OPT_INTERCEPT_CACHE, OPT_COUNT };

static const msi_option_info table[OPT_COUNT] = {
    [OPT_BACKEND] = {"backend", "cuda", "device backend: cuda (the GPU, through libcuda) or sim (simulated device)"},
    [OPT_SIM_CAPACITY] = {"sim_capacity", "16G", "memory of each simulated device (bytes; K, M, G, T suffixes)"},
    [OPT_SIM_DEVICES] = {"sim_devices", "1", "number of simulated devices"},
    [OPT_SIM_OLD_DRIVER] = {"sim_old_driver", "0", "1: the simulated driver lacks virtual memory management and stream-ordered pools (to try the fallbacks)"},
    [OPT_ALLOCATOR] = {"allocator", "native", "native (the caching allocator) or async (the driver's stream-ordered pool, like PyTorch's backend:cudaMallocAsync)"},
    [OPT_EXPANDABLE_SEGMENTS] = {"expandable_segments", "0", "1: grow one segment per stream and pool in place, mapping pages through the driver's virtual memory API (PyTorch's expandable_segments:True)"},
    [OPT_MAX_SPLIT_SIZE_MB] = {"max_split_size_mb", "unlimited", "blocks at least this large (MiB) are never split; at least 20"},
    [OPT_MAX_NON_SPLIT_ROUNDING_MB] = {"max_non_split_rounding_mb", "20", "a request of at least max_split_size may take a cached block up to this much (MiB) larger"},
    [OPT_ROUNDUP_POWER2_DIVISIONS] = {"roundup_power2_divisions", "0", "round sizes to N divisions of a power of two: N or [256:1,512:2,>:8] (MiB keys)"},
    [OPT_GC_THRESHOLD] = {"garbage_collection_threshold", "0", "with a memory fraction set, free old cached blocks above this share of it (0 < t < 1)"},
    [OPT_MEMORY_FRACTION] = {"memory_fraction", "1.0", "cap each device at this share of its memory (0..1; 1 is no cap), like set_per_process_memory_fraction"},
    [OPT_OOM] = {"oom", "null", "on out of memory in memsnap_malloc: null (return NULL), throw (raise torch.OutOfMemoryError; set by memsnap.enable), abort"},
    [OPT_RECORD] = {"record", "0", "1: record history from the first allocation (else memsnap_record_start)"},
    [OPT_MAX_ENTRIES] = {"max_entries", "100000", "events kept in the ring (64 bytes each); older ones are dropped and counted"},
    [OPT_STACKS] = {"stacks", "all", "stacks recorded with each event: none, native, python or all"},
    [OPT_DUMP] = {"dump", "", "write a snapshot to this path at exit (%p pid, %r rank, %h host, %t time)"},
    [OPT_DUMP_ON_OOM] = {"dump_on_oom", "", "write a snapshot to this path at the first out of memory (same patterns)"},
    [OPT_DUMP_SIGNAL] = {"dump_signal", "", "signal (USR1, USR2 or a number) that writes a snapshot to MEMSNAP_DUMP"},
    [OPT_INTERCEPT_CACHE] = {"intercept_cache", "0", "1: the intercept library (memsnap run --cache) serves cudaMalloc/cudaFree from the caching allocator"},
};

const msi_option_info *msi_option_table(int *count) {
  *count = OPT_COUNT;
  return table;
}

static void env_name(const char *name, char *var, size_t len) {
  size_t k = (size_t)snprintf(var, len, "MEMSNAP_");
  for (const char *c = name; *c && k + 1 < len; c++) var[k++] = (char)toupper((unsigned char)*c);
  var[k] = '\0';
}

const char *memsnap_option_info(int i, const char **default_value, const char **comment) {
  static char vars[OPT_COUNT][48];
  if (i < 0 || i >= OPT_COUNT) return NULL;
  if (!vars[i][0]) env_name(table[i].name, vars[i], sizeof vars[i]);
  if (default_value) *default_value = table[i].default_str;
  if (comment) *comment = table[i].comment;
  return vars[i];
}

int msi_parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || v < 0 || !isfinite(v)) return -1;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return -1;
  double bytes = v * mult;
  if (bytes >= 18446744073709551615.0) return -1;
  *out = (size_t)bytes;
  return 0;
}

static int parse_uint(const char *s, const char *end, unsigned long *out) {
  if (s == end) return -1;
  unsigned long v = 0;
  for (; s < end; s++) {
    if (!isdigit((unsigned char)*s) || v > 100000000ul) return -1;
    v = v * 10 + (unsigned long)(*s - '0');
  }
  *out = v;
  return 0;
}

static bool is_power_of_two(unsigned long v) { return v && !(v & (v - 1)); }

/* PyTorch accepts divisions that are powers of two (0 or 1: off). The list form maps interval
 * starts in MiB (powers of two; index log2(MiB), clamped to 0..15) to divisions: the first entry
 * also fills every interval below it, ">" fills every interval after the highest one named, and
 * other gaps stay off, as in c10/core/AllocatorConfig.cpp. */
int msi_parse_power2_divisions(const char *s, uint32_t out[MSI_POWER2_INTERVALS]) {
  uint32_t v[MSI_POWER2_INTERVALS] = {0};
  size_t len = strlen(s);
  unsigned long n;
  if (len && s[0] != '[') {
    if (parse_uint(s, s + len, &n) || (n && !is_power_of_two(n))) return -1;
    for (int i = 0; i < MSI_POWER2_INTERVALS; i++) v[i] = (uint32_t)n;
    memcpy(out, v, sizeof v);
    return 0;
  }
  if (len < 3 || s[len - 1] != ']') return -1;
  const char *p = s + 1, *stop = s + len - 1;
  int last = -1;
  bool first = true;
  while (p < stop) {
    const char *comma = memchr(p, ',', (size_t)(stop - p));
    if (!comma) comma = stop;
    const char *colon = memchr(p, ':', (size_t)(comma - p));
    if (!colon || parse_uint(colon + 1, comma, &n) || (n && !is_power_of_two(n))) return -1;
    if (colon - p == 1 && *p == '>') {
      for (int i = last + 1; i < MSI_POWER2_INTERVALS; i++) v[i] = (uint32_t)n;
    } else {
      unsigned long mb;
      if (parse_uint(p, colon, &mb) || !is_power_of_two(mb)) return -1;
      int idx = 63 - __builtin_clzl(mb);
      if (idx > MSI_POWER2_INTERVALS - 1) idx = MSI_POWER2_INTERVALS - 1;
      if (first)
        for (int i = 0; i < idx; i++) v[i] = (uint32_t)n;
      v[idx] = (uint32_t)n;
      if (idx > last) last = idx;
      first = false;
    }
    p = comma + 1;
  }
  memcpy(out, v, sizeof v);
  return 0;
}

static int parse_fraction(const char *s, double lo, double hi, bool lo_open, bool hi_open, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v)) return -1;
  if (v < lo || v > hi || (lo_open && v == lo) || (hi_open && v == hi)) return -1;
  *out = v;
  return 0;
}

/* Applies one option value. Returns 0, or -1 with an error naming `source` (also printed as a
 * warning when `warn`: values from the environment; API callers get the error only). */
static int apply(int opt, const char *value, const char *source, bool warn) {
  size_t sz;
  double d;
  unsigned long n;
  switch (opt) {
    case OPT_BACKEND:
      if (strcmp(value, "cuda") && strcmp(value, "sim")) break;
      snprintf(msi_opt.backend, sizeof msi_opt.backend, "%s", value);
      return 0;
    case OPT_SIM_CAPACITY:
      if (msi_parse_size(value, &sz) || sz < MSI_SMALL_BUFFER) break;
      msi_opt.sim_capacity = sz;
      return 0;
    case OPT_SIM_DEVICES:
      if (parse_uint(value, value + strlen(value), &n) || n < 1 || n > MSI_MAX_DEVICES) break;
      msi_opt.sim_devices = (int)n;
      return 0;
    case OPT_SIM_OLD_DRIVER:
    case OPT_INTERCEPT_CACHE:
    case OPT_EXPANDABLE_SEGMENTS: {
      bool v;
      if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "True")) v = true;
      else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "False")) v = false;
      else break;
      if (opt == OPT_SIM_OLD_DRIVER) msi_opt.sim_old_driver = v;
      else if (opt == OPT_INTERCEPT_CACHE) msi_opt.intercept_cache = v;
      else msi_opt.expandable_segments = v;
      return 0;
    }
    case OPT_ALLOCATOR:
      /* PyTorch's backend key spells them native and cudaMallocAsync */
      if (!strcmp(value, "native")) msi_opt.async_mode = false;
      else if (!strcmp(value, "async") || !strcmp(value, "cudaMallocAsync")) msi_opt.async_mode = true;
      else break;
      return 0;
    case OPT_MAX_SPLIT_SIZE_MB:
      if (parse_uint(value, value + strlen(value), &n) || n < MSI_LARGE_BUFFER >> 20 || n > (1ul << 40)) break;
      msi_opt.max_split_size = (size_t)n << 20;
      return 0;
    case OPT_MAX_NON_SPLIT_ROUNDING_MB:
      if (parse_uint(value, value + strlen(value), &n) || n < MSI_LARGE_BUFFER >> 20 || n > (1ul << 40)) break;
      msi_opt.max_non_split_rounding = (size_t)n << 20;
      return 0;
    case OPT_ROUNDUP_POWER2_DIVISIONS:
      if (msi_parse_power2_divisions(value, msi_opt.power2_divisions)) break;
      return 0;
    case OPT_GC_THRESHOLD:
      if (parse_fraction(value, 0.0, 1.0, true, true, &d)) break;
      msi_opt.gc_threshold = d;
      return 0;
    case OPT_MEMORY_FRACTION:
      if (parse_fraction(value, 0.0, 1.0, false, false, &d)) break;
      msi_opt.memory_fraction = d;
      return 0;
    case OPT_OOM:
      if (!strcmp(value, "null")) msi_opt.oom = MSI_OOM_NULL;
      else if (!strcmp(value, "throw")) msi_opt.oom = MSI_OOM_THROW;
      else if (!strcmp(value, "abort")) msi_opt.oom = MSI_OOM_ABORT;
      else break;
      return 0;
    case OPT_RECORD:
      if (strcmp(value, "0") && strcmp(value, "1")) break;
      msi_opt.record = value[0] == '1';
      return 0;
    case OPT_MAX_ENTRIES:
      if (parse_uint(value, value + strlen(value), &n) || n < 16 || n > 1000000000ul) break;
      msi_opt.max_entries = n;
      return 0;
    case OPT_STACKS:
      if (!strcmp(value, "none")) msi_opt.stacks = MSI_STACKS_NONE;
      else if (!strcmp(value, "native")) msi_opt.stacks = MSI_STACKS_NATIVE;
      else if (!strcmp(value, "python")) msi_opt.stacks = MSI_STACKS_PYTHON;
      else if (!strcmp(value, "all")) msi_opt.stacks = MSI_STACKS_ALL;
      else break;
      return 0;
    case OPT_DUMP:
    case OPT_DUMP_ON_OOM: {
      char *dst = opt == OPT_DUMP ? msi_opt.dump : msi_opt.dump_on_oom;
      if (strlen(value) >= sizeof msi_opt.dump) break;
      pthread_mutex_lock(&path_lock); /* dumps read it from other threads */
      snprintf(dst, sizeof msi_opt.dump, "%s", value);
      pthread_mutex_unlock(&path_lock);
      return 0;
    }
    case OPT_DUMP_SIGNAL:
      if (!strcmp(value, "USR1") || !strcmp(value, "SIGUSR1")) msi_opt.dump_signal = SIGUSR1;
      else if (!strcmp(value, "USR2") || !strcmp(value, "SIGUSR2")) msi_opt.dump_signal = SIGUSR2;
      else if (!parse_uint(value, value + strlen(value), &n) && n > 0 && n < 65) msi_opt.dump_signal = (int)n;
      else break;
      return 0;
    default:
      break;
  }
  if (warn)
    msi_warn("invalid value '%s' for %s (%s); using the default %s", value, source, table[opt].comment,
             table[opt].default_str);
  else
    msi_error("invalid value '%s' for %s (%s)", value, source, table[opt].comment);
  return -1;
}

static void set_defaults(void) {
  memset(&msi_opt, 0, sizeof msi_opt);
  snprintf(msi_opt.backend, sizeof msi_opt.backend, "cuda");
  msi_opt.sim_capacity = (size_t)16 << 30;
  msi_opt.sim_devices = 1;
  msi_opt.max_split_size = SIZE_MAX;
  msi_opt.max_non_split_rounding = MSI_LARGE_BUFFER;
  msi_opt.memory_fraction = 1.0;
  msi_opt.oom = MSI_OOM_NULL;
  msi_opt.max_entries = 100000;
  msi_opt.stacks = MSI_STACKS_ALL;
}

/* Applies the knobs of a PyTorch allocator config string that memsnap understands. */
static void apply_pytorch_conf(const char *var) {
  const char *conf = getenv(var);
  if (!conf || !*conf) return;
  static const struct { const char *key; int opt; } keys[] = {
      {"max_split_size_mb", OPT_MAX_SPLIT_SIZE_MB},
      {"max_non_split_rounding_mb", OPT_MAX_NON_SPLIT_ROUNDING_MB},
      {"roundup_power2_divisions", OPT_ROUNDUP_POWER2_DIVISIONS},
      {"garbage_collection_threshold", OPT_GC_THRESHOLD},
      {"expandable_segments", OPT_EXPANDABLE_SEGMENTS},
      {"backend", OPT_ALLOCATOR},
  };
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", conf);
  char *p = buf;
  while (*p) {
    /* A value may be a bracketed list holding commas: the item ends at a comma outside []. */
    char *q = p;
    int depth = 0;
    while (*q && (depth || *q != ',')) {
      depth += (*q == '[') - (*q == ']');
      q++;
    }
    char *next = *q ? q + 1 : q;
    *q = '\0';
    char *colon = strchr(p, ':');
    if (colon) {
      *colon = '\0';
      for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(p, keys[i].key) == 0) {
          char source[96];
          snprintf(source, sizeof source, "%s key %s", var, keys[i].key);
          apply(keys[i].opt, colon + 1, source, true);
        }
      }
    }
    p = next;
  }
}

/* Options that may change while blocks exist: the rest shape segments and statistics, so they
 * are read only when the library initialises. */
static bool runtime_settable(int opt) {
  return opt == OPT_OOM || opt == OPT_GC_THRESHOLD || opt == OPT_STACKS || opt == OPT_DUMP || opt == OPT_DUMP_ON_OOM;
}

int msi_option_set(const char *name, const char *value) {
  for (int i = 0; i < OPT_COUNT; i++) {
    char var[48];
    env_name(table[i].name, var, sizeof var);
    if (strcmp(name, table[i].name) != 0 && strcmp(name, var) != 0) continue;
    if (!runtime_settable(i)) {
      msi_error("option %s is read only at initialisation: set %s in the environment", table[i].name, var);
      return MEMSNAP_EINVAL;
    }
    return apply(i, value, var, false) == 0 ? MEMSNAP_OK : MEMSNAP_EINVAL;
  }
  msi_error("unknown option '%s' (memsnap options lists them)", name);
  return MEMSNAP_EINVAL;
}

bool msi_dump_path(bool on_oom, char *out, size_t len) {
  pthread_mutex_lock(&path_lock);
  snprintf(out, len, "%s", on_oom ? msi_opt.dump_on_oom : msi_opt.dump);
  pthread_mutex_unlock(&path_lock);
  return out[0] != '\0';
}

void msi_option_value(int i, char *out, size_t len) {
  static const char *const oom[] = {"null", "throw", "abort"}, *const stacks[] = {"none", "native", "python", "all"};
  out[0] = '\0';
  switch (i) {
    case OPT_BACKEND: snprintf(out, len, "%s", msi_opt.backend); break;
    case OPT_SIM_CAPACITY: snprintf(out, len, "%zu", msi_opt.sim_capacity); break;
    case OPT_SIM_DEVICES: snprintf(out, len, "%d", msi_opt.sim_devices); break;
    case OPT_SIM_OLD_DRIVER: snprintf(out, len, "%d", msi_opt.sim_old_driver); break;
    case OPT_INTERCEPT_CACHE: snprintf(out, len, "%d", msi_opt.intercept_cache); break;
    case OPT_ALLOCATOR: snprintf(out, len, "%s", msi_opt.async_mode ? "async" : "native"); break;
    case OPT_EXPANDABLE_SEGMENTS: snprintf(out, len, "%d", msi_opt.expandable_segments); break;
    case OPT_MAX_SPLIT_SIZE_MB:
      if (msi_opt.max_split_size == SIZE_MAX) snprintf(out, len, "unlimited");
      else snprintf(out, len, "%zu", msi_opt.max_split_size >> 20);
      break;
    case OPT_MAX_NON_SPLIT_ROUNDING_MB: snprintf(out, len, "%zu", msi_opt.max_non_split_rounding >> 20); break;
    case OPT_ROUNDUP_POWER2_DIVISIONS: {
      size_t o = (size_t)snprintf(out, len, "[");
      for (int k = 0; k < MSI_POWER2_INTERVALS && o < len; k++)
        o += (size_t)snprintf(out + o, len - o, "%s%u:%u", k ? "," : "", 1u << k, msi_opt.power2_divisions[k]);
      if (o < len) snprintf(out + o, len - o, "]");
      break;
    }
    case OPT_GC_THRESHOLD: snprintf(out, len, "%g", msi_opt.gc_threshold); break;
    case OPT_MEMORY_FRACTION: snprintf(out, len, "%g", msi_opt.memory_fraction); break;
    case OPT_OOM: snprintf(out, len, "%s", oom[msi_opt.oom]); break;
    case OPT_RECORD: snprintf(out, len, "%d", msi_opt.record); break;
    case OPT_MAX_ENTRIES: snprintf(out, len, "%llu", (unsigned long long)msi_opt.max_entries); break;
    case OPT_STACKS: snprintf(out, len, "%s", stacks[msi_opt.stacks & 3]); break;
    case OPT_DUMP: msi_dump_path(false, out, len); break;
    case OPT_DUMP_ON_OOM: msi_dump_path(true, out, len); break;
    case OPT_DUMP_SIGNAL: if (msi_opt.dump_signal) snprintf(out, len, "%d", msi_opt.dump_signal); break;
    default: break;
  }
}

void msi_options_load(void) {
  set_defaults();
  apply_pytorch_conf("PYTORCH_ALLOC_CONF");
  apply_pytorch_conf("PYTORCH_CUDA_ALLOC_CONF");
  for (int i = 0; i < OPT_COUNT; i++) {
    char var[48];
    env_name(table[i].name, var, sizeof var);
    const char *value = getenv(var);
    if (value && *value) apply(i, value, var, true);
  }
  msi_opt.any_power2_divisions = false;
  for (int i = 0; i < MSI_POWER2_INTERVALS; i++)
    if (msi_opt.power2_divisions[i] > 1) msi_opt.any_power2_divisions = true;
}
