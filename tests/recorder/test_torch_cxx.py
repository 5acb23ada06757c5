"""test_torch_cxx.py: building memsnap's C++ allocator for PyTorch (memsnap.torch_cxx) without
PyTorch, and compiling the real one where PyTorch's headers are at hand.

The machinery is tested with a fake torch (a package with the header PyTorch's layout has) and a
fake compiler (a script that counts its runs and builds a stand-in library exporting the
allocator's three entry points): the first build says so and how long it took, a second run loads
the cached build, a changed source builds anew (the key), four processes building at once run the
compiler once (the lock), a compiler error names the log, no compiler and no headers are
BuildErrors, and memsnap.enable() uses the C++ allocator when it builds, and the pluggable
interface with one line saying what that loses when it does not.

With TORCH_INCLUDE set (a PyTorch installation's include directory, e.g. the headers packed by
tests/gpu/cxx/torch_headers.sh), recorder/pytorch/allocator.cpp is compiled against it: every
virtual method of that PyTorch's CUDAAllocator is implemented with the right signature. Without
it that check says it is skipped.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
root = os.path.join(tests, "..")
sys.path.insert(0, tests)
from checks import check, finish  # noqa: E402

tmp = tempfile.mkdtemp(prefix="memsnap-cxx-")
fake_torch_dir = os.path.join(tmp, "site")
os.makedirs(os.path.join(fake_torch_dir, "torch", "include", "c10", "cuda"))
os.makedirs(os.path.join(fake_torch_dir, "torch", "lib"))
open(os.path.join(fake_torch_dir, "torch", "include", "c10", "cuda", "CUDACachingAllocator.h"), "w").close()
with open(os.path.join(fake_torch_dir, "torch", "__init__.py"), "w") as f:
    f.write(textwrap.dedent('''
        """Just what memsnap.torch_cxx reads of PyTorch: its version, its ABI, its layout."""
        import types
        __version__ = "9.9.0+fake"
        version = types.SimpleNamespace(cuda="13.0")
        _C = types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True)
        installed = []

        class _Current:
            pass
        cuda = types.SimpleNamespace(is_initialized=lambda: False,
                                     memory=types.SimpleNamespace(_get_current_allocator=lambda: _Current()))
    '''))
cuda_inc = os.path.join(tmp, "cudainc")
os.makedirs(cuda_inc)
open(os.path.join(cuda_inc, "cuda_runtime_api.h"), "w").close()
stub = os.path.join(tmp, "stub.c")
with open(stub, "w") as f:
    f.write("int memsnap_torch_abi(void) { return 1; }\n"
            "int memsnap_torch_install(const char **e) { (void)e; return 0; }\n"
            "int memsnap_torch_is_current(void) { return 1; }\n")
fake_cxx = os.path.join(tmp, "fake-c++")
with open(fake_cxx, "w") as f:
    f.write(textwrap.dedent('''\
        #!/bin/sh
        # a C++ compiler as memsnap calls it: counts its runs, builds the stand-in library at -o
        if [ "$1" = "--version" ]; then echo "fake-c++ 1.0"; exit 0; fi
        out=""; prev=""
        for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
        echo run >> "$FAKECXX_COUNT"
        sleep "${FAKECXX_SLEEP:-0}"
        if [ -n "$FAKECXX_FAIL" ]; then echo "allocator.cpp:1:1: error: $FAKECXX_FAIL" >&2; exit 1; fi
        exec cc -shared -fPIC -o "$out" "$FAKECXX_STUB"
    '''))
os.chmod(fake_cxx, 0o755)
count = os.path.join(tmp, "count")
cache = os.path.join(tmp, "cache")
lib = os.environ.get("MEMSNAP_LIB") or os.path.join(root, "build", "libmemsnap.so")
env = dict(os.environ, PYTHONPATH=os.pathsep.join([fake_torch_dir, os.path.join(root, "recorder", "python")]),
           CXX=fake_cxx, FAKECXX_COUNT=count, FAKECXX_STUB=stub, MEMSNAP_CACHE_DIR=cache,
           MEMSNAP_CUDA_INCLUDE=cuda_inc, MEMSNAP_BACKEND="sim", MEMSNAP_LIB=lib)
env.pop("MEMSNAP_TORCH_ALLOCATOR", None)

BUILD = r"""
import sys, torch
from memsnap import torch_cxx
try:
    print(torch_cxx.ensure_built(torch, sys.argv[1]))
except torch_cxx.BuildError as e:
    print("BuildError:", e)
