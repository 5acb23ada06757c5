# checks.sh: the shell tests' harness, to source (tests/checks.py is the Python tests'):
#   check NAME CONDITION   one named check: CONDITION (a shell expression, eval'd) prints ok or FAIL
#   json FILE EXPR         whether a Python expression over the JSON document `j` of FILE is true
#   finish                 prints "N passed, N failed" (the line tests/run_tests.sh reads) and
#                          returns non-zero when a check failed
passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }
json() { python3 -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; }
