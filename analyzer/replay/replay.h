/* replay.h: a snapshot's trace replayed through memsnap's own allocator (prefix ms_replay_):
 * engine.c replays one configuration on the simulated device in this process, sweep.c a grid of
 * them on every core and ranks them, suggest.c picks the analysis's suggestions from a sweep,
 * cards.c says how much memory a card has; align.c and predict.c (prefixes ms_history_,
 * ms_predict_) replay a history synthesised at another size from runs at two or three, whatif.c
 * (ms_whatif_) makes it as if the program had changed (checkpointing, another optimizer) and
 * candidates.c (ms_candidates_) finds the modules worth checkpointing when none is named, and
 * advise.c (ms_advise) tries the changes that make a size fit. It calls
 * down into analysis/ (the live blocks and the state before the history), read/ and libmemsnap.
 */
#ifndef MEMSNAP_REPLAY_H
#define MEMSNAP_REPLAY_H

#include "analysis/analysis.h"

/* ---- replaying a trace through memsnap's allocator (engine.c) -------------------
 *
 * `memsnap replay` (commands/replay.c) plays a snapshot's allocations and frees, in their recorded
 * order, per device and stream, into libmemsnap's own caching allocator running on the simulated
 * device, under settings of the user's choosing, and reports what that allocator did. Not to be
 * confused with livemap.c, which only follows which blocks are live. */

#define MS_REPLAY_MAX_SETTINGS 16
#define MS_REPLAY_DEVICES 64 /* the simulated device's limit (MEMSNAP_SIM_DEVICES) */
#define MS_REPLAY_TOP 5      /* sites listed as live at the first out of memory */
#define MS_REPLAY_NOTES 8

/* One setting, keyed by PyTorch's PYTORCH_CUDA_ALLOC_CONF name (max_split_size_mb,
 * roundup_power2_divisions, garbage_collection_threshold, expandable_segments,
 * max_non_split_rounding_mb, backend) or memory_fraction. */
typedef struct ms_replay_setting {
  char key[40];
  char value[216];
} ms_replay_setting;

typedef struct ms_replay_config {
  ms_replay_setting set[MS_REPLAY_MAX_SETTINGS];
  int n;
  uint64_t capacity; /* bytes of each simulated device; 0: the recorded capacity */
} ms_replay_config;

typedef struct ms_replay_device {
  bool used;
  /* the replay */
  int64_t peak_allocated, peak_reserved, allocated_at_peak; /* allocated when reserved peaked */
  int64_t external_peak; /* the most external memory held at once (in both peaks) */
  /* the allocator's own peaks, without the external memory: what torch.cuda.max_memory_allocated
     and max_memory_reserved report (the peaks above when nothing was external) */
  int64_t allocator_peak_allocated, allocator_peak_reserved;
  int64_t device_allocs, device_frees, retries, ooms, failed_allocs, segments_end;
  /* the first out of memory in the replay */
  bool oom;
  int64_t oom_event_id, oom_time_ns, oom_request, oom_allocated, oom_reserved, oom_stream;
  uint32_t oom_stack;
  uint32_t oom_top_stack[MS_REPLAY_TOP];
  int64_t oom_top_bytes[MS_REPLAY_TOP], oom_top_count[MS_REPLAY_TOP];
  int oom_ntop;
  bool oom_was_recorded; /* the recorded program ran out of memory at this event too */
  /* the recording, from its events (and the snapshot's state for a history that starts late) */
  int64_t rec_peak_allocated, rec_peak_reserved, rec_allocated_at_peak, rec_device_allocs, rec_device_frees;
  int64_t rec_segments_end, rec_ooms;
  int64_t capacity; /* the simulated device's bytes */
} ms_replay_device;

/* A change to the program that a synthesised history is made as (whatif.c; predict.c replays
 * it): some module calls' forwards checkpointed, another optimizer. Flat: rows carry it. */
enum { MS_SHARD_NONE, MS_SHARD_FSDP2, MS_SHARD_DDP, MS_SHARD_ZERO1, MS_SHARD_ZERO2, MS_SHARD_ZERO3, MS_SHARDS };
#define MS_SHARD_MAX_RANKS 65536
enum {
  MS_OPT_KEEP, /* the recorded optimizer */
  MS_OPT_SGD, MS_OPT_SGD_MOMENTUM, MS_OPT_ADAM, MS_OPT_ADAMW, MS_OPT_ADAGRAD, MS_OPT_RMSPROP, MS_OPT_ADAFACTOR,
  MS_OPT_BYTES, /* state of optimizer_bytes bytes per parameter */
  MS_OPTIMIZERS
};
#define MS_CHANGE_ALL INT32_MAX /* every module call found */
typedef struct ms_change {
  int32_t checkpoint;     /* the module instances checkpointed: the first N by saved bytes (0: none) */
  int32_t modules;        /* whose instances: 0 those --checkpoint names; k > 0 the k-th module advise
                             tried of those it found (ms_predict_candidates' tried) */
  int32_t optimizer;      /* MS_OPT_* (MS_OPT_KEEP: as recorded) */
  double optimizer_bytes; /* MS_OPT_BYTES: the state's bytes per parameter */
  int32_t strategy;       /* MS_SHARD_* (MS_SHARD_NONE: one GPU, as recorded; shard.c) */
  int32_t ranks;          /* with a strategy: the ranks it shards over (1 to MS_SHARD_MAX_RANKS) */
} ms_change;

/* What one replay found: flat (no pointers), so that sweep workers can hand it back through
 * shared memory. */
