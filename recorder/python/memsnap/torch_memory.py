"""torch_memory.py: torch.cuda.memory's answers under memsnap, from memsnap's own state.

PyTorch's pluggable allocator (torch/csrc/cuda/CUDAPluggableAllocator.cpp) forwards only
malloc, free and a few hooks; every other question torch.cuda.memory asks its allocator is
refused ("CUDAPluggableAllocator does not yet support ..."). The public functions reach the
allocator through torch._C bindings that they look up at call time, so memsnap.enable() calls
install() to put these functions in their place:

  torch._C binding                        public functions                          answered by
  _cuda_memoryStats                       memory_stats(), memory_allocated(), ...   stats_for_torch: PyTorch's 122 keys
  _cuda_resetPeakMemoryStats              reset_peak_memory_stats()                 memsnap.reset_peak_stats
  _cuda_resetAccumulatedMemoryStats       reset_accumulated_memory_stats()          memsnap.reset_accumulated_stats
  _cuda_getAllocatorBackend               get_allocator_backend()                   allocator_backend: native or cudaMallocAsync
  _cuda_getMemoryFraction                 get_per_process_memory_fraction()         memsnap.get_memory_fraction
  _cuda_memorySnapshot                    memory_snapshot(), _snapshot(),           memory_snapshot / snapshot: a dump of
                                          _dump_snapshot(), MemPool.snapshot()      memsnap's state, read back as PyTorch's dict
  _cuda_record_memory_history(_legacy)    _record_memory_history()                  record_memory_history: memsnap.record
  _cuda_attach_out_of_memory_observer     (called directly; PyTorch's OOM recipe)   memsnap.add_oom_observer

In the async mode (backend:cudaMallocAsync) the snapshot and the history are refused with
PyTorch's own messages for that backend, as native PyTorch does. docs/pytorch.md has the table of
every public function, and what cannot be answered through the pluggable interface.
"""
import os
import sqlite3
import sys
import tempfile

import memsnap

# memsnap's statistics that PyTorch's memory_stats() does not have (memsnap.memory_stats() keeps them)
MEMSNAP_ONLY_STATS = ("num_invalid_frees",)

# What PyTorch's backend:cudaMallocAsync answers (c10/cuda/CUDAMallocAsyncAllocator.cpp)
ASYNC_SNAPSHOT_REFUSED = ("Calling snapshot with backend:cudaMallocAsync is not meaningful. (For backend:native, "
                          "snapshot returns a detailed summary of all blocks tracked by the allocator, but the "
                          "cudaMallocAsync backend does not track individual blocks.)")
ASYNC_HINT = " (memsnap records this backend too: memsnap.record() and memsnap.dump(path))"


def async_refusal(what):
    """PyTorch's cudaMallocAsync backend's message for a call it does not support (what: the
    allocator's method, "createOrIncrefPool"), with memsnap's hint."""
    return ("cudaMallocAsync does not yet support %s. If you need it, please file an issue describing your use "
            "case." % what) + ASYNC_HINT

# PyTorch's recorder settings as _record_memory_history last set them
_history = {"mode": None, "context": True, "max_entries": None, "skip": frozenset()}


def is_async():
    return memsnap.get_option("allocator") == "async"


def allocator_backend():
    """torch.cuda.get_allocator_backend() of the allocator memsnap stands in for."""
    return "cudaMallocAsync" if is_async() else "native"


def stats_for_torch(device):
    """memsnap's statistics of `device` as torch._C._cuda_memoryStats returns them: a nested dict
    with PyTorch's keys only."""
    nested = memsnap.memory_stats_as_nested_dict(device)
    for key in MEMSNAP_ONLY_STATS:
        nested.pop(key, None)
    return nested


def memory_fraction(device):
    return memsnap.get_memory_fraction(0 if device is None else device)


# ---- the snapshot: memsnap's dump read back as PyTorch's dict ------------------------------------

_STATES = {"allocated": "active_allocated", "pending_free": "active_pending_free"}
_ACTIONS = {1: "alloc", 2: "free_requested", 3: "free_completed", 4: "segment_alloc", 5: "segment_free",
            6: "oom", 7: "snapshot", 11: "segment_map", 12: "segment_unmap"}


