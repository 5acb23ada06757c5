"""holders.py: what keeps a snapshot's memory alive, told from Python, and the garbage collector's
runs (docs/snapshot-format.md: the holders table and the gc events; docs/pytorch.md, "Holders
and reference cycles").

install(lib) is called once by memsnap.load(). It sets the library's dump hook
(memsnap_set_dump_hook), called after every snapshot this process writes (memsnap.dump(), the
exit dump, the dump signal's, `memsnap dump PID`'s, the out-of-memory dump) with the path written,
and adds a gc.callbacks entry that records each run of the collector (memsnap_gc_event: begins,
ends, generation, objects collected) while the history records (MEMSNAP_GC_EVENTS=0: not), and
with MEMSNAP_GC_CYCLES=1 keeps the reference cycles holding CUDA tensors that each run freed
(cycles.py: the collector saves what it finds, which is described and freed at the run's stop,
before its end event; the gc_cycles table of each snapshot).

The holder walk (walk(), run by the hook within MEMSNAP_HOLDERS_TIME seconds, 5 by default; 0
turns it off). The recorder does not know the analyzer's leak candidates, so the walk picks its
blocks from the snapshot just written: the allocated blocks grouped by allocation site (stack),
the sites whose live blocks were allocated in the history's second half first (most such bytes
first: what grew), then the rest by live bytes; the newest blocks of a site first, three a site,
sixteen sites. For each block, the Python tensors whose storage lies in it (gc.get_objects), and
the autograd graphs that reach it: the tensors saved for backward (SavedVariable, held from C++:
no Python object refers to them) found down grad_fn -> next_functions from every Python tensor
with a grad_fn (its nodes' `_saved_*`, a custom Function's saved_tensors, AccumulateGrad's
`variable`), the outermost such tensor kept (the loss, not an activation inside its graph); then a
breadth-first walk up gc.get_referrers from each tensor (a block's own, or where its own has no
Python referrer, the graph's outer tensor: "... -> tensor () float32 -> through its autograd graph
(grad_fn NllLossBackward0 -> ...) -> saved `result` of LogSoftmaxBackward0") to a root: a module's global, a running frame's local (every thread's), a hook registered on a module
(_forward_hooks and the others: which module, by its path as memsnap's module record names it), an
optimizer (its state), a module of the model (its parameters, buffers, attributes: by its path). Containers, closure cells, functions and objects' attributes on the way are
named in the chain. A walk that ends with no root, having met the same objects again, is a
reference cycle that only the collector frees. At most three chains a block.

The rows go into the snapshot file after the C writer has finished it (sqlite3, a transaction of
its own: a crash in between leaves the snapshot without them), with meta keys holders_ms,
holders_cut (the time ran out: the rest was not walked) and holders_blocks. Nothing here is on the
allocation path: the walk runs in the hook, gc disabled meanwhile; every error is caught (a
failed walk leaves the table out, never the program broken).
"""
import atexit
import bisect
import ctypes
import gc
import os
import sqlite3
import sys
import threading
import time
import types
import warnings

from . import cycles

_lib = None
_hook = None          # the C callback, kept alive while the library may call it
_gc_on = False        # the gc callback is in gc.callbacks
_events_on = False    # it records the collector's runs (MEMSNAP_GC_EVENTS)
_cycles_on = False    # it keeps the cycles holding CUDA tensors each run freed (MEMSNAP_GC_CYCLES: cycles.py)
_MAX_SITES, _PER_SITE, _MAX_CHAINS, _MAX_DEPTH, _FRONTIER = 16, 3, 3, 12, 128
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               "_forward_hooks_with_kwargs", "_state_dict_hooks", "_load_state_dict_pre_hooks")
_HOOK_NAMES = {"_forward_hooks": "forward hook", "_forward_pre_hooks": "forward pre-hook",
               "_backward_hooks": "backward hook", "_backward_pre_hooks": "backward pre-hook",
               "_forward_hooks_with_kwargs": "forward hook", "_state_dict_hooks": "state_dict hook",
               "_load_state_dict_pre_hooks": "load_state_dict pre-hook"}
