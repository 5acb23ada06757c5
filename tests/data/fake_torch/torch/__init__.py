"""A stand-in for PyTorch, for the tests that need torch on a machine without it (tests/test_run.sh,
tests/recorder/test_torch_memory.py, which runs tests/gpu/parity/parity_memory_api.py against it).

It mirrors PyTorch 2.11's layering, written from its sources, for what memsnap touches:

* torch/cuda/memory.py: the public functions, each reaching the torch._C binding the real one
  calls, with the same arguments (so that memsnap.enable() replacing a binding is tested the way
  it works in PyTorch);
* torch/_C.py: those bindings, each calling the current allocator as PyTorch's C++ does
  (c10::cuda::CUDACachingAllocator::get()->...);
* here, the allocators, with the methods of c10's CUDAAllocator interface:
  - the pluggable allocator (torch/csrc/cuda/CUDAPluggableAllocator.cpp): malloc and free through
    the library's functions, called with the GIL held as PyTorch's ops call them, the hooks
    set_init_fn... and every other method refused with PyTorch's message ("CUDAPluggableAllocator
    does not yet support getDeviceStats. ...");
  - the "native" allocator: one device allocation per tensor (no cache), PyTorch's statistics
    (the 122 keys), snapshots in PyTorch's format (segments, device_traces with Python frames,
    allocator_settings, external_annotations), private pools (MemPool), and with
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync the answers of that backend (the pool's
    allocated and reserved bytes only; snapshot, recordHistory, pools, IPC and out-of-memory
    observers refused, as measured on the GPU). Out-of-memory observers are called as PyTorch
    calls them, and its trace has no "snapshot" entry (PyTorch 2.11's has none). Its memory is
    cudaMalloc and cudaFree of the libcudart named by FAKE_TORCH_CUDART (so that `memsnap run
    --mode intercept` sees them), called with the GIL released as PyTorch's ops do
    (FAKE_TORCH_HOLD_GIL=1: held), or made-up addresses when it is not set. The device has
    FAKE_TORCH_DEVICE_MEMORY bytes (default 16G, MEMSNAP_SIM_CAPACITY's default);
* tensors on the GPU: ``torch.empty(n, device="cuda", dtype=torch.uint8)`` (n bytes); a tensor's
  memory is freed when the tensor is collected.
* record_function (torch.autograd.profiler, torch.profiler) and torch.optim's Optimizer, whose
  step runs in a record_function "Optimizer.step#<class>.step" with the global step hooks
  (register_optimizer_step_pre_hook / _post_hook) around it, and AdamW, in files laid out as
  PyTorch's are (autograd/, optim/, profiler.py);
* autograd as far as memsnap's module record needs it (what torch/distributed/_tools/
  mod_tracker.py uses): tensors with requires_grad, grad_fn, .grad and register_hook; an op
  helper (torch._op) that the stand-in's torch.nn modules (Linear, Embedding, GELU, ModuleList,
  with the global forward hooks of torch.nn.modules.module) build their outputs with;
  torch.autograd.backward and grad calling torch.autograd.graph._engine_run_backward, the name
  torch.autograd imported it under, as PyTorch 2.x does; torch.autograd.graph's
  register_multi_grad_hook; the engine (torch._C._ImperativeEngine, Variable._execution_engine)
  runs on the calling thread, and torch._C._current_graph_task_id says which pass runs;
* torch.amp.GradScaler (and torch.cuda.amp's subclass), whose step skips the optimizer's step
  when its stand-in flag `found_inf` is set, as PyTorch's does when gradients hold inf or NaN.
"""
import ctypes
import gc
import itertools
import os
import sys
import threading
import time
import warnings
import weakref

__version__ = "2.11.0-fake"

uint8 = "uint8"


class OutOfMemoryError(RuntimeError):
    pass


def _check(cond, msg):  # TORCH_CHECK: a RuntimeError on the Python side
    if not cond:
        raise RuntimeError(msg)


def _parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip()
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1:].upper() in units else int(text)


def _alloc_conf():
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""


# ---- allocators: c10's CUDAAllocator interface ---------------------------------------------------

