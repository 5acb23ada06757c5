/* ipc.c: sharing blocks with other processes (CUDA IPC), in PyTorch's handle format.
 *
 * A PyTorch process sends a CUDA tensor to another one (torch.multiprocessing, a DataLoader
 * worker) by asking its allocator for a handle of the tensor's block (shareIpcHandle), and the
 * receiver asks its own allocator to map that handle (getIpcDevPtr). So that a receiver running
 * PyTorch's own allocator opens what memsnap sends, and the other way round, the handle is
 * PyTorch's (c10/cuda/CUDACachingAllocator.cpp, handle version 2):
 *
 *     byte 0      version, 2 (a handle of exactly 64 bytes is an older PyTorch's raw 'c' payload)
 *     byte 1      'c': a classic segment          'e': pages of an expandable segment
 *     'c' payload the segment's cudaIpcMemHandle_t (64 bytes)
 *     'e' payload a header {int32 pid, 4 zero bytes, uint64 page size, uint64 page count}, then
 *                 one int32 per page: the sender's POSIX file descriptor of that page
 *
 * with the block's offset from the start of what the handle maps (the segment, or the first page
 * under the block) beside it. A receiver of an 'e' handle takes the descriptors from the sender
 * with pidfd_open + pidfd_getfd (Linux 5.6; the sender must be its descendant or ptrace must
 * allow it), imports each page (cuMemImportFromShareableHandle) and maps them into an address
 * reservation of its own. The sender keeps each page's descriptor while the page stays mapped
 * (expandable.c).
 *
 * The async mode cannot share: its blocks are the driver pool's, which neither format carries
 * (PyTorch's cudaMallocAsync backend refuses too).
 *
 * A process opens a handle once however often it receives it (a segment holds many tensors):
 * open handles are kept by their bytes with a count of users, and the last close unmaps. What is
 * sent is recorded as an ipc_share event; what is received as an external allocation (external.c)
 * whose source is "cuda_ipc", so a snapshot shows both.
 *
 * Locking: msi_ipc_share takes the device lock (it reads the block's segment); open and close
 * take ipc_lock, never a device lock. Below: the backend (the driver's IPC calls), expandable.c
 * (the pages' descriptors) and external.c; api.c calls in.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "history/history.h"
#include "internal.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define HANDLE_VERSION 2
#define TYPE_CLASSIC 'c'
#define TYPE_EXPANDABLE 'e'
#define CUDA_HANDLE_SIZE 64

/* The 'e' header, as PyTorch's ExpandableSegment::ShareHeader lays it out on 64-bit Linux. */
typedef struct share_header {
  int32_t pid;
  uint32_t zero; /* padding, written as zeros (PyTorch zeroes it too: the handle's bytes are a key) */
  uint64_t page_size;
  uint64_t npages;
} share_header;
_Static_assert(sizeof(share_header) == 24, "PyTorch's ShareHeader is 24 bytes");

/* ---- sending ---------------------------------------------------------------------------------- */

/* The handle of classic block b, whose segment starts at its first block. Lock held. */
static int share_classic(msi_device *d, msi_block *b, char **handle, size_t *len, size_t *offset) {
  msi_block *head = b;
  while (head->prev) head = head->prev;
  size_t size = 0;
  for (msi_block *x = head; x; x = x->next) size += x->size;
  char *h = malloc(2 + CUDA_HANDLE_SIZE);
  if (!h) {
    msi_error("device %d: out of host memory sharing a block", d->index);
    return MEMSNAP_ENOMEM;
  }
  h[0] = HANDLE_VERSION;
  h[1] = TYPE_CLASSIC;
  if (msi_be->ipc_get_handle(d->index, head->ptr, size, (unsigned char *)h + 2) != MSI_BE_OK) {
    free(h);
    return MEMSNAP_EBACKEND;
  }
  *handle = h;
  *len = 2 + CUDA_HANDLE_SIZE;
  *offset = b->ptr - head->ptr;
  return MEMSNAP_OK;
}

/* The handle of block b of an expandable segment: its pages' descriptors. Lock held. */
static int share_expandable(msi_device *d, msi_block *b, char **handle, size_t *len, size_t *offset) {
  int *fds;
  size_t n, page;
  uintptr_t first;
  if (msi_expandable_export(d, b, &fds, &n, &first, &page) != MSI_BE_OK) return MEMSNAP_EBACKEND;
  size_t bytes = 2 + sizeof(share_header) + n * sizeof(int32_t);
  char *h = malloc(bytes);
  if (!h) {
    free(fds);
    msi_error("device %d: out of host memory sharing a block", d->index);
    return MEMSNAP_ENOMEM;
  }
  share_header hd = {(int32_t)getpid(), 0, page, n};
  h[0] = HANDLE_VERSION;
  h[1] = TYPE_EXPANDABLE;
  memcpy(h + 2, &hd, sizeof hd);
  for (size_t i = 0; i < n; i++) {
    int32_t fd = fds[i];
    memcpy(h + 2 + sizeof hd + i * sizeof fd, &fd, sizeof fd);
  }
  free(fds);
  *handle = h;
  *len = bytes;
  *offset = b->ptr - first;
  return MEMSNAP_OK;
}