DUMP_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p)  # memsnap_dump_hook_t
HOLDERS_SQL = ("CREATE TABLE IF NOT EXISTS holders(id INTEGER PRIMARY KEY, stack_id INTEGER, address INTEGER,"
               " size INTEGER, tensor_bytes INTEGER, rank INTEGER, root TEXT, holder TEXT)")


def _option(name, default):
    try:
        buf = ctypes.create_string_buffer(64)
        if _lib.memsnap_get_option(name.encode(), buf, len(buf)) == 0:
            return buf.value.decode()
    except Exception:  # noqa: BLE001 - an older library: the default
        pass
    return default


# ---- the garbage collector's runs ------------------------------------------------------------

def _event(what, generation, collected, uncollectable):
    if _events_on:
        _lib.memsnap_gc_event(what, generation, collected, uncollectable)


def _gc_callback(phase, info):
    try:
        generation = int(info.get("generation", 0))
        if _cycles_on:  # at the stop, what the run saved is described and freed before its end event
            cycles.phase(phase, info)
        _event(0 if phase == "start" else 1, generation, int(info.get("collected", 0)), int(info.get("uncollectable", 0)))
    except Exception:  # noqa: BLE001 - never break a collection for an event
        pass


def gc_events(on, keep_cycles=False):
    """Adds (on) or removes the gc.callbacks entry that records the collector's runs, and with
    keep_cycles, the cycles holding CUDA tensors that each run freed (cycles.py)."""
    global _gc_on, _events_on, _cycles_on
    usable = _lib is not None and hasattr(_lib, "memsnap_gc_event")
    _events_on = bool(on) and usable
    _cycles_on = bool(keep_cycles) and usable
    if (_events_on or _cycles_on) and not _gc_on:
        gc.callbacks.append(_gc_callback)
        _gc_on = True
    elif not (_events_on or _cycles_on) and _gc_on:
        try:
            gc.callbacks.remove(_gc_callback)
        except ValueError:
            pass
        _gc_on = False


# ---- the hook --------------------------------------------------------------------------------

def _on_dump(path, _arg):
    try:
        seconds = float(_option("holders_time", "5"))
        if path and (seconds > 0 or _cycles_on):
            add_holders(os.fsdecode(path), seconds)
    except Exception:  # noqa: BLE001 - a snapshot without holders, never a broken program
        pass


def _at_exit():
    """Python's exit: the MEMSNAP_DUMP snapshot (with its holders) while Python can still walk,
    then no hook and no gc callback (the library's own exit handler runs after the interpreter)."""
    try:
        _lib.memsnap_dump_exit()
    finally:
        if hasattr(_lib, "memsnap_set_dump_hook"):
            _lib.memsnap_set_dump_hook(DUMP_HOOK(), None)  # NULL: none
        gc_events(False)


def install(lib):
    """Sets the dump hook and the gc callback (MEMSNAP_GC_EVENTS) for the library `lib`, and the
    exit dump; once. A library without the hook gets the exit dump alone."""
    global _lib, _hook
    if _lib is not None:
        return
    _lib = lib
    if hasattr(lib, "memsnap_set_dump_hook"):
        _hook = DUMP_HOOK(_on_dump)
        lib.memsnap_set_dump_hook(_hook, None)
    gc_events(_option("gc_events", "1") == "1", _option("gc_cycles", "0") == "1")
    atexit.register(_at_exit)


# ---- which blocks ----------------------------------------------------------------------------

