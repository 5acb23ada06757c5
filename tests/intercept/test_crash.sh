#!/usr/bin/env bash
# test_crash.sh: nothing lost when the program dies, and memory watched while it runs
# (docs/recover.md), on the simulated device, with no GPU:
#   - a CUDA program (tests/intercept/run_cudart.c) that keeps 300 blocks of 64 KiB and then dies by
#     SIGKILL, a segmentation fault, abort or SIGTERM under `memsnap run`: the snapshot holds the
#     300 blocks, the summary says how and when it died, and so does the snapshot's own report
#     (memsnap analyze, text and JSON; an exit snapshot's and a dump's say nothing of a death), and
#     no live mapping is left;
#   - `memsnap top --once --json` beside one that holds 400 blocks; `memsnap dump PID`; `memsnap top`
#     in tmux (the pane captured: the numbers and the leaking function on screen, q quits);
#   - `memsnap recover`: a mapping from another version, and a damaged one, refused;
#   - KILLS kills (default 10; `make stress`: 100) at random instants of a recorded stress run
#     (tests/recorder/crash_stress.c, seeded by SEED): every recovered snapshot opens, analyzes,
#     and holds every allocation and free that the program had counted as done; where the ring
#     wrapped 10 times and more, on 2 devices, killed in the middle of the state's updates, the
#     program's state, and the dump it wrote just before the kill (random kills, below).
# usage: test_crash.sh BUILD_DIR   (prints "N passed, N failed")
set -u
build=$(cd "$1" && pwd)
cli=$build/memsnap
prog=$build/tests/run_cudart
stress=$build/tests/crash_stress
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(cd "$(dirname "$0")" && pwd)/run_checks.sh"
export MEMSNAP_BACKEND=sim MEMSNAP_SIM_CAPACITY=1G MEMSNAP_LIVE_DIR=$work/live
# under make sanitize, memsnap's own programs with the sanitizer's runtime first (they are built with
# it; the system's tools are not: pgrep hangs and dd aborts with it preloaded), and a segfault left
# to kill the program (the sanitizer's own handler would turn it into an exit)
pre=(env)
[ -n "${PY_PRELOAD:-}" ] && pre=(env LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0:handle_segv=0")
clis="'$cli'"
[ -n "${PY_PRELOAD:-}" ] && clis="env LD_PRELOAD='$PY_PRELOAD' ASAN_OPTIONS=detect_leaks=0 '$cli'"
mkdir -p "$work/live"

# start NAME ARGS...: memsnap run ARGS in the background, output in $work/NAME.out; waits for the
# program's "ready" and sets $runner (memsnap run) and $child (the program).
start() {
  local name=$1
  shift
  (cd "$work" && exec "${pre[@]}" "$cli" run --no-suggest "$@") >"$work/$name.out" 2>&1 &
  runner=$!
  child=
  for _ in $(seq 1 300); do
    grep -q '^ready' "$work/$name.out" 2>/dev/null && child=$(env -u LD_PRELOAD pgrep -P "$runner" | head -n 1) && [ -n "$child" ] && return 0
    sleep 0.1
  done
  return 1
}

if [ ! -x "$prog" ]; then
  echo "skip: $prog was not built (no libcudart.so in the CUDA toolkit)"
else
  # ---- death by a signal under memsnap run ----------------------------------------------------
  for how in KILL SEGV ABRT TERM; do
    case $how in
      KILL | TERM) start "die_$how" -o "$work/die_$how.db" -- "$prog" 300 wait || bad "die $how: the program never got ready" "$work/die_$how.out"
        kill -"$how" "$child"
        wait "$runner" ;;
      SEGV) (cd "$work" && "${pre[@]}" "$cli" run --no-suggest -o "$work/die_$how.db" -- "$prog" 300 segv) >"$work/die_$how.out" 2>&1 ;;
      ABRT) (cd "$work" && "${pre[@]}" "$cli" run --no-suggest -o "$work/die_$how.db" -- "$prog" 300 abort) >"$work/die_$how.out" 2>&1 ;;
    esac
    check "die $how: the snapshot holds all 300 blocks of 64 KiB" \
      test "$(sql "$work/die_$how.db" "select count(*) from blocks where state = 'allocated' and size = 65536")" = 300
    if [ "$how" = SEGV ] && [ -n "${MEMSNAP_TESTS_SANITIZER:-}" ]; then
      # the sanitizer's instrumentation reports the bad write and exits: no SIGSEGV to tell of
      echo "skip: die SEGV's cause under a sanitizer (it turns the segfault into an exit); make test checks it"
    else
      check "die $how: the summary says it was killed by SIG$how, when, and how long after its last allocation" \
        grep -q "killed by SIG$how at [0-9.]* [mun]*s, [0-9.]* [mun]*s after its last allocation" "$work/die_$how.out"
      check "die $how: the snapshot says how it ended (meta ended, end_signal)" \
        test "$(sql "$work/die_$how.db" "select value from meta where key in ('ended', 'recovered') order by key")" = "killed by SIG$how
