#!/usr/bin/env bash
# test_import.sh BUILD_DIR: `memsnap import` and `memsnap export --format pytorch`: the two real
# PyTorch 2.11 snapshots in tests/data (what the analysis must find in each), round trips
# (memsnap -> PyTorch pickle read by Python; PyTorch -> memsnap -> PyTorch -> memsnap), pickle
# protocols 2 to 5, allocator settings of every type, and bad, truncated and hostile pickles (a
# clear error and exit 1, never a crash, never code run).
# The exported pickles stay in BUILD_DIR/exported/ for PyTorch's own tools:
#   python -m torch.cuda._memory_viz stats BUILD_DIR/exported/resnet50_leak.pickle
set -u
build=$1
here=$(cd "$(dirname "$0")" && pwd)
cli=$build/memsnap
helper="python3 $here/pytorch_pickles.py"
snaps=${SNAPSHOTS:-$here/../data}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
exported=$build/exported
mkdir -p "$exported"
passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }
# json FILE EXPR: evaluates a Python expression over the JSON document `j`.
json() { python3 -c "import json,sys; j=json.load(open('$1')); sys.exit(0 if ($2) else 1)"; }
# sql DB QUERY: the query's single value.
sql() { python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$1" "$2"; }
MiB=1048576

if [ ! -f "$snaps/resnet50_leak.pickle.gz" ] || [ ! -f "$snaps/cycle_oom.pickle.gz" ]; then
  echo "FAIL the real snapshots are not in $snaps (set SNAPSHOTS)"
  echo "0 passed, 1 failed"
  exit 1
fi

# ---- the resnet50 run: gradients and momentum buffers retained, five iterations ---------------
"$cli" import "$snaps/resnet50_leak.pickle.gz" -o "$dir/resnet.db" >"$dir/out" 2>&1
check "import resnet50_leak: exit 0, counts said" "[ \$? -eq 0 ] && grep -q '10052 trace entries, 109 segments, 724 blocks' $dir/out"
# facts DB: one line "name=value" per fact the checks below read (one Python for all).
python3 - "$dir/resnet.db" >"$dir/resnet.facts" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
one = lambda q: c.execute(q).fetchone()[0]
option = lambda n: one("select coalesce((select value from options where name = '%s'), '')" % n)
print("events=%d" % one("select count(*) from events"))
print("ranges_events=%d" % one("select count(*) from events where kind in (9, 10)"))
print("first_ns=%d" % one("select min(time_ns) from events"))
print("start_unix_ns=%d" % one("select value from meta where key = 'start_unix_ns'"))
print("backwards=%d" % one("select count(*) from events a join events b on b.id = a.id + 1 where b.time_ns < a.time_ns"))
print("python_frames=%d" % one("select count(*) from frames where kind = 'python' and file like '%.py'"))
print("op_frames=%d" % one("select count(*) from frames where kind = 'native' and name like 'at::native::%'"))
print("misfiled_frames=%d" % one("select count(*) from frames where file = '??' or (kind = 'python' and file not like '%.py')"))
print("max_split=" + option("MEMSNAP_MAX_SPLIT_SIZE_MB"))
print("expandable=" + option("pytorch.expandable_segments"))
print("roundup=" + option("MEMSNAP_ROUNDUP_POWER2_DIVISIONS"))
PY
fact() { grep -qx "$1" "$dir/resnet.facts"; }
check "resnet: every trace entry is an event, plus a push and a pop per annotation pair" \
  "fact events=10062 && fact ranges_events=10"
check "resnet: events in time order from 0 ns, start_unix_ns the first entry's time_us" \
  "fact first_ns=0 && fact start_unix_ns=1795313459720295000 && fact backwards=0"
check "resnet: Python and C++ frames told apart" \
  "! fact python_frames=0 && ! fact op_frames=0 && fact misfiled_frames=0"
check "resnet: allocator_settings kept as options, and memsnap's equivalents" \
  "fact max_split=unlimited && fact expandable=False && fact 'roundup=\[1:0,2:0,4:0,8:0,16:0,32:0,64:0,128:0,256:0,512:0,1024:0,2048:0,4096:0,8192:0,16384:0,32768:0\]'"
"$cli" analyze --json "$dir/resnet.db" >"$dir/resnet.json"
check "resnet: five iterations from the Optimizer.step#SGD.step annotations" \
  "json $dir/resnet.json \"len(j['iterations']) == 5 and j['summary']['iteration_source'] == 'ranges' and j['summary']['iteration_label'] == 'Optimizer.step#SGD.step'\""
check "resnet: the later iterations have the same peak" \
  "json $dir/resnet.json \"len(set(i['peak_allocated_bytes'] for i in j['iterations'][1:])) == 1\""
# Optimizer.step ranges cover a fraction of each step and end it: iterations run from one
# range's end to the next one's, the first from the history's start (its forward and backward).
check "resnet: iterations cover the whole loop (from the history's start, each ending where an Optimizer.step ends)" \
  "json $dir/resnet.json \"j['summary']['iteration_edges'] == 'range ends' and j['iterations'][0]['start_ns'] == 0 and all(a['end_ns'] == b['start_ns'] for a, b in zip(j['iterations'], j['iterations'][1:])) and j['iterations'][-1]['end_ns'] == 328244000 and min(i['end_ns'] - i['start_ns'] for i in j['iterations']) > 15000000\""
# The trace starts after the model was built: 324 blocks (149.23 MiB) and 2.79 GiB of segments
# predate it, and count from its first instant (the peak: the history's 2993500160 bytes, those blocks, and
# 9240576 bytes by which 14 blocks live at the snapshot exceed their requests: the import gives them their size).
check "resnet: memory from before the history is counted (peak reserved = reserved at the snapshot, 3.38 GiB)" \
  "json $dir/resnet.json \"j['summary']['before_history']['blocks'] == 324 and j['summary']['before_history']['allocated_bytes'] == 156473856 and j['summary']['before_history']['reserved_bytes'] == 2996830208 and j['summary']['peak_reserved_bytes'] == j['summary']['reserved_bytes'] == 3623878656 and j['summary']['peak_allocated_bytes'] == 2993500160 + 156473856 + 9240576\""
# What is retained: momentum buffers (allocated by the first optimizer.step, in sgd.py), and the
# gradients (allocated by the first backward pass's autograd nodes on the autograd thread, kept by
# AccumulateGrad; later backward passes allocate there again but free what they allocate).
check "resnet: the momentum buffers are retained since the first iteration (clone from sgd.py, 161 blocks, 100.75 MiB)" \
  "json $dir/resnet.json \"any(l['kind'] == 'retained' and l['stack'] and l['stack'][0]['short_name'] == 'at::native::clone()' and l['stack'][1]['file'].endswith('torch/optim/sgd.py') and l['live_count'] == 161 and abs(l['live_bytes'] - 100.75 * $MiB) < $MiB for l in j['held'])\""
check "resnet: the gradients are retained since the first backward pass (autograd Backward0 nodes, conv weights 53 blocks)" \
  "json $dir/resnet.json \"any(l['kind'] == 'retained' and any('ConvolutionBackward0' in f['name'] for f in l['stack']) and l['live_count'] == 53 and l['live_bytes'] > 90 * $MiB for l in j['held'])\""
check "resnet: every gradient site (a backward node in its stack) is retained, nothing grows" \
  "json $dir/resnet.json \"all(l['kind'] == 'retained' for l in j['held'] if any('Backward0' in f['name'] for f in l['full_stack'])) and j['leaks'] == [] and sum(l['live_bytes'] for l in j['held'] if any('Backward0' in f['name'] for f in l['full_stack'])) > 100 * $MiB\""
# (an operator's entry in the dispatcher, at::_ops::sum_dim_IntList::call, stays as its operator's
# name, aten::sum: it names what allocated where the rest is machinery)
check "resnet: stacks folded to what matters (no allocator, dispatcher or thread start-up frames)" \
  "json $dir/resnet.json \"all(not any(s in f['name'] for s in ('CUDACachingAllocator', 'unwind', 'CapturedTraceback', 'wrap_kernel_functor', 'at::_ops::', 'Engine::', '__clone', 'pthread_')) or (f['name'].startswith('at::_ops::') and f['short_name'].startswith('aten::')) for l in j['held'] for f in l['stack']) and [l for l in j['held'] if l['live_count'] == 53][0]['stack'][0]['short_name'] == 'ConvolutionBackward0' and [l for l in j['held'] if l['live_count'] == 53][0]['stack'][0]['name'].startswith('torch::autograd::generated::ConvolutionBackward0')\""
"$cli" analyze "$dir/resnet.db" >"$dir/resnet.txt"
check "resnet: the text report names the import and the iterations" \
  "grep -q 'imported from resnet50_leak.pickle.gz (PyTorch snapshot, pickle protocol 4)' $dir/resnet.txt && grep -q \"5 from ranges labelled 'Optimizer.step#SGD.step'\" $dir/resnet.txt"
# PyTorch's C++ names run to hundreds of characters: reports show them short, whole on demand.
# (an autograd node's stack reads as its node: its operator's frames are shown with --full-stacks)
"$cli" analyze --full-stacks "$dir/resnet.db" >"$dir/resnet-stacks.txt"
check "resnet: C++ names shortened in the text report (no line over 120 characters, no [clone ...], templates as <>)" \
  "[ \$(awk '{ if (length(\$0) > m) m = length(\$0) } END { print m }' $dir/resnet.txt) -le 120 ] && ! grep -q 'clone \\.' $dir/resnet.txt && grep -q '^       at::_sum_to<>()$' $dir/resnet.txt && grep -q '^       at::cuda::blas::gemm_internal_cublas<>()$' $dir/resnet-stacks.txt && grep -q '^       at::native::(anonymous namespace)::addmm_out_cuda_impl()$' $dir/resnet-stacks.txt"
"$cli" analyze --full-stacks --full-names "$dir/resnet.db" >"$dir/resnet-full.txt"
check "resnet: --full-names prints them whole" \
  "grep -q 'at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&, .*) \\[clone .isra.0\\]$' $dir/resnet-full.txt"
check "resnet: a Python stack starts at the operator that allocated, then the Python line (dispatch and interpreter frames folded)" \
  "grep -A3 'live at the allocated peak' $dir/resnet.txt | tail -2 | tr -s ' ' | tr '\\n' '|' | grep -qx ' at::native::cudnn_convolution()| _conv_forward (conv.py:548)|'"
check "resnet: JSON keeps the whole name and gives the short one" \
  "json $dir/resnet.json \"[(f['short_name'], f['name'][:41]) for f in j['live_at_peak'][0]['stack']][0] == ('at::native::cudnn_convolution()', 'at::native::cudnn_convolution(at::Tensor ')\""
"$cli" analyze --fold 'at::native::*,nothing' --fold '_conv_forward@*/torch/nn/modules/conv.py' "$dir/resnet.db" >"$dir/resnet-fold.txt"
check "resnet: with the operator's frames folded, the operator's entry in the dispatcher names it (aten::cudnn_convolution)" \
  "grep -A3 'live at the allocated peak' $dir/resnet-fold.txt | tail -2 | tr -s ' ' | tr '\\n' '|' | grep -qx ' aten::cudnn_convolution| forward (conv.py:553)|'"
"$cli" analyze --fold 'at::native::*,aten::*,nothing' --fold '_conv_forward@*/torch/nn/modules/conv.py' "$dir/resnet.db" >"$dir/resnet-fold.txt"
check "resnet: --fold adds patterns (a name glob, aten::* for the operators' names, NAME@FILE for Python frames)" \
  "grep -A2 'live at the allocated peak' $dir/resnet-fold.txt | tail -1 | grep -qx '        forward (conv.py:553)'"
"$cli" analyze --html "$dir/resnet.html" "$dir/resnet.db" && "$cli" info "$dir/resnet.db" >/dev/null
check "resnet: the page and info work on the imported snapshot" "[ \$? -eq 0 ] && grep -q 'memsnap-viewer-2' $dir/resnet.html"

# ---- the cycle run: one growing site, an OOM of 256 MiB ---------------------------------------
"$cli" import "$snaps/cycle_oom.pickle.gz" -o "$dir/cycle.db" >/dev/null
"$cli" analyze --json "$dir/cycle.db" >"$dir/cycle.json"
check "cycle: one growing site, +512 MiB per iteration, at torch.zeros from capture_torch.py:22, first candidate" \
  "json $dir/cycle.json \"j['leaks'][0]['kind'] == 'growing' and j['leaks'][0]['bytes_per_iteration'] == 512 * $MiB and j['leaks'][0]['stack'][0]['short_name'] == 'at::native::zeros_symint()' and j['leaks'][0]['stack'][1]['name'] == '<module>' and j['leaks'][0]['stack'][1]['line'] == 22 and sum(l['kind'] == 'growing' for l in j['leaks']) == 1 and len(j['top_sites']) == 1 and j['top_sites'][0]['allocations'] == 31\""
check "cycle: its OOM: 256 MiB requested, the device's free memory, the growing site as the cause" \
  "json $dir/cycle.json \"len(j['oom']) == 1 and j['oom'][0]['requested_bytes'] == 256 * $MiB and j['oom'][0]['device_free_bytes'] == 141139509248 and j['oom'][0]['live_by_site'][0]['live_bytes'] == 31 * 256 * $MiB\""
"$cli" analyze "$dir/cycle.db" >"$dir/cycle.txt"
check "cycle: the text report says it" \
  "grep -q '256.00 MiB requested; the device had 131.45 GiB free' $dir/cycle.txt && grep -q 'would have fit: without the growing site' $dir/cycle.txt"

# ---- export: memsnap -> PyTorch ------------------------------------------------------------------
"$build/tests/gen_snapshots" "$dir" >/dev/null || { echo "FAIL gen_snapshots"; echo "$passed passed, $((failed + 1)) failed"; exit 1; }
"$cli" export --format pytorch "$dir/leak.db" -o "$exported/leak.pickle"
check "export leak.db: exit 0" "[ \$? -eq 0 ]"
check "export leak.db: Python's pickle reads it; keys, counts, actions, tiling, frames as PyTorch's tools read them" \
  "[ \"\$($helper check-export $exported/leak.pickle $dir/leak.db)\" = ok ] || { $helper check-export $exported/leak.pickle $dir/leak.db; false; }"
python3 - "$exported/leak.pickle" >"$dir/leak.check" 2>&1 <<'PY'
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
t = d["device_traces"][0]
names = {f["name"] for e in t for f in e["frames"]}
assert {"keep_history", "load_weights", "activation"} <= names, names
assert [a["name"] for a in d["external_annotations"] if a["stage"] == "START"] == ["step %d" % i for i in range(1, 7)]
assert sum(e["size"] for e in t if e["action"] == "alloc" and any(f["name"] == "keep_history" for f in e["frames"])) == 6 << 20
assert d["allocator_settings"]["max_split_size"] == -1 and d["allocator_settings"]["roundup_power2_divisions"]["1"] == 0
print("ok")
PY
check "export leak.db: the leak's six 1 MiB allocations, the six marks as annotations, settings" "grep -q '^ok' $dir/leak.check || { cat $dir/leak.check; false; }"
"$cli" import "$exported/leak.pickle" -o "$dir/leak2.db" >/dev/null && "$cli" analyze --json "$dir/leak2.db" >"$dir/leak2.json"
check "export -> import: the same analysis (six iterations, keep_history growing by 1 MiB, weights and state retained)" \
  "json $dir/leak2.json \"len(j['iterations']) == 6 and j['leaks'][0]['kind'] == 'growing' and j['leaks'][0]['stack'][0]['name'] == 'keep_history' and j['leaks'][0]['bytes_per_iteration'] == $MiB and sorted(l['stack'][0]['name'] for l in j['held'][0:2]) == ['load_weights', 'make_optimizer_state']\" ||
  { python3 -c \"import json; j = json.load(open('$dir/leak2.json')); print(len(j['iterations']), [(l['kind'], l['score'], l['bytes_per_iteration'], l['stack'][0]['name']) for l in (j['leaks'] + j['held'])[:4]])\"; false; }"
"$cli" export "$dir/oom.db" -o "$dir/oom.pickle.gz" && "$cli" import "$dir/oom.pickle.gz" -o "$dir/oom2.db" >/dev/null &&
  "$cli" analyze --json "$dir/oom2.db" >"$dir/oom2.json"
check "export to .gz -> import: the OOM survives (40 MiB requested, 24 MiB free)" \
  "[ \"\$(head -c2 $dir/oom.pickle.gz | od -An -tx1 | tr -d ' ')\" = 1f8b ] && json $dir/oom2.json \"len(j['oom']) == 1 and j['oom'][0]['requested_bytes'] == 40 * $MiB and j['oom'][0]['device_free_bytes'] == 24 * $MiB\""

# Hostile values in a well-formed snapshot: export answers (exit 0 or 1), and what it writes loads.
crashes=$(PYTHONPATH="$(dirname "$0")" python3 - "$cli" "$dir" <<'PY'
import pickle, subprocess, sys
from snapshot_mutants import mutants
cli, d = sys.argv[1], sys.argv[2]
mutations = [
    "update events set kind = 77", "update events set size = 'x', address = null", "update events set device = 5000",
    "update events set device = -3", "update events set stack_id = 999999", "delete from frames", "delete from labels",
    "update frames set name = null, file = x'ff00fe'", "update frames set name = char(55357) || 'x'",
    "update blocks set segment_id = 99", "update blocks set state = 'weird', stack_id = -1",
    "update segments set pool = null, size = -1", "update ranges set end_ns = null, label_id = 77",
    "update meta set value = 'x' where key = 'start_unix_ns'", "update meta set value = 9223372036854775807 where key = 'start_unix_ns'",
    "update options set value = '[1:' where name = 'MEMSNAP_ROUNDUP_POWER2_DIVISIONS'", "delete from options",
    "update events set time_ns = -9223372036854775807",
]
bad = []
for m, path in mutants("%s/leak.db" % d, d, mutations, prefix="xm"):
    out = path[:-3] + ".pickle"
    r = subprocess.run([cli, "export", path, "-o", out], capture_output=True)
    if r.returncode not in (0, 1):
        bad.append("%s -> %d" % (m[:50], r.returncode))
    elif r.returncode == 0:
        try:
            pickle.load(open(out, "rb"))
        except Exception as e:
            bad.append("%s -> unreadable pickle: %s" % (m[:50], e))
print("; ".join(bad) if bad else "ok")  # "ok" only when every copy was answered
PY
)
check "export of hostile values: exit 0 or 1, and a pickle Python reads ($crashes)" "[ \"\$crashes\" = ok ]"

# ---- PyTorch -> memsnap -> PyTorch -> memsnap -------------------------------------------------
"$cli" export "$dir/resnet.db" -o "$exported/resnet50_leak.pickle"
check "export the imported resnet: as PyTorch's tools read it" "[ \"\$($helper check-export $exported/resnet50_leak.pickle $dir/resnet.db)\" = ok ]"
check "export the imported resnet: every entry, segment, block, annotation and setting equal to PyTorch's original" \
  "[ \"\$($helper same $snaps/resnet50_leak.pickle.gz $exported/resnet50_leak.pickle)\" = ok ] || { $helper same $snaps/resnet50_leak.pickle.gz $exported/resnet50_leak.pickle; false; }"
"$cli" export "$dir/cycle.db" -o "$exported/cycle_oom.pickle"
check "export the imported cycle run: equal to PyTorch's original (with its oom entry)" \
  "[ \"\$($helper same $snaps/cycle_oom.pickle.gz $exported/cycle_oom.pickle)\" = ok ]"
"$cli" import "$exported/resnet50_leak.pickle" -o "$dir/resnet2.db" >/dev/null
python3 - "$dir/resnet.db" "$dir/resnet2.db" >"$dir/rt.check" 2>&1 <<'PY'
import sqlite3, sys
a, b = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
for q in ("select * from events order by id", "select * from segments order by id", "select * from blocks order by id",
          "select * from ranges order by id", "select * from labels order by id", "select * from stack_frames order by 1, 2",
          "select * from frames order by id", "select * from stacks order by id", "select * from stats order by 1, 2",
          "select * from options order by 1", "select * from devices",
          "select * from meta where key not in ('import_file') order by 1"):
    x, y = a.execute(q).fetchall(), b.execute(q).fetchall()
    assert x == y, (q, len(x), len(y), [r for r in zip(x, y) if r[0] != r[1]][:2])
print("ok")
PY
check "import -> export -> import: the two snapshots are equal, table by table" "grep -q '^ok' $dir/rt.check || { cat $dir/rt.check; false; }"

# ---- several devices, expandable segments, annotations -----------------------------------------
$helper multi "$dir/multi.pickle"
"$cli" import "$dir/multi.pickle" -o "$dir/multi.db" >/dev/null 2>"$dir/multi.err"
check "multi: imported, warning about the unknown action and the END without START" \
  "[ \$? -eq 0 ] && grep -q \"1 trace entries with actions memsnap has no kind for (the first: 'user_defined')\" $dir/multi.err && grep -q '1 annotation ENDs had no START' $dir/multi.err"
python3 - "$dir/multi.db" >"$dir/multi.check" 2>&1 <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
ev = c.execute("select e.time_ns, k.name, e.device, e.address, e.size, e.requested_size, e.extra from events e "
               "join event_kinds k on k.id = e.kind order by e.id").fetchall()
names = [(k, d) for _, k, d, *_ in ev]
# time order across devices: device_traces[1] is device 1, [2] device 2 ([0] had no entries)
assert names == [("segment_map", 1), ("range_push", None), ("range_push", None), ("segment_alloc", 2), ("alloc", 1),
                 ("alloc", 2), ("alloc", 1), ("oom", 2), ("free_requested", 1), ("free_completed", 1),
                 ("range_pop", None), ("range_pop", None), ("range_push", None), ("segment_unmap", 1),
                 ("snapshot", None)], names
assert [t for t, *_ in ev][:4] == [0, 1000, 2000, 5000] and ev[-1][0] == ev[-2][0]  # ns since the first; no time_us: the previous
oom = [r for r in ev if r[1] == "oom"][0]
assert oom[3:] == (12345, 4 << 20, 4 << 20, 0), oom  # device_free; the request; the cache: 20 MiB reserved, 20 MiB allocated
alloc = [r for r in ev if r[1] == "alloc"][0]
assert alloc[4:6] == (1024, 1000), alloc  # block size rounded, the request kept
ranges = c.execute("select l.text, r.depth, r.start_ns, r.end_ns from ranges r join labels l on l.id = r.label_id order by r.id").fetchall()
assert ranges == [("outer", 0, 1000, 65000), ("inner", 1, 2000, 60000), ("open", 0, 66000, None)], ranges
assert c.execute("select group_concat(device) from devices").fetchone()[0] == "1,2"
assert c.execute("select value from options where name = 'pytorch.expandable_segments'").fetchone()[0] == "True"
print("ok")
PY
check "multi: devices from their lists, interleaved in time; map/unmap, oom, snapshot; nested ranges" "grep -q '^ok' $dir/multi.check || { cat $dir/multi.check; false; }"
"$cli" analyze --json "$dir/multi.db" >"$dir/multi.json"
check "multi: the analysis counts mapped memory as reserved" "json $dir/multi.json \"j['summary']['peak_reserved_bytes'] == (2 << 20) + (20 << 20)\""
"$cli" export "$dir/multi.db" -o "$dir/multi2.pickle"
python3 - "$dir/multi.pickle" "$dir/multi2.pickle" >"$dir/multi2.check" 2>&1 <<'PY'
import pickle, sys
a, b = (pickle.load(open(p, "rb")) for p in sys.argv[1:])
acts = lambda t: [e["action"] for e in t]
assert len(b["device_traces"]) == 3 and b["device_traces"][0] == [], [len(t) for t in b["device_traces"]]
assert acts(b["device_traces"][1]) == [x for x in acts(a["device_traces"][1]) if x != "user_defined"]
assert acts(b["device_traces"][2]) == acts(a["device_traces"][2]) + ["snapshot"]  # in every device's list that has entries
assert b["device_traces"][2][2]["device_free"] == 12345 and b["device_traces"][1][1]["size"] == 1000
assert [(x["stage"], x["name"]) for x in b["external_annotations"]] == [("START", "outer"), ("START", "inner"),
        ("END", "inner"), ("END", "outer"), ("START", "open")]
assert b["allocator_settings"] == {"expandable_segments": True}
print("ok")
PY
check "multi: exported back: three device lists, the entries, the annotations that had a START" "grep -q '^ok' $dir/multi2.check || { cat $dir/multi2.check; false; }"

# ---- protocols, settings, output -------------------------------------------------------------
$helper protocols "$snaps/resnet50_leak.pickle.gz" "$dir"
ok=1
for p in 2 3 4 5; do
  "$cli" import "$dir/proto$p.pickle" -o "$dir/proto$p.db" >/dev/null 2>&1 || ok=0
  [ "$(sql "$dir/proto$p.db" 'select count(*) || "/" || (select count(*) from blocks) || "/" || (select count(*) from frames) from events')" = "10062/724/$(sql "$dir/resnet.db" 'select count(*) from frames')" ] || ok=0
done
check "pickle protocols 2, 3, 4 and 5 of the same snapshot import the same" "[ $ok -eq 1 ]"
$helper settings "$dir/settings.pickle" "$dir/settings.expected"
"$cli" import "$dir/settings.pickle" -o "$dir/settings.db" >/dev/null
python3 -c "import sqlite3; [print('%s|%s' % r) for r in sqlite3.connect('$dir/settings.db').execute(\"select name, value from options where name like 'pytorch.%' order by name\")]" >"$dir/settings.got"
check "values of every type read exactly (ints of 1 to 9 bytes, floats, bools, None, UTF-8 text, a dict)" \
  "diff -u $dir/settings.expected $dir/settings.got"
cp "$snaps/cycle_oom.pickle.gz" "$dir/in.pickle.gz"
"$cli" import "$dir/in.pickle.gz" -o "$dir/in.pickle.gz" 2>"$dir/err"
check "import: -o the input is refused, the input untouched" \
  "[ \$? -eq 1 ] && grep -q 'is an input: refusing to overwrite it' $dir/err && cmp -s $dir/in.pickle.gz $snaps/cycle_oom.pickle.gz"
ln "$dir/in.pickle.gz" "$dir/link.pickle.gz"
"$cli" import "$dir/in.pickle.gz" -o "$dir/link.pickle.gz" 2>/dev/null
check "import: -o a hard link of the input is refused too" "[ \$? -eq 1 ] && cmp -s $dir/in.pickle.gz $snaps/cycle_oom.pickle.gz"
"$cli" export "$dir/leak.db" -o "$dir/leak.db" 2>/dev/null
check "export: -o the input is refused" "[ \$? -eq 1 ] && [ \$(sql $dir/leak.db 'select count(*) from meta') -gt 5 ]"
echo "precious" >"$dir/keep.db"
printf '\x80\x04}\x94' >"$dir/cut.pickle"
"$cli" import "$dir/cut.pickle" -o "$dir/keep.db" 2>/dev/null
check "import: a failed import leaves the existing output as it was, and no temporary file" \
  "[ \$? -eq 1 ] && [ \"\$(cat $dir/keep.db)\" = precious ] && ! ls $dir | grep -q tmp-"
"$cli" import >/dev/null 2>&1
check "usage: import with nothing is exit 2" "[ \$? -eq 2 ]"
"$cli" import "$dir/cut.pickle" >/dev/null 2>&1
check "usage: import without -o is exit 2" "[ \$? -eq 2 ]"
"$cli" export --format json "$dir/leak.db" -o "$dir/x" >/dev/null 2>"$dir/err"
check "usage: export --format other than pytorch is exit 2" "[ \$? -eq 2 ] && grep -q \"the only format is 'pytorch'\" $dir/err"
"$cli" export "$dir/nope.db" -o "$dir/x.pickle" 2>"$dir/err"
check "export: a missing snapshot is an error naming it" "[ \$? -eq 1 ] && grep -q nope.db $dir/err"

# ---- bad, truncated and hostile pickles ----------------------------------------------------------
marker=$dir/MARKER-code-ran
$helper hostile "$dir" "$marker"
# bad NAME FILE PATTERN: exit 1, the pattern in the message, no crash, no output left.
bad() {
  "$cli" import "$2" -o "$dir/bad.db" >/dev/null 2>"$dir/err"
  local rc=$?
  check "hostile: $1 (exit 1, '$3')" "[ $rc -eq 1 ] && grep -q \"$3\" $dir/err && [ ! -e $dir/bad.db ] || { cat $dir/err; false; }"
}
for p in 2 3 4 5; do bad "os.system reduce, protocol $p" "$dir/reduce-p$p.pickle" "GLOBAL: refused: the pickle imports 'posix.system'"; done
bad "a reduce inside a snapshot's frame" "$dir/reduce-nested.pickle" "refused: the pickle imports 'posix.system'"
bad "a reduce inside a gzip snapshot" "$dir/reduce-nested.pickle.gz" "refused"
check "hostile: none of the reduce payloads ran (no marker file)" "[ ! -e $marker ]"
bad "GLOBAL" "$dir/global.pickle" "offset 2: GLOBAL: refused: the pickle imports 'os.system'"
bad "BUILD" "$dir/build.pickle" "BUILD: refused"
bad "INST" "$dir/inst.pickle" "INST: refused"
bad "PERSID" "$dir/persid.pickle" "PERSID: refused"
bad "protocol 0 text STRING" "$dir/text-string.pickle" "STRING: refused"
bad "100000 nested lists" "$dir/deep.pickle" "nested deeper than 200 levels"
bad "a 2^62-byte BINUNICODE8" "$dir/huge-unicode8.pickle" "a length of 4611686018427387904 bytes, but only 3 bytes of input are left"
bad "a 4 GiB BINBYTES" "$dir/huge-binbytes.pickle" "only 3 bytes of input are left"
bad "a 2 GiB LONG4" "$dir/huge-long4.pickle" "only 2 bytes of input are left"
bad "an undefined memo index" "$dir/memo-undefined.pickle" "BINGET: memo index 5 is not defined"
bad "a memo index far ahead" "$dir/memo-sparse.pickle" "LONG_BINPUT: memo index 268435456 skips ahead"
bad "APPEND with nothing to append" "$dir/stack-underflow.pickle" "APPEND: needs 2 values"
bad "APPENDS without MARK" "$dir/appends-no-mark.pickle" "APPENDS: no MARK"
bad "SETITEM on a list" "$dir/setitem-list.pickle" "SETITEM: the target is a list, not a dict"
bad "an unhashable dict key" "$dir/unhashable-key.pickle" "unhashable"
bad "1.2 million values on the stack" "$dir/many-values.pickle" "more than 1048576 values on the stack"
bad "no STOP" "$dir/no-stop.pickle" "ends without STOP"
bad "two values at STOP" "$dir/two-values.pickle" "expected one value"
bad "protocol 9" "$dir/protocol-9.pickle" "protocol 9; this reader reads protocols 2 to 5"
bad "protocol 0" "$dir/protocol-0.pickle" "not a pickle of protocol 2 to 5"
bad "an empty file" "$dir/empty.pickle" "the input is empty"
bad "a text file" "$dir/text.pickle" "not a pickle"
bad "an unknown opcode" "$dir/unknown-opcode.pickle" "opcode 0xff: unknown opcode"
bad "a pickle that is not a snapshot" "$dir/not-a-snapshot.pickle" "not a PyTorch memory snapshot: the top level is a dict without"
bad "a number" "$dir/int.pickle" "the top level is a int"
bad "a wrong field type" "$dir/bad-field.pickle" "device_traces entry 0: 'addr' is a str, expected an integer"
bad "an unknown block state" "$dir/bad-state.pickle" "segment 0 block 0: unknown state 'weird'"
bad "entries outside device_traces" "$dir/stray-entries.pickle" "1 trace entries are not in a list of 'device_traces'"
bad "a time out of range" "$dir/huge-time.pickle" "'time_us' is an integer out of range"
bad "a list that holds itself" "$dir/self-list.pickle" "not a PyTorch memory snapshot"
bad "a dict that holds itself" "$dir/self-dict.pickle" "not a PyTorch memory snapshot"
bad "bad gzip data" "$dir/bad.pickle.gz" "cannot read the input"
head -c 40000 "$snaps/resnet50_leak.pickle.gz" >"$dir/cut.pickle.gz"
bad "a truncated gzip file" "$dir/cut.pickle.gz" "the gzip data ends early"
bad "a directory" "$dir" "not a regular file"
bad "a missing file" "$dir/nope.pickle" "No such file"
# Truncated at 20 cut points through both snapshots (plain pickles): exit 1 naming the offset
# and opcode, never a crash, never an output file (test_pickle cuts at every byte, in process).
gzip -dc "$snaps/cycle_oom.pickle.gz" >"$dir/cycle.pickle"
gzip -dc "$snaps/resnet50_leak.pickle.gz" >"$dir/resnet.pickle"
crashes=$(python3 - "$cli" "$dir" <<'PY'
import os, subprocess, sys
cli, d = sys.argv[1], sys.argv[2]
bad = []
for name, cuts in (("cycle.pickle", 15), ("resnet.pickle", 5)):
    data = open(os.path.join(d, name), "rb").read()
    for i in range(cuts):
        cut = (len(data) - 1) * i // (cuts - 1) if i < cuts - 1 else len(data) - 1
        path = os.path.join(d, "trunc.pickle")
        open(path, "wb").write(data[:cut])
        out = os.path.join(d, "trunc.db")
        r = subprocess.run([cli, "import", path, "-o", out], capture_output=True)
        err = r.stderr.decode(errors="replace")
        if r.returncode != 1 or os.path.exists(out) or not ("offset" in err or "empty" in err):
            bad.append("%s cut at %d: exit %d, %s" % (name, cut, r.returncode, err.strip()[:120]))
print("\n".join(bad[:5]) if bad else "ok")  # "ok" only when every case was checked
PY
)
check "truncated at 20 cut points: exit 1 naming the offset, no crash, no output ($crashes)" "[ \"\$crashes\" = ok ]"
# Random damage: bytes changed in a real snapshot. Exit 0 or 1, never a crash (test_pickle does
# a thousand more, in process).
crashes=$(python3 - "$cli" "$dir" <<'PY'
import os, random, subprocess, sys
cli, d = sys.argv[1], sys.argv[2]
rng = random.Random(6)
data = open(os.path.join(d, "cycle.pickle"), "rb").read()
bad = []
for i in range(20):
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(2, len(b))] = rng.randrange(256)
    path = os.path.join(d, "flip.pickle")
    open(path, "wb").write(bytes(b))
    r = subprocess.run([cli, "import", path, "-o", os.path.join(d, "flip.db")], capture_output=True)
    if r.returncode not in (0, 1):
        bad.append("case %d: exit %d %s" % (i, r.returncode, r.stderr[-200:]))
print("\n".join(bad[:5]) if bad else "ok")  # "ok" only when every case was checked
PY
)
check "20 damaged copies (random bytes changed): exit 0 or 1, never a crash ($crashes)" "[ \"\$crashes\" = ok ]"

# Review findings (docs/RELIABILITY.md): each a hostile file that the importer or exporter used
# to mishandle.
python3 - "$dir" <<'PY'
import gzip, pickle, sys
d = sys.argv[1]
seg = {"device": 0, "address": 4096, "total_size": 2097152, "stream": 0, "segment_type": "small", "allocated_size": 0,
       "active_size": 0, "requested_size": 0, "blocks": [{"address": 4096, "size": 2097152, "requested_size": 0, "state": "inactive"}]}
pickle.dump({"segments": [], "device_traces": [[]], "junk": [seg]}, open(d + "/junkseg.pickle", "wb"), protocol=4)
ann = {"stage": "START", "name": "phantom", "time_us": 1, "device": 0}
pickle.dump({"segments": [], "device_traces": [[]], "other": [ann]}, open(d + "/junkann.pickle", "wb"), protocol=4)
# An entry memoized twice, then changed through the first slot after it was taken.
e = b"\x8c\x06action\x8c\x05alloc\x8c\x04addr\x4a\x00\x10\x00\x00\x8c\x04size\x4b\x64\x8c\x07time_us\x4b\x01"
body = (b"\x80\x04}(\x8c\x08segments]\x8c\x0ddevice_traces]]}q\x00q\x01(" + e + b"ua" +
        b"h\x00\x8c\x04size\x4a\x3f\x42\x0f\x00s0" + b"au.")
assert pickle.loads(body)["device_traces"][0][0]["size"] == 999999  # what Python reads
open(d + "/memo_twice.pickle", "wb").write(body)
# A million duplicate keys in a dict appended a million times (7 MB, 7 KB gzipped): Python reads it at once.
n = 1000000
dos = b"\x80\x04]\x94" + b"}\x94(" + b"\x8c\x01x\x94N" + b"u" + b"h\x02Ns" * n + b"a" + b"h\x01a" * n + b"."
small = b"\x80\x04]\x94" + b"}\x94(" + b"\x8c\x01x\x94N" + b"u" + b"h\x02Ns" * 3 + b"a" + b"h\x01a" * 3 + b"."
assert pickle.loads(small) == [{"x": None}] * 4  # the shape: one dict with one key, appended
open(d + "/dupkeys.pickle.gz", "wb").write(gzip.compress(dos))
# 200,000 annotation STARTs then as many ENDs of another name: none matches.
starts = b"".join(b"}(\x8c\x05stageX\x05\x00\x00\x00START\x8c\x04name\x8c\x01A\x8c\x07time_usK\x01\x8c\x06deviceK\x00u" for _ in range(1))
ends = b"}(\x8c\x05stage\x8c\x03END\x8c\x04name\x8c\x01B\x8c\x07time_usK\x02\x8c\x06deviceK\x00u"
m = 200000
anns = b"\x80\x04}(\x8c\x08segments]\x8c\x0ddevice_traces]]a\x8c\x14external_annotations](" + starts + b"2" * (m - 1) + ends + b"2" * (m - 1) + b"eu."
assert len(pickle.loads(anns)["external_annotations"]) == 2 * m
open(d + "/unmatched.pickle.gz", "wb").write(gzip.compress(anns))
PY
python3 - "$dir" <<'PY'
import pickle, struct, sys
body = pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=4)[11:]  # after PROTO and FRAME
# A frame that claims 5 bytes while its opcodes run on, and a frame that starts inside another.
open(sys.argv[1] + "/frame_cross.pickle", "wb").write(b"\x80\x04\x95" + struct.pack("<Q", 5) + body)
open(sys.argv[1] + "/frame_early.pickle", "wb").write(
    b"\x80\x04\x95" + struct.pack("<Q", len(body) + 20) + body[:-1] + b"\x95" + struct.pack("<Q", 1) + b".")