def pick_blocks(db_path, deadline):
    """The blocks to walk from the snapshot at db_path: [(address, size, stack_id)], the sites
    that grew first (live bytes allocated in the history's second half), then by live bytes; the
    allocator's blocks only (external memory is no tensor's)."""
    c = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True)
    try:
        # not memory outside the allocator (pool 'external': cuBLAS's own cudaMalloc, a library's):
        # no tensor owns it, and no Python reference keeps it
        live = c.execute("SELECT b.address, b.size, coalesce(b.stack_id, 0) FROM blocks b LEFT JOIN segments g "
                         "ON g.id = b.segment_id WHERE b.state = 'allocated' AND coalesce(g.pool, '') != 'external'"
                         ).fetchall()
        if not live:
            return []
        by_address = {a: (a, s, k) for a, s, k in live}
        born = {}
        span = c.execute("SELECT min(time_ns), max(time_ns) FROM events").fetchone()
        if span and span[0] is not None and time.monotonic() < deadline:
            mid = (span[0] + span[1]) // 2
            for address, t in c.execute("SELECT address, time_ns FROM events WHERE kind = 1 AND time_ns >= ?", (mid,)):
                if address in by_address:
                    born[address] = t
    finally:
        c.close()
    sites = {}
    for a, s, k in live:
        e = sites.setdefault(k, [0, 0, []])
        e[0] += s
        if a in born:
            e[1] += s
        e[2].append((born.get(a, -1), s, a))
    order = sorted(sites.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))[:_MAX_SITES]
    out = []
    for stack_id, (_total, _grown, blocks) in order:
        blocks.sort(key=lambda b: (-b[0], -b[1]))  # the newest first, then the largest
        out += [(a, s, stack_id) for _t, s, a in blocks[:_PER_SITE]]
    return out


# ---- the walk --------------------------------------------------------------------------------

_CO_OPTIMIZED = 0x0001  # inspect.CO_OPTIMIZED: a function's code, whose locals live in the frame


def _frame_locals(frame):
    """[(name, value)] of a running function's frame, leaving it as it was. Before Python 3.13,
    frame.f_locals is a dict snapshot that the frame keeps (and with it its values, after the
    function has dropped them: a walk would make leaks of its own), so it is emptied again once
    read, unless a trace function runs (a tracer writes that dict back into the frame after each
    call: an emptied one would delete the function's locals); from 3.13 it is a view of the frame
    itself (PEP 667), read as is."""
    try:
        local = frame.f_locals
        items = list(local.items())
        traced = sys.gettrace() is not None or getattr(threading, "gettrace", lambda: None)() is not None
        if sys.version_info < (3, 13) and type(local) is dict and not traced:
            local.clear()
        return items
    except Exception:  # noqa: BLE001
        return []


class _Index:
    """The blocks by address: which one holds a pointer."""

    def __init__(self, blocks):
        self.blocks = sorted(blocks)
        self.starts = [b[0] for b in self.blocks]

    def find(self, ptr):
        i = bisect.bisect_right(self.starts, ptr) - 1
        if i >= 0 and ptr < self.blocks[i][0] + self.blocks[i][1]:
            return self.blocks[i][0]
        return None


def _storage_ptr(t):
    try:
        local = getattr(t, "_local_tensor", None)  # a DTensor
        if local is not None:
            t = local
        if hasattr(t, "untyped_storage"):
            return t.untyped_storage().data_ptr()
        return t.data_ptr()
    except Exception:  # noqa: BLE001 - a tensor without storage (meta, sparse)
        return None


def _nbytes(t):
    try:
        return int(t.numel() * t.element_size())
    except Exception:  # noqa: BLE001
        return int(getattr(t, "nbytes", 0) or 0)


def _where(code):
    return "%s (%s:%d)" % (code.co_name, os.path.basename(code.co_filename), code.co_firstlineno)


