/* page_set.c: the documents of a report page: each snapshot's analysis, or, for a snapshot whose
 * memory is on several devices (a process using several GPUs, an imported PyTorch snapshot with
 * several device traces), one analysis per device, so that the page's selector switches every
 * view from one device to the next as PyTorch's memory viz does. The page's own pass over the
 * events (analysis/timeline.c) says which devices hold memory, so a snapshot of one costs
 * nothing more.
 *
 * The analysis knows nothing of devices (it sums them), so each device is analyzed through a
 * second handle on the snapshot that the reader's device filter (ms_only_device) shows only that
 * device: its events (and every event of no device: marks, ranges), its segments and their
 * blocks, its statistics and device row, and the other tables (stacks, frames, labels, meta...)
 * whole. Every pass reads it as it reads any snapshot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

/* Adds an analysis to the page's documents; false when out of memory. */
static bool add_doc(ms_page_set *ps, ms_analysis *a) {
  ms_analysis **g = realloc(ps->docs, (ps->ndocs + 1) * sizeof *g);
  if (!g) return false;
  ps->docs = g;
  ps->docs[ps->ndocs++] = a;
  return true;
}

/* One device of analysis a: opened through the device filter, analyzed, added to the documents. */
static int add_device(ms_page_set *ps, const ms_analysis *a, int device, const ms_analyze_options *o) {
  ms_page_device *c = calloc(1, sizeof *c), **g = realloc(ps->devices, (ps->ndevices + 1) * sizeof *g);
  if (g) ps->devices = g;
  if (!c || !g) {
    free(c);
    snprintf(ps->error, sizeof ps->error, "out of memory");
    return -1;
  }
  ps->devices[ps->ndevices++] = c;
  if (ms_open(&c->snap, a->snap->path) != 0) {
    snprintf(ps->error, sizeof ps->error, "%s", c->snap.error);
    return -1;
  }
  c->opened = true;
  c->snap.fold = a->snap->fold;
  ms_only_device(&c->snap, device);
  snprintf(c->snap.shown_path, sizeof c->snap.shown_path, "%.480s, device %d", a->snap->shown_path, device);
  if (ms_analyze(&c->snap, &c->analysis, o) != 0) {
    snprintf(ps->error, sizeof ps->error, "%s", c->snap.error);
    return -1;
  }
  c->analyzed = true;
  return add_doc(ps, &c->analysis) ? 0 : -1;
}

int ms_page_set_build(ms_page_set *ps, ms_analysis *a, size_t n, const ms_analyze_options *o) {
  memset(ps, 0, sizeof *ps);
  for (size_t i = 0; i < n; i++) {
    if (ms_analyze_timeline(&a[i]) != 0) { /* the page's pass, which also finds the devices */
      snprintf(ps->error, sizeof ps->error, "%s", a[i].snap->error);
      return -1;
    }
    uint64_t devices = a[i].timeline->devices;
    if (!(devices & (devices - 1))) { /* one device, or none */
      if (!add_doc(ps, &a[i])) {
        snprintf(ps->error, sizeof ps->error, "out of memory");
        return -1;
      }
      continue;
    }
    for (int d = 0; d < MS_MAX_DEVICES; d++)
      if ((devices >> d & 1) && add_device(ps, &a[i], d, o) != 0) return -1;
  }
  return 0;
}

void ms_page_set_free(ms_page_set *ps) {
  for (size_t i = 0; i < ps->ndevices; i++) {
    ms_page_device *c = ps->devices[i];
    if (c->analyzed) ms_analysis_free(&c->analysis);
    if (c->opened) ms_close(&c->snap);
    free(c);
  }
  free(ps->devices);
  free(ps->docs);
  memset(ps, 0, sizeof *ps);
}
