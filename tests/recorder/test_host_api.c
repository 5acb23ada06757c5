/* test_host_api.c: what a host allocator needs (memsnap.h's section for recorder/pytorch/), on the
 * simulated device: the cache turned off, the segment of a block, CUDA IPC in PyTorch's handle
 * format (classic and expandable segments, a handle received from another process, refused in the
 * async mode), free-memory callbacks, a private pool's checkpoint restored, the segments copied as
 * structs, a trace observer, allocator settings changed at run time, and the 1 EB refusal. Each
 * with memsnap_check() after it.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "allochelper.h"
#include "dbhelper.h"

static const char *dir = "/tmp";

static char *db_path(const char *name) {
  static char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

/* ---- the cache turned off ------------------------------------------------------------------- */

static void test_uncached(void) {
  fresh("MEMSNAP_RECORD=1");
  void *cached = alloc(3 * MiB);
  memsnap_set_caching(0);
  CHECK("uncached: the switch reads back", memsnap_caching() == 0);
  memsnap_stats_t before = stats();
  void *a = alloc(3 * MiB), *b = alloc(1000);
  memsnap_stats_t after = stats();
  CHECK("uncached: each request is a device allocation outside the statistics (as PyTorch's)",
        a && b && a != b && after.allocation[MEMSNAP_POOL_ALL].current == before.allocation[MEMSNAP_POOL_ALL].current &&
            after.requested_bytes[MEMSNAP_POOL_ALL].allocated == before.requested_bytes[MEMSNAP_POOL_ALL].allocated &&
            after.num_device_alloc == before.num_device_alloc);
  CHECK("uncached: recorded as segments of pool external whose source is uncached",
        memsnap_dump(db_path("uncached.db")) == MEMSNAP_OK &&
            query(db_path("uncached.db"), "SELECT count(*) FROM segments WHERE pool = 'external' AND source = 'uncached'") == 2);
  release(cached); /* made before the switch: freed as it was made */
  CHECK("uncached: a block cached before the switch goes back to the cache",
        stats().allocation[MEMSNAP_POOL_ALL].current == 0 && stats().segment[MEMSNAP_POOL_ALL].current == 1);
  memsnap_set_caching(1);
  release(a); /* made uncached: freed to the device after switching back */
  CHECK("uncached: a block made uncached is freed to the device after the switch back",
        memsnap_release(b) == MEMSNAP_OK && memsnap_release(b) == MEMSNAP_EINVAL);
  CHECK("uncached: invariants", check_ok());
  fresh("PYTORCH_NO_CUDA_MEMORY_CACHING=1");
  memsnap_set_caching(1);
  CHECK("uncached: PYTORCH_NO_CUDA_MEMORY_CACHING=1 keeps the cache off, as PyTorch's variable", memsnap_caching() == 0);
  fresh("PYTORCH_NO_CUDA_MEMORY_CACHING=0");
  CHECK("uncached: PYTORCH_NO_CUDA_MEMORY_CACHING=0 leaves it on (PyTorch's check_env)", memsnap_caching() == 1);

  /* PyTorch's cudaMallocAsync backend has no cache to turn off: enable(false) and the variable
   * do nothing there, and its tensors stay in the statistics. */
  fresh("MEMSNAP_ALLOCATOR=async");
  memsnap_set_caching(0);
  int64_t allocated = stats().allocated_bytes[MEMSNAP_POOL_ALL].current;
  void *c = alloc(3 * MiB);
  CHECK("uncached, async mode: the switch does nothing, as with PyTorch's cudaMallocAsync backend",
        memsnap_caching() == 1 && stats().allocated_bytes[MEMSNAP_POOL_ALL].current == allocated + (int64_t)(3 * MiB));
  release(c);
  memsnap_set_caching(1);
  fresh("MEMSNAP_ALLOCATOR=async;PYTORCH_NO_CUDA_MEMORY_CACHING=1");
  c = alloc(1000);
  CHECK("uncached, async mode: so does PYTORCH_NO_CUDA_MEMORY_CACHING=1",
        memsnap_caching() == 1 && stats().allocated_bytes[MEMSNAP_POOL_ALL].current > 0);
  release(c);
  CHECK("uncached, async mode: invariants", check_ok());
}

