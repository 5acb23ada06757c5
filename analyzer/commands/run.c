/* run.c: `memsnap run [options] -- PROGRAM [ARGS...]`: runs a program unchanged with
 * recording on from its first allocation, then says where its snapshots are and what they show.
 *
 * The program is started with an environment that records it (docs/run.md):
 *   allocator     Python: sitecustomize (recorder/python/memsnap/run_site) makes memsnap
 *                 PyTorch's allocator when torch is imported; MEMSNAP_RECORD, MEMSNAP_DUMP...
 *   torch-native  Python: the same sitecustomize turns on PyTorch's recorder and pickles its
 *                 snapshot at exit; this command imports each pickle into the snapshot asked for
 *   intercept     any program: LD_PRELOAD=libmemsnap_intercept.so records the CUDA runtime's and
 *                 driver's allocations (intercept/intercept.c)
 *   audit         the same library as a run-time linker audit library (LD_AUDIT, intercept/audit.c)
 *   allocator+intercept  both in one snapshot; the default (auto) for a Python program or a shell, so that
 *                 one that never imports torch (CuPy, JAX, Numba, ctypes) is recorded too; for
 *                 anything else auto is intercept
 * Where the interposer records a Python program, JAX's XLA is asked to allocate each array from
 * the driver (XLA_PYTHON_CLIENT_ALLOCATOR=platform) unless --keep-arena or the user chose.
 * Every process of the program (forks that exec, workers, torchrun's ranks) inherits it and
 * writes its own file (the path's %p, %r). Each snapshot written is appended to a manifest file
 * (MEMSNAP_RUN_MANIFEST) by whoever wrote it, so this command finds them all afterwards.
 *
 * The exit status is the program's (128 + N when signal N ended it). SIGTERM and SIGHUP sent to
 * this command are passed to the program, after asking it for a snapshot when --signal is set.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "pytorch/pytorch.h"
#include "replay/replay.h"
#include "report/report.h"

typedef enum { MODE_AUTO, MODE_ALLOCATOR, MODE_TORCH_NATIVE, MODE_INTERCEPT, MODE_BOTH, MODE_AUDIT } run_mode;
static const char *const mode_names[] = {"auto", "allocator", "torch-native", "intercept", "allocator+intercept",
                                         "audit"};

/* Whether the interposer records in `mode` (LD_PRELOAD or LD_AUDIT). */
static bool interposed(run_mode mode) { return mode == MODE_INTERCEPT || mode == MODE_BOTH || mode == MODE_AUDIT; }

typedef struct run_options {
  const char *output, *stacks, *max_entries, *dump_on_oom, *signal_name;
  run_mode mode;
  bool html, quiet, cache, no_torch_blocks, keep_arena, no_suggest, live;
  char **program; /* argv of the program, NULL-terminated */
} run_options;

/* ---- where memsnap's pieces are ---------------------------------------------------------- */

static bool exists(const char *path) { return access(path, R_OK) == 0; }

/* The directory of this executable (build/), for libmemsnap.so and libmemsnap_intercept.so. */
static int self_dir(char *out, size_t len) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return -1;
  *slash = '\0';
  snprintf(out, len, "%s", exe);
  return 0;
}

/* The directory holding the memsnap Python package: MEMSNAP_PYTHONPATH, else the source tree's
 * recorder/python beside build/, else python/ beside the executable. */
static int python_dir(const char *bin, char *out, size_t len) {
  const char *env = getenv("MEMSNAP_PYTHONPATH");
  char probe[PATH_MAX + 64];
  if (env && *env) {
    snprintf(out, len, "%s", env);
    return 0;
  }
  const char *const tries[] = {"/../recorder/python", "/python"};
  for (size_t i = 0; i < sizeof tries / sizeof *tries; i++) {
    snprintf(out, len, "%.*s%s", (int)(len > 64 ? len - 64 : 0), bin, tries[i]);
    snprintf(probe, sizeof probe, "%s/memsnap/run_site/sitecustomize.py", out);
    if (exists(probe)) return 0;
  }
  return -1;
}

/* ---- choosing the mode ------------------------------------------------------------------- */

static bool is_python_name(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  return strncmp(base, "python", 6) == 0 || strcmp(base, "torchrun") == 0 || strcmp(base, "accelerate") == 0 ||
         strcmp(base, "deepspeed") == 0;
}

/* A shell: what launches a training job as often as Python does (`bash train.sh`). */
static bool is_shell_name(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  static const char *const shells[] = {"sh", "bash", "dash", "zsh", "ksh"};
  for (size_t i = 0; i < sizeof shells / sizeof *shells; i++)
    if (strcmp(base, shells[i]) == 0) return true;
  return false;
}

/* The interpreter a script's #! line names (`#!/usr/bin/env python3`: python3) into out, or ""
 * (no #! line, or the program is not found on PATH as execvp would look). */
