#!/usr/bin/env bash
# test_run.sh BUILD_DIR: `memsnap run` records unchanged programs on the simulated device.
#
#   - a C program linked against the CUDA toolkit's libcudart.so (tests/intercept/run_cudart.c): every
#     cudaMalloc, cudaMallocAsync, cudaMallocManaged and a cuMemAlloc reached through
#     dlsym + cuGetProcAddress, recorded by the intercept library with MEMSNAP_BACKEND=sim
#     answering behind it; the leak named by `memsnap analyze`; its exit status, _exit, abort,
#     --signal with SIGTERM, --dump-on-oom, a process tree (a shell starting it twice);
#   - a Python training script (tests/data/run/train.py) with the stand-in torch of
#     tests/data/fake_torch in each mode (allocator, torch-native, intercept and both), its leak
#     named; workers (multiprocessing spawn) each in their own file (%p), a fork child writing
#     none, %r, an uncaught exception, os._exit;
#   - a Python program that never imports torch (tests/data/run/steps.py), its memory from a
#     library linked against libcudart (tests/intercept/run_steps_lib.c) called through ctypes
#     with the GIL released, recorded with no --mode: its leak named at its Python line (the
#     frames read by gil_helper.c's thread), from threads at once, and while a thread holding the
#     GIL waits for a lock the allocating thread holds (no deadlock); MEMSNAP_GIL_WAIT_MS=0; the
#     run summary's paths in each mode;
#   - the audit path: LD_AUDIT=libmemsnap_intercept.so around the C program records what the
#     LD_PRELOAD path does, with one recording state (libmemsnap.so is loaded twice, once in the
#     auditor's namespace, inert), `memsnap run --mode audit`, a library loaded with RTLD_DEEPBIND
#     (seen through the auditor, not through LD_PRELOAD) and a program built with -fno-plt (the
#     reverse);
#   - the command's usage errors and `memsnap help run`.
# The C program needs the toolkit's libcudart.so (CUDA_HOME/lib64); without it those checks are
# skipped with a message. PY_PRELOAD (make sanitize) is preloaded into the programs; the audit
# path is then skipped with a message: the dynamic linker loads an auditor in a namespace of its
# own before LD_PRELOAD's libraries, where a sanitizer's runtime cannot come first (AddressSanitizer
# stops the program: "ASan runtime does not come first in initial library list").
set -u
# the stand-in for torch has no C++ headers: memsnap.enable() uses the pluggable interface, asked
# for here rather than falling back with a line per process (test_torch_cxx.py tests the fallback)
export MEMSNAP_TORCH_ALLOCATOR=pluggable
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
cli=$build/memsnap
prog=$build/tests/run_cudart
cudart=${CUDA_HOME:-/usr/local/cuda}/lib64/libcudart.so
train=$here/../data/run/train.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(cd "$(dirname "$0")" && pwd)/run_checks.sh"
export MEMSNAP_BACKEND=sim MEMSNAP_SIM_CAPACITY=1G
[ -n "${PY_PRELOAD:-}" ] && export LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
fold=(--fold '*@*fake_torch/torch/__init__.py')

# run NAME EXPECTED_STATUS ARGS...: memsnap run ARGS, output in $work/NAME.out, status checked.
run() {
  local name=$1 want=$2
  shift 2
  (cd "$work" && "$cli" run "$@") >"$work/$name.out" 2>&1
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "run $name: exit status $want"; else bad "run $name: exit status $rc, expected $want" "$work/$name.out"; fi
}
# leak_is NAME DB FUNCTION: the first leak candidate of DB's analysis names FUNCTION.
leak_is() {
  "$cli" analyze "${fold[@]}" "$2" >"$work/$1.analysis" 2>&1
  if awk '/^leak candidates/{on=1; next} on && /^$/{exit} on' "$work/$1.analysis" | sed -n '2,6p' | grep -q "$3"; then
    ok "run $1: the first leak candidate is $3"
  else
    bad "run $1: the first leak candidate is not $3" "$work/$1.analysis"
  fi
}

# ---- usage ------------------------------------------------------------------------------------
check "usage: memsnap help run names the modes and options" bash -c "'$cli' help run | grep -q -- '--mode MODE' &&
  '$cli' help run | grep -q 'torch-native' && '$cli' help run | grep -q -- '--dump-on-oom PATH'"
check "usage: no program (exit 2)" bash -c "'$cli' run -o x.db 2>&1 | grep -q 'no program given'; '$cli' run; test \$? -eq 2"
check "usage: unknown mode (exit 2)" bash -c "'$cli' run --mode fast -- true 2>&1 | grep -q \"unknown mode 'fast'\""
check "usage: bad --signal (exit 2)" bash -c "'$cli' run --signal KILLME -- true 2>&1 | grep -q -- '--signal takes'; '$cli' run --signal X -- true; test \$? -eq 2"
check "usage: bad --stacks, --max-entries (exit 2)" bash -c "'$cli' run --stacks some -- true; test \$? -eq 2 &&
  { '$cli' run --max-entries 3 -- true; test \$? -eq 2; }"