static void test_exabyte(void) {
  fresh("");
  void *p = (void *)1;
  int64_t ooms = stats().num_ooms;
  CHECK("1 EB: refused at once with PyTorch's message, no out-of-memory counted",
        memsnap_alloc(&p, (size_t)1 << 60, 0, S1) == MEMSNAP_ENOMEM && !p &&
            strstr(memsnap_last_error(), "Tried to allocate more than 1EB memory") && stats().num_ooms == ooms);
}

/* ---- the segment of a block ----------------------------------------------------------------- */

static void test_block_base(void) {
  fresh("");
  void *a = alloc(1000), *b = alloc(1000), *base = NULL;
  size_t size = 0;
  CHECK("base: a block's segment starts at the first block, 2 MiB long",
        memsnap_block_base(b, &base, &size) == MEMSNAP_OK && base == a && size == 2 * MiB);
  CHECK("base: a pointer memsnap did not allocate is refused",
        memsnap_block_base((char *)b + 512, &base, &size) == MEMSNAP_EINVAL && strstr(memsnap_last_error(), "invalid"));
  release(a);
  release(b);
  fresh("MEMSNAP_EXPANDABLE_SEGMENTS=1");
  a = alloc(30 * MiB);
  CHECK("base: refused for expandable segments, with PyTorch's message",
        memsnap_block_base(a, &base, &size) == MEMSNAP_EINVAL && strstr(memsnap_last_error(), "expandable_segments:False"));
  release(a);
}

/* ---- CUDA IPC ------------------------------------------------------------------------------- */

static void test_ipc_classic(void) {
  fresh("MEMSNAP_RECORD=1");
  void *first = alloc(1000), *b = alloc(4000);
  char *h = NULL;
  size_t len = 0, offset = 0;
  CHECK("ipc: a classic block's handle is PyTorch's: version 2, 'c', a 64-byte cudaIpcMemHandle_t",
        memsnap_ipc_share(b, &h, &len, &offset) == MEMSNAP_OK && len == 66 && h[0] == 2 && h[1] == 'c');
  CHECK("ipc: the offset is the block's from its segment's start", offset == addr(b) - addr(first));
  void *base = NULL, *again = NULL;
  CHECK("ipc: the handle opens (the receiver's side)", memsnap_ipc_open(h, len, 0, &base) == MEMSNAP_OK && base);
  CHECK("ipc: opened again, the same mapping", memsnap_ipc_open(h, len, 0, &again) == MEMSNAP_OK && again == base);
  void *legacy = NULL;
  CHECK("ipc: an older PyTorch's raw 64-byte handle opens the same segment",
        memsnap_ipc_open(h + 2, 64, 0, &legacy) == MEMSNAP_OK && legacy);
  CHECK("ipc: the snapshot shows the block sent and the segments received",
        memsnap_dump(db_path("ipc.db")) == MEMSNAP_OK && count_events(db_path("ipc.db"), "ipc_share") == 1 &&
            query(db_path("ipc.db"), "SELECT count(*) FROM segments WHERE source = 'cuda_ipc'") == 2 &&
            query(db_path("ipc.db"), "SELECT size FROM segments WHERE source = 'cuda_ipc' LIMIT 1") == (int64_t)(2 * MiB));
  CHECK("ipc: each open is matched by a close; the last unmaps",
        memsnap_ipc_close(base) == MEMSNAP_OK && memsnap_ipc_close(again) == MEMSNAP_OK &&
            memsnap_ipc_close(base) == MEMSNAP_EINVAL && memsnap_ipc_close(legacy) == MEMSNAP_OK);
  char bad[3] = {3, 'c', 0};
  void *p = NULL;
  CHECK("ipc: a handle of a newer version, an unknown type or a short payload is refused",
        memsnap_ipc_open(bad, 3, 0, &p) == MEMSNAP_EINVAL && strstr(memsnap_last_error(), "newer") &&
            memsnap_ipc_open((char[]){2, 'x', 0}, 3, 0, &p) == MEMSNAP_EINVAL &&
            memsnap_ipc_open((char[]){2, 'c', 0}, 3, 0, &p) == MEMSNAP_EINVAL);
  CHECK("ipc: sharing a pointer memsnap did not allocate is refused",
        memsnap_ipc_share((char *)b + 512, &h, &len, &offset) == MEMSNAP_EINVAL);
  free(h);
  release(first);
  release(b);
  CHECK("ipc: invariants", check_ok());
}

