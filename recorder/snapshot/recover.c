/* recover.c: a snapshot written from a live mapping (livemap.h), for a process that died
 * (`memsnap run`, `memsnap recover`) or that runs elsewhere (`memsnap top`), never from the
 * process's own state.
 *
 * Steps:
 *   1. read the file (history/livefile.c: no link followed, the caller's own regular file, copied
 *      into private memory, so that a file truncated meanwhile cannot raise SIGBUS) and check its
 *      header (magic, version, sizes, offsets against the bytes read): a mapping of another
 *      version or a damaged one is refused, nothing written;
 *   2. read the log's whole records (stacks, labels, Python frames' names, modules, devices,
 *      options), each checked against its length, and the ring's published events
 *      (history.c's msi_history_read_mapped: a torn last event is dropped);
 *   3. rebuild the allocator's state: the newest whole state the mapping holds (livestate.c: the
 *      segments, their allocated and pending blocks with roles, the statistics, at one instant),
 *      then the ring's events from that instant on, in order: segments from segment_alloc /
 *      segment_map, less segment_free / segment_unmap; blocks from alloc, less free_completed
 *      (free_requested alone: pending_free); roles from tensor events; the gaps of a segment are
 *      its free blocks; the statistics the events change (allocated and reserved, current and
 *      peak; allocations, segments, out-of-memory errors), the others as the state has them.
 *      Without a state, or one older than the ring's window (events lost between: never while
 *      the process took its states), the window's events alone, a block whose segment is not in
 *      the window a segment of its own: meta `recovered_state` says which;
 *   4. name the stacks' frames from the modules the mapping recorded (their files are read again,
 *      as for a live snapshot) and the Python frames' names it holds (symbolize.c);
 *   5. write it with snapshot.c, with the process's facts (msi_snap_origin) in meta.
 */
#include <errno.h>
#include <fcntl.h>
#include <search.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "history/livefile.h"
#include "history/livemap.h"
#include "internal.h"
#include "livestate.h"
#include "snapshot_data.h"

typedef struct mapped {
  const char *base;
  size_t len, cap; /* the bytes read; the copy's size (msi_live_file_free) */
  const msi_live_header *h;
} mapped;

/* 1. Reads and checks (every offset below is checked against m->len, the bytes read). MEMSNAP_OK
 * or MEMSNAP_EINVAL (error set). */
static int map_file(const char *path, mapped *m) {
  memset(m, 0, sizeof *m);
  char *p = msi_live_file_read(path, &m->len, &m->cap);
  if (!p) return MEMSNAP_EINVAL;
  if (m->len < MSI_LIVE_HEADER) {
    msi_live_file_free(p, m->cap);
    msi_error("'%s' is not a memsnap live mapping (too short)", path);
    return MEMSNAP_EINVAL;
  }
  m->base = p;
  const msi_live_header *h = m->h = (const msi_live_header *)p;
  const char *why = NULL;
  if (memcmp(h->magic, MSI_LIVE_MAGIC, 8) != 0) why = "not a memsnap live mapping (bad magic)";
  else if (h->version != MSI_LIVE_VERSION) {
    msi_error("'%s' was written by another version of memsnap (live mapping version %u; this memsnap reads version %d)",
              path, h->version, MSI_LIVE_VERSION);
    msi_live_file_free(p, m->cap);
    return MEMSNAP_EINVAL;
  } else if (h->header_size != MSI_LIVE_HEADER || h->event_size != sizeof(msi_event))
    why = "its header's sizes are not this version's";
  else if (h->ring_offset < MSI_LIVE_HEADER || h->ring_offset % 64 || h->ring_bytes > m->len ||
           h->ring_offset > m->len - h->ring_bytes || h->log_offset < h->ring_offset + h->ring_bytes ||
           h->log_offset > m->len)
    why = "its ring or log lies outside the file";
  else if (atomic_load((_Atomic uint64_t *)&h->log_used) % 8)
    why = "its log's size is damaged";
  if (why) {
    msi_error("'%s' is refused: %s", path, why);
    msi_live_file_free(p, m->cap);
    return MEMSNAP_EINVAL;
  }
  return MEMSNAP_OK;
}

static void unmap_file(mapped *m) {
  msi_live_file_free((char *)m->base, m->cap);
  m->base = NULL;
}

/* Whether the process still runs with its mapping: the pid exists and maps this mapping. */
static bool process_alive(const char *path, int pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  char maps[64], line[1400];
  snprintf(maps, sizeof maps, "/proc/%d/maps", pid);
  FILE *f = fopen(maps, "re");
  if (!f) return true; /* cannot tell: taken as running */
  const char *name = strrchr(path, '/');
  name = name ? name + 1 : path;
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, name) && !strstr(line, "(deleted)");
  fclose(f);
  return found;
}

static void fill_info(const mapped *m, const char *path, memsnap_live_info_t *out) {
  const msi_live_header *h = m->h;
  memset(out, 0, sizeof *out);
  out->pid = h->pid;
  out->rank = h->rank;
  snprintf(out->program, sizeof out->program, "%.*s", (int)sizeof h->program - 1, h->program);
  snprintf(out->command_line, sizeof out->command_line, "%.*s", (int)sizeof out->command_line - 1, h->command_line);
  snprintf(out->dump_path, sizeof out->dump_path, "%.*s", (int)sizeof h->dump_path - 1, h->dump_path);
  out->alive = process_alive(path, h->pid);
  out->end_signal = atomic_load(&h->fatal_signal);
  if (out->end_signal < 0 || out->end_signal >= 65) out->end_signal = 0; /* the file is untrusted */
  /* ended with no snapshot and no signal it watched (an older mapping watched none: not known) */
  out->no_word = !out->alive && !out->end_signal && atomic_load(&h->state) != MSI_LIVE_EXITED &&
                 atomic_load(&h->fatal_watched) != 0;
}