class _Walk:
    """One walk's state: the roots known before it starts, the objects it made (never holders)."""

    def __init__(self, deadline):
        self.deadline = deadline
        self.cut = False
        torch = sys.modules.get("torch")
        self.Tensor = getattr(torch, "Tensor", None)
        nn = getattr(torch, "nn", None)
        self.Module = getattr(nn, "Module", None)
        optim = getattr(torch, "optim", None)
        self.Optimizer = getattr(optim, "Optimizer", None)
        self.mine = set()  # ids of what the walk made: never a holder
        self.module_dicts = {}
        for name, m in list(sys.modules.items()):
            d = getattr(m, "__dict__", None)
            if isinstance(d, dict):
                self.module_dicts[id(d)] = (name, getattr(m, "__file__", None) or name)
        self.frame_roots = {}  # id(object) -> description: the running frames' locals
        self.keep = []         # what frame_roots' ids name, alive while the walk runs
        me = threading.get_ident()
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            f = frame
            while f is not None:
                code = f.f_code
                if code.co_filename != __file__ and code.co_flags & _CO_OPTIMIZED:  # a function's frame
                    thread = "" if ident == me else ", thread %s" % names.get(ident, ident)
                    for k, v in _frame_locals(f):
                        self.frame_roots.setdefault(id(v), "local `%s` of %s (%s:%d%s)" % (
                            k, code.co_name, os.path.basename(code.co_filename), f.f_lineno, thread))
                        self.keep.append(v)
                f = f.f_back
        # this frame is among them: a local naming it would keep it (and every frame below, with
        # their tensors) in a cycle until the collector's next run
        frame = f = None
        self.mine.add(id(self.keep))
        self.nodes = []  # the autograd nodes saved() met, alive while the walk runs
        self.mine.add(id(self.nodes))
        self.hook_dicts = {}   # id(dict) -> "forward hook of NAME"
        self.module_names = {}
        self.optimizers = set()
        self.type_names = {}   # id -> type name of what the climb met (a cycle's words)

    def scan(self, index):
        """Python's tracked objects once: the tensors by the block that holds them, modules named,
        hook dicts and optimizers noted. Returns {block address: [tensor...]}, [tensors with a grad_fn]."""
        found, graphs, modules = {}, [], []
        objects = gc.get_objects()
        self.mine.add(id(objects))
        Tensor, Module, Optimizer = self.Tensor, self.Module, self.Optimizer
        for i, obj in enumerate(objects):
            if i & 4095 == 0 and time.monotonic() > self.deadline:
                self.cut = True
                break
            if Tensor is not None and isinstance(obj, Tensor):
                ptr = _storage_ptr(obj)
                if ptr:
                    block = index.find(ptr)
                    if block is not None:
                        found.setdefault(block, []).append(obj)
                if getattr(obj, "grad_fn", None) is not None:
                    graphs.append(obj)
            elif Module is not None and isinstance(obj, Module):
                modules.append(obj)
            elif Optimizer is not None and isinstance(obj, Optimizer):
                self.optimizers.add(id(obj))
        del objects
        self._name_modules(modules)
        self.mine.update((id(found), id(graphs), id(modules)))
        self.mine.update(id(v) for v in found.values())
        return found, graphs

    def _name_modules(self, modules):
        children = set()
        for m in modules:
            for c in getattr(m, "_modules", {}).values():
                if c is not None:
                    children.add(id(c))
        for m in modules:
            if id(m) in children:
                continue
            try:
                for path, sub in m.named_modules():
                    self.module_names.setdefault(id(sub), type(m).__name__ + ("." + path if path else ""))
            except Exception:  # noqa: BLE001 - a module that cannot be walked
                self.module_names.setdefault(id(m), type(m).__name__)
        for m in modules:
            name = self.module_names.get(id(m), type(m).__name__)
            for attr in _HOOK_DICTS:
                d = getattr(m, "__dict__", {}).get(attr)
                if d:
                    self.hook_dicts[id(d)] = "%s of %s" % (_HOOK_NAMES[attr], name)

    def saved(self, graphs, index, wanted):
        """What the autograd graphs of the Python tensors `graphs` (those with a grad_fn) keep in the
        blocks `wanted`: the tensors their nodes saved for backward (`_saved_*`, a custom
        Function's saved_tensors, an AccumulateGrad's `variable`), which PyTorch holds from C++
        (SavedVariable), not from Python. One breadth-first walk down grad_fn -> next_functions for
        all of them: a node met again is not walked again; where a tensor's grad_fn was met inside
        an earlier tensor's graph, or an earlier tensor's grad_fn inside this one's, the graphs are
        joined (parent links), so that a block is told with the outermost tensor whose graph reaches
        it (the loss, rather than an activation inside its graph) and the nodes between.
        Returns {block: [(index into graphs, (node names from its grad_fn down), how it is saved,
        the saved tensor's bytes)]}, the outermost tensor first, a few a block."""
        parent, names, owner_of, hits = {}, {}, {}, {}
        nodes = self.nodes  # every node object met, alive while the walk runs: PyTorch makes a node's
        # Python object when it is asked for and frees it once unused, so an id would be reused
        attrs, Tensor, steps = {}, self.Tensor, 0

        def match(t, node_id, how):
            if Tensor is None or not isinstance(t, Tensor):
                return
            ptr = _storage_ptr(t)
            block = index.find(ptr) if ptr else None
            if block in wanted:
                found = hits.setdefault(block, [])
                if len(found) < 4:
                    found.append((node_id, how, _nbytes(t)))

        for i, owner in enumerate(graphs):
            try:
                top = owner.grad_fn
            except Exception:  # noqa: BLE001
                continue
            if top is None:
                continue
            nodes.append(top)
            owner_of.setdefault(id(top), []).append(i)
            if id(top) in parent:
                continue  # inside an earlier tensor's graph: walked with it
            parent[id(top)] = None
            names[id(top)] = _node_name(top)
            queue, head = [top], 0
            while head < len(queue):
                steps += 1
                if steps & 255 == 0 and time.monotonic() > self.deadline or steps > 500000:
                    self.cut = True
                    return self._owners(hits, parent, names, owner_of)
                node = queue[head]
                head += 1
                nid = id(node)
                kind = type(node)
                saved_names = attrs.get(kind)
                if saved_names is None:
                    try:
                        listed = dir(node)
                    except Exception:  # noqa: BLE001
                        listed = ()
                    saved_names = attrs[kind] = [a for a in listed if a.startswith("_saved_") or
                                                 a in ("saved_tensors", "variable")]
                for a in saved_names:
                    try:
                        v = getattr(node, a)
                    except Exception:  # noqa: BLE001 - freed by a backward, or not a tensor
                        continue
                    how = ("the leaf `variable` of %s" if a == "variable" else "saved tensors of %s"
                           if a == "saved_tensors" else "saved `" + a[7:] + "` of %s") % names[nid]
                    for t in (v if isinstance(v, (tuple, list)) else (v,)):
                        match(t, nid, how)
                    del v
                try:
                    edges = node.next_functions or ()
                except Exception:  # noqa: BLE001 - a node without edges
                    edges = ()
                for edge in edges:
                    nxt = edge[0] if isinstance(edge, tuple) else edge
                    if nxt is None:
                        continue
                    nodes.append(nxt)
                    xid = id(nxt)
                    if xid in parent:
                        if parent[xid] is None and xid != id(top) and xid in owner_of:
                            parent[xid] = nid  # an earlier tensor's graph is inside this one
                        continue
                    parent[xid] = nid
                    names[xid] = _node_name(nxt)
                    queue.append(nxt)
                del node, edges
        return self._owners(hits, parent, names, owner_of)

    @staticmethod
    def _owners(hits, parent, names, owner_of):
        """The tensors whose graphs reach each hit (walking up the parent links from the node that
        saved it), the outermost first, with the node names between: see saved()."""
        out = {}
        for block, found in hits.items():
            rows = []
            for node_id, how, nbytes in found:
                path, k, met = [], node_id, set()
                while k is not None and k not in met and len(met) < 100000:
                    met.add(k)
                    path.append((k, names.get(k, "?")))
                    k = parent.get(k)
                path.reverse()  # from the outermost grad_fn down to the node that saved it
                for j, (k, _name) in enumerate(path):
                    for i in owner_of.get(k, ()):
                        rows.append((i, tuple(n for _k, n in path[j:]), how, nbytes))
            seen, kept = set(), []
            for row in rows:
                if row[0] not in seen:
                    seen.add(row[0])
                    kept.append(row)
            out[block] = kept[:4]
        return out

    def _edge(self, child, parent):
        """How `parent` holds `child`, in words ("" when it cannot be said), and whether the parent
        is a root (its description then is the whole root)."""
        pid = id(parent)
        if pid in self.module_dicts:
            name, path = self.module_dicts[pid]
            for k, v in parent.items():
                if v is child:
                    return "global `%s` of %s" % (k, os.path.basename(path)), "global"
            return None, None
        if pid in self.hook_dicts:
            return self.hook_dicts[pid], "hook"
        if isinstance(parent, types.FrameType):
            if parent.f_code.co_filename == __file__:
                return None, None
            return "a frame of %s" % _where(parent.f_code), "local"
        if isinstance(parent, types.CellType):
            return _cell_name(parent), None
        if isinstance(parent, types.FunctionType):
            if child is parent.__closure__:
                return "", None  # the cell's step names the function
            return "function %s" % _where(parent.__code__), None
        if isinstance(parent, list):
            for i, v in enumerate(parent):
                if v is child:
                    return "list[%d]" % i, None
            return "list", None
        if isinstance(parent, tuple):
            return ("" if parent and all(isinstance(c, types.CellType) for c in parent) else "tuple"), None
        if isinstance(parent, dict):
            owner = self._dict_owner(parent)
            for k, v in parent.items():
                if v is child:
                    if owner is not None:  # an object's __dict__: its attribute
                        name = self.module_names.get(id(owner))
                        cls = type(owner).__name__
                        if id(owner) in self.optimizers:
                            return "%s of optimizer %s" % (k, cls), "optimizer"
                        if name:
                            return "attribute `%s` of %s (%s)" % (k, name, cls), "module"
                        return "attribute `%s` of %s" % (k, cls), None
                    return "dict[%s]" % _short(k), None
                if k is child:
                    return "dict key", None
            return "dict", None
        if isinstance(parent, (set, frozenset)):
            return "set", None
        d = getattr(parent, "__dict__", None)
        cls = type(parent).__name__
        if pid in self.module_names:  # a module of the model: its path says where (climbing past it
            for k, v in (d or {}).items():  # to the model's global would only add its parents)
                if v is child:
                    return "attribute `%s` of %s (%s)" % (k, self.module_names[pid], cls), "module"
            return "%s (%s)" % (self.module_names[pid], cls), "module"
        if pid in self.optimizers:
            return "state of optimizer %s" % cls, "optimizer"
        if d is child:
            return "", None  # the object's __dict__: its dict[...] step names the attribute
        if isinstance(d, dict):
            for k, v in d.items():
                if v is child:
                    owner = self.module_names.get(pid)
                    return "attribute `%s` of %s" % (k, owner + " (" + cls + ")" if owner else cls), None
        return cls, None

    def _dict_owner(self, d):
        """The object whose __dict__ `d` is, or None."""
        for o in gc.get_referrers(d):
            if id(o) not in self.mine and not isinstance(o, (dict, list, tuple, types.FrameType)):
                try:
                    if object.__getattribute__(o, "__dict__") is d:
                        return o
                except Exception:  # noqa: BLE001 - no __dict__
                    continue
        return None

    def climb(self, sources):
        """Walks up from every object of `sources` at once, one level a step: one gc.get_referrers
        call a level for the whole frontier (each call reads every tracked object, so a walk costs
        a few of them, not one per object met), each referrer's edges to the frontier named
        (_edge). Roots end a path (a rooted object is not climbed past); _MAX_DEPTH levels, at most
        _FRONTIER objects a level (the rest unexplored), within the deadline. Returns (up, roots):
        up[id] = [(id of a holder, how it holds it)], roots[id] = [(kind, root text)]."""
        up, roots, seen = {}, {}, set()
        self.mine.update((id(up), id(roots), id(seen)))
        frontier = []
        for obj in sources:
            if id(obj) not in seen:
                seen.add(id(obj))
                frontier.append(obj)
        self.mine.add(id(frontier))
        for _depth in range(_MAX_DEPTH):
            if not frontier:
                break
            if time.monotonic() > self.deadline:
                self.cut = True
                break
            ids = {}
            for obj in frontier:
                ids[id(obj)] = obj
                if id(obj) in self.frame_roots:
                    roots.setdefault(id(obj), []).append(("local", self.frame_roots[id(obj)]))
            self.mine.add(id(ids))
            referrers = gc.get_referrers(*frontier)
            self.mine.add(id(referrers))
            nxt = []
            self.mine.add(id(nxt))
            for r in referrers:
                rid = id(r)
                if rid in self.mine:
                    continue
                if isinstance(r, types.FrameType) and r.f_code.co_filename == __file__:
                    continue
                for child in gc.get_referents(r):
                    cid = id(child)
                    if ids.get(cid) is not child or cid == rid:
                        continue
                    text, root = self._edge(child, r)
                    if text is None:
                        continue
                    if root:
                        roots.setdefault(cid, []).append((root, text))
                        continue
                    up.setdefault(cid, []).append((rid, text))
                    if rid not in seen:
                        seen.add(rid)
                        self.type_names[rid] = type(r).__name__
                        if len(nxt) < _FRONTIER:
                            nxt.append(r)
                        else:
                            self.cut = True
            del referrers
            # a rooted object is not climbed past: its root is the answer for what it holds
            frontier = [o for o in nxt if id(o) not in roots]
            self.keep.extend(frontier)  # alive while ids name them
            self.mine.add(id(frontier))
        return up, roots

    def chains(self, tensor, up, roots):
        """Up to _MAX_CHAINS chains from a root down to `tensor` through the climbed graph, the
        shortest first: [(root kind, [root text, ..., holder of the tensor])]; none found, the
        climb finished and a path met itself: [("cycle", [...])]."""
        out, start = [], id(tensor)
        parent = {start: None}
        queue, head, looped = [start], 0, False
        while head < len(queue) and len(out) < _MAX_CHAINS:
            key = queue[head]
            head += 1
            for kind, text in roots.get(key, ()):
                out.append((kind, _chain(text, parent, key)))
                if len(out) >= _MAX_CHAINS:
                    break
            for rid, text in up.get(key, ()):
                if rid in parent:
                    looped = True
                    continue
                parent[rid] = (key, text)
                queue.append(rid)
        if not out and looped and not self.cut:
            kinds = sorted({self.type_names.get(k, "?") for k in parent if k != start} - {"dict", "list", "tuple", "cell", "?"})
            steps = [s for s in _chain(None, parent, queue[1]) if s] if len(queue) > 1 else []
            out.append(("cycle", ["a reference cycle of %s objects that only the garbage collector frees"
                                  % ", ".join(kinds or ["container"])] + steps[-1:]))
        return out


