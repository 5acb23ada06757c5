/* shard.c: one GPU's recorded history as rank 0's under data parallelism over N ranks (`memsnap
 * predict --shard fsdp2:N`, ddp:N, zero1:N, zero2:N, zero3:N; docs/predict.md, "Sharded: --shard").
 * predict.c replays what it makes, over what whatif.c makes (checkpointing, another optimizer) and
 * a size's laws.
 *
 * Reading (ms_shard_new, one streamed pass): the parameters are the blocks of the tensor events of
 * role 1 (memsnap's PyTorch layer tells them at the first forward, labelled with their module's
 * path), gradients role 2 (told at each step), the optimizer's state role 3 (else blocks made in a
 * step that outlive it), its temporaries blocks made and freed in one step; the module events of
 * the units (FSDP2's fully_shard'ed modules: the root and, by default, every instance of the
 * repeated block: module paths ending in a number, grouped as ms_whatif_path_group groups them,
 * the outermost such groups with two paths or more), the backward passes' ends.
 *
 * Synthesising (ms_shard_each): the events pass through as whatif.c makes them, and what sharding
 * does is done at the units' module events (before the first event at or after them):
 *   FSDP2 (torch/distributed/fsdp/_fully_shard, PyTorch 2.11): after the last parameter's
 *     allocation, fully_shard: per unit (the blocks, then the root) each parameter's shard is
 *     allocated (its elements padded to a multiple of N, 1/N of them; the recording knows a
 *     parameter's bytes, not its dim 0: rows of one element assumed, so the padding is within
 *     N - 1 rows of PyTorch's), then the full parameters freed (meta_init: each parameter's
 *     allocation is its shard's, and nothing is freed); at a unit's forward: the
 *     all-gather output (N x its padded shards, param dtype) on the all-gather stream (with mixed
 *     precision the copy-in's flat input before it, freed after), the previous unit's all-gather
 *     output freed (the implicit forward prefetch keeps it until the next copy-out), the unsharded
 *     parameters (padded, param dtype) on the compute stream; at its forward's end its unsharded
 *     parameters freed (not the root's); the root's end frees the last all-gather output. In
 *     backward, at a unit's backward-begins event: unsharded again (from its prefetched
 *     all-gather output, freed after the copy-out), then the unit that ended its forward before
 *     it is prefetched (its all-gather output allocated); at its backward-ends event (its
 *     post-backward): its unsharded parameters freed, the previous reduce-scatter input freed,
 *     its reduce-scatter input (padded, reduce dtype) on the compute stream, its unsharded
 *     gradients (as recorded, in param dtype) freed, its sharded gradients (one flat block, 1/N,
 *     on the reduce-scatter stream; in reduce dtype, converted to the parameters' dtype when that
 *     differs) kept until the recorded gradients are freed (zero_grad); at the backward pass's
 *     end the last reduce-scatter input freed. The optimizer's state and temporaries: 1/N of
 *     their elements (rank 0's chunk). Activations as recorded (the same batch per rank). With a
 *     param dtype other than the recorded one, autocast's casts in the recording are left out
 *     (the blocks made under at::autocast::cached_cast in a unit's forward: of the weights and of
 *     activations; without native frames, blocks of a parameter's elements in the param dtype
 *     made while its unit's forward runs): FSDP2's compute in that dtype makes none.
 *   DDP: after the last parameter's allocation, _sync_module_states' flat broadcast buckets
 *     (250 MiB, two in flight, freed), then the Reducer's one bucket of every parameter (the first
 *     iteration's, find_unused_parameters off), rebuilt at the root's second forward: freed, then
 *     the buckets in the order the gradients came (the parameters in reverse, the first bucket
 *     closed at 1 MiB, the others at --bucket-mb), kept; with gradient_as_bucket_view the
 *     recorded gradients are views into them (left out).
 *   ZeRO (DeepSpeed): stage 1 the optimizer's state and temporaries 1/N; stage 2 also the
 *     gradients (each recorded one copied into a reduce bucket and freed at once, a flat
 *     partition of 1/N of them kept until they are freed); stage 3 also the parameters, each
 *     module owning parameters a unit gathered (no separate all-gather buffer) at its forward and
 *     backward and released after each; the reduce buckets (reduce_bucket_size elements, or the
 *     parameters' elements if fewer; two with overlap_comm) allocated with the partitions.
 *   From a recorded FSDP2 run at N (--recorded-shard fsdp2:N) to another N': the history keeps
 *     its events, and the blocks whose size is 1/N of the parameters' are resized to 1/N' (their
 *     elements times N / N', rounded up): the parameters' shards (role 1), the optimizer's state
 *     and temporaries, the sharded gradients (role 2: several gradient tensors in one block) and
 *     whatever else the reduce-scatter stream (the sharded gradients' stream) allocates; the
 *     all-gather outputs, unsharded parameters and gradients, reduce-scatter inputs and
 *     activations do not change with N (but for padding); at N' = 1 the all-gather streams'
 *     blocks (every stream but the compute and the reduce-scatter ones) are left out.
 * Blocks that exist only in the sharded history are tagged with high bits (0x41.. to 0x49..)
 * that neither device addresses nor whatif.c's tags have. Left out: NCCL's own buffers and the
 * communicator's workspace (outside PyTorch's allocator), the collectives' timing (each stream's
 * work is taken as done by the next event of the compute stream).
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

#define TAG(t, i) (((uint64_t)(t) << 56) | ((uint64_t)(i) & 0x00FFFFFFFFFFFFFFull))
enum { T_SHARD = 0x41, T_UNSHARD, T_AG, T_RS, T_RO, T_FG, T_CI, T_BUCKET, T_IPG, T_UGRAD };
#define STREAM_AG 0x5A5A0001ull /* FSDP2's all-gather copy-in stream */
#define STREAM_RS 0x5A5A0002ull /* its reduce-scatter stream */
#define FIRST_BUCKET (1 << 20) /* DDP's first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES) */
#define BROADCAST_BUCKET ((int64_t)250 << 20) /* DDP's _sync_module_states broadcast_bucket_size */
#define COUNTER_BYTES 64       /* a state block this small is a step count */

enum { F_PARAM = 1, F_GRAD = 2, F_STATE = 4, F_TEMP = 8, F_IN_STEP = 16, F_ROLE_STATE = 32, F_CAST = 64, F_SETUP = 128 };
enum { A_INIT, A_FWD, A_FWD_END, A_BWD, A_BWD_END, A_PASS_END, A_ROOT_FWD }; /* actions */

typedef struct action {
  int64_t pos; /* 2 * event id: before it; + 1: after it */
  int32_t unit;
  int64_t seq; /* the order made, for actions at one position */
  uint8_t type;
} action;

typedef struct param {
  int64_t id, bytes; /* its allocation event, its request */
  int32_t unit, owner; /* FSDP2's unit, the module owning it (ZeRO-3's unit) */
  uint64_t address;
} param;

struct ms_shard {
  ms_shard_info info;
  ms_shard_options o;
  param *params;
  size_t nparams;
  int32_t *unit_first, *unit_count; /* by unit: its parameters in order_by_unit */
  size_t *order_by_unit;
  int32_t *owner_first, *owner_count; /* by owning module */
  size_t *order_by_owner;
  int nowners;
  ms_live_map flagged; /* allocation event id -> aux: flags | unit << 8 */
  action *act, *act3;  /* FSDP2's actions (units), ZeRO-3's (owners) */
  size_t nact, nact3;
  int root_unit;
  int64_t last_param_id;
  uint64_t device_stream;
  int16_t device;
  char **unit_path; /* by unit */
  uint64_t rs_stream; /* a recorded FSDP2 run: the sharded gradients' stream (0 none seen) */
};

/* A request as sharding computes with it: held to MS_PREDICT_MAX_BYTES (a hostile file's sizes
 * cannot overflow the sums); sums saturate there too. */
static int64_t clamp(int64_t bytes) { return bytes < 0 ? 0 : bytes > MS_PREDICT_MAX_BYTES ? MS_PREDICT_MAX_BYTES : bytes; }
static int64_t sat_add(int64_t a, int64_t b) { return a > MS_PREDICT_MAX_BYTES - b ? MS_PREDICT_MAX_BYTES : a + b; }

/* ---- reading --------------------------------------------------------------------------------- */

typedef struct modev {
  int64_t id;
  int64_t label;
  uint8_t what;
} modev;

