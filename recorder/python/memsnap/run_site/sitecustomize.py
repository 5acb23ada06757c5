"""sitecustomize for `memsnap run`: records an unchanged Python program.

`memsnap run` puts this directory first on PYTHONPATH, so Python imports this module at start-up
(and every Python process the program starts: workers, torchrun's ranks). It does nothing unless
MEMSNAP_RUN_MODE says what to do (``allocator+intercept``, the default for Python, does both;
``audit`` is ``intercept`` with the library loaded through LD_AUDIT):

* ``allocator``: when the program imports torch, memsnap becomes PyTorch's allocator
  (memsnap.enable()) before anything can touch CUDA; when it imports CuPy, CuPy's allocator too
  (memsnap.cupy.enable(); MEMSNAP_RUN_CUPY, unset by --keep-arena); recording is on from the
  first allocation (MEMSNAP_RECORD=1, which `memsnap run` sets) and the snapshot is written from
  Python's exit (MEMSNAP_DUMP).
* ``intercept`` (the LD_PRELOAD library records): the snapshot is written from Python's exit,
  while tensors are alive and Python frames can be named, not from the C library's exit. The
  library sees PyTorch's segments, not the tensors inside them: when the program imports torch,
  PyTorch's recorder also runs as in ``torch-native`` and its snapshot goes to
  MEMSNAP_RUN_TORCH_BLOCKS (`memsnap run` sets it unless --no-torch-blocks), so a leak of
  tensors is named there.
* ``torch-native``: PyTorch's allocator stays; when the program imports torch, PyTorch's own
  recorder starts (torch.cuda.memory._record_memory_history) and at exit, on the dump signal and
  at the first out-of-memory, PyTorch's snapshot is written as a pickle that `memsnap run` then
  imports (memsnap import) into the snapshot the user asked for, with each device's memory as
  torch says it (the pickle has none; the replay needs it).

In both modes os._exit() writes the snapshot first (exit handlers do not run there). Wherever the
interposer records, a process that imports JAX tells `memsnap run` which allocator XLA has (it
sets XLA_PYTHON_CLIENT_ALLOCATOR=platform, so that each array is a cuMemAlloc the interposer
sees, unless --keep-arena). Then the program's own sitecustomize, if it has one further down the
path, is imported as usual.
"""
import os
import sys

_mode = os.environ.get("MEMSNAP_RUN_MODE", "")


def _note(kind, *paths):
    """Tells `memsnap run` about a file written (MEMSNAP_RUN_MANIFEST, one line per file)."""
    _tell(kind, *(os.path.abspath(p) for p in paths))


def _tell(kind, *fields):
    """Appends a line of tab-separated fields to `memsnap run`'s manifest (MEMSNAP_RUN_MANIFEST),
    only into a regular file of this user's, opened without following a link (as the library
    does: docs/RELIABILITY.md); anything else there is left alone."""
    manifest = os.environ.get("MEMSNAP_RUN_MANIFEST")
    if manifest:
        import stat
        line = "\t".join((kind,) + fields) + "\n"
        try:
            fd = os.open(manifest, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.write(fd, line.encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)


def _expand(pattern):
    """The snapshot path's patterns, as the library expands them: %p %r %h %t %%."""
    import socket
    import time
    rank = "0"
    for var in ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        value = os.environ.get(var, "")
        if value.isdigit():
            rank = value
            break
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern):
            i += 1
            c = pattern[i]
            out.append({"p": str(os.getpid()), "r": rank, "h": socket.gethostname(), "t": str(int(time.time())),
                        "%": "%"}.get(c, "%" + c))
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _after_import(name, action):
    """Runs action(module) right after `name` is first imported (now, if it already is)."""
    if name in sys.modules:
        action(sys.modules[name])
        return
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_then_act(module):
                exec_module(module)
                action(module)
            spec.loader.exec_module = exec_then_act
            return spec

    sys.meta_path.insert(0, Finder())


def _wrap_os_exit(dump):
    """os._exit writes the snapshot first. In a forked child dump() decides: the library writes
    a child's own recording (the parent had not started it) and never the parent's."""
    real_exit = os._exit

    def _exit(code):
        try:
            dump()
        except Exception as e:  # the exit goes on whatever happens
            print("memsnap: error: snapshot at os._exit: %s" % e, file=sys.stderr)
        real_exit(code)
    os._exit = _exit


def _allocator_mode():
    def enable(torch):
        import memsnap
        try:
            memsnap.enable()
        except RuntimeError as e:
            also = " (the interposer records PyTorch's segments)" if _mode == "allocator+intercept" else ""
            print("memsnap: warning: %s; this process is not recorded by memsnap's allocator%s" % (e, also),
                  file=sys.stderr)
    _after_import("torch", enable)

    def enable_cupy(cupy):
        """CuPy's arrays from memsnap's allocator, each with its stack (memsnap.cupy): without it
        only CuPy's pool growing is seen. MEMSNAP_RUN_CUPY is unset with --keep-arena."""
        import memsnap.cupy
        try:
            memsnap.cupy.enable()
            _tell("cupy", str(os.getpid()))
        except Exception as e:  # noqa: BLE001 - never the program's failure
            print("memsnap: warning: CuPy keeps its own pool (%s); its arrays are seen as its pool's segments" % e,
                  file=sys.stderr)
    if os.environ.get("MEMSNAP_RUN_CUPY") == "1":
        _after_import("cupy", enable_cupy)

    def dump():
        import memsnap
        if memsnap._lib is not None:
            memsnap._lib.memsnap_dump_exit()
    _wrap_os_exit(dump)