static void interpreter_of(const char *program, char *out, size_t len) {
  char path[PATH_MAX] = "";
  out[0] = '\0';
  if (strchr(program, '/')) {
    snprintf(path, sizeof path, "%s", program);
  } else {
    const char *p = getenv("PATH");
    for (p = p ? p : "/usr/bin:/bin"; *p && !path[0];) {
      size_t n = strcspn(p, ":");
      char candidate[PATH_MAX];
      snprintf(candidate, sizeof candidate, "%.*s/%s", (int)n, p, program);
      if (access(candidate, X_OK) == 0) snprintf(path, sizeof path, "%s", candidate);
      p += n + (p[n] == ':');
    }
  }
  FILE *f = path[0] ? fopen(path, "r") : NULL;
  if (!f) return;
  char line[256] = "";
  bool shebang = fgets(line, sizeof line, f) && line[0] == '#' && line[1] == '!';
  fclose(f);
  if (!shebang) return;
  char *save = NULL, *word = strtok_r(line + 2, " \t\r\n", &save);
  const char *base = word ? strrchr(word, '/') : NULL;
  if (word && !strcmp(base ? base + 1 : word, "env")) /* env [-S] [-i] ... NAME */
    while ((word = strtok_r(NULL, " \t\r\n", &save)) && word[0] == '-') {}
  if (word) snprintf(out, len, "%s", word);
}

typedef enum { RUNS_OTHER, RUNS_PYTHON, RUNS_SHELL } runs_kind;

/* Whether the program is Python (python*, torchrun..., a script whose #! line names python), a
 * shell that may start Python (sh, bash..., a script whose #! line names one), or neither. */
static runs_kind runs_python(const char *program) {
  if (is_python_name(program)) return RUNS_PYTHON;
  if (is_shell_name(program)) return RUNS_SHELL;
  char interp[256];
  interpreter_of(program, interp, sizeof interp);
  if (!interp[0]) return RUNS_OTHER;
  return is_python_name(interp) ? RUNS_PYTHON : is_shell_name(interp) ? RUNS_SHELL : RUNS_OTHER;
}

/* ---- the program's environment ----------------------------------------------------------- */

static int set_env(const char *name, const char *value) {
  if (setenv(name, value, 1) == 0) return 0;
  fprintf(stderr, "error: run: cannot set %s: %s\n", name, strerror(errno));
  return -1;
}

/* Adds `item` to the ":"-separated list variable `name`, first or last. */
static int add_to_env(const char *name, const char *item, bool last) {
  const char *old = getenv(name);
  if (!old || !*old) return set_env(name, item);
  size_t n = strlen(item) + strlen(old) + 2;
  char *joined = malloc(n);
  if (!joined) return -1;
  snprintf(joined, n, "%s:%s", last ? old : item, last ? item : old);
  int rc = set_env(name, joined);
  free(joined);
  return rc;
}

/* An absolute form of `path` (the program may change directory before it writes). */
static void absolute(const char *path, char *out, size_t len) {
  char cwd[PATH_MAX];
  int n = path[0] == '/' || !getcwd(cwd, sizeof cwd) ? snprintf(out, len, "%s", path)
                                                      : snprintf(out, len, "%s/%s", cwd, path);
  if (n < 0 || (size_t)n >= len) snprintf(out, len, "%s", path); /* too long: as given */
}

/* Intercept mode's second snapshot in a PyTorch process: PATH with ".torch" before its ".db"
 * ("run-%p.db" -> "run-%p.torch.db"; "out" -> "out.torch.db"). */
static void torch_blocks_path(const char *path, char *out, size_t len) {
  size_t n = strlen(path);
  bool db = n > 3 && !strcmp(path + n - 3, ".db");
  snprintf(out, len, "%.*s.torch.db", (int)(db ? n - 3 : n), path);
}

