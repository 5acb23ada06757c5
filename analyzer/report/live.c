/* live.c: what `memsnap top`, `memsnap run` and `memsnap recover` say about live mappings (a
 * recorded process's history kept in a file while it runs: docs/recover.md): finding them, how a
 * process ended, and one frame of the live view (text with ANSI colours, or JSON).
 *
 * A frame is taken from a snapshot that libmemsnap writes from the mapping into a temporary file
 * (memsnap_recover with `live`: the process is only read, never stopped), analyzed like any
 * other, then removed.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memsnap.h"
#include "report.h"

const char *ms_live_dir(void) { return memsnap_live_dir(); } /* the library's choice, the one folder */

static int by_rank_then_pid(const void *a, const void *b) {
  const ms_live_entry *x = a, *y = b;
  if (x->info.alive != y->info.alive) return x->info.alive ? -1 : 1;
  if (x->info.rank != y->info.rank) return x->info.rank < y->info.rank ? -1 : 1;
  return x->info.pid - y->info.pid;
}

size_t ms_live_list(const char *dir, bool alive_only, ms_live_entry **out) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, "memsnap-", 8) != 0 || len < 6 || strcmp(e->d_name + len - 5, ".live") != 0) continue;
    ms_live_entry entry;
    snprintf(entry.path, sizeof entry.path, "%s/%s", dir, e->d_name);
    if (memsnap_live_info(entry.path, &entry.info) != MEMSNAP_OK) continue;
    if (alive_only && !entry.info.alive) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      ms_live_entry *g = realloc(*out, sizeof *g * cap);
      if (!g) break;
      *out = g;
    }
    (*out)[n++] = entry;
  }
  closedir(d);
  if (n > 1) qsort(*out, n, sizeof **out, by_rank_then_pid);
  return n;
}

size_t ms_live_sweep_unfinished(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t removed = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) { /* memsnap-PID.live.new: a mapping its process never renamed into place */
    size_t len = strlen(e->d_name);
    char *end;
    if (strncmp(e->d_name, "memsnap-", 8) != 0 || len < 9 || strcmp(e->d_name + len - 9, ".live.new") != 0) continue;
    long pid = strtol(e->d_name + 8, &end, 10);
    if (pid <= 0 || strcmp(end, ".live.new") != 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    /* only this user's own regular files (in a shared folder MEMSNAP_LIVE_DIR names, others' stay) */
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) removed += unlink(path) == 0;
  }
  closedir(d);
  return removed;
}

void ms_live_describe_end(const memsnap_live_info_t *info, int end_signal, int exit_status, char *out, size_t len) {
  const char *how = "ended";
  char buf[64], name[32];
  if (end_signal) {
    ms_signal_name(end_signal, name, sizeof name);
    snprintf(buf, sizeof buf, "killed by %s", name);
    how = buf;
  } else if (exit_status >= 0) {
    snprintf(buf, sizeof buf, "exited with status %d", exit_status);
    how = buf;
  } else if (info->no_word) { /* no snapshot, no signal it watched */
    how = MS_END_UNSEEN;
  }
  ms_describe_end(how, info->end_ns, info->last_alloc_ns, info->last_event_ns, out, len);
}


/* "function (file:line)" of the first frame of the stack that matters. */
static void where(const ms_snapshot *s, uint32_t stack_id, char *out, size_t len) {
  uint32_t ids[1];
  snprintf(out, len, "(no stack)");
  if (!stack_id || ms_stack_frames_that_matter(s, stack_id, ids, 1) == 0) return;
  const ms_frame *f = &s->frames[ids[0]];
  const char *file = f->file && f->file[0] ? f->file : f->module ? f->module : "";
  const char *base = strrchr(file, '/');
  if (f->line > 0) snprintf(out, len, "%s (%s:%lld)", f->short_name ? f->short_name : f->name, base ? base + 1 : file, (long long)f->line);
  else snprintf(out, len, "%s (%s)", f->short_name ? f->short_name : f->name, base ? base + 1 : file);
  ms_neutralise(out);
}

static int by_end_bytes(const void *a, const void *b, void *arg) {
  const ms_site *sites = arg;
  int64_t x = sites[*(const size_t *)a].end_bytes, y = sites[*(const size_t *)b].end_bytes;
  return x > y ? -1 : x < y;
}

/* A new folder of this user's alone for the frame's snapshot (never a predictable name in a shared
 * one, where a link planted by another user would be followed): its path into dir[len], 0 or -1. */
