"""torch._C of the stand-in: the CUDA bindings that torch.cuda.memory calls, each asking the
current allocator what torch/csrc/cuda/Module.cpp and memory_snapshot.cpp ask it (so a pluggable
allocator refuses what PyTorch's refuses)."""
import threading

import torch


def _a():
    return torch._allocator()


# statistics (THCPModule_memoryStats and friends)
def _cuda_memoryStats(device):
    return _a().getDeviceStats(device)


def _cuda_resetPeakMemoryStats(device):
    _a().resetPeakStats(device)


def _cuda_resetAccumulatedMemoryStats(device):
    _a().resetAccumulatedStats(device)


def _cuda_emptyCache():
    _a().emptyCache()


def _cuda_setMemoryFraction(fraction, device):
    _a().setMemoryFraction(fraction, device)


def _cuda_getMemoryFraction(device):
    return _a().getMemoryFraction(device)


def _cuda_getAllocatorBackend():
    return _a().name()


def _cuda_cudaCachingAllocator_raw_alloc(size, stream):
    return _a().raw_alloc_with_stream(size, stream)


def _cuda_cudaCachingAllocator_enable(value):
    _a().enable(value)


def _cuda_cudaCachingAllocator_raw_delete(ptr):
    _a().raw_delete(ptr)


# the pinned host allocator (at::cuda::CachingHostAllocator): not the device allocator's business
_host = {k: {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
         for k in ("allocations", "allocated_bytes", "active_requests", "active_bytes")}


def _cuda_hostMemoryStats():
    out = {k: dict(v) for k, v in _host.items()}
    out.update(num_host_alloc=0, num_host_free=0)
    return out


def _cuda_resetPeakHostMemoryStats():
    pass


def _cuda_resetAccumulatedHostMemoryStats():
    pass


# snapshots and history (torch/csrc/cuda/memory_snapshot.cpp)
def _cuda_memorySnapshot(arg):
    """arg: None (every pool, with traces) or (id0, id1, include_traces)."""
    if arg is None:
        return _a().snapshot()
    return _a().snapshot(tuple(arg[:2]), bool(arg[2]) if len(arg) > 2 else True)


def _cuda_record_memory_history(enabled, context, stacks, max_entries, clear_history=False, compile_context=False,
                                global_record_annotations=False, skip_actions=(), *rest):
    _a().recordHistory(enabled is not None, context is not None, max_entries, clear_history, skip_actions)


def _cuda_record_memory_history_legacy(enabled, record_context, trace_alloc_max_entries, trace_alloc_record_context,
                                       record_context_cpp, clear_history=False, *rest):
    _a().recordHistory(enabled, record_context, trace_alloc_max_entries, clear_history, ())


def _cuda_attach_out_of_memory_observer(observer):
    _a().attachOutOfMemoryObserver(observer)


# allocators
class _cuda_CUDAAllocator:
    pass


def _cuda_customAllocator(alloc_fn, free_fn):
    return torch._PluggableAllocator(alloc_fn, free_fn)


def _cuda_changeCurrentAllocator(allocator):
    torch._change_current_allocator(allocator)


def _cuda_getAllocator():
    return _a()


# private pools (MemPool, use_mem_pool, CUDA graph trees)
class _MemPool:
    _next = 1

    def __init__(self, allocator=None, is_user_created=True, use_on_oom=False, no_split=False):
        torch._lazy_init()
        self._id = (0, _MemPool._next)
        _MemPool._next += 1
        _a().createOrIncrefPool(0, self._id, allocator)

    @property
    def id(self):
        return self._id

    def use_count(self):
        return _a().getPoolUseCount(0, self._id)


def _cuda_beginAllocateCurrentThreadToPool(device, mempool_id):
    _a().beginAllocateToPool(device, tuple(mempool_id), threading.get_ident())


def _cuda_endAllocateToPool(device, mempool_id):
    _a().endAllocateToPool(device, tuple(mempool_id))


def _cuda_releasePool(device, mempool_id):
    _a().releasePool(device, tuple(mempool_id))


def _cuda_checkPoolLiveAllocations(device, mempool_id, expected_live_allocations):
    return _a().checkPoolLiveAllocations(device, tuple(mempool_id), expected_live_allocations)


def _cuda_getCheckpointState(device, mempool_id):
    return _a().getCheckpointState(device, tuple(mempool_id))


def _cuda_setCheckpointPoolState(device, state, stale_storages, storages_to_add_deleters_to):
    _a().setCheckpointPoolState(device, state)