typedef struct bld {
  ms_shard *h;
  ms_snapshot *s;
  ms_live_map live; /* address -> aux: allocation index */
  int64_t *a_id, *req;
  uint64_t *stream;
  int16_t *dev;
  uint8_t *flags;
  int64_t *label, *label_step; /* label_step: the step whose gradient event told it */
  int64_t *in_module;          /* the innermost module whose forward was open when it was made (0 none) */
  uint32_t *stack;             /* its stack */
  int64_t *open;               /* the modules whose forward is open, innermost last */
  size_t nopen, open_cap;
  size_t nalloc, cap;
  size_t *param_k; /* allocation index of each parameter, in their events' order */
  size_t nparam_k, param_cap;
  modev *mods;
  size_t nmods, mods_cap;
  int64_t *pass_end;
  size_t npass_end, pass_cap;
  char **labels;
  size_t nlabel;
  bool step_open, any_role_state, host_oom;
  int64_t step_begin;
  int bw_depth; /* backward passes open (reentrant checkpointing nests them) */
  /* a sharded recording's all-gathers: the first blocks another stream than the parameters'
     allocates after each module's first forward-begins event, before the parameters' stream
     allocates again (FSDP2's copy-in and all-gather output) */
  uint32_t *own_stack;  /* by label: the stack of the first block made while that module ran forward (its class) */
  uint8_t *own_depth;   /* by label: how many modules inside it were running then (its frame CLASS.forward is
                           that many frames X.forward out from the innermost one) */
  int64_t gather_label; /* the module whose first forward began (0: not collecting) */
  int64_t (*gathered)[2]; /* by label: up to two such blocks' bytes */
  uint8_t *gathered_n, *forward_seen;
  size_t ngathered;
  uint64_t param_stream;
  bool param_stream_known;
} bld;

static int label_row(const ms_label_row *r, void *arg) {
  bld *b = arg;
  if (r->event_id <= 0 || r->event_id > (1 << 26)) return 0;
  size_t id = (size_t)r->event_id;
  if (id >= b->nlabel) {
    size_t cap = id + 1 > 2 * b->nlabel ? id + 1 : 2 * b->nlabel;
    char **v = realloc(b->labels, sizeof *v * cap);
    if (!v) return 1;
    memset(v + b->nlabel, 0, sizeof *v * (cap - b->nlabel));
    b->labels = v, b->nlabel = cap;
  }
  free(b->labels[id]);
  return (b->labels[id] = strdup(r->label)) ? 0 : 1;
}

static const char *label_of(const bld *b, int64_t id) {
  return id > 0 && (size_t)id < b->nlabel && b->labels[id] ? b->labels[id] : "";
}

static bool grow(bld *b) {
  if (b->nalloc < b->cap) return true;
  size_t cap = b->cap ? 2 * b->cap : 4096;
#define G(f) if (!(b->f = realloc(b->f, sizeof *b->f * cap))) return false;
  G(a_id) G(req) G(stream) G(dev) G(flags) G(label) G(label_step) G(in_module) G(stack)
#undef G
  b->cap = cap;
  return true;
}

static long live_k(bld *b, uint64_t address) {
  ms_live_slot slot;
  if (!address || !ms_live_take(&b->live, address, &slot)) return -1;
  if (ms_live_put(&b->live, slot) != 0) b->host_oom = true;
  return (long)slot.aux;
}

static int pass_event(const ms_event *e, void *arg) {
  bld *b = arg;
  ms_live_slot slot;
  switch (e->kind) {
    case MS_ALLOC: {
      int64_t size = e->requested > 0 ? e->requested : e->size;
      if (size <= 0 || !e->address || e->device < 0 || e->device >= MS_MAX_DEVICES) break; /* as align.c */
      if (!grow(b)) return b->host_oom = true, 1;
      size_t k = b->nalloc++;
      b->a_id[k] = e->id, b->req[k] = size, b->stream[k] = e->stream, b->dev[k] = (int16_t)e->device;
      b->flags[k] = b->step_open ? F_IN_STEP : 0, b->label[k] = 0, b->label_step[k] = -1;
      b->in_module[k] = b->nopen ? b->open[b->nopen - 1] : 0;
      b->stack[k] = e->stack_id;
      for (size_t i = b->nopen; i-- > 0 && e->stack_id;) { /* the open modules without a stack yet */
        int64_t l = b->open[i];
        if (l > 0 && (size_t)l < b->ngathered && !b->own_stack[l] && b->nopen - 1 - i < 256)
          b->own_stack[l] = e->stack_id, b->own_depth[l] = (uint8_t)(b->nopen - 1 - i);
      }
      ms_live_take(&b->live, e->address, &slot);
      if (ms_live_put(&b->live, (ms_live_slot){.key = e->address, .aux = (uint32_t)k}) != 0) b->host_oom = true;
      if (b->gather_label && b->param_stream_known) {
        int64_t l = b->gather_label;
        if (e->stream == b->param_stream) b->gather_label = 0;
        else if (b->gathered_n[l] < 2) b->gathered[l][b->gathered_n[l]++] = size;
      }
      break;
    }
    case MS_FREE_REQUESTED:
      if (!e->address || !ms_live_take(&b->live, e->address, &slot)) break;
      if (b->step_open && (b->flags[slot.aux] & F_IN_STEP) && b->a_id[slot.aux] >= b->step_begin) b->flags[slot.aux] |= F_TEMP;
      if (!b->nmods) b->flags[slot.aux] |= F_SETUP; /* made and freed before the first module event */
      break;
    case MS_TENSOR: {
      long k = live_k(b, e->address);
      if (k < 0) break;
      if (e->requested == MEMSNAP_TENSOR_PARAMETER && !(b->flags[k] & F_PARAM)) {
        if (!ms_grow(&b->param_k, &b->param_cap, b->nparam_k + 1, sizeof *b->param_k)) return b->host_oom = true, 1;
        b->param_k[b->nparam_k++] = (size_t)k;
        b->flags[k] |= F_PARAM, b->label[k] = e->extra;
        if (!b->param_stream_known) b->param_stream = b->stream[k], b->param_stream_known = true;
      } else if (e->requested == MEMSNAP_TENSOR_GRADIENT && !(b->flags[k] & F_PARAM)) {
        if ((b->flags[k] & F_GRAD) && b->label_step[k] == b->h->info.steps) b->h->info.looks_sharded = true;
        b->flags[k] |= F_GRAD, b->label[k] = e->extra, b->label_step[k] = b->h->info.steps;
      } else if (e->requested == MEMSNAP_TENSOR_OPTIMIZER_STATE && !(b->flags[k] & (F_PARAM | F_GRAD))) {
        b->flags[k] |= F_ROLE_STATE, b->any_role_state = true;
      }
      break;
    }
    case MS_MODULE:
      b->gather_label = 0;
      if (e->size == MEMSNAP_MODULE_FORWARD && e->extra > 0 && (size_t)e->extra < b->ngathered && !b->forward_seen[e->extra]) {
        b->forward_seen[e->extra] = 1;
        b->gather_label = e->extra;
      }
      if (e->size == MEMSNAP_MODULE_FORWARD) {
        if (!ms_grow(&b->open, &b->open_cap, b->nopen + 1, sizeof *b->open)) return b->host_oom = true, 1;
        b->open[b->nopen++] = e->extra;
      } else if (e->size == MEMSNAP_MODULE_FORWARD_END) {
        for (size_t i = b->nopen; i-- > 0;)
          if (b->open[i] == e->extra) {
            b->nopen = i;
            break;
          }
      }
      if (!ms_grow(&b->mods, &b->mods_cap, b->nmods + 1, sizeof *b->mods)) return b->host_oom = true, 1;
      b->mods[b->nmods++] = (modev){e->id, e->extra, (uint8_t)e->size};
      break;
    case MS_STEP:
      if (e->size == MEMSNAP_STEP_BEGIN) b->step_open = true, b->step_begin = e->id, b->h->info.steps++;
      else if (e->size == MEMSNAP_STEP_END) b->step_open = false;
      break;
    case MS_BACKWARD: /* the outermost passes' ends */
      if (e->size == 0) b->bw_depth++;
      if (e->size == 1 && b->bw_depth > 0 && --b->bw_depth == 0) {
        if (!ms_grow(&b->pass_end, &b->pass_cap, b->npass_end + 1, sizeof *b->pass_end)) return b->host_oom = true, 1;
        b->pass_end[b->npass_end++] = e->id;
      }
      break;
    default: break;
  }
  return b->host_oom ? 1 : 0;
}

/* Whether `path` is `unit` or inside it (a prefix ending at a dot). */
static bool inside(const char *path, const char *unit) {
  size_t n = strlen(unit);
  return !strncmp(path, unit, n) && (path[n] == '\0' || path[n] == '.');
}

/* The class of module `label` into out[len] ("" unknown): in the stack of the first block made
 * while it ran forward, the Python frame CLASS.forward as many frames X.forward out from the
 * innermost one as modules inside it were running (stacks loaded). */
static void class_of(const bld *b, int64_t label, char *out, size_t len) {
  out[0] = '\0';
  uint32_t id = label > 0 && (size_t)label < b->ngathered ? b->own_stack[label] : 0;
  if (!id || id >= b->s->nstacks || !b->s->stacks) return;
  const ms_stack *st = &b->s->stacks[id];
  int skip = b->own_depth[label];
  for (uint32_t j = 0; j < st->depth; j++) {
    const ms_frame *f = st->frames[j] < b->s->nframes ? &b->s->frames[st->frames[j]] : NULL;
    size_t n = f && f->python && f->name ? strlen(f->name) : 0;
    if (n > 8 && !strcmp(f->name + n - 8, ".forward") && skip-- == 0) {
      snprintf(out, len, "%.*s", (int)(n - 8), f->name);
      return;
    }
  }
}

