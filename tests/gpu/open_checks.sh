#!/usr/bin/env bash
# open_checks.sh: the GPU checks that this repository's last changes still wait for, one after the
# other in one call on one GPU (each alone on the card), everything packed into $OUT (pack_out.sh):
#   async   PyTorch's test_cuda.py selection under the async backend, the memsnap side alone,
#           compared with run 46's native side (AGAINST), each test that passes natively and not
#           under memsnap run again on both sides after memsnap's history (SAME_HISTORY):
#           test_max_split_expandable (docs/BENCHMARKS.md, runs 51 to 55)
#   profile the zoo's gpt2_eager with its torch.profiler run from the first optimizer
#           (ZOO_PROFILE_FROM=optimizer), and generate with a second native run (done: run 52)
#   order   why test_max_split_expandable fails there (memory_in_order.py: the memory each test leaves,
#           graph memory included), natively and under memsnap, in three histories: the test alone,
#           after the three tests that left memory under memsnap in run 53, and after the async
#           selection's whole prefix (ORDER_VARIANTS picks some)
# OPEN_CHECKS=async, =profile or =order runs one of them (default: async). Prepare build/
# with tests/gpu/prepare.sh, carry build/ and .carry/ (PyTorch's test_cuda.py as .carry/test_cuda.py).
set -u
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
nvidia-smi -L
want=${OPEN_CHECKS:-async}
if [[ ",$want," == *,async,* ]]; then
  (OUT=$W SIDES=memsnap SAME_HISTORY=1 HISTORY_BUDGET=550 AGAINST=tests/gpu/results/run46-test_cuda-async.json SIDE_TIMEOUT=240 \
    SUITE_TIMEOUT=580 tests/gpu/pytorch_suite/suite.sh async >"$W/async.txt" 2>&1)
fi
if [[ ",$want," == *,profile,* ]]; then
  (OUT=$W ZOO_TIMEOUT=${PROFILE_TIMEOUT:-250} tests/gpu/zoo/zoo.sh --only gpt2_eager,generate --no-leak \
    --native-again >"$W/profile.txt" 2>&1)
fi
if [[ ",$want," == *,order,* ]]; then
  m=tests/gpu/pytorch_suite/memory_in_order.py O=$W/order && mkdir -p "$O"
  crashed=(--skip-crashed tests/gpu/results/run46-test_cuda-async.json)
  # prefix: the whole prefix without what crashed natively in run 46 and without the test whose error
  # left native's capture state stuck (the graph tests after it then fail natively: run 53);
  # leftovers: the three tests that left memory behind under memsnap in run 53; alone: the test only;
  # leftovers_fraction: the same with test_set_per_process_memory_fraction, after which natively the
  # test's `finally` can restore the fraction (natively it reads 1.2e8 when none was set: run 54)
  two=TestCuda.test_matmul_memory_use,TestCuda.test_repeat_graph_capture_cublas_workspace_memory
  third=TestCudaAutocast.test_autocast_cache_leak
  declare -A variant=(
    [prefix]="${crashed[*]} --skip TestCuda.test_cuda_graph_allocator_propagates_stream"
    [leftovers]="--only $two,$third"
    [alone]="--only ,"
    [leftovers_fraction]="--only $two,TestCuda.test_set_per_process_memory_fraction,$third")
  for v in ${ORDER_VARIANTS:-alone leftovers prefix}; do
    # shellcheck disable=SC2086
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 240 python3 $m .carry/test_cuda.py ${variant[$v]} \
      >"$O/$v-native.txt" 2>&1
    # shellcheck disable=SC2086
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 240 build/memsnap run -q -o "$O/$v-%p.db" -- \
      python3 $m .carry/test_cuda.py ${variant[$v]} >"$O/$v-memsnap.txt" 2>&1
  done
  for db in "$O"/*.db; do [ -f "$db" ] && timeout 120 build/memsnap analyze --no-suggest "$db" >"${db%.db}-analyze.txt" 2>&1; done
  rm -f "$O"/*.db
  OUT=$W tests/gpu/pack_out.sh "$O" order >/dev/null
fi
mkdir -p "$OUT"
for f in "$W"/*.tar.xz*; do [ -e "$f" ] && mv "$f" "$OUT/"; done
for f in "$W"/order/*-native.txt "$W"/order/*-memsnap.txt; do
  [ -f "$f" ] || continue
  echo "== order $(basename "$f" .txt)"
  grep '^MEMORDER ' "$f" | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line[9:]); last = d['rows'][-1] if d.get('rows') else {}
    print('  %d tests before; target %s %s; allocated before it %.1f MiB, graph memory %.1f MiB' % (d.get('tests_before', -1),
          last.get('result'), last.get('why', ''), d['rows'][-2]['allocated'] / 2**20 if len(d.get('rows', [])) > 1 else 0,
          d['rows'][-2]['graph_used'] / 2**20 if len(d.get('rows', [])) > 1 else 0))"
done
for part in async profile; do
  [ -f "$W/$part.txt" ] || continue
  echo "== $part"; grep -v '^-rw\|^total\|^drwx' "$W/$part.txt" | tail -n 40
done
