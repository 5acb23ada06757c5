#!/usr/bin/env bash
# run_tests.sh BUILD_DIR [GROUP...]: runs every test program and the Python tests (or only the
# groups named: alloc options record stress cli analyze replay import web sample python run readme), then prints the
# total as "N passed, N failed" (the line CI reads) and exits non-zero if anything failed.
# The tests mirror the code: tests/recorder/ (the library and its Python package), tests/analyzer/
# (the CLI's stages and commands), tests/intercept/ (memsnap run and the interposer), tests/web/
# (the page), tests/fuzz/, tests/gpu/; here: the harness and what spans them all.
# PY_PRELOAD: libraries preloaded into Python (a sanitizer's runtime, for `make sanitize`).
set -u
build=${1:-build}
shift
groups=" ${*:-alloc options record stress cli analyze replay import web sample python run readme crash} "
want() { [[ $groups == *" $1 "* ]]; }
py_env=(env MEMSNAP_LIB="$build/libmemsnap.so" PYTHONPATH="$(cd "$(dirname "$0")" && pwd)/../recorder/python")
[ -n "${PY_PRELOAD:-}" ] && py_env+=(LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0")
here=$(cd "$(dirname "$0")" && pwd)
export MEMSNAP_TESTS_DIR=$here
passed=0
failed=0
log=$(mktemp)
# Live mappings (docs/recover.md) of the processes the tests kill on purpose stay in a directory of
# the run's own, removed at the end, not in /dev/shm.
live_dir=$(mktemp -d)
export MEMSNAP_LIVE_DIR="$live_dir"
trap 'rm -f "$log"; rm -rf "$live_dir"' EXIT

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

want alloc && run test_alloc "$build/tests/test_alloc"
want alloc && run test_modes "$build/tests/test_modes" "$build/tests"
want alloc && run test_host_api "$build/tests/test_host_api" "$build/tests"
want alloc && run test_modes_cli "$here/recorder/test_modes_cli.sh" "$build"
want alloc && run test_layers python3 "$here/test_layers.py" "$build"
want options && run test_options "$build/tests/test_options"
want record && run test_record "$build/tests/test_record"
want record && run test_stacks "$build/tests/test_stacks" "$build"
want stress && run test_stress env THREADS="${THREADS:-8}" ITER="${ITER:-200000}" "$build/tests/test_stress"
# The same threads in the two other allocator modes, a quarter as long.
want stress && run test_stress_expandable env MEMSNAP_EXPANDABLE_SEGMENTS=1 THREADS="${THREADS:-8}" \
  ITER=$(( ${ITER:-200000} / 4 )) "$build/tests/test_stress"
want stress && run test_stress_async env MEMSNAP_ALLOCATOR=async THREADS="${THREADS:-8}" \
  ITER=$(( ${ITER:-200000} / 4 )) "$build/tests/test_stress"
want cli && run test_cli "$here/analyzer/test_cli.sh" "$build"
want cli && run test_install "$here/test_install.sh" "$build"
want analyze && run test_analyze "$here/analyzer/test_analyze.sh" "$build"
want replay && run test_replay "$here/analyzer/test_replay.sh" "$build"
want replay && run test_predict "$here/analyzer/test_predict.sh" "$build"
want replay && run test_predict_model "$here/analyzer/test_predict_model.sh" "$build"
want replay && run test_predict_page "$here/analyzer/test_predict_page.sh" "$build"
want replay && run test_predict_shard "$here/analyzer/test_predict_shard.sh" "$build"
want analyze && run test_releases "$here/analyzer/test_releases.sh" "$build"
want analyze && run test_invariants "$here/analyzer/test_invariants.sh" "$build"
want analyze && run test_ranks "$here/analyzer/test_ranks.sh" "$build"
want analyze && run test_user_line "${py_env[@]}" python3 "$here/analyzer/test_user_line.py" "$build"
want analyze && run test_categories "${py_env[@]}" python3 "$here/analyzer/test_categories.py" "$build"
want analyze && run test_causes "${py_env[@]}" python3 "$here/analyzer/test_causes.py" "$build"
want analyze && run test_zoo python3 "$here/analyzer/test_zoo.py" "$build"
want analyze && run test_runlog python3 "$here/analyzer/test_runlog.py" "$build"
want analyze && run test_modules "${py_env[@]}" python3 "$here/analyzer/test_modules.py" "$build"
want analyze && run test_kept_graphs python3 "$here/analyzer/test_kept_graphs.py" "$build"
want import && run test_pickle "$build/tests/test_pickle" "${SNAPSHOTS:-$here/data}"
want import && run test_import "$here/analyzer/test_import.sh" "$build"
want web && run test_web "$here/web/run.sh" "$build"
want readme && run test_readme python3 "$here/test_readme.py" "$build"
want sample && run test_sample "$here/test_sample.sh" "$build"
want python && run test_python "${py_env[@]}" python3 "$here/recorder/test_python.py"
want python && run test_holders "${py_env[@]}" python3 "$here/recorder/test_holders.py" "$build"
want python && run test_holders_pick python3 "$here/recorder/test_holders_pick.py"
want python && run test_show "${py_env[@]}" python3 "$here/recorder/test_show.py" "$build"
want python && run test_notebook python3 "$here/recorder/test_notebook.py" "$build"
want python && run test_pystacks "${py_env[@]}" python3 "$here/recorder/test_pystacks.py"
want python && run test_oom_throw "${py_env[@]}" python3 "$here/recorder/test_oom_throw.py"
want python && run test_enable "${py_env[@]}" python3 "$here/recorder/test_enable.py"
want python && run test_torch_memory "${py_env[@]}" python3 "$here/recorder/test_torch_memory.py"
want python && run test_torch_cxx "${py_env[@]}" python3 "$here/recorder/test_torch_cxx.py"
want python && run test_libs "${py_env[@]}" python3 "$here/recorder/test_libs.py"
want python && run test_hostile "${py_env[@]}" python3 "$here/test_hostile.py" "$build/memsnap"
want python && run test_judgements python3 "$here/gpu/test_judgements.py"
want run && run test_run env PY_PRELOAD="${PY_PRELOAD:-}" "$here/intercept/test_run.sh" "$build"
want crash && run test_crash env KILLS="${KILLS:-10}" "$here/intercept/test_crash.sh" "$build"
want crash && run test_live_security "$here/intercept/test_live_security.sh" "$build"
want run && run test_torch_ranges "${py_env[@]}" python3 "$here/intercept/test_torch_ranges.py" "$build"
want run && run test_torch_model "${py_env[@]}" python3 "$here/recorder/test_torch_model.py" "$build"

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
