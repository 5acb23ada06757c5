/* api.c: the public entry points of libmemsnap (memsnap.h), on top of the recorder.
 *
 * The first call of any entry point brings the library up (devices.c: options, backend, device
 * count); each device's state is made on first use. After that, memsnap_malloc and memsnap_free
 * cost one flag test and one table load before the device lock. Nothing below calls into this
 * file: what it starts once the library is up (the exit dump, the signal thread) is registered
 * with devices.c when the library loads. memsnap_shutdown undoes everything, so tests can run
 * several configurations in one process.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "history/history.h"
#include "history/livemap.h"
#include "history/runlog.h"
#include "internal.h"
#include "snapshot/livestate.h"

/* Declared in oom_throw.cc: raise the out-of-memory error, or another failure as a RuntimeError,
 * in the calling C++ frame. */
void msi_throw_oom(const char *message);
void msi_throw_error(const char *message);

/* The mode of a device: the caching allocator, or the stream-ordered one (d->async). */
static inline int device_free(msi_device *d, void *ptr, uint32_t stack) {
  int rc = MSI_UNLIKELY(d->async != NULL) ? msi_async_free(d, ptr, stack) : msi_device_free(d, ptr, stack);
  msi_live_state_check();
  return rc;
}

/* The stack of a free, a release or an empty_cache while recording (0 otherwise, and with
 * MEMSNAP_CONTEXT=alloc): captured before any lock is taken. */
static inline uint32_t free_stack(void) {
  return MSI_UNLIKELY(msi_ring_recording()) ? msi_stack_capture_for_free(0, true) : 0;
}

static atomic_int exit_dumped; /* MEMSNAP_DUMP written (or inherited by a fork child): not at exit */
/* Serialises the dumps of the signal thread with memsnap_shutdown, which frees what they read. */
static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;

/* Under `memsnap run` (MEMSNAP_RUN_MANIFEST set), a process that used no device and recorded
 * nothing writes no snapshot at exit: a launcher (torchrun, a shell, a DataLoader's parent) would
 * otherwise leave an empty file, or one over a worker's of the same rank. */
static bool nothing_to_dump(void) {
  const char *manifest = getenv("MEMSNAP_RUN_MANIFEST");
  if (!manifest || !*manifest || msi_history_total() > 0) return false;
  for (int i = 0; i < MSI_MAX_DEVICES; i++)
    if (atomic_load(&msi_device_table[i])) return false;
  return true;
}

int memsnap_dump_exit(void) {
  char path[1024];
  if (!msi_is_ready() || !msi_dump_path(false, path, sizeof path)) { /* no snapshot asked for: a normal exit */
    msi_live_unlink();
    return MEMSNAP_OK;
  }
  if (nothing_to_dump()) {
    msi_live_unlink();
    return MEMSNAP_OK;
  }
  if (atomic_exchange(&exit_dumped, 1)) return MEMSNAP_OK;
  int rc = memsnap_dump(path);
  if (rc == MEMSNAP_OK) msi_live_unlink(); /* the history is in the snapshot: its live mapping goes */
  return rc;
}

/* Writes the MEMSNAP_DUMP snapshot of a running library (at exit, or from memsnap_shutdown
 * before the state goes), once; memsnap_dump_exit then removes the live mapping (a normal exit
 * is no death). When the snapshot cannot be written the mapping stays, the history's only copy:
 * `memsnap run` or `memsnap recover` writes it. */
static void dump_at_exit(void) {
  if (memsnap_dump_exit() != MEMSNAP_OK)
    fprintf(stderr, "memsnap: error: %s (the history stays in the live mapping: memsnap recover writes it)\n",
            memsnap_last_error());
}

/* Dump on a signal: the handler only writes a byte to a pipe; a thread waiting on the pipe
 * writes the snapshot, outside the handler. */
static int signal_pipe[2] = {-1, -1};

static void on_dump_signal(int sig) {
  (void)sig;
  int saved = errno;
  char c = 1;
  if (signal_pipe[1] >= 0) { /* non-blocking: a burst of signals during a dump is one dump */
    ssize_t ignored = write(signal_pipe[1], &c, 1);
    (void)ignored;
  }
  errno = saved;
}

static void *signal_dumper(void *arg) {
  (void)arg;
  char c, path[1024];
  int fd = signal_pipe[0];
  while (read(fd, &c, 1) > 0) {
    pthread_mutex_lock(&dump_lock);
    msi_dump_hook_defer(); /* the hook may wait for Python's lock: run it once dump_lock is free */
    if (msi_is_ready()) { /* never re-initialise a library that was shut down */
      if (!msi_dump_path(false, path, sizeof path)) snprintf(path, sizeof path, "memsnap-%%p.db");
      if (memsnap_dump(path) != MEMSNAP_OK) fprintf(stderr, "memsnap: error: %s\n", memsnap_last_error());
    }
    pthread_mutex_unlock(&dump_lock);
    msi_dump_hook_run();
  }
  return NULL;
}

