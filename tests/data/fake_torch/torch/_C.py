"""torch._C of the stand-in: the CUDA bindings that torch.cuda.memory calls, each asking the
current allocator what torch/csrc/cuda/Module.cpp and memory_snapshot.cpp ask it (so a pluggable
allocator refuses what PyTorch's refuses), and autograd's engine with the id of the backward pass
running (torch/csrc/autograd/python_engine.cpp)."""
import itertools
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


# ---- autograd's engine (torch/csrc/autograd/engine.cpp, python_engine.cpp) ---------------------

_graph_tasks = itertools.count(1)
_graph_task = threading.local()


def _current_graph_task_id():
    """The id of the backward pass running on this thread, -1 outside one."""
    return getattr(_graph_task, "id", -1)


class _ImperativeEngine:
    """Variable._execution_engine: runs a backward pass on the calling thread. Tensors are taken
    outputs first (each after every tensor made from it); a tensor's hooks run once its gradient is
    complete, then its grad_fn makes a gradient for each of its inputs (one buffer an input,
    however many uses) and drops what it saved (without retain_graph); a leaf that requires grad
    keeps its gradient as .grad (accumulate_grad) or gives it back (torch.autograd.grad)."""

    def run_backward(self, tensors, grad_tensors, keep_graph, create_graph, inputs=(), allow_unreachable=True,
                     accumulate_grad=True):
        order, seen = [], set()

        def visit(t):
            if id(t) in seen:
                return
            seen.add(id(t))
            if t.grad_fn is not None:
                for i in t.grad_fn.inputs:
                    visit(i)
            order.append(t)
        for t in tensors:
            visit(t)
        visit = None  # its closure's cell held the function itself: a cycle keeping `order`'s tensors until gc ran
        outer = _current_graph_task_id()
        _graph_task.id = next(_graph_tasks)
        try:
            grads = {id(t): torch.Tensor(t.nbytes) for t in tensors}  # the seed: ones_like(output)
            results = {}
            for t in reversed(order):
                g = grads.pop(id(t), None)
                if g is None:
                    continue
                for hook in list((t._backward_hooks or {}).values()):
                    hook(g)
                if t.grad_fn is None:
                    if not accumulate_grad:
                        results[id(t)] = g
                    elif t.grad is None:
                        t.grad = g
                    continue
                for i in t.grad_fn.inputs:
                    if id(i) not in grads:
                        grads[id(i)] = torch.Tensor(i.nbytes)
                del g
                if not keep_graph:
                    t.grad_fn.saved = ()
            return tuple(results.get(id(i)) for i in (inputs or ())) if not accumulate_grad else None
        finally:
            _graph_task.id = outer