static int private_dir(char *dir, size_t len) {
  const char *t = getenv("TMPDIR");
  snprintf(dir, len, "%s/memsnap-top-XXXXXX", t && *t ? t : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

int ms_live_frame(const char *live_path, ms_live_view *v, char *err, size_t errlen) {
  memset(v, 0, sizeof *v);
  char dir[1100], tmp[1200];
  if (private_dir(dir, sizeof dir) != 0) {
    snprintf(err, errlen, "cannot make a folder in '%s': %s", dir, strerror(errno));
    return -1;
  }
  snprintf(tmp, sizeof tmp, "%s/frame.db", dir);
  memsnap_recover_options o = {0, -1, 0, 1, 1};
  if (memsnap_recover(live_path, tmp, &o, &v->info) != MEMSNAP_OK) {
    snprintf(err, errlen, "%s", memsnap_last_error());
    rmdir(dir);
    return -1;
  }
  ms_snapshot s;
  ms_analysis a;
  if (ms_open_analyzed(&s, &a, tmp, NULL, NULL) != 0) {
    snprintf(err, errlen, "%s", s.error);
    unlink(tmp);
    rmdir(dir);
    return -1;
  }
  v->allocated = a.end_allocated;
  v->reserved = a.end_reserved;
  v->peak_allocated = a.peak_allocated;
  v->peak_reserved = a.peak_reserved;
  v->iterations = a.niters;
  for (size_t i = a.niters > MS_LIVE_ITERS ? a.niters - MS_LIVE_ITERS : 0; i < a.niters; i++)
    v->iter_peak[v->niter_peaks++] = a.iters[i].peak_allocated;
  for (size_t i = 0; i < a.nleaks && v->ngrowing < MS_LIVE_SITES; i++) {
    const ms_site *site = &a.sites[a.leaks[i]];
    if (!ms_leak_grows(site)) continue;
    ms_live_site *g = &v->growing[v->ngrowing++];
    g->bytes = site->end_bytes;
    g->count = site->end_count;
    g->per_iteration = site->bytes_per_iteration;
    where(&s, site->stack_id, g->where, sizeof g->where);
  }
  size_t *order = a.nsites ? malloc(sizeof *order * a.nsites) : NULL;
  if (order) {
    size_t n = 0;
    for (size_t i = 0; i < a.nsites; i++)
      if (a.sites[i].end_bytes > 0) order[n++] = i;
    qsort_r(order, n, sizeof *order, by_end_bytes, a.sites);
    for (size_t i = 0; i < n && v->nlargest < MS_LIVE_SITES; i++) {
      ms_live_site *g = &v->largest[v->nlargest++];
      g->bytes = a.sites[order[i]].end_bytes;
      g->count = a.sites[order[i]].end_count;
      where(&s, a.sites[order[i]].stack_id, g->where, sizeof g->where);
    }
    free(order);
  }
  ms_analysis_free(&a);
  ms_close(&s);
  unlink(tmp);
  rmdir(dir);
  return 0;
}

void ms_live_print_text(const ms_live_view *v, bool brief, FILE *out) {
  char b1[32], b2[32], b3[32], b4[32], name[300];
  snprintf(name, sizeof name, "%s", v->info.program);
  ms_neutralise(name);
  ms_format_bytes(v->allocated, b1, sizeof b1);
  ms_format_bytes(v->reserved, b2, sizeof b2);
  ms_format_bytes(v->peak_allocated, b3, sizeof b3);
  ms_format_bytes(v->peak_reserved, b4, sizeof b4);
  char rank[24] = "";
  if (v->info.rank >= 0) snprintf(rank, sizeof rank, " rank %d", v->info.rank);
  fprintf(out, "\033[1m%s\033[0m pid %d%s%s\033[K\n", name, v->info.pid, rank, v->info.alive ? "" : "  (ended)");
  fprintf(out, "  allocated \033[1m%s\033[0m (peak %s)   reserved \033[1m%s\033[0m (peak %s)   events %llu\033[K\n", b1, b3,
          b2, b4, (unsigned long long)(v->info.events + v->info.dropped));
  if (v->iterations) {
    fprintf(out, "  iterations %zu; peaks of the last ones:", v->iterations);
    for (size_t i = 0; i < v->niter_peaks; i++) {
      ms_format_bytes(v->iter_peak[i], b1, sizeof b1);
      fprintf(out, " %s", b1);
    }
    fprintf(out, "\033[K\n");
  } else {
    fprintf(out, "  no iterations found yet\033[K\n");
  }
  if (brief) {
    if (v->ngrowing) {
      ms_format_bytes((int64_t)v->growing[0].per_iteration, b1, sizeof b1);
      fprintf(out, "  \033[31mgrowing\033[0m %s per iteration at %s\033[K\n", b1, v->growing[0].where);
    }
    return;
  }
  fprintf(out, "\033[K\n  \033[1mgrowing fastest\033[0m (the leak analysis of the history so far)\033[K\n");
  if (!v->ngrowing) fprintf(out, "    none\033[K\n");
  for (size_t i = 0; i < v->ngrowing; i++) {
    ms_format_bytes((int64_t)v->growing[i].per_iteration, b1, sizeof b1);
    ms_format_bytes(v->growing[i].bytes, b2, sizeof b2);
    fprintf(out, "    \033[31m%10s\033[0m/iter  %10s live in %5lld  %s\033[K\n", b1, b2, (long long)v->growing[i].count,
            v->growing[i].where);
  }
  fprintf(out, "\033[K\n  \033[1mlargest live sites\033[0m\033[K\n");
  if (!v->nlargest) fprintf(out, "    none\033[K\n");
  for (size_t i = 0; i < v->nlargest; i++) {
    ms_format_bytes(v->largest[i].bytes, b1, sizeof b1);
    fprintf(out, "    %10s in %5lld  %s\033[K\n", b1, (long long)v->largest[i].count, v->largest[i].where);
  }
}

static cJSON *sites_json(const ms_live_site *s, size_t n, bool growing) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    if (growing) cJSON_AddNumberToObject(o, "bytes_per_iteration", s[i].per_iteration);
    cJSON_AddNumberToObject(o, "live_bytes", (double)s[i].bytes);
    cJSON_AddNumberToObject(o, "live_blocks", (double)s[i].count);
    cJSON_AddStringToObject(o, "where", s[i].where);
    cJSON_AddItemToArray(arr, o);
  }
  return arr;
}

