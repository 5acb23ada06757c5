#!/usr/bin/env bash
# torch_intercept_diag.sh: run_any.py's PyTorch program under `memsnap run --mode intercept
# --no-torch-blocks` (the driver-level snapshot alone), its snapshot and analysis kept in $OUT
# for a look on the development machine: which stacks carry Python frames, which leak comes first.
set -u
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp}
work=$(mktemp -d)
python3 -c "import sys; sys.path.insert(0, 'tests/gpu/parity'); import run_any; open('$work/torch_leak.py', 'w').write(run_any.TORCH)"
build/memsnap run -o "$out/torch_intercept.db" --mode intercept --no-torch-blocks -- python3 "$work/torch_leak.py" 20
build/memsnap analyze "$out/torch_intercept.db" >"$out/torch_intercept.txt" 2>&1
sed -n '/^leak candidates/,/^$/p' "$out/torch_intercept.txt" | head -40
