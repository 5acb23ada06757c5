"""test_layers.py BUILD_DIR: the recorder's files call each other in layers (nm on the objects).

The public entry points (recorder/api.c) sit on top: no file of the library calls into api.c
but torch_hooks.cc, PyTorch's adapter above them. The device table (devices.c), the history
(history.c), the statistics (stats.c) and the snapshot writer (snapshot.c) are in no loop of
calls with any other file. (The allocator core, alloc.c, and its providers expandable.c, pools.c
and async_alloc.c call each other by design: one policy with hooks into its providers.)
Only function calls count: a variable such as the active backend pointer is data.
"""
import os
import subprocess
import sys

from checks import check, finish

build = sys.argv[1]
objdir = os.path.join(build, "recorder")
objects = sorted(f for f in os.listdir(objdir) if f.endswith(".o"))
defined, used = {}, {}
for o in objects:
    lines = subprocess.run(["nm", os.path.join(objdir, o)], capture_output=True, text=True, check=True).stdout.splitlines()
    fields = [l.split() for l in lines]
    defined[o] = {f[2] for f in fields if len(f) == 3 and f[1] == "T"}
    used[o] = {f[1] for f in fields if len(f) == 2 and f[0] == "U"}
calls = {a: {b for b in objects if b != a and used[a] & defined[b]} for a in objects}

callers_of_api = sorted(a for a in objects if "api.o" in calls[a])
check("nothing below the entry points calls into api.c (only PyTorch's adapter, torch_hooks.cc)",
      callers_of_api == ["torch_hooks.o"], str(callers_of_api))
for o in ("history.o", "stats.o", "snapshot.o", "devices.o"):
    check(o[:-2] + ".c calls nothing in api.c", o in calls and "api.o" not in calls[o], str(sorted(calls.get(o, []))))


def reaches(start, goal):
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        for w in calls[v]:
            if w == goal:
                return True
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return False


for o in ("devices.o", "history.o", "stats.o", "snapshot.o", "api.o"):
    loops = sorted(w for w in calls.get(o, []) if reaches(w, o))
    check(o[:-2] + ".c is in no loop of calls", not loops, "calls back from " + str(loops))
check("the device state has a file of its own below api.c", "devices.o" in calls["api.o"] and "msi_device_get" in defined.get("devices.o", ()))
finish()
