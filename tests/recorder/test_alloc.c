/* test_alloc.c: the caching allocator's decisions and statistics, on the simulated device.
 *
 * Each section sets the environment for one configuration, runs against a fresh library state
 * (memsnap_shutdown between sections) and checks one behaviour of PyTorch's caching allocator
 * that memsnap reproduces, plus memsnap_check() (every internal invariant) after it.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "allochelper.h"


static void test_rounding(void) {
  fresh("");
  void *a = alloc(1);
  CHECK("rounding: 1 byte takes 512", stats().allocated_bytes[MEMSNAP_POOL_ALL].current == 512);
  CHECK("rounding: requested_bytes keeps the asked size", stats().requested_bytes[MEMSNAP_POOL_ALL].current == 1);
  void *b = alloc(513);
  CHECK("rounding: 513 bytes take 1024", stats().allocated_bytes[MEMSNAP_POOL_ALL].current == 512 + 1024);
  CHECK("rounding: blocks are 512-byte aligned", addr(a) % 512 == 0 && addr(b) % 512 == 0);
  release(a);
  release(b);

  fresh("MEMSNAP_ROUNDUP_POWER2_DIVISIONS=4");
  void *c = alloc(1200000); /* 1 MiB floor, quarter steps of 256 KiB: 1.25 MiB */
  CHECK("power2 divisions: 1200000 rounds to 1310720", stats().allocated_bytes[MEMSNAP_POOL_ALL].current == 1310720);
  release(c);
  void *d = alloc(2000); /* not above 512 * divisions: plain 512 rounding */
  CHECK("power2 divisions: small sizes keep 512 rounding", stats().allocated_bytes[MEMSNAP_POOL_ALL].current == 2048);
  release(d);
  void *e = alloc(4 * MiB); /* a power of two stays as it is */
  CHECK("power2 divisions: powers of two unchanged", stats().allocated_bytes[MEMSNAP_POOL_ALL].current == (int64_t)(4 * MiB));
  release(e);

  fresh("PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[1:4,>:2]");
  void *f = alloc(1200000);
  CHECK("PYTORCH_CUDA_ALLOC_CONF list form applies", stats().allocated_bytes[MEMSNAP_POOL_ALL].current == 1310720);
  release(f);
  CHECK("rounding: invariants", check_ok());
}

static void test_pools(void) {
  fresh("");
  void *a = alloc(1000), *b = alloc(1000);
  memsnap_stats_t s = stats();
  CHECK("small pool: one 2 MiB segment", s.segment[MEMSNAP_POOL_SMALL].current == 1 &&
                                              s.reserved_bytes[MEMSNAP_POOL_SMALL].current == (int64_t)(2 * MiB));
  CHECK("small pool: second block follows the first", addr(b) == addr(a) + 1024);
  void *c = alloc(MiB); /* exactly 1 MiB is still small */
  CHECK("small pool: 1 MiB request is small", stats().allocated_bytes[MEMSNAP_POOL_SMALL].current == (int64_t)(MiB + 2048));
  void *d = alloc(MiB + 1);
  s = stats();
  CHECK("large pool: request over 1 MiB makes a 20 MiB segment",
        s.segment[MEMSNAP_POOL_LARGE].current == 1 && s.reserved_bytes[MEMSNAP_POOL_LARGE].current == (int64_t)(20 * MiB));
  void *f = alloc(11 * MiB);
  CHECK("large pool: a cached remainder serves before a new segment", addr(f) == addr(d) + MiB + 512 &&
                                                                          stats().segment[MEMSNAP_POOL_LARGE].current == 1);
  release(f);
  void *e = alloc(21 * MiB + 1);
  s = stats();
  CHECK("large pool: 10 MiB and up get their own segment rounded to 2 MiB",
        s.segment[MEMSNAP_POOL_LARGE].current == 2 && s.reserved_bytes[MEMSNAP_POOL_LARGE].current == (int64_t)(42 * MiB));
  CHECK("stats: all equals small plus large",
        s.reserved_bytes[MEMSNAP_POOL_ALL].current == s.reserved_bytes[MEMSNAP_POOL_SMALL].current + s.reserved_bytes[MEMSNAP_POOL_LARGE].current &&
            s.num_device_alloc == 3);
  CHECK("pools: invariants with live blocks", check_ok());
  release(a);
  release(b);
  release(c);
  release(d);
  release(e);
  s = stats();
  CHECK("free: everything cached, nothing allocated",
        s.allocated_bytes[MEMSNAP_POOL_ALL].current == 0 && s.reserved_bytes[MEMSNAP_POOL_ALL].current == (int64_t)(44 * MiB) &&
            s.inactive_split[MEMSNAP_POOL_ALL].current == 0);
  CHECK("free: segments merged back whole", check_ok());
}

