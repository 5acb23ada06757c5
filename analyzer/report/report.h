/* report.h: an analysis written out (prefix ms_): as text for a terminal (text.c, its numbers and
 * stacks written by format.c), as JSON (json.c; docs/analysis-json.md), what holds a candidate in
 * both (causes.c) and as the report page (page.c, page_more.c, and page_set.c for
 * the page's documents: a snapshot on several devices gives one per device); a prediction's page
 * (page_predict.c). Reports format what the analysis and the replay computed; they call down
 * into replay/, analysis/, read/ and util/ only.
 */
#ifndef MEMSNAP_REPORT_H
#define MEMSNAP_REPORT_H

#include "analysis/analysis.h"
#include "replay/replay.h"

/* ---- the whole run (wholerun.c) --------------------------------------------------------- */

/* The JSON's `run` object (null without a run log) and, in `iterations`, the iterations before
 * the window first (before_window true, index null) and each window iteration's run_index. */
struct cJSON;
void ms_json_whole_run(struct cJSON *root, struct cJSON *iterations, const ms_analysis *a);

/* ---- the page's data beyond page.c's (page_more.c) ----------------------------------------- */

/* page.c's tables, which page_more.c adds to and refers to. */
struct cJSON;
typedef struct ms_page_refs {
  void *ctx;
  uint32_t (*stack)(void *ctx, uint32_t stack_id); /* adds a stack (its frames that matter): its page id */
  int (*frame)(void *ctx, uint32_t frame_id);      /* adds a frame: its page index */
  int (*cut)(void *ctx);                           /* the frame "(outer frames not shown)": its index */
  const struct cJSON *stacks;                      /* the page's stacks, keyed by id */
} ms_page_refs;
/* The segment spans and the whole stacks behind the frames that matter, as the text
 * `,"segment_spans":{...},"all_stacks":{...}` to append to the page's document (docs/viewer.md;
 * a->timeline built). NULL when out of memory; the caller frees it. */
char *ms_page_more(const ms_analysis *a, const ms_page_refs *r);
/* ---- the documents of a report page (page_set.c) ----------------------------------------- */

/* A device of a snapshot, read through the reader's device filter and analyzed by itself. */
typedef struct ms_page_device {
  ms_snapshot snap;
  ms_analysis analysis;
  bool opened, analyzed;
} ms_page_device;

typedef struct ms_page_set {
  ms_analysis **docs; /* what the page shows, in order: the caller's analyses and the devices' */
  size_t ndocs;
  ms_page_device **devices;
  size_t ndevices;
  char error[2600];
} ms_page_set;

/* The page's documents for analyses a[0..n): each one, or for a snapshot with events or
 * segments on several devices, one per device (shown as "PATH, device N"), analyzed as o says
 * (NULL: defaults). 0, or -1 with ps->error set; either way ms_page_set_free
 * closes what it opened. */
int ms_page_set_build(ms_page_set *ps, ms_analysis *a, size_t n, const ms_analyze_options *o);
void ms_page_set_free(ms_page_set *ps);
/* Writes the report page of the n analyses (page.c; a snapshot on several devices gives a
 * document per device, analyzed as o says: page_set.c) to `out`, atomically, never over one
 * of the snapshots. 0, or 1 (message printed). */
int ms_write_html(const char *out, ms_analysis *a, size_t n, const ms_analyze_options *o);
/* The analysis's curve as the page has it: {"t": [...], "lo": [...], "hi": [...]} (page.c). */
struct cJSON *ms_page_curve_json(const ms_curve *c);
/* Writes a page to `out` atomically (a temporary file beside it, renamed over it): fill(f, arg)
 * writes it, 0 or -1; on -1 the message gives why(arg) (NULL, or it returning NULL: "out of
 * memory"). 0, or 1 (message printed; nothing left behind). page.c. */
int ms_write_page(const char *out, int (*fill)(FILE *f, void *arg), void *arg, const char *(*why)(void *arg));

/* ---- the page of a prediction (page_predict.c) ------------------------------------------- */

/* One predicted history drawn: its replay (config, change, size, peaks) and its timeline. */
typedef struct ms_prediction_timeline {
  const ms_replay_timeline *timeline;
  const ms_replay_result *result;
  bool fits;       /* on the card, as the answer says it */
  const char *why; /* why it is drawn, in words ("--at 16", "the smallest change that fits") */
  const ms_whatif *whatif; /* names the instances its change checkpoints (NULL: no change asked) */
} ms_prediction_timeline;

