"""who.py: how the GPU checks of tests/gpu/cxx/ run a program under memsnap or natively: the
first argument, "memsnap" (memsnap.enable() first, in this process: its C++ allocator, or the
pluggable interface where that cannot be built) or "native"."""
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def allocator_from_argv():
    """(who was asked, the allocator in use: "native", "cxx" or "pluggable")."""
    who = sys.argv[1] if len(sys.argv) > 1 else "native"
    if who != "memsnap":
        return who, "native"
    sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
    import memsnap
    memsnap.enable()
    return who, memsnap.allocator_kind()
