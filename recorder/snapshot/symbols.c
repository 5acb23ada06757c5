/* symbols.c: function names of program counters, from the ELF symbol tables of loaded modules.
 *
 * dladdr() knows only exported (dynamic) symbols, so it names a static function after the
 * nearest exported one before it. This reads each module's .symtab (static and global
 * functions) or, when the file was stripped, its .dynsym, once per module per snapshot, and
 * finds the function whose [start, start + size) holds the address. Used only when writing a
 * snapshot (symbolize.c), never while allocating.
 *
 * msi_symbols_open() lists the loaded modules, msi_symbols_resolve() names a batch of pcs (one
 * pass over each module's symbol table, nothing sorted but the pcs), msi_symbols_close() frees.
 * msi_symbols_lines_start() and _finish() add file and line to native frames of modules with DWARF line tables,
 * through binutils' addr2line when it is installed (one run per module, `addr2line -a -f -i`, all
 * modules' runs at once, started before the snapshot's tables are written and read after),
 * and the functions the compiler inlined at each pc, each with its own file and line; without
 * it, or without debug information, frames keep their names only.
 * Every field of every file read is untrusted: offsets and sizes are checked against the file.
 */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#include "internal.h"

typedef struct module {
  char *path;
  uint64_t lo, hi;   /* executable address range */
  uint64_t bias;     /* load bias: run-time address - file address */
  void *map;         /* the file, mapped read-only */
  size_t map_len;
  bool loaded;
  bool has_lines; /* the file has DWARF line tables (.debug_line) */
} module;

struct msi_symbols {
  module *mods;
  size_t nmods, cap;
};

static int collect(const char *path, uint64_t lo, uint64_t hi, uint64_t bias, void *arg) {
  return msi_symbols_add(arg, path, lo, hi, bias) != 0;
}

msi_symbols *msi_symbols_open(void) {
  msi_symbols *s = calloc(1, sizeof *s);
  if (s) msi_modules_each(collect, s);
  return s;
}

msi_symbols *msi_symbols_new(void) { return calloc(1, sizeof(msi_symbols)); }

int msi_symbols_add(msi_symbols *s, const char *path, uint64_t lo, uint64_t hi, uint64_t bias) {
  if (s->nmods == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 32;
    module *g = realloc(s->mods, sizeof *g * cap);
    if (!g) return -1;
    s->mods = g;
    s->cap = cap;
  }
  module *m = &s->mods[s->nmods];
  memset(m, 0, sizeof *m);
  if (!(m->path = strdup(path))) return -1;
  m->lo = lo;
  m->hi = hi;
  m->bias = bias;
  s->nmods++;
  return 0;
}

void msi_symbols_close(msi_symbols *s) {
  if (!s) return;
  for (size_t i = 0; i < s->nmods; i++) {
    free(s->mods[i].path);
    if (s->mods[i].map) munmap(s->mods[i].map, s->mods[i].map_len);
  }
  free(s->mods);
  free(s);
}

/* The pcs of one module being resolved: sorted by pc, with the best symbol found so far. */
typedef struct want {
  uint64_t pc;
  size_t index; /* into the caller's arrays */
} want;

static int cmp_want(const void *a, const void *b) {
  const want *x = a, *y = b;
  return x->pc < y->pc ? -1 : x->pc > y->pc;
}

/* Scans one symbol table section once: each function symbol gives its name to the pcs it holds
 * whose best symbol so far starts lower (the innermost of nested ranges). No table is built or
 * sorted: a module's symbols are read once per dump, in the order the file has them. */
static void scan_table(module *m, const ElfW(Ehdr) *eh, const ElfW(Shdr) *sh, const ElfW(Shdr) *shdrs, const want *w,
                       size_t nw, msi_resolved *out) {
  const char *base = m->map;
  if (sh->sh_link >= eh->e_shnum || sh->sh_entsize != sizeof(ElfW(Sym))) return;
  const ElfW(Shdr) *str = &shdrs[sh->sh_link];
  if (sh->sh_offset > m->map_len || sh->sh_size > m->map_len - sh->sh_offset || str->sh_offset > m->map_len ||
      str->sh_size > m->map_len - str->sh_offset)
    return;
  size_t n = sh->sh_size / sizeof(ElfW(Sym));
  const ElfW(Sym) *syms = (const void *)(base + sh->sh_offset);
  for (size_t i = 0; i < n; i++) {
    if (ELF64_ST_TYPE(syms[i].st_info) != STT_FUNC || syms[i].st_value == 0 || syms[i].st_name >= str->sh_size)
      continue;
    uint64_t start = m->bias + syms[i].st_value, size = syms[i].st_size ? syms[i].st_size : 1;
    if (start > w[nw - 1].pc || start + size <= w[0].pc) continue;
    size_t lo = 0, hi = nw; /* the first pc at or after start */
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (w[mid].pc < start) lo = mid + 1;
      else hi = mid;
    }
    if (lo == nw || w[lo].pc - start >= size) continue;
    const char *name = base + str->sh_offset + syms[i].st_name;
    if (!memchr(name, '\0', str->sh_size - syms[i].st_name)) continue; /* unterminated */
    for (size_t k = lo; k < nw && w[k].pc - start < size; k++) {
      msi_resolved *r = &out[w[k].index];
      if (!r->name || start > r->start) {
        r->name = name;
        r->start = start;
        r->offset = w[k].pc - start;
      }
    }
  }
}

