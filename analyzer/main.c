/* main.c: the memsnap command-line tool: one table of commands, one function each.
 *
 * Exit codes: 0 success, 1 error, 2 usage. Messages: "error: ..." on stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"
#include "commands.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *usage;
  const char *details; /* `memsnap help COMMAND`: the arguments, one a line */
  bool folds;          /* prints stacks: `help` lists the built-in frames it folds */
} command;

static int cmd_help(int argc, char **argv);

static int cmd_version(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[0], "version")) return ms_usage_error("version", "no arguments expected ('%s')", argv[1]);
  (void)argv;
  printf("memsnap %s\n", MEMSNAP_VERSION);
  return 0;
}

/* Prints the options table: the environment variable, its default and what it does. */
static int cmd_options(int argc, char **argv) {
  if (argc > 1) return ms_usage_error("options", "no arguments expected ('%s')", argv[1]);
  (void)argv;
  const char *var, *def, *comment;
  for (int i = 0; (var = memsnap_option_info(i, &def, &comment)) != NULL; i++)
    printf("%-40s %-10s %s\n", var, def, comment);
  return 0;
}

#define STACK_OPTIONS                                                                                       \
  "  --full-stacks       every frame of every stack (default: the frames that matter)\n"                     \
  "  --full-names        whole C++ names (default: short, templates and parameters collapsed: f<>())\n"      \
  "  --frames N          frames that matter shown per stack, 1 to 4096 (default 4)\n"                        \
  "  --fold PATTERNS     more frames to fold: comma-separated globs over a frame's short name without\n"     \
  "                      its \"()\", or NAME@FILE to match its source file or module too\n"          \
  "                      (repeatable, 16 at most)\n"
