/* analysis.h: what the analyzer computes from a snapshot (prefix ms_): the live blocks every
 * pass replays (livemap.c), the state when the history starts (prehistory.c), the analysis
 * itself (analyze.c: peaks, iterations, leak candidates, OOMs; autograd graphs kept without a
 * backward: kept_graphs.c), the allocator's own releases
 * and retries (retries.c), invalid frees (misuse.c), sites matched across snapshots (match.c)
 * and what the page draws beyond the analysis (timeline.c).
 * It calls down into the reader (read/) and the helpers (util/) only; reports format what it
 * computes and never the other way round.
 */
#ifndef MEMSNAP_ANALYSIS_H
#define MEMSNAP_ANALYSIS_H

#include "read/read.h"
#include "util/util.h"

/* ---- replaying the history into live blocks (livemap.c) --------------------------------- */

/* What the analysis knows of a block from its allocation, for its category by lifetime
 * (categories.c): when it was made, in which phase of the program, and how many phases had
 * begun then, so that its death tells what it lived through. */
typedef struct ms_birth {
  int64_t ordinal; /* its allocation's ordinal among the history's allocations, from 1 (0: none;
                      -(i + 1): the prehistory's block i) */
  uint32_t backward_begins, optimizer_begins, optimizer_ends; /* phases begun (ended) by then */
  int32_t iteration; /* the iteration it was made in (-1: before the first) */
  uint8_t phase;     /* MS_PHASE_* of its allocation */
  uint8_t category;  /* its category, once known (the timeline's pass reads it from the analysis) */
  uint8_t role;      /* the role a tensor event gave it (MS_ROLE_*; 0: none): its category's evidence */
  uint8_t in_backward; /* made while a module's backward (or a backward pass) ran */
  uint32_t module;   /* the module whose forward or backward made it (index + 1; 0: none) */
  uint32_t call;     /* that module call's serial (modules.c) */
  uint32_t slack;    /* its size less the bytes asked for (rounding, an unsplit remainder) */
  uint32_t forward;  /* the outermost module forward call open when it was made: its serial (0: none) */
  uint32_t forward_module; /* that call's module, index + 1 */
  uint32_t backward_passes; /* backward passes recorded (backward events) by then */
} ms_birth;

/* The roles tensor events give blocks (the snapshot format's `tensor` event, requested_size). */
enum { MS_ROLE_NONE, MS_ROLE_PARAMETER, MS_ROLE_GRADIENT, MS_ROLE_OPTIMIZER_STATE, MS_ROLE_BUFFER, MS_ROLES };

/* A live block: address (0: empty slot), its allocation site, a word the pass attaches, and its
 * birth (passes that need none leave it zero). */
typedef struct ms_live_slot {
  uint64_t key;
  uint32_t site, aux;
  int64_t size;
  ms_birth birth;
} ms_live_slot;

typedef struct ms_live_map {
  ms_live_slot *slots;
  size_t mask, count;
} ms_live_map;

/* Adds or replaces slot.key's entry; 0, or -1 when out of memory. */
int ms_live_put(ms_live_map *m, ms_live_slot slot);
/* Removes key into *out; false if absent (allocated before the kept history). */
bool ms_live_take(ms_live_map *m, uint64_t key, ms_live_slot *out);
void ms_live_free(ms_live_map *m);
/* Replays an event into the live map: an allocation (of site `alloc_site`, which the caller
 * resolved, with `aux` and `birth` attached; birth NULL: none) adds its block, a free_requested
 * removes it. Returns the bytes live memory changed by (negative for a free; 0 for other events
 * and for frees of blocks from before the kept history) and sets *taken to the block added or
 * removed; an allocation at the address of a block still live (a damaged history) puts that
 * block into *replaced (replaced NULL: forgotten; its key 0 when none). Sets *failed when out of
 * memory. Every pass replays through this. */
int64_t ms_replay(ms_live_map *m, const ms_event *e, int64_t alloc_site, uint32_t aux, const ms_birth *birth,
                  ms_live_slot *taken, ms_live_slot *replaced, bool *failed);

/* A total over time in at most MS_BUCKETS time buckets, each with the lowest and highest value
 * it took: drawn at any zoom, a peak is never lost. */
#define MS_BUCKETS 4000
/* The bucket width for the snapshot's time span: at least 1, computed without overflow. */
int64_t ms_bucket_width(const ms_snapshot *s);
/* Start of the bucket holding t (clamped into the snapshot's span). */
int64_t ms_bucket_start(const ms_snapshot *s, int64_t width, int64_t t);

/* Allocation size classes: 4 per power of two. */
#define MS_SIZE_BINS 256
static inline int ms_size_bin(int64_t size) {
  if (size < 4) return size < 0 ? 0 : (int)size;
  int msb = 63 - __builtin_clzll((unsigned long long)size);
  return msb * 4 + (int)((size >> (msb - 2)) & 3);
}
/* The smallest size in class `bin`. */
static inline int64_t ms_size_bin_floor(int bin) {
  if (bin < 4) return bin;
  if (bin < 8) return 4; /* classes 4 to 7 are unused: sizes 4 to 7 are in classes 8 to 11 */
  int msb = bin / 4;
  return ((int64_t)4 + (bin & 3)) << (msb - 2);
}

/* ---- the state when the history starts (prehistory.c) ------------------------------------ */

/* A block allocated before the kept history: freed by it, or still allocated at the snapshot. */
typedef struct ms_prior_block {
  uint64_t address, stream;
  int64_t size, requested;
  int device;        /* -1 when its event named none */
  uint32_t stack_id; /* still allocated: its allocation's (blocks table); freed by the history: the
                        free's, its allocation's being unknown; 0: none */
  uint32_t site;     /* the analysis's site for it (set by ms_analyze) */
  bool alive_at_end;
  uint8_t category;  /* its category by lifetime (set by ms_analyze) */
  uint8_t role;      /* alive at the end: the role the snapshot says a framework told (MS_ROLE_*; 0 none) */
  int64_t module_label; /* and its module's label (0: none) */
} ms_prior_block;

typedef struct ms_prior_segment {
  uint64_t address, stream;
  int64_t size;
  int device;
  bool classic; /* a device allocation of its own (segment_free, or a row neither an expandable
                   segment's mapped range nor the async pool's) */
  bool small;   /* of the small pool (freed by the history: of its segment size, 2 MiB) */
} ms_prior_segment;

typedef struct ms_prehistory {
  ms_prior_block *blocks; /* those the history freed, in its order, then those of the snapshot */
  size_t nblocks;
  ms_prior_segment *segments; /* for the allocator's layout; the analysis draws them only when layout_known */
  size_t nsegments;
  int64_t allocated, reserved; /* when the history starts */
  int64_t end_bytes, end_count; /* of the blocks, what is still allocated at the snapshot */
  int64_t device_reserved_change[MS_MAX_DEVICES]; /* what the history's segment events added to
                                                     each device's reserved memory */
  bool layout_known; /* false with expandable segments' map/unmap: totals only */
} ms_prehistory;

/* Which pass starts from the state: the reconstruction reads the history as that pass does. */
typedef enum {
  MS_PREHISTORY_ANALYSIS, /* every event counts (analyze.c, timeline.c) */
  MS_PREHISTORY_REPLAY,   /* only what the replay can replay (replay/engine.c): events with an
                             address, on devices 0 to MS_MAX_DEVICES - 1; and a second free of an
                             address the history allocated is inconsistent, not a block from before */
} ms_prehistory_view;

