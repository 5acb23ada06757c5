"""memsnap: Python bindings (ctypes) for libmemsnap.

Two uses:

* With PyTorch: ``memsnap.enable()`` before the first CUDA call makes memsnap PyTorch's CUDA
  allocator. By default through memsnap's C++ allocator (torch_cxx.py builds
  recorder/pytorch/allocator.cpp for the installed PyTorch at first use, and caches it), which
  PyTorch reaches as its own from everywhere: statistics, snapshots and its recorder, MemPool,
  CUDA graphs and torch.compile's graph trees, CUDA IPC, the cache turned off. Where it cannot
  be built, through PyTorch's pluggable interface (``CUDAPluggableAllocator``), whose hooks
  reach ``torch.cuda.empty_cache()``, ``set_per_process_memory_fraction()``,
  ``Tensor.record_stream()`` and CUDA graph capture, with memsnap's answers (torch_memory.py)
  for ``torch.cuda.memory_stats()`` and the rest, ``torch.cuda.MemPool`` and ``use_mem_pool``,
  and an out-of-memory raised as ``torch.OutOfMemoryError`` instead of a tensor with a null
  data pointer.
* Without PyTorch: allocate, free and read statistics directly (``malloc``, ``free``,
  ``memory_stats``...), for example on the simulated device (``MEMSNAP_BACKEND=sim``).

The library is found through ``MEMSNAP_LIB``, else ``libmemsnap.so`` beside this file (where
``pip install .`` puts it), else ``build/libmemsnap.so`` of the source tree this package sits
in, else the installed ``libmemsnap.so.0`` on the loader's path (``make install``).
"""

import builtins
import collections
import contextlib
import ctypes
import itertools
import os

from . import holders

_builtin_range = builtins.range  # the module defines memsnap.range (a context manager)

__all__ = [
    "enable", "library_path", "load", "malloc", "free", "empty_cache", "set_memory_fraction",
    "record_stream", "memory_stats", "memory_stats_as_nested_dict", "reset_peak_stats",
    "reset_accumulated_stats", "check", "backend", "device_count", "last_error", "options",
    "set_option", "sim_synchronize", "shutdown", "MemsnapError", "record", "stop_recording", "dump",
    "mark", "range", "range_push", "range_pop", "add_oom_observer", "MemPool", "use_mem_pool", "get_option", "get_memory_fraction",
    "clear_recording", "sim_peer_access", "stack_counters", "allocator_kind", "set_caching", "caching", "show",
]

__version__ = "0.1.0"  # memsnap.h's MEMSNAP_VERSION (tests/test_install.sh checks they agree)

_lib = None
_enabled = None
_oom_type = None


class MemsnapError(RuntimeError):
    """A libmemsnap call failed; the message is the library's."""


def library_path():
    """Returns the path of libmemsnap.so that load() would use: ``MEMSNAP_LIB``; else the
    library beside this file (``pip install .`` puts it there); else ``build/libmemsnap.so`` of
    the source tree this package sits in; else the installed library on the loader's path
    (``make install``: ``libmemsnap.so.0``)."""
    env = os.environ.get("MEMSNAP_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        os.path.join(here, "libmemsnap.so"),  # installed beside the package (pip)
        os.path.join(here, "..", "..", "..", "build", "libmemsnap.so"),  # source tree
    ]
    for path in candidates:
        if os.path.exists(path):
            return os.path.normpath(path)
    return "libmemsnap.so." + __version__.split(".")[0]


