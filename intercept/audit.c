/* audit.c: libmemsnap_intercept.so as a run-time linker audit library (LD_AUDIT, `memsnap run
 * --mode audit`): the same recording as the LD_PRELOAD path, reached through the dynamic
 * linker's bindings instead of symbol interposition.
 *
 * The dynamic linker loads an audit library into a link namespace of its own, with its own copy
 * of everything it depends on: this library's libmemsnap.so and libc among them. Recording there
 * would be a second recorder (Python's memsnap package, the sitecustomize's exit dump, use the
 * program's), blind to Python's frames (the C API is looked up in the caller's namespace). So the
 * auditor records nothing itself:
 *
 *   la_objopen    asks to see every binding from and to the program's objects (namespace 0)
 *                 but those from memsnap's own (libmemsnap.so and this library loaded there:
 *                 their calls and dlsyms, the allocator's segments among them, reach the real
 *                 functions; glibc reports a dlsym when either side asked, so la_symbind64
 *                 checks the side that asked too);
 *   la_symbind64  answers a binding of a wrapped function (the CUDA allocation functions,
 *                 cuGetProcAddress, _exit, _Exit), be it through a PLT, a relocation at load
 *                 or a dlsym, with a trampoline of this file, and remembers the definition;
 *   la_preinit    loads this same library into the program's namespace (dlmopen(LM_ID_BASE),
 *                 RTLD_GLOBAL, as a preload would be), whose wrappers record through the
 *                 program's libmemsnap.so: one recording state per process, with Python frames.
 * A trampoline jumps to that copy's wrapper, loading it first if a call comes before la_preinit
 * (a relocation's target called by a constructor of the dynamic linker's); where it cannot be
 * loaded, to the definition the binding found (nothing is recorded then, and it says so once).
 *
 * What reaches this path that LD_PRELOAD misses, and the reverse, is in docs/run.md ("audit").
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "intercept.h"

#undef cuGetProcAddress

#define EXPORT __attribute__((visibility("default")))

/* The wrapped functions: name, return type, parameters, arguments. */
#define WRAPPED(X)                                                                                                 \
  X(cudaMalloc, cudaError_t, (void **p, size_t n), (p, n))                                                         \
  X(cudaMallocManaged, cudaError_t, (void **p, size_t n, unsigned int f), (p, n, f))                               \
  X(cudaMallocPitch, cudaError_t, (void **p, size_t *pitch, size_t w, size_t h), (p, pitch, w, h))                \
  X(cudaMallocAsync, cudaError_t, (void **p, size_t n, cudaStream_t s), (p, n, s))                                 \
  X(cudaMallocFromPoolAsync, cudaError_t, (void **p, size_t n, cudaMemPool_t m, cudaStream_t s), (p, n, m, s))     \
  X(cudaFree, cudaError_t, (void *p), (p))                                                                         \
  X(cudaFreeAsync, cudaError_t, (void *p, cudaStream_t s), (p, s))                                                 \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr *p, size_t n), (p, n))                                                   \
  X(cuMemAllocPitch_v2, CUresult, (CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int e),             \
    (p, pitch, w, h, e))                                                                                           \
  X(cuMemAllocManaged, CUresult, (CUdeviceptr *p, size_t n, unsigned int f), (p, n, f))                            \
  X(cuMemAllocAsync, CUresult, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s))                                  \
  X(cuMemAllocAsync_ptsz, CUresult, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s))                             \
  X(cuMemAllocFromPoolAsync, CUresult, (CUdeviceptr *p, size_t n, CUmemoryPool m, CUstream s), (p, n, m, s))       \
  X(cuMemAllocFromPoolAsync_ptsz, CUresult, (CUdeviceptr *p, size_t n, CUmemoryPool m, CUstream s), (p, n, m, s))  \
  X(cuMemFree_v2, CUresult, (CUdeviceptr p), (p))                                                                  \
  X(cuMemFreeAsync, CUresult, (CUdeviceptr p, CUstream s), (p, s))                                                 \
  X(cuMemFreeAsync_ptsz, CUresult, (CUdeviceptr p, CUstream s), (p, s))                                            \
  X(cuMemMap, CUresult, (CUdeviceptr p, size_t n, size_t o, CUmemGenericAllocationHandle h, unsigned long long f), \
    (p, n, o, h, f))                                                                                               \
  X(cuMemUnmap, CUresult, (CUdeviceptr p, size_t n), (p, n))                                                       \
  X(cuGetProcAddress, CUresult, (const char *name, void **fn, int v, cuuint64_t f), (name, fn, v, f))              \
  X(cuGetProcAddress_v2, CUresult,                                                                                 \
    (const char *name, void **fn, int v, cuuint64_t f, CUdriverProcAddressQueryResult *st), (name, fn, v, f, st))
#define NORETURN_WRAPPED(X) X(_exit) X(_Exit)

