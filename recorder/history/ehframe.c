/* ehframe.c: how to step out of a native frame, read from the .eh_frame of the module holding it.
 *
 * unwind.c walks the stack with one rule per return address, found here once and then cached.
 * The rule is the DWARF call frame information the compiler wrote for every function (the
 * .eh_frame section, which exception handling needs and every module keeps), found through the
 * module's PT_GNU_EH_FRAME header and its sorted table of functions, and run up to the address.
 * Only the frames libunwind's fast trace (unw_backtrace, x86-64 Gtrace.c) calls "standard" become
 * a step here, stepped the way it steps them:
 *   CFA = rsp or rbp + offset; the return address at CFA - 8; rbp unchanged or saved at
 *   CFA + offset; the caller's rsp is the CFA;
 * and its end of the stack (an undefined return address or rbp, as glibc's _start and thread
 * start mark it) becomes MSI_RULE_LAST. Anything else is MSI_RULE_OTHER: a signal frame, a CFA
 * computed by an expression (stack realignment), a register kept by an expression or in
 * another register, an address no module's table covers. For those unwind.c asks libunwind for
 * the whole stack, so every stack is the one unw_backtrace gives.
 *
 * x86-64 only (DWARF registers: 6 rbp, 7 rsp, 16 the return address); elsewhere every rule is
 * MSI_RULE_OTHER. Runs on a capture's slow path (a return address not seen before): it calls
 * dl_iterate_phdr, which takes the loader's lock, and never allocates.
 */
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#if defined(__x86_64__)

enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16, NREGS = 17, MAX_REMEMBER = 16 };
enum { W_SAME, W_UNDEF, W_CFAREL, W_REG, W_EXPR }; /* where a register's value is */

typedef struct cfi_state {
  int cfa_reg;        /* -1: the CFA is an expression */
  int64_t cfa_offset;
  uint8_t where[NREGS];
  int64_t offset[NREGS]; /* W_CFAREL: saved at CFA + offset */
} cfi_state;

typedef struct cie {
  const uint8_t *insns, *end; /* initial instructions */
  uint64_t code_align;
  int64_t data_align;
  uint8_t fde_enc;
  bool has_aug_data, signal;
} cie;

/* A cursor over the section's bytes; `bad` once it reads past `end` or meets what it cannot
 * decode. */
typedef struct reader {
  const uint8_t *p, *end;
  bool bad;
} reader;

static uint64_t read_bytes(reader *r, int n) {
  if (r->bad || r->end - r->p < n) {
    r->bad = true;
    return 0;
  }
  uint64_t v = 0;
  memcpy(&v, r->p, (size_t)n); /* little endian */
  r->p += n;
  return v;
}

