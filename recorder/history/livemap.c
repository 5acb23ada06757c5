/* livemap.c: the live mapping, a file-backed shared mapping that holds the event ring and the names
 * its events need, so that the history outlives the process (recover.c reads it back).
 *
 * The layout is livemap.h's. The file is memsnap_live_dir()/memsnap-PID.live (MEMSNAP_LIVE_DIR, by
 * default this user's own folder /dev/shm/memsnap-UID), made and published by livefile.c's safe
 * steps (no link followed, nothing planted used: refused with the reason, once, and the ring kept
 * on the heap), when recording first starts (history.c asks for its ring here). Writing the ring is
 * history.c's, exactly as on the heap: stores into memory, no system call per event (the pages
 * are the page cache's; the kernel writes them back, on tmpfs never). What an event refers to is
 * appended to the log once, on cold paths: a stack when it is interned (stacks.c), a label
 * (history.c), a Python frame's names when its node is made with the GIL held (stacks.c), the
 * loaded modules' paths and load addresses when a native frame lies in no module recorded yet, a
 * device when first used, the options at the start. The log grows by doubling the file
 * (posix_fallocate, under the log's lock: every page backed before it is written, so a full
 * tmpfs loses a record rather than raising SIGBUS) inside one address range reserved at the
 * start, so its records never move.
 *
 * Lifetime: removed at a normal exit (api.c, once the exit snapshot is written) and at memsnap_shutdown;
 * a process that dies (a signal, _exit without the interposer) leaves it for `memsnap run` or
 * `memsnap recover`. A fork child never writes its parent's mapping: it makes its own when it
 * records, seeded with the parent's log as it was at the fork (its tables are the parent's then).
 *
 * A thread of the mapping's watches header.dump_requests (5 times a second, a load of shared
 * memory) and runs api.c's dump when `memsnap dump PID` asks; header.watching says it runs
 * (start_watcher: not in a single-threaded process unless MEMSNAP_LIVE_WATCH=1). It also takes the
 * run log's sample each time it wakes (runlog.c: the seconds log), and the run log lives in the
 * mapping (msi_runlog_move, by history.c once the mapping is made).
 */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "history/livefile.h"
#include "internal.h"
#include "livemap.h"
#include "runlog.h"

#define LOG_INITIAL (1u << 20)
#define LOG_RESERVE (1ull << 32) /* 4 GiB of address space; the file holds what is used */
#define STATE_RESERVE (1ull << 32) /* each state slot's address space (some 100 million blocks) */
#define STATE_INITIAL (64u << 10)

typedef struct mapping {
  char *base;
  size_t length; /* the address range reserved */
  struct mapping *older; /* replaced ones, unmapped by msi_live_close */
} mapping;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static mapping *live;          /* the current one (log_lock for its log; NULL: none) */
static atomic_bool live_on;    /* live != NULL, read without the lock: the cold paths' first test
                                  (a process without a mapping takes no lock for it) */
static int live_fd = -1;
static char live_path[1100];
static bool warned;
/* A fork child's seed: the parent's mapping (still mapped here, never written) and its log's size
 * at the fork. */
static const char *seed_log;
static uint64_t seed_used;
static mapping *inherited; /* a fork child's: the parent's mappings, kept reachable until closed */

/* Modules recorded: executable ranges, sorted by lo. */
typedef struct range { uint64_t lo, hi; } range;
static range *mods;
static size_t nmods, mods_cap;
static unsigned long long mods_adds = (unsigned long long)-1; /* the loader's count at the last listing */

/* PYFRAME records written, by (code, pos): open addressing. */
static uint64_t *py_keys; /* 2 per slot; code 0: empty */
static size_t py_mask, py_count;

static uint32_t devices_noted; /* bit per device */
/* The header the fatal-signal handler writes: the current mapping's (NULL: none). */
static _Atomic(msi_live_header *) fatal_header;
static const char *(*on_request)(void);
static bool watcher_started;

static msi_live_header *header_of(mapping *m) { return (msi_live_header *)m->base; }

void msi_live_on_request(const char *(*fn)(void)) { on_request = fn; }

/* ---- the log ---------------------------------------------------------------------------- */

