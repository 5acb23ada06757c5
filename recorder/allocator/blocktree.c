/* blocktree.c: the ordered set of free blocks of one pool and one stream.
 *
 * PyTorch keeps free blocks in a std::set ordered by (stream, size, address) and asks it for
 * the first block not smaller than a request (best fit, lowest address among equals). memsnap
 * answers the same question faster:
 *   - one set per stream, so the stream never enters a comparison;
 *   - inside a set, size classes: one per size up to 8 KiB, then 16 per power of two as in
 *     TLSF (sizes in one class differ by at most 6%), with a two-level bitmap of the non-empty ones. All blocks of a lower class are smaller than
 *     all blocks of a higher one, so the answer is the lower bound inside the request's class,
 *     or else the smallest block of the next non-empty class (one bitmap scan);
 *   - each class an intrusive treap ordered by (size, address): links live in the block, so
 *     insert and erase never allocate, and a class holds few blocks, so searches touch few
 *     cache lines. Priorities hash the address, so shapes, and decisions, are deterministic.
 *
 * Invariants: in-order traversal of a class is sorted by (size, ptr); a parent's prio >= its
 * children's; bit c of `nonempty` is set iff bins[c] is not NULL; bit w of `summary` iff word w
 * of `nonempty` is not 0.
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

static void tree_insert(msi_block **root, msi_block *b) {
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

static void tree_erase(msi_block **root, msi_block *b) {
  while (b->left && b->right)
    rotate_up(root, b->left->prio > b->right->prio ? b->left : b->right);
  relink(root, b, b->left ? b->left : b->right);
  b->left = b->right = b->parent = NULL;
  b->in_tree = false;
}

static msi_block *tree_lower_bound(msi_block *n, size_t size) {
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

static msi_block *tree_first(msi_block *n) {
  if (n)
    while (n->left) n = n->left;
  return n;
}

static msi_block *tree_last(msi_block *n) {
  if (n)
    while (n->right) n = n->right;
  return n;
}

static const msi_block *tree_next(const msi_block *b) {
  if (b->right) return tree_first(b->right);
  while (b->parent && b->parent->right == b) b = b->parent;
  return b->parent;
}

static const msi_block *tree_prev(const msi_block *b) {
  if (b->left) return tree_last(b->left);
  while (b->parent && b->parent->left == b) b = b->parent;
  return b->parent;
}

/* ---- size classes ---------------------------------------------------------------------- */

/* Classes: units of 512 bytes up to MSI_BIN_EXACT each have their own; above, class boundaries
 * are the powers of two and 16 equal steps between them. Larger sizes map to larger or equal
 * classes. The largest: units just under 2^55 (sizes under 2^64), exponent 54. */
#define SUB (1 << MSI_BIN_SUB_BITS)
#define EXACT_LOG 4 /* log2(MSI_BIN_EXACT) */
_Static_assert(MSI_BIN_EXACT == 1 << EXACT_LOG, "MSI_BIN_EXACT must be 2^EXACT_LOG");
_Static_assert(MSI_BIN_EXACT + 1 + SUB * (54 - EXACT_LOG + 1) <= MSI_BINS, "MSI_BINS too small");
_Static_assert(MSI_BINS % 64 == 0 && MSI_BINS / 64 <= 64, "MSI_BINS must fill at most 64 bitmap words");

int msi_set_bin_of(size_t size) {
  size_t units = size >> 9; /* sizes are multiples of 512, at least 512 */
  if (units <= MSI_BIN_EXACT) return (int)units;
  int e = 63 - __builtin_clzll((unsigned long long)units); /* e >= EXACT_LOG */
  return MSI_BIN_EXACT + 1 + SUB * (e - EXACT_LOG) + (int)((units >> (e - MSI_BIN_SUB_BITS)) & (SUB - 1));
}

/* First non-empty class at or after c, or -1: the class's word, else the summary names the
 * next word with a non-empty class, so the search is O(1) however many classes there are. */
static int next_bin(const msi_stream_set *s, int c) {
  if (c >= MSI_BINS) return -1;
  int w = c >> 6;
  uint64_t bits = s->nonempty[w] & (~0ull << (c & 63));
  if (bits) return (w << 6) + __builtin_ctzll(bits);
  uint64_t words = w + 1 < 64 ? s->summary & (~0ull << (w + 1)) : 0;
  if (!words) return -1;
  w = __builtin_ctzll(words);
  return (w << 6) + __builtin_ctzll(s->nonempty[w]);
}

/* Last non-empty class at or before c, or -1. */
static int prev_bin(const msi_stream_set *s, int c) {
  if (c < 0) return -1;
  int w = c >> 6;
  uint64_t bits = s->nonempty[w] & (~0ull >> (63 - (c & 63)));
  if (bits) return (w << 6) + 63 - __builtin_clzll(bits);
  uint64_t words = w > 0 ? s->summary & (~0ull >> (64 - w)) : 0;
  if (!words) return -1;
  w = 63 - __builtin_clzll(words);
  return (w << 6) + 63 - __builtin_clzll(s->nonempty[w]);
}

void msi_set_insert(msi_stream_set *s, msi_block *b) {
  int c = msi_set_bin_of(b->size);
  tree_insert(&s->bins[c], b);
  s->nonempty[c >> 6] |= 1ull << (c & 63);
  s->summary |= 1ull << (c >> 6);
  s->count++;
}

void msi_set_erase(msi_stream_set *s, msi_block *b) {
  int c = msi_set_bin_of(b->size);
  tree_erase(&s->bins[c], b);
  if (!s->bins[c]) {
    s->nonempty[c >> 6] &= ~(1ull << (c & 63));
    if (!s->nonempty[c >> 6]) s->summary &= ~(1ull << (c >> 6));
  }
  s->count--;
}

msi_block *msi_set_lower_bound(const msi_stream_set *s, size_t size) {
  int c = msi_set_bin_of(size);
  msi_block *b = s->bins[c] ? tree_lower_bound(s->bins[c], size) : NULL;
  if (b) return b;
  c = next_bin(s, c + 1);
  return c < 0 ? NULL : tree_first(s->bins[c]);
}

msi_block *msi_set_first(const msi_stream_set *s) {
  int c = next_bin(s, 0);
  return c < 0 ? NULL : tree_first(s->bins[c]);
}

msi_block *msi_set_last(const msi_stream_set *s) {
  int c = prev_bin(s, MSI_BINS - 1);
  return c < 0 ? NULL : tree_last(s->bins[c]);
}

msi_block *msi_set_next(const msi_stream_set *s, const msi_block *b) {
  const msi_block *n = tree_next(b);
  if (n) return (msi_block *)n;
  int c = next_bin(s, msi_set_bin_of(b->size) + 1);
  return c < 0 ? NULL : tree_first(s->bins[c]);
}

msi_block *msi_set_prev(const msi_stream_set *s, const msi_block *b) {
  const msi_block *p = tree_prev(b);
  if (p) return (msi_block *)p;
  int c = prev_bin(s, msi_set_bin_of(b->size) - 1);
  return c < 0 ? NULL : tree_last(s->bins[c]);
}
