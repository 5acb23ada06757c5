/* modules.c: memory by module, from the module record PyTorch's layer of memsnap writes
 * (docs/snapshot-format.md: `module` events, a module's forward or backward beginning or ending;
 * `tensor` events, the blocks that hold its parameters, gradients, buffers and optimizer state;
 * `backward` events, backward passes), followed through the analysis's one pass (analyze.c drives
 * it, as it drives categories.c).
 *
 * Modules are named by their path in the model, MemTracker's fully qualified name:
 * "GPT2LMHeadModel.transformer.h.3.mlp" (the root's class, then named_modules' path). Each path
 * is a module of a tree whose parent is the path less its last part; a path that never ran
 * (a ModuleList: "GPT2LMHeadModel.transformer.h") is a module of the tree all the same.
 *
 * The calls: a module's forward or backward is open from its begin event to its end event (an
 * end closes the innermost open call of that module and phase, and the calls opened after it
 * that never ended). Calls are kept in order of entry, as they nest; an allocation belongs to
 * the innermost open call (its module, its serial) and adds to that call's bytes made; a free of
 * a block made in a call still open takes its bytes back from that call, and of a block made in
 * a call that ended from the innermost still open call entered before it (where the ended call's
 * bytes were folded in at its end). So at a call's end its bytes made are what it and its
 * subcalls made and still hold: for a forward call, MemTracker's activations of the module (its
 * Post-Forward less its Pre-Forward). Its peak is the highest allocated total while it was open.
 *
 * Per module: its forward and backward calls; its activations (its latest forward call's: the
 * steady state, past a first call that also makes libraries' workspaces); what its forward calls saved for backward (made during them, freed while a backward
 * pass runs: a backward event or a module's backward open), per call; its forward and backward
 * peaks (the largest over its calls); its tensors' bytes by role, from their latest tensor
 * events (a run of tensor events, one hook's, sets the bytes of each module and role it names);
 * what it made that was live at the allocated peak. Sums over submodules at the end.
 *
 * Memory: the labels' texts and the modules (a few thousand), and the open calls (as deep as the
 * model nests); never the history's length.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static int add_label(const ms_label_row *r, void *arg) {
  ms_module_pass *p = arg;
  if (r->event_id < 1 || r->event_id > (1 << 24)) return 0; /* ids are dense from 1: a damaged file */
  size_t id = (size_t)r->event_id;
  if (id >= p->nlabels) {
    size_t cap = p->nlabels ? p->nlabels : 64;
    while (cap <= id) cap *= 2;
    char **g = realloc(p->labels, sizeof *g * cap);
    if (!g) return 1;
    memset(g + p->nlabels, 0, sizeof *g * (cap - p->nlabels));
    p->labels = g;
    p->nlabels = cap;
  }
  if (p->labels[id]) return 0;
  if (!(p->labels[id] = strdup(r->label))) return 1;
  ms_neutralise(p->labels[id]);
  return 0;
}

int ms_modules_begin(ms_analysis *a, ms_module_pass *p) {
  memset(p, 0, sizeof *p);
  int rc = ms_labels_each(a->snap, add_label, p);
  if (rc > 0) snprintf(a->snap->error, sizeof a->snap->error, "out of memory analyzing '%s'", a->snap->shown_path);
  if (rc != 0) ms_modules_free_pass(p);
  return rc ? -1 : 0;
}

void ms_modules_free_pass(ms_module_pass *p) {
  for (size_t i = 0; i < p->nlabels; i++) free(p->labels[i]);
  free(p->labels);
  free(p->of_label);
  free(p->open);
  free(p->role_batch);
  free(p->peak_mark);
  memset(p, 0, sizeof *p);
}

/* The module of path name[0..len) (made, with the modules above it, when new): its index, or -1
 * out of memory. */
static int32_t module_of_path(ms_analysis *a, ms_module_pass *p, const char *name, size_t len) {
  for (size_t i = a->nmodules; i-- > 0;) /* most look-ups go through of_label; this is for parents */
    if (strlen(a->modules[i].name) == len && memcmp(a->modules[i].name, name, len) == 0) return (int32_t)i;
  int32_t parent = -1;
  const char *dot = NULL;
  for (size_t k = len; k-- > 0;)
    if (name[k] == '.') {
      dot = name + k;
      break;
    }
  if (dot && dot > name && (parent = module_of_path(a, p, name, (size_t)(dot - name))) < 0) return -1;
  if (a->nmodules == p->modules_cap) {
    size_t cap = p->modules_cap ? p->modules_cap * 2 : 64;
    ms_module *m = realloc(a->modules, sizeof *m * cap);
    int64_t *rb = m ? realloc(p->role_batch, sizeof *rb * cap * MS_ROLES) : NULL;
    if (m) a->modules = m;
    if (rb) p->role_batch = rb;
    int64_t *pm = rb ? realloc(p->peak_mark, sizeof *pm * cap) : NULL;
    if (pm) p->peak_mark = pm;
    if (!pm) return -1;
    p->modules_cap = cap;
  }
  ms_module *m = &a->modules[a->nmodules];
  memset(m, 0, sizeof *m);
  if (!(m->name = strndup(name, len))) return -1;
  m->parent = parent;
  m->depth = parent < 0 ? 0 : (uint16_t)(a->modules[parent].depth + 1);
  for (int r = 0; r < MS_ROLES; r++) p->role_batch[a->nmodules * MS_ROLES + (size_t)r] = -1;
  p->peak_mark[a->nmodules] = -1;
  return (int32_t)a->nmodules++;
}

