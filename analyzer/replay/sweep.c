/* sweep.c: a snapshot's trace replayed under a grid of settings (docs/replay.md lists it), in
 * parallel, and the settings ranked: `memsnap replay --sweep` prints the table; the analysis's
 * suggestions read the best rows.
 *
 * Each setting replays in a worker process (one per core, forked, each opening the snapshot
 * again): the replay re-initialises libmemsnap in its process, so settings cannot share one.
 * Results come back through shared memory (ms_replay_result holds no pointers). A worker that
 * dies leaves its settings marked failed; a worker that cannot be started is replaced by the
 * calling process. The same runner (ms_replay_rows) takes any list of rows and any replay of a
 * row: predict.c's histories synthesised at several sizes, and its searches for the largest
 * size that fits, run on it.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "replay.h"

/* The sweep's grid (docs/replay.md lists it): each row on top of the --set settings. The first
 * row, the recorded settings, is added in front. */
static const char *const grid[] = {
    "expandable_segments=True",
    "max_split_size_mb=64",
    "max_split_size_mb=128",
    "max_split_size_mb=256",
    "max_split_size_mb=512",
    "max_split_size_mb=1024",
    "roundup_power2_divisions=2",
    "roundup_power2_divisions=4",
    "roundup_power2_divisions=8",
    "roundup_power2_divisions=16",
    "roundup_power2_divisions=[256:1,512:2,1024:4,>:8]",
    "max_split_size_mb=128,roundup_power2_divisions=4",
    "max_split_size_mb=256,roundup_power2_divisions=4",
    "max_split_size_mb=512,roundup_power2_divisions=8",
    "expandable_segments=True,roundup_power2_divisions=4",
    "garbage_collection_threshold=0.6,memory_fraction=0.95",
    "garbage_collection_threshold=0.8,memory_fraction=0.95",
    "max_split_size_mb=256,garbage_collection_threshold=0.8,memory_fraction=0.95",
    "backend=cudaMallocAsync",
};
#define NGRID (sizeof grid / sizeof grid[0])
_Static_assert(NGRID + 1 == MS_SWEEP_GRID_ROWS, "the grid and the recorded settings are the sweep's rows");


/* Applies "k=v,k=v" (a grid row) or one "k=v" to c. 0, or -1 with err set. */
int ms_replay_config_apply(ms_replay_config *c, const char *list, bool one, char *err, size_t errlen) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *item = buf, *next; item; item = next) {
    next = one ? NULL : strchr(item, ',');
    /* a bracketed value holds commas */
    char *bracket = strchr(item, '[');
    if (next && bracket && bracket < next) next = strchr(bracket, ']') ? strchr(strchr(bracket, ']'), ',') : NULL;
    if (next) *next++ = '\0';
    char *eq = strchr(item, '=');
    if (!eq || eq == item || !eq[1]) {
      snprintf(err, errlen, "'%.100s' is not KEY=VALUE", item);
      return -1;
    }
    *eq = '\0';
    if (ms_replay_config_set(c, item, eq + 1, err, errlen) != 0) return -1;
  }
  return 0;
}

int ms_replay_worst_device(const ms_replay_result *r) {
  int worst = 0;
  for (int i = 1; i < r->ndevices; i++)
    if (r->dev[i].peak_reserved > r->dev[worst].peak_reserved) worst = i;
  return worst;
}

int64_t ms_replay_worst_peak(const ms_replay_result *r) {
  return r->ndevices > 0 ? r->dev[ms_replay_worst_device(r)].peak_reserved : 0;
}

bool ms_replay_fits(const ms_replay_result *r) {
  if (r->failed || r->over_capacity || ms_replay_sum(r, offsetof(ms_replay_device, failed_allocs))) return false;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].used && r->dev[i].capacity > 0 && r->dev[i].peak_reserved > r->dev[i].capacity) return false;
  return true;
}

int64_t ms_replay_sum(const ms_replay_result *r, size_t offset) {
  int64_t t = 0;
  for (int i = 0; i < r->ndevices; i++) t += *(const int64_t *)((const char *)&r->dev[i] + offset);
  return t;
}