static uint64_t read_uleb(reader *r) {
  uint64_t v = 0;
  for (int shift = 0; !r->bad; shift += 7) {
    if (r->p >= r->end || shift > 63) break;
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  r->bad = true;
  return 0;
}

static int64_t read_sleb(reader *r) {
  uint64_t v = 0;
  int shift = 0;
  uint8_t b = 0x80;
  while (!r->bad && (b & 0x80)) {
    if (r->p >= r->end || shift > 63) {
      r->bad = true;
      return 0;
    }
    b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
  }
  if (shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
  return (int64_t)v;
}

/* A pointer in DW_EH_PE encoding `enc`: absolute or relative to where it is stored (the two
 * forms compilers write in .eh_frame); anything else marks the reader bad. */
static uint64_t read_encoded(reader *r, uint8_t enc) {
  if (enc == 0xff) return 0; /* DW_EH_PE_omit */
  uint64_t at = (uint64_t)(uintptr_t)r->p, v;
  switch (enc & 0x0f) {
    case 0x00: v = read_bytes(r, 8); break;                      /* absptr */
    case 0x01: v = read_uleb(r); break;                          /* uleb128 */
    case 0x02: v = read_bytes(r, 2); break;                      /* udata2 */
    case 0x03: v = read_bytes(r, 4); break;                      /* udata4 */
    case 0x04: v = read_bytes(r, 8); break;                      /* udata8 */
    case 0x09: v = (uint64_t)read_sleb(r); break;                /* sleb128 */
    case 0x0a: v = (uint64_t)(int64_t)(int16_t)read_bytes(r, 2); break; /* sdata2 */
    case 0x0b: v = (uint64_t)(int64_t)(int32_t)read_bytes(r, 4); break; /* sdata4 */
    case 0x0c: v = read_bytes(r, 8); break;                      /* sdata8 */
    default: r->bad = true; return 0;
  }
  switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += at; break; /* pcrel */
    default: r->bad = true;
  }
  if (enc & 0x80) r->bad = true; /* indirect: only personality routines use it, and they are skipped */
  return v;
}

/* The length of a CIE or FDE at r->p, leaving r->p after the length field; 0 on error. */
static uint64_t read_length(reader *r) {
  uint64_t len = read_bytes(r, 4);
  if (len == 0xffffffffu) len = read_bytes(r, 8);
  if (r->bad || len == 0 || len > (uint64_t)(r->end - r->p)) {
    r->bad = true;
    return 0;
  }
  return len;
}

static bool parse_cie(const uint8_t *at, const uint8_t *section_end, cie *c) {
  reader r = {at, section_end, false};
  uint64_t len = read_length(&r);
  if (r.bad) return false;
  r.end = r.p + len;
  if (read_bytes(&r, 4) != 0) return false; /* a CIE's id is 0 in .eh_frame */
  uint8_t version = (uint8_t)read_bytes(&r, 1);
  if (version != 1 && version != 3) return false;
  const char *aug = (const char *)r.p;
  while (r.p < r.end && *r.p) r.p++;
  if (r.p >= r.end) return false;
  r.p++;
  memset(c, 0, sizeof *c);
  c->code_align = read_uleb(&r);
  c->data_align = read_sleb(&r);
  uint64_t ra = version == 1 ? read_bytes(&r, 1) : read_uleb(&r);
  if (r.bad || ra != REG_RA) return false;
  c->fde_enc = 0; /* absptr unless 'R' says otherwise */
  if (aug[0] == 'z') {
    c->has_aug_data = true;
    uint64_t aug_len = read_uleb(&r);
    if (r.bad || aug_len > (uint64_t)(r.end - r.p)) return false;
    const uint8_t *aug_end = r.p + aug_len;
    reader a = {r.p, aug_end, false};
    for (const char *k = aug + 1; *k && !a.bad; k++) {
      if (*k == 'R') c->fde_enc = (uint8_t)read_bytes(&a, 1);
      else if (*k == 'L') read_bytes(&a, 1);
      else if (*k == 'P') {
        uint8_t enc = (uint8_t)read_bytes(&a, 1);
        read_encoded(&a, (uint8_t)(enc & 0x7f)); /* skipped: its size is what matters */
      } else if (*k == 'S') c->signal = true;
      else break; /* unknown: the rest of the data is skipped by its length */
    }
    if (a.bad) return false;
    r.p = aug_end;
  } else if (aug[0]) {
    return false; /* pre-'z' augmentations ("eh"): not written by current compilers */
  }
  c->insns = r.p;
  c->end = r.end;
  return !r.bad;
}

/* Runs CFA instructions [p, end) from location `loc` while it is at most `target`. */
static bool run_cfa(const cie *c, const uint8_t *p, const uint8_t *end, uint64_t loc, uint64_t target,
                    cfi_state *s, const cfi_state *initial) {
  reader r = {p, end, false};
  cfi_state stack[MAX_REMEMBER];
  int depth = 0;
  while (r.p < r.end && !r.bad && loc <= target) {
    uint8_t op = *r.p++;
    uint64_t reg, v;
    switch (op >> 6) {
      case 1: loc += (uint64_t)(op & 0x3f) * c->code_align; continue; /* advance_loc */
      case 2:                                                         /* offset */
        reg = op & 0x3f;
        v = read_uleb(&r);
        if (reg >= NREGS) return false;
        s->where[reg] = W_CFAREL;
        s->offset[reg] = (int64_t)v * c->data_align;
        continue;
      case 3: /* restore */
        reg = op & 0x3f;
        if (reg >= NREGS || !initial) return false;
        s->where[reg] = initial->where[reg];
        s->offset[reg] = initial->offset[reg];
        continue;
      default: break;
    }
    switch (op) {
      case 0x00: break; /* nop */
      case 0x01: loc = read_encoded(&r, c->fde_enc); break;        /* set_loc */
      case 0x02: loc += read_bytes(&r, 1) * c->code_align; break;   /* advance_loc1 */
      case 0x03: loc += read_bytes(&r, 2) * c->code_align; break;   /* advance_loc2 */
      case 0x04: loc += read_bytes(&r, 4) * c->code_align; break;   /* advance_loc4 */
      case 0x05: case 0x11: case 0x2f:                              /* offset_extended (_sf, GNU negative) */
        reg = read_uleb(&r);
        if (reg >= NREGS) return false;
        s->where[reg] = W_CFAREL;
        s->offset[reg] = op == 0x05   ? (int64_t)read_uleb(&r) * c->data_align
                         : op == 0x11 ? read_sleb(&r) * c->data_align
                                      : -(int64_t)read_uleb(&r) * c->data_align;
        break;
      case 0x06: /* restore_extended */
        reg = read_uleb(&r);
        if (reg >= NREGS || !initial) return false;
        s->where[reg] = initial->where[reg];
        s->offset[reg] = initial->offset[reg];
        break;
      case 0x07: case 0x08: /* undefined, same_value */
        reg = read_uleb(&r);
        if (reg >= NREGS) return false;
        s->where[reg] = op == 0x07 ? W_UNDEF : W_SAME;
        break;
      case 0x09: /* register */
        reg = read_uleb(&r);
        v = read_uleb(&r);
        if (reg >= NREGS || v >= NREGS) return false;
        s->where[reg] = W_REG;
        break;
      case 0x0a: /* remember_state */
        if (depth == MAX_REMEMBER) return false;
        stack[depth++] = *s;
        break;
      case 0x0b: /* restore_state: the whole row, the CFA's rule too */
        if (depth == 0) return false;
        *s = stack[--depth];
        break;
      case 0x0c: /* def_cfa */
        s->cfa_reg = (int)read_uleb(&r);
        s->cfa_offset = (int64_t)read_uleb(&r);
        break;
      case 0x12: /* def_cfa_sf */
        s->cfa_reg = (int)read_uleb(&r);
        s->cfa_offset = read_sleb(&r) * c->data_align;
        break;
      case 0x0d: s->cfa_reg = (int)read_uleb(&r); break;                  /* def_cfa_register */
      case 0x0e: s->cfa_offset = (int64_t)read_uleb(&r); break;           /* def_cfa_offset */
      case 0x13: s->cfa_offset = read_sleb(&r) * c->data_align; break;    /* def_cfa_offset_sf */
      case 0x0f: /* def_cfa_expression */
        v = read_uleb(&r);
        if (v > (uint64_t)(r.end - r.p)) return false;
        r.p += v;
        s->cfa_reg = -1;
        break;
      case 0x10: case 0x16: /* expression, val_expression */
        reg = read_uleb(&r);
        v = read_uleb(&r);
        if (reg >= NREGS || v > (uint64_t)(r.end - r.p)) return false;
        r.p += v;
        s->where[reg] = W_EXPR;
        break;
      case 0x2e: read_uleb(&r); break; /* GNU_args_size */
      default: return false;           /* val_offset, window_save, vendor ops: libunwind's fast trace gives up too */
    }
  }
  return !r.bad && depth <= MAX_REMEMBER;
}

/* The module holding a pc: its eh_frame_hdr, found by dl_iterate_phdr. */
typedef struct lookup {
  uint64_t pc;
  const uint8_t *hdr;
  size_t hdr_size;
  unsigned long long adds, subs;
} lookup;

static int find_module(struct dl_phdr_info *info, size_t size, void *arg) {
  lookup *l = arg;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    l->adds = info->dlpi_adds;
    l->subs = info->dlpi_subs;
  }
  bool holds = false;
  const ElfW(Phdr) *eh = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && l->pc >= info->dlpi_addr + ph->p_vaddr &&
        l->pc < info->dlpi_addr + ph->p_vaddr + ph->p_memsz)
      holds = true;
    else if (ph->p_type == PT_GNU_EH_FRAME)
      eh = ph;
  }
  if (!holds) return 0;
  if (eh) {
    l->hdr = (const uint8_t *)(uintptr_t)(info->dlpi_addr + eh->p_vaddr);
    l->hdr_size = eh->p_memsz;
  }
  return 1;
}