check "usage: a program that does not exist: exit 127, named" bash -c "'$cli' run -- '$work/no-such-program' 2>&1 |
  grep -q \"cannot run '$work/no-such-program'\"; '$cli' run -- '$work/no-such-program'; test \$? -eq 127"
run nothing 0 -o "$work/nothing.db" -- true
check "run nothing: says that no snapshot was written" bash -c "grep -q 'no snapshot was written' '$work/nothing.out' && test ! -e '$work/nothing.db'"

# ---- a C program through libcudart -------------------------------------------------------------
if [ ! -x "$prog" ]; then
  echo "skip: the C program checks need the CUDA toolkit's libcudart.so ($cudart): $prog was not built"
else
  run cudart 7 -o "$work/cudart.db" -- "$prog" 8 exit 7
  check "run cudart: intercept chosen for a program that is not Python" grep -q "mode intercept" "$work/cudart.out"
  check "run cudart: the summary names the snapshot and the report command" \
    bash -c "grep -q '^snapshot $work/cudart.db' '$work/cudart.out' && grep -q 'memsnap analyze $work/cudart.db' '$work/cudart.out'"
  leak_is cudart "$work/cudart.db" keep_for_later
  check "run cudart: the 8 kept blocks are live external segments from cudaMalloc in run_cudart" \
    test "$(sql "$work/cudart.db" "select count(*), sum(size), source, library from segments where pool = 'external'")" = "8|524288|cudaMalloc|run_cudart"
  check "run cudart: every API is recorded under its name (runtime calls and cuMemAlloc through cuGetProcAddress)" \
    test "$(sql "$work/cudart.db" "select group_concat(text, ',') from (select distinct l.text from events e join labels l on l.id = e.extra
      where e.kind = 4 order by 1)")" = "cuMemAlloc,cuMemAllocAsync,cudaMalloc,cudaMallocAsync,cudaMallocManaged"
  check "run cudart: each allocation is recorded once (8 steps x 4 + 2, and as many frees less the kept)" \
    test "$(sql "$work/cudart.db" "select sum(kind = 1), sum(kind = 3) from events")" = "34|26"
  check "run cudart: the report lists the memory outside memsnap's allocator by API and library" \
    bash -c "grep -q \"outside memsnap's allocator at the snapshot (intercepted): 512.00 KiB\" '$work/cudart.analysis' &&
      grep -q '512.00 KiB in 8 allocations  cudaMalloc from run_cudart' '$work/cudart.analysis'"
  "$cli" analyze --json "$work/cudart.db" >"$work/cudart.json" 2>&1
  check "run cudart: --json's external groups" python3 -c "import json; e = json.load(open('$work/cudart.json'))['external']
assert e == [{'source': 'cudaMalloc', 'library': 'run_cudart', 'count': 8, 'bytes': 524288}], e"
  check "run cudart: the program's cudaFree calls are recorded as such (segment_free extra 7), apart from the allocator's releases" \
    python3 -c "import json, sqlite3; r = json.load(open('$work/cudart.json'))['releases']
