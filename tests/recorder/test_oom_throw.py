"""test_oom_throw.py: out of memory raises the registered Python exception through C++ frames,
and any other failure raises RuntimeError the same way (never an abort).

The path PyTorch takes, without PyTorch: memsnap.enable() registers torch.OutOfMemoryError and
sets MEMSNAP_OOM=throw; memsnap_malloc then throws a C++ `python_error`, which unwinds through
memsnap's C frames into the host's catch block (PyTorch's HANDLE_TH_ERRORS; here
build/tests/liboom_catcher.so, loaded like an extension module), which restores it.
"""
import ctypes
import os
import sys

os.environ["MEMSNAP_BACKEND"] = "sim"
os.environ["MEMSNAP_SIM_CAPACITY"] = "64M"
import memsnap  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402


class OutOfMemoryError(RuntimeError):
    """Stands in for torch.OutOfMemoryError."""


lib = memsnap.load()


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


# dlsym on the library's handle searches its own dependency scope in load order, as its calls
# do when ctypes or Python's import loaded it RTLD_LOCAL (PyTorch's case): _Unwind_Resume must
# come from libgcc_s, not from libunwind (which exports one too; mixing them aborts).
info = DlInfo()
ctypes.CDLL(None).dladdr(ctypes.cast(lib._Unwind_Resume, ctypes.c_void_p), ctypes.byref(info))
check("unwinder: _Unwind_Resume in the library's scope is libgcc_s's (%s)" % info.dli_fname.decode(),
      b"libgcc_s" in info.dli_fname)
lib.memsnap_set_python_oom_error(id(OutOfMemoryError))  # borrowed; the class lives on
memsnap.set_option("oom", "throw")
catcher = ctypes.PyDLL(os.path.join(os.path.dirname(os.environ["MEMSNAP_LIB"]), "tests", "liboom_catcher.so"))
catcher.catcher_alloc.argtypes = [ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p)]
catcher.catcher_alloc.restype = ctypes.c_int

ptr = ctypes.c_void_p()
check("throw mode: a normal allocation returns a pointer", catcher.catcher_alloc(1 << 20, ctypes.byref(ptr)) == 0 and ptr.value)
try:
    catcher.catcher_alloc(1 << 30, ctypes.byref(ptr))
    check("out of memory raises the registered exception", False)
except OutOfMemoryError as e:
    check("out of memory raises the registered exception", "CUDA out of memory. Tried to allocate 1.00 GiB" in str(e))
check("the allocator counted the OOM and stays usable",
      memsnap.memory_stats()["num_ooms"] == 1 and catcher.catcher_alloc(1 << 20, ctypes.byref(ptr)) == 0)
memsnap.check()
lib.memsnap_set_python_oom_error(None)
check("without a registered type a std::exception is thrown",
      catcher.catcher_alloc(1 << 30, ctypes.byref(ptr)) == 2)

# A failure that is not out of memory (here the simulated driver refuses an expandable segment's
# address space) raises Python's RuntimeError through the same path: never an abort.
memsnap.shutdown()
os.environ.update(MEMSNAP_SIM_CAPACITY="15T", MEMSNAP_EXPANDABLE_SEGMENTS="1", MEMSNAP_OOM="throw")
lib.memsnap_set_python_oom_error(id(OutOfMemoryError))
try:
    catcher.catcher_alloc(1 << 20, ctypes.byref(ptr))
    check("a driver failure raises RuntimeError, not an abort", False)
except OutOfMemoryError:
    check("a driver failure raises RuntimeError, not an abort", False)
except RuntimeError as e:
    check("a driver failure raises RuntimeError, not an abort", "memsnap: " in str(e) and "address space" in str(e))
check("after it the process goes on and the library still answers", memsnap.backend() == "sim")
lib.memsnap_set_python_oom_error(None)
finish()
