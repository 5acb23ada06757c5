/* livefile.h: the live mapping's files made and opened safely (livefile.c): the per-user folder,
 * the file created exclusively and renamed without following a link, the readers' checks (not a
 * link, a regular file of the caller's), and `memsnap run`'s manifest appended to the same way.
 * docs/RELIABILITY.md ("Security") says what each check stops. */
#ifndef MSI_LIVEFILE_H
#define MSI_LIVEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/* ---- making them (the recorded process) --------------------------------------------------- */

/* The live folder (memsnap_live_dir()), made 0700 when it is the default per-user one and
 * missing, opened and checked through the descriptor: this user's alone (the default: not a link
 * either), or a given one that is this user's or root's and that others may write only with the
 * sticky bit. The folder's descriptor (the caller closes it), or -1 with the reason in `why` (a
 * link, not a folder, another user's, written by others without the sticky bit). */
int msi_live_dir_open(char *why, size_t len);
/* Creates `name` in the folder `dfd` (O_CREAT | O_EXCL | O_NOFOLLOW, 0600; a stale one of this
 * user's own, left by an earlier process of the same pid, is removed first) and checks it with
 * fstat: a regular file of this user with one link. The descriptor (O_RDWR), or -1 with the
 * reason in `why`. */
int msi_live_file_create(int dfd, const char *name, char *why, size_t len);
/* Renames `tmp` onto `name` in the folder `dfd` without replacing anything but this user's own
 * regular file there (renameat2 RENAME_NOREPLACE; a rename never follows a link). 0, or -1 with
 * the reason in `why`. */
int msi_live_file_publish(int dfd, const char *tmp, const char *name, char *why, size_t len);
/* Appends `line` (n bytes, one write) to MEMSNAP_RUN_MANIFEST when it is set and names a regular
 * file of this user (opened with O_NOFOLLOW); otherwise nothing. */
void msi_live_manifest_append(const char *line, size_t n);

/* ---- reading them (recover.c, and the CLI through memsnap_live_info and friends) --------- */

/* Opens a live file with `flags` | O_NOFOLLOW | O_NONBLOCK and checks it with fstat: a regular
 * file owned by the caller (any owner after memsnap_live_any_owner(1)). The descriptor, its stat
 * in *st; -1 with the error set ("'x' is refused: owned by another user (uid N)", "... is a
 * symbolic link"). */
int msi_live_file_open(const char *path, int flags, struct stat *st);
/* The whole of a live file read into a new buffer (msi_live_file_free(buf, *cap) releases it),
 * *len its size as read: a copy, so that a file truncated while it is read (by its owner)
 * shortens the copy instead of raising SIGBUS. The buffer is an anonymous mapping of the file's
 * size into which only the file's data is read (lseek SEEK_DATA / SEEK_HOLE): the mapping's
 * reserved ranges (the log's 4 GiB of address space, the state's slots) are holes, zeros that
 * take neither time nor memory. The buffer, or NULL with the error set. */
char *msi_live_file_read(const char *path, size_t *len, size_t *cap);
void msi_live_file_free(char *buf, size_t cap);
/* Whether `path` is this user's own regular file (not a link): the ones a reader may remove. */
bool msi_live_file_ours(const char *path);

#endif
