#!/usr/bin/env bash
# compare_libs.sh DIR...: times torch_compare.py's `empty` task (torch.empty + del loop) with
# each libmemsnap.so in DIR... and with the native allocator, alternating, 3 rounds. For
# finding which build change moved the PyTorch-side cost (a development tool).
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1
for round in 1 2 3; do
  echo "round $round native $(python3 tests/gpu/parity/torch_compare.py --child native empty | tail -1)"
  for d in "$@"; do
    echo "round $round $d $(MEMSNAP_LIB=$PWD/$d/libmemsnap.so python3 tests/gpu/parity/torch_compare.py --child memsnap empty | tail -1)"
  done
done
