/* import.c: a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot: a pickle, gzip-compressed
 * or not) into a memsnap snapshot that `memsnap analyze`, `diff`, `info` and the page read like
 * any other; `memsnap import` (commands/import.c) runs it on a file, the fuzzing target on a buffer.
 *
 * This file holds the entry points (ms_import_file, ms_import_buffer: analyzer.h), their input
 * (a file read through zlib, gzip-compressed or not, or a buffer) and the progress shown on
 * stderr while a file is read, the run that ties the importer's files together, and the
 * importer's errors. importer.h lists those files: import_map.c maps PyTorch's objects to rows,
 * import_intern.c keeps frames, stacks and labels once, import_stage.c writes the SQLite file.
 * docs/pytorch-snapshots.md has the mapping, field by field.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "pytorch.h"
#include "importer.h"

/* ---- the run ------------------------------------------------------------------------------ */

static void importer_free(importer *im) {
  imp_stage_end(im);
  imp_intern_free(im);
  for (size_t i = 0; i < im->nranges; i++) free(im->ranges[i].v);
  free(im->lists), free(im->ranges), free(im->scratch);
  pk_reader_free(im->r);
}

/* Imports the pickle that `read` returns into the open, empty database im->db; 0, or -1 with
 * the message in im->error. */
static int import_run(importer *im, pk_read_fn read, void *ctx, uint64_t size, const char *source) {
  if (imp_stage_begin(im) != 0) return -1;
  if (!(im->scratch = malloc(sizeof *im->scratch * MAX_DEPTH))) return imp_fail(im, "out of memory");
  if (!(im->r = pk_reader_new(read, ctx, size, NULL, imp_on_append, im))) return imp_fail(im, "out of memory");
  pk_value root;
  im->streaming = true;
  int rc = pk_run(im->r, &root);
  im->streaming = false;
  if (rc != 0) { /* the reader's message names the offset */
    snprintf(im->error, sizeof im->error, "%s", pk_error(im->r));
    im->failed = true;
    return -1;
  }
  if (imp_take_tree(im, &root) != 0) return -1;
  return imp_stage_finish(im, source);
}

/* ---- entry points ------------------------------------------------------------------------- */

static void result_of(const importer *im, ms_import_result *res) {
  res->entries = im->entries;
  res->segments = im->segments;
  res->blocks = im->blocks;
  res->skipped = im->skipped;
  res->unmatched_ends = im->unmatched_ends;
  snprintf(res->skipped_action, sizeof res->skipped_action, "%s", im->skipped_action);
}