static void test_best_fit_and_split(void) {
  fresh("");
  /* One 20 MiB segment: a(2) x(2) b(6) y(2) c(3) z(2) tail(3), then free a, b and c. */
  void *a = alloc(2 * MiB), *x = alloc(2 * MiB), *b = alloc(6 * MiB), *y = alloc(2 * MiB);
  void *c = alloc(3 * MiB), *z = alloc(2 * MiB);
  CHECK("split: one segment serves six blocks", stats().segment[MEMSNAP_POOL_ALL].current == 1);
  release(a);
  release(b);
  release(c);
  memsnap_stats_t s = stats();
  CHECK("split: four inactive split blocks", s.inactive_split[MEMSNAP_POOL_ALL].current == 4 &&
                                                 s.inactive_split_bytes[MEMSNAP_POOL_ALL].current == (int64_t)(14 * MiB));
  void *p = alloc(2 * MiB + 512 * KiB);
  CHECK("best fit: smallest fitting block, lowest address among equals", p == c);
  s = stats();
  CHECK("split: remainder of 512 KiB (not over 1 MiB) is not split off",
        s.allocated_bytes[MEMSNAP_POOL_ALL].current == (int64_t)(3 * MiB + 6 * MiB));
  void *q = alloc(3 * MiB);
  CHECK("best fit: next 3 MiB takes the tail", addr(q) == addr(z) + 2 * MiB);
  void *r = alloc(1536 * KiB); /* best fit is a (2 MiB): remainder 512 KiB stays */
  CHECK("best fit: 1.5 MiB takes the 2 MiB block", r == a);
  void *t = alloc(4 * MiB); /* only b (6 MiB) fits: 2 MiB remainder > 1 MiB is split off */
  s = stats();
  CHECK("split: 6 MiB block split for 4 MiB", t == b && s.inactive_split_bytes[MEMSNAP_POOL_ALL].current == (int64_t)(2 * MiB));
  CHECK("split: invariants", check_ok());
  release(p), release(q), release(r), release(t), release(x), release(y), release(z);
  s = stats();
  CHECK("merge: all free blocks coalesce into one segment",
        s.inactive_split[MEMSNAP_POOL_ALL].current == 0 && s.segment[MEMSNAP_POOL_ALL].current == 1 && check_ok());
}

/* Where the simulated device puts segments, and why it matters: of two free blocks of one size
 * the allocator takes the lower address, so a replay that places segments from the bottom while
 * CUDA placed them from the top picks the other one (docs/replay.md, "Addresses"). */
static void test_sim_placement(void) {
  for (int top = 0; top <= 1; top++) {
    fresh(top ? "MEMSNAP_SIM_CAPACITY=1G;MEMSNAP_SIM_PLACEMENT=top" : "MEMSNAP_SIM_CAPACITY=1G");
    void *a = alloc(40 * MiB), *b = alloc(40 * MiB); /* one segment each */
    CHECK(top ? "placement top: the second segment lies below the first, at the top of the device"
              : "placement bottom: the second segment lies above the first, at the bottom of the device",
          top ? addr(b) + 40 * MiB == addr(a) && addr(a) + 40 * MiB == 0x100000000000ull + (1ull << 30)
              : addr(a) + 40 * MiB == addr(b) && addr(a) == 0x100000000000ull);
    release(a), release(b);
    void *c = alloc(40 * MiB);
    CHECK(top ? "placement top: of two cached segments of one size the later one (the lower address) is reused"
              : "placement bottom: of two cached segments of one size the first one (the lower address) is reused",
          c == (top ? b : a));
    release(c);
    memsnap_empty_cache();
    void *d = alloc(60 * MiB), *e = alloc(2 * MiB); /* e: a 20 MiB segment */
    CHECK("placement after empty_cache: the freed ranges are taken again, from the same end",
          top ? addr(d) + 60 * MiB == 0x100000000000ull + (1ull << 30) && addr(e) + 20 * MiB == addr(d)
              : addr(d) == 0x100000000000ull && addr(e) == addr(d) + 60 * MiB);
    release(d), release(e);
    char v[16] = "";
    memsnap_get_option("sim_placement", v, sizeof v);
    CHECK("sim_placement reads back as set", !strcmp(v, top ? "top" : "bottom") && check_ok());
  }
  fresh("MEMSNAP_SIM_PLACEMENT=middle"); /* warned about on stderr, as every invalid value */
  void *p = alloc(MiB);
  char v[16] = "";
  memsnap_get_option("sim_placement", v, sizeof v);
  CHECK("sim_placement=middle: the default (bottom) kept", p && !strcmp(v, "bottom"));
  release(p);
}

