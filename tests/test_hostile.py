"""test_hostile.py CLI: hostile text end to end, on the simulated device.

Python functions and files whose names hold markup, quotes, control characters, invalid UTF-8
(a lone surrogate; bytes Python decoded with surrogateescape) and a megabyte of text, and mark
and range labels like them, go through recording, the snapshot, `memsnap analyze` (text, JSON,
HTML) and `memsnap info`; each must stay safe: no crash, no raw control byte on a terminal,
strict UTF-8 JSON that parses, a page whose only markup is its own.

Prints "ok NAME" / "FAIL NAME" per check and "N passed, N failed" at the end.
"""
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import types

os.environ["MEMSNAP_BACKEND"] = "sim"
os.environ["MEMSNAP_SIM_CAPACITY"] = "256M"

import memsnap  # noqa: E402

cli = sys.argv[1]
from checks import check, finish  # noqa: E402


HOSTILE = {
    "markup": "<script>alert(1)</script>",
    "attribute": "\"><img src=x onerror=alert(2)>",
    "close": "</script><script>alert(3)</script>",
    "quotes": "it's \"quoted\" \\ back",
    "control": "red\x1b[31m\x07bell\x08\x7f",
    "surrogate": "bad\udc80utf8",
    "c1": "csi\u009b31mRED",
    "bidi": "abc\u202eevil\u2066",
    "long": "x" * (1 << 20),
}


def function_named(name, filename):
    """A function with this name and file, allocating 1 MiB (and keeping it)."""
    def template():
        return memsnap.malloc(1 << 20)
    code = template.__code__.replace(co_name=name, co_qualname=name, co_filename=filename)
    return types.FunctionType(code, globals())


dirpath = tempfile.mkdtemp()
blocks = []
with memsnap.record(stacks="python"):
    for i, (kind, name) in enumerate(HOSTILE.items()):
        memsnap.mark("step " + name[:1000])
        with memsnap.range(name[:1000]):
            blocks.append(function_named(name, "/tmp/" + name[:200] + ".py")())
check("recording: hostile names raise nothing in Python", len(blocks) == len(HOSTILE))
snap = memsnap.dump(os.path.join(dirpath, "hostile.db"))
db = sqlite3.connect(snap)
db.text_factory = bytes
names = [r[0] for r in db.execute("select name from frames where kind = 'python'")]
check("snapshot: the markup name is kept as it was", HOSTILE["markup"].encode() in names)
check("snapshot: the megabyte name is kept whole", ("x" * (1 << 20)).encode() in names)
check("snapshot: the lone surrogate is kept as surrogateescape's bytes (invalid UTF-8)", b"bad\x80utf8" in names, str(names[:8]))
db.close()