class _TorchNative:
    """PyTorch's recorder on, its snapshot pickled at exit and imported by `memsnap run`."""

    def __init__(self):
        self.torch = None
        self.written = False
        self.oom_written = False
        self.pid = os.getpid()

    def start(self, torch):
        self.torch = torch
        # PyTorch symbolizes C++ frames when it dumps, which takes minutes for a long history:
        # Python stacks unless --stacks asks for more
        stacks = os.environ.get("MEMSNAP_STACKS", "python")
        entries = int(os.environ.get("MEMSNAP_MAX_ENTRIES", "100000") or 100000)
        kwargs = {"max_entries": entries}
        if stacks == "none":
            kwargs["stacks"] = "python"
            kwargs["context"] = None
        else:
            kwargs["stacks"] = "python" if stacks == "python" else "all"
        torch.cuda.memory._record_memory_history(**kwargs)
        oom_path = os.environ.get("MEMSNAP_RUN_DUMP_ON_OOM")
        if oom_path and hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
            def on_oom(device, alloc, device_allocated, device_free):
                if not self.oom_written:  # the first out-of-memory, as MEMSNAP_DUMP_ON_OOM
                    self.oom_written = True
                    self.write(oom_path, once=False)
            torch._C._cuda_attach_out_of_memory_observer(on_oom)

    def write(self, pattern, once=True):
        if self.torch is None or os.getpid() != self.pid or (once and self.written):
            return
        if not self.torch.cuda.is_initialized():
            return  # used no device (torchrun's launcher): no snapshot, none overwritten (%r)
        if once:
            self.written = True
        db = _expand(pattern)
        pickle_path = "%s.torch-%d.pickle" % (db, os.getpid())
        self.torch.cuda.memory._dump_snapshot(pickle_path)
        _tell("pickle", os.path.abspath(pickle_path), os.path.abspath(db), self.device_totals())

    def device_totals(self):
        """Each device's memory as torch says it ("TOTAL0,TOTAL1,..."), which PyTorch's pickle
        does not hold: the import puts it in the snapshot, the replay's capacity."""
        try:
            cuda = self.torch.cuda
            return ",".join(str(int(cuda.get_device_properties(i).total_memory)) for i in range(cuda.device_count()))
        except Exception:  # a torch without them: imported without
            return ""


def _torch_native_mode(dump_path):
    rec = _TorchNative()
    _after_import("torch", rec.start)
    import atexit
    atexit.register(lambda: rec.write(dump_path))
    signame = os.environ.get("MEMSNAP_RUN_SIGNAL")
    if signame:
        import signal
        signum = int(signame) if signame.isdigit() else getattr(signal, "SIG" + signame.upper().removeprefix("SIG"))
        signal.signal(signum, lambda s, f: rec.write(dump_path, once=False))
    _wrap_os_exit(lambda: rec.write(dump_path))


def _chain():
    """Imports the next sitecustomize on the path, the one this module hides."""
    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.pop("sitecustomize")
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import importlib
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = saved
        sys.modules.setdefault("sitecustomize", me)  # none further down: this module stays


def _intercept_mode():
    """The intercept library dumps from the C library's exit, after Python has finalized (tensors
    collected, frames no longer nameable): dump from Python's exit instead, last of its exit
    handlers (registered first). memsnap_dump_exit() does nothing unless something was recorded."""
    import atexit

    def dump():
        import memsnap
        memsnap.load().memsnap_dump_exit()
    atexit.register(dump)
    # os._exit is the intercept library's own (_exit): it writes the snapshot there


def _note_xla(jax):
    """Tells `memsnap run` which allocator XLA has in this process (read when its backend starts),
    and whether `memsnap run` chose it."""
    ours = os.environ.get("MEMSNAP_RUN_XLA_ALLOCATOR")
    allocator = os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default")
    _tell("xla", str(os.getpid()), allocator, "1" if ours and ours == allocator else "0")


if _mode in ("allocator", "allocator+intercept"):
    _allocator_mode()
elif _mode == "torch-native":
    _torch_native_mode(os.environ.get("MEMSNAP_RUN_DUMP", "memsnap-%p.db"))
if _mode in ("intercept", "allocator+intercept", "audit"):
    _intercept_mode()  # first: its exit handler runs last
    _after_import("jax", _note_xla)
if _mode in ("intercept", "audit") and os.environ.get("MEMSNAP_RUN_TORCH_BLOCKS"):
    _torch_native_mode(os.environ["MEMSNAP_RUN_TORCH_BLOCKS"])
_chain()