def _cell_name(cell):
    """"closure variable `x` of f (file:line)" for a closure's cell (its function found through
    the __closure__ tuple that holds it)."""
    for t in gc.get_referrers(cell):
        if isinstance(t, tuple):
            for fn in gc.get_referrers(t):
                if isinstance(fn, types.FunctionType) and fn.__closure__ is t:
                    for name, c in zip(fn.__code__.co_freevars, t):
                        if c is cell:
                            return "closure variable `%s` of %s" % (name, _where(fn.__code__))
    return "closure variable"


def _short(k):
    text = repr(k)
    if text.startswith("<"):  # an object's default repr: its type says enough
        return "<%s>" % type(k).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _chain(root_text, parent, key):
    """The chain from the root down to the tensor: root_text, then how each object met on the way
    up from the tensor holds the one below it, from `key` down. parent[k] = (id below, how k holds it)."""
    steps = []
    k = key
    while k is not None:
        edge = parent.get(k)
        if edge is None:
            break
        steps.append(edge[1])
        k = edge[0]
    return ([root_text] if root_text else []) + steps


def walk(db_path, seconds):
    """The holders of the blocks pick_blocks chooses in the snapshot at db_path, within `seconds`:
    (rows, meta). rows: (stack_id, address, size, tensor bytes, rank, root kind, chain text)."""
    start = time.monotonic()
    deadline = start + seconds
    was_enabled = gc.isenabled()
    gc.disable()
    rows = []
    w = None
    try:
        blocks = pick_blocks(db_path, deadline)
        w = _Walk(deadline)
        index = _Index(blocks)
        found, graphs = w.scan(index) if blocks else ({}, [])
        # every block, those with a Python tensor too: PyTorch keeps the Python object of a tensor
        # its graph saved (an activation a module returned) alive from C++ once Python drops it, so
        # a tensor found may have no Python referrer, and its graph's outer tensor is the answer
        wanted = {b[0] for b in blocks}
        saved = w.saved(graphs, index, wanted) if wanted and not w.cut else {}
        w.mine.add(id(saved))
        w.mine.update(id(n) for n in w.nodes)  # never a holder: the walk made them
        sources = []
        for address, _size, _stack in blocks:
            sources.extend(found.get(address, [])[:2])
            sources.extend(graphs[row[0]] for row in saved.get(address, [])[:2])
        w.mine.add(id(sources))
        up, roots = w.climb(sources)
        del sources
        walked = 0
        for address, size, stack_id in blocks:
            walked += 1
            chains = []
            tensors = found.get(address, [])
            for i in range(min(2, len(tensors))):
                t = tensors[i]
                for root, steps in w.chains(t, up, roots):
                    chains.append((root, steps + ["tensor %s" % _shape(t)], _nbytes(t)))
                if len(chains) >= _MAX_CHAINS:
                    break
            if not chains:  # no Python referrer: what the graphs that reach it hang from
                for owner_index, path, how, nbytes in saved.get(address, [])[:2]:
                    owner = graphs[owner_index]
                    for root, steps in w.chains(owner, up, roots):
                        if root == "cycle":
                            continue
                        chains.append(("autograd", steps + ["tensor %s" % _shape(owner),
                                                            "through its autograd graph (grad_fn %s)" % _path_text(path),
                                                            how], nbytes))
                    del owner
                    if chains:  # the outermost tensor that a root holds: the ones inside its graph add nothing
                        break
            if not chains:
                what = ("%d tensor(s), no root found%s" % (len(tensors), _kept_by(saved, address)) if tensors else
                        "no Python tensor: held from C++ (an autograd graph no Python tensor keeps, a "
                        "cache, an extension) or by a tensor made since%s" % _kept_by(saved, address))
                chains.append(("none", [what], 0))
            for rank, (root, steps, nbytes) in enumerate(chains[:_MAX_CHAINS]):
                rows.append((stack_id, address, size, nbytes, rank, root, " -> ".join(s for s in steps if s)))
        meta = {"holders_ms": int((time.monotonic() - start) * 1000), "holders_cut": 1 if w.cut else 0,
                "holders_blocks": walked, "holders_picked": len(blocks)}
    finally:
        if w is not None:
            w.keep = w.nodes = None
        if was_enabled:
            gc.enable()
    return rows, meta


