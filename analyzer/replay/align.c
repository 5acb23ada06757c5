/* align.c: a run's history as `memsnap predict` reads it, and two runs of one program aligned
 * allocation by allocation (predict.c fits each aligned allocation's size).
 *
 * Reading (ms_history_read, one streamed pass over the events): every allocation and every free
 * requested becomes a token, in the recorded order: its kind, its device and its allocation's
 * site (a free's: the site of the allocation it frees). A site is the allocation's stack as
 * frame keys (read/frames.c's ms_frame_key: function, file and line; module and offset for an
 * unnamed frame), hashed: unlike stack ids and addresses, it is the same in every process of the
 * program. An allocation without a stack is known by its lifetime too (the tokens between it and
 * its free), so that runs recorded without stacks still align by the shape of their history
 * rather than by the count of their allocations alone. Each allocation's request is kept (its requested bytes, else its size): what the
 * program asked for, which the allocator rounds its own way at each size. Frees completed later,
 * segments, marks and ranges are no tokens: the replay makes its own segments, and the history
 * synthesised from a run keeps that run's. The pass also finds what makes a history useless for
 * a prediction: blocks live at the snapshot that no allocation of the history made (recording
 * started after them), frees of blocks it never allocated.
 *
 * Aligning (ms_histories_align): the two token lists are walked together and equal tokens are
 * paired. Where they differ (a workspace allocated in one run only, a free that came a little
 * earlier in one), the nearest point where both agree again for AGREE tokens in a row is found:
 * first by trying every pair of skips up to NEAR tokens in all, then within WINDOW tokens of each
 * by a table of the hashes of the second list's runs of AGREE tokens (O(WINDOW) per
 * difference); what lies between is unaligned. Lists that do not agree again within the window
 * part there, and the rest of both is unaligned.
 *
 * Memory: for each run, 20 bytes per allocation or free and 8 per allocation; the live blocks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

#define AGREE 8                /* tokens in a row that say two lists agree again */
#define NEAR 24                /* skips tried one by one before the window's table */
#define WINDOW 4096            /* how far a difference may reach, in tokens of each list */
#define TABLE (WINDOW * 4)     /* slots of the window's table (a power of two) */
#define NO_ALLOC UINT32_MAX    /* a free's token has no allocation number */
#define SITE_NONE 0x6e6f6e65ull /* the site of allocations without a stack */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct read_state {
  ms_snapshot *s;
  ms_history *h;
  uint64_t *frame_hash; /* by frame id, 0: not yet */
  uint64_t *stack_hash; /* by stack id, 0: not yet */
  ms_live_map live;     /* address -> the allocation's token (aux), its block size */
  int64_t live_bytes;   /* the live blocks' sizes */
  bool host_oom;
} read_state;

static uint64_t frame_hash(read_state *st, uint32_t id) {
  if (st->frame_hash[id]) return st->frame_hash[id];
  char key[2 * MS_TEXT_MAX + 64];
  ms_frame_key(&st->s->frames[id], key, sizeof key);
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const char *c = key; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
  return st->frame_hash[id] = h ? h : 1;
}

/* The site of a stack: its frames' keys, hashed in order; the same in every process. */
static uint64_t site_hash(read_state *st, uint32_t stack_id) {
  const ms_snapshot *s = st->s;
  if (stack_id == 0 || stack_id >= s->nstacks) return SITE_NONE;
  if (st->stack_hash[stack_id]) return st->stack_hash[stack_id];
  const ms_stack *k = &s->stacks[stack_id];
  uint64_t h = 0x243f6a8885a308d3ull;
  for (uint32_t i = 0; i < k->depth; i++)
    if (k->frames[i] < s->nframes) h = mix64(h ^ frame_hash(st, k->frames[i]));
  return st->stack_hash[stack_id] = h ? h : 1;
}

static bool push_token(read_state *st, uint64_t tok, uint32_t alloc, int64_t id) {
  ms_history *h = st->h;
  if (!ms_grow(&h->tok, &h->tok_cap, h->ntok + 1, sizeof *h->tok) ||
      !ms_grow(&h->alloc, &h->alloc_cap, h->ntok + 1, sizeof *h->alloc) ||
      !ms_grow(&h->event_id, &h->id_cap, h->ntok + 1, sizeof *h->event_id)) {
    st->host_oom = true;
    return false;
  }
  h->tok[h->ntok] = tok;
  h->alloc[h->ntok] = alloc;
  h->event_id[h->ntok++] = id;
  return true;
}