/* Reconstructs the state when the kept history starts (one pass over its allocation and segment
 * events, and the snapshot's blocks and segments) into h. Returns 0; -1 when the snapshot cannot
 * be read, or -2 out of memory, each with s->error set and h empty. */
int ms_prehistory_build(ms_snapshot *s, ms_prehistory_view view, ms_prehistory *h);
/* Puts the blocks into a replay's live map (their sites and categories as set; block i's birth
 * has ordinal -(i + 1)); sets *failed out of memory. */
void ms_prehistory_seed(const ms_prehistory *h, ms_live_map *live, bool *failed);
void ms_prehistory_free(ms_prehistory *h);
/* What device `device` held reserved when the history began, given what it held at the snapshot:
 * that less the history's segment events, never below 0. */
int64_t ms_prehistory_start_reserved(const ms_prehistory *h, int device, int64_t at_snapshot);

/* ---- what kind of code a frame is (code_kinds.c) --------------------------------------- */

enum {
  MS_CODE_PROGRAM = 1 << 0,         /* the program's own code: no library, interpreter or standard library */
  MS_CODE_OPTIMIZER = 1 << 1,       /* an optimizer's step (torch/optim) */
  MS_CODE_OPTIMIZER_STATE = 1 << 2, /* an optimizer making its state (_init_group) */
  MS_CODE_BACKWARD = 1 << 3,        /* autograd's backward pass */
  MS_CODE_GRADIENT = 1 << 4,        /* a parameter's gradient accumulated (AccumulateGrad) */
  MS_CODE_PARAMETER = 1 << 5,       /* a module's parameters made on the device or moved there */
  MS_CODE_SHARDED = 1 << 6,         /* FSDP's sharded parameters, made when a module is sharded */
  MS_CODE_GATHERED = 1 << 7,        /* FSDP's unsharded parameters, gathered for forward or backward */
  MS_CODE_WORKSPACE = 1 << 8,       /* a library's workspace (cuBLAS, cuDNN handles): kept for reuse */
};

/* The phase of the program an event's stack belongs to (code_kinds.c): autograd's backward pass,
 * an optimizer's step, or any other code (forward, data, set-up); NONE without a stack. */
enum { MS_PHASE_NONE, MS_PHASE_FORWARD, MS_PHASE_BACKWARD, MS_PHASE_OPTIMIZER };
#define MS_CHAIN 8           /* the program's frames kept per stack, outermost first */
#define MS_CATEGORY_RULES 16 /* --category rules */

/* The user's categories: --category NAME=PATTERN[,PATTERN...], in the order given (patterns
 * not owned: argv's). */
typedef struct ms_category_rules {
  struct {
    char name[32];
    const char *patterns;
  } rule[MS_CATEGORY_RULES];
  size_t n;
} ms_category_rules;
/* Adds NAME=PATTERN[,PATTERN...] (NAME of letters, digits, '_', '-' and '.'): 0, or -1 when it is
 * not one, or MS_CATEGORY_RULES rules are there already. */
int ms_category_rule_add(ms_category_rules *r, const char *rule);

/* What kind of code each frame and stack of a snapshot is. */
typedef struct ms_code_kinds {
  size_t nstacks, nframes;
  unsigned *frame_kind; /* by frame id: MS_CODE_* */
  unsigned *kind;     /* by stack id: MS_CODE_* of its frames */
  uint8_t *rule;      /* the first user rule one of its frames matches, + 1 (0: none) */
  uint8_t *phase;     /* MS_PHASE_*: backward when a frame is autograd's; optimizer when its innermost
                         Python frame that matters is an optimizer's (code an optimizer calls back,
                         as a closure's forward pass, is not); else forward */
  uint32_t *op;       /* the frame of the operation: its innermost Python frame that is no machinery (the line
                         that called the operator), else its first frame that matters (the operator) */
  uint32_t *chain;    /* [id * MS_CHAIN + k]: the program's frames, outermost first */
  uint8_t *chain_len;
} ms_code_kinds;

/* Classifies every frame and stack of s (stacks loaded) by the built-in table and `rules` (NULL:
 * none) into k. 0, or -1 when out of memory (k empty). */
int ms_code_kinds_build(const ms_snapshot *s, const ms_category_rules *rules, ms_code_kinds *k);
void ms_code_kinds_free(ms_code_kinds *k);

/* ---- the allocator's own releases of cached memory (retries.c) -------------------------- */

/* What limited the recorded allocator on a device: for inferring why it released memory where
 * the snapshot does not say (imported PyTorch snapshots, older memsnap files). */
typedef struct ms_release_limits {
  double capacity;     /* the device's bytes (0: unknown) */
  double fraction;     /* the memory fraction (1: none) */
  double gc_threshold; /* garbage_collection_threshold (0: none) */
} ms_release_limits;

/* Why a run of segment_free / segment_unmap events on one device happened (a run: nothing else
 * of that device between them). `recorded` is the reason its events carry (their extra,
 * MEMSNAP_RELEASE_*; 0 none): returned as it is. Else from the pattern: the allocator's own
 * release for a request when the device's next event `next` (NULL: none) is a segment_alloc,
 * segment_map or oom of the same call (the run's stack `run_stack` when both have one; without
 * stacks, an oom, or a device too full for that segment: `reserved` bytes before the run plus
 * the segment pass the limit), garbage collection when the threshold explains it instead, else
 * an empty_cache call. Returns MEMSNAP_RELEASE_RETRY, _GC or _EMPTY_CACHE (or `recorded`). The
 * analysis (here) and the replay (replay/engine.c) both read runs through it. */
int ms_release_cause(int recorded, uint32_t run_stack, int64_t reserved, const ms_event *next, const ms_release_limits *l);

/* A request for which the allocator released cached memory and retried (PyTorch's
 * release_available_cached_blocks and release_cached_blocks, alloc.c's msi_device_malloc). */
typedef struct ms_retry {
  int64_t time_ns;         /* its first release */
  int64_t request_ns;      /* its alloc (served) or oom (not) */
  int64_t requested;       /* bytes asked for */
  int64_t released, segments, unmapped; /* bytes released for it, in so many segment_free and
                                            segment_unmap events; of them, unmapped pages */
  int64_t reserved_before; /* the device's reserved bytes before the release */
  int device;
  uint32_t stack_id;       /* the request's */
  bool succeeded;          /* served after the release (false: out of memory) */
  bool whole_cache;        /* every cached segment released (PyTorch's num_alloc_retries), not only
                              oversize blocks (max_split_size); known when reasons were recorded */
  bool oversize;           /* oversize blocks released first (reasons recorded) */
  bool reason_recorded;    /* the snapshot says why; else inferred from the pattern */
} ms_retry;

#define MS_RETRIES_MAX 10000 /* retries listed (the first ones); the rest are counted */

typedef struct ms_release_count {
  int64_t calls, segments, bytes; /* calls: per device (an empty_cache releases on each device) */
} ms_release_count;

/* Every release of cached memory in the history, by cause. */
typedef struct ms_releases {
  ms_retry *retries; /* in time order */
  size_t nretries;
  ms_release_count retried;     /* calls: retries (listed or not) */
  int64_t retries_failed;       /* of them, ending in out of memory */
  ms_release_count empty_cache, gc, pool, other; /* other: shutdown, the async driver's own,
                                                    releases no request followed */
  ms_release_count external;    /* the program's frees of external memory (intercepted): not the
                                   allocator's releases, counted apart */
  int64_t unmaps, unmapped_bytes; /* segment_unmap events among all of them */
  int64_t recorded, inferred;     /* release events whose reason the snapshot gave, or the pattern */
} ms_releases;