PY
printf '\x80\x04}(\x8c\x08segments]K\x01]\x86\x85N\x8c\x0ddevice_traces]u.' >"$dir/unhashable.pickle" # {'segments': [], ((1, []),): None, ...}
"$cli" import "$dir/unhashable.pickle" -o "$dir/r.db" 2>"$dir/err"
check "review: an unhashable key nested in tuples is refused, as Python refuses it" "[ \$? -eq 1 ] && grep -q 'unhashable' $dir/err"
"$cli" import "$dir/frame_cross.pickle" -o "$dir/r.db" 2>"$dir/err"
check "review: an opcode crossing the end of its frame is refused" "[ \$? -eq 1 ] && grep -q 'crosses the end of its frame' $dir/err"
"$cli" import "$dir/frame_early.pickle" -o "$dir/r.db" 2>"$dir/err"
check "review: a frame beginning inside another is refused" "[ \$? -eq 1 ] && grep -q 'a new frame begins before' $dir/err"
"$cli" import "$dir/junkseg.pickle" -o "$dir/r.db" 2>"$dir/err"
check "review: a segment in a list other than 'segments' is refused" "[ \$? -eq 1 ] && grep -q \"segments found outside the top level's 'segments' list\" $dir/err"
"$cli" import "$dir/junkann.pickle" -o "$dir/r.db" 2>"$dir/err"
check "review: an annotation outside 'external_annotations' is refused" "[ \$? -eq 1 ] && grep -q 'annotations found outside' $dir/err"
"$cli" import "$dir/memo_twice.pickle" -o "$dir/r.db" 2>"$dir/err"
check "review: an object memoized twice (changeable after import) is refused" "[ \$? -eq 1 ] && grep -q 'memoized already' $dir/err"
start=$(date +%s)
"$cli" import "$dir/dupkeys.pickle.gz" -o "$dir/r.db" >"$dir/out" 2>&1
check "review: a million duplicate dict keys, appended a million times: read in seconds" \
  "[ \$? -eq 1 ] && grep -q \"segment 0: 'address' is missing\" $dir/out && [ \$((\$(date +%s) - start)) -lt 20 ]"
