#!/usr/bin/env bash
# test_predict.sh BUILD_DIR: `memsnap predict` against known answers on the simulated device.
#
# tests/analyzer/predict_workload.c is a training-like program whose requests follow known laws of
# its size: linear in the batch (with a workspace that only runs from batch 6 up allocate), and
# with a quadratic term in the sequence length. It is recorded at several sizes through the real
# library; the prediction at a size from runs at two (linear) or three (quadratic) others must be,
# to the byte, what recording it at that size gives (peak allocated and reserved memory, under
# the recorded settings and every setting of the sweep: the replay of that recording, which
# test_replay.sh shows equal to recording under those settings), and the largest size that fits
# a card must be the largest at which the program itself runs on a simulated card of that size.
# Then: two devices, a recording without stacks, the refusals (runs that do not align, other
# steps, one run, a size given twice, the same file twice, a history that starts late) and
# hostile input (garbage, truncated files, absurd sizes), each a clear message and exit 1 or 2.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../checks.sh"
cli=$1/memsnap
work=$1/tests/predict_workload
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# rec NAME MODE SIZE [STEPS]: the workload recorded from the start (DEVICES simulated devices,
# STACKS, ENTRIES events kept).
rec() {
  env -i PATH="$PATH" MEMSNAP_BACKEND=sim MEMSNAP_SIM_DEVICES="${DEVICES:-1}" MEMSNAP_SIM_CAPACITY=8G MEMSNAP_RECORD=1 \
    MEMSNAP_MAX_ENTRIES="${ENTRIES:-1000000}" MEMSNAP_STACKS="${STACKS:-native}" MEMSNAP_DUMP="$dir/$1.db" "$work" "$2" "$3" "${4:-4}"
}

# same PREDICTION.json AT TRUTH.json: the prediction at AT under the recorded settings equals the
# truth's replay and its recording (the largest device's peaks; every device's).
same() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
p, at, t = json.load(open(sys.argv[1])), int(sys.argv[2]), json.load(open(sys.argv[3]))
rows = [r for r in p["predictions"] if r["at"] == at and r["recorded_settings"]]
ok = len(rows) == 1 and rows[0]["fits"] and rows[0]["error"] is None
if ok:
    r = rows[0]
    devs = t["devices"]
    ok = r["peak_reserved_bytes"] == max(d["peak_reserved_bytes"] for d in devs) == max(d["recorded"]["peak_reserved_bytes"] for d in devs)
    ok &= r["peak_allocated_bytes"] == max(d["peak_allocated_bytes"] for d in devs) == max(d["recorded"]["peak_allocated_bytes"] for d in devs)
    ok &= [(d["device"], d["peak_allocated_bytes"], d["peak_reserved_bytes"]) for d in r["devices"]] == \
          [(d["device"], d["peak_allocated_bytes"], d["peak_reserved_bytes"]) for d in devs]
    if not ok:
        print("at", at, "predicted", r["peak_allocated_bytes"], r["peak_reserved_bytes"], r["devices"], "truth",
              [(d["peak_allocated_bytes"], d["peak_reserved_bytes"]) for d in devs], file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}

for n in 4 6 8 12 16 33; do rec "b$n" batch "$n" || { echo "FAIL the workload did not run at batch $n"; echo "0 passed, 1 failed"; exit 1; }; done
for n in 12 16 33 6 8; do "$cli" replay --json "$dir/b$n.db" >"$dir/b$n.truth.json"; done

# Linear laws, from two runs.
"$cli" predict --json "$dir/b4.db=4" "$dir/b8.db=8" --at 12 --at 16 --at 33 --at 6 >"$dir/p.json" 2>"$dir/p.err"
check "predict from batch 4 and 8: exit 0, nothing on stderr" "[ $? -eq 0 ] && [ ! -s $dir/p.err ]"
for n in 6 12 16 33; do
  check "batch $n from 4 and 8: peak allocated and reserved exactly as recorded at $n" "same $dir/p.json $n $dir/b$n.truth.json"
