#!/usr/bin/env bash
# test_sample.sh BUILD_DIR: the sample training loop on the simulated device: it runs, its
# leak shows as allocated memory growing by exactly the leaked bytes per iteration, and without
# the leak allocated memory is flat.
set -u
build=$1
passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }
out=$(MEMSNAP_BACKEND=sim "$build/samples/train_loop" --iterations 6 2>&1)
rc=$?
check "sample: runs on the sim backend" "[ $rc -eq 0 ]"
deltas=$(echo "$out" | awk '/^iter/ {v=$NF; if (n++) print v - prev; prev = v}' | sort -u)
check "sample: allocated grows by the leak (262144 bytes) each iteration" "[ \"$deltas\" = 262144 ]"
check "sample: prints torch-style statistics" "echo \"\$out\" | grep -q 'reserved_bytes.all.peak'"
out=$(MEMSNAP_BACKEND=sim "$build/samples/train_loop" --iterations 4 --no-leak 2>&1)
deltas=$(echo "$out" | awk '/^iter/ {v=$NF; if (n++) print v - prev; prev = v}' | sort -u)
check "sample: without the leak allocated memory is flat" "[ \"$deltas\" = 0 ]"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
MEMSNAP_BACKEND=sim "$build/samples/train_loop" --iterations 4 --record --dump "$dir/demo.db" >/dev/null 2>&1 &&
  "$build/memsnap" analyze "$dir/demo.db" >"$dir/demo.txt"
check "sample: the report shows the inlined helper and its caller, each with its own line" \
  "grep -A2 'retained [a-z_]*: 101.00 MiB' $dir/demo.txt | grep -q 'xalloc (train_loop.c:44, inlined)' &&
   grep -q '^ *alloc_weights (train_loop.c:37)$' $dir/demo.txt && ! grep -q '^ *alloc_weights (train_loop.c:44)' $dir/demo.txt"
MEMSNAP_BACKEND=sim "$build/samples/train_loop" --iterations 0 >/dev/null 2>&1
check "sample: bad arguments exit 2" "[ $? -eq 2 ]"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