static int read_event(const ms_event *e, void *arg) {
  read_state *st = arg;
  ms_history *h = st->h;
  h->events++;
  if (e->kind == MS_OOM) h->ooms++;
  if (e->kind != MS_ALLOC && e->kind != MS_FREE_REQUESTED) return 0;
  if (e->kind == MS_ALLOC) {
    int64_t size = e->requested > 0 ? e->requested : e->size;
    if (size <= 0 || !e->address || e->device < 0 || e->device >= MS_MAX_DEVICES) {
      h->skipped++;
      return 0;
    }
    ms_live_slot old;
    if (ms_live_take(&st->live, e->address, &old)) st->live_bytes -= old.size; /* still held: its free is missing */
    uint64_t tok = mix64(site_hash(st, e->stack_id) ^ ((uint64_t)(e->device + 1) << 40) ^ 0xa110c);
    if (h->ntok >= UINT32_MAX - 1 || !ms_grow(&h->size, &h->size_cap, h->nalloc + 1, sizeof *h->size)) {
      st->host_oom = true;
      return 1;
    }
    if (!push_token(st, tok, (uint32_t)h->nalloc, e->id)) return 1;
    if (ms_live_put(&st->live, (ms_live_slot){.key = e->address, .site = e->stack_id == 0, .aux = (uint32_t)(h->ntok - 1), .size = e->size}) != 0) {
      st->host_oom = true;
      return 1;
    }
    h->size[h->nalloc++] = size;
    h->bytes += size;
    if ((st->live_bytes += e->size) > h->live_peak) h->live_peak = st->live_bytes;
    h->with_stacks += e->stack_id != 0;
    h->devices |= 1ull << e->device;
    return 0;
  }
  ms_live_slot slot;
  if (!ms_live_take(&st->live, e->address, &slot)) {
    h->unknown_frees++;
    return 0;
  }
  h->frees++;
  st->live_bytes -= slot.size;
  uint64_t alloc_tok = h->tok[slot.aux];
  if (slot.site) /* no stack: the allocation is known by its lifetime too, in tokens */
    h->tok[slot.aux] = mix64(alloc_tok ^ ((uint64_t)(h->ntok - slot.aux) << 8) ^ 0x11fe);
  return push_token(st, mix64(alloc_tok ^ 0xf4eeull), NO_ALLOC, e->id) ? 0 : 1;
}

/* Blocks allocated at the snapshot that the history did not leave live: made before it began. */
static int check_block(const ms_block_row *r, void *arg) {
  read_state *st = arg;
  ms_live_slot slot;
  if (r->state != MS_BLOCK_ALLOCATED) return 0;
  if (ms_live_take(&st->live, r->address, &slot)) {
    if (ms_live_put(&st->live, slot) != 0) st->host_oom = true;
    return st->host_oom ? 1 : 0;
  }
  st->h->before_blocks++;
  st->h->before_bytes += r->size;
  return 0;
}

int ms_history_read(ms_snapshot *s, ms_history *h) {
  memset(h, 0, sizeof *h);
  read_state st = {.s = s, .h = h};
  st.frame_hash = calloc(s->nframes + 1, sizeof *st.frame_hash);
  st.stack_hash = calloc(s->nstacks + 1, sizeof *st.stack_hash);
  int rc = 0;
  if (!st.frame_hash || !st.stack_hash) st.host_oom = true;
  else rc = ms_events_each(s, read_event, &st);
  if (rc == 0 && !st.host_oom) rc = ms_blocks_each(s, check_block, &st);
  if (st.host_oom) snprintf(s->error, sizeof s->error, "out of memory reading the history of '%s'", s->shown_path);
  free(st.frame_hash);
  free(st.stack_hash);
  ms_live_free(&st.live);
  if (rc != 0 || st.host_oom) {
    ms_history_free(h);
    return -1;
  }
  return 0;
}

void ms_history_free(ms_history *h) {
  free(h->tok);
  free(h->alloc);
  free(h->event_id);
  free(h->size);
  memset(h, 0, sizeof *h);
}

/* ---- aligning two lists --------------------------------------------------------------------- */

typedef struct window {
  uint64_t key[TABLE];
  uint32_t pos[TABLE]; /* offset from the list's position + 1; 0: empty */
  uint32_t gen[TABLE];
  uint32_t now;        /* the generation in use: slots of others are empty */
} window;

static uint64_t run_hash(const uint64_t *t) {
  uint64_t h = 0;
  for (int k = 0; k < AGREE; k++) h = mix64(h ^ t[k]);
  return h;
}

