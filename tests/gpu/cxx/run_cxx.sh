#!/usr/bin/env bash
# run_cxx.sh [PART...]: issue 34's and 36's checks of memsnap's C++ allocator for PyTorch, on the
# GPU machine (one H100, PyTorch 2.11, g++, ninja; build/ carried after tests/gpu/prepare.sh).
# Parts (default: build timing parity ipc compile nocache; `all` adds suite and regions):
#   build      the C++ allocator built from an empty cache (the first build's time), then found
#              in the cache (build_time.py); the compiler's output in $OUT/build.log
#   timing     torch.empty + del, C++ allocator vs pluggable vs native, the three at once on
#              CPUs of their own, 3 rounds (empty_timing.py)
#   parity     torch.cuda.memory function by function, native vs memsnap (C++) vs memsnap through
#              the pluggable interface, both backends (../parity/parity_memory_api.py --no-compile)
#   ipc        the spawn + Queue program (ipc_queue.py), natively on both sides (the baseline),
#              under `memsnap run` with the worker under memsnap and native, and a native trainer
#              whose worker enables memsnap, classic and expandable segments: the sums, the exits,
#              and what stays allocated after torch.cuda.ipc_collect() against the baseline's
#   compile    torch.compile(mode="reduce-overhead"): graph trees' checkpoint restores, then
#              training and evaluation taking turns over two shapes (compile_turns.py), native vs
#              memsnap, each with an empty Inductor cache (both autotune alike): restores, answers,
#              losses, peaks over the run and once every graph is recorded
#   nocache    caching_allocator_enable(False) and PYTORCH_NO_CUDA_MEMORY_CACHING=1 (no_cache.py)
#   suite      PyTorch's test_cuda.py ($TEST_CUDA, default .carry/test_cuda.py), the tests the
#              GPU runs found differing (SUITE_K), natively and under memsnap, for the default
#              settings, expandable segments and the async backend, 6 runs at once
#              (../pytorch_suite/run_test_cuda.py)
#   regions    test_memory_compile_regions as a program that prints the regions' sequence and
#              the trace entries, native and memsnap (compile_regions.py)
# With PARALLEL=1, build and timing run first and alone, then every other part at once (each
# part's runs stay as described), so that the lot fits in 4 minutes of one H100.
# Logs go to $OUT (default /tmp/cxx-out): summary.txt (the table printed last) and one log per part.
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/cxx-out}
mkdir -p "$OUT"
parts=${*:-build timing parity ipc compile nocache}
[ "$parts" = all ] && parts="build timing parity ipc compile nocache suite regions"
want() { [[ " $parts " == *" $1 "* ]]; }
export MEMSNAP_LIB=$PWD/build/libmemsnap.so
export PYTHONPATH=$PWD/recorder/python${PYTHONPATH:+:$PYTHONPATH}
TEST_CUDA=${TEST_CUDA:-.carry/test_cuda.py}
SUITE_K=${SUITE_K:-"test_memory_stats test_allocator_backend test_allocator_memory_fraction_setting test_graph_capture_reclaim test_memory_compile_regions test_memory_plots_free_stack test_cachingAllocator_raw_alloc TestBlockStateAbsorption"}
summary=$OUT/summary.txt
: >"$summary"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# row PART NAME TEXT: a line of the table, kept per part so that parallel parts print in order
row() { printf '| %s | %s |\n' "$2" "$3" | tee -a "$work/rows-$1"; }
last() { grep -h "^$1 " "$2" | tail -n 1 | cut -d' ' -f2-; }
started=$(date +%s)

# ---- build (the default cache: every later part loads it from there) ----------------------------
part_build() {
  timeout 300 python3 tests/gpu/cxx/build_time.py --log "$OUT/build.log" >"$work/build.out" 2>&1
  row build build "$(last BUILD "$work/build.out" | cut -c1-400)"
  python3 -c 'import torch, memsnap; from memsnap import torch_cxx; print(torch_cxx.ensure_built(torch, memsnap.library_path()))' \
    >>"$work/build.out" 2>&1
  cat "$work/build.out" >>"$OUT/build.log"
}

# ---- timing -------------------------------------------------------------------------------------
part_timing() {
  timeout 200 python3 tests/gpu/cxx/empty_timing.py --ops 50000 --repeat 3 >"$OUT/timing.log" 2>&1
  row timing "timing (ns per torch.empty+del; cxx must be <= pluggable)" "$(last TIMING "$OUT/timing.log" | python3 -c '
import json, sys
try:
    t = json.loads(sys.stdin.read())
    print("cxx %s, pluggable %s, native %s: cxx/pluggable %s; rounds %s%s" % (t["median_ns"]["cxx"], t["median_ns"]["pluggable"],
          t["median_ns"]["native"], t["cxx_over_pluggable"], t["rounds"], "; errors %s" % t["errors"] if t["errors"] else ""))
except Exception as e:
    print("no result (%s): see timing.log" % e)')"
}