static void test_max_split_size(void) {
  fresh("MEMSNAP_MAX_SPLIT_SIZE_MB=40");
  void *big = alloc(50 * MiB);
  release(big);
  memsnap_stats_t s = stats();
  CHECK("max_split_size: reported in bytes", s.max_split_size == (int64_t)(40 * MiB));
  CHECK("max_split_size: oversize segment counted", s.oversize_segments.current == 1);
  void *small = alloc(12 * MiB);
  s = stats();
  CHECK("max_split_size: oversize block never serves a smaller request", small != big && s.num_device_alloc == 2);
  void *exact = alloc(45 * MiB);
  CHECK("max_split_size: oversize request reuses a block within 20 MiB", exact == big &&
                                                                             stats().oversize_allocations.current == 1);
  release(exact);
  void *far = alloc(30 * MiB + 1); /* below max_split: would split, but oversize blocks refuse */
  CHECK("max_split_size: request below the limit gets a new segment", far != big);
  release(far);
  void *huge = alloc(72 * MiB);
  release(huge);
  void *p50 = alloc(50 * MiB); /* best fit is the 50 MiB block */
  void *p51 = alloc(51 * MiB); /* 72 MiB block: 72 >= 51 + 20, refused: new segment */
  CHECK("max_non_split_rounding: block 20 MiB larger is refused", p50 == big && p51 != huge);
  release(p50);
  release(p51);
  CHECK("max_split_size: invariants", check_ok());
  release(small);
}

static void test_oom_release_retry(void) {
  fresh("MEMSNAP_SIM_CAPACITY=100M");
  void *a = alloc(60 * MiB);
  release(a);
  void *b = alloc_on(60 * MiB, S2); /* cached block belongs to S1: free the cache, retry */
  memsnap_stats_t s = stats();
  CHECK("oom retry: freeing the cache makes room", b != NULL && s.num_alloc_retries == 1 && s.num_ooms == 0);
  CHECK("oom retry: the cached segment went back to the device", s.num_device_free == 1);
  void *c = alloc_on(60 * MiB, S2);
  s = stats();
  CHECK("oom: NULL when nothing can be freed", c == NULL && s.num_ooms == 1);
  CHECK("oom: message says out of memory", strstr(memsnap_last_error(), "CUDA out of memory. Tried to allocate 60.00 MiB") != NULL);
  CHECK("oom: state intact after the failure", check_ok());
  memsnap_free(b, 0, 0, S2);

  fresh("MEMSNAP_SIM_CAPACITY=200M;MEMSNAP_MAX_SPLIT_SIZE_MB=40");
  void *p[3];
  for (int i = 0; i < 3; i++) p[i] = alloc(50 * MiB);
  for (int i = 0; i < 3; i++) release(p[i]);
  void *q = alloc(100 * MiB); /* frees the two largest oversize blocks, no full retry */
  s = stats();
  CHECK("oom: oversize cached blocks released before a full retry",
        q != NULL && s.num_device_free == 2 && s.num_alloc_retries == 0 && s.segment[MEMSNAP_POOL_ALL].current == 2);
  release(q);
  CHECK("oom: invariants after partial release", check_ok());
}

