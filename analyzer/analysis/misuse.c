/* misuse.c: the invalid frees of a snapshot (frees of pointers the allocator did not own), by
 * site: what the recorder's misuse.c recorded as invalid_free events (docs/snapshot-format.md).
 *
 * The analysis's first pass hands each invalid_free event here (ms_misuse_add) with its live-block
 * map, so an interior pointer names the allocation site of the block it points into. Sites are
 * (stack, kind) pairs, at most MS_MISUSE_SITES of them; the rest are counted. The report prints
 * them as a section of their own when there are any (report/text.c); the JSON (report/json.c)
 * always has "invalid_frees".
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

#define MS_MISUSE_SITES 1000

static const char *const kind_names[] = {"unknown", "double_free", "foreign_pointer", "interior_pointer"};

const char *ms_invalid_free_kind_name(int kind) { return kind >= 1 && kind <= 3 ? kind_names[kind] : kind_names[0]; }

int ms_misuse_add(ms_analysis *a, const ms_event *e, ms_live_map *live) {
  int kind = e->extra >= 1 && e->extra <= 3 ? (int)e->extra : 0;
  a->invalid_free_total++;
  a->invalid_free_by_kind[kind]++;
  ms_invalid_free *f = NULL;
  for (size_t i = 0; i < a->ninvalid_frees && !f; i++)
    if (a->invalid_frees[i].stack_id == e->stack_id && a->invalid_frees[i].kind == kind) f = &a->invalid_frees[i];
  if (!f) {
    if (a->ninvalid_frees == MS_MISUSE_SITES) return 0; /* counted above */
    ms_invalid_free *g = realloc(a->invalid_frees, sizeof *g * (a->ninvalid_frees + 1));
    if (!g) return -1;
    a->invalid_frees = g;
    f = &g[a->ninvalid_frees++];
    memset(f, 0, sizeof *f);
    f->stack_id = e->stack_id;
    f->kind = kind;
    f->first_ns = e->time_ns;
    f->address = e->address;
    f->offset = e->size;
    f->device = e->device;
    f->block_site = -1;
    ms_live_slot block;
    /* an interior pointer: the block it points into is live; name where it was allocated */
    if (kind == 3 && (uint64_t)e->size <= e->address && ms_live_take(live, e->address - (uint64_t)e->size, &block)) {
      f->block_site = block.site;
      f->block_size = block.size;
      if (ms_live_put(live, block) != 0) return -1;
    }
  }
  f->count++;
  f->last_ns = e->time_ns;
  return 0;
}

static int compare_count(const void *x, const void *y) {
  const ms_invalid_free *a = x, *b = y;
  if (a->count != b->count) return a->count < b->count ? 1 : -1;
  return (a->first_ns > b->first_ns) - (a->first_ns < b->first_ns);
}

void ms_misuse_finish(ms_analysis *a) {
  if (a->ninvalid_frees) qsort(a->invalid_frees, a->ninvalid_frees, sizeof *a->invalid_frees, compare_count);
}
