/* whatif.c: a run's history as if the program had changed (`memsnap predict --checkpoint`,
 * `--optimizer`, `--advise`; docs/predict.md, "What if the model changed"): some module calls'
 * forwards checkpointed, another optimizer holding the state. predict.c replays what it makes.
 *
 * Building (ms_whatif_new, one streamed pass over the base's events, then work on what it kept):
 *   - Module calls. With a class name, a call is a run of forward allocations whose stacks hold
 *     the Python frame CLASS.forward (the outermost such frame: a call of a class inside another's
 *     is the outer's); the run ends at the first allocation without it. Consecutive calls from one
 *     line of their caller (a loop over blocks) are told apart by the forward going back: an
 *     allocation whose line in CLASS.forward comes before the previous one's, or whose stack is the
 *     call's first allocation's again, starts the next call. With a module path (module events),
 *     a call is what its forward-begins and forward-ends events enclose; a pattern without a dot
 *     matches the root module's children's paths too (ResNet's `layer1`, `layer*`).
 *   - Where its forward ends: just before the first allocation after it (class), or just after
 *     its forward-ends event (path). Backward passes: the backward events where the history has
 *     them, else runs of events whose stacks are autograd's (code_kinds.c's phases), each ended by
 *     the next allocation of the forward or of an optimizer. A call's backward pass is the first to
 *     begin after its forward ended; a call without one is left alone (evaluation).
 *   - What it saved for backward: the blocks its forward made, alive when its forward ended,
 *     freed in its backward pass from the point its backward begins (path: its backward-begins
 *     event; class: the backward pass's start), except its output: the last block it made that is
 *     still alive when it ends (a module returns its last operation's result, which the caller
 *     uses and the next call's backward frees), not counting a block under 1/16 of one alive
 *     then that the same Python function made just before it (a batch norm's statistics).
 *   - Where a checkpointed forward drops a saved block (add_drops): a forward that saves nothing
 *     holds a block only while it uses it, which the recorded history cannot show. The next
 *     operation that allocates is taken as its user, and it is kept while the forward stays in
 *     that operation's Python function: dropped just before the first allocation after that one
 *     made by another function (or where the forward ends).
 *   - Where the recompute goes: just before its backward-begins event (path); else just after the
 *     last free, before its first saved block's free, of a block that the forward made after this
 *     call (the backward of everything computed after it is done), or at the backward pass's
 *     start when there is none.
 *   - Its forward's time: from its first allocation (its forward-begins event) to its forward's last
 *     allocation or free (its forward-ends event), per instance the mean over its calls: the
 *     recompute's cost, by which candidates.c ranks modules.
 *   - With `find`, the modules that could be checkpointed (ms_whatif_found): the paths of the
 *     forward-begins events, grouped by their parts' trailing numbers, or, without module events,
 *     the classes of the frames CLASS.forward in forward allocations' stacks.
 *   - The optimizer: its steps (step events, else runs of events whose stacks are an optimizer's);
 *     its state (tensor events of role 3 where the history has them, else the stack rules of
 *     categories.c: made in a step and outliving it, or by _init_group), its temporaries (made in
 *     a step and freed in it), the parameters (tensor events of role 1, else module set-up
 *     stacks), and which optimizer it was (the step events' label, else torch/optim's file in the
 *     stacks, else the state's bytes over the parameters').
 *
 * Synthesising (ms_whatif_each, as the replay reads the events again):
 *   - a checkpointed call's saved blocks are freed where its forward drops them; where its recompute
 *     goes, its forward's allocations and frees happen again in their order (temporaries freed as
 *     recorded; the saved blocks again, at their own addresses, so that their recorded frees free
 *     them; the output and other blocks alive at its end until its backward ends: reentrant
 *     checkpointing keeps the recomputed outputs while the inner backward runs);
 *   - another optimizer: the state blocks, in groups of the recorded optimizer's tensors per
 *     parameter (in the order _init_group makes them), become the new one's (kept, resized,
 *     dropped, or joined by copies freed with the group's first block); state from nothing (the
 *     recorded optimizer kept none) is allocated per parameter where the first step begins; the
 *     temporaries are scaled by the new optimizer's temporaries over the recorded one's.
 * Injected events go before the next allocation or free requested (never between a free and its
 * completion); a run of segment events is held back and put after them, next to the allocation
 * it served, so that the replay tells an empty_cache from a retry as before. Addresses of blocks
 * that exist only in the change are tagged with high bits no device address has.
 *
 * Memory: about 60 bytes per allocation of the base, and the calls' forwards (16 bytes per
 * allocation or free in them).
 */
#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

#define NO_FREE INT64_MAX
#define POS_END INT64_MAX                     /* a position after every event */
#define RECOMPUTED(k) (0x8000000000000000ull | (uint64_t)(k))
#define COPY(k, j) (0xC000000000000000ull | ((uint64_t)(k) << 4) | (uint64_t)(j))
#define NEW_STATE(k, j) (0xA000000000000000ull | ((uint64_t)(k) << 4) | (uint64_t)(j))
#define COUNTER_BYTES 64 /* a state block this small is a step count (Adam's `step` on the device) */
#define WALK_MAX 200000  /* frees looked back at for a recompute's place */
#define BACKWARD_SEARCH 4096 /* calls looked back at for a module's backward-begins event */
#define MAX_NEW 8        /* state tensors per parameter an optimizer may have */
#define OUTPUT_LOOK 16   /* allocations looked back at for the result a small block follows */

enum { F_SAVED = 1, F_SURVIVOR = 2, F_STATE = 4, F_COUNTER = 8, F_TEMP = 16, F_PARAM = 32, F_ROLE_STATE = 64, F_ROLE_PARAM = 128 };
enum { INJ_FREE_SAVED, INJ_RELEASE, INJ_RECOMPUTE, INJ_NEW_STATE }; /* at one place, in this order */

typedef struct span {
  int64_t begin, end; /* event ids, [begin, end); end NO_FREE: open at the history's end */
} span;

typedef struct call {
  int32_t pattern;       /* the class pattern, or -1: a module path's call */
  int64_t label;         /* a path's call: its label */
  size_t k0, k1;         /* its allocations, k0 to k1 (none when k1 < k0) */
  size_t op0, op1;       /* its forward's allocations and frees, in ops[] */
  int64_t end_pos;       /* where its forward ends (positions: 2 * event id, + 1 for after it) */
  int64_t bw_pos, bw_end_pos; /* a path's call: its backward-begins and -ends events (0: not seen) */
  int64_t recompute_pos, release_pos;
  size_t saved0, nsaved; /* in saved[] */
  int64_t saved_bytes;
  int32_t instance;      /* ranked */
  int64_t t0, t1;        /* its forward's first and last events' times (ns) */
  bool has_backward, open;
} call;

typedef struct inject {
  int64_t pos;
  int32_t call;   /* -1: the optimizer's new state */
  uint64_t k;     /* INJ_FREE_SAVED: the saved block (allocation number) */
  uint8_t type;
} inject;

struct ms_whatif {
  ms_whatif_info info;
  size_t nalloc, cap;
  uint64_t *addr, *stream;
  int16_t *dev;
  uint32_t *stack;
  int64_t *a_id, *f_id, *req;
  uint8_t *flags;
  int32_t *callof;
  call *calls;
  size_t ncalls, calls_cap;
  int64_t *ops; /* 2k: allocation k; 2k + 1: its free */
  size_t nops, ops_cap;
  size_t *saved, nsaved, saved_cap;
  inject *inj;
  size_t ninj, inj_cap;
  /* the optimizer */
  int32_t recorded;        /* MS_OPT_*, MS_OPT_KEEP when unknown */
  size_t *state_k, nstate; /* state blocks (no counters), in order */
  size_t *params, nparams; /* parameters alive at the first step */
  int64_t first_step;      /* event id, -1 none */
  ms_whatif_module *found; /* the modules that could be checkpointed (ms_whatif_options' find) */
  int nfound;
};

/* ---- optimizers ---------------------------------------------------------------------------- */

static const struct {
  const char *name;
  int tensors;  /* full-size state tensors per parameter (adafactor: 2 factored ones) */
  bool counter; /* a step count */
  double temp;  /* temporaries of a step, in parameters' bytes (foreach implementations) */
} optimizers[MS_OPTIMIZERS] = {
    [MS_OPT_KEEP] = {"(recorded)", 0, false, 0},   [MS_OPT_SGD] = {"sgd", 0, false, 0},
    [MS_OPT_SGD_MOMENTUM] = {"sgd-momentum", 1, false, 0}, [MS_OPT_ADAM] = {"adam", 2, true, 1},
    [MS_OPT_ADAMW] = {"adamw", 2, true, 1},        [MS_OPT_ADAGRAD] = {"adagrad", 1, true, 1},
    [MS_OPT_RMSPROP] = {"rmsprop", 1, true, 1},    [MS_OPT_ADAFACTOR] = {"adafactor", 2, true, 1},
    [MS_OPT_BYTES] = {"bytes", 0, true, 1},
};