/* Appends one record of parts[0..n); log_lock held. False when the log is full. */
static bool append(uint32_t type, const void *const *parts, const size_t *lens, int n) {
  if (!live) return false;
  msi_live_header *h = header_of(live);
  size_t payload = 0;
  for (int i = 0; i < n; i++) payload += lens[i];
  size_t need = (8 + payload + 7) & ~(size_t)7;
  uint64_t used = atomic_load_explicit(&h->log_used, memory_order_relaxed);
  uint64_t cap = atomic_load_explicit(&h->log_capacity, memory_order_relaxed);
  if (used + need > cap) {
    uint64_t grown = cap * 2;
    while (grown < used + need) grown *= 2;
    /* the pages backed now (tmpfs full: no record, never a SIGBUS at a store later) */
    if (grown > h->log_reserve || posix_fallocate(live_fd, (off_t)(h->log_offset + cap), (off_t)(grown - cap)) != 0)
      return false;
    atomic_store_explicit(&h->log_capacity, grown, memory_order_relaxed);
  }
  char *at = live->base + h->log_offset + used;
  uint32_t head[2] = {type, (uint32_t)payload};
  memcpy(at, head, 8);
  size_t o = 8;
  for (int i = 0; i < n; i++) {
    memcpy(at + o, parts[i], lens[i]);
    o += lens[i];
  }
  memset(at + o, 0, need - o);
  atomic_store_explicit(&h->log_used, used + need, memory_order_release);
  return true;
}

void msi_live_log_stack(uint32_t id, uint16_t n_native, uint16_t n_python, const uint64_t *words) {
  if (!atomic_load_explicit(&live_on, memory_order_acquire)) return;
  uint32_t head[2] = {id, (uint32_t)n_native | (uint32_t)n_python << 16};
  const void *parts[] = {head, words};
  size_t lens[] = {sizeof head, sizeof *words * ((size_t)n_native + 2 * (size_t)n_python)};
  pthread_mutex_lock(&log_lock);
  append(MSI_LOG_STACK, parts, lens, 2);
  pthread_mutex_unlock(&log_lock);
}

void msi_live_log_label(uint32_t id, const char *text) {
  if (!atomic_load_explicit(&live_on, memory_order_acquire)) return;
  const void *parts[] = {&id, text};
  size_t lens[] = {sizeof id, strlen(text) + 1};
  pthread_mutex_lock(&log_lock);
  append(MSI_LOG_LABEL, parts, lens, 2);
  pthread_mutex_unlock(&log_lock);
}

static size_t py_slot(uint64_t code, uint64_t pos, size_t mask) {
  uint64_t h = (code * 0x9e3779b97f4a7c15ull) ^ (pos * 0xbf58476d1ce4e5b9ull);
  return (size_t)(h ^ (h >> 29)) & mask;
}

static bool py_known(uint64_t code, uint64_t pos) {
  if (!py_keys) return false;
  for (size_t k = py_slot(code, pos, py_mask); py_keys[2 * k]; k = (k + 1) & py_mask)
    if (py_keys[2 * k] == code && py_keys[2 * k + 1] == pos) return true;
  return false;
}

/* log_lock held. */
static void py_add(uint64_t code, uint64_t pos) {
  if ((py_count + 1) * 2 > (py_keys ? py_mask + 1 : 0)) {
    size_t cap = py_keys ? (py_mask + 1) * 2 : 1024;
    uint64_t *t = calloc(cap, 2 * sizeof *t);
    if (!t) return;
    for (size_t i = 0; py_keys && i <= py_mask; i++) {
      if (!py_keys[2 * i]) continue;
      size_t k = py_slot(py_keys[2 * i], py_keys[2 * i + 1], cap - 1);
      while (t[2 * k]) k = (k + 1) & (cap - 1);
      t[2 * k] = py_keys[2 * i];
      t[2 * k + 1] = py_keys[2 * i + 1];
    }
    free(py_keys);
    py_keys = t;
    py_mask = cap - 1;
  }
  size_t k = py_slot(code, pos, py_mask);
  while (py_keys[2 * k]) k = (k + 1) & py_mask;
  py_keys[2 * k] = code;
  py_keys[2 * k + 1] = pos;
  py_count++;
}