class _CUDAAllocator:
    """The interface's defaults: what an allocator does not implement is refused, naming it."""

    def name(self):
        raise NotImplementedError

    def _refuse(self, what):
        raise RuntimeError("%s does not yet support %s. If you need it, please file an issue describing your "
                           "use case." % (self.name(), what))

    def createOrIncrefPool(self, device, mempool_id, allocator=None):
        self._refuse("createOrIncrefPool")

    def getPoolUseCount(self, device, mempool_id):
        self._refuse("getPoolUseCount")

    def enable(self, value):
        """CUDAPluggableAllocator::enable does nothing; the native one's uncached mode is not
        modelled (the stand-in's native allocator does not cache)."""


class _PluggableAllocator(_CUDAAllocator):
    """torch._C._cuda_CUDAAllocator made by _cuda_customAllocator: CUDAPluggableAllocator.cpp."""

    def __init__(self, alloc_fn, free_fn):
        # PyTorch calls the functions from C++ within ops that hold the GIL
        self._malloc = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)(alloc_fn)
        self._free = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)(free_fn)
        self._metadata = {}  # allocation_metadata_: ptr -> (size, device, stream)
        self._lock = threading.RLock()  # re-entered where a collection inside it frees a tensor
        self._fns = {}
        self.initialized_ = False

    def name(self):
        return "pluggable"

    # the setters of torch._C._cuda_CUDAAllocator (function addresses); the pool hooks take C++
    # arguments (std::pair, std::function) that ctypes cannot pass: kept, not called here
    def set_init_fn(self, addr):
        self._fns["init"] = ctypes.PYFUNCTYPE(None, ctypes.c_int)(addr)

    def set_reset_fn(self, addr):
        self._fns["reset"] = ctypes.PYFUNCTYPE(None)(addr)

    def set_memory_fraction_fn(self, addr):
        self._fns["fraction"] = ctypes.PYFUNCTYPE(None, ctypes.c_double, ctypes.c_int)(addr)

    def set_record_stream_fn(self, addr):
        self._fns["record_stream"] = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addr)

    def set_base_alloc_fn(self, addr):
        self._fns["base_alloc"] = addr

    def set_begin_allocate_to_pool(self, addr):
        self._fns["begin_allocate_to_pool"] = addr

    def set_end_allocate_to_pool_fn(self, addr):
        self._fns["end_allocate_to_pool"] = addr

    def set_release_pool(self, addr):
        self._fns["release_pool"] = addr

    def allocator(self):
        return self

    def malloc(self, size, device=0, stream=None):
        ptr = self._malloc(size, device, stream)
        with self._lock:
            self._metadata[ptr] = (size, device, stream)
        if not ptr and size:  # PyTorch does not check: a null data pointer (memsnap throws first)
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % size)
        return ptr

    def raw_alloc_with_stream(self, size, stream):
        return self.malloc(size, _current_device, stream)

    def raw_delete(self, ptr):
        with self._lock:
            _check(ptr in self._metadata, "Trying to free a pointer not allocated here")
            size, device, stream = self._metadata.pop(ptr)
        self._free(ptr, size, device, stream)

    def free(self, ptr, size):
        self.raw_delete(ptr)

    def init(self, device_count):
        if "init" in self._fns:
            self._fns["init"](device_count)
        self.initialized_ = True

    def initialized(self):
        return self.initialized_

    def setMemoryFraction(self, fraction, device):
        if "fraction" in self._fns:
            self._fns["fraction"](fraction, device)

    def getMemoryFraction(self, device):
        raise RuntimeError("CUDAPluggableAllocator does not yet support getMemoryFraction. If you need it, please "
                           "file an issue describing your use case.")

    def emptyCache(self, mempool_id=(0, 0)):
        if "reset" in self._fns:
            self._fns["reset"]()

    def recordStream(self, ptr, stream):
        if "record_stream" in self._fns:
            self._fns["record_stream"](ptr, stream)

    def _plug_refuse(self, what):
        raise RuntimeError("CUDAPluggableAllocator does not yet support %s. If you need it, please file an issue "
                           "describing your use case." % what)

    def getDeviceStats(self, device):
        self._plug_refuse("getDeviceStats")

    def resetAccumulatedStats(self, device):
        self._plug_refuse("resetAccumulatedStats")

    def resetPeakStats(self, device):
        self._plug_refuse("resetPeakStats")

    def snapshot(self, mempool_id=(0, 0), include_traces=True):
        self._plug_refuse("snapshot")

    def shareIpcHandle(self, ptr):
        self._plug_refuse("shareIPcHandle")  # PyTorch's spelling

    def getIpcDevPtr(self, handle):
        self._plug_refuse("getIpcDevPtr")

    def recordHistory(self, *args):
        self._plug_refuse("recordHistory")

    def attachOutOfMemoryObserver(self, observer):
        self._plug_refuse("attachOutOfMemoryObserver")

    def getCheckpointState(self, device, mempool_id):
        self._plug_refuse("getCheckpointState")

    def setCheckpointPoolState(self, device, state):
        self._plug_refuse("setCheckpointPoolState")

    def checkPoolLiveAllocations(self, device, mempool_id, ptrs):
        raise RuntimeError("pluggable does not yet support checkPoolLiveAllocations. If you need it, please file an "
                           "issue describing your use case.")

    def beginAllocateToPool(self, device, mempool_id, thread):
        pass  # begin_allocate_to_pool_fn_ (C++ arguments: not callable from here)

    def endAllocateToPool(self, device, mempool_id):
        pass

    def releasePool(self, device, mempool_id):
        pass


