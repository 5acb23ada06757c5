"""test_enable.py: memsnap.enable() against a stand-in for PyTorch, on the simulated device.

PyTorch is not on the test machine, so a small fake `torch` package (written to a temporary
directory and put first on sys.path) records what enable() does with it: the pluggable
allocator's hooks (the CUDA graph pool hooks must be memsnap's C++-ABI functions), the bindings
it replaces (memory_stats, checkPoolLiveAllocations, the checkpoint pair), MemPool and
use_mem_pool, and PyTorch's allocator variables (the backend key is removed once memsnap read
it, the others stay). Then MemPool and use_mem_pool route allocations into a private pool.
"""
import ctypes
import os
import sys
import tempfile
import textwrap

os.environ["MEMSNAP_BACKEND"] = "sim"
os.environ["MEMSNAP_SIM_CAPACITY"] = "1G"
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "roundup_power2_divisions:[256:1,>:2],expandable_segments:True,backend:cudaMallocAsync"

FAKE = textwrap.dedent('''
    """A stand-in for PyTorch: just what memsnap.enable() touches."""
    import types
    calls = []

    class OutOfMemoryError(RuntimeError):
        pass

    class _Hooks:
        def __getattr__(self, name):
            if name.startswith("set_"):
                return lambda addr: calls.append((name, addr))
            raise AttributeError(name)

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc, free):
            calls.append(("pluggable", path, alloc, free))
            self._hooks = _Hooks()
        def allocator(self):
            return self._hooks

    _C = types.SimpleNamespace()
    class _Memory(types.SimpleNamespace):
        pass
    class _Utils:
        @staticmethod
        def _get_device_index(d):
            return int(d)
    memory = _Memory(CUDAPluggableAllocator=CUDAPluggableAllocator,
                     change_current_allocator=lambda a: calls.append(("change", a)))
    cuda = types.SimpleNamespace(is_initialized=lambda: False, memory=memory, current_device=lambda: 0,
                                 OutOfMemoryError=OutOfMemoryError, _utils=_Utils)
''')

tmp = tempfile.mkdtemp()
os.makedirs(os.path.join(tmp, "torch"))
with open(os.path.join(tmp, "torch", "__init__.py"), "w") as f:
    f.write(FAKE)
sys.path.insert(0, tmp)

import torch  # noqa: E402  (the fake)
import memsnap  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

allocator = memsnap.enable()
lib = memsnap.load()
addr = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value  # noqa: E731
hooks = {c[0]: c[1] for c in torch.calls if c[0].startswith("set_")}
check("enable: the CUDA graph pool hooks are memsnap's",
      hooks.get("set_begin_allocate_to_pool") == addr("memsnap_torch_begin_allocate_to_pool") and
      hooks.get("set_end_allocate_to_pool_fn") == addr("memsnap_torch_end_allocate_to_pool") and
      hooks.get("set_release_pool") == addr("memsnap_torch_release_pool"))
check("enable: the older hooks too (init, empty_cache, fraction, record_stream)",
      {"set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_record_stream_fn"} <= set(hooks))
check("enable: the allocator is swapped in", ("change", allocator) in torch.calls)
check("enable: torch.compile's bindings answered by memsnap",
      torch._C._cuda_checkPoolLiveAllocations is memsnap.pool_live_allocations_match and
      callable(torch._C._cuda_getCheckpointState) and callable(torch._C._cuda_setCheckpointPoolState))
try:
    torch._C._cuda_setCheckpointPoolState(0, torch._C._cuda_getCheckpointState(0, (1, 0)), [], [])
    check("enable: restoring a graph pool checkpoint says why it cannot", False)
except RuntimeError as e:
    check("enable: restoring a graph pool checkpoint says why it cannot", "setCheckpointPoolState" in str(e))
check("enable: MemPool and use_mem_pool are memsnap's",
      torch.cuda.MemPool is memsnap.MemPool and torch.cuda.memory.use_mem_pool is memsnap.use_mem_pool)
check("enable: the backend key is taken out of PYTORCH_CUDA_ALLOC_CONF, the rest kept",
      os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "roundup_power2_divisions:[256:1,>:2],expandable_segments:True")

# memsnap read the backend key before it went: the async mode is on (no segments, pool stats).
p = memsnap.malloc(3 << 20)
stats = memsnap.memory_stats()
check("enable: memsnap read backend:cudaMallocAsync (async mode) before the key went",
      stats["segment.all.current"] == 0 and stats["allocated_bytes.all.current"] == 3 << 20 and
      stats["allocated_bytes.large_pool.current"] == 0)
memsnap.free(p)

# MemPool on the caching allocator (a fresh library state, same process).
memsnap.shutdown()
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = ""
pool = torch.cuda.MemPool()
other = memsnap.malloc(3 << 20)
with torch.cuda.use_mem_pool(pool):
    inside = memsnap.malloc(3 << 20)
check("MemPool: what use_mem_pool allocated is the pool's, exactly",
      memsnap.pool_live_allocations_match(0, pool.id, [inside]) and
      not memsnap.pool_live_allocations_match(0, pool.id, [inside, other]))
memsnap.free(inside)
memsnap.free(other)
memsnap.empty_cache()
check("MemPool: a live pool keeps its memory through empty_cache", memsnap.memory_stats()["segment.all.current"] == 1)
memsnap.check()
del pool
check("MemPool: deleting it gives its memory back", memsnap.memory_stats()["segment.all.current"] == 0)
try:
    memsnap.pool_live_allocations_match(0, (0, 12345), [])
    check("pool_live_allocations_match: an unknown pool raises", False)
except memsnap.MemsnapError as e:
    check("pool_live_allocations_match: an unknown pool raises", "no pool" in str(e))
try:
    torch.cuda.MemPool(allocator=object())
    check("MemPool(allocator=...): a clear NotImplementedError", False)
except NotImplementedError as e:
    check("MemPool(allocator=...): a clear NotImplementedError", "second allocator" in str(e))
finish()