/* Whether a --units pattern names module `label` of path `path` (with its root class "Root."): the
 * path with or without its root's class; a pattern without a dot its class (the Python frames
 * CLASS.forward), or a child of the root. */
static bool unit_matches(const bld *b, const char *pattern, int64_t label, const char *path) {
  const char *rest = strchr(path, '.');
  if (strchr(pattern, '.')) return fnmatch(pattern, path, 0) == 0 || (rest && fnmatch(pattern, rest + 1, 0) == 0);
  char cls[256];
  class_of(b, label, cls, sizeof cls);
  if (cls[0] && fnmatch(pattern, cls, 0) == 0) return true;
  return rest && !strchr(rest + 1, '.') && fnmatch(pattern, rest + 1, 0) == 0;
}

static int add_unit(ms_shard *h, const char *path) {
  for (int u = 0; u < h->info.nunits; u++)
    if (!strcmp(h->unit_path[u], path)) return u;
  char **v = realloc(h->unit_path, sizeof *v * (size_t)(h->info.nunits + 1));
  if (!v) return -1;
  h->unit_path = v;
  if (!(v[h->info.nunits] = strdup(path))) return -1;
  if (h->info.nunits < MS_SHARD_UNITS_SHOWN) {
    snprintf(h->info.unit_names[h->info.nunits], sizeof h->info.unit_names[0], "%s", path);
    ms_neutralise(h->info.unit_names[h->info.nunits]);
  }
  return h->info.nunits++;
}

/* By label id: whether a module's forward-begins event names it (NULL: out of memory). */
static uint8_t *forward_labels(const bld *b) {
  uint8_t *fwd = calloc(b->nlabel ? b->nlabel : 1, 1);
  for (size_t i = 0; fwd && i < b->nmods; i++)
    if (b->mods[i].what == MEMSNAP_MODULE_FORWARD && b->mods[i].label > 0 && (size_t)b->mods[i].label < b->nlabel)
      fwd[b->mods[i].label] = 1;
  return fwd;
}

/* ZeRO-3's unit of a parameter of module `path`: the innermost module holding it (itself first)
 * whose forward the module events show; its label id, 0 none. */
static int64_t owner_label(const bld *b, const uint8_t *fwd, const char *path) {
  char p[512];
  snprintf(p, sizeof p, "%s", path);
  for (;;) {
    for (size_t id = 1; id < b->nlabel; id++)
      if (fwd[id] && b->labels[id] && !strcmp(b->labels[id], p)) return (int64_t)id;
    char *dot = strrchr(p, '.');
    if (!dot) return 0;
    *dot = '\0';
  }
}

/* A sharded recording's N: for each unit whose first forward allocated on another stream than
 * the parameters' (FSDP2's all-gather output, after the copy-in's flat input with mixed
 * precision), the output over the copy-in (two blocks) or over the unit's shards (one); the N
 * most units agree on, 0 when none says or they disagree as often. */
static int32_t detect_ranks(const bld *b, const ms_shard *h, const int32_t *label_unit) {
  int32_t votes[64] = {0}, best = 0;
  for (size_t l = 1; l < b->nlabel; l++) {
    int32_t u = label_unit[l];
    if (u < 0 || b->gathered_n[l] == 0) continue;
    int64_t shards = 0;
    for (int32_t j = 0; j < h->unit_count[u]; j++) shards = sat_add(shards, h->params[h->order_by_unit[h->unit_first[u] + j]].bytes);
    int64_t over = b->gathered_n[l] == 2 ? b->gathered[l][0] : shards, out = b->gathered[l][b->gathered_n[l] - 1];
    if (over <= 0 || out % over) continue;
    int64_t n = out / over;
    if (n >= 2 && n < 64) votes[n]++;
  }
  for (int32_t n = 2; n < 64; n++)
    if (votes[n] > votes[best]) best = n;
  for (int32_t n = 2; n < 64; n++)
    if (n != best && votes[n] == votes[best]) return 0;
  return best;
}

/* FSDP2's units: the root, and the modules --units names or the outermost groups of repeated
 * blocks (module paths that end in a number, two or more in a group). 0, or -1 with err set. */
static int choose_units(bld *b, char *err, size_t errlen) {
  ms_shard *h = b->h;
  uint8_t *fwd = forward_labels(b);
  if (!fwd) return snprintf(err, errlen, "out of memory"), -1;
  int rc = -1;
  char (*groups)[256] = NULL;
  int ngroups = 0, *count = NULL;
  if (add_unit(h, h->info.root) < 0) goto oom;
  h->root_unit = 0;
  if (h->o.nunits) {
    for (int p = 0; p < h->o.nunits; p++) {
      int found = 0;
      for (size_t id = 1; id < b->nlabel; id++)
        if (fwd[id] && inside(b->labels[id], h->info.root) && strcmp(b->labels[id], h->info.root) &&
            unit_matches(b, h->o.units[p], (int64_t)id, b->labels[id])) {
          if (add_unit(h, b->labels[id]) < 0) goto oom;
          found++;
        }
      if (!found) {
        char shown[200];
        snprintf(shown, sizeof shown, "%s", h->o.units[p]);
        ms_neutralise(shown);
        char root[256];
        snprintf(root, sizeof root, "%s", h->info.root);
        ms_neutralise(root);
        snprintf(err, errlen, "--units '%s' names no module of '%s' (module paths, with or without the root's class "
                 "'%s', globs allowed: 'transformer.h.*'; a name without a dot: a class, as the Python frames CLASS.forward "
                 "name it, or a child of the root)", shown, b->s->shown_path, root);
        goto done;
      }
    }
    snprintf(h->info.units_rule, sizeof h->info.units_rule, "the root and the modules --units names");
    rc = 0;
    goto done;
  }
  for (size_t id = 1; id < b->nlabel; id++) { /* the groups of paths that end in a number */
    const char *path = fwd[id] ? b->labels[id] : NULL;
    if (!path || !inside(path, h->info.root) || !strcmp(path, h->info.root)) continue;
    size_t n = strlen(path);
    if (n == 0 || path[n - 1] < '0' || path[n - 1] > '9') continue;
    char g[256];
    ms_whatif_path_group(path, g, sizeof g);
    int i = 0;
    while (i < ngroups && strcmp(groups[i], g)) i++;
    if (i == ngroups) {
      void *v = realloc(groups, sizeof *groups * (size_t)(ngroups + 1)), *c;
      if (!v) goto oom;
      groups = v;
      if (!(c = realloc(count, sizeof *count * (size_t)(ngroups + 1)))) goto oom;
      count = c;
      snprintf(groups[ngroups], sizeof groups[0], "%s", g);
      count[ngroups++] = 0;
    }
    count[i]++;
  }
  char rule[512] = "";
  size_t o = 0;
  for (int i = 0; i < ngroups; i++) {
    if (count[i] < 2) continue;
    bool nested = false;
    for (int j = 0; j < ngroups && !nested; j++)
      nested = j != i && count[j] >= 2 && strlen(groups[j]) < strlen(groups[i]) && inside(groups[i], groups[j]);
    if (nested) continue;
    for (size_t id = 1; id < b->nlabel; id++) {
      char g[256];
      if (!fwd[id] || !b->labels[id]) continue;
      ms_whatif_path_group(b->labels[id], g, sizeof g);
      if (!strcmp(g, groups[i]) && add_unit(h, b->labels[id]) < 0) goto oom;
    }
    const char *shown = strchr(groups[i], '.');
    if (o < sizeof rule) o += (size_t)snprintf(rule + o, sizeof rule - o, "%s%s (%d)", o ? ", " : "", shown ? shown + 1 : groups[i], count[i]);
  }
  ms_neutralise(rule);
  snprintf(h->info.units_rule, sizeof h->info.units_rule, "the root and each instance of the repeated block%s%s%s",
           rule[0] ? ": " : " (none found: the root alone)", rule, rule[0] ? ", as FSDP's transformer auto-wrap" : "");
  rc = 0;
  goto done;
oom:
  snprintf(err, errlen, "out of memory");
done:
  free(fwd);
  free(groups);
  free(count);
  return rc;
}

static int cmp_action(const void *x, const void *y) {
  const action *a = x, *b = y;
  if (a->pos != b->pos) return (a->pos > b->pos) - (a->pos < b->pos);
  return (a->seq > b->seq) - (a->seq < b->seq);
}

/* The actions at the module events of `label_unit`'s modules (and at each backward pass's end,
 * and after the last parameter's allocation), in order; with post_first (FSDP2's units), a unit's
 * backward-ends told right after another's backward-begins comes first. Event ids beyond
 * INT64_MAX / 4 (a hostile file's) are left out: positions are twice an id. 0, or -1 (out of
 * memory). */
/* Whether the history allocated between events lo and hi (exclusive). */
static bool allocated_between(const bld *b, int64_t lo, int64_t hi) {
  size_t a = 0, z = b->nalloc; /* the first allocation after lo: a_id is in event order */
  while (a < z) {
    size_t mid = a + (z - a) / 2;
    if (b->a_id[mid] <= lo) a = mid + 1;
    else z = mid;
  }
  return a < b->nalloc && b->a_id[a] < hi;
}