static bool signal_started;

/* `memsnap dump PID` (livemap.c's watcher thread): the snapshot the signal would write. Returns
 * its path, or NULL when it could not be written (the reason printed). */
static const char *dump_on_request(void) {
  static char path[1024];
  const char *written = NULL;
  pthread_mutex_lock(&dump_lock);
  msi_dump_hook_defer();
  if (msi_is_ready()) {
    char pattern[1024];
    if (!msi_dump_path(false, pattern, sizeof pattern)) snprintf(pattern, sizeof pattern, "memsnap-%%p.db");
    if (memsnap_dump(pattern) != MEMSNAP_OK) {
      fprintf(stderr, "memsnap: error: %s\n", memsnap_last_error());
    } else if (msi_expand_path(pattern, path, sizeof path) == MEMSNAP_OK) {
      char abs_path[1024], cwd[512];
      if (path[0] != '/' && getcwd(cwd, sizeof cwd)) {
        snprintf(abs_path, sizeof abs_path, "%s/%.500s", cwd, path);
        snprintf(path, sizeof path, "%s", abs_path);
      }
      written = path;
    }
  }
  pthread_mutex_unlock(&dump_lock);
  msi_dump_hook_run();
  return written;
}

static void start_signal_dumper(void) {
  if (signal_started || !msi_opt.dump_signal) return;
  pthread_t t;
  pthread_attr_t attr;
  if (pipe2(signal_pipe, O_CLOEXEC) != 0) return;
  fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, signal_dumper, NULL) == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_dump_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(msi_opt.dump_signal, &sa, NULL);
    signal_started = true;
  }
  pthread_attr_destroy(&attr);
}

/* fork(): every lock of the library is taken before (init, devices in order, ring, labels,
 * stacks: the order of every other path), so none is held by a thread that the child lacks. The
 * child keeps the allocator (its pointers are the parent's CUDA memory: it must not use them;
 * CUDA does not survive fork) but not the recording, the exit dump or the signal thread. */
static void fork_phase(int phase) {
  if (phase == MSI_FORK_PREPARE) {
    msi_history_start_fork(phase);
    msi_runlog_fork(phase); /* its sampler takes the device locks under its own */
    msi_live_state_fork(phase); /* its lock comes before the devices' */
    msi_devices_fork(phase);
    msi_external_fork(phase);
    msi_history_fork(phase);
    msi_stacks_fork(phase);
    msi_live_fork(phase);
    msi_invalid_free_fork(phase);
    return;
  }
  msi_invalid_free_fork(phase);
  msi_live_fork(phase);
  msi_stacks_fork(phase);
  msi_history_fork(phase);
  msi_external_fork(phase);
  if (phase == MSI_FORK_CHILD) {
    atomic_store(&exit_dumped, 1);
    if (signal_pipe[0] >= 0) close(signal_pipe[0]);
    if (signal_pipe[1] >= 0) close(signal_pipe[1]);
    signal_pipe[0] = signal_pipe[1] = -1; /* the handler stays, inert */
    signal_started = false;
    pthread_mutex_init(&dump_lock, NULL);
  }
  msi_devices_fork(phase);
  msi_runlog_fork(phase);
  msi_live_state_fork(phase);
  msi_history_start_fork(phase);
}
static void fork_prepare(void) { fork_phase(MSI_FORK_PREPARE); }
static void fork_parent(void) { fork_phase(MSI_FORK_PARENT); }
static void fork_child(void) { fork_phase(MSI_FORK_CHILD); }

/* Starts what the environment asks for once the library is up (devices.c calls it, init lock
 * held): the exit dump, the signal thread. Registered when the library loads. */
static void start_from_environment(void) {
  static bool once;
  if (!once) { /* the exit dump reads MEMSNAP_DUMP then: it may be set at run time */
    atexit(dump_at_exit);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    once = true;
  }
  start_signal_dumper();
}

__attribute__((constructor)) static void register_start(void) {
  msi_devices_on_ready(start_from_environment);
  msi_live_on_request(dump_on_request);
}

static inline int ensure_ready(void) { return msi_ensure_ready(); }

/* ---- out-of-memory observers ------------------------------------------------------------ */

#define MAX_OOM_OBSERVERS 64
static struct {
  memsnap_oom_observer_t fn;
  void *arg;
} oom_observers[MAX_OOM_OBSERVERS];
static _Atomic int n_oom_observers; /* published after the slot is written */
static pthread_mutex_t oom_observers_lock = PTHREAD_MUTEX_INITIALIZER;

