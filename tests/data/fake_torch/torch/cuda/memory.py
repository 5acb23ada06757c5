"""torch.cuda.memory of the stand-in: PyTorch 2.11's public functions, each reaching the
torch._C binding that the real one calls (looked up at call time, as there), with the same
arguments and the same handling around it (what is done before CUDA is initialised, which
device index is passed, which keys are read). Written from PyTorch's torch/cuda/memory.py."""
import collections
import contextlib
import ctypes
import pickle
import sys
import warnings

import torch

from ._utils import _get_device_index

__all__ = ["caching_allocator_alloc", "caching_allocator_delete", "caching_allocator_enable",
           "set_per_process_memory_fraction",
           "get_per_process_memory_fraction", "empty_cache", "memory_stats", "memory_stats_as_nested_dict",
           "reset_accumulated_memory_stats", "reset_peak_memory_stats", "reset_max_memory_allocated",
           "reset_max_memory_cached", "host_memory_stats", "host_memory_stats_as_nested_dict",
           "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats", "memory_allocated",
           "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached", "max_memory_cached",
           "memory_snapshot", "memory_summary", "list_gpu_processes", "mem_get_info", "get_allocator_backend",
           "CUDAPluggableAllocator", "change_current_allocator", "MemPool", "use_mem_pool"]


def _initialized():
    return torch._initialized


def caching_allocator_alloc(size, device=None, stream=None):
    stream = 0 if stream is None else getattr(stream, "cuda_stream", stream)
    if not isinstance(stream, int):
        raise TypeError("Invalid type for stream argument, must be `torch.cuda.Stream` or `int` representing a "
                        "pointer to an existing stream")
    torch._lazy_init()
    return torch._C._cuda_cudaCachingAllocator_raw_alloc(size, stream)


def caching_allocator_delete(mem_ptr):
    torch._C._cuda_cudaCachingAllocator_raw_delete(mem_ptr)


def caching_allocator_enable(value=True):
    if _initialized():
        torch._C._cuda_cudaCachingAllocator_enable(value)


def set_per_process_memory_fraction(fraction, device=None):
    torch._lazy_init()
    device = _get_device_index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError("Invalid fraction value: %s. Allowed range: 0~1" % fraction)
    torch._C._cuda_setMemoryFraction(fraction, device)


def get_per_process_memory_fraction(device=None):
    torch._lazy_init()
    return torch._C._cuda_getMemoryFraction(_get_device_index(device))


def empty_cache():
    if _initialized():
        torch._C._cuda_emptyCache()