/* The module a label names (index), -1 for none (no such label) or out of memory (p->failed). */
static int32_t module_of_label(ms_analysis *a, ms_module_pass *p, int64_t label) {
  if (label < 1 || (size_t)label >= p->nlabels || !p->labels[label] || !p->labels[label][0]) return -1;
  if (!p->of_label && !(p->of_label = calloc(p->nlabels, sizeof *p->of_label))) {
    p->failed = true;
    return -1;
  }
  if (p->of_label[label]) return p->of_label[label] - 1;
  int32_t m = module_of_path(a, p, p->labels[label], strlen(p->labels[label]));
  if (m < 0) p->failed = true;
  else p->of_label[label] = m + 1;
  return m;
}

int32_t ms_module_common(const ms_analysis *a, int32_t x, int32_t y) {
  if (x < 0 || y < 0 || (size_t)x >= a->nmodules || (size_t)y >= a->nmodules) return -1;
  while (a->modules[x].depth > a->modules[y].depth) x = a->modules[x].parent;
  while (a->modules[y].depth > a->modules[x].depth) y = a->modules[y].parent;
  while (x != y && x >= 0 && y >= 0) x = a->modules[x].parent, y = a->modules[y].parent;
  return x == y ? x : -1;
}

const char *ms_module_shown(const ms_analysis *a, int32_t m) {
  if (m < 0 || (size_t)m >= a->nmodules) return "";
  const char *name = a->modules[m].name, *dot = strchr(name, '.');
  return a->modules[m].parent >= 0 && dot ? dot + 1 : name;
}

/* Closes open call k and those opened after it, innermost first: each folds its bytes and peak
 * into the call below it and counts for its module. */
static void close_calls(ms_analysis *a, ms_module_pass *p, size_t k) {
  while (p->nopen > k) {
    ms_module_call *c = &p->open[--p->nopen];
    ms_module *m = &a->modules[c->module];
    if (c->backward) {
      m->backward_calls++;
      if (c->peak > m->backward_peak) m->backward_peak = c->peak;
    } else {
      m->forward_calls++;
      m->activation_bytes = c->made; /* the latest call's: past the first, whose work makes caches */
      if (c->peak > m->forward_peak) m->forward_peak = c->peak;
    }
    if (p->nopen) {
      ms_module_call *below = &p->open[p->nopen - 1];
      below->made += c->made;
      if (c->peak > below->peak) below->peak = c->peak;
    }
  }
}

int ms_modules_told(ms_analysis *a, ms_module_pass *p, int64_t label, int role, int64_t size) {
  if (role <= MS_ROLE_NONE || role >= MS_ROLES) return 0;
  int32_t m = module_of_label(a, p, label);
  if (m < 0) return p->failed ? -1 : 0;
  int64_t *batch = &p->role_batch[(size_t)m * MS_ROLES + (size_t)role];
  if (*batch != 0) *batch = 0, a->modules[m].own_role[role] = 0; /* batch 0: the snapshot's, before any event's */
  a->modules[m].own_role[role] += size;
  return 0;
}