static const command commands[] = {
    {"analyze", cmd_analyze,
     "memsnap analyze [--json | --html OUT.html] [--full-stacks] [--full-names] [--frames N]\n"
     "                [--fold PATTERNS] [--iterations LABEL] SNAPSHOT.db...\n"
     "                            peaks, iterations, leak candidates, OOMs, top sites",
     "  SNAPSHOT.db...      snapshots to analyze; several (one per rank, say): a table side by side\n"
     "                      and their leak candidates matched by site, then each report\n"
     "  --json              the analysis as JSON (docs/analysis-json.md)\n"
     "  --html OUT.html     the report as a self-contained page (docs/viewer.md); several snapshots,\n"
     "                      or one with memory on several devices: one page, a selector in its header\n"
     "                      switching every view between them (a snapshot's devices one by one)\n" STACK_OPTIONS
     "  --iterations LABEL  the mark or range label that starts an iteration (default: the one\n"
     "                      that repeats most, else inferred from the allocation pattern)\n",
     true},
    {"diff", cmd_diff,
     "memsnap diff [--json] [--full-stacks] [--full-names] [--frames N] [--fold PATTERNS] A.db B.db\n"
     "                            what changed between two snapshots, by allocation site",
     "  A.db B.db           two snapshots, of one process or of two (two runs, two ranks): sites are\n"
     "                      matched by function, file and line (module and offset when unnamed)\n"
     "  --json              the comparison as JSON (docs/analysis-json.md)\n" STACK_OPTIONS,
     true},
    {"info", cmd_info, "memsnap info SNAPSHOT.db... what a snapshot holds",
     "  SNAPSHOT.db...      snapshots: format, process, recording, events, devices, segments, blocks\n", false},
    {"import", cmd_import,
     "memsnap import SNAPSHOT.pickle[.gz] -o SNAPSHOT.db\n"
     "                            a PyTorch memory snapshot as a memsnap snapshot",
     "  SNAPSHOT.pickle     what torch.cuda.memory._dump_snapshot() wrote (gzip-compressed or not)\n"
     "  -o, --output FILE   the snapshot to write (docs/pytorch-snapshots.md)\n",
     false},
    {"export", cmd_export,
     "memsnap export [--format pytorch] SNAPSHOT.db -o OUT.pickle[.gz]\n"
     "                            a snapshot as a PyTorch memory snapshot",
     "  SNAPSHOT.db         the snapshot to export\n"
     "  --format pytorch    the only format: PyTorch's snapshot pickle (torch.cuda._memory_viz)\n"
     "  -o, --output FILE   the pickle to write, gzip-compressed when it ends in .gz\n",
     false},
    {"run", cmd_run,
     "memsnap run [-o PATH] [--mode MODE] [--stacks S] [--max-entries N] [--dump-on-oom PATH]\n"
     "            [--signal SIG] [--cache] [--no-torch-blocks] [--html] [-q] -- PROGRAM [ARGS...]\n"
     "                            run a program unchanged, recording its GPU memory",
     "  PROGRAM [ARGS...]   the program, run unchanged; its exit status is memsnap's (128+N when\n"
     "                      signal N ended it). Every process it starts records too, each in its own file\n"
     "  -o, --output PATH   the snapshot to write at exit (default memsnap-%p.db); %p pid, %r rank\n"
     "                      (RANK, LOCAL_RANK...: torchrun), %h host, %t time, %% a percent sign\n"
     "  --mode MODE         how memory is seen (default auto: allocator for Python programs, else\n"
     "                      intercept):\n"
     "                        allocator     memsnap becomes PyTorch's allocator when torch is imported\n"
     "                        torch-native  PyTorch's allocator and recorder; its snapshot is imported\n"
     "                        intercept     an LD_PRELOAD library records every cudaMalloc, cuMemAlloc,\n"
     "                                      cuMemMap... of any program (static cudart too); in a\n"
     "                                      PyTorch process PyTorch's recorder also writes its blocks\n"
     "                                      (tensors inside those segments) to PATH.torch.db\n"
     "                        allocator+intercept  both: PyTorch's blocks and every other library's\n"
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
     "  --html              write each snapshot's page too (PATH with .html for .db)\n"
     "  -q, --quiet         print nothing but the program's output\n"
     "  docs/run.md explains the modes, what each sees and their limits\n",
     false},
    {"replay", cmd_replay,
     "memsnap replay [--set KEY=VALUE]... [--capacity SIZE] [--json] [--sweep [--jobs N]] SNAPSHOT.db\n"
     "                            the recorded allocations replayed through memsnap's allocator under\n"
     "                            other settings: peak reserved, fragmentation, OOM (docs/replay.md)",
     "  SNAPSHOT.db         a memsnap snapshot, or a PyTorch snapshot made one by `memsnap import`\n"
     "  --set KEY=VALUE     a setting, over the recorded ones (repeatable; VALUE default: the\n"
     "                      default, whatever was recorded): max_split_size_mb,\n"
     "                      max_non_split_rounding_mb, roundup_power2_divisions (N or [256:1,>:4]),\n"
     "                      garbage_collection_threshold, expandable_segments (True/False),\n"
     "                      backend (native or cudaMallocAsync): PYTORCH_CUDA_ALLOC_CONF's keys;\n"
     "                      memory_fraction (set_per_process_memory_fraction)\n"
     "  --capacity SIZE     memory of each device (40G, 80GiB, 24000M; default: the recorded card's)\n"
     "  --json              the answer as JSON (docs/replay.md)\n"
     "  --sweep             try the grid of docs/replay.md (19 settings and the recorded ones) on all\n"
     "                      cores; a table ranked by peak reserved, the best first, and the\n"
     "                      PYTORCH_CUDA_ALLOC_CONF line to use\n"
     "  --jobs N            sweep workers (default: one per core)\n"
     "\n"
     "\n"
     "example: the resnet50 PyTorch snapshot of tests/data (memsnap import), on a 3.5 GiB card:\n"
     "  $ memsnap replay --sweep --capacity 3.5G r50.db\n"
     "  sweep of r50.db: 20 settings on 3.50 GiB per device, 2 at a time; recorded peak reserved 3.38 GiB\n"
     "  rank  peak reserved   vs rec.  fragmentation at peak  cudaMalloc  retries   OOM  PYTORCH_CUDA_ALLOC_CONF\n"
     "     1       2.96 GiB    -12.2%       31.95 MiB (1.1%)          24        0     -  expandable_segments:True\n"
     "     2       3.03 GiB    -10.1%       84.70 MiB (2.7%)         144        0     -  garbage_collection_threshold:0.6 (memory fraction 0.95)\n"
     "     5       3.26 GiB     -3.5%      142.63 MiB (4.3%)          24        0     -  roundup_power2_divisions:8\n"
     "    ...\n"
     "  best: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n",
     false},
    {"help", cmd_help, "memsnap help [COMMAND]      show this help, or a command's", "  COMMAND             a command\n", false},
    {"version", cmd_version, "memsnap version             print the version", "", false},
    {"options", cmd_options, "memsnap options             list the MEMSNAP_* environment variables", "", false},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
  fprintf(out, "usage: memsnap <command> [<args>]\n\ncommands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++) fprintf(out, "  %s\n", commands[i].usage);
}

int ms_output_status(void) {
  if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
  fprintf(stderr, "error: cannot write the output: %s\n", strerror(errno));
  return 1;
}

int ms_unknown_option(const char *name, const char *arg, bool last) {
  /* An option that takes a value, given last: its usage line shows it followed by the value's
     name ("--html OUT.html", "-o SNAPSHOT.db"). */
  size_t n = strlen(arg);
  for (size_t i = 0; last && n && i < NCOMMANDS; i++) {
    if (strcmp(commands[i].name, name) != 0) continue;
    for (const char *u = strstr(commands[i].usage, arg); u; u = strstr(u + 1, arg)) {
      bool whole = (u == commands[i].usage || u[-1] == ' ' || u[-1] == '[') && u[n] == ' ';
      if (whole && u[n + 1] && strchr("-|[]", u[n + 1]) == NULL)
        return ms_usage_error(name, "option '%s' needs a value", arg);
    }
  }
  return ms_usage_error(name, "unknown option '%s'", arg);
}

int ms_usage_error(const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "error: %s: ", name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0) fprintf(stderr, "usage: %s\n", commands[i].usage);
  return 2;
}

