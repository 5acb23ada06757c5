"""test_libs.py: CuPy and Numba allocating from memsnap's pool (memsnap.cupy, memsnap.numba),
against stand-ins for CuPy and Numba on the simulated device.

The stand-ins (written to a temporary directory put first on sys.path) have just what the two
plugins touch: CuPy's set_allocator, Device, get_current_stream, UnownedMemory, MemoryPointer and
OutOfMemoryError; Numba's EMM base classes, MemoryPointer with its finalizer, MemoryInfo and the
driver's cuMemGetInfo. The checks: allocations come from memsnap (its statistics move), memory
goes back when the library drops it, an out-of-memory is the library's own error, and a snapshot
names the library's allocation function in each block's stack.
"""
import gc
import os
import sqlite3
import sys
import tempfile
import textwrap

os.environ["MEMSNAP_BACKEND"] = "sim"
os.environ["MEMSNAP_SIM_CAPACITY"] = "64M"

FAKE_NUMBA_CUDA = textwrap.dedent('''
    import collections
    MemoryInfo = collections.namedtuple("MemoryInfo", "free total")
    class HostOnlyCUDAMemoryManager:
        def __init__(self, context):
            self.context = context
        def initialize(self):
            pass
        def reset(self):
            pass
    class GetIpcHandleMixin:
        pass
    class MemoryPointer:
        def __init__(self, context, pointer, size, finalizer=None, owner=None):
            self.context, self.device_pointer, self.size, self.finalizer = context, pointer, size, finalizer
''')
FAKE_NUMBA_DRIVER = textwrap.dedent('''
    class _Driver:
        def cuMemGetInfo(self):
            return (1 << 30, 2 << 30)
    driver = _Driver()
''')

tmp = tempfile.mkdtemp()
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "fake_cupy", "cupy", "__init__.py")) as f:
    FAKE_CUPY = f.read()  # the stand-in `memsnap run`'s tests use too
files = {"cupy/__init__.py": FAKE_CUPY, "numba/__init__.py": "", "numba/core/__init__.py": "",
         "numba/core/config.py": "CUDA_USE_NVIDIA_BINDING = False\n", "numba/cuda/__init__.py": FAKE_NUMBA_CUDA,
         "numba/cuda/cudadrv/__init__.py": "", "numba/cuda/cudadrv/driver.py": FAKE_NUMBA_DRIVER}
for name, text in files.items():
    os.makedirs(os.path.join(tmp, os.path.dirname(name)), exist_ok=True)
    with open(os.path.join(tmp, name), "w") as f:
        f.write(text)
sys.path.insert(0, tmp)

import cupy  # noqa: E402  (the stand-in)
import memsnap  # noqa: E402
import memsnap.cupy  # noqa: E402
import memsnap.numba  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402


def allocated():
    return memsnap.memory_stats(0)["allocated_bytes.all.current"]


memsnap.record(stacks="python")
fn = memsnap.cupy.enable()
check("cupy: enable() installs memsnap's allocator", cupy.installed == [fn])
check("cupy: enable() twice returns the same allocator", memsnap.cupy.enable() is fn)


def make_cupy_array(nbytes):  # what CuPy does for cupy.empty: call the installed allocator
    return cupy.installed[-1](nbytes)


before = allocated()
arr = make_cupy_array(3 << 20)
check("cupy: the array's memory comes from memsnap", allocated() - before == 3 << 20 and arr.ptr != 0,
      (before, allocated()))
kept_cupy = make_cupy_array(1 << 20)
del arr
gc.collect()
check("cupy: dropping the array gives the memory back to memsnap", allocated() - before == 1 << 20)
try:
    make_cupy_array(1 << 30)
    check("cupy: an out-of-memory raises CuPy's OutOfMemoryError", False)
except cupy.cuda.memory.OutOfMemoryError:
    check("cupy: an out-of-memory raises CuPy's OutOfMemoryError", True)


class Context:
    device = type("Device", (), {"id": 0})()


manager = memsnap.numba._numba_memory_manager(Context())
check("numba: the module names its EMM plugin (NUMBA_CUDA_MEMORY_MANAGER=memsnap.numba)",
      manager.interface_version == 1 and isinstance(manager, memsnap.numba.MemsnapMemoryManager))
manager.initialize()
before = allocated()
mp = manager.memalloc(2 << 20)
kept_numba = manager.memalloc(512 << 10)
check("numba: memalloc comes from memsnap", allocated() - before == (2 << 20) + (512 << 10) and mp.device_pointer.value)
mp.finalizer()
check("numba: the finalizer gives the memory back", allocated() - before == 512 << 10)
check("numba: memory info is the driver's", tuple(manager.get_memory_info()) == (1 << 30, 2 << 30))

path = os.path.join(tmp, "libs.db")
memsnap.dump(path)
db = sqlite3.connect(path)
names = {r[0] for r in db.execute("select f.name from blocks b join stack_frames s on s.stack_id = b.stack_id "
                                   "join frames f on f.id = s.frame_id where b.state = 'allocated'")}
check("one snapshot: CuPy's and Numba's live blocks, each under its library's allocation function",
      {"cupy_allocation", "numba_allocation"} <= names, sorted(names))
finish()
