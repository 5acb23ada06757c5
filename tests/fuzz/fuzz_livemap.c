/* fuzz_livemap.c: libFuzzer target for the readers of a live mapping (recorder/snapshot/recover.c
 * through memsnap_live_info and memsnap_recover: the header's checks, the log's records, the ring's
 * events, the rebuild and the snapshot written), on hostile mapping files: a mapping is a file in
 * a folder, and every byte of it is untrusted (docs/RELIABILITY.md).
 *
 * Random bytes almost never pass the header's magic and version, so most inputs are edits of a
 * real mapping made at start (a recording on the simulated device: allocations and frees with
 * their stacks, marks, a label, the modules and options it logged, read before memsnap_shutdown
 * removes it): the input is a list of 6-byte edits [kind, offset (3 bytes), value (2 bytes)]; kind's
 * low 2 bits: set a byte, set a 32-bit or a 64-bit word to one of the values that break sizes and
 * offsets (0, 1, -1, 2^31, 2^32, 2^63, the file's size...), or cut the file there; kind's bit 0x40
 * counts the offset from the log's start (where its records are), bit 0x80 within the header's
 * page. An input whose first byte is 0xff is instead the whole file, byte for byte. Each is
 * written to a file in a private folder and read as `memsnap top` reads a running process (live:
 * the mapping kept, no DWARF lookups) into a snapshot there.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "history/livemap.h"
#include "memsnap.h"

static unsigned char *seed;
static size_t seed_len;
static char dir[64], path[128] = "", out[128] = "";

/* The mapping of a short recording in this process, read before memsnap_shutdown removes it. */
static void make_seed(void) {
  setenv("MEMSNAP_BACKEND", "sim", 1);
  setenv("MEMSNAP_SIM_CAPACITY", "256M", 1);
  setenv("MEMSNAP_LIVE_DIR", dir, 1);
  setenv("MEMSNAP_LIVE_WATCH", "0", 1);
  if (memsnap_record_start(64, "native") != MEMSNAP_OK) exit(2);
  void *kept[8] = {0};
  for (int i = 0; i < 40; i++) { /* the ring (64 events) wraps */
    if (i % 10 == 0) memsnap_mark("step");
    void *p = memsnap_malloc((ssize_t)(512u << (i % 9)), 0, NULL);
    if (i % 5 == 0 && i / 5 < 8) kept[i / 5] = p;
    else if (p) memsnap_free(p, (ssize_t)(512u << (i % 9)), 0, NULL);
  }
  memsnap_label("fuzz.module");
  char live[128];
  snprintf(live, sizeof live, "%s/memsnap-%d.live", dir, (int)getpid());
  FILE *f = fopen(live, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_livemap: no live mapping was made in %s\n", dir);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  seed_len = (size_t)ftell(f);
  rewind(f);
  /* the file up to the end of what its log holds (the readers take a file of any length): small
     inputs, and not the log's room or the state's slots past it (gigabytes of reserved holes) */
  unsigned char head[MSI_LIVE_HEADER];
  if (seed_len < sizeof head || fread(head, 1, sizeof head, f) != sizeof head) exit(2);
  uint64_t log_offset, log_used;
  memcpy(&log_offset, head + offsetof(msi_live_header, log_offset), sizeof log_offset);
  memcpy(&log_used, head + offsetof(msi_live_header, log_used), sizeof log_used);
  if (log_offset + log_used < seed_len) seed_len = (size_t)(log_offset + log_used);
  rewind(f);
  seed = malloc(seed_len);
  if (!seed || fread(seed, 1, seed_len, f) != seed_len) exit(2);
  fclose(f);
  for (int i = 0; i < 8; i++)
    if (kept[i]) memsnap_free(kept[i], (ssize_t)(512u << (i * 5 % 9)), 0, NULL);
  memsnap_record_stop();
  memsnap_shutdown();
  unsetenv("MEMSNAP_LIVE_DIR");
}

static void remove_dir(void) {
  unlink(path);
  unlink(out);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  snprintf(dir, sizeof dir, "/dev/shm/memsnap-fuzz-live-XXXXXX"); /* tmpfs: no disk, no fsync */
  if (!mkdtemp(dir)) {
    snprintf(dir, sizeof dir, "/tmp/memsnap-fuzz-live-XXXXXX");
    if (!mkdtemp(dir)) exit(2);
  }
  make_seed();
  atexit(remove_dir);
  snprintf(path, sizeof path, "%s/memsnap-1.live", dir);
  snprintf(out, sizeof out, "%s/out.db", dir);
  return 0;
}

static const uint64_t values[] = {0, 1, 7, 8, 63, 64, 4095, 4096, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull,
                                  0x7fffffffffffffffull, 0x8000000000000000ull, 0xffffffffffffffffull};
#define NVALUES (sizeof values / sizeof *values)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *file;
  size_t len;
  if (size && data[0] == 0xff) {
    len = size - 1;
    file = malloc(len ? len : 1);
    if (!file) return 0;
    memcpy(file, data + 1, len);
  } else {
    len = seed_len;
    file = malloc(len);
    if (!file) return 0;
    memcpy(file, seed, len);
    uint64_t log_offset;
    memcpy(&log_offset, seed + offsetof(msi_live_header, log_offset), sizeof log_offset);
    for (size_t i = 0; i + 6 <= size && len; i += 6) {
      unsigned kind = data[i];
      size_t off = (size_t)data[i + 1] | (size_t)data[i + 2] << 8 | (size_t)data[i + 3] << 16;
      unsigned v = data[i + 4] | (unsigned)data[i + 5] << 8;
      if (kind & 0x80) off %= 4096 < len ? 4096 : len;
      else if ((kind & 0x40) && log_offset < len) off = (size_t)log_offset + off % (len - (size_t)log_offset);
      else off %= len;
      uint64_t w = (v >> 8) == 0xff ? (uint64_t)len - (v & 0x7f) : values[v % NVALUES] + (v >> 8 & 1);
      switch (kind & 3) {
        case 0: file[off] = (unsigned char)v; break;
        case 1: if (off + 4 <= len) { uint32_t x = (uint32_t)w; memcpy(file + off, &x, 4); } break;
        case 2: if (off + 8 <= len) memcpy(file + off, &w, 8); break;
        case 3: len = off; break;
      }
    }
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) abort();
  if (write(fd, file, len) != (ssize_t)len) abort();
  close(fd);
  free(file);
  memsnap_live_info_t info;
  memsnap_live_info(path, &info);
  memsnap_recover_options o = {0, -1, 0, 1, 1};
  if (memsnap_recover(path, out, &o, &info) == MEMSNAP_OK) unlink(out);
  return 0;
}
