"""memsnap.numba: Numba's CUDA arrays allocate from memsnap's pool (an EMM plugin).

Numba's External Memory Management interface lets another library serve all of its device
allocations. Two ways to use memsnap's:

    from numba import cuda
    import memsnap.numba
    cuda.set_memory_manager(memsnap.numba.MemsnapMemoryManager)   # before the first array

or, without editing the program, ``NUMBA_CUDA_MEMORY_MANAGER=memsnap.numba`` in the
environment (Numba reads ``_numba_memory_manager`` from the module named there).

Device arrays then come from memsnap's caching allocator, the pool, statistics and snapshot that
PyTorch's tensors and CuPy's arrays share under memsnap; each block's stack shows
``numba_allocation`` (this module) under the Numba call that asked for it. Host and pinned
memory stay Numba's. IPC handles are Numba's own (GetIpcHandleMixin).
"""
import ctypes

import memsnap
from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer


def _device_pointer(address):
    """What Numba's MemoryPointer takes: the NVIDIA binding's CUdeviceptr when Numba uses it,
    else a ctypes integer."""
    try:
        from numba.core import config
        if getattr(config, "CUDA_USE_NVIDIA_BINDING", False):
            from cuda.bindings import driver as binding  # numba-cuda with cuda-python
            return binding.CUdeviceptr(address)
    except ImportError:
        pass
    return ctypes.c_uint64(address)


class MemsnapMemoryManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    """Numba's EMM plugin serving device memory from memsnap."""

    def initialize(self):
        super().initialize()
        memsnap.load().memsnap_backend_name()

    def memalloc(self, size):
        return numba_allocation(self.context, size)

    def get_memory_info(self):
        """The driver's free and total memory of the context's device (cuMemGetInfo)."""
        from numba.cuda.cudadrv.driver import driver
        try:
            got = driver.cuMemGetInfo()  # the NVIDIA binding returns (free, total)
            free, total = int(got[0]), int(got[1])
        except TypeError:  # the ctypes binding fills two pointers
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            driver.cuMemGetInfo(ctypes.byref(free), ctypes.byref(total))
            free, total = free.value, total.value
        return MemoryInfo(free=free, total=total)

    def reset(self):
        super().reset()
        memsnap.empty_cache()

    @property
    def interface_version(self):
        return 1


def numba_allocation(context, size):
    lib = memsnap.load()
    device = context.device.id
    ptr = lib.memsnap_malloc(size, device, None) if size else 0
    if size and not ptr:
        raise memsnap.MemsnapError(memsnap.last_error())

    def finalizer(ptr=ptr, size=size, device=device):
        if ptr and memsnap._lib is not None:
            memsnap._lib.memsnap_free(ptr, size, device, None)
    return MemoryPointer(context, _device_pointer(ptr), size, finalizer=finalizer)


_numba_memory_manager = MemsnapMemoryManager
