#!/usr/bin/env bash
# run.sh [BUILD_DIR]: the viewer's tests under node's test runner, summarised as "N passed,
# N failed" for tests/run_tests.sh: model.test.js (web/model.js, the data code) and
# browser.test.js (the report page in chromium, via playwright-core installed in
# tests/web/node_modules by `make test` or `make deps`; screenshots in BUILD_DIR/web-artifacts).
set -u
here=$(cd "$(dirname "$0")" && pwd)
export MEMSNAP_BUILD=$(cd "${1:-$here/../../build}" && pwd)
for need in node:"node is not installed" "$here/node_modules/playwright-core":"playwright-core is not installed in tests/web (make test installs it with npm)" \
  "${CHROMIUM:-/usr/bin/chromium}":"chromium is not installed"; do
  if ! command -v "${need%%:*}" >/dev/null && [ ! -e "${need%%:*}" ]; then
    echo "FAIL ${need#*:} (make deps installs what is missing)"
    echo "0 passed, 1 failed"
    exit 1
  fi
done
out=$(node --test --test-concurrency=1 "$here"/*.test.js 2>&1)
rc=$?
echo "$out" | grep -E '^not ok|^# (pass|fail)'
[ $rc -ne 0 ] && echo "$out" | grep -B2 -A25 '^not ok' | head -150
pass=$(echo "$out" | awk '/^# pass/ {print $3}')
fail=$(echo "$out" | awk '/^# fail/ {print $3}')
echo "${pass:-0} passed, ${fail:-1} failed"
exit $rc
