"""A stand-in for PyTorch, for the `memsnap run` tests (tests/test_run.sh) on a machine without it.

It has just what an unchanged training script and memsnap's three modes touch:

* tensors on the GPU: ``torch.empty(nbytes, device="cuda")``; a tensor's memory is freed when the
  tensor is collected. They come from the current allocator:
  - a pluggable allocator (``torch.cuda.memory.CUDAPluggableAllocator`` and
    ``change_current_allocator``, what memsnap.enable() installs): its malloc and free functions,
    called through ctypes as PyTorch calls them;
  - otherwise the "native" allocator: cudaMalloc and cudaFree of the libcudart named by
    FAKE_TORCH_CUDART (so that `memsnap run --mode intercept` sees them), called with the GIL
    released as PyTorch's ops do (FAKE_TORCH_HOLD_GIL=1: held), or made-up addresses when it is
    not set;
* PyTorch's recorder for the native allocator: ``torch.cuda.memory._record_memory_history`` and
  ``_dump_snapshot``, which pickles a snapshot in PyTorch's format (segments, device_traces with
  Python frames), what `memsnap import` reads;
* the bindings memsnap.enable() replaces or calls (torch._C, torch.cuda.is_initialized...);
* record_function (torch.autograd.profiler, torch.profiler) and torch.optim's Optimizer, whose
  step runs in a record_function "Optimizer.step#<class>.step", and AdamW, in files laid out as
  PyTorch's are (autograd/, optim/, profiler.py).
"""
import ctypes
import os
import pickle
import sys
import time
import types

__version__ = "0.0-fake"


class OutOfMemoryError(RuntimeError):
    pass


# ---- allocators ------------------------------------------------------------------------------

class _Hooks:
    def __getattr__(self, name):
        if name.startswith("set_"):
            return lambda fn: None
        raise AttributeError(name)


class CUDAPluggableAllocator:
    def __init__(self, path, alloc_fn_name, free_fn_name):
        lib = ctypes.PyDLL(path)  # PyTorch calls it with the GIL held
        self._malloc = getattr(lib, alloc_fn_name)
        self._malloc.restype = ctypes.c_void_p
        self._malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self._free = getattr(lib, free_fn_name)
        self._free.restype = None
        self._free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self._hooks = _Hooks()

    def allocator(self):
        return self._hooks

    def malloc(self, size):
        ptr = self._malloc(size, 0, None)
        if not ptr:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % size)
        return ptr

    def free(self, ptr, size):
        self._free(ptr, size, 0, None)


class _NativeAllocator:
    """One device allocation per tensor; PyTorch's recorder's events when recording."""

    def __init__(self):
        self.cudart = None
        path = os.environ.get("FAKE_TORCH_CUDART")
        if path:
            # FAKE_TORCH_HOLD_GIL=1: call it holding the GIL (as CuPy does), else releasing it
            # (as PyTorch's ops do)
            self.cudart = (ctypes.PyDLL if os.environ.get("FAKE_TORCH_HOLD_GIL") == "1" else ctypes.CDLL)(path)
            self.cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
            self.cudart.cudaFree.argtypes = [ctypes.c_void_p]
        self.next_address = 0x7F0000000000
        self.live = {}  # address -> (size, frames)
        self.trace = None
        self.max_entries = 0

    def _frames(self):
        frames = []
        f = sys._getframe(3)
        while f is not None:
            frames.append({"name": f.f_code.co_name, "filename": f.f_code.co_filename, "line": f.f_lineno})
            f = f.f_back
        return frames

    def _event(self, action, addr, size, frames):
        if self.trace is None:
            return
        self.trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                           "time_us": int(time.monotonic() * 1e6), "frames": frames})
        if len(self.trace) > self.max_entries:
            del self.trace[0]

    def malloc(self, size):
        size = (size + 511) // 512 * 512
        if self.cudart is not None:
            p = ctypes.c_void_p()
            rc = self.cudart.cudaMalloc(ctypes.byref(p), size)
            if rc == 2:
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % size)
            if rc != 0:
                raise RuntimeError("cudaMalloc failed: error %d" % rc)
            ptr = p.value
        else:
            ptr = self.next_address
            self.next_address += size
        frames = self._frames() if self.trace is not None else []
        self.live[ptr] = (size, frames)
        self._event("segment_alloc", ptr, size, frames)
        self._event("alloc", ptr, size, frames)
        return ptr

    def free(self, ptr, size):
        size, frames = self.live.pop(ptr)
        now = self._frames() if self.trace is not None else []
        for action in ("free_requested", "free_completed", "segment_free"):
            self._event(action, ptr, size, now)
        if self.cudart is not None:
            self.cudart.cudaFree(ctypes.c_void_p(ptr))

    def snapshot(self):
        segments = [{"device": 0, "address": a, "total_size": s, "stream": 0, "segment_type": "large",
                     "blocks": [{"address": a, "size": s, "requested_size": s, "state": "active_allocated",
                                 "frames": fr}]} for a, (s, fr) in sorted(self.live.items())]
        return {"segments": segments, "device_traces": [list(self.trace or [])], "allocator_settings": {}}


_native = None
_current = None
_initialized = False


def _allocator():
    global _current, _native, _initialized
    if _current is None:
        if _native is None:
            _native = _NativeAllocator()
        _current = _native
    _initialized = True
    return _current


def _change_current_allocator(allocator):
    global _current
    if _initialized:
        raise RuntimeError("Can't swap an already initialized allocator")
    _current = allocator


# ---- tensors -----------------------------------------------------------------------------------

class Tensor:
    def __init__(self, nbytes):
        self._alloc = _allocator()
        self.nbytes = nbytes
        self._ptr = self._alloc.malloc(nbytes)

    def data_ptr(self):
        return self._ptr

    def __del__(self):
        if getattr(self, "_ptr", None):
            self._alloc.free(self._ptr, self.nbytes)
            self._ptr = None


def empty(nbytes, device="cuda", dtype=None):
    if not str(device).startswith("cuda"):
        raise ValueError("the stand-in makes GPU tensors only")
    return Tensor(int(nbytes))


# ---- torch.cuda and torch._C -------------------------------------------------------------------

def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=100000, **kwargs):
    native = _native_allocator()
    native.trace = [] if enabled else None
    native.max_entries = int(max_entries)


def _native_allocator():
    global _native
    if _native is None:
        _native = _NativeAllocator()
    return _native


def _dump_snapshot(filename="dump_snapshot.pickle"):
    with open(filename, "wb") as f:
        pickle.dump(_native_allocator().snapshot(), f, protocol=4)


class _Utils:
    @staticmethod
    def _get_device_index(d):
        return 0 if d is None else int(str(d).rsplit(":", 1)[-1]) if ":" in str(d) else int(d)


_C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=lambda fn: None)
memory = types.SimpleNamespace(CUDAPluggableAllocator=CUDAPluggableAllocator,
                               change_current_allocator=_change_current_allocator,
                               _record_memory_history=_record_memory_history, _dump_snapshot=_dump_snapshot)
cuda = types.SimpleNamespace(is_initialized=lambda: _initialized, memory=memory, current_device=lambda: 0,
                             OutOfMemoryError=OutOfMemoryError, _utils=_Utils, is_available=lambda: True,
                             synchronize=lambda: None)

# torch.autograd.profiler (record_function), torch.profiler and torch.optim, as modules of their
# own with PyTorch's file layout: memsnap's analysis reads their files in the stacks.
from . import autograd, optim, profiler  # noqa: E402,F401