def _declare(lib):
    c = ctypes
    sigs = {
        "memsnap_malloc": (c.c_void_p, [c.c_ssize_t, c.c_int, c.c_void_p]),
        "memsnap_free": (None, [c.c_void_p, c.c_ssize_t, c.c_int, c.c_void_p]),
        "memsnap_init": (None, [c.c_int]),
        "memsnap_empty_cache": (None, []),
        "memsnap_set_memory_fraction": (None, [c.c_double, c.c_int]),
        "memsnap_record_stream": (None, [c.c_void_p, c.c_void_p]),
        "memsnap_release": (c.c_int, [c.c_void_p]),
        "memsnap_last_error": (c.c_char_p, []),
        "memsnap_backend_name": (c.c_char_p, []),
        "memsnap_read_options": (None, []),
        "memsnap_device_count": (c.c_int, []),
        "memsnap_check": (c.c_int, [c.c_int]),
        "memsnap_shutdown": (None, []),
        "memsnap_stat_count": (c.c_int, []),
        "memsnap_stat_key": (c.c_char_p, [c.c_int]),
        "memsnap_get_stats_flat": (c.c_int, [c.c_int, c.POINTER(c.c_int64), c.c_int]),
        "memsnap_reset_peak_stats": (c.c_int, [c.c_int]),
        "memsnap_reset_accumulated_stats": (c.c_int, [c.c_int]),
        "memsnap_option_info": (c.c_char_p, [c.c_int, c.POINTER(c.c_char_p), c.POINTER(c.c_char_p)]),
        "memsnap_set_option": (c.c_int, [c.c_char_p, c.c_char_p]),
        "memsnap_sim_synchronize": (c.c_int, [c.c_void_p]),
        "memsnap_set_python_oom_error": (None, [c.c_void_p]),
        "memsnap_record_start": (c.c_int, [c.c_size_t, c.c_char_p]),
        "memsnap_record_stop": (c.c_int, []),
        "memsnap_dump": (c.c_int, [c.c_char_p]),
        "memsnap_mark": (c.c_int, [c.c_char_p]),
        "memsnap_range_push": (c.c_int, [c.c_char_p]),
        "memsnap_range_pop": (c.c_int, []),
        "memsnap_dump_exit": (c.c_int, []),
        "memsnap_create_pool": (c.c_int, [c.c_int, c.c_uint64, c.c_uint64]),
        "memsnap_release_pool": (c.c_int, [c.c_int, c.c_uint64, c.c_uint64]),
        "memsnap_empty_pool_cache": (c.c_int, [c.c_int, c.c_uint64, c.c_uint64]),
        "memsnap_begin_allocate_thread_to_pool": (c.c_int, [c.c_int, c.c_uint64, c.c_uint64]),
        "memsnap_end_allocate_to_pool": (c.c_int, [c.c_int, c.c_uint64, c.c_uint64]),
        "memsnap_pool_live_allocations_match": (c.c_int, [c.c_int, c.c_uint64, c.c_uint64, c.POINTER(c.c_uint64),
                                                          c.c_size_t]),
        "memsnap_pool_use_count": (c.c_int, [c.c_int, c.c_uint64, c.c_uint64]),
        "memsnap_pool_set_flags": (c.c_int, [c.c_int, c.c_uint64, c.c_uint64, c.c_int, c.c_int]),
        "memsnap_get_option": (c.c_int, [c.c_char_p, c.c_char_p, c.c_size_t]),
        "memsnap_get_memory_fraction": (c.c_double, [c.c_int]),
        "memsnap_record_clear": (c.c_int, []),
        "memsnap_sim_peer_access": (c.c_int, [c.c_int, c.c_void_p]),
        "memsnap_add_oom_observer": (c.c_int, [OOM_OBSERVER, c.c_void_p]),
        "memsnap_stack_counters": (c.c_int, [c.POINTER(c.c_char_p), c.POINTER(c.c_uint64), c.c_int]),
        "memsnap_set_allocator_settings": (c.c_int, [c.c_char_p]),
        "memsnap_set_caching": (None, [c.c_int]),
        "memsnap_caching": (c.c_int, []),
        # the model's events (torch_model.py)
        "memsnap_label": (c.c_int, [c.c_char_p]),
        "memsnap_module_event": (c.c_int, [c.c_int, c.c_int]),
        "memsnap_tensor_events": (c.c_int, [c.c_size_t, c.POINTER(c.c_uint64), c.POINTER(c.c_uint64),
                                            c.POINTER(c.c_uint8), c.POINTER(c.c_int32), c.POINTER(c.c_int16)]),
        "memsnap_step_event": (c.c_int, [c.c_int, c.c_int]),
        "memsnap_backward_begin": (c.c_int, []),
        "memsnap_backward_end": (c.c_int, []),
        # the Python layer's own record (holders.py)
        "memsnap_set_dump_hook": (c.c_int, [holders.DUMP_HOOK, c.c_void_p]),
        "memsnap_gc_event": (c.c_int, [c.c_int, c.c_int, c.c_int64, c.c_int64]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:  # an older library (a benchmark's base build): what it has still works
            continue
        fn.restype = restype
        fn.argtypes = argtypes


def load(path=None):
    """Loads libmemsnap (once) and returns the ctypes handle.

    The handle is a ctypes.PyDLL: calls keep the GIL, as PyTorch's ops do when they allocate, so
    the recorder sees the calling Python frames (it reads them only on a thread that holds the
    GIL; a plain ctypes.CDLL would release it)."""
    global _lib
    if _lib is None:
        lib = ctypes.PyDLL(path or library_path())
        _declare(lib)
        _lib = lib
        # MEMSNAP_DUMP at Python's exit, while Python frames can still be named (the library's
        # own exit handler runs after the interpreter is gone); the holders of each snapshot
        # written, and the garbage collector's runs recorded (holders.py)
        holders.install(lib)
    return _lib


def last_error():
    """The library's last error message on this thread ("" if none)."""
    return load().memsnap_last_error().decode("utf-8", "replace")


# memsnap_oom_observer_t: (device, size, total, free_bytes, arg)
OOM_OBSERVER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p)
_oom_observers = []  # the C callbacks attached: kept alive as long as the library may call them


def add_oom_observer(observer):
    """Calls ``observer(device, size, total, free)`` after each out-of-memory error of memsnap's
    allocator, on the thread that asked, before the error reaches the caller (PyTorch's
    ``torch._C._cuda_attach_out_of_memory_observer``, which ``memsnap.enable()`` answers with
    this): the device, the size memsnap asked the device for, the device's total bytes (the
    allowed maximum under a memory fraction) and its free bytes. The observer may call memsnap
    or torch (``torch.cuda.memory._dump_snapshot`` is the usual use); an exception it raises is
    printed and ignored, as ctypes does for a callback. Raises MemsnapError when 64 observers are
    attached already."""
    if not callable(observer):
        raise TypeError("memsnap.add_oom_observer: %r is not callable" % (observer,))

    def call(device, size, total, free, _arg):
        observer(device, size, total, free)

    fn = OOM_OBSERVER(call)
    _check(load().memsnap_add_oom_observer(fn, None))
    _oom_observers.append(fn)


def _check(rc):
    if rc < 0:
        raise MemsnapError(last_error())
    return rc


def backend():
    """Name of the active backend ("cuda" or "sim"); raises MemsnapError if it cannot start."""
    name = load().memsnap_backend_name()
    if name is None:
        raise MemsnapError(last_error())
    return name.decode()


def device_count():
    return _check(load().memsnap_device_count())


def malloc(size, device=0, stream=0):
    """Allocates `size` bytes; returns the address (an int), 0 for size 0. Raises MemoryError
    on out of memory (with the library's message) and MemsnapError on other failures."""
    ptr = load().memsnap_malloc(size, device, stream)
    if ptr:
        return ptr
    if size == 0:
        return 0
    msg = last_error()
    raise (MemoryError if "out of memory" in msg else MemsnapError)(msg)


def free(ptr):
    """Frees an address returned by malloc(); raises MemsnapError for a foreign address."""
    if ptr:
        _check(load().memsnap_release(ptr))


def empty_cache():
    load().memsnap_empty_cache()


def set_memory_fraction(fraction, device=0):
    load().memsnap_set_memory_fraction(float(fraction), device)


def record_stream(ptr, stream):
    load().memsnap_record_stream(ptr, stream)


def sim_synchronize(stream):
    """Completes the queued work of `stream` on the simulated device."""
    _check(load().memsnap_sim_synchronize(stream))


def check(device=0):
    """Verifies the allocator's invariants; raises MemsnapError naming the first broken one."""
    _check(load().memsnap_check(device))


def shutdown():
    load().memsnap_shutdown()


def options():
    """The options table: a list of (environment variable, default, description)."""
    lib = load()
    out = []
    i = 0
    while True:
        default, comment = ctypes.c_char_p(), ctypes.c_char_p()
        var = lib.memsnap_option_info(i, ctypes.byref(default), ctypes.byref(comment))
        if var is None:
            return out
        out.append((var.decode(), default.value.decode(), comment.value.decode()))
        i += 1


def get_option(name):
    """The effective value of an option ("allocator" or "MEMSNAP_ALLOCATOR"), as `memsnap options`
    spells it ("async", "1", "unlimited"...); raises MemsnapError for an unknown name."""
    buf = ctypes.create_string_buffer(1100)
    _check(load().memsnap_get_option(str(name).encode(), buf, len(buf)))
    return buf.value.decode()


def set_caching(enabled):
    """Turns the cache on or off (PyTorch's caching_allocator_enable): off, each request is a device
    allocation of its own, freed at once, recorded but left out of the statistics."""
    load().memsnap_set_caching(1 if enabled else 0)


def caching():
    """Whether the cache is on."""
    return bool(load().memsnap_caching())


def get_memory_fraction(device=0):
    """The memory fraction of `device` as torch.cuda.get_per_process_memory_fraction() gives it
    (1.0 when none is set)."""
    value = load().memsnap_get_memory_fraction(int(device))
    if value < 0:
        raise MemsnapError(last_error())
    return value


def sim_peer_access(device, ptr):
    """Whether `device` may access the simulated memory at `ptr` (MEMSNAP_BACKEND=sim)."""
    return _check(load().memsnap_sim_peer_access(int(device), ptr)) == 1


def set_option(name, value):
    """Changes a run-time option (MEMSNAP_OOM, MEMSNAP_STACKS, MEMSNAP_CONTEXT, ...)."""
    _check(load().memsnap_set_option(str(name).encode(), str(value).encode()))


def _flat_stats(device):
    lib = load()
    n = lib.memsnap_stat_count()
    values = (ctypes.c_int64 * n)()
    _check(lib.memsnap_get_stats_flat(int(device), values, n))
    return [(lib.memsnap_stat_key(i).decode(), values[i]) for i in _builtin_range(n)]


def memory_stats_as_nested_dict(device=0):
    """Statistics of `device` as torch.cuda.memory_stats_as_nested_dict() returns them."""
    nested = {}
    for key, value in _flat_stats(device):
        parts = key.split(".")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def memory_stats(device=0):
    """Statistics of `device` as torch.cuda.memory_stats() returns them: a sorted OrderedDict
    with dotted keys ("allocated_bytes.all.current", "num_ooms", ...)."""
    return collections.OrderedDict(sorted(_flat_stats(device)))


def reset_peak_stats(device=0):
    _check(load().memsnap_reset_peak_stats(int(device)))


def reset_accumulated_stats(device=0):
    _check(load().memsnap_reset_accumulated_stats(int(device)))


class _Recording:
    """Returned by record(): recording is on; as a context manager, stops at the end."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop_recording()
        return False


def record(max_entries=0, stacks=None, context=None):
    """Starts recording allocator events with stacks ("none", "native", "python", "all"; None:
    MEMSNAP_STACKS) into a ring of `max_entries` events (0: MEMSNAP_MAX_ENTRIES). `context`, as
    PyTorch's _record_memory_history(context=...), says whose stacks: "all" (allocations' and
    frees'), "alloc" (allocations' only: frees are recorded without one); None: as it is
    (MEMSNAP_CONTEXT, or what an earlier call set). An invalid value raises MemsnapError.
    Use it plainly or as `with memsnap.record(): ...` to stop recording at the end of the block."""
    global _recording_started
    if context is not None:
        set_option("context", context)
    _check(load().memsnap_record_start(int(max_entries), stacks.encode() if stacks else None))
    _recording_started = True
    if _torch_model_pending is not None:  # memsnap.enable() ran before recording started
        _record_torch_model(*_torch_model_pending)
    return _Recording()


def stop_recording():
    """Stops recording; what was recorded stays for dump()."""
    load().memsnap_record_stop()


def clear_recording():
    """Forgets the events recorded so far; recording goes on if it was on."""
    load().memsnap_record_clear()


def stack_counters():
    """What the stack captures did so far in this process, as a dict of counters (docs/allocator.md,
    "Stack counters"): captures, how many found their frames in the thread's caches and how many
    took a lock or the GIL, and python_reader (2: the frame records are read)."""
    lib = load()
    if not hasattr(lib, "memsnap_stack_counters"):
        raise MemsnapError("memsnap: this libmemsnap has no stack counters (built before they were added)")
    keys, values = (ctypes.c_char_p * 32)(), (ctypes.c_uint64 * 32)()
    n = lib.memsnap_stack_counters(keys, values, 32)
    out = {keys[i].decode(): values[i] for i in builtins.range(n)}
    if "python_reader" in out:  # a signed state, passed as an unsigned word
        out["python_reader"] = ctypes.c_int64(out["python_reader"]).value
    return out


def show(path, height=900, display=True):
    """Shows snapshot `path`'s report page inline in a Jupyter or VS Code notebook, offline
    (memsnap/notebook.py: the page of ``memsnap analyze --html`` in an iframe; a PyTorch snapshot
    pickle is imported first)."""
    from . import notebook
    return notebook.show(path, height, display)


def dump(path):
    """Writes a snapshot to `path` (SQLite, docs/snapshot-format.md) atomically; %p, %r, %h and
    %t in the path expand to the pid, rank, host and time. Raises MemsnapError on failure."""
    _check(load().memsnap_dump(os.fsencode(path)))
    return path


def mark(label):
    """Records an instant mark; each mark starts an iteration until the next with this label."""
    _check(load().memsnap_mark(str(label).encode("utf-8", "surrogateescape")))


def range_push(label):
    _check(load().memsnap_range_push(str(label).encode("utf-8", "surrogateescape")))


def range_pop():
    _check(load().memsnap_range_pop())


class range:  # noqa: A001 - memsnap.range, like NVTX's ranges
    """`with memsnap.range("forward"): ...` records a nested range on this thread; also usable as
    a decorator."""

    def __init__(self, label):
        self.label = label

    def __enter__(self):
        range_push(self.label)
        return self

    def __exit__(self, *exc):
        range_pop()
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with range(self.label):
                return fn(*args, **kwargs)
        return wrapper


def _fn_addr(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


# ---- private pools: torch.cuda.MemPool and use_mem_pool -----------------------------------------

def pool_live_allocations_match(device, pool_id, pointers):
    """Whether the allocated blocks of private pool `pool_id` (two ints) are exactly `pointers`
    (addresses): PyTorch's checkPoolLiveAllocations. Raises MemsnapError for an unknown pool."""
    from . import torch_memory
    if torch_memory.is_async():  # as PyTorch's cudaMallocAsync backend answers it
        raise RuntimeError(torch_memory.async_refusal("checkPoolLiveAllocations"))
    ptrs = sorted(set(int(p) for p in pointers))
    array = (ctypes.c_uint64 * max(1, len(ptrs)))(*ptrs)
    rc = load().memsnap_pool_live_allocations_match(int(device), int(pool_id[0]), int(pool_id[1]), array, len(ptrs))
    return _check(rc) == 1


