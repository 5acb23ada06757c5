/* options.c: the one table of options, read from the environment.
 *
 * Each option is one row of `table` below (as in mimalloc's options.c): its name, its default,
 * a one-line comment, how its value is parsed and printed, the field of msi_opt it sets, the
 * PyTorch key that sets it too and whether it may change at run time. Nothing else names an
 * option: the defaults are the rows' strings parsed like any value, and `memsnap options`, the
 * snapshot's options and the docs' table are printed from the rows. The environment variable is
 * MEMSNAP_ followed by the name in upper case. An invalid value is reported with a warning that
 * names the variable and the value, and the default is kept.
 *
 * The allocator's tuning knobs keep PyTorch's names and meanings, so a user's existing
 * PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) "key:value,key:value" string applies too;
 * a MEMSNAP_ variable wins over it.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

msi_options msi_opt;
static pthread_mutex_t path_lock = PTHREAD_MUTEX_INITIALIZER; /* msi_opt.dump, .dump_on_oom */

/* How a row's value is parsed into its field, and printed back from it. */
typedef enum {
  K_BOOL,     /* bool: 1/0, true/false, True/False */
  K_UINT,     /* unsigned integer in [lo, hi], stored in a field of `width` bytes */
  K_MIB,      /* size_t bytes, written in MiB in [lo, hi]; "unlimited" is SIZE_MAX */
  K_SIZE,     /* size_t bytes, "64K", "1.5G"; at least lo */
  K_FRACTION, /* double in (lo, hi) or [lo, hi] (`open`: which ends are excluded) */
  K_CHOICE,   /* int: the index into `choices` of the name given (aliases map to one index) */
  K_STRING,   /* char[width], e.g. the backend's name */
  K_PATH,     /* char[width] that dumps read from other threads (path_lock) */
  K_SIGNAL,   /* int signal: USR1, USR2 or a number */
  K_POWER2,   /* uint32_t[MSI_POWER2_INTERVALS]: roundup_power2_divisions */
} kind;

typedef struct choice {
  const char *name;
  int value; /* the first name of a value is the one printed */
} choice;

#define MAX_CHOICES 4

/* One option: everything about it but its comment's prose lives in this row. */
typedef struct option {
  msi_option_info info; /* name, default (parsed like any value, so written once), comment */
  kind kind;
  size_t offset, width;        /* the field in msi_opt */
  double lo, hi;               /* bounds of K_UINT, K_MIB, K_SIZE, K_FRACTION */
  int open;                    /* K_FRACTION: 1 excludes lo, 2 excludes hi */
  choice choices[MAX_CHOICES]; /* K_CHOICE; K_STRING: the accepted names */
  const char *pytorch_key;     /* the PYTORCH_CUDA_ALLOC_CONF key that sets it too, or NULL */
  bool runtime;                /* may change while blocks exist (msi_option_set) */
} option;

#define FIELD(f) offsetof(msi_options, f), sizeof(((msi_options *)0)->f)

