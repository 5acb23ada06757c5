#!/usr/bin/env bash
# run_tests.sh BUILD_DIR: runs every test program and the Python tests, then prints the total
# as "N passed, N failed" (the line CI reads) and exits non-zero if anything failed.
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run NAME CMD...: runs one test program and adds its "N passed, N failed" line to the totals.
run() {
  local name=$1
  shift
  echo "== $name"
  "$@" >"$log" 2>&1
  local rc=$?
  grep -v '^ok ' "$log"
  local line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    echo "FAIL $name: exited $rc without a summary line"
    failed=$((failed + 1))
    return
  fi
  local p f
  p=$(echo "$line" | awk '{print $1}')
  f=$(echo "$line" | awk '{print $3}')
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited $rc"
    failed=$((failed + 1))
  fi
}

run test_alloc "$build/tests/test_alloc"
run test_options "$build/tests/test_options"
run test_record "$build/tests/test_record"
run test_stress env THREADS="${THREADS:-8}" ITER="${ITER:-200000}" "$build/tests/test_stress"
run test_cli "$here/test_cli.sh" "$build"
run test_analyze "$here/test_analyze.sh" "$build"
run test_pickle "$build/tests/test_pickle" "${SNAPSHOTS:-$here/../../shared/snapshots}"
run test_import "$here/test_import.sh" "$build"
run test_web_model "$here/web/run.sh"
run test_sample "$here/test_sample.sh" "$build"
run test_python env MEMSNAP_LIB="$build/libmemsnap.so" PYTHONPATH="$here/../recorder/python" \
  python3 "$here/test_python.py"
run test_oom_throw env MEMSNAP_LIB="$build/libmemsnap.so" PYTHONPATH="$here/../recorder/python" \
  python3 "$here/test_oom_throw.py"

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
