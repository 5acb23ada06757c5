/* cmd_diff.c: `memsnap diff A.db B.db`: what grew between two snapshots, by allocation site.
 *
 * Stack ids are private to a file, so sites are matched by their frames (function, file and
 * line of every frame). For each site: bytes and blocks allocated at each snapshot, and the
 * change; the sites that grew most come first. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"
#include "commands.h"

typedef struct diff_site {
  char *key;           /* frames as text: the match key */
  uint32_t stack[2];   /* the stack id in A and in B (0: none recorded) */
  bool present[2];     /* the site has blocks in A, in B */
  int64_t bytes[2], count[2];
} diff_site;

typedef struct diff {
  diff_site *sites;
  size_t n, cap;
} diff;

/* "name@file:line;..." over the full stack: equal in two files for the same code path. */
static char *stack_key(const ms_snapshot *s, uint32_t stack_id) {
  size_t cap = 256, len = 0;
  char *k = malloc(cap);
  if (!k) return NULL;
  k[0] = '\0';
  if (stack_id == 0 || stack_id >= s->nstacks) return k;
  const ms_stack *st = &s->stacks[stack_id];
  for (uint32_t i = 0; i < st->depth; i++) {
    const ms_frame *f = &s->frames[st->frames[i]];
    size_t need = strlen(f->name) + strlen(f->file) + 32;
    if (len + need >= cap) {
      while (len + need >= cap) cap *= 2;
      char *g = realloc(k, cap);
      if (!g) {
        free(k);
        return NULL;
      }
      k = g;
    }
    len += (size_t)snprintf(k + len, cap - len, "%s@%s:%lld;", f->name, f->file, (long long)f->line);
  }
  return k;
}

static int add(diff *d, char *key, int side, uint32_t stack, int64_t bytes, int64_t count) {
  for (size_t i = 0; i < d->n; i++)
    if (strcmp(d->sites[i].key, key) == 0) {
      free(key);
      d->sites[i].bytes[side] += bytes;
      d->sites[i].count[side] += count;
      d->sites[i].present[side] = true;
      if (!d->sites[i].stack[side]) d->sites[i].stack[side] = stack;
      return 0;
    }
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 64;
    diff_site *g = realloc(d->sites, sizeof *g * cap);
    if (!g) return -1;
    d->sites = g;
    d->cap = cap;
  }
  diff_site *x = &d->sites[d->n++];
  memset(x, 0, sizeof *x);
  x->key = key;
  x->stack[side] = stack;
  x->present[side] = true;
  x->bytes[side] = bytes;
  x->count[side] = count;
  return 0;
}

static int load_side(diff *d, ms_snapshot *s, int side) {
  if (ms_load_stacks(s) != 0) return -1;
  char shown[sizeof s->shown_path]; /* a copy: GCC cannot tell the two fields of *s apart */
  memcpy(shown, s->shown_path, sizeof shown);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(s->db, "select coalesce(stack_id, 0), sum(size), count(*) from blocks where state = 'allocated' group by 1",
                         -1, &st, NULL) != SQLITE_OK) {
    snprintf(s->error, sizeof s->error, "'%s': cannot read blocks: %s", shown, sqlite3_errmsg(s->db));
    return -1;
  }
  int rc = 0;
  while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    uint32_t stack = id > 0 && (size_t)id < s->nstacks ? (uint32_t)id : 0;
    char *key = stack_key(s, stack);
    rc = key ? add(d, key, side, stack, sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2)) : -1;
  }
  sqlite3_finalize(st);
  if (rc) snprintf(s->error, sizeof s->error, "out of memory comparing '%s'", shown);
  return rc;
}

static int compare_growth(const void *x, const void *y) {
  const diff_site *a = x, *b = y;
  int64_t ga = a->bytes[1] - a->bytes[0], gb = b->bytes[1] - b->bytes[0];
  if (ga != gb) return ga < gb ? 1 : -1;
  return strcmp(a->key, b->key);
}