def _temp_dir():
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _columns(db, table):
    return {row[1] for row in db.execute("PRAGMA table_info(%s)" % table)}


def _frames_of(db):
    """Each stack id's frames as PyTorch writes them ({name, filename, line}, innermost first),
    one list per stack shared by every entry that names it, as PyTorch shares them."""
    frames = {}
    for fid, kind, name, file, line, module in db.execute("SELECT id, kind, name, file, line, module FROM frames"):
        filename = file or (module if kind != "python" and module else "??")
        frames[fid] = {"name": name or "??", "filename": filename, "line": line if line is not None else 0}
    stacks = {}
    for sid, fid in db.execute("SELECT stack_id, frame_id FROM stack_frames ORDER BY stack_id, position"):
        stacks.setdefault(sid, []).append(frames.get(fid, {"name": "??", "filename": "??", "line": 0}))
    return stacks


def _segments(db, stacks, pool_id):
    """The segments (of pool `pool_id` unless it is (0, 0)) with their blocks, in address order."""
    has_pool = {"expandable", "pool_id0", "pool_id1"} <= _columns(db, "segments")
    cols = "expandable, coalesce(pool_id0, 0), coalesce(pool_id1, 0)" if has_pool else "0, 0, 0"
    blocks = {}
    for seg, addr, size, req, state, stack in db.execute(
            "SELECT segment_id, address, size, coalesce(requested_size, 0), state, stack_id FROM blocks "
            "ORDER BY segment_id, address"):
        state = _STATES.get(state, "inactive")
        frames = stacks.get(stack, []) if _history["context"] and state != "inactive" else []
        blocks.setdefault(seg, []).append({"address": addr, "size": size, "requested_size": req, "state": state,
                                           "frames": frames})
    out = []
    for sid, device, addr, size, pool, stream, expandable, pid0, pid1 in db.execute(
            "SELECT id, device, address, size, pool, coalesce(stream, 0), %s FROM segments "
            "ORDER BY device, address" % cols):
        if pool_id and tuple(pool_id) != (0, 0) and (pid0, pid1) != tuple(pool_id):
            continue
        bs = blocks.get(sid, [])
        active = [b for b in bs if b["state"] != "inactive"]
        out.append({"device": device, "address": addr, "total_size": size,
                    "allocated_size": sum(b["size"] for b in bs if b["state"] == "active_allocated"),
                    "active_size": sum(b["size"] for b in active),
                    "requested_size": sum(b["requested_size"] for b in active),
                    "stream": stream, "segment_type": "small" if pool == "small" else "large",
                    "segment_pool_id": (pid0, pid1), "is_expandable": bool(expandable),
                    "blocks": bs, "frames": []})
    return out


def _traces(db, stacks, ndevices, start_unix_ns):
    """One list of trace entries per device, oldest first, as PyTorch's device_traces."""
    traces = [[] for _ in range(ndevices)]
    used = {d for (d,) in db.execute("SELECT DISTINCT device FROM events WHERE typeof(device) = 'integer'")}
    # memsnap's dumps mark their instant in the history (kind 7); PyTorch 2.11's trace has no such
    # entry (measured on the GPU: tests/gpu/parity/parity_memory_api.py), so they are left out
    kinds = ",".join(str(k) for k in _ACTIONS if _ACTIONS[k] != "snapshot")
    for time_ns, kind, device, stream, addr, size, req, stack in db.execute(
            "SELECT time_ns, kind, device, coalesce(stream, 0), coalesce(address, 0), coalesce(size, 0), "
            "coalesce(requested_size, 0), stack_id FROM events WHERE kind IN (%s) ORDER BY id" % kinds):
        action = _ACTIONS[kind]
        if action in _history["skip"]:
            continue
        # PyTorch's alloc and free entries hold the size asked for; segments their size
        blockwise = kind in (1, 2, 3)
        entry = {"action": action, ("device_free" if kind == 6 else "addr"): addr,
                 "size": req if blockwise and req > 0 else size, "stream": stream,
                 "time_us": (start_unix_ns + time_ns) // 1000, "compile_context": "N/A", "user_metadata": "",
                 "frames": stacks.get(stack, []) if _history["context"] else []}
        for d in ([device] if device is not None else sorted(used)):  # a snapshot entry goes to every device
            if 0 <= d < ndevices:
                traces[d].append(entry)
    limit = _history["max_entries"]
    return [t[-limit:] if limit else t for t in traces]