done
check "the JSON: runs, the fit, how well they aligned, the laws, predictions in size order" \
  "json $dir/p.json \"j['fit'] == 'linear' and [r['at'] for r in j['runs']] == [4, 8] and j['runs'][1]['base'] and not j['runs'][0]['base']
    and 0.95 < j['aligned_share'] < 1 and j['runs'][0]['aligned_allocations'] == j['runs'][0]['allocations']
    and j['runs'][1]['aligned_allocations'] == j['runs'][1]['allocations'] - 1 and j['laws']['unaligned']['allocations'] == 1
    and j['laws']['unaligned']['bytes'] == 8 << 20 and j['laws']['linear']['allocations'] > 0 and j['laws']['constant']['allocations'] > 0
    and j['laws']['quadratic']['allocations'] == 0 and [r['at'] for r in j['predictions']] == [6, 12, 16, 33]
    and all(r['pytorch_cuda_alloc_conf'] == '' and r['memory_fraction'] == 1 for r in j['predictions'])
    and j['capacity_bytes'] == 8 << 30 and 'largest_that_fits' in j and j['largest_that_fits'] == []\""
"$cli" predict "$dir/b8.db=8" "$dir/b4.db=4" --at 8 --json >"$dir/p8.json"
check "at the base's own size (runs given largest first): the base's replay, exactly" "same $dir/p8.json 8 $dir/b8.truth.json"
"$cli" predict "$dir/b4.db=4" "$dir/b8.db=8" --at 12 --at 33 >"$dir/p.txt"
check "text: how well the runs aligned (share of bytes), the laws, a row per size" \
  "grep -q 'aligned: 9[0-9.]*% of the runs. bytes allocated' $dir/p.txt && grep -q 'laws of its 158 allocations: 104 linear' $dir/p.txt &&
   grep -qE '^ +12 +[0-9.]+ MiB +[0-9.]+ MiB' $dir/p.txt && grep -qE '^ +33 ' $dir/p.txt && grep -q '1 place where a run differs' $dir/p.txt"

# Every setting of the sweep, against the truth's sweep.
"$cli" predict --json --sweep --jobs 2 "$dir/b4.db=4" "$dir/b8.db=8" --at 16 >"$dir/ps.json"
"$cli" replay --json --sweep --jobs 2 "$dir/b16.db" >"$dir/b16.sweep.json"
check "--sweep at 16: each of the 20 settings exactly as the replay of the run at 16 under it" \
  "python3 - $dir/ps.json $dir/b16.sweep.json <<'PY'
import json, sys
p, t = (json.load(open(f)) for f in sys.argv[1:3])
key = lambda r: (r['pytorch_cuda_alloc_conf'], r['memory_fraction'])
truth = {key(r): (max(d['peak_allocated_bytes'] for d in r['devices']), max(d['peak_reserved_bytes'] for d in r['devices'])) for r in t['ranked']}
rows = p['predictions']
ok = len(rows) == 20 == len(truth) and sum(r['recorded_settings'] for r in rows) == 1
for r in rows:
    if truth.get(key(r)) != (r['peak_allocated_bytes'], r['peak_reserved_bytes']):
        ok = False
        print(key(r), (r['peak_allocated_bytes'], r['peak_reserved_bytes']), truth.get(key(r)), file=sys.stderr)
peaks = [r['peak_reserved_bytes'] for r in rows if r['fits']]
ok &= peaks == sorted(peaks)
sys.exit(0 if ok else 1)
PY"
"$cli" predict --sweep --jobs 2 "$dir/b4.db=4" "$dir/b8.db=8" --at 16 >"$dir/ps.txt"
check "--sweep, text: 20 ranked rows at 16, the recorded one marked" \
  "grep -q '^at 16: 20 settings, best first' $dir/ps.txt && [ \$(grep -cE '^ +[0-9]+  +[0-9.]+ [KMG]iB' $dir/ps.txt) -eq 20 ] && grep -q '\[recorded\]' $dir/ps.txt"
