/* blocktree.c: the ordered set of free blocks of one pool and one stream.
 *
 * PyTorch keeps free blocks in a std::set ordered by (stream, size, address) and asks it for
 * the first block not smaller than a request (best fit, lowest address among equals). memsnap
 * keeps one set per stream instead, so the stream never enters a comparison, and makes each
 * set an intrusive treap: the links live in the block itself, so inserting and erasing never
 * allocate. The priority of a node comes from a hash of its address, which keeps the shape,
 * and so every decision, deterministic from run to run.
 *
 * Invariants: in-order traversal is sorted by (size, ptr); a parent's prio >= its children's.
 */
#include "internal.h"

static inline bool key_less(const msi_block *a, const msi_block *b) {
  return a->size < b->size || (a->size == b->size && a->ptr < b->ptr);
}

static inline uint32_t prio_of(uintptr_t ptr) {
  uint64_t x = (uint64_t)ptr * 0x9E3779B97F4A7C15ull;
  return (uint32_t)(x >> 32);
}

/* Replaces `old` with `with` in old's parent (or the root). */
static inline void relink(msi_block **root, msi_block *old, msi_block *with) {
  msi_block *p = old->parent;
  if (with) with->parent = p;
  if (!p) *root = with;
  else if (p->left == old) p->left = with;
  else p->right = with;
}

/* Rotates x above its parent. */
static void rotate_up(msi_block **root, msi_block *x) {
  msi_block *p = x->parent;
  relink(root, p, x);
  if (p->left == x) {
    p->left = x->right;
    if (x->right) x->right->parent = p;
    x->right = p;
  } else {
    p->right = x->left;
    if (x->left) x->left->parent = p;
    x->left = p;
  }
  p->parent = x;
}

void msi_tree_insert(msi_block **root, msi_block *b) {
  b->left = b->right = NULL;
  b->prio = prio_of(b->ptr);
  b->in_tree = true;
  msi_block *p = NULL, **link = root;
  while (*link) {
    p = *link;
    link = key_less(b, p) ? &p->left : &p->right;
  }
  b->parent = p;
  *link = b;
  while (b->parent && b->parent->prio < b->prio) rotate_up(root, b);
}

void msi_tree_erase(msi_block **root, msi_block *b) {
  while (b->left && b->right)
    rotate_up(root, b->left->prio > b->right->prio ? b->left : b->right);
  relink(root, b, b->left ? b->left : b->right);
  b->left = b->right = b->parent = NULL;
  b->in_tree = false;
}

msi_block *msi_tree_lower_bound(msi_block *n, size_t size) {
  msi_block *best = NULL;
  while (n) {
    if (n->size >= size) {
      best = n;
      n = n->left;
    } else {
      n = n->right;
    }
  }
  return best;
}

msi_block *msi_tree_first(msi_block *n) {
  if (n)
    while (n->left) n = n->left;
  return n;
}

msi_block *msi_tree_last(msi_block *n) {
  if (n)
    while (n->right) n = n->right;
  return n;
}

msi_block *msi_tree_next(msi_block *b) {
  if (b->right) return msi_tree_first(b->right);
  while (b->parent && b->parent->right == b) b = b->parent;
  return b->parent;
}

msi_block *msi_tree_prev(msi_block *b) {
  if (b->left) return msi_tree_last(b->left);
  while (b->parent && b->parent->left == b) b = b->parent;
  return b->parent;
}