int memsnap_add_oom_observer(memsnap_oom_observer_t fn, void *arg) {
  if (!fn) return MEMSNAP_EINVAL;
  pthread_mutex_lock(&oom_observers_lock);
  int n = atomic_load(&n_oom_observers);
  if (n == MAX_OOM_OBSERVERS) {
    pthread_mutex_unlock(&oom_observers_lock);
    msi_error("memsnap_add_oom_observer: %d observers are attached already", MAX_OOM_OBSERVERS);
    return MEMSNAP_ENOMEM;
  }
  oom_observers[n].fn = fn;
  oom_observers[n].arg = arg;
  atomic_store(&n_oom_observers, n + 1);
  pthread_mutex_unlock(&oom_observers_lock);
  return MEMSNAP_OK;
}

/* Calls the observers for the device out-of-memory error the allocation just reported
 * (msi_last_oom; none for lack of host memory), with no lock held; the out-of-memory message is
 * the last error again afterwards, whatever they called. */
static void notify_oom(void) {
  msi_oom_info oom = msi_last_oom;
  msi_last_oom.set = false;
  int n = atomic_load(&n_oom_observers);
  if (MSI_LIKELY(n == 0) || !oom.set) return;
  char message[512];
  snprintf(message, sizeof message, "%s", memsnap_last_error());
  for (int i = 0; i < n; i++) oom_observers[i].fn(oom.device, oom.size, oom.total, oom.free_bytes, oom_observers[i].arg);
  msi_error("%s", message);
}

/* memsnap_alloc with the caller's stack given: `foreign` for a call made on behalf of an
 * intercepted cudaMalloc (stack from `caller` on, the GIL never taken), else the usual stack. */
static int alloc_on(void **out, size_t size, int device, memsnap_stream_t stream, bool foreign, void *caller) {
  *out = NULL;
  if (size == 0) return MEMSNAP_OK;
  if (MSI_UNLIKELY(size >= ((size_t)1 << 60))) { /* as PyTorch's allocate() refuses it, before anything */
    msi_error("CUDA out of memory. Tried to allocate more than 1EB memory.");
    return MEMSNAP_ENOMEM;
  }
  msi_device *d = msi_device_get(device);
  if (MSI_UNLIKELY(!d)) return MEMSNAP_EINVAL;
  /* the cache turned off: a device allocation of its own (not in the async mode, whose pool is
   * the driver's: PyTorch's cudaMallocAsync backend ignores both switches too) */
  if (MSI_UNLIKELY(msi_opt.no_caching | msi_opt.caching_off) && !d->async)
    return msi_uncached_alloc(device, size, stream, out, caller ? caller : __builtin_return_address(0));
  uint32_t stack = !MSI_UNLIKELY(msi_ring_recording()) ? 0
                   : foreign ? msi_stack_capture_from((uint64_t)(uintptr_t)caller, false) : msi_stack_capture();
  int rc = MSI_UNLIKELY(d->async != NULL) ? msi_async_malloc(d, size, stream, stack, out)
                                         : msi_device_malloc(d, size, stream, stack, out);
  msi_live_state_check(); /* the live mapping's state, when the ring has moved on enough since (livestate.c) */
  if (MSI_UNLIKELY(rc == MEMSNAP_ENOMEM)) {
    msi_dump_on_oom();
    notify_oom();
  }
  return rc;
}

int memsnap_alloc(void **out, size_t size, int device, memsnap_stream_t stream) {
  return alloc_on(out, size, device, stream, false, NULL);
}

int memsnap_alloc_for(void **out, size_t size, int device, memsnap_stream_t stream, void *caller) {
  return alloc_on(out, size, device, stream, true, caller);
}

void *memsnap_malloc(ssize_t size, int device, memsnap_stream_t stream) {
  void *ptr = NULL;
  if (MSI_UNLIKELY(size < 0)) {
    msi_error("memsnap_malloc: negative size %zd", size);
    return NULL;
  }
  int rc = memsnap_alloc(&ptr, (size_t)size, device, stream);
  if (MSI_LIKELY(rc == MEMSNAP_OK)) return ptr;
  /* With throw, PyTorch gets an exception it turns into a Python one: OutOfMemoryError, or a
   * RuntimeError for anything else (a driver error), never an abort of the user's process. */
  if (msi_opt.oom == MSI_OOM_THROW) {
    if (rc == MEMSNAP_ENOMEM) msi_throw_oom(memsnap_last_error());
    msi_throw_error(memsnap_last_error());
  }
  if (msi_opt.oom == MSI_OOM_ABORT && rc == MEMSNAP_ENOMEM) { /* what the user asked for */
    fprintf(stderr, "memsnap: fatal: %s\n", memsnap_last_error());
    abort();
  }
  return NULL;
}

/* Frees `ptr` on whichever device owns it, trying `hint` first. A pointer no device owns is an
 * invalid free (misuse.c); from memsnap_free (`loud`) it may end the process. */