def _flatten(nested):
    out = []

    def walk(prefix, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                key = k if isinstance(k, str) else "_".join(str(p) for p in k) if isinstance(k, tuple) else str(k)
                walk(prefix + "." + key if prefix else key, v)
        else:
            out.append((prefix, obj))
    walk("", nested)
    return collections.OrderedDict(sorted(out))


def memory_stats(device=None):
    return _flatten(memory_stats_as_nested_dict(device=device))


def memory_stats_as_nested_dict(device=None):
    if not _initialized():
        return {}
    return torch._C._cuda_memoryStats(_get_device_index(device, optional=True))


def reset_accumulated_memory_stats(device=None):
    return torch._C._cuda_resetAccumulatedMemoryStats(_get_device_index(device, optional=True))


def reset_peak_memory_stats(device=None):
    return torch._C._cuda_resetPeakMemoryStats(_get_device_index(device, optional=True))


def host_memory_stats():
    return _flatten(host_memory_stats_as_nested_dict())


def host_memory_stats_as_nested_dict():
    if not _initialized():
        return {}
    return torch._C._cuda_hostMemoryStats()


def reset_accumulated_host_memory_stats():
    return torch._C._cuda_resetAccumulatedHostMemoryStats()


def reset_peak_host_memory_stats():
    return torch._C._cuda_resetPeakHostMemoryStats()


def reset_max_memory_allocated(device=None):
    warnings.warn("torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, which resets "
                  "/all/ peak memory stats.", FutureWarning, stacklevel=2)
    return reset_peak_memory_stats(device=device)


def reset_max_memory_cached(device=None):
    warnings.warn("torch.cuda.reset_max_memory_cached now calls torch.cuda.reset_peak_memory_stats, which resets "
                  "/all/ peak memory stats.", FutureWarning, stacklevel=2)
    return reset_peak_memory_stats(device=device)


def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.peak", 0)


def memory_cached(device=None):
    warnings.warn("`torch.cuda.memory_cached` has been renamed to `torch.cuda.memory_reserved`", FutureWarning)
    return memory_reserved(device=device)


def max_memory_cached(device=None):
    warnings.warn("`torch.cuda.max_memory_cached` has been renamed to `torch.cuda.max_memory_reserved`",
                  FutureWarning)
    return max_memory_reserved(device=device)


def memory_snapshot(mempool_id=None, include_traces=True):
    if mempool_id is None:
        return torch._C._cuda_memorySnapshot((0, 0, include_traces))["segments"]
    return torch._C._cuda_memorySnapshot((mempool_id[0], mempool_id[1], include_traces))["segments"]


def memory_summary(device=None, abbreviated=False):
    """The same statistics read as PyTorch's summary reads them (a KeyError for a missing one);
    the table is laid out more simply."""
    device = _get_device_index(device, optional=True)
    stats = memory_stats(device=device)
    lines = ["PyTorch CUDA memory summary, device ID %d" % device,
             "CUDA OOMs: %d | cudaMalloc retries: %d" % (stats["num_ooms"], stats["num_alloc_retries"])]
    for metric in ("allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes", "inactive_split_bytes",
                   "allocation", "active", "segment", "inactive_split"):
        for pool in ("all",) if abbreviated else ("all", "large_pool", "small_pool"):
            p = metric + "." + pool + "."
            lines.append("%s.%s | %d | %d | %d | %d" % (metric, pool, stats[p + "current"], stats[p + "peak"],
                                                         stats[p + "allocated"], stats[p + "freed"]))
    for metric in ("oversize_allocations", "oversize_segments"):
        p = metric + "."
        lines.append("%s | %d | %d | %d | %d" % (metric, stats[p + "current"], stats[p + "peak"],
                                                  stats[p + "allocated"], stats[p + "freed"]))
    return "|" + "|\n|".join(lines) + "|\n"


def list_gpu_processes(device=None):
    try:
        import pynvml  # noqa: F401
    except ModuleNotFoundError:
        return "pynvml module not found, please install nvidia-ml-py"
    return "GPU:0\nno processes are running"


def mem_get_info(device=None):
    return torch.cuda.cudart().cudaMemGetInfo(_get_device_index(device, optional=True))


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                           clear_history=False, compile_context=False, global_record_annotations=False,
                           skip_actions=None):
    if isinstance(enabled, bool):  # the legacy form
        return torch._C._cuda_record_memory_history_legacy(enabled, True, 1, False, False, clear_history)
    torch._C._cuda_record_memory_history(enabled, context, stacks, max_entries, clear_history, compile_context,
                                         global_record_annotations, skip_actions if skip_actions is not None else [])


def _snapshot(device=None, augment_with_fx_traces=False):
    return torch._C._cuda_memorySnapshot(None)


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def get_allocator_backend():
    return torch._C._cuda_getAllocatorBackend()


class _CUDAAllocator:
    def __init__(self, allocator):
        self._allocator = allocator

    def allocator(self):
        return self._allocator


class CUDAPluggableAllocator(_CUDAAllocator):
    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        lib = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(lib, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(lib, free_fn_name), ctypes.c_void_p).value
        self._allocator = torch._C._cuda_customAllocator(alloc_fn, free_fn)


def change_current_allocator(allocator):
    torch._C._cuda_changeCurrentAllocator(allocator.allocator())


def _get_current_allocator():
    return _CUDAAllocator(torch._C._cuda_getAllocator())


class MemPool(torch._C._MemPool):
    def __init__(self, allocator=None, use_on_oom=False, no_split=False):
        super().__init__(allocator, True, use_on_oom, no_split)

    def snapshot(self, include_traces=True):
        return torch.cuda.memory_snapshot(self.id, include_traces=include_traces)


@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    index = torch.cuda.current_device() if device is None else _get_device_index(device)
    torch._C._cuda_beginAllocateCurrentThreadToPool(index, pool.id)
    try:
        yield
    finally:
        torch._C._cuda_endAllocateToPool(index, pool.id)
        torch._C._cuda_releasePool(index, pool.id)