static void test_memory_fraction_and_gc(void) {
  fresh("MEMSNAP_SIM_CAPACITY=1G");
  memsnap_set_memory_fraction(0.25, 0);
  void *a = alloc(200 * MiB);
  void *b = alloc(100 * MiB);
  CHECK("memory fraction: cap refuses what the device could give", a && !b && stats().num_ooms == 1);
  CHECK("memory fraction: message names the cap", strstr(memsnap_last_error(), "256.00 MiB allowed") != NULL);
  memsnap_set_memory_fraction(1.0, 0);
  b = alloc(100 * MiB);
  CHECK("memory fraction: 1.0 lifts the cap", b != NULL);
  release(a);
  release(b);

  fresh("MEMSNAP_SIM_CAPACITY=1G;MEMSNAP_MEMORY_FRACTION=0.5;MEMSNAP_GARBAGE_COLLECTION_THRESHOLD=0.5;MEMSNAP_MAX_SPLIT_SIZE_MB=40");
  void *A = alloc(100 * MiB), *B = alloc(100 * MiB), *C = alloc(100 * MiB);
  release(A);
  for (int i = 0; i < 10; i++) release(alloc(2 * MiB)); /* ages A: ten get_free_block calls */
  release(B);
  release(C);
  uintptr_t a_addr = addr(A);
  void *D = alloc(150 * MiB); /* reserved 320 MiB > 256 MiB threshold: gc frees the oldest */
  memsnap_stats_t s = stats();
  CHECK("gc: only the oldest cached segment is freed", D != NULL && s.num_device_free == 1);
  void *B2 = alloc(100 * MiB), *C2 = alloc(100 * MiB);
  CHECK("gc: younger segments stay cached", addr(B2) != a_addr && addr(C2) != a_addr && stats().num_device_alloc == 5);
  release(D), release(B2), release(C2);
  CHECK("gc: invariants", check_ok());

  fresh("MEMSNAP_SIM_CAPACITY=1G;MEMSNAP_MEMORY_FRACTION=0.5;MEMSNAP_MAX_SPLIT_SIZE_MB=40");
  A = alloc(100 * MiB), B = alloc(100 * MiB), C = alloc(100 * MiB);
  release(A), release(B), release(C);
  release(alloc(2 * MiB));
  D = alloc(150 * MiB);
  CHECK("gc: off without a threshold", D != NULL && stats().num_device_free == 0);
  release(D);
}

static void test_streams_and_events(void) {
  fresh("");
  void *a = alloc_on(MiB, S1);
  memsnap_free(a, 0, 0, S1);
  void *b = alloc_on(MiB, S2);
  CHECK("streams: a block cached for one stream does not serve another", b != a);
  memsnap_free(b, 0, 0, S2);

  void *p = alloc_on(4 * MiB, S1);
  memsnap_record_stream(p, S2);
  memsnap_record_stream(p, S2); /* a set: counted once */
  memsnap_record_stream(p, S1); /* the allocation stream needs no event */
  release(p);
  memsnap_stats_t s = stats();
  CHECK("events: freed block stays active until its event completes",
        s.allocated_bytes[MEMSNAP_POOL_ALL].current == 0 &&
            s.active_bytes[MEMSNAP_POOL_ALL].current == (int64_t)(4 * MiB));
  void *q = alloc_on(4 * MiB, S1);
  CHECK("events: block not reused before the event completes", q != p);
  CHECK("events: invariants while waiting", check_ok());
  memsnap_sim_synchronize(S2);
  void *r = alloc_on(4 * MiB, S1);
  CHECK("events: block reused once the event completed", r == p);
  release(q);
  release(r);

  void *w = alloc_on(4 * MiB, S1);
  memsnap_record_stream(w, S2);
  release(w);
  memsnap_empty_cache();
  s = stats();
  CHECK("empty_cache: waits for events, then releases every unsplit segment",
        s.num_sync_all_streams == 1 && s.reserved_bytes[MEMSNAP_POOL_ALL].current == 0 && s.active[MEMSNAP_POOL_ALL].current == 0);
  CHECK("events: invariants after empty_cache", check_ok());
}

static void test_empty_cache_keeps_used_segments(void) {
  fresh("");
  void *a = alloc(1000), *b = alloc(3 * MiB), *c = alloc(3 * MiB);
  release(c);
  void *d = alloc(12 * MiB);
  release(d);
  memsnap_empty_cache();
  memsnap_stats_t s = stats();
  CHECK("empty_cache: segments with live blocks stay",
        s.segment[MEMSNAP_POOL_ALL].current == 2 && s.reserved_bytes[MEMSNAP_POOL_ALL].current == (int64_t)(22 * MiB));
  release(a);
  release(b);
  memsnap_empty_cache();
  CHECK("empty_cache: then nothing is reserved", stats().reserved_bytes[MEMSNAP_POOL_ALL].current == 0 && check_ok());
}

static size_t ref_round(size_t n) { return n < 512 ? 512 : (n + 511) / 512 * 512; }

