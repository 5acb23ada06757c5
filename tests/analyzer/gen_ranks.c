/* gen_ranks.c DIR N EXTRA [M]: the snapshots of one job of N ranks, for the table of ranks
 * (`memsnap analyze rank*.db`; tests/analyzer/test_ranks.sh), on the simulated device: each rank a
 * process of its own (forked, RANK set as torchrun sets it) writing DIR/rankK.db. Every rank
 * loads 32 MiB of weights, then runs 8 steps marked "step K", each allocating and freeing 8 MiB
 * of activations and keeping 64 KiB (keep_metrics: every rank's slow growth); rank EXTRA (-1:
 * none) also keeps 4 MiB a step (keep_extra: the leak that makes it stand out). With M, each
 * step also allocates and frees M 4 KiB temporaries (histories of any length, for the table's
 * speed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memsnap.h"
#include "sites.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

SITE(load_weights)
SITE(activation)
SITE(keep_metrics)
SITE(keep_extra)

static int one_rank(const char *dir, int rank, int extra, long temporaries) {
  char value[16], path[1024];
  snprintf(value, sizeof value, "%d", rank);
  setenv("RANK", value, 1);
  memsnap_record_start((size_t)(temporaries * 16 + 1024), NULL); /* room for every event */
  load_weights(32 * MiB);
  for (int step = 0; step < 8; step++) {
    char label[32];
    snprintf(label, sizeof label, "step %d", step + 1);
    memsnap_mark(label);
    void *a = activation(8 * MiB);
    keep_metrics(64 * KiB);
    if (rank == extra) keep_extra(4 * MiB);
    for (long t = 0; t < temporaries; t++) memsnap_free(activation(4 * KiB), 0, 0, NULL);
    memsnap_free(a, 0, 0, NULL);
  }
  snprintf(path, sizeof path, "%s/rank%d.db", dir, rank);
  if (memsnap_dump(path) != MEMSNAP_OK) {
    fprintf(stderr, "gen_ranks: %s\n", memsnap_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: gen_ranks DIR N EXTRA_RANK [TEMPORARIES_PER_STEP]\n");
    return 2;
  }
  int n = atoi(argv[2]), extra = atoi(argv[3]), rc = 0;
  long temporaries = argc == 5 ? atol(argv[4]) : 0;
  setenv("MEMSNAP_BACKEND", "sim", 1);
  setenv("MEMSNAP_STACKS", "native", 1);
  setenv("MEMSNAP_SIM_CAPACITY", "1G", 1);
  for (int rank = 0; rank < n; rank++) {
    pid_t pid = fork();
    if (pid == 0) _exit(one_rank(argv[1], rank, extra, temporaries));
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