/* The analysis pass's state for releases, per device (analyze.c holds it; retries.c owns it). */
typedef struct ms_release_device {
  bool run_open, awaiting; /* a run of releases without a reason; a request's releases, its alloc or oom to come */
  uint8_t call_reason;     /* a call (empty_cache, ...) whose releases go on: its reason; 0 none */
  uint32_t run_stack, call_stack;
  int64_t run_ns, run_reserved, run_bytes, run_segments, run_unmapped;
  int64_t req_ns, req_reserved, req_bytes, req_segments, req_unmapped, gc_bytes, gc_segments;
  bool req_whole, req_oversize, req_recorded, req_inferred;
} ms_release_device;

typedef struct ms_release_pass {
  uint64_t pending; /* bit d: device d (below 64) has a run, a call or a request open */
  ms_release_limits limits[MS_MAX_DEVICES];
  int64_t reserved[MS_MAX_DEVICES];
  ms_release_device dev[MS_MAX_DEVICES];
  ms_live_map external; /* external segments (intercepted) alive: their frees are the program's */
  size_t retries_cap;
} ms_release_pass;

/* The pass hands ms_releases_event every segment event (segment_alloc, _free, _map, _unmap),
 * and every other event for which this is true: an event of a device with something open.
 * Cheap: the pass asks it of every other event, and `pending` is almost always 0. */
static inline bool ms_releases_pending(const ms_release_pass *p, const ms_event *e) {
  return p->pending && (unsigned)e->device < MS_MAX_DEVICES && (p->pending >> e->device & 1);
}
struct ms_analysis;
/* Starts the pass's state: the devices' limits (devices and options tables) and their reserved
 * bytes when the history starts (a->before). 0, or -1 when a table cannot be read (s->error). */
int ms_releases_begin(struct ms_analysis *a, ms_release_pass *p);
/* One event, in order. 0, or -1 when out of memory. */
int ms_releases_event(struct ms_analysis *a, ms_release_pass *p, const ms_event *e);
/* Ends the history (what is open is decided as at its end) and frees p's memory. */
void ms_releases_end(struct ms_analysis *a, ms_release_pass *p);

/* ---- memory by module (modules.c) ------------------------------------------------------ */

/* A module of the model, from the module record (the module and tensor events of PyTorch's
 * layer: docs/snapshot-format.md), by its path ("GPT2LMHeadModel.transformer.h.3.mlp"): its
 * place in the tree, its calls and what they held. Bytes "with its submodules" sum its own and
 * its submodules' as MemTracker's module.parameters() does. */
typedef struct ms_module {
  char *name;         /* its path (neutralised) */
  int32_t parent;     /* index of the module whose path is this one's less its last part; -1: a root */
  uint16_t depth;     /* 0 for a root */
  bool called;        /* it ran (module events of its own), not only a path above modules that did */
  int64_t forward_calls, backward_calls;
  int64_t parameter_bytes, gradient_bytes, buffer_bytes; /* its tensors', with its submodules' (the
                                                            latest tensor events of each) */
  int64_t activation_bytes; /* its latest forward call's: made during it, still allocated at its end */
  int64_t saved_bytes;      /* per forward call: made during its forward, freed by a backward pass */
  int64_t forward_peak, backward_peak; /* the highest allocated total while its forward (backward) ran */
  int64_t at_peak;          /* made in its forward or backward (its submodules' too), live at the allocated peak */
  int64_t own_saved;        /* (pass) saved bytes of its own calls, all calls */
  int64_t own_at_peak;      /* (pass) live at the allocated peak, made in its own calls */
  int64_t own_role[MS_ROLES]; /* (pass) its own tensors' bytes by role, from their latest events */
} ms_module;

/* The pass's state for modules (analyze.c holds it, modules.c owns it). */
typedef struct ms_module_call {
  uint32_t module;    /* index */
  uint32_t serial;
  bool backward;
  int64_t made, peak; /* bytes made in it (its subcalls' folded in at their end) still allocated; its peak */
} ms_module_call;
typedef struct ms_module_pass {
  char **labels;        /* label text by id */
  size_t nlabels;
  int32_t *of_label;    /* label id -> module index + 1 */
  size_t modules_cap;
  ms_module_call *open; /* open calls, in order of entry */
  size_t nopen, open_cap;
  uint32_t serial;
  int backward_open;    /* backward events begun and not ended */
  int64_t batch;        /* runs of tensor events: the latest one of a module and role sets its bytes */
  bool in_batch;
  int64_t *role_batch;  /* [module * MS_ROLES + role] */
  int64_t *peak_mark;   /* [module]: the peak its own_at_peak counts for */
  bool failed;
} ms_module_pass;

struct ms_analysis;
/* Starts the state (labels read); 0, or -1 (s->error set; out of memory: "out of memory"). */
int ms_modules_begin(struct ms_analysis *a, ms_module_pass *p);
/* A block from before the history whose role and module the snapshot's blocks table gives (its
 * tensor events left the ring): its bytes count for the module and role until a tensor event of
 * the history sets them. -1 when out of memory. */
int ms_modules_told(struct ms_analysis *a, ms_module_pass *p, int64_t label, int role, int64_t size);
/* A module, tensor or backward event, in order (`live` the pass's blocks, `allocated` the
 * allocated total now). 0, or -1 when out of memory. */
int ms_modules_event(struct ms_analysis *a, ms_module_pass *p, const ms_event *e, ms_live_map *live, int64_t allocated);
/* An allocation of `size` bytes about to be made: its module, call and whether a backward runs,
 * into b; `allocated` the total after it. */
void ms_modules_alloc(struct ms_analysis *a, ms_module_pass *p, ms_birth *b, int64_t size, int64_t allocated);
/* A block freed (before its death is counted). */
void ms_modules_free(struct ms_analysis *a, ms_module_pass *p, const ms_live_slot *b);
/* A block died (freed, or alive at the history's end) after the allocated peak of mark `peak_mark`
 * (ms_lifetimes' peak_mark): counted there if made by then. */
void ms_modules_death(struct ms_analysis *a, ms_module_pass *p, const ms_live_slot *b, int64_t peak_mark);
/* Ends the history: open calls closed, sums over submodules, a->modules filled; frees p. */
void ms_modules_end(struct ms_analysis *a, ms_module_pass *p, int64_t peak_mark);
void ms_modules_free_pass(ms_module_pass *p);
/* The index of the module two modules share (the deepest one above or at both); -1: none. */
int32_t ms_module_common(const struct ms_analysis *a, int32_t x, int32_t y);
/* A module's path as reports show it: without its root's class when it has one ("transformer.h.3"),
 * a root as its class. */
const char *ms_module_shown(const struct ms_analysis *a, int32_t m);

/* ---- autograd graphs kept without a backward (kept_graphs.c) ------------------------------ */

/* Forwards of one module called from one line of the program whose graphs are kept alive: the
 * tensors they saved for backward outlive their iteration, and no backward freed them. */
typedef struct ms_kept_graph {
  int32_t module;        /* the module whose forward it was (index; -1: none) */
  uint32_t frame;        /* the program's line that called the forward: the innermost program frame
                            all its blocks' stacks share (a frame id; 0: none known) */
  uint32_t stack_id;     /* the stack of its largest block (for the program's frames around it) */
  int graphs;            /* the forwards kept */
  int64_t bytes, blocks; /* what they hold at the history's end */
  int first_iteration, last_iteration; /* the iterations of the first and last of them (-1: before) */
  int64_t saved_per_call; /* what the module's forwards saved for backward, per call (0: unknown) */
  uint32_t top_site;     /* the site that holds most of it */
  int modules;           /* the distinct modules whose calls made its blocks (the first forward's) */
} ms_kept_graph;
#define MS_KEPT_GRAPHS_MAX 32 /* kept graph candidates listed (the largest) */

