"""test_user_line.py BUILD_DIR: the program's own line in the stacks reports print
(analyzer/report/text.c, read/frames.c's ms_frame_is_program), recorded on the simulated device.

A library installed in a site-packages directory (a stand-in written to a temporary directory)
allocates six calls deep, and a script calls it in a loop, keeping what it returns: the leak.
Folded to --frames 4 (the report's default) the leak's stack shows the library's innermost
frames, then "...", then the script's own line, which would be cut otherwise; with the program's
line among the first frames, or with --full-stacks, nothing is added; `memsnap run`'s summary,
which shows fewer frames, keeps it too.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
from checks import check, finish  # noqa: E402

build = sys.argv[1]
cli = os.path.join(build, "memsnap")
work = tempfile.mkdtemp(prefix="memsnap-user-line-")
site = os.path.join(work, "lib", "python3", "site-packages", "deeplib")
os.makedirs(site)
with open(os.path.join(site, "__init__.py"), "w") as f:
    f.write(textwrap.dedent("""
        import memsnap
        def level6(n): return memsnap.malloc(n)
        def level5(n): return level6(n)
        def level4(n): return level5(n)
        def level3(n): return level4(n)
        def level2(n): return level3(n)
        def make_buffer(n): return level2(n)
    """))
script = os.path.join(work, "train.py")
with open(script, "w") as f:
    f.write(textwrap.dedent("""
        import sys
        import memsnap
        from deeplib import make_buffer
        memsnap.record(stacks="python")
        kept = []
        for step in range(6):
            kept.append(make_buffer(1 << 20))
        memsnap.dump(sys.argv[1])
    """))
db = os.path.join(work, "train.db")
env = dict(os.environ, MEMSNAP_BACKEND="sim", MEMSNAP_SIM_CAPACITY="256M",
           PYTHONPATH=os.path.dirname(site) + os.pathsep + os.environ.get("PYTHONPATH", ""))
run = subprocess.run([sys.executable, script, db], env=env, capture_output=True, text=True)
check("the script is recorded", run.returncode == 0 and os.path.exists(db), run.stderr)


def leak_stack(*args):
    """The lines of the first leak candidate's stack in the text report."""
    out = subprocess.run([cli, "analyze", *args, db], capture_output=True, text=True).stdout
    lines = out.split("leak candidates (best first)\n", 1)[-1].splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("  1. ")), len(lines))  # after the verdict
    stack = []
    for line in lines[first + 1:]:
        if not line.startswith("       "):
            break
        stack.append(line.strip())
    return stack


stack = leak_stack()
check("folded: the library's innermost frames, then '...', then the script's line",
      len(stack) == 6 and stack[0].startswith("level6 (__init__.py:") and stack[4] == "..." and
      stack[5].startswith("<module> (train.py:8)"), "\n".join(stack))
stack = leak_stack("--frames", "8")
check("with room for it: the script's line in its place, no '...'",
      "..." not in stack and stack[-1].startswith("<module> (train.py:8)"), "\n".join(stack))
stack = leak_stack("--full-stacks")
check("--full-stacks: every frame, no '...'", "..." not in stack and any("train.py:8" in s for s in stack), "\n".join(stack))
j = json.loads(subprocess.run([cli, "analyze", "--json", db], capture_output=True, text=True).stdout)
check("JSON unchanged: full_stack holds the line, stack the frames that matter",
      any(f["file"].endswith("train.py") and f["line"] == 8 for f in (j["leaks"] + j["held"])[0]["full_stack"]) and
      (j["leaks"] + j["held"])[0]["stack"][0]["name"] == "level6")

# `memsnap top` names a site as the one-line report does: the script's line, not the library's frame.
# The same script, killed where it would dump: top reads the live mapping it leaves.
killed = os.path.join(work, "killed.py")
with open(killed, "w") as f:
    f.write(open(script).read().replace("memsnap.dump(sys.argv[1])", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
live_dir = os.path.join(work, "live")
os.makedirs(live_dir)
p = subprocess.run([sys.executable, killed], env=dict(env, MEMSNAP_LIVE_DIR=live_dir), capture_output=True, text=True)
mappings = [n for n in os.listdir(live_dir) if n.endswith(".live")]
pid = mappings[0][len("memsnap-"):-len(".live")] if mappings else "0"
top = subprocess.run([cli, "top", "--json", pid], env=dict(os.environ, MEMSNAP_LIVE_DIR=live_dir), capture_output=True, text=True)
try:
    t = json.loads(top.stdout)
except ValueError:
    t = {}
wheres = [s["where"] for s in t.get("growing", []) + t.get("largest", [])]
check("top names the script's line (killed.py:8, not the library's level6), as the report's one-line stacks do",
      len(mappings) == 1 and wheres and wheres[0].startswith("<module> (killed.py:8)"), top.stdout + top.stderr)
finish()