static int release_on(void *ptr, int hint, uint32_t stack, uint64_t size_arg, memsnap_stream_t stream, bool loud,
                      void *site) {
  if (ensure_ready() != 0) return MEMSNAP_EBACKEND;
  if (hint >= 0 && hint < msi_device_count_ready()) {
    msi_device *d = msi_device_peek(hint);
    if (d && device_free(d, ptr, stack) == MEMSNAP_OK) return MEMSNAP_OK;
  }
  for (int i = 0; i < msi_device_count_ready(); i++) {
    msi_device *d = msi_device_peek(i);
    if (i != hint && d && device_free(d, ptr, stack) == MEMSNAP_OK) return MEMSNAP_OK;
  }
  if (MSI_UNLIKELY(msi_uncached_any()) && msi_uncached_free(ptr) != MEMSNAP_EINVAL) return MEMSNAP_OK;
  if (msi_invalid_free(ptr, hint, size_arg, stream, stack, (uint64_t)(uintptr_t)site, loud)) { /* MEMSNAP_INVALID_FREE=abort: as PyTorch's allocator ends on an invalid pointer */
    char message[512];
    snprintf(message, sizeof message, "%s", memsnap_last_error());
    memsnap_dump_exit();
    fprintf(stderr, "memsnap: fatal: %s (MEMSNAP_INVALID_FREE=abort)\n", message);
    abort();
  }
  return MEMSNAP_EINVAL;
}

void memsnap_free(void *ptr, ssize_t size, int device, memsnap_stream_t stream) {
  if (!ptr) return;
  uint32_t stack = free_stack();
  msi_device *d = msi_device_peek(device);
  if (MSI_LIKELY(d && device_free(d, ptr, stack) == MEMSNAP_OK)) return;
  release_on(ptr, device, stack, size > 0 ? (uint64_t)size : 0, stream, true, __builtin_return_address(0));
}

int memsnap_release(void *ptr) {
  if (!ptr) return MEMSNAP_OK;
  return release_on(ptr, -1, free_stack(), 0, NULL, false, __builtin_return_address(0));
}

int memsnap_release_for(void *ptr) {
  if (!ptr) return MEMSNAP_OK;
  return release_on(ptr, -1, msi_ring_recording() ? msi_stack_capture_for_free(0, false) : 0, 0, 0, false,
                    __builtin_return_address(0));
}

int memsnap_record_start(size_t max_entries, const char *stacks) {
  if (ensure_ready() != 0) return MEMSNAP_EBACKEND;
  if (stacks && msi_option_set("stacks", stacks) != MEMSNAP_OK) return MEMSNAP_EINVAL;
  int rc = msi_history_start(max_entries ? max_entries : msi_opt.max_entries);
  for (int i = 0; rc == MEMSNAP_OK && i < msi_device_count_ready(); i++)
    if (msi_device_peek(i)) msi_live_note_device(i); /* in use before the live mapping was made */
  if (rc == MEMSNAP_OK) msi_live_state_take(); /* what was allocated before: the state, at once */
  return rc;
}

int memsnap_record_stop(void) {
  msi_history_stop();
  return MEMSNAP_OK;
}

int memsnap_record_clear(void) {
  msi_history_clear();
  msi_live_state_take(); /* the events before the clear are no log for the state any more */
  return MEMSNAP_OK;
}

void memsnap_init(int device_count) {
  (void)device_count; /* the backend knows the count; PyTorch's may include hidden devices */
  ensure_ready();
}

void memsnap_empty_cache(void) {
  if (ensure_ready() != 0) return;
  uint32_t stack = free_stack(); /* for its segment_free events */
  for (int i = 0; i < msi_device_count_ready(); i++) {
    msi_device *d = msi_device_peek(i);
    if (d && d->async) msi_async_empty_cache(d, stack);
    else if (d) msi_device_empty_cache(d, stack);
  }
}

void memsnap_set_memory_fraction(double fraction, int device) {
  msi_device *d = msi_device_get(device);
  if (d) msi_device_set_fraction(d, fraction);
}

double memsnap_get_memory_fraction(int device) {
  if (ensure_ready() != 0) return MEMSNAP_EBACKEND;
  msi_device *d = msi_device_get(device);
  return d ? msi_device_get_fraction(d) : MEMSNAP_EINVAL;
}

void memsnap_record_stream(void *ptr, memsnap_stream_t stream) {
  if (!ptr || ensure_ready() != 0) return;
  for (int i = 0; i < msi_device_count_ready(); i++) {
    msi_device *d = msi_device_peek(i);
    if (d && (d->async ? msi_async_record_stream(d, ptr, stream) : msi_device_record_stream(d, ptr, stream)) != 0) return;
  }
  msi_error("record_stream of %p, which memsnap did not allocate", ptr);
}

int memsnap_set_option(const char *name, const char *value) {
  if (!name || !value) return MEMSNAP_EINVAL;
  msi_devices_read_options(); /* the environment first; the device is not started */
  return msi_option_set(name, value);
}