/* The pass's state: the blocks alive at the history's end that forwards made (analyze.c holds
 * it, kept_graphs.c owns it). */
typedef struct ms_graph_block {
  uint32_t forward, forward_module, site, stack_id, module;
  int32_t iteration;
  int64_t size;
  uint32_t after; /* backward passes begun after it: 1 its own (what is left is no saved tensor),
                     2 or more its own and another (it survived), 0 none (its backward never ran) */
} ms_graph_block;
typedef struct ms_graph_pass {
  ms_graph_block *blocks;
  size_t n, cap;
  bool failed;
} ms_graph_pass;
struct ms_analysis;
/* A block alive at the history's end (their births in order), `backward_begins` the backward
 * phases begun by then (ms_lifetimes', from the stacks; a->backward_passes the recorded ones, which
 * count when recorded): kept when a forward made it and it is no parameter,
 * gradient, workspace or backward's. */
void ms_graphs_block(struct ms_analysis *a, ms_graph_pass *p, const ms_live_slot *b, uint32_t backward_begins);
/* After the modules are summed (ms_modules_end): the kept graph candidates into a->graphs, the
 * sites' graph bytes; frees p. Out of memory: none. */
void ms_graphs_finish(struct ms_analysis *a, ms_graph_pass *p);
void ms_graphs_free_pass(ms_graph_pass *p);

/* ---- the analysis (analyze.c) ----------------------------------------------------------- */

typedef enum { MS_LEAK_GROWING, MS_LEAK_GROWING_RELEASED, MS_LEAK_RETAINED, MS_LEAK_ALIVE } ms_leak_kind;

typedef struct ms_site {
  uint32_t stack_id;
  int64_t allocs, alloc_bytes;     /* over the recorded history */
  int64_t live_bytes, live_count;  /* replayed, at the end of the history */
  int64_t end_bytes, end_count;    /* allocated at the snapshot (blocks table) */
  int64_t first_ns, last_ns;       /* first and last allocation */
  int64_t thread;                  /* of the first allocation */
  uint64_t stream;                 /* of the first allocation */
  bool several_threads, several_streams; /* later allocations came from others too */
  /* per-iteration evidence */
  int64_t prev_iter_live, first_iter_live, last_iter_live;
  int increases, decreases, observed; /* iteration boundaries seen after the first */
  /* the highest live bytes at a boundary, that boundary (the iteration it ends), the counts
     above when it was reached, and when live bytes then fell below halfway between the first
     boundary's and that peak (-1: they did not): the evidence of growth released later */
  int64_t peak_iter_live, released_ns;
  int peak_boundary, increases_at_peak, decreases_at_peak;
  /* steps: the evidence of growth every k iterations (leaks.c). Bytes live bytes rose and fell by
     over the boundaries; the large rises (a quarter of the largest one at least: the others are
     jitter), the boundaries of the first and last of them and the gaps between them */
  int64_t rise_bytes, fall_bytes, max_rise, step_bytes;
  int steps, first_step, last_step, min_step_gap, max_step_gap;
  int first_iteration;                /* iteration of the first allocation (-1: before) */
  int last_iteration;                 /* iteration of the last allocation */
  int newest_live_iteration;          /* latest iteration that allocated a block still live at the end
                                         of the history (-1: before the first, or none) */
  bool before_history;                /* the site of blocks alive at the snapshot that no kept event
                                         allocated: from before recording (or the kept history) */
  bool external;                      /* its blocks are memory outside memsnap's allocator */
  uint8_t category;                   /* MS_CAT_*, or a user category: what most of the bytes it
                                         made were (categories.c) */
  int32_t module;                     /* the module its allocations were made in (the one they share:
                                         ms_module_common), index + 1; 0: none recorded */
  int32_t held_module;                /* the same of its blocks alive at the history's end (a leak's
                                         module: the one whose calls made what it holds) */
  uint8_t held_category;              /* the same of its blocks alive at the history's end */
  ms_leak_kind kind;
  double score, bytes_per_iteration;
  bool every;                         /* growing in steps every few iterations (leaks.c), not at most */
  double step_every;                  /* every: the iterations between its steps, on average */
  int64_t graph_bytes;                /* of what it holds at the history's end, in kept autograd graphs */
  int32_t graph;                      /* the kept graph candidate that holds most of it, index + 1 (0: none) */
} ms_site;

/* Memory by category (categories.c): the built-in ones, then the user's (--category). */
enum {
  MS_CAT_PARAMETER,
  MS_CAT_GRADIENT,
  MS_CAT_OPTIMIZER_STATE,
  MS_CAT_ACTIVATION,
  MS_CAT_TEMPORARY,
  MS_CAT_AUTOGRAD,
  MS_CAT_OTHER,
  MS_CAT_EXTERNAL,
  MS_CAT_BUILTIN
};
#define MS_CATEGORIES (MS_CAT_BUILTIN + MS_CATEGORY_RULES)
#define MS_ITER_CATEGORIES_MAX (1u << 20) /* iterations past which their categories are not kept */

/* The parameters at the peak by where they come from: a module's (made or moved to the device),
 * FSDP's sharded ones, the unsharded ones it gathered. */
enum { MS_PARAM_MODULE, MS_PARAM_SHARDED, MS_PARAM_GATHERED, MS_PARAM_KINDS };

typedef struct ms_iteration {
  int index;
  int64_t start_ns, end_ns;
  int64_t start_event_id; /* its first event */
  int64_t peak_allocated, peak_reserved;
  int64_t peak_ns;
  bool skipped;            /* its optimizer step was skipped (GradScaler found inf or NaN gradients) */
  int64_t end_unallocated; /* reserved but unallocated at the iteration's end: fragmentation */
  int64_t end_allocated;   /* allocated at the iteration's end: what a leak adds to, iteration by iteration */
  /* what was live at its peak by category (categories.c); categories_known false past
     MS_ITER_CATEGORIES_MAX iterations */
  bool categories_known;
  int64_t category_bytes[MS_CATEGORIES];
} ms_iteration;

typedef struct ms_site_bytes {
  uint32_t site; /* index into sites */
  int64_t bytes, count;
} ms_site_bytes;

typedef struct ms_oom {
  int64_t time_ns, requested, device_free, cached_unallocated, live_bytes;
  int device;
  uint32_t stack_id;
  ms_site_bytes top[5]; /* what was live, largest sites first */
  int ntop;
} ms_oom;

typedef struct ms_curve {
  int64_t t[MS_BUCKETS], lo[MS_BUCKETS], hi[MS_BUCKETS];
  int n; /* buckets used, in time order */
} ms_curve;
/* Adds the value v to c's bucket starting at `start` (ms_bucket_start: a later one than its last,
 * or its last; c NULL, or a full one past its last: nothing). analyze.c. */
void ms_curve_add(ms_curve *c, int64_t start, int64_t v);

/* Invalid frees from one site (stack) of one kind (analyzer/misuse.c). */
typedef struct ms_invalid_free {
  uint32_t stack_id;
  int kind;              /* 1 double free, 2 foreign pointer, 3 interior pointer (0 unknown) */
  int device;
  int64_t count, first_ns, last_ns;
  uint64_t address;      /* the first one's */
  int64_t offset;        /* into the block that holds it */
  int64_t block_site;    /* interior: site that allocated the block (-1 unknown) */
  int64_t block_size;
} ms_invalid_free;
#define MS_EXTERNAL_MAX 16 /* groups of external memory the analysis keeps */

