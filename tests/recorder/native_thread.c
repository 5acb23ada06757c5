/* native_thread.c: a thread that never ran Python, for the Python tests
 * (build/tests/libnative_thread.so, loaded with ctypes): autograd's device threads are such threads,
 * and while a backward pass is open their allocations borrow its Python frames
 * (recorder/history/stacks.c).
 *
 * native_thread_malloc(fn, size) calls fn(size, 0, NULL) (memsnap_malloc, passed by address: the
 * library does not link libmemsnap) on a new thread and returns what it returned (NULL if the
 * thread could not start). */
#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

typedef void *(*malloc_fn)(ssize_t size, int device, void *stream);

typedef struct job {
  malloc_fn fn;
  ssize_t size;
  void *out;
} job;

static void *run(void *arg) {
  job *j = arg;
  j->out = j->fn(j->size, 0, NULL);
  return NULL;
}

void *native_thread_malloc(malloc_fn fn, ssize_t size) {
  job j = {fn, size, NULL};
  pthread_t t;
  if (pthread_create(&t, NULL, run, &j) != 0) return NULL;
  pthread_join(t, NULL);
  return j.out;
}
