/* outfile.c: output files of the CLI's commands, written atomically (under a temporary name
 * beside the target, synced, then renamed over it) and never over one of the command's inputs. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

int ms_refuse_overwrite(const char *option, const char *out, const char *const *inputs, size_t n) {
  struct stat so, si;
  if (stat(out, &so) != 0) return 0; /* a new file cannot be an input */
  if (!S_ISREG(so.st_mode)) { /* renaming over a device or a FIFO would replace it with a file */
    fprintf(stderr, "error: %s '%s' exists and is not a regular file: refusing to replace it\n", option, out);
    return 1;
  }
  for (size_t i = 0; i < n; i++)
    if (stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
      fprintf(stderr, "error: %s '%s' is an input: refusing to overwrite it\n", option, out);
      return 1;
    }
  return 0;
}

void ms_temp_path(const char *out, char *tmp, size_t len) { snprintf(tmp, len, "%s.tmp-%d", out, (int)getpid()); }

int ms_commit(const char *tmp, const char *out) {
  int fd = open(tmp, O_RDONLY | O_CLOEXEC);
  bool synced = fd >= 0 && fsync(fd) == 0;
  if (fd >= 0) close(fd);
  if (!synced || rename(tmp, out) != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", out);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the rename itself, durable */
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}
