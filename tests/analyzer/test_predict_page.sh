#!/usr/bin/env bash
# test_predict_page.sh BUILD_DIR: the page of a prediction, `memsnap predict --html` (docs/predict.md,
# "The page"), on tests/analyzer/gen_model.py's programs: its embedded document against the same
# prediction's --json (the answer whole, each predicted history's peaks, the card), its recorded
# timeline against the report page's of the same run, each predicted timeline against its
# replay's peaks and the bucket limit; hostile module paths and file names escaped; the refusals.
# tests/web/browser.test.js opens such pages in chromium.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../checks.sh"
cli=$1/memsnap
gen() { python3 "$here/gen_model.py" "$@" 2>/dev/null; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for b in 4 8; do gen "$dir/p$b.db" --batch "$b"; done
# data PAGE OUT.json: the page's document (the JSON block), decoded
data() {
  python3 - "$1" "$2" <<'PY'
import json, re, sys
html = open(sys.argv[1]).read()
m = re.search(r'<script type="application/json" id="memsnap-prediction">(.*?)</script>', html, re.S)
json.dump(json.loads(m.group(1)), open(sys.argv[2], "w"))
PY
}

args=("$dir/p4.db=4" "$dir/p8.db=8" --checkpoint Block --at 16 --at 32 --capacity 200M --jobs 2)
"$cli" predict "${args[@]}" --html "$dir/k.html" >"$dir/k.out" 2>"$dir/k.err"
check "--checkpoint Block --at 16 --at 32 --capacity 200M --html: exit 0, the page written, nothing on stdout or stderr" \
  "[ $? -eq 0 ] && [ -s $dir/k.html ] && [ ! -s $dir/k.out ] && [ ! -s $dir/k.err ]"
"$cli" predict "${args[@]}" --json >"$dir/k.json"
data "$dir/k.html" "$dir/k.page.json"
check "the page's answer is the --json answer, whole" \
  "python3 -c \"import json, sys; sys.exit(0 if json.load(open('$dir/k.page.json'))['answer'] == json.load(open('$dir/k.json')) else 1)\""
check "a timeline per size (16, 32), checkpointed, under the recorded settings, on the card; the recorded run (p8.db at 8) above" \
  "json $dir/k.page.json \"j['format'] == 'memsnap-prediction-1' and [p['at'] for p in j['predicted']] == [16, 32]
    and all(p['changed'] and p['setting'] == '(defaults)' and p['capacity_bytes'] == 200 << 20 and p['why'] == '--at %d' % p['at'] for p in j['predicted'])
    and j['card_bytes'] == 200 << 20 and j['recorded']['path'].endswith('p8.db') and j['recorded']['at'] == 8\""
check "each predicted timeline's peaks are the JSON's row (changed, recorded settings), and its fits" \
  "python3 - $dir/k.page.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rows = {r['at']: r for r in j['answer']['predictions'] if r['changed'] and r['recorded_settings']}
ok = len(j['predicted']) == 2
for p in j['predicted']:
    r = rows[p['at']]
    ok &= (p['peak_allocated_bytes'], p['peak_reserved_bytes'], p['fits']) == (r['peak_allocated_bytes'], r['peak_reserved_bytes'], r['fits'])
    if not ok: print(p['at'], p['peak_allocated_bytes'], p['peak_reserved_bytes'], r, file=sys.stderr)
sys.exit(0 if ok else 1)
PY"
check "each predicted timeline is reduced (at most 4000 buckets, times in order) and reaches its replay's peaks, never more" \
  "json $dir/k.page.json \"all(0 < len(c['t']) <= 4000 and len(c['t']) == len(c['lo']) == len(c['hi']) and c['t'] == sorted(c['t'])
    for p in j['predicted'] for c in p['curves'].values()) and all(max(p['curves']['reserved']['hi']) == p['peak_reserved_bytes']
    and max(p['curves']['allocated']['hi']) == p['peak_allocated_bytes'] for p in j['predicted'])\""
check "the predicted timelines differ: 32 holds more than 16" \
  "json $dir/k.page.json \"max(j['predicted'][1]['curves']['allocated']['hi']) > max(j['predicted'][0]['curves']['allocated']['hi'])\""
"$cli" analyze --no-suggest --html "$dir/p8.html" "$dir/p8.db"
check "the recorded timeline is the report page's (memsnap analyze --html of p8.db): the same curves, the same peak" \
  "python3 - $dir/k.page.json $dir/p8.html <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1]))
html = open(sys.argv[2]).read()
a = json.loads(re.search(r'<script type=\"application/json\" id=\"memsnap-data\">(.*?)</script>', html, re.S).group(1))
rec = j['recorded']
ok = rec['curves'] == a['curves'] and rec['peak_allocated_bytes'] == a['summary']['peak_allocated_bytes'] and len(rec['curves']['allocated']['t']) > 0
sys.exit(0 if ok else 1)
PY"