typedef struct ms_replay_result {
  ms_replay_config config;
  int ndevices;
  ms_replay_device dev[MS_REPLAY_DEVICES];
  int64_t events, replayed;          /* events read; allocations and frees replayed */
  int64_t unknown_frees, duplicate_allocs, bad_events, preloaded_blocks, preloaded_bytes, empty_caches;
  int64_t external_blocks; /* blocks outside the allocator (memsnap run's interposer), held beside it */
  int64_t deferred_frees;            /* frees completed later (record_stream uses) */
  int64_t at;                        /* the size its history was synthesised at (predict.c); 0: as recorded */
  ms_change change;                  /* the change to the program it was synthesised as (predict.c) */
  bool over_capacity;                /* predict.c: out of memory on config.capacity, so the figures are those of
                                        a replay on a device without a limit (what it needs) */
  bool failed;                       /* the replay stopped early: error says why */
  bool invalid_setting;              /* failed because a setting's value is invalid */
  char error[512];
  char notes[MS_REPLAY_NOTES][512];  /* what could not be known, what was skipped */
  int nnotes;
} ms_replay_result;

/* What a first pass over the snapshot learns, shared by every replay of it: the devices and
 * their recorded capacity, the recorded settings, the blocks live before the history began, the
 * frees that completed later. */
typedef struct ms_replay_plan ms_replay_plan;

/* Reads the snapshot once (s opened, stacks loaded). Returns the plan, or NULL with s->error set
 * (out of memory, unreadable events). */
ms_replay_plan *ms_replay_plan_new(ms_snapshot *s);
void ms_replay_plan_free(ms_replay_plan *p);
/* Where a replay's events come from when not from the snapshot's history: calls fn with every
 * event in order, as ms_events_each does (s: the snapshot the replay runs on, opened in this
 * process), and returns what ms_events_each would (fn's non-zero, or -1 with s->error set). */
typedef int (*ms_replay_source)(ms_snapshot *s, void *arg, int (*fn)(const ms_event *e, void *fnarg), void *fnarg);
/* Makes p's replays take their events from source(s, arg, ...) (NULL: the snapshot's history
 * again); such a history is taken to start at the program's start (no late start is looked for). */
void ms_replay_plan_set_source(ms_replay_plan *p, ms_replay_source source, void *arg);
/* A replay's memory over time (the page of a prediction): one device's allocated and reserved
 * memory (the allocator's, with the external memory held beside it, as the peaks count them)
 * after each event, in the buckets of the analysis's curves (MS_BUCKETS over the snapshot's
 * span, each with its lowest and highest value: a million events are 4000 buckets, and no peak
 * is lost; the highest reserved value is the replay's peak reserved). */
typedef struct ms_replay_timeline {
  int device; /* the device followed (the caller's) */
  ms_curve allocated, reserved;
} ms_replay_timeline;
/* Makes p's replays draw into *t (NULL: none), each replay anew: a replay that runs again (a late
 * start found, predict's replay without a limit) leaves its last run's. Costs a look at the
 * allocator's statistics per event of t's device. */
void ms_replay_plan_set_timeline(ms_replay_plan *p, ms_replay_timeline *t);
/* The recorded settings (from the snapshot's options table) as a config. */
void ms_replay_recorded_config(const ms_replay_plan *p, ms_replay_config *out);
/* The recorded capacity of the largest device, in bytes. */
uint64_t ms_replay_recorded_capacity(const ms_replay_plan *p);
/* Sets key=value in c (replacing that key; the value "default", or "unlimited" for
 * max_split_size_mb, removes it). Returns 0, or -1 with a message in err for an unknown key or a
 * full config. */
int ms_replay_config_set(ms_replay_config *c, const char *key, const char *value, char *err, size_t errlen);
/* The setting's value in c, or NULL when unset. */
const char *ms_replay_config_get(const ms_replay_config *c, const char *key);
/* c as PYTORCH_CUDA_ALLOC_CONF's line ("max_split_size_mb:64,roundup_power2_divisions:4"; ""
 * for the defaults); memory_fraction is left out (set_per_process_memory_fraction). */
void ms_replay_conf_line(const ms_replay_config *c, char *out, size_t len);
/* c as the reports name it: its PYTORCH_CUDA_ALLOC_CONF line, with "(memory fraction F)" when it
 * sets one; "(defaults)" when it sets nothing. */
