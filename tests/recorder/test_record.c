/* test_record.c: history recording and snapshots, on the simulated device.
 *
 * Reads every snapshot back with SQLite's C API and checks it against what the test did:
 * the ring's bound and dropped count over 10 million events, stacks naming this file's own
 * functions, a full round trip (events, blocks, segments, statistics, marks, ranges), dumps
 * killed midway, path patterns and bad paths, and the dumps at out of memory and on a signal;
 * the model's events (module, tensor, step, backward: memsnap_module_event and the rest).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memsnap.h"
#include "testhelper.h"

#define MiB ((size_t)1 << 20)
#define S1 ((memsnap_stream_t)(uintptr_t)0x1000)

static char dir[256];

static void fresh(const char *settings) {
  memsnap_shutdown();
  static const char *const vars[] = {"MEMSNAP_RECORD", "MEMSNAP_MAX_ENTRIES", "MEMSNAP_STACKS", "MEMSNAP_DUMP",
                                     "MEMSNAP_DUMP_ON_OOM", "MEMSNAP_DUMP_SIGNAL", "MEMSNAP_SIM_CAPACITY", NULL};
  th_environment(vars, settings);
  setenv("MEMSNAP_BACKEND", "sim", 1);
}

static char *path_of(const char *name) {
  static char p[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

/* Runs a query returning one integer; -1 on any error. */
static int64_t q1(const char *db_path, const char *sql) {
  sqlite3 *db;
  int64_t v = -1;
  if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
      if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
      sqlite3_finalize(st);
    } else {
      printf("  query failed: %s: %s\n", sql, sqlite3_errmsg(db));
    }
  }
  sqlite3_close(db);
  return v;
}

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_ring_bounded(void) {
  /* With the live mapping: its state, taken every half ring (20,000 times here), reuses its
     buffers, so RSS stays flat under AddressSanitizer's quarantine too. */
  fresh("MEMSNAP_STACKS=none");
  CHECK("record: start with 1000 entries", memsnap_record_start(1000, NULL) == MEMSNAP_OK);
  uint64_t events = 0;
  long rss_start = 0;
  while (events < 10000000) { /* alloc, free_requested, free_completed: 3 events a pair */
    void *p = memsnap_malloc(4096, 0, S1);
    memsnap_free(p, 0, 0, S1);
    events += 3;
    if (events == 300000) rss_start = rss_kib();
  }
  long rss_end = rss_kib();
  printf("  %llu events, RSS %ld KiB after 300k, %ld KiB after all\n", (unsigned long long)events, rss_start, rss_end);
  CHECK("ring: memory flat over 10 million events", rss_end - rss_start < 1024);
  char *db = path_of("ring.db");
  CHECK("ring: dump succeeds", memsnap_dump(db) == MEMSNAP_OK);
  /* +1: the dump's own `snapshot` event; the first segment_alloc was dropped long ago. */
  int64_t total = (int64_t)events + 1 + 1;
  CHECK("ring: keeps exactly max_entries events", q1(db, "select count(*) from events") == 1000);
  CHECK("ring: dropped count right", q1(db, "select value from meta where key='dropped_events'") == total - 1000);
  CHECK("ring: ids count every event, dropped or not", q1(db, "select max(id) from events") == total &&
                                                           q1(db, "select min(id) from events") == total - 999);
  CHECK("ring: the last event is the snapshot", q1(db, "select kind from events order by id desc limit 1") == 7);
  memsnap_record_stop();
}

/* The recording process's memory budget (docs/RELIABILITY.md): the ring is max_entries x 64 bytes
 * and stacks are interned, so memory grows by about the ring's size while it fills and then
 * stays flat, whatever the run's length. */
static void test_ring_budget(void) {
  fresh("MEMSNAP_STACKS=native");
  const size_t entries = 600000;
  long before = rss_kib();
  CHECK("budget: start with 600000 entries", memsnap_record_start(entries, NULL) == MEMSNAP_OK);
  long filled = 0;
  for (size_t events = 0; events < 3 * entries; events += 3) {
    void *p = memsnap_malloc(4096, 0, S1);
    memsnap_free(p, 0, 0, S1);
    if (events + 3 >= entries + 3 && !filled) filled = rss_kib(); /* the ring just went round */
  }
  long after = rss_kib(), ring_kib = (long)(entries * 64 / 1024);
  printf("  ring of %zu entries (%ld KiB): RSS +%ld KiB when full, +%ld KiB after 3x as many events\n", entries,
         ring_kib, filled - before, after - before);
  CHECK("budget: filling the ring costs its size (+ 8 MiB at most)", filled - before <= ring_kib + 8192);
  CHECK("budget: then memory stays flat", after - filled < 1024);
  memsnap_record_stop();
}