bool msi_live_wants_pyframe(uint64_t code, uint64_t pos) {
  if (!atomic_load_explicit(&live_on, memory_order_acquire)) return false;
  pthread_mutex_lock(&log_lock);
  bool wants = live && code && !py_known(code, pos);
  pthread_mutex_unlock(&log_lock);
  return wants;
}

void msi_live_log_pyframe(uint64_t code, uint64_t pos, int64_t line, const char *name, const char *file) {
  if (!atomic_load_explicit(&live_on, memory_order_acquire)) return;
  uint64_t head[3] = {code, pos, (uint64_t)line};
  const void *parts[] = {head, name, file};
  size_t lens[] = {sizeof head, strlen(name) + 1, strlen(file) + 1};
  pthread_mutex_lock(&log_lock);
  if (live && !py_known(code, pos) && append(MSI_LOG_PYFRAME, parts, lens, 3)) py_add(code, pos);
  pthread_mutex_unlock(&log_lock);
}

/* ---- modules ---------------------------------------------------------------------------- */

static bool mod_known(uint64_t pc) {
  size_t lo = 0, hi = nmods;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (mods[mid].hi <= pc) lo = mid + 1;
    else hi = mid;
  }
  return lo < nmods && mods[lo].lo <= pc;
}

static int first_adds(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  *(unsigned long long *)arg = info->dlpi_adds;
  return 1;
}

/* An executable range of a loaded module, recorded unless it is already. log_lock held. */
static int list_module(const char *name, uint64_t lo, uint64_t hi, uint64_t bias, void *arg) {
  (void)arg;
  if (mod_known(lo)) return 0;
  uint64_t head[3] = {lo, hi, bias};
  const void *parts[] = {head, name};
  size_t lens[] = {sizeof head, strlen(name) + 1};
  if (!append(MSI_LOG_MODULE, parts, lens, 2)) return 1;
  if (nmods == mods_cap) {
    size_t cap = mods_cap ? mods_cap * 2 : 64;
    range *g = realloc(mods, sizeof *g * cap);
    if (!g) return 1;
    mods = g;
    mods_cap = cap;
  }
  size_t at = nmods;
  while (at > 0 && mods[at - 1].lo > lo) at--;
  memmove(&mods[at + 1], &mods[at], sizeof *mods * (nmods - at));
  mods[at] = (range){lo, hi};
  nmods++;
  return 0;
}

/* log_lock held. */
static void list_modules(void) {
  unsigned long long adds = 0;
  dl_iterate_phdr(first_adds, &adds);
  if (adds == mods_adds) return;
  mods_adds = adds;
  msi_modules_each(list_module, NULL);
}

void msi_live_note_pc(uint64_t pc) {
  if (!atomic_load_explicit(&live_on, memory_order_acquire)) return;
  pthread_mutex_lock(&log_lock);
  if (live && !mod_known(pc - 1)) list_modules();
  pthread_mutex_unlock(&log_lock);
}

void msi_live_note_device(int device) {
  if (device < 0 || device >= 32 || (__atomic_load_n(&devices_noted, __ATOMIC_RELAXED) >> device & 1)) return;
  char name[256] = "";
  size_t free_bytes = 0, total = 0;
  if (!msi_be || msi_be->device_info(device, &free_bytes, &total, name, sizeof name) != MSI_BE_OK)
    snprintf(name, sizeof name, "device %d", device);
  int32_t head[2] = {device, 0};
  uint64_t t = total;
  const void *parts[] = {head, &t, name};
  size_t lens[] = {sizeof head, sizeof t, strlen(name) + 1};
  pthread_mutex_lock(&log_lock);
  if (live && !(devices_noted >> device & 1) && append(MSI_LOG_DEVICE, parts, lens, 3))
    __atomic_fetch_or(&devices_noted, 1u << device, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&log_lock);
}

/* log_lock held. */
static void log_options(void) {
  const char *var;
  for (int i = 0; (var = memsnap_option_info(i, NULL, NULL)) != NULL; i++) {
    char value[1100];
    msi_option_value(i, value, sizeof value);
    const void *parts[] = {var, value};
    size_t lens[] = {strlen(var) + 1, strlen(value) + 1};
    append(MSI_LOG_OPTION, parts, lens, 2);
  }
}

/* ---- the state's slots ---------------------------------------------------------------------- */