void ms_replay_describe_config(const ms_replay_config *c, char *out, size_t len);
/* Adds a note (printf-style) to r's notes, unless MS_REPLAY_NOTES are there already. */
void ms_replay_note(ms_replay_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether libmemsnap accepts c's values: 0, or -1 with its message in err. */
int ms_replay_check_config(const ms_replay_plan *p, const ms_replay_config *c, char *err, size_t errlen);
/* Replays the snapshot under config c, in this process: it sets the MEMSNAP_ environment
 * variables (backend sim) and re-initialises libmemsnap, whose state it leaves shut down.
 * The first replay of a plan finds whether the history starts late (the snapshot's state is
 * not what its events add up to) and then completes the plan and replays again. Always fills
 * *r; returns 0, or -1 when the replay could not run or stopped early (r->error, with what was
 * replayed until then). */
int ms_replay_run(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, ms_replay_result *r);
/* ---- the simulated device's memory as users give it (cards.c) ---------------------------- */

/* Parses a size as the command line gives it: "40G", "512M", "1.5T", "80GB", "80GiB" or bytes,
 * 2 MiB to 1 PiB, into *out. 0, or -1 (*out unchanged). */
int ms_replay_parse_size(const char *text, uint64_t *out);
/* The memory CUDA gives PyTorch on the card called `name` ("H100", "a100-40gb", "RTX 4090";
 * case, spaces, dashes and an "NVIDIA" or "Tesla" prefix do not matter) into *bytes, and the
 * name as listed into *listed (NULL: not wanted). 0, or -1 for a card not in the list. */
int ms_replay_card(const char *name, uint64_t *bytes, const char **listed);
/* The listed cards' names, ", "-separated, into out[len]. */
void ms_replay_card_names(char *out, size_t len);

/* ---- the sweep (sweep.c) ---------------------------------------------------------------- */

/* Applies "k=v,k=v" (a grid row) or, with `one`, one "k=v" (a bracketed value may hold commas)
 * to c. 0, or -1 with err set. */
int ms_replay_config_apply(ms_replay_config *c, const char *list, bool one, char *err, size_t errlen);
/* The device with the highest peak reserved (the first of equal ones; 0 when none), that peak,
 * and the sum over its devices of the ms_replay_device field at `offset`
 * (offsetof(ms_replay_device, ooms), ...). */
int ms_replay_worst_device(const ms_replay_result *r);
int64_t ms_replay_worst_peak(const ms_replay_result *r);
int64_t ms_replay_sum(const ms_replay_result *r, size_t offset);
/* Whether the history fitted its card: it ran, no allocation was refused, no device's peak
 * passed its capacity, and it is not a replay without a limit standing in (over_capacity). */
bool ms_replay_fits(const ms_replay_result *r);

#define MS_SWEEP_GRID_ROWS 20 /* the recorded settings and the grid of docs/replay.md */
typedef struct ms_sweep {
  int nrows;
  ms_replay_result *results; /* by row; for the sweep: [0] the recorded settings (with the base's over them), then the grid's rows */
  int *order;                /* ranked: failed last, then out of memory, then by worst peak reserved, then by
                                device allocations (nrows entries) */
  int workers;               /* processes that replayed at once */
  bool timed_out;            /* rows not done by the time limit are failed ("not run") */
  void *shared;
  size_t shared_size;
} ms_sweep;

/* The sweep's rows into rows[MS_SWEEP_GRID_ROWS]: the recorded settings with base's over them,
 * then each row of the grid over base; each with base's capacity. Returns how many, or -1 with
 * err set. */
int ms_replay_grid(const ms_replay_plan *p, const ms_replay_config *base, ms_replay_config *rows, char *err, size_t errlen);
/* Ranks results[0..n) into order[n] (indices), best first, as the sweep ranks its rows. */
void ms_replay_rank(const ms_replay_result *results, int n, int *order);

/* A row's replay in place of ms_replay_run (in a worker: s opened there, p the worker's copy of
 * the plan); it fills *r and returns what ms_replay_run returns. */
typedef int (*ms_replay_row_fn)(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, int row,
                                ms_replay_result *r, void *arg);
typedef struct ms_rows_options {
  int jobs;             /* worker processes (0: one per core, at most 64) */
  double time_limit_s;  /* rows still running after it are stopped and failed (0: none) */
  const char *progress; /* "WHAT: N of M replayed" on stderr as rows end (NULL: nothing) */
} ms_rows_options;
/* Replays rows[0..nrows) (fn(s, p, &rows[i], i, &result, arg) for each, or ms_replay_run when fn
 * is NULL) on worker processes forked from this one (o NULL: one per core, no time limit, no
 * progress), and fills *out with the results by row, ranked. s is opened with its stacks loaded
 * (its device filter applies to the workers too). 0, or -1 with err set (nothing to free). Rows
 * that fail, or that no worker finished, are in out as failed, with their error. */
int ms_replay_rows(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *rows, int nrows, ms_replay_row_fn fn,
                   void *arg, const ms_rows_options *o, ms_sweep *out, char *err, size_t errlen);
/* Replays the recorded settings and every row of the grid (docs/replay.md), each on top of
 * `base`, on `jobs` worker processes (0: one per core, at most 64), stopping those still running after time_limit_s seconds
 * (0: none), with progress on stderr if `progress`; fills *out, ranked. s is opened with its
 * stacks loaded (its device filter applies to the workers too). 0, or -1 with err set (nothing
 * to free). Rows that fail are in out as failed, with their error. */
int ms_replay_sweep(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *base, int jobs, double time_limit_s,
                    bool progress, ms_sweep *out, char *err, size_t errlen);
/* An empty sweep of nrows results (zeroed; order 0, 1, ...) that ms_sweep_free frees, for rows
 * gathered from several runs of the workers (fewest_ranks.c). 0, or -1 with err set (nothing to free). */
int ms_sweep_alloc(ms_sweep *out, int nrows, char *err, size_t errlen);
void ms_sweep_free(ms_sweep *sw);

/* ---- predicting another size from runs at two or three (align.c, predict.c) -------------- */

/* One run's history as predict reads it (align.c): a token per allocation and per free requested,
 * in order (kind, device and allocation site hashed: the same in every process of the program),
 * each allocation's number (UINT32_MAX for a free) and event id; each allocation's request. */
typedef struct ms_history {
  uint64_t *tok;
  uint32_t *alloc;
  int64_t *event_id;
  size_t ntok, tok_cap, alloc_cap, id_cap;
  int64_t *size; /* by allocation: the request (requested bytes, else the size) */
  size_t nalloc, size_cap;
  int64_t events, bytes, frees, skipped, ooms;
  int64_t live_peak;                   /* the most bytes (block sizes) its allocations held at once */
  int64_t with_stacks;                 /* allocations with a stack */
  int64_t unknown_frees;               /* frees of blocks the history did not allocate */
  int64_t before_blocks, before_bytes; /* blocks allocated at the snapshot that no allocation of the history made */
  uint64_t devices;                    /* a bit per device with an allocation */
} ms_history;
/* Reads s's history (opened, stacks loaded) into *h in one streamed pass, and checks the
 * snapshot's live blocks against it. 0, or -1 with s->error set (unreadable, out of memory), h
 * then empty. */
int ms_history_read(ms_snapshot *s, ms_history *h);
void ms_history_free(ms_history *h);

/* Two histories aligned (x's allocations with their counterparts in y). */
typedef struct ms_alignment {
  int64_t *size_in_y;               /* by allocation of x: its counterpart's request in y, -1 none */
  int64_t allocs, frees;            /* pairs aligned */
  int64_t x_bytes, y_bytes;         /* the aligned allocations' requests, in each */
  int64_t differences;              /* places where they differ */
  int64_t first_x, first_y;         /* the event ids of the first difference */
  bool parted;                      /* they did not agree again after a difference: the rest is unaligned */
  int64_t part_x, part_y;           /* where (event ids) */
} ms_alignment;
/* Aligns x with y into *out (align.c says how). 0, or -1 when out of memory (out empty). */
int ms_histories_align(const ms_history *x, const ms_history *y, ms_alignment *out);
void ms_alignment_free(ms_alignment *a);

/* ---- the program changed: checkpointing, another optimizer (whatif.c) -------------------- */

#define MS_WHATIF_PATTERNS 16 /* --checkpoint patterns */
#define MS_WHATIF_NOTES 6

/* A module instance whose calls can be checkpointed: a class's N-th call in each step (no
 * module events), or a module's path (module events). */
typedef struct ms_whatif_instance {
  char name[256];        /* "GPT2Block #3", "GPT2LMHeadModel.transformer.h.3" (neutralised) */
  int64_t calls;         /* its calls with a backward pass after them */
  int64_t saved_bytes;   /* the most one of its calls saved for backward (requests, at the base's size) */
  int64_t saved_blocks;  /* the blocks of that call */
  int64_t first_event;   /* its first call's first allocation (event id) */
  int64_t forward_ns;    /* its calls' forwards' recorded time, per call: first event to last (the
                            forward-begins and -ends events with module events) */
} ms_whatif_instance;

#define MS_WHATIF_FOUND 64 /* modules listed for advise to choose from */

/* A module whose calls could be checkpointed, found in a history (ms_whatif_options' find). */
typedef struct ms_whatif_module {
  char pattern[256]; /* as --checkpoint takes it: a class ("GPT2Block"), or module paths that differ only in
                        their parts' trailing numbers, with the root's class ("GPT2LMHeadModel.transformer.h.*") */
  char shown[256];   /* as reports show it: a path without the root's class ("transformer.h.*"); neutralised */
  int paths;         /* module events: the paths it groups (0: a class) */
} ms_whatif_module;

typedef struct ms_whatif_info {
  /* checkpointing */
  bool checkpointing, module_events; /* module events: the snapshot has them */
  char name[256];                    /* the modules as the change's words name them ("" the patterns) */
  int ninstances;
  ms_whatif_instance *instance;      /* ranked: the most saved bytes first (owned by the whatif) */
  int64_t allocations;               /* the history's, numbered as align.c numbers them */
  int64_t calls, calls_without_backward, backward_passes;
  /* the optimizer */
  bool optimizer;
  char recorded_optimizer[32];       /* "adamw", ...; "" unknown */
  char optimizer_source[256];        /* how it is known */
  char state_evidence[256];          /* what says which blocks hold its state */
  int tensors_per_param;             /* the recorded optimizer's state tensors per parameter */
  int64_t state_blocks, state_bytes, counter_blocks, temp_blocks, temp_bytes, param_blocks, param_bytes, steps;
  char notes[MS_WHATIF_NOTES][512];
  int nnotes;
} ms_whatif_info;

typedef struct ms_whatif ms_whatif;

/* Parses an optimizer as --optimizer gives it (sgd, sgd-momentum, adam, adamw, adagrad, rmsprop,
 * adafactor; or bytes per parameter: "8B", "2.5B") into *opt and *bytes: 0, or -1. */
int ms_optimizer_parse(const char *text, int32_t *opt, double *bytes);
/* The optimizer's name as --optimizer takes it ("8B" for MS_OPT_BYTES) into out[len]. */
void ms_optimizer_name(int32_t opt, double bytes, char *out, size_t len);
/* The sharding strategy named `name` (fsdp2, ddp, zero1, zero2, zero3): MS_SHARD_*, or -1. */
int ms_shard_strategy(const char *name);
/* The strategy's name ("none" for MS_SHARD_NONE). */
const char *ms_shard_name(int32_t strategy);
/* The change in words ("checkpoint 4 of 12 module instances (GPT2Block #1, ...), optimizer sgd";
 * "none") into out[len]; w may be NULL (no names). */
void ms_change_describe(const ms_whatif *w, const ms_change *c, char *out, size_t len);
/* Whether c changes anything. */
bool ms_change_any(const ms_change *c);
typedef struct ms_whatif_options {
  const char *const *patterns; /* the modules whose calls may be checkpointed (NULL: none) */
  int npatterns;
  const char *name;            /* those modules in the change's words: "checkpoint every NAME call found" (NULL: "module") */
  bool optimizer;              /* the optimizer's state, its temporaries and the parameters */
  bool find;                   /* list the modules that could be checkpointed (ms_whatif_found) */
} ms_whatif_options;
/* Reads s's history (opened, stacks loaded) once and finds what the changes act on: the calls of
 * the modules patterns[0..n) name (class names: "GPT2Block", globs allowed, matched against the
 * Python frames CLASS.forward; module paths: "transformer.h.*", with a dot, matched against the
 * module events' paths, with and without their root class), what each saved for backward, where
 * its backward begins; with `optimizer`, the blocks of the optimizer's state, its temporaries and
 * the parameters; with `find`, the modules that could be checkpointed. Returns the whatif, or NULL
 * with err set (a message for the user: nothing found, "cannot checkpoint ..."; no module events
 * for a path; unreadable events; out of memory). */
ms_whatif *ms_whatif_new(ms_snapshot *s, const ms_whatif_options *o, char *err, size_t errlen);
void ms_whatif_free(ms_whatif *w);
const ms_whatif_info *ms_whatif_info_of(const ms_whatif *w);
/* The modules found (when built with find): with module events, the paths of their forward-begins
 * events grouped as ms_whatif_module says, the root left out; else the classes of the Python
 * frames CLASS.forward in forward allocations' stacks; at most MS_WHATIF_FOUND, in the order
 * found. Their number, *out pointing at them (owned by w). */
int ms_whatif_found(const ms_whatif *w, const ms_whatif_module **out);
/* Allocation k's request (the k-th allocation of the history, as align.c numbers them) at the
 * size being synthesised; 0 or less: left out; INT64_MIN: the recorded request. */
typedef int64_t (*ms_whatif_size_fn)(void *arg, size_t k);
/* Calls fn with the events of s's history as if the program had changed by c (w NULL or c
 * changing nothing: the history as recorded), each allocation's request size(size_arg, k): the
 * synthesised history that predict.c replays. The history's out-of-memory events and the model's
 * events (module, tensor, step, backward) are left out; allocations of 0 bytes or less are left
 * out with their frees, counted in *dropped. Returns what ms_events_each returns (fn's non-zero,
 * or -1 with s->error set, also when out of host memory). */
int ms_whatif_each(const ms_whatif *w, const ms_change *c, ms_snapshot *s, ms_whatif_size_fn size, void *size_arg,
                   int64_t *dropped, int (*fn)(const ms_event *e, void *fnarg), void *fnarg);

/* A module path's group into out[len]: each part's trailing digits made one '*'
 * ("GPT2LMHeadModel.transformer.h.3" -> "GPT2LMHeadModel.transformer.h.*"). */
void ms_whatif_path_group(const char *path, char *out, size_t len);

/* ---- the program sharded over N ranks (shard.c) -------------------------------------------- */

/* What --shard's options say beside the strategy and N (docs/predict.md, "Sharded: --shard"). */
typedef struct ms_shard_options {
  const char *const *units; /* the modules sharded as units (--units; NULL: the root and each repeated block) */
  int nunits;
  int param_bytes, reduce_bytes; /* element bytes of MixedPrecisionPolicy's param_dtype and reduce_dtype (0: as recorded) */
  int recorded_bytes;            /* element bytes of the recorded parameters (4: fp32) */
  int orig_bytes;                /* of FSDP2's sharded parameters, optimizer state and gradients (the model's dtype when
                                    fully_shard was called; 0: the recorded dtype) */
  double bucket_mb;              /* DDP's bucket_cap_mb (25) */
  bool bucket_view;              /* DDP's gradient_as_bucket_view */
  int64_t reduce_bucket, allgather_bucket; /* DeepSpeed's reduce_bucket_size, allgather_bucket_size (elements) */
  bool overlap_comm;             /* DeepSpeed's overlap_comm: two reduce buckets */
  int32_t recorded_ranks;        /* the recording is of rank 0 of an FSDP2 run at this N (0: unsharded) */
  bool meta_init;                /* the model made on the meta device, sharded, then materialised (--shard-init meta):
                                    no full parameters at set-up */
} ms_shard_options;

#define MS_SHARD_UNITS_SHOWN 8
typedef struct ms_shard_info {
  char root[256];                 /* the root module's class, as the events' paths begin */
  int nunits;                     /* FSDP2's units: the root and those chosen */
  char units_rule[512];           /* how they were chosen, in words */
  char unit_names[MS_SHARD_UNITS_SHOWN][256]; /* the first ones' paths (neutralised) */
  int64_t params, param_bytes;    /* the parameters' blocks (tensor events of role 1) */
  int64_t grads, grad_bytes;      /* gradients' blocks seen (role 2) */
  int64_t state_blocks, state_bytes, temp_blocks; /* the optimizer's state and its temporaries */
  int64_t param_modules;          /* modules owning parameters (ZeRO-3's units) */
  bool state_from_events;         /* state told by tensor events of role 3 (else: made in a step, outliving it) */
  int64_t module_events, backward_passes, steps;
  bool looks_sharded;             /* several gradient tensors in one block: FSDP2's flat sharded gradients */
  int32_t detected_ranks;         /* a sharded recording: the N its all-gather outputs say it ran at (0: not told) */
  int32_t recorded_ranks;         /* the N it is taken to have run at (--recorded-shard, else detected_ranks) */
  int64_t cast_blocks;            /* with a param dtype: autocast's casts found (left out under FSDP2) */
  int64_t setup_blocks, setup_bytes; /* blocks made and freed before the first module event: the model's making
                                        (left out under --shard-init meta, FSDP2 and ZeRO-3) */
} ms_shard_info;

typedef struct ms_shard ms_shard;

/* Reads s's history (opened) once for what sharding acts on: the parameters (tensor events of role
 * 1, by their modules' paths), gradients (role 2), the optimizer's state (role 3, else made in a
 * step and outliving it) and temporaries, the units' module events, backward passes. Returns it,
 * or NULL with err set (no parameter events: what is missing; a --units pattern that matches no
 * module; unreadable; out of memory). */
ms_shard *ms_shard_new(ms_snapshot *s, const ms_shard_options *o, char *err, size_t errlen);
void ms_shard_free(ms_shard *h);
const ms_shard_info *ms_shard_info_of(const ms_shard *h);
/* Calls fn with rank 0's events of s's history sharded as c says (c->strategy, c->ranks), over
 * what ms_whatif_each makes of it (w, c, size: checkpointing, another optimizer, a size's laws).
 * Returns what ms_whatif_each returns. */
int ms_shard_each(const ms_shard *h, const ms_whatif *w, const ms_change *c, ms_snapshot *s, ms_whatif_size_fn size,
                  void *size_arg, int64_t *dropped, int (*fn)(const ms_event *e, void *fnarg), void *fnarg);

/* ---- the modules advise may checkpoint when none is named (candidates.c) ------------------ */

#define MS_CANDIDATES_TRIED 3 /* tried in the SAC estimator's order, and the one that frees the most besides */

/* A module found, measured. */
typedef struct ms_candidate {
  ms_whatif_module module;
  int instances;       /* with a backward pass after them (0: none, not measured further) */
  int64_t calls;
  int64_t saved_bytes; /* what its instances saved for backward, one call each, summed */
  int64_t freed_bytes; /* less the most one saved: what checkpointing every call frees while the backward runs */
  int64_t forward_ns;  /* its instances' forward times (per call), summed: the recompute's */
  double bytes_per_s;  /* freed over that time (0: no time known) */
  int32_t tried;       /* ms_change's `modules` that checkpoints it (1, 2, ...); 0: not tried */
} ms_candidate;

typedef struct ms_candidates {
  bool module_events;  /* found in the module events' paths; else the classes of the Python frames */
  int n;
  ms_candidate *c;     /* ranked: those that free something first, the most per second of recompute first */
  int ntried;
  ms_whatif **tried;   /* the readings of those tried, by `modules` - 1 (owned) */
} ms_candidates;

/* Measures each module found_in found (ms_whatif_found; its reading of s: stacks loaded, nalloc
 * allocations) by a reading of its own (with the optimizer's, for changes that combine them),
 * ranks them and keeps the readings of those to try, into *out. 0, or -1 with err set (out empty). */
int ms_candidates_find(ms_snapshot *s, const ms_whatif *found_in, bool optimizer, size_t nalloc, bool progress,
                       ms_candidates *out, char *err, size_t errlen);
void ms_candidates_free(ms_candidates *c);

#define MS_PREDICT_MAX_RUNS 3
#define MS_PREDICT_MAX_SIZE 16777216           /* sizes of runs and predictions: 1 to 2^24 */
#define MS_PREDICT_MIN_ALIGNED 0.9             /* of each run's allocations, and of its bytes, aligned */
#define MS_PREDICT_MAX_BYTES ((int64_t)1 << 50) /* a law's request is held to +-1 PiB */
#define MS_PREDICT_UNLIMITED ((uint64_t)2 << 40) /* the device a prediction that does not fit is replayed on again (the
                                                    simulated device maps expandable segments up to 2 TiB, not 4) */