static int prepare_env(const run_options *o, run_mode mode, const char *bin, const char *manifest) {
  char lib[PATH_MAX + 32], path[PATH_MAX], py[PATH_MAX], site[PATH_MAX + 32];
  snprintf(lib, sizeof lib, "%s/libmemsnap.so", bin);
  absolute(o->output, path, sizeof path);
  int rc = set_env("MEMSNAP_RUN_MANIFEST", manifest) | set_env("MEMSNAP_RUN_MODE", mode_names[mode]);
  if (mode == MODE_TORCH_NATIVE) {
    /* libmemsnap is not loaded: the sitecustomize reads these */
    rc |= set_env("MEMSNAP_RUN_DUMP", path);
    if (o->signal_name) rc |= set_env("MEMSNAP_RUN_SIGNAL", o->signal_name);
    if (o->dump_on_oom) {
      absolute(o->dump_on_oom, path, sizeof path);
      rc |= set_env("MEMSNAP_RUN_DUMP_ON_OOM", path);
    }
  } else {
    rc |= set_env("MEMSNAP_RECORD", "1") | set_env("MEMSNAP_DUMP", path) | set_env("MEMSNAP_LIB", lib);
    if (o->signal_name) rc |= set_env("MEMSNAP_DUMP_SIGNAL", o->signal_name);
    if (o->dump_on_oom) {
      absolute(o->dump_on_oom, path, sizeof path);
      rc |= set_env("MEMSNAP_DUMP_ON_OOM", path);
    }
  }
  if ((mode == MODE_INTERCEPT || mode == MODE_AUDIT) && !o->no_torch_blocks) {
    /* a PyTorch process: its blocks, from PyTorch's own recorder, into a snapshot of their own */
    char blocks[PATH_MAX + 16];
    absolute(o->output, path, sizeof path);
    torch_blocks_path(path, blocks, sizeof blocks);
    rc |= set_env("MEMSNAP_RUN_TORCH_BLOCKS", blocks);
  }
  if (o->cache) rc |= set_env("MEMSNAP_INTERCEPT_CACHE", "1");
  if ((mode == MODE_ALLOCATOR || mode == MODE_BOTH) && !o->keep_arena) {
    /* CuPy: its arrays from memsnap's allocator, each seen with its stack (the sitecustomize) */
    rc |= set_env("MEMSNAP_RUN_CUPY", "1");
  }
  if (o->quiet) rc |= set_env("MEMSNAP_RUN_QUIET", "1"); /* the Python package's notes too */
  if (interposed(mode) && !o->keep_arena && !getenv("XLA_PYTHON_CLIENT_ALLOCATOR")) {
    /* JAX: each array its own cuMemAlloc, which the interposer sees (the sitecustomize notes it) */
    rc |= set_env("XLA_PYTHON_CLIENT_ALLOCATOR", "platform") | set_env("MEMSNAP_RUN_XLA_ALLOCATOR", "platform");
  }
  if (o->stacks) rc |= set_env("MEMSNAP_STACKS", o->stacks);
  if (o->max_entries) rc |= set_env("MEMSNAP_MAX_ENTRIES", o->max_entries);
  { /* every mode: Python programs get the sitecustomize (intercept: it dumps from Python's exit) */
    if (python_dir(bin, py, sizeof py) != 0) {
      if (mode == MODE_INTERCEPT || mode == MODE_AUDIT) goto preload; /* a C program does not need it */
      fprintf(stderr, "error: run: the memsnap Python package is not found beside '%s' (set MEMSNAP_PYTHONPATH "
              "to the directory that holds memsnap/)\n", bin);
      return -1;
    }
    snprintf(site, sizeof site, "%s/memsnap/run_site", py);
    rc |= add_to_env("PYTHONPATH", py, false) | add_to_env("PYTHONPATH", site, false);
  }
preload:
  if (interposed(mode)) {
    char so[PATH_MAX + 32];
    snprintf(so, sizeof so, "%s/libmemsnap_intercept.so", bin);
    if (!exists(so)) {
      fprintf(stderr, "error: run: '%s' is missing (run make)\n", so);
      return -1;
    }
    /* last: a sanitizer's runtime the user preloads must stay first */
    rc |= add_to_env(mode == MODE_AUDIT ? "LD_AUDIT" : "LD_PRELOAD", so, true);
  }
  return rc ? -1 : 0;
}

/* ---- running it -------------------------------------------------------------------------- */

static volatile sig_atomic_t pending_signal;
static void on_signal(int sig) { pending_signal = sig; }

/* The manifest, to read: made by mkstemp (O_EXCL, 0600) and read only through a descriptor
 * opened without following a link, when it is still this user's regular file. NULL otherwise. */
static FILE *open_manifest(const char *manifest) {
  int fd = open(manifest, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  FILE *f = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() ? fdopen(fd, "r") : NULL;
  if (!f && fd >= 0) close(fd);
  return f;
}

static long manifest_lines(const char *manifest) {
  FILE *f = open_manifest(manifest);
  long n = 0;
  int c;
  if (!f) return 0;
  while ((c = getc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

/* Passes a signal sent to this command on to the program; with --signal, asks it for a
 * snapshot first and waits (up to 30 s) for one to be written. */
static void forward(pid_t child, int sig, int dump_sig, const char *manifest) {
  if (dump_sig && (sig == SIGTERM || sig == SIGHUP)) {
    long before = manifest_lines(manifest);
    fprintf(stderr, "memsnap run: asking pid %d for a snapshot before passing on signal %d\n", (int)child, sig);
    kill(child, dump_sig);
    for (int i = 0; i < 300 && manifest_lines(manifest) == before; i++) {
      if (waitpid(child, NULL, WNOHANG) != 0) return; /* it ended: the caller sees how */
      nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
  }
  kill(child, sig);
}

/* The live mappings the manifest names so far ("live<TAB>path<TAB>pid" lines), into paths[max]
 * (each PATH_MAX long); returns how many. */
static size_t manifest_live(const char *manifest, char (*paths)[PATH_MAX], size_t max) {
  FILE *in = open_manifest(manifest);
  char line[3 * PATH_MAX];
  size_t n = 0;
  if (!in) return 0;
  while (n < max && fgets(line, sizeof line, in)) {
    if (strncmp(line, "live\t", 5) != 0) continue;
    char *path = line + 5;
    path[strcspn(path, "\t\n")] = '\0';
    if (access(path, R_OK) == 0) snprintf(paths[n++], PATH_MAX, "%.4000s", path);
  }
  fclose(in);
  return n;
}

/* --live: the view of the program's processes, once a second, until it ends or q is pressed. */
static void live_view_step(const char *manifest, bool *live) {
  static char paths[16][PATH_MAX];
  const char *shown[16];
  size_t n = manifest_live(manifest, paths, 16);
  for (size_t i = 0; i < n; i++) shown[i] = paths[i];
  ms_live_draw(shown, n, "memsnap run --live", stdout);
  int key = ms_term_key(1000);
  if (key == 'q' || key == 'Q' || key == -2) {
    ms_term_raw(false);
    *live = false;
  }
}

/* Runs the program; returns its wait status, or -1 (message printed) if it could not start. Its pid
 * and the monotonic time it was seen to end go to *pid_out and *end_ns. */
static int run_program(char **argv, int dump_sig, const char *manifest, bool live, pid_t *pid_out, uint64_t *end_ns) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "error: run: cannot start '%s': %s\n", argv[0], strerror(errno));
    return -1;
  }
  if (child == 0) {
    close(ready[0]);
    fcntl(ready[1], F_SETFD, FD_CLOEXEC);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t ignored = write(ready[1], &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  close(ready[1]);
  int exec_errno = 0;
  bool failed = read(ready[0], &exec_errno, sizeof exec_errno) == (ssize_t)sizeof exec_errno;
  close(ready[0]);
  struct sigaction sa = {0}, old_term, old_hup, old_int;
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  sa.sa_handler = SIG_IGN; /* the terminal sends it to the program too */
  sigaction(SIGINT, &sa, &old_int);
  int status = 0;
  *pid_out = child;
  if (live && !failed) {
    ms_term_raw(true);
    fputs("\033[2J", stdout);
  }
  for (;;) {
    pid_t r = waitpid(child, &status, live && !failed ? WNOHANG : 0);
    if (r == child) break;
    if (r == 0) {
      live_view_step(manifest, &live);
      continue;
    }
    if (r < 0 && errno != EINTR) {
      status = -1;
      break;
    }
    if (pending_signal) {
      int sig = pending_signal;
      pending_signal = 0;
      forward(child, sig, dump_sig, manifest);
    }
  }
  struct timespec ended;
  clock_gettime(CLOCK_MONOTONIC, &ended);
  *end_ns = (uint64_t)ended.tv_sec * 1000000000ull + (uint64_t)ended.tv_nsec;
  if (live) ms_term_raw(false);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGHUP, &old_hup, NULL);
  sigaction(SIGINT, &old_int, NULL);
  if (failed) {
    fprintf(stderr, "error: run: cannot run '%s': %s\n", argv[0], strerror(exec_errno));
    return -1;
  }
  return status;
}

/* ---- afterwards: the snapshots ------------------------------------------------------------ */

typedef struct found {
  char **paths;
  size_t n, cap;
  struct { /* the processes that imported JAX, and XLA's allocator in each (sitecustomize's "xla" lines) */
    long pid;
    char allocator[32];
    bool ours; /* memsnap run chose it */
  } xla[64];
  size_t nxla;
  long cupy[64]; /* the processes whose CuPy allocates from memsnap's allocator ("cupy" lines) */
  size_t ncupy;
  struct { /* the live mappings made ("live" lines): a process that died left its own */
    char path[PATH_MAX];
    long pid;
  } live[256];
  size_t nlive;
} found;

static void add_found(found *f, const char *path) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->paths[i], path)) return; /* written again (a signal, then the exit) */
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 8;
    char **grown = realloc(f->paths, sizeof *grown * cap);
    if (!grown) return;
    f->paths = grown;
    f->cap = cap;
  }
  char *copy = strdup(path);
  if (copy) f->paths[f->n++] = copy;
}