void *msi_live_state_slot(int k, uint64_t need) {
  if (k < 0 || k > 1 || !atomic_load_explicit(&live_on, memory_order_acquire)) return NULL;
  void *slot = NULL;
  pthread_mutex_lock(&log_lock);
  msi_live_header *h = live ? header_of(live) : NULL;
  if (h && need <= h->state_reserve) {
    uint64_t cap = atomic_load_explicit(&h->state_capacity[k], memory_order_relaxed);
    uint64_t at = h->state_offset + (uint64_t)k * h->state_reserve;
    if (cap < need) {
      uint64_t grown = cap ? cap : STATE_INITIAL;
      while (grown < need) grown *= 2;
      if (grown > h->state_reserve) grown = h->state_reserve;
      /* every page backed before it is written (a full tmpfs: no state, never a SIGBUS) */
      if (posix_fallocate(live_fd, (off_t)(at + cap), (off_t)(grown - cap)) == 0) {
        atomic_store_explicit(&h->state_capacity[k], grown, memory_order_release);
        cap = grown;
      }
    }
    if (cap >= need) slot = live->base + at;
  }
  pthread_mutex_unlock(&log_lock);
  return slot;
}

/* ---- the request watcher ---------------------------------------------------------------- */

static void *watch(void *arg) {
  (void)arg;
  uint64_t done = 0;
  for (;;) {
    nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    msi_runlog_tick(); /* the run log's seconds (runlog.c) */
    pthread_mutex_lock(&log_lock);
    msi_live_header *h = live ? header_of(live) : NULL;
    uint64_t asked = h ? atomic_load(&h->dump_requests) : 0;
    done = h ? atomic_load(&h->dumps_done) : 0;
    pthread_mutex_unlock(&log_lock);
    if (!h || asked == done || !on_request) continue;
    const char *path = on_request();
    pthread_mutex_lock(&log_lock);
    if (live && header_of(live) == h) {
      snprintf(h->last_dump, sizeof h->last_dump, "%s", path ? path : "");
      atomic_store(&h->dumps_done, asked);
    }
    pthread_mutex_unlock(&log_lock);
  }
  return NULL;
}

/* Whether the process runs other threads than this one now (a CUDA process does: the driver
 * starts its own). */
static bool other_threads(void) {
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  char buf[1024];
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* field 20, num_threads, counted after the command's name */
  for (int field = 2; p && field < 20; field++) p = strchr(p + 1, ' ');
  return !p || atol(p + 1) > 1;
}

/* The watcher starts with the mapping where the process already runs other threads (one more costs
 * nothing there), always with MEMSNAP_LIVE_WATCH=1, never with 0: a single-threaded process that
 * gets a thread loses glibc's single-thread fast paths (some 14 ns per allocate+free pair on the
 * simulated device: docs/BENCHMARKS.md). */
static void start_watcher(void) {
  const char *want = getenv("MEMSNAP_LIVE_WATCH");
  if (watcher_started || (want && !strcmp(want, "0")) || (!(want && !strcmp(want, "1")) && !other_threads())) return;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  /* the watcher's signals stay the program's threads' to take */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  watcher_started = pthread_create(&t, &attr, watch, NULL) == 0;
  pthread_mutex_lock(&log_lock);
  if (live) atomic_store(&header_of(live)->watching, watcher_started);
  pthread_mutex_unlock(&log_lock);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
}

/* ---- making the mapping ----------------------------------------------------------------- */

