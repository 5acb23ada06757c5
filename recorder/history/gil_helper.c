/* gil_helper.c: a thread that takes Python's GIL for a thread that must not wait for it.
 *
 * A Python thread that released the GIL around a call into another library (PyTorch's ops,
 * CuPy's cudaMalloc, a ctypes call, jaxlib) may hold that library's lock while it is inside
 * memsnap (PyTorch's allocator mutex around cudaMalloc), and a thread holding the GIL may be
 * waiting for that lock (freeing a tensor): taking the GIL there could deadlock. But a thread
 * that runs no Python cannot change its Python frames, and any thread holding the GIL may read
 * them (as sys._current_frames does). So the interposer's stacks ask this file's thread:
 *
 *   msi_gil_helper_run(fn, arg)  queues fn for the helper, which takes the GIL as any Python
 *                                thread does (the holder gives it up within the switch
 *                                interval), runs every queued call (one GIL for a burst from
 *                                several threads), and gives it back. The caller waits up to
 *                                MEMSNAP_GIL_WAIT_MS (msi_opt.gil_wait_ms, default 100; 0: it
 *                                never asks) for its call to start, then for it to end (fn only
 *                                reads frames and interns, with the GIL: it ends).
 *
 * A call not started in time is taken off the queue by its caller (the helper never sees it: arg
 * is gone), which then records native frames only; if the helper was still waiting for the GIL,
 * every later call is refused at once until it has it, so a GIL that stays blocked (its holder
 * waits for the lock our caller holds) costs one wait, not one per allocation.
 *
 * The helper keeps one thread state for its life (PyGILState_Ensure once, then
 * PyEval_SaveThread / PyEval_RestoreThread per call). The collector is paused while fn runs
 * (PyGC_Disable, Python 3.10+): a collection runs finalizers, arbitrary Python code, which on
 * the helper could wait for the lock the caller holds. Nothing is asked of the helper while
 * Python finalizes (a thread that takes the GIL then is ended), and a fork child starts its own.
 * The C API is found with dlsym, as pyframes.c does (libmemsnap does not link libpython); this file
 * uses nothing else of the library but its options (MEMSNAP_GIL_WAIT_MS).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "internal.h"

/* Both sides poll this long before they sleep: waking a sleeping thread costs some 10 µs each way,
 * a call some 2 µs, and allocations come in bursts (docs/BENCHMARKS.md, "Python frames"). */
#define SPIN_NS 50000

static struct {
  int state; /* 0 unknown, 1 usable, -1 no Python in the process */
  int (*IsInitialized)(void);
  int (*IsFinalizing)(void); /* optional: Py_IsFinalizing (3.13), _Py_IsFinalizing before */
  int (*GILState_Ensure)(void);
  void *(*SaveThread)(void);
  void (*RestoreThread)(void *);
  int (*GC_Disable)(void); /* optional: 3.10+ */
  int (*GC_Enable)(void);
} py;

/* A call: on the caller's stack, queued until the helper runs it. POSTED: queued; RUNNING: fn
 * runs (the caller waits for it to end whatever the time); FINISHED: it ended. A caller that
 * gives up takes its POSTED job off the queue itself, so the helper never sees it again. */
enum { POSTED, RUNNING, FINISHED };
typedef struct job {
  void (*fn)(void *);
  void *arg;
  atomic_int state; /* written with the lock held, polled without */
  struct job *next;
} job;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake; /* the helper waits here for jobs */
static pthread_cond_t done; /* callers wait here for theirs to end */
static pthread_once_t conds_once = PTHREAD_ONCE_INIT;
static job *queue;         /* oldest first */
static atomic_int queued;  /* jobs on it, for the helper to poll without the lock */
static bool sleeping;      /* the helper waits on `wake` */
static bool started;       /* the helper thread runs (in this process) */
static bool acquiring;     /* it waits for the GIL */
static bool stalled;       /* ... and a caller gave up meanwhile: refuse new calls until it has it */
static bool fork_handlers; /* registered once: a child inherits them */

static void resolve(void) {
#define SYM(field, name) *(void **)&py.field = dlsym(RTLD_DEFAULT, name)
  SYM(IsInitialized, "Py_IsInitialized");
  SYM(IsFinalizing, "Py_IsFinalizing");
  if (!py.IsFinalizing) SYM(IsFinalizing, "_Py_IsFinalizing");
  SYM(GILState_Ensure, "PyGILState_Ensure");
  SYM(SaveThread, "PyEval_SaveThread");
  SYM(RestoreThread, "PyEval_RestoreThread");
  SYM(GC_Disable, "PyGC_Disable");
  SYM(GC_Enable, "PyGC_Enable");
#undef SYM
  if (!py.GC_Enable) py.GC_Disable = NULL;
  py.state = py.IsInitialized && py.GILState_Ensure && py.SaveThread && py.RestoreThread ? 1 : -1;
}

