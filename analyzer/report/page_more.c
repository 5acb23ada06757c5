/* page_more.c: the report page's data beyond what page.c writes, appended to its document once
 * (ms_page_more, after every other part has added its stacks):
 *
 *   segment_spans  each segment's life (timeline.c's spans) with the stack that allocated it:
 *                  the segment timeline, and a segment's stack in the allocator state;
 *   all_stacks     the whole stack behind each of the page's stacks whose frames that matter
 *                  leave frames out (frames.c folds them): the "hide irrelevant frames" toggle
 *                  shows these when unticked. Stacks with nothing left out are not repeated.
 *
 * Frames and stacks go through page.c's tables (ms_page_refs), so each is written once.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

#define MS_PAGE_ALL_FRAMES 256 /* frames kept of a whole stack (its innermost), then the cut frame */

/* `"segment_spans":{addr, size, start, end, stream, device, stack, omitted}`: columns, one row a
 * span in start order; stack -1 for a segment from before the history, 0 for none. */
static void write_spans(FILE *f, const ms_timeline *t, const ms_page_refs *r) {
  static const char *const names[] = {"addr", "size", "start", "end", "stream", "device", "stack"};
  fprintf(f, ",\"segment_spans\":{\"omitted\":%lld", (long long)t->omitted_spans);
  for (int c = 0; c < 7; c++) {
    fprintf(f, ",\"%s\":[", names[c]);
    for (size_t i = 0; i < t->nspans; i++) {
      const ms_span *sp = &t->spans[i];
      long long v = c == 0 ? (long long)sp->address : c == 1 ? sp->size : c == 2 ? sp->start_ns : c == 3 ? sp->end_ns
                  : c == 4 ? (long long)sp->stream : c == 5 ? sp->device
                  : sp->before_history ? -1 : (long long)r->stack(r->ctx, sp->stack_id);
      fprintf(f, i ? ",%lld" : "%lld", v);
    }
    fputc(']', f);
  }
  fputc('}', f);
}

/* `"all_stacks":{"id":[frame, ...]}`: the whole stacks (innermost first) of the page's stacks
 * that leave frames out. False when out of memory. */
static bool write_whole_stacks(FILE *f, const ms_snapshot *s, const ms_page_refs *r) {
  uint32_t *ids = NULL;
  size_t cap = 0, n = 0;
  fputs(",\"all_stacks\":{", f);
  const cJSON *item;
  cJSON_ArrayForEach(item, r->stacks) {
    char *end;
    unsigned long id = strtoul(item->string, &end, 10);
    if (*end || id == 0 || id >= s->nstacks) continue; /* a stack of the page's own remarks */
    const ms_stack *k = &s->stacks[id];
    if (k->depth > cap) {
      uint32_t *g = realloc(ids, k->depth * sizeof *ids);
      if (!g) {
        free(ids);
        return false;
      }
      ids = g;
      cap = k->depth;
    }
    if (ms_stack_frames_that_matter(s, (uint32_t)id, ids, k->depth) == k->depth) continue; /* nothing hidden */
    fprintf(f, "%s\"%lu\":[", n++ ? "," : "", id);
    for (uint32_t i = 0; i < k->depth && i < MS_PAGE_ALL_FRAMES; i++) fprintf(f, i ? ",%d" : "%d", r->frame(r->ctx, k->frames[i]));
    if (k->depth > MS_PAGE_ALL_FRAMES) fprintf(f, ",%d", r->cut(r->ctx));
    fputc(']', f);
  }
  fputc('}', f);
  free(ids);
  return true;
}

char *ms_page_more(const ms_analysis *a, const ms_page_refs *r) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  write_spans(f, a->timeline, r);
  bool ok = write_whole_stacks(f, a->snap, r);
  if (ferror(f) | fclose(f) || !ok) {
    free(text);
    return NULL;
  }
  return text;
}