int memsnap_get_option(const char *name, char *value, size_t len) {
  if (!name || !value || !len) return MEMSNAP_EINVAL;
  msi_devices_read_options();
  return msi_option_get(name, value, len);
}

const char *memsnap_backend_name(void) { return ensure_ready() == 0 ? msi_be->name : NULL; }

void memsnap_read_options(void) { msi_devices_read_options(); }

/* An intercepted allocation failed (the intercept library reports it): recorded as an oom
 * event with the caller's stack, and the MEMSNAP_DUMP_ON_OOM snapshot written (external.c holds
 * the intercepted blocks; this entry point sits here, above the snapshot writer). */
int memsnap_external_oom(size_t size, int device, memsnap_stream_t stream, void *caller) {
  if (msi_ensure_ready() != 0) return MEMSNAP_EBACKEND;
  if (msi_ring_recording()) {
    size_t free_bytes = 0, total = 0;
    if (device >= 0 && device < msi_device_count_ready()) msi_be->device_info(device, &free_bytes, &total, NULL, 0);
    msi_history_add_unobserved(MSI_EV_OOM, device, stream, free_bytes, size, size, 0,
                    msi_stack_capture_from((uint64_t)(uintptr_t)caller, false));
  }
  msi_error("out of memory: an intercepted allocation of %zu bytes on device %d failed", size, device);
  msi_dump_on_oom();
  return MEMSNAP_OK;
}

int memsnap_device_count(void) { return ensure_ready() == 0 ? msi_device_count_ready() : MEMSNAP_EBACKEND; }

/* A device's state for a call that reads it or acts on what it holds: NULL with *rc MEMSNAP_OK for
 * a valid device never used, which is not brought up for it (on the GPU that would create its CUDA
 * context, as PyTorch's allocator does not), NULL with *rc an error for an invalid one. */
static msi_device *used_device(int device, int *rc) {
  *rc = MEMSNAP_OK;
  if (ensure_ready() != 0) {
    *rc = MEMSNAP_EBACKEND;
    return NULL;
  }
  if (device < 0 || device >= msi_device_count_ready()) {
    msi_error("invalid device %d: the %s backend has %d device(s)", device, msi_be->name, msi_device_count_ready());
    *rc = MEMSNAP_EINVAL;
    return NULL;
  }
  return msi_device_peek(device);
}

int memsnap_get_stats(int device, memsnap_stats_t *out) {
  int rc;
  msi_device *d = used_device(device, &rc);
  if (!d) { /* never used: zeros, and the option PyTorch reports */
    if (rc == MEMSNAP_OK) {
      memset(out, 0, sizeof *out);
      out->max_split_size = msi_opt.max_split_size == SIZE_MAX ? -1 : (int64_t)msi_opt.max_split_size;
    }
    return rc;
  }
  pthread_mutex_lock(&d->lock);
  if (d->async) {
    msi_async_stats(d, out);
    out->num_invalid_frees = d->stats.num_invalid_frees;
  } else {
    *out = d->stats;
  }
  pthread_mutex_unlock(&d->lock);
  return MEMSNAP_OK;
}

int memsnap_get_stats_flat(int device, int64_t *values, int capacity) {
  memsnap_stats_t s;
  int rc = memsnap_get_stats(device, &s);
  return rc != MEMSNAP_OK ? rc : msi_stats_flatten(&s, values, capacity);
}

/* A role told once holds for the block's life: kept by address under the device lock (roles.c)
 * before the events are added, so a state taken between the two has it already. */
int memsnap_tensor_events(size_t n, const uint64_t *storage, const uint64_t *bytes, const uint8_t *role,
                          const int32_t *label, const int16_t *device) {
  ensure_ready();
  int rc = msi_tensor_events_check(n, storage, bytes, role, label, device);
  if (rc != MEMSNAP_OK || n == 0) return rc;
  msi_runlog_tensors(n, storage, bytes, role); /* the run log's roles, whether the ring records or not */
  if (!msi_ring_recording()) return MEMSNAP_OK;
  for (size_t i = 0; i < n; i++) {
    msi_device *d = device[i] >= 0 ? msi_device_peek(device[i]) : NULL;
    if (!d) continue;
    pthread_mutex_lock(&d->lock);
    msi_block *b = msi_ptrmap_get(&d->live, (uintptr_t)storage[i]);
    if (b && msi_roles_set(&d->roles, b->ptr, role[i], (uint32_t)label[i]) == 0) b->told = true;
    pthread_mutex_unlock(&d->lock);
  }
  msi_tensor_events_add(n, storage, bytes, role, label, device);
  return MEMSNAP_OK;
}

int memsnap_step_event(int label, int what) {
  ensure_ready();
  int rc = msi_step_event(label, what);
  if (rc == MEMSNAP_OK && what != MEMSNAP_STEP_BEGIN) msi_live_state_iteration_end();
  return rc;
}