/* The whole run (wholerun.c), from the snapshot's run log; all zero (window_first, leak_from and
 * peak_iteration -1) without one. */
typedef struct ms_whole_run {
  ms_run_entry *iters, *secs; /* the run log's iterations and seconds (read.h) */
  size_t niters, nsecs;
  size_t completed;           /* entries of iters that are finished (the last may be in progress) */
  int64_t iterations, skipped;/* iterations finished since recording started, skipped steps among them */
  int64_t width;              /* iterations in the coarsest entry (1: every iteration apart) */
  int64_t peak_allocated, peak_reserved, peak_iteration; /* the highest in any iteration, and which */
  int64_t seconds, seconds_width, peak_allocated_time, peak_reserved_time; /* the seconds log's */
  int64_t window_first;       /* the run's number of the window's first iteration (-1: not known) */
  double growth_per_iteration;/* allocated at iteration ends, first to last, per iteration */
  int64_t leak_from;          /* the iteration the leading growing candidate's growth goes back to */
  double leak_rate;           /* allocated at iteration ends' growth per iteration from it to the last (0: none) */
} ms_whole_run;

struct ms_suggestions;
struct ms_causes;
typedef struct ms_analysis {
  ms_snapshot *snap;
  ms_curve *allocated_curve, *reserved_curve;
  struct ms_timeline *timeline; /* NULL until ms_analyze_timeline */
  int64_t size_hist[MS_SIZE_BINS]; /* allocations by size class (ms_size_bin) */
  int64_t *site_of_stack;   /* stack id -> site index + 1 */
  ms_site *sites; /* sites[i].stack_id; index 0 is the site of allocations without a stack */
  size_t nsites;
  int64_t peak_allocated, peak_reserved, peak_allocated_ns, peak_reserved_ns, peak_event_id;
  int64_t end_allocated, end_reserved;
  ms_site_bytes *at_peak; /* live by site at the allocated peak, largest first */
  size_t nat_peak;
  ms_iteration *iters;
  size_t niters;
  char iteration_label[256];
  char iteration_source[32]; /* "marks", "ranges", "inferred" or "none" */
  bool iterations_from_range_ends; /* ranges covering part of each step, ending it: see ranges_to_steps */
  ms_oom *ooms;
  size_t nooms;
  uint32_t *leaks; /* site indices, best candidate first */
  size_t nleaks;
  uint32_t *top; /* site indices by bytes allocated, largest first */
  size_t ntop;
  int64_t segments, free_blocks_in_split_segments, split_free_bytes; /* at the snapshot */
  ms_prehistory before; /* the state when the history starts: counted from its first instant */
  ms_code_kinds kinds;  /* what kind of code each stack is */
  ms_category_rules categories; /* the user's categories (--category), besides the built-in ones */
  /* by category (categories.c): what was live at the allocated peak, its parameters by kind, what
     each allocation of the history was (by ordinal; 0xff: unknown), the phases seen */
  int64_t category_at_peak[MS_CATEGORIES];
  int64_t category_at_peak_asked[MS_CATEGORIES]; /* the same in bytes asked for: tensors' bytes, not blocks' */
  int64_t temporary_at_peak[4][2];               /* temporary at the peak by the phase that made it
                                                    (MS_PHASE_*): bytes, bytes asked for */
  int64_t parameter_at_peak[MS_PARAM_KINDS];
  uint8_t *alloc_category;
  size_t nalloc_category;
  int64_t stacked_events, backward_passes, optimizer_steps, parameter_blocks;
  int64_t skipped_steps;       /* optimizer steps GradScaler skipped (recorded) */
  bool steps_recorded;         /* optimizer_steps and skipped_steps are the recorded steps' */
  bool backward_recorded;      /* backward_passes counts the recorded backward passes */
  /* the evidence each category rests on, over the blocks it holds: bit 0 tensor events (their
     roles), bit 1 the stacks and lifetimes */
  uint8_t category_evidence[MS_CATEGORIES];
  ms_kept_graph *graphs;       /* autograd graphs kept without a backward, largest first (kept_graphs.c) */
  size_t ngraphs;
  ms_module *modules;          /* memory by module (modules.c); NULL without a module record */
  size_t nmodules;
  int64_t module_events, tensor_events, tensors_unmatched; /* tensor events naming no live block */
  ms_external external[MS_EXTERNAL_MAX]; /* the largest groups, largest first */
  size_t nexternal;
  int64_t external_bytes;                 /* all of it */
  bool truncated;
  ms_invalid_free *invalid_frees; /* by count, largest first */
  size_t ninvalid_frees;
  int64_t invalid_free_total, invalid_free_by_kind[4];
  ms_releases releases; /* the allocator's own releases of cached memory: retries, empty_cache... */
  struct ms_causes *causes; /* holders and the garbage collector's runs (causes.c); NULL: none seen */
  /* What the replay suggests (replay/suggest.c): the command that runs it fills this for the
     reports; NULL: not asked (the analysis never calls the replay: it sits above). Not owned. */
  const struct ms_suggestions *suggestions;
  ms_whole_run run; /* the whole run (wholerun.c) */
} ms_analysis;

/* The kind's name in JSON and the page: growing, growing_released, retained, alive. */
const char *ms_leak_kind_name(ms_leak_kind kind);
/* Whether a candidate grew from iteration to iteration (the reports' `leaks`), rather than being
 * held (their `held`); ms_analyze lists the growing candidates first. */
static inline bool ms_leak_grows(const ms_site *s) {
  return s->kind == MS_LEAK_GROWING || s->kind == MS_LEAK_GROWING_RELEASED;
}
/* Why a site shows no stack ("allocated before recording started", "no stack recorded", ...);
 * NULL when it has one. */
const char *ms_site_note(const ms_analysis *a, const ms_site *site);
/* What a caller chooses; {0} (or NULL) chooses everything itself. */
typedef struct ms_analyze_options {
  const char *label;                   /* the iteration label (--iterations; NULL: choose) */
  const ms_category_rules *categories; /* the user's categories (--category; NULL: none) */
} ms_analyze_options;
/* Runs the analysis as o says (NULL: defaults). 0 or -1 (s->error). */
int ms_analyze(ms_snapshot *s, ms_analysis *a, const ms_analyze_options *o);
void ms_analysis_free(ms_analysis *a);
/* Opens the snapshot at `path` and analyzes it, folding `fold`'s frames too (NULL: none): 0, or
 * -1 with the message in s->error and nothing left to free or close. */
int ms_open_analyzed(ms_snapshot *s, ms_analysis *a, const char *path, const ms_fold *fold, const ms_analyze_options *o);

/* ---- where iterations start (iterations.c) ----------------------------------------------- */

/* The start of an iteration, by its source. */
typedef struct ms_boundary {
  int64_t id;    /* mark, recorded step: its event id; else 0 */
  int64_t time;  /* range: start time */
  int64_t alloc; /* inferred: the ordinal of the allocation that starts it; else -1 */
  int64_t end;   /* range: its end */
  bool skipped;  /* recorded steps: the iteration it starts ends in a skipped optimizer step */
} ms_boundary;

/* Normalises a label for grouping: digits and the separators before them dropped. */
void ms_label_key(const char *label, char *out, size_t len);
/* The iterations from marks, else ranges: the label `forced` (NULL: an optimizer's step ranges
 * when they repeat, else the label that repeats most), its boundaries into *out (malloc'd, the
 * caller frees it) and their number; sets a->iteration_label and iteration_source. 0 (*out
 * untouched) when no label repeats (or `forced` is not there); what was read when out of memory
 * or the snapshot is unreadable. */