1"
      # the snapshot's own report says it, in the summary's words: a day later, no summary at hand
      said=$(grep -o "killed by SIG$how at [0-9.]* [mun]*s, [0-9.]* [mun]*s after its last allocation" "$work/die_$how.out")
      check "die $how: memsnap analyze says how and when it died near the top, as memsnap run's summary did" \
        bash -c "$clis analyze '$work/die_$how.db' | head -4 | grep -qxF '  died: $said (this snapshot was written from its live mapping afterwards)'"
      check "die $how: analyze --json's summary.death: the signal, when, how long after the last allocation" \
        bash -c "$clis analyze --json '$work/die_$how.db' | python3 -c \"
import json, sys
d = json.load(sys.stdin)['summary']['death']
assert d['description'] == '$said' and d['signal_name'] == 'SIG$how' and d['how'] == 'killed by SIG$how' and d['exit_status'] is None, d
assert d['end_ns'] > d['last_allocation_ns'] > 0 and d['after_last_allocation_ns'] == d['end_ns'] - d['last_allocation_ns'], d\""
    fi
    check "die $how: the analysis names the leak at keep_for_later" \
      bash -c "$clis analyze '$work/die_$how.db' | grep -q keep_for_later"
    check "die $how: no live mapping left behind" bash -c "! ls '$work/live' | grep -q ."
  done

  # ---- death of a process memsnap run did not start itself (torchrun's ranks) ------------------
  # the program runs under a shell that stays (memsnap run's child is the shell): how it died is
  # what its mapping says, the fatal signal it caught and when; SIGKILL cannot be caught
  for how in TERM KILL; do
    start "grand_$how" -o "$work/grand_$how-%p.db" -- sh -c "'$prog' 300 wait; echo shell-done" ||
      bad "grandchild $how: the program never got ready" "$work/grand_$how.out"
    grand=$(env -u LD_PRELOAD pgrep -P "$child" | head -n 1)
    kill -"$how" "$grand"
    wait "$runner"
    db=$work/grand_$how-$grand.db
    check "grandchild $how: its snapshot holds all 300 blocks" \
      test "$(sql "$db" "select count(*) from blocks where state = 'allocated' and size = 65536")" = 300
    if [ "$how" = TERM ]; then
      check "grandchild TERM: the summary says it was killed by SIGTERM, when, and how long after its last allocation" \
        grep -q "process $grand (run_cudart) killed by SIGTERM at [0-9.]* [mun]*s, [0-9.]* [mun]*s after its last allocation" "$work/grand_$how.out"
      check "grandchild TERM: the snapshot says so (meta ended)" test "$(sql "$db" "select value from meta where key = 'ended'")" = "killed by SIGTERM"
    else
      check "grandchild KILL: the summary says SIGKILL or _exit (no signal it watched), and its last event" \
        grep -q "process $grand (run_cudart) killed by SIGKILL or ended by _exit, or by a signal it did not watch (when is not known; its last event at" "$work/grand_$how.out"
      check "grandchild KILL: the report says the same of its snapshot; JSON: no signal, no time known" \
        bash -c "$clis analyze '$db' | grep -q '^  died: killed by SIGKILL or ended by _exit, or by a signal it did not watch (when is not known; its last event at' &&
          $clis analyze --json '$db' | python3 -c \"