struct cJSON *ms_live_json(const ms_live_view *v) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "pid", v->info.pid);
  if (v->info.rank >= 0) cJSON_AddNumberToObject(o, "rank", v->info.rank);
  cJSON_AddStringToObject(o, "program", v->info.program);
  cJSON_AddBoolToObject(o, "alive", v->info.alive);
  cJSON_AddNumberToObject(o, "allocated_bytes", (double)v->allocated);
  cJSON_AddNumberToObject(o, "reserved_bytes", (double)v->reserved);
  cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)v->peak_allocated);
  cJSON_AddNumberToObject(o, "peak_reserved_bytes", (double)v->peak_reserved);
  cJSON_AddNumberToObject(o, "iterations", (double)v->iterations);
  cJSON *peaks = cJSON_AddArrayToObject(o, "iteration_peaks");
  for (size_t i = 0; i < v->niter_peaks; i++) cJSON_AddItemToArray(peaks, cJSON_CreateNumber((double)v->iter_peak[i]));
  cJSON_AddNumberToObject(o, "events", (double)(v->info.events + v->info.dropped));
  cJSON_AddItemToObject(o, "growing", sites_json(v->growing, v->ngrowing, true));
  cJSON_AddItemToObject(o, "largest", sites_json(v->largest, v->nlargest, false));
  return o;
}

/* ---- the screen ----------------------------------------------------------------------- */

#include <poll.h>
#include <termios.h>
#include <time.h>

void ms_live_draw(const char *const *paths, size_t n, const char *title, FILE *out) {
  char clock[16];
  time_t now = time(NULL);
  strftime(clock, sizeof clock, "%H:%M:%S", localtime(&now));
  fprintf(out, "\033[H\033[1mmemsnap top\033[0m  %s  %s  (q quits)\033[K\n\033[K\n", clock, title ? title : "");
  for (size_t i = 0; i < n; i++) {
    ms_live_view v;
    char err[512];
    if (ms_live_frame(paths[i], &v, err, sizeof err) != 0) {
      ms_neutralise(err);
      fprintf(out, "%s: %s\033[K\n", paths[i], err);
      continue;
    }
    ms_live_print_text(&v, n > 1, out);
    fprintf(out, "\033[K\n");
  }
  if (!n) fprintf(out, "no recorded process yet\033[K\n");
  fprintf(out, "\033[J");
  fflush(out);
}

static struct termios saved_term;
static bool term_raw;

void ms_term_raw(bool on) {
  if (on && !term_raw && isatty(0) && tcgetattr(0, &saved_term) == 0) {
    struct termios t = saved_term;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    term_raw = tcsetattr(0, TCSANOW, &t) == 0;
    if (term_raw) fputs("\033[?1049h\033[?25l", stdout); /* the alternate screen, no cursor */
  } else if (!on && term_raw) {
    tcsetattr(0, TCSANOW, &saved_term);
    term_raw = false;
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
  }
}

int ms_term_key(int timeout_ms) {
  struct pollfd p = {0, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0 || !(p.revents & POLLIN)) return -1;
  char c;
  return read(0, &c, 1) == 1 ? (unsigned char)c : -2; /* -2: end of input */
}