/* An "xla" line's fields: PID, XLA's allocator, "1" when memsnap run chose it. */
static void add_xla(found *f, char *fields) {
  char *allocator = strchr(fields, '\t'), *ours;
  if (!allocator || f->nxla == sizeof f->xla / sizeof *f->xla) return;
  *allocator++ = '\0';
  if ((ours = strchr(allocator, '\t')) != NULL) *ours++ = '\0';
  f->xla[f->nxla].pid = strtol(fields, NULL, 10);
  snprintf(f->xla[f->nxla].allocator, sizeof f->xla[f->nxla].allocator, "%s", allocator);
  ms_neutralise(f->xla[f->nxla].allocator);
  f->xla[f->nxla++].ours = ours && !strcmp(ours, "1");
}

/* Reads the manifest: the snapshots written, (torch-native) the pickles to import, and the
 * processes that imported JAX. */
static void read_manifest(const char *manifest, found *f) {
  FILE *in = open_manifest(manifest);
  char line[3 * PATH_MAX];
  if (!in) return;
  while (fgets(line, sizeof line, in)) {
    line[strcspn(line, "\n")] = '\0';
    char *kind = line, *a = strchr(line, '\t'), *b;
    if (!a) continue;
    *a++ = '\0';
    if (!strcmp(kind, "db")) {
      add_found(f, a);
    } else if (!strcmp(kind, "xla")) {
      add_xla(f, a);
    } else if (!strcmp(kind, "live") && (b = strchr(a, '\t')) != NULL) {
      *b++ = '\0';
      if (f->nlive < sizeof f->live / sizeof *f->live) {
        snprintf(f->live[f->nlive].path, sizeof f->live[f->nlive].path, "%s", a);
        f->live[f->nlive++].pid = strtol(b, NULL, 10);
      }
    } else if (!strcmp(kind, "cupy")) {
      if (f->ncupy < sizeof f->cupy / sizeof *f->cupy) f->cupy[f->ncupy++] = strtol(a, NULL, 10);
    } else if (!strcmp(kind, "pickle") && (b = strchr(a, '\t')) != NULL) {
      *b++ = '\0';
      if (!strstr(a, ".torch-") || strlen(a) < 7 || strcmp(a + strlen(a) - 7, ".pickle")) continue; /* not ours */
      /* then, optionally, each device's memory as torch said it: "TOTAL0,TOTAL1,..." */
      int64_t totals[MS_MAX_DEVICES];
      int ntotals = 0;
      char *t = strchr(b, '\t');
      if (t) {
        *t++ = '\0';
        for (char *end; *t && ntotals < MS_MAX_DEVICES; t = *end == ',' ? end + 1 : end) {
          long long v = strtoll(t, &end, 10);
          if (end == t) break;
          totals[ntotals++] = v > 0 ? v : 0;
        }
      }
      if (ms_import_to(a, b, false, totals, ntotals) == 0) {
        unlink(a);
        add_found(f, b);
      } else {
        fprintf(stderr, "memsnap run: PyTorch's snapshot is kept in '%s'\n", a);
      }
    }
  }
  fclose(in);
}

