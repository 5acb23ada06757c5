/* test_stacks.c: the stacks recorded are the ones libunwind gave before the capture was cached.
 *
 * stacks.c walks native stacks with .eh_frame's rules and reuses each thread's earlier walks
 * (unwind.c); MEMSNAP_TEST_STACKS keeps the capture of before (unw_backtrace every time) for
 * this test. One workload, run by this program in child processes:
 *   - under MEMSNAP_TEST_STACKS=check, where every capture is made both ways and compared:
 *     no stack may differ;
 *   - under MEMSNAP_TEST_STACKS=reference and without it, each dumping a snapshot: the two
 *     snapshots must name the same frames for every event, with the same stack ids;
 *   - with BASE_LIB_DIR given, also on that directory's libmemsnap.so (the library before this
 *     design, built from an older commit: tests/recorder/compare_stacks.sh), whose snapshot must
 *     name the same frames for every event, with the same stack ids.
 * The snapshot's stacks at known depths are also checked frame by frame: pair_here, then `deep`
 * exactly d times, then its caller, for d = 1, 5, 30, 100, and 128 frames at most (d = 148).
 * The workload is what could make a cache lie: recursion from 1 to 150 frames deep (past the
 * 136 frames walked), two call sites taking turns at one depth, one site reached from twelve
 * and twenty callers in turn (stacks that begin alike and differ far out), frames of variable size
 * (alloca: the CFA from rbp), with a frame pointer and realigned (where only rbp tells two
 * stacks apart), threads, an allocation from a signal
 * handler on the thread's stack and on an alternate one (the signal frame goes to libunwind),
 * memsnap_alloc_for's caller (below a stack longer than a stack keeps too), a library unloaded
 * and loaded again, a fork, and a reset of the
 * tables (memsnap_shutdown) between captures.
 *
 * usage: test_stacks BUILD_DIR [BASE_LIB_DIR]   (prints "N passed, N failed")
 */
#include <alloca.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memsnap.h"
#include "testhelper.h"

#define S1 ((memsnap_stream_t)(uintptr_t)0x1000)

static const char *build_dir = "build";

/* ---- the workload ------------------------------------------------------------------------ */

static __attribute__((noipa)) void pair_here(size_t size) {
  void *p = memsnap_malloc((ssize_t)size, 0, S1);
  memsnap_free(p, 0, 0, S1);
  __asm__ volatile("" ::: "memory");
}

static __attribute__((noipa)) void other_site(size_t size) {
  void *p = memsnap_malloc((ssize_t)size, 0, S1);
  __asm__ volatile("" ::: "memory");
  memsnap_free(p, 0, 0, S1);
}

static __attribute__((noipa)) void deep(int depth, size_t size) {
  if (depth > 1) deep(depth - 1, size);
  else pair_here(size);
  __asm__ volatile("" ::: "memory");
}

/* Two sites at the same depth, taking turns. */
static __attribute__((noipa)) void turns(int depth, int n) {
  if (depth > 1) {
    turns(depth - 1, n);
  } else {
    for (int i = 0; i < n; i++) {
      if (i & 1) pair_here(512);
      else other_site(512);
    }
  }
  __asm__ volatile("" ::: "memory");
}

/* One site reached from many callers at the same depth (many_callers.h): twelve take turns
 * (unwind.c keeps 16 chains a starting frame, PROBES), then twenty once (more than it keeps). */
#define MANY_CALLERS_LEAF() pair_here(768)
#include "many_callers.h"
static void many_callers(void) {
  for (int round = 0; round < 6; round++) /* twelve in turn, at two depths */
    for (int i = 0; i < 12; i++) callers[(i * 5 + round) % 12](round < 3 ? 10 : 2);
  for (int i = 0; i < NCALLERS; i++) callers[i](4); /* more than the slots hold: some go */
}

/* A frame whose size changes from call to call: its CFA comes from rbp. */
static __attribute__((noipa)) void variable_frame(int n, int depth) {
  volatile char *buf = alloca((size_t)n * 64 + 16);
  buf[0] = (char)n;
  if (depth > 1) variable_frame(n + 1, depth - 1);
  else pair_here(1024);
  __asm__ volatile("" ::: "memory");
}

/* A frame with a frame pointer. */
static __attribute__((noipa, optimize("no-omit-frame-pointer"))) void with_frame_pointer(int depth) {
  volatile int x = depth;
  if (depth > 1) with_frame_pointer(depth - 1);
  else variable_frame(x, 3);
  __asm__ volatile("" ::: "memory");
}

/* A frame realigned to 64 bytes: its CFA comes from rbp, and the frames it calls start at the
 * same stack pointer for callers up to 64 bytes apart. */
