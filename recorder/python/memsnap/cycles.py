"""cycles.py: the reference cycles that held CUDA tensors, seen at each run of Python's garbage
collector (MEMSNAP_GC_CYCLES=1, off by default: docs/options.md says its cost; docs/pytorch.md,
"Holders and reference cycles"; the gc_cycles table of docs/snapshot-format.md).

How: when a run starts, gc.DEBUG_SAVEALL is set, so the collector puts what it found unreachable
into gc.garbage instead of freeing it (as torch.utils.viz._cycles.observe_garbage does). When it
stops, still inside its callbacks: the new entries of gc.garbage are described (the CUDA tensors
among them and the objects that reach them: their types, the attributes and items joining them,
the tensors' storage pointers and bytes, grouped into cycles), then freed here, as the collector
would have: DEBUG_SAVEALL reset, the references among them cleared (an object's attributes, a
list's, dict's or set's items, a closure cell's contents: nothing outside the garbage can see
them), and they are taken out of gc.garbage: they go at once, their tensors with them, on the
run's thread before its end event (holders.py records it after this), so that the analysis counts
those frees as the run's. PyTorch's way runs a second collection from a profile function set in
the callback; replacing the profile function there crashed Python 3.11 here, and a thread of our
own made the runs' order depend on the scheduler. What this cannot clear (a cycle only through
tuples or C objects) stays unreachable, and the collector's next run of the next generation frees
it.

Rows are kept in memory (CYCLES_MAX of them, then counted as dropped) and written into each
snapshot the process writes (write()). The cost: each run's garbage held until its end and walked
once (cleared), and the description of runs whose garbage holds a CUDA tensor; BENCHMARKS.md
measures it on a GPT-2 step (tests/gpu/leaks/cost.py).
"""
import gc
import os
import sys
import threading
import time
import types

CYCLES_MAX, PER_RUN, OBJECTS_MAX, EDGES_MAX, ADDRESSES_MAX = 1000, 8, 20000, 8, 8
CYCLES_SQL = ("CREATE TABLE IF NOT EXISTS gc_cycles(id INTEGER PRIMARY KEY, run INTEGER, generation INTEGER,"
              " objects INTEGER, tensors INTEGER, tensor_bytes INTEGER, address INTEGER, addresses TEXT, types TEXT,"
              " edges TEXT)")

_rows = []           # (run, generation, objects, tensors, tensor_bytes, address, addresses, types, edges)
_lock = threading.Lock()
_state = {"runs": 0, "described": 0, "dropped": 0, "ns": 0, "mark": None}


def phase(what, info):
    """A run begins (what "start") or stops ("stop"), as gc.callbacks say: at its start the
    collector is told to save what it finds; at its stop that is described and freed. A run that
    starts with DEBUG_SAVEALL set already (the program's own) is left alone."""
    if what == "start":
        _state["mark"] = None
        if not gc.get_debug() & gc.DEBUG_SAVEALL:
            _state["mark"] = len(gc.garbage)
            gc.set_debug(gc.get_debug() | gc.DEBUG_SAVEALL)
        return
    mark, _state["mark"] = _state["mark"], None
    if mark is None:
        return
    t0 = time.monotonic_ns()
    gc.set_debug(gc.get_debug() & ~gc.DEBUG_SAVEALL)
    garbage = gc.garbage[mark:]
    try:
        _state["runs"] += 1
        if garbage:
            try:
                _describe(garbage, _state["runs"], int(info.get("generation", 0)))
            except Exception:  # noqa: BLE001 - a run without its cycles, never a broken program
                pass
            _clear(garbage)
    finally:
        del gc.garbage[mark:]
        del garbage  # the objects go here, their tensors with them
        _state["ns"] += time.monotonic_ns() - t0