int msi_ipc_share(msi_device *d, void *ptr, char **handle, size_t *len, size_t *offset) {
  pthread_mutex_lock(&d->lock);
  msi_block *b = msi_ptrmap_get(&d->live, (uintptr_t)ptr);
  int rc;
  if (!b) {
    rc = MEMSNAP_EINVAL; /* another device's, or not memsnap's: the caller says which */
  } else if (d->async) {
    msi_error("cudaMallocAsync does not yet support shareIpcHandle: memory of the stream-ordered pool (the async "
              "mode) cannot be shared with another process in PyTorch's handle format");
    rc = MEMSNAP_EINVAL;
  } else {
    rc = b->seg ? share_expandable(d, b, handle, len, offset) : share_classic(d, b, handle, len, offset);
    if (rc == MEMSNAP_OK && msi_ring_recording())
      msi_history_add_unobserved(MSI_EV_IPC_SHARE, d->index, b->stream, b->ptr, b->size, b->requested_size, *offset,
                                 msi_stack_capture_from(0, false));
  }
  pthread_mutex_unlock(&d->lock);
  return rc;
}

/* ---- receiving -------------------------------------------------------------------------------- */

typedef struct opened {
  char *key; /* the handle's bytes */
  size_t key_len;
  int device;
  int users;
  uintptr_t base;  /* what the caller gets */
  size_t size;     /* bytes mapped */
  bool expandable; /* pages in a reservation of ours; else a segment cuIpcOpenMemHandle opened */
  size_t page_size, npages;
  void **pages;    /* expandable: each page's handle, for page_unmap */
  struct opened *next;
} opened;

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static opened *opens;

/* Unmaps what an open mapped (the device synchronized first for pages: unmapping does not wait
 * for the GPU as cuIpcCloseMemHandle does). ipc_lock held. */
static void unmap(opened *o) {
  if (!o->expandable) {
    msi_be->ipc_close(o->device, o->base);
    return;
  }
  msi_be->device_synchronize(o->device);
  for (size_t i = 0; i < o->npages; i++)
    if (o->pages[i]) msi_be->page_unmap(o->device, o->base + i * o->page_size, o->page_size, o->pages[i]);
  msi_be->va_free(o->device, o->base, o->npages * o->page_size);
}

/* Maps the pages an 'e' payload names: their descriptors fetched from the sender. ipc_lock held. */
static int open_expandable(opened *o, const char *payload, size_t len) {
  share_header hd;
  if (len < sizeof hd) goto malformed;
  memcpy(&hd, payload, sizeof hd);
  if (hd.page_size == 0 || hd.npages == 0 || hd.npages > (len - sizeof hd) / sizeof(int32_t) ||
      hd.page_size > ((uint64_t)1 << 40))
    goto malformed;
  if (len - sizeof hd == hd.npages * 64) { /* a newer PyTorch's fabric handles (CUmemFabricHandle), not descriptors */
    msi_error("the IPC handle carries fabric handles (PyTorch's expandable segments on a system with IMEX), which "
              "memsnap does not import: send it from memory allocated with expandable_segments:False, or record "
              "the receiver with memsnap run --mode torch-native");
    return MEMSNAP_EINVAL;
  }
  if (msi_be->vmm_supported(o->device) != 1) return MEMSNAP_EBACKEND;
  o->expandable = true;
  o->page_size = hd.page_size;
  o->pages = calloc(hd.npages, sizeof *o->pages);
  if (!o->pages) {
    msi_error("out of host memory opening an IPC handle");
    return MEMSNAP_ENOMEM;
  }
  int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)hd.pid, 0);
  if (pidfd < 0) {
    msi_error("opening an IPC handle of expandable segments: pidfd_open(%d) failed: %s%s", hd.pid, strerror(errno),
              errno == ENOSYS ? " (the kernel is older than 5.3; send it from memory allocated with "
                                "expandable_segments:False)"
                              : "");
    return MEMSNAP_EBACKEND;
  }
  if (msi_be->va_reserve(o->device, hd.npages * hd.page_size, &o->base) != MSI_BE_OK) {
    close(pidfd);
    return MEMSNAP_EBACKEND;
  }
  int rc = MEMSNAP_OK;
  for (uint64_t i = 0; i < hd.npages && rc == MEMSNAP_OK; i++) {
    int32_t theirs;
    memcpy(&theirs, payload + sizeof hd + i * sizeof theirs, sizeof theirs);
    int mine = (int)syscall(SYS_pidfd_getfd, pidfd, theirs, 0);
    if (mine < 0) {
      msi_error("opening an IPC handle of expandable segments: pidfd_getfd of descriptor %d of process %d failed: "
                "%s%s", theirs, hd.pid, strerror(errno),
                errno == EPERM ? " (ptrace rules forbid it: the receiver may take descriptors of its descendants "
                                 "only unless /proc/sys/kernel/yama/ptrace_scope is 0)"
                               : "");
      rc = MEMSNAP_EBACKEND;
      break;
    }
    if (msi_be->page_map_fd(o->device, o->base + i * hd.page_size, hd.page_size, mine, &o->pages[i]) != MSI_BE_OK)
      rc = MEMSNAP_EBACKEND;
    else
      o->npages = i + 1;
    close(mine); /* the imported handle holds the memory */
  }
  close(pidfd);
  if (rc != MEMSNAP_OK) {
    o->npages = hd.npages; /* the reservation's size; pages[] is NULL past what was mapped */
    unmap(o);
    return rc;
  }
  o->size = hd.npages * hd.page_size;
  return MEMSNAP_OK;