/* noipa: neither inlined nor folded with its twin (identical code folding would merge them). */
static __attribute__((noipa)) void *allocate_weights_for_test(size_t n) {
  void *p = memsnap_malloc((ssize_t)n, 0, S1);
  __asm__ volatile("" ::: "memory"); /* not a tail call: keep this frame */
  return p;
}
static __attribute__((noipa)) void *allocate_activation_for_test(size_t n) {
  void *p = memsnap_malloc((ssize_t)n, 0, S1);
  __asm__ volatile("" ::: "memory"); /* keep the call a call */
  return p;
}

/* A helper the compiler must inline into its caller: addr2line -i names both, each with its line. */
enum { INLINED_CALL_LINE = __LINE__ + 2 };
static inline __attribute__((always_inline)) void *inlined_helper_for_test(size_t n) {
  void *p = memsnap_malloc((ssize_t)n, 0, S1);
  return p;
}
enum { CALLER_LINE = __LINE__ + 2 };
static __attribute__((noipa)) void *allocate_through_inline_for_test(size_t n) {
  void *p = inlined_helper_for_test(n);
  __asm__ volatile("" ::: "memory"); /* keep this frame */
  return p;
}

static void test_inlined_frames(void) {
  fresh("MEMSNAP_STACKS=native");
  memsnap_record_start(0, NULL);
  void *through_inline = allocate_through_inline_for_test(4096);
  char *db = path_of("inlined.db"), sql[1024];
  CHECK("inlined: dump", memsnap_dump(db) == MEMSNAP_OK);
  snprintf(sql, sizeof sql,
           "select count(*) from blocks bl join stack_frames s0 on s0.stack_id = bl.stack_id and s0.position = 0 "
           "join frames f0 on f0.id = s0.frame_id join stack_frames s1 on s1.stack_id = bl.stack_id and s1.position = 1 "
           "join frames f1 on f1.id = s1.frame_id where bl.address = %llu "
           "and f0.name = 'inlined_helper_for_test' and f0.inlined = 1 and f0.line = %d and f0.file like '%%tests/recorder/test_record.c' "
           "and f1.name = 'allocate_through_inline_for_test' and f1.inlined = 0 and f1.line = %d and f0.pc = f1.pc",
           (unsigned long long)(uintptr_t)through_inline, (int)INLINED_CALL_LINE, (int)CALLER_LINE);
  CHECK("stacks: an inlined function is a frame of its own before its caller, each with its line (addr2line -i)",
        q1(db, sql) == 1);
  CHECK("stacks: frames not inlined say so", q1(db, "select count(*) from frames where name = 'allocate_through_inline_for_test' and inlined = 0") == 1);
  memsnap_free(through_inline, 0, 0, S1);
  memsnap_record_stop();
}