/* Reads the 'e' handle's header: pid, page size, page count. */
static void expandable_header(const char *h, int32_t *pid, uint64_t *page, uint64_t *n) {
  memcpy(pid, h + 2, 4);
  memcpy(page, h + 10, 8);
  memcpy(n, h + 18, 8);
}

static void test_ipc_expandable(void) {
  fresh("MEMSNAP_EXPANDABLE_SEGMENTS=1");
  void *a = alloc(30 * MiB), *b = alloc(30 * MiB);
  char *h = NULL;
  size_t len = 0, offset = 0;
  int32_t pid;
  uint64_t page, n;
  CHECK("ipc expandable: the handle is 'e', a header and one descriptor per page under the block",
        memsnap_ipc_share(b, &h, &len, &offset) == MEMSNAP_OK && h[0] == 2 && h[1] == 'e' && len == 2 + 24 + 2 * 4);
  expandable_header(h, &pid, &page, &n);
  int32_t fd0;
  memcpy(&fd0, h + 26, 4);
  CHECK("ipc expandable: this process's pid, 20 MiB pages, two of them, live descriptors",
        pid == getpid() && page == 20 * MiB && n == 2 && fcntl(fd0, F_GETFD) >= 0);
  CHECK("ipc expandable: the offset is from the first page under the block", offset == 10 * MiB);
  void *base = NULL;
  CHECK("ipc expandable: it opens (pidfd_getfd of this process's descriptors), mapped for the device",
        memsnap_ipc_open(h, len, 0, &base) == MEMSNAP_OK && base && memsnap_sim_peer_access(0, base) == 1);
  CHECK("ipc expandable: closed, unmapped", memsnap_ipc_close(base) == MEMSNAP_OK &&
                                                memsnap_sim_peer_access(0, base) == MEMSNAP_EINVAL);
  free(h);
  release(a);
  release(b);
  memsnap_empty_cache();
  CHECK("ipc expandable: the pages' descriptors close with their pages", fcntl(fd0, F_GETFD) < 0);
  CHECK("ipc expandable: invariants", check_ok());
}

/* A child process (the sender) allocates and shares a block; the parent opens its handle, taking
 * the child's descriptors as a receiver does. */
static void test_ipc_other_process(void) {
  fresh("MEMSNAP_EXPANDABLE_SEGMENTS=1");
  int to_parent[2], to_child[2];
  if (pipe(to_parent) || pipe(to_child)) return;
  pid_t child = fork();
  if (child == 0) {
    char *h = NULL;
    size_t len = 0, offset = 0;
    void *p = alloc(5 * MiB);
    if (memsnap_ipc_share(p, &h, &len, &offset) != MEMSNAP_OK) len = 0;
    ssize_t w = write(to_parent[1], &len, sizeof len);
    if (len) w = write(to_parent[1], h, len);
    char done;
    w = read(to_child[0], &done, 1);
    (void)w;
    _exit(0);
  }
  size_t len = 0;
  char h[256];
  bool got = read(to_parent[0], &len, sizeof len) == sizeof len && len > 0 && len <= sizeof h &&
             read(to_parent[0], h, len) == (ssize_t)len;
  void *base = NULL;
  int rc = got ? memsnap_ipc_open(h, len, 0, &base) : -99;
  CHECK("ipc: a handle from another process opens with its descriptors (pidfd_getfd)", rc == MEMSNAP_OK && base);
  if (rc != MEMSNAP_OK) printf("  %s\n", memsnap_last_error());
  if (rc == MEMSNAP_OK) memsnap_ipc_close(base);
  ssize_t w = write(to_child[1], "x", 1);
  (void)w;
  int status;
  waitpid(child, &status, 0);
  close(to_parent[0]);
  close(to_parent[1]);
  close(to_child[0]);
  close(to_child[1]);
}