static void fill_header(msi_live_header *h, uint64_t ring_offset, uint64_t bytes, uint64_t cap, uint32_t events_offset,
                        uint64_t log_offset) {
  memcpy(h->magic, MSI_LIVE_MAGIC, 8);
  h->version = MSI_LIVE_VERSION;
  h->header_size = MSI_LIVE_HEADER;
  h->event_size = sizeof(msi_event);
  h->ring_events_offset = events_offset;
  h->ring_offset = ring_offset;
  h->ring_bytes = bytes;
  h->ring_cap = cap;
  h->log_offset = log_offset;
  h->log_reserve = LOG_RESERVE;
  h->state_offset = log_offset + LOG_RESERVE;
  h->state_reserve = STATE_RESERVE;
  h->pid = (int32_t)getpid();
  h->ppid = (int32_t)getppid();
  const char *rank = msi_process_rank();
  h->rank = rank && strlen(rank) < 9 ? atoi(rank) : -1;
  h->stacks = (uint32_t)msi_opt.stacks;
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  h->created_mono_ns = msi_now_ns();
  h->created_unix_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
  atomic_store(&h->state, MSI_LIVE_RECORDING);
  snprintf(h->backend, sizeof h->backend, "%s", msi_be ? msi_be->name : msi_opt.backend);
  gethostname(h->host, sizeof h->host - 1);
  char exe[1024];
  msi_process_exe(exe, sizeof exe);
  const char *slash = strrchr(exe, '/');
  snprintf(h->program, sizeof h->program, "%.255s", slash ? slash + 1 : exe);
  char dump[1024], cwd[1024];
  /* the pattern as given (recover.c expands it with this process's pid, rank and host), made
     absolute: the recovering process may run elsewhere */
  if (msi_dump_path(false, dump, sizeof dump) && dump[0] != '/' && getcwd(cwd, sizeof cwd))
    snprintf(h->dump_path, sizeof h->dump_path, "%.500s/%.500s", cwd, dump);
  else if (msi_dump_path(false, dump, sizeof dump))
    snprintf(h->dump_path, sizeof h->dump_path, "%s", dump);
  msi_process_cmdline(h->command_line, sizeof h->command_line);
}

/* `memsnap run` learns of the mapping from its manifest: "live<TAB>path<TAB>pid". */
static void note_in_manifest(const char *path) {
  char line[1300];
  int n = snprintf(line, sizeof line, "live\t%s\t%d\n", path, (int)getpid());
  if (n > 0 && (size_t)n < sizeof line) msi_live_manifest_append(line, (size_t)n);
}

static void warn_once(const char *what, const char *path) {
  if (warned) return;
  warned = true;
  fprintf(stderr, "memsnap: warning: %s '%s': %s; the history is kept in memory only (a process that dies loses it)\n",
          what, path, strerror(errno));
}

/* A refusal of livefile.c's (the reason in `why`), said once. */
static void refuse_once(const char *why) {
  if (warned) return;
  warned = true;
  fprintf(stderr, "memsnap: warning: no live mapping: %s; the history is kept in memory only (a process that dies "
          "loses it)\n", why);
}

/* ---- how the process died ------------------------------------------------------------------ */

/* A process killed by a signal writes no snapshot, and only its parent learns how it died: for a
 * process that is not `memsnap run`'s own child (torchrun's ranks, a DataLoader worker), the
 * mapping is where that goes. The signals a process dies of by default and can catch are caught
 * where their action is still the default: the signal and the time go into the header, the action
 * goes back to the default, and the signal is raised again, so the process dies of it as it would
 * have (a fault repeats on return). A handler the program set is left alone, and so is SIGINT (an
 * interpreter installs its own only where the action is the default). SIGKILL cannot be caught:
 * a mapping with neither a clean exit nor a signal in it was ended by SIGKILL or _exit. */
static const int fatal_signals[] = {SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS, SIGFPE,  SIGILL,
                                    SIGSYS,  SIGXCPU, SIGXFSZ, SIGPIPE, SIGALRM, SIGVTALRM, SIGPROF, SIGPWR};
#define FATAL_N (sizeof fatal_signals / sizeof *fatal_signals)
static struct sigaction fatal_old[FATAL_N]; /* the actions replaced, put back at msi_live_close */
static _Atomic uint32_t fatal_watched;      /* bit per signal watched */
static atomic_int fatal_in_handler;         /* handlers between loading fatal_header and done with it */
static atomic_bool fatal_done;