import json, sys
d = json.load(sys.stdin)['summary']['death']
assert d['signal'] is None and d['end_ns'] is None and d['after_last_allocation_ns'] is None and d['last_event_ns'] > 0, d\""
    fi
    check "grandchild $how: no live mapping left behind" bash -c "! ls '$work/live' | grep -q ."
  done

  # a grandchild's own fault: the handler returns and the fault repeats under the default action,
  # so the process dies of SIGSEGV (its parent, the shell, says so) and the mapping has it
  if [ -z "${MEMSNAP_TESTS_SANITIZER:-}" ]; then
    (cd "$work" && "${pre[@]}" "$cli" run --no-suggest -o "$work/grand_SEGV-%p.db" -- sh -c "'$prog' 300 segv; echo shell-saw \$?") \
      >"$work/grand_SEGV.out" 2>&1
    db=$(ls "$work"/grand_SEGV-*.db 2>/dev/null | head -n 1)
    check "grandchild SEGV: it dies of SIGSEGV (the shell saw 139), its snapshot holds the 300 blocks, the summary says SIGSEGV and when" \
      bash -c "grep -q 'shell-saw 139' '$work/grand_SEGV.out' &&
        grep -q 'killed by SIGSEGV at [0-9.]* [mun]*s, [0-9.]* [mun]*s after its last allocation' '$work/grand_SEGV.out' &&
        test \"$(sql "${db:-/nonexistent}" "select count(*) from blocks where state = 'allocated' and size = 65536")\" = 300"
  fi

  # an exit snapshot that cannot be written: the live mapping, the history's only copy, stays
  (cd "$work" && "${pre[@]}" "$cli" run --no-suggest -o "$work/no/such/dir/x.db" -- "$prog" 300) >"$work/exit_fail.out" 2>&1
  kept=$(ls "$work"/live/memsnap-*.live 2>/dev/null | head -n 1)
  "${pre[@]}" "$cli" recover -o "$work/exit_fail.db" ${kept:-none} >>"$work/exit_fail.out" 2>&1
  check "exit snapshot unwritable: the mapping is kept and named, and memsnap recover writes its 300 blocks" \
    bash -c "grep -q 'kept: memsnap recover ' '$work/exit_fail.out' &&
      test \"$(sql "$work/exit_fail.db" "select count(*) from blocks where state = 'allocated' and size = 65536")\" = 300 &&
      ! ls '$work/live' | grep -q ."

  # an exit snapshot says nothing of a death
  (cd "$work" && "${pre[@]}" "$cli" run --no-suggest -o "$work/exit_ok.db" -- "$prog" 300) >"$work/exit_ok.out" 2>&1
  check "exit snapshot: its report says nothing of a death (no 'died:' line; JSON summary.death null)" \
    bash -c "$clis analyze '$work/exit_ok.db' >'$work/exit_ok.txt' && ! grep -q 'died' '$work/exit_ok.txt' &&
      $clis analyze --json '$work/exit_ok.db' | python3 -c \"import json, sys; d = json.load(sys.stdin)['summary']; assert 'death' in d and d['death'] is None\""

  # ---- live: top, dump, tmux -----------------------------------------------------------------
  # single-threaded, it answers `memsnap dump` only when asked to (MEMSNAP_LIVE_WATCH=1)
  if MEMSNAP_LIVE_WATCH=1 start live -o "$work/live-%p.db" -- "$prog" 400 wait; then
    "${pre[@]}" "$cli" top --once --json "$child" >"$work/top.json" 2>&1
    check "top --once --json: allocated_bytes at least 400 x 64 KiB, and the fields scripts read" \
      python3 -c "import json; t = json.load(open('$work/top.json'))