# ---- parity -------------------------------------------------------------------------------------
part_parity() {
  timeout 200 python3 tests/gpu/parity/parity_memory_api.py --no-compile --json "$OUT/parity.json" >"$OUT/parity.txt" 2>&1
  row parity parity "$(tail -n 2 "$OUT/parity.txt" | tr '\n' ' '); C++ rows that differ: $(awk -F'|' '$6 ~ /DIFFER/ {gsub(/^ +| +$/, "", $2); gsub(/^ +| +$/, "", $3); printf "%s (%s); ", $2, $3}' "$OUT/parity.txt" | cut -c1-600)"
}

# ---- ipc ----------------------------------------------------------------------------------------
ipc_one() {  # ipc_one TAG CONF COMMAND...: one run, its IPC line in $work/ipc-TAG.out
  local tag=$1 conf=$2
  shift 2
  echo "== $tag (PYTORCH_CUDA_ALLOC_CONF=$conf): $*" >"$work/ipc-$tag.out"
  PYTORCH_CUDA_ALLOC_CONF=$conf timeout 150 "$@" >>"$work/ipc-$tag.out" 2>&1
  echo "EXIT $?" >>"$work/ipc-$tag.out"
}
part_ipc() {
  local pids=() conf c tag
  for conf in "" "expandable_segments:True"; do
    c=${conf:+exp}
    c=${c:-classic}
    ipc_one "native-$c" "$conf" python3 tests/gpu/cxx/ipc_queue.py native & pids+=($!)
    for mode in same native-worker; do
      ipc_one "$mode-$c" "$conf" build/memsnap run -q -o "$work/ipc-$mode-$c-%p.db" -- python3 tests/gpu/cxx/ipc_queue.py "$mode" &
      pids+=($!)
    done
    ipc_one "memsnap-worker-$c" "$conf" python3 tests/gpu/cxx/ipc_queue.py memsnap-worker & pids+=($!)
  done
  wait "${pids[@]}"
  cat "$work"/ipc-*.out >"$OUT/ipc.log"
  for c in classic exp; do
    for tag in native same native-worker memsnap-worker; do
      row ipc "ipc $tag $c" "$(python3 - "$work" "$tag" "$c" <<'PY'
import glob, json, sqlite3, sys
work, tag, c = sys.argv[1:]
def result(t):
    try:
        text = open("%s/ipc-%s-%s.out" % (work, t, c)).read()
    except OSError:
        return None, None
    lines = [l for l in text.splitlines() if l.startswith("IPC ")]
    code = [l for l in text.splitlines() if l.startswith("EXIT ")]
    return (json.loads(lines[-1][4:]) if lines else None), (code[-1][5:] if code else "?")
r, code = result(tag)
if r is None:
    print("exit %s; no IPC line (ipc.log)" % code)
    sys.exit()
base, _ = result("native")
same_after = base is not None and r.get("allocated after") == base.get("allocated after")
text = "exit %s; sums right %s; allocators trainer %s, worker %s; allocated after ipc_collect %s B (natively %s B: %s)" % (
    code, r.get("sums") == r.get("want"), r.get("trainer allocator"), r.get("worker allocator"), r.get("allocated after"),
    base.get("allocated after") if base else "?", "same" if same_after else "DIFFERS")
if r.get("error"):
    text += "; error %s" % r["error"]
if tag in ("same", "native-worker"):
    sent = received = 0
    for path in glob.glob("%s/ipc-%s-%s-*.db" % (work, tag, c)):
        db = sqlite3.connect(path)
        sent += db.execute("SELECT count(*) FROM events e JOIN event_kinds k ON k.id = e.kind WHERE k.name = 'ipc_share'").fetchone()[0]
        received += db.execute("SELECT count(*) FROM segments WHERE source = 'cuda_ipc'").fetchone()[0] + \
            db.execute("SELECT count(*) FROM events e JOIN event_kinds k ON k.id = e.kind JOIN labels l ON l.id = e.extra "
                       "WHERE k.name = 'segment_alloc' AND l.text = 'cuda_ipc'").fetchone()[0]
    text += "; snapshots: %d sent, %d received" % (sent, received)
print(text)
PY
)"
    done
  done
}

# ---- scenario LOG SECONDS NAME ENV...: tests/gpu/cxx/NAME.py natively and under memsnap at once, each
# with ENV and an empty Inductor cache of its own (so both compile and autotune alike); their
# output in $work/NAME-native.out and $work/NAME-memsnap.out, appended to $OUT/LOG
scenario() {
  local log=$1 seconds=$2 name=$3 who
  shift 3
  for who in native memsnap; do
    mkdir -p "$work/inductor-$name-$who"
    env TORCHINDUCTOR_CACHE_DIR="$work/inductor-$name-$who" "$@" timeout "$seconds" \
      python3 "tests/gpu/cxx/$name.py" "$who" >"$work/$name-$who.out" 2>&1 &
  done
  wait
  cat "$work/$name-native.out" "$work/$name-memsnap.out" >>"$OUT/$log"
}