static const option table[] = {
    {{"backend", "cuda", "device backend: cuda (the GPU, through libcuda) or sim (simulated device)"},
     K_STRING, FIELD(backend), .choices = {{"cuda", 0}, {"sim", 1}}},
    {{"sim_capacity", "16G", "memory of each simulated device (bytes; K, M, G, T suffixes)"},
     K_SIZE, FIELD(sim_capacity), .lo = MSI_SMALL_BUFFER},
    {{"sim_devices", "1", "number of simulated devices"}, K_UINT, FIELD(sim_devices), .lo = 1, .hi = MSI_MAX_DEVICES},
    {{"sim_placement", "bottom", "where the simulated device places a segment: bottom (first fit from the lowest address) or top (the highest free range, at its top end, as CUDA's driver places them on the GPUs measured; the replay's choice)"},
     K_CHOICE, FIELD(sim_top_down), .choices = {{"bottom", 0}, {"top", 1}}, .runtime = false},
    {{"sim_old_driver", "0", "1: the simulated driver lacks virtual memory management and stream-ordered pools (to try the fallbacks)"},
     K_BOOL, FIELD(sim_old_driver), .runtime = false},
    /* PyTorch's backend key spells them native and cudaMallocAsync */
    {{"allocator", "native", "native (the caching allocator) or async (the driver's stream-ordered pool, like PyTorch's backend:cudaMallocAsync)"},
     K_CHOICE, FIELD(async_mode), .choices = {{"native", 0}, {"async", 1}, {"cudaMallocAsync", 1}}, .pytorch_key = "backend"},
    {{"expandable_segments", "0", "1: grow one segment per stream and pool in place, mapping pages through the driver's virtual memory API (PyTorch's expandable_segments:True)"},
     K_BOOL, FIELD(expandable_segments), .pytorch_key = "expandable_segments"},
    {{"peer_access", "1", "1: map expandable segments' pages and the async pool for every device that can access this one (PyTorch maps them for a peer once it copies between the two); 0: the owning device only"},
     K_BOOL, FIELD(peer_access), .runtime = false},
    {{"max_split_size_mb", "unlimited", "blocks at least this large (MiB) are never split; at least 20"},
     K_MIB, FIELD(max_split_size), .lo = MSI_LARGE_BUFFER >> 20, .hi = 1ull << 40, .pytorch_key = "max_split_size_mb"},
    {{"max_non_split_rounding_mb", "20", "a request of at least max_split_size may take a cached block up to this much (MiB) larger"},
     K_MIB, FIELD(max_non_split_rounding), .lo = MSI_LARGE_BUFFER >> 20, .hi = 1ull << 40,
     .pytorch_key = "max_non_split_rounding_mb"},
    {{"roundup_power2_divisions", "0", "round sizes to N divisions of a power of two: N or [256:1,512:2,>:8] (MiB keys)"},
     K_POWER2, FIELD(power2_divisions), .pytorch_key = "roundup_power2_divisions"},
    {{"garbage_collection_threshold", "0", "with a memory fraction set, free old cached blocks above this share of it (0 < t < 1)"},
     K_FRACTION, FIELD(gc_threshold), .lo = 0, .hi = 1, .open = 3, .pytorch_key = "garbage_collection_threshold",
     .runtime = true},
    {{"memory_fraction", "1.0", "cap each device at this share of its memory (0..1; 1 is no cap), like set_per_process_memory_fraction"},
     K_FRACTION, FIELD(memory_fraction), .lo = 0, .hi = 1, .pytorch_key = "per_process_memory_fraction"},
    {{"graph_capture_record_stream_reuse", "0", "1: during a CUDA graph capture, a block freed while other captured streams used it is reused once the capture's graph orders those uses before new work (PyTorch's setting); 0: it waits for the capture's end"},
     K_BOOL, FIELD(capture_stream_reuse), .pytorch_key = "graph_capture_record_stream_reuse", .runtime = true},
    {{"no_caching", "0", "1: no cache, each request a device allocation of its own, freed at once (recorded, outside the statistics), as PyTorch with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (which sets it too)"},
     K_BOOL, FIELD(no_caching), .runtime = false},
    {{"oom", "null", "on out of memory in memsnap_malloc: null (return NULL), throw (raise torch.OutOfMemoryError; set by memsnap.enable), abort"},
     K_CHOICE, FIELD(oom), .choices = {{"null", MSI_OOM_NULL}, {"throw", MSI_OOM_THROW}, {"abort", MSI_OOM_ABORT}},
     .runtime = true},
    {{"invalid_free", "warn", "on a free of a pointer memsnap does not own (double, foreign, interior): warn (once per site on stderr), silent (count and record only), abort (like PyTorch)"},
     K_CHOICE, FIELD(invalid_free),
     .choices = {{"warn", MSI_INVALID_FREE_WARN}, {"silent", MSI_INVALID_FREE_SILENT}, {"abort", MSI_INVALID_FREE_ABORT}},
     .runtime = true},
    {{"record", "0", "1: record history from the first allocation (else memsnap_record_start)"},
     K_CHOICE, FIELD(record), .choices = {{"0", 0}, {"1", 1}}},
    {{"max_entries", "100000", "events kept in the ring (64 bytes each); older ones are dropped and counted"},
     K_UINT, FIELD(max_entries), .lo = 16, .hi = 1e9},
    {{"stacks", "all", "stacks recorded with each event: none, native, python or all"},
     K_CHOICE, FIELD(stacks),
     .choices = {{"none", MSI_STACKS_NONE}, {"native", MSI_STACKS_NATIVE}, {"python", MSI_STACKS_PYTHON}, {"all", MSI_STACKS_ALL}},
     .runtime = true},
    {{"context", "all", "whose stacks are recorded: all (allocations' and frees'), alloc (allocations' only; frees record none)"},
     K_CHOICE, FIELD(context), .choices = {{"all", MSI_CONTEXT_ALL}, {"alloc", MSI_CONTEXT_ALLOC}}, .runtime = true},
    {{"dump", "", "write a snapshot to this path at exit (%p pid, %r rank, %h host, %t time)"},
     K_PATH, FIELD(dump), .runtime = true},
    {{"dump_on_oom", "", "write a snapshot to this path at the first out of memory (same patterns)"},
     K_PATH, FIELD(dump_on_oom), .runtime = true},
    {{"dump_signal", "", "signal (USR1, USR2 or a number) that writes a snapshot to MEMSNAP_DUMP"},
     K_SIGNAL, FIELD(dump_signal), .runtime = false},
    {{"intercept_cache", "0", "1: the intercept library (memsnap run --cache) serves cudaMalloc/cudaFree from the caching allocator"},
     K_BOOL, FIELD(intercept_cache), .runtime = false},
    {{"torch_ranges", "1", "0: memsnap.enable() leaves PyTorch's record_function scopes (Optimizer.step...) unrecorded as ranges"},
     K_BOOL, FIELD(torch_ranges), .runtime = false},
    {{"torch_modules", "1", "0: memsnap.enable() leaves PyTorch's modules, tensors, optimizer steps and backward passes unrecorded (the module, tensor, step and backward events of a recording)"},
     K_BOOL, FIELD(torch_modules), .runtime = false},
    {{"holders_time", "5", "seconds the Python package spends, at each snapshot it writes, finding what holds the largest and growing sites' tensors (the holders table); 0: no walk"},
     K_FRACTION, FIELD(holders_time), .lo = 0, .hi = 3600, .runtime = true},
    {{"gc_events", "1", "0: the Python package leaves the garbage collector's runs unrecorded (the gc events of a recording)"},
     K_BOOL, FIELD(gc_events), .runtime = false},
    {{"gc_cycles", "0", "1: the Python package keeps, for each garbage collector run, the reference cycles that held CUDA tensors (their objects' types, the attributes joining them, the tensors' blocks: the gc_cycles table); it costs a second collection each run"},
     K_BOOL, FIELD(gc_cycles), .runtime = false},
    {{"torch_allocator", "cxx", "how memsnap.enable() becomes PyTorch's allocator: cxx (a C++ allocator built for the installed PyTorch at first use and cached; the pluggable interface where it cannot be built) or pluggable"},
     K_CHOICE, FIELD(torch_allocator), .choices = {{"cxx", 0}, {"pluggable", 1}}, .runtime = false},
    {{"gil_wait_ms", "100", "how long an intercepted allocation from a Python thread that released the GIL waits for its Python frames (ms; past it, and with 0, native frames only)"},
     K_UINT, FIELD(gil_wait_ms), .lo = 0, .hi = 60000, .runtime = true},
};