static int make_actions(bld *b, const int32_t *label_unit, bool post_first, action **out, size_t *nout) {
  ms_shard *h = b->h;
  size_t n = 0, cap = 2 * b->nmods + b->npass_end + 2;
  action *v = malloc(sizeof *v * cap);
  if (!v) return -1;
  if (h->last_param_id <= INT64_MAX / 4) v[n] = (action){2 * h->last_param_id + 1, -1, 2 * (int64_t)n, A_INIT}, n++;
  size_t bwd = SIZE_MAX; /* the last action, when it is a unit's backward-begins */
  for (size_t i = 0; i < b->nmods; i++) {
    const modev *m = &b->mods[i];
    if (m->id > INT64_MAX / 4) continue;
    bool in = m->label > 0 && (size_t)m->label < b->nlabel;
    /* the root's forward: a backward pass whose end the history lacks ended before it */
    if (in && m->what == MEMSNAP_MODULE_FORWARD && b->labels[m->label] && !strcmp(b->labels[m->label], h->info.root))
      v[n] = (action){2 * m->id, -1, 2 * (int64_t)n, A_ROOT_FWD}, n++, bwd = SIZE_MAX;
    int32_t u = in ? label_unit[m->label] : -1;
    if (u < 0 || m->what > MEMSNAP_MODULE_BACKWARD_END) continue;
    static const uint8_t type[4] = {A_FWD, A_FWD_END, A_BWD, A_BWD_END};
    v[n] = (action){2 * m->id, u, 2 * (int64_t)n, type[m->what]};
    if (post_first && type[m->what] == A_BWD_END && bwd != SIZE_MAX && v[bwd].unit != u && !allocated_between(b, v[bwd].pos / 2, m->id)) {
      /* One gradient ends a unit's backward and begins the one before it (its input, the other's
         output): the recording tells the begins first, FSDP2 does the post-backward first (its
         RegisterPostBackwardFunction on the ending unit's inputs runs before the multi-grad hook on
         the other's outputs): the one ending reshards and reduces before the next unshards. */
      v[n].pos = v[bwd].pos, v[n].seq = v[bwd].seq - 1;
    }
    bwd = type[m->what] == A_BWD ? n : SIZE_MAX;
    n++;
  }
  for (size_t i = 0; i < b->npass_end; i++)
    if (b->pass_end[i] <= INT64_MAX / 4) v[n] = (action){2 * b->pass_end[i] + 1, -1, 2 * (int64_t)n, A_PASS_END}, n++;
  qsort(v, n, sizeof *v, cmp_action);
  *out = v, *nout = n;
  return 0;
}

/* Groups parameters by key (unit or owner) into first/count/order arrays. 0, or -1. */
static int group_params(ms_shard *h, int n, bool by_owner, int32_t **first, int32_t **count, size_t **order) {
  *first = calloc((size_t)n + 1, sizeof **first), *count = calloc((size_t)n + 1, sizeof **count);
  *order = malloc(sizeof **order * (h->nparams + 1));
  if (!*first || !*count || !*order) return -1;
  for (size_t i = 0; i < h->nparams; i++) (*count)[by_owner ? h->params[i].owner : h->params[i].unit]++;
  int32_t at = 0;
  for (int u = 0; u < n; u++) (*first)[u] = at, at += (*count)[u], (*count)[u] = 0;
  for (size_t i = 0; i < h->nparams; i++) {
    int32_t u = by_owner ? h->params[i].owner : h->params[i].unit;
    (*order)[(*first)[u] + (*count)[u]++] = i;
  }
  return 0;
}

