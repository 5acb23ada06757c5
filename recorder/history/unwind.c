/* unwind.c: the calling thread's native frames, without walking again what did not change.
 *
 * Before this file every capture asked libunwind's unw_backtrace for the whole stack: a few
 * nanoseconds a frame, and the stacks of a deep program, PyTorch's dispatcher under Python, are
 * 50 to 100 frames. Now each thread keeps (struct msi_unwind_cache, one per thread, used by that
 * thread alone):
 *   - rules: return address -> how to step out of that frame (ehframe.c, from .eh_frame),
 *     found once per address;
 *   - chains: the stacks it walked lately, each the frames' stack pointers and pcs and every
 *     word of the stack its walk read, keyed by the first frame (this function's own stack
 *     pointer and pc), with stacks.c's id of each frame's suffix.
 * A capture first looks its starting frame up among the chains and checks a candidate's words
 * against the stack, in the order a walk would read them: the walk is a function of the first
 * frame's registers (stack pointer, pc and, where some step computes its CFA from it, rbp) and
 * of the words it reads, so equal words mean the walk would find the same frames, and the
 * chain's id is returned without walking or interning anything. Up to PROBES chains share a
 * starting frame (one allocation site reached from many ops at the same depth: stacks that
 * begin alike and differ far out); each slot keeps its chain's key and the stack word that
 * differed when the chain last failed, so that the wrong ones are turned away with one read
 * of the stack, without reading the chain or comparing its words up to where they differ.
 * Otherwise the stack is walked
 * with the rules, and at each frame the chain of the thread's previous capture is tried from
 * the frame with the same stack pointer on: when only the innermost frames changed, the walk
 * stops there and the previous capture's frames (and their ids) complete it. A check reads a
 * word per frame (no step, no lookup); a walk costs a rule lookup and a step a frame.
 *
 * The frames are libunwind's: the walk steps only the frames its fast trace calls standard, the
 * way it steps them (ehframe.c), starts from this file's msi_unwind_stack as unw_backtrace
 * called there starts, and stops where it stops (an outermost frame, a return address below
 * 0x4000, MSI_UNWIND_MAX_RAW frames). Any other frame (a signal frame, stack realignment, code
 * without unwind information), a read outside the thread's stack (a signal's alternate stack,
 * a coroutine's) or a module unloaded since the rules were found (noticed when a frame's rule is
 * not in the cache and is looked up) send the capture to unw_backtrace itself, as before.
 *
 * Threads: a cache belongs to one thread (stacks.c keeps it in thread-local storage and frees it
 * when the thread exits); the rules and chains of one thread never name another's stack. Fork:
 * the child's thread has its parent's stack at the same addresses, so its cache stays true.
 * Signals: stacks.c's recursion guard keeps a handler's capture away from a cache in use.
 * Recursion: a recursive program's frames differ by stack pointer, so each depth is a chain of
 * its own, and one capture's chain is the next's previous. A stack longer than a stack keeps
 * (MSI_STACK_MAX_NATIVE frames past the library's) is cached whole, its nodes those of the cut
 * stack (`cut`), and never continues another capture's walk. msi_unwind_forget (stacks.c's reset,
 * or an unloaded module noticed by a rule lookup) makes every thread drop its caches at its next
 * capture; a thread whose frames are all cached does not look rules up, so it notices an unload
 * only at its next new frame.
 */
#include <libunwind.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_RAW MSI_UNWIND_MAX_RAW
#define PROBES 16                   /* chain slots tried for one starting frame */
#define CHAIN_SLOTS 2048            /* a thread's chains at most (PyTorch: a few hundred sites a step) */
#define CHAIN_BYTES (2u << 20)      /* a thread's chains hold at most this much, then start over */

/* Frame flags in a chain. */
enum {
  F_CFA_RBP = MSI_RULE_CFA_RBP, /* its step computes the CFA from rbp */
  F_SAVED = MSI_RULE_RBP_SAVED, /* its step reads the caller's rbp from the stack */
  F_DEP = 4,                    /* the walk from this frame on reads the rbp it starts with */
  F_RBPW = 8,                   /* its step's read of rbp matters: a later step uses the value */
};
enum { END_LAST, END_BADRA, END_LIMIT }; /* why a walk stopped */

