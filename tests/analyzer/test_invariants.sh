#!/usr/bin/env bash
# test_invariants.sh BUILD_DIR: what must hold in every report and page (tests/analyzer/check_invariants.py:
# reserved >= allocated at every instant, peaks at least the snapshot's state, the page agreeing
# with --json), on every kind of snapshot the tests have: the real PyTorch snapshots of tests/data
# (imported), gen_snapshots' (late recording, a truncated ring, an OOM, no events at all...),
# test_modes' expandable-segments and async-mode ones, and gen_releases' (the allocator's own
# releases: retries, empty_cache, garbage collection).
set -u
build=$1
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail_setup() { echo "FAIL $1"; echo "0 passed, 1 failed"; exit 1; }
"$build/tests/gen_snapshots" "$dir" >/dev/null 2>&1 || fail_setup "gen_snapshots"
"$build/tests/test_modes" "$dir" >/dev/null 2>&1 || fail_setup "test_modes (writes expandable.db and async.db)"
mkdir "$dir/releases" && "$build/tests/gen_releases" "$dir/releases" >/dev/null 2>&1 || fail_setup "gen_releases"
for p in "$here"/../data/*.pickle.gz; do
  name=$(basename "$p" .pickle.gz)
  "$build/memsnap" import "$p" -o "$dir/pytorch-$name.db" >/dev/null 2>&1 || fail_setup "import $p"
done
# Hostile sizes in what the reconstruction reads (blocks, segments, events): skipped as the
# reader skips them, never summed into an overflow.
cp "$dir/late.db" "$dir/hostile-sizes.db"
python3 - "$dir/hostile-sizes.db" <<'PY' || fail_setup "hostile-sizes.db"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("insert into blocks(segment_id, address, size, requested_size, state) values (1, 7, 1 << 62, 1, 'allocated')")
c.execute("insert into segments(device, address, size) values (0, 9, 1 << 62)")
c.execute("insert into events(time_ns, kind, device, address, size) values (1, 2, 0, 11, 1 << 62)")
c.execute("insert into events(time_ns, kind, device, address, size) values (1, 5, 0, 13, -5)")
c.commit()
PY
exec python3 "$here/check_invariants.py" "$build/memsnap" "$dir"/*.db "$dir"/releases/*.db