static __attribute__((noipa)) void aligned_frame(void) {
  char buf[64] __attribute__((aligned(64)));
  buf[0] = 1;
  __asm__ volatile("" : : "r"(buf) : "memory");
  pair_here(768);
  __asm__ volatile("" ::: "memory");
}

/* Calls aligned_frame from one of two sites, k bytes lower on the stack: the inner frames may
 * lie where they lay for the other site, and the word where aligned_frame's return address was
 * still holds it (alloca leaves it), so only aligned_frame's rbp tells the two apart. */
static __attribute__((noipa)) void shifted(int k, int site) {
  volatile char *buf = alloca((size_t)k + 1);
  static volatile int after __attribute__((unused));
  buf[k] = 0;
  if (site) {
    aligned_frame();
    after = 1;
  } else {
    aligned_frame();
    after = 2;
  }
}

static __attribute__((noipa)) void alloc_for_caller(void) {
  void *p = NULL;
  memsnap_alloc_for(&p, 4096, 0, S1, __builtin_return_address(0));
  memsnap_free(p, 0, 0, S1);
}

/* memsnap_alloc_for's caller below a stack longer than a stack keeps: the stack starts at the
 * caller's frame, not where the library's frames end, so the cached cut stack does not serve. */
static __attribute__((noipa)) void deep_for(int depth) {
  if (depth > 1) deep_for(depth - 1);
  else alloc_for_caller();
  __asm__ volatile("" ::: "memory");
}

static void on_signal(int sig) {
  (void)sig;
  pair_here(2048);
}

static void signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGUSR2, &sa, NULL);
  raise(SIGUSR2); /* on the thread's stack */
  static char alt[65536];
  stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGUSR2, &sa, NULL);
  raise(SIGUSR2); /* on an alternate stack */
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, NULL);
}

static void library_twice(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/libbench_stacks.so", build_dir);
  for (int round = 0; round < 2; round++) {
    void *h = dlopen(path, RTLD_NOW);
    if (!h) {
      fprintf(stderr, "test_stacks: %s\n", dlerror());
      return;
    }
    double (*pairs)(long) = (double (*)(long))dlsym(h, "bench_stacks_pairs");
    if (pairs) pairs(3);
    dlclose(h);
  }
}

static void *thread_body(void *arg) {
  int k = (int)(intptr_t)arg;
  for (int round = 0; round < 50; round++) {
    deep(1 + (round * 7 + k) % 40, 512);
    turns(5 + k, 4);
  }
  return NULL;
}

/* Depths whose stacks are checked frame by frame, allocated with KNOWN_SIZE + depth bytes. */
static const int known_depths[] = {1, 5, 30, 100, 148};
#define NKNOWN ((int)(sizeof known_depths / sizeof known_depths[0]))
#define KNOWN_SIZE 300000

static void workload(bool threads) {
  for (int i = 0; i < NKNOWN; i++) deep(known_depths[i], KNOWN_SIZE + (size_t)known_depths[i]);
  for (int rep = 0; rep < 3; rep++) {
    for (int d = 1; d <= 150; d += (d < 20 ? 1 : 7)) deep(d, 512 + (size_t)d);
    turns(12, 20);
    many_callers();
    for (int n = 1; n < 8; n++) with_frame_pointer(n);
    alloc_for_caller();
    for (int k = 0; k < 3; k++) { /* the same cut stack, from the library's frames and from the caller */
      deep(140, 640);
      deep_for(140);
      deep(140, 640);
    }
    for (int k = 0; k <= 64; k += 16) { /* most pairs of calls 16 bytes apart fall in one 64-byte span */
      shifted(k, 0);
      shifted(k + 16, 1);
    }
    signals();
    library_twice();
  }
  if (threads) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, thread_body, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    pid_t pid = fork();
    if (pid == 0) {
      memsnap_record_start(0, "native");
      deep(20, 512);
      turns(3, 4);
      _exit(0);
    }
    waitpid(pid, NULL, 0);
  }
}

/* The child's part: record the workload (after a reset of the tables halfway through), dump it
 * to `db` when given. */
static int run_workload(const char *db) {
  setenv("MEMSNAP_BACKEND", "sim", 1);
  memsnap_record_start(0, "native");
  workload(db == NULL);
  memsnap_shutdown(); /* the stack tables go; every thread's caches must forget them */
  setenv("MEMSNAP_BACKEND", "sim", 1);
  memsnap_record_start(1000000, "native");
  workload(db == NULL);
  if (db && memsnap_dump(db) != MEMSNAP_OK) {
    fprintf(stderr, "test_stacks: %s\n", memsnap_last_error());
    return 1;
  }
  return 0;
}

/* The child's part for the check that twelve stacks beginning alike stay cached: after a first
 * turn of many_callers' twelve callers, further turns walk nothing again. Prints the walks. */