/* The FDE covering pc through the header's binary search table (datarel sdata4 entries, as
 * every linker writes them); NULL when none does. *section_end is a bound for reading it. */
static const uint8_t *find_fde(const lookup *l, const uint8_t **section_end) {
  reader r = {l->hdr, l->hdr + l->hdr_size, false};
  if (read_bytes(&r, 1) != 1) return NULL; /* version */
  uint8_t ptr_enc = (uint8_t)read_bytes(&r, 1), count_enc = (uint8_t)read_bytes(&r, 1),
          table_enc = (uint8_t)read_bytes(&r, 1);
  read_encoded(&r, ptr_enc); /* .eh_frame's start */
  uint64_t count = read_encoded(&r, count_enc);
  if (r.bad || table_enc != 0x3b || count == 0 || count > (uint64_t)(r.end - r.p) / 8) return NULL;
  const uint8_t *table = r.p;
  int64_t key = (int64_t)(l->pc - (uint64_t)(uintptr_t)l->hdr);
  uint64_t lo = 0, hi = count; /* the last entry whose start is at most the pc */
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    int32_t start;
    memcpy(&start, table + 8 * mid, 4);
    if ((int64_t)start <= key) lo = mid;
    else hi = mid;
  }
  int32_t start, fde_off;
  memcpy(&start, table + 8 * lo, 4);
  memcpy(&fde_off, table + 8 * lo + 4, 4);
  if ((int64_t)start > key) return NULL;
  /* The FDE lies in .eh_frame, which the header does not bound: read it up to its own length
   * (checked against a generous bound: no FDE is larger than 16 MiB). */
  const uint8_t *fde = l->hdr + fde_off;
  *section_end = fde + (16u << 20);
  return fde;
}