size_t ms_iterations_from_labels(ms_analysis *a, const char *forced, ms_boundary **out);
/* With no repeated mark or range, from one pass over the allocations, the first of: an
 * optimizer's steps (a->kinds: "optimizer"), the loop of the program's own code at its outermost
 * level that has one ("loop"), the period of their stacks and sizes, the period of their stacks
 * alone ("inferred"; a period whose iterations miss the backward passes the program has is none). As
 * ms_iterations_from_labels; boundaries by allocation ordinal; 0 when none is found. */
size_t ms_iterations_inferred(ms_analysis *a, ms_boundary **out);

/* ---- memory by category (categories.c) -------------------------------------------------- */

/* The number of categories of a (built-in and the user's) and one's name (JSON's key). */
int ms_category_count(const ms_analysis *a);
const char *ms_category_name(const ms_analysis *a, int category);
/* What a built-in category means, in a sentence (the page's legend, docs); "" for the user's. */
const char *ms_category_meaning(const ms_analysis *a, int category);
/* Why a built-in category cannot be told in this snapshot ("no backward pass recorded: ..."), or
 * NULL when its rule has evidence. */
const char *ms_category_missing_evidence(const ms_analysis *a, int category);
/* The name of a kind of parameter (MS_PARAM_*): module, fsdp_sharded, fsdp_gathered. */
const char *ms_parameter_kind_name(int kind);

/* The analysis pass's state for categories by lifetime (analyze.c holds it, categories.c owns
 * it). A block's category is decided when it dies (its free, or the history's end), from its
 * birth and the phases the program went through meanwhile; what was live at the allocated peak
 * and at each iteration's peak is summed from the blocks' deaths: a block counts at a peak when
 * it was made by then (its ordinal at most the peak's mark) and died after it. */
typedef struct ms_lifetimes {
  int ncat;                     /* categories in use (ms_category_count) */
  uint8_t phase;                /* the program's phase now (its last event with a stack) */
  uint32_t backward_begins, optimizer_begins, optimizer_ends;
  int64_t peak_mark;            /* the allocated peak so far: the allocations made by then (a block
                                   whose birth ordinal is at most this was born by then; 0: the first
                                   instant) */
  int64_t at_peak[MS_CATEGORIES], param_at_peak[MS_PARAM_KINDS]; /* live there, counted at death */
  int64_t asked_at_peak[MS_CATEGORIES];     /* the same in bytes asked for (blocks less their slack) */
  int64_t temporary_at_peak[4][2];          /* temporary there by the phase that made it (MS_PHASE_*):
                                               bytes, bytes asked for */
  int cur;                      /* the current iteration (-1: before the first; niters: all closed) */
  size_t niters;
  int64_t iter_peak_mark;       /* the current iteration's peak: as peak_mark */
  int64_t iter_at_peak[MS_CATEGORIES];
  int64_t *iter_peak_marks;     /* [iteration]: each closed iteration's peak mark */
  int64_t *diff;                /* [iteration * ncat + category]: blocks live at closed iterations'
                                   peaks, as differences over iterations (their sums at the end) */
  int64_t *site_bytes;          /* [site * ncat * 2 + category]: the bytes each site made, by
                                   category; then [+ ncat]: those alive at the history's end */
  size_t site_cap, alloc_cap;
  bool failed;                  /* out of memory: what was counted stays, the rest is unknown */
} ms_lifetimes;

/* Starts the state for `niters` iterations; 0, or -1 when out of memory. */
int ms_lifetimes_begin(ms_analysis *a, ms_lifetimes *l, size_t niters);
/* An event in order, before the pass replays it: the phase it is in (events with a stack).
 * Inline: the pass calls it for every event. */
static inline void ms_lifetimes_event(int64_t *stacked_events, const ms_code_kinds *k, ms_lifetimes *l, const ms_event *e) {
  if (!e->stack_id || e->stack_id >= k->nstacks || !k->phase) return;
  uint8_t phase = k->phase[e->stack_id];
  if (phase == MS_PHASE_NONE) return;
  ++*stacked_events;
  if (phase == l->phase) return;
  if (phase == MS_PHASE_BACKWARD) l->backward_begins++;
  if (phase == MS_PHASE_OPTIMIZER) l->optimizer_begins++;
  if (l->phase == MS_PHASE_OPTIMIZER) l->optimizer_ends++;
  l->phase = phase;
}
/* The birth of a block that event e (an allocation, the history's `ordinal`-th from 0) makes. */
static inline ms_birth ms_lifetimes_birth(const ms_code_kinds *k, const ms_lifetimes *l, const ms_event *e, int64_t ordinal) {
  uint8_t phase = e->stack_id && e->stack_id < k->nstacks && k->phase ? k->phase[e->stack_id] : MS_PHASE_NONE;
  int64_t slack = e->requested > 0 && e->requested <= e->size ? e->size - e->requested : 0;
  return (ms_birth){ordinal + 1, l->backward_begins, l->optimizer_begins, l->optimizer_ends,
                    l->cur < (int)l->niters ? l->cur : (int)l->niters - 1, phase, 0, 0, 0, 0, 0,
                    slack > UINT32_MAX ? UINT32_MAX : (uint32_t)slack, 0, 0, 0};
}
/* A block died: freed by e (NULL: alive at the history's end). */
void ms_lifetimes_death(ms_analysis *a, ms_lifetimes *l, const ms_live_slot *b, const ms_event *e);
/* A new allocated peak, right after the history's `allocations`-th allocation. */
void ms_lifetimes_peak(ms_lifetimes *l, int64_t allocations);
/* Iteration k opens after `allocations` allocations (its first instant is its first peak); a new
 * peak of the current iteration right after the `allocations`-th; the current iteration closes. */
void ms_lifetimes_iteration_open(ms_lifetimes *l, int k, int64_t allocations);
void ms_lifetimes_iteration_peak(ms_lifetimes *l, int64_t allocations);
void ms_lifetimes_iteration_close(ms_lifetimes *l);
/* After every block died: the categories at the peaks into a (category_at_peak, each
 * iteration's category_bytes, each site's category, parameter_at_peak); frees l's memory. */
void ms_lifetimes_end(ms_analysis *a, ms_lifetimes *l);
void ms_lifetimes_free(ms_lifetimes *l);
/* What was live at the allocated peak, by category (summing to a->peak_allocated). */
void ms_categories_at_peak(const ms_analysis *a, int64_t bytes[MS_CATEGORIES]);

/* ---- the whole run (wholerun.c) ----------------------------------------------------------- */

/* Reads the run log into a->run and measures it against the window (after the leak candidates
 * are classified). Unreadable or out of memory: none. */
void ms_whole_run_read(ms_analysis *a);
void ms_whole_run_free(ms_whole_run *r);

/* ---- what holds memory (causes.c): holders, the garbage collector's runs -------------------- */