static uint64_t counter(const char *name) {
  const char *keys[64];
  uint64_t values[64];
  int n = memsnap_stack_counters(keys, values, 64);
  for (int i = 0; i < n; i++)
    if (!strcmp(keys[i], name)) return values[i];
  return UINT64_MAX;
}
static int run_sites(void) {
  setenv("MEMSNAP_BACKEND", "sim", 1);
  memsnap_record_start(0, "native");
  uint64_t walked = 0, captures = 0;
  for (int round = 0; round < 6; round++) { /* one call site for every turn: the first one walks */
    if (round == 1) {
      walked = counter("native_walked");
      captures = counter("captures");
    }
    for (int i = 0; i < 12; i++) callers[(i * 5 + round) % 12](10);
  }
  walked = counter("native_walked") - walked;
  captures = counter("captures") - captures;
  printf("sites: %llu captures, %llu walked\n", (unsigned long long)captures, (unsigned long long)walked);
  return captures == 120 && walked == 0 ? 0 : 1;
}

/* ---- the parent's checks ----------------------------------------------------------------- */

/* Runs this program's workload in a child with MEMSNAP_TEST_STACKS=mode (NULL: unset), its
 * stderr into `err` when given, with libmemsnap.so from `libdir` when given (LD_LIBRARY_PATH
 * wins over the program's RUNPATH). Returns the exit status. */