#define MS_PREDICT_NOTES 8
#define MS_PREDICT_MAX_BEFORE 0.01 /* of a run's peak live bytes before its history, or of its frees of blocks it did not allocate */
#define MS_PREDICT_FAR 4           /* a size past 4 times the largest recorded, or under a quarter of the smallest, gets a note */

typedef struct ms_predict_input {
  const char *path;
  int64_t at; /* the size it was recorded at, 1 to MS_PREDICT_MAX_SIZE, distinct */
} ms_predict_input;

typedef struct ms_predict_run {
  char path[4096], shown[512]; /* as given; neutralised, to print */
  int64_t at;
  int64_t events, allocations, frees, bytes, ooms;
  int devices;
  int64_t aligned_allocs, aligned_frees, aligned_bytes; /* with the base; the base's: with every other run */
  int64_t before_blocks, before_bytes, unknown_frees;   /* from before its history (align.c's ms_history) */
} ms_predict_run;

/* What the runs are, and the model made of them. */
typedef struct ms_predict_info {
  int nruns, base; /* base: the run at the largest size, whose history is synthesised */
  ms_predict_run run[MS_PREDICT_MAX_RUNS];
  bool quadratic_fit;                          /* three runs: laws through three points */
  double aligned_share, aligned_frees_share;   /* of every run's bytes allocated, and of its frees, aligned */
  int64_t differences;                         /* places where a run differs from the base */
  /* the base's allocations by law, with their bytes (its requests) */
  int64_t constant, linear, quadratic, unaligned, shrinking;
  int64_t constant_bytes, linear_bytes, quadratic_bytes, unaligned_bytes;
  char notes[MS_PREDICT_NOTES][1024];
  int nnotes;
} ms_predict_info;