def _stat():
    return {"current": 0, "peak": 0, "allocated": 0, "freed": 0}


_ARRAY_STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
                "inactive_split_bytes", "requested_bytes")


class _NativeAllocator(_CUDAAllocator):
    """PyTorch's own allocator, as far as these tests need it: one device allocation per tensor,
    its statistics, snapshots, history, pools; the cudaMallocAsync backend's answers."""

    def __init__(self):
        self.backend = "cudaMallocAsync" if "backend:cudaMallocAsync" in _alloc_conf().replace(" ", "") else "native"
        self.cudart = None
        path = os.environ.get("FAKE_TORCH_CUDART")
        if path:
            # FAKE_TORCH_HOLD_GIL=1: call it holding the GIL (as CuPy does), else releasing it
            # (as PyTorch's ops do)
            self.cudart = (ctypes.PyDLL if os.environ.get("FAKE_TORCH_HOLD_GIL") == "1" else ctypes.CDLL)(path)
            self.cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
            self.cudart.cudaFree.argtypes = [ctypes.c_void_p]
        self.total = _parse_size(os.environ.get("FAKE_TORCH_DEVICE_MEMORY", "16G"))
        self.next_address = 0x7F0000000000
        self.live = {}  # address -> (size, requested, frames, pool id)
        self.trace = None
        self.max_entries = 0
        self.context = True
        self.fraction = None
        self.pools = {}        # pool id -> use count
        self.routing = {}      # thread id -> pool id (use_mem_pool)
        self.oom_observers = []
        self.stats = {name: {k: _stat() for k in ("all", "small_pool", "large_pool")} for name in _ARRAY_STATS}
        self.stats.update(oversize_allocations=_stat(), oversize_segments=_stat(), num_alloc_retries=0, num_ooms=0,
                          max_split_size=-1, num_sync_all_streams=0, num_device_alloc=0, num_device_free=0)
        self.lock = threading.RLock()

    def name(self):
        return self.backend

    def init(self, device_count):
        pass

    def initialized(self):
        return _initialized

    def _frames(self):
        if not self.context:
            return []
        frames = []
        try:
            f = sys._getframe(3)  # the caller of torch.empty (or of the tensor's last reference)
        except ValueError:  # a tensor collected at exit, from a shallow stack
            f = sys._getframe(1)
        while f is not None:
            frames.append({"name": f.f_code.co_name, "filename": f.f_code.co_filename, "line": f.f_lineno})
            f = f.f_back
        return frames

    def _event(self, action, addr, size, frames):
        if self.trace is None:
            return
        self.trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                           "time_us": int(time.time() * 1e6), "compile_context": "N/A", "user_metadata": "",
                           "frames": frames})
        if len(self.trace) > self.max_entries:
            del self.trace[0]

    def _count(self, name, pool, delta):
        for key in ("all", pool):
            s = self.stats[name][key]
            s["current"] += delta
            s["allocated" if delta > 0 else "freed"] += abs(delta)
            s["peak"] = max(s["peak"], s["current"])

    def _account(self, size, requested, sign):
        pool = "small_pool" if size <= 1 << 20 else "large_pool"
        for name, amount in (("allocation", 1), ("segment", 1), ("active", 1), ("allocated_bytes", size),
                             ("reserved_bytes", size), ("active_bytes", size), ("requested_bytes", requested)):
            self._count(name, pool, sign * amount)
        self.stats["num_device_alloc" if sign > 0 else "num_device_free"] += 1

    def malloc(self, size, device=0, stream=None):
        requested = size
        size = max(512, (size + 511) // 512 * 512)
        with self.lock:
            used = self.stats["reserved_bytes"]["all"]["current"]
            limit = int(self.fraction * self.total) if self.fraction is not None else self.total
            full = used + size > limit
        if full:
            self._out_of_memory(size, limit, self.total - used)
        if self.cudart is not None:
            p = ctypes.c_void_p()
            rc = self.cudart.cudaMalloc(ctypes.byref(p), size)
            if rc == 2:
                self._out_of_memory(size, limit, self.total - used)
            if rc != 0:
                raise RuntimeError("cudaMalloc failed: error %d" % rc)
            ptr = p.value
        else:
            with self.lock:
                ptr = self.next_address
                self.next_address += size
        frames = self._frames() if self.trace is not None else []
        with self.lock:
            pool = self.routing.get(threading.get_ident(), (0, 0))
            self.live[ptr] = (size, requested, frames, pool)
            self._account(size, requested, 1)
            self._event("segment_alloc", ptr, size, frames)
            self._event("alloc", ptr, requested, frames)
        return ptr

    def _out_of_memory(self, size, limit, free):
        """As PyTorch's malloc when the device refuses: the observers called outside the lock with
        (device, size, the device's total or the fraction's limit, free bytes), then the error."""
        with self.lock:
            self.stats["num_ooms"] += 1
            observers = list(self.oom_observers)
        for observer in observers:
            observer(0, size, limit, max(free, 0))
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % size)

    def raw_alloc_with_stream(self, size, stream):
        return self.malloc(size, _current_device, stream)

    def free(self, ptr, size=None):
        with self.lock:
            size, requested, frames, pool = self.live.pop(ptr)
            now = self._frames() if self.trace is not None else []
            self._account(size, requested, -1)
            self._event("free_requested", ptr, requested, now)
            self._event("free_completed", ptr, requested, now)
            self._event("segment_free", ptr, size, now)
        if self.cudart is not None:
            self.cudart.cudaFree(ctypes.c_void_p(ptr))

    def raw_delete(self, ptr):
        self.free(ptr)

    def emptyCache(self, mempool_id=(0, 0)):
        pass  # nothing is cached

    def setMemoryFraction(self, fraction, device):
        self.fraction = None if fraction >= 1.0 else fraction

    def getMemoryFraction(self, device):
        return 1.0 if self.fraction is None else int(self.fraction * self.total) / self.total

    def recordStream(self, ptr, stream):
        pass

    def getDeviceStats(self, device):
        with self.lock:
            if self.backend != "cudaMallocAsync":
                return {k: ({p: dict(s) for p, s in v.items()} if k in _ARRAY_STATS else
                            dict(v) if isinstance(v, dict) else v) for k, v in self.stats.items()}
            # the driver's pool: its used and reserved bytes, current and peak; the rest zero
            out = {k: ({p: _stat() for p in v} if k in _ARRAY_STATS else _stat() if isinstance(v, dict) else 0)
                   for k, v in self.stats.items()}
            for name, source in (("allocated_bytes", "allocated_bytes"), ("active_bytes", "allocated_bytes"),
                                 ("reserved_bytes", "reserved_bytes")):
                s = self.stats[source]["all"]
                out[name]["all"].update(current=s["current"], peak=s["peak"])
            return out

    def resetPeakStats(self, device):
        with self.lock:
            for v in self.stats.values():
                for s in (v.values() if isinstance(v, dict) and "current" not in v else [v] if isinstance(v, dict) else []):
                    s["peak"] = s["current"]

    def resetAccumulatedStats(self, device):
        if self.backend == "cudaMallocAsync":
            warnings.warn("For backend:cudaMallocAsync, resetAccumulatedStats has no effect.")
            return
        with self.lock:
            for v in self.stats.values():
                for s in (v.values() if isinstance(v, dict) and "current" not in v else [v] if isinstance(v, dict) else []):
                    s["allocated"] = s["freed"] = 0
            for k in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free"):
                self.stats[k] = 0

    def recordHistory(self, enabled, context, max_entries, clear_history, skip_actions):
        if self.backend == "cudaMallocAsync":
            raise RuntimeError("cudaMallocAsync does not yet support recordHistory. If you need it, please file an "
                               "issue describing your use case.")
        with self.lock:
            if not enabled:
                self.trace = None
                return
            if self.trace is None or clear_history:
                self.trace = []
            self.max_entries = int(max_entries)
            self.context = context

    def snapshot(self, mempool_id=(0, 0), include_traces=True):
        if self.backend == "cudaMallocAsync":
            raise RuntimeError("Calling snapshot with backend:cudaMallocAsync is not meaningful. (For backend:native, "
                               "snapshot returns a detailed summary of all blocks tracked by the allocator, but the "
                               "cudaMallocAsync backend does not track individual blocks.)")
        with self.lock:
            segments = []
            for a, (s, req, fr, pool) in sorted(self.live.items()):
                if tuple(mempool_id) != (0, 0) and pool != tuple(mempool_id):
                    continue
                segments.append({"device": 0, "address": a, "total_size": s, "allocated_size": s, "active_size": s,
                                 "requested_size": req, "stream": 0, "segment_type": "small" if s <= 1 << 20 else "large",
                                 "segment_pool_id": pool, "is_expandable": False,
                                 "blocks": [{"address": a, "size": s, "requested_size": req,
                                             "state": "active_allocated", "frames": fr}], "frames": fr})
            traces = [list(self.trace or [])] if include_traces else [[]]
        settings = {"PYTORCH_CUDA_ALLOC_CONF": _alloc_conf(), "max_split_size": -1, "garbage_collection_threshold": 0.0,
                    "expandable_segments": False, "pinned_num_register_threads": 1,
                    "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
                    "graph_capture_record_stream_reuse": False,
                    "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
        return {"segments": segments, "device_traces": traces, "allocator_settings": settings,
                "external_annotations": []}

    def _async_refuse(self, what):
        """PyTorch's cudaMallocAsync backend (CUDAMallocAsyncAllocator.cpp) refuses these."""
        if self.backend == "cudaMallocAsync":
            raise RuntimeError("cudaMallocAsync does not yet support %s. If you need it, please file an issue "
                               "describing your use case." % what)

    def createOrIncrefPool(self, device, mempool_id, allocator=None):
        self._async_refuse("createOrIncrefPool")
        with self.lock:
            self.pools[mempool_id] = self.pools.get(mempool_id, 0) + 1

    def getPoolUseCount(self, device, mempool_id):
        return self.pools.get(mempool_id, 0)

    def beginAllocateToPool(self, device, mempool_id, thread):
        with self.lock:
            self.pools[mempool_id] = self.pools.get(mempool_id, 0) + 1
            self.routing[thread] = mempool_id

    def endAllocateToPool(self, device, mempool_id):
        with self.lock:
            self.routing = {t: p for t, p in self.routing.items() if p != mempool_id}

    def releasePool(self, device, mempool_id):
        with self.lock:
            self.pools[mempool_id] -= 1

    def shareIpcHandle(self, ptr):
        self._async_refuse("shareIpcHandle")
        return (0, b"fake-ipc-handle-%x" % ptr)

    def attachOutOfMemoryObserver(self, observer):
        self._async_refuse("attachOutOfMemoryObserver")
        with self.lock:
            self.oom_observers.append(observer)

    def checkPoolLiveAllocations(self, device, mempool_id, ptrs):
        self._async_refuse("checkPoolLiveAllocations")
        with self.lock:
            return {a for a, v in self.live.items() if v[3] == tuple(mempool_id)} == set(ptrs)


_native = None
_current = None
_initialized = False
_current_device = 0


def _native_allocator():
    global _native
    if _native is None:
        _native = _NativeAllocator()
    return _native


def _allocator():
    """The current allocator (c10::cuda::CUDACachingAllocator::get())."""
    global _current
    if _current is None:
        _current = _native_allocator()
    return _current


def _lazy_init():
    """CUDA's lazy initialisation: the allocator's init(device_count), once."""
    global _initialized
    if not _initialized:
        _initialized = True
        _allocator().init(1)


def _change_current_allocator(allocator):
    global _current
    _check(not _allocator().initialized(), "Can't swap an already initialized allocator")
    _current = allocator


# ---- tensors -----------------------------------------------------------------------------------

class _UntypedStorage:
    def __init__(self, tensor):
        self._tensor = tensor

    def data_ptr(self):
        return self._tensor.data_ptr()

    def _share_cuda_(self):
        """THPStorage_shareCuda: the allocator's IPC handle of the storage."""
        offset, handle = self._tensor._alloc.shareIpcHandle(self._tensor.data_ptr())
        return (0, handle, self._tensor.nbytes, offset, None, 0, None, False)


class device:
    def __init__(self, type, index=None):
        self.type = type
        self.index = index


class RemovableHandle:
    """torch.utils.hooks.RemovableHandle: removes its entry from the hooks' dict."""
    _ids = itertools.count()

    def __init__(self, hooks, extra=None):
        self.hooks = hooks
        self.id = next(RemovableHandle._ids)
        self.extra = extra  # another dict the key goes into (always_call)

    def remove(self):
        self.hooks.pop(self.id, None)
        if self.extra is not None:
            self.extra.pop(self.id, None)


class _Storage:
    """A tensor's memory (c10::StorageImpl): freed when the last tensor or saved variable holding it
    goes, as PyTorch's is. Python's collector runs __del__ on what it finds unreachable before
    freeing it, even when it saves it instead (gc.DEBUG_SAVEALL, as torch.utils.viz._cycles and
    MEMSNAP_GC_CYCLES set); PyTorch's tensors have no such finalizer and are freed only when the
    objects holding them are cleared. So a storage finalized by a saving collection is freed later,
    when the collection that clears it runs (a weak reference's callback)."""

    def __init__(self, nbytes):
        self.alloc = _allocator()
        self.nbytes = nbytes
        self.ptr = self.alloc.malloc(nbytes)

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", None), None
        if not ptr:
            return
        alloc, nbytes = self.alloc, self.nbytes
        if gc.get_debug() & gc.DEBUG_SAVEALL:  # saved, not freed: freed once the collector clears it
            def free(ref):
                _deferred.discard(ref)
                alloc.free(ptr, nbytes)
            _deferred.add(weakref.ref(self, free))
            return
        alloc.free(ptr, nbytes)


_deferred = set()  # the weak references to storages a saving collection found, until they are freed


class Tensor:
    """A CUDA tensor of `nbytes` uint8 elements. Autograd as PyTorch's (torch/csrc/autograd): a
    tensor made by an op from tensors that require grad requires grad and has a grad_fn (a node
    naming its inputs, holding what the op saved for backward); a leaf that requires grad gets its
    .grad from the engine (torch._C._ImperativeEngine); register_hook adds a hook called with the
    tensor's gradient once it is computed."""
    device = device("cuda", 0)
    dtype = uint8
    is_cuda = True
    grad = None
    _node = None  # the grad_fn's C++ node (_CppNode)
    _backward_hooks = None

    def __init__(self, nbytes, requires_grad=False, _storage=None):
        _lazy_init()
        self._storage = _storage if _storage is not None else _Storage(nbytes)
        self._alloc = self._storage.alloc
        self.nbytes = nbytes
        self._ptr = self._storage.ptr
        self.requires_grad = requires_grad

    @property
    def grad_fn(self):
        """The node's Python object, made when asked for and kept only while something holds it
        (functionToPyObject: PyTorch caches it on the node while it lives)."""
        return _node_object(self._node)

    def data_ptr(self):
        return self._ptr

    def untyped_storage(self):
        return _UntypedStorage(self)

    def numel(self):
        return self.nbytes

    def element_size(self):
        return 1

    def register_hook(self, hook):
        _check(self.requires_grad, "cannot register a hook on a tensor that doesn't require gradient")
        if self._backward_hooks is None:
            self._backward_hooks = {}
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        return handle

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)