/* Random allocations and frees against counts the test keeps itself. */
static void test_reference_counts(void) {
  fresh("MEMSNAP_SIM_CAPACITY=4G");
  enum { N = 400, STEPS = 20000 };
  void *ptrs[N] = {0};
  size_t sizes[N] = {0};
  int64_t n_live = 0, bytes = 0, requested = 0, peak = 0; /* bytes: rounded sizes, a lower bound */
  unsigned seed = 12345;
  bool counts_ok = true, invariants_ok = true, no_overlap = true;
  for (int step = 0; step < STEPS; step++) {
    seed = seed * 1103515245u + 12345u;
    int i = (int)((seed >> 8) % N);
    if (ptrs[i]) {
      release(ptrs[i]);
      n_live--, bytes -= (int64_t)ref_round(sizes[i]), requested -= (int64_t)sizes[i];
      ptrs[i] = NULL;
    } else {
      seed = seed * 1103515245u + 12345u;
      size_t size = (seed >> 4) % 3 == 0 ? 1 + (seed >> 10) % (24 * MiB) : 1 + (seed >> 10) % (512 * KiB);
      ptrs[i] = alloc(size);
      sizes[i] = size;
      n_live++, bytes += (int64_t)ref_round(size), requested += (int64_t)size;
      if (requested > peak) peak = requested;
      for (int j = 0; j < N && no_overlap; j++) {
        if (j == i || !ptrs[j]) continue;
        uintptr_t s0 = addr(ptrs[i]), e0 = s0 + ref_round(size), s1 = addr(ptrs[j]), e1 = s1 + ref_round(sizes[j]);
        if (s0 < e1 && s1 < e0) no_overlap = false;
      }
    }
    memsnap_stats_t s = stats();
    /* A block may be larger than the rounded request (a remainder too small to split stays in
       it), so allocated_bytes is only bounded below; memsnap_check recomputes it exactly. */
    if (s.allocation[MEMSNAP_POOL_ALL].current != n_live || s.allocated_bytes[MEMSNAP_POOL_ALL].current < bytes ||
        s.requested_bytes[MEMSNAP_POOL_ALL].current != requested || s.requested_bytes[MEMSNAP_POOL_ALL].peak != peak)
      counts_ok = false;
    if (step % 97 == 0 && memsnap_check(0) != 0) {
      printf("  step %d: %s\n", step, memsnap_last_error());
      invariants_ok = false;
    }
  }
  CHECK("reference: counts, requested bytes and their peak match the test's own", counts_ok);
  CHECK("reference: no two live blocks overlap", no_overlap);
  CHECK("reference: invariants hold throughout", invariants_ok && check_ok());
  memsnap_stats_t s = stats();
  int64_t cur = s.allocated_bytes[MEMSNAP_POOL_ALL].current;
  CHECK("reference: allocated minus freed equals current",
        s.allocated_bytes[MEMSNAP_POOL_ALL].allocated - s.allocated_bytes[MEMSNAP_POOL_ALL].freed == cur &&
            s.requested_bytes[MEMSNAP_POOL_ALL].allocated - s.requested_bytes[MEMSNAP_POOL_ALL].freed == requested);
  memsnap_reset_peak_stats(0);
  s = stats();
  CHECK("reset_peak: peak becomes current", s.allocated_bytes[MEMSNAP_POOL_ALL].peak == cur &&
                                               s.reserved_bytes[MEMSNAP_POOL_LARGE].peak == s.reserved_bytes[MEMSNAP_POOL_LARGE].current);
  memsnap_reset_accumulated_stats(0);
  s = stats();
  CHECK("reset_accumulated: sums and counters zeroed, current kept",
        s.allocated_bytes[MEMSNAP_POOL_ALL].allocated == 0 && s.allocated_bytes[MEMSNAP_POOL_ALL].freed == 0 &&
            s.num_device_alloc == 0 && s.allocated_bytes[MEMSNAP_POOL_ALL].current == cur);
  for (int i = 0; i < N; i++)
    if (ptrs[i]) release(ptrs[i]);
  CHECK("reference: everything freed", stats().allocated_bytes[MEMSNAP_POOL_ALL].current == 0 && check_ok());
}

