#!/usr/bin/env bash
# run_record.sh: the recording benchmark on the GPU machine (docs/BENCHMARKS.md): the PyTorch
# sample, then record_compare.py. Prepare with tests/gpu/prepare.sh and carry build/.
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/memsnap-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MEMSNAP_LIB=$PWD/build/libmemsnap.so OUT
PYTHONPATH=recorder/python python3 samples/torch_train.py --steps 10 --out "$OUT/torch_train.db" 2>&1 | tail -3
build/memsnap analyze "$OUT/torch_train.db" 2>&1 | head -40
python3 -c "
import sqlite3; db = sqlite3.connect('$OUT/torch_train.db')
print('innermost python frames of live blocks:')
for r in db.execute('''select f.name, f.file, f.line, count(*), sum(b.size) from blocks b join stack_frames sf on sf.stack_id=b.stack_id
   join frames f on f.id=sf.frame_id where b.state='allocated' and f.kind='python'
   and sf.position=(select min(position) from stack_frames s2 join frames f2 on f2.id=s2.frame_id where s2.stack_id=b.stack_id and f2.kind='python')
   group by f.id order by 5 desc limit 6'''): print('  ', r)
print('deepest stack:', db.execute('select max(depth) from stacks').fetchone()[0])"
python3 tests/gpu/bench/record_compare.py --reps 3 2>&1 | tail -16