int ms_optimizer_parse(const char *text, int32_t *opt, double *bytes) {
  char low[64];
  size_t n = strlen(text);
  if (n == 0 || n >= sizeof low) return -1;
  for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)text[i]);
  for (int i = MS_OPT_SGD; i < MS_OPT_BYTES; i++)
    if (!strcmp(low, optimizers[i].name)) {
      *opt = i, *bytes = 0;
      return 0;
    }
  if (!strcmp(low, "momentum") || !strcmp(low, "sgd_momentum")) {
    *opt = MS_OPT_SGD_MOMENTUM, *bytes = 0;
    return 0;
  }
  char *end;
  double b = strtod(low, &end);
  if (end == low || strcmp(end, "b") || !(b >= 0) || b > 64) return -1;
  *opt = MS_OPT_BYTES, *bytes = b;
  return 0;
}

void ms_optimizer_name(int32_t opt, double bytes, char *out, size_t len) {
  if (opt == MS_OPT_BYTES) snprintf(out, len, "%gB", bytes);
  else snprintf(out, len, "%s", opt >= 0 && opt < MS_OPTIMIZERS ? optimizers[opt].name : "?");
}

int ms_shard_strategy(const char *name) {
  static const char *const names[] = {"fsdp2", "ddp", "zero1", "zero2", "zero3"};
  for (int i = 0; i < 5; i++)
    if (!strcmp(name, names[i])) return i + 1;
  return -1;
}

const char *ms_shard_name(int32_t strategy) {
  static const char *const names[MS_SHARDS] = {"none", "fsdp2", "ddp", "zero1", "zero2", "zero3"};
  return strategy >= 0 && strategy < MS_SHARDS ? names[strategy] : "?";
}

bool ms_change_any(const ms_change *c) {
  return c && (c->checkpoint > 0 || c->optimizer != MS_OPT_KEEP || c->strategy != MS_SHARD_NONE);
}