typedef struct ms_predict ms_predict;

/* The request at size `at` of an allocation whose requests were ys[i] at sizes xs[i] (n of 1 to
 * 3 points, distinct sizes): the polynomial through them, rounded to the nearest byte, held to
 * +-MS_PREDICT_MAX_BYTES. */
int64_t ms_predict_law(const int64_t *xs, const int64_t *ys, int n, int64_t at);
typedef struct ms_predict_options {
  const char *const *checkpoint; /* module patterns whose calls may be checkpointed (--checkpoint) */
  int ncheckpoint;
  bool optimizer; /* find the optimizer's state, so that another optimizer may replace it */
  bool find_modules; /* without patterns: find the modules that could be checkpointed (candidates.c) */
  bool progress;  /* what it reads, on stderr */
  const ms_shard_options *shard; /* read what sharding acts on (shard.c; NULL: none) */
} ms_predict_options;
/* Reads the runs inputs[0..n) (one to three, distinct sizes; one: its history as recorded, for a
 * change to the program at its own size), aligns them with the one at the largest size and makes
 * the model (predict.c says which runs are refused and why); with o's patterns or optimizer,
 * whatif.c's reading of the base for the changes (o NULL: none). Returns the model (the base's
 * snapshot held open), or NULL with err set to a message for the user. */
