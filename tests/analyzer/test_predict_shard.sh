#!/usr/bin/env bash
# test_predict_shard.sh BUILD_DIR: `memsnap predict --shard STRATEGY:N` (replay/shard.c) on the
# simulated device.
#
# tests/analyzer/gen_model.py --events --params writes a transformer-like training program with
# memsnap's PyTorch layer's events (modules Model and Model.blocks.I, parameters and gradients
# told by tensor events, AdamW's state, zero_grad(set_to_none=True)). tests/analyzer/shard_events
# prints rank 0's history as shard.c synthesises it, and the checks read it back: the units found,
# each parameter's shard padded (odd N included), the all-gather outputs per unit and step on
# their own stream (at most two alive: the implicit forward prefetch), the unsharded parameters
# and reduce-scatter inputs on the compute stream, the sharded gradients on the reduce-scatter
# stream and freed by zero_grad, mixed precision's sizes, the optimizer's state 1/N of its
# elements, DDP's buckets (parameters in reverse, the first closed at 1 MiB), ZeRO's stages
# ordered in model-state memory. Then the predictions (peaks falling with N, combined with
# --checkpoint and with two runs' laws, JSON's strategy and ranks, the smallest N that fits a
# card, given or searched (--shard fsdp2, all; DDP's search stopping), the largest size that fits
# per strategy and N) and the refusals: an unknown strategy, N = 0, a history without parameter events, a
# --units pattern that names no module, a ring that dropped events. Then real recordings from an
# H200 against the native FSDP2 runs of the same programs (tests/data/shard).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../checks.sh"
cli=$1/memsnap
dump=$1/tests/shard_events
gen() { python3 "$here/gen_model.py" "$@" 2>/dev/null; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

gen "$dir/p.db" --batch 4 --events --params --steps 3
gen "$dir/b1.db" --batch 1 --events --params --steps 3 --layers 8
gen "$dir/p4.db" --batch 4 --events --params --steps 2
gen "$dir/p8.db" --batch 8 --events --params --steps 2
gen "$dir/plain.db" --batch 4 --events --steps 3
for n in 1 2 3 4 8; do "$dump" "$dir/p.db" "fsdp2:$n" >"$dir/f$n.txt" 2>"$dir/f$n.err"; done
"$dump" "$dir/p.db" fsdp2:4 --param-dtype 2 >"$dir/mp.txt"
"$dump" "$dir/p.db" fsdp2:4 --param-dtype 2 --reduce-dtype 4 >"$dir/mp32.txt"
"$dump" "$dir/p.db" fsdp2:4 --units 'blocks.[01]' >"$dir/u.txt"
"$dump" "$dir/p.db" ddp:4 >"$dir/ddp.txt"
"$dump" "$dir/p.db" ddp:4 --bucket-view >"$dir/ddpv.txt"
for z in zero1 zero2 zero3; do "$dump" "$dir/b1.db" "$z:4" >"$dir/$z.txt"; done
"$dump" "$dir/b1.db" fsdp2:4 >"$dir/b1f.txt"
"$dump" "$dir/b1.db" none:1 >"$dir/b1n.txt" 2>/dev/null || "$dump" "$dir/b1.db" fsdp2:1 >/dev/null

# facts DUMP SNAPSHOT N: what the dump says, as JSON, with the snapshot's parameters, gradients and
# state (their addresses from its tensor events) and the sizes gen_model.py gives its parameters
facts() {
  python3 - "$@" <<'PY'
import json, sqlite3, sys
path, db, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = sqlite3.connect(db)
role = {}
for addr, r in con.execute("select address, requested_size from events where kind = 16"):
    role.setdefault(addr, r)
events = []
head = {}
for line in open(path):
    f = line.split()
    if f[0] in ("alloc", "free"):
        events.append((f[0], int(f[1]), int(f[2]), int(f[3], 16), int(f[4]), int(f[5])))
    else:
        head[f[0]] = f[1:]
live, cur, peak, state_peak, kinds = {}, 0, 0, 0, {}
ag_alive, ag_most, rs_alive, rs_most = 0, 0, 0, 0
model_state = 0
streams = {}
sizes = {}
for kind, eid, stream, tag, index, size in events:
    key = (tag, index)
    is_state = tag in (0x41, 0x45, 0x46) or (tag == 0 and role.get(index) in (1, 2, 3))
    if kind == "alloc":
        live[key] = (size, is_state)
        cur += size
        model_state += size if is_state else 0
        kinds[tag] = kinds.get(tag, 0) + 1
        streams.setdefault(tag, set()).add(stream)
        sizes.setdefault(tag, []).append(size)
        if tag == 0x43: ag_alive += 1
        if tag == 0x44: rs_alive += 1
    else:
        s, st = live.pop(key, (0, False))
        cur -= s
        model_state -= s if st else 0
        if tag == 0x43: ag_alive -= 1
        if tag == 0x44: rs_alive -= 1
    peak, state_peak = max(peak, cur), max(state_peak, model_state)
    ag_most, rs_most = max(ag_most, ag_alive), max(rs_most, rs_alive)
# gen_model.py's parameters, in order: per block H*H*4 + 4096*i, 4*H*H*4, H*4; the head 1000*H*4
H = 256
blocks = int(head["units"][0]) - 1 if "units" in head else 0
L = (len([1 for a, r in role.items() if r == 1]) - 1) // 3
params = []
for i in range(L):
    params += [H * H * 4 + 4096 * i, H * 4 * H * 4, H * 4]
params.append(1000 * H * 4)
shard = lambda b: -(-(b // 4) // n) * 4
padded = lambda b: -(-(b // 4) // n) * n * 4
state_sizes = sorted(size for kind, eid, stream, tag, index, size in events
                     if kind == "alloc" and tag == 0 and role.get(index) == 3)
print(json.dumps({"units": head.get("units", []), "kinds": {hex(k): v for k, v in kinds.items()},
                  "streams": {hex(k): sorted(v) for k, v in streams.items()}, "sizes": {hex(k): v for k, v in sizes.items()},
                  "peak": peak, "state_peak": state_peak, "ag_most": ag_most, "rs_most": rs_most,
                  "params": params, "shards": sorted(shard(b) for b in params), "padded": sorted(padded(b) for b in params),
                  "state_sizes": state_sizes, "state_expected": sorted([shard(b) for b in params] * 2),
                  "open": len(live), "allocs": sum(1 for e in events if e[0] == "alloc")}))
PY
}
for n in 1 2 3 4 8; do facts "$dir/f$n.txt" "$dir/p.db" "$n" >"$dir/f$n.json"; done
facts "$dir/mp.txt" "$dir/p.db" 4 >"$dir/mp.json"
facts "$dir/mp32.txt" "$dir/p.db" 4 >"$dir/mp32.json"
facts "$dir/u.txt" "$dir/p.db" 4 >"$dir/u.json"
facts "$dir/ddp.txt" "$dir/p.db" 4 >"$dir/ddp.json"
facts "$dir/ddpv.txt" "$dir/p.db" 4 >"$dir/ddpv.json"
for z in zero1 zero2 zero3; do facts "$dir/$z.txt" "$dir/b1.db" 4 >"$dir/$z.json"; done
facts "$dir/b1f.txt" "$dir/b1.db" 4 >"$dir/b1f.json"

AG=0x5A5A0001 RS=0x5A5A0002
check "the units: the root and each instance of the repeated block (Model, Model.blocks.0 to .5)" \
  "json $dir/f2.json \"j['units'] == ['7', 'Model'] + ['Model.blocks.%d' % i for i in range(6)]\""
check "--units 'blocks.[01]': the root and two blocks" \
  "json $dir/u.json \"j['units'] == ['3', 'Model', 'Model.blocks.0', 'Model.blocks.1']\""
"$dump" "$dir/p.db" fsdp2:4 --units Block >"$dir/uc.txt"
check "--units Block: a class, as the Python frames Block.forward name it: the root and the six blocks" \
  "head -1 $dir/uc.txt | grep -qx 'units 7 Model Model.blocks.0 Model.blocks.1 Model.blocks.2 Model.blocks.3 Model.blocks.4 Model.blocks.5'"
for n in 1 2 3 4 8; do
  check "fsdp2:$n: each parameter's shard is 1/$n of its elements, padded (rank 0's chunk), allocated once and freed at the end" \
    "json $dir/f$n.json \"sorted(j['sizes']['0x41']) == j['shards'] and j['kinds']['0x41'] == 19\""
done
"$dump" "$dir/p.db" fsdp2:4 --meta >"$dir/meta.txt"
check "--shard-init meta: each parameter's allocation is its shard's (no full parameter made, none freed at set-up)" \
  "python3 -c \"
import json, sqlite3
full = [a for a, in sqlite3.connect('$dir/p.db').execute('select address from events where kind = 16 and requested_size = 1')]
lines = [l.split() for l in open('$dir/meta.txt') if l.startswith(('alloc', 'free'))]
made = [l for l in lines if l[0] == 'alloc' and l[3] == '0' and int(l[4]) in full]
shards = [l for l in lines if l[0] == 'alloc' and l[3] == '0x41']
f4 = [l.split() for l in open('$dir/f4.txt') if l.startswith('alloc') and l.split()[3] == '0x41']
exit(0 if not made and sorted(int(l[5]) for l in shards) == sorted(int(l[5]) for l in f4) and len(shards) == 19 else 1)\""
# A model made in twice its bytes and converted before the first forward (model.to(bfloat16) after
# a model made in fp32): under meta init its making is not the sharded program's, so the history
# is the unconverted program's, event for event; made on the GPU (the default) it stays.
gen "$dir/pc.db" --batch 4 --events --params --steps 3 --convert
seq() { "$dump" "$@" | awk '$1 == "alloc" || $1 == "free" {print $1, $3, $4, $6}'; }
check "--shard-init meta: a model converted before the first forward (19 originals made and freed) gives the unconverted one's history, event for event" \
  "[ \"\$(seq $dir/pc.db fsdp2:4 --meta)\" = \"\$(seq $dir/p.db fsdp2:4 --meta)\" ] && [ \$(seq $dir/pc.db fsdp2:4 | wc -l) = \$((\$(seq $dir/p.db fsdp2:4 | wc -l) + 38)) ]"
"$cli" predict "$dir/pc.db" --shard fsdp2:4 --shard-init meta >"$dir/pc.txt" 2>&1
"$cli" predict --json "$dir/pc.db" --shard fsdp2:4 --shard-init meta >"$dir/pc.json" 2>/dev/null
check "--shard-init meta: the set-up's blocks said (text) and counted (JSON setup_blocks, setup_bytes: twice the parameters')" \
  "grep -q 'left out with it (fsdp2, zero3): the 19 blocks' $dir/pc.txt &&
   json $dir/pc.json \"j['shard']['setup_blocks'] == 19 and j['shard']['setup_bytes'] == 2 * j['shard']['parameter_bytes']\""
check "fsdp2:3: the unsharded parameters are padded to a multiple of 3 elements, 37 a step (19 in forward, 18 in backward: the root's stay)" \
  "json $dir/f3.json \"sorted(set(j['sizes']['0x42'])) == sorted(set(j['padded'])) and all(s % 12 == 0 for s in j['sizes']['0x42']) and j['kinds']['0x42'] == 3 * 37\""
check "fsdp2:2: 13 all-gather outputs a step (7 units in forward, 6 blocks in backward), each N x the unit's padded shards, on the all-gather stream" \
  "json $dir/f2.json \"j['kinds']['0x43'] == 39 and j['streams']['0x43'] == [$((AG))] and set(j['sizes']['0x43']) <= set(j['sizes']['0x43'])\""
check "fsdp2:2: at most two all-gather outputs alive (the forward's implicit prefetch, the backward's prefetch)" \
  "json $dir/f2.json \"j['ag_most'] == 2\""
python3 -c "
import shutil, sqlite3, sys; shutil.copy(sys.argv[1], sys.argv[2]); c = sqlite3.connect(sys.argv[2])
c.execute('delete from events where kind = 18'); c.commit()" "$dir/p.db" "$dir/nobw.db"
"$dump" "$dir/nobw.db" fsdp2:2 >"$dir/nobw.txt"
check "without backward events (the passes' ends taken at the root's next forward, the last at the history's end): the same buffers per step" \
  "[ \"\$(grep -c ' 0x43 ' $dir/nobw.txt) \$(grep -c ' 0x44 ' $dir/nobw.txt) \$(grep -c ' 0x45 ' $dir/nobw.txt)\" = \"\$(grep -c ' 0x43 ' $dir/f2.txt) \$(grep -c ' 0x44 ' $dir/f2.txt) \$(grep -c ' 0x45 ' $dir/f2.txt)\" ]"
gen "$dir/kg.db" --batch 4 --events --params --steps 3 --keep-grads
"$dump" "$dir/kg.db" fsdp2:2 >"$dir/kg.txt"
check "gradients kept across steps (set_to_none=False): FSDP2's unsharded gradients made again in every later backward (7 units x 2 steps), a reduce-scatter per unit and step, the sharded gradients kept, accumulated into, freed at the end" \
  "[ \"\$(grep -c '^alloc .* 0x4a ' $dir/kg.txt) \$(grep -c '^alloc .* 0x44 ' $dir/kg.txt) \$(grep -c '^alloc .* 0x45 ' $dir/kg.txt) \$(grep -c '^free .* 0x45 ' $dir/kg.txt)\" = '14 21 21 21' ]"
check "fsdp2:2, in order: a unit's forward gathers (its output), frees the previous unit's output, copies out (18: 6 blocks x 3 steps); a block's backward copies out from its prefetched output, frees it, prefetches the block before (15: 5 x 3); a post-backward reshards, frees the previous reduce-scatter input, makes its own, frees the unsharded gradients, makes the sharded ones (21: 7 units x 3)" \
  "python3 -c \"
import re
tok = ' '.join(('A' if l.split()[0] == 'alloc' else 'F') + l.split()[3].replace('0x', '') for l in open('$dir/f2.txt') if l.startswith(('alloc', 'free'))) + ' '
fwd = len(re.findall(r'A43 F43 (?:A42 )+', tok))
bwd = len(re.findall(r'(?:A42 )+F43 A43 ', tok))
post = len(re.findall(r'(?:F42 )+(?:F44 )?A44 (?:F0 )+A45 ', tok))
exit(0 if (fwd, bwd, post) == (18, 15, 21) else 1)\""
check "fsdp2:1: no all-gather output (one rank copies its shards)" "json $dir/f1.json \"'0x43' not in j['kinds'] and j['kinds']['0x42'] == 3 * 37\""
check "fsdp2:4: a unit's all-gather output is the sum of its padded parameters (fp32)" \
  "python3 -c \"
import json; j = json.load(open('$dir/f4.json')); p = j['params']
pad = lambda b: -(-(b // 4) // 4) * 16
units = [sum(pad(b) for b in p[3 * i:3 * i + 3]) for i in range(6)] + [pad(p[-1])]
exit(0 if set(j['sizes']['0x43']) == set(units) else 1)\""
check "fsdp2:4: reduce-scatter inputs (one per unit and step) on the compute stream, one alive at a time; sharded gradients on the reduce-scatter stream, freed by zero_grad" \
  "json $dir/f4.json \"j['kinds']['0x44'] == 21 and j['streams']['0x44'] == [0] and j['rs_most'] == 1 and j['kinds']['0x45'] == 21 and j['streams']['0x45'] == [$((RS))] and j['streams']['0x42'] == [0]\""
check "fsdp2:4: the sharded gradients are 1/4 of the padded parameters (a unit's flat block)" \
  "json $dir/f4.json \"sum(j['sizes']['0x45']) == 3 * sum(j['padded']) // 4\""
check "fsdp2:N: the optimizer's state (AdamW: two tensors per parameter) is 1/N of its elements, N = 1, 2, 3, 4, 8" \
  "for n in 1 2 3 4 8; do json $dir/f\$n.json \"j['state_sizes'] == j['state_expected']\" || exit 1; done"
check "fsdp2:N: every block allocated is freed or still held at the history's end as recorded (no leak the synthesis adds)" \
  "json $dir/f4.json \"j['open'] == json.load(open('$dir/f1.json'))['open']\""
check "--param-dtype bf16: all-gather outputs and unsharded parameters half of fp32's, and a copy-in per all-gather on its stream" \
  "python3 -c \"
import json; a, b = json.load(open('$dir/f4.json')), json.load(open('$dir/mp.json'))
ok = sorted(s // 2 for s in a['sizes']['0x43']) == sorted(b['sizes']['0x43']) and sorted(s // 2 for s in a['sizes']['0x42']) == sorted(b['sizes']['0x42'])
ok &= b['kinds']['0x47'] == b['kinds']['0x43'] and b['streams']['0x47'] == [$((AG))]
exit(0 if ok else 1)\""
check "--param-dtype bf16 (reduce bf16): the reduce-scatter in bf16, the sharded gradients converted to fp32 on its stream" \
  "python3 -c \"
import json; a, b = json.load(open('$dir/f4.json')), json.load(open('$dir/mp.json'))
ok = sorted(s // 2 for s in a['sizes']['0x44']) == sorted(b['sizes']['0x44']) and sorted(b['sizes']['0x46']) == sorted(a['sizes']['0x45'])
ok &= b['streams']['0x46'] == [$((RS))]
exit(0 if ok else 1)\""
check "--reduce-dtype fp32 with bf16 parameters: the reduce-scatter in fp32, its output the sharded gradients" \
  "json $dir/mp32.json \"sorted(j['sizes']['0x44']) == sorted(json.load(open('$dir/f4.json'))['sizes']['0x44']) and '0x46' not in j['kinds']\""
gen "$dir/ac.db" --batch 4 --events --params --steps 3 --autocast
"$dump" "$dir/ac.db" fsdp2:4 --param-dtype 2 >"$dir/ac.txt"
"$dump" "$dir/ac.db" fsdp2:4 >"$dir/ac32.txt"
check "a recording under autocast (without native frames) with --param-dtype bf16: its 54 casts of the blocks' parameters left out (FSDP2's parameters are bf16), and kept in fp32" \
  "[ \$(grep -c '^alloc .* 0 0 ' $dir/ac.txt) = \$((\$(grep -c '^alloc .* 0 0 ' $dir/mp.txt) + 0)) ] && [ \$(grep -c '^alloc .* 0 0 ' $dir/ac32.txt) = \$((\$(grep -c '^alloc .* 0 0 ' $dir/f4.txt) + 54)) ]"
"$dump" "$dir/p.db" fsdp2:4 --recorded-dtype 2 --param-dtype 2 --orig-dtype 4 >"$dir/bf.txt"
check "a recording in bf16 (--recorded-dtype bf16) sharded as fp32 (--orig-dtype fp32, --param-dtype bf16): shards and state twice the bytes of the recorded elements' quarter, all-gathers in bf16 after a bf16 copy-in of the fp32 shards" \
  "python3 -c \"
import json, sqlite3
p = json.load(open('$dir/f4.json'))['params']
lines = [l.split() for l in open('$dir/bf.txt') if l.startswith('alloc')]
sizes = lambda tag: sorted(int(l[5]) for l in lines if l[3] == tag)
shard = sorted(-(-(b // 2) // 4) * 4 for b in p)
pad = lambda bs: sum(-(-(b // 2) // 4) * 4 * 2 for b in bs)
units = sorted(set([pad(p[3 * i:3 * i + 3]) for i in range(6)] + [pad(p[-1:])]))
state = sorted(int(l[5]) for l in lines if l[3] == '0' and int(l[4]) in [a for a, in sqlite3.connect('$dir/p.db').execute('select address from events where kind = 16 and requested_size = 3')])
cin = sorted(set(u // 4 for u in units))
exit(0 if sizes('0x41') == shard and sorted(set(sizes('0x43'))) == units and sorted(set(sizes('0x47'))) == cin and state == sorted(shard * 2) else 1)\""
check "ddp:4: the first iteration's one bucket of every parameter, rebuilt at the second forward: the parameters in reverse, the first closed at 1 MiB, the rest at 25 MiB; the broadcast's flat bucket" \
  "python3 -c \"
import json; j = json.load(open('$dir/ddp.json')); p = j['params'][::-1]
out, s, cap = [], 0, 1 << 20
for i, b in enumerate(p):
    s += b
    if s >= cap or i == len(p) - 1: out.append(s); s = 0; cap = 25 << 20
exit(0 if j['sizes']['0x48'] == [sum(p)] + out and j['sizes']['0x47'] == [sum(p)] else 1)\""
check "ddp:4: the order of DDP's own blocks: the broadcast's flat buckets and the Reducer's first bucket right after the last parameter's allocation (each flat freed before the bucket), on the parameters' stream; at the root's second forward (before its event) the first bucket freed, then every rebuilt one at once, kept to the end" \
  "python3 -c \"
import sqlite3
db = sqlite3.connect('$dir/p.db')
lines = [l.split() for l in open('$dir/ddp.txt') if l.startswith(('alloc', 'free'))]
own = [(i, l) for i, l in enumerate(lines) if l[3] in ('0x47', '0x48')]
param_ids = [r[0] for r in db.execute('select e.id from events e where e.kind = 1 and exists (select 1 from events t where t.kind = 16 and t.requested_size = 1 and t.address = e.address and t.id > e.id)')]
root = db.execute('select extra from events where kind = 15 order by id limit 1').fetchone()[0]
fwds = [r[0] for r in db.execute('select id from events where kind = 15 and size = 0 and extra = ? order by id', (root,))]
init = [l for i, l in own if l[1] == str(max(param_ids))]
kinds = [(l[0], l[3], l[4]) for l in init]
flats = [k for k in kinds if k[1] == '0x47']
ok = kinds == flats + [('alloc', '0x48', '0')] and flats == [('alloc', '0x47', '0'), ('free', '0x47', '0')]
first = [i for i, l in own if l[1] == str(max(param_ids))][0]
ok &= lines[first - 1][0] == 'alloc' and lines[first - 1][1] == str(max(param_ids)) and lines[first - 1][3] == '0'
rebuild = [(i, l) for i, l in own if l[1] == str(fwds[1])]
ok &= [l[0] for i, l in rebuild] == ['free'] + ['alloc'] * (len(rebuild) - 1) and rebuild[0][1][4] == '0' and len(rebuild) > 2
ok &= [int(l[4]) for i, l in rebuild[1:]] == list(range(1, len(rebuild))) and rebuild[-1][0] - rebuild[0][0] == len(rebuild) - 1
ok &= all(l[2] == lines[first - 1][2] for i, l in own)
ok &= [l for i, l in own if l[0] == 'free' and l[3] == '0x48'] == [rebuild[0][1]] and len(own) == len(init) + len(rebuild)
later = [l for l in lines[rebuild[-1][0] + 1:] if l[0] == 'alloc']
ok &= int(later[0][1]) >= fwds[1]
exit(0 if ok else 1)\""
check "ddp:4 with gradient_as_bucket_view: the 57 recorded gradients are the buckets' views (left out)" \
  "json $dir/ddpv.json \"j['allocs'] == json.load(open('$dir/ddp.json'))['allocs'] - 57\""
check "zero1 >= zero2 >= zero3 in model-state memory (parameters, gradients, optimizer state), at N = 4" \
  "python3 -c \"
import json; z = [json.load(open('$dir/zero%d.json' % i))['state_peak'] for i in (1, 2, 3)]
exit(0 if z[0] > z[1] > z[2] else 1)\""
check "zero3: the parameters' partitions 1/4, gathered per module owning parameters (no all-gather buffer)" \
  "json $dir/zero3.json \"sorted(j['sizes']['0x41']) == j['shards'] and '0x43' not in j['kinds'] and j['kinds']['0x42'] == 3 * 2 * 25\""

# the predictions
"$cli" predict --json "$dir/b1.db" --shard fsdp2:1,2,4,8 --shard zero3:2,4 >"$dir/pr.json" 2>"$dir/pr.err"
check "predict --shard fsdp2:1,2,4,8 --shard zero3:2,4: exit 0, nothing on stderr" "[ $? -eq 0 ] && [ ! -s $dir/pr.err ]"
check "JSON: each row carries its strategy and ranks (the recorded one: none, 1), and the units chosen" \
  "json $dir/pr.json \"[(r['strategy'], r['ranks']) for r in j['predictions']] == [('none', 1), ('fsdp2', 1), ('fsdp2', 2), ('fsdp2', 4), ('fsdp2', 8), ('zero3', 2), ('zero3', 4)] and j['shard']['unit_count'] == 9 and j['shard']['units'][0] == 'Model'\""
check "parameters dominating: rank 0's peak allocated falls with N (fsdp2 1 > 2 > 4 > 8; zero3 2 > 4)" \
  "json $dir/pr.json \"[r['peak_allocated_bytes'] for r in j['predictions'][1:5]] == sorted([r['peak_allocated_bytes'] for r in j['predictions'][1:5]], reverse=True) and len(set(r['peak_allocated_bytes'] for r in j['predictions'][1:5])) == 4 and j['predictions'][5]['peak_allocated_bytes'] > j['predictions'][6]['peak_allocated_bytes']\""
check "fsdp2:1: the optimizer step's model state is the recorded one's (shards = parameters, sharded gradients = gradients)" \
  "json $dir/pr.json \"j['predictions'][1]['peak_allocated_bytes'] >= j['predictions'][0]['peak_allocated_bytes']\""
"$cli" predict "$dir/b1.db" --shard fsdp2:2,4,8 --capacity 80M >"$dir/cap.txt" 2>&1
check "text: a program column with the strategy and N, the units, what is assumed and left out, the smallest N that fits" \
  "grep -q 'program (ranks)' $dir/cap.txt && grep -q 'fsdp2:4 ' $dir/cap.txt && grep -q 'the root and each instance of the repeated block: blocks.\\* (8)' $dir/cap.txt && grep -q 'left out: NCCL' $dir/cap.txt && grep -q 'the smallest N that fits 80.00 MiB: fsdp2:[0-9]' $dir/cap.txt"
"$cli" predict --json "$dir/p.db" --shard fsdp2:2 --checkpoint 'blocks.*' >"$dir/ck.json" 2>/dev/null
"$cli" predict --json "$dir/p.db" --shard fsdp2:2 >"$dir/nock.json" 2>/dev/null
check "--shard with --checkpoint: the sharded program checkpointed needs less than sharded alone" \
  "python3 -c \"
import json; a, b = json.load(open('$dir/ck.json'))['predictions'], json.load(open('$dir/nock.json'))['predictions']
exit(0 if a[1]['change'].endswith('fsdp2:2 (rank 0)') and a[1]['peak_allocated_bytes'] < b[1]['peak_allocated_bytes'] else 1)\""
"$cli" predict --json "$dir/p4.db=4" "$dir/p8.db=8" --at 16 --shard fsdp2:2,4 >"$dir/law.json" 2>"$dir/law.err"
check "two runs' laws at 16 with --shard fsdp2:2,4: three rows, the sharded ones below the unsharded" \
  "json $dir/law.json \"len(j['predictions']) == 3 and j['predictions'][0]['peak_allocated_bytes'] > j['predictions'][1]['peak_allocated_bytes'] > j['predictions'][2]['peak_allocated_bytes']\""
"$cli" predict --json "$dir/p.db" --shard fsdp2:2 --sweep >"$dir/sw.json" 2>/dev/null
check "--sweep with --shard: the 20 settings of the sharded program" \
  "json $dir/sw.json \"len(j['predictions']) == 20 and all(r['strategy'] == 'fsdp2' for r in j['predictions'])\""

"$cli" predict --json "$dir/b1.db" --at 1 --capacity 80M --advise --shard fsdp2:2,4,8 --shard zero3:2,4 >"$dir/adv.json" 2>"$dir/adv.err"
"$cli" predict --json "$dir/b1.db" --capacity 80M --shard fsdp2:2,4,8 --shard zero3:2,4 >"$dir/fits.json" 2>/dev/null
check "--advise with --shard: each strategy a change, its fewest ranks that fit, as the rows of --shard on the card say" \
  "python3 -c \"
import json; a, p = json.load(open('$dir/adv.json'))['advice']['changes'], json.load(open('$dir/fits.json'))['predictions']
ok = True
for s in ('fsdp2', 'zero3'):
    rows = [r for r in a if r['kind'] == 'shard' and r['strategy'] == s]
    fit = sorted(r['ranks'] for r in p if r['strategy'] == s and r['fits'])
    ok &= len(rows) == 1 and rows[0]['fits'] == bool(fit) and (not fit or rows[0]['ranks'] == fit[0])
exit(0 if ok else 1)\""
"$cli" predict "$dir/b1.db" --at 1 --capacity 80M --advise --shard fsdp2:2,4,8 >"$dir/adv.txt" 2>&1
check "--advise's text: the smallest N that fits the card" "grep -q '^the smallest N that fits 80.00 MiB: fsdp2:[248]\$' $dir/adv.txt"

# The fewest ranks searched (--shard STRATEGY without N, replay/fewest_ranks.c): N = 1, 2, 4, ...,
# the first that fits the card, against the rows of the same Ns given; on 90 MiB p.db needs
# sharding (its fsdp2:1 needs 110 MiB).
"$cli" predict --json "$dir/p.db" --shard fsdp2 --capacity 90M >"$dir/auto.json" 2>"$dir/auto.err"
check "--shard fsdp2 with a card: exit 0, nothing on stderr" "[ $? -eq 0 ] && [ ! -s $dir/auto.err ]"
"$cli" predict --json "$dir/p.db" --shard fsdp2:1,2,4,8,16,32,64,128 --capacity 90M >"$dir/given.json" 2>/dev/null
check "the N searched is the smallest power of two whose --shard fsdp2:N row fits the same card (more than 1), its rows those Ns' rows" \
  "python3 -c \"
import json; a, g = json.load(open('$dir/auto.json')), json.load(open('$dir/given.json'))
s = a['smallest_fitting_ranks'][0]
fit = sorted(r['ranks'] for r in g['predictions'] if r['strategy'] == 'fsdp2' and r['fits'])
rows = [r for r in a['predictions'] if r['strategy'] == 'fsdp2']
same = {r['ranks']: (r['peak_reserved_bytes'], r['fits']) for r in g['predictions'] if r['strategy'] == 'fsdp2'}
ok = fit and s['strategy'] == 'fsdp2' and s['searched'] and s['ranks'] == fit[0] > 1 and s['stopped'] == 'fits'
ok = ok and s['tried'] == [1 << k for k in range(len(s['tried']))] and s['tried'][-1] == s['ranks']
ok = ok and [r['ranks'] for r in rows] == s['tried'] and [r['fits'] for r in rows] == [False] * (len(rows) - 1) + [True]
ok = ok and all((r['peak_reserved_bytes'], r['fits']) == same[r['ranks']] for r in rows) and a['predictions'][0]['strategy'] == 'none'
exit(0 if ok else 1)\""
"$cli" predict "$dir/p.db" --shard fsdp2:auto --capacity 90M >"$dir/auto.txt" 2>&1
n=$(python3 -c "import json; print(json.load(open('$dir/auto.json'))['smallest_fitting_ranks'][0]['ranks'])")
tried=$(python3 -c "import json; print(', '.join(str(n) for n in json.load(open('$dir/auto.json'))['smallest_fitting_ranks'][0]['tried']))")
check "text (fsdp2:auto): a row per N tried, and the line 'the smallest N that fits 90.00 MiB: fsdp2:$n (searched: $tried)'" \
  "grep -qx 'the smallest N that fits 90.00 MiB: fsdp2:$n (searched: $tried)' $dir/auto.txt && [ \$(grep -cE '  fsdp2:[0-9]+ ' $dir/auto.txt) -eq \$(echo '$tried' | tr ',' '\n' | wc -l) ]"
"$cli" predict --json "$dir/p.db" --shard all --capacity 90M >"$dir/all.json" 2>/dev/null
"$cli" predict "$dir/p.db" --shard all --capacity 90M >"$dir/all.txt" 2>&1
check "--shard all: the five strategies searched, each a line (the smallest N, or why none fits)" \
  "json $dir/all.json \"[s['strategy'] for s in j['smallest_fitting_ranks']] == ['fsdp2', 'ddp', 'zero1', 'zero2', 'zero3'] and all(s['searched'] for s in j['smallest_fitting_ranks'])\" &&
   [ \$(grep -cE '^(the smallest N that fits 90.00 MiB: (fsdp2|ddp|zero1|zero2|zero3):[0-9]+ \(searched: |no N fits 90.00 MiB with (fsdp2|ddp|zero1|zero2|zero3) \(searched: )' $dir/all.txt) -eq 5 ]"
check "ddp: its peak does not fall with N, so the search stops (1, 2, 4) and says DDP keeps a whole replica on each rank" \
  "json $dir/all.json \"[(s['ranks'], s['tried'], s['stopped']) for s in j['smallest_fitting_ranks'] if s['strategy'] == 'ddp'] == [(None, [1, 2, 4], 'peak_not_falling')]
    and len(set(r['peak_reserved_bytes'] for r in j['predictions'] if r['strategy'] == 'ddp')) == 1\" &&
   grep -q '^no N fits 90.00 MiB with ddp (searched: 1, 2, 4): .*DDP keeps a whole replica' $dir/all.txt"
check "JSON smallest_fitting_ranks: strategy, at, ranks, searched, tried, stopped, why; a strategy given with Ns: searched false, its Ns" \
  "\"$cli\" predict --json $dir/p.db --shard zero3:2,4 --shard ddp --capacity 90M >$dir/mix.json 2>/dev/null && json $dir/mix.json \"
    all(sorted(s) == sorted(['strategy', 'at', 'ranks', 'searched', 'tried', 'stopped', 'why']) for s in j['smallest_fitting_ranks'])
    and [(s['strategy'], s['searched'], s['tried']) for s in j['smallest_fitting_ranks']] == [('ddp', True, [1, 2, 4]), ('zero3', False, [2, 4])]\""
exit_of() { "$cli" predict "$@" >/dev/null 2>"$dir/x.err"; echo $?; }
check "--shard fsdp2 without a card: exit 2, a card asked for (so --shard all:auto; two runs without --at; fsdp2 with and without N)" \
  "[ \$(exit_of $dir/p.db --shard fsdp2) = 2 ] && grep -q 'searches the fewest ranks that fit a card: give --capacity SIZE or --device CARD' $dir/x.err &&
   [ \$(exit_of $dir/p.db --shard all:auto) = 2 ] && [ \$(exit_of $dir/p4.db=4 $dir/p8.db=8 --shard fsdp2 --capacity 90M) = 2 ] && grep -q 'give --at N' $dir/x.err &&
   [ \$(exit_of $dir/p.db --shard fsdp2 --shard fsdp2:4 --capacity 90M) = 2 ]"
"$cli" predict --json "$dir/b1.db" --at 1 --capacity 70M --advise --shard fsdp2 >"$dir/adva.json" 2>/dev/null
"$cli" predict --json "$dir/b1.db" --capacity 70M --shard fsdp2:1,2,4,8,16,32 >"$dir/advg.json" 2>/dev/null
check "--advise with --shard fsdp2: its change the smallest power of two whose row fits (searched), as --shard fsdp2:N's rows say" \
  "python3 -c \"
import json; a, g = json.load(open('$dir/adva.json')), json.load(open('$dir/advg.json'))
rows = [c for c in a['advice']['changes'] if c['kind'] == 'shard']
fit = sorted(r['ranks'] for r in g['predictions'] if r['strategy'] == 'fsdp2' and r['fits'])
s = a['smallest_fitting_ranks']
ok = fit and fit[0] > 1 and len(rows) == 1 and rows[0]['ranks_searched'] and rows[0]['fits'] and rows[0]['ranks'] == fit[0]
exit(0 if ok and s[0]['ranks'] == fit[0] and s[0]['tried'][-1] == fit[0] else 1)\""

# The largest size that fits, per strategy and N given (two runs): a group of rows each.
"$cli" predict --json "$dir/p4.db=4" "$dir/p8.db=8" --shard fsdp2:2,8 --capacity 120M >"$dir/capn.json" 2>/dev/null
"$cli" predict "$dir/p4.db=4" "$dir/p8.db=8" --shard fsdp2:2,8 --capacity 120M >"$dir/capn.txt" 2>&1
check "--capacity with fsdp2:2,8: the largest size searched for each, more fitting with more ranks" \
  "json $dir/capn.json \"[(r['strategy'], r['ranks']) for r in j['largest_that_fits']] == [('fsdp2', 2), ('fsdp2', 8)]
    and 0 < j['largest_that_fits'][0]['at'] < j['largest_that_fits'][1]['at'] and (j['best_fit']['strategy'], j['best_fit']['ranks']) == ('fsdp2', 2)\" &&
   grep -qE '^best with fsdp2:2: [0-9]+ with PYTORCH_CUDA_ALLOC_CONF=' $dir/capn.txt && grep -qE '^best with fsdp2:8: [0-9]+ with PYTORCH_CUDA_ALLOC_CONF=' $dir/capn.txt"
for k in 0 1; do
  read -r n at < <(python3 -c "import json; r = json.load(open('$dir/capn.json'))['largest_that_fits'][$k]; print(r['ranks'], r['at'])")
  "$cli" predict --json "$dir/p4.db=4" "$dir/p8.db=8" --at "$at" --at $((at + 1)) --shard "fsdp2:$n" --capacity 120M >"$dir/capn$k.json" 2>/dev/null
  check "fsdp2:$n: the largest that fits, $at, fits 120 MiB and $((at + 1)) does not (its --at rows)" \
    "json $dir/capn$k.json \"[(r['at'], r['fits']) for r in j['predictions'] if r['strategy'] == 'fsdp2'] == [($at, True), ($((at + 1)), False)]\""
done
"$cli" predict --json "$dir/p4.db=4" "$dir/p8.db=8" --at 8 --shard fsdp2 --capacity 150M >"$dir/capa.json" 2>/dev/null
check "--capacity with fsdp2 searched: the largest size searched with the N found" \
  "json $dir/capa.json \"j['smallest_fitting_ranks'][0]['ranks'] and [(r['strategy'], r['ranks']) for r in j['largest_that_fits']] == [('fsdp2', j['smallest_fitting_ranks'][0]['ranks'])] and j['largest_that_fits'][0]['at'] >= 8\""
"$cli" predict --json "$dir/p4.db=4" "$dir/p8.db=8" --at 8 --shard fsdp2:2,4,8,16 --capacity 140M --sweep --jobs 2 >"$dir/capl.json" 2>/dev/null
check "--capacity --sweep with four strategies and Ns: 64 searches at most, the first three (60 rows), a note names the one left out" \
  "json $dir/capl.json \"len(j['largest_that_fits']) == 60 and [r['ranks'] for r in j['largest_that_fits'][::20]] == [2, 4, 8] and any('not with fsdp2:16' in n for n in j['notes'])\""

"$cli" predict "$dir/p4.db=4" "$dir/p8.db=8" --at 8 --at 16 --shard fsdp2:2,4 --html "$dir/page.html" >"$dir/page.out" 2>&1
"$cli" predict --json "$dir/p4.db=4" "$dir/p8.db=8" --at 8 --at 16 --shard fsdp2:2,4 >"$dir/page.json" 2>/dev/null
check "--html: per size, the program on one GPU then rank 0 at each N drawn over time, each with its row's peaks" \
  "python3 - $dir/page.html $dir/page.json <<'PY'
import json, re, sys
html = open(sys.argv[1]).read()
doc = json.loads(re.search(r'<script type=\"application/json\" id=\"memsnap-prediction\">(.*?)</script>', html, re.S).group(1))
rows = json.load(open(sys.argv[2]))['predictions']
drawn = doc['predicted']
whys = [p['why'] for p in drawn]
ok = whys == ['--at 8, as recorded', '--at 8, fsdp2:2', '--at 8, fsdp2:4', '--at 16, as recorded', '--at 16, fsdp2:2', '--at 16, fsdp2:4']
ok = ok and all((p['peak_allocated_bytes'], p['peak_reserved_bytes']) == (r['peak_allocated_bytes'], r['peak_reserved_bytes'])
                for p, r in zip(drawn, rows))
ok = ok and all(max(p['curves']['reserved']['hi']) == p['peak_reserved_bytes'] for p in drawn) and doc['answer'] == json.load(open(sys.argv[2]))
sys.exit(0 if ok else 1)
PY"

# From a recorded FSDP2 run at 2: the history synthesised at 2 written as a snapshot (a stand-in for
# rank 0's recording: the shards told as parameters, the sharded gradients' blocks as gradients,
# several in one block as FSDP2's views are), then --recorded-shard fsdp2:2 --shard fsdp2:N against
# the synthesis at N from the unsharded run.
# to_rec DUMP ORIGINAL.db OUT.db: the dump as a snapshot
to_rec() {
python3 - "$@" <<'PY'
import shutil, sqlite3, sys
dump, orig, out = sys.argv[1:]
shutil.copy(orig, out)
c = sqlite3.connect(out)
model = c.execute("select id, time_ns, kind, device, stream, address, size, requested_size, extra, thread, stack_id "
                  "from events where kind >= 15 order by id").fetchall()
c.execute("delete from events")
rows = []  # (sort key, event)
params = 0
for e in model:
    e = list(e)
    if e[2] == 16 and e[7] == 1:  # a parameter: its shard
        e[5] = (0x41 << 56) | params
        params += 1
    if e[2] == 16 and e[7] == 2:
        continue  # gradients: told below, at each step's beginning, by their sharded blocks
    rows.append(((e[0], 0, len(rows)), e))
flats = {}
seq = 0
for line in open(dump):
    f = line.split()
    if f[0] not in ("alloc", "free"):
        continue
    tag, index, eid = int(f[3], 16), int(f[4]), int(f[1])
    addr = (tag << 56) | index if tag else index
    kinds = [1] if f[0] == "alloc" else [2, 3]
    for k in kinds:
        seq += 1
        rows.append(((eid, 1, seq), [eid, 0, k, 0, int(f[2]), addr, int(f[5]), int(f[5]), None, 1, 0]))
rows.sort(key=lambda r: r[0])
live_flats, events = set(), []
for key, e in rows:
    if e[2] == 1 and (e[5] >> 56) in (0x45, 0x46):
        live_flats.add(e[5])
    if e[2] == 2 and e[5] in live_flats:
        live_flats.discard(e[5])
    events.append(e)
    if e[2] == 17 and e[6] == 1:  # a step begins: each sharded gradients' block told twice (two parameters' views)
        for a in sorted(live_flats):
            events += [[0, 0, 16, 0, 0, a, 1024, 2, 0, 1, 0] for _ in range(2)]
for i, e in enumerate(events):
    e[0], e[1] = i + 1, (i + 1) * 1000
c.executemany("insert into events values (?,?,?,?,?,?,?,?,?,?,?)", events)
c.execute("update meta set value = ? where key = 'recorded_events'", (len(events),))
c.commit()
PY
}
to_rec "$dir/f2.txt" "$dir/p.db" "$dir/rec2.db"
"$dump" "$dir/p.db" fsdp2:2 --param-dtype 2 >"$dir/mp2.txt"
to_rec "$dir/mp2.txt" "$dir/p.db" "$dir/rec2mp.db"
"$cli" predict --json "$dir/rec2.db" --recorded-shard fsdp2:2 --shard fsdp2:1,2,4,8 >"$dir/re.json" 2>"$dir/re.err"
check "--recorded-shard fsdp2:2 --shard fsdp2:1,2,4,8: exit 0, nothing on stderr" "[ $? -eq 0 ] && [ ! -s $dir/re.err ]"
"$cli" predict --json "$dir/p.db" --shard fsdp2:1,2,4,8 >"$dir/un.json" 2>/dev/null
check "from the run at 2, fsdp2:2 is the run as recorded: the synthesis at 2's peaks, exactly" \
  "python3 -c \"
import json; a, b = json.load(open('$dir/re.json'))['predictions'], json.load(open('$dir/un.json'))['predictions']
exit(0 if (a[2]['peak_allocated_bytes'], a[2]['peak_reserved_bytes']) == (b[2]['peak_allocated_bytes'], b[2]['peak_reserved_bytes']) else 1)\""
check "from the run at 2, fsdp2:1, 4 and 8: the synthesis from the unsharded run's peaks, within 0.5% (padding)" \
  "python3 -c \"
import json; a, b = json.load(open('$dir/re.json'))['predictions'], json.load(open('$dir/un.json'))['predictions']
ok = all(abs(a[i][k] - b[i][k]) <= 0.005 * b[i][k] for i in (1, 3, 4) for k in ('peak_allocated_bytes', 'peak_reserved_bytes'))
exit(0 if ok else 1)\""
"$cli" predict --json "$dir/rec2.db" --shard fsdp2:1,2,4,8 >"$dir/det.json" 2>/dev/null
check "without --recorded-shard: N = 2 detected (its all-gather outputs over its units' shards), the same answer" \
  "json $dir/det.json \"j['shard']['detected_ranks'] == 2 and j['shard']['recorded_ranks'] == 2 and j['predictions'] == json.load(open('$dir/re.json'))['predictions']\""
"$cli" predict --json "$dir/rec2mp.db" --shard fsdp2:4 >"$dir/detmp.json" 2>/dev/null
check "with mixed precision (the copy-in's flat input before each all-gather output): N = 2 detected from their ratio" \
  "json $dir/detmp.json \"j['shard']['detected_ranks'] == 2\""
check "a sharded recording at 2 asked for ddp:2: exit 1, only fsdp2:N" \
  "[ \$(\"$cli\" predict $dir/rec2.db --shard ddp:2 >/dev/null 2>$dir/s.err; echo \$?) = 1 ] && grep -q 'only fsdp2:N is predicted from it' $dir/s.err"
python3 - "$dir/rec2.db" "$dir/rec2x.db" <<'PY'
import shutil, sqlite3, sys
shutil.copy(sys.argv[1], sys.argv[2])
c = sqlite3.connect(sys.argv[2])
c.execute("update events set stream = 0 where stream = 1515847681")  # the all-gathers on the compute stream: N not told
c.commit()
PY
check "a sharded recording whose all-gathers do not say N, without --recorded-shard: exit 1, give the N it ran at" \
  "[ \$(\"$cli\" predict $dir/rec2x.db --shard fsdp2:4 >/dev/null 2>$dir/s.err; echo \$?) = 1 ] && grep -q 'recorded-shard fsdp2:N' $dir/s.err"
check "--recorded-shard on an unsharded recording: exit 1" \
  "[ \$(\"$cli\" predict $dir/p.db --recorded-shard fsdp2:2 --shard fsdp2:4 >/dev/null 2>$dir/s.err; echo \$?) = 1 ] && grep -q 'does not look like an FSDP2 run' $dir/s.err"

# Real recordings (tests/data/shard, run 71 on an H200: the one-GPU runs and FSDP2's rank 0 at 2)
# against the native FSDP2 runs of the same programs through PyTorch's fake process group
# (tests/gpu/results/run71-shard-native.json), the model made on the meta device as there:
# within the issue's bounds, allocated 3% and reserved 6%; under autocast against FSDP2's bf16
# compute, the 1.1B model's reserved memory at 2 and 8 is outside them (printed, not checked).
data=$here/../data/shard
native=$here/../gpu/results/run71-shard-native.json
for r in gpt2_fp32 gpt2_ac 1b_fp32 1b_bf16 gpt2_bf16 gpt2_fsdp2_2; do xz -dc "$data/$r.db.xz" >"$dir/$r.db"; done
for r in gpt2_fp32 gpt2_ac 1b_fp32; do
  "$cli" predict --json "$dir/$r.db" --shard fsdp2:2,4,8 --shard-init meta >"$dir/$r.json" 2>/dev/null
done
for r in gpt2_bf16 1b_bf16; do
  "$cli" predict --json "$dir/$r.db" --shard fsdp2:2,4,8 --shard-init meta --param-dtype bf16 --reduce-dtype fp32 >"$dir/$r.json" 2>/dev/null
done
"$cli" predict --json "$dir/gpt2_fsdp2_2.db" --shard fsdp2:4,8 >"$dir/gpt2_fsdp2_2.json" 2>/dev/null
# near NATIVE.json PREDICTION.json RUN NAME N...: the prediction's fsdp2:N rows against native
# NAME_fsdp2_N (STRATEGY=ddp: its ddp:N rows against NAME_ddp_N)
near() {
  STRATEGY=${STRATEGY:-fsdp2} python3 - "$@" <<'PY'
import json, os, sys
native, pred, run, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
strategy = os.environ['STRATEGY']
ok = True
for n in map(int, sys.argv[5:]):
    row = [r for r in pred['predictions'] if r['strategy'] == strategy and r['ranks'] == n]
    nat = native.get('native_%s_%s_%d' % (name, strategy, n))
    if len(row) != 1 or not nat or row[0]['error']:
        ok = False
        continue
    ea = 100.0 * (row[0]['peak_allocated_bytes'] - nat['peak_allocated']) / nat['peak_allocated']
    er = 100.0 * (row[0]['peak_reserved_bytes'] - nat['peak_reserved']) / nat['peak_reserved']
    print('  %-14s %s:%d  allocated %+6.2f%%  reserved %+6.2f%%' % (run, strategy, n, ea, er))
    ok &= abs(ea) <= 3 and abs(er) <= 6
sys.exit(0 if ok else 1)
PY
}
check "GPT-2 fp32 (H200), fsdp2:2,4,8 from its one-GPU run: within 3% allocated, 6% reserved of native FSDP2" \
  "near $native $dir/gpt2_fp32.json gpt2_fp32 gpt2_fp32 2 4 8"
check "GPT-2 checkpointed: the same" "near $native $dir/gpt2_ac.json gpt2_ac gpt2_ac 2 4 8"
check "the 1.1B model fp32: the same" "near $native $dir/1b_fp32.json 1b_fp32 1b_fp32 2 4 8"
# The recording tells a block's backward-begins before the next block's backward-ends (one gradient
# does both); FSDP2 runs the post-backward first: a unit reshards before the one before it
# unshards. GPT-2: at most the root's 5 and one block's 12 unsharded parameters alive (29 with two
# blocks'); the 1.1B model, whose peak falls in a backward, then within 0.1% at 8 (it was +1.95%).
check "backward: a unit reshards before the one before it unshards (at most the root's and one block's unsharded parameters alive: 17)" \
  "[ \$(\"$dump\" $dir/gpt2_fp32.db fsdp2:2 --meta | python3 -c \"
import sys
live, most = set(), 0
for l in sys.stdin:
    f = l.split()
    if f and f[0] in ('alloc', 'free') and f[3] == '0x42':
        (live.add if f[0] == 'alloc' else live.discard)(f[4])
        most = max(most, len(live))
print(most)\") = 17 ]"
check "the 1.1B model fp32 at 8: within 0.1% allocated and reserved of native" \
  "json $dir/1b_fp32.json \"[abs(r['peak_reserved_bytes'] / $(python3 -c "import json; print(json.load(open('$native'))['native_1b_fp32_fsdp2_8']['peak_reserved'])") - 1) < 0.001 and abs(r['peak_allocated_bytes'] / $(python3 -c "import json; print(json.load(open('$native'))['native_1b_fp32_fsdp2_8']['peak_allocated'])") - 1) < 0.001 for r in j['predictions'] if r['ranks'] == 8] == [True]\""
check "GPT-2 from its FSDP2 run at 2 (N detected): fsdp2:4,8 the same" "near $native $dir/gpt2_fsdp2_2.json gpt2_fsdp2_2 gpt2_fp32 4 8"
check "GPT-2 under autocast, --param-dtype bf16 --reduce-dtype fp32 (autocast's casts left out): the same" \
  "near $native $dir/gpt2_bf16.json gpt2_bf16 gpt2_bf16 2 4 8"
check "the 1.1B model under autocast, the same, at 4" "near $native $dir/1b_bf16.json 1b_bf16 1b_bf16 4"
# The models cast to bf16 on one GPU (run 74: model.to(bfloat16), made in fp32 first): every
# activation as FSDP2's bf16 compute makes it, and the conversion left out with --shard-init meta.
for r in gpt2_bf16model 1b_bf16model; do
  xz -dc "$data/$r.db.xz" >"$dir/$r.db"
  "$cli" predict --json "$dir/$r.db" --shard fsdp2:2,4,8 --shard-init meta --recorded-dtype bf16 --orig-dtype fp32 \
    --param-dtype bf16 --reduce-dtype fp32 >"$dir/$r.json" 2>/dev/null
done
check "GPT-2 and the 1.1B model recorded in bf16 (--recorded-dtype bf16 --orig-dtype fp32), against FSDP2's bf16 mixed precision at 2, 4, 8: the same bounds" \
  "near $native $dir/gpt2_bf16model.json gpt2_bf16model gpt2_bf16 2 4 8 && near $native $dir/1b_bf16model.json 1b_bf16model 1b_bf16 2 4 8"
# Another family (run 75): a Llama (RMSNorm, SwiGLU, rotary positions), fp32 and cast to bf16,
# against its native FSDP2 at 2, 4, 8 (and bf16 mixed precision) and DDP at 2.
n75=$here/../gpu/results/run75-shard-native.json
xz -dc "$data/llama_fp32.db.xz" >"$dir/llama_fp32.db"
xz -dc "$data/llama_bf16model.db.xz" >"$dir/llama_bf16model.db"
"$cli" predict --json "$dir/llama_fp32.db" --shard fsdp2:2,4,8 --shard ddp:2 --shard-init meta >"$dir/llama_fp32.json" 2>/dev/null
"$cli" predict --json "$dir/llama_bf16model.db" --shard fsdp2:2,4,8 --shard-init meta --recorded-dtype bf16 --orig-dtype fp32 \
  --param-dtype bf16 --reduce-dtype fp32 >"$dir/llama_bf16model.json" 2>/dev/null
check "a Llama (H200), fsdp2:2,4,8 in fp32 and in bf16 mixed precision, ddp:2: the same bounds" \
  "near $n75 $dir/llama_fp32.json llama_fp32 llama_fp32 2 4 8 && near $n75 $dir/llama_bf16model.json llama_bf16model llama_bf16 2 4 8 &&
   STRATEGY=ddp near $n75 $dir/llama_fp32.json llama_fp32 llama_fp32 2"
check "the Llama's units: the root and its 12 decoder layers (model.layers.*), found without --units" \
  "json $dir/llama_fp32.json \"j['shard']['unit_count'] == 13 and 'model.layers.*' in j['shard']['units_rule']\""
check "the 1.1B model recorded in bf16: its conversion (221 fp32 parameters made, then freed) said and left out" \
  "json $dir/1b_bf16model.json \"j['shard']['setup_blocks'] == 221 and j['shard']['setup_bytes'] > 4 * 2**30\""
# DDP at 2 (run 72's native runs through the fake group; tests/gpu/results/run72-shard-native.json)
for r in gpt2_fp32 1b_fp32; do "$cli" predict --json "$dir/$r.db" --shard ddp:2 >"$dir/$r-ddp.json" 2>/dev/null; done
check "GPT-2 fp32 and the 1.1B model, ddp:2 from their one-GPU runs: within 3% allocated, 6% reserved of native DDP" \
  "STRATEGY=ddp near $here/../gpu/results/run72-shard-native.json $dir/gpt2_fp32-ddp.json gpt2_fp32 gpt2_fp32 2 &&
   STRATEGY=ddp near $here/../gpu/results/run72-shard-native.json $dir/1b_fp32-ddp.json 1b_fp32 1b_fp32 2"
# The DDP run's own recording (run 73), replayed: its reserved memory as recorded, five 1,572 MiB
# segments. Only so with segments placed from the top, as CUDA placed them: from the bottom the
# 100 MiB block before the loss goes into the other of two wholly free segments, and one is missed.
xz -dc "$data/gpt2_fp32_ddp_2.db.xz" >"$dir/ddp_rec.db"
"$cli" replay --json "$dir/ddp_rec.db" >"$dir/ddp_rec.json" 2>/dev/null
check "GPT-2 DDP's recording (H200) replayed: peak reserved as recorded (17.81 GiB), to the byte" \
  "json $dir/ddp_rec.json \"j['devices'][0]['peak_reserved_bytes'] == j['devices'][0]['recorded']['peak_reserved_bytes'] > 17 * 2**30\""
# FSDP2's own history at 8 ranks (run 77: the 1.1B model in fp32, three streams' pools): replayed as recorded
xz -dc "$data/1b_fp32_fsdp2_8.db.xz" >"$dir/fsdp8_rec.db"
"$cli" replay --json "$dir/fsdp8_rec.db" >"$dir/fsdp8_rec.json" 2>/dev/null
check "the 1.1B model's FSDP2 recording at 8 (H200) replayed: peaks allocated and reserved as recorded, to the byte" \
  "json $dir/fsdp8_rec.json \"all(d['peak_reserved_bytes'] == d['recorded']['peak_reserved_bytes'] > 9 * 2**30 and d['peak_allocated_bytes'] == d['recorded']['peak_allocated_bytes'] for d in j['devices'][:1])\""
echo "  (from autocast's recording, outside the bounds in reserved memory, allocated within 0.01%:)"
near "$native" "$dir/1b_bf16.json" 1b_bf16 1b_bf16 2 8

# refusals
status() { "$cli" predict "$@" >/dev/null 2>"$dir/s.err"; echo $?; }
check "--shard fsdp3:2: exit 2, the strategies listed" "[ \$(status $dir/p.db --shard fsdp3:2) = 2 ] && grep -q \"'fsdp3' is none of fsdp2, ddp, zero1, zero2, zero3\" $dir/s.err"
check "--shard fsdp2:0: exit 2" "[ \$(status $dir/p.db --shard fsdp2:0) = 2 ] && grep -q 'not a whole number from 1 to 65536' $dir/s.err"
check "--shard fsdp2 (no N): exit 2" "[ \$(status $dir/p.db --shard fsdp2) = 2 ]"
check "a history without parameter events: exit 1, what is missing and how to record it" \
  "[ \$(status $dir/plain.db --shard fsdp2:2) = 1 ] && grep -q 'tells no parameters (tensor events of role 1' $dir/s.err"
check "--units naming no module: exit 1" "[ \$(status $dir/p.db --shard fsdp2:2 --units 'decoder.*') = 1 ] && grep -q \"names no module\" $dir/s.err"
check "--units without --shard: exit 2" "[ \$(status $dir/p.db --units 'blocks.*' --checkpoint Block) = 2 ]"
cp "$dir/p.db" "$dir/wrapped.db"
python3 -c "
import sqlite3, sys; c = sqlite3.connect(sys.argv[1])
c.execute(\"update meta set value = 400 where key = 'dropped_events'\"); c.execute('delete from events where id <= 400'); c.commit()" "$dir/wrapped.db"
check "a ring that dropped its oldest events: exit 1, the history starts late" \
  "[ \$(status $dir/wrapped.db --shard fsdp2:2) = 1 ] && grep -q 'starts late' $dir/s.err"
finish
