#!/usr/bin/env bash
# test_replay.sh BUILD_DIR: `memsnap replay` against known answers on the simulated device.
#
# The program tests/analyzer/replay_workload.c runs under settings A (the defaults) and under each of
# several settings B with recording on. Replaying A's snapshot under B must give what the run
# under B recorded: the same peak reserved memory, the same number of device allocations
# (cudaMalloc) and frees and the same segments at the end; replaying any snapshot under its own
# settings must give its recorded numbers. Then: late starts (a small ring, recording started
# mid-run, a real PyTorch snapshot), out of memory on a smaller card, the sweep, the analysis's
# suggestions from it (known answers: the runs under other settings; --no-suggest, the time
# bound), hostile and inconsistent traces (a clear message and a partial answer, never a crash),
# usage errors.
set -u
build=$1
cli=$build/memsnap
work=$build/tests/replay_workload
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }
# jq-like checks in Python: json FILE EXPR (j is the document)
json() { python3 -c "import json,sys; j=json.load(open('$1')); sys.exit(0 if ($2) else 1)"; }

# record NAME [VAR=VALUE...]: the workload on two simulated devices, recorded from the start.
record() {
  local name=$1
  shift
  env -i PATH="$PATH" MEMSNAP_BACKEND=sim MEMSNAP_SIM_DEVICES=2 MEMSNAP_SIM_CAPACITY=8G MEMSNAP_RECORD=1 \
    MEMSNAP_MAX_ENTRIES=1000000 MEMSNAP_STACKS=${STACKS:-native} MEMSNAP_DUMP="$dir/$name.db" "$@" "$work" 40 7
}

# same PREDICTED.json RECORDED.json: every device's replay equals the other's recording.
same() {
  python3 - "$1" "$2" <<'PY'
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ok = len(p["devices"]) == len(r["devices"]) == 2
for a, b in zip(p["devices"], r["devices"]):
    rec = b["recorded"]
    ok &= a["peak_reserved_bytes"] == rec["peak_reserved_bytes"] and a["device_allocs"] == rec["device_allocs"]
    ok &= a["device_frees"] == rec["device_frees"] and a["segments"] == rec["segments"]
    ok &= a["peak_allocated_bytes"] == rec["peak_allocated_bytes"] and a["ooms"] == 0
    if not ok:
        print("device", a["device"], "predicted", {k: a[k] for k in ("peak_reserved_bytes", "device_allocs", "device_frees", "segments")},
              "recorded", rec, file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}

# faithful FILE.json: the replay under the recorded settings gives the recorded numbers.
faithful() {
  json "$1" "all(d['peak_reserved_bytes'] == d['recorded']['peak_reserved_bytes'] and d['device_allocs'] == d['recorded']['device_allocs'] and d['segments'] == d['recorded']['segments'] and d['peak_allocated_bytes'] == d['recorded']['peak_allocated_bytes'] for d in j['devices']) and len(j['devices']) >= 1"
}

record A || { echo "FAIL the workload did not run"; echo "0 passed, 1 failed"; exit 1; }
"$cli" replay --json "$dir/A.db" >"$dir/A.json"
check "A under its own settings: exit 0" "[ $? -eq 0 ]"
check "A under its own settings: peak reserved, cudaMalloc/cudaFree counts and segments as recorded" "faithful $dir/A.json"
check "A: frees completed later (record_stream) and empty_cache calls were replayed" \
  "json $dir/A.json \"j['deferred_frees'] > 0 and j['empty_caches'] == 8\""
"$cli" analyze --json "$dir/A.db" >"$dir/A.analysis.json"
check "analyze --json keeps the recorded peaks under the replay's names" \
  "python3 -c \"import json,sys; a=json.load(open('$dir/A.analysis.json'))['summary']; r=json.load(open('$dir/A.json'))['devices'][0]['recorded']; sys.exit(0 if a['peak_reserved_bytes'] >= r['peak_reserved_bytes'] > 0 and a['peak_allocated_bytes'] >= r['peak_allocated_bytes'] > 0 else 1)\""

# Settings B: replay A under B, record under B, compare. Each line: name, --set args, variables.
i=0
while IFS='|' read -r label sets vars; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  record "B$i" $vars
  args=()
  for kv in $sets; do args+=(--set "$kv"); done
  "$cli" replay --json "${args[@]}" "$dir/A.db" >"$dir/p$i.json"
  "$cli" replay --json "$dir/B$i.db" >"$dir/r$i.json"
  check "A replayed under $label = the run under $label (peak reserved, cudaMalloc, cudaFree, segments)" \
    "same $dir/p$i.json $dir/r$i.json 2>&1"
  check "$label: its own snapshot replayed under its recorded settings is faithful" "faithful $dir/r$i.json"
  case $sets in
    *'['*) ;; # a list is read back in memsnap's own list form (its faithfulness is checked above)
    *) check "$label: the settings were read back from the snapshot" \
      "json $dir/r$i.json \"j['pytorch_cuda_alloc_conf'] == json.load(open('$dir/p$i.json'))['pytorch_cuda_alloc_conf']\"" ;;
  esac