/* Which path saw a snapshot's memory: memsnap's allocator (PyTorch's tensors, --cache's blocks)
 * and the interposer (every other device allocation: pool external), or PyTorch's own allocator
 * when the snapshot was `imported` from its recorder; allocations over the history and bytes
 * allocated; what the interposer holds at the snapshot, by API and library; and in a process
 * that imported JAX, the allocator XLA had. */
static void print_paths(const ms_analysis *a, const found *f, bool imported, const char *indent) {
  int64_t n[2] = {0, 0}, bytes[2] = {0, 0};
  char b[32];
  for (size_t i = 0; i < a->nsites; i++) {
    n[a->sites[i].external] += a->sites[i].allocs;
    bytes[a->sites[i].external] += a->sites[i].alloc_bytes;
  }
  printf("%sseen: ", indent);
  for (int k = 0; k < 2; k++) {
    ms_format_bytes(bytes[k], b, sizeof b);
    if (n[k])
      printf("%s%lld allocation%s (%s) through %s", k && n[0] ? "; " : "", (long long)n[k], n[k] == 1 ? "" : "s", b,
             k ? "the interposer" : imported ? "PyTorch's allocator (its recorder's snapshot, imported)"
                                             : "memsnap's allocator");
  }
  if (!n[0] && !n[1]) printf("no allocation in the history");
  printf("\n");
  if (a->nexternal) {
    ms_format_bytes(a->external_bytes, b, sizeof b);
    printf("%sthe interposer's at the snapshot: %s, most from %s in %s\n", indent, b, a->external[0].source,
           a->external[0].library);
  }
  for (size_t i = 0; i < f->ncupy; i++)
    if (f->cupy[i] == (long)a->snap->pid)
      printf("%sCuPy: its arrays from memsnap's allocator, one by one (memsnap.cupy; --keep-arena keeps CuPy's own "
             "pool, whose segments alone are seen)\n", indent);
  for (size_t i = 0; i < f->nxla; i++) {
    if (f->xla[i].pid != (long)a->snap->pid) continue;
    if (!strcmp(f->xla[i].allocator, "platform"))
      printf("%sJAX: XLA allocated each array from the driver (XLA_PYTHON_CLIENT_ALLOCATOR=platform%s; slower than "
             "its arena: --keep-arena keeps it)\n", indent, f->xla[i].ours ? ", set by memsnap run" : "");
    else
      printf("%sJAX: XLA's allocator '%s' suballocates inside the memory it reserves: its arrays are not seen one by "
             "one (memsnap run sets XLA_PYTHON_CLIENT_ALLOCATOR=platform unless --keep-arena)\n", indent,
             f->xla[i].allocator);
  }
}

/* The processes that died without writing their snapshot (a signal, _exit) left their live
 * mappings: each one's snapshot is written from it, and the mapping removed. The program's own
 * process ended with `status` at end_ns (monotonic); the others (torchrun's ranks), as their
 * mappings say: the fatal signal each caught, or none (SIGKILL, _exit).
 * Returns how many were written. */
static size_t recover_dead(found *f, pid_t child, int status, uint64_t end_ns, bool quiet) {
  size_t written = 0;
  ms_live_sweep_unfinished(ms_live_dir()); /* a process killed while making its mapping left a half-made one */
  for (size_t i = 0; i < f->nlive; i++) {
    const char *path = f->live[i].path;
    memsnap_live_info_t info;
    if (access(path, F_OK) != 0) continue; /* removed at a normal exit, its snapshot written */
    char shown[PATH_MAX], ended[256];
    snprintf(shown, sizeof shown, "%s", path);
    ms_neutralise(shown);
    if (memsnap_live_info(path, &info) == MEMSNAP_OK && info.alive) {
      if (!quiet) printf("memsnap run: process %d still runs (memsnap top %d shows it)\n", info.pid, info.pid);
      continue;
    }
    bool ours = f->live[i].pid == (long)child;
    memsnap_recover_options o = {ours && WIFSIGNALED(status) ? WTERMSIG(status) : 0,
                                 ours && WIFEXITED(status) ? WEXITSTATUS(status) : -1, ours ? end_ns : 0, 0, 0};
    if (memsnap_recover(path, NULL, &o, &info) != MEMSNAP_OK) {
      fprintf(stderr, "error: run: the history of process %ld could not be written: %s (kept: memsnap recover %s)\n",
              f->live[i].pid, memsnap_last_error(), shown);
      continue;
    }
    ms_live_describe_end(&info, info.end_signal, o.exit_status, ended, sizeof ended);
    if (!quiet)
      printf("memsnap run: process %d (%s) %s; its snapshot was written from its live mapping (%llu events)\n",
             info.pid, info.program, ended, (unsigned long long)info.events);
    add_found(f, info.snapshot);
    written++;
  }
  return written;
}

