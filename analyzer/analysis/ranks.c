/* ranks.c: the snapshots of one job's ranks, side by side (`memsnap analyze rank*.db` with
 * MS_RANKS_MIN snapshots or more): each one summarized (peaks, when the peak came, growth per
 * iteration) by worker processes on every core, then judged against the median rank: the rank
 * that stands out, if one does. What makes the difference between that rank and the median one
 * is a comparison of their two analyses (compare.c), which the caller makes.
 *
 * Each worker opens and analyzes its share of the snapshots (every `jobs`th), keeps only the
 * summary (in shared memory: ms_rank holds no pointer) and frees the analysis: memory follows one
 * analysis a worker, not the number of ranks. The analysis is not shared between threads (qsort
 * contexts, the recorder's state in the replay), so workers are processes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analysis.h"

/* One snapshot's summary (a worker's work). */
static void summarize(const char *path, const ms_fold *fold, const ms_analyze_options *o, ms_rank *r) {
  ms_snapshot s;
  ms_analysis a;
  if (ms_open_analyzed(&s, &a, path, fold, o) != 0) {
    snprintf(r->error, sizeof r->error, "%.500s", s.error);
    return;
  }
  r->rank = s.rank;
  r->pid = s.pid;
  r->events = s.nevents;
  r->peak_allocated = a.peak_allocated;
  r->peak_reserved = a.peak_reserved;
  r->peak_ns = a.peak_allocated_ns - s.first_ns;
  r->iterations = (int64_t)a.niters;
  if (a.niters >= 2) r->growth = (a.iters[a.niters - 1].end_allocated - a.iters[0].end_allocated) / (int64_t)(a.niters - 1);
  r->ok = true;
  ms_analysis_free(&a);
  ms_close(&s);
}

int ms_ranks_summarize(const char *const *paths, size_t n, const ms_fold *fold, const ms_analyze_options *o, int jobs,
                       bool progress, ms_rank *r, char *err, size_t len) {
  size_t bytes = sizeof(int) + sizeof *r * n;
  void *shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    snprintf(err, len, "cannot map shared memory: %s", strerror(errno));
    return -1;
  }
  int *done = shared;
  ms_rank *out = (ms_rank *)((char *)shared + sizeof(int));
  for (size_t i = 0; i < n; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].rank = -1;
    snprintf(out[i].error, sizeof out[i].error, "not read: its worker failed");
  }
  if (jobs < 1) jobs = 1;
  if ((size_t)jobs > n) jobs = (int)n;
  pid_t pids[256];
  int started = 0;
  fflush(NULL);
  for (int w = 0; w < jobs && w < 256; w++) {
    pid_t pid = fork();
    if (pid == 0) {
      for (size_t i = (size_t)w; i < n; i += (size_t)jobs) {
        out[i].error[0] = '\0';
        summarize(paths[i], fold, o, &out[i]);
        __atomic_add_fetch(done, 1, __ATOMIC_SEQ_CST);
      }
      fflush(NULL);
      _exit(0);
    }
    if (pid < 0) break;
    pids[started++] = pid;
  }
  for (int w = started; w < jobs; w++) /* what workers that did not start had, here */
    for (size_t i = (size_t)w; i < n; i += (size_t)jobs) {
      out[i].error[0] = '\0';
      summarize(paths[i], fold, o, &out[i]);
      __atomic_add_fetch(done, 1, __ATOMIC_SEQ_CST);
    }
  int alive = started, shown = -1;
  while (alive > 0) {
    for (int k = 0; k < started; k++) {
      int status;
      if (pids[k] > 0 && waitpid(pids[k], &status, WNOHANG) == pids[k]) pids[k] = 0, alive--;
    }
    int now = __atomic_load_n(done, __ATOMIC_SEQ_CST);
    if (progress && now != shown) fprintf(stderr, "\ranalyzing the ranks: %d of %zu", shown = now, n);
    if (alive > 0) usleep(20000);
  }
  if (progress) fprintf(stderr, "\r%50s\r", "");
  memcpy(r, out, sizeof *r * n);
  munmap(shared, bytes);
  return 0;
}

static int compare_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* The median of v[0..n) (the lower middle one; v is reordered). */
static int64_t median(int64_t *v, size_t n) {
  qsort(v, n, sizeof *v, compare_i64);
  return v[(n - 1) / 2];
}

static int64_t metric(const ms_rank *r, int m) {
  return m == MS_RANK_PEAK_ALLOCATED ? r->peak_allocated : m == MS_RANK_PEAK_RESERVED ? r->peak_reserved : r->growth;
}

void ms_ranks_judge(const ms_rank *r, size_t n, ms_ranks_verdict *v) {
  memset(v, 0, sizeof *v);
  v->median = v->outlier = -1;
  int64_t *x = malloc(sizeof *x * (n ? n : 1)), *dev = malloc(sizeof *dev * (n ? n : 1));
  size_t k = 0;
  for (size_t i = 0; x && dev && i < n; i++)
    if (r[i].ok) x[k++] = r[i].peak_allocated;
  if (!x || !dev || k == 0) {
    free(x);
    free(dev);
    return;
  }
  v->readable = k;
  int64_t mid = median(x, k);
  for (size_t i = 0; i < n; i++) /* the median rank: the first whose peak is the median */
    if (r[i].ok && r[i].peak_allocated == mid) {
      v->median = (ptrdiff_t)i;
      break;
    }
  /* A rank stands out by a metric when it exceeds the median by more than the spread of the
     ranks (3 median absolute deviations), 5% of the median's peaks and 1 MiB: the largest such
     excess, in units of that threshold, names it. */
  for (int m = 0; m < MS_RANK_METRICS; m++) {
    k = 0;
    for (size_t i = 0; i < n; i++)
      if (r[i].ok) x[k++] = metric(&r[i], m);
    int64_t med = median(x, k);
    for (size_t i = 0; i < k; i++) dev[i] = llabs(x[i] - med);
    int64_t mad = median(dev, k), scale = 3 * mad, floor_bytes = (int64_t)1 << 20;
    if (m != MS_RANK_GROWTH && scale < llabs(med) / 20) scale = llabs(med) / 20;
    if (scale < floor_bytes) scale = floor_bytes;
    v->median_value[m] = med;
    for (size_t i = 0; i < n; i++) {
      if (!r[i].ok) continue;
      double score = (double)(metric(&r[i], m) - med) / (double)scale;
      if (score > 1.0 && score > v->score) {
        v->score = score;
        v->outlier = (ptrdiff_t)i;
        v->metric = m;
      }
    }
  }
  free(x);
  free(dev);
}
