#!/usr/bin/env bash
# run.sh: the viewer's data code (web/model.js) under node's test runner, summarised as
# "N passed, N failed" for tests/run_tests.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null; then
  echo "FAIL node is not installed (scripts/install-deps.sh installs nodejs)"
  echo "0 passed, 1 failed"
  exit 1
fi
out=$(node --test "$here"/*.test.js 2>&1)
rc=$?
echo "$out" | grep -E '^not ok|^# (pass|fail)'
pass=$(echo "$out" | awk '/^# pass/ {print $3}')
fail=$(echo "$out" | awk '/^# fail/ {print $3}')
echo "${pass:-0} passed, ${fail:-1} failed"
exit $rc