static void test_round_trip(void) {
  fresh("MEMSNAP_STACKS=native");
  memsnap_record_start(0, NULL);
  void *w = allocate_weights_for_test(3 * MiB);
  memsnap_mark("iteration");
  memsnap_range_push("forward");
  void *a = allocate_activation_for_test(1000);
  void *b = allocate_activation_for_test(12 * MiB + 5);
  memsnap_range_pop();
  memsnap_free(a, 0, 0, S1);
  void *loop[3];
  volatile int three = 3; /* not unrolled: one call site */
  for (int i = 0; i < three; i++) loop[i] = allocate_activation_for_test(2048);
  for (int i = 0; i < three; i++) memsnap_free(loop[i], 0, 0, S1);
  memsnap_mark("iteration");
  memsnap_range_push("open at the snapshot");
  char *db = path_of("round.db");
  CHECK("round trip: dump", memsnap_dump(db) == MEMSNAP_OK);
  memsnap_range_pop();
  CHECK("round trip: schema version 1", q1(db, "pragma user_version") == 1 &&
                                            q1(db, "select value from meta where key='format_version'") == 1);
  CHECK("round trip: event counts by kind",
        q1(db, "select count(*) from events where kind=1") == 6 && q1(db, "select count(*) from events where kind=2") == 4 &&
            q1(db, "select count(*) from events where kind=3") == 4 && q1(db, "select count(*) from events where kind=4") == 2);
  char sql[512];
  snprintf(sql, sizeof sql, "select count(*) from events where kind=1 and address=%llu and size=%zu and requested_size=%zu",
           (unsigned long long)(uintptr_t)b, 12 * MiB + 512, 12 * MiB + 5);
  CHECK("round trip: alloc event has address, rounded and requested size", q1(db, sql) == 1);
  snprintf(sql, sizeof sql, "select count(*) from blocks where state='allocated' and address in (%llu, %llu)",
           (unsigned long long)(uintptr_t)w, (unsigned long long)(uintptr_t)b);
  CHECK("round trip: live blocks are the allocated ones", q1(db, sql) == 2 &&
                                                              q1(db, "select count(*) from blocks where state='allocated'") == 2);
  CHECK("round trip: every live block has its stack", q1(db, "select count(*) from blocks where state='allocated' and stack_id is null") == 0);
  memsnap_stats_t s;
  memsnap_get_stats(0, &s);
  snprintf(sql, sizeof sql, "select (select sum(size) from segments) = %lld and (select value from stats where key='allocated_bytes.all.current') = %lld",
           (long long)s.reserved_bytes[0].current, (long long)s.allocated_bytes[0].current);
  CHECK("round trip: segments and statistics match the allocator", q1(db, sql) == 1);
  CHECK("round trip: segments made of their blocks",
        q1(db, "select count(*) from segments g where size != (select sum(size) from blocks where segment_id = g.id)") == 0);
  CHECK("round trip: two marks with their label",
        q1(db, "select count(*) from marks m join labels l on l.id = m.label_id where l.text='iteration'") == 2);
  CHECK("round trip: a closed range and one still open",
        q1(db, "select count(*) from ranges r join labels l on l.id=r.label_id where l.text='forward' and end_ns > start_ns and depth=0") == 1 &&
            q1(db, "select count(*) from ranges where end_ns is null") == 1);
  CHECK("round trip: times increase with ids", q1(db, "select count(*) from events a join events b on b.id = a.id + 1 where b.time_ns < a.time_ns") == 0);
  CHECK("stacks: name this test's own functions",
        q1(db, "select count(*) from frames where name='allocate_weights_for_test'") == 1 &&
            q1(db, "select count(*) from frames where name='allocate_activation_for_test'") == 1);
  snprintf(sql, sizeof sql,
           "select count(*) from blocks bl join stack_frames sf on sf.stack_id = bl.stack_id and sf.position = 0 "
           "join frames f on f.id = sf.frame_id where bl.address = %llu and f.name = 'allocate_weights_for_test'",
           (unsigned long long)(uintptr_t)w);
  CHECK("stacks: a block's innermost frame is the function that allocated it", q1(db, sql) == 1);
  CHECK("stacks: a repeated stack is stored once, other call sites apart",
        q1(db, "select count(distinct stack_id) from events where kind=1 and size=2048") == 1 &&
            q1(db, "select count(distinct stack_id) from events where kind=1 and stack_id in (select stack_id from stack_frames sf join frames f on f.id=sf.frame_id where f.name='allocate_activation_for_test')") == 3);
  CHECK("stacks: native frames have file and line from debug information (addr2line)",
        q1(db, "select count(*) from frames where name='allocate_weights_for_test' and file like '%tests/recorder/test_record.c' and line > 0") == 1);
  CHECK("stacks: frames name their module", q1(db, "select count(*) from frames where kind='native' and module like '%test_record'") >= 2);
  memsnap_free(w, 0, 0, S1);
  memsnap_free(b, 0, 0, S1);

  fresh("MEMSNAP_STACKS=none;MEMSNAP_RECORD=1");
  void *p = memsnap_malloc(100, 0, S1);
  db = path_of("nostacks.db");
  memsnap_dump(db);
  CHECK("stacks none: events without stacks", q1(db, "select count(*) from events where stack_id is not null") == 0 &&
                                                  q1(db, "select count(*) from events where kind=1") == 1);
  memsnap_free(p, 0, 0, S1);
}

static void test_several_devices(void) {
  fresh("MEMSNAP_SIM_DEVICES=3;MEMSNAP_RECORD=1");
  setenv("MEMSNAP_SIM_DEVICES", "3", 1);
  void *p0 = memsnap_malloc(1000, 0, S1), *p2 = memsnap_malloc(5 * MiB, 2, S1);
  char *db = path_of("devices.db");
  CHECK("devices: one snapshot", memsnap_dump(db) == MEMSNAP_OK);
  CHECK("devices: covers every device used, with its segments and events",
        q1(db, "select count(*) from devices") == 2 && q1(db, "select count(distinct device) from segments") == 2 &&
            q1(db, "select count(*) from events where kind=1 and device=2 and size=5242880") == 1 &&
            q1(db, "select value from meta where key='device_count'") == 3);
  CHECK("devices: statistics per device",
        q1(db, "select value from stats where device=2 and key='allocated_bytes.all.current'") == 5 * (int64_t)MiB &&
            q1(db, "select value from stats where device=0 and key='allocated_bytes.all.current'") == 1024);
  memsnap_release(p0);
  memsnap_release(p2);
  unsetenv("MEMSNAP_SIM_DEVICES");
}

