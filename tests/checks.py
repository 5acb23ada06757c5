"""checks.py: what the Python tests share. check(NAME, COND[, DETAIL]) prints "ok NAME" or
"FAIL NAME DETAIL"; finish() prints "N passed, N failed" (the line tests/run_tests.sh reads) and
exits non-zero if anything failed."""
import sys

passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok  ", name)
    else:
        failed += 1
        print("FAIL", name, detail)


def finish():
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