typedef struct ms_prediction_page {
  const struct cJSON *answer;    /* the answer, as --json prints it */
  const ms_analysis *recorded;   /* the base run analyzed (the device drawn, when on several) */
  int64_t recorded_at;           /* its size */
  int recorded_device, recorded_devices;
  uint64_t capacity;             /* the card given (--capacity, --device); 0: the recorded one */
  const ms_prediction_timeline *predicted;
  int npredicted;
} ms_prediction_page;
/* Writes web/predict.html with pg as its document to `out`, atomically, never over one of
 * inputs[0..n) (the runs). 0, or 1 (message printed). */
int ms_write_prediction_html(const char *out, const ms_prediction_page *pg, const char *const *inputs, size_t n);
/* Writes web/predict.html with `json` (the document) embedded to out: 0, or -1 when writing fails. */
int ms_report_prediction_html(const char *json, FILE *out);

/* ---- output (text.c) ------------------------------------------------------------------ */

typedef struct ms_report_options {
  bool full_stacks;
  bool full_names; /* whole C++ names, not short ones */
  int max_frames;  /* frames shown per stack when not full */
} ms_report_options;

/* Prints a stack, one frame a line after `indent` (the frames that matter, or all of them with
 * full_stacks), or `note` in parentheses when stack_id is 0 ("no stack recorded" if NULL). */
void ms_print_stack(const ms_snapshot *s, uint32_t stack_id, const char *note, const ms_report_options *o,
                    const char *indent, FILE *out);

void ms_report_text(const ms_analysis *a, const ms_report_options *o, FILE *out);
/* One line per snapshot (one per rank, say): peaks, iterations, the first leak candidate; then
 * the leading leak candidates matched across the snapshots (match.c), one row each. */
void ms_report_side_by_side(const ms_analysis *a, size_t n, FILE *out);
/* Writes the report page (page.c): web/viewer.html with the analyses embedded, a data document
 * each (several: the page has a selector between them); 0, or -1 when out of memory, when the
 * page's pass over the events fails (s->error set) or when writing to out fails (out may then
 * hold part of the page). */
int ms_report_html(ms_analysis *const *a, size_t n, FILE *out);
/* Bytes ("1.50 MiB") and times ("12.3 ms") as the text reports write them, into out[len]. */
void ms_format_bytes(int64_t bytes, char *out, size_t len);
void ms_format_ns(int64_t ns, char *out, size_t len);

/* ---- two analyses compared (diff.c) -------------------------------------------------------- */

/* Prints the `most` largest changes of c (then the others summed on one line), each with its
 * stack (a[1]'s where the site is there), after `indent`; names[1] names the second side in "new
 * in B" and "gone in B". */
void ms_report_diff_sites(const ms_analysis *a, ms_comparison *c, size_t most, const char *const names[2],
                          const ms_report_options *o, const char *indent, FILE *out);
/* The comparison as `memsnap diff --json`'s document; NULL when out of memory. */
struct cJSON *ms_diff_json(const ms_analysis *a, const ms_comparison *c);

/* ---- the ranks of a job (ranks.c) --------------------------------------------------------- */

/* The table of ranks r[0..n) (the snapshots paths[0..n)), the median rank and the one that
 * stands out (v); with pair (the median rank's analysis, then the outlier's) and their
 * comparison c, the sites that make the difference (NULL: not shown). */
void ms_report_ranks_text(const ms_rank *r, const char *const *paths, size_t n, const ms_ranks_verdict *v,
                          const ms_analysis *pair, ms_comparison *c, const ms_report_options *o, FILE *out);
/* The same as JSON: {"ranks": {snapshots, median, outlier, difference}}; NULL when out of memory. */
struct cJSON *ms_ranks_json(const ms_rank *r, const char *const *paths, size_t n, const ms_ranks_verdict *v,
                            const ms_analysis *pair, const ms_comparison *c);

/* ---- the analysis as JSON (json.c; docs/analysis-json.md) ----------------------- */

struct cJSON;
/* What a caller of ms_json_analysis chooses; {0} (or NULL) is `memsnap analyze --json`. */
typedef struct ms_json_options {
  size_t max_leaks;         /* leak candidates listed; 0: all */
  size_t max_invalid_sites; /* invalid_frees' sites listed; 0: all */
  size_t max_retries;       /* retries listed (the first ones); 0: all the analysis kept */
  /* NULL: each entry's `stack` and `full_stack` hold its frames. Else its `stack` is
     stack_ref(ctx, site, stack_id), a number into the caller's own table of stacks (site: the
     analysis site of a site's entry, -1 for one event's stack), and full_stack is left out. */
  int64_t (*stack_ref)(void *ctx, int64_t site, uint32_t stack_id);
  void *ctx;
} ms_json_options;

