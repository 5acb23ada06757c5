/* livemap.h: the live mapping's layout (a file that outlives the process: its event ring and the
 * names its events need) and the functions that write it (livemap.c) and read it back
 * (recover.c). docs/snapshot-format.md ("The live mapping") is the same layout in prose.
 *
 *   offset 0                 header (MSI_LIVE_HEADER bytes): msi_live_header below
 *   header.ring_offset       the event ring: history.c's ring header, then ring_cap events of 64
 *                            bytes, each published with its sequence number (history.c)
 *   header.runlog_offset     the run log (runlog.h: msi_runlog_region, runlog_bytes of it): the whole
 *                            run by iteration and by second, bounded; 0 in a mapping without one
 *   header.log_offset        the log: records appended once each, when what they name is first
 *                            seen (never per event), published by header.log_used
 *   header.state_offset      the allocator's state, two slots of header.state_reserve bytes each
 *                            (snapshot/livestate.h has their layout), the file holding
 *                            header.state_capacity[k] bytes of slot k
 *
 * A log record is a uint32 type, a uint32 payload length, the payload, padded to 8 bytes:
 *   STACK   uint32 id, uint16 n_native, uint16 n_python, uint64 words[n_native + 2 n_python]
 *   LABEL   uint32 id, text NUL-terminated
 *   PYFRAME uint64 code, uint64 position, int64 line, name NUL, file NUL (a Python frame's names)
 *   MODULE  uint64 lo, uint64 hi, uint64 bias, path NUL (an executable range of a loaded module)
 *   DEVICE  int32 index, uint32 0, uint64 total bytes, name NUL
 *   OPTION  name NUL, value NUL (the options' effective values when the mapping was made)
 * A reader checks the magic, the version and every size and offset first, reads only whole
 * records below log_used, and takes an event only when its sequence number says it was
 * published (a torn last event is dropped).
 */
#ifndef MEMSNAP_LIVEMAP_H
#define MEMSNAP_LIVEMAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MSI_LIVE_MAGIC "MSNPLIVE"
#define MSI_LIVE_VERSION 2 /* 2: the state slots */
#define MSI_LIVE_HEADER 8192

enum { MSI_LOG_STACK = 1, MSI_LOG_LABEL, MSI_LOG_PYFRAME, MSI_LOG_MODULE, MSI_LOG_DEVICE, MSI_LOG_OPTION };

typedef struct msi_live_header {
  char magic[8];               /* MSI_LIVE_MAGIC */
  uint32_t version;            /* MSI_LIVE_VERSION */
  uint32_t header_size;        /* MSI_LIVE_HEADER */
  uint32_t event_size;         /* 64 */
  uint32_t ring_events_offset; /* where the events start inside the ring */
  uint64_t ring_offset, ring_bytes, ring_cap;
  uint64_t log_offset, log_reserve; /* the log may grow to log_reserve bytes */
  _Atomic uint64_t log_capacity;    /* bytes the file holds for the log now */
  _Atomic uint64_t log_used;        /* bytes of whole records */
  int32_t pid, ppid;
  int32_t rank;                     /* -1: none */
  uint32_t stacks;                  /* MSI_STACKS_* */
  uint64_t created_mono_ns, created_unix_ns; /* one instant on both clocks */
  _Atomic uint64_t dump_requests;   /* `memsnap dump` adds one */
  _Atomic uint64_t dumps_done;      /* requests answered */
  _Atomic uint32_t state;           /* MSI_LIVE_RECORDING, or MSI_LIVE_EXITED once removed at exit */
  _Atomic uint32_t watching;        /* 1: a thread answers dump_requests (livemap.c) */
  char backend[16];
  char host[64];
  char program[256];
  char dump_path[1024];             /* MEMSNAP_DUMP when the mapping was made, absolute, its patterns unexpanded ("" none) */
  char last_dump[1024];             /* the snapshot a dump request wrote */
  char command_line[4096];
  /* how the process died, where it could tell: the fatal signal it caught (livemap.c's handler,
     installed only where the signal's action was the default) and when (CLOCK_MONOTONIC); 0 none.
     fatal_watched: bit N set when signal N was watched (0: none, or a mapping older than these) */
  _Atomic int32_t fatal_signal;
  _Atomic uint32_t fatal_watched;
  _Atomic uint64_t fatal_mono_ns;
  /* the run log's region (runlog.h), between the ring and the log; 0 and 0: none */
  uint64_t runlog_offset, runlog_bytes;
  /* the allocator's state (livestate.c), two slots written in turn: slot k at
     state_offset + k * state_reserve, of which the file holds state_capacity[k] bytes */
  uint64_t state_offset, state_reserve;
  _Atomic uint64_t state_capacity[2];
} msi_live_header;
_Static_assert(sizeof(msi_live_header) <= MSI_LIVE_HEADER, "the header fits its page");
enum { MSI_LIVE_RECORDING = 1, MSI_LIVE_EXITED = 2 };

