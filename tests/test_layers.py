"""test_layers.py BUILD_DIR: the recorder's and the analyzer's files call each other in layers
(nm on the objects), and the folders of each are its layers (recorder/README.md) or stages
(analyzer/README.md).

A file uses another when it references a symbol the other defines: a function it calls or a
variable it reads or writes (nm types T, D, B, R and C; the active backend pointer, msi_be, counts
like a call). No file of the recorder uses a file that uses it back, directly or through others:
the files form layers, each using only those below it. The allocator's, bottom to top: the
active backend (backends/backend.c), the block and pool primitives (allocator/blocks.c), the modes
(modes/expandable.c, modes/pools.c, modes/async_alloc.c), the caching policy with the dispatch to
the modes (allocator/alloc.c), the device table (allocator/devices.c), and the public entry points (api.c) on top: no
file of the library calls into api.c but pytorch/torch_hooks.cc, PyTorch's adapter above them.

The recorder's rooms (recorder/README.md), bottom to top, each using only itself and what is
below it: the foundation (error.c, options.c) at the top of recorder/ uses nothing else; the
allocator's primitives (allocator/blocks.c, blocktree.c, ptrmap.c, stats.c, roles.c) use only each other
and the foundation; allocator/ as a whole (the policy, the device table and what hosts ask of
them) uses only modes/, history/, backends/ and the foundation; backends/ uses only
the foundation; history/ only backends/ and the foundation (it records, it never asks the
allocator, and never names a frame: that is snapshot/'s, at a dump); modes/ only history/,
backends/, the primitives and the foundation (never the policy above them); snapshot/ anything
but api.c, oom_throw.cc and pytorch/, and only api.c calls into it; pytorch/ only api.c, and
nothing of the library calls into it. Every object of the library is in one of those rooms but
the foundation and the entry points (api.c, oom_throw.cc) at recorder/'s top.

The analyzer (analyzer/README.md): no loop among its files either, and each folder is a stage
that uses only itself and the stages below it (util, read, analysis, replay, report, pytorch,
commands, main.c on top); SQL (sqlite3_) only in read/ and pytorch/; at most 3 .c files at its
top and at least 4 folders with code.
"""
import glob
import os
import subprocess
import sys

from checks import check, finish

DEFINING_TYPES = set("TDBRC")  # text, data, bss, read-only data, common

build = sys.argv[1]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def read_objects(objdir):
    """The objects below objdir (by path relative to it), what each defines and uses, and which
    of them each uses."""
    objects = sorted(os.path.relpath(f, objdir) for f in glob.glob(os.path.join(objdir, "**", "*.o"), recursive=True))
    defined, used = {}, {}
    for o in objects:
        lines = subprocess.run(["nm", os.path.join(objdir, o)], capture_output=True, text=True, check=True).stdout.splitlines()
        fields = [l.split() for l in lines]
        defined[o] = {f[2] for f in fields if len(f) == 3 and f[1] in DEFINING_TYPES}
        used[o] = {f[1] for f in fields if len(f) == 2 and f[0] == "U"}
    return objects, defined, used, {a: {b for b in objects if b != a and used[a] & defined[b]} for a in objects}


