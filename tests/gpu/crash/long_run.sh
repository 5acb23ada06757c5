#!/usr/bin/env bash
# long_run.sh: a long run's state survives SIGKILL exactly (issue 50), on one GPU, in about 2 minutes:
# GPT-2 (long_run.py: 6 layers, batch 8 x 512, AdamW) trained for SECONDS (default 60) under
# `memsnap run` (its default path: the C++ allocator built at first use; the ring of 100,000 events
# wraps every few seconds), then killed with kill -9. The snapshot memsnap run writes from the live
# mapping must hold the state at the death: its reserved bytes those torch.cuda.memory_reserved()
# printed after the last step (the next step's own changes aside: none once training is steady),
# its allocated bytes within that step's tensors of the printed ones, the state read exactly
# (meta recovered_state), and parameters and optimizer state in its categories (`memsnap analyze
# --json`: the roles told at the model's first forward, long gone from the ring, kept for the
# blocks' life). Prints a table last; exit status 1 when a row fails. Results in $OUT (./long-run-out).
# usage (on the GPU machine, build/ carried): tests/gpu/crash/long_run.sh [SECONDS]
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cli=$root/build/memsnap
out=${OUT:-$PWD/long-run-out}
seconds=${1:-60}
mkdir -p "$out"
py=${PYTHON:-python3}
log=$out/long_run.out
rm -f "$out"/long-*.db
"$cli" run --no-suggest -o "$out/long-%p.db" -- "$py" "$here/long_run.py" >"$log" 2>&1 &
runner=$!
for _ in $(seq 1 3000); do grep -q '^step 0 ' "$log" 2>/dev/null && break; sleep 0.1; done
if ! grep -q '^step 0 ' "$log"; then
  echo "FAIL: the program never finished a step (see $log)"
  tail -n 20 "$log"
  kill -9 "$runner" 2>/dev/null
  exit 1
fi
sleep "$seconds"
pid=$(grep -m1 '^step 0 ' "$log" | awk '{print $4}')
kill -9 "$pid"
wait "$runner"
db=$out/long-$pid.db
"$cli" analyze --json "$db" >"$out/analyze.json" 2>"$out/analyze.err"
python3 - "$log" "$db" "$out/analyze.json" <<'PY'
import json, sqlite3, sys
log, db_path, js = sys.argv[1:4]
lines = open(log).read().splitlines()
steps = [l.split() for l in lines if l.startswith("step ")]
params = int(next(l.split()[1] for l in lines if l.startswith("params ")))
last = steps[-1]
reserved_printed, allocated_printed = int(last[5]), int(last[7])
rows, bad = [], 0
def row(what, want, got, ok):
    global bad
    bad += not ok
    rows.append("%-44s %22s %22s  %s" % (what, want, got, "ok" if ok else "FAIL"))
try:
    db = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True)
except Exception as e:
    print("FAIL: no snapshot %s: %s" % (db_path, e)); sys.exit(1)
meta = dict(db.execute("select key, value from meta").fetchall())
reserved = db.execute("select coalesce(sum(size), 0) from segments where pool != 'external'").fetchone()[0]
stat_reserved = db.execute("select coalesce(sum(value), 0) from stats where key = 'reserved_bytes.all.current'").fetchone()[0]
allocated = db.execute("select coalesce(sum(b.size), 0) from blocks b join segments g on g.id = b.segment_id "
                       "where b.state = 'allocated' and g.pool != 'external'").fetchone()[0]
told = dict(db.execute("select role, sum(size) from blocks where role is not null group by role").fetchall())
a = json.load(open(js)) if open(js).read().strip() else {}
cats = a.get("categories_at_peak", {})
dropped = int(meta.get("dropped_events", 0))
row("steps printed; ring wrapped (events dropped)", "-", "%d; %d" % (len(steps), dropped), dropped > 0)
row("meta recovered_state / ended", "exact / SIGKILL", "%s / %s" % (meta.get("recovered_state"), meta.get("ended", "")[:20]),
    meta.get("recovered_state") == "exact" and "SIGKILL" in meta.get("ended", ""))
row("reserved: segments (last step printed)", reserved_printed, reserved, reserved == reserved_printed)
row("reserved: statistic", reserved_printed, stat_reserved, stat_reserved == reserved_printed)
row("allocated at least the printed (+ a step's)", allocated_printed, allocated, allocated >= allocated_printed * 0.99)
row("blocks told parameters (role 1)", "~%d" % params, told.get(1, 0), told.get(1, 0) >= params * 0.99)
row("blocks told optimizer state (role 3)", "~%d" % (2 * params), told.get(3, 0), told.get(3, 0) >= 2 * params * 0.99)
row("categories_at_peak: parameter", ">= %d" % int(params * 0.99), cats.get("parameter", 0), cats.get("parameter", 0) >= params * 0.99)
row("categories_at_peak: optimizer_state", ">= %d" % int(2 * params * 0.99), cats.get("optimizer_state", 0),
    cats.get("optimizer_state", 0) >= 2 * params * 0.99)
print("%-44s %22s %22s  %s" % ("check", "expected", "recovered", "verdict"))
print("\n".join(rows))
sys.exit(1 if bad else 0)
PY
