#!/usr/bin/env bash
# run.sh: issue 42's checks on a machine with two GPUs, in one call (README.md here): memsnap run
# (default mode) of the zoo's programs with known answers, MemTracker on GPT-2 natively, the cost of
# recording; then checks.py's table, printed last. From the repository root, build/ prepared by
# tests/gpu/prepare.sh and carried. Everything raw goes into $OUT: model_language.tar.xz (logs,
# analyses, the leak's page and text report, the table) and snapshots.tar.xz (the snapshots,
# xz-compressed, as many as fit what comes back), both through tests/gpu/pack_out.sh.
#   GPU 0: gpt2_train.py --leak-hook, then gpt2_train.py, each recorded and analyzed
#   GPU 1: cnn_train.py --amp --steps 10 recorded and analyzed; memtracker_gpt2.py natively
#   both:  ddp_buckets.py on torchrun, recorded (a snapshot per rank) and analyzed; compare.py
#   GPU 0: cost.py, alone on the machine
# Every part runs under `timeout`, within BUDGET seconds for all of them (default 480; packing
# and the table follow); each prints its exit status as it ends. DRY=1 prints the commands only.
set -u
cd "$(dirname "$0")/../../.." || exit 2
HERE=tests/gpu/model_language
PROGRAMS=tests/gpu/zoo/programs
MEMSNAP=${MEMSNAP:-build/memsnap}
W=$(mktemp -d)
R=$W/raw D=$W/db
mkdir -p "$R" "$D"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
START=$(date +%s) BUDGET=${BUDGET:-480}

limit() {  # limit SECONDS: SECONDS, or what is left of the budget when that is less (at least 10)
  local left=$((START + BUDGET - $(date +%s)))
  if [ "$left" -lt "$1" ]; then echo $((left > 10 ? left : 10)); else echo "$1"; fi
}

step() {  # step NAME SECONDS CMD...: CMD's output into $R/NAME (errors: NAME.err), exit status into NAME.rc
  local name=$1 lim t0 rc
  lim=$(limit "$2")
  shift 2
  if [ -n "${DRY:-}" ]; then echo "[dry] timeout $lim $* >$name"; return 0; fi
  t0=$(date +%s)
  timeout -k 10 "$lim" "$@" >"$R/$name" 2>"$R/$name.err"
  rc=$?
  echo "$rc" >"$R/$name.rc"
  echo "[$name: exit $rc after $(($(date +%s) - t0)) s (limit $lim s)]"
  return "$rc"
}

record() {  # record NAME GPUS CMD...: memsnap run (default mode) of CMD, the snapshot $D/NAME.db
  local name=$1 gpus=$2
  shift 2
  step "$name.log" 150 env CUDA_VISIBLE_DEVICES="$gpus" "$MEMSNAP" run --no-suggest -o "$D/$name.db" -- "$@"
}

analyze() {  # analyze NAME: memsnap analyze --json of $D/NAME.db into $R/NAME.json
  if [ -z "${DRY:-}" ] && [ ! -f "$D/$1.db" ]; then echo "[$1.json: no snapshot $1.db]"; return 1; fi
  step "$1.json" 150 "$MEMSNAP" analyze --json --no-suggest "$D/$1.db"
}

gpu0() {
  record gpt2_leak 0 python3 "$PROGRAMS/gpt2_train.py" --leak-hook
  record gpt2 0 python3 "$PROGRAMS/gpt2_train.py" &
  analyze gpt2_leak
  step gpt2_leak.txt 150 "$MEMSNAP" analyze --no-suggest "$D/gpt2_leak.db"
  step gpt2_leak.page.log 150 "$MEMSNAP" analyze --no-suggest --html "$R/gpt2_leak.html" "$D/gpt2_leak.db"
  wait
  analyze gpt2
}

gpu1() {
  record cnn_amp 1 python3 "$PROGRAMS/cnn_train.py" --amp --steps 10
  analyze cnn_amp &
  step memtracker.log 240 env CUDA_VISIBLE_DEVICES=1 python3 "$HERE/memtracker_gpt2.py" --json "$R/memtracker.json"
  wait
}

if [ -z "${DRY:-}" ]; then
  [ -x "$MEMSNAP" ] || { echo "run.sh: no '$MEMSNAP': prepare build/ with tests/gpu/prepare.sh and carry it"; exit 2; }
  : "${OUT:?run.sh: OUT is not set}"
  nvidia-smi -L | tee "$R/machine.txt"
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' \
    | tee -a "$R/machine.txt"
fi
gpu0 &
gpu1 &
wait
step ddp.log 180 "$MEMSNAP" run --no-suggest -o "$D/ddp-r%r.db" -- \
  torchrun --standalone --nproc-per-node 2 "$PROGRAMS/ddp_buckets.py"
analyze ddp-r0 &
analyze ddp-r1 &
step compare.txt 60 python3 "$HERE/compare.py" "$R/gpt2.json" "$R/memtracker.json"
wait
budget=$(($(limit 270) - 20))
step cost.txt "$((budget + 20))" env CUDA_VISIBLE_DEVICES=0 python3 "$HERE/cost.py" --budget "$budget" \
  --memsnap "$MEMSNAP" --json "$R/cost.json"
[ -n "${DRY:-}" ] && exit 0

python3 "$HERE/checks.py" "$R" >"$R/table.txt" 2>&1
rc=$?
export XZ_OPT=${XZ_OPT:--T0}
tests/gpu/pack_out.sh "$R" model_language >/dev/null
# the snapshots, smallest first, while they fit beside it: 8 files and 56 MiB in all (15 MiB parts)
used=$(cat "$OUT"/model_language.tar.xz* | wc -c)
files=$((8 - $(find "$OUT" -type f | wc -l)))
room=$(((56 << 20) - used))
[ "$room" -gt $((files * 15 << 20)) ] && room=$((files * 15 << 20))
mkdir -p "$W/snapshots"
total=0 left_out=""
while read -r db; do  # smallest first
  xz_file=$W/snapshots/$(basename "$db").xz
  secs=$((START + BUDGET + 50 - $(date +%s)))  # the call's end stays under 9 minutes
  if [ "$secs" -le 5 ] || ! timeout "$secs" xz -c "$db" >"$xz_file" ||
    [ $((total + $(stat -c %s "$xz_file"))) -gt $((room * 97 / 100)) ]; then
    rm -f "$xz_file"
    left_out+=" $(basename "$db")"
    continue
  fi
  total=$((total + $(stat -c %s "$xz_file")))
done < <(find "$D" -name '*.db' -printf '%s %p\n' | sort -n | cut -d' ' -f2-)
[ -n "$(ls "$W/snapshots")" ] && tests/gpu/pack_out.sh "$W/snapshots" snapshots >/dev/null
echo
ls -l "$OUT"
[ -n "$left_out" ] && echo "snapshots left out of \$OUT (no room):$left_out"
echo
cat "$R/table.txt"
exit "$rc"