int ms_modules_event(ms_analysis *a, ms_module_pass *p, const ms_event *e, ms_live_map *live, int64_t allocated) {
  if (e->kind != MS_TENSOR) p->in_batch = false;
  switch (e->kind) {
    case MS_MODULE: {
      a->module_events++;
      int32_t m = module_of_label(a, p, e->extra);
      if (m < 0) break;
      a->modules[m].called = true;
      bool backward = e->size >= 2;
      if (e->size == 0 || e->size == 2) {
        if (p->nopen == p->open_cap && !ms_grow(&p->open, &p->open_cap, p->nopen + 1, sizeof *p->open)) {
          p->failed = true;
          break;
        }
        p->open[p->nopen++] = (ms_module_call){(uint32_t)m, ++p->serial, backward, 0, allocated};
      } else if (e->size == 1 || e->size == 3) {
        for (size_t k = p->nopen; k-- > 0;)
          if (p->open[k].module == (uint32_t)m && p->open[k].backward == backward) {
            close_calls(a, p, k);
            break;
          }
      }
      break;
    }
    case MS_TENSOR: {
      a->tensor_events++;
      int role = (int)e->requested;
      if (role <= MS_ROLE_NONE || role >= MS_ROLES) break;
      if (!p->in_batch) p->batch++, p->in_batch = true;
      ms_live_slot slot;
      if (ms_live_take(live, e->address, &slot)) { /* the block that holds it: its role */
        slot.birth.role = (uint8_t)role; /* the latest role stands */
        if (ms_live_put(live, slot) != 0) {
          p->failed = true;
          break;
        }
      } else {
        a->tensors_unmatched++;
      }
      int32_t m = module_of_label(a, p, e->extra);
      if (m < 0) break;
      int64_t *batch = &p->role_batch[(size_t)m * MS_ROLES + (size_t)role];
      if (*batch != p->batch) *batch = p->batch, a->modules[m].own_role[role] = 0;
      a->modules[m].own_role[role] += e->size;
      break;
    }
    case MS_BACKWARD:
      if (e->size == 0) p->backward_open++, a->backward_passes++;
      else if (p->backward_open > 0) p->backward_open--;
      a->backward_recorded = true;
      break;
    default:
      break;
  }
  return p->failed ? -1 : 0;
}

/* Whether a backward pass runs: one begun and not ended, or a module's backward open. */
static bool in_backward(const ms_module_pass *p) {
  if (p->backward_open > 0) return true;
  for (size_t k = p->nopen; k-- > 0;)
    if (p->open[k].backward) return true;
  return false;
}

void ms_modules_alloc(ms_analysis *a, ms_module_pass *p, ms_birth *b, int64_t size, int64_t allocated) {
  b->backward_passes = (uint32_t)a->backward_passes;
  b->in_backward = (uint8_t)in_backward(p);
  if (!p->nopen) return;
  if (!p->open[0].backward) b->forward = p->open[0].serial, b->forward_module = p->open[0].module + 1;
  ms_module_call *c = &p->open[p->nopen - 1];
  b->module = c->module + 1;
  b->call = c->serial;
  c->made += size;
  if (allocated > c->peak) c->peak = allocated;
}

void ms_modules_free(ms_analysis *a, ms_module_pass *p, const ms_live_slot *b) {
  if (!b->birth.module || (size_t)b->birth.module > a->nmodules) return;
  /* the call that made it, or the innermost open one entered before it (its bytes folded there) */
  for (size_t k = p->nopen; k-- > 0;)
    if (p->open[k].serial <= b->birth.call) {
      p->open[k].made -= b->size;
      break;
    }
  if (!b->birth.in_backward && in_backward(p)) a->modules[b->birth.module - 1].own_saved += b->size;
}

void ms_modules_death(ms_analysis *a, ms_module_pass *p, const ms_live_slot *b, int64_t peak_mark) {
  if (!b->birth.module || (size_t)b->birth.module > a->nmodules || b->birth.ordinal > peak_mark) return;
  size_t m = b->birth.module - 1;
  if (p->peak_mark[m] != peak_mark) p->peak_mark[m] = peak_mark, a->modules[m].own_at_peak = 0;
  a->modules[m].own_at_peak += b->size;
}

void ms_modules_end(ms_analysis *a, ms_module_pass *p, int64_t peak_mark) {
  close_calls(a, p, 0);
  /* own values, then summed into every module above (children come after their parents) */
  for (size_t i = 0; i < a->nmodules; i++) {
    ms_module *m = &a->modules[i];
    if (p->peak_mark[i] != peak_mark) m->own_at_peak = 0;
    m->parameter_bytes = m->own_role[MS_ROLE_PARAMETER];
    m->gradient_bytes = m->own_role[MS_ROLE_GRADIENT];
    m->buffer_bytes = m->own_role[MS_ROLE_BUFFER];
    m->at_peak = m->own_at_peak;
    m->saved_bytes = 0;
  }
  /* summed bottom up (submodules come after their parents). own_saved becomes the subtree's
     total; saved_bytes is per forward call: a module that ran divides its subtree's total by its
     calls, a path that never ran (a ModuleList) adds its submodules' per-call figures */
  for (size_t i = a->nmodules; i-- > 0;) {
    ms_module *m = &a->modules[i];
    if (m->forward_calls > 0) m->saved_bytes = m->own_saved / m->forward_calls;
    if (m->parent < 0) continue;
    ms_module *up = &a->modules[m->parent];
    up->parameter_bytes += m->parameter_bytes;
    up->gradient_bytes += m->gradient_bytes;
    up->buffer_bytes += m->buffer_bytes;
    up->at_peak += m->at_peak;
    up->own_saved += m->own_saved;
    up->saved_bytes += m->saved_bytes;
  }
  ms_modules_free_pass(p);
}