static const ms_replay_result *rank_base; /* qsort has no context argument */
static int cmp_rank(const void *a, const void *b) {
  const ms_replay_result *x = &rank_base[*(const int *)a], *y = &rank_base[*(const int *)b];
  /* ooms stays 0 in the async mode; a prediction over capacity was replayed again without a limit */
  int64_t ox = ms_replay_sum(x, offsetof(ms_replay_device, failed_allocs)) != 0 || x->over_capacity,
          oy = ms_replay_sum(y, offsetof(ms_replay_device, failed_allocs)) != 0 || y->over_capacity;
  if (x->failed != y->failed) return x->failed - y->failed;
  if (ox != oy) return ox < oy ? -1 : 1;
  int64_t px = ms_replay_worst_peak(x), py = ms_replay_worst_peak(y);
  if (px != py) return px < py ? -1 : 1;
  int64_t dx = ms_replay_sum(x, offsetof(ms_replay_device, device_allocs)), dy = ms_replay_sum(y, offsetof(ms_replay_device, device_allocs));
  if (dx != dy) return dx < dy ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

/* What the workers share with the caller: how many rows are done, which, and their results
 * (nrows of each, after the header). */
typedef struct shared_head {
  int done;
  int nrows;
} shared_head;

static size_t shared_size(int nrows) {
  size_t head = (sizeof(shared_head) + (size_t)nrows + 63) / 64 * 64; /* the header, then finished[nrows] */
  return head + sizeof(ms_replay_result) * (size_t)nrows;
}
static char *finished_of(shared_head *sh) { return (char *)(sh + 1); } /* a row's result is whole (a worker killed mid-row leaves 0) */
static ms_replay_result *results_of(shared_head *sh) {
  return (ms_replay_result *)((char *)sh + (sizeof(shared_head) + (size_t)sh->nrows + 63) / 64 * 64);
}

/* The replay of one row: ms_replay_run, or the caller's function. */
typedef struct row_runner {
  ms_replay_row_fn fn;
  void *arg;
} row_runner;

static void run_row(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *row, int i, shared_head *sh,
                    const row_runner *rr) {
  ms_replay_result *r = &results_of(sh)[i];
  if (rr->fn) rr->fn(s, p, row, i, r, rr->arg);
  else ms_replay_run(s, p, row, r);
  __atomic_store_n(&finished_of(sh)[i], 1, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&sh->done, 1, __ATOMIC_SEQ_CST);
}

/* Runs rows [w, w + jobs, ...] in a worker process; results land in shared memory. */
static void sweep_worker(const char *path, int only_device, ms_replay_plan *p, const ms_replay_config *rows, int nrows,
                         int w, int jobs, shared_head *sh, const row_runner *rr) {
  ms_snapshot s;
  if (ms_open(&s, path) != 0 || ms_load_stacks(&s) != 0) _exit(3);
  ms_only_device(&s, only_device);
  for (int i = w; i < nrows; i += jobs) run_row(&s, p, &rows[i], i, sh, rr);
  ms_close(&s);
  fflush(NULL);
  _exit(0);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void ms_replay_rank(const ms_replay_result *results, int n, int *order) {
  for (int i = 0; i < n; i++) order[i] = i;
  rank_base = results;
  qsort(order, (size_t)n, sizeof *order, cmp_rank);
}

int ms_replay_grid(const ms_replay_plan *p, const ms_replay_config *base, ms_replay_config *rows, char *err, size_t errlen) {
  ms_replay_recorded_config(p, &rows[0]);
  for (int i = 0; i < base->n; i++) ms_replay_config_set(&rows[0], base->set[i].key, base->set[i].value, NULL, 0);
  rows[0].capacity = base->capacity;
  for (size_t g = 0; g < NGRID; g++) {
    char why[256];
    rows[g + 1] = *base;
    if (ms_replay_config_apply(&rows[g + 1], grid[g], false, why, sizeof why) != 0) {
      snprintf(err, errlen, "sweep row '%s': %s", grid[g], why);
      return -1;
    }
  }
  return (int)NGRID + 1;
}

/* out's order (allocated) and the mapping of nrows results (MAP_SHARED: the workers' results come
 * back through it), its head's nrows set: the mapping, or NULL with err set (nothing to free). */
static shared_head *map_rows(ms_sweep *out, int nrows, int flags, char *err, size_t errlen) {
  out->order = malloc(sizeof *out->order * (size_t)nrows);
  shared_head *sh = out->order ? mmap(NULL, shared_size(nrows), PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0)
                                : MAP_FAILED;
  if (sh == MAP_FAILED) {
    snprintf(err, errlen, "cannot map %smemory: %s", flags & MAP_SHARED ? "shared " : "",
             out->order ? strerror(errno) : "out of memory");
    free(out->order);
    out->order = NULL;
    return NULL;
  }
  sh->nrows = nrows;
  return sh;
}

int ms_replay_rows(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *rows, int nrows, ms_replay_row_fn fn,
                   void *arg, const ms_rows_options *o, ms_sweep *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  int jobs = o ? o->jobs : 0;
  double time_limit_s = o ? o->time_limit_s : 0;
  const char *progress = o ? o->progress : NULL;
  row_runner rr = {fn, arg};
  if (nrows < 1) {
    snprintf(err, errlen, "nothing to replay");
    return -1;
  }
  size_t size = shared_size(nrows);
  shared_head *sh = map_rows(out, nrows, MAP_SHARED, err, errlen);
  if (!sh) return -1;
  if (jobs <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    jobs = n < 1 ? 1 : n > 64 ? 64 : (int)n;
  }
  if (jobs > nrows) jobs = nrows;
  pid_t *pids = calloc((size_t)jobs, sizeof *pids);
  int started = 0;
  double deadline = time_limit_s > 0 ? now_s() + time_limit_s : 0;
  fflush(NULL);
  for (int w = 0; pids && w < jobs; w++) {
    pid_t pid = fork();
    if (pid == 0) sweep_worker(s->path, s->only_device, p, rows, nrows, w, jobs, sh, &rr);
    if (pid < 0) break;
    pids[started++] = pid;
  }
  if (started == 0) {
    snprintf(err, errlen, "cannot start workers: %s", pids ? strerror(errno) : "out of memory");
    free(pids);
    free(out->order);
    out->order = NULL;
    munmap(sh, size);
    return -1;
  }
  for (int w = started; w < jobs; w++) /* run what the missing workers had, here, serially */
    for (int i = w; i < nrows && !(deadline && now_s() > deadline); i += jobs) run_row(s, p, &rows[i], i, sh, &rr);
  int alive = started, shown = -1;
  bool out_of_time = false;
  while (alive > 0) {
    for (int k = 0; k < started; k++) {
      int status;
      if (pids[k] <= 0 || waitpid(pids[k], &status, WNOHANG) != pids[k]) continue;
      pids[k] = 0;
      alive--;
      if (!out_of_time && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
        fprintf(stderr, "memsnap: replay: a sweep worker %s %d; its settings are marked failed\n",
                WIFSIGNALED(status) ? "died of signal" : "exited with", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    if (alive > 0 && !out_of_time && deadline && now_s() > deadline) { /* what is not done by then is not run */
      out_of_time = true;
      for (int k = 0; k < started; k++)
        if (pids[k] > 0) kill(pids[k], SIGKILL);
    }
    int done = __atomic_load_n(&sh->done, __ATOMIC_SEQ_CST);
    if (progress && done != shown) {
      shown = done;
      fprintf(stderr, "\r%s: %d of %d replayed", progress, shown, nrows);
    }
    if (alive > 0) usleep(20000);
  }
  if (progress) fprintf(stderr, "\r%60s\r", "");
  free(pids);
  ms_replay_result *results = results_of(sh);
  for (int i = 0; i < nrows; i++)
    if (!finished_of(sh)[i]) {
      memset(&results[i], 0, sizeof results[i]);
      results[i].config = rows[i];
      results[i].failed = true;
      snprintf(results[i].error, sizeof results[i].error, "%s",
               out_of_time ? "not run: the sweep's time limit came first" : "not run: its worker failed");
    }
  out->nrows = nrows;
  out->workers = started;
  out->results = results;
  out->timed_out = out_of_time;
  out->shared = sh;
  out->shared_size = size;
  ms_replay_rank(results, nrows, out->order);
  return 0;
}

int ms_replay_sweep(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *base, int jobs, double time_limit_s,
                    bool progress, ms_sweep *out, char *err, size_t errlen) {
  ms_replay_config rows[NGRID + 1];
  memset(out, 0, sizeof *out);
  int nrows = ms_replay_grid(p, base, rows, err, errlen);
  if (nrows < 0) return -1;
  ms_rows_options o = {jobs, time_limit_s, progress ? "sweep: settings" : NULL};
  return ms_replay_rows(s, p, rows, nrows, NULL, NULL, &o, out, err, errlen);
}

int ms_sweep_alloc(ms_sweep *out, int nrows, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (nrows < 1) {
    snprintf(err, errlen, "nothing to replay");
    return -1;
  }
  shared_head *sh = map_rows(out, nrows, MAP_PRIVATE, err, errlen); /* as ms_replay_rows maps, so ms_sweep_free frees either */
  if (!sh) return -1;
  for (int i = 0; i < nrows; i++) out->order[i] = i;
  out->nrows = nrows;
  out->results = results_of(sh);
  out->shared = sh;
  out->shared_size = shared_size(nrows);
  return 0;
}

void ms_sweep_free(ms_sweep *sw) {
  if (sw->shared) munmap(sw->shared, sw->shared_size);
  free(sw->order);
  memset(sw, 0, sizeof *sw);
}