ms_predict *ms_predict_new(const ms_predict_input *inputs, int n, const ms_predict_options *o, char *err, size_t errlen);
void ms_predict_free(ms_predict *m);
const ms_predict_info *ms_predict_info_of(const ms_predict *m);
/* What the changes act on (NULL when none was asked for). */
const ms_whatif *ms_predict_whatif(const ms_predict *m);
/* What change c acts on: the reading of the modules its `modules` names (ms_predict_whatif for 0). */
const ms_whatif *ms_predict_whatif_for(const ms_predict *m, const ms_change *c);
/* What sharding acts on (NULL when none was asked for). */
const ms_shard *ms_predict_shard(const ms_predict *m);
/* The modules found to checkpoint (find_modules; NULL when none was asked for). */
const ms_candidates *ms_predict_candidates(const ms_predict *m);
/* The base's snapshot (opened, stacks loaded): what rows replay. */
ms_snapshot *ms_predict_base(ms_predict *m);
/* One row's work, for callers that make their own rows (advise.c; s and p: the worker's): the
 * history at `at` changed by ch replayed under c (again without a limit when it does not fit:
 * over_capacity), or the largest size that fits c's card with ch (r->at, 0 none). Each fills *r
 * and returns what ms_replay_run returns. */
int ms_predict_replay(ms_predict *m, ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, const ms_change *ch,
                      int64_t at, ms_replay_result *r);