assert t['pid'] == $child and t['program'] == 'run_cudart' and t['allocated_bytes'] >= 400 * 65536, t
assert t['reserved_bytes'] >= t['allocated_bytes'] and t['peak_allocated_bytes'] > 0 and t['peak_reserved_bytes'] > 0, t
assert t['iterations'] >= 2 and 'keep_for_later' in t['growing'][0]['where'], t"
    "${pre[@]}" "$cli" top --once --json >"$work/top_any.json" 2>&1
    check "top without a PID picks the one recorded program" \
      python3 -c "import json; t = json.load(open('$work/top_any.json')); assert t['pid'] == $child, t"
    "${pre[@]}" "$cli" dump "$child" >"$work/dump.out" 2>&1
    check "dump PID: the program writes a snapshot of its 400 blocks and the path is printed" \
      bash -c "test \"\$(cat '$work/dump.out')\" = '$work/live-$child.db' &&
        test \"\$(sqlite3 '$work/live-$child.db' \"select count(*) from blocks where state = 'allocated' and size = 65536\")\" = 400"
    check "dump PID: the dump's report says nothing of a death" \
      bash -c "$clis analyze --json '$work/live-$child.db' | python3 -c \"import json, sys; assert json.load(sys.stdin)['summary']['death'] is None\""
    if command -v tmux >/dev/null; then
      sock=$work/tmux.sock
      env -u LD_PRELOAD tmux -S "$sock" new-session -d -s top -x 132 -y 40 \
        "$clis top $child; echo top-ended; sleep 30"
      sleep 3
      env -u LD_PRELOAD tmux -S "$sock" capture-pane -p -t top >"$work/pane1.txt" 2>&1
      sleep 1.5
      env -u LD_PRELOAD tmux -S "$sock" capture-pane -p -t top >"$work/pane2.txt" 2>&1
      check "top in tmux: the pane shows the program, its allocated memory and the leaking site" \
        bash -c "grep -q 'run_cudart pid $child' '$work/pane1.txt' && grep -q 'allocated 25.00 MiB' '$work/pane1.txt' &&
          grep -q 'keep_for_later' '$work/pane1.txt' && grep -q 'growing fastest' '$work/pane1.txt'"
      check "top in tmux: redrawn once a second (the clock moved)" \
        bash -c "! cmp -s <(head -n 1 '$work/pane1.txt') <(head -n 1 '$work/pane2.txt')"
      env -u LD_PRELOAD tmux -S "$sock" send-keys -t top q
      sleep 1
      env -u LD_PRELOAD tmux -S "$sock" capture-pane -p -t top >"$work/pane3.txt" 2>&1
      check "top in tmux: q quits (the terminal is given back)" grep -q top-ended "$work/pane3.txt"
      env -u LD_PRELOAD tmux -S "$sock" kill-server 2>/dev/null
    else
      echo "skip: tmux is not installed (scripts/install-deps.sh installs it)"
    fi
    kill -TERM "$child"
    wait "$runner"
    check "live: the program ended by SIGTERM afterwards has its snapshot, and no mapping is left" \
      bash -c "grep -q 'killed by SIGTERM' '$work/live.out' && ! ls '$work/live' | grep -q ."
  else
    bad "live: the program never got ready" "$work/live.out"
  fi
fi

# ---- refused mappings ------------------------------------------------------------------------
MEMSNAP_RECORD=1 "${pre[@]}" "$stress" "$work/p0" 200 1 >"$work/s0.out" 2>&1 &
sp=$!
for _ in $(seq 1 100); do grep -q done "$work/s0.out" && break; sleep 0.05; done
kill -KILL "$sp"
wait "$sp" 2>/dev/null
cp "$work/live/memsnap-$sp.live" "$work/other.live"
printf '\x07\x00\x00\x00' | dd of="$work/other.live" bs=1 seek=8 conv=notrunc status=none
"${pre[@]}" "$cli" recover --keep -o "$work/other.db" "$work/other.live" >"$work/other.out" 2>&1
check "recover: a mapping of another version is refused, naming both versions (exit 1)" \
  bash -c "test $? -eq 1 && grep -q 'another version of memsnap (live mapping version 7; this memsnap reads version 2)' '$work/other.out' && test ! -e '$work/other.db'"
cp "$work/live/memsnap-$sp.live" "$work/damaged.live"
printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$work/damaged.live" bs=1 seek=32 conv=notrunc status=none
"${pre[@]}" "$cli" recover --keep -o "$work/damaged.db" "$work/damaged.live" >"$work/damaged.out" 2>&1
check "recover: a damaged mapping is refused with a clear error (exit 1)" \
  bash -c "test $? -eq 1 && grep -q '^error: recover: .* is refused: ' '$work/damaged.out' && test ! -e '$work/damaged.db'"
head -c 100 /dev/urandom >"$work/junk.live"
check "recover: a file that is not a mapping is refused" bash -c "! $clis recover '$work/junk.live' 2>&1 | grep -q recovered"
"${pre[@]}" "$cli" recover -o "$work/s0.db" "$work/live/memsnap-$sp.live" >"$work/s0r.out" 2>&1
check "recover FILE: writes the snapshot, says so and removes the mapping" \
  bash -c "grep -q '^recovered $work/s0.db: process $sp (crash_stress)' '$work/s0r.out' && test ! -e '$work/live/memsnap-$sp.live' &&
    test \"\$(sqlite3 '$work/s0.db' 'select count(*) from events where kind = 1')\" = 200"
