/* test_pickle.c SNAPSHOT_DIR: the strict unpickler (analyzer/pytorch/pickle_read.c) and the importer
 * (analyzer/pytorch/import.c) in process, on the real PyTorch snapshots of SNAPSHOT_DIR and on every
 * truncation and many random corruptions of them: each must end in 0 or an error message that
 * names an offset, never a crash (run it under ASan/UBSan with EXTRA_CFLAGS to check memory).
 * ITER sets the number of random corruptions (default 1000); SEED their seed. */
#include <stdint.h>
#include <zlib.h>

#include "pytorch/pickle.h"
#include "pytorch/pytorch.h"
#include "testhelper.h"

/* The uncompressed bytes of a gzip (or plain) file; NULL if unreadable. */
static unsigned char *slurp(const char *path, size_t *len) {
  gzFile f = gzopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 20, n = 0;
  unsigned char *b = malloc(cap);
  int k;
  while (b && (k = gzread(f, b + n, (unsigned)(cap - n))) > 0) {
    n += (size_t)k;
    if (n == cap) {
      unsigned char *g = realloc(b, cap *= 2);
      if (!g) free(b);
      b = g;
    }
  }
  gzclose(f);
  *len = n;
  return b;
}

static uint64_t rng_state;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "tests/data";
  char path[4096], err[600];
  size_t clen = 0, rlen = 0;
  snprintf(path, sizeof path, "%s/cycle_oom.pickle.gz", dir);
  unsigned char *cycle = slurp(path, &clen);
  snprintf(path, sizeof path, "%s/resnet50_leak.pickle.gz", dir);
  unsigned char *resnet = slurp(path, &rlen);
  CHECK("the real snapshots are readable", cycle && resnet && clen > 10000 && rlen > 1000000);
  if (!cycle || !resnet) TEST_DONE();

  ms_import_result r;
  CHECK("import from memory: cycle_oom", ms_import_buffer(cycle, clen, ":memory:", &r) == 0 && r.entries == 63 &&
                                             r.segments == 31 && r.blocks == 31);
  CHECK("import from memory: resnet50_leak", ms_import_buffer(resnet, rlen, ":memory:", &r) == 0 && r.entries == 10052 &&
                                                 r.segments == 109 && r.blocks == 724);
  CHECK("parse only: both", pk_parse_buffer(cycle, clen, NULL, err, sizeof err) == 0 &&
                                pk_parse_buffer(resnet, rlen, NULL, err, sizeof err) == 0);

  /* Every truncation of cycle_oom, parsed; every 37th imported. */
  int bad_parse = 0, bad_import = 0;
  for (size_t cut = 0; cut < clen; cut++) {
    if (pk_parse_buffer(cycle, cut, NULL, err, sizeof err) == 0 || (cut && !strstr(err, "offset"))) bad_parse++;
    if (cut % 37 == 0 && (ms_import_buffer(cycle, cut, ":memory:", &r) == 0 || !strstr(r.error, "offset"))) bad_import++;
  }
  CHECK("every truncation of cycle_oom (18314 of them): an error naming the offset", bad_parse == 0 && bad_import == 0);
  bad_parse = 0;
  for (size_t k = 0; k < 40; k++) {
    size_t cut = rlen * k / 40;
    if (ms_import_buffer(resnet, cut, ":memory:", &r) == 0 || !strstr(r.error, "offset")) bad_parse++;
  }
  CHECK("40 truncations of resnet50_leak: an error naming the offset", bad_parse == 0);

  /* Random corruption: a few bytes changed, inserted or dropped; answers 0 or -1, never a crash. */
  long iter = getenv("ITER") ? atol(getenv("ITER")) : 1000;
  rng_state = getenv("SEED") ? strtoull(getenv("SEED"), NULL, 10) : 6;
  if (!rng_state) rng_state = 6;
  unsigned char *b = malloc(clen + 64);
  int ok = 0, errors = 0;
  for (long i = 0; b && i < iter; i++) {
    size_t n = clen;
    memcpy(b, cycle, clen);
    for (int k = 0, edits = 1 + (int)(rng() % 6); k < edits; k++) {
      size_t at = 2 + rng() % (n - 2);
      switch (rng() % 4) {
        case 0: b[at] = (unsigned char)rng(); break;
        case 1: b[at] ^= (unsigned char)(1u << (rng() % 8)); break;
        case 2: memmove(b + at, b + at + 1, n - at - 1), n--; break;
        default:
          memmove(b + at + 1, b + at, n - at);
          b[at] = "(.Nh]}eu\x94\x8c\x95\x8a\x8bXjqr"[rng() % 17];
          n++;
      }
    }
    int rc = ms_import_buffer(b, n, ":memory:", &r);
    if (rc == 0) ok++;
    else if (r.error[0]) errors++;
  }
  printf("  %ld corruptions: %d imported, %d refused with a message\n", iter, ok, errors);
  CHECK("random corruptions: each imported or refused with a message", ok + errors == iter);
  free(b);

  /* Limits hold on their own: a tiny memory limit refuses the real snapshot cleanly. */
  pk_limits small = pk_default_limits;
  small.max_memory = 64 << 10;
  CHECK("a memory limit is an error, not an allocation", pk_parse_buffer(resnet, rlen, &small, err, sizeof err) != 0 &&
                                                              strstr(err, "memory limit"));
  small = pk_default_limits;
  small.max_memo = 100;
  CHECK("a memo limit is an error", pk_parse_buffer(cycle, clen, &small, err, sizeof err) != 0 && strstr(err, "memo entries"));
  free(cycle);
  free(resnet);
  TEST_DONE();
}