"$cli" predict --json --set expandable_segments=True "$dir/b4.db=4" "$dir/b8.db=8" --at 12 >"$dir/pe.json"
"$cli" replay --json --set expandable_segments=True "$dir/b12.db" >"$dir/b12e.json"
check "--set expandable_segments=True: the run at 12 replayed under it, exactly" \
  "json $dir/pe.json \"j['predictions'][0]['pytorch_cuda_alloc_conf'] == 'expandable_segments:True' and j['predictions'][0]['peak_reserved_bytes'] == max(d['peak_reserved_bytes'] for d in json.load(open('$dir/b12e.json'))['devices'])\""

# The largest size that fits a card: the program itself fits there and not one size more.
"$cli" predict --json "$dir/b4.db=4" "$dir/b8.db=8" --capacity 1G --sweep --jobs 2 >"$dir/cap.json"
check "--capacity 1G --sweep: exit 0, a size for each of the 20 settings, largest first, and the best" \
  "[ $? -eq 0 ] && json $dir/cap.json \"len(j['largest_that_fits']) == 20 and all(r['at'] for r in j['largest_that_fits'])
    and [r['at'] for r in j['largest_that_fits']] == sorted([r['at'] for r in j['largest_that_fits']], reverse=True)
    and j['best_fit']['at'] == j['largest_that_fits'][0]['at'] and j['fit_capacity_bytes'] == 1 << 30 and j['predictions'] == []\""
# runs_at SIZE VAR=VALUE...: the program (not recorded) capped at 1 GiB on the recorded 8 GiB card,
# as torch.cuda.set_per_process_memory_fraction caps it (the GPU check's cap); its exit code
runs_at() {
  local size=$1
  shift
  env -i PATH="$PATH" MEMSNAP_BACKEND=sim MEMSNAP_SIM_CAPACITY=8G MEMSNAP_MEMORY_FRACTION=0.125 "$@" "$work" batch "$size" >/dev/null 2>&1
}
while IFS='|' read -r conf vars; do
  n=$(python3 -c "import json,sys; print([r['at'] for r in json.load(open('$dir/cap.json'))['largest_that_fits'] if r['pytorch_cuda_alloc_conf'] == '$conf' and r['memory_fraction'] == 1][0])")
  # shellcheck disable=SC2086
  check "--capacity 1G under '${conf:-defaults}': the largest that fits, $n, runs under a 1 GiB cap and $((n + 1)) does not" \
    "runs_at $n $vars && ! runs_at $((n + 1)) $vars"
done <<'EOF'
|MEMSNAP_STACKS=none
expandable_segments:True|MEMSNAP_EXPANDABLE_SEGMENTS=1
max_split_size_mb:128|MEMSNAP_MAX_SPLIT_SIZE_MB=128
roundup_power2_divisions:4|MEMSNAP_ROUNDUP_POWER2_DIVISIONS=4
EOF
"$cli" predict "$dir/b4.db=4" "$dir/b8.db=8" --capacity 1G >"$dir/cap.txt"
check "--capacity, text: the largest size and the line to use" \
  "grep -q '^largest size that fits in 1.00 GiB per device' $dir/cap.txt && grep -qE '^best: [0-9]+ with PYTORCH_CUDA_ALLOC_CONF=' $dir/cap.txt"
"$cli" predict --json "$dir/b4.db=4" "$dir/b8.db=8" --at 200 --capacity 1G >"$dir/over.json"
check "a size that does not fit the card: fits false, with what it needs (more than the card)" \
  "json $dir/over.json \"j['predictions'][0]['fits'] is False and j['predictions'][0]['peak_reserved_bytes'] > 1 << 30 and j['capacity_bytes'] == 1 << 30\""
check "200 (and the largest that fits, 90) from runs at 4 and 8: one note says they are far from them, in order" \
  "json $dir/over.json \"any(n.startswith('90, 200 are far from the recorded sizes (4 to 8') for n in j['notes'])\""