int memsnap_live_info(const char *live_path, memsnap_live_info_t *out) {
  mapped m;
  if (!live_path || !out) {
    msi_error("memsnap_live_info: no path");
    return MEMSNAP_EINVAL;
  }
  int rc = map_file(live_path, &m);
  if (rc != MEMSNAP_OK) return rc;
  fill_info(&m, live_path, out);
  unmap_file(&m);
  return MEMSNAP_OK;
}

/* The header as it is now, read with pread (a copy: a file truncated meanwhile is a short read,
 * never a SIGBUS). False when it cannot be read whole. */
static bool read_header(int fd, msi_live_header *h) {
  return pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h;
}

int memsnap_live_request_dump(const char *live_path, int timeout_ms, char *written, size_t len) {
  if (written && len) written[0] = '\0';
  if (!live_path) {
    msi_error("memsnap_live_request_dump: no path");
    return MEMSNAP_EINVAL;
  }
  mapped m;
  int rc = map_file(live_path, &m); /* checked as every reader checks it */
  if (rc != MEMSNAP_OK) return rc;
  int pid = m.h->pid;
  bool alive = process_alive(live_path, pid);
  unmap_file(&m);
  struct stat st;
  int fd = msi_live_file_open(live_path, O_RDWR, &st); /* the same checks again: the request goes through it */
  if (fd < 0) return MEMSNAP_EINVAL;
  msi_live_header h;
  if (!alive || !read_header(fd, &h)) {
    close(fd);
    msi_error("process %d is not running (memsnap recover '%s' writes its snapshot)", pid, live_path);
    return MEMSNAP_EINVAL;
  }
  if (!atomic_load(&h.watching)) {
    close(fd);
    msi_error("process %d does not answer dump requests: it was single-threaded when it started recording "
              "(MEMSNAP_LIVE_WATCH=1 makes it answer; MEMSNAP_DUMP_SIGNAL takes a snapshot by a signal)", pid);
    return MEMSNAP_EINVAL;
  }
  /* one more request, written through the file (the process's mapping shares its pages); two
     asking at once may write the same count: one snapshot then answers both */
  uint64_t want = atomic_load(&h.dump_requests) + 1;
  if (pwrite(fd, &want, sizeof want, (off_t)offsetof(msi_live_header, dump_requests)) != (ssize_t)sizeof want) {
    msi_error("cannot write to '%s': %s", live_path, strerror(errno));
    close(fd);
    return MEMSNAP_EINVAL;
  }
  rc = MEMSNAP_EINVAL;
  bool answered = false;
  for (int waited = 0; waited <= timeout_ms && !answered; waited += 50) {
    if (read_header(fd, &h) && atomic_load(&h.dumps_done) >= want) {
      answered = true;
      if (!h.last_dump[0]) {
        msi_error("process %d could not write its snapshot (its standard error says why)", pid);
        break;
      }
      if (written && len) snprintf(written, len, "%.*s", (int)sizeof h.last_dump - 1, h.last_dump);
      rc = MEMSNAP_OK;
      break;
    }
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  }
  if (!answered) msi_error("process %d did not answer within %d ms", pid, timeout_ms);
  close(fd);
  return rc;
}

/* ---- 2. the log --------------------------------------------------------------------------- */

typedef struct pyname {
  uint64_t code, pos;
  int64_t line;
  const char *name, *file;
} pyname;

typedef struct log_data {
  msi_stack_rec *recs; /* by id */
  uint64_t *words;
  uint32_t nrecs;      /* ids below it */
  size_t nwords, words_cap;
  const char **labels;
  uint32_t nlabels;
  pyname *py;
  size_t npy, py_cap;
  msi_symbols *syms;
  struct { uint64_t lo, hi; const char *path; } *mods;
  size_t nmods, mods_cap;
  msi_snap_device devs[MSI_MAX_DEVICES];
  bool have_dev[MSI_MAX_DEVICES];
  const char **opt_names, **opt_values;
  size_t nopts, opts_cap;
} log_data;

static bool grow(void **p, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return true;
  size_t c = *cap ? *cap * 2 : 64;
  while (c <= n) c *= 2;
  void *g = realloc(*p, c * size);
  if (!g) return false;
  *p = g;
  *cap = c;
  return true;
}

/* A NUL-terminated string at p within [p, end): its length + 1, or 0. */
static size_t str_in(const char *p, const char *end) {
  const char *z = p < end ? memchr(p, '\0', (size_t)(end - p)) : NULL;
  return z ? (size_t)(z - p) + 1 : 0;
}