done <<'EOF'
max_split_size_mb:64|max_split_size_mb=64|MEMSNAP_MAX_SPLIT_SIZE_MB=64
roundup_power2_divisions:4|roundup_power2_divisions=4|MEMSNAP_ROUNDUP_POWER2_DIVISIONS=4
expandable_segments:True|expandable_segments=True|MEMSNAP_EXPANDABLE_SEGMENTS=1
max_split_size_mb:128 with a power2 list|max_split_size_mb=128 roundup_power2_divisions=[256:1,512:2,>:8]|MEMSNAP_MAX_SPLIT_SIZE_MB=128 MEMSNAP_ROUNDUP_POWER2_DIVISIONS=[256:1,512:2,>:8]
garbage_collection_threshold:0.5 at memory fraction 0.25|garbage_collection_threshold=0.5 memory_fraction=0.25|MEMSNAP_GARBAGE_COLLECTION_THRESHOLD=0.5 MEMSNAP_MEMORY_FRACTION=0.25
EOF
check "the garbage collection case did collect (more cudaFree calls than the defaults)" \
  "json $dir/p5.json \"sum(d['device_frees'] for d in j['devices']) > sum(d['device_frees'] for d in json.load(open('$dir/A.json'))['devices'])\""
check "a setting changes the prediction (max_split_size_mb:64 reserves more than the defaults here)" \
  "json $dir/p1.json \"j['devices'][0]['peak_reserved_bytes'] != json.load(open('$dir/A.json'))['devices'][0]['peak_reserved_bytes']\""
"$cli" replay --json --set max_split_size_mb=default "$dir/B1.db" >"$dir/back.json"
check "--set KEY=default: B1 replayed under the defaults = the run under the defaults" "same $dir/back.json $dir/A.json"
record Async MEMSNAP_ALLOCATOR=async
"$cli" replay --json --set backend=cudaMallocAsync "$dir/A.db" >"$dir/pa.json"
"$cli" replay --json "$dir/Async.db" >"$dir/ra.json"
check "backend:cudaMallocAsync: A replayed = the async run's peak reserved (the pool's)" \
  "json $dir/pa.json \"[d['peak_reserved_bytes'] for d in j['devices']] == [d['recorded']['peak_reserved_bytes'] for d in json.load(open('$dir/ra.json'))['devices']]\""
STACKS=none record Nostacks
"$cli" replay --json "$dir/Nostacks.db" >"$dir/n.json"
check "recorded without stacks: empty_cache still told from the allocator's own releases (faithful)" \
  "faithful $dir/n.json && json $dir/n.json \"j['empty_caches'] == 8\""
"$cli" replay "$dir/A.db" >"$dir/A.txt"
check "text: a table per device, replay beside recorded" \
  "grep -q '^device 0 .*replay.*recorded' $dir/A.txt && grep -q 'peak reserved' $dir/A.txt && grep -q 'fragmentation at the peak' $dir/A.txt"