class _CppNode:
    """An op's backward node as PyTorch's C++ holds it: its inputs that require grad (the engine's
    edges), what it saved for backward as storages (SavedVariable: no Python tensor), its name."""

    def __init__(self, name, inputs, saved):
        self.name = name
        self.inputs = inputs
        self.saved = saved
        self.pyobj = None  # a weak reference to its Python object while one lives


class _Node:
    """A node's Python object (THPCppFunction): name(), next_functions ((node, input_nr) pairs,
    AccumulateGrad for a leaf), and what it saved as `_saved_self` (the first) and `_saved_other`
    (the second), each a new tensor over the saved storage, as PyTorch unpacks a SavedVariable."""

    def __init__(self, cdata):
        self._cdata = cdata

    def name(self):
        return self._cdata.name

    @property
    def next_functions(self):
        return tuple((_node_object(t._node) if t._node is not None else
                      _AccumulateGrad(t) if t.requires_grad else None, 0) for t in self._cdata.inputs)

    def _saved(self, i):
        saved = self._cdata.saved
        _check(saved is not None, "Trying to backward through the graph a second time (or directly access saved "
                                  "tensors after they have already been freed).")
        return Tensor(saved[i].nbytes, _storage=saved[i]) if i < len(saved) else None

    _saved_self = property(lambda self: self._saved(0))
    _saved_other = property(lambda self: self._saved(1))

    # what the stand-in's engine (torch/_C.py) reads and drops
    inputs = property(lambda self: self._cdata.inputs)

    @property
    def saved(self):
        return self._cdata.saved

    @saved.setter
    def saved(self, value):
        self._cdata.saved = value


