"""test_python.py: the memsnap Python module without PyTorch, on the simulated device.

Prints "ok NAME" / "FAIL NAME" per check and "N passed, N failed" at the end.
"""
import json
import os
import subprocess
import sys

os.environ["MEMSNAP_BACKEND"] = "sim"
os.environ["MEMSNAP_SIM_CAPACITY"] = "256M"

import memsnap  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402


check("module: loads the library and starts the sim backend", memsnap.backend() == "sim")
check("module: one simulated device", memsnap.device_count() == 1)

a = memsnap.malloc(1000)
b = memsnap.malloc(3 << 20, stream=0x10)
flat = memsnap.memory_stats()
check("memory_stats: flat keys in torch spelling and sorted order",
      list(flat) == sorted(flat) and flat["allocated_bytes.all.current"] == 1024 + (3 << 20))
check("memory_stats: requested bytes", flat["requested_bytes.all.current"] == 1000 + (3 << 20))
nested = memsnap.memory_stats_as_nested_dict()
check("nested stats: torch's shape",
      nested["reserved_bytes"]["small_pool"]["current"] == 2 << 20 and
      nested["reserved_bytes"]["large_pool"]["current"] == 20 << 20 and
      nested["num_ooms"] == 0 and nested["max_split_size"] == -1 and
      set(nested["oversize_allocations"]) == {"current", "peak", "allocated", "freed"})
check("nested stats: every key PyTorch's memory_summary() reads",
      all(k in nested for k in ["allocation", "segment", "active", "inactive_split", "allocated_bytes",
                                "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes",
                                "num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
                                "num_device_free", "oversize_allocations", "oversize_segments"]))
memsnap.free(b)
memsnap.reset_peak_stats()
check("reset_peak_stats: peak drops to current", memsnap.memory_stats()["allocated_bytes.all.peak"] == 1024)
memsnap.reset_accumulated_stats()
check("reset_accumulated_stats: counters zeroed", memsnap.memory_stats()["num_device_alloc"] == 0)

try:
    memsnap.malloc(1 << 30)
    check("out of memory raises MemoryError", False)
except MemoryError as e:
    check("out of memory raises MemoryError with the message", "CUDA out of memory" in str(e))
check("out of memory counted", memsnap.memory_stats()["num_ooms"] == 1)

try:
    memsnap.free(12345 * 512)
    check("foreign free raises MemsnapError", False)
except memsnap.MemsnapError as e:
    check("foreign free raises MemsnapError", "did not allocate" in str(e))
check("foreign free counted as an invalid free", memsnap.memory_stats()["num_invalid_frees"] == 1)

p = memsnap.malloc(4 << 20, stream=0x10)
memsnap.record_stream(p, 0x20)
memsnap.free(p)
q = memsnap.malloc(4 << 20, stream=0x10)
memsnap.sim_synchronize(0x20)
r = memsnap.malloc(4 << 20, stream=0x10)
check("record_stream: reuse only after the other stream's work completed", q != p and r == p)
memsnap.free(q)
memsnap.free(r)
memsnap.free(a)
memsnap.check()
memsnap.empty_cache()
check("empty_cache: nothing reserved", memsnap.memory_stats()["reserved_bytes.all.current"] == 0)

opts = memsnap.options()
check("options: the table with defaults", opts[0][0] == "MEMSNAP_BACKEND" and
      any(o[0] == "MEMSNAP_MAX_SPLIT_SIZE_MB" for o in opts))
memsnap.set_option("MEMSNAP_OOM", "abort")
try:
    memsnap.set_option("max_split_size_mb", "64")
    check("set_option: init-only options refused", False)
except memsnap.MemsnapError as e:
    check("set_option: init-only options refused", "read only at initialisation" in str(e))
memsnap.set_option("oom", "null")

# Recording from Python: Python frames in the stacks, marks, ranges, a readable snapshot.
import ctypes  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402


def load_the_model_weights():
    return memsnap.malloc(3 << 20)


def forward_pass():
    with memsnap.range("forward"):
        return memsnap.malloc(1 << 20)


with memsnap.record(stacks="all"):
    weights = load_the_model_weights()
    for step in range(2):
        memsnap.mark("step")
        memsnap.free(forward_pass())