/* What one snapshot shows: the peak, what is allocated at the end, the first leak candidate and
 * its stack, and the commands that open the report and the page (written with `html`). `brief`
 * (many snapshots, one screen): two lines, the leak's innermost frame that matters. Otherwise
 * also through which path the memory was seen (print_paths; `f`: the manifest's JAX lines). The
 * replay's best suggestion follows (not with `no_suggest`). */
static void print_summary(const char *path, bool html, bool brief, const found *f, bool no_suggest) {
  ms_snapshot s;
  ms_analysis a;
  char b1[32], b2[32], b3[32], shown[PATH_MAX];
  if (ms_open_analyzed(&s, &a, path, NULL, NULL) != 0) {
    fprintf(stderr, "error: %s\n", s.error);
    return;
  }
  ms_suggestions *suggestions = malloc(sizeof *suggestions); /* the replay's: the summary and the page say them */
  if (suggestions) {
    ms_suggest(&a, &(ms_suggest_options){.disabled = no_suggest}, suggestions);
    a.suggestions = suggestions;
  }
  snprintf(shown, sizeof shown, "%s", path);
  ms_neutralise(shown);
  ms_format_bytes(a.peak_allocated, b1, sizeof b1);
  ms_format_bytes(a.peak_reserved, b2, sizeof b2);
  ms_format_bytes(a.end_allocated, b3, sizeof b3);
  const ms_site *leak = a.nleaks ? &a.sites[a.leaks[0]] : NULL;
  ms_growth growth = ms_analysis_growth(&a);
  bool growing = growth == MS_GROWTH_GROWING || growth == MS_GROWTH_RELEASED;
  char per[96] = "", graph[2048] = "";
  if (leak && leak->every) ms_growth_text(leak, per, sizeof per); /* "+40.00 MiB every 4 iterations" */
  else if (leak) {
    ms_format_bytes((int64_t)leak->bytes_per_iteration, per, sizeof per);
    strncat(per, " per iteration", sizeof per - strlen(per) - 1);
  }
  if (a.ngraphs) ms_kept_graph_text(&a, 0, graph, sizeof graph);
  ms_report_options o = {.max_frames = brief ? 1 : 3};
  if (brief) {
    if (growing)
      printf("%s: peak %s allocated, %s at the snapshot; leak: %s, %s\n", shown, b1, b3, ms_leak_kind_name(leak->kind), per);
    else if (growth == MS_GROWTH_NONE)
      printf("%s: peak %s allocated, %s at the snapshot; no growth across %zu iterations\n", shown, b1, b3, a.niters);
    else
      printf("%s: peak %s allocated, %s at the snapshot; no leak candidate\n", shown, b1, b3);
    if (growing) ms_print_stack(&s, leak->stack_id, ms_site_note(&a, leak), &o, "    ", stdout);
    if (graph[0]) printf("    %s\n", graph);
    ms_print_best_suggestion(&a, "    ", stdout);
  } else {
    printf("\nsnapshot %s\n", shown);
    printf("  peak %s allocated, %s reserved; %s allocated at the snapshot\n", b1, b2, b3);
    print_paths(&a, f, s.import_source[0] != '\0', "  ");
    if (growing) {
      if (graph[0]) printf("  %s\n", graph);
      printf("  first leak candidate: %s, %s, %lld blocks live at the snapshot\n", ms_leak_kind_name(leak->kind), per,
             (long long)leak->end_count);
      ms_print_stack(&s, leak->stack_id, ms_site_note(&a, leak), &o, "      ", stdout);
    } else {
      /* nothing grows: say so, then what is held, without calling it a leak */
      if (growth == MS_GROWTH_NONE) printf("  no growth across %zu iterations\n", a.niters);
      else if (leak) printf("  growth cannot be told: %s (two are needed)\n", a.niters ? "one iteration" : "no iterations");
      size_t held_sites;
      ptrdiff_t largest;
      int64_t held = ms_held_at_snapshot(&a, &held_sites, &largest);
      if (largest >= 0) {
        const ms_site *big = &a.sites[largest];
        char h[32], hb[32];
        ms_format_bytes(held, h, sizeof h);
        ms_format_bytes(big->end_bytes, hb, sizeof hb);
        printf("  held at the snapshot: %s in %zu sites; the largest, %s (%s):\n", h, held_sites, hb,
               ms_category_name(&a, big->held_category));
        ms_print_stack(&s, big->stack_id, ms_site_note(&a, big), &o, "      ", stdout);
      } else if (!leak) {
        printf("  nothing held at the snapshot\n");
      }
    }
    if (a.nooms) printf("  %zu out-of-memory errors recorded\n", a.nooms);
    ms_print_best_suggestion(&a, "  ", stdout);
  }
  char page[PATH_MAX + 8];
  size_t n = strlen(shown);
  snprintf(page, sizeof page, "%.*s.html", (int)(n > 3 && !strcmp(shown + n - 3, ".db") ? n - 3 : n), shown);
  if (html) {
    if (ms_write_html(page, &a, 1, NULL) == 0) printf("%spage:   %s\n", brief ? "    " : "  ", page);
  } else if (!brief) {
    printf("  report: memsnap analyze %s\n", shown);
    printf("  page:   memsnap analyze --html %s %s\n", page, shown);
  }
  ms_analysis_free(&a);
  free(suggestions);
  ms_close(&s);
}

/* ---- the command ------------------------------------------------------------------------- */