"$cli" predict --json "$dir/b4.db=4" "$dir/b8.db=8" --capacity 4M >"$dir/none.json"
check "a card too small for size 1: at null, best_fit null, exit 0" \
  "[ $? -eq 0 ] && json $dir/none.json \"j['largest_that_fits'][0]['at'] is None and j['best_fit'] is None\""
"$cli" predict --json "$dir/b4.db=4" "$dir/b8.db=8" --device H100 --at 16 >"$dir/h100.json"
check "--device H100: the card's 85017493504 bytes" "json $dir/h100.json \"j['capacity_bytes'] == 85017493504 and j['fit_capacity_bytes'] == 85017493504\""
"$cli" predict --json "$dir/b4.db=4" "$dir/b8.db=8" --device 'nvidia a100-40gb' --at 16 >"$dir/a100.json"
check "--device 'nvidia a100-40gb': case, spaces and the vendor do not matter" "json $dir/a100.json \"j['capacity_bytes'] == 40540 << 20\""
"$cli" replay --json --device T4 "$dir/b8.db" >"$dir/t4.json"
check "memsnap replay --device T4 too" "json $dir/t4.json \"j['capacity_bytes'] == 15104 << 20\""

# Quadratic laws, from three runs.
for n in 64 128 192 256 320 448; do rec "s$n" seq "$n"; "$cli" replay --json "$dir/s$n.db" >"$dir/s$n.truth.json"; done
"$cli" predict --json "$dir/s64.db=64" "$dir/s128.db=128" "$dir/s192.db=192" --at 256 --at 320 --at 448 >"$dir/q.json"
for n in 256 320 448; do
  check "sequence $n from 64, 128 and 192 (attention: quadratic): exactly as recorded" "same $dir/q.json $n $dir/s$n.truth.json"
done
check "three runs: the fit is quadratic, with quadratic laws" \
  "json $dir/q.json \"j['fit'] == 'quadratic' and j['laws']['quadratic']['allocations'] == 24 and j['runs'][2]['base']\""
"$cli" predict --json "$dir/s64.db=64" "$dir/s128.db=128" --at 320 >"$dir/q2.json"
check "the same from two runs (linear) misses the quadratic term: less than recorded" \
  "json $dir/q2.json \"j['predictions'][0]['peak_allocated_bytes'] < max(d['peak_allocated_bytes'] for d in json.load(open('$dir/s320.truth.json'))['devices'])\""

# Two devices; no stacks.
DEVICES=2 rec d4 batch 4 && DEVICES=2 rec d8 batch 8 && DEVICES=2 rec d16 batch 16
"$cli" replay --json "$dir/d16.db" >"$dir/d16.truth.json"
"$cli" predict --json "$dir/d4.db=4" "$dir/d8.db=8" --at 16 >"$dir/d.json"
check "two devices: each device's peaks at 16 exactly as recorded" "same $dir/d.json 16 $dir/d16.truth.json && json $dir/d.json \"len(j['predictions'][0]['devices']) == 2\""
# (10 steps: the blocks whose lifetime spans the workspace are not aligned without stacks, and
# with 4 steps the weights among them are more than a tenth of the bytes)
STACKS=none rec n4 batch 4 10 && STACKS=none rec n8 batch 8 10 && rec n16 batch 16 10
"$cli" replay --json "$dir/n16.db" >"$dir/n16.truth.json"
"$cli" predict --json "$dir/n4.db=4" "$dir/n8.db=8" --at 16 >"$dir/n.json"
check "recorded without stacks: aligned by the order and lifetimes of allocations, exact, and a note says so" \
  "same $dir/n.json 16 $dir/n16.truth.json && json $dir/n.json \"any('without stacks' in n for n in j['notes'])\""