#define MS_GC_RUNS_MAX 4096 /* runs that freed device memory kept, the earliest */
typedef struct ms_gc_run {
  int64_t start_ns, end_ns, thread, collected; /* objects the collector collected */
  int64_t freed_bytes, freed_blocks;           /* device memory freed during it */
  int generation;
} ms_gc_run;
typedef struct ms_site_gc {
  int64_t frees, gc_frees, gc_bytes; /* frees of the site's blocks, those during a run, their bytes */
  int64_t runs, last_run;            /* runs that freed some of it; the last one's number */
  int64_t first_run_ns, last_run_ns; /* when the first and the last of them began */
} ms_site_gc;
#define MS_GC_OPEN_MAX 4      /* runs open at once, on different threads */
#define MS_GC_FREED_MAX 65536 /* blocks freed during runs kept to link cycles to (the earliest) */
typedef struct ms_gc_freed {
  uint64_t address;
  uint32_t site;
  int64_t run; /* its run's number (runs_total then) */
} ms_gc_freed;
typedef struct ms_gc_cycle {
  ms_gc_cycle_row row;
  uint32_t site; /* the site of the block of its largest tensor, freed during run `run` */
  int64_t run;
} ms_gc_cycle;
typedef struct ms_causes {
  ms_holder_row *holders; /* by stack id, block, rank */
  size_t nholders, holders_cap;
  ms_holders_meta walk;
  ms_gc_run *runs; /* those that freed device memory, in time order */
  size_t nruns, runs_cap;
  int64_t runs_total, runs_freeing, freed_bytes; /* every run recorded; those that freed; what they freed */
  ms_site_gc *sites; /* by site index */
  size_t nsites;
  ms_gc_run cur[MS_GC_OPEN_MAX]; /* the runs open, one a thread (MEMSNAP_GC_CYCLES's helper thread
                                  * finishes a run while the program's threads may run others) */
  int64_t cur_number[MS_GC_OPEN_MAX]; /* their numbers (runs_total when each began) */
  int nopen;
  ms_gc_freed *freed; /* blocks freed during runs, in order */
  size_t nfreed, freed_cap;
  ms_gc_cycle *cycles; /* the gc_cycles rows linked to the block a run freed, by site, then in order */
  size_t ncycles, cycles_cap;
  int64_t cycles_unlinked; /* rows whose block no run in the history freed */
} ms_causes;
/* The pass's calls: a gc event; a free of `bytes` of `site`'s block. */
void ms_causes_gc(ms_analysis *a, const ms_event *e);
void ms_causes_free(ms_analysis *a, uint32_t site, int64_t bytes, const ms_event *e);
/* After the pass: the holders table read (a file without it: none). */
void ms_causes_load(ms_analysis *a);
void ms_causes_free_all(ms_analysis *a);
/* The holder rows of `site` (*first the first), 0 when none. */
size_t ms_site_holders(const ms_analysis *a, uint32_t site, const ms_holder_row **first);
/* The site's frees and the collector's share of them; NULL when none were seen. */
const ms_site_gc *ms_site_gc_counts(const ms_analysis *a, uint32_t site);
/* The reference cycles (MEMSNAP_GC_CYCLES) whose largest tensor's block, of `site`, a run freed
 * (*first the first, in the order recorded); 0 when none. */
size_t ms_site_gc_cycles(const ms_analysis *a, uint32_t site, const ms_gc_cycle **first);
/* Whether the site's memory is held by reference cycles: the collector's runs freed it all (90% of
 * its frees at least), or a holder chain ended on a cycle. */
bool ms_site_cycles(const ms_analysis *a, uint32_t site);

/* ---- leak candidates (leaks.c) ----------------------------------------------------------- */

/* Classifies every site (kind, score, bytes per iteration) from the pass's evidence and fills
 * a->leaks (best first) and a->top (most bytes allocated first); on out of memory they stay
 * empty. */
void ms_leaks_classify(ms_analysis *a);
/* A site's live bytes changed by `change` from one iteration boundary to the next (boundary the
 * iteration it ends, from 1): the evidence of growth in steps (the pass calls it). */
void ms_leak_step(ms_site *s, int boundary, int64_t change);
/* The fewest bytes growth in steps adds up to before it counts: less is a cache finding its size. */
#define MS_STEP_GROWTH_MIN ((int64_t)1 << 20)

/* What the iterations say of growth, the verdict reports open with: a site grows (the first
 * candidate is growing, or autograd graphs were kept one after another), grew and was released, nothing grows across two iterations or more, or
 * there are too few iterations to tell. */
typedef enum { MS_GROWTH_UNKNOWN, MS_GROWTH_NONE, MS_GROWTH_RELEASED, MS_GROWTH_GROWING } ms_growth;
ms_growth ms_analysis_growth(const ms_analysis *a);
/* The verdict's name in JSON: unknown, none, released, growing. */
const char *ms_growth_name(ms_growth g);
/* What the sites that do not grow hold at the snapshot (retained and alive candidates): bytes,
 * how many sites, and the largest one's index (-1: none). */
int64_t ms_held_at_snapshot(const ms_analysis *a, size_t *sites, ptrdiff_t *largest);

/* ---- invalid frees (misuse.c) ------------------------------------------------------------ */

const char *ms_invalid_free_kind_name(int kind);
/* Adds an invalid_free event (first pass; `live` is its live-block map). 0, or -1 out of memory. */
int ms_misuse_add(ms_analysis *a, const ms_event *e, ms_live_map *live);
/* Orders the sites, most frequent first (after the pass). */
void ms_misuse_finish(ms_analysis *a);

/* ---- sites matched across snapshots (match.c) -------------------------------------------- */

/* One site in every analysis that has it: site[k] is its index in analysis k + 1 (0: absent);
 * bytes[k] and count[k] what it holds at snapshot k (sums when several stacks share the key). */
typedef struct ms_match_row {
  char *key; /* what identifies it in any process */
  uint32_t *site;
  int64_t *bytes, *count;
} ms_match_row;

typedef struct ms_matches {
  size_t nanalyses;
  ms_match_row *rows; /* in the order first seen */
  size_t n, cap;
  ms_str_index index; /* rows by key */
  ms_strtab frame_keys; /* every frame key seen, numbered: site keys are lists of these numbers */
} ms_matches;

/* Matches the sites of a[0..n) for which want() is true, by what identifies them (function,
 * file and line of every frame; module name and offset for unnamed frames; never addresses or
 * ids), into m. 0, or -1 when out of memory (m left empty). */
int ms_match_sites(const ms_analysis *a, size_t n, bool (*want)(const ms_analysis *a, uint32_t site), ms_matches *m);
/* The leak candidates of a[0..n) matched by site, best first (the best score a site has in any
 * snapshot, then its most bytes): m is filled as by ms_match_sites and *rows (malloc'd, the
 * caller frees it and then m) points into it. Returns how many rows, or -1 when out of memory
 * (m left empty, *rows NULL). */
ptrdiff_t ms_match_leaks(const ms_analysis *a, size_t n, ms_matches *m, const ms_match_row ***rows);
void ms_matches_free(ms_matches *m);

/* ---- two analyses compared (compare.c) ---------------------------------------------------- */

/* What changed from analysis a[0] to a[1] by matched site (at the snapshot). */
typedef struct ms_comparison {
  ms_matches m;
  ms_match_row *rows; /* the rows that changed, by change (the largest increase first) */
  size_t n;
  int64_t bytes[2], blocks[2]; /* held by every matched site at each snapshot */
  size_t both, only[2];        /* sites in both, only in one */
} ms_comparison;
/* Compares a[0] and a[1] into c: 0, or -1 when out of memory (c empty). */
int ms_compare(const ms_analysis *a, ms_comparison *c);
void ms_comparison_free(ms_comparison *c);
/* qsort's order of rows by change, the largest increase first (then by key). */
int ms_compare_change_order(const void *x, const void *y);

/* ---- the ranks of a job (ranks.c) --------------------------------------------------------- */

#define MS_RANKS_MIN 8    /* snapshots from which `memsnap analyze` gives the table of ranks */
#define MS_RANKS_MAX 1000 /* snapshots it takes at once */