# Late starts.
env -i PATH="$PATH" MEMSNAP_BACKEND=sim MEMSNAP_SIM_DEVICES=2 MEMSNAP_SIM_CAPACITY=8G MEMSNAP_RECORD=1 \
  MEMSNAP_MAX_ENTRIES=2000 MEMSNAP_STACKS=native MEMSNAP_DUMP="$dir/ring.db" "$work" 40 7
"$cli" replay --json "$dir/ring.db" >"$dir/ring.json"
check "ring overflow: starts from the snapshot's segments and blocks, faithful, and says so" \
  "faithful $dir/ring.json && json $dir/ring.json \"j['preloaded_blocks'] > 0 and any('starts late' in n and 'ring dropped' in n for n in j['notes'])\""
mkdir -p "$dir/gen" && "$build/tests/gen_snapshots" "$dir/gen" >/dev/null
"$cli" replay --json "$dir/gen/late.db" >"$dir/late.json"
check "recording started mid-run: the weights allocated before it are rebuilt, faithful, and it says so" \
  "faithful $dir/late.json && json $dir/late.json \"j['preloaded_blocks'] == 1 and any('recording started after' in n for n in j['notes'])\""
"$cli" import "$here/../data/resnet50_leak.pickle.gz" -o "$dir/resnet.db" >/dev/null 2>&1
"$cli" replay --json "$dir/resnet.db" >"$dir/resnet.json"
# PyTorch's trace holds requests, not block sizes: allocated memory is the allocator's own (within 1%).
check "a real PyTorch snapshot (resnet50, recording started mid-run): peak reserved, cudaMalloc and segments as recorded" \
  "json $dir/resnet.json \"all(d['peak_reserved_bytes'] == d['recorded']['peak_reserved_bytes'] and d['device_allocs'] == d['recorded']['device_allocs'] and d['segments'] == d['recorded']['segments'] and abs(d['peak_allocated_bytes'] - d['recorded']['peak_allocated_bytes']) < d['recorded']['peak_allocated_bytes'] / 100 for d in j['devices'])\""
check "a PyTorch snapshot: the note says what its trace cannot tell" \
  "json $dir/resnet.json \"any('imported from PyTorch' in n and 'record_stream' in n for n in j['notes'])\""

"$cli" analyze --json "$dir/gen/leak.db" >"$dir/leak.analysis.json"
"$cli" replay --json "$dir/gen/leak.db" >"$dir/leak.json"
check "one device from the start: analyze --json's summary peaks = replay's recorded peaks = the replay's" \
  "python3 -c \"import json,sys; a=json.load(open('$dir/leak.analysis.json'))['summary']; d=json.load(open('$dir/leak.json'))['devices'][0]; r=d['recorded']; sys.exit(0 if a['peak_reserved_bytes'] == r['peak_reserved_bytes'] == d['peak_reserved_bytes'] and a['peak_allocated_bytes'] == r['peak_allocated_bytes'] == d['peak_allocated_bytes'] else 1)\""

# Out of memory on a smaller card, and a recorded out of memory.
"$cli" replay --json --capacity 1G "$dir/A.db" >"$dir/small.json"
check "--capacity 1G: device 0 runs out of memory; the first OOM names the request and what was live" \
  "json $dir/small.json \"j['devices'][0]['oom'] is not None and j['devices'][0]['oom']['requested_bytes'] > 0 and len(j['devices'][0]['oom']['live']) > 0 and j['devices'][0]['oom']['live'][0]['stack'] and j['capacity_bytes'] == 1 << 30\""
"$cli" replay --capacity 1G "$dir/A.db" >"$dir/small.txt"
check "--capacity 1G, text: the first out of memory with its live sites" \
  "grep -q 'out of memory: first at event' $dir/small.txt && grep -q 'replay_workload.c' $dir/small.txt"
"$cli" replay --json "$dir/gen/oom.db" >"$dir/oom.json"
check "a recorded out of memory happens in the replay too, marked as recorded" \
  "json $dir/oom.json \"j['devices'][0]['oom']['recorded'] is True and j['devices'][0]['ooms'] == 1\""
