"""memsnap.show(path): a snapshot's report page inline in a Jupyter or VS Code notebook, offline.

The page is the one ``memsnap analyze --html`` writes (one self-contained file: no network), put
in an ``<iframe srcdoc=...>`` so that its scripts and styles stay inside it, as PyTorch's memory
viz helpers show theirs. The page's text is escaped into the attribute whole: nothing of the
snapshot reaches the notebook's own document. A PyTorch snapshot pickle
(``torch.cuda.memory._dump_snapshot``) is imported first (``memsnap import``), into a temporary
file removed afterwards.

The command-line tool is found as ``memsnap.show`` needs it: ``MEMSNAP_CLI``; else the tool
``pip install .`` puts beside the package (memsnap-cli); else ``build/memsnap`` of the source tree
the package sits in; else ``memsnap`` on the PATH.
"""
import html
import os
import shutil
import subprocess
import tempfile

__all__ = ["show", "Page", "cli_path"]


def cli_path():
    """The memsnap command-line tool show() runs (see the module's doc); raises FileNotFoundError
    when there is none."""
    env = os.environ.get("MEMSNAP_CLI")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "memsnap-cli"), os.path.join(here, "..", "..", "..", "build", "memsnap")):
        if os.path.exists(path):
            return os.path.normpath(path)
    found = shutil.which("memsnap")
    if found:
        return found
    raise FileNotFoundError("memsnap.show: no memsnap command-line tool found (set MEMSNAP_CLI, or pip install memsnap)")


class Page:
    """A report page a notebook displays inline (its _repr_html_), `html` the page itself."""

    def __init__(self, page_html, height=900):
        self.html = page_html
        self.height = int(height)

    def _repr_html_(self):
        return ('<iframe srcdoc="%s" style="width: 100%%; height: %dpx; border: 1px solid #ccc" '
                'sandbox="allow-scripts" title="memsnap report"></iframe>' % (html.escape(self.html, quote=True), self.height))


def _run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("memsnap.show: %s failed: %s" % (" ".join(cmd[:2]), done.stderr.strip() or done.stdout.strip()))


def show(path, height=900, display=True):
    """Shows the report page of snapshot `path` (a memsnap .db, or a PyTorch snapshot pickle) in
    the notebook, `height` pixels high. With `display` and IPython there, displays it and returns
    None; else returns the Page, which a notebook shows as the cell's value. Raises FileNotFoundError
    for a missing file or tool, RuntimeError with memsnap's message when the snapshot cannot be
    read."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError("memsnap.show: no such snapshot: %r" % path)
    cli = cli_path()
    work = tempfile.mkdtemp(prefix="memsnap-show-")
    try:
        db = path
        if path.endswith((".pickle", ".pickle.gz", ".pkl")):
            db = os.path.join(work, "imported.db")
            _run([cli, "import", "-o", db, path])
        page_path = os.path.join(work, "page.html")
        _run([cli, "analyze", "--html", page_path, db])
        with open(page_path, encoding="utf-8") as f:
            page = Page(f.read(), height)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if display:
        try:
            from IPython.display import display as ipython_display
        except ImportError:
            return page
        ipython_display(page)
        return None
    return page