enum {
#define X(name, ...) W_##name,
  WRAPPED(X) NORETURN_WRAPPED(X)
#undef X
  W_COUNT
};
static const char *const names[W_COUNT] = {
#define X(name, ...) #name,
    WRAPPED(X) NORETURN_WRAPPED(X)
#undef X
};

static _Atomic(void *) target[W_COUNT]; /* what a trampoline calls: the program's copy's wrapper */
static _Atomic(void *) real[W_COUNT];   /* the definition the first binding found */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded; /* 0: not yet, 1: the copy's wrappers are the targets, -1: the real functions are */
static __thread bool loading; /* this thread is loading it: a wrapped call meanwhile goes to the real function */

/* Loads this library into the program's namespace once, and points every trampoline at it (at
 * the real function where it failed). */
static void load_into_program(void) {
  pthread_mutex_lock(&load_lock);
  if (!loaded) {
    Dl_info self;
    void *h = dladdr((void *)load_into_program, &self) && self.dli_fname
                  ? dlmopen(LM_ID_BASE, self.dli_fname, RTLD_NOW | RTLD_GLOBAL)
                  : NULL;
    if (!h)
      fprintf(stderr, "memsnap: error: LD_AUDIT: cannot load '%s' into the program: %s; nothing is recorded\n",
              self.dli_fname ? self.dli_fname : "libmemsnap_intercept.so", dlerror());
    for (int i = 0; i < W_COUNT; i++) {
      void *w = h ? msi_intercept_real_dlsym(h, names[i]) : NULL;
      atomic_store(&target[i], w ? w : atomic_load(&real[i]));
    }
    loaded = h ? 1 : -1;
  }
  pthread_mutex_unlock(&load_lock);
}

static void *target_of(int i) {
  void *fn = atomic_load_explicit(&target[i], memory_order_acquire);
  if (__builtin_expect(fn == NULL, 0)) {
    if (loading) return atomic_load(&real[i]); /* a constructor of the copy's, during its load */
    loading = true;
    load_into_program();
    loading = false;
    fn = atomic_load(&target[i]);
  }
  return fn;
}

/* The trampolines: tail calls, so the wrapper sees the program's call site as its caller. */
#define X(name, ret, params, args) \
  static ret trampoline_##name params { return ((ret(*) params)target_of(W_##name)) args; }
WRAPPED(X)
#undef X
#define X(name)                                           \
  static void trampoline_##name(int status) {             \
    ((void (*)(int))target_of(W_##name))(status);         \
    __builtin_unreachable();                              \
  }
NORETURN_WRAPPED(X)
#undef X

static void *const trampolines[W_COUNT] = {
#define X(name, ...) (void *)trampoline_##name,
    WRAPPED(X) NORETURN_WRAPPED(X)
#undef X
};

/* The wrapped function named `name`, or -1. Most bindings are of other names: the first bytes
 * decide. */
static int wrapped_index(const char *name) {
  if (!((name[0] == 'c' && name[1] == 'u') || (name[0] == '_' && (name[1] == 'e' || name[1] == 'E')))) return -1;
  for (int i = 0; i < W_COUNT; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

/* memsnap's own objects, which bind to the real functions: libmemsnap.so and this library. */
static bool is_memsnap(const struct link_map *map) {
  const char *slash = map && map->l_name ? strrchr(map->l_name, '/') : NULL;
  const char *base = slash ? slash + 1 : map && map->l_name ? map->l_name : "";
  return !strncmp(base, "libmemsnap.so", 13) || !strncmp(base, "libmemsnap_intercept.so", 23);
}

EXPORT unsigned int la_version(unsigned int version) { return version < LAV_CURRENT ? version : LAV_CURRENT; }

EXPORT unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie) {
  (void)cookie; /* stays the link map */
  if (lmid != LM_ID_BASE) return 0;
  return is_memsnap(map) ? LA_FLG_BINDTO : LA_FLG_BINDTO | LA_FLG_BINDFROM;
}

EXPORT void la_preinit(uintptr_t *cookie) {
  (void)cookie;
  loading = true;
  load_into_program();
  loading = false;
}

EXPORT uintptr_t la_symbind64(Elf64_Sym *sym, unsigned int ndx, uintptr_t *refcook, uintptr_t *defcook,
                              unsigned int *flags, const char *symname) {
  (void)ndx;
  int i = wrapped_index(symname);
  /* A dlsym is reported when either side asked for it (glibc): memsnap's own lookups (the
   * wrappers' real functions, the allocator's driver backend) get what they asked for, and a
   * definition of the program's copy is the wrapper already. */
  if (i < 0 || is_memsnap((const struct link_map *)*refcook) || is_memsnap((const struct link_map *)*defcook))
    return sym->st_value;
  void *expected = NULL;
  atomic_compare_exchange_strong(&real[i], &expected, (void *)sym->st_value);
  *flags |= LA_SYMB_NOPLTENTER | LA_SYMB_NOPLTEXIT;
  return (uintptr_t)trampolines[i];
}