"$cli" replay --json --capacity 128M "$dir/gen/oom.db" >"$dir/oom2.json"
check "on a bigger card the recorded out of memory does not happen, and the note says so" \
  "json $dir/oom2.json \"j['devices'][0]['oom'] is None and any('does not happen' in n for n in j['notes'])\""

# The sweep.
"$cli" replay --sweep --jobs 2 "$dir/A.db" >"$dir/sweep.txt"
check "sweep: exit 0, 20 ranked rows, the recorded one marked, the best line" \
  "[ \$(grep -cE '^ +[0-9]+  ' $dir/sweep.txt) -eq 20 ] && grep -q '\[recorded\]' $dir/sweep.txt && grep -q '^best: PYTORCH_CUDA_ALLOC_CONF=' $dir/sweep.txt"
"$cli" replay --sweep --json --jobs 2 "$dir/A.db" >"$dir/sweep.json"
check "sweep --json: ranked by peak reserved (the largest device), the recorded row equal to a single replay" \
  "python3 - $dir/sweep.json $dir/A.json $dir/p1.json <<'PY'
import json, sys
s, a, p1 = (json.load(open(f)) for f in sys.argv[1:4])
rows = s['ranked']
peaks = [max(d['peak_reserved_bytes'] for d in r['devices']) for r in rows if not any(d['ooms'] for d in r['devices'])]
rec = [r for r in rows if r['recorded_settings']]
ms64 = [r for r in rows if r['pytorch_cuda_alloc_conf'] == 'max_split_size_mb:64']
ok = len(rows) == 20 and peaks == sorted(peaks) and [r['rank'] for r in rows] == list(range(1, 21))
ok &= len(rec) == 1 and rec[0]['devices'] == a['devices'] and len(ms64) == 1 and ms64[0]['devices'] == p1['devices']
sys.exit(0 if ok else 1)
PY"
"$cli" replay --sweep --capacity 1G --jobs 2 "$dir/A.db" >"$dir/sweep1g.txt"
check "sweep on a 1 GiB card: settings that run out of memory are ranked last and marked" \
  "grep -qE ' yes +' $dir/sweep1g.txt"

# Suggestions (memsnap analyze's: the sweep run in-process, replay/suggest.c). A replayed under
# expandable segments reserves what the run under them recorded (B3, checked above), more than 5%
# less than A: the first suggestion, with the bytes saved against A's recorded peak.
"$cli" analyze --json --suggest-time 300 "$dir/A.db" >"$dir/A.suggest.json"
check "suggestions: expandable_segments:True first; its peak reserved is the run under it (B3); saved_bytes against A's" \
  "python3 - $dir/A.suggest.json $dir/r3.json $dir/A.json <<'PY'
import json, sys
j, b3, a = (json.load(open(f)) for f in sys.argv[1:4])
g, sw = j['suggestions'], j['suggestions_sweep']
b3_peak = max(d['recorded']['peak_reserved_bytes'] for d in b3['devices'])
a_peak = max(d['recorded']['peak_reserved_bytes'] for d in a['devices'])
ok = g[0]['pytorch_cuda_alloc_conf'] == 'expandable_segments:True' and g[0]['peak_reserved_bytes'] == b3_peak
ok &= g[0]['saved_bytes'] == a_peak - b3_peak and g[0]['saved_bytes'] > 0.05 * a_peak and g[0]['fits'] is False
ok &= sw['status'] == 'done' and sw['settings'] == sw['settings_replayed'] == 20 and sw['baseline_peak_reserved_bytes'] == a_peak
ok &= all(s['saved_bytes'] >= 0.05 * a_peak for s in g) and [s['peak_reserved_bytes'] for s in g] == sorted(s['peak_reserved_bytes'] for s in g)
ok &= set(g[0]) >= {'pytorch_cuda_alloc_conf', 'peak_reserved_bytes', 'saved_bytes', 'fits'} and 1 <= len(g) <= 5
sys.exit(0 if ok else 1)
PY"
"$cli" analyze --suggest-time 300 "$dir/A.db" >"$dir/A.suggest.txt"
check "suggestions, text: the exact PYTORCH_CUDA_ALLOC_CONF line first, with what it saves" \
  "grep -A1 '^suggestions from the replay' $dir/A.suggest.txt | grep -q '20 of 20 settings replayed' && grep -qx '  1. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True' $dir/A.suggest.txt && grep -A1 '^  1. PYTORCH' $dir/A.suggest.txt | grep -qE 'peak reserved .*, .* \([0-9.]+%\) less'"