enum { OPT_COUNT = sizeof table / sizeof table[0] };

int msi_option_count(void) { return OPT_COUNT; }

static void env_name(const char *name, char *var, size_t len) {
  size_t k = (size_t)snprintf(var, len, "MEMSNAP_");
  for (const char *c = name; *c && k + 1 < len; c++) var[k++] = (char)toupper((unsigned char)*c);
  var[k] = '\0';
}

const char *memsnap_option_info(int i, const char **default_value, const char **comment) {
  static char vars[OPT_COUNT][48];
  if (i < 0 || i >= OPT_COUNT) return NULL;
  if (!vars[i][0]) env_name(table[i].info.name, vars[i], sizeof vars[i]);
  if (default_value) *default_value = table[i].info.default_str;
  if (comment) *comment = table[i].info.comment;
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

static void store_uint(void *field, size_t width, unsigned long long v) {
  switch (width) {
    case sizeof(uint8_t): *(uint8_t *)field = (uint8_t)v; break;
    case sizeof(uint16_t): *(uint16_t *)field = (uint16_t)v; break;
    case sizeof(uint32_t): *(uint32_t *)field = (uint32_t)v; break;
    default: *(uint64_t *)field = (uint64_t)v; break;
  }
}

static unsigned long long load_uint(const void *field, size_t width) {
  switch (width) {
    case sizeof(uint8_t): return *(const uint8_t *)field;
    case sizeof(uint16_t): return *(const uint16_t *)field;
    case sizeof(uint32_t): return *(const uint32_t *)field;
    default: return *(const uint64_t *)field;
  }
}

static const choice *find_choice(const option *o, const char *value) {
  for (int k = 0; k < MAX_CHOICES && o->choices[k].name; k++)
    if (!strcmp(value, o->choices[k].name)) return &o->choices[k];
  return NULL;
}

/* Parses `value` into option o's field. Returns 0, or -1 (the field untouched) if invalid.
 * `bounded` false skips the range checks: a default may be the "off" value that a user cannot
 * write (garbage_collection_threshold 0). */
static int parse_into_of(msi_options *opts, const option *o, const char *value, bool bounded) {
  double lo = bounded ? o->lo : 0, hi = bounded ? o->hi : INFINITY;
  char *field = (char *)opts + o->offset;
  unsigned long n;
  size_t sz;
  double d;
  const choice *c;
  switch (o->kind) {
    case K_BOOL:
      if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "True")) *(bool *)field = true;
      else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "False")) *(bool *)field = false;
      else return -1;
      return 0;
    case K_UINT:
      if (parse_uint(value, value + strlen(value), &n) || n < lo || n > hi) return -1;
      store_uint(field, o->width, n);
      return 0;
    case K_MIB:
      if (!strcmp(value, "unlimited")) {
        *(size_t *)field = SIZE_MAX;
        return 0;
      }
      if (parse_uint(value, value + strlen(value), &n) || n < lo || n > hi) return -1;
      *(size_t *)field = (size_t)n << 20;
      return 0;
    case K_SIZE:
      if (msi_parse_size(value, &sz) || sz < lo) return -1;
      *(size_t *)field = sz;
      return 0;
    case K_FRACTION:
      if (parse_fraction(value, lo, hi, bounded && (o->open & 1), bounded && (o->open & 2), &d)) return -1;
      *(double *)field = d;
      return 0;
    case K_CHOICE:
      if (!(c = find_choice(o, value))) return -1;
      store_uint(field, o->width, (unsigned long long)c->value);
      return 0;
    case K_STRING:
    case K_PATH:
      if ((o->kind == K_STRING && !find_choice(o, value)) || strlen(value) >= o->width) return -1;
      if (o->kind == K_PATH) pthread_mutex_lock(&path_lock); /* dumps read it from other threads */
      snprintf(field, o->width, "%s", value);
      if (o->kind == K_PATH) pthread_mutex_unlock(&path_lock);
      return 0;
    case K_SIGNAL:
      if (!*value) *(int *)field = 0;
      else if (!strcmp(value, "USR1") || !strcmp(value, "SIGUSR1")) *(int *)field = SIGUSR1;
      else if (!strcmp(value, "USR2") || !strcmp(value, "SIGUSR2")) *(int *)field = SIGUSR2;
      else if (!parse_uint(value, value + strlen(value), &n) && n > 0 && n < 65) *(int *)field = (int)n;
      else return -1;
      return 0;
    case K_POWER2:
      return msi_parse_power2_divisions(value, (uint32_t *)field);
  }
  return -1;
}