static void test_ipc_async(void) {
  fresh("MEMSNAP_ALLOCATOR=async");
  void *a = alloc(3 * MiB);
  char *h = NULL;
  size_t len, offset;
  CHECK("ipc async: refused as PyTorch's cudaMallocAsync backend refuses it",
        memsnap_ipc_share(a, &h, &len, &offset) == MEMSNAP_EINVAL && strstr(memsnap_last_error(), "cudaMallocAsync"));
  release(a);
}

/* ---- free-memory callbacks ------------------------------------------------------------------ */

static void *held;
static int callback_calls;

static int free_held(void *arg) {
  (void)arg;
  callback_calls++;
  if (!held) return 0;
  memsnap_free(held, 0, 0, S1); /* through memsnap: no lock of its is held here */
  held = NULL;
  return 1;
}

static void test_free_memory_callbacks(void) {
  fresh("MEMSNAP_SIM_CAPACITY=64M");
  CHECK("callbacks: a NULL one is refused", memsnap_add_free_memory_callback(NULL, NULL) == MEMSNAP_EINVAL);
  CHECK("callbacks: registered", memsnap_add_free_memory_callback(free_held, NULL) == MEMSNAP_OK);
  held = alloc(40 * MiB); /* nothing cached: the callbacks were called, and freed nothing */
  CHECK("callbacks: called when nothing is cached", callback_calls == 1);
  callback_calls = 0;
  int64_t device_allocs = stats().num_device_alloc;
  void *b = alloc(40 * MiB);
  CHECK("callbacks: called when no cached block fits; what they freed serves the request",
        b && callback_calls == 1 && !held && stats().num_device_alloc == device_allocs && stats().num_alloc_retries == 0);
  void *c = alloc(1000);
  CHECK("callbacks: called again when nothing fits; when they free nothing, a new segment serves the request",
        c && callback_calls == 2);
  release(b);
  release(c);
  CHECK("callbacks: invariants", check_ok());
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

static int only_s2(void *ctx, memsnap_stream_t s) {
  (void)ctx;
  return s == S2;
}

static void test_checkpoint(void) {
  fresh("MEMSNAP_RECORD=1");
  memsnap_begin_allocate_to_pool(0, 5, 0, only_s2, NULL);
  void *x = alloc_on(3 * MiB, S2), *y = alloc_on(5 * MiB, S2), *t = alloc_on(2 * MiB, S2);
  memsnap_free(t, 0, 0, S2);
  memsnap_end_allocate_to_pool(0, 5, 0);
  memsnap_pool_state *ck = memsnap_pool_checkpoint(0, 5, 0);
  CHECK("checkpoint: taken", ck != NULL);
  /* replays change nothing; a tensor dies and another path allocates differently */
  memsnap_free(x, 0, 0, S2);
  memsnap_begin_allocate_to_pool(0, 5, 0, only_s2, NULL);
  void *z = alloc_on(7 * MiB, S2);
  memsnap_end_allocate_to_pool(0, 5, 0);
  void **freed = NULL, **allocated = NULL;
  size_t nf = 0, na = 0;
  int64_t allocs = stats().allocation[MEMSNAP_POOL_ALL].current;
  CHECK("checkpoint: restored", memsnap_pool_restore(0, ck, &freed, &nf, &allocated, &na) == MEMSNAP_OK);
  bool freed_yz = nf == 2 && ((freed[0] == y && freed[1] == z) || (freed[0] == z && freed[1] == y));
  bool alloc_xy = na == 2 && allocated[0] == x && allocated[1] == y;
  CHECK("checkpoint: the pool's live blocks freed, the checkpoint's allocated again at their addresses",
        freed_yz && alloc_xy);
  uint64_t live[2] = {addr(x), addr(y)};
  CHECK("checkpoint: the pool's allocations are the checkpoint's",
        memsnap_pool_live_allocations_match(0, 5, 0, live, 2) == 1 && stats().allocation[MEMSNAP_POOL_ALL].current == allocs);
  CHECK("checkpoint: invariants after restoring", check_ok());
  memsnap_segment_info *segs;
  memsnap_block_info *blocks;
  size_t ns, nb;
  CHECK("checkpoint: the segment is split as it was (3, 5 MiB allocated, the rest free)",
        memsnap_copy_segments(0, 5, 0, &segs, &ns, &blocks, &nb) == MEMSNAP_OK && ns == 1 && nb == 3 &&
            blocks[0].size == 3 * MiB && blocks[0].allocated && blocks[1].size == 5 * MiB && blocks[1].allocated &&
            !blocks[2].allocated && segs[0].pool_id[0] == 5 && segs[0].total_size == 20 * MiB);
  free(segs);
  free(blocks);
  free(freed);
  free(allocated);
  CHECK("checkpoint: an unknown pool has none", memsnap_pool_checkpoint(0, 6, 0) == NULL &&
                                                    strstr(memsnap_last_error(), "could not find"));
  memsnap_free(x, 0, 0, S2);
  memsnap_free(y, 0, 0, S2);
  memsnap_release_pool(0, 5, 0); /* both captures' uses */
  memsnap_release_pool(0, 5, 0);
  CHECK("checkpoint: a released pool cannot be restored",
        memsnap_pool_restore(0, ck, &freed, &nf, &allocated, &na) == MEMSNAP_EINVAL && !freed && !allocated);
  memsnap_pool_checkpoint_free(ck);
  memsnap_empty_cache();
  CHECK("checkpoint: invariants at the end, nothing left", check_ok() && stats().reserved_bytes[MEMSNAP_POOL_ALL].current == 0);
}

/* ---- a pool served by another allocator ---------------------------------------------------- */

#define PROVIDED_BASE ((uintptr_t)0x700000000000)
static int provided, given_back, released, refuse_provider;
static uintptr_t provider_next = PROVIDED_BASE;

static int provide(void *ctx, size_t size, int device, memsnap_stream_t stream, void **out) {
  (void)ctx;
  (void)device;
  (void)stream;
  if (refuse_provider) return MEMSNAP_ENOMEM;
  provided++;
  *out = (void *)provider_next;
  provider_next += size;
  return MEMSNAP_OK;
}

static void take_back(void *ctx, void *ptr, size_t size, int device, memsnap_stream_t stream) {
  (void)ctx;
  (void)ptr;
  (void)size;
  (void)device;
  (void)stream;
  given_back++;
}

static void release_provider(void *ctx) { released += ctx == &provided; }

static void test_pool_provider(void) {
  fresh("MEMSNAP_EXPANDABLE_SEGMENTS=1");
  CHECK("provider: set on a new pool", memsnap_create_pool(0, 0, 9) == MEMSNAP_OK &&
                                           memsnap_pool_set_provider(0, 0, 9, provide, take_back, &provided,
                                                                     release_provider) == MEMSNAP_OK);
  int other = 0;
  CHECK("provider: a second one is refused, its context released at once",
        memsnap_pool_set_provider(0, 0, 9, provide, take_back, &other, release_provider) == MEMSNAP_EINVAL &&
            released == 0 && strstr(memsnap_last_error(), "provider already"));
  memsnap_begin_allocate_thread_to_pool(0, 0, 9);
  void *a = alloc(3 * MiB), *b = alloc(1000);
  memsnap_end_allocate_to_pool(0, 0, 9);
  memsnap_release_pool(0, 0, 9);
  void *c = alloc(3 * MiB);
  memsnap_stats_t s = stats();
  CHECK("provider: the pool's segments come from it (classic ones, also with expandable segments on)",
        provided == 2 && addr(a) >= PROVIDED_BASE && addr(b) >= PROVIDED_BASE &&
            !(addr(c) >= PROVIDED_BASE && addr(c) < provider_next) &&
            s.segment[MEMSNAP_POOL_ALL].current == 2 && s.reserved_bytes[MEMSNAP_POOL_ALL].current ==
            (int64_t)(22 * MiB + 20 * MiB));
  CHECK("provider: invariants", check_ok());
  memsnap_release_pool(0, 0, 9); /* the MemPool goes; its blocks still live */
  memsnap_empty_cache();
  CHECK("provider: a released pool keeps what its live blocks hold", given_back == 0 && released == 0);
  release(a);
  release(b);
  release(c);
  memsnap_empty_cache();
  CHECK("provider: once free, its segments go back to it, then its context", given_back == 2 && released == 1);
  memsnap_create_pool(0, 0, 10);
  memsnap_pool_set_provider(0, 0, 10, provide, take_back, &provided, release_provider);
  refuse_provider = 1;
  memsnap_begin_allocate_thread_to_pool(0, 0, 10);
  void *p = (void *)1;
  CHECK("provider: its out of memory is the allocation's",
        memsnap_alloc(&p, 3 * MiB, 0, S1) == MEMSNAP_ENOMEM && !p && stats().num_ooms == 1);
  memsnap_end_allocate_to_pool(0, 0, 10);
  refuse_provider = 0;
  CHECK("provider: invariants at the end", check_ok());
}

static void test_pool_flags(void) {
  fresh("MEMSNAP_SIM_CAPACITY=64M");
  memsnap_create_pool(0, 0, 11);
  CHECK("flags: set on a pool, refused for an unknown one", memsnap_pool_set_flags(0, 0, 11, 1, -1) == MEMSNAP_OK &&
                                                             memsnap_pool_set_flags(0, 0, 12, 1, -1) == MEMSNAP_EINVAL);
  memsnap_begin_allocate_thread_to_pool(0, 0, 11);
  void *in_pool = alloc(40 * MiB);
  memsnap_end_allocate_to_pool(0, 0, 11);
  memsnap_release_pool(0, 0, 11);
  release(in_pool); /* cached in the pool, which is still used (its MemPool lives) */
  void *lent = alloc(40 * MiB);
  CHECK("use_on_oom: out of memory, a request outside any pool takes the pool's cached block",
        lent == in_pool && stats().num_ooms == 0 && stats().num_alloc_retries == 1);
  release(lent);
  memsnap_pool_set_flags(0, 0, 11, 0, -1);
  void *p = (void *)1;
  CHECK("use_on_oom off: the same request is out of memory", memsnap_alloc(&p, 40 * MiB, 0, S1) == MEMSNAP_ENOMEM);
  CHECK("use_on_oom: invariants", check_ok());
  memsnap_create_pool(0, 0, 13);
  memsnap_pool_set_flags(0, 0, 13, -1, 1);
  memsnap_begin_allocate_thread_to_pool(0, 0, 13);
  int64_t before = stats().allocated_bytes[MEMSNAP_POOL_ALL].current;
  void *whole = alloc(1000);
  memsnap_end_allocate_to_pool(0, 0, 13);
  CHECK("no_split: a small request takes its whole 2 MiB segment",
        stats().allocated_bytes[MEMSNAP_POOL_ALL].current - before == (int64_t)(2 * MiB));
  release(whole);
  CHECK("no_split: invariants", check_ok());
}

/* ---- the segments as structs ------------------------------------------------------------------ */

static void test_copy_segments(void) {
  fresh("");
  void *a = alloc(1000), *b = alloc(30 * MiB);
  release(a);
  memsnap_segment_info *segs;
  memsnap_block_info *blocks;
  size_t ns, nb;
  CHECK("segments: every segment of the device, by address, with its blocks",
        memsnap_copy_segments(0, 0, 0, &segs, &ns, &blocks, &nb) == MEMSNAP_OK && ns == 2 && nb == 2 &&
            !segs[0].is_large && segs[1].is_large && segs[0].address < segs[1].address && segs[0].n_blocks == 1 &&
            !blocks[segs[0].first_block].active && blocks[segs[1].first_block].allocated &&
            blocks[segs[1].first_block].requested_size == 30 * MiB && segs[1].stream == S1);
  free(segs);
  free(blocks);
  CHECK("segments: a bad device is refused", memsnap_copy_segments(9, 0, 0, &segs, &ns, &blocks, &nb) == MEMSNAP_EINVAL);
  release(b);
  fresh("MEMSNAP_EXPANDABLE_SEGMENTS=1");
  a = alloc(30 * MiB);
  CHECK("segments: a run of mapped pages is one expandable segment",
        memsnap_copy_segments(0, 0, 0, &segs, &ns, &blocks, &nb) == MEMSNAP_OK && ns == 1 && segs[0].is_expandable &&
            segs[0].total_size == 40 * MiB && nb == 2);
  free(segs);
  free(blocks);
  release(a);
}

/* ---- a trace observer ----------------------------------------------------------------------- */

static int seen[16], nseen;

static void observe(const memsnap_trace_event *e, void *arg) {
  (void)arg;
  if (nseen < 16) seen[nseen++] = e->kind;
}

static void test_trace_observer(void) {
  fresh("");
  CHECK("observer: set", memsnap_set_trace_observer(observe, NULL) == MEMSNAP_OK);
  void *a = alloc(1000);
  release(a);
  int want[] = {MEMSNAP_TRACE_SEGMENT_ALLOC, MEMSNAP_TRACE_ALLOC, MEMSNAP_TRACE_FREE_REQUESTED,
                MEMSNAP_TRACE_FREE_COMPLETED};
  CHECK("observer: sees the allocator's decisions without recording", nseen == 4 && !memcmp(seen, want, sizeof want));
  memsnap_set_caching(0);
  a = alloc(1000);
  release(a);
  memsnap_set_caching(1);
  CHECK("observer: allocations of the cache turned off are not the allocator's: not seen", nseen == 4);
  memsnap_set_trace_observer(NULL, NULL);
  release(alloc(1000));
  CHECK("observer: removed, sees nothing", nseen == 4);
}

/* ---- settings at run time ------------------------------------------------------------------- */

/* What an allocation of `size` adds to allocated_bytes, the cache emptied first (as PyTorch's test). */
static int64_t allocated_by(size_t size) {
  memsnap_empty_cache();
  int64_t before = stats().allocated_bytes[MEMSNAP_POOL_ALL].current;
  void *p = alloc(size);
  int64_t grew = stats().allocated_bytes[MEMSNAP_POOL_ALL].current - before;
  release(p);
  return grew;
}

static void test_settings(void) {
  fresh("");
  size_t n = 84 * MiB; /* PyTorch's test: 21 Mi floats */
  CHECK("settings: roundup_power2_divisions:4 at run time", memsnap_set_allocator_settings("roundup_power2_divisions:4") ==
                                                                 MEMSNAP_OK && allocated_by(n) == (int64_t)(96 * MiB));
  CHECK("settings: other settings put the divisions back to their default (as PyTorch's parser)",
        memsnap_set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40") == MEMSNAP_OK &&
            allocated_by(n) == (int64_t)n && stats().max_split_size == (int64_t)(40 * MiB));
  CHECK("settings: the list syntax",
        memsnap_set_allocator_settings("garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]") ==
                MEMSNAP_OK && allocated_by(n) == (int64_t)(88 * MiB));
  char value[64];
  CHECK("settings: an invalid value is refused and changes nothing",
        memsnap_set_allocator_settings("max_split_size_mb:2") == MEMSNAP_EINVAL &&
            strstr(memsnap_last_error(), "max_split_size_mb:2") && memsnap_get_option("max_split_size_mb", value, sizeof value) ==
            MEMSNAP_OK && !strcmp(value, "unlimited"));
  CHECK("settings: expandable_segments:True for new segments (mapped pages, counted in no segment)",
        memsnap_set_allocator_settings("expandable_segments:True") == MEMSNAP_OK && allocated_by(30 * MiB) &&
            stats().segment[MEMSNAP_POOL_ALL].current == 0 && stats().reserved_bytes[MEMSNAP_POOL_ALL].current > 0);
  CHECK("settings: invariants", check_ok());
}

int main(int argc, char **argv) {
  if (argc > 1) dir = argv[1];
  test_uncached();
  test_exabyte();
  test_block_base();
  test_ipc_classic();
  test_ipc_expandable();
  test_ipc_other_process();
  test_ipc_async();
  test_free_memory_callbacks();
  test_checkpoint();
  test_pool_provider();
  test_pool_flags();
  test_copy_segments();
  test_trace_observer();
  test_settings();
  memsnap_shutdown();
  TEST_DONE();
}
