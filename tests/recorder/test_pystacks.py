"""test_pystacks.py: Python stacks read from the interpreter's frame records are the C API's, and
MEMSNAP_CONTEXT / memsnap.record(context=...), on the simulated device.

stacks.c reads the Python frames of an allocating thread from the interpreter's frame records
(pyframes.c) and reuses what the thread found before; MEMSNAP_TEST_STACKS keeps the capture of
before (the C API, the GIL taken, every frame read) for this test. A workload is run in child
processes: under MEMSNAP_TEST_STACKS=check every capture is made both ways and compared (no
stack may differ), and under MEMSNAP_TEST_STACKS=reference and without it, each dumping a
snapshot whose events must name the same frames with the same stack ids; with MEMSNAP_BASE_LIB
naming another libmemsnap.so (the library before this design, built from an older commit:
tests/recorder/compare_stacks.sh), once more on it, with the same requirement. The workload: nested
functions and methods, a generator, a lambda, recursion past the 64 Python frames a stack keeps,
calls that hold the GIL (ctypes.PyDLL) and that release it (ctypes.CDLL: the recorder reads the
frames without taking it), exceptions raised and caught between captures, and threads. Every
other CPython on PATH or under pyenv (3.10 to 3.19) runs the check too.

Prints "ok NAME" / "FAIL NAME" per check and "N passed, N failed" at the end.
"""
import ctypes
import glob
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile

os.environ["MEMSNAP_BACKEND"] = "sim"
import memsnap  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

WORKLOAD = r'''
import ctypes, os, sys, threading
os.environ["MEMSNAP_BACKEND"] = "sim"
import memsnap
lib = memsnap.load()
held = ctypes.PyDLL(memsnap.library_path())
released = ctypes.CDLL(memsnap.library_path())
for l in (held, released):
    l.memsnap_malloc.restype = ctypes.c_void_p
    l.memsnap_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    l.memsnap_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]

def pair(l, size):
    p = l.memsnap_malloc(size, 0, None)
    l.memsnap_free(p, 0, 0, None)

def deep(n, l):
    if n > 0:
        return deep(n - 1, l)
    pair(l, 512)

class Model:
    def forward(self, l):
        for i in range(3):
            pair(l, 1024 + i)
        return [pair(l, 2048) for _ in range(2)]

def gen(l):
    for i in range(3):
        pair(l, 4096)
        yield i

def raising(l):
    try:
        pair(l, 512)
        raise ValueError("caught")
    except ValueError:
        pair(l, 768)

def site_a(l):
    pair(l, 512)

def site_b(l):
    pair(l, 640)

def moves(l):
    # records pushed again at the addresses of the last capture's, from other lines and by
    # other functions, and chains that grow and shrink by a few frames between captures
    for i in range(6):
        (site_a if i % 2 else site_b)(l)
        pair(l, 256)
        deep(i % 3, l)
        site_a(l) if i % 3 else deep(9, l)

def work(threads):
    qsort = ctypes.CDLL(None).qsort
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    for l in (held, released):
        for n in (0, 1, 5, 30, 70, 100, 70, 30):
            deep(n, l)
        moves(l)
        # C calling back into Python: the interpreter's entry records between the frames
        cmp = cmp_t(lambda a, b, l=l: (deep(3, l), moves(l), 0)[2])
        arr = (ctypes.c_int * 3)(3, 2, 1)
        qsort(arr, 3, ctypes.sizeof(ctypes.c_int), cmp)
        Model().forward(l)
        list(gen(l))
        (lambda: pair(l, 8192))()
        raising(l)
        for i in range(20):
            pair(l, 512) if i % 2 else deep(2, l)
    if threads:
        ts = [threading.Thread(target=lambda k=k: [deep(k + j, released if j % 2 else held) for j in range(20)])
              for k in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]

sys.setrecursionlimit(1000)
memsnap.record(stacks="all", max_entries=1000000)
work(threads=len(sys.argv) < 2)
work(threads=len(sys.argv) < 2)
if len(sys.argv) > 1:
    memsnap.dump(sys.argv[1])
'''


