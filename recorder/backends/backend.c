/* backend.c: the active backend, the provider of device memory every other file talks to.
 *
 * The library comes up (devices.c) by starting the backend that MEMSNAP_BACKEND names (sim, else
 * cuda) here; from then on the allocator, its modes, the snapshot writer and the entry points
 * read it through msi_be. It sits below all of them and calls none of them, so the file that
 * starts it and the files that read it are in no loop. A new backend is a branch here.
 */
#include <string.h>

#include "internal.h"

const msi_backend *msi_be;

int msi_backend_start(void) {
  msi_be = strcmp(msi_opt.backend, "sim") == 0 ? &msi_backend_sim : &msi_backend_cuda;
  return msi_be->init();
}
