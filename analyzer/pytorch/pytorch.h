/* pytorch.h: PyTorch's memory snapshots (the pickles of torch.cuda.memory._dump_snapshot), in
 * and out (prefix ms_): import.c reads one into a memsnap snapshot, export.c writes a snapshot as
 * one (docs/pytorch-snapshots.md). The pickles are read and written by pickle_read.c and
 * pickle_write.c (pickle.h), the importer's files share importer.h. This folder and read/ are
 * the only ones that run SQL.
 */
#ifndef MEMSNAP_PYTORCH_H
#define MEMSNAP_PYTORCH_H

#include "read/read.h"
#include "util/util.h"

/* ---- PyTorch snapshots in (import.c) --------------------------------------------------- */

typedef struct ms_import_result {
  int64_t entries, segments, blocks; /* what was imported */
  int64_t skipped;                   /* trace entries whose action memsnap has no kind for */
  char skipped_action[64];           /* the first of those actions */
  int64_t unmatched_ends;            /* annotation ENDs without a START */
  char error[700];
} ms_import_result;

/* Imports the PyTorch snapshot pickle at in_path (gzip-compressed or not) into a new snapshot
 * file db_path, with progress on stderr if show_progress. Returns 0, or -1 with res->error
 * ("'in_path': offset N: ..."); on failure db_path may hold a partial file for the caller to
 * remove. */
int ms_import_file(const char *in_path, const char *db_path, bool show_progress, ms_import_result *res);
/* The same for a pickle held in memory (the fuzzing entry point); db_path may be ":memory:". */
int ms_import_buffer(const unsigned char *data, size_t len, const char *db_path, ms_import_result *res);
/* Imports the PyTorch snapshot pickle `in` into the snapshot `out` (ms_import_file), atomically
 * (util/outfile.c) and never over the input, printing warnings, and with show_progress the
 * progress and a line saying what was imported. device_totals[0..ndevices) (may be NULL with
 * ndevices 0): each device's memory, which the pickle does not hold (memsnap run reads it from
 * torch; the replay's capacity), 0 where unknown. 0, or 1 (message printed). */
int ms_import_to(const char *in, const char *out, bool show_progress, const int64_t *device_totals, int ndevices);

/* ---- memsnap snapshots out (export.c) ------------------------------------------------- */

/* Writes the snapshot `in` as a PyTorch snapshot pickle `out` (gzip-compressed when it ends in
 * .gz), atomically and never over the input. 0, or 1 with the message printed. */
int ms_export_to(const char *in, const char *out);

#endif
