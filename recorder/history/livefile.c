/* livefile.c: where the live mapping's files live, and how they are made and opened without
 * trusting the folder (docs/RELIABILITY.md, "Security"; the mapping's layout is livemap.h's).
 *
 * The folder: MEMSNAP_LIVE_DIR as given, else a per-user folder under /dev/shm (else $TMPDIR or
 * /tmp): BASE/memsnap-UID, made 0700. The default folder must be a folder (opened with
 * O_NOFOLLOW: not a link) of this user's that no one else may write. A folder the user gives is taken as named (its links
 * followed) but must be this user's or root's, and, when others may write it, have the sticky
 * bit (/tmp, /dev/shm): there no other user can remove, rename or replace this user's entries.
 *
 * Making (the recorded process; livemap.c): the folder is opened and checked through its
 * descriptor, and the files made relative to it (no window between the check and their making);
 * the file is created with O_CREAT | O_EXCL | O_NOFOLLOW (a link or a file planted at its name is
 * never opened; a stale file of this user's own at that name, left by a dead process of the same
 * pid, is removed first), checked with fstat (a regular file of this user with one link) before
 * it is mapped, and renamed onto its final name with RENAME_NOREPLACE: only this user's own
 * regular file there is replaced (a mapping being replaced, or a stale one); a rename never
 * follows a link. A fork child makes its own the same way.
 *
 * Reading (recover.c: memsnap_live_info, memsnap_recover, memsnap_live_request_dump): opened with
 * O_NOFOLLOW | O_NONBLOCK, a regular file owned by the caller (memsnap_live_any_owner lifts the
 * owner check for a file named on purpose), and read into private memory with pread: every offset
 * the reader follows is checked against the size it read, and a file truncated meanwhile cannot
 * raise SIGBUS in the reader (a shared mapping of it could).
 *
 * None of it is on the allocation path: a folder check and a file made when recording starts
 * (and when a ring is replaced), the rest in the tools that read.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "history/livefile.h"
#include "internal.h"

static char dir_buf[1100];
static atomic_bool any_owner;

const char *memsnap_live_dir(void) {
  const char *d = getenv("MEMSNAP_LIVE_DIR");
  if (d && *d) return d;
  struct stat st;
  const char *base = "/dev/shm";
  if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode) || access(base, W_OK) != 0) {
    base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
  }
  char path[sizeof dir_buf];
  snprintf(path, sizeof path, "%.1000s/memsnap-%u", base, (unsigned)geteuid());
  if (strcmp(path, dir_buf) != 0) snprintf(dir_buf, sizeof dir_buf, "%s", path); /* the same text every call */
  return dir_buf;
}

void memsnap_live_any_owner(int on) { atomic_store(&any_owner, on != 0); }

/* ---- making ------------------------------------------------------------------------------ */

int msi_live_dir_open(char *why, size_t len) {
  const char *given = getenv("MEMSNAP_LIVE_DIR");
  bool chosen = given && *given;
  const char *dir = memsnap_live_dir();
  if (!chosen && mkdir(dir, 0700) != 0 && errno != EEXIST) {
    snprintf(why, len, "cannot make the live folder '%s': %s", dir, strerror(errno));
    return -1;
  }
  /* the folder checked through its descriptor, and the files made relative to it: what was
     checked is where they go (the default one is never a link; a given one is taken as named) */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (chosen ? 0 : O_NOFOLLOW));
  struct stat st;
  uid_t me = geteuid();
  if (dfd < 0 && (errno == ELOOP || errno == ENOTDIR) && !chosen) {
    struct stat lst;
    bool link = lstat(dir, &lst) == 0 && S_ISLNK(lst.st_mode);
    snprintf(why, len, "the live folder '%s' %s", dir, link ? "is a symbolic link (refused)" : "is not a folder");
  } else if (dfd < 0) {
    snprintf(why, len, "cannot use the live folder '%s': %s", dir, strerror(errno));
  } else if (fstat(dfd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(why, len, "the live folder '%s' is not a folder", dir);
  } else if (st.st_uid != me && (!chosen || st.st_uid != 0)) {
    snprintf(why, len, "the live folder '%s' is owned by another user (uid %u)", dir, (unsigned)st.st_uid);
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (!chosen || !(st.st_mode & S_ISVTX))) {
    snprintf(why, len, "other users may write the live folder '%s' (mode %04o%s)", dir, (unsigned)(st.st_mode & 07777),
             chosen ? ", without the sticky bit" : "");
  } else {
    return dfd;
  }
  if (dfd >= 0) close(dfd);
  return -1;
}

/* Whether the entry `name` in the folder `dfd` (not followed) is a regular file of this user's. */
static bool ours_at(int dfd, const char *name) {
  struct stat st;
  return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid();
}

bool msi_live_file_ours(const char *path) { return ours_at(AT_FDCWD, path); }