class MemPool:
    """A private pool of memsnap's allocator, in the place of ``torch.cuda.MemPool``.

    PyTorch's own MemPool cannot be built under a pluggable allocator (its constructor calls the
    allocator's createOrIncrefPool, which ``CUDAPluggableAllocator`` refuses), so
    ``memsnap.enable()`` puts this class in its place. Allocations made inside
    ``use_mem_pool(pool)`` by the calling thread come from the pool's own blocks, which nothing
    else gets; when the pool is deleted its cached memory goes back to the device, and what its
    live tensors hold follows at ``torch.cuda.empty_cache()`` once they are freed. ``allocator=`` (a pool served by a
    second allocator) and ``symmetric`` have no memsnap equivalent here and raise (memsnap's C++
    allocator serves ``allocator=``: there PyTorch's own MemPool is used)."""

    _ids = itertools.count(1)

    def __init__(self, allocator=None, use_on_oom=False, symmetric=False, no_split=False):
        if allocator is not None:
            raise NotImplementedError("memsnap: MemPool(allocator=...) would route allocations to a second "
                                      "allocator, which PyTorch's pluggable allocator interface cannot carry; "
                                      "use MemPool() (memsnap serves the pool itself)")
        if symmetric:
            raise NotImplementedError("memsnap: MemPool's symmetric option is not supported under memsnap's allocator")
        from . import torch_memory
        if torch_memory.is_async():  # as PyTorch's cudaMallocAsync backend answers createOrIncrefPool
            raise RuntimeError(torch_memory.async_refusal("createOrIncrefPool"))
        import torch
        self._device = torch.cuda.current_device()
        # (0, n) is PyTorch's form for user pools; memsnap's start far above PyTorch's counter.
        self._id = (0, (1 << 48) + next(MemPool._ids))
        _check(load().memsnap_create_pool(self._device, *self._id))
        self._live = True
        if use_on_oom or no_split:  # lend its blocks when the device is out of memory; never split them
            _check(load().memsnap_pool_set_flags(self._device, *self._id, 1 if use_on_oom else -1,
                                                 1 if no_split else -1))

    @property
    def id(self):
        """The pool's id, a tuple of two ints."""
        return self._id

    @property
    def allocator(self):
        return None

    def use_count(self):
        """The pool's use count, as PyTorch's: this object, and each use_mem_pool block and CUDA graph
        capture holding it."""
        return _check(load().memsnap_pool_use_count(self._device, *self._id))

    def snapshot(self, include_traces=True):
        """The pool's segments in the form of torch.cuda.memory_snapshot(), built from memsnap's
        state (memsnap.torch_memory)."""
        from . import torch_memory
        return torch_memory.memory_snapshot(self._id + (include_traces,))["segments"]

    def __del__(self):
        # As PyTorch's MemPool: release the pool, and return its cached memory to the device.
        if getattr(self, "_live", False) and _lib is not None:
            self._live = False
            _lib.memsnap_release_pool(self._device, *self._id)
            _lib.memsnap_empty_pool_cache(self._device, *self._id)


