/* livemap.c: what every pass over the history shares: the map of live blocks (address -> site,
 * size, and a word the pass may attach), replaying an event into it, and the time buckets the
 * curves and the page's bands use. Memory follows the live blocks, never the history's length.
 */
#include <stdlib.h>

#include "analysis.h"

static size_t live_hash(uint64_t a, size_t mask) { return (size_t)((a >> 9) * 0x9E3779B97F4A7C15ull >> 20) & mask; }

/* Puts slot; a slot of the same key already there goes into *old (NULL: dropped). 1 when one was
 * replaced, 0 when added, -1 when out of memory. */
static int put(ms_live_map *m, ms_live_slot slot, ms_live_slot *old) {
  if ((m->count + 1) * 2 > m->mask + 1) {
    size_t cap = m->mask ? (m->mask + 1) * 2 : 64;
    ms_live_slot *s = calloc(cap, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; m->slots && i <= m->mask; i++)
      if (m->slots[i].key) {
        size_t j = live_hash(m->slots[i].key, cap - 1);
        while (s[j].key) j = (j + 1) & (cap - 1);
        s[j] = m->slots[i];
      }
    free(m->slots);
    m->slots = s;
    m->mask = cap - 1;
  }
  size_t i = live_hash(slot.key, m->mask);
  while (m->slots[i].key && m->slots[i].key != slot.key) i = (i + 1) & m->mask;
  int replaced = m->slots[i].key != 0;
  if (replaced && old) *old = m->slots[i];
  if (!replaced) m->count++;
  m->slots[i] = slot;
  return replaced;
}

int ms_live_put(ms_live_map *m, ms_live_slot slot) { return put(m, slot, NULL) < 0 ? -1 : 0; }

bool ms_live_take(ms_live_map *m, uint64_t key, ms_live_slot *out) {
  if (!m->slots || !key) return false;
  size_t i = live_hash(key, m->mask);
  for (; m->slots[i].key; i = (i + 1) & m->mask)
    if (m->slots[i].key == key) break;
  if (!m->slots[i].key) return false;
  *out = m->slots[i];
  size_t hole = i; /* backward-shift deletion: no tombstones */
  for (size_t j = (i + 1) & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
    size_t home = live_hash(m->slots[j].key, m->mask);
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      m->slots[hole] = m->slots[j];
      hole = j;
    }
  }
  m->slots[hole].key = 0;
  m->count--;
  return true;
}

void ms_live_free(ms_live_map *m) {
  free(m->slots);
  m->slots = NULL;
  m->mask = m->count = 0;
}

int64_t ms_replay(ms_live_map *m, const ms_event *e, int64_t alloc_site, uint32_t aux, const ms_birth *birth,
                  ms_live_slot *taken, ms_live_slot *replaced, bool *failed) {
  if (e->kind == MS_ALLOC) {
    ms_live_slot slot = {e->address, (uint32_t)alloc_site, aux, e->size, birth ? *birth : (ms_birth){0}};
    int rc = alloc_site < 0 ? -1 : put(m, slot, replaced);
    if (rc < 0) {
      *failed = true;
      return 0;
    }
    if (replaced && rc == 0) replaced->key = 0;
    *taken = slot;
    return e->size;
  }
  if (e->kind == MS_FREE_REQUESTED && ms_live_take(m, e->address, taken)) return -taken->size;
  return 0;
}

int64_t ms_bucket_width(const ms_snapshot *s) {
  if (s->last_ns <= s->first_ns) return 1;
  uint64_t span = (uint64_t)s->last_ns - (uint64_t)s->first_ns;
  return (int64_t)(span / (MS_BUCKETS - 1) + 1);
}

int64_t ms_bucket_start(const ms_snapshot *s, int64_t width, int64_t t) {
  if (t < s->first_ns) t = s->first_ns;
  if (t > s->last_ns) t = s->last_ns;
  uint64_t off = (uint64_t)t - (uint64_t)s->first_ns;
  return (int64_t)((uint64_t)s->first_ns + off / (uint64_t)width * (uint64_t)width);
}