int ms_stack_option(const char *name, int argc, char **argv, int *i, ms_report_options *o, ms_fold *fold) {
  const char *arg = argv[*i];
  if (!strcmp(arg, "--full-stacks")) o->full_stacks = true;
  else if (!strcmp(arg, "--full-names")) o->full_names = true;
  else if (*i + 1 == argc || (strcmp(arg, "--frames") && strcmp(arg, "--fold"))) return 0;
  else if (!strcmp(arg, "--frames")) {
    o->max_frames = atoi(argv[++*i]);
    if (o->max_frames < 1 || o->max_frames > 4096) return ms_usage_error(name, "--frames takes 1 to 4096");
  } else if (ms_fold_add(fold, argv[++*i]) != 0) {
    return ms_usage_error(name, "at most %d --fold options", MS_FOLD_LISTS);
  }
  return 1;
}

/* `memsnap help [COMMAND]` (argv[0] "help"), `memsnap --help`, `memsnap COMMAND --help`. */
static int cmd_help(int argc, char **argv) {
  bool asked = !strcmp(argv[0], "help");
  if (!asked || argc == 1) {
    usage(stdout);
    return 0;
  }
  if (argc > 2) return ms_usage_error("help", "one command at most ('%s')", argv[2]);
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(commands[i].name, argv[1]) != 0) continue;
    printf("usage: %s\n%s%s", commands[i].usage, commands[i].details[0] ? "\n" : "", commands[i].details);
    if (commands[i].folds) {
      printf("\nframes folded in any case (--full-stacks shows them):\n");
      ms_fold_print_builtin(stdout);
    }
    return 0;
  }
  return ms_usage_error("help", "unknown command '%s'", argv[1]);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(argv[1], commands[i].name) != 0) continue;
    if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) /* memsnap diff --help */
      return cmd_help(2, (char *[]){"help", argv[1], NULL});
    return commands[i].run(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return cmd_help(argc, argv);
  if (!strcmp(argv[1], "--version")) return cmd_version(argc, argv);
  fprintf(stderr, "error: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
