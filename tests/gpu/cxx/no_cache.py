"""no_cache.py: the cache turned off, as PyTorch's caching_allocator_enable(False) and
PYTORCH_NO_CUDA_MEMORY_CACHING=1 mean it (issue 34): each tensor a device allocation of its own,
freed at once, outside the statistics (PyTorch's test_cachingAllocator_raw_alloc: requested
bytes do not move), the values right. Prints one line "NOCACHE {json}".

usage: no_cache.py [native | memsnap]   (memsnap: memsnap.enable() first, in this process)
With PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the environment the whole run is uncached.
"""
import json
import os

from who import allocator_from_argv


def main():
    who, kind = allocator_from_argv()
    import torch
    mem = torch.cuda.memory
    out = {"who": who, "allocator": kind, "no_caching_env": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING")}
    a = torch.ones(1 << 20, device="cuda")
    out["allocated with the cache"] = mem.memory_allocated()
    mem.caching_allocator_enable(False)
    stream = torch.cuda.current_stream().cuda_stream
    req = mem.memory_stats().get("requested_bytes.all.allocated", 0)
    p = torch._C._cuda_cudaCachingAllocator_raw_alloc(1 << 20, stream)
    out["raw alloc moves requested bytes"] = mem.memory_stats().get("requested_bytes.all.allocated", 0) - req
    torch._C._cuda_cudaCachingAllocator_raw_delete(p)
    b = torch.full((3 << 20,), 2.0, device="cuda")
    c = b + a.sum()
    out["sum right"] = float(c[:10].sum()) == 10 * (2.0 + (1 << 20))
    out["allocated without the cache"] = mem.memory_allocated()
    del b, c
    mem.caching_allocator_enable(True)
    d = torch.ones(1 << 20, device="cuda")
    out["allocated after turning it on"] = mem.memory_allocated()
    del a, d
    print("NOCACHE " + json.dumps(out))


if __name__ == "__main__":
    main()