def _shape(t):
    try:
        return "%s %s" % (tuple(t.shape), str(t.dtype).replace("torch.", ""))
    except Exception:  # noqa: BLE001
        return "of %d bytes" % _nbytes(t)


def _node_name(node):
    try:
        return str(node.name())
    except Exception:  # noqa: BLE001 - a node without name()
        return type(node).__name__


def _path_text(names):
    """The nodes from a tensor's grad_fn down to the one that saved a block, the middle elided."""
    if len(names) <= 4:
        return " -> ".join(names)
    return "%s -> %s -> ... -> %s (%d nodes down)" % (names[0], names[1], names[-1], len(names) - 1)


def _kept_by(saved, address):
    """"; in the autograd graph of a tensor no root holds (grad_fn X)" where a graph reaches the
    block but no chain was found from its tensor, else ""."""
    rows = saved.get(address)
    if not rows:
        return ""
    return "; saved in the autograd graph of a tensor no root was found for (grad_fn %s)" % _path_text(rows[0][1])


def add_holders(db_path, seconds):
    """Walks (seconds > 0) and writes the holders table (and its meta keys) into the snapshot at
    db_path, and with MEMSNAP_GC_CYCLES the cycles kept so far (the gc_cycles table: cycles.py)."""
    rows, meta = [], {}
    if seconds > 0:
        with warnings.catch_warnings():  # the walk's isinstance and getattr on every object: a deprecated
            warnings.simplefilter("ignore")  # module attribute warns (torch.distributed.reduce_op), not the program's
            rows, meta = walk(db_path, seconds)
    c = sqlite3.connect(db_path)
    try:
        with c:
            if seconds > 0:
                c.execute(HOLDERS_SQL)
                c.execute("DELETE FROM holders")
                c.executemany("INSERT INTO holders(stack_id, address, size, tensor_bytes, rank, root, holder) "
                              "VALUES(?,?,?,?,?,?,?)", rows)
                c.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", sorted(meta.items()))
            if _cycles_on:
                cycles.write(c)
    finally:
        c.close()
    return rows, meta
