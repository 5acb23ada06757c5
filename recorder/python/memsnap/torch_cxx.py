"""torch_cxx.py: memsnap's C++ allocator for PyTorch (recorder/pytorch/allocator.cpp), built for the
installed PyTorch at first use, cached, and installed as PyTorch's CUDA allocator.

PyTorch's allocator interface is a C++ class (c10::cuda::CUDACachingAllocator::CUDAAllocator)
whose layout changes between PyTorch releases, so the subclass that puts memsnap behind it is
compiled here, once per PyTorch version and C++ ABI, with the installed PyTorch's headers and the
user's C++ compiler (CXX, else c++ or g++), linked against PyTorch's libraries and the libmemsnap
this package loaded. The result is cached in $MEMSNAP_CACHE_DIR, else $XDG_CACHE_HOME/memsnap,
else ~/.cache/memsnap, under torch_allocator/<torch version>-<key>/, where the key hashes
everything the build depends on (the sources, PyTorch's version and ABI, the compiler, the flags,
the libmemsnap path): anything that changes makes a new build, so a stale one is never loaded.
Processes that build at once (torchrun's ranks) take a lock: one builds, the others wait and load
its result. The first build says how long it took, once.

Nothing here runs unless memsnap.enable() asks (MEMSNAP_TORCH_ALLOCATOR=cxx, the default);
install() raises BuildError (no compiler, no headers, a PyTorch whose interface the source does
not match: the message says which, and where the compiler's output is) or RuntimeError (PyTorch
refused the swap), and memsnap.enable() then installs the pluggable allocator instead.
"""
import ctypes
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

ABI = 1  # memsnap_torch_abi() of the source this package knows
_loaded = None  # the ctypes handle of the installed allocator


class BuildError(RuntimeError):
    """The C++ allocator could not be built (or loaded); the message says why."""