# compare NAME TAG: runs the Python on stdin with n, m = the two sides' last TAG lines (dicts;
# {} where a side printed none)
compare() {
  local name=$1 tag=$2 code
  code=$(cat)
  python3 -c "import json, sys
n, m = (json.loads(a) if a else {} for a in sys.argv[1:3])
$code" "$(last "$tag" "$work/$name-native.out")" "$(last "$tag" "$work/$name-memsnap.out")"
}

part_compile() {
  : >"$OUT/compile.log"
  scenario compile.log 200 compile_turns TORCHINDUCTOR_COMPILE_THREADS=4
  row compile "compile (graph trees, native vs memsnap)" "$(compare compile_turns COMPILE <<'PY'
if not n or not m:
    print("no result on %s (compile.log)" % ("native" if not n else "memsnap"))
    sys.exit()
keys = ["restores in branchy", "restores", "branchy right", "losses", "max_allocated", "max_reserved",
        "steady_max_allocated", "steady_max_reserved", "allocated"]
differ = [k for k in keys if n.get(k) != m.get(k)]
print("allocator %s; errors %s / %s; restores %s (native %s); branchy right %s; losses %s; peaks %s/%s (native %s/%s); "
      "steady peaks %s/%s (native %s/%s): %s" % (
    m.get("allocator"), n.get("error") or n.get("branchy error"), m.get("error") or m.get("branchy error"), m.get("restores"),
    n.get("restores"), m.get("branchy right"), m.get("losses"), m.get("max_allocated"), m.get("max_reserved"),
    n.get("max_allocated"), n.get("max_reserved"), m.get("steady_max_allocated"), m.get("steady_max_reserved"),
    n.get("steady_max_allocated"), n.get("steady_max_reserved"), "all as native" if not differ else "DIFFER: " + ", ".join(differ)))
PY
)"
}

part_nocache() {
  : >"$OUT/nocache.log"
  local env
  for env in "" "PYTORCH_NO_CUDA_MEMORY_CACHING=1"; do
    scenario nocache.log 90 no_cache ${env:+"$env"}
    row nocache "no_cache ${env:-default}" "native: $(last NOCACHE "$work/no_cache-native.out" | cut -c1-200); memsnap: $(last NOCACHE "$work/no_cache-memsnap.out" | cut -c1-200)"
  done
}

part_regions() {
  : >"$OUT/regions.log"
  scenario regions.log 150 compile_regions
  row regions "compile regions (test_memory_compile_regions)" "$(compare compile_regions REGIONS <<'PY'
print("native %s (ok %s, %s entries); memsnap %s (ok %s, %s entries)%s" % (
    n.get("sequence") or n.get("error"), n.get("ok"), n.get("n_entries"), m.get("sequence") or m.get("error"), m.get("ok"),
    m.get("n_entries"), "" if n.get("entries") == m.get("entries") else "; entries differ: regions.log"))
PY
)"
}

part_suite() {
  if [ ! -f "$TEST_CUDA" ]; then
    row suite suite "no test_cuda.py at $TEST_CUDA (TEST_CUDA=...): not run"
    return
  fi
  local ks=() k
  for k in $SUITE_K; do ks+=(-k "$k"); done
  OUT=$OUT/suite timeout 230 python3 tests/gpu/pytorch_suite/run_test_cuda.py "$TEST_CUDA" --jobs 6 --timeout 220 \
    "${ks[@]}" >"$OUT/suite.txt" 2>&1
  local setting
  for setting in default expandable async; do
    row suite "test_cuda.py $setting" "$(awk -v s="$setting" '
      $0 ~ "^" s ": " {sub("^" s ": ", ""); head = $0; inside = 1; next}
      /^[a-z]+: / {inside = 0}
      inside && /^  / {gsub(/ +/, " "); diff = diff $0 ";"}
      END {print head (diff ? "; differ:" diff : "; no test differs")}' "$OUT/suite.txt")"
  done
}

# ---- run ----------------------------------------------------------------------------------------
order="build timing parity ipc compile nocache suite regions"
for p in build timing; do want "$p" && "part_$p"; done
if [ "${PARALLEL:-0}" = 1 ]; then
  for p in parity ipc compile nocache suite regions; do want "$p" && { "part_$p" & }; done
  wait
else
  for p in parity ipc compile nocache suite regions; do want "$p" && "part_$p"; done
fi
for p in $order; do [ -f "$work/rows-$p" ] && cat "$work/rows-$p" >>"$summary"; done

echo
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1), $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null), $(( $(date +%s) - started )) s)"
cat "$summary"