/* Adds the analysis's sections (summary, live_at_peak, categories_at_peak, iterations, leaks,
 * oom, invalid_frees, top_sites, fragmentation, external, retries, releases, suggestions,
 * suggestions_sweep) to the object `root`, as options `o` (NULL: as --json) say. 0, or -1 when out of memory (root may hold part of them; the caller deletes it). */
int ms_json_analysis(struct cJSON *root, const ms_analysis *a, const ms_json_options *o);
/* Prints the analysis as JSON (`memsnap analyze --json`) and a newline; 0, or -1 when out of
 * memory (nothing printed). */
int ms_report_json(const ms_analysis *a, FILE *out);
/* Prints `value` as indented JSON (a newline after it with `newline`) and deletes it. 0, or -1
 * when it could not be made (out of memory; NULL given). */
int ms_json_print(struct cJSON *value, bool newline, FILE *out);
/* The leak candidates of several analyses matched across them, as a JSON array (the
 * "matched_leaks" of analyze --json with several snapshots); 0, or -1 when out of memory
 * (nothing printed). */
int ms_report_json_matched(const ms_analysis *a, size_t n, FILE *out);
/* Adds a site's stack keys to a JSON object (stack and full_stack with frames, stack_id, and
 * stack_note for a site without a stack); a key that cannot be allocated is left out. */
void ms_json_site_stacks(struct cJSON *o, const ms_analysis *a, uint32_t site);
/* ---- what holds memory (causes.c): holders and the garbage collector ------------------------ */
/* Under a leak candidate: its holders (grouped chains) and, when only the collector frees it, the
 * reference cycles line and its fix; each line starts with `indent`. */
void ms_report_causes_site(const ms_analysis *a, uint32_t site, const char *indent, FILE *out);
/* The holder walk's line and the garbage collector's section (runs, sites held by cycles); nothing
 * for a snapshot with neither. */
void ms_report_causes_text(const ms_analysis *a, const ms_report_options *o, FILE *out);
/* A site's keys `holders`, `reference_cycles`, `gc_frees` (docs/analysis-json.md). */
void ms_json_causes_site(struct cJSON *o, const ms_analysis *a, uint32_t site);
/* Kept graph i's holders (the chains through the autograd graph of a tensor Python holds, grouped
 * by what holds it): printed under it, `holders` of its JSON entry, and what holds that tensor (the
 * chain before "through its autograd graph") into out: false, out empty, when none was found. */
void ms_report_causes_graph(const ms_analysis *a, size_t i, const char *indent, FILE *out);
void ms_json_causes_graph(struct cJSON *o, const ms_analysis *a, size_t i);
bool ms_graph_kept_by(const ms_analysis *a, size_t i, char *out, size_t len);
/* The document's keys `holders_walk` and `gc`; site_keys (json.c's, as page.c hands page_more.c its
 * tables: causes.c never calls back into json.c) adds a cycle site's stack keys. */
void ms_json_causes(struct cJSON *root, const ms_analysis *a,
                    void (*site_keys)(struct cJSON *o, const ms_analysis *a, uint32_t site));
/* Adds "pid" and "host" to a JSON object, null where the snapshot does not say (imported); a key
 * that cannot be allocated is left out. */
void ms_json_process(struct cJSON *o, const ms_snapshot *s);
/* One line on the best suggestion of the replay (a->suggestions), after `indent`, for `memsnap
 * run`'s summary (text.c; nothing when there is none and the sweep did not stop early). */
void ms_print_best_suggestion(const ms_analysis *a, const char *indent, FILE *out);
/* How a growing candidate grew, into out[len]: "+40.00 MiB every 4 iterations" (growth in steps),
 * else "+1.00 MiB per iteration". */
void ms_growth_text(const ms_site *st, char *out, size_t len);
/* Kept graph candidate i of a (a->graphs) in a sentence, into out[len]: "480.00 MiB in 3 autograd
 * graphs kept alive: the forward of Net at evaluate (train.py:15) ran with grad enabled ...". */
void ms_kept_graph_text(const ms_analysis *a, size_t i, char *out, size_t len);

/* ---- live mappings (live.c): `memsnap top`, `memsnap run`, `memsnap recover` ------------- */

#include "memsnap.h"

