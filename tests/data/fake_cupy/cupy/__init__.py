"""A stand-in for CuPy (tests/intercept/test_run.sh): the names memsnap.cupy uses, and empty()
calling the allocator installed with cupy.cuda.set_allocator (memsnap's under `memsnap run`),
or, with none installed, CuPy's own pool, which this stand-in does not have (None)."""
import types

installed = []


def set_allocator(fn):
    installed.append(fn)


class Device:
    id = 0


class _Stream:
    ptr = 0


class OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        super().__init__("Out of memory allocating %d bytes (allocated so far: %d bytes)" % (size, total))


class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id=None):
        self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


def empty(nbytes):
    """An array's memory: from the installed allocator, else none (CuPy's own pool)."""
    return installed[-1](nbytes) if installed and installed[-1] else None


cuda = types.SimpleNamespace(set_allocator=set_allocator, Device=Device, get_current_stream=lambda: _Stream(),
                             UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
                             memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