static void *churn(void *arg) {
  atomic_int *stop = arg;
  while (!atomic_load(stop)) {
    memsnap_free(allocate_activation_for_test(4096), 0, 0, S1);
    usleep(20); /* slow forks (sanitizers) must not push the parent's mark out of the ring */
  }
  return NULL;
}

/* The ring without a lock: threads add marks (no device lock) and allocate while the main thread
 * dumps; every snapshot holds whole events, ids without gaps, times that never go back, and the
 * events it kept plus those it counts as dropped are every event claimed. */
#define RING_THREADS 4
static atomic_int ring_stop;
static void *ring_writer(void *arg) {
  int k = (int)(intptr_t)arg;
  char label[32];
  snprintf(label, sizeof label, "writer %d", k);
  while (!atomic_load(&ring_stop)) {
    memsnap_mark(label);
    memsnap_free(allocate_activation_for_test(4096 << k), 0, 0, S1);
  }
  return NULL;
}

static void test_ring_concurrent(void) {
  fresh(NULL);
  CHECK("ring, threads: start with 5000 entries", memsnap_record_start(5000, NULL) == MEMSNAP_OK);
  pthread_t t[RING_THREADS];
  atomic_store(&ring_stop, 0);
  for (int k = 0; k < RING_THREADS; k++) pthread_create(&t[k], NULL, ring_writer, (void *)(intptr_t)k);
  bool whole = true, ordered = true, counted = true;
  for (int i = 0; i < 6; i++) {
    usleep(20000);
    char *db = path_of(i % 2 ? "ring_threads_b.db" : "ring_threads_a.db");
    if (memsnap_dump(db) != MEMSNAP_OK) {
      whole = false;
      break;
    }
    /* kinds and labels that a torn event would not have */
    whole &= q1(db, "select count(*) from events where kind not between 1 and 13") == 0 &&
             q1(db, "select count(*) from marks where label_id not in (select id from labels where text like 'writer %')") == 0 &&
             q1(db, "select count(*) from marks") > 0;
    ordered &= q1(db, "select count(*) from events a join events b on b.id = a.id + 1 where b.time_ns < a.time_ns") == 0;
    counted &= q1(db, "select (select count(*) from events) + value from meta where key = 'dropped_events'") ==
                   q1(db, "select max(id) from events");
  }
  atomic_store(&ring_stop, 1);
  for (int k = 0; k < RING_THREADS; k++) pthread_join(t[k], NULL);
  CHECK("ring, threads: snapshots written while 4 threads mark and allocate hold whole events", whole);
  CHECK("ring, threads: times never go back", ordered);
  CHECK("ring, threads: events kept plus events dropped are every event", counted);
  memsnap_record_stop();
}

