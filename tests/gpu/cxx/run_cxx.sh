#!/usr/bin/env bash
# run_cxx.sh [PART...]: issue 34's checks of memsnap's C++ allocator for PyTorch, on the GPU
# machine (one H100, PyTorch 2.11, g++, ninja; build/ carried after tests/gpu/prepare.sh). Parts,
# all by default, each with its own time limit so that the whole fits in 8 minutes:
#   build      the C++ allocator built from an empty cache (the first build's time), then found
#              in the cache (build_time.py); the compiler's output in $OUT/build.log
#   parity     torch.cuda.memory function by function, native vs memsnap (C++) vs memsnap through
#              the pluggable interface, both backends (../parity_memory_api.py --no-compile)
#   ipc        the spawn + Queue program (ipc_queue.py) under `memsnap run`, worker under memsnap
#              and native, classic and expandable segments; and a native trainer whose worker
#              enables memsnap (memsnap opens PyTorch's handles); the snapshots show the blocks
#              sent and received
#   compile    torch.compile(mode="reduce-overhead") training and evaluation taking turns over two
#              shapes (compile_turns.py), native vs memsnap: restores, losses, peaks
#   nocache    caching_allocator_enable(False) and PYTORCH_NO_CUDA_MEMORY_CACHING=1 (no_cache.py)
#   timing     torch.empty + del, C++ allocator vs pluggable vs native, one run (empty_timing.py)
# Logs go to $OUT (default /tmp/cxx-out): summary.txt (the table printed last), build.log,
# parity.txt, parity.json, ipc.log, compile.log, nocache.log, timing.log.
set -u
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/cxx-out}
mkdir -p "$OUT"
parts=${*:-build parity ipc compile nocache timing}
want() { [[ " $parts " == *" $1 "* ]]; }
export MEMSNAP_LIB=$PWD/build/libmemsnap.so
export PYTHONPATH=$PWD/recorder/python${PYTHONPATH:+:$PYTHONPATH}
summary=$OUT/summary.txt
: >"$summary"
row() { printf '| %s | %s |\n' "$1" "$2" | tee -a "$summary"; }
last() { grep -h "^$1 " "$2" | tail -n 1 | cut -d' ' -f2-; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the build first, in the default cache: every later part loads it from there
if want build; then
  timeout 420 python3 tests/gpu/cxx/build_time.py --log "$OUT/build.log" >"$work/build.out" 2>&1
  row build "$(last BUILD "$work/build.out")"
  python3 -c 'import torch, memsnap; from memsnap import torch_cxx; print(torch_cxx.ensure_built(torch, memsnap.library_path()))' \
    >>"$work/build.out" 2>&1
  cat "$work/build.out" >>"$OUT/build.log"
fi

if want parity; then
  timeout 300 python3 tests/gpu/parity/parity_memory_api.py --no-compile --json "$OUT/parity.json" >"$OUT/parity.txt" 2>&1
  row parity "$(tail -n 2 "$OUT/parity.txt" | tr '\n' ' ')"
fi

if want ipc; then
  : >"$OUT/ipc.log"
  for conf in "" "expandable_segments:True"; do
    for mode in same native-worker; do
      db="$work/ipc-${mode}-${conf:+exp}-%p.db"
      echo "== memsnap run ipc_queue.py $mode (PYTORCH_CUDA_ALLOC_CONF=$conf)" >>"$OUT/ipc.log"
      PYTORCH_CUDA_ALLOC_CONF=$conf timeout 150 build/memsnap run -q -o "$db" -- python3 tests/gpu/cxx/ipc_queue.py "$mode" \
        >"$work/ipc.out" 2>&1
      rc=$?
      cat "$work/ipc.out" >>"$OUT/ipc.log"
      shown=$(python3 - "$work" "$mode" "${conf:+exp}" <<'PY'
import glob, sqlite3, sys
work, mode, exp = sys.argv[1:]
sent = received = 0
for path in glob.glob("%s/ipc-%s-%s-*.db" % (work, mode, exp)):
    db = sqlite3.connect(path)
    sent += db.execute("SELECT count(*) FROM events e JOIN event_kinds k ON k.id = e.kind WHERE k.name = 'ipc_share'").fetchone()[0]
    received += db.execute("SELECT count(*) FROM segments WHERE source = 'cuda_ipc'").fetchone()[0] + \
        db.execute("SELECT count(*) FROM events e JOIN event_kinds k ON k.id = e.kind JOIN labels l ON l.id = e.extra "
                   "WHERE k.name = 'segment_alloc' AND l.text = 'cuda_ipc'").fetchone()[0]
print("snapshots: %d sent, %d received" % (sent, received))
PY
)
      row "ipc $mode ${conf:-classic}" "exit $rc; $(last IPC "$work/ipc.out" | cut -c1-300); $shown"
    done
  done
  for conf in "" "expandable_segments:True"; do
    echo "== native trainer, memsnap worker (PYTORCH_CUDA_ALLOC_CONF=$conf)" >>"$OUT/ipc.log"
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout 150 python3 tests/gpu/cxx/ipc_queue.py memsnap-worker >"$work/ipc.out" 2>&1
    rc=$?
    cat "$work/ipc.out" >>"$OUT/ipc.log"
    row "ipc native sender, memsnap worker ${conf:-classic}" "exit $rc; $(last IPC "$work/ipc.out" | cut -c1-300)"
  done
fi

# scenario LOG TAG SECONDS NAME ENV...: runs tests/gpu/cxx/NAME.py natively and under memsnap (its
# first argument), with ENV set, appending its output to $OUT/LOG; a row with the line tagged TAG
scenario() {
  local log=$1 tag=$2 seconds=$3 name=$4
  shift 4
  for who in native memsnap; do
    env "$@" timeout "$seconds" python3 "tests/gpu/cxx/$name.py" "$who" >"$work/$name.out" 2>&1
    local rc=$?
    cat "$work/$name.out" >>"$OUT/$log"
    row "$name $who $*" "exit $rc; $(last "$tag" "$work/$name.out")"
  done
}

if want compile; then
  : >"$OUT/compile.log"
  scenario compile.log COMPILE 200 compile_turns
fi

if want nocache; then
  : >"$OUT/nocache.log"
  scenario nocache.log NOCACHE 90 no_cache
  scenario nocache.log NOCACHE 90 no_cache PYTORCH_NO_CUDA_MEMORY_CACHING=1
fi

if want timing; then
  timeout 240 python3 tests/gpu/cxx/empty_timing.py --ops 100000 --repeat 2 >"$OUT/timing.log" 2>&1
  row timing "$(last TIMING "$OUT/timing.log")"
fi

echo
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1), $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null))"
cat "$summary"
