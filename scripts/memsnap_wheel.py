"""memsnap_wheel.py: the PEP 517 build backend of pyproject.toml, for `pip install .`.

It needs nothing but the standard library (no setuptools, no wheel: pip's isolated build
environment then installs nothing, so the build needs no network). build_wheel runs make for
the library and the command-line tool, then writes a wheel of the memsnap package
(recorder/python/memsnap) with libmemsnap.so and memsnap-cli beside its modules, so that
`import memsnap` loads the library beside it from any directory and the `memsnap` script runs
the tool. The tag is py3-none-linux_<machine>: the library is native code.

MEMSNAP_BUILD_DIR chooses the build directory (default build; the tests pass theirs).
"""
import base64
import hashlib
import os
import platform
import re
import subprocess
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "memsnap"


def _version():
    with open(os.path.join(ROOT, "recorder", "memsnap.h")) as f:
        return re.search(r'#define MEMSNAP_VERSION "([^"]+)"', f.read()).group(1)


def _tag():
    return "py3-none-linux_" + platform.machine().replace("-", "_")


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: CUDA caching allocator that records memory history (PyTorch pluggable allocator)\n"
            "Requires-Python: >=3.8\nLicense: see the repository\n" % (NAME, _version()))


def _build():
    build = os.environ.get("MEMSNAP_BUILD_DIR", "build")
    jobs = "-j%d" % min(os.cpu_count() or 1, 4)
    subprocess.run(["make", "--no-print-directory", jobs, "BUILD=" + build, build + "/libmemsnap.so", build + "/memsnap"],
                   cwd=ROOT, check=True)
    return os.path.join(ROOT, build)


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = "%s-%s.dist-info" % (NAME, _version())
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w") as f:
        f.write(_metadata())
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build = _build()
    version = _version()
    info = "%s-%s.dist-info" % (NAME, version)
    files = []  # (name in the wheel, bytes, executable)
    pkg = os.path.join(ROOT, "recorder", "python", NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                files.append((NAME + "/" + name, f.read(), False))
    # the C++ allocator's source and the header it needs: memsnap.torch_cxx builds it at first use
    for name, path in (("allocator.cpp", os.path.join(ROOT, "recorder", "pytorch", "allocator.cpp")),
                       ("memsnap.h", os.path.join(ROOT, "recorder", "memsnap.h"))):
        with open(path, "rb") as f:
            files.append((NAME + "/torch_allocator/" + name, f.read(), False))
    with open(os.path.join(build, "libmemsnap.so"), "rb") as f:
        files.append((NAME + "/libmemsnap.so", f.read(), True))
    with open(os.path.join(build, "memsnap"), "rb") as f:  # its rpath $ORIGIN finds the library beside it
        files.append((NAME + "/memsnap-cli", f.read(), True))
    files.append((info + "/METADATA", _metadata().encode(), False))
    files.append((info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: memsnap_wheel\nRoot-Is-Purelib: false\nTag: %s\n"
                                    % _tag()).encode(), False))
    files.append((info + "/entry_points.txt", b"[console_scripts]\nmemsnap = memsnap.__main__:main\n", False))
    record = []
    for name, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "/RECORD,,")
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode(), False))
    wheel = "%s-%s-%s.whl" % (NAME, version, _tag())
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, executable in files:
            entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = (0o100755 if executable else 0o100644) << 16  # S_IFREG: pip keeps the mode
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    return wheel
