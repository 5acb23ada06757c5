/* capture.c: blocks freed during a CUDA graph capture, reused before its end once the capture's
 * graph orders every use of them before new work (PyTorch's graph_capture_record_stream_reuse).
 *
 * A block used on other streams (record_stream) and freed while a capture allocates to a
 * private pool cannot wait on events: recording or querying one is illegal during a capture, so
 * alloc.c keeps it in d->deferred until no capture is underway. With the setting on (PyTorch's
 * graph_capture_record_stream_reuse:True, memsnap's option of the same name) memsnap does what
 * PyTorch does (c10/cuda/CUDACachingAllocator.cpp: record_free_markers, free_safe_blocks_in_capture):
 *   - at the free (msi_capture_mark), the block's free markers are the capture graph's terminal
 *     nodes of its allocation stream and of every stream it was used on, the nodes its last uses
 *     are; when one of those streams is not capturing it has none and waits for the end;
 *   - at each request during a capture (msi_capture_reclaim), the ancestors of the requesting
 *     stream's terminal nodes are walked, and kept per capture and stream so that a later walk
 *     stops at the nodes seen before; a marked block of that stream whose every marker is among
 *     them is reusable: anything the stream does from now on comes after every use of the block
 *     (the stream joined the streams that used it), so it goes back to its pool at once.
 * The graph is read through the backend: capture_info (the driver's cuStreamGetCaptureInfo) and
 * node_parents (cuGraphNodeGetDependencies); the simulated device keeps a graph of its own.
 *
 * State (struct msi_capture_reuse, made at the first mark): the marks, one per marked block, and
 * the walks, one per (capture, stream), each a set of nodes (open addressing, 0 is empty). It
 * goes when no capture is underway any more (alloc.c calls msi_capture_reset before the deferred
 * blocks get their events). Everything runs with the device lock held; alloc.c calls in and hands
 * down how a block is freed; nothing here calls up.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct mark {
  msi_block *block;
  uintptr_t *nodes; /* its free markers, sorted, distinct */
  size_t n;
} mark;

typedef struct walk {
  uint64_t capture;
  memsnap_stream_t stream;
  uintptr_t *set; /* the ancestors of the stream's terminal nodes seen so far */
  size_t cap, count;
} walk;

struct msi_capture_reuse {
  mark *marks;
  size_t nmarks, marks_cap;
  walk *walks;
  size_t nwalks, walks_cap;
};

/* ---- sets of nodes ----------------------------------------------------------------------- */

