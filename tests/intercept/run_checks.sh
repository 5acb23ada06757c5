# run_checks.sh: the harness test_run.sh and test_crash.sh source (after setting $work, a folder of
# their own): checks that run a command and, when it fails, show the end of what it printed.
#   ok NAME / bad NAME [FILE]   count a check as passed / failed (FILE's last 30 lines shown)
#   check NAME CMD...           CMD's exit status decides; its output goes to $work/check.out
#   sql DB QUERY                the rows of a read-only query, "|" between columns (never creates DB)
# They print "N passed, N failed" themselves at the end (tests/run_tests.sh reads that line).
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | tail -n 30; }
check() { # check NAME CMD...
  local name=$1
  shift
  if "$@" >"$work/check.out" 2>&1; then ok "$name"; else bad "$name" "$work/check.out"; fi
}
sql() { # sql DB QUERY
  python3 -c 'import sqlite3, sys
db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
print("\n".join("|".join(map(str, r)) for r in db.execute(sys.argv[2])))' "$@" 2>&1
}