ms_shard *ms_shard_new(ms_snapshot *s, const ms_shard_options *o, char *err, size_t errlen) {
  bld b;
  memset(&b, 0, sizeof b);
  ms_shard *h = calloc(1, sizeof *h);
  int32_t *label_unit = NULL, *label_owner = NULL;
  uint8_t *fwd = NULL;
  if (!h) return snprintf(err, errlen, "out of memory"), NULL;
  h->o = *o;
  if (h->o.recorded_bytes <= 0) h->o.recorded_bytes = 4;
  if (h->o.orig_bytes <= 0) h->o.orig_bytes = h->o.recorded_bytes;
  if (h->o.param_bytes <= 0) h->o.param_bytes = h->o.orig_bytes;
  if (h->o.reduce_bytes <= 0) h->o.reduce_bytes = h->o.param_bytes;
  b.h = h, b.s = s;
  if (ms_labels_each(s, label_row, &b) != 0) {
    snprintf(err, errlen, "%s", s->error[0] ? s->error : "out of memory reading the labels");
    goto fail;
  }
  b.ngathered = b.nlabel;
  if (!(b.gathered = calloc(b.nlabel + 1, sizeof *b.gathered)) || !(b.gathered_n = calloc(b.nlabel + 1, 1)) ||
      !(b.forward_seen = calloc(b.nlabel + 1, 1)) || !(b.own_stack = calloc(b.nlabel + 1, sizeof *b.own_stack)) ||
      !(b.own_depth = calloc(b.nlabel + 1, 1)))
    goto oom;
  int rc = ms_events_each(s, pass_event, &b);
  if (b.host_oom) goto oom;
  if (rc != 0) {
    snprintf(err, errlen, "%s", s->error);
    goto fail;
  }
  ms_shard_info *in = &h->info;
  in->module_events = (int64_t)b.nmods;
  in->backward_passes = (int64_t)b.npass_end;
  in->state_from_events = b.any_role_state;
  if (b.nparam_k == 0) {
    snprintf(err, errlen, "cannot shard '%s': its history tells no parameters (tensor events of role 1, which memsnap's "
             "PyTorch layer records at the model's first forward: record with memsnap run, or memsnap.enable(), and "
             "MEMSNAP_TORCH_MODULES left on)", s->shown_path);
    goto fail;
  }
  if (h->o.recorded_ranks && !in->looks_sharded) {
    snprintf(err, errlen, "'%s' does not look like an FSDP2 run's (each gradient is a block of its own, where FSDP2's are "
             "views into one block per unit): leave --recorded-shard out to shard it", s->shown_path);
    goto fail;
  }
  if (b.nmods == 0) {
    snprintf(err, errlen, "cannot shard '%s': its history has no module events (each module's forward and backward, "
             "which memsnap's PyTorch layer records): the units' all-gathers and reduce-scatters have no place",
             s->shown_path);
    goto fail;
  }
  /* the root: the first part of the first parameter's module path */
  snprintf(in->root, sizeof in->root, "%s", label_of(&b, b.label[b.param_k[0]]));
  char *dot = strchr(in->root, '.');
  if (dot) *dot = '\0';
  if (!in->root[0]) {
    snprintf(err, errlen, "cannot shard '%s': its parameters' tensor events name no module", s->shown_path);
    goto fail;
  }
  if (choose_units(&b, err, errlen) != 0) goto fail;
  if (!(fwd = forward_labels(&b))) goto oom;
  /* the parameters, their units and owning modules */
  if (!(h->params = calloc(b.nparam_k + 1, sizeof *h->params)) || !(label_unit = malloc(sizeof *label_unit * (b.nlabel + 1))) ||
      !(label_owner = malloc(sizeof *label_owner * (b.nlabel + 1))))
    goto oom;
  for (size_t id = 0; id < b.nlabel; id++) {
    label_unit[id] = label_owner[id] = -1;
    for (int u = 0; u < in->nunits && b.labels[id]; u++)
      if (!strcmp(b.labels[id], h->unit_path[u])) label_unit[id] = u;
  }
  h->device = b.dev[b.param_k[0]], h->device_stream = b.stream[b.param_k[0]];
  for (size_t i = 0; i < b.nparam_k; i++) {
    size_t k = b.param_k[i];
    param *p = &h->params[h->nparams++];
    const char *path = label_of(&b, b.label[k]);
    p->id = b.a_id[k], p->bytes = clamp(b.req[k]), p->unit = h->root_unit;
    size_t best = 0;
    for (int u = 0; u < in->nunits; u++)
      if (inside(path, h->unit_path[u]) && strlen(h->unit_path[u]) > best) best = strlen(h->unit_path[u]), p->unit = u;
    int64_t l = owner_label(&b, fwd, path);
    if (l > 0) {
      if (label_owner[l] < 0) label_owner[l] = h->nowners++;
      p->owner = label_owner[l];
    } else {
      p->owner = -1;
    }
    if (b.a_id[k] > h->last_param_id) h->last_param_id = b.a_id[k];
    in->params++, in->param_bytes = sat_add(in->param_bytes, p->bytes);
  }
  for (size_t i = 0; i < h->nparams; i++)
    if (h->params[i].owner < 0) h->params[i].owner = h->nowners++;
  in->param_modules = h->nowners;
  if (group_params(h, in->nunits, false, &h->unit_first, &h->unit_count, &h->order_by_unit) != 0 ||
      group_params(h, h->nowners, true, &h->owner_first, &h->owner_count, &h->order_by_owner) != 0)
    goto oom;
  if (in->looks_sharded) { /* the N it ran at: its all-gather outputs over its units' shards */
    in->detected_ranks = detect_ranks(&b, h, label_unit);
    in->recorded_ranks = h->o.recorded_ranks ? h->o.recorded_ranks : in->detected_ranks;
    h->o.recorded_ranks = in->recorded_ranks;
    if (!in->recorded_ranks) {
      snprintf(err, errlen, "'%s' looks like a sharded run's (several gradients in one block: FSDP2's flat sharded "
               "gradients, or DDP's bucket views), and its all-gathers do not say at how many ranks: give the N it ran "
               "at, --recorded-shard fsdp2:N, to predict another N from it", s->shown_path);
      goto fail;
    }
  }
  /* with a param dtype other than the recorded one: autocast's casts of the parameters (a block of
     a parameter's elements in the param dtype, made while its unit's forward runs), which FSDP2's
     parameters in that dtype do not need */
  int32_t *module_unit = NULL;
  if (h->o.param_bytes != h->o.recorded_bytes) {
    if (!(module_unit = malloc(sizeof *module_unit * (b.nlabel + 1)))) goto oom;
    for (size_t id = 0; id < b.nlabel; id++) {
      size_t best = 0;
      module_unit[id] = -1;
      for (int u = 0; u < in->nunits && b.labels[id]; u++)
        if (inside(b.labels[id], h->unit_path[u]) && strlen(h->unit_path[u]) >= best) best = strlen(h->unit_path[u]), module_unit[id] = u;
    }
    /* with native frames, autocast's casts are the blocks made under its cached_cast: of the
       weights, and of activations to the dtype an operation runs in (down to the param dtype for a
       matmul, up to fp32 for a pow), none of which FSDP2's compute in the param dtype makes; without
       native frames, the casts of the weights alone, by their size and place */
    int8_t *cast_stack = NULL;
    bool frames = false;
    for (size_t f = 0; f < s->nframes && !frames; f++)
      frames = s->frames[f].name && !strncmp(s->frames[f].name, "at::autocast::cached_cast", 25);
    if (frames && !(cast_stack = calloc(s->nstacks + 1, 1))) {
      free(module_unit);
      goto oom;
    }
    for (size_t k = 0; k < b.nalloc; k++) {
      int64_t l = b.in_module[k];
      int32_t u = l > 0 && (size_t)l < b.nlabel ? module_unit[l] : -1;
      if (u < 0 || (b.flags[k] & (F_PARAM | F_GRAD | F_ROLE_STATE | F_IN_STEP))) continue;
      if (frames) {
        uint32_t id = b.stack[k];
        if (!id || id >= s->nstacks) continue;
        if (!cast_stack[id]) {
          cast_stack[id] = 2;
          for (uint32_t j = 0; j < s->stacks[id].depth; j++) {
            uint32_t f = s->stacks[id].frames[j];
            if (f < s->nframes && s->frames[f].name && !strncmp(s->frames[f].name, "at::autocast::cached_cast", 25)) cast_stack[id] = 1;
          }
        }
        if (cast_stack[id] != 1) continue;
        b.flags[k] |= F_CAST, in->cast_blocks++; /* any autocast cast: FSDP2's compute in the param dtype makes none */
        continue;
      }
      for (size_t i = 0; i < h->nparams && !(b.flags[k] & F_CAST); i++)
        if (h->params[i].unit == u && h->params[i].bytes / h->o.recorded_bytes * h->o.param_bytes == b.req[k])
          b.flags[k] |= F_CAST, in->cast_blocks++;
    }
    free(cast_stack);
    free(module_unit);
  }
  /* the blocks sharding changes, by their allocation's event id */
  for (size_t k = 0; k < b.nalloc; k++) {
    uint8_t f = b.flags[k];
    int32_t unit = -1;
    if (f & F_PARAM) f = F_PARAM;
    else if (f & F_CAST) f = F_CAST;
    else if (f & F_GRAD) {
      f = F_GRAD;
      const char *path = label_of(&b, b.label[k]);
      size_t best = 0;
      unit = h->root_unit;
      for (int u = 0; u < in->nunits; u++)
        if (inside(path, h->unit_path[u]) && strlen(h->unit_path[u]) > best) best = strlen(h->unit_path[u]), unit = u;
      in->grads++, in->grad_bytes = sat_add(in->grad_bytes, clamp(b.req[k]));
    } else if ((b.any_role_state ? (f & F_ROLE_STATE) : ((f & F_IN_STEP) && !(f & F_TEMP))) && b.req[k] > COUNTER_BYTES) {
      f = F_STATE;
      in->state_blocks++, in->state_bytes = sat_add(in->state_bytes, clamp(b.req[k]));
    } else if ((f & F_TEMP) && !(f & F_ROLE_STATE)) {
      f = F_TEMP;
      in->temp_blocks++;
    } else if (f & F_SETUP) { /* no other role: the model's making */
      f = F_SETUP;
      in->setup_blocks++, in->setup_bytes = sat_add(in->setup_bytes, clamp(b.req[k]));
    } else {
      continue;
    }
    if (ms_live_put(&h->flagged, (ms_live_slot){.key = (uint64_t)b.a_id[k], .aux = (uint32_t)f | ((uint32_t)(unit + 1) << 8)}) != 0)
      goto oom;
    if (f == F_GRAD && !h->rs_stream) h->rs_stream = b.stream[k];
  }
  for (size_t i = 0; i < h->nparams; i++) h->params[i].address = 0;
  if (make_actions(&b, label_unit, true, &h->act, &h->nact) != 0) goto oom;
  /* ZeRO-3's units: the modules owning parameters, by label */
  for (size_t id = 0; id < b.nlabel; id++) label_unit[id] = label_owner[id];
  if (make_actions(&b, label_unit, false, &h->act3, &h->nact3) != 0) goto oom; /* ZeRO-3: as recorded (not measured) */
  goto done;
oom:
  snprintf(err, errlen, "out of memory reading '%s' for sharding", s->shown_path);
fail:
  ms_shard_free(h);
  h = NULL;
done:
  free(label_unit);
  free(label_owner);
  free(fwd);
  ms_live_free(&b.live);
  free(b.a_id), free(b.req), free(b.stream), free(b.dev), free(b.flags), free(b.label), free(b.label_step), free(b.in_module), free(b.stack), free(b.param_k);
  free(b.open), free(b.gathered), free(b.gathered_n), free(b.forward_seen), free(b.own_stack), free(b.own_depth);
  free(b.mods), free(b.pass_end);
  for (size_t i = 0; i < b.nlabel; i++) free(b.labels[i]);
  free(b.labels);
  return h;
}

void ms_shard_free(ms_shard *h) {
  if (!h) return;
  for (int u = 0; u < h->info.nunits; u++) free(h->unit_path[u]);
  free(h->unit_path);
  free(h->params), free(h->unit_first), free(h->unit_count), free(h->order_by_unit);
  free(h->owner_first), free(h->owner_count), free(h->order_by_owner);
  free(h->act), free(h->act3);
  ms_live_free(&h->flagged);
  free(h);
}

const ms_shard_info *ms_shard_info_of(const ms_shard *h) { return &h->info; }

/* ---- synthesising ---------------------------------------------------------------------------- */

typedef struct unit_rt {
  bool unsharded, in_pass;
  int64_t grad_bytes;  /* its unsharded gradients' bytes at its last post-backward that had them */
  bool ag_pending;     /* a prefetched all-gather output (T_AG, unit) */
  int32_t fwd_index;   /* its place in this iteration's post-forward order (-1 none) */
  uint64_t flat;       /* its sharded gradients' flat block (0 none) */
  int64_t flat_refs;   /* recorded gradients of it not yet freed */
  uint64_t *grads;     /* its unsharded gradients alive (addresses) */
  size_t ngrads, grads_cap;
} unit_rt;

typedef struct sst {
  const ms_shard *h;
  ms_change c;
  int n, strategy;
  int64_t pb, rb, ob, sb; /* element bytes: param dtype, reduce dtype, recorded, sharded (FSDP2's original dtype) */
  int (*fn)(const ms_event *e, void *arg);
  void *fnarg;
  const action *act;
  size_t nact, next;
  int nunits; /* of act's kind */
  const int32_t *first, *count;
  const size_t *order;
  unit_rt *u;
  int32_t *fwd_order;
  size_t nfwd;
  bool held_ag;        /* forward: the previous unit's all-gather output */
  int32_t held_unit;
  bool held_rs;        /* the last reduce-scatter input */
  int32_t rs_unit;
  bool in_backward;
  ms_live_map blocks;  /* recorded addresses changed: key address, aux kind | unit << 8, size */
  uint64_t partition;  /* ZeRO-2/3's flat gradient partition (0 none) */
  int64_t ddp_bucket;  /* DDP's first iteration's one bucket */
  int ddp_forwards;    /* the root's forwards so far (DDP rebuilds its buckets at the second) */
  int64_t partition_refs;
  uint64_t seq;
  ms_event now;        /* the time and id the injected events carry */
  uint64_t compute;    /* the compute stream: the parameters' (the model was made on it) */
  int rc;
  bool host_oom;
} sst;