void ms_change_describe(const ms_whatif *w, const ms_change *c, char *out, size_t len) {
  size_t o = 0;
  out[0] = '\0';
  if (!ms_change_any(c)) {
    snprintf(out, len, "none");
    return;
  }
  if (c->checkpoint > 0) {
    int n = w ? w->info.ninstances : 0, k = c->checkpoint < n ? c->checkpoint : n;
    if ((c->checkpoint == MS_CHANGE_ALL || k == n) && w && w->info.name[0])
      o += (size_t)snprintf(out + o, len - o, "checkpoint every %s call found (%d)", w->info.name, n);
    else if (c->checkpoint == MS_CHANGE_ALL || k == n) o += (size_t)snprintf(out + o, len - o, "checkpoint every module call found (%d)", n);
    else {
      o += (size_t)snprintf(out + o, len - o, "checkpoint %d of %d (", k, n);
      for (int i = 0; i < k && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%s", i ? ", " : "", w->info.instance[i].name);
      if (o < len) o += (size_t)snprintf(out + o, len - o, ")");
    }
  }
  if (c->optimizer != MS_OPT_KEEP && o < len) {
    char name[32];
    ms_optimizer_name(c->optimizer, c->optimizer_bytes, name, sizeof name);
    o += (size_t)snprintf(out + o, len - o, "%soptimizer %s", o ? ", " : "", name);
  }
  if (c->strategy != MS_SHARD_NONE && o < len)
    snprintf(out + o, len - o, "%s%s:%d (rank 0)", o ? ", " : "", ms_shard_name(c->strategy), (int)c->ranks);
}

/* x rounded to the nearest integer (x >= 0; no libm in the CLI). */
static int64_t round_pos(double x) { return x > 0 ? (int64_t)(x + 0.5) : 0; }

/* The least r with r * r >= n (n >= 1). */
static int64_t sqrt_up(int64_t n) {
  int64_t r = 1;
  while (r * r < n) r = r < 3037000000 / 2 ? r * 2 : 3037000000;
  int64_t lo = r / 2 < 1 ? 1 : r / 2;
  while (lo < r) { /* the least in [lo, r] */
    int64_t mid = lo + (r - lo) / 2;
    if (mid * mid >= n) r = mid;
    else lo = mid + 1;
  }
  return r;
}

/* The new optimizer's state for a parameter of p bytes (its recorded state block's request): the
 * blocks' requests into out[MAX_NEW]; how many. */
static int new_state(int32_t opt, double bytes, int64_t p, int64_t *out) {
  switch (opt) {
    case MS_OPT_SGD: return 0;
    case MS_OPT_SGD_MOMENTUM:
    case MS_OPT_ADAGRAD:
    case MS_OPT_RMSPROP: out[0] = p; return 1;
    case MS_OPT_ADAM:
    case MS_OPT_ADAMW: out[0] = out[1] = p; return 2;
    case MS_OPT_ADAFACTOR: { /* a row and a column factor: a square matrix of p / 4 fp32 elements assumed */
      int64_t r = sqrt_up(p / 4 > 0 ? p / 4 : 1);
      out[0] = out[1] = 4 * r;
      return 2;
    }
    case MS_OPT_BYTES: {
      if (bytes <= 0) return 0;
      if (bytes == 4 * (double)(int)(bytes / 4) && bytes / 4 <= MAX_NEW) {
        int m = (int)(bytes / 4);
        for (int j = 0; j < m; j++) out[j] = p;
        return m;
      }
      out[0] = (int64_t)round_pos((double)p * bytes / 4);
      return out[0] > 0;
    }
    default: return 0;
  }
}

/* The recorded optimizer from a name (a class's or a file's): MS_OPT_*, or MS_OPT_KEEP unknown. */
static int32_t optimizer_of_name(const char *name, bool has_state) {
  char low[64];
  size_t i = 0;
  for (; name[i] && i < sizeof low - 1; i++) low[i] = (char)tolower((unsigned char)name[i]);
  low[i] = '\0';
  if (!strcmp(low, "adamw") || !strcmp(low, "fusedadamw")) return MS_OPT_ADAMW;
  if (!strcmp(low, "adam") || !strcmp(low, "nadam") || !strcmp(low, "radam") || !strcmp(low, "adamax") ||
      !strcmp(low, "fusedadam"))
    return MS_OPT_ADAM;
  if (!strcmp(low, "sgd")) return has_state ? MS_OPT_SGD_MOMENTUM : MS_OPT_SGD;
  if (!strcmp(low, "adagrad")) return MS_OPT_ADAGRAD;
  if (!strcmp(low, "rmsprop")) return MS_OPT_RMSPROP;
  if (!strcmp(low, "adafactor")) return MS_OPT_ADAFACTOR;
  return MS_OPT_KEEP;
}

/* ---- building: the pass ---------------------------------------------------------------------- */

typedef struct build {
  ms_whatif *w;
  ms_snapshot *s;
  ms_code_kinds kinds;
  bool kinds_ok;
  const char *const *pattern;
  int npattern;
  bool any_class, any_path;
  int32_t *stack_pattern, *stack_line; /* by stack: the class pattern its outermost CLASS.forward frame
                                          matches (-1 none, -2 not yet) and that frame's line */
  char **label;                        /* by label id (NULL: none) */
  size_t nlabel;
  int8_t *label_match;                 /* by label id: 1 a path pattern matches it */
  ms_live_map live;                    /* address -> allocation (aux) */
  long open, mopen;                    /* the class call and the path call open (-1 none) */
  int mdepth;
  int32_t open_line;
  uint32_t open_first_stack;
  span *bw_ev, *bw_ph, *st_ev, *st_ph; /* backward passes and steps: from events, from stacks */
  size_t nbw_ev, nbw_ph, nst_ev, nst_ph, bw_ev_cap, bw_ph_cap, st_ev_cap, st_ph_cap;
  int bw_depth;
  bool ph_open, st_open, st_ev_open;
  int64_t step_label, last_id, now; /* now: the time of the event being read */
  size_t *freed; /* allocations in the order of their frees */
  size_t nfreed, freed_cap;
  bool any_role_state, any_role_param, host_oom;
  bool find;          /* list the modules that could be checkpointed */
  uint8_t *label_fwd; /* by label id: a module's forward-begins event names it (find) */
} build;

static bool add_span(span **v, size_t *n, size_t *cap, int64_t begin) {
  if (!ms_grow(v, cap, *n + 1, sizeof **v)) return false;
  (*v)[(*n)++] = (span){begin, NO_FREE};
  return true;
}

/* The class pattern of a stack's outermost CLASS.forward frame, and that frame's line. */
static int32_t stack_class(build *b, uint32_t id, int32_t *line) {
  if (!b->any_class || id == 0 || id >= b->s->nstacks) return -1;
  if (b->stack_pattern[id] == -2) {
    const ms_stack *st = &b->s->stacks[id];
    b->stack_pattern[id] = -1;
    for (uint32_t j = st->depth; j-- > 0;) { /* outermost first */
      uint32_t f = st->frames[j];
      if (f >= b->s->nframes || !b->s->frames[f].python || !b->s->frames[f].name) continue;
      const char *name = b->s->frames[f].name;
      size_t n = strlen(name);
      if (n < 9 || strcmp(name + n - 8, ".forward")) continue;
      char cls[512];
      snprintf(cls, sizeof cls, "%.*s", (int)(n - 8), name);
      for (int p = 0; p < b->npattern; p++)
        if (!strchr(b->pattern[p], '.') && fnmatch(b->pattern[p], cls, 0) == 0) {
          b->stack_pattern[id] = p;
          b->stack_line[id] = (int32_t)b->s->frames[f].line;
          break;
        }
      if (b->stack_pattern[id] >= 0) break;
    }
  }
  *line = b->stack_line[id];
  return b->stack_pattern[id];
}

static int phase_of(const build *b, uint32_t stack) {
  return b->kinds_ok && stack && stack < b->kinds.nstacks ? b->kinds.phase[stack] : MS_PHASE_NONE;
}

static bool add_op(build *b, int64_t op) {
  ms_whatif *w = b->w;
  if (!ms_grow(&w->ops, &w->ops_cap, w->nops + 1, sizeof *w->ops)) return false;
  w->ops[w->nops++] = op;
  return true;
}

static long new_call(build *b, int32_t pattern, int64_t label, size_t k0) {
  ms_whatif *w = b->w;
  if (!ms_grow(&w->calls, &w->calls_cap, w->ncalls + 1, sizeof *w->calls)) return -1;
  call *c = &w->calls[w->ncalls];
  memset(c, 0, sizeof *c);
  c->pattern = pattern, c->label = label, c->k0 = k0, c->k1 = k0 - 1, c->op0 = c->op1 = w->nops, c->open = true;
  c->t0 = c->t1 = b->now;
  return (long)w->ncalls++;
}

static void close_call(build *b, long *which, int64_t end_pos) {
  if (*which < 0) return;
  call *c = &b->w->calls[*which];
  c->end_pos = end_pos, c->open = false;
  *which = -1;
}

static bool grow_allocs(ms_whatif *w) {
  if (w->nalloc < w->cap) return true;
  size_t cap = w->cap ? w->cap * 2 : 4096;
#define GROW(f) if (!(w->f = realloc(w->f, sizeof *w->f * cap))) return false;
  GROW(addr) GROW(stream) GROW(dev) GROW(stack) GROW(a_id) GROW(f_id) GROW(req) GROW(flags) GROW(callof)
#undef GROW
  w->cap = cap;
  return true;
}

static int label_row(const ms_label_row *r, void *arg) {
  build *b = arg;
  if (r->event_id <= 0 || r->event_id > (1 << 26)) return 0;
  size_t id = (size_t)r->event_id;
  if (id >= b->nlabel) {
    size_t n = b->nlabel;
    size_t cap = id + 1 > 2 * n ? id + 1 : 2 * n;
    char **v = realloc(b->label, sizeof *v * cap);
    int8_t *m = realloc(b->label_match, cap);
    if (v) b->label = v;
    if (m) b->label_match = m;
    if (!v || !m) return 1;
    memset(b->label + n, 0, sizeof *v * (cap - n));
    memset(b->label_match + n, 0, cap - n);
    b->nlabel = cap;
  }
  if (!(b->label[id] = strdup(r->label))) return 1;
  /* a path pattern against the path with and without its root class; a pattern without a dot
     (a class name) against the root's children too (ResNet's `layer1`, `layer*`) */
  const char *rest = strchr(r->label, '.');
  for (int p = 0; p < b->npattern; p++)
    if (strchr(b->pattern[p], '.') ? fnmatch(b->pattern[p], r->label, 0) == 0 || (rest && fnmatch(b->pattern[p], rest + 1, 0) == 0)
                                   : rest && !strchr(rest + 1, '.') && fnmatch(b->pattern[p], rest + 1, 0) == 0)
      b->label_match[id] = 1;
  return 0;
}

static const char *label_text(const build *b, int64_t id) {
  return id > 0 && (size_t)id < b->nlabel && b->label[id] ? b->label[id] : "";
}

/* The allocation live at address a (-1 none). */
static long live_k(build *b, uint64_t a) {
  ms_live_slot slot;
  if (!a || !ms_live_take(&b->live, a, &slot)) return -1;
  if (ms_live_put(&b->live, slot) != 0) b->host_oom = true;
  return (long)slot.aux;
}

static void on_alloc(build *b, const ms_event *e) {
  ms_whatif *w = b->w;
  int64_t size = e->requested > 0 ? e->requested : e->size;
  if (size <= 0 || !e->address || e->device < 0 || e->device >= MS_MAX_DEVICES) return; /* as align.c */
  if (!grow_allocs(w)) {
    b->host_oom = true;
    return;
  }
  size_t k = w->nalloc++;
  w->addr[k] = e->address, w->stream[k] = e->stream, w->dev[k] = (int16_t)e->device, w->stack[k] = e->stack_id;
  w->a_id[k] = e->id, w->f_id[k] = NO_FREE, w->req[k] = size, w->flags[k] = 0, w->callof[k] = -1;
  ms_live_slot old;
  ms_live_take(&b->live, e->address, &old);
  if (ms_live_put(&b->live, (ms_live_slot){.key = e->address, .aux = (uint32_t)k, .size = e->size}) != 0) b->host_oom = true;
  int phase = phase_of(b, e->stack_id);
  if (phase == MS_PHASE_BACKWARD && !b->ph_open) b->ph_open = add_span(&b->bw_ph, &b->nbw_ph, &b->bw_ph_cap, e->id) || (b->host_oom = true, false);
  if ((phase == MS_PHASE_FORWARD || phase == MS_PHASE_OPTIMIZER) && b->ph_open) b->bw_ph[b->nbw_ph - 1].end = e->id, b->ph_open = false;
  if (phase == MS_PHASE_OPTIMIZER && !b->st_open) b->st_open = add_span(&b->st_ph, &b->nst_ph, &b->st_ph_cap, e->id) || (b->host_oom = true, false);
  if ((phase == MS_PHASE_FORWARD || phase == MS_PHASE_BACKWARD) && b->st_open) b->st_ph[b->nst_ph - 1].end = e->id, b->st_open = false;
  if (b->kinds_ok && e->stack_id && e->stack_id < b->kinds.nstacks && (b->kinds.kind[e->stack_id] & MS_CODE_PARAMETER) &&
      phase != MS_PHASE_BACKWARD && phase != MS_PHASE_OPTIMIZER)
    w->flags[k] |= F_PARAM;
  if (b->mopen >= 0) { /* inside a module path's forward */
    call *c = &w->calls[b->mopen];
    c->k1 = k, w->callof[k] = (int32_t)b->mopen, c->t1 = b->now;
    if (!add_op(b, 2 * (int64_t)k)) b->host_oom = true;
    c->op1 = w->nops;
    return;
  }
  int32_t line = 0, p = stack_class(b, e->stack_id, &line);
  bool forward = phase != MS_PHASE_BACKWARD && phase != MS_PHASE_OPTIMIZER;
  if (b->open >= 0) {
    call *c = &w->calls[b->open];
    if (forward && p == c->pattern && !(line < b->open_line || e->stack_id == b->open_first_stack)) {
      c->k1 = k, w->callof[k] = (int32_t)b->open, b->open_line = line, c->t1 = b->now;
      if (!add_op(b, 2 * (int64_t)k)) b->host_oom = true;
      c->op1 = w->nops;
      return;
    }
    close_call(b, &b->open, 2 * e->id);
  }
  if (forward && p >= 0) {
    if ((b->open = new_call(b, p, 0, k)) < 0) {
      b->host_oom = true;
      return;
    }
    call *c = &w->calls[b->open];
    c->k1 = k, w->callof[k] = (int32_t)b->open, b->open_line = line, b->open_first_stack = e->stack_id;
    if (!add_op(b, 2 * (int64_t)k)) b->host_oom = true;
    c->op1 = w->nops;
  }
}

static void on_free(build *b, const ms_event *e) {
  ms_whatif *w = b->w;
  ms_live_slot slot;
  if (!e->address || !ms_live_take(&b->live, e->address, &slot)) return;
  size_t k = slot.aux;
  w->f_id[k] = e->id;
  if (!ms_grow(&b->freed, &b->freed_cap, b->nfreed + 1, sizeof *b->freed)) {
    b->host_oom = true;
    return;
  }
  b->freed[b->nfreed++] = k;
  int phase = phase_of(b, e->stack_id);
  if (phase == MS_PHASE_BACKWARD && !b->ph_open) b->ph_open = add_span(&b->bw_ph, &b->nbw_ph, &b->bw_ph_cap, e->id) || (b->host_oom = true, false);
  if (phase == MS_PHASE_OPTIMIZER && !b->st_open) b->st_open = add_span(&b->st_ph, &b->nst_ph, &b->st_ph_cap, e->id) || (b->host_oom = true, false);
  long open = b->mopen >= 0 ? b->mopen : b->open;
  if (open >= 0 && w->callof[k] == (int32_t)open) {
    if (!add_op(b, 2 * (int64_t)k + 1)) b->host_oom = true;
    w->calls[open].op1 = w->nops;
    w->calls[open].t1 = b->now;
  }
}

/* A path's call waiting for its backward (or, `begun`, in it): the last such call of `label`. */
static call *waiting_call(build *b, int64_t label, bool begun) {
  ms_whatif *w = b->w;
  for (size_t i = w->ncalls, n = 0; i-- > 0 && n < BACKWARD_SEARCH; n++) {
    call *c = &w->calls[i];
    if (c->pattern >= 0 || c->label != label || c->open) continue;
    if (!begun && c->bw_pos == 0) return c;
    if (begun && c->bw_pos && !c->bw_end_pos) return c;
  }
  return NULL;
}

static void on_module(build *b, const ms_event *e) {
  int64_t label = e->extra;
  bool matched = label > 0 && (size_t)label < b->nlabel && b->label_match[label];
  b->w->info.module_events = true;
  if (b->label_fwd && e->size == MEMSNAP_MODULE_FORWARD && label > 0 && (size_t)label < b->nlabel) b->label_fwd[label] = 1;
  switch (e->size) {
    case MEMSNAP_MODULE_FORWARD:
      if (b->mopen >= 0) {
        if (b->w->calls[b->mopen].label == label) b->mdepth++;
      } else if (matched) {
        close_call(b, &b->open, 2 * e->id);
        if ((b->mopen = new_call(b, -1, label, b->w->nalloc)) < 0) b->host_oom = true;
        b->mdepth = 1;
      }
      break;
    case MEMSNAP_MODULE_FORWARD_END:
      if (b->mopen >= 0 && b->w->calls[b->mopen].label == label && --b->mdepth == 0) {
        b->w->calls[b->mopen].t1 = b->now;
        close_call(b, &b->mopen, 2 * e->id + 1);
      }
      break;
    case MEMSNAP_MODULE_BACKWARD:
      if (matched) {
        call *c = waiting_call(b, label, false);
        if (c) c->bw_pos = 2 * e->id;
      }
      break;
    case MEMSNAP_MODULE_BACKWARD_END:
      if (matched) {
        call *c = waiting_call(b, label, true);
        if (c) c->bw_end_pos = 2 * e->id + 1;
      }
      break;
    default: break;
  }
}

static int pass_event(const ms_event *e, void *arg) {
  build *b = arg;
  b->last_id = e->id;
  b->now = e->time_ns;
  switch (e->kind) {
    case MS_ALLOC: on_alloc(b, e); break;
    case MS_FREE_REQUESTED: on_free(b, e); break;
    case MS_MODULE: on_module(b, e); break;
    case MS_TENSOR: {
      long k = live_k(b, e->address);
      if (k < 0) break;
      if (e->requested == MEMSNAP_TENSOR_OPTIMIZER_STATE) b->w->flags[k] |= F_ROLE_STATE, b->any_role_state = true;
      if (e->requested == MEMSNAP_TENSOR_PARAMETER) b->w->flags[k] |= F_ROLE_PARAM, b->any_role_param = true;
      break;
    }
    case MS_STEP:
      if (e->size == MEMSNAP_STEP_BEGIN && !b->st_ev_open) {
        if (!b->step_label) b->step_label = e->extra;
        b->st_ev_open = add_span(&b->st_ev, &b->nst_ev, &b->st_ev_cap, e->id) || (b->host_oom = true, false);
      } else if (e->size == MEMSNAP_STEP_END && b->st_ev_open) {
        b->st_ev[b->nst_ev - 1].end = e->id + 1; /* the step's last event is before its end */
        b->st_ev_open = false;
      }
      break;
    case MS_BACKWARD:
      if (e->size == 0 && b->bw_depth++ == 0 && !add_span(&b->bw_ev, &b->nbw_ev, &b->bw_ev_cap, e->id)) b->host_oom = true;
      if (e->size == 1 && b->bw_depth > 0 && --b->bw_depth == 0) b->bw_ev[b->nbw_ev - 1].end = e->id;
      break;
    default: break;
  }
  return b->host_oom ? 1 : 0;
}

/* ---- building: after the pass ------------------------------------------------------------- */

static int64_t free_pos(const ms_whatif *w, size_t k) { return w->f_id[k] == NO_FREE ? POS_END : 2 * w->f_id[k]; }

/* The first span beginning at or after position pos (n when none). */
static size_t span_after(const span *v, size_t n, int64_t pos) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (2 * v[mid].begin < pos) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The span holding event id `id` (n when none). */
static size_t span_holding(const span *v, size_t n, int64_t id) {
  size_t lo = 0, hi = n;
  while (lo < hi) { /* the first span beginning after id */
    size_t mid = (lo + hi) / 2;
    if (v[mid].begin <= id) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && id < v[lo - 1].end ? lo - 1 : n;
}

static int cmp_inject(const void *a, const void *b) {
  const inject *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  if (x->type != y->type) return x->type - y->type;
  if (x->call != y->call) return (x->call > y->call) - (x->call < y->call);
  return (x->k > y->k) - (x->k < y->k);
}

static bool add_inject(ms_whatif *w, int64_t pos, int32_t c, uint8_t type, uint64_t k) {
  if (!ms_grow(&w->inj, &w->inj_cap, w->ninj + 1, sizeof *w->inj)) return false;
  w->inj[w->ninj++] = (inject){pos, c, k, type};
  return true;
}

/* The innermost Python frame of a stack (NULL: none), and whether two are one function's. */
static const ms_frame *python_frame(const ms_snapshot *s, uint32_t id) {
  if (id == 0 || id >= s->nstacks) return NULL;
  const ms_stack *st = &s->stacks[id];
  for (uint32_t j = 0; j < st->depth; j++)
    if (st->frames[j] < s->nframes && s->frames[st->frames[j]].python) return &s->frames[st->frames[j]];
  return NULL;
}

static bool same_function(const ms_frame *x, const ms_frame *y) {
  if (x == y) return true;
  if (!x || !y || !x->name || !y->name || strcmp(x->name, y->name)) return false;
  return (!x->file && !y->file) || (x->file && y->file && !strcmp(x->file, y->file));
}

/* Where checkpointed call i's forward drops its saved blocks. A forward that saves nothing for
 * backward holds a block while it is used, which the history cannot show (autograd held it);
 * the rule: the operation that uses a block is the next one that allocates, and it keeps using
 * it while the forward stays in that operation's Python function (GELU's chain of operations
 * on the output of the Linear before it, say). So a saved block is dropped just before the
 * first allocation after the next one that another Python function makes, or where the
 * forward ends. 0, or -1 (out of memory). */
static int add_drops(build *b, int32_t i) {
  ms_whatif *w = b->w;
  const call *c = &w->calls[i];
  size_t n = 0;
  size_t *leave = malloc(sizeof *leave * (c->op1 - c->op0 + 1)); /* the call's allocations, in order */
  int64_t *pos = malloc(sizeof *pos * (c->op1 - c->op0 + 1));
  if (!leave || !pos) {
    free(leave);
    free(pos);
    return -1;
  }
  for (size_t j = c->op0; j < c->op1; j++)
    if (!(w->ops[j] & 1)) leave[n++] = (size_t)(w->ops[j] >> 1);
  /* pos[x]: the position before the first allocation after x that another function makes */
  int64_t next_pos = c->end_pos;
  const ms_frame *next_fn = NULL;
  for (size_t x = n; x-- > 0;) {
    const ms_frame *fn = python_frame(b->s, w->stack[leave[x]]);
    if (x + 1 < n && !same_function(fn, next_fn)) next_pos = 2 * w->a_id[leave[x + 1]];
    pos[x] = next_pos, next_fn = fn;
  }
  int rc = 0;
  for (size_t x = 0; x < n && rc == 0; x++) {
    size_t k = leave[x];
    if (!(w->flags[k] & F_SAVED)) continue;
    int64_t at = x + 1 < n ? pos[x + 1] : c->end_pos;
    if (at > c->end_pos) at = c->end_pos;
    if (!add_inject(w, at, i, INJ_FREE_SAVED, k)) rc = -1;
  }
  free(leave);
  free(pos);
  return rc;
}

static const ms_whatif_instance *rank_base;
static int cmp_instance(const void *a, const void *b) {
  const ms_whatif_instance *x = &rank_base[*(const int32_t *)a], *y = &rank_base[*(const int32_t *)b];
  if (x->saved_bytes != y->saved_bytes) return x->saved_bytes > y->saved_bytes ? -1 : 1;
  return (x->first_event > y->first_event) - (x->first_event < y->first_event);
}

#define WHATIF_NOTE(in, ...)                                                     \
  do {                                                                           \
    if ((in)->nnotes < MS_WHATIF_NOTES)                                          \
      snprintf((in)->notes[(in)->nnotes++], sizeof (in)->notes[0], __VA_ARGS__); \
  } while (0)

/* Each call's saved blocks, the places of its recompute and release, its instance. 0, or -1. */
static int finish_calls(build *b, const span *bw, size_t nbw) {
  ms_whatif *w = b->w;
  ms_whatif_info *in = &w->info;
  ms_strtab names = {0};
  ms_whatif_instance *inst = NULL;
  size_t ninst = 0, inst_cap = 0;
  int32_t *ordinal = NULL; /* by pattern: the calls since the last backward pass */
  size_t last_span = (size_t)-1;
  int rc = -1;
  if (!(ordinal = calloc((size_t)b->npattern + 1, sizeof *ordinal))) goto cleanup;
  for (size_t i = 0; i < w->ncalls; i++) {
    call *c = &w->calls[i];
    if (c->k1 + 1 <= c->k0) continue; /* no allocation */
    size_t si = span_after(bw, nbw, c->end_pos);
    if (si == nbw) {
      in->calls_without_backward++;
      continue;
    }
    const span *sp = &bw[si];
    int64_t sp_end = sp->end == NO_FREE ? POS_END : 2 * sp->end;
    int64_t begin_pos = c->pattern < 0 && c->bw_pos >= c->end_pos && c->bw_pos < sp_end ? c->bw_pos : 2 * sp->begin;
    c->has_backward = true;
    in->calls++;
    /* its output: the last block it made that is alive at its end, but not one of the small
       blocks an operation makes after its result (a batch norm's statistics): one under 1/16 of
       a block alive then that the same Python function made just before it */
    size_t output = (size_t)-1;
    for (size_t k = c->k1 + 1; k-- > c->k0 && output == (size_t)-1;) {
      if (free_pos(w, k) <= c->end_pos) continue;
      const ms_frame *fn = python_frame(b->s, w->stack[k]);
      bool small = false;
      for (size_t j = k, n = 0; fn && j-- > c->k0 && n < OUTPUT_LOOK && !small; n++)
        small = free_pos(w, j) > c->end_pos && w->req[j] / 16 > w->req[k] && same_function(fn, python_frame(b->s, w->stack[j]));
      if (!small) output = k;
    }
    c->saved0 = w->nsaved;
    int64_t first = POS_END, last = 0;
    for (size_t k = c->k0; k <= c->k1; k++) {
      int64_t fp = free_pos(w, k);
      if (fp <= c->end_pos) continue;
      if (k != output && fp >= begin_pos && fp < sp_end) {
        if (!ms_grow(&w->saved, &w->saved_cap, w->nsaved + 1, sizeof *w->saved)) goto cleanup;
        w->saved[w->nsaved++] = k;
        w->flags[k] |= F_SAVED;
        c->saved_bytes += w->req[k];
        if (fp < first) first = fp;
        if (fp > last) last = fp;
      } else {
        w->flags[k] |= F_SURVIVOR;
      }
    }
    c->nsaved = w->nsaved - c->saved0;
    /* where the recompute goes */
    if (c->pattern < 0 && c->bw_pos >= c->end_pos && c->bw_pos < sp_end) {
      c->recompute_pos = c->bw_pos;
    } else {
      c->recompute_pos = 2 * sp->begin;
      size_t lo = 0, hi = b->nfreed; /* the first free at or after the first saved one */
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (2 * w->f_id[b->freed[mid]] < first) lo = mid + 1;
        else hi = mid;
      }
      for (size_t j = lo, n = 0; j-- > 0 && n < WALK_MAX; n++) {
        size_t kk = b->freed[j];
        if (w->f_id[kk] < sp->begin) break;
        if (2 * w->a_id[kk] >= c->end_pos && w->a_id[kk] < sp->begin) {
          c->recompute_pos = 2 * w->f_id[kk] + 1;
          break;
        }
      }
    }
    c->release_pos = c->pattern < 0 && c->bw_end_pos > c->recompute_pos ? c->bw_end_pos : (c->nsaved ? last + 1 : c->recompute_pos);
    /* its instance: a path, or the class's N-th call before this backward pass */
    char name[256];
    if (c->pattern < 0) {
      snprintf(name, sizeof name, "%s", label_text(b, c->label));
      ms_neutralise(name);
    } else {
      if (si != last_span) memset(ordinal, 0, sizeof *ordinal * (size_t)(b->npattern + 1)), last_span = si;
      snprintf(name, sizeof name, "%s #%d", b->pattern[c->pattern], ++ordinal[c->pattern]);
      ms_neutralise(name);
    }
    bool added;
    int64_t id = ms_strtab_add(&names, name, &added);
    if (id < 0) goto cleanup;
    if (added) {
      if (!ms_grow(&inst, &inst_cap, ninst + 1, sizeof *inst)) goto cleanup;
      memset(&inst[ninst], 0, sizeof *inst);
      snprintf(inst[ninst].name, sizeof inst[ninst].name, "%s", name);
      inst[ninst].first_event = w->a_id[c->k0];
      ninst++;
    }
    ms_whatif_instance *n = &inst[id];
    n->calls++;
    n->forward_ns += c->t1 > c->t0 ? c->t1 - c->t0 : 0; /* a sum here, a mean per call below */
    if (c->saved_bytes > n->saved_bytes) n->saved_bytes = c->saved_bytes, n->saved_blocks = (int64_t)c->nsaved;
    c->instance = (int32_t)id;
  }
  /* ranked, the most saved first (as PyTorch's SAC estimator ranks its candidates by memory) */
  int32_t *order = malloc(sizeof *order * (ninst + 1)), *rank = malloc(sizeof *rank * (ninst + 1));
  if (!order || !rank) {
    free(order);
    free(rank);
    goto cleanup;
  }
  for (size_t i = 0; i < ninst; i++) order[i] = (int32_t)i, inst[i].forward_ns /= inst[i].calls > 0 ? inst[i].calls : 1;
  rank_base = inst;
  qsort(order, ninst, sizeof *order, cmp_instance);
  in->instance = malloc(sizeof *in->instance * (ninst + 1));
  if (!in->instance) {
    free(order);
    free(rank);
    goto cleanup;
  }
  for (size_t i = 0; i < ninst; i++) in->instance[i] = inst[order[i]], rank[order[i]] = (int32_t)i;
  in->ninstances = (int)ninst;
  for (size_t i = 0; i < w->ncalls; i++)
    if (w->calls[i].has_backward) w->calls[i].instance = rank[w->calls[i].instance];
  free(order);
  free(rank);
  for (size_t i = 0; i < w->ncalls; i++) {
    const call *c = &w->calls[i];
    if (!c->has_backward || !c->nsaved) continue;
    if (add_drops(b, (int32_t)i) != 0) goto cleanup;
    if (!add_inject(w, c->recompute_pos, (int32_t)i, INJ_RECOMPUTE, 0) || !add_inject(w, c->release_pos, (int32_t)i, INJ_RELEASE, 0))
      goto cleanup;
  }
  rc = 0;
cleanup:
  ms_strtab_free(&names);
  free(inst);
  free(ordinal);
  return rc;
}

/* The optimizer's state, temporaries and parameters, and which optimizer it was. 0, or -1. */
static int finish_optimizer(build *b) {
  ms_whatif *w = b->w;
  ms_whatif_info *in = &w->info;
  const span *st = b->nst_ev ? b->st_ev : b->st_ph;
  size_t nst = b->nst_ev ? b->nst_ev : b->nst_ph;
  in->steps = (int64_t)nst;
  w->first_step = nst ? st[0].begin : -1;
  for (size_t k = 0; k < w->nalloc; k++) {
    size_t si = span_holding(st, nst, w->a_id[k]);
    bool in_step = si < nst;
    bool outlives = in_step && (w->f_id[k] == NO_FREE || w->f_id[k] >= st[si].end);
    bool init = b->kinds_ok && w->stack[k] && w->stack[k] < b->kinds.nstacks &&
                (b->kinds.kind[w->stack[k]] & MS_CODE_OPTIMIZER_STATE) && phase_of(b, w->stack[k]) == MS_PHASE_OPTIMIZER;
    bool state = b->any_role_state ? (w->flags[k] & F_ROLE_STATE) != 0 : (outlives || init);
    if (state) {
      w->flags[k] |= w->req[k] <= COUNTER_BYTES ? F_COUNTER : F_STATE;
      if (w->req[k] <= COUNTER_BYTES) in->counter_blocks++;
      else in->state_blocks++, in->state_bytes += w->req[k];
    } else if (in_step && w->f_id[k] < st[si].end) {
      w->flags[k] |= F_TEMP;
      in->temp_blocks++, in->temp_bytes += w->req[k];
    }
  }
  if (b->any_role_state)
    snprintf(in->state_evidence, sizeof in->state_evidence, "the tensor events of role 3 (optimizer state): %lld blocks",
             (long long)(in->state_blocks + in->counter_blocks));
  else
    snprintf(in->state_evidence, sizeof in->state_evidence, "the stack rules (made in an optimizer's step%s and outliving "
             "it, or by _init_group): %lld blocks", b->nst_ev ? " (step events)" : "",
             (long long)(in->state_blocks + in->counter_blocks));
  if (!(w->state_k = malloc(sizeof *w->state_k * (size_t)(in->state_blocks + 1)))) return -1;
  for (size_t k = 0; k < w->nalloc; k++)
    if (w->flags[k] & F_STATE) w->state_k[w->nstate++] = k;
  /* the parameters alive when the first step began */
  uint8_t want = b->any_role_param ? F_ROLE_PARAM : F_PARAM;
  if (!(w->params = malloc(sizeof *w->params * (w->nalloc + 1)))) return -1;
  for (size_t k = 0; nst && k < w->nalloc; k++)
    if ((w->flags[k] & want) && w->a_id[k] < st[0].begin && (w->f_id[k] == NO_FREE || w->f_id[k] > st[0].begin)) {
      w->params[w->nparams++] = k;
      in->param_blocks++, in->param_bytes += w->req[k];
    }
  /* which optimizer */
  bool has_state = in->state_blocks > 0;
  w->recorded = MS_OPT_KEEP;
  const char *step_name = label_text(b, b->step_label);
  if (step_name[0] && (w->recorded = optimizer_of_name(step_name, has_state)) != MS_OPT_KEEP) {
    snprintf(in->optimizer_source, sizeof in->optimizer_source, "the step events' label '%.100s'", step_name);
    ms_neutralise(in->optimizer_source);
  }
  for (size_t k = 0; w->recorded == MS_OPT_KEEP && k < w->nalloc; k++) {
    if (!(w->flags[k] & (F_STATE | F_TEMP | F_COUNTER)) || !w->stack[k] || w->stack[k] >= b->s->nstacks) continue;
    const ms_stack *sk = &b->s->stacks[w->stack[k]];
    for (uint32_t j = 0; j < sk->depth && w->recorded == MS_OPT_KEEP; j++) {
      const ms_frame *f = sk->frames[j] < b->s->nframes ? &b->s->frames[sk->frames[j]] : NULL;
      const char *at = f && f->file ? strstr(f->file, "/torch/optim/") : NULL;
      if (!at) continue;
      char base[64];
      snprintf(base, sizeof base, "%s", at + 13);
      char *dot = strstr(base, ".py");
      if (dot) *dot = '\0';
      if ((w->recorded = optimizer_of_name(base, has_state)) != MS_OPT_KEEP) {
        snprintf(in->optimizer_source, sizeof in->optimizer_source, "its frames in torch/optim/%s.py", base);
        ms_neutralise(in->optimizer_source);
      }
    }
  }
  if (w->recorded != MS_OPT_KEEP) {
    snprintf(in->recorded_optimizer, sizeof in->recorded_optimizer, "%s", optimizers[w->recorded].name);
    in->tensors_per_param = optimizers[w->recorded].tensors;
  } else {
    int t = in->param_bytes > 0 ? (int)round_pos((double)in->state_bytes / (double)in->param_bytes) : 2;
    in->tensors_per_param = has_state ? (t < 1 ? 1 : t > MAX_NEW ? MAX_NEW : t) : 0;
    snprintf(in->optimizer_source, sizeof in->optimizer_source, "not named in the history: %d state tensors per "
             "parameter assumed (%s)", in->tensors_per_param,
             in->param_bytes > 0 ? "its state's bytes over the parameters'" : "no parameters found: Adam's 2");
  }
  if (has_state && in->tensors_per_param == 0) in->tensors_per_param = 1;
  if (!has_state) in->tensors_per_param = 0;
  if (w->first_step >= 0 && !add_inject(w, 2 * w->first_step, -1, INJ_NEW_STATE, 0)) return -1;
  if (!nst) WHATIF_NOTE(in, "no optimizer step in the history: --optimizer changes nothing");
  else if (!has_state && !w->nparams)
    WHATIF_NOTE(in, "the recorded optimizer kept no state and no parameters were found: another optimizer's state cannot be placed");
  return 0;
}

/* ---- building: the modules that could be checkpointed (find) -------------------------------- */

/* A module path's group into out[len]: each part's trailing digits made one '*'
 * ("GPT2LMHeadModel.transformer.h.3" -> "GPT2LMHeadModel.transformer.h.*", "ResNet.layer1.0" ->
 * "ResNet.layer*.*"): paths that differ only there (a ModuleList's blocks, a model's stages) are
 * one module. */
void ms_whatif_path_group(const char *path, char *out, size_t len) {
  size_t o = 0;
  for (const char *p = path; *p;) {
    const char *end = strchr(p, '.');
    if (!end) end = p + strlen(p);
    const char *d = end;
    while (d > p && isdigit((unsigned char)d[-1])) d--;
    for (const char *c = p; c < d && o + 1 < len; c++) out[o++] = *c;
    if (d < end && o + 1 < len) out[o++] = '*';
    if (*end == '.' && o + 1 < len) out[o++] = '.';
    p = *end ? end + 1 : end;
  }
  out[o] = '\0';
}

/* Adds a found module (pattern; shown as `shown`) unless there, counting its paths. 0, or -1 (out of memory). */
static int add_found(ms_whatif *w, const char *pattern, const char *shown, bool path) {
  for (int i = 0; i < w->nfound; i++)
    if (!strcmp(w->found[i].pattern, pattern)) {
      w->found[i].paths += path;
      return 0;
    }
  if (w->nfound == MS_WHATIF_FOUND) return 0;
  if (!(w->nfound % 16)) {
    ms_whatif_module *f = realloc(w->found, sizeof *f * (size_t)(w->nfound + 16));
    if (!f) return -1;
    w->found = f;
  }
  ms_whatif_module *f = &w->found[w->nfound++];
  memset(f, 0, sizeof *f);
  snprintf(f->pattern, sizeof f->pattern, "%s", pattern);
  snprintf(f->shown, sizeof f->shown, "%s", shown);
  ms_neutralise(f->shown);
  f->paths = path;
  return 0;
}

/* Whether a name can be given to --checkpoint as itself: no glob characters, not too long. */
static bool nameable(const char *name, size_t max) {
  return name[0] && strlen(name) < max && !strpbrk(name, "*?[]\\");
}

/* The modules whose calls could be checkpointed: with module events, their forward-begins
 * events' paths grouped (ms_whatif_path_group), the root left out; else the classes of the Python frames
 * CLASS.forward in the stacks of forward allocations (no qualified names: "Outer.Inner"). 0, or -1. */
static int find_modules(build *b) {
  ms_whatif *w = b->w;
  char group[256];
  if (w->info.module_events) {
    for (size_t id = 1; id < b->nlabel; id++) {
      const char *path = b->label[id], *dot = path ? strchr(path, '.') : NULL;
      if (!b->label_fwd[id] || !dot || !nameable(path, sizeof group - 8)) continue;
      ms_whatif_path_group(path, group, sizeof group);
      if (add_found(w, group, strchr(group, '.') + 1, true) != 0) return -1;
    }
    return 0;
  }
  uint8_t *seen = calloc(b->s->nstacks ? b->s->nstacks : 1, 1);
  if (!seen) return -1;
  int rc = 0;
  for (size_t k = 0; k < w->nalloc && rc == 0; k++) {
    uint32_t id = w->stack[k];
    int phase = phase_of(b, id);
    if (id == 0 || id >= b->s->nstacks || seen[id] || phase == MS_PHASE_BACKWARD || phase == MS_PHASE_OPTIMIZER) continue;
    seen[id] = 1;
    const ms_stack *st = &b->s->stacks[id];
    for (uint32_t j = 0; j < st->depth && rc == 0; j++) {
      const ms_frame *f = st->frames[j] < b->s->nframes ? &b->s->frames[st->frames[j]] : NULL;
      size_t n = f && f->python && f->name ? strlen(f->name) : 0;
      if (n < 9 || strcmp(f->name + n - 8, ".forward") || n - 8 >= sizeof group) continue;
      snprintf(group, sizeof group, "%.*s", (int)(n - 8), f->name);
      if (nameable(group, sizeof group) && !strchr(group, '.')) rc = add_found(w, group, group, false);
    }
  }
  free(seen);
  return rc;
}

ms_whatif *ms_whatif_new(ms_snapshot *s, const ms_whatif_options *opt, char *err, size_t errlen) {
  build b;
  memset(&b, 0, sizeof b);
  ms_whatif *w = calloc(1, sizeof *w);
  const char *const *patterns = opt->patterns;
  int npatterns = opt->patterns ? opt->npatterns : 0;
  bool optimizer = opt->optimizer;
  b.w = w, b.s = s, b.pattern = patterns, b.npattern = npatterns, b.open = b.mopen = -1, b.find = opt->find;
  if (!w) goto oom;
  if (opt->name) snprintf(w->info.name, sizeof w->info.name, "%s", opt->name);
  w->recorded = MS_OPT_KEEP;
  w->first_step = -1;
  for (int p = 0; p < npatterns; p++) {
    if (strchr(patterns[p], '.')) b.any_path = true;
    else b.any_class = true;
  }
  w->info.checkpointing = npatterns > 0;
  w->info.optimizer = optimizer;
  b.kinds_ok = ms_code_kinds_build(s, NULL, &b.kinds) == 0;
  size_t ns = s->nstacks ? s->nstacks : 1;
  if (!(b.stack_pattern = malloc(sizeof *b.stack_pattern * ns)) || !(b.stack_line = calloc(ns, sizeof *b.stack_line))) goto oom;
  for (size_t i = 0; i < ns; i++) b.stack_pattern[i] = -2;
  if (ms_labels_each(s, label_row, &b) != 0) {
    snprintf(err, errlen, "%s", s->error[0] ? s->error : "out of memory reading the labels");
    goto fail;
  }
  if (b.find && !(b.label_fwd = calloc(b.nlabel ? b.nlabel : 1, 1))) goto oom;
  int rc = ms_events_each(s, pass_event, &b);
  if (b.host_oom) goto oom;
  if (rc != 0) {
    snprintf(err, errlen, "%s", s->error);
    goto fail;
  }
  close_call(&b, &b.open, 2 * b.last_id + 1);
  close_call(&b, &b.mopen, 2 * b.last_id + 1);
  if (b.any_path && !w->info.module_events) {
    snprintf(err, errlen, "cannot checkpoint a module path in '%s': its history has no module events (record with "
             "memsnap's PyTorch layer, or give class names: --checkpoint GPT2Block)", s->shown_path);
    goto fail;
  }
  const span *bw = b.nbw_ev ? b.bw_ev : b.bw_ph;
  size_t nbw = b.nbw_ev ? b.nbw_ev : b.nbw_ph;
  w->info.backward_passes = (int64_t)nbw;
  w->info.allocations = (int64_t)w->nalloc;
  if (npatterns && finish_calls(&b, bw, nbw) != 0) goto oom;
  if (b.find && find_modules(&b) != 0) goto oom;
  if (optimizer && finish_optimizer(&b) != 0) goto oom;
  if (npatterns && w->info.calls == 0) {
    char list[512] = "";
    for (int p = 0, o = 0; p < npatterns && o < (int)sizeof list - 8; p++)
      o += snprintf(list + o, sizeof list - (size_t)o, "%s'%.100s'", p ? ", " : "", patterns[p]);
    ms_neutralise(list);
    if (!b.kinds_ok || s->nstacks <= 1)
      snprintf(err, errlen, "cannot checkpoint %s in '%s': its history has no stacks to find module calls in (record "
               "with Python stacks, memsnap run's default)", list, s->shown_path);
    else if (w->ncalls)
      snprintf(err, errlen, "cannot checkpoint %s in '%s': %zu calls found, none with a backward pass after it", list,
               s->shown_path, w->ncalls);
    else
      snprintf(err, errlen, "cannot checkpoint %s in '%s': no module call found (class names match the Python frames "
               "CLASS.forward; module paths (with a dot, or a child of the root: layer1) the module events)", list, s->shown_path);
    goto fail;
  }
  if (npatterns && w->info.calls_without_backward)
    WHATIF_NOTE(&w->info, "%lld module calls have no backward pass after them (evaluation): they are left as recorded",
                (long long)w->info.calls_without_backward);
  if (w->ninj) qsort(w->inj, w->ninj, sizeof *w->inj, cmp_inject);
  goto done;
oom:
  snprintf(err, errlen, "out of memory reading '%s' for the change", s->shown_path);
fail:
  ms_whatif_free(w);
  w = NULL;
done:
  if (b.kinds_ok) ms_code_kinds_free(&b.kinds);
  free(b.stack_pattern);
  free(b.stack_line);
  for (size_t i = 0; i < b.nlabel; i++) free(b.label[i]);
  free(b.label);
  free(b.label_match);
  free(b.label_fwd);
  ms_live_free(&b.live);
  free(b.bw_ev), free(b.bw_ph), free(b.st_ev), free(b.st_ph), free(b.freed);
  return w;
}

void ms_whatif_free(ms_whatif *w) {
  if (!w) return;
  free(w->addr), free(w->stream), free(w->dev), free(w->stack), free(w->a_id), free(w->f_id), free(w->req);
  free(w->flags), free(w->callof), free(w->calls), free(w->ops), free(w->saved), free(w->inj);
  free(w->state_k), free(w->params);
  free(w->info.instance);
  free(w->found);
  free(w);
}

const ms_whatif_info *ms_whatif_info_of(const ms_whatif *w) { return &w->info; }

int ms_whatif_found(const ms_whatif *w, const ms_whatif_module **out) {
  *out = w->found;
  return w->nfound;
}

/* ---- synthesising ---------------------------------------------------------------------------- */

typedef struct stream_state {
  const ms_whatif *w;
  ms_change c;
  ms_whatif_size_fn size;
  void *size_arg;
  int64_t *dropped_count;
  int (*fn)(const ms_event *e, void *arg);
  void *fnarg;
  size_t k, inj_next, state_cur;
  ms_live_map dropped; /* addresses of allocations left out, until their free completes */
  ms_live_map copies;  /* a state group's first block -> the group (aux: its index in state_k) */
  ms_event *queue;     /* segment events held back */
  size_t nqueue, queue_cap;
  double temp_ratio;
  int nnew;            /* the new optimizer's tensors per parameter (for the groups' copies) */
  bool optimizer, counters, host_oom;
  int rc;
} stream_state;

static void emit(stream_state *st, const ms_event *e) {
  if (st->rc == 0) st->rc = st->fn(e, st->fnarg);
}

static void emit_alloc(stream_state *st, const ms_event *at, size_t k, uint64_t address, int64_t request) {
  const ms_whatif *w = st->w;
  ms_event e = {.id = at->id, .time_ns = at->time_ns, .kind = MS_ALLOC, .device = w->dev[k], .stream = w->stream[k],
                .address = address, .size = request, .requested = request, .stack_id = w->stack[k]};
  emit(st, &e);
}

static void emit_free(stream_state *st, const ms_event *at, size_t k, uint64_t address, int64_t request) {
  const ms_whatif *w = st->w;
  ms_event e = {.id = at->id, .time_ns = at->time_ns, .kind = MS_FREE_REQUESTED, .device = w->dev[k], .stream = w->stream[k],
                .address = address, .size = request, .requested = request, .stack_id = w->stack[k]};
  emit(st, &e);
  e.kind = MS_FREE_COMPLETED;
  emit(st, &e);
}

static bool call_on(const stream_state *st, int32_t c) {
  return c >= 0 && st->w->calls[c].instance < st->c.checkpoint;
}

static void inject_one(stream_state *st, const inject *in, const ms_event *at) {
  const ms_whatif *w = st->w;
  if (in->type == INJ_NEW_STATE) {
    if (!st->optimizer || w->info.tensors_per_param > 0) return; /* a recorded state is changed where it is made */
    for (size_t i = 0; i < w->nparams; i++) {
      size_t k = w->params[i];
      int64_t p = st->size(st->size_arg, k), sizes[MAX_NEW];
      if (p <= 0) continue;
      int n = new_state(st->c.optimizer, st->c.optimizer_bytes, p, sizes);
      for (int j = 0; j < n; j++)
        if (sizes[j] > 0) emit_alloc(st, at, k, NEW_STATE(k, j), sizes[j]);
    }
    return;
  }
  if (!call_on(st, in->call)) return;
  const call *c = &w->calls[in->call];
  switch (in->type) {
    case INJ_FREE_SAVED: {
      size_t k = (size_t)in->k;
      int64_t r = st->size(st->size_arg, k);
      if (r > 0) emit_free(st, at, k, w->addr[k], r);
      break;
    }
    case INJ_RECOMPUTE:
      for (size_t i = c->op0; i < c->op1; i++) {
        size_t k = (size_t)(w->ops[i] >> 1);
        int64_t r = st->size(st->size_arg, k);
        if (r <= 0) continue;
        if (w->ops[i] & 1) emit_free(st, at, k, RECOMPUTED(k), r);
        else emit_alloc(st, at, k, (w->flags[k] & F_SAVED) ? w->addr[k] : RECOMPUTED(k), r);
      }
      break;
    case INJ_RELEASE:
      for (size_t k = c->k0; k <= c->k1; k++) {
        int64_t r;
        if ((w->flags[k] & F_SURVIVOR) && (r = st->size(st->size_arg, k)) > 0) emit_free(st, at, k, RECOMPUTED(k), r);
      }
      break;
    default: break;
  }
}

/* Injections due before event `at` (all of them when `at` is NULL: the history's end). */
static void inject_due(stream_state *st, const ms_event *at) {
  const ms_whatif *w = st->w;
  static const ms_event end = {.id = INT64_MAX / 4};
  while (st->inj_next < w->ninj && (!at || w->inj[st->inj_next].pos <= 2 * at->id) && st->rc == 0)
    inject_one(st, &w->inj[st->inj_next++], at ? at : &end);
}

static void flush_queue(stream_state *st) {
  for (size_t i = 0; i < st->nqueue && st->rc == 0; i++) emit(st, &st->queue[i]);
  st->nqueue = 0;
}

static void drop(stream_state *st, uint64_t address) {
  (*st->dropped_count)++;
  if (ms_live_put(&st->dropped, (ms_live_slot){.key = address}) != 0) st->host_oom = true;
}

/* An allocation of the base (number k, request `want` at the size) as the change makes it. */
static void changed_alloc(stream_state *st, const ms_event *e, size_t k, int64_t want) {
  const ms_whatif *w = st->w;
  uint8_t f = w->flags[k];
  size_t group_first = 0;
  bool copies = false;
  if (st->optimizer && (f & (F_TEMP | F_COUNTER | F_STATE))) {
    if (f & F_TEMP) want = (int64_t)round_pos((double)want * st->temp_ratio);
    else if (f & F_COUNTER) want = st->counters ? want : 0;
    else {
      while (st->state_cur < w->nstate && w->state_k[st->state_cur] < k) st->state_cur++;
      size_t i = st->state_cur, tpp = (size_t)w->info.tensors_per_param;
      size_t j = i % tpp, first = i - j;
      int64_t p = w->req[w->state_k[first]], sizes[MAX_NEW];
      int n = new_state(st->c.optimizer, st->c.optimizer_bytes, p, sizes);
      want = j < (size_t)n ? (int64_t)round_pos((double)want * (double)sizes[j] / (double)p) : 0;
      if ((j == tpp - 1 || i + 1 == w->nstate) && (size_t)n > j + 1) copies = true, group_first = first;
    }
  }
  if (want <= 0) {
    drop(st, e->address);
    return;
  }
  ms_event c = *e;
  c.requested = c.size = want;
  emit(st, &c);
  if (copies) {
    size_t k0 = w->state_k[group_first];
    int64_t p = w->req[k0], base = st->size(st->size_arg, k0), sizes[MAX_NEW];
    int n = new_state(st->c.optimizer, st->c.optimizer_bytes, p, sizes);
    for (int j = (int)(st->state_cur - group_first) + 1; j < n; j++)
      emit_alloc(st, e, k0, COPY(k0, j), (int64_t)round_pos((double)base * (double)sizes[j] / (double)p));
    if (ms_live_put(&st->copies, (ms_live_slot){.key = w->addr[k0], .aux = (uint32_t)group_first}) != 0) st->host_oom = true;
  }
}

static int stream_event(const ms_event *e, void *arg) {
  stream_state *st = arg;
  ms_live_slot slot;
  switch (e->kind) {
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_MAP:
    case MS_SEGMENT_UNMAP: /* held back, to follow what is injected before the next event */
      if (!ms_grow(&st->queue, &st->queue_cap, st->nqueue + 1, sizeof *st->queue)) {
        st->host_oom = true;
        return 1;
      }
      st->queue[st->nqueue++] = *e;
      return 0;
    case MS_FREE_COMPLETED:
    case MS_OOM: break;
    default:
      if (st->w) inject_due(st, e);
  }
  flush_queue(st);
  if (st->rc) return st->rc;
  /* an out of memory is the recorded size's (whether this one runs out is the replay's to say);
     the model's events hold no memory */
  if (e->kind == MS_OOM || ms_event_is_model(e->kind)) return 0;
  switch (e->kind) {
    case MS_ALLOC: {
      int64_t size = e->requested > 0 ? e->requested : e->size;
      if (size <= 0 || !e->address || e->device < 0 || e->device >= MS_MAX_DEVICES) { /* as align.c */
        emit(st, e);
        break;
      }
      size_t k = st->k++;
      if (st->dropped.count) ms_live_take(&st->dropped, e->address, &slot);
      if (!st->w || k >= st->w->nalloc) { /* no change, or not read: the file changed since */
        int64_t want = st->size(st->size_arg, k);
        if (want == INT64_MIN) {
          emit(st, e);
          break;
        }
        if (want <= 0) {
          drop(st, e->address);
          break;
        }
        ms_event c = *e;
        c.requested = c.size = want;
        emit(st, &c);
        break;
      }
      changed_alloc(st, e, k, st->size(st->size_arg, k));
      break;
    }
    case MS_FREE_REQUESTED:
      if (st->dropped.count && ms_live_take(&st->dropped, e->address, &slot)) {
        if (ms_live_put(&st->dropped, slot) != 0) st->host_oom = true; /* its completion too */
        break;
      }
      if (st->copies.count && ms_live_take(&st->copies, e->address, &slot)) {
        const ms_whatif *w = st->w;
        size_t first = slot.aux, k0 = w->state_k[first];
        int64_t p = w->req[k0], base = st->size(st->size_arg, k0), sizes[MAX_NEW];
        int n = new_state(st->c.optimizer, st->c.optimizer_bytes, p, sizes);
        size_t last = first + (size_t)w->info.tensors_per_param;
        if (last > w->nstate) last = w->nstate;
        for (int j = (int)(last - first); j < n; j++)
          emit_free(st, e, k0, COPY(k0, j), (int64_t)round_pos((double)base * (double)sizes[j] / (double)p));
      }
      emit(st, e);
      break;
    case MS_FREE_COMPLETED:
      if (st->dropped.count && ms_live_take(&st->dropped, e->address, &slot)) break;
      emit(st, e);
      break;
    default: emit(st, e);
  }
  if (st->host_oom) return 1;
  return st->rc;
}

int ms_whatif_each(const ms_whatif *w, const ms_change *c, ms_snapshot *s, ms_whatif_size_fn size, void *size_arg,
                   int64_t *dropped, int (*fn)(const ms_event *e, void *fnarg), void *fnarg) {
  stream_state st;
  memset(&st, 0, sizeof st);
  int64_t ignored = 0;
  st.w = w && ms_change_any(c) ? w : NULL;
  if (c) st.c = *c;
  st.size = size, st.size_arg = size_arg, st.dropped_count = dropped ? dropped : &ignored, st.fn = fn, st.fnarg = fnarg;
  if (st.w && c->optimizer != MS_OPT_KEEP && w->info.optimizer && w->info.steps > 0) {
    st.optimizer = true;
    st.counters = optimizers[c->optimizer].counter;
    double rec = w->recorded != MS_OPT_KEEP ? optimizers[w->recorded].temp : 1;
    double now = c->optimizer == MS_OPT_BYTES ? c->optimizer_bytes / 8 : optimizers[c->optimizer].temp;
    st.temp_ratio = rec > 0 ? now / rec : 1;
    if (w->info.tensors_per_param == 0) st.optimizer = w->nparams > 0; /* state from nothing */
  }
  if (st.w && !st.optimizer && c->checkpoint <= 0) st.w = NULL;
  int rc = ms_events_each(s, stream_event, &st);
  if (rc == 0 && !st.host_oom) {
    if (st.w) inject_due(&st, NULL);
    flush_queue(&st);
    rc = st.rc;
  }
  if (st.host_oom) {
    snprintf(s->error, sizeof s->error, "out of host memory synthesising the history");
    rc = -1;
  }
  ms_live_free(&st.dropped);
  ms_live_free(&st.copies);
  free(st.queue);
  return rc;
}