static inline size_t slot_of(uintptr_t node, size_t cap) {
  return (size_t)(((uint64_t)node >> 3) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

static bool set_has(const walk *w, uintptr_t node) {
  if (!w->cap) return false;
  for (size_t i = slot_of(node, w->cap);; i = (i + 1) & (w->cap - 1)) {
    if (w->set[i] == node) return true;
    if (!w->set[i]) return false;
  }
}

/* Adds node; false when out of host memory. */
static bool set_add(walk *w, uintptr_t node) {
  if (2 * (w->count + 1) > w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 64;
    uintptr_t *grown = calloc(cap, sizeof *grown);
    if (!grown) return false;
    for (size_t i = 0; i < w->cap; i++) {
      if (!w->set[i]) continue;
      size_t j = slot_of(w->set[i], cap);
      while (grown[j]) j = (j + 1) & (cap - 1);
      grown[j] = w->set[i];
    }
    free(w->set);
    w->set = grown;
    w->cap = cap;
  }
  size_t i = slot_of(node, w->cap);
  while (w->set[i] && w->set[i] != node) i = (i + 1) & (w->cap - 1);
  if (!w->set[i]) {
    w->set[i] = node;
    w->count++;
  }
  return true;
}

/* ---- reading the graph ------------------------------------------------------------------- */

/* A growable array of nodes. */
typedef struct nodes {
  uintptr_t *v;
  size_t n, cap;
} nodes;

static bool nodes_reserve(nodes *a, size_t more) {
  if (a->n + more <= a->cap) return true;
  size_t cap = a->cap ? a->cap : 16;
  while (cap < a->n + more) cap *= 2;
  uintptr_t *grown = realloc(a->v, cap * sizeof *grown);
  if (!grown) return false;
  a->v = grown;
  a->cap = cap;
  return true;
}

/* Appends the terminal nodes of `stream`'s capture to a: 1 (its capture id in *id), 0 when it is
 * not capturing, -1 on an error (the backend's or out of host memory). */
static int append_terminals(msi_device *d, memsnap_stream_t stream, uint64_t *id, nodes *a) {
  for (;;) {
    size_t room = a->cap - a->n, n = 0;
    int rc = msi_be->capture_info(d->index, stream, id, a->v ? a->v + a->n : NULL, a->v ? room : 0, &n);
    if (rc != 1) return rc == 0 ? 0 : -1;
    if (n <= room) {
      a->n += n;
      return 1;
    }
    if (!nodes_reserve(a, n)) return -1;
  }
}

/* Appends the parents of node to a: 0, or -1 on an error. */
static int append_parents(msi_device *d, uintptr_t node, nodes *a) {
  for (;;) {
    size_t room = a->cap - a->n, n = 0;
    if (msi_be->node_parents(d->index, node, a->v ? a->v + a->n : NULL, a->v ? room : 0, &n) != MSI_BE_OK) return -1;
    if (n <= room) {
      a->n += n;
      return 0;
    }
    if (!nodes_reserve(a, n)) return -1;
  }
}

static int by_value(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return (x > y) - (x < y);
}

/* ---- marks ------------------------------------------------------------------------------- */

static struct msi_capture_reuse *state(msi_device *d) {
  if (!d->capture_reuse) d->capture_reuse = calloc(1, sizeof *d->capture_reuse);
  return d->capture_reuse;
}

void msi_capture_mark(msi_device *d, msi_block *b) {
  if (!msi_be->capture_info || !msi_be->node_parents) return;
  nodes markers = {0};
  uint64_t capture = 0, other = 0;
  int rc = append_terminals(d, b->stream, &capture, &markers);
  for (uint32_t i = 0; rc == 1 && i < b->nuses; i++) {
    rc = append_terminals(d, b->uses[i], &other, &markers);
    if (rc == 1 && other != capture) rc = 0; /* another capture's stream: never ordered by this one */
  }
  struct msi_capture_reuse *s = rc == 1 && markers.n ? state(d) : NULL;
  if (s && s->nmarks == s->marks_cap) {
    size_t cap = s->marks_cap ? s->marks_cap * 2 : 16;
    mark *grown = realloc(s->marks, cap * sizeof *grown);
    if (grown) {
      s->marks = grown;
      s->marks_cap = cap;
    } else {
      s = NULL;
    }
  }
  if (!s) { /* no markers: the block waits for the capture's end */
    free(markers.v);
    return;
  }
  qsort(markers.v, markers.n, sizeof *markers.v, by_value);
  size_t k = 0;
  for (size_t i = 0; i < markers.n; i++)
    if (!k || markers.v[k - 1] != markers.v[i]) markers.v[k++] = markers.v[i];
  s->marks[s->nmarks++] = (mark){b, markers.v, k};
}

/* The walk of (capture, stream), made on first use; NULL when out of host memory. */
static walk *walk_of(struct msi_capture_reuse *s, uint64_t capture, memsnap_stream_t stream) {
  for (size_t i = 0; i < s->nwalks; i++)
    if (s->walks[i].capture == capture && s->walks[i].stream == stream) return &s->walks[i];
  if (s->nwalks == s->walks_cap) {
    size_t cap = s->walks_cap ? s->walks_cap * 2 : 4;
    walk *grown = realloc(s->walks, cap * sizeof *grown);
    if (!grown) return NULL;
    s->walks = grown;
    s->walks_cap = cap;
  }
  s->walks[s->nwalks] = (walk){capture, stream, NULL, 0, 0};
  return &s->walks[s->nwalks++];
}

/* Adds every ancestor of the stream's terminal nodes (themselves included) to w, stopping at the
 * nodes it holds already. Returns 0, or -1 (w then holds part of them: still only ancestors). */
static int walk_back(msi_device *d, walk *w, nodes *todo) {
  while (todo->n) {
    uintptr_t v = todo->v[--todo->n];
    if (set_has(w, v)) continue;
    if (!set_add(w, v) || append_parents(d, v, todo) != 0) return -1;
  }
  return 0;
}

static void undefer(msi_device *d, msi_block *b) {
  for (size_t i = 0; i < d->ndeferred; i++)
    if (d->deferred[i] == b) {
      d->deferred[i] = d->deferred[--d->ndeferred];
      return;
    }
}

void msi_capture_reclaim(msi_device *d, memsnap_stream_t stream, void (*reuse)(msi_device *d, msi_block *b)) {
  struct msi_capture_reuse *s = d->capture_reuse;
  if (!s || !msi_opt.capture_stream_reuse) return;
  bool any = false;
  for (size_t i = 0; i < s->nmarks && !any; i++) any = s->marks[i].block->stream == stream;
  if (!any) return;
  nodes todo = {0};
  uint64_t capture = 0;
  walk *w = NULL;
  if (append_terminals(d, stream, &capture, &todo) == 1 && todo.n && (w = walk_of(s, capture, stream)) != NULL)
    walk_back(d, w, &todo); /* on an error, what was seen is still right: fewer blocks qualify */
  free(todo.v);
  if (!w) return;
  for (size_t i = 0; i < s->nmarks;) {
    mark *m = &s->marks[i];
    bool reusable = m->block->stream == stream;
    for (size_t k = 0; reusable && k < m->n; k++) reusable = set_has(w, m->nodes[k]);
    if (!reusable) {
      i++;
      continue;
    }
    msi_block *b = m->block;
    free(m->nodes);
    s->marks[i] = s->marks[--s->nmarks];
    undefer(d, b);
    b->nuses = 0; /* the graph orders its uses before what follows: no event needed */
    reuse(d, b);
  }
}

void msi_capture_reset(msi_device *d) {
  struct msi_capture_reuse *s = d->capture_reuse;
  if (!s) return;
  for (size_t i = 0; i < s->nmarks; i++) free(s->marks[i].nodes);
  for (size_t i = 0; i < s->nwalks; i++) free(s->walks[i].set);
  free(s->marks);
  free(s->walks);
  free(s);
  d->capture_reuse = NULL;
}