/* A first mark before any allocation still sees MEMSNAP_RECORD: the library comes up first. */
int memsnap_mark(const char *label) {
  ensure_ready();
  return msi_history_mark(label);
}

int memsnap_range_push(const char *label) {
  ensure_ready();
  return msi_history_range_push(label);
}

int memsnap_range_pop(void) {
  ensure_ready();
  return msi_history_range_pop();
}

static int reset_stats(int device, void (*reset)(memsnap_stats_t *)) {
  int rc;
  msi_device *d = used_device(device, &rc);
  if (!d) return rc; /* never used: nothing to reset */
  pthread_mutex_lock(&d->lock);
  reset(&d->stats);
  pthread_mutex_unlock(&d->lock);
  return MEMSNAP_OK;
}

int memsnap_reset_peak_stats(int device) {
  int rc;
  msi_device *d = used_device(device, &rc);
  if (d && d->async) { /* the pool keeps the peaks: reset its marks, as PyTorch does */
    pthread_mutex_lock(&d->lock);
    msi_async_reset_peak(d);
    pthread_mutex_unlock(&d->lock);
    return MEMSNAP_OK;
  }
  return reset_stats(device, msi_stats_reset_peak);
}

/* The async mode keeps no accumulated sums (PyTorch: "has no effect"), so there is nothing to
 * reset; the caching mode's counters are zeroed. */
int memsnap_reset_accumulated_stats(int device) { return reset_stats(device, msi_stats_reset_accumulated); }

/* ---- private pools ----------------------------------------------------------------------- */

static int thread_filter(void *ctx, memsnap_stream_t stream) {
  (void)stream;
  return pthread_equal(pthread_self(), (pthread_t)(uintptr_t)ctx);
}

int memsnap_begin_allocate_to_pool(int device, uint64_t id0, uint64_t id1, memsnap_pool_filter_t filter, void *ctx) {
  msi_device *d = msi_device_get(device);
  if (!d) return MEMSNAP_EINVAL;
  if (!filter) {
    msi_error("memsnap_begin_allocate_to_pool: a filter is needed (memsnap_begin_allocate_thread_to_pool "
              "routes the calling thread's allocations)");
    return MEMSNAP_EINVAL;
  }
  uint64_t id[2] = {id0, id1};
  return msi_pool_begin(d, id, filter, ctx, NULL);
}

int memsnap_begin_allocate_thread_to_pool(int device, uint64_t id0, uint64_t id1) {
  return memsnap_begin_allocate_to_pool(device, id0, id1, thread_filter, (void *)(uintptr_t)pthread_self());
}

/* For the C++ hooks (torch_hooks.cc): begin with a filter whose context memsnap frees. */
int msi_begin_allocate_owned(int device, uint64_t id0, uint64_t id1, msi_pool_filter filter, void *ctx,
                             void (*release_ctx)(void *)) {
  msi_device *d = msi_device_get(device);
  if (!d) {
    release_ctx(ctx);
    return MEMSNAP_EINVAL;
  }
  uint64_t id[2] = {id0, id1};
  return msi_pool_begin(d, id, filter, ctx, release_ctx);
}

/* A call on a pool of the device: one never used has none (and is not brought up for it). */
static msi_device *pool_device(int device, uint64_t id0, uint64_t id1) {
  int rc;
  msi_device *d = used_device(device, &rc);
  if (!d && rc == MEMSNAP_OK)
    msi_error("device %d: no pool (%llu, %llu)", device, (unsigned long long)id0, (unsigned long long)id1);
  return d;
}

#define POOL_CALL(fn)                            \
  msi_device *d = pool_device(device, id0, id1); \
  if (!d) return MEMSNAP_EINVAL;                 \
  uint64_t id[2] = {id0, id1};                   \
  return fn

int memsnap_end_allocate_to_pool(int device, uint64_t id0, uint64_t id1) { POOL_CALL(msi_pool_end(d, id)); }
int memsnap_pool_capture_stream(int device, uint64_t id0, uint64_t id1, memsnap_stream_t stream) {
  POOL_CALL(msi_pool_capture_stream(d, id, stream));
}
int memsnap_create_pool(int device, uint64_t id0, uint64_t id1) {
  msi_device *d = msi_device_get(device); /* a pool is made on its device: it comes up */
  if (!d) return MEMSNAP_EINVAL;
  uint64_t id[2] = {id0, id1};
  return msi_pool_create(d, id);
}
int memsnap_release_pool(int device, uint64_t id0, uint64_t id1) { POOL_CALL(msi_pool_release(d, id)); }
int memsnap_empty_pool_cache(int device, uint64_t id0, uint64_t id1) { POOL_CALL(msi_device_empty_pool(d, id, free_stack())); }
int memsnap_pool_live_allocations_match(int device, uint64_t id0, uint64_t id1, const uint64_t *ptrs, size_t n) {
  POOL_CALL(msi_pool_live_match(d, id, ptrs, n));
}
int memsnap_pool_use_count(int device, uint64_t id0, uint64_t id1) { POOL_CALL(msi_pool_use_count(d, id)); }
int memsnap_pool_set_flags(int device, uint64_t id0, uint64_t id1, int use_on_oom, int no_split) {
  POOL_CALL(msi_pool_set_flags(d, id, use_on_oom, no_split));
}
int memsnap_pool_set_provider(int device, uint64_t id0, uint64_t id1, memsnap_segment_alloc_fn alloc,
                              memsnap_segment_free_fn free_fn, void *ctx, void (*release)(void *ctx)) {
  msi_device *d = pool_device(device, id0, id1);
  if (!d) {
    if (release) release(ctx);
    return MEMSNAP_EINVAL;
  }
  uint64_t id[2] = {id0, id1};
  return msi_pool_set_provider(d, id, alloc, free_fn, ctx, release);
}