said=$(sed -n "s/^recovered .*: process $sp (crash_stress) //p" "$work/s0r.out")
check "recover FILE: the recovered snapshot's report says how the process died, in memsnap recover's words ($said)" \
  bash -c "test -n \"$said\" && $clis analyze '$work/s0.db' | head -4 | grep -qxF '  died: $said (this snapshot was written from its live mapping afterwards)'"

# ---- random kills of a recorded stress run ----------------------------------------------------
# Three kinds of run in turn, all killed from outside:
#   events  a ring that never wraps (60000 events), SIGKILL, SIGSEGV, SIGBUS, SIGABRT or SIGTERM at
#           a random instant: every allocation and free the program had counted is in the snapshot
#   state   a ring of 4000 events that wraps 10 times and more, 4 threads on 2 simulated devices,
#           each update of the live mapping's state stalled 1 ms half way (so many kills land in a
#           torn one; a longer stall lets the other threads claim more than half a ring meanwhile,
#           and the older state's events leave the ring: recovered_state window, docs/recover.md),
#           SIGKILL at a random instant: the recovered state is the mapping's
#           (recovered_state exact), its statistics add up to its blocks and segments, each device
#           holds what the program had counted (give or take one allocation or free in flight a
#           thread), and every block it kept is told a parameter or an optimizer's state
#   dump    a ring of 2000 (every other one with expandable segments), stopped at a random pair: every
#           thread parked, a memsnap_dump written, the
#           state taken again (stalled 30 ms) and SIGKILL within it: the recovered snapshot equals
#           the dump in allocated and reserved bytes, statistics, segments, blocks (each allocated
#           one's address, size, stack, role and module) and categories
kills=${KILLS:-10}
seed=${SEED:-44}
RANDOM=$seed
good=0
torn=0 # recovered from the older state: killed while it wrote the newer one
# state_check PROGRESS DB: the state checks of a wrapped run
state_check() {
  python3 - "$1" "$2" <<'PY'
import sqlite3, struct, sys
v = struct.unpack('128Q', open(sys.argv[1], 'rb').read(1024))
db = sqlite3.connect(sys.argv[2])
meta = dict(db.execute('select key, value from meta').fetchall())
# exact; or, killed while writing its first state, every event since the start (none dropped)
assert meta.get('recovered_state') == 'exact' or (meta.get('recovered_state') == 'events' and
                                                  int(meta['dropped_events']) == 0), meta.get('recovered_state')
stat = {(d, k): val for d, k, val in db.execute('select device, key, value from stats')}
for dev in (0, 1):
    threads = [t for t in range(4) if v[4 * t + 3] == dev and v[4 * t] > 0]
    if not threads:
        continue
    held = sum(v[4 * t + 2] for t in threads)
    kept = sum(v[4 * t] - v[4 * t + 1] for t in threads)
    alloc = db.execute("select count(*), coalesce(sum(b.size), 0), coalesce(sum(b.requested_size), 0), count(b.role) "
                       "from blocks b join segments g on g.id = b.segment_id where g.device = ? and b.state = 'allocated'",
                       (dev,)).fetchone()
    reserved = db.execute('select coalesce(sum(size), 0), count(*) from segments where device = ?', (dev,)).fetchone()
    assert stat[(dev, 'allocated_bytes.all.current')] == alloc[1], (dev, stat[(dev, 'allocated_bytes.all.current')], alloc)
    assert stat[(dev, 'reserved_bytes.all.current')] == reserved[0], (dev, reserved)
    assert stat[(dev, 'segment.all.current')] == reserved[1], (dev, reserved)
    assert reserved[0] >= alloc[1] and stat[(dev, 'reserved_bytes.all.peak')] >= reserved[0], (dev, reserved, alloc)
    assert abs(alloc[2] - held) <= len(threads) * (2 << 20), (dev, alloc, held)  # one op in flight a thread
    assert abs(alloc[0] - kept) <= len(threads), (dev, alloc, kept)
    assert alloc[3] >= kept - len(threads), (dev, alloc, kept)  # each block kept is told (one in flight a thread)
PY
}
# dump_check DUMP DB: the recovered snapshot equals the dump
dump_check() {
  python3 - "$1" "$2" <<'PY' && bash -c "diff <($clis analyze --json '$1' | python3 -c 'import json, sys; print(json.load(sys.stdin)[\"categories\"])' 2>&1) \
    <($clis analyze --json '$2' | python3 -c 'import json, sys; print(json.load(sys.stdin)[\"categories\"])' 2>&1)"
import sqlite3, sys
d, r = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
assert dict(r.execute('select key, value from meta').fetchall()).get('recovered_state') == 'exact'
keys = "('allocated_bytes.all.current', 'allocated_bytes.all.peak', 'reserved_bytes.all.current', " \
       "'reserved_bytes.all.peak', 'segment.all.current', 'allocation.all.current', 'num_ooms')"
q = {'stats': 'select device, key, value from stats where key in ' + keys + ' order by 1, 2',
     'segments': 'select device, address, size, pool, stream, expandable from segments order by device, address',
     'blocks': 'select g.device, b.address, b.size, b.requested_size, b.state, b.role, l.text from blocks b '
               'join segments g on g.id = b.segment_id left join labels l on l.id = b.module_label_id '
               'order by g.device, b.address',
     'stacks': "select count(distinct b.stack_id) from blocks b where b.state = 'allocated'"}
for name, sql in q.items():
    a, b = d.execute(sql).fetchall(), r.execute(sql).fetchall()
    assert a == b, (name, len(a), len(b), [x for x in a if x not in b][:3], [x for x in b if x not in a][:3])
assert d.execute("select count(*) from blocks where role is not null").fetchone()[0] > 100
# roles told before the ring wrapped 10 times and more: their tensor events long gone, kept in both
meta = dict(d.execute('select key, value from meta').fetchall())
assert int(meta['dropped_events']) > 10 * int(meta['max_entries']), meta['dropped_events']
old = r.execute("select count(*) from blocks b where b.role is not null and not exists "
                "(select 1 from events e join event_kinds k on k.id = e.kind where k.name = 'tensor' and e.address = b.address)").fetchone()[0]
assert old > 50, old
PY
}
# Whether a state kill lands in an update is timing (a 1 ms stall in each): with 10 kills (three
# of them state kills) none did in 2 of 5 runs on a loaded 2-core machine, and `make stress` saw 2
# of its 33 state kills land in one. So when none of the
# planned kills did, more state kills follow, up to 60, until one does; each is checked as the
# others, and the check below still asks for one.
extra=0
i=0
while :; do
  i=$((i + 1))
  if [ "$i" -le "$kills" ]; then
    kind=$(echo events state dump | cut -d' ' -f$((i % 3 + 1)))
  elif [ "$kills" -ge 10 ] && [ "$torn" -eq 0 ] && [ "$extra" -lt 60 ]; then
    kind=state extra=$((extra + 1))
  else
    break
  fi
  sig=KILL
  [ "$kind" = events ] && sig=$(echo KILL SEGV BUS ABRT TERM | cut -d' ' -f$((RANDOM % 5 + 1)))
  delay=$(printf '0.%03d' $((RANDOM % 400)))
  case $kind in
    events) MEMSNAP_RECORD=1 MEMSNAP_MAX_ENTRIES=60000 "${pre[@]}" "$stress" "$work/prog$i" 4000 2 >/dev/null 2>&1 & ;;
    state) MEMSNAP_RECORD=1 MEMSNAP_MAX_ENTRIES=4000 MEMSNAP_SIM_DEVICES=2 MEMSNAP_TEST_STATE_STALL_MS=1 \
             "${pre[@]}" "$stress" "$work/prog$i" 4000 4 2 >/dev/null 2>&1 & ;;
    dump) MEMSNAP_RECORD=1 MEMSNAP_MAX_ENTRIES=2000 MEMSNAP_SIM_DEVICES=2 CRASH_STRESS_STALL_MS=30 \
            MEMSNAP_EXPANDABLE_SEGMENTS=$((i / 3 % 2)) \
            "${pre[@]}" "$stress" "$work/prog$i" 4000 4 2 $((RANDOM % 900 + 3000)) "$work/d$i.db" >/dev/null 2>&1 & ;;
  esac
  sp=$!
  if [ "$kind" = dump ]; then # once it has dumped: within the state's update after it
    for _ in $(seq 1 1000); do
      [ "$(od -An -t u8 -j 2040 -N 8 "$work/prog$i" 2>/dev/null | tr -d ' ')" = 1 ] && break
      sleep 0.01
    done
    delay=$(printf '0.%03d' $((RANDOM % 25)))
  fi
  sleep "$delay"
  kill -"$sig" "$sp"
  wait "$sp" 2>/dev/null
  what="kill $i ($kind, SIG$sig at ${delay} s)"
  if [ ! -e "$work/live/memsnap-$sp.live" ] && [ "$kind" != dump ] && python3 -c 'import os, struct, sys