int msi_live_file_create(int dfd, const char *name, char *why, size_t len) {
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
    fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST || attempt) break;
    /* something is there: a stale file of this user's own (in a folder only this user may write,
       or one with the sticky bit, no one else can swap it before the unlink) is removed */
    if (!ours_at(dfd, name)) {
      snprintf(why, len, "'%s' exists in the live folder and is not this user's regular file (a link or another "
               "user's file: refused)", name);
      return -1;
    }
    unlinkat(dfd, name, 0);
  }
  if (fd < 0) {
    snprintf(why, len, "cannot create '%s' in the live folder: %s", name, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1) {
    snprintf(why, len, "'%s' in the live folder is not the regular file of this user's just made (refused)", name);
    close(fd);
    return -1;
  }
  return fd;
}

int msi_live_file_publish(int dfd, const char *tmp, const char *name, char *why, size_t len) {
  if (renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EEXIST && errno != EINVAL && errno != ENOSYS) {
    snprintf(why, len, "cannot rename '%s' into place in the live folder: %s", tmp, strerror(errno));
    return -1;
  }
  /* taken (or the folder's file system cannot tell): only this user's own file is replaced; in a
     private or sticky folder no other user can put something else there before the rename, and a
     rename replaces a link itself, never what it points to */
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !ours_at(dfd, name)) {
    snprintf(why, len, "'%s' exists in the live folder and is not this user's regular file (a link or another "
             "user's file: refused)", name);
    return -1;
  }
  if (renameat(dfd, tmp, dfd, name) != 0) {
    snprintf(why, len, "cannot rename '%s' into place in the live folder: %s", tmp, strerror(errno));
    return -1;
  }
  return 0;
}

void msi_live_manifest_append(const char *line, size_t n) {
  const char *manifest = getenv("MEMSNAP_RUN_MANIFEST");
  if (!manifest || !*manifest) return;
  int fd = open(manifest, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
    ssize_t ignored = write(fd, line, n);
    (void)ignored;
  }
  close(fd);
}

/* ---- reading ----------------------------------------------------------------------------- */

int msi_live_file_open(const char *path, int flags, struct stat *st) {
  int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) msi_error("'%s' is refused: it is a symbolic link", path);
    else msi_error("cannot open '%s': %s", path, strerror(errno));
    return -1;
  }
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    close(fd);
    msi_error("'%s' is not a memsnap live mapping (not a regular file)", path);
    return -1;
  }
  if (st->st_uid != geteuid() && !atomic_load(&any_owner)) {
    close(fd);
    msi_error("'%s' is refused: owned by another user (uid %u); memsnap recover --any-owner reads it on purpose", path,
              (unsigned)st->st_uid);
    return -1;
  }
  return fd;
}

/* Reads [from, to) of fd into buf at the same offsets; the end of what was read (less than `to`
 * when the file shrank meanwhile), or -1 with errno. */
static off_t read_range(int fd, char *buf, off_t from, off_t to) {
  while (from < to) {
    ssize_t n = pread(fd, buf + from, (size_t)(to - from), from);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    from += n;
  }
  return from;
}

char *msi_live_file_read(const char *path, size_t *len, size_t *cap) {
  struct stat st;
  *len = *cap = 0;
  int fd = msi_live_file_open(path, O_RDONLY, &st);
  if (fd < 0) return NULL;
  size_t size = st.st_size > 0 ? (size_t)st.st_size : 0;
  /* page-aligned, as a mapping is (the ring's and header's fields at their alignment), and zeros
     where the file has holes, without touching them */
  char *buf = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (buf == MAP_FAILED) {
    close(fd);
    msi_error("cannot read '%s': out of memory (%zu bytes)", path, size);
    return NULL;
  }
  off_t at = 0, end = (off_t)size, got = 0;
  while (at < end) { /* what is there now: less when it shrank meanwhile, never more than fstat said */
    off_t data = lseek(fd, at, SEEK_DATA), hole;
    if (data < 0 && errno == ENXIO) { got = end; break; } /* a hole to the end: zeros */
    if (data < 0) data = at, hole = end;                   /* no SEEK_DATA here: read it all */
    else if ((hole = lseek(fd, data, SEEK_HOLE)) < 0 || hole > end) hole = end;
    if (data >= end) { got = end; break; }
    off_t r = read_range(fd, buf, data, hole);
    if (r < 0) {
      msi_error("cannot read '%s': %s", path, strerror(errno));
      close(fd);
      munmap(buf, size ? size : 1);
      return NULL;
    }
    got = r;
    if (r < hole) break; /* it shrank */
    at = hole;
  }
  close(fd);
  *len = (size_t)got;
  *cap = size ? size : 1;
  return buf;
}

void msi_live_file_free(char *buf, size_t cap) {
  if (buf) munmap(buf, cap);
}