static int parse_into(const option *o, const char *value, bool bounded) {
  return parse_into_of(&msi_opt, o, value, bounded);
}

/* Applies one option value. Returns 0, or -1 with an error naming `source` (also printed as a
 * warning when `warn`: values from the environment; API callers get the error only). */
static int apply(int opt, const char *value, const char *source, bool warn) {
  if (parse_into(&table[opt], value, true) == 0) return 0;
  const msi_option_info *info = &table[opt].info;
  if (warn)
    msi_warn("invalid value '%s' for %s (%s); using the default %s", value, source, info->comment,
             info->default_str);
  else
    msi_error("invalid value '%s' for %s (%s)", value, source, info->comment);
  return -1;
}

/* Every option at its table default: the defaults are parsed like any value, so a row's
 * default string is the only place it is written. */
static void set_defaults(void) {
  memset(&msi_opt, 0, sizeof msi_opt);
  for (int i = 0; i < OPT_COUNT; i++)
    if (parse_into(&table[i], table[i].info.default_str, false) != 0) abort(); /* a bad row: a bug here */
}

/* Applies the knobs of a PyTorch allocator config string that memsnap understands. */
static void apply_pytorch_conf(const char *var) {
  const char *conf = getenv(var);
  if (!conf || !*conf) return;
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
      for (int i = 0; i < OPT_COUNT; i++) {
        if (table[i].pytorch_key && strcmp(p, table[i].pytorch_key) == 0) {
          char source[96];
          snprintf(source, sizeof source, "%s key %s", var, table[i].pytorch_key);
          apply(i, colon + 1, source, true);
        }
      }
    }
    p = next;
  }
}