def loops_of(objects, defined, used, uses):
    """Every loop among the objects: the files that reach each other (strongly connected
    components), each named with the symbols that tie one file to the next."""
    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for w in uses[todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen
    reached = {o: reach(o) for o in objects}
    loops, placed = [], set()
    for o in objects:
        if o in placed:
            continue
        group = sorted({o} | {w for w in reached[o] if o in reached[w]})
        placed.update(group)
        if len(group) > 1:
            ties = ["%s -> %s: %s" % (a, b, ", ".join(sorted(used[a] & defined[b]))) for a in group for b in group if b in uses[a]]
            loops.append("{" + ", ".join(group) + "} (" + "; ".join(ties) + ")")
    return loops


objects, defined, used, uses = read_objects(os.path.join(build, "recorder"))

callers_of_api = sorted(a for a in objects if "api.o" in uses[a])
check("nothing below the entry points calls into api.c (only PyTorch's adapter, pytorch/torch_hooks.cc)",
      callers_of_api == ["pytorch/torch_hooks.o"], str(callers_of_api))
for o in ("history/history.o", "allocator/stats.o", "snapshot/snapshot.o", "allocator/devices.o"):
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


for o in ("allocator/devices.o", "history/history.o", "allocator/stats.o", "snapshot/snapshot.o", "api.o"):
    loops = sorted(w for w in uses.get(o, []) if reaches(w, o))
    check(o[:-2] + ".c is in no loop of calls", not loops, "calls back from " + str(loops))
check("the device state has a file of its own below api.c", "allocator/devices.o" in uses["api.o"] and "msi_device_get" in defined.get("allocator/devices.o", ()))

loops = loops_of(objects, defined, used, uses)
check("no loop among the recorder's files: none uses a file that uses it back (%d objects)" % len(objects),
      objects and not loops, "\n  ".join([""] + loops))

# The allocator's layers, named: each file uses none of the layers above it.
layers = [["backends/backend.o"], ["allocator/blocks.o"], ["modes/expandable.o", "modes/pools.o", "modes/async_alloc.o"], ["allocator/alloc.o"],
          ["allocator/devices.o"], ["api.o"]]
for i, layer in enumerate(layers):
    above = {o for higher in layers[i + 1:] for o in higher}
    for o in layer:
        up = sorted(uses.get(o, set()) & above)
        check(o[:-2] + ".c uses no file above its layer", o in uses and not up,
              "uses " + str(up) if o in uses else "no " + o)
check("msi_be, the active backend, lives in backends/backend.c", "msi_be" in defined.get("backends/backend.o", ()))

# The recorder's rooms (recorder/README.md): a room is a folder of recorder/; a file at its top is
# a room of its own. Each room uses only itself and the rooms named for it here.
FOUNDATION = {"error.o", "options.o"}
PRIMITIVES = {"allocator/blocks.o", "allocator/blocktree.o", "allocator/ptrmap.o", "allocator/stats.o", "allocator/roles.o"}
ROOMS = ("allocator", "backends", "history", "modes", "snapshot", "pytorch")
room = lambda o: o.split("/")[0] if "/" in o else o
TOP = {"api.o", "error.o", "options.o", "oom_throw.o"}
check("every recorder object is in a room (%s) but the foundation and the entry points (%s)" % (", ".join(ROOMS), ", ".join(sorted(TOP))),
      all(o in TOP or (o.count("/") == 1 and room(o) in ROOMS) for o in objects),
      str([o for o in objects if o not in TOP and (o.count("/") != 1 or room(o) not in ROOMS)]))
for r in ROOMS:
    check("recorder/%s/ has objects" % r, any(room(o) == r for o in objects))
in_room = lambda r: {o for o in objects if room(o) == r}
rules = [  # (what, its files, the rooms it may use besides its own files)
    ("the foundation (error.c, options.c) uses nothing else of the recorder", FOUNDATION, set()),
    ("the allocator's primitives (blocks.c, blocktree.c, ptrmap.c, stats.c, roles.c) use only each other and the foundation",
     PRIMITIVES, FOUNDATION),
    ("backends/ uses only the foundation", in_room("backends"), FOUNDATION),
    ("history/ uses only backends/ and the foundation: it never asks the allocator, and names no frame (snapshot/ does)",
     in_room("history"), {"backends"} | FOUNDATION),
    ("modes/ uses only history/, backends/, the primitives and the foundation: nothing of the policy above it",
     in_room("modes"), {"history", "backends"} | PRIMITIVES | FOUNDATION),
    ("allocator/ (the caching policy, its primitives, the device table and what hosts ask of them) uses only modes/, "
     "history/, backends/ and the foundation", in_room("allocator"), {"modes", "history", "backends"} | FOUNDATION),
    ("snapshot/ uses nothing above it (api.c, oom_throw.cc, pytorch/)", in_room("snapshot"),
     {room(o) for o in objects} - {"api.o", "oom_throw.o", "pytorch"}),
    ("pytorch/ uses only api.c", in_room("pytorch"), {"api.o"}),
]
for what, members, may in rules:
    wrong = sorted("%s -> %s: %s" % (o, b, ", ".join(sorted(used[o] & defined[b]))) for o in members & set(objects)
                   for b in uses[o] if b not in members and b not in may and room(b) not in may)
    check(what, members and members <= set(objects) and not wrong,
          "\n  ".join(["missing: %s" % sorted(members - set(objects))] * bool(members - set(objects)) + [""] + wrong))
for r, callers in (("snapshot", {"api.o"}), ("pytorch", set())):
    wrong = sorted("%s -> %s" % (o, b) for o in objects for b in uses[o] if room(b) == r and room(o) not in callers | {r})
    check("%s/ is called by %s" % (r, " and ".join(sorted(c[:-2] + ".c" for c in callers)) or "nothing of the library"),
          not wrong, str(wrong))

# ---- the analyzer ---------------------------------------------------------------------------
objects, defined, used, uses = read_objects(os.path.join(build, "analyzer"))
loops = loops_of(objects, defined, used, uses)
check("no loop among the analyzer's files: none uses a file that uses it back (%d objects)" % len(objects),
      len(objects) > 20 and not loops, "\n  ".join([""] + loops))
stages = {"util": set(), "read": {"util"}, "analysis": {"read", "util"}, "replay": {"analysis", "read", "util"},
          "report": {"replay", "analysis", "read", "util"}, "pytorch": {"read", "util"},
          "commands": {"report", "replay", "analysis", "read", "util", "pytorch"},
          "main.o": {"commands", "read"}}
stage = lambda o: o.split("/")[0]
check("every analyzer object is in a stage", all(stage(o) in stages for o in objects),
      str([o for o in objects if stage(o) not in stages]))
for o in objects:
    wrong = sorted(b for b in uses[o] if stage(b) != stage(o) and stage(b) not in stages.get(stage(o), ()))
    if wrong:
        check(o + " uses only its own stage and the stages below it", False,
              "; ".join("%s: %s" % (b, ", ".join(sorted(used[o] & defined[b]))) for b in wrong))
check("the analyzer's stages call down only (%d objects)" % len(objects),
      all(stage(b) == stage(o) or stage(b) in stages.get(stage(o), ()) for o in objects for b in uses[o]))
sources = glob.glob(os.path.join(root, "analyzer", "**", "*.[ch]"), recursive=True)
with_sql = sorted({os.path.relpath(os.path.dirname(f), os.path.join(root, "analyzer")) for f in sources if "sqlite3_" in open(f, errors="replace").read()})
check("SQL (sqlite3_) only in analyzer/read/ and analyzer/pytorch/", with_sql and set(with_sql) <= {"read", "pytorch"}, str(with_sql))
top = [f for f in os.listdir(os.path.join(root, "analyzer")) if f.endswith(".c")]
folders = [d for d in os.listdir(os.path.join(root, "analyzer")) if glob.glob(os.path.join(root, "analyzer", d, "*.c"))]
check("analyzer/: at most 3 .c files at its top, at least 4 folders with code", len(top) <= 3 and len(folders) >= 4,
      "%s; %s" % (top, folders))
finish()
