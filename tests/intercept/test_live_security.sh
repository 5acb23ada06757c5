#!/usr/bin/env bash
# test_live_security.sh: the live mapping made and read safely in a folder other users can write
# (docs/RELIABILITY.md, "Security"; issue 54), as root acting as other users with setpriv (uid
# 65534 "nobody" plants; uid 65533 is a victim that uses the default folder /dev/shm/memsnap-65533):
#   - the default per-user folder: made 0700, the mapping in it; a link, another user's folder or
#     a folder others may write planted there: refused with the reason, the program records on;
#   - a link or another user's file planted at each name the process uses (memsnap-PID.live.new,
#     memsnap-PID.live, the run manifest) in a shared sticky MEMSNAP_LIVE_DIR: the link's target
#     untouched, the planted file receives nothing, the recording refused with the reason;
#   - MEMSNAP_LIVE_DIR world-writable without the sticky bit, another user's, or a link to another
#     user's folder: refused;
#   - the readers: another user's mapping refused by recover (with FILE, and not taken without),
#     not listed by top, refused by top PID and dump; recover --any-owner reads it on purpose and
#     keeps it; a link refused; a truncated mapping refused, no crash.
# The recorded program is tests/recorder/crash_stress.c on the simulated device.
# usage: test_live_security.sh BUILD_DIR   (prints "N passed, N failed")
set -u
build=$(cd "$1" && pwd)
cli=$build/memsnap
stress=$build/tests/crash_stress
work=$(mktemp -d)
victim_default=/dev/shm/memsnap-65533
trap 'rm -rf "$work" "$victim_default"' EXIT
. "$(cd "$(dirname "$0")" && pwd)/run_checks.sh"
export MEMSNAP_BACKEND=sim MEMSNAP_SIM_CAPACITY=1G
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
  echo "skip: needs root and setpriv (to act as other users)"
  echo "0 passed, 0 failed"
  exit 0
fi
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
as_victim() { setpriv --reuid=65533 --regid=65533 --clear-groups "$@"; }
chmod 755 "$work"
mkdir -m 1777 "$work/shared" # like /dev/shm, /tmp
mkdir -m 777 "$work/scratch" # the victim's progress files and snapshots
printf precious >"$work/precious"
chmod 644 "$work/precious"
# launch.sh PLANT CMD...: runs PLANT (shell code) as nobody with $1 the pid CMD will have, then execs CMD
cat >"$work/launch.sh" <<'EOF'
#!/bin/sh
plant=$1
shift
setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "$plant" plant $$
exec "$@"
EOF
chmod 755 "$work/launch.sh"
export work

# record NAME DIR PLANT [WHO]: crash_stress recording into DIR (MEMSNAP_LIVE_DIR; "" the default
# folder) after PLANT, as root (or WHO: victim, nobody); waits for its "done" (output in
# $work/NAME.out) and sets $rp to its pid. The caller kills it.
record() {
  local name=$1 dir=$2 plant=$3 who=${4:-root}
  local as=()
  [ "$who" = victim ] && as=(setpriv --reuid=65533 --regid=65533 --clear-groups)
  [ "$who" = nobody ] && as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  if [ -n "$dir" ]; then
    D=$dir MEMSNAP_LIVE_DIR=$dir MEMSNAP_RECORD=1 "$work/launch.sh" "$plant" "${as[@]}" "$stress" "$work/scratch/$name.p" 200 1 \
      >"$work/$name.out" 2>&1 &
  else
    env -u MEMSNAP_LIVE_DIR MEMSNAP_RECORD=1 "$work/launch.sh" "$plant" "${as[@]}" "$stress" "$work/scratch/$name.p" 200 1 \
      >"$work/$name.out" 2>&1 &
  fi
  rp=$!
  for _ in $(seq 1 200); do grep -q '^done' "$work/$name.out" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}
finish() { kill -KILL "$rp" 2>/dev/null; wait "$rp" 2>/dev/null; }
untouched() { test "$(cat "$work/precious")" = precious; }
refused() { # refused OUT TEXT: the program said once that it records without a mapping, why, and ran on
  test "$(grep -c 'no live mapping' "$1")" = 1 && grep -q "$2" "$1" && grep -q '^done' "$1"
}

# ---- the default folder: this user's own ----------------------------------------------------
rm -rf "$victim_default"
record def "" "" victim
check "default folder: made as /dev/shm/memsnap-UID, 0700, the user's" \
  test "$(stat -c '%a %u %F' "$victim_default")" = "700 65533 directory"
check "default folder: the mapping in it, 0600, the user's" \
  test "$(stat -c '%a %u' "$victim_default/memsnap-$rp.live")" = "600 65533"