enum { B_PARAM = 1, B_GRAD_LIVE, B_GRAD_DONE, B_DROP, B_SCALED };

static void emit(sst *st, int kind, uint64_t address, int64_t bytes, uint64_t stream) {
  if (st->rc || bytes <= 0) return;
  ms_event e = {.id = st->now.id, .time_ns = st->now.time_ns, .kind = kind, .device = st->h->device, .stream = stream,
                .address = address, .size = bytes, .requested = bytes};
  st->rc = st->fn(&e, st->fnarg);
}

static void ev_alloc(sst *st, uint64_t a, int64_t bytes, uint64_t stream) { emit(st, MS_ALLOC, a, bytes, stream); }
static void ev_free(sst *st, uint64_t a, int64_t bytes, uint64_t stream) {
  emit(st, MS_FREE_REQUESTED, a, bytes, stream);
  emit(st, MS_FREE_COMPLETED, a, bytes, stream);
}

/* A recorded block of `bytes` as 1/N of its elements (rank 0's chunk: the padded one). */
static int64_t shard_bytes(const sst *st, int64_t bytes, int64_t elem) {
  int64_t elems = (bytes + st->ob - 1) / st->ob;
  return (elems + st->n - 1) / st->n * elem;
}
/* Its elements padded to a multiple of N, in bytes of elem. */
static int64_t padded_bytes(const sst *st, int64_t bytes, int64_t elem) {
  int64_t elems = (bytes + st->ob - 1) / st->ob;
  return (elems + st->n - 1) / st->n * st->n * elem;
}

static int64_t unit_sum(const sst *st, int32_t u, bool padded, int64_t elem) {
  int64_t sum = 0;
  for (int32_t j = 0; j < st->count[u]; j++) {
    int64_t b = st->h->params[st->order[st->first[u] + j]].bytes;
    sum = sat_add(sum, padded ? padded_bytes(st, b, elem) : shard_bytes(st, b, elem));
  }
  return sum;
}

/* Every parameter's bytes, as recorded. */
static int64_t params_sum(const ms_shard *h) {
  int64_t all = 0;
  for (size_t i = 0; i < h->nparams; i++) all = sat_add(all, h->params[i].bytes);
  return all;
}

/* ZeRO-2/3's flat gradient partition: 1/N of every parameter's elements. */
static int64_t partition_bytes(const sst *st) {
  int64_t all = 0;
  for (size_t i = 0; i < st->h->nparams; i++) all = sat_add(all, shard_bytes(st, st->h->params[i].bytes, st->sb));
  return all;
}

/* The unit's unsharded parameters allocated (FSDP2's copy-out; ZeRO-3's gather). */
static void unsharded_alloc(sst *st, int32_t u) {
  for (int32_t j = 0; j < st->count[u]; j++) {
    size_t i = st->order[st->first[u] + j];
    ev_alloc(st, TAG(T_UNSHARD, i), padded_bytes(st, st->h->params[i].bytes, st->pb), st->compute);
  }
  st->u[u].unsharded = true;
}

static void unsharded_free(sst *st, int32_t u) {
  for (int32_t j = 0; j < st->count[u]; j++) {
    size_t i = st->order[st->first[u] + j];
    ev_free(st, TAG(T_UNSHARD, i), padded_bytes(st, st->h->params[i].bytes, st->pb), st->compute);
  }
  st->u[u].unsharded = false;
}

/* FSDP2's all-gather output of unit u (with mixed precision the copy-in's flat input first). */
static void all_gather(sst *st, int32_t u) {
  if (st->n == 1) return;
  if (st->pb != st->sb) ev_alloc(st, TAG(T_CI, u), unit_sum(st, u, false, st->pb), STREAM_AG);
  ev_alloc(st, TAG(T_AG, u), unit_sum(st, u, true, st->pb), STREAM_AG);
  if (st->pb != st->sb) ev_free(st, TAG(T_CI, u), unit_sum(st, u, false, st->pb), STREAM_AG);
}

static void ag_free(sst *st, int32_t u) {
  if (st->n > 1) ev_free(st, TAG(T_AG, u), unit_sum(st, u, true, st->pb), STREAM_AG);
}

/* FSDP2's post-backward of unit u: reshard, reduce-scatter its unsharded gradients (those the
 * recording made in this pass; with gradients kept across steps, one block of the last ones'
 * bytes made here). */
static void post_backward(sst *st, int32_t u) {
  unit_rt *r = &st->u[u];
  if (r->unsharded) unsharded_free(st, u);
  r->in_pass = false;
  /* gradients kept across steps (zero_grad(set_to_none=False)): the recording makes them once, FSDP2
     makes its unsharded gradients in every backward: one block of the last ones' bytes here */
  bool again = r->ngrads == 0 && r->grad_bytes > 0 && r->flat;
  if (r->ngrads == 0 && !again) return;
  int64_t padded = unit_sum(st, u, true, st->rb), part = padded / st->n;
  if (again) ev_alloc(st, TAG(T_UGRAD, u), r->grad_bytes, st->compute);
  if (st->held_rs) ev_free(st, TAG(T_RS, st->rs_unit), unit_sum(st, st->rs_unit, true, st->rb), st->compute);
  ev_alloc(st, TAG(T_RS, u), padded, st->compute);
  st->held_rs = true, st->rs_unit = u;
  if (again) ev_free(st, TAG(T_UGRAD, u), r->grad_bytes, st->compute);
  if (r->ngrads) r->grad_bytes = 0;
  for (size_t i = 0; i < r->ngrads; i++) {
    ms_live_slot slot;
    if (!ms_live_take(&st->blocks, r->grads[i], &slot)) continue;
    ev_free(st, r->grads[i], slot.size, st->compute);
    r->grad_bytes = sat_add(r->grad_bytes, slot.size);
    slot.aux = B_GRAD_DONE | ((uint32_t)u << 8);
    if (ms_live_put(&st->blocks, slot) != 0) st->host_oom = true;
    r->flat_refs++;
  }
  r->ngrads = 0;
  uint64_t ro = TAG(T_RO, ((uint64_t)u << 20) | (st->seq++ & 0xFFFFF));
  ev_alloc(st, ro, part, STREAM_RS);
  if (r->flat) { /* accumulated into the sharded gradients there */
    ev_free(st, ro, part, STREAM_RS);
  } else if (st->rb != st->sb) {
    r->flat = TAG(T_FG, ((uint64_t)u << 20) | (st->seq++ & 0xFFFFF));
    ev_alloc(st, r->flat, unit_sum(st, u, true, st->sb) / st->n, STREAM_RS);
    ev_free(st, ro, part, STREAM_RS);
  } else {
    r->flat = ro;
  }
}

static int64_t flat_bytes(const sst *st, int32_t u, uint64_t flat) {
  return (flat >> 56) == T_FG ? unit_sum(st, u, true, st->sb) / st->n : unit_sum(st, u, true, st->rb) / st->n;
}

/* DDP's bucket rebuild at the second forward: the first iteration's one bucket freed, the
 * buckets in the order the gradients came (the parameters in reverse), the first closed at 1 MiB,
 * the others at --bucket-mb. */
static void ddp_rebuild(sst *st) {
  const ms_shard *h = st->h;
  ev_free(st, TAG(T_BUCKET, 0), st->ddp_bucket, st->compute);
  int64_t cap = FIRST_BUCKET, sum = 0, limit = (int64_t)(h->o.bucket_mb * 1048576.0);
  int nb = 1;
  for (size_t i = h->nparams; i-- > 0;) {
    sum = sat_add(sum, h->params[i].bytes);
    if (sum >= cap || i == 0) {
      ev_alloc(st, TAG(T_BUCKET, nb++), sum, st->compute);
      sum = 0, cap = limit > 0 ? limit : 25 << 20;
    }
  }
}