/* One walked stack. Frame i has stack pointer sp[i], pc pc[i], rbp rbp_in[i] when it starts;
 * stepping it read the word at sp[i + 1] - 8 (pc[i + 1]) and, with F_SAVED, the word at
 * rbp_addr[i] (rbp_in[i + 1]). nstep frames were stepped: n - 1, or n when the last step read a
 * return address below 0x4000 (kept in pc[n], which is not a frame). words[] lists the words
 * whose values decide the walk, (address, value), frame i's from words[wstart[i]] on. */
typedef struct chain {
  uint64_t entry; /* the caller's hint that keys it with frame 0's stack pointer and pc */
  uint16_t n, nstep, lib_end, nwords;
  uint8_t end;
  bool cut;       /* its nodes name frames up to lib_end + MSI_STACK_MAX_NATIVE only (msi_native_stack) */
  uint64_t *sp, *pc, *rbp_in, *rbp_addr;
  uint64_t (*words)[2];
  uint32_t *node;
  uint16_t *wstart;
  uint8_t *flags;
  size_t bytes;
} chain;

typedef struct rule_slot {
  uint64_t ra; /* 0: empty */
  msi_unwind_rule rule;
} rule_slot;

struct msi_unwind_cache {
  uint64_t generation;
  uintptr_t stack_lo, stack_hi;     /* the thread's stack */
  unsigned long long unloads;       /* the loader's unload count when the rules were found */
  bool unloads_known;
  rule_slot *rules;
  size_t rules_mask, nrules;
  struct chain_slot {
    chain *ch;
    uint64_t tag;                 /* chain_tag of its first frame: compared before the chain is read */
    uint64_t miss_at, miss_value; /* a stack word that differed when its words last failed to hold
                                     (miss_at 0: none): compared next, before the chain is read */
  } slots[CHAIN_SLOTS];
  chain *last;                      /* the previous capture's */
  size_t bytes;
  unsigned victim;
  /* The capture in progress (for msi_unwind_keep), arrays of MAX_RAW + 1. */
  uint64_t entry;
  int n, nstep, lib_end, end;
  uint64_t sp[MAX_RAW + 1], pc[MAX_RAW + 1], rbp_in[MAX_RAW + 1], rbp_addr[MAX_RAW + 1];
  uint32_t node[MAX_RAW + 1];
  uint8_t flags[MAX_RAW + 1];
  bool pending;
};

static _Atomic uint64_t generation = 1;
static atomic_ullong walks, fallbacks; /* captures that walked, and that went to libunwind (slow paths) */
#ifdef MSI_PHASE_TIMING
/* The diagnostic build's (make phase-timing) counts of what the captures did here: msi_unwind_diag. */
static atomic_ullong diag[MSI_UNWIND_DIAG];
#define DIAG_ADD(which, n) atomic_fetch_add_explicit(&diag[which], (unsigned long long)(n), memory_order_relaxed)
void msi_unwind_diag(unsigned long long *out) {
  for (int i = 0; i < MSI_UNWIND_DIAG; i++) out[i] = atomic_load_explicit(&diag[i], memory_order_relaxed);
}
#else
#define DIAG_ADD(which, n) ((void)0)
#endif
#define DIAG(which) DIAG_ADD(which, 1)

/* ---- libmemsnap's own code --------------------------------------------------------------- */

/* Found once when the library is loaded (a constructor), so no capture pays for a check and no
 * two threads race to set them. */
static uintptr_t self_start, self_end;

static int find_self(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t probe = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (probe >= lo && probe < hi) {
      self_start = lo;
      self_end = hi;
      return 1;
    }
  }
  return 0;
}

__attribute__((constructor)) static void find_self_at_load(void) {
  dl_iterate_phdr(find_self, (void *)(uintptr_t)&find_self_at_load);
}