"""


def runs():
    try:
        with open(count) as f:
            return len(f.read().split())
    except FileNotFoundError:
        return 0


def build(extra=None):
    e = dict(env, **(extra or {}))
    return subprocess.run([sys.executable, "-c", BUILD, lib], env=e, capture_output=True, text=True, timeout=120)


first = build()
path = first.stdout.strip()
check("build: the first use builds, says so once and how long it took",
      os.path.exists(path) and runs() == 1 and "building its C++ allocator for PyTorch 9.9.0+fake" in first.stderr and
      "built its C++ allocator in" in first.stderr, first.stdout + first.stderr)
check("build: cached under MEMSNAP_CACHE_DIR/torch_allocator/<version>-<key>/",
      path.startswith(os.path.join(cache, "torch_allocator", "9.9.0+fake-")), path)
second = build()
check("build: a second process loads the cached build (no compiler run, nothing said)",
      second.stdout.strip() == path and runs() == 1 and second.stderr == "", second.stderr)
quiet = build({"MEMSNAP_RUN_QUIET": "1", "MEMSNAP_CACHE_DIR": os.path.join(tmp, "quiet")})
check("build: memsnap run -q keeps it quiet", quiet.stderr == "" and os.path.exists(quiet.stdout.strip()), quiet.stderr)

changed = os.path.join(tmp, "changed")
os.makedirs(changed)
shutil.copy(os.path.join(root, "recorder", "pytorch", "allocator.cpp"), changed)
shutil.copy(os.path.join(root, "recorder", "memsnap.h"), changed)
with open(os.path.join(changed, "allocator.cpp"), "a") as f:
    f.write("// changed\n")
before = runs()
third = build({"MEMSNAP_TORCH_ALLOCATOR_SRC": changed})
check("build: a changed source is a new key: built again, the old build stays",
      third.stdout.strip() != path and os.path.exists(third.stdout.strip()) and runs() == before + 1 and
      os.path.exists(path))

# four ranks at once, a slow compiler: one builds, the others wait for it
race_cache = os.path.join(tmp, "race")
before = runs()
procs = [subprocess.Popen([sys.executable, "-c", BUILD, lib], env=dict(env, MEMSNAP_CACHE_DIR=race_cache,
                                                                          FAKECXX_SLEEP="1"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
outs = [p.communicate(timeout=120) for p in procs]
paths = {o[0].strip() for o in outs}
check("build: four processes at once run the compiler once and load the same build",
      runs() == before + 1 and len(paths) == 1 and os.path.exists(paths.pop()),
      "%d runs; %r" % (runs() - before, outs))
check("build: no partial file is left in the cache", not [n for n in os.listdir(os.path.dirname(path)) if
                                                          n.startswith(".build-")])

failed = build({"FAKECXX_FAIL": "no member named 'getPoolUseCount'", "MEMSNAP_CACHE_DIR": os.path.join(tmp, "fail")})
check("build: a compiler error is a BuildError naming it and the log",
      failed.stdout.startswith("BuildError:") and "getPoolUseCount" in failed.stdout and "build.log" in failed.stdout,
      failed.stdout + failed.stderr)
nocxx = build({"CXX": "/nonexistent/c++", "MEMSNAP_CACHE_DIR": os.path.join(tmp, "nocxx")})
check("build: no compiler is a BuildError", nocxx.stdout.startswith("BuildError:") and "c++" in nocxx.stdout,
      nocxx.stdout + nocxx.stderr)
noheaders = build({"MEMSNAP_CUDA_INCLUDE": "", "CUDA_HOME": tmp, "PATH": "/usr/bin:/bin",
                   "MEMSNAP_CACHE_DIR": os.path.join(tmp, "noheaders")})
check("build: without the CUDA runtime's headers, a BuildError that says so (or the toolkit's are found)",
      noheaders.stdout.startswith("BuildError:") and "cuda_runtime_api.h" in noheaders.stdout or
      os.path.exists(noheaders.stdout.strip()), noheaders.stdout)

ENABLE = r"""
import memsnap
memsnap.enable()
print(memsnap.allocator_kind())
"""
cxx = subprocess.run([sys.executable, "-c", ENABLE], env=env, capture_output=True, text=True, timeout=120)
check("enable: with a build, memsnap is PyTorch's allocator through the C++ allocator",
      cxx.stdout.split()[-1:] == ["cxx"], cxx.stdout + cxx.stderr)
fallback = subprocess.run([sys.executable, "-c", ENABLE], capture_output=True, text=True, timeout=120,
                          env=dict(env, PYTHONPATH=os.pathsep.join([os.path.join(tests, "data", "fake_torch"),
                                                                    os.path.join(root, "recorder", "python")])))
lines = [l for l in fallback.stderr.splitlines() if "memsnap" in l]
check("enable: where it cannot be built (the stand-in for PyTorch has no headers), the pluggable interface and "
      "one line saying what that loses",
      fallback.stdout.split()[-1:] == ["pluggable"] and len(lines) == 1 and "C++ headers" in lines[0] and
      "CUDA IPC" in lines[0] and "pluggable" in lines[0], fallback.stdout + fallback.stderr)
asked = subprocess.run([sys.executable, "-c", ENABLE], capture_output=True, text=True, timeout=120,
                       env=dict(env, MEMSNAP_TORCH_ALLOCATOR="pluggable",
                                PYTHONPATH=os.pathsep.join([os.path.join(tests, "data", "fake_torch"),
                                                            os.path.join(root, "recorder", "python")])))
check("enable: MEMSNAP_TORCH_ALLOCATOR=pluggable asks for the pluggable interface, silently",
      asked.stdout.split()[-1:] == ["pluggable"] and "memsnap" not in asked.stderr, asked.stdout + asked.stderr)

# the real allocator against a PyTorch's headers, where they are at hand
include = os.environ.get("TORCH_INCLUDE")
if include and os.path.exists(os.path.join(include, "c10", "cuda", "CUDACachingAllocator.h")):
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cmd = [os.environ.get("CXX_REAL", "c++"), "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
           "-isystem", include, "-isystem", os.path.join(include, "torch", "csrc", "api", "include"),
           "-isystem", os.path.join(cuda, "include"), "-I", os.path.join(root, "recorder"),
           os.path.join(root, "recorder", "pytorch", "allocator.cpp")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check("allocator.cpp compiles against the PyTorch headers in TORCH_INCLUDE (every virtual method, no warning)",
          r.returncode == 0, r.stderr[-3000:])
else:
    print("skipped: allocator.cpp against PyTorch's headers (set TORCH_INCLUDE to a PyTorch include directory, "
          "e.g. the headers tests/gpu/cxx/torch_headers.sh packs)")
shutil.rmtree(tmp, ignore_errors=True)
finish()
