"""test_notebook.py BUILD_DIR: memsnap.show() in a real Jupyter kernel: a notebook built with
nbformat and executed by nbclient in an ipykernel kernel (Debian's python3-nbclient and
python3-ipykernel: scripts/install-deps.sh installs them), its outputs holding the report page.

Those packages install for Debian's /usr/bin/python3, which may not be the python3 on the PATH (a
pyenv one): the test runs under the first of this interpreter and /usr/bin/python3 that imports
nbclient, nbformat and ipykernel, and fails, naming the packages, when none does (it does not pass
by skipping). The kernel is started with that interpreter (its kernel spec is written into a
temporary Jupyter path), with the memsnap package of this tree on its path and MEMSNAP_CLI set.

Checked: a cell calling memsnap.show(db) displays one text/html output, an iframe whose srcdoc is
the page escaped whole (unescaped: the page with its data, the snapshot's holders among them); a
cell whose value is memsnap.show(db, display=False) gives the page as its result; a missing file
is a FileNotFoundError in the cell's output.
"""
import html
import json
import os
import re
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
MODULES = ("nbclient", "nbformat", "ipykernel")


def usable(python):
    try:
        return subprocess.run([python, "-c", "import " + ", ".join(MODULES)], capture_output=True).returncode == 0
    except OSError:
        return False


if os.environ.get("MEMSNAP_NOTEBOOK_PYTHON") != sys.executable and not usable(sys.executable):
    for python in ("/usr/bin/python3",):
        if os.path.exists(python) and os.path.realpath(python) != os.path.realpath(sys.executable) and usable(python):
            os.environ["MEMSNAP_NOTEBOOK_PYTHON"] = python
            os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    print("FAIL a Jupyter kernel to run the notebook: no python3 here imports %s (install Debian's python3-nbclient "
          "and python3-ipykernel: scripts/install-deps.sh)" % ", ".join(MODULES))
    print("0 passed, 1 failed")
    sys.exit(1)

sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402
import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

build = os.path.abspath(sys.argv[1])
work = tempfile.mkdtemp(prefix="memsnap-notebook-")
db = os.path.join(work, "causes.db")
import lzma  # noqa: E402
import shutil  # noqa: E402
with lzma.open(os.path.join(here, "..", "data", "causes.db.xz")) as f, open(db, "wb") as out:
    shutil.copyfileobj(f, out)

# the kernel: this interpreter, found through a kernel spec of its own
spec_dir = os.path.join(work, "jupyter", "kernels", "memsnap-test")
os.makedirs(spec_dir)
with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
    json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
               "display_name": "memsnap test", "language": "python"}, f)
os.environ["JUPYTER_PATH"] = os.path.join(work, "jupyter")
os.environ["MEMSNAP_CLI"] = os.path.join(build, "memsnap")
os.environ["PYTHONPATH"] = os.pathsep.join([os.path.join(here, "..", "..", "recorder", "python"),
                                            os.environ.get("PYTHONPATH", "")])
os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # the kernel's debugger note about frozen modules

nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell("import memsnap\nmemsnap.show(%r, height=600)" % db),
            nbformat.v4.new_code_cell("memsnap.show(%r, display=False)" % db),
            nbformat.v4.new_code_cell("memsnap.show(%r)" % os.path.join(work, "missing.db"))]
client = NotebookClient(nb, kernel_name="memsnap-test", timeout=120, allow_errors=True)
try:
    client.execute()
    ran = True
except Exception as e:  # noqa: BLE001 - said in the check
    ran = False
    print("kernel error:", type(e).__name__, e)
check("a notebook of three cells executed in an ipykernel kernel (%s)" % sys.executable, ran)


def page_of(output):
    frame = output.get("data", {}).get("text/html", "") if output else ""
    m = re.match(r'^<iframe srcdoc="([^"]*)" ', frame)
    return frame, (html.unescape(m.group(1)) if m else "")


outs = nb.cells[0].get("outputs", [])
frame, page = page_of(outs[0] if outs else None)
check("memsnap.show(db) displays one output: an iframe, the page escaped whole into its srcdoc, 600 px high",
      len(outs) == 1 and outs[0]["output_type"] == "display_data" and "height: 600px" in frame and
      "<script" not in frame and page.startswith("<!DOCTYPE html>") and 'id="memsnap-data"' in page, str(outs)[:500])
check("the page in the notebook carries the snapshot's holders and the collector's runs",
      '"holders":[{"root":' in page and "forward hook of Net.head" in page and '"freeing_runs":[{' in page)
outs = nb.cells[1].get("outputs", [])
frame, page = page_of(outs[0] if outs else None)
check("memsnap.show(db, display=False) as a cell's value: the page is its result",
      len(outs) == 1 and outs[0]["output_type"] == "execute_result" and 'id="memsnap-data"' in page, str(outs)[:300])
outs = nb.cells[2].get("outputs", [])
check("a missing snapshot: FileNotFoundError in the cell's output, naming it",
      len(outs) == 1 and outs[0].get("ename") == "FileNotFoundError" and "missing.db" in outs[0].get("evalue", ""),
      str(outs)[:300])
finish()
