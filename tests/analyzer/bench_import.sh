#!/usr/bin/env bash
# bench_import.sh BUILD_DIR [BYTES]: `memsnap import` on a PyTorch snapshot pickle of BYTES bytes
# (default 1 GB), plain and gzip-compressed, then `memsnap analyze` and `memsnap export` of the
# result: wall time and peak RSS of each (/usr/bin/time -v). The pickle is written on the fly by
# tests/analyzer/pytorch_pickles.py from resnet50_leak's frames and stacks, as PyTorch writes its files
# (shared frame dicts, a frames list per entry, memoized dicts), into a temporary directory
# (TMPDIR) that is removed afterwards; it needs about 3 x BYTES of disk. Figures go to
# docs/BENCHMARKS.md.
set -eu
build=${1:-build}
bytes=${2:-1000000000}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cli=$build/memsnap

echo "writing a ${bytes}-byte snapshot pickle..."
python3 "$here/pytorch_pickles.py" big "$dir/big.pickle" "$bytes"
gzip -1 -k "$dir/big.pickle"
ls -l "$dir/big.pickle" "$dir/big.pickle.gz" | awk '{printf "  %s: %.1f MiB\n", $NF, $5 / 1048576}'

# measure LABEL CMD...: runs CMD once, prints its wall time and peak RSS.
measure() {
  local label=$1
  shift
  /usr/bin/time -v "$@" >"$dir/out" 2>"$dir/time" || { cat "$dir/out" "$dir/time"; exit 1; }
  awk -v l="$label" '/Elapsed \(wall clock\)/ {w = $NF} /Maximum resident/ {r = $NF}
    END {printf "%-34s %10s wall, peak RSS %7.1f MiB\n", l, w, r / 1024}' "$dir/time"
}
measure "import (plain pickle)" "$cli" import "$dir/big.pickle" -o "$dir/big.db"
measure "import (gzip pickle)" "$cli" import "$dir/big.pickle.gz" -o "$dir/big2.db"
python3 - "$dir/big.db" <<'PY'
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
n, f, s = c.execute("select (select count(*) from events), (select count(*) from frames), (select count(*) from stacks)").fetchone()
print("  snapshot: %d events, %d frames, %d stacks, %.1f MiB" % (n, f, s, os.path.getsize(sys.argv[1]) / 2**20))
PY
measure "analyze (text)" "$cli" analyze "$dir/big.db"
measure "export --format pytorch" "$cli" export "$dir/big.db" -o "$dir/back.pickle"
ls -l "$dir/back.pickle" | awk '{printf "  exported: %.1f MiB\n", $5 / 1048576}'