@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    """Routes the calling thread's allocations to `pool` (a memsnap.MemPool), as
    ``torch.cuda.use_mem_pool``."""
    import torch
    index = torch.cuda.current_device() if device is None else torch.cuda._utils._get_device_index(device)
    lib = load()
    _check(lib.memsnap_begin_allocate_thread_to_pool(index, *pool.id))
    try:
        yield
    finally:
        lib.memsnap_end_allocate_to_pool(index, *pool.id)
        lib.memsnap_release_pool(index, *pool.id)  # the user begin added


class PoolCheckpoint:
    """What torch.compile's CUDA graph trees keep from _cuda_getCheckpointState(device, pool):
    the pool it names. Restoring one (setCheckpointPoolState) is not supported under memsnap."""

    def __init__(self, device, pool_id):
        self.device = device
        self.pool_id = tuple(pool_id)


def _get_checkpoint_state(device, pool_id):
    return PoolCheckpoint(device, pool_id)


def _set_checkpoint_pool_state(device, state, stale_storages, storages_to_add_deleters_to=()):
    raise RuntimeError(
        "memsnap: torch.compile's CUDA graph trees asked to restore a private pool to its checkpoint "
        "(torch._C._cuda_setCheckpointPoolState), which they do when they record a new graph after replaying "
        "part of a path. PyTorch restores in C++: it frees the pool's blocks, allocates the checkpoint's again, "
        "and gives the live tensors' storages new deleters bound to the allocator. PyTorch's pluggable allocator "
        "interface forwards none of this, and its deleter frees only pointers it handed out itself, so memsnap "
        "cannot do it. Work around it with torch._inductor.config.triton.cudagraph_trees = False (CUDA graphs "
        "without trees, in memsnap's private pools), or record this program with memsnap run --mode torch-native")