# Refusals: exit 1 (cannot be predicted) with the reason on one line.
refused() { # PATTERN ARGS...: exit 1, one line on stderr matching PATTERN, nothing on stdout
  local pattern=$1
  shift
  "$cli" predict "$@" >"$dir/r.out" 2>"$dir/r.err"
  local rc=$?
  [ $rc -eq 1 ] && [ ! -s "$dir/r.out" ] && [ "$(wc -l <"$dir/r.err")" -eq 1 ] && grep -q "$pattern" "$dir/r.err"
}
rec o8 other 8
check "another program: refused, the histories do not align (where they part, what share aligned)" \
  "refused 'the histories do not align: .*% of the allocations of' $dir/b4.db=4 $dir/o8.db=8 --at 16"
rec b8long batch 8 7
check "the same program with other steps: refused, with the share aligned below 90%" \
  "refused 'do not align: [0-9.]*% of the allocations of .*b8long.db' $dir/b4.db=4 $dir/b8long.db=8 --at 16"
ENTRIES=200 rec ring8 batch 8
check "a history that starts late (the ring dropped events): refused, and what to do" \
  "refused 'starts late (the ring dropped its [0-9]* oldest events); record it again' $dir/b4.db=4 $dir/ring8.db=8 --at 16"
printf 'not a database at all, not even close to one' >"$dir/junk.db"
check "a file that is no snapshot: exit 1, one line" "refused 'junk.db' $dir/b4.db=4 $dir/junk.db=8 --at 16"
head -c 20000 "$dir/b8.db" >"$dir/trunc.db"
check "a truncated snapshot: exit 1, one line" "refused 'trunc.db' $dir/b4.db=4 $dir/trunc.db=8 --at 16"
check "a snapshot that does not exist: exit 1, one line" "refused 'missing.db' $dir/b4.db=4 $dir/missing.db=8 --at 16"
cp "$dir/b8.db" "$dir/late.db"
sqlite3 "$dir/late.db" "delete from events where id <= (select min(id) from events where kind = 1) + 3"
check "recording started after the first allocations (blocks live before the history): refused" \
  "refused 'does not start at the program.s start' $dir/b4.db=4 $dir/late.db=8 --at 16"

cp "$dir/b8.db" "$dir/few.db"
sqlite3 "$dir/few.db" "delete from events where id = (select min(id) from events where kind = 1 and size = 16896)"
"$cli" predict --json "$dir/b4.db=4" "$dir/few.db=8" --at 16 >"$dir/few.json" 2>"$dir/few.err"
check "one allocation missing from a history (its free unknown: under 1% of the frees): predicted, with a note" \
  "[ $? -eq 0 ] && json $dir/few.json \"any('does not quite start' in n and '1 frees' in n for n in j['notes']) and j['predictions'][0]['fits']\""

# Hostile values inside a snapshot: an answer or one clear line, never a crash.
cp "$dir/b8.db" "$dir/h.db"
sqlite3 "$dir/h.db" "update events set size = 1099511627776, requested_size = 1099511627776 where id = (select min(id) from events where kind = 1 and size > 4000000)"
"$cli" predict --json "$dir/b4.db=4" "$dir/h.db=8" --at 16 >"$dir/h.json" 2>"$dir/h.err"
check "a 1 TiB request in a run: an answer (it does not fit: out of memory), no crash" \
  "[ $? -eq 0 ] && json $dir/h.json \"j['predictions'][0]['fits'] is False\""
cp "$dir/b8.db" "$dir/h2.db"
sqlite3 "$dir/h2.db" "update events set size = 'lots', address = x'00ff' where id % 7 = 0; update events set kind = 77 where id % 11 = 0"
"$cli" predict --json "$dir/b4.db=4" "$dir/h2.db=8" --at 16 >"$dir/h2.json" 2>"$dir/h2.err"
rc=$?
check "text and blobs where numbers belong, unknown kinds: exit 0 or 1 with a message, no crash" \
  "[ $rc -le 1 ] && { [ $rc -eq 0 ] || [ \$(wc -l <$dir/h2.err) -eq 1 ]; }"