n = sqlite3.connect('$work/cudart.db').execute('select count(*), sum(extra = 7) from events where kind = 5').fetchone()
assert n[0] == n[1] == 26 and r['external_frees']['segments'] == 26 and r['other']['segments'] == 0 and r['retries']['count'] == 0, (n, r)"
  check "run cudart: no section of the allocator's releases in the report (it released nothing)" \
    bash -c "! grep -q '^releases of cached memory' '$work/cudart.analysis'"
  check "run cudart: the analysis sees 512 KiB allocated at the end and the 3 MiB peak" \
    python3 -c "import json; a = json.load(open('$work/cudart.json')); s = json.dumps(a); assert '524288' in s and '3145728' in s"

  run cudart_exit 5 -o "$work/cudart_exit.db" -- "$prog" 4 _exit 5
  check "run cudart _exit: the snapshot is written at _exit" test "$(sql "$work/cudart_exit.db" "select count(*) from segments")" = 4
  run cudart_abort 134 -o "$work/cudart_abort.db" -- "$prog" 4 abort
  check "run cudart abort: killed by signal 6, its snapshot written from its live mapping, and says how it died" \
    bash -c "grep -q 'killed by signal 6' '$work/cudart_abort.out' && grep -q 'killed by SIGABRT at .* after its last allocation' '$work/cudart_abort.out' &&
      test \"\$(sqlite3 '$work/cudart_abort.db' \"select count(*) from segments\")\" = 4"

  # --signal: SIGTERM to memsnap run asks the program for a snapshot first.
  (cd "$work" && exec "$cli" run --signal USR1 -o "$work/cudart_sig-%p.db" -- "$prog" 4 wait) >"$work/cudart_sig.out" 2>&1 &
  runner=$!
  for _ in $(seq 100); do grep -q '^ready' "$work/cudart_sig.out" && break; sleep 0.1; done
  kill -TERM "$runner"
  wait "$runner"
  rc=$?
  sig_db=$(ls "$work"/cudart_sig-*.db 2>/dev/null | head -1)
  check "run cudart --signal: SIGTERM gives a snapshot, then ends the program (143)" \
    bash -c "test $rc -eq 143 && test -n '$sig_db' && grep -q 'asking pid' '$work/cudart_sig.out' &&
      grep -q '^snapshot $sig_db' '$work/cudart_sig.out'"
  [ -n "$sig_db" ] && leak_is cudart_sig "$sig_db" keep_for_later

  # --dump-on-oom: a device of 4 MiB runs out after some 40 steps.
  MEMSNAP_SIM_CAPACITY=4M run cudart_oom 3 -o "$work/cudart_oom.db" --dump-on-oom "$work/cudart_oom-at-oom.db" -- "$prog" 100
  check "run cudart --dump-on-oom: a snapshot at the out-of-memory, with its oom event" \
    test "$(sql "$work/cudart_oom-at-oom.db" "select count(*) from events where kind = 6")" = 1
  check "run cudart --dump-on-oom: both snapshots are listed" \
    bash -c "grep -q '^snapshot $work/cudart_oom-at-oom.db' '$work/cudart_oom.out' && grep -q '^snapshot $work/cudart_oom.db' '$work/cudart_oom.out'"

  # A process tree: a shell that runs the program twice, each its own file.
  run cudart_tree 0 -o "$work/tree-%p.db" -- sh -c "'$prog' 2 && '$prog' 3"
  check "run cudart tree: two programs under a shell, two snapshots" test "$(ls "$work"/tree-*.db | wc -l)" = 2
  check "run cudart tree: both are summarized" test "$(grep -c '^snapshot .*tree-' "$work/cudart_tree.out")" = 2

  # --cache: cudaMalloc/cudaFree (and cuMemAlloc through cuGetProcAddress) served by memsnap's
  # caching allocator; managed and stream-ordered memory stay the driver's.
  run cudart_cache 0 --cache -o "$work/cudart_cache.db" -- "$prog" 8
  check "run cudart --cache: the kept blocks are memsnap's (its pools), none external at the end" \
    test "$(sql "$work/cudart_cache.db" "select group_concat(pool || ':' || n, ',') from (select s.pool, count(*) n
      from blocks b join segments s on s.id = b.segment_id where b.state = 'allocated' group by 1 order by 1)")" = "small:8"
  check "run cudart --cache: cudaMallocAsync and cudaMallocManaged still go to the driver (recorded external)" \
    test "$(sql "$work/cudart_cache.db" "select group_concat(text, ',') from (select distinct l.text from events e
      join labels l on l.id = e.extra where e.kind = 4 and e.extra is not null order by 1)")" = "cuMemAllocAsync,cudaMallocAsync,cudaMallocManaged"
  check "run cudart --cache: the snapshot's options say so" \
    test "$(sql "$work/cudart_cache.db" "select value from options where name = 'MEMSNAP_INTERCEPT_CACHE'")" = 1
  leak_is cudart_cache "$work/cudart_cache.db" keep_for_later
  check "usage: --cache needs intercept mode (exit 2)" bash -c "'$cli' run --cache --mode allocator -- true 2>&1 |
    grep -q -- '--cache serves intercepted'; '$cli' run --cache --mode allocator -- true; test \$? -eq 2"

  # dlsym(RTLD_NEXT) keeps its meaning under the interposer's dlsym: from the program, the next
  # definition of cudaMalloc is the interposer's (it comes right after the program).
  cat >"$work/next.c" <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
int main(void) { return dlsym(RTLD_NEXT, "cudaMalloc") == dlsym(RTLD_DEFAULT, "cudaMalloc") ? 0 : 1; }
EOF
  if cc -o "$work/next" "$work/next.c" -ldl 2>/dev/null; then
    check "intercept: dlsym(RTLD_NEXT, ...) is resolved from the caller, not from the interposer" \
      env LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$build/libmemsnap_intercept.so" "$work/next"
  fi
fi

# ---- the audit path: the same library through LD_AUDIT ------------------------------------------
audit=1
if [ -n "${PY_PRELOAD:-}" ]; then
  audit=0
  echo "skip: the audit path under a sanitizer (an auditor's namespace cannot load its runtime first); make test runs it"