def _conf_items(conf):
    """Splits a PYTORCH_CUDA_ALLOC_CONF value into its key:value items (commas inside [...]
    belong to the value)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(conf):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(conf[start:i])
            start = i + 1
    items.append(conf[start:])
    return [it for it in items if it.strip()]


def _hide_backend_key():
    """PyTorch parses PYTORCH_CUDA_ALLOC_CONF again while it runs and asserts that its backend
    key names the allocator in use ("cudaMallocAsync != pluggable"). memsnap has read the key
    by then (MEMSNAP_ALLOCATOR's equivalent), so enable() removes it from both variables."""
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(var)
        if conf:
            kept = [it for it in _conf_items(conf) if it.split(":", 1)[0].strip() != "backend"]
            os.environ[var] = ",".join(kept)


def _install_pools(torch, lib, hooks):
    """Connects CUDA graph capture (private pools) and MemPool to memsnap."""
    if hasattr(hooks, "set_begin_allocate_to_pool"):  # PyTorch 2.3 and later
        hooks.set_begin_allocate_to_pool(_fn_addr(lib, "memsnap_torch_begin_allocate_to_pool"))
        hooks.set_end_allocate_to_pool_fn(_fn_addr(lib, "memsnap_torch_end_allocate_to_pool"))
        hooks.set_release_pool(_fn_addr(lib, "memsnap_torch_release_pool"))
    # torch.compile's CUDA graph trees use these bindings, looked up at call time.
    torch._C._cuda_checkPoolLiveAllocations = pool_live_allocations_match
    torch._C._cuda_getCheckpointState = _get_checkpoint_state
    torch._C._cuda_setCheckpointPoolState = _set_checkpoint_pool_state
    torch.cuda.MemPool = MemPool
    torch.cuda.memory.MemPool = MemPool
    torch.cuda.use_mem_pool = use_mem_pool
    torch.cuda.memory.use_mem_pool = use_mem_pool


def _record_torch_ranges(torch, lib):
    """Records PyTorch's record_function scopes as memsnap's ranges, as PyTorch's own recorder
    records them as annotations (a RecordFunction callback on USER_SCOPE in
    torch/csrc/cuda/memory_snapshot.cpp): `torch.profiler.record_function` blocks and decorators,
    the optimizer's "Optimizer.step#AdamW.step" (torch.optim wraps every optimizer's step in one),
    DataLoader's "enumerate(DataLoader)#...__next__", and those of libraries that use it. The
    library cannot add a C++ callback without PyTorch's headers, so the Python class that makes
    these scopes, torch.autograd.profiler.record_function (torch.profiler.record_function is the
    same class), pushes a range on entering and pops it on leaving, besides its own work; a
    failed push only leaves the range unrecorded. MEMSNAP_TORCH_RANGES=0 leaves the class alone.
    Returns whether the class records ranges now."""
    if get_option("torch_ranges") != "1":  # the library's reading of MEMSNAP_TORCH_RANGES
        return False
    profiler = getattr(getattr(torch, "autograd", None), "profiler", None)
    cls = getattr(profiler, "record_function", None)
    if cls is None:
        return False
    if getattr(cls, "_memsnap_ranges", False):
        return True
    enter, leave = cls.__enter__, cls.__exit__
    push, pop = lib.memsnap_range_push, lib.memsnap_range_pop

    def __enter__(self):
        result = enter(self)
        try:
            if push(str(self.name).encode("utf-8", "surrogateescape")) == 0:
                # a counter, not a flag: one object may be entered again while inside (a
                # decorated recursive function)
                self._memsnap_ranges_open = getattr(self, "_memsnap_ranges_open", 0) + 1
        except Exception:  # noqa: BLE001 - never break the program for a range
            pass
        return result

    def __exit__(self, *exc):
        try:
            if getattr(self, "_memsnap_ranges_open", 0) > 0:
                self._memsnap_ranges_open -= 1
                pop()
        except Exception:  # noqa: BLE001
            pass
        return leave(self, *exc)

    cls.__enter__, cls.__exit__ = __enter__, __exit__
    cls._memsnap_ranges = True
    return True


_recording_started = False  # memsnap.record() started recording in this process
_torch_model_pending = None  # (torch, lib): enable() ran while the history did not record


def _record_torch_model(torch, lib):
    """Tells the history PyTorch's model in its own language (memsnap.torch_model): which module
    runs forward or backward, the blocks of parameters, buffers, gradients and optimizer state,
    optimizer steps (and those GradScaler skipped), backward passes, through PyTorch's global
    module and optimizer hooks, as its ModTracker does. Only while the history records: at
    enable() when it does (MEMSNAP_RECORD=1, as under `memsnap run`), else at the first
    memsnap.record(). MEMSNAP_TORCH_MODULES=0 leaves PyTorch alone. Returns the names of what was
    hooked or wrapped (empty when nothing was, or not yet)."""
    global _torch_model_pending
    if get_option("torch_modules") != "1":  # the library's reading of MEMSNAP_TORCH_MODULES
        return []
    if get_option("record") != "1" and not _recording_started:
        _torch_model_pending = (torch, lib)
        return []
    _torch_model_pending = None
    from . import torch_model
    try:
        return torch_model.install(torch, lib)
    except Exception:  # noqa: BLE001 - never break the program for the model's events
        return []


def _wrap_allocator_settings(torch, lib):
    """PyTorch's settings changed at run time (torch.cuda.memory._set_allocator_settings, which calls
    torch._C._accelerator_setAllocatorSettings at call time) reach memsnap too: PyTorch parses them
    first (and raises ValueError for a bad one, as natively), then memsnap applies the keys it
    decides with (memsnap_set_allocator_settings)."""
    original = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if original is None or getattr(original, "_memsnap", False):
        return

    def set_allocator_settings(env):
        result = original(env)
        import warnings
        if lib.memsnap_set_allocator_settings(str(env).encode()) != 0:
            warnings.warn("memsnap: allocator settings %r: %s" % (env, last_error()), RuntimeWarning, stacklevel=2)
        return result
    set_allocator_settings._memsnap = True
    torch._C._accelerator_setAllocatorSettings = set_allocator_settings


# What PyTorch cannot reach through the pluggable interface (docs/pytorch.md), said when memsnap
# has to fall back to it.
PLUGGABLE_LIMITS = ("CUDA IPC (torch.multiprocessing), graph trees' checkpoint restore, torch.accelerator's "
                    "statistics and PyTorch's C++ recorder")

_kind = None  # "cxx" or "pluggable", once enabled


def allocator_kind():
    """How memsnap is PyTorch's allocator: "cxx" (the C++ allocator built for the installed
    PyTorch), "pluggable" (PyTorch's pluggable interface), or None before enable()."""
    return _kind


def _enable_pluggable(torch, lib, so):
    """Installs memsnap through torch.cuda.memory.CUDAPluggableAllocator, with memsnap's answers for
    what that interface does not forward (torch_memory.py)."""
    _hide_backend_key()
    allocator = torch.cuda.memory.CUDAPluggableAllocator(so, "memsnap_malloc", "memsnap_free")
    hooks = allocator.allocator()
    hooks.set_init_fn(_fn_addr(lib, "memsnap_init"))
    hooks.set_reset_fn(_fn_addr(lib, "memsnap_empty_cache"))
    hooks.set_memory_fraction_fn(_fn_addr(lib, "memsnap_set_memory_fraction"))
    hooks.set_record_stream_fn(_fn_addr(lib, "memsnap_record_stream"))
    _install_pools(torch, lib, hooks)
    torch.cuda.memory.change_current_allocator(allocator)

    # Out of memory raises torch.OutOfMemoryError (see docs/pytorch.md for how).
    global _oom_type
    _oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    lib.memsnap_set_python_oom_error(id(_oom_type))  # borrowed: _oom_type keeps it alive
    if not os.environ.get("MEMSNAP_OOM"):
        set_option("oom", "throw")

    # torch.cuda.memory's functions read their torch._C bindings at call time: memory_stats()
    # and the rest, the backend's name, the memory fraction, snapshots, the history.
    from . import torch_memory
    torch_memory.install(torch)
    return allocator


def enable(path=None):
    """Makes memsnap PyTorch's CUDA allocator. Call it before anything touches CUDA.

    By default (MEMSNAP_TORCH_ALLOCATOR=cxx) through memsnap's C++ allocator, built for the
    installed PyTorch at first use and cached (memsnap.torch_cxx), which PyTorch reaches from
    everywhere as its own; where it cannot be built (no compiler, no headers), through PyTorch's
    pluggable interface, with one line saying what that loses. MEMSNAP_TORCH_ALLOCATOR=pluggable
    asks for the latter.

    Returns PyTorch's allocator object (torch.cuda.memory's _CUDAAllocator wrapper, or the
    CUDAPluggableAllocator). Raises ImportError without torch and RuntimeError when CUDA is
    already initialised (PyTorch cannot swap its allocator then)."""
    global _enabled, _kind
    if _enabled is not None:
        return _enabled
    try:
        import torch
    except ImportError as e:
        raise ImportError("memsnap.enable() needs PyTorch; the rest of memsnap works without it") from e
    if torch.cuda.is_initialized():
        raise RuntimeError("memsnap.enable() must run before CUDA is initialised: call it before the "
                           "first tensor on the GPU (PyTorch cannot swap an initialised allocator)")
    so = path or library_path()
    lib = load(so)
    # the options (and PyTorch's variables) are read now, before _hide_backend_key; the device
    # is not touched (PyTorch initialises it at the first tensor), so a parent that never uses it
    # can still fork children that do
    lib.memsnap_read_options()
    allocator = None
    if get_option("torch_allocator") == "cxx":
        from . import torch_cxx
        try:
            torch_cxx.install(torch, lib._name)
            allocator = torch.cuda.memory._get_current_allocator()
            _kind = "cxx"
        except Exception as e:  # noqa: BLE001 - whatever stops the build, memsnap goes in another way
            if isinstance(e, RuntimeError) and not isinstance(e, torch_cxx.BuildError):
                raise  # PyTorch refused the swap itself: the pluggable interface would be refused too
            import sys
            why = str(e) if isinstance(e, torch_cxx.BuildError) else "the C++ allocator could not be built (%s: %s)" % (
                type(e).__name__, e)
            print("memsnap: warning: %s; using PyTorch's pluggable allocator interface instead, through which "
                  "PyTorch does not reach memsnap for %s (a program that needs them: memsnap run --mode "
                  "torch-native; docs/pytorch.md; MEMSNAP_TORCH_ALLOCATOR=pluggable silences this)"
                  % (why, PLUGGABLE_LIMITS), file=sys.stderr)
    if allocator is None:
        allocator = _enable_pluggable(torch, lib, so)
        _kind = "pluggable"
    _record_torch_ranges(torch, lib)
    _record_torch_model(torch, lib)
    _wrap_allocator_settings(torch, lib)
    _enabled = allocator
    return allocator
