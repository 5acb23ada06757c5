"""test_layers.py BUILD_DIR: the recorder's files call each other in layers (nm on the objects).

A file uses another when it references a symbol the other defines: a function it calls or a
variable it reads or writes (nm types T, D, B, R and C; the active backend pointer, msi_be, counts
like a call). No file of the recorder uses a file that uses it back, directly or through others:
the files form layers, each using only those below it. The allocator's, bottom to top: the
active backend (backend.c), the block and pool primitives (blocks.c), the modes (expandable.c,
pools.c, async_alloc.c), the caching policy with the dispatch to the modes (alloc.c), the device
table (devices.c), and the public entry points (api.c) on top: no file of the library calls into
api.c but torch_hooks.cc, PyTorch's adapter above them.
"""
import os
import subprocess
import sys

from checks import check, finish

DEFINING_TYPES = set("TDBRC")  # text, data, bss, read-only data, common

build = sys.argv[1]
objdir = os.path.join(build, "recorder")
objects = sorted(f for f in os.listdir(objdir) if f.endswith(".o"))
defined, used = {}, {}
for o in objects:
    lines = subprocess.run(["nm", os.path.join(objdir, o)], capture_output=True, text=True, check=True).stdout.splitlines()
    fields = [l.split() for l in lines]
    defined[o] = {f[2] for f in fields if len(f) == 3 and f[1] in DEFINING_TYPES}
    used[o] = {f[1] for f in fields if len(f) == 2 and f[0] == "U"}
uses = {a: {b for b in objects if b != a and used[a] & defined[b]} for a in objects}

callers_of_api = sorted(a for a in objects if "api.o" in uses[a])
check("nothing below the entry points calls into api.c (only PyTorch's adapter, torch_hooks.cc)",
      callers_of_api == ["torch_hooks.o"], str(callers_of_api))
for o in ("history.o", "stats.o", "snapshot.o", "devices.o"):
    check(o[:-2] + ".c calls nothing in api.c", o in uses and "api.o" not in uses[o], str(sorted(uses.get(o, []))))


def reaches(start, goal):
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        for w in uses[v]:
            if w == goal:
                return True
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return False


for o in ("devices.o", "history.o", "stats.o", "snapshot.o", "api.o"):
    loops = sorted(w for w in uses.get(o, []) if reaches(w, o))
    check(o[:-2] + ".c is in no loop of calls", not loops, "calls back from " + str(loops))
check("the device state has a file of its own below api.c", "devices.o" in uses["api.o"] and "msi_device_get" in defined.get("devices.o", ()))

# Every loop among the recorder's objects: the files that reach each other (strongly connected
# components), each named with the symbols that tie one file to the next.
loops, placed = [], set()
for o in objects:
    if o in placed:
        continue
    group = sorted({o} | {w for w in objects if w != o and reaches(o, w) and reaches(w, o)})
    placed.update(group)
    if len(group) > 1:
        ties = ["%s -> %s: %s" % (a, b, ", ".join(sorted(used[a] & defined[b])))
                for a in group for b in group if b in uses[a]]
        loops.append("{" + ", ".join(group) + "} (" + "; ".join(ties) + ")")
check("no loop among the recorder's files: none uses a file that uses it back (%d objects)" % len(objects),
      objects and not loops, "\n  ".join([""] + loops))

# The allocator's layers, named: each file uses none of the layers above it.
layers = [["backend.o"], ["blocks.o"], ["expandable.o", "pools.o", "async_alloc.o"], ["alloc.o"], ["devices.o"], ["api.o"]]
for i, layer in enumerate(layers):
    above = {o for higher in layers[i + 1:] for o in higher}
    for o in layer:
        up = sorted(uses.get(o, set()) & above)
        check(o[:-2] + ".c uses no file above its layer", o in uses and not up,
              "uses " + str(up) if o in uses else "no " + o)
check("msi_be, the active backend, lives in backend.c", "msi_be" in defined.get("backend.o", ()))
finish()