static void do_init(sst *st) {
  const ms_shard *h = st->h;
  if ((st->strategy == MS_SHARD_FSDP2 || st->strategy == MS_SHARD_ZERO3) && !h->o.meta_init) {
    /* fully_shard: the blocks' units, then the root's (ZeRO-3: every module's) */
    for (int pass = 0; pass < 2; pass++)
      for (int32_t u = 0; u < st->nunits; u++) {
        if (st->strategy == MS_SHARD_FSDP2 && (pass == 0) == (u == h->root_unit)) continue;
        if (st->strategy == MS_SHARD_ZERO3 && pass == 1) continue;
        for (int32_t j = 0; j < st->count[u]; j++) {
          size_t i = st->order[st->first[u] + j];
          ev_alloc(st, TAG(T_SHARD, i), shard_bytes(st, h->params[i].bytes, st->sb), st->compute);
        }
        for (int32_t j = 0; j < st->count[u]; j++) {
          size_t i = st->order[st->first[u] + j];
          ms_live_slot slot;
          if (!h->params[i].address || !ms_live_take(&st->blocks, h->params[i].address, &slot)) continue;
          ev_free(st, h->params[i].address, slot.size, st->compute);
          slot.aux = B_PARAM, slot.size = (int64_t)i;
          if (ms_live_put(&st->blocks, slot) != 0) st->host_oom = true;
        }
      }
  }
  if (st->strategy == MS_SHARD_DDP) {
    /* _sync_module_states: the parameters broadcast in flat buckets of 250 MiB, two in flight */
    int64_t sum = 0, flat[2] = {0, 0};
    int nf = 0;
    for (size_t i = 0; i < h->nparams; i++) {
      sum = sat_add(sum, h->params[i].bytes);
      if (sum < BROADCAST_BUCKET && i + 1 < h->nparams) continue;
      if (nf >= 2) ev_free(st, TAG(T_CI, nf - 2), flat[nf % 2], st->compute);
      ev_alloc(st, TAG(T_CI, nf), sum, st->compute);
      flat[nf++ % 2] = sum, sum = 0;
    }
    for (int j = nf > 2 ? nf - 2 : 0; j < nf; j++) ev_free(st, TAG(T_CI, j), flat[j % 2], st->compute);
    /* the Reducer's first buckets: one of every parameter (rebuilt at the second forward) */
    st->ddp_bucket = params_sum(h);
    ev_alloc(st, TAG(T_BUCKET, 0), st->ddp_bucket, st->compute);
    st->ddp_forwards = 0;
  }
  if (st->strategy >= MS_SHARD_ZERO1) { /* the reduce buckets */
    int64_t all = params_sum(h);
    int64_t bucket = h->o.reduce_bucket * st->ob;
    if (bucket <= 0 || bucket > all) bucket = all;
    for (int j = 0; j < (h->o.overlap_comm ? 2 : 1); j++) ev_alloc(st, TAG(T_IPG, j), bucket, st->compute);
  }
}

static void do_action(sst *st, const action *a) {
  int32_t u = a->unit;
  unit_rt *r = u >= 0 ? &st->u[u] : NULL;
  bool fsdp = st->strategy == MS_SHARD_FSDP2, z3 = st->strategy == MS_SHARD_ZERO3;
  if (a->type == A_INIT) {
    do_init(st);
    return;
  }
  if (st->strategy == MS_SHARD_DDP && a->type == A_FWD && u == st->h->root_unit && !st->in_backward && ++st->ddp_forwards == 2)
    ddp_rebuild(st);
  if (!fsdp && !z3) return;
  bool root = fsdp && u == st->h->root_unit;
  switch (a->type) {
    case A_FWD:
      if (r->unsharded) break;
      if (st->in_backward) { /* a checkpointed forward recomputed: its backward unsharded it already, or now */
        if (fsdp) all_gather(st, u);
        unsharded_alloc(st, u);
        if (fsdp) ag_free(st, u);
        break;
      }
      if (fsdp) {
        all_gather(st, u);
        if (st->held_ag) ag_free(st, st->held_unit);
        unsharded_alloc(st, u);
        st->held_ag = st->n > 1, st->held_unit = u;
      } else {
        unsharded_alloc(st, u);
      }
      break;
    case A_FWD_END:
      if (st->in_backward) break;
      if (fsdp) {
        if (st->nfwd < (size_t)st->nunits * 64) r->fwd_index = (int32_t)st->nfwd, st->fwd_order[st->nfwd++] = u;
        if (root) {
          if (st->held_ag) ag_free(st, st->held_unit);
          st->held_ag = false;
        } else if (r->unsharded) {
          unsharded_free(st, u);
        }
      } else if (r->unsharded) {
        unsharded_free(st, u);
      }
      break;
    case A_BWD:
      st->in_backward = true;
      r->in_pass = true;
      if (!r->unsharded) {
        if (fsdp && !r->ag_pending) all_gather(st, u);
        unsharded_alloc(st, u);
        if (fsdp) ag_free(st, u);
        r->ag_pending = false;
      }
      if (fsdp && r->fwd_index > 0) { /* the backward prefetch: the unit whose forward ended before */
        int32_t t = st->fwd_order[r->fwd_index - 1];
        r->fwd_index = -1;
        if (!st->u[t].unsharded && !st->u[t].ag_pending && st->n > 1) {
          all_gather(st, t);
          st->u[t].ag_pending = true;
        }
      }
      break;
    case A_BWD_END:
      if (fsdp) post_backward(st, u);
      else if (r->unsharded) unsharded_free(st, u);
      break;
    default: break;
  }
}

static void pass_end(sst *st) {
  bool fsdp = st->strategy == MS_SHARD_FSDP2;
  for (int32_t u = 0; u < st->nunits; u++) {
    unit_rt *r = &st->u[u];
    if (fsdp && (r->in_pass || r->unsharded || r->ngrads)) post_backward(st, u);
    else if (r->unsharded) unsharded_free(st, u);
    if (r->ag_pending) ag_free(st, u), r->ag_pending = false;
    r->fwd_index = -1;
  }
  if (st->held_rs) ev_free(st, TAG(T_RS, st->rs_unit), unit_sum(st, st->rs_unit, true, st->rb), st->compute);
  st->held_rs = false, st->in_backward = false, st->nfwd = 0;
}

/* The actions due before position pos; what they allocate and free carries the id of the event
 * they stand at (a module event, a backward pass's end, the last parameter's allocation) and the
 * time of the event about to pass. */
static void actions_due(sst *st, int64_t pos) {
  int64_t id = st->now.id;
  while (st->next < st->nact && st->act[st->next].pos <= pos && st->rc == 0) {
    const action *a = &st->act[st->next++];
    st->now.id = a->pos / 2;
    if (a->type == A_PASS_END || (a->type == A_ROOT_FWD && st->in_backward)) pass_end(st);
    else if (a->type != A_ROOT_FWD) do_action(st, a);
  }
  st->now.id = id;
}

static bool put_block(sst *st, uint64_t address, uint32_t aux, int64_t size) {
  if (ms_live_put(&st->blocks, (ms_live_slot){.key = address, .aux = aux, .size = size}) != 0) st->host_oom = true;
  return !st->host_oom;
}