/* The directory that live mappings are in: MEMSNAP_LIVE_DIR, else this user's /dev/shm/memsnap-UID
 * (else under TMPDIR or /tmp), as libmemsnap chooses it. */
const char *ms_live_dir(void);
typedef struct ms_live_entry {
  char path[1100];
  memsnap_live_info_t info;
} ms_live_entry;
/* The live mappings in `dir` (only those of running processes with `alive_only`), running ones
 * first, by rank then pid, into a new array (caller frees); returns how many (0: none, or no
 * directory). Links, and other users' files, are not listed (memsnap_live_info refuses them). */
size_t ms_live_list(const char *dir, bool alive_only, ms_live_entry **out);
/* Removes the mappings in `dir` that a process which no longer runs was still making when it
 * died (memsnap-PID.live.new: killed between creating and naming it; they hold nothing to
 * recover), this user's own regular files only. Returns how many. */
size_t ms_live_sweep_unfinished(const char *dir);
/* What is said of a process that ended without a word (no snapshot, no signal it watched). */
#define MS_END_UNSEEN "killed by SIGKILL or ended by _exit, or by a signal it did not watch"
/* "HOW at 41.2 s, 3 ms after its last allocation" (text.c; times since the recording's start; end_ns 0:
 * "HOW (when is not known; its last event at ...)") into out[len]. */
void ms_describe_end(const char *how, uint64_t end_ns, uint64_t last_alloc_ns, uint64_t last_event_ns, char *out,
                     size_t len);
/* "SIGKILL" ("signal 70" for one without a name) into out[len]. */
void ms_signal_name(int sig, char *out, size_t len);
/* "killed by SIGKILL at 41.2 s, 3 ms after its last allocation" (times from `info`, which
 * memsnap_recover filled). */
void ms_live_describe_end(const memsnap_live_info_t *info, int end_signal, int exit_status, char *out, size_t len);
/* (text.c) How the process of a snapshot written from its live mapping after it ended died, in
 * ms_describe_end's words from the snapshot's meta (ended, end_ns, last_alloc_ns), into out[len]:
 * true; false (out untouched) for a snapshot the process wrote itself (at its exit, a dump) or one
 * read while it ran. */
bool ms_snapshot_death(const ms_snapshot *s, char *out, size_t len);

#define MS_LIVE_SITES 5
#define MS_LIVE_ITERS 8
typedef struct ms_live_site {
  int64_t bytes, count;
  double per_iteration;
  char where[300];
} ms_live_site;
/* One frame of the live view of a process. */
#define MS_LIVE_RUN_GROUPS 60
typedef struct ms_live_view {
  memsnap_live_info_t info;
  int64_t allocated, reserved, peak_allocated, peak_reserved;
  size_t iterations;
  int64_t iter_peak[MS_LIVE_ITERS]; /* the last iterations' allocated peaks */
  size_t niter_peaks;
  ms_live_site growing[MS_LIVE_SITES], largest[MS_LIVE_SITES];
  size_t ngrowing, nlargest;
  /* the whole run (its run log): iterations finished, the highest iteration peak and where, and
     the iteration peaks in up to MS_LIVE_RUN_GROUPS groups of run_group iterations (the highest of
     each); run_iterations 0: none */
  int64_t run_iterations, run_peak, run_peak_iteration, run_group;
  int64_t run_peaks[MS_LIVE_RUN_GROUPS];
  size_t nrun_peaks;
} ms_live_view;
/* Reads a live mapping as it is (its process is not stopped) and analyzes it: 0, or -1 with the
 * reason in err. */
int ms_live_frame(const char *live_path, ms_live_view *v, char *err, size_t errlen);
/* The frame as text (ANSI; each line clears to its end), `brief`: three lines. */
void ms_live_print_text(const ms_live_view *v, bool brief, FILE *out);
/* The frame as a JSON object (caller deletes): pid, program, allocated_bytes, reserved_bytes,
 * peak_allocated_bytes, peak_reserved_bytes, iterations, growing... (docs/recover.md). */
struct cJSON *ms_live_json(const ms_live_view *v);

/* One screen of the live view: every mapping's frame (brief with several), from the top left
 * (ANSI), `title` in its first line. */
void ms_live_draw(const char *const *paths, size_t n, const char *title, FILE *out);
/* The terminal in raw mode on the alternate screen (on), or as it was (off); nothing when standard
 * input is not a terminal. */
void ms_term_raw(bool on);
/* A key from standard input within timeout_ms: the character, -1 none, -2 end of input. */
int ms_term_key(int timeout_ms);

#endif