/* Maps a module's file and notes whether it has DWARF line tables. */
static void load(module *m) {
  m->loaded = true;
  int fd = open(m->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* never block on a FIFO */
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof(ElfW(Ehdr))) {
    m->map_len = (size_t)st.st_size;
    m->map = mmap(NULL, m->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->map == MAP_FAILED) m->map = NULL;
  }
  close(fd);
  if (!m->map) return;
  const ElfW(Ehdr) *eh = m->map;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff > m->map_len ||
      (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > m->map_len - eh->e_shoff) {
    munmap(m->map, m->map_len);
    m->map = NULL;
    return;
  }
  const ElfW(Shdr) *shdrs = (const void *)((const char *)m->map + eh->e_shoff);
  if (eh->e_shstrndx < eh->e_shnum) {
    const ElfW(Shdr) *names = &shdrs[eh->e_shstrndx];
    if (names->sh_offset <= m->map_len && names->sh_size <= m->map_len - names->sh_offset)
      for (int i = 0; i < eh->e_shnum; i++)
        if (shdrs[i].sh_name + sizeof ".debug_line" <= names->sh_size &&
            memcmp((const char *)m->map + names->sh_offset + shdrs[i].sh_name, ".debug_line", sizeof ".debug_line") == 0)
          m->has_lines = true;
  }
}

int msi_symbols_resolve(msi_symbols *s, const uint64_t *pcs, size_t n, msi_resolved *out) {
  memset(out, 0, sizeof *out * n);
  if (!s || n == 0) return 0;
  want *w = malloc(sizeof *w * n);
  if (!w) return -1;
  for (size_t mi = 0; mi < s->nmods; mi++) {
    module *m = &s->mods[mi];
    size_t nw = 0;
    for (size_t i = 0; i < n; i++)
      if (pcs[i] >= m->lo && pcs[i] < m->hi && !out[i].path) w[nw++] = (want){pcs[i], i};
    if (nw == 0) continue;
    for (size_t k = 0; k < nw; k++) {
      out[w[k].index].path = m->path;
      out[w[k].index].offset = w[k].pc - m->bias;
    }
    if (!m->loaded) load(m);
    if (!m->map) continue;
    qsort(w, nw, sizeof *w, cmp_want);
    const ElfW(Ehdr) *eh = m->map;
    const ElfW(Shdr) *shdrs = (const void *)((const char *)m->map + eh->e_shoff);
    bool have_symtab = false;
    for (int i = 0; i < eh->e_shnum; i++) have_symtab |= shdrs[i].sh_type == SHT_SYMTAB;
    for (int i = 0; i < eh->e_shnum; i++)
      if (shdrs[i].sh_type == (have_symtab ? SHT_SYMTAB : SHT_DYNSYM)) scan_table(m, eh, &shdrs[i], shdrs, w, nw, out);
  }
  free(w);
  return 0;
}

/* ---- file and line, from DWARF through binutils' addr2line ------------------------------ */

#define MAX_LINES_MODULE ((size_t)512 << 20) /* larger files take addr2line too long at a dump */

/* Runs `addr2line -a -f -i -e path` on the addresses written to in_fd; returns its stdout, or
 * NULL. */
static FILE *run_addr2line(const char *path, int in_fd, pid_t *pid) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return NULL; /* other children must not hold the write end */
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  char *argv[] = {"addr2line", "-a", "-f", "-i", "-e", (char *)path, NULL};
  int rc = posix_spawnp(pid, "addr2line", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return NULL;
  }
  FILE *f = fdopen(out[0], "r");
  if (!f) {
    close(out[0]);
    waitpid(*pid, NULL, 0);
  }
  return f;
}

/* addr2line -a starts each address's answer with the address as "0x" and 16 hex digits. */
static bool is_address_line(const char *line) {
  if (strncmp(line, "0x", 2) != 0 || strlen(line) != 18) return false;
  for (int i = 2; i < 18; i++)
    if (!strchr("0123456789abcdef", line[i])) return false;
  return true;
}

/* "file:line" or "file:line (discriminator N)": the file (a new string, NULL when unknown or out
 * of memory) and the line (0 when unknown). */
static char *parse_location(char *text, int64_t *line) {
  *line = 0;
  char *disc = strstr(text, " (discriminator");
  if (disc) *disc = '\0';
  char *colon = strrchr(text, ':');
  if (!colon || text[0] == '?') return NULL;
  *colon = '\0';
  long number = strtol(colon + 1, NULL, 10);
  if (number <= 0) return NULL;
  *line = number;
  return strdup(text);
}

#define MAX_INLINE_DEPTH 64 /* functions inlined at one pc that are kept (the innermost ones) */

/* One function of an address's answer: a name and where. */
typedef struct location {
  char *name, *file;
  int64_t line;
} location;