def sources():
    """(allocator.cpp, the directory holding memsnap.h): beside this package (pip install puts both
    in its torch_allocator/), or in the source tree it sits in (recorder/pytorch/allocator.cpp,
    recorder/memsnap.h); MEMSNAP_TORCH_ALLOCATOR_SRC names a directory holding both."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    env = os.environ.get("MEMSNAP_TORCH_ALLOCATOR_SRC")
    places = [(env, env)] if env else []
    places += [(os.path.join(here, "torch_allocator"), os.path.join(here, "torch_allocator")),
               (os.path.join(root, "recorder", "pytorch"), os.path.join(root, "recorder"))]
    for src_dir, header_dir in places:
        cpp = os.path.join(src_dir, "allocator.cpp")
        if os.path.exists(cpp) and os.path.exists(os.path.join(header_dir, "memsnap.h")):
            return cpp, header_dir
    raise BuildError("the C++ allocator's source (torch_allocator/allocator.cpp) is not installed with this package")


def cache_root():
    """Where builds are cached: MEMSNAP_CACHE_DIR, else $XDG_CACHE_HOME/memsnap, else ~/.cache/memsnap."""
    env = os.environ.get("MEMSNAP_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "memsnap")


def compiler():
    """The C++ compiler: CXX, else c++ or g++ on PATH."""
    env = os.environ.get("CXX")
    if env:
        return env
    for name in ("c++", "g++"):
        path = shutil.which(name)
        if path:
            return path
    raise BuildError("no C++ compiler (set CXX, or install g++)")


def cuda_include():
    """A directory holding cuda_runtime_api.h (the allocator interface includes it): MEMSNAP_CUDA_INCLUDE,
    CUDA_HOME or CUDA_PATH, the toolkit of nvcc on PATH, /usr/local/cuda, else the CUDA runtime's
    headers shipped with PyTorch's wheels (nvidia/*/include)."""
    candidates = [os.environ.get("MEMSNAP_CUDA_INCLUDE")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "include"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include"))
    candidates.append("/usr/local/cuda/include")
    for site in sys.path:
        candidates += sorted(glob.glob(os.path.join(site, "nvidia", "*", "include")))
    for c in candidates:
        if c and os.path.exists(os.path.join(c, "cuda_runtime_api.h")):
            return c
    raise BuildError("the CUDA runtime's headers (cuda_runtime_api.h) are not found: set CUDA_HOME or "
                     "MEMSNAP_CUDA_INCLUDE")


def torch_layout(torch):
    """(include directories, library directory, C++11 ABI flag) of the installed PyTorch."""
    base = os.path.dirname(os.path.abspath(torch.__file__))
    include = os.path.join(base, "include")
    if not os.path.exists(os.path.join(include, "c10", "cuda", "CUDACachingAllocator.h")):
        raise BuildError("PyTorch's C++ headers are not installed (%s has no c10/cuda/CUDACachingAllocator.h)" % include)
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return [include, os.path.join(include, "torch", "csrc", "api", "include")], os.path.join(base, "lib"), abi


def build_command(torch, memsnap_lib, output):
    """The compiler's command line (a list), and what the build depends on (for the cache key)."""
    cpp, header_dir = sources()
    includes, libdir, abi = torch_layout(torch)
    cxx = compiler()
    cmd = [cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi]
    for inc in includes + [cuda_include()]:
        cmd += ["-isystem", inc]
    cmd += ["-I", header_dir, cpp, "-o", output, "-L", libdir, "-Wl,-rpath," + libdir, "-lc10", "-lc10_cuda",
            "-ltorch_cuda", os.path.realpath(memsnap_lib), "-Wl,-rpath," + os.path.dirname(os.path.realpath(memsnap_lib))]
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError("the C++ compiler %s does not run: %s" % (cxx, e))
    digest = hashlib.sha256()
    for part in [str(ABI), torch.__version__, str(getattr(torch.version, "cuda", "")), str(abi)] + version + cmd:
        digest.update(part.encode() + b"\0")
    for path in (cpp, os.path.join(header_dir, "memsnap.h")):
        with open(path, "rb") as f:
            digest.update(f.read())
    digest.update(os.path.realpath(memsnap_lib).encode())
    return cmd, digest.hexdigest()[:16]


def _say(message):
    if os.environ.get("MEMSNAP_RUN_QUIET") != "1":
        print(message, file=sys.stderr)


def ensure_built(torch, memsnap_lib):
    """The path of the built allocator for this PyTorch, building it first if no valid build is
    cached. Raises BuildError."""
    probe_out = "OUTPUT"
    cmd, key = build_command(torch, memsnap_lib, probe_out)
    directory = os.path.join(cache_root(), "torch_allocator", "%s-%s" % (torch.__version__.replace("/", "_"), key))
    target = os.path.join(directory, "libmemsnap_torch.so")
    if os.path.exists(target):
        return target
    try:
        os.makedirs(directory, exist_ok=True)
        lock = open(os.path.join(directory, ".lock"), "w")
    except OSError as e:
        raise BuildError("cannot write the build cache %s: %s (set MEMSNAP_CACHE_DIR)" % (directory, e))
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait for its result
        if os.path.exists(target):
            return target
        fd, partial = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=directory)
        os.close(fd)
        log = os.path.join(directory, "build.log")
        cmd = [partial if a == probe_out else a for a in cmd]
        _say("memsnap: building its C++ allocator for PyTorch %s (once; cached in %s)" % (torch.__version__, directory))
        start = time.monotonic()
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as e:
            os.unlink(partial)
            raise BuildError("the C++ compiler failed to run: %s" % e)
        seconds = time.monotonic() - start
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n\n" + result.stdout + result.stderr)
        if result.returncode != 0:
            os.unlink(partial)
            errors = [l for l in (result.stdout + result.stderr).splitlines() if "error" in l][:2]
            raise BuildError("compiling it against PyTorch %s failed (%s; the compiler's output is in %s)"
                             % (torch.__version__, "; ".join(errors) or "exit status %d" % result.returncode, log))
        os.replace(partial, target)  # atomic: a reader sees no file or the whole one
        _say("memsnap: built its C++ allocator in %.1f s" % seconds)
    return target


def install(torch, memsnap_lib):
    """Builds (if needed) and loads the C++ allocator, and makes it PyTorch's CUDA allocator.
    Returns the path of the library loaded. Raises BuildError, or RuntimeError when PyTorch
    refuses the swap (CUDA initialised already)."""
    global _loaded
    if _loaded is None:
        path = ensure_built(torch, memsnap_lib)
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise BuildError("the built allocator %s does not load: %s (remove it to build it again)" % (path, e))
        if lib.memsnap_torch_abi() != ABI:
            raise BuildError("the built allocator %s is of another interface version" % path)
        lib.memsnap_torch_install.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        lib.memsnap_torch_install.restype = ctypes.c_int
        _loaded = lib
    error = ctypes.c_char_p()
    if _loaded.memsnap_torch_install(ctypes.byref(error)) != 0:
        raise RuntimeError("PyTorch refused memsnap's allocator: %s" % (error.value or b"").decode("utf-8", "replace"))
    return _loaded._name


def is_current():
    """Whether the C++ allocator is PyTorch's current CUDA allocator."""
    return _loaded is not None and bool(_loaded.memsnap_torch_is_current())