def _clear(objects):
    """Clears the references among `objects` (a collection's unreachable objects, saved): what the
    collector's tp_clear would do, for the objects Python can clear."""
    for o in objects:
        try:
            if isinstance(o, (dict, list, set)):
                o.clear()
            elif isinstance(o, types.CellType):
                o.cell_contents = None
            elif isinstance(o, (type, types.ModuleType, types.FrameType, tuple, frozenset, str, bytes)):
                continue
            else:
                d = object.__getattribute__(o, "__dict__") if hasattr(type(o), "__dict__") else None
                if isinstance(d, dict):
                    d.clear()
                for slot in getattr(type(o), "__slots__", ()) or ():
                    if isinstance(slot, str) and slot not in ("__dict__", "__weakref__"):
                        try:
                            object.__delattr__(o, slot)
                        except (AttributeError, TypeError):
                            pass
        except Exception:  # noqa: BLE001 - one that cannot be cleared: the next collection frees it
            continue


def _cuda_tensor(obj, Tensor):
    if Tensor is None or not isinstance(obj, Tensor):
        return False
    try:
        return bool(obj.is_cuda)
    except Exception:  # noqa: BLE001
        return False


def _storage(t):
    try:
        if hasattr(t, "untyped_storage"):
            s = t.untyped_storage()
            return int(s.data_ptr()), int(s.nbytes())
        return int(t.data_ptr()), int(t.numel() * t.element_size())
    except Exception:  # noqa: BLE001
        try:
            return int(t.data_ptr()), int(getattr(t, "nbytes", 0) or 0)
        except Exception:  # noqa: BLE001
            return 0, 0


def _type_name(obj):
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
        return "function %s (%s:%d)" % (code.co_name, os.path.basename(code.co_filename), code.co_firstlineno)
    return type(obj).__name__