# Usage errors: exit 2 with the reason.
usage() { # PATTERN ARGS...
  local pattern=$1
  shift
  "$cli" predict "$@" >/dev/null 2>"$dir/u.err"
  [ $? -eq 2 ] && grep -q "$pattern" "$dir/u.err"
}
check "one run: exit 2, two sizes are needed" "usage 'one run .* cannot tell how memory grows' $dir/b4.db=4 --at 16"
check "no run: exit 2" "usage 'no runs given' --at 16"
check "four runs: exit 2" "usage 'at most 3 runs' $dir/b4.db=4 $dir/b8.db=8 $dir/b12.db=12 $dir/b16.db=16 --at 20"
check "a size given twice: exit 2" "usage 'are both at size 4' $dir/b4.db=4 $dir/b8.db=4 --at 16"
check "the same file twice: exit 2" "usage 'are the same file' $dir/b4.db=4 $dir/b4.db=8 --at 16"
check "a run without its size: exit 2" "usage 'give each run with the size' $dir/b4.db $dir/b8.db=8 --at 16"
for bad in 0 -4 2.5 abc 1e3 99999999999 ''; do
  check "the size '$bad': exit 2" "usage 'is not a whole number' '$dir/b4.db=$bad' $dir/b8.db=8 --at 16"
  check "--at '$bad': exit 2" "usage 'is not a whole number' $dir/b4.db=4 $dir/b8.db=8 --at '$bad'"
done
check "nothing to predict (no --at, no card): exit 2" "usage 'nothing to predict' $dir/b4.db=4 $dir/b8.db=8"
check "--capacity and --device both: exit 2" "usage 'one of them' $dir/b4.db=4 $dir/b8.db=8 --capacity 1G --device H100"
check "an unknown card: exit 2, the known ones listed" "usage 'unknown card .*known: H100' $dir/b4.db=4 $dir/b8.db=8 --device Z9000"
check "an absurd capacity: exit 2" "usage 'not a size' $dir/b4.db=4 $dir/b8.db=8 --capacity 9999999T"
check "an invalid setting: exit 2, the library's reason" "usage \"invalid value 'abc'\" $dir/b4.db=4 $dir/b8.db=8 --at 16 --set max_split_size_mb=abc"
check "an unknown setting: exit 2" "usage 'unknown setting' $dir/b4.db=4 $dir/b8.db=8 --at 16 --set nonsense=1"
check "an unknown option: exit 2" "usage \"unknown option '--bogus'\" $dir/b4.db=4 $dir/b8.db=8 --bogus"
check "--at without a value: exit 2" "usage \"'--at' needs a value\" $dir/b4.db=4 $dir/b8.db=8 --at"
# memsnap analyze names the command under an out of memory (text report; the page: tests/web).
mkdir -p "$dir/gen" && "$1/tests/gen_snapshots" "$dir/gen" >/dev/null
"$cli" analyze --no-suggest "$dir/gen/oom.db" >"$dir/oom.txt"
"$cli" analyze --no-suggest "$dir/gen/leak.db" >"$dir/leak.txt"
check "analyze, a snapshot that ran out of memory: a line names memsnap predict; none without" \
  "grep -A200 '^out of memory' $dir/oom.txt | grep -q 'memsnap predict small.db=SIZE large.db=SIZE --capacity' && ! grep -q 'memsnap predict' $dir/leak.txt"
"$cli" help predict >"$dir/help.txt"
check "memsnap help predict: the runs, --at, --capacity, --device, --sweep, an example" \
  "grep -q 'A.db=SIZE' $dir/help.txt && grep -q -- '--at N' $dir/help.txt && grep -q -- '--device CARD' $dir/help.txt && grep -q 'memsnap predict b4.db=4 b8.db=8' $dir/help.txt"
"$cli" help >"$dir/helpall.txt"
check "memsnap help lists predict" "grep -q 'memsnap predict A.db=SIZE' $dir/helpall.txt"

finish