def run(python, mode, db=None, lib=None):
    env = dict(os.environ)
    env.pop("MEMSNAP_TEST_STACKS", None)
    if mode:
        env["MEMSNAP_TEST_STACKS"] = mode
    if lib:
        env["MEMSNAP_LIB"] = lib
    return subprocess.run([python, "-c", WORKLOAD] + ([db] if db else []), env=env, capture_output=True, text=True)


def check_counts(python, label):
    proc = run(python, "check")
    m = re.search(r"stack check: (\d+) captures, (\d+) differ \(native: (\d+) walked, (\d+) by libunwind; "
                  r"python: (\d+) read from frame records\)", proc.stderr)
    captures, differ, walked, fell_back, records = map(int, m.groups()) if m else (0, 1, 0, 0, 0)
    print("  %s: %d captures compared, %d differ; native %d walked, %d by libunwind; python %d from records"
          % (label, captures, differ, walked, fell_back, records))
    check("check (%s): the workload runs with every capture made both ways" % label, proc.returncode == 0 and m,
          proc.stderr[-2000:])
    check("check (%s): every Python + native stack is the one the C API and unw_backtrace give" % label,
          captures > 500 and differ == 0)
    return records


def stacks_text(path):
    db = sqlite3.connect(path)
    rows = db.execute("""select e.id, e.stack_id, coalesce((select group_concat(
                           (case when f.name like '0x%' then '?' else f.name end) || ' ' || coalesce(f.file, '') || ':' ||
                           coalesce(f.line, 0), '|') from (select * from stack_frames sf where sf.stack_id = e.stack_id
                           order by sf.position) s join frames f on f.id = s.frame_id), '')
                         from events e order by e.id""").fetchall()
    db.close()
    return rows


# ---- the same stacks ---------------------------------------------------------------------------
records = check_counts(sys.executable, "python %d.%d" % sys.version_info[:2])
if sys.version_info[:2] in ((3, 11), (3, 12), (3, 13)):
    check("python %d.%d: frames are read from the interpreter's frame records" % sys.version_info[:2], records > 100)
tmp = tempfile.mkdtemp()
ref_db, new_db = os.path.join(tmp, "reference.db"), os.path.join(tmp, "cached.db")
ok_ref = run(sys.executable, "reference", ref_db).returncode == 0
ok_new = run(sys.executable, None, new_db).returncode == 0
check("snapshots: the workload dumps with the capture of before and with the new one", ok_ref and ok_new)
a, b = (stacks_text(ref_db), stacks_text(new_db)) if ok_ref and ok_new else ([], [1])
print("  %d events compared" % len(a))
check("snapshots: every event has the same stack id and the same frames (Python and native)", len(a) > 300 and a == b)
if a != b and a and b:
    first = next(i for i in range(min(len(a), len(b))) if a[i] != b[i])
    print("  first difference:\n  reference: %s\n  cached:    %s" % (str(a[first])[:400], str(b[first])[:400]))
base_lib = os.environ.get("MEMSNAP_BASE_LIB")
if base_lib:
    base_db = os.path.join(tmp, "base.db")
    ok_base = run(sys.executable, None, base_db, lib=base_lib).returncode == 0
    check("base: the workload dumps a snapshot with %s" % base_lib, ok_base)
    c = stacks_text(base_db) if ok_base else []
    print("  %d events compared with the base library" % len(c))
    check("base: every event has the base library's stack id and frames (Python and native)", len(c) > 300 and c == b)
    if c != b and c and b:
        first = next((i for i in range(min(len(c), len(b))) if c[i] != b[i]), min(len(c), len(b)))
        print("  first difference:\n  base:   %s\n  cached: %s" % (str(c[first:first + 1])[:400], str(b[first:first + 1])[:400]))
