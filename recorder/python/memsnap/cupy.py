"""memsnap.cupy: CuPy allocates from memsnap's pool.

``memsnap.cupy.enable()`` installs memsnap as CuPy's device allocator
(``cupy.cuda.set_allocator``): every CuPy array's memory then comes from memsnap's caching
allocator, the same pool, statistics and snapshot as PyTorch's tensors under memsnap.enable().
Each block's stack shows ``cupy_allocation`` (this module) under the CuPy call that asked for it,
so a snapshot tells CuPy's blocks from PyTorch's. Memory goes back to memsnap's cache when CuPy
drops the array, on the stream it was allocated on.

Call it before the arrays it should serve are made (arrays made before keep CuPy's memory).
Returns the allocator function installed. Raises ImportError without CuPy.
"""
import memsnap

_installed = None


class _Owner:
    """Keeps one memsnap block; CuPy drops it when the memory is no longer used."""

    __slots__ = ("ptr", "size", "device", "stream")

    def __init__(self, ptr, size, device, stream):
        self.ptr, self.size, self.device, self.stream = ptr, size, device, stream

    def __del__(self):
        lib = memsnap._lib
        if lib is not None and self.ptr:
            lib.memsnap_free(self.ptr, self.size, self.device, self.stream)
            self.ptr = 0


def cupy_allocation(size):
    """CuPy's allocator under memsnap: a MemoryPointer to `size` bytes of memsnap's pool."""
    cupy, lib = _installed
    device = cupy.cuda.Device().id
    stream = cupy.cuda.get_current_stream().ptr
    ptr = lib.memsnap_malloc(size, device, stream) if size else 0
    if size and not ptr:
        message = memsnap.last_error()
        if "out of memory" in message:
            raise cupy.cuda.memory.OutOfMemoryError(size, memsnap.memory_stats(device).get(
                "reserved_bytes.all.current", 0))
        raise memsnap.MemsnapError(message)
    owner = _Owner(ptr, size, device, stream)
    return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, size, owner, device), 0)


def enable():
    global _installed
    try:
        import cupy
    except ImportError as e:
        raise ImportError("memsnap.cupy.enable() needs CuPy") from e
    if _installed is None:
        lib = memsnap.load()
        lib.memsnap_backend_name()  # reads the options now
        _installed = (cupy, lib)
        cupy.cuda.set_allocator(cupy_allocation)
    return cupy_allocation
