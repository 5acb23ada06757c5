#!/usr/bin/env bash
# compare_stacks.sh [REV] [BUILD_DIR]: the stacks this tree records against the ones an older
# commit's library records, on the same programs (issue 26: stacks recorded must be identical to
# those of the code before the cached capture).
#
# Builds REV's libmemsnap.so (default: the commit before unwind.c existed, found with git log) in
# a temporary worktree, then runs tests/recorder/test_stacks (C: recursion to 150 frames, frame
# pointers, realigned frames, signals, threads, fork, a library unloaded) and
# tests/recorder/test_pystacks.py (Python + native stacks, GIL held and released) with that
# library as the base: each workload is dumped by both libraries and every event must have the
# same stack id and the same frames. Needs BUILD_DIR (default build) built (make test-programs).
# Not part of make test (it builds a second library); prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
root=$PWD
build=${2:-build}
rev=${1:-$(git log --diff-filter=A --format=%H -1 -- recorder/unwind.c)~1}
dir=$(mktemp -d /tmp/memsnap-base-XXXXXX)
cleanup() { git -C "$root" worktree remove --force "$dir/tree" >/dev/null 2>&1; rm -rf "$dir"; }
trap cleanup EXIT
if ! git worktree add --detach "$dir/tree" "$rev" >/dev/null 2>&1; then
  echo "FAIL cannot check out '$rev'"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "base: $(git -C "$dir/tree" log --oneline -1 | cut -c1-100)"
if ! make -C "$dir/tree" --no-print-directory -j2 build/libmemsnap.so >"$dir/make.log" 2>&1; then
  tail -20 "$dir/make.log"
  echo "FAIL cannot build the base library"
  echo "0 passed, 1 failed"
  exit 1
fi
status=0
"$build/tests/test_stacks" "$build" "$dir/tree/build" | tee "$dir/c.out" || status=1
MEMSNAP_BASE_LIB="$dir/tree/build/libmemsnap.so" MEMSNAP_LIB="$root/$build/libmemsnap.so" \
  PYTHONPATH="$root/recorder/python" python3 tests/recorder/test_pystacks.py | tee "$dir/py.out" || status=1
passed=$(cat "$dir/c.out" "$dir/py.out" | awk '/^[0-9]+ passed, [0-9]+ failed$/ {p += $1} END {print p + 0}')
failed=$(cat "$dir/c.out" "$dir/py.out" | awk '/^[0-9]+ passed, [0-9]+ failed$/ {f += $3} END {print f + 0}')
echo "$passed passed, $failed failed"
exit $status
