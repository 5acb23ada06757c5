/* fuzz_pickle.c: a libFuzzer target of `memsnap import` (analyzer/pytorch/import.c and its strict
 * unpickler, analyzer/pytorch/pickle_read.c): any input must end in an import or an error, within the
 * reader's limits, without a crash, a leak or undefined behaviour.
 *
 * `make fuzz` runs it (tests/fuzz/run.sh), seeded with tests/fuzz/corpus/fuzz_pickle and the two
 * real snapshots of tests/data, uncompressed. */
#include <stddef.h>
#include <stdint.h>

#include "pytorch/pytorch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ms_import_result r;
  ms_import_buffer(data, size, ":memory:", &r);
  return 0;
}