bool msi_unwind_is_self(uint64_t pc) { return pc >= self_start && pc < self_end; }

static int leading_self(const uint64_t *pcs, int n) {
  int i = 0;
  while (i < n && msi_unwind_is_self(pcs[i])) i++;
  return i;
}

/* ---- the caches ------------------------------------------------------------------------- */

static void drop_chains(msi_unwind_cache *c) {
  for (int i = 0; i < CHAIN_SLOTS; i++) free(c->slots[i].ch);
  memset(c->slots, 0, sizeof c->slots);
  c->last = NULL;
  c->bytes = 0;
}

static void drop_all(msi_unwind_cache *c) {
  drop_chains(c);
  memset(c->rules, 0, sizeof *c->rules * (c->rules_mask + 1));
  c->nrules = 0;
  c->unloads_known = false;
  c->pending = false;
}

msi_unwind_cache *msi_unwind_cache_new(void) {
#if defined(__x86_64__)
  pthread_attr_t attr;
  void *addr;
  size_t size;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return NULL;
  int got = pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  if (got != 0 || !addr || !size) return NULL;
  msi_unwind_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->rules_mask = 1023;
  c->rules = calloc(c->rules_mask + 1, sizeof *c->rules);
  if (!c->rules) {
    free(c);
    return NULL;
  }
  c->stack_lo = (uintptr_t)addr;
  c->stack_hi = (uintptr_t)addr + size;
  c->generation = atomic_load_explicit(&generation, memory_order_relaxed);
  return c;
#else
  return NULL; /* ehframe.c steps x86-64 frames only */
#endif
}

void msi_unwind_cache_free(msi_unwind_cache *c) {
  if (!c) return;
  drop_chains(c);
  free(c->rules);
  free(c);
}

void msi_unwind_forget(void) { atomic_fetch_add_explicit(&generation, 1, memory_order_relaxed); }

static size_t rule_hash(uint64_t ra) { return (size_t)((ra * 0x9e3779b97f4a7c15ull) >> 40); }

static bool rules_grow(msi_unwind_cache *c) {
  size_t cap = (c->rules_mask + 1) * 2;
  rule_slot *t = calloc(cap, sizeof *t);
  if (!t) return false;
  for (size_t i = 0; i <= c->rules_mask; i++) {
    if (!c->rules[i].ra) continue;
    size_t k = rule_hash(c->rules[i].ra) & (cap - 1);
    while (t[k].ra) k = (k + 1) & (cap - 1);
    t[k] = c->rules[i];
  }
  free(c->rules);
  c->rules = t;
  c->rules_mask = cap - 1;
  return true;
}

/* The rule for the frame `ra` returns into: cached, else from ehframe.c. OTHER also when a
 * module was unloaded since the cached rules were found (then they are dropped). */
static msi_unwind_rule rule_for(msi_unwind_cache *c, uint64_t ra) {
  size_t k = rule_hash(ra) & c->rules_mask;
  for (;; k = (k + 1) & c->rules_mask) {
    if (c->rules[k].ra == ra) return c->rules[k].rule;
    if (!c->rules[k].ra) break;
  }
  unsigned long long loads, unloads;
  msi_unwind_rule rule = msi_ehframe_rule(ra, &loads, &unloads);
  if (c->unloads_known && unloads != c->unloads) { /* code may have moved: no rule is sure */
    msi_unwind_forget();
    return (msi_unwind_rule){0, 0, MSI_RULE_OTHER, 0};
  }
  c->unloads = unloads;
  c->unloads_known = true;
  if ((c->nrules + 1) * 2 > c->rules_mask + 1) {
    if (!rules_grow(c)) return rule;
    k = rule_hash(ra) & c->rules_mask;
    while (c->rules[k].ra) k = (k + 1) & c->rules_mask;
  }
  c->rules[k].ra = ra;
  c->rules[k].rule = rule;
  c->nrules++;
  return rule;
}

/* ---- checking a chain against the stack ------------------------------------------------- */