check "default folder: top (as the user) lists the process" \
  bash -c "cd '$work/scratch' && env -u MEMSNAP_LIVE_DIR setpriv --reuid=65533 --regid=65533 --clear-groups '$cli' top --once --json | grep -q '\"pid\":.*$rp'"
finish
def_live=$victim_default/memsnap-$rp.live
env -u MEMSNAP_LIVE_DIR "$cli" recover --keep -o "$work/def-root.db" "$def_live" >"$work/def-root.out" 2>&1
check "recover: another user's mapping refused, saying whose (exit 1, nothing written)" \
  bash -c "test $? = 1 && grep -q 'owned by another user (uid 65533)' '$work/def-root.out' && test ! -e '$work/def-root.db'"
env -u MEMSNAP_LIVE_DIR "$cli" recover --any-owner -o "$work/def-any.db" "$def_live" >"$work/def-any.out" 2>&1
check "recover --any-owner: reads it on purpose, and leaves another user's file in place" \
  bash -c "test $? = 0 && grep -q '^recovered' '$work/def-any.out' && test -s '$work/def-any.db' && test -e '$def_live'"
check "recover --any-owner with no FILE: a usage error" bash -c "'$cli' recover --any-owner; test \$? = 2"
(cd "$work/scratch" && env -u MEMSNAP_LIVE_DIR setpriv --reuid=65533 --regid=65533 --clear-groups "$cli" recover \
  -o "$work/scratch/def.db") >"$work/def-own.out" 2>&1
check "recover (no FILE, as the user): takes the mapping from the user's folder and removes it" \
  bash -c "grep -q '^recovered .*process $rp' '$work/def-own.out' && test ! -e '$def_live'"

rm -rf "$victim_default"
as_nobody mkdir "$work/scratch/trap"
as_nobody ln -s "$work/scratch/trap" "$victim_default"
record def_link "" "" victim
finish
check "default folder planted as a link by another user: refused with the reason, the program records on" \
  refused "$work/def_link.out" "is a symbolic link"
check "default folder planted as a link: nothing made where it points" \
  bash -c "test -d '$work/scratch/trap' && test -z \"\$(ls -A '$work/scratch/trap')\""
rm -f "$victim_default"
as_nobody mkdir -m 777 "$victim_default"
record def_other "" "" victim
finish
check "default folder made by another user: refused, saying whose" refused "$work/def_other.out" "owned by another user (uid 65534)"
check "default folder made by another user: nothing made in it" \
  bash -c "test -d '$victim_default' && test -z \"\$(ls -A '$victim_default')\""
rm -rf "$victim_default"
as_victim mkdir -m 700 "$victim_default"
chmod 770 "$victim_default"
record def_open "" "" victim
finish
check "default folder that the group may write: refused" refused "$work/def_open.out" "other users may write"
rm -rf "$victim_default"

# ---- names planted in a shared folder with the sticky bit (MEMSNAP_LIVE_DIR) ----------------
S=$work/shared
record plain "$S" ""
check "sticky shared folder: the mapping is made, 0600, root's" test "$(stat -c '%a %u' "$S/memsnap-$rp.live")" = "600 0"
finish
"$cli" recover -o "$work/plain.db" "$S/memsnap-$rp.live" >"$work/plain-r.out" 2>&1
check "sticky shared folder: recover FILE reads one's own mapping" grep -q '^recovered' "$work/plain-r.out"
for name in live.new live; do
  record "link_$name" "$S" 'ln -s "$work/precious" "$D/memsnap-$1.'"$name"'"'
  pid=$rp
  finish
  check "a link planted at memsnap-PID.$name: its target untouched" untouched
  check "a link planted at memsnap-PID.$name: the recording refused with the reason" \
    refused "$work/link_$name.out" "is not this user's regular file"
  check "a link planted at memsnap-PID.$name: no file of the process's left" \
    bash -c "test -z \"\$(find '$S' -user 0 -name 'memsnap-$pid.*')\""
  record "file_$name" "$S" 'touch "$D/memsnap-$1.'"$name"'"; chmod 666 "$D/memsnap-$1.'"$name"'"'
  pid=$rp
  finish
  check "another user's file planted at memsnap-PID.$name: it receives nothing" \
    test "$(stat -c '%s %u' "$S/memsnap-$pid.$name")" = "0 65534"
  check "another user's file planted at memsnap-PID.$name: the recording refused with the reason" \
    refused "$work/file_$name.out" "is not this user's regular file"
done
rm -f "$S"/memsnap-*

# the manifest memsnap run shares: a link or another user's file there receives nothing
as_nobody ln -s "$work/precious" "$S/manifest-link"
MEMSNAP_RUN_MANIFEST=$S/manifest-link record man_link "$S" ""
pid=$rp
finish
check "a link at MEMSNAP_RUN_MANIFEST: its target untouched (the mapping made all the same)" \
  bash -c "test \"\$(cat '$work/precious')\" = precious && test -e '$S/memsnap-$pid.live'"