int ms_predict_search(ms_predict *m, ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, const ms_change *ch,
                      ms_replay_result *r);
/* ms_predict_replay's first replay alone, on c's card (no second one without a limit): for a
 * search's probes, which ask only whether a history fits (ms_replay_fits). */
int ms_predict_probe(ms_predict *m, ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, const ms_change *ch,
                     int64_t at, ms_replay_result *r);
/* ms_predict_replay in this process, on the base and its plan, drawing `device`'s memory over time
 * into *t (engine.c's timeline; of the replay without a limit when the card is too small, as r's
 * figures are): the page of a prediction. Fills *r; returns what ms_replay_run returns. */
int ms_predict_timeline(ms_predict *m, const ms_replay_config *c, const ms_change *ch, int64_t at, int device,
                        ms_replay_timeline *t, ms_replay_result *r);
/* A note for the sizes of sizes[0..n) (0s left out) far from the recorded ones (MS_PREDICT_FAR)
 * into out[len]; "" when none is. */
void ms_predict_far_note(const ms_predict *m, const int64_t *sizes, int n, char *out, size_t len);
/* The base's replay plan: its recorded settings and card (ms_replay_grid, ms_replay_check_config). */
ms_replay_plan *ms_predict_plan(ms_predict *m);
/* Replays the history synthesised at each of ats[0..nat), as changed by each of
 * changes[0..nchange) (NULL: none, the program as recorded), under each of
 * configs[0..nconf) (the row of size a, change h and config c is (a * nchange + h) * nconf + c;
 * each result's `at` and `change` say which) on the sweep's workers, into *out (ranked as the
 * sweep ranks: within one size and change, ms_replay_rank again). A
 * replay that does not fit its card (configs' capacity, else the recorded one) is replayed again
 * on a device without a limit: over_capacity, and the figures are what it needs. 0, or -1 with
 * err set (nothing to free). */
int ms_predict_at(ms_predict *m, const int64_t *ats, int nat, const ms_replay_config *configs, int nconf,
                  const ms_change *changes, int nchange, const ms_rows_options *o, ms_sweep *out, char *err, size_t errlen);
/* The largest size, 1 to MS_PREDICT_MAX_SIZE, whose synthesised history (changed by each of
 * changes[0..nchange); NULL: one group, unchanged) fits the card under each of configs[0..nconf)
 * (their capacity), into out's results by change, then config (row h * nconf + c; `at`: that
 * size, 0 when none fits; the figures: its replay). out's order is ranked within each change's
 * group (order[h * nconf .. h * nconf + nconf) are that group's rows) by that size (the largest
 * first), then by peak reserved. Each row is one search, about 2 log2(size) replays, on the
 * sweep's workers. 0, or -1 with err set (nothing to free). */
int ms_predict_capacity(ms_predict *m, const ms_change *changes, int nchange, const ms_replay_config *configs, int nconf,
                        const ms_rows_options *o, ms_sweep *out, char *err, size_t errlen);

/* ---- the fewest ranks that fit (fewest_ranks.c) -------------------------------------------- */

/* `--shard STRATEGY` without N: N = 1, 2, 4, ... up to MS_FEWEST_MAX, the first that fits the
 * card kept, stopping early when rank 0's peak reserved stops falling with N (over two doublings). */
#define MS_FEWEST_MAX 1024
enum {
  MS_FEWEST_SEARCHING,
  MS_FEWEST_FITS,   /* `fewest` fits */
  MS_FEWEST_FLAT,   /* rank 0's peak reserved at `ranks` no lower than at ranks / 2, nor that than at ranks / 4 */
  MS_FEWEST_LIMIT,  /* MS_FEWEST_MAX tried, none fits */
  MS_FEWEST_FAILED  /* the replay at `ranks` failed */
};
typedef struct ms_fewest {
  int32_t strategy; /* MS_SHARD_* searched */
  int32_t ranks;    /* the N to try next; once stopped, the last tried */
  int32_t fewest;   /* the smallest N that fits (0: none) */
  int stop;         /* MS_FEWEST_* */
  int64_t peak;     /* rank 0's peak reserved at the last N tried (with the memory outside the allocator) */
  int flat;         /* the doublings since it last fell */
} ms_fewest;
/* A search of `strategy` from N = 1. */
void ms_fewest_start(ms_fewest *s, int32_t strategy);
/* Takes the replay at s->ranks (under the card): true when the search goes on (s->ranks the next
 * N to try), false when it stopped (s->stop says why). */
bool ms_fewest_step(ms_fewest *s, const ms_replay_result *r);
/* The search as it stopped, from its last replay alone: how advise.c's rows report it. */
void ms_fewest_of_result(const ms_replay_result *r, ms_fewest *s);
/* Why a search stopped without an N that fits, in words (the strategy's reason why more ranks do
 * not help, when its peak stopped falling), into out[len]. */
void ms_fewest_why(const ms_fewest *s, char *out, size_t len);
/* ms_predict_at over changes[0..nchange) (NULL or 0: none), and the search of each of
 * search[0..nsearch) (each a change with its strategy; its ranks are searched): per round, the
 * next N of every search still going on, at each size and setting; each search decided at
 * ats[0] under configs[0] (found[i] says how it ended). out's rows are laid out as
 * ms_predict_at's over the changes, then each search's Ns tried in order; *nrows_change is their
 * number (nchange plus the Ns tried). 0, or -1 with err set (nothing to free). */
int ms_predict_fewest(ms_predict *m, const int64_t *ats, int nat, const ms_replay_config *configs, int nconf,
                     const ms_change *changes, int nchange, const ms_change *search, int nsearch, ms_fewest *found,
                     const ms_rows_options *o, ms_sweep *out, int *nrows_change, char *err, size_t errlen);