def _describe(garbage, run, generation):
    """The cycles in `garbage` (a collector run's unreachable objects) that hold CUDA tensors: the
    objects that reach a tensor, grouped by the cycles they form (connected parts), one row each."""
    torch = sys.modules.get("torch")
    Tensor = getattr(torch, "Tensor", None)
    if not any(_cuda_tensor(o, Tensor) for o in garbage):
        return
    objects = garbage[:OBJECTS_MAX]
    index = {id(o): i for i, o in enumerate(objects)}
    referents = []     # i -> [j]: what object i refers to, among them
    referrers = [[] for _ in objects]
    for i, o in enumerate(objects):
        out = []
        for r in gc.get_referents(o):
            j = index.get(id(r))
            if j is not None and j != i:
                out.append(j)
                referrers[j].append(i)
        referents.append(out)
    # the objects that reach a CUDA tensor (the tensors first)
    keep, todo = set(), [i for i, o in enumerate(objects) if _cuda_tensor(o, Tensor)]
    while todo:
        i = todo.pop()
        if i not in keep:
            keep.add(i)
            todo.extend(referrers[i])
    # an object's __dict__ reads as its attributes: the dict is not a node of its own
    owner_of = {}
    for i in keep:
        d = getattr(objects[i], "__dict__", None) if not isinstance(objects[i], type) else None
        j = index.get(id(d)) if isinstance(d, dict) else None
        if j is not None and j in keep:
            owner_of[j] = i
    # connected parts
    part, parts = {}, []
    for i in sorted(keep):
        if i in part or i in owner_of:
            continue
        members, todo = [], [i]
        part[i] = len(parts)
        while todo:
            k = todo.pop()
            members.append(k)
            for n in referents[k] + referrers[k]:
                if n in keep and n not in part:
                    part[n] = len(parts)
                    todo.append(n)
        parts.append(members)
    rows = []
    for members in parts:
        tensors = [objects[k] for k in members if _cuda_tensor(objects[k], Tensor)]
        if not tensors:
            continue
        storages = {}
        for t in tensors:
            ptr, nbytes = _storage(t)
            if ptr:
                storages[ptr] = max(nbytes, storages.get(ptr, 0))
        largest = sorted(storages.items(), key=lambda kv: -kv[1])
        counts = {}
        for k in members:
            if k not in owner_of:
                name = _type_name(objects[k])
                counts[name] = counts.get(name, 0) + 1
        edges = []
        for k in members:
            if k in owner_of:
                continue
            for text in _edges(objects, index, k, referents[k], keep, owner_of, Tensor):
                if text not in edges:
                    edges.append(text)
        rows.append((run, generation, len(members), len(tensors), sum(storages.values()),
                     largest[0][0] if largest else 0,
                     ",".join("%d:%d" % kv for kv in largest[:ADDRESSES_MAX]),
                     ", ".join("%d %s" % (n, name) for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
                     "; ".join(edges[:EDGES_MAX]) + ("; ..." if len(edges) > EDGES_MAX else "")))
    rows.sort(key=lambda r: -r[4])
    with _lock:
        _state["described"] += 1
        for r in rows[:PER_RUN]:
            if len(_rows) < CYCLES_MAX:
                _rows.append(r)
            else:
                _state["dropped"] += 1
        _state["dropped"] += max(0, len(rows) - PER_RUN)


def _edges(objects, index, k, refs, keep, owner_of, Tensor):
    """How object k refers to the kept objects it refers to: "Node.next -> Node",
    "list[0] -> Tensor", "function f (x.py:3) closure `aw` -> Awaitable"."""
    o = objects[k]
    name = _type_name(o)
    out = []

    def shown(j):
        return "Tensor" if _cuda_tensor(objects[j], Tensor) else _type_name(objects[j])
    for j in refs:
        if j not in keep:
            continue
        target = objects[j]
        if owner_of.get(j) == k:  # its __dict__: its attributes
            for attr, v in list(target.items())[:64]:
                m = index.get(id(v))
                if m in keep and objects[m] is v:
                    out.append("%s.%s -> %s" % (type(o).__name__, attr, shown(m)))
            continue
        if j in owner_of:
            continue
        label = None
        if isinstance(o, (list, tuple)):
            for pos, v in enumerate(o[:64]):
                if v is target:
                    label = "%s[%d]" % (type(o).__name__, pos)
                    break
        elif isinstance(o, dict):
            for key, v in list(o.items())[:64]:
                if v is target:
                    label = "dict[%s]" % (repr(key)[:30] if isinstance(key, (str, int)) else type(key).__name__)
                    break
        elif isinstance(o, types.FunctionType) and o.__closure__ is not None:
            for var, cell in zip(o.__code__.co_freevars, o.__closure__):
                try:
                    if cell.cell_contents is target:
                        label = "%s closure `%s`" % (name, var)
                        break
                except ValueError:
                    continue
        elif isinstance(o, types.CellType):
            label = "cell"
        elif isinstance(o, types.MethodType):
            label = "%s.__self__" % name if o.__self__ is target else "%s.__func__" % name
        else:  # an object's attribute (its __dict__ is not an object of its own since Python 3.11), or slot
            try:
                attrs = list(vars(o).items())[:64]
            except TypeError:
                attrs = []
            attrs += [(slot, getattr(o, slot, None)) for slot in (getattr(type(o), "__slots__", ()) or ())
                      if isinstance(slot, str)]
            for attr, v in attrs:
                if v is target:
                    label = "%s.%s" % (type(o).__name__, attr)
                    break
        out.append("%s -> %s" % (label or name, shown(j)))
    return out


def take():
    """The rows kept so far and the meta keys: (rows, meta)."""
    with _lock:
        rows = list(_rows)
        meta = {"gc_cycles_runs": _state["runs"], "gc_cycles_described": _state["described"],
                "gc_cycles_dropped": _state["dropped"], "gc_cycles_ms": _state["ns"] // 1000000}
    return rows, meta


def write(conn):
    """Writes the rows kept so far (the gc_cycles table, made where the writer did not) and the
    meta keys into the open snapshot `conn` (sqlite3), inside the caller's transaction."""
    rows, meta = take()
    conn.execute(CYCLES_SQL)
    conn.execute("DELETE FROM gc_cycles")
    conn.executemany("INSERT INTO gc_cycles(run, generation, objects, tensors, tensor_bytes, address, addresses, types,"
                     " edges) VALUES(?,?,?,?,?,?,?,?,?)", rows)
    conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", sorted(meta.items()))