int cmd_diff(int argc, char **argv) {
  ms_report_options o = {false, 4};
  const char *paths[2] = {NULL, NULL};
  int np = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--full-stacks")) o.full_stacks = true;
    else if (argv[i][0] == '-' && argv[i][1]) {
      return ms_unknown_option("diff", argv[i], i + 1 == argc);
    } else if (np < 2) paths[np++] = argv[i];
    else return ms_usage_error("diff", "two snapshots: A.db B.db");
  }
  if (np != 2) return ms_usage_error("diff", "two snapshots: A.db B.db");
  ms_snapshot s[2];
  diff d = {0};
  int rc = 1, opened = 0;
  for (int k = 0; k < 2; k++, opened++)
    if (ms_open(&s[k], paths[k]) != 0 || load_side(&d, &s[k], k) != 0) {
      fprintf(stderr, "error: %s\n", s[k].error);
      if (s[k].db) opened++;
      goto out;
    }
  qsort(d.sites, d.n, sizeof *d.sites, compare_growth);
  int64_t total[2] = {0, 0};
  for (size_t i = 0; i < d.n; i++) total[0] += d.sites[i].bytes[0], total[1] += d.sites[i].bytes[1];
  char b0[32], b1[32], bd[32];
  ms_format_bytes(total[0], b0, sizeof b0);
  ms_format_bytes(total[1], b1, sizeof b1);
  ms_format_bytes(total[1] - total[0], bd, sizeof bd);
  printf("memsnap diff\n  A: %s (pid %lld)\n  B: %s (pid %lld)\n", paths[0], (long long)s[0].pid, paths[1], (long long)s[1].pid);
  printf("  allocated: %s -> %s (%s%s)\n\n", b0, b1, total[1] >= total[0] ? "+" : "", bd);
  printf("sites by growth (allocated at the snapshot)\n");
  int shown = 0;
  for (size_t i = 0; i < d.n && shown < 15; i++) {
    diff_site *x = &d.sites[i];
    if (x->bytes[1] == x->bytes[0] && x->count[1] == x->count[0]) continue;
    ms_format_bytes(x->bytes[0], b0, sizeof b0);
    ms_format_bytes(x->bytes[1], b1, sizeof b1);
    ms_format_bytes(x->bytes[1] - x->bytes[0], bd, sizeof bd);
    printf("  %s%-12s %12s -> %-12s (%lld -> %lld blocks)%s\n", x->bytes[1] >= x->bytes[0] ? "+" : "", bd, b0, b1,
           (long long)x->count[0], (long long)x->count[1], !x->present[0] ? "  new in B" : !x->present[1] ? "  gone in B" : "");
    int side = x->present[1] ? 1 : 0;
    uint32_t ids[4096];
    size_t n = 0;
    if (!o.full_stacks) {
      n = ms_stack_frames_that_matter(&s[side], x->stack[side], ids, 4);
    } else if (x->stack[side]) {
      const ms_stack *k = &s[side].stacks[x->stack[side]];
      for (uint32_t f = 0; f < k->depth && n < 4096; f++) ids[n++] = k->frames[f];
    }
    for (size_t f = 0; f < n; f++) {
      const ms_frame *fr = &s[side].frames[ids[f]];
      const char *slash = strrchr(fr->file, '/');
      if (fr->line > 0) printf("      %s (%s:%lld)\n", fr->name, slash ? slash + 1 : fr->file, (long long)fr->line);
      else printf("      %s\n", fr->name);
    }
    shown++;
  }
  if (!shown) printf("  no site changed\n");
  rc = ms_output_status();
out:
  for (int k = 0; k < opened && k < 2; k++) ms_close(&s[k]);
  for (size_t i = 0; i < d.n; i++) free(d.sites[i].key);
  free(d.sites);
  return rc;
}
