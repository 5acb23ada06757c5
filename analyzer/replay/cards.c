/* cards.c: the simulated device's memory as users give it: a size as written on a command line
 * ("40G", "80GiB", "24000M", bytes) or a card by name ("H100", "A100-40GB", "rtx 4090").
 *
 * A card's memory is what CUDA gives PyTorch on it (torch.cuda.get_device_properties().total_memory,
 * which PyTorch's out-of-memory message prints as "a total capacity of N GiB"): less than the
 * memory on the box, as the driver keeps some. The H100's figure was measured on this
 * repository's GPU runs (tests/gpu/results/run15-replay.jsonl); the others are the capacities
 * PyTorch's message prints on those cards, to 0.01 GiB, rounded to MiB: drivers and ECC settings
 * move them by a few MiB. The simulated card gives all of it to the allocator; a real one keeps
 * some for the CUDA context (docs/replay.md says how to leave that margin).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

#define MIB(n) ((uint64_t)(n) << 20)

static const struct {
  const char *name;       /* as listed */
  const char *spellings;  /* accepted names, lowercase without separators, space-separated */
  uint64_t bytes;
} cards[] = {
    {"H100", "h100 h10080gb h100sxm h100hbm3 h10080gbhbm3", 85017493504ull},
    {"H200", "h200 h200141gb h200sxm", MIB(143165)},
    {"A100-80GB", "a10080gb a100sxm480gb a100pcie80gb", MIB(81050)},
    {"A100-40GB", "a100 a10040gb a100sxm440gb a100pcie40gb", MIB(40540)},
    {"A10G", "a10g a10", MIB(22733)},
    {"V100-32GB", "v10032gb v100sxm232gb", MIB(32512)},
    {"V100-16GB", "v100 v10016gb v100sxm216gb", MIB(16159)},
    {"T4", "t4", MIB(15104)},
    {"RTX-4090", "rtx4090 4090 geforcertx4090", MIB(24218)},
    {"RTX-3090", "rtx3090 3090 geforcertx3090", MIB(24259)},
};
#define NCARDS (sizeof cards / sizeof cards[0])

int ms_replay_parse_size(const char *text, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno || !(v > 0) || !isfinite(v)) return -1;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1048576.0; end++; break;
    case 'G': mult = 1073741824.0; end++; break;
    case 'T': mult = 1099511627776.0; end++; break;
    default: break;
  }
  if (mult > 1 && (!strcmp(end, "B") || !strcmp(end, "iB") || !strcmp(end, "b"))) end += strlen(end);
  if (*end || v * mult < (2 << 20) || v * mult > 1125899906842624.0) return -1; /* 2 MiB .. 1 PiB */
  *out = (uint64_t)(v * mult);
  return 0;
}

int ms_replay_card(const char *name, uint64_t *bytes, const char **listed) {
  char key[64];
  size_t n = 0;
  for (const char *c = name; *c && n + 1 < sizeof key; c++)
    if (isalnum((unsigned char)*c)) key[n++] = (char)tolower((unsigned char)*c);
  key[n] = '\0';
  const char *k = key;
  if (!strncmp(k, "nvidia", 6)) k += 6;
  if (!strncmp(k, "tesla", 5)) k += 5;
  if (!*k || strlen(name) > 48) return -1;
  for (size_t i = 0; i < NCARDS; i++) {
    for (const char *sp = cards[i].spellings; *sp;) {
      size_t len = strcspn(sp, " ");
      if (len == strlen(k) && !strncmp(sp, k, len)) {
        *bytes = cards[i].bytes;
        if (listed) *listed = cards[i].name;
        return 0;
      }
      sp += len;
      while (*sp == ' ') sp++;
    }
  }
  return -1;
}

void ms_replay_card_names(char *out, size_t len) {
  size_t o = 0;
  out[0] = '\0';
  for (size_t i = 0; i < NCARDS && o < len; i++) o += (size_t)snprintf(out + o, len - o, "%s%s", i ? ", " : "", cards[i].name);
}