static void init_conds(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* timed waits immune to clock changes */
  pthread_cond_init(&wake, &a);
  pthread_cond_init(&done, &a);
  pthread_condattr_destroy(&a);
}

/* Polls *v for up to SPIN_NS while it equals `value`; whether it changed. */
static bool spin_while(atomic_int *v, int value) {
  uint64_t end = msi_now_ns() + SPIN_NS;
  for (unsigned i = 1; atomic_load_explicit(v, memory_order_acquire) == value; i++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
    if (i % 64 == 0) {
      if (msi_now_ns() > end) return false;
      sched_yield(); /* one free core: let the other side run */
    }
  }
  return true;
}

/* Takes the GIL whenever jobs are queued and runs all of them (one GIL for a burst of calls from
 * several threads), then gives it back. */
static void *helper_main(void *unused) {
  (void)unused;
  void *ts = NULL; /* this thread's state, kept between calls */
  pthread_mutex_lock(&lock);
  for (;;) {
    if (!queue) { /* after a burst: the next call may follow at once */
      pthread_mutex_unlock(&lock);
      spin_while(&queued, 0);
      pthread_mutex_lock(&lock);
    }
    while (!queue) {
      sleeping = true;
      pthread_cond_wait(&wake, &lock);
      sleeping = false;
    }
    acquiring = true;
    pthread_mutex_unlock(&lock);
    if (ts) py.RestoreThread(ts);
    else py.GILState_Ensure(); /* makes this thread's state and takes the GIL */
    pthread_mutex_lock(&lock);
    acquiring = stalled = false;
    for (job *j; (j = queue) != NULL;) {
      queue = j->next;
      atomic_fetch_sub(&queued, 1);
      atomic_store(&j->state, RUNNING);
      pthread_mutex_unlock(&lock);
      int collecting = py.GC_Disable ? py.GC_Disable() : 0;
      j->fn(j->arg);
      if (collecting) py.GC_Enable();
      pthread_mutex_lock(&lock);
      atomic_store(&j->state, FINISHED); /* the last touch of j: its caller may return now */
      pthread_cond_broadcast(&done);
    }
    pthread_mutex_unlock(&lock);
    ts = py.SaveThread(); /* gives the GIL back, keeps the thread state */
    pthread_mutex_lock(&lock);
  }
  return NULL;
}

/* fork(): the lock is taken around it; a child has no helper (it starts its own). */
static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_parent(void) { pthread_mutex_unlock(&lock); }
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  init_conds();
  queue = NULL;
  atomic_store(&queued, 0);
  started = acquiring = stalled = sleeping = false;
}

/* lock held. */
static bool start_helper(void) {
  if (started) return true;
  if (!fork_handlers) {
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0) return false;
    fork_handlers = true;
  }
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  started = pthread_create(&t, &attr, helper_main, NULL) == 0;
  pthread_attr_destroy(&attr);
  return started;
}

/* Takes j off the queue. lock held. */
static void unqueue(job *j) {
  for (job **p = &queue; *p; p = &(*p)->next)
    if (*p == j) {
      *p = j->next;
      atomic_fetch_sub(&queued, 1);
      return;
    }
}

int msi_gil_helper_run(void (*fn)(void *), void *arg) {
  /* the wait for the GIL: an interpreter hands it over within its switch interval (5 ms), the
   * default leaves room for a loaded machine */
  long wait_ms = (long)msi_opt.gil_wait_ms;
  if (wait_ms == 0) return -1;
  if (MSI_UNLIKELY(py.state == 0)) resolve();
  if (py.state < 0 || !py.IsInitialized() || (py.IsFinalizing && py.IsFinalizing())) return -1;
  pthread_once(&conds_once, init_conds);
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += wait_ms / 1000;
  deadline.tv_nsec += wait_ms % 1000 * 1000000L;
  deadline.tv_sec += deadline.tv_nsec / 1000000000L;
  deadline.tv_nsec %= 1000000000L;
  job j = {fn, arg, POSTED, NULL};
  pthread_mutex_lock(&lock);
  if (stalled || !start_helper()) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  job **tail = &queue;
  while (*tail) tail = &(*tail)->next;
  *tail = &j;
  atomic_fetch_add(&queued, 1);
  if (sleeping) pthread_cond_signal(&wake);
  pthread_mutex_unlock(&lock);
  if (spin_while(&j.state, POSTED) && spin_while(&j.state, RUNNING)) return 0; /* FINISHED */
  pthread_mutex_lock(&lock);
  while (atomic_load(&j.state) == POSTED)
    if (pthread_cond_timedwait(&done, &lock, &deadline) == ETIMEDOUT && atomic_load(&j.state) == POSTED) {
      unqueue(&j); /* given up: the helper never sees it */
      stalled = acquiring;
      break;
    }
  while (atomic_load(&j.state) == RUNNING) pthread_cond_wait(&done, &lock); /* fn reads frames: it ends */
  pthread_mutex_unlock(&lock);
  return atomic_load(&j.state) == FINISHED ? 0 : -1;
}