static void on_fatal_signal(int sig, siginfo_t *info, void *context) {
  (void)context;
  int saved_errno = errno;
  atomic_fetch_add(&fatal_in_handler, 1);
  msi_live_header *h = atomic_load(&fatal_header);
  if (h && h->pid == (int32_t)getpid()) { /* a fork child before its own mapping: not its parent's */
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (atomic_load(&h->fatal_signal) == 0) { /* the first one: the time, then the signal that publishes it */
      atomic_store(&h->fatal_mono_ns, (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec);
      atomic_store(&h->fatal_signal, sig);
    }
  }
  atomic_fetch_sub(&fatal_in_handler, 1);
  /* SA_RESETHAND made the action the default again: a fault the kernel raised happens again on
     return (the core keeps its address); a signal sent is sent again, blocked until this returns */
  bool fault = (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) && info && info->si_code > 0;
  if (!fault) raise(sig);
  errno = saved_errno;
}

static void catch_fatal_signals(void) {
  if (atomic_exchange(&fatal_done, true)) return;
  uint32_t watched = 0;
  for (size_t i = 0; i < FATAL_N; i++) {
    struct sigaction sa;
    fatal_old[i].sa_handler = SIG_DFL;
    if (sigaction(fatal_signals[i], NULL, &fatal_old[i]) != 0 || (fatal_old[i].sa_flags & SA_SIGINFO) ||
        fatal_old[i].sa_handler != SIG_DFL)
      continue;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_RESTART | SA_ONSTACK; /* ONSTACK: where the program set one */
    sigemptyset(&sa.sa_mask);
    if (sigaction(fatal_signals[i], &sa, NULL) == 0) watched |= 1u << fatal_signals[i];
  }
  atomic_store(&fatal_watched, watched);
  msi_live_header *h = atomic_load(&fatal_header);
  if (h) atomic_store(&h->fatal_watched, watched);
}

/* Puts back the actions catch_fatal_signals replaced (where they are still its own), and waits
 * for a handler that may still write the header (a signal on another thread) before unmapping. */
static void release_fatal_signals(void) {
  atomic_store(&fatal_header, NULL);
  if (atomic_exchange(&fatal_done, false)) {
    uint32_t watched = atomic_exchange(&fatal_watched, 0);
    for (size_t i = 0; i < FATAL_N; i++) {
      struct sigaction now;
      if (!(watched & (1u << fatal_signals[i])) || sigaction(fatal_signals[i], NULL, &now) != 0) continue;
      if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_fatal_signal) sigaction(fatal_signals[i], &fatal_old[i], NULL);
    }
  }
  for (int i = 0; i < 1000 && atomic_load(&fatal_in_handler) > 0; i++) nanosleep(&(struct timespec){0, 100000}, NULL);
}