def _conf_value(conf, key, default):
    for item in memsnap._conf_items(conf):
        k, _, v = item.partition(":")
        if k.strip() == key:
            return v.strip()
    return default


def _settings(db):
    """allocator_settings as PyTorch 2.11 writes them, from memsnap's options (PyTorch's own for the
    pinned host allocator, which memsnap does not serve)."""
    opts = dict(db.execute("SELECT name, value FROM options"))
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""
    split = opts.get("MEMSNAP_MAX_SPLIT_SIZE_MB", "unlimited")
    divisions = {}
    for item in opts.get("MEMSNAP_ROUNDUP_POWER2_DIVISIONS", "[]").strip("[]").split(","):
        if ":" in item:
            start, div = item.split(":")
            divisions[start] = int(div)
    return {"PYTORCH_CUDA_ALLOC_CONF": conf,
            "max_split_size": int(split) << 20 if split.isdigit() else -1,
            "garbage_collection_threshold": float(opts.get("MEMSNAP_GARBAGE_COLLECTION_THRESHOLD", 0)),
            "expandable_segments": opts.get("MEMSNAP_EXPANDABLE_SEGMENTS") == "1",
            "pinned_num_register_threads": int(_conf_value(conf, "pinned_num_register_threads", "1")),
            "release_lock_on_cudamalloc": _conf_value(conf, "release_lock_on_cudamalloc", "False") == "True",
            "pinned_use_cuda_host_register": _conf_value(conf, "pinned_use_cuda_host_register", "False") == "True",
            "graph_capture_record_stream_reuse": _conf_value(conf, "graph_capture_record_stream_reuse",
                                                             "False") == "True",
            "roundup_power2_divisions": divisions}