"$cli" analyze --json --no-suggest "$dir/A.db" >"$dir/A.nosuggest.json"
"$cli" analyze --no-suggest "$dir/A.db" >"$dir/A.nosuggest.txt"
check "--no-suggest: no suggestions, the sweep not run, no section in the text" \
  "json $dir/A.nosuggest.json \"j['suggestions'] == [] and j['suggestions_sweep']['status'] == 'disabled'\" && ! grep -q 'suggestions from the replay' $dir/A.nosuggest.txt"
mkdir -p "$dir/rel" && "$build/tests/gen_releases" "$dir/rel"
"$cli" analyze --json "$dir/rel/frag.db" >"$dir/frag.json"
check "suggestions (default time limit): 11 blocks of 9 MiB, two to a 20 MiB segment (120 MiB); expandable segments map 100 MiB" \
  "json $dir/frag.json \"j['suggestions'][0]['pytorch_cuda_alloc_conf'] == 'expandable_segments:True' and j['suggestions'][0]['peak_reserved_bytes'] == 100 << 20 and j['suggestions'][0]['saved_bytes'] == 20 << 20 and j['suggestions_sweep']['baseline_peak_reserved_bytes'] == 120 << 20\""
"$cli" analyze --json "$dir/rel/frag_oom.db" >"$dir/frag_oom.json"
"$cli" analyze "$dir/rel/frag_oom.db" >"$dir/frag_oom.txt"
check "suggestions after an out of memory: those that fit, expandable segments first (100 + 700 MiB mapped)" \
  "json $dir/frag_oom.json \"j['suggestions'][0]['pytorch_cuda_alloc_conf'] == 'expandable_segments:True' and j['suggestions'][0]['peak_reserved_bytes'] == 800 << 20 and all(s['fits'] for s in j['suggestions']) and j['suggestions_sweep']['recorded_ooms'] == 1 and j['suggestions_sweep']['baseline_ooms'] == 1\" && grep -A1 '^  1. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True' $dir/frag_oom.txt | grep -q 'the recorded out of memory does not happen'"
"$cli" analyze --json "$dir/rel/retry.db" >"$dir/retry.suggest.json"
check "no suggestion when no setting saves 5% (the retry's 700 MiB are needed whatever the settings)" \
  "json $dir/retry.suggest.json \"j['suggestions'] == [] and j['suggestions_sweep']['status'] == 'done' and '5%' in j['suggestions_sweep']['note']\""
# The time bound: a longer history (some 300,000 events; the sweep takes about a second here) under
# a 0.2 s limit: what is not replayed by then is left out, and analyze returns in time.
env -i PATH="$PATH" MEMSNAP_BACKEND=sim MEMSNAP_SIM_DEVICES=2 MEMSNAP_SIM_CAPACITY=8G MEMSNAP_RECORD=1 \
  MEMSNAP_MAX_ENTRIES=1000000 MEMSNAP_STACKS=none MEMSNAP_DUMP="$dir/long.db" "$work" 2500 7