/* One rank's snapshot, summarized. */
typedef struct ms_rank {
  bool ok;          /* false: it could not be read or analyzed (error says why) */
  int64_t rank;     /* the snapshot's rank (meta), -1 unknown */
  int64_t pid, events;
  int64_t peak_allocated, peak_reserved;
  int64_t peak_ns;  /* when allocated memory peaked, from the history's start */
  int64_t iterations;
  int64_t growth;   /* bytes a iteration allocated memory grew by at the iterations' ends (the
                       last one's less the first one's, over the iterations between); 0 with fewer
                       than two */
  char error[512];
} ms_rank;

/* Summarizes the snapshots paths[0..n) into r[0..n), each analyzed (folding `fold`, as o says) in
 * one of `jobs` worker processes, with progress on stderr if `progress`. 0, or -1 with err set
 * when shared memory cannot be had; a snapshot that cannot be read is r[i].ok false. */
int ms_ranks_summarize(const char *const *paths, size_t n, const ms_fold *fold, const ms_analyze_options *o, int jobs,
                       bool progress, ms_rank *r, char *err, size_t len);

enum { MS_RANK_PEAK_ALLOCATED, MS_RANK_PEAK_RESERVED, MS_RANK_GROWTH, MS_RANK_METRICS };
typedef struct ms_ranks_verdict {
  size_t readable;        /* ranks read */
  ptrdiff_t median;       /* the rank whose peak allocated is the median (the lower middle one); -1: none read */
  ptrdiff_t outlier;      /* the rank that stands out; -1: none does */
  int metric;             /* MS_RANK_*: by what */
  double score;           /* its excess over the median, in units of the threshold (> 1) */
  int64_t median_value[MS_RANK_METRICS];
} ms_ranks_verdict;
/* The median rank and the one that stands out: a rank stands out by a metric (peak allocated,
 * peak reserved, growth per iteration) when it exceeds the median by more than 3 median absolute
 * deviations of the ranks, 5% of the median (peaks) and 1 MiB; the largest excess wins. */
void ms_ranks_judge(const ms_rank *r, size_t n, ms_ranks_verdict *v);

/* ---- what the report page draws (timeline.c) --------------------------------------------- */

/* Allocated memory split by allocation site, for the timeline's stacked bands: per time bucket
 * (those of allocated_curve), each band's bytes at the moment allocated memory was highest in
 * that bucket (tp), so the bands add up to the curve's peaks. Band k < nsites is
 * sites[site[k]]; band nsites is every other site. */
#define MS_BANDS 12
typedef struct ms_bands {
  uint32_t site[MS_BANDS];
  int nsites;
  int n; /* buckets */
  int64_t t[MS_BUCKETS], tp[MS_BUCKETS];
  int64_t bytes[MS_BUCKETS][MS_BANDS + 1];
  int64_t categories[MS_BUCKETS][MS_CATEGORIES]; /* at the same moment, by category (categories.c) */
} ms_bands;

/* One allocation the page knows by itself (the largest ones: hover, pin, search by address). */
#define MS_DETAIL_MAX 20000
typedef struct ms_detail {
  int64_t alloc_ns, free_ns; /* free_ns -1: alive at the end of the history */
  int64_t size, requested;
  uint64_t address, stream;
  uint32_t site;
} ms_detail;

/* The allocator's state at a checkpoint: each segment as runs of blocks in one state. */
enum { MS_RUN_FREE, MS_RUN_ALLOCATED, MS_RUN_PENDING };
typedef struct ms_run {
  int64_t size;
  uint32_t count; /* blocks merged into the run (free runs: 1) */
  int state;
} ms_run;

typedef struct ms_segment_state {
  uint64_t address, stream;
  int64_t size;
  int device;
  size_t first_run, nruns;
} ms_segment_state;

typedef enum { MS_CP_EVEN, MS_CP_PEAK, MS_CP_ITERATION_PEAK, MS_CP_OOM, MS_CP_END } ms_checkpoint_kind;

#define MS_CHECKPOINTS_EVEN 48
#define MS_CHECKPOINT_SITES 200 /* sites listed per checkpoint; the rest are summed */
#define MS_CHECKPOINT_RUNS 200000     /* runs past which only the peak and the end are kept */
#define MS_CHECKPOINT_RUNS_EACH 50000 /* runs in one checkpoint; its other segments are left out */
typedef struct ms_checkpoint {
  int64_t time_ns;
  ms_checkpoint_kind kind;
  int index; /* the iteration or OOM it marks */
  int64_t allocated, reserved, pending;
  int64_t rounding; /* allocated beyond the requests in live blocks (internal fragmentation) */
  size_t first_segment, nsegments;
  size_t first_site, nsites; /* into site_bytes: live bytes by site, largest first */
  int64_t other_bytes;       /* live in the sites past MS_CHECKPOINT_SITES */
  size_t omitted_segments;   /* segments left out past MS_CHECKPOINT_RUNS_EACH runs */
} ms_checkpoint;

/* Live bytes of the leading leak candidates at the end of every iteration (the page's growth
 * chart): at most MS_LEAK_SERIES candidates, and none past MS_LEAK_SERIES_ITERATIONS iterations. */
#define MS_LEAK_SERIES 64
#define MS_LEAK_SERIES_ITERATIONS 4096

/* The allocator's events (alloc, free_requested, free_completed, segment events) one by one, for
 * the page to step through its state: kept only when there are at most MS_STEPS_MAX of them. */
#define MS_STEPS_MAX 120000
typedef struct ms_step {
  int64_t time_ns, size, requested; /* requested: an allocation's request (its size when unknown) */
  uint64_t address;
  int64_t site; /* an allocation's site; -1 for other events */
  int kind;
} ms_step;

/* One segment's life, for the page's segment timeline ("Active Cached Segment Timeline") and the
 * stack that allocated a segment in its allocator state: from its segment_alloc (or
 * segment_map: each mapped range of an expandable segment is a span) to its segment_free (or the
 * unmap of its pages: a range unmapped in part ends, and what is left of it starts anew). A
 * segment from before the history starts at its first instant (before_history); reserved memory
 * from before it whose ranges are unknown (expandable segments) is one span at address 0. */
typedef struct ms_span {
  uint64_t address, stream;
  int64_t size, start_ns, end_ns; /* end_ns -1: still reserved at the end of the history */
  uint32_t stack_id;              /* of the event that made it (0: none) */
  int device;
  bool before_history;
} ms_span;
#define MS_SPANS_MAX 20000 /* spans kept (the first ones); later ones are counted as omitted */

typedef struct ms_timeline {
  ms_bands bands;
  ms_span *spans; /* in start order */
  size_t nspans;
  int64_t omitted_spans;
  uint64_t devices; /* bit d: device d (below MS_MAX_DEVICES) has memory events or segments */
  ms_step *steps; /* in order */
  size_t nsteps;
  bool steps_kept; /* false: too many (steps empty) */
  int64_t *leak_live; /* [candidate * leak_iterations + iteration], candidates in a->leaks' order */
  size_t leak_series, leak_iterations;
  ms_detail *detail; /* in allocation order */
  size_t ndetail;
  int64_t detail_min_size, allocations; /* allocations smaller than detail_min_size are only in bands */
  ms_checkpoint *checkpoints;           /* in time order */
  size_t ncheckpoints, skipped_checkpoints;
  ms_segment_state *segments;
  size_t nsegments;
  ms_run *runs;
  size_t nruns;
  ms_site_bytes *site_bytes;
  size_t nsite_bytes;
} ms_timeline;

/* Fills a->timeline with one more pass over the events; 0, or -1 (s->error set). */
int ms_analyze_timeline(ms_analysis *a);
void ms_timeline_free(ms_timeline *t);

#endif