/* ---- what a host allocator needs (recorder/pytorch/) ------------------------------------ */

void memsnap_set_caching(int enabled) {
  msi_devices_read_options(); /* the environment first, as memsnap_set_option */
  msi_opt.caching_off = !enabled;
}

int memsnap_caching(void) {
  msi_devices_read_options();
  return msi_opt.async_mode || !(msi_opt.no_caching | msi_opt.caching_off);
}

/* Calls fn on each device that has state until one answers other than MEMSNAP_EINVAL without an
 * error (the pointer is not that device's); names the pointer when none holds it. */
#define ON_OWNING_DEVICE(ptr, call)                                                                     \
  do {                                                                                                  \
    if (ensure_ready() != 0) return MEMSNAP_EBACKEND;                                                   \
    for (int i = 0; i < msi_device_count_ready(); i++) {                                                \
      msi_device *d = msi_device_peek(i);                                                               \
      if (!d) continue;                                                                                 \
      msi_clear_error();                                                                                \
      int rc_ = (call);                                                                                 \
      if (rc_ != MEMSNAP_EINVAL || memsnap_last_error()[0]) return rc_;                                 \
    }                                                                                                   \
    msi_error("invalid device pointer: %p (memsnap did not allocate it)", (ptr));                        \
    return MEMSNAP_EINVAL;                                                                              \
  } while (0)

int memsnap_block_base(void *ptr, void **base, size_t *size) { ON_OWNING_DEVICE(ptr, msi_block_base(d, ptr, base, size)); }

int memsnap_block_size(void *ptr, size_t *size, int *device) { ON_OWNING_DEVICE(ptr, msi_block_size(d, ptr, size, device)); }

int memsnap_ipc_share(void *ptr, char **handle, size_t *len, size_t *offset) {
  ON_OWNING_DEVICE(ptr, msi_ipc_share(d, ptr, handle, len, offset));
}

int memsnap_ipc_open(const char *handle, size_t len, int device, void **base) {
  *base = NULL;
  if (!handle) return MEMSNAP_EINVAL;
  if (ensure_ready() != 0) return MEMSNAP_EBACKEND;
  if (device < 0 || device >= msi_device_count_ready()) {
    msi_error("invalid device %d", device);
    return MEMSNAP_EINVAL;
  }
  return msi_ipc_open(handle, len, device, base, __builtin_return_address(0));
}

int memsnap_ipc_close(void *base) { return msi_ipc_close(base); }

int memsnap_add_free_memory_callback(memsnap_free_memory_fn fn, void *arg) {
  if (!fn) return MEMSNAP_EINVAL;
  return msi_add_free_memory_callback(fn, arg);
}

memsnap_pool_state *memsnap_pool_checkpoint(int device, uint64_t id0, uint64_t id1) {
  msi_device *d = pool_device(device, id0, id1);
  uint64_t id[2] = {id0, id1};
  return d ? msi_pool_checkpoint(d, id) : NULL;
}

int memsnap_pool_restore(int device, const memsnap_pool_state *state, void ***freed, size_t *n_freed, void ***allocated,
                         size_t *n_allocated) {
  *freed = *allocated = NULL;
  *n_freed = *n_allocated = 0;
  if (!state) return MEMSNAP_EINVAL;
  msi_device *d = pool_device(device, 0, 0);
  if (!d) return MEMSNAP_EINVAL;
  return msi_pool_restore(d, state, freed, n_freed, allocated, n_allocated);
}
#undef POOL_CALL

int memsnap_copy_segments(int device, uint64_t id0, uint64_t id1, memsnap_segment_info **segments, size_t *n_segments,
                          memsnap_block_info **blocks, size_t *n_blocks) {
  *segments = NULL;
  *blocks = NULL;
  *n_segments = *n_blocks = 0;
  int rc;
  msi_device *d = used_device(device, &rc);
  if (!d) return rc; /* never used: no segments */
  uint64_t id[2] = {id0, id1};
  return msi_copy_segments(d, id, segments, n_segments, blocks, n_blocks);
}

