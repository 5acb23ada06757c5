#!/usr/bin/env bash
# test_modes_cli.sh BUILD_DIR: the snapshots test_modes wrote (BUILD_DIR/tests/expandable.db,
# async.db) through the CLI: memsnap analyze counts expandable segments' mapped pages and the
# async pool's growth as reserved memory, the page's allocator view shows each mapped range as a
# segment, and export --format pytorch / import carry is_expandable and the segment_map events.
set -u
build=$1
cli=$build/memsnap
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }
json() { python3 -c "import json,sys; j=json.load(open('$1')); sys.exit(0 if ($2) else 1)"; }
MiB=1048576
exp=$build/tests/expandable.db
asy=$build/tests/async.db
if [ ! -f "$exp" ] || [ ! -f "$asy" ]; then
  echo "FAIL test_modes did not write $exp and $asy"
  echo "0 passed, 1 failed"
  exit 1
fi

"$cli" analyze --json "$exp" >"$dir/exp.json"
check "expandable: analyze exits 0" "[ $? -eq 0 ]"
check "expandable: the mapped pages are the reserved memory (300 MiB at the peak)" \
  "json $dir/exp.json \"j['summary']['peak_reserved_bytes'] == 300 * $MiB and j['summary']['peak_allocated_bytes'] == 300 * $MiB\""
"$cli" analyze --html "$dir/exp.html" "$exp" >/dev/null 2>&1
check "expandable: the page's allocator view shows the grown segment, then the two ranges the unmap left" \
  "python3 - '$dir/exp.html' <<'PY'
import json, re, sys
page = open(sys.argv[1]).read()
data = json.loads(re.search(r'id=\"memsnap-data\">(.*?)</script>', page, re.S).group(1))
views = [[c['segs'][i + 1] for i in range(0, len(c['segs']), 5)] for c in data['checkpoints']]
sys.exit(0 if [300 * $MiB] in views and [100 * $MiB, 100 * $MiB] in views else 1)
PY"
"$cli" export --format pytorch "$exp" -o "$dir/exp.pickle" >/dev/null 2>&1
check "expandable: export marks the segments expandable and keeps segment_map/unmap" \
  "python3 -c \"import pickle,sys; s=pickle.load(open('$dir/exp.pickle','rb')); acts=[e['action'] for e in s['device_traces'][0]]; sys.exit(0 if all(g['is_expandable'] for g in s['segments']) and len(s['segments']) == 2 and acts.count('segment_map') == 3 and acts.count('segment_unmap') == 1 and s['allocator_settings']['expandable_segments'] is True else 1)\""
"$cli" import "$dir/exp.pickle" -o "$dir/back.db" >/dev/null 2>&1
check "expandable: import reads is_expandable back" \
  "[ \"\$(python3 -c \"import sqlite3; print(sqlite3.connect('$dir/back.db').execute('select count(*) from segments where expandable = 1').fetchone()[0])\")\" = 2 ]"

"$cli" analyze --json "$asy" >"$dir/asy.json"
check "async: analyze exits 0; the pool's growth is the reserved memory (20 MiB)" \
  "[ $? -eq 0 ] && json $dir/asy.json \"j['summary']['peak_reserved_bytes'] == 20 * $MiB and j['summary']['peak_allocated_bytes'] == 20 * $MiB\""
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