others = []
pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
candidates = [shutil.which(n) for n in ("python3.10", "python3.11", "python3.12", "python3.13", "python3.14")]
candidates += sorted(glob.glob(os.path.join(pyenv, "versions", "3.1[0-9]*", "bin", "python3.1[0-9]")))
for exe in candidates:
    if not exe or os.path.realpath(exe) == os.path.realpath(sys.executable):
        continue
    probe = subprocess.run([exe, "-c", "import sys, ctypes; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True)
    if probe.returncode == 0 and probe.stdout.strip() not in [o[1] for o in others] + ["%d.%d" % sys.version_info[:2]]:
        others.append((exe, probe.stdout.strip()))
for exe, version in others:
    check_counts(exe, "python " + version)
if not others:
    print("  (no other CPython on PATH or under pyenv: only this one checked)")

# ---- MEMSNAP_CONTEXT ---------------------------------------------------------------------------
def free_stacks(context):
    memsnap.shutdown()
    with memsnap.record(stacks="all", context=context):
        p = memsnap.malloc(4096)
        memsnap.free(p)
    path = memsnap.dump(os.path.join(tmp, "context-%s.db" % context))
    db = sqlite3.connect(path)
    counts = db.execute("""select sum(kind = 1 and stack_id is not null), sum(kind in (2, 3) and stack_id is not null),
                                  sum(kind in (2, 3)) from events""").fetchone()
    db.close()
    return counts


alloc_with, free_with, frees = free_stacks("all")
check("context all (the default): allocations and frees have stacks", alloc_with == 1 and free_with == frees == 2)
alloc_with, free_with, frees = free_stacks("alloc")
check("context alloc: allocations have stacks, frees none", alloc_with == 1 and free_with == 0 and frees == 2)
check("context: memsnap.options() lists MEMSNAP_CONTEXT with its default",
      any(o[0] == "MEMSNAP_CONTEXT" and o[1] == "all" for o in memsnap.options()))
try:
    memsnap.record(context="everything")
    check("context: an unknown value is refused", False)
except memsnap.MemsnapError as e:
    check("context: an unknown value is refused", "context" in str(e).lower())
memsnap.stop_recording()
memsnap.set_option("context", "all")
env = dict(os.environ, MEMSNAP_CONTEXT="alloc", MEMSNAP_RECORD="1", MEMSNAP_DUMP=os.path.join(tmp, "env.db"))
subprocess.run([sys.executable, "-c", "import memsnap\np = memsnap.malloc(512)\nmemsnap.free(p)\n"], env=env)
db = sqlite3.connect(os.path.join(tmp, "env.db"))
row = db.execute("select sum(kind = 1 and stack_id is not null), sum(kind in (2, 3) and stack_id is null) from events").fetchone()
db.close()
check("context: MEMSNAP_CONTEXT=alloc from the environment", tuple(row) == (1, 2))

# ---- the counters: a steady loop finds everything in its thread's caches -------------------------
def steady(lib, n):
    for _ in range(n):
        p = lib.memsnap_malloc(512, 0, None)
        lib.memsnap_free(p, 0, 0, None)


def at(depth, fn, *args):
    return at(depth - 1, fn, *args) if depth else fn(*args)


lib_held, lib_released = ctypes.PyDLL(memsnap.library_path()), ctypes.CDLL(memsnap.library_path())
for l in (lib_held, lib_released):
    l.memsnap_malloc.restype = ctypes.c_void_p
    l.memsnap_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    l.memsnap_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
memsnap.shutdown()
with memsnap.record(stacks="all", context="all"):
    counts = []
    for rep in range(2):  # the first time: new stacks, new frames; the second, the same again
        for l in (lib_held, lib_released):
            at(20, steady, l, 1000)
        counts.append(memsnap.stack_counters())
before, after = counts
d = {k: after[k] - before[k] for k in after if k != "python_reader"}
print("  counters over 2000 steady pairs:", d, "python_reader", after["python_reader"])
check("counters: the library names them", list(after)[:3] == ["captures", "native_cached", "native_locked"] and
      "python_reader" in after)
check("counters: every allocation and free of the loop is a capture", d["captures"] == 4000)
check("counters: a steady loop's native parts come from the thread's walks, without the lock",
      d["native_cached"] == 4000 and d["native_locked"] == 0 and d["native_walked"] == 0)
check("counters: nothing of a steady loop is looked up under the lock, nor needs the GIL",
      d["python_locked"] == 0 and d["pairs_locked"] == 0 and d["gil_taken"] == 0 and d["gil_helper"] == 0)
if sys.version_info[:2] in ((3, 11), (3, 12), (3, 13)):
    check("counters: the frames come from the interpreter's records (python_reader 2)",
          after["python_reader"] == 2 and d["python_records"] == 4000 and d["python_api"] == 0)
check("counters: a negative capacity is refused", memsnap.load().memsnap_stack_counters(None, None, -1) == -1)
shutil.rmtree(tmp, ignore_errors=True)
finish()