static void test_api_edges(void) {
  fresh("MEMSNAP_SIM_DEVICES=2");
  CHECK("api: backend name", strcmp(memsnap_backend_name(), "sim") == 0 && memsnap_device_count() == 2);
  CHECK("api: size 0 gives NULL without error", memsnap_malloc(0, 0, S1) == NULL && stats().num_ooms == 0);
  CHECK("api: negative size gives NULL", memsnap_malloc(-5, 0, S1) == NULL);
  CHECK("api: unknown device gives NULL", memsnap_malloc(100, 7, S1) == NULL &&
                                              strstr(memsnap_last_error(), "invalid device 7") != NULL);
  int x;
  memsnap_free(&x, 100, 0, S1);
  CHECK("api: freeing a foreign pointer is reported, not fatal", strstr(memsnap_last_error(), "did not allocate") != NULL);
  CHECK("api: memsnap_release of a foreign pointer", memsnap_release(&x) == MEMSNAP_EINVAL);
  memsnap_free(NULL, 0, 0, S1);
  void *d0 = memsnap_malloc(100, 0, S1), *d1 = memsnap_malloc(100, 1, S1);
  CHECK("devices: each device has its own address range", addr(d1) - addr(d0) >= ((uintptr_t)1 << 40));
  memsnap_stats_t s1;
  memsnap_get_stats(1, &s1);
  CHECK("devices: statistics are per device", s1.allocation[MEMSNAP_POOL_ALL].current == 1 &&
                                                  stats().allocation[MEMSNAP_POOL_ALL].current == 1);
  memsnap_free(d1, 0, 0, S1); /* wrong device hint: still found */
  memsnap_get_stats(1, &s1);
  CHECK("devices: free with a wrong device still finds the block", s1.allocation[MEMSNAP_POOL_ALL].current == 0);
  CHECK("api: memsnap_release finds the device", memsnap_release(d0) == MEMSNAP_OK);
  void *out = (void *)1;
  CHECK("api: memsnap_alloc reports ENOMEM", memsnap_alloc(&out, (size_t)1 << 45, 0, S1) == MEMSNAP_ENOMEM && out == NULL);

  int n = memsnap_stat_count();
  int64_t values[256];
  int got = memsnap_get_stats_flat(0, values, 256);
  bool found_alloc = false, found_ooms = false;
  for (int i = 0; i < n; i++) {
    if (!strcmp(memsnap_stat_key(i), "allocated_bytes.all.current")) found_alloc = true;
    if (!strcmp(memsnap_stat_key(i), "num_ooms")) found_ooms = values[i] == 1;
  }
  CHECK("flat stats: 123 keys in torch spelling and num_invalid_frees", n == 123 && got == n && found_alloc && memsnap_stat_key(n) == NULL);
  CHECK("flat stats: values follow the keys", found_ooms);
  const char *def, *comment;
  CHECK("options table: first entry is MEMSNAP_BACKEND", !strcmp(memsnap_option_info(0, &def, &comment), "MEMSNAP_BACKEND") &&
                                                             !strcmp(def, "cuda") && memsnap_option_info(99, NULL, NULL) == NULL);

  fresh("");
  setenv("MEMSNAP_BACKEND", "cuda", 1);
  unsetenv("LD_LIBRARY_PATH");
  /* On a machine without a driver the cuda backend fails cleanly; with one it works. */
  const char *name = memsnap_backend_name();
  CHECK("cuda backend: loads or fails with a clear message",
        (name && !strcmp(name, "cuda")) || strstr(memsnap_last_error(), "libcuda.so.1") != NULL ||
            strstr(memsnap_last_error(), "cuda backend") != NULL);
  CHECK("cuda backend: malloc without a driver returns NULL", name || memsnap_malloc(100, 0, S1) == NULL);
  memsnap_shutdown();
}


/* ---- invalid frees (recorder/allocator/misuse.c) ---------------------------------------------------- */

/* Whether two statistics are equal but for the invalid-free counter. */
static bool same_state(memsnap_stats_t a, memsnap_stats_t b) {
  a.num_invalid_frees = b.num_invalid_frees = 0;
  return memcmp(&a, &b, sizeof a) == 0;
}

/* Runs fn with stderr going to a file; returns what it printed (static buffer). */
static const char *stderr_of(void (*fn)(void)) {
  static char text[16384];
  char path[] = "/tmp/memsnap-stderr-XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  fflush(stderr);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  text[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  return text;
}

static int count_lines(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p++) n++;
  return n;
}

static void *df_block;
static void double_free_five_times(void) { /* one site, five times */
  for (int i = 0; i < 5; i++) release(df_block);
}