# One run at its own size, with the as-recorded program beside the change in the table.
"$cli" predict "$dir/p8.db=8" --checkpoint Block --html "$dir/one.html" && data "$dir/one.html" "$dir/one.json"
check "one run, --checkpoint Block: one timeline at 8, checkpointed, lower than the recorded run's allocated peak; the card is the recorded one" \
  "json $dir/one.json \"len(j['predicted']) == 1 and j['predicted'][0]['at'] == 8 and j['predicted'][0]['changed'] and j['card_bytes'] is None
    and j['predicted'][0]['peak_allocated_bytes'] < j['recorded']['peak_allocated_bytes'] and len(j['answer']['predictions']) == 2\""

# --advise: the size as recorded and with the smallest change that fits; hostile names as text.
# The module events' root class and the runs' file names are markup: the page must carry them as
# data (JSON escapes), never as markup.
evil='<img src=x onerror=alert(1)>&M'
for b in 4 8; do gen "$dir/e<b>$b.db" --batch "$b" --events --root "$evil"; done
"$cli" predict "$dir/e<b>4.db=4" "$dir/e<b>8.db=8" --checkpoint 'blocks.*' --at 16 --capacity 200M --advise --jobs 2 --html "$dir/a.html" 2>"$dir/a.err"
check "--advise --html: exit 0" "[ $? -eq 0 ] && [ ! -s $dir/a.err ]"
data "$dir/a.html" "$dir/a.json"
check "--advise: the size as recorded (does not fit) and with the smallest change that fits (fits), both at 16" \
  "json $dir/a.json \"[p['why'] for p in j['predicted']] == ['--advise: the size as recorded', '--advise: the smallest change that fits']
    and [p['fits'] for p in j['predicted']] == [False, True] and all(p['at'] == 16 for p in j['predicted'])
    and j['predicted'][1]['change'] == j['answer']['advice']['best']['description'].split(', with ')[0]
    and j['predicted'][1]['peak_reserved_bytes'] == j['answer']['advice']['best']['peak_reserved_bytes']\""
check "the over-capacity history is the replay without a limit: above the card, as the answer's row" \
  "json $dir/a.json \"(p := j['predicted'][0]) and p['over_capacity'] and max(p['curves']['reserved']['hi']) > 200 << 20
    and p['peak_reserved_bytes'] == [c for c in j['answer']['advice']['changes'] if c['kind'] == 'none'][0]['peak_reserved_bytes']\""
check "the hostile module path is in the page's data (the best change names it) and the file name too" \
  "json $dir/a.json \"'$evil.blocks.5' in j['predicted'][1]['change'] and j['recorded']['path'].endswith('e<b>8.db')\""
check "... and never as markup: no '<img', no '<b>' in the page's text; '<', '>' and '&' escaped in the data block" \
  "! grep -q '<img' $dir/a.html && ! grep -q '<b>' $dir/a.html && grep -q 'u003cimg src=x onerror=alert(1)u003eu0026M' <(tr -d '\\\\' <$dir/a.html)"

# Only a card: the largest size that fits, under its best setting.
"$cli" predict "$dir/p4.db=4" "$dir/p8.db=8" --capacity 200M --html "$dir/c.html" && data "$dir/c.html" "$dir/c.json"
check "--capacity alone: the largest size that fits drawn, as the answer's best fit" \
  "json $dir/c.json \"len(j['predicted']) == 1 and j['predicted'][0]['at'] == j['answer']['best_fit']['at'] and j['predicted'][0]['fits']\""

# A longer history stays reduced: 100 steps (29,328 events), at most 4000 buckets a curve.
gen "$dir/l4.db" --batch 4 --steps 100 && gen "$dir/l8.db" --batch 8 --steps 100
"$cli" predict "$dir/l4.db=4" "$dir/l8.db=8" --checkpoint Block --at 24 --html "$dir/l.html" && data "$dir/l.html" "$dir/l.json"
check "100 steps: every curve at most 4000 buckets, the page under 1 MiB" \
  "json $dir/l.json \"j['recorded']['events'] > 29000 and all(len(c['t']) <= 4000 for x in [j['recorded']] + j['predicted'] for c in x['curves'].values())\" &&
   [ \$(stat -c %s $dir/l.html) -lt 1048576 ]"

# Refusals.
status() { "$cli" predict "$@" >/dev/null 2>"$dir/s.err"; echo $?; }
check "--html with --json: exit 2" "[ \$(status $dir/p8.db=8 --checkpoint Block --json --html $dir/x.html) = 2 ] && grep -q 'choose one' $dir/s.err"
cp "$dir/p8.db" "$dir/keep.db"
check "--html onto a run: exit 1, the run untouched" \
  "[ \$(status $dir/p4.db=4 $dir/p8.db=8 --at 16 --html $dir/p8.db) = 1 ] && grep -q 'is an input' $dir/s.err && cmp -s $dir/p8.db $dir/keep.db"
check "--html into a directory that does not exist: exit 1, said" \
  "[ \$(status $dir/p8.db=8 --checkpoint Block --html $dir/none/x.html) = 1 ] && grep -q 'cannot write' $dir/s.err"

finish