/* A word of this thread's stack read (a chain's: its walk read it, so it stays mapped). */
__attribute__((no_sanitize_address)) static inline bool word_differs(uint64_t at, uint64_t value) {
  return *(const uint64_t *)(uintptr_t)at != value;
}

/* Whether stepping frames j.. of `ch` would read the same words now, given that frame j starts
 * with the same registers (its rbp checked by the caller where F_DEP says it matters): -1 when
 * they would, else the first word that differs (find_chain keeps it in the chain's slot). Words
 * are compared four at a time, so a read may go up to three words past the first difference:
 * all lie in this thread's stack (checked when the chain was walked), which stays mapped, and
 * some may now lie in a frame's redzone: AddressSanitizer is told these reads are the
 * unwinder's. */
__attribute__((no_sanitize_address)) static int words_differ_at(const chain *ch, int j) {
  const uint64_t(*w)[2] = ch->words;
  int k = ch->wstart[j], n = ch->nwords;
  DIAG_ADD(4, n - k);
  for (; k + 4 <= n; k += 4)
    if ((*(const uint64_t *)(uintptr_t)w[k][0] ^ w[k][1]) | (*(const uint64_t *)(uintptr_t)w[k + 1][0] ^ w[k + 1][1]) |
        (*(const uint64_t *)(uintptr_t)w[k + 2][0] ^ w[k + 2][1]) | (*(const uint64_t *)(uintptr_t)w[k + 3][0] ^ w[k + 3][1]))
      break;
  for (; k < n; k++)
    if (word_differs(w[k][0], w[k][1])) return k;
  return -1;
}