def _annotations(db, start_unix_ns):
    """memsnap's ranges and marks as PyTorch's external_annotations (START/END pairs)."""
    rows = []
    label = dict(db.execute("SELECT id, text FROM labels"))
    for rid, lid, start, end in db.execute("SELECT id, label_id, start_ns, end_ns FROM ranges"):
        rows.append((start, 0, rid, "START", label.get(lid, "")))
        if end is not None:
            rows.append((end, 1, rid, "END", label.get(lid, "")))
    for eid, t, lid in db.execute("SELECT event_id, time_ns, label_id FROM marks"):
        rows += [(t, 0, -eid, "START", label.get(lid, "")), (t, 1, -eid, "END", label.get(lid, ""))]
    return [{"stage": stage, "name": name, "device": 0, "time_us": (start_unix_ns + t) // 1000}
            for t, _, _, stage, name in sorted(rows, key=lambda r: r[:3])]


def snapshot(pool_id=None, include_traces=True):
    """The allocator's state now, as torch.cuda.memory._snapshot() returns it: segments (of
    private pool `pool_id` only, unless it is None or (0, 0)), device_traces (empty unless
    include_traces and PyTorch's recorder is on with enabled="all"), allocator_settings and
    external_annotations. Built from a memsnap snapshot written to a temporary file."""
    with tempfile.TemporaryDirectory(prefix="memsnap-torch-", dir=_temp_dir()) as tmp:
        path = os.path.join(tmp, "snapshot.db")
        memsnap.dump(path)
        db = sqlite3.connect(path)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta"))
            start = int(meta.get("start_unix_ns") or 0)
            stacks = _frames_of(db)
            ndevices = max(memsnap.device_count(), 1)
            # PyTorch's recorder on with enabled="all", or memsnap's own (memsnap.record, MEMSNAP_RECORD)
            mode = _history["mode"] or ("all" if meta.get("recording") in (1, "1") else None)
            traced = include_traces and mode == "all"
            return {"segments": _segments(db, stacks, pool_id),
                    "device_traces": _traces(db, stacks, ndevices, start) if traced else [[] for _ in range(ndevices)],
                    "allocator_settings": _settings(db),
                    "external_annotations": _annotations(db, start) if traced else []}
        finally:
            db.close()


def memory_snapshot(arg=None):
    """torch._C._cuda_memorySnapshot: arg is None, a pool id (id0, id1), or (id0, id1,
    include_traces) as the PyTorch version at hand passes it."""
    if is_async():
        raise RuntimeError(ASYNC_SNAPSHOT_REFUSED + ASYNC_HINT)
    if arg is None:
        return snapshot()
    arg = tuple(arg)
    return snapshot(pool_id=arg[:2], include_traces=bool(arg[2]) if len(arg) > 2 else True)


# ---- PyTorch's recorder: _record_memory_history -------------------------------------------------

# A ring of fixed size stands for PyTorch's growing list: an unbounded request (PyTorch's
# default max_entries is sys.maxsize) keeps the last 10 million events (64 bytes each).
RING_CAP = 10_000_000


def _record(enabled, context, stacks, max_entries, clear_history, skip_actions):
    if is_async():
        raise RuntimeError(async_refusal("recordHistory"))
    if enabled is None:
        memsnap.stop_recording()
        _history["mode"] = None
        return
    if enabled not in ("state", "all"):
        raise ValueError("enabled must be None, 'state' or 'all', not %r" % (enabled,))
    if clear_history:
        memsnap.clear_recording()
    mode = "none" if context is None else ("python" if stacks == "python" else "all")
    limit = int(max_entries)
    memsnap.record(max_entries=min(max(limit, 16), RING_CAP), stacks=mode)
    _history.update(mode=enabled, context=context is not None, max_entries=limit if limit < RING_CAP else None,
                    skip=frozenset(skip_actions or ()))


def record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                          clear_history=False, compile_context=False, global_record_annotations=False,
                          skip_actions=None, *rest):
    """torch._C._cuda_record_memory_history, whose arguments PyTorch passes by position."""
    _record(enabled, context, stacks, max_entries, clear_history, skip_actions)


def record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                 trace_alloc_record_context=False, record_context_cpp=False,
                                 clear_history=False, *rest):
    """torch._C._cuda_record_memory_history_legacy: _record_memory_history(True / False, ...)."""
    _record("all" if enabled else None, "all" if record_context else None, "all" if record_context_cpp else "python",
            trace_alloc_max_entries, clear_history, None)


def attach_out_of_memory_observer(observer):
    """torch._C._cuda_attach_out_of_memory_observer: observer(device, size, total, free) is
    called at each out-of-memory error (memsnap.add_oom_observer); refused in the async mode, as
    PyTorch's cudaMallocAsync backend refuses it."""
    if is_async():
        raise RuntimeError(async_refusal("attachOutOfMemoryObserver"))
    memsnap.add_oom_observer(observer)


def caching_allocator_enable(value):
    """torch._C._cuda_cudaCachingAllocator_enable: the cache on or off (memsnap.set_caching), as
    PyTorch's own allocator turns its cache off: each tensor a device allocation of its own, freed
    at once, outside the statistics; memsnap still records them (a segment of pool external whose
    source is "uncached")."""
    memsnap.set_caching(bool(value))


def install(torch):
    """Puts the functions above in the place of the torch._C bindings that refuse under a
    pluggable allocator (see the top of this file)."""
    c = torch._C
    c._cuda_memoryStats = stats_for_torch
    c._cuda_resetPeakMemoryStats = lambda device: memsnap.reset_peak_stats(device)
    c._cuda_resetAccumulatedMemoryStats = lambda device: memsnap.reset_accumulated_stats(device)
    c._cuda_getAllocatorBackend = allocator_backend
    c._cuda_getMemoryFraction = memory_fraction
    c._cuda_memorySnapshot = memory_snapshot
    c._cuda_record_memory_history = record_memory_history
    c._cuda_record_memory_history_legacy = record_memory_history_legacy
    c._cuda_attach_out_of_memory_observer = attach_out_of_memory_observer
    c._cuda_cudaCachingAllocator_enable = caching_allocator_enable
