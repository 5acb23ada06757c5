/* devices.c: the device table and lazy initialisation, below the public entry points.
 *
 * The first use of the library reads the options, starts the backend (backend.c, which holds the
 * active one), learns the device count and starts recording if MEMSNAP_RECORD asks for it; each
 * device's state (alloc.c) is made on its first use. Everything in the recorder that needs a
 * device, or needs the library to be up, comes here: api.c (the entry points) sits on top, and
 * nothing here calls up into it. What api.c starts once the library is up (the exit dump, the
 * signal thread) it registers as a hook (msi_devices_on_ready) when the library loads.
 *
 * After the first call, msi_device_get costs one flag test and one table load.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "history/livemap.h"

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int ready;       /* 1 once options, backend and device count are set */
static int ndevices;
_Atomic(msi_device *) msi_device_table[MSI_MAX_DEVICES];
static void (*on_ready)(void); /* api.c's start of the exit dump and signal thread */

void msi_devices_on_ready(void (*fn)(void)) { on_ready = fn; }

static bool options_read; /* under init_lock: msi_options_load ran (it runs once) */

/* Reads the options once, the backend left alone: CUDA stays uninitialised, so a program whose
 * parent process never touches the device may still fork children that use it. */
void msi_devices_read_options(void) {
  pthread_mutex_lock(&init_lock);
  if (!options_read) msi_options_load();
  options_read = true;
  pthread_mutex_unlock(&init_lock);
}

static int init_slow(void) {
  int rc = 0;
  pthread_mutex_lock(&init_lock);
  if (atomic_load(&ready)) goto out;
  if (!options_read) msi_options_load();
  options_read = true;
  if (msi_backend_start() != MSI_BE_OK) {
    rc = -1;
    goto out;
  }
  ndevices = msi_be->device_count();
  if (ndevices > MSI_MAX_DEVICES) ndevices = MSI_MAX_DEVICES;
  /* Recording (MEMSNAP_RECORD) starts before the library says it is ready: a thread that sees
   * it ready takes no lock, and its allocations would go unrecorded until the ring existed
   * (a whole thread's, under load: test_run's four threads under make sanitize). */
  if (msi_opt.record && msi_history_start(msi_opt.max_entries) != MEMSNAP_OK) fprintf(stderr, "memsnap: error: %s\n", memsnap_last_error());
  atomic_store(&ready, 1);
  if (on_ready) on_ready();
out:
  pthread_mutex_unlock(&init_lock);
  return rc;
}

int msi_ensure_ready(void) {
  if (MSI_LIKELY(atomic_load_explicit(&ready, memory_order_acquire))) return 0;
  return init_slow();
}

bool msi_is_ready(void) { return atomic_load(&ready) != 0; }

int msi_device_count_ready(void) { return ndevices; }

static msi_device *device_create(int device) {
  pthread_mutex_lock(&init_lock);
  msi_device *d = atomic_load(&msi_device_table[device]);
  if (!d) {
    d = malloc(sizeof *d);
    if (!d) msi_error("out of host memory");
    else if (msi_device_init(d, device) != 0) {
      free(d);
      d = NULL;
    } else {
      atomic_store(&msi_device_table[device], d);
      msi_live_note_device(device); /* named in the live mapping, when there is one */
    }
  }
  pthread_mutex_unlock(&init_lock);
  return d;
}

msi_device *msi_device_get(int device) {
  if (MSI_UNLIKELY(msi_ensure_ready() != 0)) return NULL;
  if (MSI_UNLIKELY(device < 0 || device >= ndevices)) {
    msi_error("invalid device %d: the %s backend has %d device(s)", device, msi_be->name, ndevices);
    return NULL;
  }
  msi_device *d = atomic_load_explicit(&msi_device_table[device], memory_order_acquire);
  return MSI_LIKELY(d != NULL) ? d : device_create(device);
}

void msi_devices_locked(void (*fn)(msi_device **devs, int n, void *arg), void *arg) {
  msi_device *devs[MSI_MAX_DEVICES] = {0};
  int n = msi_ensure_ready() == 0 ? ndevices : 0;
  for (int i = 0; i < n; i++) {
    devs[i] = atomic_load(&msi_device_table[i]);
    if (devs[i]) pthread_mutex_lock(&devs[i]->lock);
  }
  fn(devs, n, arg);
  for (int i = n; i-- > 0;)
    if (devs[i]) pthread_mutex_unlock(&devs[i]->lock);
}

void msi_devices_fork(int phase) {
  if (phase == MSI_FORK_PREPARE) {
    pthread_mutex_lock(&init_lock);
    for (int i = 0; i < MSI_MAX_DEVICES; i++) {
      msi_device *d = atomic_load(&msi_device_table[i]);
      if (d) pthread_mutex_lock(&d->lock);
    }
    return;
  }
  for (int i = MSI_MAX_DEVICES; i-- > 0;) {
    msi_device *d = atomic_load(&msi_device_table[i]);
    if (d) pthread_mutex_unlock(&d->lock);
  }
  pthread_mutex_unlock(&init_lock);
}

bool msi_devices_shutdown(void) {
  bool was_ready = false;
  pthread_mutex_lock(&init_lock);
  options_read = false; /* the next use reads the environment again */
  if (atomic_load(&ready)) {
    for (int i = 0; i < MSI_MAX_DEVICES; i++) {
      msi_device *d = atomic_exchange(&msi_device_table[i], NULL);
      if (d) {
        msi_device_destroy(d);
        free(d);
      }
    }
    msi_be->shutdown();
    msi_history_reset();
    msi_stacks_reset();
    atomic_store(&ready, 0);
    was_ready = true;
  }
  pthread_mutex_unlock(&init_lock);
  return was_ready;
}