class _AccumulateGrad:
    """A leaf's node: its `variable`."""

    def __init__(self, variable):
        self.variable = variable
        self.next_functions = ()

    def name(self):
        return "torch::autograd::AccumulateGrad"


def _node_object(cdata):
    if cdata is None:
        return None
    obj = cdata.pyobj() if cdata.pyobj is not None else None
    if obj is None:
        obj = _Node(cdata)
        cdata.pyobj = weakref.ref(obj)
    return obj


def empty(nbytes, device="cuda", dtype=None, requires_grad=False):
    if not str(device).startswith("cuda"):
        raise ValueError("the stand-in makes GPU tensors only")
    return Tensor(int(nbytes), requires_grad)


def _op(name, nbytes, inputs, saved_bytes=0):
    """An op's result of `nbytes` from the tensors `inputs`: with a grad_fn (`name`, saving
    `saved_bytes` for backward) when one of them requires grad, as the stand-in's nn modules use
    it."""
    result = Tensor(int(nbytes))
    needs = tuple(t for t in inputs if t is not None and t.requires_grad)
    if needs:
        result.requires_grad = True
        result._node = _CppNode(name, needs, (Tensor(int(saved_bytes))._storage,) if saved_bytes else ())
    return result


from . import _C, cuda  # noqa: E402  (they call back into the allocators above)

__all__ = ["Tensor", "empty", "OutOfMemoryError", "cuda", "uint8"]

# torch.autograd (its engine's Python entry, graph hooks and profiler's record_function),
# torch.profiler, torch.optim (global step hooks), torch.nn (global module hooks) and torch.amp
# (GradScaler), as modules of their own with PyTorch's file layout: memsnap's analysis reads
# their files in the stacks.
from . import amp, autograd, nn, optim, profiler  # noqa: E402,F401
from .cuda import amp as _cuda_amp  # noqa: E402,F401  (torch.cuda.amp.GradScaler, after torch.amp)