int memsnap_set_allocator_settings(const char *settings) {
  if (!settings) return MEMSNAP_EINVAL;
  msi_devices_read_options();
  int rc = msi_options_apply_settings(settings);
  if (rc != MEMSNAP_OK || !msi_is_ready()) return rc;
  for (int i = 0; i < msi_device_count_ready(); i++) {
    msi_device *d = msi_device_peek(i);
    if (d) msi_device_apply_settings(d);
  }
  return MEMSNAP_OK;
}

int memsnap_sim_synchronize(memsnap_stream_t stream) {
  if (ensure_ready() != 0) return MEMSNAP_EBACKEND;
  if (msi_be != &msi_backend_sim) {
    msi_error("memsnap_sim_synchronize needs MEMSNAP_BACKEND=sim (the backend is %s)", msi_be->name);
    return MEMSNAP_EINVAL;
  }
  return msi_sim_synchronize(stream);
}

static int sim_capture(const char *fn, memsnap_stream_t stream, int what, memsnap_stream_t other) {
  if (ensure_ready() != 0) return MEMSNAP_EBACKEND;
  if (msi_be != &msi_backend_sim) {
    msi_error("%s needs MEMSNAP_BACKEND=sim (the backend is %s)", fn, msi_be->name);
    return MEMSNAP_EINVAL;
  }
  return msi_sim_capture(stream, what, other);
}

int memsnap_sim_capture_begin(memsnap_stream_t stream) {
  return sim_capture("memsnap_sim_capture_begin", stream, MSI_SIM_BEGIN, NULL);
}
int memsnap_sim_launch(memsnap_stream_t stream) { return sim_capture("memsnap_sim_launch", stream, MSI_SIM_LAUNCH, NULL); }
int memsnap_sim_stream_wait(memsnap_stream_t waiter, memsnap_stream_t stream) {
  return sim_capture("memsnap_sim_stream_wait", waiter, MSI_SIM_WAIT, stream);
}
int memsnap_sim_capture_end(memsnap_stream_t stream) {
  return sim_capture("memsnap_sim_capture_end", stream, MSI_SIM_END, NULL);
}

/* The simulated device hands out 512-byte multiples, so its addresses stay aligned as the
 * driver's are (256 bytes at least). */
static size_t sim_rounded(size_t size) { return size ? (size + 511) & ~(size_t)511 : 512; }

static int sim_device_check(int device) {
  if (ensure_ready() != 0) return MEMSNAP_EBACKEND;
  if (msi_be != &msi_backend_sim) {
    msi_error("the simulated device's memory needs MEMSNAP_BACKEND=sim (the backend is %s)", msi_be->name);
    return MEMSNAP_EINVAL;
  }
  if (device < 0 || device >= msi_device_count_ready()) {
    msi_error("invalid device %d: the sim backend has %d device(s)", device, msi_device_count_ready());
    return MEMSNAP_EINVAL;
  }
  return MEMSNAP_OK;
}

int memsnap_sim_mem_alloc(int device, size_t size, void **out) {
  *out = NULL;
  int rc = sim_device_check(device);
  if (rc != MEMSNAP_OK) return rc;
  uintptr_t p = 0;
  rc = msi_be->mem_alloc(device, sim_rounded(size), &p);
  if (rc == MSI_BE_OOM) {
    msi_error("out of memory: the simulated device %d has no %zu free bytes", device, size);
    return MEMSNAP_ENOMEM;
  }
  if (rc != MSI_BE_OK) return MEMSNAP_EINVAL;
  *out = (void *)p;
  return MEMSNAP_OK;
}

int memsnap_sim_mem_free(int device, void *ptr, size_t size) {
  int rc = sim_device_check(device);
  if (rc != MEMSNAP_OK) return rc;
  return msi_be->mem_free(device, (uintptr_t)ptr, sim_rounded(size)) == MSI_BE_OK ? MEMSNAP_OK : MEMSNAP_EINVAL;
}

int memsnap_sim_peer_access(int device, const void *ptr) {
  int rc = sim_device_check(device);
  if (rc != MEMSNAP_OK) return rc;
  rc = msi_sim_peer_access(device, (uintptr_t)ptr);
  if (rc < 0) msi_error("%p is in no simulated device's memory", ptr);
  return rc < 0 ? MEMSNAP_EINVAL : rc;
}

void memsnap_shutdown(void) {
  dump_at_exit();
  pthread_mutex_lock(&dump_lock);
  if (msi_is_ready()) { /* while the backend still runs */
    msi_ipc_reset();
    msi_uncached_reset();
  }
  if (msi_devices_shutdown()) atomic_store(&exit_dumped, 0);
  msi_external_reset();
  msi_invalid_free_reset();
  pthread_mutex_unlock(&dump_lock);
}