msi_unwind_rule msi_ehframe_rule(uint64_t ra, unsigned long long *loads, unsigned long long *unloads) {
  msi_unwind_rule rule = {0, 0, MSI_RULE_OTHER, 0};
  lookup l = {ra - 1, NULL, 0, 0, 0}; /* a return address: the call is the byte before it */
  int found = dl_iterate_phdr(find_module, &l);
  *loads = l.adds;
  *unloads = l.subs;
  if (!found || !l.hdr) return rule;
  const uint8_t *section_end = NULL, *fde_at = find_fde(&l, &section_end);
  if (!fde_at) return rule;
  reader r = {fde_at, section_end, false};
  uint64_t len = read_length(&r);
  if (r.bad) return rule;
  r.end = r.p + len;
  const uint8_t *id_at = r.p;
  uint32_t cie_off = (uint32_t)read_bytes(&r, 4);
  if (r.bad || cie_off == 0) return rule;
  cie c;
  if (!parse_cie(id_at - cie_off, section_end, &c) || c.signal) return rule;
  uint64_t pc_begin = read_encoded(&r, c.fde_enc);
  uint64_t pc_range = read_encoded(&r, (uint8_t)(c.fde_enc & 0x0f));
  if (r.bad || l.pc < pc_begin || l.pc - pc_begin >= pc_range) return rule;
  if (c.has_aug_data) {
    uint64_t n = read_uleb(&r);
    if (r.bad || n > (uint64_t)(r.end - r.p)) return rule;
    r.p += n;
  }
  cfi_state s, initial;
  memset(&s, 0, sizeof s); /* every register W_SAME, as libunwind starts */
  s.cfa_reg = REG_RSP;
  if (!run_cfa(&c, c.insns, c.end, 0, UINT64_MAX, &s, NULL)) return rule;
  initial = s;
  if (!run_cfa(&c, r.p, r.end, pc_begin, l.pc, &s, &initial)) return rule;

  if (s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP) return rule;
  if (s.cfa_offset <= -(1 << 28) || s.cfa_offset >= (1 << 28)) return rule;
  for (int i = 0; i < NREGS; i++)
    if (s.where[i] == W_EXPR) return rule;
  rule.flags = s.cfa_reg == REG_RBP ? MSI_RULE_CFA_RBP : 0;
  rule.cfa_offset = (int32_t)s.cfa_offset;
  if (s.where[REG_RA] == W_UNDEF || s.where[REG_RBP] == W_UNDEF) { /* the end of the stack */
    rule.kind = MSI_RULE_LAST;
    return rule;
  }
  if (s.where[REG_RA] != W_CFAREL || s.offset[REG_RA] != -8) return rule;
  uint8_t w = s.where[REG_RBP];
  if (w == W_CFAREL) {
    if (s.offset[REG_RBP] <= -(1 << 14) || s.offset[REG_RBP] >= (1 << 14) || s.offset[REG_RBP] == -1) return rule;
    rule.flags |= MSI_RULE_RBP_SAVED;
    rule.rbp_offset = (int16_t)s.offset[REG_RBP];
  } else if (w != W_SAME) {
    return rule;
  }
  w = s.where[REG_RSP];
  if (w == W_CFAREL) {
    if (s.offset[REG_RSP] <= -(1 << 14) || s.offset[REG_RSP] >= (1 << 14) || s.offset[REG_RSP] == -1) return rule;
  } else if (w != W_SAME) {
    return rule;
  }
  rule.kind = MSI_RULE_STEP;
  return rule;
}

#else /* not x86-64: every frame goes to libunwind */

msi_unwind_rule msi_ehframe_rule(uint64_t ra, unsigned long long *loads, unsigned long long *unloads) {
  (void)ra;
  *loads = *unloads = 0;
  return (msi_unwind_rule){0, 0, MSI_RULE_OTHER, 0};
}

#endif