t0=$(date +%s.%N)
"$cli" analyze --json --no-suggest "$dir/long.db" >/dev/null
t1=$(date +%s.%N)
"$cli" analyze --json --suggest-time 0.2 "$dir/long.db" >"$dir/long.json"
t2=$(date +%s.%N)
check "--suggest-time 0.2: stops the sweep at its limit (rows left out, said so); analyze takes the analysis + 0.2 s + under 1 s" \
  "json $dir/long.json \"j['suggestions_sweep']['time_limit_reached'] and j['suggestions_sweep']['settings_replayed'] < 20 and j['suggestions_sweep']['time_limit_s'] == 0.2\" && python3 -c 'import sys; a, b, c = map(float, sys.argv[1:]); sys.exit(0 if c - b < (b - a) + 0.2 + 1.0 else 1)' $t0 $t1 $t2"
"$cli" analyze --suggest-time 0.2 "$dir/long.db" >"$dir/long.txt"
check "--suggest-time, text: the limit came first, and memsnap replay --sweep replays every setting" \
  "grep -q 'the time limit (0.2 s) came first' $dir/long.txt && grep -q 'memsnap replay --sweep' $dir/long.txt"
"$build/tests/gen_snapshots" "$dir/gen" 510000 >/dev/null
"$cli" analyze --json "$dir/gen/big.db" >"$dir/big.json"
check "more than 500,000 events: the sweep is not run by analyze (its time stays the analysis's); the note names memsnap replay --sweep" \
  "json $dir/big.json \"j['suggestions'] == [] and j['suggestions_sweep']['status'] == 'too_large' and 'memsnap replay --sweep' in j['suggestions_sweep']['note']\""
"$cli" analyze --suggest-time 0 "$dir/A.db" >/dev/null 2>"$dir/u.err"
check "--suggest-time 0: a usage error (exit 2)" "[ \$? -eq 2 ] && grep -q 'suggest-time takes seconds' $dir/u.err"

# Hostile and inconsistent traces: each gives an answer or a one-line error, never a crash.
hostile() { # NAME SQL: a copy of A.db edited by SQL, replayed; sets rc
  cp "$dir/A.db" "$dir/h.db"
  sqlite3 "$dir/h.db" "$2"
  "$cli" replay --json "$dir/h.db" >"$dir/h.json" 2>"$dir/h.err"
  rc=$?
}
hostile "double free" "insert into events(id, time_ns, kind, device, stream, address, size, requested_size) select 100000, time_ns, 2, device, stream, address, size, requested_size from events where kind = 2 and device = 0 order by id desc limit 1"
check "a block freed twice: the second free skipped, counted, noted; the trace said to be inconsistent; exit 0" \
  "[ $rc -eq 0 ] && json $dir/h.json \"j['unknown_frees'] == 1 and any('frees 0x' in n for n in j['notes']) and any('inconsistent' in n for n in j['notes'])\""
hostile "overlap" "update events set kind = 1 where id in (select id from events where kind = 2 and device = 0 order by id limit 3)"
check "allocations at a live address: the old block freed first, counted, noted" \
  "[ $rc -eq 0 ] && json $dir/h.json \"j['duplicate_allocs'] >= 1 and any('still held' in n for n in j['notes'])\""
hostile "bad devices and kinds" "update events set device = 99 where id % 50 = 0; update events set device = -3 where id % 51 = 0; update events set kind = 77 where id % 53 = 0; update events set size = -5, requested_size = -5 where id % 57 = 0"
check "devices out of range, unknown kinds, negative sizes: skipped with a note, an answer" \
  "[ $rc -eq 0 ] && json $dir/h.json \"j['skipped_events'] > 0 and len(j['devices']) == 2\""
hostile "huge request" "update events set size = 1099511627776, requested_size = 1099511627776 where id = (select min(id) from events where kind = 1)"
check "a 1 TiB request: an out of memory in the answer" "[ $rc -eq 0 ] && json $dir/h.json \"j['devices'][0]['oom'] is not None\""
hostile "streams" "insert into events(id, time_ns, kind, device, stream, address, size, requested_size) select 200000 + value, 1, 1, 0, 1000 + value, 1000000000 + value * 4096, 512, 512 from generate_series(1, 1100)"
check "more than 1024 streams: stops with a one-line error and a partial answer (exit 1)" \
  "[ $rc -eq 1 ] && grep -q 'more than 1024 distinct streams' $dir/h.err && json $dir/h.json \"j['error'] and j['devices'][0]['peak_reserved_bytes'] > 0\""