/* The table row of option `name` ("oom" or "MEMSNAP_OOM"), or -1. */
static int find_option(const char *name) {
  for (int i = 0; i < OPT_COUNT; i++) {
    char var[48];
    env_name(table[i].info.name, var, sizeof var);
    if (strcmp(name, table[i].info.name) == 0 || strcmp(name, var) == 0) return i;
  }
  return -1;
}

int msi_option_set(const char *name, const char *value) {
  int i = find_option(name);
  if (i >= 0) {
    char var[48];
    env_name(table[i].info.name, var, sizeof var);
    /* The rest shape segments and statistics: read only when the library initialises. */
    if (!table[i].runtime) {
      msi_error("option %s is read only at initialisation: set %s in the environment", table[i].info.name, var);
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

int msi_option_get(const char *name, char *out, size_t len) {
  int i = find_option(name);
  if (i < 0) {
    msi_error("unknown option '%s' (memsnap options lists them)", name);
    return MEMSNAP_EINVAL;
  }
  msi_option_value(i, out, len);
  return MEMSNAP_OK;
}

void msi_option_value(int i, char *out, size_t len) {
  out[0] = '\0';
  if (i < 0 || i >= OPT_COUNT) return;
  const option *o = &table[i];
  const char *field = (const char *)&msi_opt + o->offset;
  switch (o->kind) {
    case K_BOOL: snprintf(out, len, "%d", *(const bool *)field); break;
    case K_UINT: snprintf(out, len, "%llu", load_uint(field, o->width)); break;
    case K_MIB:
      if (*(const size_t *)field == SIZE_MAX) snprintf(out, len, "unlimited");
      else snprintf(out, len, "%zu", *(const size_t *)field >> 20);
      break;
    case K_SIZE: snprintf(out, len, "%zu", *(const size_t *)field); break;
    case K_FRACTION: snprintf(out, len, "%g", *(const double *)field); break;
    case K_CHOICE: {
      unsigned long long v = load_uint(field, o->width);
      for (int k = 0; k < MAX_CHOICES && o->choices[k].name; k++)
        if ((unsigned long long)o->choices[k].value == v) {
          snprintf(out, len, "%s", o->choices[k].name);
          break;
        }
      break;
    }
    case K_STRING: snprintf(out, len, "%s", field); break;
    case K_PATH:
      pthread_mutex_lock(&path_lock);
      snprintf(out, len, "%s", field);
      pthread_mutex_unlock(&path_lock);
      break;
    case K_SIGNAL:
      if (*(const int *)field) snprintf(out, len, "%d", *(const int *)field);
      break;
    case K_POWER2: {
      const uint32_t *div = (const uint32_t *)field;
      size_t k = (size_t)snprintf(out, len, "[");
      for (int j = 0; j < MSI_POWER2_INTERVALS && k < len; j++)
        k += (size_t)snprintf(out + k, len - k, "%s%u:%u", j ? "," : "", 1u << j, div[j]);
      if (k < len) snprintf(out + k, len - k, "]");
      break;
    }
  }
}

void msi_options_load(void) {
  set_defaults();
  apply_pytorch_conf("PYTORCH_ALLOC_CONF");
  apply_pytorch_conf("PYTORCH_CUDA_ALLOC_CONF");
  /* PyTorch's allocator turns its cache off when this is 1 (c10::utils::check_env) */
  const char *nocache = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
  if (nocache && strcmp(nocache, "1") == 0) msi_opt.no_caching = true;
  for (int i = 0; i < OPT_COUNT; i++) {
    char var[48];
    env_name(table[i].info.name, var, sizeof var);
    const char *value = getenv(var);
    if (value && *value) apply(i, value, var, true);
  }
  msi_opt.any_power2_divisions = false;
  for (int i = 0; i < MSI_POWER2_INTERVALS; i++)
    if (msi_opt.power2_divisions[i] > 1) msi_opt.any_power2_divisions = true;
}

/* The keys PyTorch's parser puts back to their defaults whenever it parses settings
 * (c10/core/AllocatorConfig.cpp's parseArgs), and the one more memsnap changes when named. */
static const char *const reset_keys[] = {"max_split_size_mb", "max_non_split_rounding_mb", "roundup_power2_divisions",
                                         "garbage_collection_threshold"};

int msi_options_apply_settings(const char *settings) {
  msi_options next = msi_opt;
  for (int i = 0; i < OPT_COUNT; i++)
    for (size_t k = 0; k < sizeof reset_keys / sizeof reset_keys[0]; k++)
      if (table[i].pytorch_key && !strcmp(table[i].pytorch_key, reset_keys[k]))
        parse_into_of(&next, &table[i], table[i].info.default_str, false);
  char buf[1024];
  if (snprintf(buf, sizeof buf, "%s", settings) >= (int)sizeof buf) {
    msi_error("allocator settings longer than %zu bytes", sizeof buf - 1);
    return MEMSNAP_EINVAL;
  }
  for (char *p = buf; *p;) {
    char *q = p; /* an item ends at a comma outside [] */
    int depth = 0;
    while (*q && (depth || *q != ',')) {
      depth += (*q == '[') - (*q == ']');
      q++;
    }
    char *next_item = *q ? q + 1 : q;
    *q = '\0';
    while (*p == ' ') p++;
    char *colon = strchr(p, ':');
    if (colon) {
      *colon = '\0';
      for (int i = 0; i < OPT_COUNT; i++) {
        const char *key = table[i].pytorch_key;
        bool changes = key && (!strcmp(key, "expandable_segments") || !strcmp(key, "roundup_power2_divisions") ||
                               !strcmp(key, "max_split_size_mb") || !strcmp(key, "max_non_split_rounding_mb") ||
                               !strcmp(key, "garbage_collection_threshold") ||
                               !strcmp(key, "graph_capture_record_stream_reuse"));
        if (changes && !strcmp(p, key) && parse_into_of(&next, &table[i], colon + 1, true) != 0) {
          msi_error("invalid allocator setting %s:%s (%s)", p, colon + 1, table[i].info.comment);
          return MEMSNAP_EINVAL;
        }
      }
    }
    p = next_item;
  }
  msi_opt.max_split_size = next.max_split_size;
  msi_opt.max_non_split_rounding = next.max_non_split_rounding;
  memcpy(msi_opt.power2_divisions, next.power2_divisions, sizeof msi_opt.power2_divisions);
  msi_opt.gc_threshold = next.gc_threshold;
  msi_opt.expandable_segments = next.expandable_segments;
  msi_opt.capture_stream_reuse = next.capture_stream_reuse;
  bool any = false;
  for (int i = 0; i < MSI_POWER2_INTERVALS; i++)
    if (msi_opt.power2_divisions[i] > 1) any = true;
  msi_opt.any_power2_divisions = any;
  return MEMSNAP_OK;
}