static int shard_event(const ms_event *e, void *arg) {
  sst *st = arg;
  if (e->kind != MS_FREE_COMPLETED) {
    st->now = *e;
    actions_due(st, 2 * e->id);
  }
  if (st->rc) return st->rc;
  ms_live_slot slot, f;
  uint64_t tag = e->address >> 56;
  switch (e->kind) {
    case MS_ALLOC: {
      bool state = tag == 0xA0 || tag == 0xC0; /* whatif.c's new optimizer state, its copies */
      uint32_t flags = 0;
      int32_t u = -1;
      if (!state && tag == 0 && ms_live_take((ms_live_map *)&st->h->flagged, (uint64_t)e->id, &f)) {
        ms_live_put((ms_live_map *)&st->h->flagged, f);
        flags = f.aux & 0xFF, u = (int32_t)(f.aux >> 8) - 1;
      }
      if (state) flags = F_STATE;
      int64_t req = clamp(e->requested > 0 ? e->requested : e->size);
      ms_event c = *e;
      if (flags == F_CAST && st->strategy == MS_SHARD_FSDP2 && st->pb != st->ob) { /* autocast's cast: not made */
        put_block(st, e->address, B_DROP, req);
        return st->host_oom;
      }
      if (flags == F_SETUP && st->h->o.meta_init && (st->strategy == MS_SHARD_FSDP2 || st->strategy == MS_SHARD_ZERO3)) {
        put_block(st, e->address, B_DROP, req); /* the model's making on the GPU: a model made on the meta device makes none */
        return st->host_oom;
      }
      if (flags == F_PARAM) {
        size_t index = 0;
        for (size_t i = 0; i < st->h->nparams; i++) /* its index: parameters are few, once each */
          if (st->h->params[i].id == e->id) ((ms_shard *)st->h)->params[i].address = e->address, index = i;
        if (st->h->o.meta_init && (st->strategy == MS_SHARD_FSDP2 || st->strategy == MS_SHARD_ZERO3)) {
          /* made on the meta device and sharded: materialised as its shard */
          put_block(st, e->address, B_PARAM, (int64_t)index);
          ev_alloc(st, TAG(T_SHARD, index), shard_bytes(st, st->h->params[index].bytes, st->sb), e->stream);
          return st->rc;
        }
        put_block(st, e->address, 0, req);
      } else if (flags == F_GRAD && u >= 0) {
        if (st->strategy == MS_SHARD_DDP && st->h->o.bucket_view) {
          put_block(st, e->address, B_DROP, req);
          return 0;
        }
        if (st->strategy == MS_SHARD_FSDP2) {
          c.requested = c.size = req / st->ob * st->pb;
          unit_rt *r = &st->u[u];
          if (!ms_grow(&r->grads, &r->grads_cap, r->ngrads + 1, sizeof *r->grads)) return st->host_oom = true, 1;
          r->grads[r->ngrads++] = e->address;
          put_block(st, e->address, B_GRAD_LIVE | ((uint32_t)u << 8), c.size);
        } else if (st->strategy == MS_SHARD_ZERO2 || st->strategy == MS_SHARD_ZERO3) {
          if (!st->partition) {
            st->partition = TAG(T_FG, st->seq++ & 0xFFFFFF);
            ev_alloc(st, st->partition, partition_bytes(st), st->compute);
          }
          st->rc = st->fn(&c, st->fnarg); /* copied into the reduce bucket, then freed */
          ev_free(st, e->address, req, e->stream);
          st->partition_refs++;
          put_block(st, e->address, B_GRAD_DONE | (0xFFFFFFu << 8), req);
          return st->rc;
        }
      } else if ((flags == F_STATE || flags == F_TEMP) && st->strategy != MS_SHARD_DDP) {
        c.requested = c.size = shard_bytes(st, req, st->sb);
        put_block(st, e->address, B_SCALED, c.size);
      }
      return st->fn(&c, st->fnarg);
    }
    case MS_FREE_REQUESTED:
    case MS_FREE_COMPLETED:
      if (!st->blocks.count || !ms_live_take(&st->blocks, e->address, &slot)) break;
      uint32_t kind = slot.aux & 0xFF;
      int32_t u = (int32_t)(slot.aux >> 8);
      if (e->kind == MS_FREE_REQUESTED && kind != B_GRAD_LIVE) put_block(st, e->address, slot.aux, slot.size); /* its completion */
      if (kind == B_DROP) return 0;
      if (kind == B_PARAM) { /* the full parameter was sharded: its shard goes */
        if (e->kind == MS_FREE_REQUESTED) {
          size_t i = (size_t)slot.size;
          ev_free(st, TAG(T_SHARD, i), shard_bytes(st, st->h->params[i].bytes, st->sb), st->compute);
        } else {
          ms_live_take(&st->blocks, e->address, &slot);
        }
        return st->rc;
      }
      if (kind == B_GRAD_DONE) { /* zero_grad: the sharded gradients' views dropped */
        if (e->kind == MS_FREE_COMPLETED) {
          ms_live_take(&st->blocks, e->address, &slot);
          return 0;
        }
        if (u == 0xFFFFFF) {
          if (--st->partition_refs == 0 && st->partition) {
            ev_free(st, st->partition, partition_bytes(st), st->compute);
            st->partition = 0;
          }
        } else if (u >= 0 && u < st->nunits && --st->u[u].flat_refs == 0 && st->u[u].flat) {
          ev_free(st, st->u[u].flat, flat_bytes(st, u, st->u[u].flat), STREAM_RS);
          st->u[u].flat = 0;
        }
        return st->rc;
      }
      if (kind == B_GRAD_LIVE) { /* freed before its unit's post-backward: as recorded */
        unit_rt *r = &st->u[u];
        for (size_t i = 0; i < r->ngrads; i++)
          if (r->grads[i] == e->address) r->grads[i] = r->grads[--r->ngrads];
        put_block(st, e->address, B_SCALED, slot.size);
        break;
      }
      if (e->kind == MS_FREE_COMPLETED) ms_live_take(&st->blocks, e->address, &slot);
      break;
    default: break;
  }
  return st->fn(e, st->fnarg);
}

/* A recorded FSDP2 run at N as one at N' (st->n): the blocks 1/N of the parameters' resized. */
static int rescale_event(const ms_event *e, void *arg) {
  sst *st = arg;
  const ms_shard *h = st->h;
  ms_live_slot f;
  int64_t from = h->o.recorded_ranks;
  if (e->kind == MS_ALLOC) {
    bool recorded = (e->address >> 63) == 0; /* not whatif.c's (their tags have the top bit) */
    bool scale = h->rs_stream && e->stream == h->rs_stream && recorded;
    bool gather = e->stream != h->device_stream && !(h->rs_stream && e->stream == h->rs_stream);
    if (st->n == 1 && gather) {
      if (ms_live_put(&st->blocks, (ms_live_slot){.key = e->address, .aux = B_DROP}) != 0) return st->host_oom = true, 1;
      return 0;
    }
    if (!scale && recorded && ms_live_take((ms_live_map *)&h->flagged, (uint64_t)e->id, &f)) {
      ms_live_put((ms_live_map *)&h->flagged, f);
      scale = (f.aux & 0xFF) != 0 && (f.aux & 0xFF) != F_SETUP; /* the set-up's blocks are as recorded */
    }
    if (!scale) return st->fn(e, st->fnarg);
    ms_event c = *e;
    int64_t req = clamp(e->requested > 0 ? e->requested : e->size), elems = (req + st->ob - 1) / st->ob;
    c.requested = c.size = (elems * from + st->n - 1) / st->n * st->ob;
    return st->fn(&c, st->fnarg);
  }
  if ((e->kind == MS_FREE_REQUESTED || e->kind == MS_FREE_COMPLETED) && st->blocks.count) {
    ms_live_slot slot;
    if (ms_live_take(&st->blocks, e->address, &slot)) {
      if (e->kind == MS_FREE_REQUESTED && ms_live_put(&st->blocks, slot) != 0) return st->host_oom = true, 1;
      return 0;
    }
  }
  return st->fn(e, st->fnarg);
}

int ms_shard_each(const ms_shard *h, const ms_whatif *w, const ms_change *c, ms_snapshot *s, ms_whatif_size_fn size,
                  void *size_arg, int64_t *dropped, int (*fn)(const ms_event *e, void *fnarg), void *fnarg) {
  if (!h || !c || c->strategy == MS_SHARD_NONE || c->ranks < 1)
    return ms_whatif_each(w, c, s, size, size_arg, dropped, fn, fnarg);
  if (h->o.recorded_ranks > 0) {
    if (c->strategy != MS_SHARD_FSDP2) {
      snprintf(s->error, sizeof s->error, "the recording is of an FSDP2 run at %d ranks: only fsdp2:N is predicted from it, "
               "not %s", (int)h->o.recorded_ranks, ms_shard_name(c->strategy));
      return -1;
    }
    sst st;
    memset(&st, 0, sizeof st);
    st.h = h, st.n = c->ranks, st.ob = h->o.recorded_bytes, st.fn = fn, st.fnarg = fnarg;
    ms_change below = *c;
    below.strategy = MS_SHARD_NONE, below.ranks = 0;
    int rc = ms_whatif_each(w, &below, s, size, size_arg, dropped, rescale_event, &st);
    if (st.host_oom) snprintf(s->error, sizeof s->error, "out of host memory sharding the history"), rc = -1;
    ms_live_free(&st.blocks);
    return rc;
  }
  sst st;
  memset(&st, 0, sizeof st);
  st.h = h, st.c = *c, st.n = c->ranks, st.strategy = c->strategy, st.fn = fn, st.fnarg = fnarg;
  st.ob = h->o.recorded_bytes;
  st.sb = st.strategy == MS_SHARD_FSDP2 || st.strategy == MS_SHARD_ZERO3 ? h->o.orig_bytes : st.ob;
  st.pb = st.strategy == MS_SHARD_FSDP2 ? h->o.param_bytes : st.ob;
  st.rb = st.strategy == MS_SHARD_FSDP2 ? h->o.reduce_bytes : st.ob;
  st.compute = h->device_stream;
  bool z3 = st.strategy == MS_SHARD_ZERO3;
  st.act = z3 ? h->act3 : h->act, st.nact = z3 ? h->nact3 : h->nact;
  st.nunits = z3 ? h->nowners : h->info.nunits;
  st.first = z3 ? h->owner_first : h->unit_first, st.count = z3 ? h->owner_count : h->unit_count;
  st.order = z3 ? h->order_by_owner : h->order_by_unit;
  st.u = calloc((size_t)st.nunits + 1, sizeof *st.u);
  st.fwd_order = malloc(sizeof *st.fwd_order * ((size_t)st.nunits * 64 + 1));
  int rc = -1;
  if (!st.u || !st.fwd_order) {
    snprintf(s->error, sizeof s->error, "out of host memory sharding the history");
    goto done;
  }
  for (int u = 0; u < st.nunits; u++) st.u[u].fwd_index = -1;
  for (size_t i = 0; i < h->nparams; i++) ((ms_shard *)h)->params[i].address = 0;
  /* the whatif's change without the strategy (it acts below) */
  ms_change below = *c;
  below.strategy = MS_SHARD_NONE, below.ranks = 0;
  rc = ms_whatif_each(w, &below, s, size, size_arg, dropped, shard_event, &st);
  if (rc == 0 && !st.host_oom) {
    actions_due(&st, INT64_MAX);
    if (st.in_backward && st.rc == 0) pass_end(&st); /* a last backward pass whose end the history lacks */
    rc = st.rc;
  }
  if (st.host_oom) {
    snprintf(s->error, sizeof s->error, "out of host memory sharding the history");
    rc = -1;
  }
done:
  for (int u = 0; st.u && u < st.nunits; u++) free(st.u[u].grads);
  free(st.u);
  free(st.fwd_order);
  ms_live_free(&st.blocks);
  return rc;
}