static int child(const char *self, const char *mode, const char *db, const char *err, const char *libdir) {
  pid_t pid = fork();
  if (pid == 0) {
    if (mode) setenv("MEMSNAP_TEST_STACKS", mode, 1);
    else unsetenv("MEMSNAP_TEST_STACKS");
    if (libdir) setenv("LD_LIBRARY_PATH", libdir, 1);
    if (err && !freopen(err, "w", stderr)) _exit(2);
    execl(self, self, "workload", build_dir, db ? db : (char *)NULL, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* Every event's stack as text (frame names, files, lines, modules, offsets), in id order; a
 * frame without a symbol is named by its address, which differs from run to run: '?'. */
static char *stacks_text(const char *db_path) {
  sqlite3 *db;
  if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return NULL;
  const char *sql =
      "select e.id, e.stack_id, coalesce((select group_concat((case when f.name like '0x%' then '?' else f.name end) || ' ' || coalesce(f.file,'') || ':' || "
      "coalesce(f.line,0) || ' ' || coalesce(replace(f.module, rtrim(f.module, replace(f.module, '/', '')), ''),'') || '+' || "
      "coalesce(f.offset,0) || (case f.inlined when 1 then ' i' else '' end), '|') from (select * from stack_frames sf "
      "where sf.stack_id = e.stack_id order by sf.position) s join frames f on f.id = s.frame_id), '') from events e order by e.id";
  sqlite3_stmt *st;
  size_t cap = 1 << 20, len = 0;
  char *out = malloc(cap);
  if (!out || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    printf("  query failed: %s\n", sqlite3_errmsg(db));
    free(out);
    sqlite3_close(db);
    return NULL;
  }
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *frames = (const char *)sqlite3_column_text(st, 2);
    size_t need = len + strlen(frames ? frames : "") + 64;
    if (need > cap) {
      while (need > cap) cap *= 2;
      char *grown = realloc(out, cap);
      if (!grown) break;
      out = grown;
    }
    len += (size_t)sprintf(out + len, "%lld %lld %s\n", (long long)sqlite3_column_int64(st, 0),
                           (long long)sqlite3_column_int64(st, 1), frames ? frames : "");
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

/* Whether the snapshot's first allocation of KNOWN_SIZE + depth bytes has the frames of
 * deep(depth): pair_here, `deep` depth times, then a frame that is not `deep` (or nothing, where
 * the stack reached the 128 native frames a stack keeps). */
static bool known_frames(const char *db_path, int depth, char *seen, size_t seen_len) {
  sqlite3 *db;
  seen[0] = '\0';
  if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return false;
  char sql[512];
  snprintf(sql, sizeof sql,
           "select f.name from stack_frames sf join frames f on f.id = sf.frame_id where sf.stack_id = (select "
           "stack_id from events where kind = 1 and requested_size = %d order by id limit 1) order by sf.position",
           KNOWN_SIZE + depth);
  sqlite3_stmt *st;
  int n = 0, deeps = 0, after = -1;
  bool first_ok = false;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *name = (const char *)sqlite3_column_text(st, 0);
      name = name ? name : "";
      if (n == 0) first_ok = !strcmp(name, "pair_here");
      else if (after < 0 && !strcmp(name, "deep")) deeps++;
      else if (after < 0) after = n;
      if (n < 4 || (after >= 0 && n <= after + 1)) {
        size_t len = strlen(seen);
        snprintf(seen + len, seen_len - len, "%s%s", n ? " " : "", name);
      }
      n++;
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  size_t len = strlen(seen);
  snprintf(seen + len, seen_len - len, " (%d frames, %d deep)", n, deeps);
  if (1 + depth >= 128) return first_ok && n == 128 && deeps == 127;
  return first_ok && deeps == depth && after == depth + 1;
}

static long count_lines(const char *s) {
  long n = 0;
  for (; s && *s; s++) n += *s == '\n';
  return n;
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "workload")) {
    build_dir = argv[2];
    return run_workload(argc > 3 ? argv[3] : NULL);
  }
  if (argc > 1 && !strcmp(argv[1], "sites")) return run_sites();
  if (argc > 1) build_dir = argv[1];
  const char *base_dir = argc > 2 ? argv[2] : NULL;
  char self[1024], dir[] = "/tmp/memsnap-test-stacks-XXXXXX", err[1100], ref_db[1100], new_db[1100], base_db[1100];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0 || !mkdtemp(dir)) {
    printf("cannot set up\n0 passed, 1 failed\n");
    return 1;
  }
  self[n] = '\0';
  snprintf(err, sizeof err, "%s/check.err", dir);
  snprintf(ref_db, sizeof ref_db, "%s/reference.db", dir);
  snprintf(new_db, sizeof new_db, "%s/cached.db", dir);
  snprintf(base_db, sizeof base_db, "%s/base.db", dir);

  CHECK("check: the workload runs with every capture made both ways", child(self, "check", NULL, err, NULL) == 0);
  unsigned long long captures = 0, differ = 1, walked = 0, fell_back = 0;
  FILE *f = fopen(err, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "memsnap: stack check: %llu captures, %llu differ (native: %llu walked, %llu by libunwind;", &captures,
               &differ, &walked, &fell_back) == 4)
      break;
  if (f) fclose(f);
  printf("  %llu captures compared, %llu differ; %llu walked, %llu by libunwind\n", captures, differ, walked, fell_back);
  CHECK("check: every native stack is the one unw_backtrace gives", captures > 4000 && differ == 0);
  CHECK("check: most captures reuse a cached walk", walked * 4 < captures);
  CHECK("check: signal frames go to libunwind", fell_back > 0);
  char sites[1200];
  snprintf(sites, sizeof sites, "'%s' sites", self);
  CHECK("sites: twelve stacks that begin alike, taking turns, stay cached (nothing walked again)", system(sites) == 0);

  CHECK("reference: the workload dumps a snapshot with libunwind's stacks", child(self, "reference", ref_db, NULL, NULL) == 0);
  CHECK("cached: the workload dumps a snapshot with the cached capture", child(self, NULL, new_db, NULL, NULL) == 0);
  char *a = stacks_text(ref_db), *b = stacks_text(new_db);
  long events = count_lines(a);
  printf("  %ld events compared\n", events);
  CHECK("snapshots: every event has the same stack id and the same frames", a && b && events > 600 && !strcmp(a, b));
  if (a && b && strcmp(a, b)) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    while (i > 0 && a[i - 1] != '\n') i--;
    printf("  first difference:\n  reference: %.300s\n  cached:    %.300s\n", a + i, b + i);
  }
  for (int i = 0; i < NKNOWN; i++) {
    char name[128], seen[2048];
    snprintf(name, sizeof name, "frames: deep(%d)'s allocation has pair_here, deep x %d, its caller", known_depths[i],
             known_depths[i] < 127 ? known_depths[i] : 127);
    bool ok = known_frames(new_db, known_depths[i], seen, sizeof seen);
    CHECK(name, ok);
    if (!ok) printf("  seen: %s\n", seen);
  }
  if (base_dir) {
    char lib[1100];
    snprintf(lib, sizeof lib, "%s/libmemsnap.so", base_dir);
    CHECK("base: the library to compare with exists", access(lib, R_OK) == 0);
    CHECK("base: the workload dumps a snapshot with the base library", child(self, NULL, base_db, NULL, base_dir) == 0);
    char *c = stacks_text(base_db);
    printf("  %ld events compared with %s\n", count_lines(c), lib);
    CHECK("base: every event has the base library's stack id and frames", b && c && count_lines(c) == events && !strcmp(b, c));
    if (b && c && strcmp(b, c)) {
      size_t i = 0;
      while (c[i] && c[i] == b[i]) i++;
      while (i > 0 && c[i - 1] != '\n') i--;
      printf("  first difference:\n  base:   %.300s\n  cached: %.300s\n", c + i, b + i);
    }
    free(c);
    unlink(base_db);
  }
  free(a);
  free(b);
  unlink(err);
  unlink(ref_db);
  unlink(new_db);
  rmdir(dir);
  TEST_DONE();
}