p = sys.argv[1]
sys.exit(0 if not os.path.exists(p) or os.path.getsize(p) < 128 or sum(struct.unpack("16Q", open(p, "rb").read(128))[0::4]) == 0 else 1)' \
    "$work/prog$i"; then
    good=$((good + 1)) # killed before it recorded anything (starting up): nothing completed, nothing to recover
    "${pre[@]}" "$cli" recover >/dev/null 2>&1 # (it sweeps a mapping the kill left half made: memsnap-PID.live.new)
    rm -f "$work/prog$i"
    continue
  fi
  if ! "${pre[@]}" "$cli" recover -o "$work/k$i.db" "$work/live/memsnap-$sp.live" >"$work/k$i.out" 2>&1; then
    bad "$what: recover failed" "$work/k$i.out"
    continue
  fi
  if [ "$kind" = events ] && ! python3 - "$work/prog$i" "$work/k$i.db" >"$work/k$i.check" 2>&1 <<'PY'
import sqlite3, struct, sys
v = struct.unpack('8Q', open(sys.argv[1], 'rb').read(64))
allocs, frees = v[0] + v[4], v[1] + v[5]
db = sqlite3.connect(sys.argv[2])
got = dict(db.execute('select kind, count(*) from events group by kind').fetchall())
dropped = int(db.execute("select value from meta where key = 'dropped_events'").fetchone()[0])
assert dropped <= 2, dropped  # an event in flight a thread, torn by the kill: dropped, never read
assert got.get(1, 0) >= allocs and got.get(3, 0) >= frees, (got, allocs, frees)
assert got.get(1, 0) <= allocs + 2 and got.get(3, 0) <= frees + 2, (got, allocs, frees)  # at most one in flight a thread
live = db.execute("select count(*) from blocks where state = 'allocated'").fetchone()[0]
# a free in flight at the kill (requested, not completed) may count either way
assert got.get(1, 0) - got.get(2, 0) <= live <= got.get(1, 0) - got.get(3, 0), (live, got)
PY
  then
    bad "$what: the snapshot lacks events the program had completed" "$work/k$i.check"
  elif [ "$kind" = state ] && ! state_check "$work/prog$i" "$work/k$i.db" >"$work/k$i.check" 2>&1; then
    bad "$what: the recovered state is not the program's" "$work/k$i.check"
  elif [ "$kind" = dump ] && ! dump_check "$work/d$i.db" "$work/k$i.db" >"$work/k$i.check" 2>&1; then
    bad "$what: the recovered snapshot is not its dump" "$work/k$i.check"
  elif ! "${pre[@]}" "$cli" analyze "$work/k$i.db" >/dev/null 2>"$work/k$i.err"; then
    bad "$what: the snapshot does not analyze" "$work/k$i.err"
  else
    good=$((good + 1))
    [ "$(sql "$work/k$i.db" "select value from meta where key = 'recovered_state_torn'")" = 1 ] && torn=$((torn + 1))
  fi
  rm -f "$work/k$i.db" "$work/d$i.db" "$work/prog$i"
done
check "random kills: $good of $((kills + extra)) recovered snapshots open, analyze, hold every completed event, the program's state, or its dump (seed $seed)" \
  test "$good" -eq $((kills + extra))
echo "random kills: $torn of $((kills + extra)) killed in the middle of a state's update (the older state used; $extra state kills added)"
[ "$kills" -ge 10 ] && check "random kills: some ($torn) killed in the middle of a state's update" test "$torn" -gt 0
check "random kills: no live mapping left behind" bash -c "! ls -la '$work/live' | grep 'memsnap-'"

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
