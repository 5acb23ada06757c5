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

#include "analyzer.h"
#include "commands.h"

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

int ms_write_html(const char *out, ms_analysis *a, size_t n, const char *label) {
  const char *inputs[64];
  for (size_t i = 0; i < n && i < 64; i++) inputs[i] = a[i].snap->path;
  if (ms_refuse_overwrite("--html", out, inputs, n < 64 ? n : 64)) return 1;
  ms_page_set ps;
  if (ms_page_set_build(&ps, a, n, label) != 0) {
    fprintf(stderr, "error: %s\n", ps.error);
    ms_page_set_free(&ps);
    return 1;
  }
  char tmp[PATH_MAX + 32];
  ms_temp_path(out, tmp, sizeof tmp);
  FILE *f = fopen(tmp, "w");
  int rc = 1;
  if (!f) {
    fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
  } else if (ms_report_html(ps.docs, ps.ndocs, f) != 0) {
    fclose(f);
    unlink(tmp);
    const char *why = "out of memory";
    for (size_t i = 0; i < ps.ndocs; i++)
      if (ps.docs[i]->snap->error[0]) why = ps.docs[i]->snap->error;
    fprintf(stderr, "error: writing '%s': %s\n", out, why);
  } else {
    bool ok = !ferror(f);
    ok = (fclose(f) == 0) && ok;
    if (!ok) unlink(tmp);
    if (!ok || ms_commit(tmp, out) != 0) fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
    else rc = 0;
  }
  ms_page_set_free(&ps);
  return rc;
}

int ms_import_to(const char *in, const char *out, bool show_progress) {
  if (ms_refuse_overwrite("-o", out, &in, 1)) return 1;
  char tmp[PATH_MAX + 32];
  ms_temp_path(out, tmp, sizeof tmp);
  unlink(tmp);
  ms_import_result r;
  if (ms_import_file(in, tmp, show_progress, &r) != 0) {
    unlink(tmp);
    fprintf(stderr, "error: %s\n", r.error);
    return 1;
  }
  if (ms_commit(tmp, out) != 0) {
    fprintf(stderr, "error: cannot write '%s': %s\n", out, strerror(errno));
    return 1;
  }
  if (r.skipped)
    fprintf(stderr, "warning: '%s': %" PRId64 " trace entries with actions memsnap has no kind for (the first: '%s') "
            "were left out\n", in, r.skipped, r.skipped_action);
  if (r.unmatched_ends)
    fprintf(stderr, "warning: '%s': %" PRId64 " annotation ENDs had no START (started before recording)\n", in,
            r.unmatched_ends);
  if (show_progress)
    printf("imported %s: %" PRId64 " trace entries, %" PRId64 " segments, %" PRId64 " blocks -> %s\n", in, r.entries,
           r.segments, r.blocks, out);
  return 0;
}