fi
if [ -x "$prog" ] && [ $audit = 1 ]; then
  (cd "$work" && LD_AUDIT="$build/libmemsnap_intercept.so" MEMSNAP_RECORD=1 MEMSNAP_DUMP="$work/audit.db" "$prog" 8) \
    >"$work/audit.out" 2>&1
  check "audit: LD_AUDIT=libmemsnap_intercept.so MEMSNAP_RECORD=1 MEMSNAP_DUMP=audit.db run_cudart writes audit.db" \
    bash -c "grep -q '8 steps' '$work/audit.out' && test -s '$work/audit.db'"
  leak_is audit "$work/audit.db" keep_for_later
  check "audit: what the LD_PRELOAD path records: each allocation once (34, and 26 frees), every API under its name" \
    test "$(sql "$work/audit.db" "select sum(kind = 1), sum(kind = 3), (select group_concat(text, ',') from (select distinct
      l.text from events e join labels l on l.id = e.extra where e.kind = 4 order by 1)) from events")" = \
      "34|26|cuMemAlloc,cuMemAllocAsync,cudaMalloc,cudaMallocAsync,cudaMallocManaged"
  check "audit: the 8 kept blocks are external segments from cudaMalloc in run_cudart" \
    test "$(sql "$work/audit.db" "select count(*), sum(size), source, library from segments where pool = 'external'")" = \
      "8|524288|cudaMalloc|run_cudart"
  # The dynamic linker loads the auditor, and libmemsnap.so with it, in a namespace of their own;
  # the auditor loads the library again into the program's, where the recording is: two copies
  # of each are mapped, one writes the snapshot.
  LD_AUDIT="$build/libmemsnap_intercept.so" MEMSNAP_RECORD=1 MEMSNAP_DUMP="$work/audit_wait.db" "$prog" 2 wait \
    >"$work/audit_wait.out" 2>&1 &
  waiter=$!
  for _ in $(seq 100); do grep -q '^ready' "$work/audit_wait.out" && break; sleep 0.1; done
  copies="$(grep -c ' r-xp .*/libmemsnap\.so$' "/proc/$waiter/maps") $(grep -c ' r-xp .*/libmemsnap_intercept\.so$' "/proc/$waiter/maps")"
  kill -TERM "$waiter"
  wait "$waiter"
  check "audit: libmemsnap.so and the auditor are each loaded twice (the auditor's namespace, the program's)" \
    test "$copies" = "2 2"
  run audit_run 0 --mode audit -o "$work/audit_run-%p.db" -- "$prog" 8
  check "run --mode audit: LD_AUDIT chosen, one snapshot, the events of the LD_PRELOAD path" \
    bash -c "grep -q 'mode audit' '$work/audit_run.out' && test \$(ls '$work'/audit_run-*.db | wc -l) = 1 &&
      test \"\$(grep -c '^snapshot ' '$work/audit_run.out')\" = 1 &&
      test \"$(sql "$(ls "$work"/audit_run-*.db 2>/dev/null | head -1)" "select sum(kind = 1), sum(kind = 3) from events")\" = '34|26'"
  run audit_exit 5 --mode audit -o "$work/audit_exit.db" -- "$prog" 4 _exit 5
  check "run --mode audit, _exit: the program's _exit is bound to the wrapper, which writes the snapshot first" \
    test "$(sql "$work/audit_exit.db" "select count(*) from segments")" = 4
  # -fno-plt: calls through the GOT, bound when the program loads, never through a PLT: the
  # interposer's definitions win them (LD_PRELOAD), the auditor is never asked (docs/run.md).
  if cc -O2 -fno-plt -I"${CUDA_HOME:-/usr/local/cuda}/include" -o "$work/run_cudart_noplt" "$here/run_cudart.c" \
    -L"$(dirname "$cudart")" -lcudart -Wl,-rpath,"$(dirname "$cudart")" -ldl 2>"$work/noplt.log"; then
    run noplt_preload 0 --mode intercept -o "$work/noplt_preload.db" -- "$work/run_cudart_noplt" 8
    leak_is noplt_preload "$work/noplt_preload.db" keep_for_later
    run noplt_audit 3 --mode audit -o "$work/noplt_audit.db" -- "$work/run_cudart_noplt" 8
    check "run -fno-plt, audit: its cudaMalloc calls reach libcudart unseen (no device here: error 35)" \
      bash -c "grep -q 'cudaMalloc failed: error 35' '$work/noplt_audit.out' && test ! -e '$work/noplt_audit.db'"
  fi
fi

# ---- a Python training script in each mode ------------------------------------------------------
export PYTHONPATH="$here/../data/fake_torch${PYTHONPATH:+:$PYTHONPATH}"
run py_allocator 4 -o "$work/py_allocator.db" -- python3 "$train" 8 exit 4
check "run py allocator: chosen for python, memsnap's allocator made the segments" \
  bash -c "grep -q 'mode allocator' '$work/py_allocator.out' &&
    test '$(sql "$work/py_allocator.db" "select count(*) > 0 from segments where pool in ('small', 'large')")' = 1"
leak_is py_allocator "$work/py_allocator.db" keep_loss_for_logging
check "run py allocator: the summary says what memsnap's allocator saw (8 steps of 5 allocations)" \
  grep -q "^  seen: 40 allocations (34.00 MiB) through memsnap's allocator$" "$work/py_allocator.out"
# the same script started by a shell (`memsnap run -- bash train.sh`): auto records the shell's
# Python through memsnap's allocator too, not through the interposer alone
run py_shell 4 -o "$work/py_shell-%p.db" -- bash -c "python3 '$train' 8 exit 4; exit 4"
shell_db=$(ls "$work"/py_shell-*.db 2>/dev/null | head -n 1)
check "run py under bash: auto is allocator+intercept for a shell, memsnap's allocator made the segments" \
  bash -c "grep -q \"recording 'bash' (mode allocator+intercept\" '$work/py_shell.out' &&
    test '$(sql "${shell_db:-/nonexistent}" "select count(*) > 0 from segments where pool in ('small', 'large')")' = 1"