/* ---- what makes a size fit (advise.c) ------------------------------------------------------ */

/* The kinds of change advise.c tries, smallest first. */
enum { MS_ADVICE_NONE, MS_ADVICE_SETTING, MS_ADVICE_CHECKPOINT, MS_ADVICE_CHECKPOINT_SETTING, MS_ADVICE_OPTIMIZER,
       MS_ADVICE_OPTIMIZER_CHECKPOINT, MS_ADVICE_SHARD, MS_ADVICE_KINDS };
#define MS_ADVICE_MAX 64 /* 20 settings, 3 optimizers, 5 rows for each set of modules (4 at most), 5 strategies */

typedef struct ms_advice_row {
  int kind;                 /* MS_ADVICE_* */
  ms_replay_result at;      /* at the size asked (config and change: the candidate's) */
  ms_replay_result largest; /* the largest size that fits with it (at 0: none; unsearched with one run) */
  bool fits;                /* at the size asked */
  bool searched;            /* MS_ADVICE_SHARD: its N searched (fewest_ranks.c), not among those given */
} ms_advice_row;

typedef struct ms_advice {
  int64_t at;
  uint64_t capacity;
  bool searched;            /* the largest sizes were searched (more than one run) */
  int n;
  ms_advice_row *row;       /* ranked: those that fit first, the smallest kind of change first, then by the
                               largest size that fits, then by peak reserved (owned) */
  int best;                 /* the smallest change that fits (-1: none) */
} ms_advice;

/* Tries the changes that could make size `at` fit base's card (base: --set and --capacity): each
 * setting of the sweep; checkpointing the fewest module instances that fits (most saved bytes
 * first; bisection), under the recorded settings and with expandable segments; each optimizer
 * lighter than the recorded one, alone and with the fewest checkpointed instances; and for each,
 * the largest size that fits (with more than one run). m was made with the checkpoint patterns,
 * or with find_modules (the modules found and tried, each a set of instances), and the
 * optimizer's reading. 0, or -1 with err set. */
int ms_advise(ms_predict *m, int64_t at, const ms_replay_config *base, const ms_rows_options *o, ms_advice *out, char *err,
              size_t errlen);
/* ms_advise, and, for each strategy of shards[0..nshards) (--shard's, made with m's shard
 * reading), the smallest of its Ns that fits (MS_ADVICE_SHARD: the most ranks given when none does);
 * a strategy given with ranks 0 has its N searched as fewest_ranks.c searches (the last N tried when
 * none fits). */
int ms_advise_shards(ms_predict *m, int64_t at, const ms_replay_config *base, const ms_change *shards, int nshards,
                     const ms_rows_options *o, ms_advice *out, char *err, size_t errlen);
void ms_advice_free(ms_advice *a);

/* ---- suggestions for the analysis (suggest.c) ------------------------------------------- */

#define MS_SUGGEST_MAX 5             /* suggestions kept, best first */
#define MS_SUGGEST_EVENTS 500000     /* histories longer than this are not swept by default */
#define MS_SUGGEST_SECONDS 3.0       /* the sweep's default time limit */
#define MS_SUGGEST_SAVING 0.05       /* a setting is suggested when it lowers peak reserved by this share */

/* Whether the sweep ran, and if not why (JSON's "status"). */
typedef enum {
  MS_SUGGEST_DONE,      /* ran (maybe stopped by its time limit: timed_out) */
  MS_SUGGEST_DISABLED,  /* --no-suggest */
  MS_SUGGEST_TOO_LARGE, /* more events than max_events: memsnap replay --sweep does it */
  MS_SUGGEST_NOTHING,   /* no allocation to replay */
  MS_SUGGEST_FAILED     /* the replay could not run, or not even the recorded settings were replayed in time */
} ms_suggest_status;

/* One setting of the sweep worth suggesting. */
typedef struct ms_suggestion {
  char conf[1024];          /* PYTORCH_CUDA_ALLOC_CONF's value ("" for the defaults) */
  char memory_fraction[32]; /* the memory fraction the row sets, which that line cannot say; "" none */
  int64_t peak_reserved;    /* the largest device's, in the replay */
  int64_t saved;            /* than the recorded settings' replay (measured the same way) */
  int64_t device_allocs;
  bool fits;                /* the recorded out of memory does not happen in its replay */
} ms_suggestion;

/* What the analysis's sweep found: flat, the command's to keep and free nothing. */
typedef struct ms_suggestions {
  ms_suggest_status status;
  bool timed_out;            /* the time limit came first: the rows not done are left out */
  double time_limit_s;
  int64_t events, max_events;
  int settings, settings_done; /* rows of the sweep (the recorded settings among them), and those replayed */
  int64_t baseline_peak_reserved; /* the recorded settings replayed */
  int64_t baseline_ooms, recorded_ooms;
  char snapshot[512];        /* as shown, for "memsnap replay --sweep SNAPSHOT" */
  char note[1024];           /* why there are none, or what to know about them; "" none */
  ms_suggestion s[MS_SUGGEST_MAX];
  int n;
} ms_suggestions;

typedef struct ms_suggest_options {
  bool disabled;       /* --no-suggest: status DISABLED, nothing run */
  double time_limit_s; /* 0: MS_SUGGEST_SECONDS */
  int64_t max_events;  /* 0: MS_SUGGEST_EVENTS; negative: no limit */
  int jobs;            /* 0: one per core */
} ms_suggest_options;

/* Replays the analyzed snapshot (a->snap opened, stacks loaded) under the sweep's grid, unless o
 * (NULL: defaults) or its size says not to, and keeps the settings that avoid a recorded out of
 * memory (fits) or, when none was recorded, lower peak reserved memory by MS_SUGGEST_SAVING or
 * more, best first. Always fills *out (status, note). Forks the sweep's workers; prints nothing. */
void ms_suggest(const ms_analysis *a, const ms_suggest_options *o, ms_suggestions *out);

#endif