/* A free from a stack of depth `depth`: each depth is a site of its own while recording. */
static __attribute__((noipa)) void free_at_depth(void *p, int depth) {
  if (depth > 0) free_at_depth(p, depth - 1);
  else release(p);
  __asm__ volatile("" ::: "memory");
}
static void double_free_from_20_sites(void) {
  for (int i = 0; i < 20; i++) free_at_depth(df_block, i);
}

static void test_invalid_frees(void) {
  fresh("");
  void *a = alloc(1000), *b = alloc(3 * MiB), *keep = alloc(4096);
  release(a);
  memsnap_stats_t before = stats();
  CHECK("invalid free: state sound before", check_ok());
  release(a);
  CHECK("invalid free: double free is named", strstr(memsnap_last_error(), "double free") != NULL);
  memsnap_free((char *)b + 4096, 0, 0, S1);
  CHECK("invalid free: interior pointer is named with its block",
        strstr(memsnap_last_error(), "interior pointer, 4096 bytes into the 3145728-byte block") != NULL);
  int x;
  memsnap_free(&x, 8, 0, S1);
  CHECK("invalid free: foreign pointer is named", strstr(memsnap_last_error(), "did not allocate") != NULL);
  CHECK("invalid free: memsnap_release returns EINVAL", memsnap_release((char *)keep + 512) == MEMSNAP_EINVAL);
  memsnap_stats_t after = stats();
  CHECK("invalid free: counted (4, memsnap_release's too)", after.num_invalid_frees == 4);
  CHECK("invalid free: nothing else in the allocator changed", same_state(before, after));
  CHECK("invalid free: the invariant checker passes after them", check_ok());
  release(b);
  release(keep);
  CHECK("invalid free: the blocks behind interior pointers still free normally",
        stats().allocation[MEMSNAP_POOL_ALL].current == 0 && check_ok());
  memsnap_reset_accumulated_stats(0);
  CHECK("invalid free: the counter is accumulated (reset with the others)", stats().num_invalid_frees == 0);

  fresh("");
  df_block = alloc(1000);
  release(df_block);
  const char *err = stderr_of(double_free_five_times);
  CHECK("invalid free: warned once for five frees from one site", count_lines(err, "memsnap: warning: invalid free of") == 1);
  CHECK("invalid free: the warning says how to find the rest", strstr(err, "MEMSNAP_RECORD=1") != NULL &&
                                                                  strstr(err, "memsnap analyze") != NULL);
  CHECK("invalid free: all five counted", stats().num_invalid_frees == 5);

  fresh("MEMSNAP_RECORD=1;MEMSNAP_STACKS=native");
  df_block = alloc(1000);
  release(df_block);
  err = stderr_of(double_free_from_20_sites);
  CHECK("invalid free: one warning per site, at most 16 a process",
        count_lines(err, "memsnap: warning: invalid free of") == 16 && strstr(err, "no more will be") != NULL);
  CHECK("invalid free: 20 counted", stats().num_invalid_frees == 20);

  fresh("MEMSNAP_INVALID_FREE=silent");
  df_block = alloc(1000);
  release(df_block);
  err = stderr_of(double_free_five_times);
  CHECK("invalid free: silent prints nothing and counts", err[0] == '\0' && stats().num_invalid_frees == 5);

  fresh("MEMSNAP_ALLOCATOR=async");
  void *c = alloc(1 << 20);
  memsnap_free((char *)c + 512, 0, 0, S1);
  CHECK("invalid free: async mode names interior pointers", strstr(memsnap_last_error(), "interior pointer") != NULL);
  release(c);
  release(c);
  CHECK("invalid free: async mode counts them", stats().num_invalid_frees == 2 && check_ok());

  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    fresh("MEMSNAP_INVALID_FREE=abort");
    void *p = alloc(1000);
    release(p);
    release(p);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK("invalid free: MEMSNAP_INVALID_FREE=abort ends the process", WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  memsnap_shutdown();
}

int main(void) {
  test_rounding();
  test_pools();
  test_best_fit_and_split();
  test_sim_placement();
  test_max_split_size();
  test_oom_release_retry();
  test_memory_fraction_and_gc();
  test_streams_and_events();
  test_empty_cache_keeps_used_segments();
  test_reference_counts();
  test_api_edges();
  test_invalid_frees();
  memsnap_shutdown();
  TEST_DONE();
}