static int signal_number(const char *name) {
  const char *n = strncmp(name, "SIG", 3) == 0 ? name + 3 : name;
  if (!strcmp(n, "USR1")) return SIGUSR1;
  if (!strcmp(n, "USR2")) return SIGUSR2;
  char *end;
  long v = strtol(name, &end, 10);
  return (*name && !*end && v > 0 && v < NSIG) ? (int)v : 0;
}

static int parse(int argc, char **argv, run_options *o) {
  int i = 1;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(arg, "--")) {
      i++;
      break;
    }
    if (arg[0] != '-') break; /* the program */
    if ((!strcmp(arg, "-o") || !strcmp(arg, "--output")) && has_value) o->output = argv[++i];
    else if (!strcmp(arg, "--stacks") && has_value) o->stacks = argv[++i];
    else if (!strcmp(arg, "--max-entries") && has_value) o->max_entries = argv[++i];
    else if (!strcmp(arg, "--dump-on-oom") && has_value) o->dump_on_oom = argv[++i];
    else if (!strcmp(arg, "--signal") && has_value) o->signal_name = argv[++i];
    else if (!strcmp(arg, "--html")) o->html = true;
    else if (!strcmp(arg, "--cache")) o->cache = true;
    else if (!strcmp(arg, "--no-torch-blocks")) o->no_torch_blocks = true;
    else if (!strcmp(arg, "--keep-arena")) o->keep_arena = true;
    else if (!strcmp(arg, "--no-suggest")) o->no_suggest = true;
    else if (!strcmp(arg, "--live")) o->live = true;
    else if (!strcmp(arg, "-q") || !strcmp(arg, "--quiet")) o->quiet = true;
    else if (!strcmp(arg, "--mode") && has_value) {
      const char *m = argv[++i];
      size_t k = 0;
      while (k < sizeof mode_names / sizeof *mode_names && strcmp(m, mode_names[k])) k++;
      if (k == sizeof mode_names / sizeof *mode_names)
        return ms_usage_error(&ms_run_command, "unknown mode '%s' (auto, allocator, torch-native, intercept, "
                              "allocator+intercept, audit)", m);
      o->mode = (run_mode)k;
    } else {
      return ms_unknown_option(&ms_run_command, arg, !has_value);
    }
  }
  if (i >= argc) return ms_usage_error(&ms_run_command, "no program given (memsnap run [options] -- PROGRAM [ARGS...])");
  o->program = argv + i;
  if (o->stacks && strcmp(o->stacks, "none") && strcmp(o->stacks, "native") && strcmp(o->stacks, "python") &&
      strcmp(o->stacks, "all"))
    return ms_usage_error(&ms_run_command, "--stacks takes none, native, python or all ('%s')", o->stacks);
  if (o->max_entries) {
    char *end;
    long long v = strtoll(o->max_entries, &end, 10);
    if (!*o->max_entries || *end || v < 16) return ms_usage_error(&ms_run_command, "--max-entries takes a number of events, 16 or more");
  }
  if (o->signal_name && !signal_number(o->signal_name))
    return ms_usage_error(&ms_run_command, "--signal takes USR1, USR2 or a signal number ('%s')", o->signal_name);
  return 0;
}

