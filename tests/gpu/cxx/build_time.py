"""build_time.py: memsnap's C++ allocator built for the installed PyTorch from an empty cache, as a
user's first memsnap.enable() builds it, then found in the cache by a second process (issue 34:
say how long the first build takes). Prints one line "BUILD {json}"; with --log FILE copies the
compiler's output (build.log) there.

usage: build_time.py [--log FILE]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
CHILD = r"""
import json, sys, time
t0 = time.monotonic()
import torch
sys.path.insert(0, sys.argv[1])
import memsnap
from memsnap import torch_cxx
t1 = time.monotonic()
try:
    path = torch_cxx.ensure_built(torch, memsnap.library_path())
    err = None
except torch_cxx.BuildError as e:
    path, err = None, str(e)
print("CHILD " + json.dumps({"seconds": round(time.monotonic() - t1, 2), "import_torch": round(t1 - t0, 2),
                             "path": path, "error": err, "torch": torch.__version__}))
"""


def run(env):
    p = subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "recorder", "python")], env=env,
                       capture_output=True, text=True, timeout=900)
    line = [l for l in p.stdout.splitlines() if l.startswith("CHILD ")]
    out = json.loads(line[-1][6:]) if line else {"error": "exit %d: %s" % (p.returncode, p.stderr[-500:])}
    out["said"] = [l for l in p.stderr.splitlines() if l.startswith("memsnap")]
    return out


def main():
    args = sys.argv[1:]
    cache = tempfile.mkdtemp(prefix="memsnap-cache-")
    env = dict(os.environ, MEMSNAP_CACHE_DIR=cache)
    env.setdefault("MEMSNAP_LIB", os.path.join(ROOT, "build", "libmemsnap.so"))
    first = run(env)
    second = run(env)
    result = {"first_build_s": first.get("seconds"), "cached_s": second.get("seconds"), "torch": first.get("torch"),
              "error": first.get("error"), "said": first.get("said"),
              "size": os.path.getsize(first["path"]) if first.get("path") else None,
              "cxx": subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True,
                                    text=True).stdout.splitlines()[:1]}
    if "--log" in args:
        logs = [os.path.join(d, "build.log") for d, _, files in os.walk(cache) if "build.log" in files]
        if logs:
            shutil.copy(logs[0], args[args.index("--log") + 1])
    shutil.rmtree(cache, ignore_errors=True)
    print("BUILD " + json.dumps(result))


if __name__ == "__main__":
    main()
