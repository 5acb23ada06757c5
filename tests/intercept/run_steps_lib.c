/* run_steps_lib.c: librun_steps.so, a small CUDA library for `memsnap run` tests, linked against
 * the toolkit's libcudart.so and unaware of memsnap, called from a Python program through ctypes
 * (tests/data/run/steps.py), the way a program reaches its own compiled kernels without PyTorch.
 *
 *   steps_work(bytes)         cudaMalloc a work buffer of `bytes`, then cudaFree it
 *   steps_keep_for_later(bytes)  cudaMalloc `bytes` and keep them (never freed): the leak
 *   steps_kept()              how many blocks steps_keep_for_later holds
 * and a lock of the library's own, as PyTorch's allocator mutex is held around its cudaMalloc:
 *   steps_work_locked(bytes)  holding the lock, waits until another thread waits for it (and a
 *                             little more), then does steps_work
 *   steps_lock_held()         whether a thread holds the lock
 *   steps_wait_for_lock()     says it waits, then takes the lock and gives it back
 * Called through ctypes.PyDLL (the GIL held) from one thread while another is in
 * steps_work_locked (the GIL released), this is the deadlock a recorder that takes the GIL back
 * inside cudaMalloc would make. Each returns 0, or the cudaError_t of the call that failed.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <unistd.h>

#define KEPT_MAX 4096

static void *kept[KEPT_MAX];
static int nkept;

int steps_work(size_t bytes) {
  void *p = NULL;
  cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc != cudaSuccess) return (int)rc;
  return (int)cudaFree(p);
}

int steps_keep_for_later(size_t bytes) {
  void *p = NULL;
  cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc != cudaSuccess) return (int)rc;
  if (nkept < KEPT_MAX) kept[nkept++] = p;
  return 0;
}

int steps_kept(void) { return nkept; }

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int held, waiting;

int steps_work_locked(size_t bytes) {
  pthread_mutex_lock(&lock);
  atomic_store(&held, 1);
  while (!atomic_load(&waiting)) usleep(1000);
  usleep(50 * 1000); /* the waiting thread is inside pthread_mutex_lock, holding the GIL */
  int rc = steps_work(bytes);
  atomic_store(&held, 0);
  pthread_mutex_unlock(&lock);
  return rc;
}

int steps_lock_held(void) { return atomic_load(&held); }

int steps_wait_for_lock(void) {
  atomic_store(&waiting, 1);
  pthread_mutex_lock(&lock);
  pthread_mutex_unlock(&lock);
  atomic_store(&waiting, 0);
  return 0;
}