/* ---- writing (livemap.c), in the recorded process --------------------------------------- */

/* A ring of `bytes` (zeroed) inside a new mapping MEMSNAP_LIVE_DIR/memsnap-PID.live, its events
 * starting `events_offset` bytes in; a mapping that already exists is replaced by one with the new
 * ring and the same log (the old one stays mapped: a writer may still hold its ring). NULL when
 * MEMSNAP_LIVE is 0 or the file cannot be made (the caller's ring is then on the heap; the reason
 * is printed once). The ring's memory stays mapped until msi_live_close. *runlog_at: where the run
 * log goes in the new mapping, for the caller to msi_runlog_move once it holds no lock of its own
 * (the run log's lock is taken before the devices' and the history's: runlog.c); NULL with NULL. */
void *msi_live_ring(uint64_t bytes, uint64_t cap, uint32_t events_offset, void **runlog_at);
/* Appends a record (cold paths only: a stack, label, Python frame, module or device seen for the
 * first time); does nothing without a mapping (and takes no lock then). Each takes the log's own
 * lock, the innermost. */
void msi_live_log_stack(uint32_t id, uint16_t n_native, uint16_t n_python, const uint64_t *words);
void msi_live_log_label(uint32_t id, const char *text);
void msi_live_log_pyframe(uint64_t code, uint64_t pos, int64_t line, const char *name, const char *file);
/* Whether (code, pos) still needs a PYFRAME record (false without a mapping, or once written). */
bool msi_live_wants_pyframe(uint64_t code, uint64_t pos);
/* A new native frame's pc: when no module recorded holds it, the loaded modules are listed again
 * (only when the loader loaded one since) and the new ones recorded. */
void msi_live_note_pc(uint64_t pc);
/* A device in use (devices.c, external.c): its name and memory recorded once. */
void msi_live_note_device(int device);
/* State slot k (0 or 1) of the current mapping, the file holding at least `need` bytes of it
 * (grown by doubling, every page backed first: posix_fallocate, a system call, only when the
 * state outgrows its largest size yet); NULL without a mapping or when the file cannot grow. The
 * caller (livestate.c) is the slots' only writer. */
void *msi_live_state_slot(int k, uint64_t need);
/* Removes the file (the process exits normally, or its exit snapshot is written); the memory
 * stays mapped for writers still running. */
void msi_live_unlink(void);
/* Unmaps and removes everything (memsnap_shutdown, after the ring is gone). */
void msi_live_close(void);
/* fork(): the log's lock taken, released; the child forgets the parent's mapping (never writes
 * it) and seeds its own, made when it records, with the parent's log as it was at the fork. */
void msi_live_fork(int phase);
/* The request watcher: `fn` (api.c's dump) runs on a thread of the mapping's when `memsnap dump`
 * asks (header.dump_requests), and returns the snapshot's path or NULL. Registered at load. */
void msi_live_on_request(const char *(*fn)(void));

#endif
