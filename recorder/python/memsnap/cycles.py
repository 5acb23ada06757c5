"""cycles.py: the reference cycles that held CUDA tensors, seen at each run of Python's garbage
collector (MEMSNAP_GC_CYCLES=1, off by default: docs/options.md says its cost; docs/pytorch.md,
"Holders and reference cycles"; the gc_cycles table of docs/snapshot-format.md).

How (as torch.utils.viz._cycles.observe_garbage does it): when a run starts, gc.DEBUG_SAVEALL is
set, so the collector puts what it found unreachable into gc.garbage instead of freeing it; when it
stops, a profile function (sys.setprofile, this thread only) is set that runs at the thread's first
call or return outside the collector (no gc callback's frame on the stack: a collection started
from within one finds one in progress and does nothing):
there the new entries of gc.garbage are described (the CUDA tensors among them and the objects
that reach them: their types, the attributes and items joining them, the tensors' storage
pointers and bytes, grouped into cycles), taken out of gc.garbage and dropped, DEBUG_SAVEALL
reset, and the objects freed for real by a collection of the next older generation (where the
collector moved them; a full one when that found fewer than were saved). The tensors' memory is
freed in that collection: the run's end event (memsnap_gc_event, holders.py) is recorded after it,
so that its frees count as the run's. Collections this module runs itself record nothing, and a
run that starts before the profile function ran joins the run pending.

Rows are kept in memory (CYCLES_MAX of them, then counted as dropped) and written into each
snapshot the process writes (write()). The cost: the second collection of each run, the
description of runs whose garbage holds a CUDA tensor, and the saved objects' memory until the
second collection; BENCHMARKS.md measures it on a GPT-2 step (tests/gpu/leaks/cost.py).
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
_state = {"runs": 0, "described": 0, "dropped": 0, "ns": 0, "busy": False, "pending": None}


def start(info, begin):
    """A run begins (gc.callbacks' "start"). Returns False when it is one of this module's own
    collections or joins a pending run (no begin event then); else saves what the run finds and
    calls begin()."""
    if _state["busy"]:
        return False
    if _state["pending"] is not None and _state["pending"]["thread"] == threading.get_ident():
        return False  # the last run's profile function has not run yet: this one joins it
    _state["mark"] = len(gc.garbage)
    gc.set_debug(gc.get_debug() | gc.DEBUG_SAVEALL)
    begin()
    return True


def stop(info, end):
    """A run stops (gc.callbacks' "stop"): its objects are in gc.garbage; the profile function that
    describes and frees them, then calls end(collected), is set (once a pending run)."""
    if _state["busy"]:
        return
    if _state["pending"] is not None:
        if _state["pending"]["thread"] != threading.get_ident():  # another thread's run, begun and
            end(int(info.get("collected", 0)))  # ended here: what it saved goes with the pending run
        return
    pending = {"thread": threading.get_ident(), "generation": int(info.get("generation", 0)),
               "mark": _state.get("mark", 0), "end": end, "previous": sys.getprofile()}
    _state["pending"] = pending
    # the collection is over once no gc callback's frame is on the stack (the first events are the
    # callbacks' own returns: a collection started from there would find one in progress and do nothing)
    codes = set()
    for cb in gc.callbacks:
        code = getattr(getattr(cb, "__func__", cb), "__code__", None)
        if code is not None:
            codes.add(code)

    def after(frame, event, arg):
        previous = pending["previous"]
        f = frame
        while f is not None:
            if f.f_code in codes:
                return previous(frame, event, arg) if previous is not None else None
            f = f.f_back
        del f
        sys.setprofile(previous)
        _finish(pending)
        if previous is not None:
            return previous(frame, event, arg)
        return None
    sys.setprofile(after)


def _finish(pending):
    _state["busy"] = True
    t0 = time.monotonic_ns()
    collected = 0
    try:
        garbage = gc.garbage[pending["mark"]:]
        del gc.garbage[pending["mark"]:]
        gc.set_debug(gc.get_debug() & ~gc.DEBUG_SAVEALL)
        _state["runs"] += 1
        saved = len(garbage)
        try:
            if garbage:
                _describe(garbage, _state["runs"], pending["generation"])
        except Exception:  # noqa: BLE001 - a run without its cycles, never a broken program
            pass
        del garbage
        generation = min(pending["generation"] + 1, 2)
        collected = gc.collect(generation)  # the saved objects, freed for real: their tensors' frees
        if collected < saved and generation < 2:
            collected += gc.collect()
    finally:
        _state["pending"] = None
        _state["busy"] = False
        _state["ns"] += time.monotonic_ns() - t0
        try:
            pending["end"](collected)
        except Exception:  # noqa: BLE001
            pass


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