/* A chain's key, from its first frame; its slots are tried from SLOT_OF(tag) on. */
static uint64_t chain_tag(uint64_t sp, uint64_t ip, uint64_t entry) {
  return ((sp >> 3) ^ (ip + entry) * 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
}
#define SLOT_OF(tag, p) ((((size_t)((tag) >> 40)) + (size_t)(p)) & (CHAIN_SLOTS - 1))

/* The cached chain that starts with these registers and whose words still hold, or NULL. A
 * chain found is moved to the first slot tried, ahead of chains from the same frame that no
 * longer hold (a function called from another place at the same depth). Many chains may start
 * alike (one allocation site reached from many ops): a slot's tag and the word that differed
 * when its chain last failed turn most of them away without reading the chain (another cache
 * line or several each, cold when the program did much between two captures). */
static chain *find_chain(msi_unwind_cache *c, uint64_t entry, uint64_t sp, uint64_t ip, uint64_t rbp) {
  uint64_t tag = chain_tag(sp, ip, entry);
  for (int p = 0; p < PROBES; p++) {
    struct chain_slot *s = &c->slots[SLOT_OF(tag, p)];
    chain *ch = s->ch;
    if (!ch || s->tag != tag || (s->miss_at && word_differs(s->miss_at, s->miss_value))) continue;
    if (ch->sp[0] != sp || ch->pc[0] != ip || ch->entry != entry) continue;
    if ((ch->flags[0] & F_DEP) && ch->rbp_in[0] != rbp) continue;
    DIAG(0);
    int miss = words_differ_at(ch, 0);
    if (miss >= 0) {
      s->miss_at = ch->words[miss][0];
      s->miss_value = ch->words[miss][1];
      continue;
    }
    DIAG(1);
    struct chain_slot *first = &c->slots[SLOT_OF(tag, 0)];
    if (p && (!first->ch || first->tag == tag)) { /* another frame's chain stays in its own slots */
      struct chain_slot t = *first;
      *first = *s;
      *s = t;
    }
    return ch;
  }
  return NULL;
}

/* ---- walking ---------------------------------------------------------------------------- */

static bool on_stack(const msi_unwind_cache *c, uint64_t addr) {
  return addr >= c->stack_lo && addr <= c->stack_hi - 8;
}

/* Walks the stack from frame 0's registers into c's arrays, ending on the previous capture's
 * chain where it can. Returns false when libunwind must do it (c's arrays are then not a stack). */
static bool walk(msi_unwind_cache *c, uint64_t sp, uint64_t ip, uint64_t rbp) {
  chain *prev = c->last;
  int j = 0, n = 1, nstep = 0, end = END_LIMIT, taken = -1;
  c->sp[0] = sp;
  c->pc[0] = ip;
  c->rbp_in[0] = rbp;
  if (!on_stack(c, sp)) return false;
  while (n < MAX_RAW) {
    int i = n - 1;
    if (prev) { /* the previous capture's frame with this stack pointer, if any */
      while (j < prev->n && prev->sp[j] < sp) j++;
      if (j < prev->n && prev->sp[j] == sp) {
        if (prev->pc[j] == ip && prev->end != END_LIMIT && !prev->cut && i + (prev->n - j) < MAX_RAW &&
            (!(prev->flags[j] & F_DEP) || prev->rbp_in[j] == rbp) && words_differ_at(prev, j) < 0) {
          int tail = prev->n - j, copied = prev->nstep - j + 1; /* prev's frames j.. become i.. */
          memcpy(&c->sp[i], &prev->sp[j], sizeof c->sp[0] * (size_t)copied);
          memcpy(&c->pc[i], &prev->pc[j], sizeof c->pc[0] * (size_t)copied);
          memcpy(&c->rbp_in[i], &prev->rbp_in[j], sizeof c->rbp_in[0] * (size_t)copied);
          memcpy(&c->rbp_addr[i], &prev->rbp_addr[j], sizeof c->rbp_addr[0] * (size_t)copied);
          memcpy(&c->flags[i], &prev->flags[j], (size_t)copied);
          for (int t = 0; t < tail; t++) c->node[i + t] = j + t >= prev->lib_end ? prev->node[j + t] : 0;
          n = i + tail;
          nstep = i + prev->nstep - j;
          end = prev->end;
          taken = i;
          DIAG(3);
          break;
        }
        prev = NULL; /* this frame differs: nothing further out can be the previous one's */
      }
    }
    msi_unwind_rule rule = rule_for(c, ip);
    if (rule.kind == MSI_RULE_LAST) {
      end = END_LAST;
      break;
    }
    if (rule.kind != MSI_RULE_STEP) return false;
    uint64_t cfa = ((rule.flags & MSI_RULE_CFA_RBP) ? rbp : sp) + (uint64_t)(int64_t)rule.cfa_offset;
    if (!on_stack(c, cfa - 8)) return false;
    uint64_t ra = *(const volatile uint64_t *)(uintptr_t)(cfa - 8), rbp_addr = 0;
    if (rule.flags & MSI_RULE_RBP_SAVED) {
      rbp_addr = cfa + (uint64_t)(int64_t)rule.rbp_offset;
      if (!on_stack(c, rbp_addr)) return false;
      rbp = *(const volatile uint64_t *)(uintptr_t)rbp_addr;
    }
    if (ra == ip && cfa == sp) return false; /* libunwind calls it a bad frame and starts over */
    DIAG(2);
    c->flags[i] = rule.flags;
    c->rbp_addr[i] = rbp_addr;
    c->node[i] = 0;
    nstep++;
    sp = cfa;
    ip = ra;
    c->sp[n] = sp;
    c->pc[n] = ra;
    c->rbp_in[n] = rbp;
    if (ra < 0x4000) { /* unw_backtrace stops without it */
      end = END_BADRA;
      break;
    }
    n++;
  }
  /* Which rbp values matter, from the outermost new step in: a frame taken from the previous
   * chain brings its flags, the end of the stack reads no rbp. */
  int first_old = taken >= 0 ? taken : nstep;
  bool dep = taken >= 0 && (c->flags[taken] & F_DEP);
  if (taken < 0) {
    c->node[n - 1] = 0;
    if (nstep < n) c->flags[n - 1] = 0; /* the outermost frame was not stepped */
  }
  for (int i = first_old - 1; i >= 0; i--) {
    uint8_t f = c->flags[i] & (F_CFA_RBP | F_SAVED);
    if ((f & F_SAVED) && dep) f |= F_RBPW;
    dep = (f & F_CFA_RBP) || (!(f & F_SAVED) && dep);
    if (dep) f |= F_DEP;
    c->flags[i] = f;
  }
  c->n = n;
  c->nstep = nstep;
  c->end = end;
  c->lib_end = leading_self(c->pc, n);
  return true;
}

/* Keeps the capture in c's arrays as a chain (its nodes set by stacks.c). */
void msi_unwind_keep(msi_unwind_cache *c, bool cut) {
  if (!c || !c->pending) return;
  c->pending = false;
  size_t len = (size_t)c->nstep + 1, nwords = 0;
  for (int i = 0; i < c->nstep; i++) nwords += 1 + !!(c->flags[i] & F_RBPW);
  size_t bytes = sizeof(chain) + len * (4 * sizeof(uint64_t) + sizeof(uint32_t) + sizeof(uint16_t) + 1) +
                 nwords * 2 * sizeof(uint64_t) + 8;
  if (c->bytes + bytes > CHAIN_BYTES) drop_chains(c);
  chain *ch = malloc(bytes);
  if (!ch) return;
  ch->entry = c->entry;
  ch->n = (uint16_t)c->n;
  ch->nstep = (uint16_t)c->nstep;
  ch->lib_end = (uint16_t)c->lib_end;
  ch->nwords = (uint16_t)nwords;
  ch->end = (uint8_t)c->end;
  ch->cut = cut;
  ch->bytes = bytes;
  ch->words = (uint64_t(*)[2])(ch + 1);
  ch->sp = (uint64_t *)(ch->words + nwords);
  ch->pc = ch->sp + len;
  ch->rbp_in = ch->pc + len;
  ch->rbp_addr = ch->rbp_in + len;
  ch->node = (uint32_t *)(ch->rbp_addr + len);
  ch->wstart = (uint16_t *)(ch->node + len);
  ch->flags = (uint8_t *)(ch->wstart + len);
  memcpy(ch->sp, c->sp, sizeof *ch->sp * len);
  memcpy(ch->pc, c->pc, sizeof *ch->pc * len);
  memcpy(ch->rbp_in, c->rbp_in, sizeof *ch->rbp_in * len);
  memcpy(ch->rbp_addr, c->rbp_addr, sizeof *ch->rbp_addr * len);
  memcpy(ch->node, c->node, sizeof *ch->node * len);
  memcpy(ch->flags, c->flags, len);
  size_t k = 0;
  for (int i = 0; i < c->nstep; i++) { /* in the walk's order */
    ch->wstart[i] = (uint16_t)k;
    ch->words[k][0] = c->sp[i + 1] - 8;
    ch->words[k++][1] = c->pc[i + 1];
    if (c->flags[i] & F_RBPW) {
      ch->words[k][0] = c->rbp_addr[i];
      ch->words[k++][1] = c->rbp_in[i + 1];
    }
  }
  ch->wstart[c->nstep] = (uint16_t)k;
  uint64_t tag = chain_tag(ch->sp[0], ch->pc[0], c->entry);
  size_t slot = SIZE_MAX;
  for (int p = 0; p < PROBES && slot == SIZE_MAX; p++)
    if (!c->slots[SLOT_OF(tag, p)].ch) slot = SLOT_OF(tag, p);
  if (slot == SIZE_MAX) { /* all taken: one of them goes, in turn */
    slot = SLOT_OF(tag, c->victim++ % PROBES);
    chain *old = c->slots[slot].ch;
    if (old == c->last) c->last = NULL;
    c->bytes -= old->bytes;
    free(old);
  }
  c->slots[slot] = (struct chain_slot){ch, tag, 0, 0};
  c->bytes += bytes;
  c->last = ch;
}

/* Frame 0's registers: msi_unwind_here(out) stores the return address into its caller (the
 * caller's pc), the caller's stack pointer once it returns, and rbp (callee-saved, so the
 * caller's). */
typedef struct regs {
  uint64_t ip, sp, rbp;
} regs;
void msi_unwind_here(regs *out);
#if defined(__x86_64__)
__asm__(".text\n"
        ".p2align 4\n"
        ".globl msi_unwind_here\n"
        ".hidden msi_unwind_here\n"
        ".type msi_unwind_here, @function\n"
        "msi_unwind_here:\n"
        ".cfi_startproc\n"
        "  endbr64\n"
        "  movq (%rsp), %rax\n"
        "  movq %rax, (%rdi)\n"
        "  leaq 8(%rsp), %rax\n"
        "  movq %rax, 8(%rdi)\n"
        "  movq %rbp, 16(%rdi)\n"
        "  ret\n"
        ".cfi_endproc\n"
        ".size msi_unwind_here, .-msi_unwind_here\n");
#else
void msi_unwind_here(regs *out) { memset(out, 0, sizeof *out); }
#endif

#ifdef __SANITIZE_THREAD__
/* libunwind frees its per-thread cache in a thread-exit destructor that locks a mutex after
 * ThreadSanitizer has retired the thread, which crashes TSan (make sanitize): under TSan,
 * glibc's backtrace() (libgcc's unwinder) gives the same frames, more slowly. */
#include <execinfo.h>
#define unw_backtrace backtrace
#endif

/* The capture when no cached chain holds: a walk from frame 0's registers, or libunwind from
 * frame 0 (c NULL, or a frame the walk cannot step). unw_backtrace called here starts one frame
 * deeper, in this function: that frame is dropped, so that libunwind's frames and the walk's
 * begin with the same frame 0 and stop at the same depth. */
static __attribute__((noinline)) void slow_path(msi_unwind_cache *c, uint64_t entry, const regs *r, uint64_t *raw,
                                                msi_native_stack *out) {
  if (c && walk(c, r->sp, r->ip, r->rbp)) {
    atomic_fetch_add_explicit(&walks, 1, memory_order_relaxed);
    c->pending = true;
    c->entry = entry;
    /* Nodes carried over from the previous capture name suffixes: they serve a stack that is
     * not cut. When they are all there, nothing is left for stacks.c to add: kept now. */
    bool known = c->n - c->lib_end <= MSI_STACK_MAX_NATIVE;
    for (int i = c->lib_end; i < c->n && known; i++) known = c->node[i] != 0;
    if (known) msi_unwind_keep(c, false);
    *out = (msi_native_stack){c->pc, c->node, c->n, c->lib_end, known, false};
    return;
  }
  if (c) atomic_fetch_add_explicit(&fallbacks, 1, memory_order_relaxed);
  int got = unw_backtrace((void **)raw, MAX_RAW + 1) - 1;
  if (got < 0) got = 0;
  *out = (msi_native_stack){raw + 1, NULL, got, leading_self(raw + 1, got), false, false};
  __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays where it is */
}

/* noinline: frame 0 of every capture, the walk's and libunwind's (slow_path). */
__attribute__((noinline)) void msi_unwind_stack(msi_unwind_cache *c, uint64_t entry, uint64_t *raw, msi_native_stack *out) {
  regs r;
  msi_unwind_here(&r);
  if (MSI_LIKELY(c != NULL)) {
    if (MSI_UNLIKELY(c->generation != atomic_load_explicit(&generation, memory_order_relaxed))) {
      drop_all(c);
      c->generation = atomic_load_explicit(&generation, memory_order_relaxed);
    }
    c->pending = false;
    chain *ch = find_chain(c, entry, r.sp, r.ip, r.rbp);
    if (MSI_LIKELY(ch != NULL)) {
      c->last = ch;
      *out = (msi_native_stack){ch->pc, ch->node, ch->n, ch->lib_end, true, ch->cut};
      return;
    }
  }
  slow_path(c, entry, &r, raw, out);
  __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays frame 0 */
}

void msi_unwind_counts(unsigned long long *walked, unsigned long long *fell_back) {
  *walked = atomic_load_explicit(&walks, memory_order_relaxed);
  *fell_back = atomic_load_explicit(&fallbacks, memory_order_relaxed);
}
