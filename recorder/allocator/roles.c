/* roles.c: the roles a framework told of live blocks (a parameter, a gradient, an optimizer's
 * state, a buffer, and the module that holds it), kept for the block's life.
 *
 * A tensor event (memsnap_tensor_events, PyTorch's layer at a model's first forward and each
 * optimizer step) names a block's role once; the ring forgets the event when it wraps, the block
 * lives on. The role is kept here, one table a device, keyed by the block's address, under the
 * device lock: the block's `told` bit says it has an entry, so a free looks here only for a block
 * told of (msi_block stays 128 bytes; the allocation path never looks). A snapshot (snapshot.c,
 * and the live mapping's state: livestate.c) writes each live block's role from it.
 *
 * Open addressing with linear probing and backward-shift deletion (no tombstones), doubled at
 * half full. Entry points: msi_roles_set / _get / _forget / _free; on failure to grow, a role is
 * not kept (-1), never an error of the allocator.
 */
#include <stdlib.h>

#include "internal.h"

static size_t slot_of(uint64_t address, size_t mask) {
  uint64_t h = address * 0x9e3779b97f4a7c15ull;
  return (size_t)(h ^ (h >> 31)) & mask;
}

static int grow(msi_roles *t) {
  size_t cap = t->slots ? (t->mask + 1) * 2 : 256;
  msi_role *g = calloc(cap, sizeof *g);
  if (!g) return -1;
  for (size_t i = 0; t->slots && i <= t->mask; i++) {
    if (!t->slots[i].address) continue;
    size_t k = slot_of(t->slots[i].address, cap - 1);
    while (g[k].address) k = (k + 1) & (cap - 1);
    g[k] = t->slots[i];
  }
  free(t->slots);
  t->slots = g;
  t->mask = cap - 1;
  return 0;
}

int msi_roles_set(msi_roles *t, uint64_t address, uint8_t role, uint32_t label) {
  if (!address) return -1;
  if ((t->count + 1) * 2 > (t->slots ? t->mask + 1 : 0) && grow(t) != 0) return -1;
  size_t k = slot_of(address, t->mask);
  while (t->slots[k].address && t->slots[k].address != address) k = (k + 1) & t->mask;
  if (!t->slots[k].address) t->count++;
  t->slots[k] = (msi_role){address, label, role};
  return 0;
}

const msi_role *msi_roles_get(const msi_roles *t, uint64_t address) {
  if (!t->slots || !address) return NULL;
  for (size_t k = slot_of(address, t->mask); t->slots[k].address; k = (k + 1) & t->mask)
    if (t->slots[k].address == address) return &t->slots[k];
  return NULL;
}

void msi_roles_forget(msi_roles *t, uint64_t address) {
  if (!t->slots || !address) return;
  size_t k = slot_of(address, t->mask);
  while (t->slots[k].address != address) {
    if (!t->slots[k].address) return;
    k = (k + 1) & t->mask;
  }
  /* backward shift: each entry after the hole that may move into it does */
  for (size_t j = (k + 1) & t->mask; t->slots[j].address; j = (j + 1) & t->mask) {
    size_t home = slot_of(t->slots[j].address, t->mask);
    if (((j - home) & t->mask) >= ((j - k) & t->mask)) {
      t->slots[k] = t->slots[j];
      k = j;
    }
  }
  t->slots[k].address = 0;
  t->count--;
}

void msi_roles_free(msi_roles *t) {
  free(t->slots);
  t->slots = NULL;
  t->mask = t->count = 0;
}