def run(*args):
    return subprocess.run([cli, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


text = run("analyze", "--full-stacks", snap)
check("analyze: succeeds", text.returncode == 0, text.stderr.decode(errors="replace"))
check("analyze: no control byte reaches the terminal",
      not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", text.stdout), repr(re.findall(rb".{10}[\x00-\x08\x0b-\x1f\x7f].{10}", text.stdout)[:3]))
check("analyze: output is valid UTF-8", text.stdout.decode("utf-8", errors="strict") is not None)
check("analyze: no C1 control or bidirectional override reaches the terminal",
      not re.search("[\u0080-\u009f\u202a-\u202e\u2066-\u2069]", text.stdout.decode("utf-8", errors="replace")))
check("analyze: the markup name is printed as text", HOSTILE["markup"].encode() in text.stdout)
check("analyze: the megabyte name is cut (report under 100 KiB)", len(text.stdout) < 100 << 10, str(len(text.stdout)))

js = run("analyze", "--json", "--full-stacks", snap)
try:
    doc = json.loads(js.stdout.decode("utf-8", errors="strict"))
except (UnicodeDecodeError, ValueError) as e:
    doc = None
    print("  json:", e)
check("json: strict UTF-8 that parses", js.returncode == 0 and doc is not None)
shown = json.dumps(doc)
check("json: the markup and quotes come through as data", doc is not None and HOSTILE["markup"] in shown and
      HOSTILE["quotes"].replace("\\", "\\\\").replace('"', '\\"') in shown)

page_path = os.path.join(dirpath, "hostile.html")
html = run("analyze", "--html", page_path, snap)
page = open(page_path, "rb").read() if html.returncode == 0 else b""
check("html: written", html.returncode == 0 and page, html.stderr.decode(errors="replace"))
check("html: its own three scripts and no other markup from the snapshot",
      page.count(b"<script") == 3 and b"<img" not in page and b"onerror=alert" in page)
data = re.search(rb'<script type="application/json" id="memsnap-data">(.*?)</script>', page, re.S)
try:
    d = json.loads(data.group(1).decode("utf-8", errors="strict"))
except (AttributeError, UnicodeDecodeError, ValueError) as e:
    d = None
    print("  page data:", e)
check("html: the data block is strict UTF-8 JSON holding the names", d is not None and HOSTILE["close"] in d["strings"])
check("html: the page stays small despite the megabyte name", len(page) < 512 << 10, str(len(page)))

# memsnap replay on a card too small for the blocks: the first out of memory lists the live sites
replay = run("replay", "--capacity", "4M", snap)
check("replay: succeeds, names the live sites at the out of memory, no control byte",
      replay.returncode == 0 and b"out of memory: first at event" in replay.stdout and HOSTILE["markup"].encode() in replay.stdout
      and not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", replay.stdout), replay.stderr.decode(errors="replace"))
check("replay: no C1 control or bidirectional override reaches the terminal",
      not re.search("[\u0080-\u009f\u202a-\u202e\u2066-\u2069]", replay.stdout.decode("utf-8", errors="replace")))
rjs = run("replay", "--json", "--capacity", "4M", snap)
try:
    rdoc = json.loads(rjs.stdout.decode("utf-8", errors="strict"))
except (UnicodeDecodeError, ValueError) as e:
    rdoc = None
    print("  replay json:", e)
check("replay json: strict UTF-8 that parses, the markup as data in the live sites' stacks",
      rjs.returncode == 0 and rdoc is not None and HOSTILE["markup"] in json.dumps(rdoc["devices"][0]["oom"]["live"]))

# memsnap predict from two copies of the snapshot under hostile file names (markup with its "/"
# made "_", control bytes; the same history at "sizes" 1 and 2: nothing changes with the size, and
# a note says so): the names as text
import shutil  # noqa: E402
copies = []
for i, key in enumerate(("markup", "control")):
    copies.append(os.path.join(dirpath, HOSTILE[key].replace("/", "_") + "%d.db" % i))
    shutil.copyfile(snap, copies[-1])
pred = run("predict", copies[0] + "=1", copies[1] + "=2", "--at", "3")
check("predict: hostile file names, no control byte, the markup printed as text",
      pred.returncode == 0 and b"<script>alert(1)<_script>0.db" in pred.stdout and b"no allocation changes with the size" in pred.stdout
      and not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", pred.stdout + pred.stderr), pred.stderr.decode(errors="replace"))
pjs = run("predict", "--json", copies[0] + "=1", copies[1] + "=2", "--at", "3")
try:
    pdoc = json.loads(pjs.stdout.decode("utf-8", errors="strict"))
except (UnicodeDecodeError, ValueError) as e:
    pdoc = None
    print("  predict json:", e)
check("predict json: strict UTF-8 that parses, the markup as data in the runs' paths",
      pjs.returncode == 0 and pdoc is not None and "<script>alert(1)<_script>0.db" in pdoc["runs"][0]["path"])

info = run("info", snap)
check("info: succeeds with no control byte", info.returncode == 0 and not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", info.stdout))

finish()