FAKE_TORCH_DEVICE_MEMORY=2G run py_native 0 --mode torch-native -o "$work/py_native.db" -- python3 "$train" 8
check "run py torch-native: PyTorch's snapshot imported, the pickle removed" \
  bash -c "test '$(sql "$work/py_native.db" "select count(*) from meta where key = 'import_source'")' = 1 &&
    ! ls '$work'/*.pickle 2>/dev/null"
leak_is py_native "$work/py_native.db" keep_loss_for_logging
check "run py torch-native: the device's memory as torch says it is in the snapshot (the pickle has none; the replay's capacity)" \
  test "$(sql "$work/py_native.db" "select total_bytes from devices where device = 0")" = 2147483648
check "run py torch-native: the summary says the allocations were PyTorch's allocator's, imported" \
  grep -q "^  seen: 40 allocations (34.00 MiB) through PyTorch's allocator (its recorder's snapshot, imported)$" \
    "$work/py_native.out"

if [ -e "$cudart" ]; then
  # A library that calls cudaMalloc holding the GIL (CuPy does): its Python frames are recorded.
  FAKE_TORCH_HOLD_GIL=1 FAKE_TORCH_CUDART=$cudart run py_intercept 0 --mode intercept -o "$work/py_intercept.db" -- python3 "$train" 8
  check "run py intercept: torch's cudaMalloc calls are external segments" \
    test "$(sql "$work/py_intercept.db" "select count(*), source from segments where pool = 'external'")" = "8|cudaMalloc"
  leak_is py_intercept "$work/py_intercept.db" keep_loss_for_logging
  # PyTorch's recorder writes the blocks inside those segments beside it, and the summary covers both.
  check "run py intercept: PyTorch's blocks in py_intercept.torch.db, summarised too" \
    bash -c "test '$(sql "$work/py_intercept.torch.db" "select count(*) from meta where key = 'import_source'")' = 1 &&
      grep -q 'snapshot .*py_intercept.torch.db' '$work/py_intercept.out' && ! ls '$work'/*.pickle 2>/dev/null"
  leak_is py_intercept_blocks "$work/py_intercept.torch.db" keep_loss_for_logging
  if [ $audit = 1 ]; then
    FAKE_TORCH_CUDART=$cudart run py_audit 0 --mode audit -o "$work/py_audit.db" -- python3 "$train" 8
    check "run py audit: torch's cudaMalloc calls are external segments with their Python frames; its blocks in py_audit.torch.db" \
      bash -c "test '$(sql "$work/py_audit.db" "select count(*), source from segments where pool = 'external'")' = '8|cudaMalloc' &&
        test -s '$work/py_audit.torch.db'"
    leak_is py_audit "$work/py_audit.db" keep_loss_for_logging
  fi
  FAKE_TORCH_CUDART=$cudart run py_intercept_segments 0 --mode intercept --no-torch-blocks \
    -o "$work/py_intercept_segments.db" -- python3 "$train" 8
  check "run py intercept --no-torch-blocks: no PyTorch recorder, no second snapshot" \
    bash -c "test -s '$work/py_intercept_segments.db' && ! test -e '$work/py_intercept_segments.torch.db'"
  # One that releases the GIL first (PyTorch's ops do): the interposer does not take it back (the
  # caller may hold a lock a GIL holder waits for); gil_helper.c's thread reads its Python frames.
  FAKE_TORCH_CUDART=$cudart run py_intercept_nogil 0 --mode intercept -o "$work/py_intercept_nogil.db" -- python3 "$train" 8
  check "run py intercept, GIL released: recorded, each segment with the Python frames of its line" \
    test "$(sql "$work/py_intercept_nogil.db" "select count(distinct s.id), count(distinct case when f.kind = 'python'
      and f.name = 'keep_loss_for_logging' then s.id end) from segments s
      join stack_frames k on k.stack_id = (select stack_id from blocks where segment_id = s.id)
      join frames f on f.id = k.frame_id where s.pool = 'external'")" = "8|8"
  leak_is py_intercept_nogil "$work/py_intercept_nogil.db" keep_loss_for_logging
  run py_both 0 --mode allocator+intercept -o "$work/py_both.db" -- python3 "$train" 8 cudart "$cudart"
  check "run py allocator+intercept: torch's blocks in memsnap's pools, the direct cudaMalloc external" \
    test "$(sql "$work/py_both.db" "select group_concat(pool || ':' || ifnull(source, '-'), ',') from (select distinct pool, source from segments order by 1)")" = "external:cudaMalloc,small:-"
  leak_is py_both "$work/py_both.db" keep_loss_for_logging
  check "run py allocator+intercept: the replay holds the external block beside the allocator: its peaks are the recorded ones" \
    python3 -c "import json, subprocess
r = json.loads(subprocess.run(['$cli', 'replay', '--json', '$work/py_both.db'], capture_output=True, text=True).stdout)
d = r['devices'][0]
assert r['external_blocks'] == 1 and d['peak_reserved_bytes'] == d['recorded']['peak_reserved_bytes'] and \
  d['peak_allocated_bytes'] == d['recorded']['peak_allocated_bytes'] and d['device_allocs'] == d['recorded']['device_allocs'], r"
  check "run py allocator+intercept: the summary counts each path's allocations, and what the interposer holds" \
    bash -c "grep -q \"^  seen: 40 allocations (34.00 MiB) through memsnap's allocator; 1 allocation (3.00 MiB) through the interposer$\" \
      '$work/py_both.out' && grep -q \"^  the interposer's at the snapshot: 3.00 MiB, most from cudaMalloc in \" '$work/py_both.out'"
else
  echo "skip: intercept mode for Python needs $cudart"
fi

# The summary suggests the allocator setting the replay finds (the analysis's suggestions).
run py_suggest 0 -o "$work/py_suggest.db" -- python3 "$train" 8 frag
check "run py: the summary gives the exact PYTORCH_CUDA_ALLOC_CONF line the replay suggests" \
  grep -qE '^  suggestion: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \(peak reserved .*, 20.00 MiB \([0-9.]+%\) less\)$' "$work/py_suggest.out"
run py_nosuggest 0 --no-suggest -o "$work/py_nosuggest.db" -- python3 "$train" 8 frag
check "run py --no-suggest: no suggestion in the summary" bash -c "! grep -q 'suggestion' '$work/py_nosuggest.out'"
check "run py: no suggestion line when no setting saves 5%" bash -c "! grep -q 'suggestion' '$work/py_allocator.out'"

# ---- a Python program without torch: a library called through ctypes, no --mode -----------------
steps_lib=$build/tests/librun_steps.so
steps=$here/../data/run/steps.py
if [ -e "$steps_lib" ]; then
  run steps 0 -o "$work/steps.db" -- python3 "$steps" "$steps_lib" 12
  check "run steps: no torch, no --mode: allocator+intercept chosen, the snapshot written" \
    bash -c "grep -q 'mode allocator+intercept' '$work/steps.out' && test -s '$work/steps.db'"
  check "run steps: the summary says what was seen and through which path" \
    bash -c "grep -q '^  seen: 24 allocations (.*) through the interposer$' '$work/steps.out' &&
      grep -q \"the interposer's at the snapshot: 12.00 MiB, most from cudaMalloc in librun_steps.so\" '$work/steps.out'"
  leak_is steps "$work/steps.db" keep_for_later
  "$cli" analyze --json "$work/steps.db" >"$work/steps.json" 2>&1
  call_line=$(grep -n 'lib.steps_keep_for_later(' "$steps" | cut -d: -f1)
  check "run steps: the first leak grows 1 MiB an iteration, the iterations from the loop's line" python3 -c "
import json; a = json.load(open('$work/steps.json')); l = a['leaks'][0]
assert (l['kind'], l['bytes_per_iteration']) == ('growing', 1 << 20), l
assert a['summary']['iteration_source'] == 'loop' and len(a['iterations']) == 12, a['summary']"
  check "run steps: its full stack holds the Python line that calls the library (steps.py:$call_line)" python3 -c "
import json; l = json.load(open('$work/steps.json'))['leaks'][0]
py = [(f['name'], f['file'].rsplit('/', 1)[-1], f['line']) for f in l['full_stack'] if f['kind'] == 'python']
assert ('keep_for_later', 'steps.py', $call_line) in py, py
native = [f['name'] for f in l['full_stack'] if f['kind'] == 'native']
assert native and native[0] == 'steps_keep_for_later', native"
  # The auditor (no sanitizer: see the top), and RTLD_DEEPBIND, which AddressSanitizer refuses
  # ("RTLD_DEEPBIND flag which is incompatible with sanitizer runtime").
  if [ $audit = 1 ]; then
    # Through the auditor: the Python package's libmemsnap.so (the exit dump) is the program's copy,
    # where the interposer records, so the Python frames are named.
    run steps_audit 0 --mode audit -o "$work/steps_audit.db" -- python3 "$steps" "$steps_lib" 12
    check "run steps --mode audit: the same allocations, the leak at the Python line" \
      bash -c "grep -q '^  seen: 24 allocations (.*) through the interposer$' '$work/steps_audit.out' &&
        grep -q '      keep_for_later (steps.py:$call_line)' '$work/steps_audit.out'"
    # RTLD_DEEPBIND: the library's own libcudart comes before the global scope, LD_PRELOAD's
    # definitions with it; the dynamic linker still asks the auditor about each binding.
    run steps_deepbind_audit 0 --mode audit -o "$work/steps_deepbind_audit.db" -- python3 "$steps" --deepbind "$steps_lib" 12
    check "run steps, a library loaded with RTLD_DEEPBIND: seen through LD_AUDIT" \
      bash -c "grep -q '^  seen: 24 allocations (.*) through the interposer$' '$work/steps_deepbind_audit.out'"
    leak_is steps_deepbind_audit "$work/steps_deepbind_audit.db" keep_for_later
    run steps_deepbind_preload 1 --mode intercept -o "$work/steps_deepbind_preload.db" -- python3 "$steps" --deepbind "$steps_lib" 12
    check "run steps, a library loaded with RTLD_DEEPBIND: its calls bypass LD_PRELOAD (libcudart itself answers: error 35)" \
      bash -c "grep -q 'steps_work failed: error 35' '$work/steps_deepbind_preload.out' && test ! -e '$work/steps_deepbind_preload.db'"
  fi
  # The wait for the GIL raised from 100 ms: on a loaded machine a thread holding it may not run
  # for that long, and the helper gives up (the contended check below is that path).
  MEMSNAP_GIL_WAIT_MS=20000 run steps_threads 0 -o "$work/steps_threads.db" -- python3 "$steps" "$steps_lib" 6 threads 4
  check "run steps, 4 threads: every allocation and free has its thread's Python frames" \
    test "$(sql "$work/steps_threads.db" "select count(*), sum((select count(*) from stack_frames k join frames f
      on f.id = k.frame_id where k.stack_id = e.stack_id and f.kind = 'python' and f.name = 'run') = 1)
      from events e where e.kind in (1, 3)")" = "72|72"
  # MEMSNAP_GIL_WAIT_MS=0: a thread that released the GIL never waits for the helper (native frames
  # only); one that holds it (ctypes.PyDLL) still reads its own.
  for how in released held; do
    MEMSNAP_GIL_WAIT_MS=0 run "steps_nowait_$how" 0 -o "$work/steps_nowait_$how.db" -- python3 "$steps" "$steps_lib" 4 \
      $([ $how = held ] && echo held)
  done
  python_allocs="select count(*), sum((select count(*) from stack_frames k join frames f on f.id = k.frame_id
    where k.stack_id = e.stack_id and f.kind = 'python' and f.name in ('step', 'keep_for_later')) > 0) from events e
    where e.kind = 1"
  check "run steps MEMSNAP_GIL_WAIT_MS=0: the GIL released, 8 allocations without Python frames; held, all with them" \
    test "$(sql "$work/steps_nowait_released.db" "$python_allocs") $(sql "$work/steps_nowait_held.db" "$python_allocs")" = "8|0 8|8"
  # A thread allocates holding the library's lock while the main thread, holding the GIL, waits for
  # it: taking the GIL back inside cudaMalloc would hang; the helper gives up after its wait.
  run steps_contended 0 -o "$work/steps_contended.db" -- timeout 60 python3 "$steps" "$steps_lib" 4 contended
  check "run steps contended: no deadlock; the allocation made then has native frames only, the others Python ones" \
    test "$(sql "$work/steps_contended.db" "select group_concat(p, ',') from (select (select count(*) from stack_frames k
      join frames f on f.id = k.frame_id where k.stack_id = e.stack_id and f.kind = 'python') > 0 p from events e
      where e.kind = 1 order by e.id)")" = "1,1,1,1,1,1,1,1,0"
  # JAX: where the interposer records, XLA gets the allocator that allocates each array from the
  # driver, unless --keep-arena or the user chose one; the summary says which it had.
  jax_env=(env PYTHONPATH="$here/../data/fake_jax${PYTHONPATH:+:$PYTHONPATH}")
  "${jax_env[@]}" bash -c "cd '$work' && '$cli' run -o '$work/jax.db' -- python3 '$steps' '$steps_lib' 4 jax" >"$work/jax.out" 2>&1
  check "run jax: XLA_PYTHON_CLIENT_ALLOCATOR=platform, said in the summary" \
    bash -c "grep -q \"XLA's allocator would be platform\" '$work/jax.out' &&
      grep -q 'JAX: XLA allocated each array from the driver (XLA_PYTHON_CLIENT_ALLOCATOR=platform, set by memsnap run' '$work/jax.out'"
  "${jax_env[@]}" bash -c "cd '$work' && '$cli' run --keep-arena -o '$work/jax_arena.db' -- python3 '$steps' '$steps_lib' 4 jax" \
    >"$work/jax_arena.out" 2>&1
  check "run jax --keep-arena: XLA keeps its arena, and the summary says its arrays are not seen one by one" \
    bash -c "grep -q \"XLA's allocator would be default\" '$work/jax_arena.out' &&
      grep -q \"JAX: XLA's allocator 'default' suballocates\" '$work/jax_arena.out'"
  "${jax_env[@]}" XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async bash -c "cd '$work' && '$cli' run -o '$work/jax_user.db' -- \
    python3 '$steps' '$steps_lib' 4 jax" >"$work/jax_user.out" 2>&1
  check "run jax: the user's own XLA_PYTHON_CLIENT_ALLOCATOR is kept" \
    bash -c "grep -q \"XLA's allocator would be cuda_async\" '$work/jax_user.out' && grep -q \"allocator 'cuda_async'\" '$work/jax_user.out'"
  check "run jax: a program that does not import jax gets no JAX line" bash -c "! grep -q 'JAX:' '$work/steps.out'"
  check "run jax --mode allocator: no interposer, XLA's allocator left alone" \
    bash -c "'$cli' run -q --mode allocator -- python3 -c 'import os; assert \"XLA_PYTHON_CLIENT_ALLOCATOR\" not in os.environ'"
else
  echo "skip: the Python program without torch needs $steps_lib (the toolkit's libcudart.so)"
fi

# CuPy: in the allocator modes its arrays come from memsnap's allocator, each with its stack, unless
# --keep-arena keeps CuPy's own pool (whose segments alone the interposer would see).
cupy_env=(env PYTHONPATH="$here/../data/fake_cupy${PYTHONPATH:+:$PYTHONPATH}")
cupy_prog=$here/../data/run/cupy_steps.py
"${cupy_env[@]}" bash -c "cd '$work' && '$cli' run -o '$work/cupy.db' -- python3 '$cupy_prog' 6" >"$work/cupy.out" 2>&1
check "run cupy: exit 0, the program's output, the summary says CuPy allocates from memsnap's allocator" \
  bash -c "grep -q 'cupy_steps: 6 arrays kept' '$work/cupy.out' && grep -q \"CuPy: its arrays from memsnap's allocator\" '$work/cupy.out'"
check "run cupy: every array is an allocation of the snapshot, at the program's lines" \
  test "$(sql "$work/cupy.db" "select count(*) from events e where e.kind = 1 and exists (select 1 from stack_frames k
    join frames f on f.id = k.frame_id where k.stack_id = e.stack_id and f.file like '%cupy_steps.py')")" = 12
leak_is cupy "$work/cupy.db" "<module> (cupy_steps.py:11)"
check "run cupy: the first candidate grows by the array kept a step" \
  bash -c "grep -A1 '^leak candidates' '$work/cupy.analysis' | grep -q '1. growing: +1.00 MiB per iteration'"
"${cupy_env[@]}" bash -c "cd '$work' && '$cli' run --keep-arena -o '$work/cupy_pool.db' -- python3 '$cupy_prog' 6" >"$work/cupy_pool.out" 2>&1
check "run cupy --keep-arena: CuPy keeps its pool, no CuPy line" \
  bash -c "grep -q 'cupy_steps: 6 arrays kept' '$work/cupy_pool.out' && ! grep -q 'CuPy:' '$work/cupy_pool.out'"

run py_raise 1 -o "$work/py_raise.db" -- python3 "$train" 8 raise
check "run py raise: an uncaught exception still leaves the snapshot" test -s "$work/py_raise.db"
run py_exit 9 -o "$work/py_exit.db" -- python3 "$train" 8 _exit 9
check "run py os._exit: the snapshot is written first" test "$(sql "$work/py_exit.db" "select count(*) from blocks where state = 'allocated'")" = 8
run py_native_exit 9 --mode torch-native -o "$work/py_native_exit.db" -- python3 "$train" 8 _exit 9
check "run py torch-native os._exit: the snapshot is written first" test -s "$work/py_native_exit.db"
run py_fork 0 -o "$work/fork-%p.db" -- python3 "$train" 8 fork
check "run py fork: the forked child (os._exit) writes no snapshot of its parent's" test "$(ls "$work"/fork-*.db | wc -l)" = 1
# Children forked (no exec) before the parent touched the device record on their own: memsnap
# did not start the device in the parent (memsnap.enable() reads only the options).
run py_forked 0 -o "$work/forked-%p.db" -- python3 "$train" 8 forked 2
check "run py forked: the parent and its two forked children each write a snapshot" \
  test "$(ls "$work"/forked-*.db | wc -l)" = 3
for db in "$work"/forked-*.db; do leak_is "py_forked_$(basename "$db" .db)" "$db" keep_loss_for_logging; done
run py_workers 0 -o "$work/workers-%p.db" -- python3 "$train" 8 workers 2
check "run py workers: the program and its 2 spawned workers, one snapshot each" test "$(ls "$work"/workers-*.db | wc -l)" = 3
check "run py workers: the command that analyzes them side by side names all three" \
  test "$(grep '^all of them: memsnap analyze' "$work/py_workers.out" | grep -o 'workers-[0-9]*\.db' | wc -l)" = 3
run py_workers4 0 -o "$work/workers4-%p.db" -- python3 "$train" 8 workers 3
check "run py 4 processes: the summary stays on one screen (two lines a snapshot)" \
  bash -c "grep -q '^4 snapshots' '$work/py_workers4.out' && test \$(grep -c '^/.*workers4-[0-9]*.db: peak .* leak: growing' '$work/py_workers4.out') = 4 &&
    test \$(wc -l <'$work/py_workers4.out') -lt 20"
for db in "$work"/workers-*.db; do leak_is "py_workers_$(basename "$db" .db)" "$db" keep_loss_for_logging; done
run py_launch 0 -o "$work/launch-%r.db" -- python3 "$here/../data/run/launch.py" 2 8
check "run py launcher: rank 0 and 1 each their file; the launcher, which used no device, none over rank 0's" \
  bash -c "test \"\$(ls '$work'/launch-*.db | wc -l)\" = 2 && test \"\$(grep -c '^snapshot ' '$work/py_launch.out')\" = 2"
for r in 0 1; do leak_is "py_launch_rank$r" "$work/launch-$r.db" keep_loss_for_logging; done
RANK=3 run py_rank 0 --html -o "$work/rank-%r.db" -- python3 "$train" 8
check "run py %r and --html: rank-3.db and its page" bash -c "test -s '$work/rank-3.db' && grep -q '<html' '$work/rank-3.html' &&
  grep -q 'page:   $work/rank-3.html' '$work/py_rank.out'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
