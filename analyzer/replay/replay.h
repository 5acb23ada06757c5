/* replay.h: a snapshot's trace replayed through memsnap's own allocator (prefix ms_replay_):
 * engine.c replays one configuration on the simulated device in this process, sweep.c a grid of
 * them on every core and ranks them, suggest.c picks the analysis's suggestions from a sweep. It
 * calls down into analysis/ (the live blocks and the state before the history), read/ and
 * libmemsnap.
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
/* Whether libmemsnap accepts c's values: 0, or -1 with its message in err. */
int ms_replay_check_config(const ms_replay_plan *p, const ms_replay_config *c, char *err, size_t errlen);
/* Replays the snapshot under config c, in this process: it sets the MEMSNAP_ environment
 * variables (backend sim) and re-initialises libmemsnap, whose state it leaves shut down.
 * The first replay of a plan finds whether the history starts late (the snapshot's state is
 * not what its events add up to) and then completes the plan and replays again. Always fills
 * *r; returns 0, or -1 when the replay could not run or stopped early (r->error, with what was
 * replayed until then). */
int ms_replay_run(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *c, ms_replay_result *r);
/* ---- the sweep (sweep.c) ---------------------------------------------------------------- */

/* Applies "k=v,k=v" (a grid row) or, with `one`, one "k=v" (a bracketed value may hold commas)
 * to c. 0, or -1 with err set. */
int ms_replay_config_apply(ms_replay_config *c, const char *list, bool one, char *err, size_t errlen);
/* The highest peak reserved of a result's devices, and the sum over its devices of the
 * ms_replay_device field at `offset` (offsetof(ms_replay_device, ooms), ...). */
int64_t ms_replay_worst_peak(const ms_replay_result *r);
int64_t ms_replay_sum(const ms_replay_result *r, size_t offset);

#define MS_SWEEP_MAX_ROWS 32
typedef struct ms_sweep {
  int nrows;
  ms_replay_result *results; /* [0]: the recorded settings (with the base's over them); then the grid's rows */
  int order[MS_SWEEP_MAX_ROWS]; /* ranked: failed last, then out of memory, then by worst peak reserved, then by
                                   device allocations */
  int workers;                  /* processes that replayed at once */
  bool timed_out;               /* rows not done by the time limit are failed ("not run") */
  void *shared;
} ms_sweep;
/* Replays the recorded settings and every row of the grid (docs/replay.md), each on top of
 * `base`, on `jobs` worker processes (0: one per core, at most 64), stopping those still running after time_limit_s seconds
 * (0: none), with progress on stderr if `progress`; fills *out, ranked. s is opened with its
 * stacks loaded (its device filter applies to the workers too). 0, or -1 with err set (nothing
 * to free). Rows that fail are in out as failed, with their error. */
int ms_replay_sweep(ms_snapshot *s, ms_replay_plan *p, const ms_replay_config *base, int jobs, double time_limit_s,
                    bool progress, ms_sweep *out, char *err, size_t errlen);
void ms_sweep_free(ms_sweep *sw);

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