static int cmp_pyname(const void *a, const void *b) {
  const pyname *x = a, *y = b;
  if (x->code != y->code) return x->code < y->code ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Reads every whole record. MEMSNAP_OK, MEMSNAP_EINVAL (damaged: error set) or MEMSNAP_ENOMEM. */
static int read_log(const mapped *m, log_data *d) {
  const msi_live_header *h = m->h;
  uint64_t used = atomic_load((_Atomic uint64_t *)&h->log_used);
  if (used > m->len - h->log_offset) used = m->len - h->log_offset; /* a running process's growth since the map */
  const char *p = m->base + h->log_offset, *end = p + used;
  d->syms = msi_symbols_new();
  if (!d->syms) return MEMSNAP_ENOMEM;
  size_t recs_cap = 0, labels_cap = 0;
  uint64_t stack_records = 0, label_records = 0; /* read so far */
  while (p + 8 <= end) {
    uint32_t head[2];
    memcpy(head, p, 8);
    size_t len = head[1], padded = (8 + len + 7) & ~(size_t)7;
    if (padded > (size_t)(end - p)) {
      msi_error("the live mapping's log is damaged (a record runs past its end)");
      return MEMSNAP_EINVAL;
    }
    const char *q = p + 8, *qe = q + len;
    switch (head[0]) {
      case MSI_LOG_STACK: {
        uint32_t v[2];
        if (len < 8) break;
        memcpy(v, q, 8);
        uint32_t id = v[0], nn = v[1] & 0xffff, np = v[1] >> 16;
        size_t nw = (size_t)nn + 2 * (size_t)np;
        /* ids are given in order as stacks are logged (history/stacks.c), a gap only where the
           log was full for a record: an id far beyond the records read is damage, and would make
           the snapshot hold millions of empty stacks (work out of proportion to the file) */
        if (id == 0 || id > (1u << 26) || id > 2 * (uint64_t)stack_records + 4096 || nn > MSI_STACK_MAX_NATIVE ||
            np > MSI_STACK_MAX_PYTHON || len != 8 + 8 * nw) {
          msi_error("the live mapping's log is damaged (a stack record of bad sizes or id)");
          return MEMSNAP_EINVAL;
        }
        stack_records++;
        if (!grow((void **)&d->recs, &recs_cap, id, sizeof *d->recs) ||
            !grow((void **)&d->words, &d->words_cap, d->nwords + nw, sizeof *d->words))
          return MEMSNAP_ENOMEM;
        if (id >= d->nrecs) {
          memset(&d->recs[d->nrecs], 0, sizeof *d->recs * (id + 1 - d->nrecs));
          d->nrecs = id + 1;
        }
        memcpy(&d->words[d->nwords], q + 8, 8 * nw);
        d->recs[id] = (msi_stack_rec){(uint32_t)d->nwords, (uint16_t)nn, (uint16_t)np};
        d->nwords += nw;
        break;
      }
      case MSI_LOG_LABEL: {
        uint32_t id;
        if (len < 5) break;
        memcpy(&id, q, 4);
        /* given in order too (a record far beyond those read is damage: left out, as stacks' are) */
        if (id > (1u << 26) || id > 2 * (uint64_t)label_records + 4096 || !str_in(q + 4, qe)) break;
        label_records++;
        if (!grow((void **)&d->labels, &labels_cap, id, sizeof *d->labels)) return MEMSNAP_ENOMEM;
        if (id >= d->nlabels) {
          memset(&d->labels[d->nlabels], 0, sizeof *d->labels * (id + 1 - d->nlabels));
          d->nlabels = id + 1;
        }
        d->labels[id] = q + 4;
        break;
      }
      case MSI_LOG_PYFRAME: {
        if (len < 26) break;
        uint64_t v[3];
        memcpy(v, q, 24);
        size_t a = str_in(q + 24, qe), b = a ? str_in(q + 24 + a, qe) : 0;
        if (!b) break;
        if (!grow((void **)&d->py, &d->py_cap, d->npy, sizeof *d->py)) return MEMSNAP_ENOMEM;
        d->py[d->npy++] = (pyname){v[0], v[1], (int64_t)v[2], q + 24, q + 24 + a};
        break;
      }
      case MSI_LOG_MODULE: {
        if (len < 25) break;
        uint64_t v[3];
        memcpy(v, q, 24);
        if (!str_in(q + 24, qe) || v[1] <= v[0]) break;
        if (msi_symbols_add(d->syms, q + 24, v[0], v[1], v[2]) != 0 ||
            !grow((void **)&d->mods, &d->mods_cap, d->nmods, sizeof *d->mods))
          return MEMSNAP_ENOMEM;
        d->mods[d->nmods].lo = v[0];
        d->mods[d->nmods].hi = v[1];
        d->mods[d->nmods++].path = q + 24;
        break;
      }
      case MSI_LOG_DEVICE: {
        if (len < 17) break;
        int32_t idx;
        uint64_t total;
        memcpy(&idx, q, 4);
        memcpy(&total, q + 8, 8);
        if (idx < 0 || idx >= MSI_MAX_DEVICES || !str_in(q + 16, qe)) break;
        d->have_dev[idx] = true;
        d->devs[idx].index = idx;
        d->devs[idx].total = total;
        snprintf(d->devs[idx].name, sizeof d->devs[idx].name, "%s", q + 16);
        break;
      }
      case MSI_LOG_OPTION: {
        size_t a = str_in(q, qe), b = a ? str_in(q + a, qe) : 0;
        if (!b) break;
        if (!grow((void **)&d->opt_names, &d->opts_cap, d->nopts, sizeof *d->opt_names)) return MEMSNAP_ENOMEM;
        const char **v = realloc(d->opt_values, sizeof *v * d->opts_cap);
        if (!v) return MEMSNAP_ENOMEM;
        d->opt_values = v;
        d->opt_names[d->nopts] = q;
        d->opt_values[d->nopts++] = q + a;
        break;
      }
      default: break; /* a kind a later version adds: skipped */
    }
    p += padded;
  }
  if (d->npy > 1) qsort(d->py, d->npy, sizeof *d->py, cmp_pyname);
  return MEMSNAP_OK;
}

static void python_name(void *arg, uint64_t code, uint64_t pos, msi_frame *f) {
  const log_data *d = arg;
  pyname key = {code, pos, 0, NULL, NULL};
  const pyname *n = d->npy ? bsearch(&key, d->py, d->npy, sizeof *d->py, cmp_pyname) : NULL;
  if (pos & MSI_PY_LINE_FLAG) f->line = (int64_t)(int32_t)(uint32_t)pos;
  if (!n) return;
  f->name = strdup(n->name);
  f->file = strdup(n->file);
  f->line = n->line;
}

static void free_log(log_data *d) {
  free(d->recs);
  free(d->words);
  free(d->labels);
  free(d->py);
  free(d->mods);
  free(d->opt_names);
  free(d->opt_values);
  if (d->syms) msi_symbols_close(d->syms);
}

/* ---- 3. the state the events leave ------------------------------------------------------ */

typedef struct item { /* a segment or a block, by (device, address) */
  int device;
  uint64_t address, size, requested, stream;
  uint32_t stack_id, source;
  uint8_t state; /* blocks: 0 allocated, 2 pending_free */
  bool expandable;
  const char *pool;
  bool external; /* memsnap's allocator did not make it: outside its statistics, as in a live snapshot */
  uint8_t role;  /* blocks: the role told of it (MEMSNAP_TENSOR_*; 0: none) */
  uint32_t module_label;
  bool private_pool; /* segments: the state's facts events do not carry */
  uint64_t pool_id[2], caller;
} item;

static int cmp_item(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  return x->address < y->address ? -1 : x->address > y->address;
}

typedef struct state {
  void *segs, *blocks; /* tsearch trees of item */
  int64_t allocated[MSI_MAX_DEVICES], reserved[MSI_MAX_DEVICES];
  int64_t peak_allocated[MSI_MAX_DEVICES], peak_reserved[MSI_MAX_DEVICES];
  int64_t ooms[MSI_MAX_DEVICES], allocs[MSI_MAX_DEVICES], nsegs[MSI_MAX_DEVICES];
  bool used[MSI_MAX_DEVICES];
  bool async_pool; /* segment_map events: a pool's ranges (expandable, async) */
  /* the mapped ranges (expandable segments, the async pool), by (device, address), adjacent ones of
     one stream merged: an unmap finds its ranges by binary search (into the tree at the end) */
  item *exp;
  size_t nexp, exp_cap;
  bool failed;
  /* the state's statistics (livestate.c), where it had the device */
  bool have_stats[MSI_MAX_DEVICES];
  int nstats[MSI_MAX_DEVICES];
  int64_t stats[MSI_MAX_DEVICES][256];
  uint64_t cap[MSI_MAX_DEVICES];
} state;

static item *find(void *tree, int device, uint64_t address) {
  item key = {.device = device, .address = address};
  item **found = tfind(&key, &tree, cmp_item);
  return found ? *found : NULL;
}

static void insert(state *st, void **tree, item v) {
  item *n = malloc(sizeof *n);
  if (!n) {
    st->failed = true;
    return;
  }
  *n = v;
  item **at = tsearch(n, tree, cmp_item);
  if (!at) {
    free(n);
    st->failed = true;
  } else if (*at != n) { /* the same address again (a window that began mid-way): the newer wins */
    **at = v;
    free(n);
  }
}

static void drop(void **tree, item *it) {
  item key = *it;
  tdelete(&key, tree, cmp_item);
  free(it);
}

/* Collecting a tree's items into an array (twalk has no argument). */
static item **walk_out;
static size_t walk_n, walk_cap;
static bool walk_failed;
static void walk_collect(const void *node, VISIT which, int depth) {
  (void)depth;
  if (which != postorder && which != leaf) return;
  if (walk_n == walk_cap && !grow((void **)&walk_out, &walk_cap, walk_n, sizeof *walk_out)) {
    walk_failed = true;
    return;
  }
  walk_out[walk_n++] = *(item *const *)node;
}
static item **collect_tree(void *tree, size_t *n) {
  walk_out = NULL;
  walk_n = walk_cap = 0;
  walk_failed = false;
  if (tree) twalk(tree, walk_collect);
  *n = walk_n;
  if (walk_failed) {
    free(walk_out);
    *n = 0;
    return NULL;
  }
  return walk_out; /* in order: by device, then address */
}

/* The first mapped range of `device` that ends after `lo` (or where one would go): binary search. */
static size_t exp_at(const state *st, int device, uint64_t lo) {
  size_t a = 0, b = st->nexp;
  while (a < b) {
    size_t mid = (a + b) / 2;
    const item *x = &st->exp[mid];
    if (x->device < device || (x->device == device && x->address + x->size <= lo)) a = mid + 1;
    else b = mid;
  }
  return a;
}

/* Replaces exp[at, at + n) by the k ranges in `with`. */
static void exp_splice(state *st, size_t at, size_t n, const item *with, size_t k) {
  if (st->nexp - n + k > st->exp_cap && !grow((void **)&st->exp, &st->exp_cap, st->nexp - n + k, sizeof *st->exp)) {
    st->failed = true;
    return;
  }
  memmove(&st->exp[at + k], &st->exp[at + n], sizeof *st->exp * (st->nexp - at - n));
  memcpy(&st->exp[at], with, sizeof *with * k);
  st->nexp = st->nexp - n + k;
}

/* A range mapped: inserted in order, merged with a neighbour of its stream that it touches. */
static void map_range(state *st, item r) {
  size_t at = exp_at(st, r.device, r.address);
  item *prev = at > 0 ? &st->exp[at - 1] : NULL, *next = at < st->nexp ? &st->exp[at] : NULL;
  bool left = prev && prev->device == r.device && prev->stream == r.stream && prev->address + prev->size == r.address;
  bool right = next && next->device == r.device && next->stream == r.stream && r.address + r.size == next->address;
  if (left && right) {
    prev->size += r.size + next->size;
    prev->requested = prev->size;
    exp_splice(st, at, 1, NULL, 0);
  } else if (left) {
    prev->size += r.size;
    prev->requested = prev->size;
  } else if (right) {
    next->address = r.address;
    next->size += r.size;
    next->requested = next->size;
  } else {
    exp_splice(st, at, 0, &r, 1);
  }
}

/* The mapped ranges of `device` inside [lo, hi) removed, a range cut where it sticks out; the
 * bytes removed. */
static uint64_t unmap_range(state *st, int device, uint64_t lo, uint64_t hi) {
  size_t at = exp_at(st, device, lo), end = at;
  uint64_t removed = 0;
  item keep[2];
  size_t k = 0;
  while (end < st->nexp && st->exp[end].device == device && st->exp[end].address < hi) {
    const item *x = &st->exp[end++];
    uint64_t a = x->address, b = x->address + x->size;
    removed += (b < hi ? b : hi) - (a > lo ? a : lo);
    if (a < lo) { /* only the first may start before lo */
      keep[k] = *x;
      keep[k].size = keep[k].requested = lo - a;
      k++;
    }
    if (b > hi) { /* only the last may end after hi */
      keep[k] = *x;
      keep[k].address = hi;
      keep[k].size = keep[k].requested = b - hi;
      k++;
    }
  }
  exp_splice(st, at, end - at, keep, k);
  return removed;
}

static void bump(int64_t *cur, int64_t *peak, int64_t delta) {
  *cur += delta;
  if (*cur > *peak) *peak = *cur;
}

static void apply(state *st, const msi_event *e) {
  int dv = e->device;
  if (dv < 0 || dv >= MSI_MAX_DEVICES) return;
  st->used[dv] = true;
  item *it;
  switch (e->kind) {
    case MSI_EV_SEGMENT_ALLOC:
      insert(st, &st->segs, (item){.device = dv, .address = e->addr, .size = e->size, .requested = e->size,
                                   .stream = e->stream, .stack_id = e->stack_id, .source = (uint32_t)e->aux,
                                   .pool = e->aux ? "external" : e->size <= (2u << 20) ? "small" : "large",
                                   .external = e->aux != 0});
      if (e->aux) break;
      bump(&st->reserved[dv], &st->peak_reserved[dv], (int64_t)e->size);
      st->nsegs[dv]++;
      break;
    case MSI_EV_SEGMENT_MAP:
      st->async_pool = true;
      map_range(st, (item){.device = dv, .address = e->addr, .size = e->size, .requested = e->size,
                           .stream = e->stream, .stack_id = e->stack_id, .expandable = true, .pool = "large"});
      bump(&st->reserved[dv], &st->peak_reserved[dv], (int64_t)e->size);
      break;
    case MSI_EV_SEGMENT_FREE:
      if ((it = find(st->segs, dv, e->addr))) {
        if (!it->external) {
          st->reserved[dv] -= (int64_t)it->size;
          st->nsegs[dv]--;
        }
        drop(&st->segs, it);
      }
      break;
    case MSI_EV_SEGMENT_UNMAP:
      st->reserved[dv] -= (int64_t)unmap_range(st, dv, e->addr, e->addr + e->size);
      break;
    case MSI_EV_ALLOC: {
      if ((it = find(st->blocks, dv, e->addr)) && !it->external) { /* its free was lost: counted once */
        st->allocated[dv] -= (int64_t)it->size;
        st->allocs[dv]--;
      }
      item *seg = find(st->segs, dv, e->addr);
      bool external = seg && seg->external;
      insert(st, &st->blocks, (item){dv, e->addr, e->size, e->requested, e->stream, e->stack_id, 0, 0, false, NULL, external,
                                     0, 0, false, {0, 0}, 0});
      if (external) break;
      bump(&st->allocated[dv], &st->peak_allocated[dv], (int64_t)e->size);
      st->allocs[dv]++;
      break;
    }
    case MSI_EV_FREE_REQUESTED:
      if ((it = find(st->blocks, dv, e->addr))) it->state = 2;
      break;
    case MSI_EV_FREE_COMPLETED:
      if ((it = find(st->blocks, dv, e->addr))) {
        if (!it->external) {
          st->allocated[dv] -= (int64_t)it->size;
          st->allocs[dv]--;
        }
        drop(&st->blocks, it);
      }
      break;
    case MSI_EV_OOM: st->ooms[dv]++; break;
    case MSI_EV_TENSOR: /* a role told: the block's for its life (roles.c) */
      if ((it = find(st->blocks, dv, e->addr)) && e->requested >= MEMSNAP_TENSOR_PARAMETER &&
          e->requested <= MEMSNAP_TENSOR_BUFFER) {
        it->role = (uint8_t)e->requested;
        it->module_label = (uint32_t)e->aux;
      }
      break;
    default: break;
  }
}

/* The stat key's index in memsnap_stat_key's table (-1 none). */
static int stat_index(const char *key) {
  for (int i = 0; i < memsnap_stat_count() && i < 256; i++)
    if (!strcmp(memsnap_stat_key(i), key)) return i;
  return -1;
}

/* The state livestate.c wrote (`head`, its bytes `p`) into the trees and the statistics. false
 * when its counts do not fit its bytes (a damaged file: then it is not used) or out of memory. */
static bool load_state(state *st, const msi_state_head *head, const char *p) {
  static const char *const pools[] = {"small", "large", "async", "external"};
  const char *end = p + head->bytes;
  int ia = stat_index("allocated_bytes.all.current"), ipa = stat_index("allocated_bytes.all.peak");
  int ir = stat_index("reserved_bytes.all.current"), ipr = stat_index("reserved_bytes.all.peak");
  int in = stat_index("allocation.all.current"), is = stat_index("segment.all.current"), io = stat_index("num_ooms");
  for (uint32_t i = 0; i < head->ndevs; i++) {
    int32_t v[2];
    if (end - p < 16) return false;
    memcpy(v, p, 8);
    if (v[0] < 0 || v[0] >= MSI_MAX_DEVICES || v[1] < 0 || v[1] > 256 || (size_t)(end - p - 16) < 8 * (size_t)v[1])
      return false;
    int dv = v[0];
    st->used[dv] = st->have_stats[dv] = true;
    st->nstats[dv] = v[1];
    memcpy(&st->cap[dv], p + 8, 8);
    memcpy(st->stats[dv], p + 16, 8 * (size_t)v[1]);
    p += 16 + 8 * (size_t)v[1];
    int64_t *x = st->stats[dv];
#define TAKE(index, into) if ((index) >= 0 && (index) < v[1]) (into)[dv] = x[index]
    TAKE(ia, st->allocated);
    TAKE(ipa, st->peak_allocated);
    TAKE(ir, st->reserved);
    TAKE(ipr, st->peak_reserved);
    TAKE(in, st->allocs);
    TAKE(is, st->nsegs);
    TAKE(io, st->ooms);
#undef TAKE
  }
  for (uint32_t i = 0; i < head->nsegs; i++) {
    msi_state_segment g;
    if ((size_t)(end - p) < sizeof g) return false;
    memcpy(&g, p, sizeof g);
    p += sizeof g;
    if (g.device < 0 || g.device >= MSI_MAX_DEVICES || g.pool > MSI_STATE_EXTERNAL ||
        (size_t)(end - p) / sizeof(msi_state_block) < g.nblocks)
      return false;
    bool external = g.pool == MSI_STATE_EXTERNAL;
    st->used[g.device] = true;
    if (g.pool == MSI_STATE_ASYNC) st->async_pool = true;
    item seg = (item){g.device, g.address, g.size, g.size, g.stream, 0, g.source, 0,
                                 (g.flags & MSI_STATE_EXPANDABLE) != 0, pools[g.pool], external, 0, 0,
                                 (g.flags & MSI_STATE_PRIVATE) != 0, {g.pool_id[0], g.pool_id[1]}, 0};
    if (seg.expandable) map_range(st, seg);
    else insert(st, &st->segs, seg);
    for (uint32_t b = 0; b < g.nblocks; b++) {
      msi_state_block k;
      memcpy(&k, p, sizeof k);
      p += sizeof k;
      insert(st, &st->blocks, (item){g.device, k.address, k.size, k.requested, g.stream, k.stack_id, 0,
                                     k.state == 2 ? 2 : 0, false, NULL, external,
                                     k.role <= MEMSNAP_TENSOR_BUFFER ? k.role : 0, k.module_label, false, {0, 0}, 0});
    }
  }
  return !st->failed;
}

static void free_tree(void **tree) {
  size_t n;
  item **all = collect_tree(*tree, &n);
  for (size_t i = 0; i < n; i++) {
    item key = *all[i];
    tdelete(&key, tree, cmp_item);
    free(all[i]);
  }
  free(all);
  *tree = NULL;
}

static bool push_seg(msi_snapshot *s, msi_snap_segment g) {
  if (!grow((void **)&s->segs, &s->segs_cap, s->nsegs, sizeof *s->segs)) return false;
  s->segs[s->nsegs++] = g;
  return true;
}
static bool push_blk(msi_snapshot *s, msi_snap_block b) {
  if (!grow((void **)&s->blocks, &s->blocks_cap, s->nblocks, sizeof *s->blocks)) return false;
  s->blocks[s->nblocks++] = b;
  return true;
}

/* The module file name holding pc ("" none). */
static const char *module_of(const log_data *d, uint64_t pc) {
  for (size_t i = 0; i < d->nmods; i++)
    if (pc - 1 >= d->mods[i].lo && pc - 1 < d->mods[i].hi) {
      const char *slash = strrchr(d->mods[i].path, '/');
      return slash ? slash + 1 : d->mods[i].path;
    }
  return NULL;
}

/* Segments in order with their blocks (the gaps free blocks); a block outside every segment a
 * segment of its own. false when out of host memory. */
static bool layout(state *st, const log_data *d, msi_snapshot *s) {
  size_t nseg, nblk;
  item **segs = collect_tree(st->segs, &nseg);
  item **blks = collect_tree(st->blocks, &nblk);
  bool ok = (segs || !nseg) && (blks || !nblk);
  /* adjacent mapped ranges of one device and stream: one segment, as a live snapshot lists them */
  size_t k = 0;
  for (size_t i = 0; ok && i < nseg; i++) {
    if (k && segs[k - 1]->expandable && segs[i]->expandable && segs[k - 1]->device == segs[i]->device &&
        segs[k - 1]->stream == segs[i]->stream && segs[k - 1]->address + segs[k - 1]->size == segs[i]->address) {
      segs[k - 1]->size += segs[i]->size;
      continue;
    }
    segs[k++] = segs[i];
  }
  nseg = k;
  size_t b = 0;
  for (size_t i = 0; ok && (i < nseg || b < nblk);) {
    const item *g = i < nseg ? segs[i] : NULL, *bl = b < nblk ? blks[b] : NULL;
    bool block_first = bl && (!g || bl->device < g->device || (bl->device == g->device && bl->address < g->address));
    if (block_first) { /* outside every segment */
      const char *lib = NULL;
      ok = push_seg(s, (msi_snap_segment){bl->device, bl->address, bl->size, bl->stream, st->async_pool ? "async" : "large",
                                          0, 0, false, false, {0, 0}, s->nblocks, 1, lib}) &&
           push_blk(s, (msi_snap_block){bl->address, bl->size, bl->requested, bl->stack_id, bl->state, bl->role,
                                        bl->module_label});
      b++;
      continue;
    }
    const char *lib = NULL;
    if (g->source && g->stack_id < d->nrecs && d->recs[g->stack_id].n_native)
      lib = module_of(d, d->words[d->recs[g->stack_id].offset]);
    msi_snap_segment seg = {g->device, g->address, g->size, g->stream, g->pool, g->source, g->caller, g->expandable,
                            g->private_pool, {g->pool_id[0], g->pool_id[1]}, s->nblocks, 0, lib};
    uint64_t at = g->address, end = g->address + g->size;
    while (ok && b < nblk && blks[b]->device == g->device && blks[b]->address < end) {
      const item *x = blks[b++];
      if (x->address < at) continue; /* overlapping what came before: a window that began mid-way */
      if (x->address > at) ok = push_blk(s, (msi_snap_block){at, x->address - at, 0, 0, 1, 0, 0}) && ++seg.nblocks;
      uint64_t size = x->address + x->size > end ? end - x->address : x->size;
      ok = ok && push_blk(s, (msi_snap_block){x->address, size, x->requested, x->stack_id, x->state, x->role,
                                              x->module_label}) && ++seg.nblocks;
      at = x->address + size;
    }
    if (ok && at < end) ok = push_blk(s, (msi_snap_block){at, end - at, 0, 0, 1, 0, 0}) && ++seg.nblocks;
    ok = ok && push_seg(s, seg);
    i++;
  }
  free(segs);
  free(blks);
  return ok;
}

/* Devices: those the log names and those the events use, with the statistics the events give. */
static void devices(state *st, log_data *d, msi_snapshot *s) {
  int nstats = memsnap_stat_count();
  if (nstats > 256) nstats = 256;
  struct { const char *key; int64_t *v; } keys[] = {
      {"allocated_bytes.all.current", st->allocated},    {"allocated_bytes.all.peak", st->peak_allocated},
      {"reserved_bytes.all.current", st->reserved},      {"reserved_bytes.all.peak", st->peak_reserved},
      {"active_bytes.all.current", st->allocated},       {"active_bytes.all.peak", st->peak_allocated},
      {"allocation.all.current", st->allocs},            {"active.all.current", st->allocs},
      {"segment.all.current", st->nsegs},                {"num_ooms", st->ooms}};
  for (int dv = 0; dv < MSI_MAX_DEVICES; dv++) {
    if (!d->have_dev[dv] && !st->used[dv]) continue;
    msi_snap_device *sd = &s->devs[s->ndevs++];
    *sd = d->devs[dv];
    sd->index = dv;
    if (!d->have_dev[dv]) snprintf(sd->name, sizeof sd->name, "device %d", dv);
    sd->free_bytes = sd->total > (uint64_t)st->reserved[dv] && st->reserved[dv] >= 0 ? sd->total - (uint64_t)st->reserved[dv] : 0;
    sd->nstats = nstats;
    memset(sd->stats, 0, sizeof sd->stats);
    if (st->have_stats[dv]) { /* the state's, then what the events changed since */
      memcpy(sd->stats, st->stats[dv], 8 * (size_t)(st->nstats[dv] < nstats ? st->nstats[dv] : nstats));
      sd->cap = st->cap[dv];
    }
    for (int i = 0; i < nstats; i++)
      for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        if (!strcmp(memsnap_stat_key(i), keys[k].key)) sd->stats[i] = keys[k].v[dv] > 0 ? keys[k].v[dv] : 0;
  }
}

/* ---- the whole -------------------------------------------------------------------------- */

static const char *signal_name(int sig) {
  static char buf[32];
  const char *abbrev = sig > 0 ? sigabbrev_np(sig) : NULL;
  if (abbrev) snprintf(buf, sizeof buf, "SIG%s", abbrev);
  else snprintf(buf, sizeof buf, "signal %d", sig);
  return buf;
}

int memsnap_recover(const char *live_path, const char *snapshot_path, const memsnap_recover_options *opts,
                    memsnap_live_info_t *out) {
  memsnap_recover_options none = {0, -1, 0, 0, 0};
  if (!opts) opts = &none;
  memsnap_live_info_t info_local;
  if (!out) out = &info_local;
  if (!live_path) {
    msi_error("memsnap_recover: no path");
    return MEMSNAP_EINVAL;
  }
  mapped m;
  int rc = map_file(live_path, &m);
  if (rc != MEMSNAP_OK) return rc;
  const msi_live_header *h = m.h;
  fill_info(&m, live_path, out);
  log_data d;
  memset(&d, 0, sizeof d);
  msi_snapshot s;
  memset(&s, 0, sizeof s);
  state st;
  memset(&st, 0, sizeof st);
  msi_symbolized sym = {0};
  bool symbolized = false;
  if ((rc = read_log(&m, &d)) != MEMSNAP_OK) goto cleanup;
  uint64_t dropped, before, start_ns, nev, base;
  rc = msi_history_read_mapped(m.base + h->ring_offset, h->ring_bytes, h->ring_cap, h->ring_events_offset, &s.ev, &nev,
                               &dropped, &before, &start_ns, &base);
  if (rc != MEMSNAP_OK) {
    if (rc == MEMSNAP_EINVAL) {
      char why[512];
      snprintf(why, sizeof why, "%s", memsnap_last_error());
      msi_error("'%s' is refused: %s", live_path, why);
    }
    goto cleanup;
  }
  s.nev = nev;
  s.dropped = dropped;
  s.before = before;
  s.start_ns = start_ns;
  s.max_entries = h->ring_cap;
  /* the run log, read where its header puts it (msi_runlog_entries checks it, and a torn update) */
  if (h->runlog_bytes && h->runlog_offset >= h->ring_offset + h->ring_bytes && h->runlog_offset <= m.len &&
      h->runlog_bytes <= m.len - h->runlog_offset) {
    s.runlog = m.base + h->runlog_offset;
    s.runlog_bytes = h->runlog_bytes;
  }
  /* the newest whole state, and the events from its instant on; without one, or with events lost
     between it and the window, the window alone */
  msi_state_head head;
  char *payload = NULL;
  uint64_t from = 0; /* the first event applied: absolute index */
  const char *how = "window";
  bool torn = false;
  if (msi_live_state_read(m.base, m.len, &head, &payload, &torn)) {
    state fresh;
    memset(&fresh, 0, sizeof fresh);
    if (head.ring_index >= base + before && load_state(&st, &head, payload)) {
      from = head.ring_index; /* every event from it on is in the window (but one torn by the kill) */
      how = "exact";
    } else {
      free_tree(&st.segs);
      free_tree(&st.blocks);
      free(st.exp);
      st = fresh;
    }
  }
  free(payload);
  if (!strcmp(how, "window") && before == 0 && dropped == 0) how = "events"; /* no state, but every event since the start */
  uint64_t last_alloc = 0;
  for (uint64_t i = 0; i < nev; i++) {
    msi_event *e = &s.ev[i];
    if (e->stack_id >= d.nrecs || (e->stack_id && !d.recs[e->stack_id].n_native && !d.recs[e->stack_id].n_python))
      e->stack_id = 0; /* a stack the log lacks (never: it is logged before its events) */
    if (base + before + e->seq >= from) apply(&st, e);
    if (e->kind == MSI_EV_ALLOC) last_alloc = e->time_ns;
  }
  for (size_t i = 0; i < st.nexp; i++) insert(&st, &st.segs, st.exp[i]); /* the mapped ranges, as segments */
  if (st.failed || !layout(&st, &d, &s)) {
    msi_error("recover: out of host memory");
    rc = MEMSNAP_ENOMEM;
    goto cleanup;
  }
  devices(&st, &d, &s);

  /* how and when it ended: as its parent saw it (memsnap run's own child), else as it caught it */
  char ended[160] = "";
  int end_signal = opts->end_signal;
  uint64_t end_mono = opts->end_mono_ns;
  if (!end_signal && opts->exit_status < 0 && !opts->live && out->end_signal) {
    end_signal = out->end_signal;
    end_mono = atomic_load(&h->fatal_mono_ns);
  }
  uint64_t end_ns = end_mono > start_ns ? end_mono - start_ns : 0;
  uint64_t last_event = nev ? s.ev[nev - 1].time_ns - start_ns : 0;
  if (opts->live) snprintf(ended, sizeof ended, "running");
  else if (end_signal) snprintf(ended, sizeof ended, "killed by %s", signal_name(end_signal));
  else if (opts->exit_status >= 0)
    snprintf(ended, sizeof ended, "exited with status %d without writing its snapshot", opts->exit_status);
  else if (out->alive) snprintf(ended, sizeof ended, "running");
  else if (out->no_word)
    snprintf(ended, sizeof ended, "killed by SIGKILL or ended by _exit, or by a signal it did not watch");
  else snprintf(ended, sizeof ended, "ended (how is not known)");
  if (out->alive && !opts->live && !end_signal && opts->exit_status < 0) end_ns = 0;
  out->end_signal = opts->live ? 0 : end_signal;
  int64_t start_unix = (int64_t)h->created_unix_ns + ((int64_t)start_ns - (int64_t)h->created_mono_ns);
  uint64_t snapshot_ns = end_ns ? end_ns : opts->live || out->alive ? (msi_now_ns() > start_ns ? msi_now_ns() - start_ns : 0)
                                                                    : last_event;
  if (snapshot_ns < last_event) snapshot_ns = last_event;
  char host[sizeof h->host + 1], cmd[sizeof h->command_line + 1], backend[sizeof h->backend + 1];
  snprintf(host, sizeof host, "%.*s", (int)sizeof h->host, h->host);
  snprintf(cmd, sizeof cmd, "%.*s", (int)sizeof h->command_line, h->command_line);
  snprintf(backend, sizeof backend, "%.*s", (int)sizeof h->backend, h->backend);
  msi_snap_origin origin = {h->pid, h->rank, host, cmd, backend, (int)h->stacks, (uint64_t)start_unix, snapshot_ns,
                            d.labels, d.nlabels, d.opt_names, d.opt_values, d.nopts, ended, end_signal,
                            opts->exit_status, end_ns, last_event, last_alloc ? last_alloc - start_ns : 0,
                            opts->live != 0, how, torn};
  s.origin = &origin;

  msi_symbolize_source src = {d.recs, d.words, d.nrecs ? d.nrecs : 1, d.syms, python_name, &d, true, opts->live != 0};
  if (!d.recs) { /* no stack: one empty record for id 0 */
    static msi_stack_rec empty;
    src.recs = &empty;
  }
  d.syms = NULL; /* symbolize.c's from here on */
  if ((rc = msi_stacks_symbolize_source(&sym, &src)) != MEMSNAP_OK) goto cleanup;
  symbolized = true;

  char path[1024];
  const char *pattern = snapshot_path && *snapshot_path ? snapshot_path : out->dump_path[0] ? out->dump_path : "memsnap-%p.db";
  char rank[16];
  snprintf(rank, sizeof rank, "%d", h->rank >= 0 ? h->rank : 0);
  if ((rc = msi_expand_path_for(pattern, h->pid, rank, host, path, sizeof path)) != MEMSNAP_OK) goto cleanup;
  rc = msi_snapshot_write(path, &s, &sym);
  if (rc == MEMSNAP_OK) {
    snprintf(out->snapshot, sizeof out->snapshot, "%s", path);
    out->events = nev;
    out->dropped = dropped;
    out->last_event_ns = last_event;
    out->last_alloc_ns = last_alloc ? last_alloc - start_ns : 0;
    out->end_ns = end_ns;
    if (!opts->live && !opts->keep && !out->alive && msi_live_file_ours(live_path)) unlink(live_path); /* another user's stays */
  }
cleanup:
  if (symbolized || sym.stacks) msi_symbolized_free(&sym);
  free_tree(&st.segs);
  free_tree(&st.blocks);
  free(st.exp);
  free(s.ev);
  free(s.segs);
  free(s.heads);
  free(s.blocks);
  free_log(&d);
  unmap_file(&m);
  return rc;
}