/* Whether x from p and y from q agree: AGREE tokens equal, or, near the ends, all that is left of
 * both, equally long (nothing left of either counts). */
static bool agree(const ms_history *x, size_t p, const ms_history *y, size_t q) {
  size_t rx = x->ntok - p, ry = y->ntok - q;
  if (rx < AGREE || ry < AGREE) {
    if (rx != ry) return false;
  } else {
    rx = AGREE;
  }
  for (size_t k = 0; k < rx; k++)
    if (x->tok[p + k] != y->tok[q + k]) return false;
  return true;
}

/* The nearest point after (i, j), x[i] != y[j], where both agree again: *da, *db tokens skipped
 * in each. false when there is none within the window. */
static bool resync(const ms_history *x, const ms_history *y, size_t i, size_t j, window *w, size_t *da, size_t *db) {
  for (size_t d = 1; d <= NEAR; d++)
    for (size_t a = 0; a <= d; a++) {
      size_t b = d - a;
      if (i + a <= x->ntok && j + b <= y->ntok && agree(x, i + a, y, j + b)) {
        *da = a, *db = b;
        return true;
      }
    }
  size_t best = SIZE_MAX;
  if (++w->now == 0) memset(w->gen, 0, sizeof w->gen), w->now = 1;
  for (size_t b = 0; b <= WINDOW && j + b + AGREE <= y->ntok; b++) { /* y's runs, the first of each kept */
    uint64_t key = run_hash(y->tok + j + b);
    size_t slot = (size_t)key & (TABLE - 1);
    while (w->gen[slot] == w->now && w->key[slot] != key) slot = (slot + 1) & (TABLE - 1);
    if (w->gen[slot] == w->now) continue;
    w->gen[slot] = w->now, w->key[slot] = key, w->pos[slot] = (uint32_t)b + 1;
  }
  for (size_t a = 0; a <= WINDOW && a < best && i + a + AGREE <= x->ntok; a++) {
    uint64_t key = run_hash(x->tok + i + a);
    size_t slot = (size_t)key & (TABLE - 1);
    while (w->gen[slot] == w->now && w->key[slot] != key) slot = (slot + 1) & (TABLE - 1);
    if (w->gen[slot] != w->now) continue;
    size_t b = w->pos[slot] - 1;
    if (a + b < best && a + b > 0 && agree(x, i + a, y, j + b)) best = a + b, *da = a, *db = b;
  }
  /* the ends: what is left of both, equally long, agrees */
  size_t rx = x->ntok - i, ry = y->ntok - j;
  for (size_t left = 0; left < AGREE && left <= rx && left <= ry; left++) {
    size_t a = rx - left, b = ry - left;
    if (a <= WINDOW && b <= WINDOW && a + b < best && a + b > 0 && agree(x, i + a, y, j + b)) best = a + b, *da = a, *db = b;
  }
  return best != SIZE_MAX;
}

int ms_histories_align(const ms_history *x, const ms_history *y, ms_alignment *out) {
  memset(out, 0, sizeof *out);
  window *w = calloc(1, sizeof *w);
  out->size_in_y = malloc(sizeof *out->size_in_y * (x->nalloc + 1));
  if (!w || !out->size_in_y) {
    free(w);
    ms_alignment_free(out);
    return -1;
  }
  for (size_t k = 0; k < x->nalloc; k++) out->size_in_y[k] = -1;
  size_t i = 0, j = 0;
  while (i < x->ntok && j < y->ntok) {
    if (x->tok[i] == y->tok[j]) {
      uint32_t ax = x->alloc[i], ay = y->alloc[j];
      if (ax != NO_ALLOC && ay != NO_ALLOC) {
        out->size_in_y[ax] = y->size[ay];
        out->allocs++;
        out->x_bytes += x->size[ax];
        out->y_bytes += y->size[ay];
      } else if (ax == NO_ALLOC && ay == NO_ALLOC) {
        out->frees++;
      }
      i++, j++;
      continue;
    }
    size_t da = 0, db = 0;
    if (!out->differences++) out->first_x = x->event_id[i], out->first_y = y->event_id[j];
    if (!resync(x, y, i, j, w, &da, &db) || (i + da == x->ntok && j + db == y->ntok)) { /* no agreement but the end */
      out->parted = true;
      out->part_x = x->event_id[i];
      out->part_y = y->event_id[j];
      break;
    }
    i += da, j += db;
  }
  free(w);
  return 0;
}

void ms_alignment_free(ms_alignment *a) {
  free(a->size_in_y);
  memset(a, 0, sizeof *a);
}