as_nobody sh -c "printf '' >'$S/manifest-other'; chmod 666 '$S/manifest-other'"
MEMSNAP_RUN_MANIFEST=$S/manifest-other record man_other "$S" ""
finish
check "another user's file at MEMSNAP_RUN_MANIFEST: it receives nothing" test ! -s "$S/manifest-other"
printf '' >"$work/manifest-own"
MEMSNAP_RUN_MANIFEST=$work/manifest-own record man_own "$S" ""
pid=$rp
finish
check "one's own MEMSNAP_RUN_MANIFEST: the mapping's line is in it" grep -q "^live	.*memsnap-$pid.live	$pid\$" "$work/manifest-own"
rm -f "$S"/memsnap-* "$S"/manifest-*

# ---- MEMSNAP_LIVE_DIR refused ----------------------------------------------------------------
mkdir -m 777 "$work/open"
chmod 777 "$work/open" # umask aside
record open "$work/open" ""
finish
check "MEMSNAP_LIVE_DIR writable by all without the sticky bit: refused, saying so" \
  refused "$work/open.out" "without the sticky bit"
check "MEMSNAP_LIVE_DIR writable by all without the sticky bit: nothing made in it" \
  bash -c "test -d '$work/open' && test -z \"\$(ls -A '$work/open')\""
as_nobody mkdir -m 755 "$work/shared/nobodys"
record nobodys "$work/shared/nobodys" ""
finish
check "MEMSNAP_LIVE_DIR of another user: refused, saying whose" refused "$work/nobodys.out" "owned by another user (uid 65534)"
as_nobody ln -s "$work/shared/nobodys" "$work/shared/link-dir"
record link_dir "$work/shared/link-dir" ""
finish
check "MEMSNAP_LIVE_DIR a link another user planted to their folder: refused, nothing made there" \
  bash -c "grep -q 'owned by another user (uid 65534)' '$work/link_dir.out' && test -z \"\$(ls -A '$work/shared/nobodys')\""

# ---- the readers: another user's running process ----------------------------------------------
record theirs "$S" "" nobody
their=$S/memsnap-$rp.live
MEMSNAP_LIVE_DIR=$S "$cli" top --once --json >"$work/top-root.out" 2>&1
check "top: another user's process is not listed (the folder named)" \
  bash -c "test $? = 1 && grep -q \"no recorded process is running (none has a live mapping in '$S')\" '$work/top-root.out'"
MEMSNAP_LIVE_DIR=$S "$cli" top --once --json "$rp" >"$work/top-pid.out" 2>&1
check "top PID: another user's mapping refused, saying whose" \
  bash -c "test $? = 1 && grep -q 'owned by another user (uid 65534)' '$work/top-pid.out'"
MEMSNAP_LIVE_DIR=$S "$cli" dump --timeout 1 "$rp" >"$work/dump.out" 2>&1
check "dump PID: another user's mapping refused" \
  bash -c "test $? = 1 && grep -q 'owned by another user (uid 65534)' '$work/dump.out'"
check "top (as that user): lists it" \
  bash -c "cd '$work/scratch' && MEMSNAP_LIVE_DIR='$S' setpriv --reuid=65534 --regid=65534 --clear-groups '$cli' top --once --json | grep -q '\"pid\":.*$rp'"
finish
before=$(md5sum <"$their")
(cd "$work" && MEMSNAP_LIVE_DIR=$S "$cli" recover) >"$work/rec-all.out" 2>&1
check "recover (no FILE): another user's dead process's mapping is not taken; says where it looked" \
  bash -c "test $? = 1 && grep -q \"in '$S'\" '$work/rec-all.out' && test \"\$(md5sum <'$their')\" = '$before'"

# ---- the readers: links and truncated files ---------------------------------------------------
record mine "$S" ""
finish
mine=$S/memsnap-$rp.live
ln -s "$mine" "$work/link.live"
"$cli" recover --keep -o "$work/link.db" "$work/link.live" >"$work/link.out" 2>&1
check "recover: a symbolic link refused (exit 1, nothing written)" \
  bash -c "test $? = 1 && grep -q 'is a symbolic link' '$work/link.out' && test ! -e '$work/link.db'"
size=$(stat -c %s "$mine")
for cut in 100 4096 $((size / 2)) $((size - 8)); do
  head -c "$cut" "$mine" >"$work/cut.live"
  "$cli" recover --keep -o "$work/cut.db" "$work/cut.live" >"$work/cut.out" 2>&1
  rc=$?
  check "recover: a mapping cut to $cut bytes: refused or read within its size, never a crash (exit $rc)" \
    bash -c "test $rc = 0 -o $rc = 1"
  rm -f "$work/cut.db"
done

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