static void free_locations(location *l, size_t n) {
  for (size_t i = 0; i < n; i++) free(l[i].name), free(l[i].file);
}

/* Reads one address's answer after its address line: the functions inlined there, innermost
 * first, then the function that holds the pc, into l[MAX_INLINE_DEPTH + 1] (the last one always
 * the holder). Leaves the next address line (or "" at the end) in `line`. Returns how many. */
static size_t read_answer(FILE *out, char *line, size_t len, location *l) {
  size_t n = 0;
  char where[4096];
  while (fgets(line, (int)len, out)) {
    line[strcspn(line, "\n")] = '\0';
    if (is_address_line(line)) return n;
    if (!fgets(where, sizeof where, out)) break;
    where[strcspn(where, "\n")] = '\0';
    if (n == MAX_INLINE_DEPTH + 1) { /* too deep: the holder replaces the outermost kept */
      free_locations(&l[--n], 1);
    }
    l[n].name = strcmp(line, "??") ? strdup(line) : NULL;
    l[n].file = parse_location(where, &l[n].line);
    n++;
  }
  line[0] = '\0';
  return n;
}

/* One addr2line run under way: its module, process and output. */
typedef struct lines_run {
  module *m;
  pid_t pid;
  FILE *out;
} lines_run;

struct msi_lines {
  lines_run *runs;
  size_t nruns;
};

static bool frame_in(const msi_frame *f, const module *m) { return !f->python && f->pc - 1 >= m->lo && f->pc - 1 < m->hi; }

msi_lines *msi_symbols_lines_start(msi_symbols *s, const msi_frame *frames, size_t n, const bool *wanted) {
  msi_lines *L = s ? calloc(1, sizeof *L) : NULL;
  if (!L || !(L->runs = calloc(s->nmods ? s->nmods : 1, sizeof *L->runs))) {
    free(L);
    return NULL;
  }
  for (size_t mi = 0; mi < s->nmods; mi++) {
    module *m = &s->mods[mi];
    if (!m->loaded || !m->has_lines || m->map_len > MAX_LINES_MODULE) continue;
    char tmpl[] = "/tmp/memsnap-addr-XXXXXX";
    int fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd < 0) break;
    unlink(tmpl);
    FILE *in = fdopen(fd, "w+");
    if (!in) {
      close(fd);
      break;
    }
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
      if (wanted[i] && frame_in(&frames[i], m)) {
        fprintf(in, "%llx\n", (unsigned long long)(frames[i].pc - 1 - m->bias));
        count++;
      }
    fflush(in);
    if (count == 0 || lseek(fd, 0, SEEK_SET) != 0) {
      fclose(in);
      continue;
    }
    lines_run *r = &L->runs[L->nruns];
    r->out = run_addr2line(m->path, fd, &r->pid);
    fclose(in);
    if (!r->out) break; /* no addr2line: names only */
    r->m = m;
    L->nruns++;
  }
  return L;
}

size_t msi_symbols_lines_finish(msi_lines *L, msi_frame *frames, size_t n, const bool *wanted, msi_inline **inl) {
  size_t ninl = 0, cap = 0;
  *inl = NULL;
  if (!L) return 0;
  for (size_t ri = 0; ri < L->nruns; ri++) {
    lines_run *r = &L->runs[ri];
    const module *m = r->m;
    char line[4096], expect[32];
    location l[MAX_INLINE_DEPTH + 1];
    if (!fgets(line, sizeof line, r->out)) line[0] = '\0';
    line[strcspn(line, "\n")] = '\0';
    for (size_t i = 0; i < n; i++) {
      if (!wanted[i] || !frame_in(&frames[i], m)) continue;
      snprintf(expect, sizeof expect, "0x%016llx", (unsigned long long)(frames[i].pc - 1 - m->bias));
      if (strcmp(line, expect) != 0) break; /* out of step with what was asked: stop here */
      size_t k = read_answer(r->out, line, sizeof line, l);
      if (k && l[k - 1].file) { /* the function holding the pc: the frame's own file and line */
        free(frames[i].file);
        frames[i].file = l[k - 1].file;
        frames[i].line = l[k - 1].line;
        l[k - 1].file = NULL;
      }
      for (size_t j = 0; j + 1 < k; j++) { /* the functions inlined there, innermost first */
        if (!l[j].name) continue;
        if (ninl == cap) {
          size_t c = cap ? cap * 2 : 64;
          msi_inline *g = realloc(*inl, sizeof *g * c);
          if (!g) break;
          *inl = g;
          cap = c;
        }
        (*inl)[ninl++] = (msi_inline){i, l[j].name, l[j].file, l[j].line};
        l[j].name = l[j].file = NULL;
      }
      free_locations(l, k);
    }
  }
  msi_symbols_lines_cancel(L);
  return ninl;
}

void msi_symbols_lines_cancel(msi_lines *L) {
  if (!L) return;
  for (size_t ri = 0; ri < L->nruns; ri++) {
    fclose(L->runs[ri].out); /* a run not read to its end stops on the closed pipe */
    waitpid(L->runs[ri].pid, NULL, 0);
  }
  free(L->runs);
  free(L);
}