void *msi_live_ring(uint64_t bytes, uint64_t cap, uint32_t events_offset, void **runlog_at) {
  *runlog_at = NULL;
  const char *on = getenv("MEMSNAP_LIVE");
  if (on && !strcmp(on, "0")) return NULL;
  char path[1100], tmp[1200], name[48], tmp_name[64], why[1400];
  int dfd = msi_live_dir_open(why, sizeof why); /* refused: a folder another user could plant in */
  if (dfd < 0) {
    refuse_once(why);
    return NULL;
  }
  snprintf(name, sizeof name, "memsnap-%d.live", (int)getpid());
  snprintf(tmp_name, sizeof tmp_name, "%s.new", name);
  snprintf(path, sizeof path, "%s/%s", memsnap_live_dir(), name);
  snprintf(tmp, sizeof tmp, "%s.new", path);
  uint64_t ring_offset = MSI_LIVE_HEADER;
  uint64_t runlog_offset = (ring_offset + bytes + 4095) & ~(uint64_t)4095;
  uint64_t log_offset = (runlog_offset + sizeof(msi_runlog_region) + 4095) & ~(uint64_t)4095;
  pthread_mutex_lock(&log_lock);
  const char *old_log = live ? live->base + header_of(live)->log_offset : seed_log;
  uint64_t old_used = live ? atomic_load(&header_of(live)->log_used) : seed_log ? seed_used : 0;
  uint64_t log_cap = LOG_INITIAL;
  while (log_cap < old_used) log_cap *= 2;
  void *ring = NULL;
  mapping *m = calloc(1, sizeof *m);
  int fd = m ? msi_live_file_create(dfd, tmp_name, why, sizeof why) : -1; /* exclusive, no link followed, checked */
  if (fd < 0) {
    if (m) refuse_once(why);
    goto fail;
  }
  /* every page backed now: a store into a sparse file on a full tmpfs (/dev/shm is 64 MiB in a
     container) is a SIGBUS, on the allocation path; without the room the ring stays on the heap */
  if (posix_fallocate(fd, 0, (off_t)(log_offset + log_cap)) != 0) {
    warn_once("cannot reserve the live mapping's memory (is its folder full? MEMSNAP_LIVE_DIR moves it)", tmp);
    goto fail;
  }
  m->length = log_offset + LOG_RESERVE + 2 * STATE_RESERVE;
  m->base = mmap(NULL, m->length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (m->base == MAP_FAILED) {
    m->base = NULL;
    warn_once("cannot map the live mapping", tmp);
    goto fail;
  }
  msi_live_header *h = header_of(m);
  fill_header(h, ring_offset, bytes, cap, events_offset, log_offset);
  h->runlog_offset = runlog_offset;
  h->runlog_bytes = sizeof(msi_runlog_region);
  atomic_store(&h->log_capacity, log_cap);
  if (old_used) memcpy(m->base + log_offset, old_log, old_used);
  atomic_store(&h->log_used, old_used);
  if (msi_live_file_publish(dfd, tmp_name, name, why, sizeof why) != 0) { /* never onto a link or another user's file */
    refuse_once(why);
    goto fail;
  }
  if (live) {
    m->older = live;
    close(live_fd);
  } else {
    m->older = NULL;
  }
  bool fresh = !live && !seed_log;
  live = m;
  atomic_store(&live_on, true);
  atomic_store(&h->fatal_watched, atomic_load(&fatal_watched)); /* a replaced mapping's: the same */
  atomic_store(&fatal_header, h);
  live_fd = fd;
  seed_log = NULL;
  snprintf(live_path, sizeof live_path, "%s", path);
  if (fresh) {
    log_options();
    mods_adds = (unsigned long long)-1;
    nmods = 0;
    list_modules();
  }
  ring = m->base + ring_offset;
  pthread_mutex_unlock(&log_lock);
  close(dfd);
  *runlog_at = m->base + runlog_offset; /* moved there by the caller, under no lock (see livemap.h) */
  if (fresh) note_in_manifest(path);
  start_watcher();
  catch_fatal_signals();
  return ring;
fail:
  if (m && m->base) munmap(m->base, m->length);
  if (fd >= 0) {
    close(fd);
    unlinkat(dfd, tmp_name, 0); /* the one it made */
  }
  close(dfd);
  free(m);
  pthread_mutex_unlock(&log_lock);
  return NULL;
}

void msi_live_unlink(void) {
  pthread_mutex_lock(&log_lock);
  if (live && live_path[0]) {
    atomic_store(&header_of(live)->state, MSI_LIVE_EXITED);
    unlink(live_path);
    live_path[0] = '\0';
  }
  pthread_mutex_unlock(&log_lock);
}

void msi_live_close(void) {
  pthread_mutex_lock(&log_lock);
  release_fatal_signals();
  if (live_path[0]) unlink(live_path);
  live_path[0] = '\0';
  for (int k = 0; k < 2; k++)
    for (mapping *m = k ? inherited : live, *older; m; m = older) {
      older = m->older;
      munmap(m->base, m->length);
      free(m);
    }
  live = inherited = NULL;
  atomic_store(&live_on, false);
  if (live_fd >= 0) close(live_fd);
  live_fd = -1;
  free(py_keys);
  py_keys = NULL;
  py_mask = py_count = 0;
  free(mods);
  mods = NULL;
  nmods = mods_cap = 0;
  mods_adds = (unsigned long long)-1;
  devices_noted = 0;
  seed_log = NULL;
  pthread_mutex_unlock(&log_lock);
}

void msi_live_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) {
    pthread_mutex_lock(&log_lock);
    return;
  }
  if (phase == MSI_FORK_CHILD) {
    if (live) { /* the parent's: read once to seed the child's own, never written */
      seed_log = live->base + header_of(live)->log_offset;
      seed_used = atomic_load(&header_of(live)->log_used);
      if (live_fd >= 0) close(live_fd);
    }
    if (live) { /* the parent's mappings stay mapped here, unused but for the seed: kept till closed */
      mapping *last = live;
      while (last->older) last = last->older;
      last->older = inherited;
      inherited = live;
    }
    live = NULL;
    atomic_store(&live_on, false);
    live_fd = -1;
    live_path[0] = '\0';
    watcher_started = false;
    devices_noted = 0;
  }
  pthread_mutex_unlock(&log_lock);
}
