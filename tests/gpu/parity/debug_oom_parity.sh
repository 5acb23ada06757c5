export MEMSNAP_LIB=$PWD/build/libmemsnap.so PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp}
which cuda-gdb
timeout 240 cuda-gdb -q -batch -ex 'set pagination off' -ex 'set cuda api_failures ignore' -ex run -ex bt \
  --args python3 tests/gpu/parity/torch_compare.py --child memsnap oom 2>&1 | grep -v '^\[New Thread\|^\[Thread' | tail -45
for m in native memsnap; do PARITY_NAME=0 PARITY_STEPS=3000 timeout 200 python3 tests/gpu/parity/torch_compare.py --child $m parity | tail -1; done
python3 -c "
import sys, json; sys.path.insert(0,'tests/gpu/parity'); import torch_compare as t
a={'file':'$OUT/parity_0_native.json'}; b={'file':'$OUT/parity_0_memsnap.json'}
print(json.dumps(t.compare_parity(a,b))[:1500])"
