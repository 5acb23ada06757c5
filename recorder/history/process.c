/* process.c: the facts about this process that its snapshot (snapshot/snapshot.c) and its live
 * mapping (livemap.c) both write, found one way: its rank in a job, its command line, its
 * executable's path, the loaded modules' executable ranges (`memsnap run`'s manifest is
 * livefile.c's). Cold paths only (a snapshot, the mapping's making, a native frame in
 * no module recorded yet): they read /proc and take the loader's lock.
 */
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

const char *msi_process_rank(void) {
  static const char *const vars[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v && strspn(v, "0123456789") == strlen(v)) return v;
  }
  return NULL;
}

void msi_process_cmdline(char *buf, size_t len) {
  buf[0] = '\0';
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  for (ssize_t i = 0; i + 1 < n; i++)
    if (buf[i] == '\0') buf[i] = ' ';
  buf[n > 0 ? n : 0] = '\0';
}

size_t msi_process_exe(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  buf[n > 0 ? n : 0] = '\0';
  return n > 0 ? (size_t)n : 0;
}

typedef struct each {
  int (*fn)(const char *path, uint64_t lo, uint64_t hi, uint64_t bias, void *arg);
  void *arg;
} each;

static int one_module(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  const each *e = arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    char exe[4096];
    const char *name = info->dlpi_name;
    if (!name || !name[0]) name = msi_process_exe(exe, sizeof exe) ? exe : "/proc/self/exe"; /* the main program */
    uint64_t lo = info->dlpi_addr + ph->p_vaddr;
    int rc = e->fn(name, lo, lo + ph->p_memsz, info->dlpi_addr, e->arg);
    if (rc) return rc;
  }
  return 0;
}

int msi_modules_each(int (*fn)(const char *path, uint64_t lo, uint64_t hi, uint64_t bias, void *arg), void *arg) {
  each e = {fn, arg};
  return dl_iterate_phdr(one_module, &e);
}
