"""test_show.py BUILD_DIR: memsnap.show(path), a snapshot's page inline in a notebook: through a
stand-in IPython (tests/data/fake_ipython) and without one; a memsnap snapshot and a PyTorch
pickle; the page escaped whole into an iframe's srcdoc; clear errors for a missing file and an
unreadable one."""
import html
import os
import re
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

build = os.path.abspath(sys.argv[1])
os.environ["MEMSNAP_CLI"] = os.path.join(build, "memsnap")
work = tempfile.mkdtemp(prefix="memsnap-show-test-")
subprocess.run([os.path.join(build, "tests", "gen_snapshots"), work], check=True, capture_output=True,
               env=dict(os.environ, MEMSNAP_BACKEND="sim"))
import memsnap  # noqa: E402

# Without IPython (a machine may have the real one: hidden here): the Page, which a notebook shows
# as the cell's value
sys.modules["IPython"] = None
page = memsnap.show(os.path.join(work, "leak.db"))
frame = page._repr_html_() if page is not None else ""
src = re.match(r'^<iframe srcdoc="([^"]*)" ', frame)
check("without IPython: a Page whose HTML is one iframe, the page escaped whole into its srcdoc",
      src is not None and "<script" not in frame and html.unescape(src.group(1)) == page.html and
      'id="memsnap-data"' in page.html and "keep_history" in page.html, frame[:200])
check("the iframe's scripts run sandboxed, without the notebook's origin", 'sandbox="allow-scripts"' in frame)

# With IPython: displayed, nothing returned (a notebook would show it twice)
sys.path.insert(0, os.path.join(here, "..", "data", "fake_ipython"))
del sys.modules["IPython"]
import IPython.display  # noqa: E402
shown = memsnap.show(os.path.join(work, "leak.db"), height=500)
check("with IPython: displayed once, 500 pixels high, nothing returned",
      shown is None and len(IPython.display.shown) == 1 and "height: 500px" in IPython.display.shown[0])

# A PyTorch pickle: imported first
memsnap.show(os.path.join(here, "..", "data", "cycle_oom.pickle.gz"))
check("a PyTorch snapshot pickle is imported and shown",
      len(IPython.display.shown) == 2 and "zeros" in html.unescape(IPython.display.shown[1]))

# Errors: a missing file, a file that is no snapshot
try:
    memsnap.show(os.path.join(work, "nothing.db"))
    check("a missing file: FileNotFoundError", False)
except FileNotFoundError as e:
    check("a missing file: FileNotFoundError naming it", "nothing.db" in str(e), str(e))
bad = os.path.join(work, "bad.db")
with open(bad, "w") as f:
    f.write("not a database")
try:
    memsnap.show(bad)
    check("a file that is no snapshot: RuntimeError", False)
except RuntimeError as e:
    check("a file that is no snapshot: RuntimeError with memsnap's message", "bad.db" in str(e), str(e))
finish()