snap = os.path.join(tempfile.mkdtemp(), "py-%p.db")
written = memsnap.dump(snap).replace("%p", str(os.getpid()))
db = sqlite3.connect(written)
rows = db.execute("""select f.kind, f.name, f.file, f.line from blocks b
                     join stack_frames sf on sf.stack_id = b.stack_id join frames f on f.id = sf.frame_id
                     where b.state = 'allocated' order by sf.position""").fetchall()
names = [r[1] for r in rows if r[0] == "python"]
check("python frames: the allocating Python functions, innermost first",
      names[:3] == ["malloc", "load_the_model_weights", "<module>"] and
      any(r[2].endswith("test_python.py") and r[3] > 0 for r in rows if r[1] == "load_the_model_weights"))
check("python frames: merged where the interpreter was (no _PyEval_EvalFrameDefault)",
      not any("_PyEval_EvalFrame" in r[1] for r in rows) and rows[0][0] == "native")
check("python: marks and ranges recorded",
      db.execute("select count(*) from marks").fetchone()[0] == 2 and
      db.execute("select count(*) from ranges r join labels l on l.id = r.label_id where l.text = 'forward'").fetchone()[0] == 2)
db.close()
memsnap.free(weights)

# A call that released the GIL (PyTorch's bindings release it around ATen; ctypes.CDLL does
# too) still gets its Python frames: the recorder takes the GIL back to read them.
cdll = ctypes.CDLL(memsnap.library_path())
cdll.memsnap_malloc.restype = ctypes.c_void_p
cdll.memsnap_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]


def allocate_without_the_gil():
    return cdll.memsnap_malloc(4096, 0, None)


with memsnap.record(stacks="all"):
    nogil = allocate_without_the_gil()
written = memsnap.dump(snap).replace("%p", str(os.getpid()))
db = sqlite3.connect(written)
names = [r[0] for r in db.execute("""select f.name from blocks b join stack_frames sf on sf.stack_id = b.stack_id
    join frames f on f.id = sf.frame_id where b.state = 'allocated' and f.kind = 'python' order by sf.position""")]
check("python frames: also when the call released the GIL", names[:2] == ["allocate_without_the_gil", "<module>"])
db.close()
# The report starts that stack at the Python line: ctypes, libffi and the interpreter's frames
# between it and the allocator (_PyObject_MakeTpCall, unnamed ones) are folded.
cli = os.path.join(os.path.dirname(os.path.abspath(memsnap.library_path())), "memsnap")
report = json.loads(subprocess.run([cli, "analyze", "--json", written], capture_output=True, check=True).stdout)
leak = [lk for lk in report["leaks"] + report["held"] if lk["live_bytes"] == 4096][0]
check("report: interpreter and ctypes frames folded between the allocation and the Python line",
      [f["name"] for f in leak["stack"]][:2] == ["allocate_without_the_gil", "<module>"] and
      all(f["kind"] == "python" for f in leak["stack"]) and
      any(f["kind"] == "native" and f["module"] for f in leak["full_stack"]))
memsnap.free(nogil)
# MEMSNAP_DUMP at exit from a Python program: written while Python frames can still be named.
exit_db = os.path.join(tempfile.mkdtemp(), "exit.db")
code = "import memsnap\ndef leaky_function():\n    return memsnap.malloc(4096)\nkept = leaky_function()\n"
proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, MEMSNAP_DUMP=exit_db, MEMSNAP_RECORD="1"))
names = []
if proc.returncode == 0 and os.path.exists(exit_db):
    names = [r[0] for r in sqlite3.connect(exit_db).execute("select name from frames where kind = 'python'")]
check("dump at exit: Python frames named (written before the interpreter ends)", "leaky_function" in names)

try:
    memsnap.range_pop()
    check("python: range_pop without push raises", False)
except memsnap.MemsnapError:
    check("python: range_pop without push raises", True)

try:
    import torch  # noqa: F401
    have_torch = True
except ImportError:
    have_torch = False
if not have_torch:
    try:
        memsnap.enable()
        check("enable without torch: clear ImportError", False)
    except ImportError as e:
        check("enable without torch: clear ImportError", "needs PyTorch" in str(e))

finish()