/* Defects found in review: fork under load, ranges across a pause, labels, stale stacks. */
static void test_review_regressions(void) {
  char env[600];
  char *parent_db = path_of("parent.db"), *child_db = path_of("child.db");
  unlink(parent_db);
  unlink(child_db);
  snprintf(env, sizeof env, "MEMSNAP_RECORD=1;MEMSNAP_MAX_ENTRIES=2000000;MEMSNAP_DUMP=%s", parent_db);
  fresh(env);
  atomic_int stop = 0;
  pthread_t t;
  pthread_create(&t, NULL, churn, &stop);
  void *mine = memsnap_malloc(3 * MiB, 0, S1);
  memsnap_mark("parent");
  bool child_ok = true;
  for (int i = 0; i < 20 && child_ok; i++) {
    pid_t pid = fork(); /* another thread allocates and records all the while */
    if (pid == 0) {
      void *p = memsnap_malloc(1000, 0, S1); /* locks must be usable in the child */
      memsnap_free(p, 0, 0, S1);
      if (memsnap_check(0) != 0) _exit(3); /* the child's allocator is whole */
      if (i == 0 && memsnap_dump(child_db) != MEMSNAP_OK) _exit(4); /* and can write its own snapshot */
      exit(0); /* must not write the parent's MEMSNAP_DUMP */
    }
    int status = 0;
    child_ok = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  CHECK("fork: children allocate, pass the invariant check and exit without deadlock", child_ok);
  /* The child keeps the allocator's state but not the recording (api.c: fork_phase). */
  CHECK("fork: a child's own snapshot is the child's: its segments, no recording",
        q1(child_db, "select value from meta where key='pid'") > 0 && q1(child_db, "select value from meta where key='pid'") != getpid() &&
            q1(child_db, "select count(*) from segments") > 0 && q1(child_db, "select value from meta where key='recording'") == 0);
  CHECK("fork: the parent's allocator is whole after the forks", memsnap_check(0) == 0);
  CHECK("fork: no child wrote the parent's snapshot", access(parent_db, F_OK) != 0);
  memsnap_free(mine, 0, 0, S1);
  memsnap_shutdown();
  CHECK("fork: the parent's snapshot is the parent's", q1(parent_db, "select value from meta where key='pid'") == getpid() &&
                                                          q1(parent_db, "select count(*) from marks") == 1);
  unsetenv("MEMSNAP_DUMP");

  fresh("MEMSNAP_RECORD=1");
  memsnap_range_push("A");
  memsnap_record_stop();
  memsnap_range_push("B"); /* not recorded */
  memsnap_record_start(0, NULL);
  memsnap_range_pop(); /* closes B: no match in the ring */
  memsnap_range_pop(); /* closes A */
  memsnap_mark(NULL);
  void *p = memsnap_malloc(4096, 0, S1);
  memsnap_free(p, 0, 0, S1);
  char *db = path_of("ranges.db");
  memsnap_dump(db);
  CHECK("ranges: paired by depth across a recording pause",
        q1(db, "select count(*) from ranges") == 1 && q1(db, "select count(*) from ranges r join labels l on l.id=r.label_id where l.text='A' and end_ns is not null") == 1);
  CHECK("labels: id 0 is the empty label", q1(db, "select count(*) from labels where id=0 and text=''") == 1 &&
                                               q1(db, "select count(*) from marks where label_id=0") == 1);
  CHECK("blocks: free blocks carry no stale stack", q1(db, "select count(*) from blocks where state='free' and stack_id is not null") == 0);
}

static void test_paths_and_errors(void) {
  fresh("");
  char pattern[512], expect[512];
  snprintf(pattern, sizeof pattern, "%s/snap-%%p-%%r.db", dir);
  snprintf(expect, sizeof expect, "%s/snap-%d-0.db", dir, (int)getpid());
  unsetenv("RANK");
  CHECK("paths: %p and %r expand", memsnap_dump(pattern) == MEMSNAP_OK && access(expect, R_OK) == 0);
  setenv("RANK", "3", 1);
  snprintf(expect, sizeof expect, "%s/snap-%d-3.db", dir, (int)getpid());
  CHECK("paths: %r reads RANK", memsnap_dump(pattern) == MEMSNAP_OK && access(expect, R_OK) == 0);
  unsetenv("RANK");
  CHECK("paths: without recording the state is still written",
        q1(expect, "select count(*) from events") == 0 && q1(expect, "select count(*) from devices") >= 0);
  CHECK("paths: unknown pattern refused", memsnap_dump("x-%q.db") == MEMSNAP_EINVAL &&
                                              strstr(memsnap_last_error(), "unknown pattern '%q'") != NULL);
  CHECK("paths: missing directory reports the path",
        memsnap_dump("/nonexistent-dir/x.db") != MEMSNAP_OK && strstr(memsnap_last_error(), "/nonexistent-dir/x.db") != NULL);
  CHECK("paths: no temporary left behind", access("/nonexistent-dir", F_OK) != 0);
  CHECK("range_pop without push is an error", memsnap_range_pop() == MEMSNAP_EINVAL);
  CHECK("record_start refuses a bad stacks mode, naming it", memsnap_record_start(0, "everything") == MEMSNAP_EINVAL &&
                                                                 strstr(memsnap_last_error(), "'everything'") != NULL);
}

/* Kills a process that keeps rewriting a large snapshot, at a random moment of its dumps, many
 * times: the file is always a complete snapshot (the previous one or the new one). Each child
 * says when its first dump is complete, so that every kill hits the rewriting loop. */
static void test_killed_dumps(void) {
  char *db = path_of("killed.db");
  int complete = 0, runs = getenv("KILLS") ? atoi(getenv("KILLS")) : 100;
  unsigned seed = 7;
  for (int i = 0; i < runs; i++) {
    unlink(db);
    int ready[2];
    if (pipe(ready) != 0) break;
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      fresh("MEMSNAP_STACKS=native");
      memsnap_record_start(200000, NULL);
      void *keep[64];
      for (int k = 0; k < 64; k++) keep[k] = allocate_activation_for_test((size_t)(k + 1) * 4096);
      for (int k = 0; k < 70000; k++) memsnap_free(allocate_activation_for_test(1 << 16), 0, 0, S1);
      (void)keep;
      memsnap_dump(db);
      char c = 1;
      if (write(ready[1], &c, 1) != 1) _exit(1);
      for (;;) memsnap_dump(db);
    }
    close(ready[1]);
    char c;
    bool started = read(ready[0], &c, 1) == 1;
    close(ready[0]);
    seed = seed * 1103515245u + 12345u;
    usleep((seed >> 8) % 150000); /* anywhere in the next dumps (each takes tens of ms) */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (!started) continue;
    sqlite3 *h;
    bool ok = false;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
      sqlite3_stmt *st;
      if (sqlite3_prepare_v2(h, "pragma integrity_check", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        ok = strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
      sqlite3_finalize(st);
    }
    sqlite3_close(h);
    if (ok && q1(db, "select count(*) from events") == 200000) complete++;
  }
  printf("  %d of %d kills left a complete snapshot\n", complete, runs);
  CHECK("killed dumps: the file is always a complete, consistent snapshot", complete == runs);
}

static void test_dump_on_oom_and_signal(void) {
  char env[600];
  char *oom_db = path_of("oom.db");
  unlink(oom_db);
  snprintf(env, sizeof env, "MEMSNAP_SIM_CAPACITY=64M;MEMSNAP_RECORD=1;MEMSNAP_DUMP_ON_OOM=%s", oom_db);
  fresh(env);
  void *a = memsnap_malloc(40 * MiB, 0, S1);
  void *b = memsnap_malloc(40 * MiB, 0, S1);
  CHECK("dump on oom: the allocation fails with the OOM message", a && !b && strstr(memsnap_last_error(), "out of memory"));
  CHECK("dump on oom: the snapshot holds the oom event and the block that filled the device",
        q1(oom_db, "select count(*) from events where kind=6 and requested_size=41943040") == 1 &&
            q1(oom_db, "select count(*) from blocks where state='allocated' and size=41943040") == 1);
  memsnap_free(a, 0, 0, S1);

  char *sig_db = path_of("signal.db");
  unlink(sig_db);
  snprintf(env, sizeof env, "MEMSNAP_RECORD=1;MEMSNAP_DUMP_SIGNAL=USR1;MEMSNAP_DUMP=%s", sig_db);
  fresh(env);
  void *p = memsnap_malloc(1000, 0, S1);
  raise(SIGUSR1);
  for (int i = 0; i < 200 && access(sig_db, F_OK) != 0; i++) usleep(10000);
  CHECK("dump on signal: written by the dump thread", q1(sig_db, "select count(*) from events where kind=1") == 1);
  memsnap_free(p, 0, 0, S1);
  unlink(sig_db);
  memsnap_shutdown(); /* MEMSNAP_DUMP: shutdown writes it once */
  CHECK("dump at shutdown: MEMSNAP_DUMP written", q1(sig_db, "select count(*) from events where kind=2") == 1);
  unsetenv("MEMSNAP_DUMP");
  unsetenv("MEMSNAP_DUMP_SIGNAL");
}

/* The model's events (model_events.c): recorded only while recording, bad arguments refused with
 * nothing recorded, the columns as docs/snapshot-format.md gives them, their labels written. */
static __attribute__((noinline)) int run_backward_for_test(void) {
  int rc = memsnap_backward_begin();
  __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays on the stack */
  return rc;
}

static void test_model_events(void) {
  fresh("MEMSNAP_STACKS=native");
  int net = memsnap_label("Net"), block = memsnap_label("Net.block"), adamw = memsnap_label("AdamW");
  CHECK("model: labels are ids from 1, the same text the same id",
        net >= 1 && block > net && adamw > block && memsnap_label("Net.block") == block);
  CHECK("model: no label for NULL or an empty text", memsnap_label(NULL) == MEMSNAP_EINVAL &&
                                                         memsnap_label("") == MEMSNAP_EINVAL);
  void *p = memsnap_malloc(4096, 0, S1), *g = memsnap_malloc(4096, 0, S1), *m = memsnap_malloc(8192, 0, S1);
  uint64_t storage[3] = {(uintptr_t)p, (uintptr_t)g, (uintptr_t)m}, bytes[3] = {4000, 4000, 8000};
  uint8_t role[3] = {MEMSNAP_TENSOR_PARAMETER, MEMSNAP_TENSOR_GRADIENT, MEMSNAP_TENSOR_OPTIMIZER_STATE};
  int32_t label[3] = {block, 0, block};
  int16_t device[3] = {0, 0, 0};
  /* not recording: accepted, nothing recorded */
  CHECK("model: not recording, every call is accepted",
        memsnap_module_event(net, MEMSNAP_MODULE_FORWARD) == MEMSNAP_OK &&
            memsnap_tensor_events(3, storage, bytes, role, label, device) == MEMSNAP_OK &&
            memsnap_step_event(adamw, MEMSNAP_STEP_BEGIN) == MEMSNAP_OK && memsnap_backward_begin() == MEMSNAP_OK &&
            memsnap_backward_end() == MEMSNAP_OK);

  CHECK("record: start", memsnap_record_start(0, NULL) == MEMSNAP_OK);
  /* bad arguments while recording: refused, nothing recorded */
  uint8_t bad_role[3] = {MEMSNAP_TENSOR_PARAMETER, 5, MEMSNAP_TENSOR_PARAMETER};
  uint8_t zero_role[1] = {0};
  int32_t bad_label[3] = {block, 100000, 0};
  int16_t bad_device[3] = {0, -2, 0};
  CHECK("model: module events refuse a bad what or label",
        memsnap_module_event(net, 4) == MEMSNAP_EINVAL && memsnap_module_event(net, -1) == MEMSNAP_EINVAL &&
            memsnap_module_event(0, MEMSNAP_MODULE_FORWARD) == MEMSNAP_EINVAL &&
            memsnap_module_event(-3, MEMSNAP_MODULE_FORWARD) == MEMSNAP_EINVAL &&
            memsnap_module_event(100000, MEMSNAP_MODULE_FORWARD) == MEMSNAP_EINVAL);
  CHECK("model: tensor events refuse a bad role, label or device, or missing arrays, the whole batch",
        memsnap_tensor_events(3, storage, bytes, bad_role, label, device) == MEMSNAP_EINVAL &&
            memsnap_tensor_events(1, storage, bytes, zero_role, label, device) == MEMSNAP_EINVAL &&
            memsnap_tensor_events(3, storage, bytes, role, bad_label, device) == MEMSNAP_EINVAL &&
            memsnap_tensor_events(3, storage, bytes, role, label, bad_device) == MEMSNAP_EINVAL &&
            memsnap_tensor_events(3, NULL, bytes, role, label, device) == MEMSNAP_EINVAL &&
            memsnap_tensor_events(0, NULL, NULL, NULL, NULL, NULL) == MEMSNAP_OK);
  CHECK("model: step events refuse a bad what or label",
        memsnap_step_event(adamw, 0) == MEMSNAP_EINVAL && memsnap_step_event(adamw, 4) == MEMSNAP_EINVAL &&
            memsnap_step_event(0, MEMSNAP_STEP_BEGIN) == MEMSNAP_EINVAL);
  CHECK("model: a backward end without a begin is refused", memsnap_backward_end() == MEMSNAP_EINVAL &&
                                                                strstr(memsnap_last_error(), "memsnap_backward_begin"));
  /* a step as the Python package records it */
  memsnap_module_event(net, MEMSNAP_MODULE_FORWARD);
  memsnap_module_event(block, MEMSNAP_MODULE_FORWARD);
  memsnap_module_event(block, MEMSNAP_MODULE_FORWARD_END);
  memsnap_module_event(net, MEMSNAP_MODULE_FORWARD_END);
  CHECK("model: a backward begins", run_backward_for_test() == MEMSNAP_OK);
  memsnap_module_event(net, MEMSNAP_MODULE_BACKWARD);
  memsnap_module_event(block, MEMSNAP_MODULE_BACKWARD);
  memsnap_module_event(block, MEMSNAP_MODULE_BACKWARD_END);
  memsnap_module_event(net, MEMSNAP_MODULE_BACKWARD_END);
  CHECK("model: and ends", memsnap_backward_end() == MEMSNAP_OK);
  memsnap_step_event(adamw, MEMSNAP_STEP_BEGIN);
  CHECK("model: three tensors in one call", memsnap_tensor_events(3, storage, bytes, role, label, device) == MEMSNAP_OK);
  memsnap_step_event(adamw, MEMSNAP_STEP_END);
  memsnap_step_event(adamw, MEMSNAP_STEP_SKIPPED);
  /* a label named by a tensor event alone, interned after every other: the labels table holds it */
  int32_t last_label[1] = {memsnap_label("Net.head")};
  uint8_t buffer_role[1] = {MEMSNAP_TENSOR_BUFFER};
  memsnap_tensor_events(1, storage, bytes, buffer_role, last_label, device);
  bool nested = true; /* nested begins past the 16 kept still pair */
  for (int i = 0; i < 20; i++) nested &= memsnap_backward_begin() == MEMSNAP_OK;
  for (int i = 0; i < 20; i++) nested &= memsnap_backward_end() == MEMSNAP_OK;
  CHECK("model: 20 nested backward passes begin and end", nested && memsnap_backward_end() == MEMSNAP_EINVAL);
  char *db = path_of("model.db");
  CHECK("model: dump", memsnap_dump(db) == MEMSNAP_OK);
  CHECK("model: the kinds are named module, tensor, step, backward",
        q1(db, "select count(*) from event_kinds where (id, name) in (values (15, 'module'), (16, 'tensor'), "
               "(17, 'step'), (18, 'backward'))") == 4);
  CHECK("model: nothing of the refused calls nor of before the recording: 8 module, 4 tensor, 3 step, 42 backward",
        q1(db, "select count(*) from events where kind=15") == 8 && q1(db, "select count(*) from events where kind=16") == 4 &&
            q1(db, "select count(*) from events where kind=17") == 3 &&
            q1(db, "select count(*) from events where kind=18") == 42);
  CHECK("model: module events in order, extra their label, size what, no device, no stack",
        q1(db, "select group_concat(l.text || ':' || e.size, ' ') = 'Net:0 Net.block:0 Net.block:1 Net:1 Net:2 "
               "Net.block:2 Net.block:3 Net:3' from (select * from events where kind=15 order by id) e "
               "join labels l on l.id = e.extra") == 1 &&
            q1(db, "select count(*) from events where kind=15 and (device is not null or stack_id is not null or "
                   "address != 0 or requested_size != 0)") == 0);
  char sql[600];
  snprintf(sql, sizeof sql,
           "select count(*) from events where kind=16 and device=0 and stack_id is null and ("
           "(address=%llu and size=4000 and requested_size=1 and extra=%d) or "
           "(address=%llu and size=4000 and requested_size=2 and extra=0) or "
           "(address=%llu and size=8000 and requested_size=3 and extra=%d) or "
           "(address=%llu and size=4000 and requested_size=4 and extra=%d))",
           (unsigned long long)storage[0], block, (unsigned long long)storage[1], (unsigned long long)storage[2], block,
           (unsigned long long)storage[0], (int)last_label[0]);
  CHECK("model: tensor events: address the storage, size its bytes, requested the role, extra the label (0, not NULL), "
        "device the tensor's", q1(db, sql) == 4);
  CHECK("model: step events: begin, end, skipped, extra the optimizer's label",
        q1(db, "select group_concat(size) = '1,2,3' and min(extra) = max(extra) and min(l.text) = 'AdamW' and "
               "max(device is null) = 1 from (select * from events where kind=17 order by id) e "
               "join labels l on l.id = e.extra") == 1);
  CHECK("model: backward events: a begin (size 0) with the stack of its call, an end (size 1) without, no extra",
        q1(db, "select count(*) from events where kind=18 and size=0 and stack_id is not null") == 21 &&
            q1(db, "select count(*) from events where kind=18 and size=1 and stack_id is null") == 21 &&
            q1(db, "select count(*) from events where kind=18 and extra is not null") == 0 &&
            q1(db, "select count(*) from events e join stack_frames sf on sf.stack_id = e.stack_id join frames f on "
                   "f.id = sf.frame_id where e.kind=18 and f.name='run_backward_for_test'") == 1);
  snprintf(sql, sizeof sql, "select count(*) from labels where (id, text) in (values (%d, 'Net'), (%d, 'Net.block'), "
           "(%d, 'AdamW'), (%d, 'Net.head'))", net, block, adamw, (int)last_label[0]);
  CHECK("model: the labels table holds every label the events name, the last one too", q1(db, sql) == 4);
  memsnap_record_stop();
  memsnap_module_event(net, MEMSNAP_MODULE_FORWARD);
  memsnap_step_event(adamw, MEMSNAP_STEP_BEGIN);
  memsnap_dump(db);
  CHECK("model: recording stopped, nothing more recorded",
        q1(db, "select count(*) from events where kind=15") == 8 && q1(db, "select count(*) from events where kind=17") == 3);
  memsnap_free(p, 0, 0, S1);
  memsnap_free(g, 0, 0, S1);
  memsnap_free(m, 0, 0, S1);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/memsnap-test-record-%d", (int)getpid());
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
  if (system(cmd) != 0) return 1;
  test_round_trip();
  test_model_events();
  test_inlined_frames();
  test_several_devices();
  test_review_regressions();
  test_paths_and_errors();
  test_dump_on_oom_and_signal();
  test_killed_dumps();
  test_ring_bounded();
  test_ring_concurrent();
  test_ring_budget();
  memsnap_shutdown();
  snprintf(cmd, sizeof cmd, "ls %s | grep tmp- | grep -qv killed", dir); /* killed dumps may leave one */
  CHECK("no temporary files left by finished dumps", system(cmd) != 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  TEST_DONE();
}