static int cmd_run(int argc, char **argv) {
  run_options o = {.output = "memsnap-%p.db"};
  int rc = parse(argc, argv, &o);
  if (rc) return rc;
  run_mode mode = o.mode;
  runs_kind runs = runs_python(o.program[0]);
  if (mode == MODE_AUTO) mode = runs != RUNS_OTHER && !o.cache ? MODE_BOTH : MODE_INTERCEPT;
  if (o.cache && mode != MODE_INTERCEPT && mode != MODE_AUDIT)
    return ms_usage_error(&ms_run_command, "--cache serves intercepted cudaMalloc calls: it needs --mode intercept or "
                          "audit (not %s)", mode_names[mode]);
  char bin[PATH_MAX], manifest[] = "/tmp/memsnap-run-XXXXXX";
  if (self_dir(bin, sizeof bin) != 0) {
    fprintf(stderr, "error: run: cannot find memsnap's own directory (/proc/self/exe)\n");
    return 1;
  }
  int fd = mkstemp(manifest);
  if (fd < 0) {
    fprintf(stderr, "error: run: cannot create a file in /tmp: %s\n", strerror(errno));
    return 1;
  }
  close(fd);
  char py_probe[PATH_MAX];
  if (o.mode == MODE_AUTO && runs == RUNS_SHELL && mode == MODE_BOTH && python_dir(bin, py_probe, sizeof py_probe) != 0)
    mode = MODE_INTERCEPT; /* a shell without memsnap's Python package beside this command: as before */
  if (prepare_env(&o, mode, bin, manifest) != 0) {
    unlink(manifest);
    return 1;
  }
  if (!o.quiet)
    fprintf(stderr, "memsnap run: recording '%s' (mode %s%s)\n", o.program[0], mode_names[mode],
            o.mode == MODE_AUTO && mode == MODE_BOTH ? ": memsnap's allocator if it imports torch, the interposer for "
                                                       "all other device memory" : "");
  fflush(NULL);
  pid_t child = 0;
  uint64_t end_ns = 0;
  int status = run_program(o.program, o.signal_name ? signal_number(o.signal_name) : 0, manifest, o.live, &child, &end_ns);
  static found f; /* large: its live mappings' paths */
  memset(&f, 0, sizeof f);
  read_manifest(manifest, &f);
  if (status < 0) {
    recover_dead(&f, 0, 0, 0, true); /* nothing ran: nothing to keep */
    unlink(manifest);
    return 127;
  }
  unlink(manifest);
  int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (!o.quiet) {
    if (WIFSIGNALED(status))
      printf("\nmemsnap run: '%s' was killed by signal %d (%s)\n", o.program[0], WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
      printf("\nmemsnap run: '%s' exited with status %d\n", o.program[0], exit_code);
  }
  recover_dead(&f, child, status, end_ns, o.quiet);
  if (!o.quiet) {
    if (f.n == 0) {
      printf("memsnap run: no snapshot was written: ");
      if (WIFSIGNALED(status))
        printf("it was killed before it recorded anything\n");
      else
        printf("no process of the program allocated device memory that mode %s sees%s\n", mode_names[mode],
               mode == MODE_ALLOCATOR ? " (it never imported torch? try the default, allocator+intercept)" : "");
    }
    bool brief = f.n > 3; /* one screen */
    if (brief) printf("\n%zu snapshots\n", f.n);
    for (size_t i = 0; i < f.n; i++) print_summary(f.paths[i], o.html, brief, &f, o.no_suggest);
    if (f.n > 1) { /* side by side, leak candidates matched across processes */
      printf("\nall of them: memsnap analyze");
      for (size_t i = 0; i < f.n && i < 64; i++) {
        char shown[PATH_MAX];
        snprintf(shown, sizeof shown, "%s", f.paths[i]);
        ms_neutralise(shown);
        printf(" %s", shown);
      }
      printf("\n");
    }
  }
  for (size_t i = 0; i < f.n; i++) free(f.paths[i]);
  free(f.paths);
  fflush(stdout);
  return exit_code;
}

const ms_command ms_run_command = {"run", cmd_run,
     "memsnap run [-o PATH] [--mode MODE] [--stacks S] [--max-entries N] [--dump-on-oom PATH]\n"
     "            [--signal SIG] [--cache] [--no-torch-blocks] [--keep-arena] [--html] [--live] [--no-suggest] [-q]\n"
     "            -- PROGRAM [ARGS...]\n"
     "                            run a program unchanged, recording its GPU memory",
     "  PROGRAM [ARGS...]   the program, run unchanged; its exit status is memsnap's (128+N when\n"
     "                      signal N ended it). Every process it starts records too, each in its own file\n"
     "  -o, --output PATH   the snapshot to write at exit (default memsnap-%p.db); %p pid, %r rank\n"
     "                      (RANK, LOCAL_RANK...: torchrun), %h host, %t time, %% a percent sign\n"
     "  --mode MODE         how memory is seen (default auto: allocator+intercept for Python programs\n"
     "                      and shells, so that one that never imports torch is recorded too; else\n"
     "                      intercept):\n"
     "                        allocator     memsnap becomes PyTorch's allocator when torch is imported\n"
     "                        torch-native  PyTorch's allocator and recorder; its snapshot is imported\n"
     "                        intercept     an LD_PRELOAD library records every cudaMalloc, cuMemAlloc,\n"
     "                                      cuMemMap... of any program (static cudart too); in a\n"
     "                                      PyTorch process PyTorch's recorder also writes its blocks\n"
     "                                      (tensors inside those segments) to PATH.torch.db\n"
     "                        allocator+intercept  both: PyTorch's blocks and every other library's\n"
     "                        audit         intercept, the library loaded with LD_AUDIT (bindings through\n"
     "                                      RTLD_DEEPBIND libraries and dlsym seen by the run-time linker)\n"
     "  --stacks S          stacks recorded: none, native, python or all (default all)\n"
     "  --max-entries N     events kept (default 100000; older ones are dropped and counted)\n"
     "  --dump-on-oom PATH  also write a snapshot at the first out-of-memory (same patterns)\n"
     "  --signal SIG        USR1, USR2 or a number: the program writes a snapshot to -o's path when\n"
     "                      it gets SIG; SIGTERM or SIGHUP sent to memsnap run asks for one first\n"
     "  --cache             intercept: serve cudaMalloc/cudaFree (and cuMemAlloc/cuMemFree in the\n"
     "                      primary context) from memsnap's caching allocator; cudaFree still waits\n"
     "                      for the device, as it does without memsnap\n"
     "  --no-torch-blocks   intercept in a PyTorch process: segments only, no PATH.torch.db (PyTorch's\n"
     "                      recorder costs some 8% of a training step)\n"
     "  --keep-arena        JAX: keep XLA's arena (by default, where the interposer records, XLA allocates\n"
     "                      each array from the driver: XLA_PYTHON_CLIENT_ALLOCATOR=platform, slower);\n"
     "                      CuPy: keep its memory pool (by default, in the allocator modes, CuPy\n"
     "                      allocates from memsnap's allocator: memsnap.cupy)\n"
     "  --html              write each snapshot's page too (PATH with .html for .db)\n"
     "  --live              show the program's memory while it runs (memsnap top's view; q hides it)\n"
     "  --no-suggest        no suggestion of allocator settings in the summary (the replay's sweep,\n"
     "                      as memsnap analyze runs it: docs/replay.md)\n"
     "  -q, --quiet         print nothing but the program's output\n"
     "  docs/run.md explains the modes, what each sees and their limits\n",
     false};
