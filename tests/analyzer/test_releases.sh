#!/usr/bin/env bash
# test_releases.sh BUILD_DIR: the allocator's own releases of cached memory, explained by
# `memsnap analyze` (analysis/retries.c) against known answers: the snapshots of
# tests/analyzer/gen_releases.c (a 1 GiB simulated card: a retry served, a retry that fails,
# empty_cache, garbage collection, expandable segments' pages, the async pool), the reasons memsnap recorded
# (events.extra) and the same files without them (inferred from the events' pattern, with and
# without stacks), and a PyTorch trace (tests/analyzer/pytorch_pickles.py releases).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../checks.sh"
cli=$1/memsnap
gen=$1/tests/gen_releases
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# released FILE EXPR: json's, with r its retries and R its releases.
released() { json "$1" "(lambda r, R: $2)(j['retries'], j['releases'])"; }
# sql DB QUERY: the rows, "|" between columns.
sql() { python3 -c 'import sqlite3, sys
print("\n".join("|".join(map(str, r)) for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2])))' "$1" "$2"; }
# strip NAME SQL: a copy of NAME.db edited by SQL, as NAME-SUFFIX.db (SUFFIX: $3).
strip() { cp "$dir/$1.db" "$dir/$1-$3.db" && python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit()" "$dir/$1-$3.db" "$2"; }
# analyze NAME: NAME.json (--json) and NAME.txt (the text report), no suggestions (replay's tests).
analyze() { "$cli" analyze --no-suggest --json "$dir/$1.db" >"$dir/$1.json" && "$cli" analyze --no-suggest "$dir/$1.db" >"$dir/$1.txt"; }
MiB=1048576

"$gen" "$dir" || { echo "FAIL gen_releases"; echo "0 passed, 1 failed"; exit 1; }
for f in retry retry_oom empty_cache gc expandable frag; do analyze "$f"; done

# ---- a retry: 600 MiB freed (cached), then 700 MiB on the 1 GiB card -------------------------------
check "retry: exactly one entry, 700 MiB requested, the 600 MiB segment released, served" \
  "released $dir/retry.json \"len(r) == 1 and r[0]['requested_bytes'] == 700 * $MiB and r[0]['released_bytes'] >= 600 * $MiB and r[0]['released_bytes'] == 600 * $MiB and r[0]['segments_released'] == 1 and r[0]['succeeded'] and r[0]['device'] == 0\""
check "retry: the request's stack keys, as other entries have them (stack, full_stack, stack_id)" \
  "released $dir/retry.json \"r[0]['stack'][0]['name'] == 'big_request' and r[0]['full_stack'][0]['name'] == 'big_request' and r[0]['stack_id'] > 0 and 'stack_note' not in r[0]\""
check "retry: when, and what the reason says (the whole cache, as recorded)" \
  "released $dir/retry.json \"0 < r[0]['time_ns'] <= r[0]['request_ns'] and r[0]['released'] == 'whole_cache' and r[0]['reason_recorded'] and r[0]['reserved_before_bytes'] == 600 * $MiB and r[0]['unmapped_bytes'] == 0\""
check "retry: every key of the contract" \
  "released $dir/retry.json \"set(r[0]) >= {'time_ns', 'device', 'requested_bytes', 'released_bytes', 'segments_released', 'stack', 'full_stack', 'stack_id'}\""
check "retry: the releases by cause: one retry, nothing else" \
  "released $dir/retry.json \"R['reasons'] == 'recorded' and R['retries'] == {'count': 1, 'segments': 1, 'bytes': 600 * $MiB, 'failed': 0, 'listed': 1} and R['empty_cache']['calls'] == 0 and R['garbage_collection']['calls'] == 0 and R['other']['segments'] == 0\""
check "retry: the recorder wrote the reason into the segment_free (extra 1, retry)" \
  "[ \"\$(sql $dir/retry.db 'select extra from events where kind = 5')\" = 1 ]"
check "retry, text: the request, what was released, and its stack" \
  "grep -qE '^  at [0-9.]+ [mu]?s: 700.00 MiB requested; the allocator released 600.00 MiB of cached segments and retried: served \(1 segment, device 0\)$' $dir/retry.txt && grep -A1 '700.00 MiB requested' $dir/retry.txt | grep -q 'big_request (gen_releases.c:'"

# The same file without the reasons (an older memsnap's): inferred from the pattern.
strip retry "update events set extra = null where kind in (5, 12)" noreason
analyze retry-noreason
check "retry without recorded reasons: inferred, the same entry" \
  "released $dir/retry-noreason.json \"len(r) == 1 and r[0]['requested_bytes'] == 700 * $MiB and r[0]['released_bytes'] == 600 * $MiB and not r[0]['reason_recorded'] and r[0]['released'] == 'unknown' and R['reasons'] == 'inferred' and r[0]['stack'][0]['name'] == 'big_request'\""
check "retry without recorded reasons, text: says the reasons were inferred" \
  "grep -q 'inferred from the events' $dir/retry-noreason.txt && grep -q '700.00 MiB requested; the allocator released 600.00 MiB of cached segments and retried' $dir/retry-noreason.txt"
strip retry "update events set extra = null where kind in (5, 12); update events set stack_id = null" nostacks
analyze retry-nostacks
check "retry without reasons or stacks: inferred from the card being full (600 + 700 MiB > 1 GiB)" \
  "released $dir/retry-nostacks.json \"len(r) == 1 and r[0]['released_bytes'] == 600 * $MiB and r[0]['stack_id'] == 0 and r[0]['stack_note'] == 'no stack recorded'\""

# ---- max_split_size_mb: the oversize block released first -----------------------------------------
analyze oversize
check "oversize: one retry; what was released is the oversize block (recorded: extra 2)" \
  "released $dir/oversize.json \"len(r) == 1 and r[0]['released'] == 'oversize_blocks' and r[0]['released_bytes'] == 600 * $MiB and r[0]['succeeded']\" && [ \"\$(sql $dir/oversize.db 'select extra from events where kind = 5')\" = 2 ]"
check "oversize, text: oversize cached blocks" \
  "grep -q '700.00 MiB requested; the allocator released 600.00 MiB of oversize cached blocks and retried: served' $dir/oversize.txt"

# ---- a retry that fails: 300 MiB held, 200 MiB cached, 800 MiB asked ------------------------------
check "failed retry: one entry, 800 MiB requested, 200 MiB released, out of memory" \
  "released $dir/retry_oom.json \"len(r) == 1 and r[0]['requested_bytes'] == 800 * $MiB and r[0]['released_bytes'] == 200 * $MiB and not r[0]['succeeded'] and R['retries']['failed'] == 1 and len(j['oom']) == 1\""
check "failed retry, text: out of memory" \
  "grep -q '800.00 MiB requested; the allocator released 200.00 MiB of cached segments and retried: out of memory' $dir/retry_oom.txt"

# ---- empty_cache: 100 + 50 MiB cached, released, then a 10 MiB allocation ----------------------------
check "empty_cache: one call, two segments, 150 MiB; no retry" \
  "released $dir/empty_cache.json \"r == [] and R['empty_cache'] == {'calls': 1, 'segments': 2, 'bytes': 150 * $MiB} and R['retries']['count'] == 0\""
check "empty_cache: the recorder wrote the reason (extra 4)" \
  "[ \"\$(sql $dir/empty_cache.db 'select group_concat(extra) from events where kind = 5')\" = '4,4' ]"
check "empty_cache, text: one line" "grep -q '^  empty_cache: 1 call, 150.00 MiB in 2 segments$' $dir/empty_cache.txt"
strip empty_cache "update events set extra = null where kind in (5, 12)" noreason
analyze empty_cache-noreason
check "empty_cache without reasons: the next segment is another call's (another stack): empty_cache, no retry" \
  "released $dir/empty_cache-noreason.json \"r == [] and R['empty_cache'] == {'calls': 1, 'segments': 2, 'bytes': 150 * $MiB}\""
strip empty_cache "update events set extra = null where kind in (5, 12); update events set stack_id = null" nostacks
analyze empty_cache-nostacks
check "empty_cache without reasons or stacks: the card had room for the next segment: empty_cache" \
  "released $dir/empty_cache-nostacks.json \"r == [] and R['empty_cache']['bytes'] == 150 * $MiB\""

# ---- garbage collection: fraction 0.5, threshold 0.5, 300 MiB cached, then 150 MiB ----------------
check "garbage collection: 300 MiB in three segments before the request; no retry" \
  "released $dir/gc.json \"r == [] and R['garbage_collection'] == {'calls': 1, 'segments': 3, 'bytes': 300 * $MiB} and R['empty_cache']['calls'] == 0\""
check "garbage collection: the recorder wrote the reason (extra 3)" \
  "[ \"\$(sql $dir/gc.db 'select group_concat(distinct extra) from events where kind = 5')\" = 3 ]"
strip gc "update events set extra = null where kind in (5, 12)" noreason
analyze gc-noreason
check "garbage collection without reasons: inferred from the threshold (the same call, room for the segment)" \
  "released $dir/gc-noreason.json \"r == [] and R['garbage_collection'] == {'calls': 1, 'segments': 3, 'bytes': 300 * $MiB}\""

# ---- expandable segments: a retry unmaps pages, empty_cache unmaps the rest --------------------------
check "expandable: one retry, 600 MiB of pages unmapped for it" \
  "released $dir/expandable.json \"len(r) == 1 and r[0]['requested_bytes'] == 700 * $MiB and r[0]['released_bytes'] == 600 * $MiB and r[0]['unmapped_bytes'] == 600 * $MiB and r[0]['succeeded']\""
check "expandable: empty_cache unmapped the 700 MiB; two unmaps in all" \
  "released $dir/expandable.json \"R['empty_cache'] == {'calls': 1, 'segments': 1, 'bytes': 700 * $MiB} and R['unmaps'] == {'count': 2, 'bytes': 1300 * $MiB}\""
check "expandable: the unmaps carry their reasons (retry, then empty_cache)" \
  "[ \"\$(sql $dir/expandable.db 'select group_concat(extra) from events where kind = 12')\" = '1,4' ]"
check "expandable, text: pages unmapped" "grep -q 'retried: served (1 segment, pages unmapped, device 0)' $dir/expandable.txt"

# ---- the async mode: the driver's pool trimmed by empty_cache ----------------------------------------
analyze async
check "async: the pool's trim is an empty_cache (recorded: extra 4), one unmap of 100 MiB" \
  "released $dir/async.json \"r == [] and R['empty_cache'] == {'calls': 1, 'segments': 1, 'bytes': 100 * $MiB} and R['unmaps'] == {'count': 1, 'bytes': 100 * $MiB}\" && [ \"\$(sql $dir/async.db 'select extra from events where kind = 12')\" = 4 ]"

# ---- nothing released: no section, empty lists -------------------------------------------------
check "nothing released: no text section, empty retries, reasons none" \
  "! grep -q '^releases of cached memory' $dir/frag.txt && released $dir/frag.json \"r == [] and R['reasons'] == 'none' and R['recorded_events'] == 0\""

# ---- a PyTorch trace --------------------------------------------------------------------------
python3 "$here/pytorch_pickles.py" releases "$dir/torch.pickle" && "$cli" import "$dir/torch.pickle" -o "$dir/torch.db" >/dev/null
analyze torch
check "PyTorch: segment_free entries with the request's frames before its segment_alloc: a retry (700 MiB, 600 MiB released)" \
  "released $dir/torch.json \"len(r) == 2 and (r[0]['requested_bytes'], r[0]['released_bytes'], r[0]['succeeded'], r[0]['stack'][0]['name']) == (700 * $MiB, 600 * $MiB, True, 'big_request')\""
check "PyTorch: segment_free before an oom of the same frames: a failed retry (800 MiB, 200 MiB released)" \
  "released $dir/torch.json \"(r[1]['requested_bytes'], r[1]['released_bytes'], r[1]['succeeded'], r[1]['stack'][0]['name']) == (800 * $MiB, 200 * $MiB, False, 'huge_request')\""
check "PyTorch: torch.cuda.empty_cache's entries (other frames than the next request's): one call, 850 MiB" \
  "released $dir/torch.json \"R['empty_cache'] == {'calls': 1, 'segments': 2, 'bytes': 850 * $MiB} and R['reasons'] == 'inferred' and R['retries']['count'] == 2\""
check "PyTorch, text: the retries, said to be inferred" \
  "grep -q 'inferred from the events' $dir/torch.txt && grep -q '700.00 MiB requested; the allocator released 600.00 MiB of cached segments and retried: served' $dir/torch.txt"

finish
