/* ptrmap.c: hash map from a block's device address to the allocated block.
 *
 * memsnap_free() gets only a pointer, so every free starts here. Open addressing with linear
 * probing over a power-of-two table kept at most half full; each slot holds the address next
 * to the block pointer, so probing never touches a block. Deletion shifts later entries back
 * (no tombstones), so lookups stay short however long the process runs. The table grows by
 * doubling; growth is the only allocation, and it happens at most log2(live blocks) times.
 * Address 0 marks an empty slot: no backend hands out address 0.
 */
#include <stdlib.h>

#include "internal.h"

static inline size_t slot_of(uintptr_t ptr, size_t mask) {
  /* Blocks are 512-byte aligned: drop those bits; Fibonacci hashing keeps the high bits. */
  return (size_t)(((uint64_t)(ptr >> 9) * 0x9E3779B97F4A7C15ull) >> 24) & mask;
}

int msi_ptrmap_init(msi_ptrmap *m, size_t capacity) {
  size_t cap = 64;
  while (cap < capacity) cap <<= 1;
  m->slots = calloc(cap, sizeof *m->slots);
  if (!m->slots) return -1;
  m->mask = cap - 1;
  m->count = 0;
  return 0;
}

void msi_ptrmap_destroy(msi_ptrmap *m) {
  free(m->slots);
  m->slots = NULL;
  m->mask = m->count = 0;
}

static void place(msi_ptrmap_slot *slots, size_t mask, uintptr_t key, msi_block *b) {
  size_t i = slot_of(key, mask);
  while (slots[i].key) i = (i + 1) & mask;
  slots[i].key = key;
  slots[i].block = b;
}

static int grow(msi_ptrmap *m) {
  size_t cap = (m->mask + 1) * 2;
  msi_ptrmap_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i <= m->mask; i++)
    if (m->slots[i].key) place(slots, cap - 1, m->slots[i].key, m->slots[i].block);
  free(m->slots);
  m->slots = slots;
  m->mask = cap - 1;
  return 0;
}

int msi_ptrmap_put(msi_ptrmap *m, msi_block *b) {
  if (MSI_UNLIKELY((m->count + 1) * 2 > m->mask + 1) && grow(m) != 0) return -1;
  place(m->slots, m->mask, b->ptr, b);
  m->count++;
  return 0;
}

msi_block *msi_ptrmap_get(const msi_ptrmap *m, uintptr_t ptr) {
  if (!m->slots || !ptr) return NULL;
  for (size_t i = slot_of(ptr, m->mask);; i = (i + 1) & m->mask) {
    if (m->slots[i].key == ptr) return m->slots[i].block;
    if (!m->slots[i].key) return NULL;
  }
}

msi_block *msi_ptrmap_take(msi_ptrmap *m, uintptr_t ptr) {
  if (!m->slots || !ptr) return NULL;
  size_t i = slot_of(ptr, m->mask);
  for (;; i = (i + 1) & m->mask) {
    if (m->slots[i].key == ptr) break;
    if (!m->slots[i].key) return NULL;
  }
  msi_block *found = m->slots[i].block;
  /* Backward-shift deletion: move back every later entry of the probe run that may. */
  size_t hole = i;
  for (size_t j = (i + 1) & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
    size_t home = slot_of(m->slots[j].key, m->mask);
    /* Entry j may fill the hole unless its home lies in the cyclic range (hole, j]. */
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      m->slots[hole] = m->slots[j];
      hole = j;
    }
  }
  m->slots[hole].key = 0;
  m->slots[hole].block = NULL;
  m->count--;
  return found;
}