hostile "text in numbers" "update events set size = 'lots', address = x'00ff' where id % 7 = 0; update devices set total_bytes = 'big'; update options set value = '<script>' where name = 'MEMSNAP_MAX_SPLIT_SIZE_MB'"
check "text and blobs where numbers belong, a hostile option value: a clear message, no crash" \
  "[ $rc -le 2 ] && [ -s $dir/h.json -o -s $dir/h.err ]"
hostile "no options" "drop table options"
check "a snapshot without an options table: replayed under the defaults" "[ $rc -eq 0 ] && json $dir/h.json \"len(j['devices']) == 2\""
printf 'not a database' >"$dir/junk.db"
"$cli" replay "$dir/junk.db" >/dev/null 2>"$dir/junk.err"
check "not a snapshot: exit 1 with one error line" "[ $? -eq 1 ] && [ \$(wc -l <$dir/junk.err) -eq 1 ]"

# Usage.
"$cli" replay --set nonsense=1 "$dir/A.db" 2>"$dir/u.err"
check "an unknown setting: exit 2, the known ones listed" "[ $? -eq 2 ] && grep -q 'known: max_split_size_mb' $dir/u.err"
"$cli" replay --set max_split_size_mb=abc "$dir/A.db" 2>"$dir/u.err"
check "an invalid value: exit 2, the library's reason" "[ $? -eq 2 ] && grep -q \"invalid value 'abc'\" $dir/u.err"
"$cli" replay --capacity lots "$dir/A.db" 2>/dev/null
check "a bad --capacity: exit 2" "[ $? -eq 2 ]"
"$cli" replay 2>/dev/null
check "no snapshot: exit 2" "[ $? -eq 2 ]"
"$cli" help replay >"$dir/help.txt"
check "memsnap help replay: the settings, --sweep and an example table" \
  "grep -q 'roundup_power2_divisions' $dir/help.txt && grep -q -- '--sweep' $dir/help.txt && grep -q 'PYTORCH_CUDA_ALLOC_CONF' $dir/help.txt"
MEMSNAP_BACKEND=cuda PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:20 "$cli" replay --json "$dir/A.db" >"$dir/env.json"
check "the caller's MEMSNAP_BACKEND=cuda and PYTORCH_CUDA_ALLOC_CONF do not leak into the replay" "faithful $dir/env.json"

# A snapshot that does not say how much memory its card has (a PyTorch pickle imported by hand):
# the replay gets the most the program held reserved (20 GiB here), not a default too small for it.
# (PY_PRELOAD: a sanitizer's runtime, loaded first into Python under make sanitize)
env ${PY_PRELOAD:+LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"} MEMSNAP_BACKEND=sim \
  MEMSNAP_SIM_CAPACITY=64G MEMSNAP_LIB="$build/libmemsnap.so" PYTHONPATH="$here/../../recorder/python" \
  python3 - "$dir/big.db" <<'PY'
import sys
import memsnap
memsnap.record(max_entries=1000)
kept = [memsnap.malloc(5 << 30) for _ in range(4)]
memsnap.free(kept.pop())
kept.append(memsnap.malloc(3 << 30))
memsnap.dump(sys.argv[1])
PY
python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('update devices set total_bytes = null'); c.commit()" "$dir/big.db"
"$cli" replay --json "$dir/big.db" >"$dir/big.json" 2>"$dir/big.err"
check "no capacity in the snapshot: the replay's is the most the program held (20 GiB), and it replays as recorded" \
  "json $dir/big.json \"j['capacity_bytes'] == 20 << 30 and j['devices'][0]['peak_reserved_bytes'] == 20 << 30 and
    j['devices'][0]['recorded']['peak_reserved_bytes'] == 20 << 30 and j['devices'][0]['failed_allocs'] == 0 and
    any('the most the program held reserved, 20.00 GiB' in n for n in j['notes'])\""

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