malformed:
  msi_error("malformed IPC handle of expandable segments (%zu bytes)", len);
  return MEMSNAP_EINVAL;
}

int msi_ipc_open(const char *handle, size_t len, int device, void **base, void *caller) {
  const char *payload;
  size_t payload_len;
  char type;
  if (len == CUDA_HANDLE_SIZE) { /* an older PyTorch's raw cudaIpcMemHandle_t */
    type = TYPE_CLASSIC;
    payload = handle;
    payload_len = len;
  } else if (len >= 2 && handle[0] >= 1 && handle[0] <= HANDLE_VERSION) {
    type = handle[1];
    payload = handle + 2;
    payload_len = len - 2;
  } else {
    msi_error("malformed IPC handle (%zu bytes%s)", len,
              len >= 1 && handle[0] > HANDLE_VERSION ? ", from a newer PyTorch than memsnap knows" : "");
    return MEMSNAP_EINVAL;
  }
  if (type != TYPE_CLASSIC && type != TYPE_EXPANDABLE) {
    msi_error("malformed IPC handle: unknown type %#x", (unsigned)(unsigned char)type);
    return MEMSNAP_EINVAL;
  }
  pthread_mutex_lock(&ipc_lock);
  for (opened *o = opens; o; o = o->next)
    if (o->key_len == len && o->device == device && memcmp(o->key, handle, len) == 0) {
      o->users++;
      *base = (void *)o->base;
      pthread_mutex_unlock(&ipc_lock);
      return MEMSNAP_OK;
    }
  int rc = MEMSNAP_OK;
  opened *o = calloc(1, sizeof *o);
  char *key = o ? malloc(len) : NULL;
  if (!key) {
    free(o);
    msi_error("out of host memory opening an IPC handle");
    rc = MEMSNAP_ENOMEM;
    goto out;
  }
  memcpy(key, handle, len);
  *o = (opened){.key = key, .key_len = len, .device = device, .users = 1};
  if (type == TYPE_CLASSIC) {
    if (payload_len != CUDA_HANDLE_SIZE) {
      msi_error("malformed IPC handle: %zu bytes of cudaIpcMemHandle_t", payload_len);
      rc = MEMSNAP_EINVAL;
    } else if (msi_be->ipc_open(device, (const unsigned char *)payload, &o->base, &o->size) != MSI_BE_OK) {
      rc = MEMSNAP_EBACKEND;
    }
  } else {
    rc = open_expandable(o, payload, payload_len);
  }
  if (rc != MEMSNAP_OK) {
    free(o->pages);
    free(key);
    free(o);
    goto out;
  }
  o->next = opens;
  opens = o;
  *base = (void *)o->base;
  memsnap_external_alloc((void *)o->base, o->size, device, NULL, "cuda_ipc", caller);
out:
  pthread_mutex_unlock(&ipc_lock);
  return rc;
}

int msi_ipc_close(void *base) {
  pthread_mutex_lock(&ipc_lock);
  opened **link = &opens;
  while (*link && (*link)->base != (uintptr_t)base) link = &(*link)->next;
  opened *o = *link;
  if (!o) {
    pthread_mutex_unlock(&ipc_lock);
    msi_error("memsnap_ipc_close of %p, which no memsnap_ipc_open returned", base);
    return MEMSNAP_EINVAL;
  }
  if (--o->users == 0) {
    *link = o->next;
    memsnap_external_free(base, 0, NULL, NULL);
    unmap(o);
    free(o->pages);
    free(o->key);
    free(o);
  }
  pthread_mutex_unlock(&ipc_lock);
  return MEMSNAP_OK;
}

void msi_ipc_reset(void) {
  pthread_mutex_lock(&ipc_lock);
  while (opens) {
    opened *o = opens;
    opens = o->next;
    unmap(o);
    free(o->pages);
    free(o->key);
    free(o);
  }
  pthread_mutex_unlock(&ipc_lock);
}