/* Opens db_path, imports, closes; the message names `name`. 0 or -1 (res->error). */
static int import_into(const char *db_path, pk_read_fn read, void *ctx, uint64_t size, const char *name,
                       void (*note)(void *, const char *), ms_import_result *res) {
  importer im = {0};
  im.note = note;
  im.note_ctx = ctx;
  int rc = -1;
  const char *base = strrchr(name, '/');
  if (sqlite3_open_v2(db_path, &im.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
    snprintf(res->error, sizeof res->error, "cannot write '%s': %s", db_path, sqlite3_errmsg(im.db));
  else if (import_run(&im, read, ctx, size, base ? base + 1 : name) != 0)
    snprintf(res->error, sizeof res->error, "'%s': %s", name, im.error);
  else
    rc = 0;
  result_of(&im, res);
  importer_free(&im);
  if (sqlite3_close(im.db) != SQLITE_OK && rc == 0) {
    snprintf(res->error, sizeof res->error, "cannot write '%s': %s", db_path, sqlite3_errmsg(im.db));
    rc = -1;
  }
  return rc;
}

typedef struct mem_input {
  const unsigned char *data;
  size_t len, pos;
} mem_input;

static long mem_read(void *ctx, void *buf, size_t n, char *err, size_t errlen) {
  (void)err, (void)errlen;
  mem_input *m = ctx;
  size_t k = m->len - m->pos < n ? m->len - m->pos : n;
  memcpy(buf, m->data + m->pos, k);
  m->pos += k;
  return (long)k;
}

int ms_import_buffer(const unsigned char *data, size_t len, const char *db_path, ms_import_result *res) {
  memset(res, 0, sizeof *res);
  mem_input m = {data, len, 0};
  return import_into(db_path, mem_read, &m, len, "memory", NULL, res);
}

/* ---- from a file, gzip or not ------------------------------------------------------------- */

typedef struct file_input {
  gzFile gz;
  const char *path;
  uint64_t file_size;
  bool progress, tty, shown;
  struct timespec start, last;
} file_input;

static double since(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

/* Progress on stderr: on a terminal, a line rewritten in place; otherwise, once the import has
 * taken more than 5 s, a line every 10 s. `phase` names a step after reading; NULL: reading. */
static void progress(file_input *in, const char *phase) {
  if (!in->progress) return;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double elapsed = since(&in->start, &now), quiet = since(&in->last, &now);
  if (!phase && (in->tty ? quiet < 0.2 : elapsed < 5 || (in->shown && quiet < 10))) return;
  if (phase && !in->tty && elapsed < 5) return;
  in->last = now;
  in->shown = true;
  char what[64];
  if (phase) snprintf(what, sizeof what, "%s", phase);
  else snprintf(what, sizeof what, "%d%% read", in->file_size ? (int)(100.0 * (double)gzoffset(in->gz) / (double)in->file_size) : 0);
  if (in->tty) fprintf(stderr, "\rimporting %s: %-40s", in->path, what);
  else fprintf(stderr, "memsnap import: %s: %s (%.0f s)\n", in->path, what, elapsed);
}

static void note_phase(void *ctx, const char *phase) { progress(ctx, phase); }

static long file_read(void *ctx, void *buf, size_t n, char *err, size_t errlen) {
  file_input *in = ctx;
  int k = gzread(in->gz, buf, (unsigned)(n > INT_MAX ? INT_MAX : n));
  int code = Z_OK;
  const char *msg = gzerror(in->gz, &code);
  if (k < 0 || (code != Z_OK && code != Z_STREAM_END)) {
    snprintf(err, errlen, "%s", code == Z_BUF_ERROR ? "the gzip data ends early (truncated file?)" : msg);
    return -1;
  }
  progress(in, NULL);
  return k;
}

int ms_import_file(const char *in_path, const char *db_path, bool show_progress, ms_import_result *res) {
  memset(res, 0, sizeof *res);
  struct stat st;
  if (stat(in_path, &st) != 0 || !S_ISREG(st.st_mode)) {
    bool missing = stat(in_path, &st) != 0;
    snprintf(res->error, sizeof res->error, "cannot open '%s': %s", in_path, missing ? strerror(errno) : "not a regular file");
    return -1;
  }
  int fd = open(in_path, O_RDONLY | O_CLOEXEC);
  unsigned char magic[2] = {0, 0};
  bool gz = fd >= 0 && pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  file_input in = {fd >= 0 ? gzdopen(fd, "rb") : NULL, in_path, (uint64_t)st.st_size, show_progress, isatty(2), false,
                   {0, 0}, {0, 0}};
  if (!in.gz) {
    snprintf(res->error, sizeof res->error, "cannot open '%s': %s", in_path, strerror(errno ? errno : ENOMEM));
    if (fd >= 0) close(fd);
    return -1;
  }
  gzbuffer(in.gz, 1 << 17);
  clock_gettime(CLOCK_MONOTONIC, &in.start);
  in.last = in.start;
  /* A plain pickle's size bounds its lengths; a gzip one's is not known until the end. */
  int rc = import_into(db_path, file_read, &in, gz ? 0 : (uint64_t)st.st_size, in_path, note_phase, res);
  if (in.shown && in.tty) fprintf(stderr, rc == 0 ? "\r%*s\r" : "\n", (int)strlen(in_path) + 52, "");
  gzclose(in.gz);
  return rc;
}

/* Gives the devices of the imported snapshot at db_path their memory (a pickle does not say it):
 * totals[i] bytes for device i, where positive. 0, or -1 with the message in err. */
static int set_device_totals(const char *db_path, const int64_t *totals, int n, char *err, size_t len) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(db, "UPDATE devices SET total_bytes = ? WHERE device = ?", -1, &st, NULL);
  for (int i = 0; i < n && rc == SQLITE_OK; i++) {
    if (totals[i] <= 0) continue;
    sqlite3_bind_int64(st, 1, totals[i]);
    sqlite3_bind_int(st, 2, i);
    rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(st);
  }
  if (rc != SQLITE_OK)
    snprintf(err, len, "cannot write '%.300s': %.300s", db_path, db ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rc == SQLITE_OK ? 0 : -1;
}

int ms_import_to(const char *in, const char *out, bool show_progress, const int64_t *device_totals, int ndevices) {
  if (ms_refuse_overwrite("-o", out, &in, 1)) return 1;
  char tmp[PATH_MAX + 32];
  ms_temp_path(out, tmp, sizeof tmp);
  unlink(tmp);
  ms_import_result r;
  if (ms_import_file(in, tmp, show_progress, &r) != 0 ||
      (ndevices > 0 && set_device_totals(tmp, device_totals, ndevices, r.error, sizeof r.error) != 0)) {
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