start=$(date +%s)
"$cli" import "$dir/unmatched.pickle.gz" -o "$dir/r.db" >"$dir/out" 2>&1
check "review: 200,000 unmatched annotation ENDs: imported in seconds" \
  "[ \$? -eq 0 ] && [ \$(sql $dir/r.db 'select count(*) from ranges') -eq 200000 ] && [ \$((\$(date +%s) - start)) -lt 20 ]"
mkfifo "$dir/fifo"
"$cli" export "$dir/leak.db" -o "$dir/fifo" 2>"$dir/err"
check "review: -o naming a FIFO (or a device) is refused, not replaced by a file" \
  "[ \$? -eq 1 ] && [ -p $dir/fifo ] && grep -q 'is not a regular file' $dir/err"
cp "$dir/leak.db" "$dir/opts.db"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"insert into options values('pytorch..a','1'),('pytorch.k.','2'),('pytorch.'||printf('%.300c','k')||'.x','3'),('pytorch.'||printf('%.300c','k')||'.y','4')\"); c.commit()" "$dir/opts.db"
"$cli" export "$dir/opts.db" -o "$dir/opts.pickle" 2>/dev/null
check "review: hostile option names (empty keys, 300-byte keys) still export a whole pickle" \
  "python3 -c \"import pickle,sys; d=pickle.load(open('$dir/opts.pickle','rb')); s=d['allocator_settings']; sys.exit(0 if 'segments' in d and 'device_traces' in d and s['k'*300] == {'x': 3, 'y': 4} else 1)\""

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
