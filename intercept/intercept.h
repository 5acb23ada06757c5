/* intercept.h: what intercept.c gives audit.c, the two files of libmemsnap_intercept.so (nothing
 * here is exported: the library exports the CUDA functions it wraps, dlsym, _exit, _Exit and the
 * audit interface). */
#ifndef MEMSNAP_INTERCEPT_H
#define MEMSNAP_INTERCEPT_H

#define MSI_HIDDEN __attribute__((visibility("hidden")))

/* libc's dlsym, past this library's own (which answers the wrapped names with its wrappers).
 * NULL when it cannot be found. */
MSI_HIDDEN void *msi_intercept_real_dlsym(void *handle, const char *name);

#endif
