#!/usr/bin/env python3
"""pytorch_pickles.py: PyTorch snapshot pickles for memsnap's import/export tests and benchmark
(tests/analyzer/test_import.sh, tests/analyzer/bench_import.sh). Standard library only; never imports torch.

  hostile DIR MARKER       writes hostile pickles into DIR (reduce/global payloads would touch
                           MARKER if anything ran them; deep nesting, huge lengths, bad memo ...)
  protocols SNAP.gz DIR    re-pickles a real snapshot with protocols 2, 3, 4 and 5
  multi OUT                a snapshot of three devices (the first without entries), interleaved in
                           time, with expandable segments' maps and unmaps, an OOM, a snapshot
                           entry, nested annotations, an END without START, an action memsnap has
                           no kind for and an entry without time_us
  releases OUT             a trace in which the allocator released cached memory by itself, as
                           PyTorch's trace shows it (segment_free entries with the request's
                           frames, then its segment_alloc and alloc, or its oom): a 700 MiB request
                           served after 600 MiB released, an empty_cache (150 MiB), an 800 MiB
                           request that fails after 200 MiB released (tests/analyzer/test_releases.sh)
  settings OUT EXPECTED    a small snapshot whose allocator_settings hold ints of every width,
                           floats, bools, None and text; EXPECTED: the options rows import must make
  check-export PICKLE DB   checks an exported pickle against the snapshot it came from, the way
                           PyTorch's _memory_viz.py and MemoryViz.js read it; prints "ok" or why not
  same ORIGINAL EXPORTED   compares an exported pickle with the PyTorch original, field by field
  big OUT BYTES [--gzip]   streams a synthetic snapshot of about BYTES bytes, built from the frames
                           and stacks of resnet50_leak, as PyTorch writes them (shared frame dicts,
                           one frames list per entry, free_requested/free_completed sharing a list)
"""
import collections
import gzip
import io
import os
import pickle
import pickletools
import sqlite3
import struct
import sys

SNAPSHOTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")


# ---- hostile inputs -------------------------------------------------------------------------

class Reduce:
    """Unpickling this would call os.system: memsnap must refuse it before anything runs."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch " + self.marker,))


def hostile(out, marker):
    def put(name, data):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)

    for proto in (2, 3, 4, 5):
        put("reduce-p%d.pickle" % proto, pickle.dumps(Reduce(marker), protocol=proto))
    # inside a snapshot that is otherwise fine: the payload sits in a frame's name
    snap = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 512, "stream": 0,
                                                "time_us": 1, "frames": [{"name": Reduce(marker), "filename": "x.py",
                                                                          "line": 1}]}]]}
    put("reduce-nested.pickle", pickle.dumps(snap, protocol=4))
    put("reduce-nested.pickle.gz", gzip.compress(pickle.dumps(snap, protocol=4)))
    put("global.pickle", b"\x80\x02cos\nsystem\nq\x00.")
    put("build.pickle", b"\x80\x04}\x94}\x94b.")
    put("inst.pickle", b"\x80\x02(ios\nsystem\n.")
    put("persid.pickle", b"\x80\x02Pabc\n.")
    put("text-string.pickle", b"\x80\x02S'abc'\n.")
    # nesting deeper than any snapshot: [[[[...]]]] built by APPENDs
    depth = 100000
    put("deep.pickle", b"\x80\x04" + b"]" * depth + b"a" * (depth - 1) + b".")
    # huge length fields, with little data behind them
    put("huge-unicode8.pickle", b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"abc")
    put("huge-binbytes.pickle", b"\x80\x04B" + struct.pack("<I", 0xFFFFFFFF) + b"abc")
    put("huge-long4.pickle", b"\x80\x04\x8b" + struct.pack("<I", 0x7FFFFFFF) + b"\x01\x02")
    put("huge-frame.pickle", b"\x80\x04\x95" + struct.pack("<Q", 1 << 63) + b"N.")
    # memo misuse, stack misuse
    put("memo-undefined.pickle", b"\x80\x04h\x05.")
    put("memo-sparse.pickle", b"\x80\x04Nr\x00\x00\x00\x10.")
    put("stack-underflow.pickle", b"\x80\x04a.")
    put("appends-no-mark.pickle", b"\x80\x04]e.")
    put("setitem-list.pickle", b"\x80\x04]NNs.")
    put("unhashable-key.pickle", b"\x80\x04}]Ns.")
    put("many-values.pickle", b"\x80\x04" + b"N" * 1200000 + b".")
    put("no-stop.pickle", b"\x80\x04}")
    put("two-values.pickle", b"\x80\x04NN.")
    put("protocol-9.pickle", b"\x80\x09N.")
    put("protocol-0.pickle", pickle.dumps({"segments": []}, protocol=0))
    put("empty.pickle", b"")
    put("text.pickle", b"hello, this is not a pickle\n")
    put("unknown-opcode.pickle", b"\x80\x04\xff.")
    # well-formed pickles that are not snapshots, or are damaged ones
    put("not-a-snapshot.pickle", pickle.dumps({"hello": [1, 2, 3]}, protocol=4))
    put("int.pickle", pickle.dumps(42, protocol=4))
    put("bad-field.pickle", pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": "x",
                                                                             "size": 1, "frames": []}]]}, protocol=4))
    put("bad-state.pickle", pickle.dumps({"segments": [{"device": 0, "address": 0, "total_size": 512, "stream": 0,
                                                        "blocks": [{"size": 512, "state": "weird"}]}],
                                          "device_traces": []}, protocol=4))
    put("stray-entries.pickle", pickle.dumps({"segments": [], "device_traces": [],
                                              "other": [{"action": "alloc", "addr": 1, "size": 1}]}, protocol=4))
    put("huge-time.pickle", pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1,
                                                                             "size": 1, "time_us": 1 << 70}]]},
                                         protocol=4))
    # cycles through the memo: a list that holds itself, a dict that holds itself
    put("self-list.pickle", b"\x80\x04]\x94h\x00a.")
    put("self-dict.pickle", b"\x80\x04}\x94\x8c\x01a\x94h\x00s.")
    # bad gzip: the magic, then garbage; and a real snapshot's gzip cut short
    put("bad.pickle.gz", b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"garbage that is not deflate data" * 10)


# ---- protocols and settings -----------------------------------------------------------------

def protocols(snap, out):
    data = pickle.loads(gzip.open(snap).read())
    for proto in (2, 3, 4, 5):
        with open(os.path.join(out, "proto%d.pickle" % proto), "wb") as f:
            pickle.dump(data, f, protocol=proto)


def multi(out):
    fr = lambda name, line: {"name": name, "filename": "train.py", "line": line}
    step = [fr("step", 10), fr("<module>", 3)]
    grow = [{"name": "at::native::empty_cuda", "filename": "??", "line": 0}, fr("grow", 20)]
    e = lambda action, addr, size, t, frames=step, **kw: dict(action=action, addr=addr, size=size, stream=0, time_us=t,
                                                             frames=frames, **kw)
    dev1 = [e("segment_map", 1 << 40, 2 << 20, 100), e("alloc", 1 << 40, 1000, 110),
            e("alloc", (1 << 40) + 1024, 512, 130, grow), e("free_requested", 1 << 40, 1000, 150),
            e("free_completed", 1 << 40, 1000, 150), e("segment_unmap", (1 << 40) + (1 << 20), 1 << 20, 170),
            e("user_defined", 0, 0, 175), {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "frames": []}]
    dev2 = [e("segment_alloc", 2 << 40, 20 << 20, 105), e("alloc", 2 << 40, 20 << 20, 120),
            {"action": "oom", "device_free": 12345, "size": 4 << 20, "stream": 7, "time_us": 140, "frames": grow}]
    ann = [{"stage": "END", "name": "before", "device": 1, "time_us": 90},
           {"stage": "START", "name": "outer", "device": 1, "time_us": 101},
           {"stage": "START", "name": "inner", "device": 1, "time_us": 102},
           {"stage": "END", "name": "inner", "device": 1, "time_us": 160},
           {"stage": "END", "name": "outer", "device": 1, "time_us": 165},
           {"stage": "START", "name": "open", "device": 2, "time_us": 166}]
    snap = {"segments": [{"device": 2, "address": 2 << 40, "total_size": 20 << 20, "stream": 0, "segment_type": "large",
                          "blocks": [{"address": 2 << 40, "size": 20 << 20, "requested_size": 20 << 20,
                                      "state": "active_allocated", "frames": step}]}],
            "device_traces": [[], dev1, dev2], "allocator_settings": {"expandable_segments": True},
            "external_annotations": ann}
    with open(out, "wb") as f:
        pickle.dump(snap, f, protocol=5)


def releases(out):
    MiB = 1 << 20
    fr = lambda name, line: [{"name": name, "filename": "train.py", "line": line}, {"name": "<module>", "filename": "train.py", "line": 1}]
    cached, big, empty, small, held, huge = (fr("cached_block", 10), fr("big_request", 20), fr("empty_cache_call", 30),
                                             fr("small_block", 40), fr("held_block", 50), fr("huge_request", 60))
    t = [0]

    def e(action, addr, size, frames, **kw):
        t[0] += 10
        return dict(action=action, addr=addr, size=size, stream=0, time_us=t[0], frames=frames, **kw)

    A, B, C, D, E = (0x7F0000000000 + k * 1024 * MiB for k in range(5))
    trace = [e("segment_alloc", A, 600 * MiB, cached), e("alloc", A, 600 * MiB, cached),
             e("free_requested", A, 600 * MiB, cached), e("free_completed", A, 600 * MiB, cached),
             # the retry: the cache released for the 700 MiB request, then its segment and block
             e("segment_free", A, 600 * MiB, big), e("segment_alloc", B, 700 * MiB, big), e("alloc", B, 700 * MiB, big),
             e("free_requested", B, 700 * MiB, big), e("free_completed", B, 700 * MiB, big),
             e("segment_alloc", C, 150 * MiB, cached), e("alloc", C, 150 * MiB, cached),
             e("free_requested", C, 150 * MiB, cached), e("free_completed", C, 150 * MiB, cached),
             # torch.cuda.empty_cache(): both segments, then an unrelated allocation
             e("segment_free", B, 700 * MiB, empty), e("segment_free", C, 150 * MiB, empty),
             e("segment_alloc", C, 10 * MiB, small), e("alloc", C, 10 * MiB, small),
             e("segment_alloc", D, 300 * MiB, held), e("alloc", D, 300 * MiB, held),
             e("segment_alloc", E, 200 * MiB, cached), e("alloc", E, 200 * MiB, cached),
             e("free_requested", E, 200 * MiB, cached), e("free_completed", E, 200 * MiB, cached),
             # the failed retry: 200 MiB released for the 800 MiB request, then its out of memory
             e("segment_free", E, 200 * MiB, huge)]
    t[0] += 10
    trace.append({"action": "oom", "device_free": 514 * MiB, "size": 800 * MiB, "stream": 0, "time_us": t[0], "frames": huge})
    blocks = lambda addr, size, frames: {"device": 0, "address": addr, "total_size": size, "stream": 0, "segment_type": "large",
                                         "blocks": [{"address": addr, "size": size, "requested_size": size,
                                                     "state": "active_allocated", "frames": frames}]}
    snap = {"segments": [blocks(C, 10 * MiB, small), blocks(D, 300 * MiB, held)], "device_traces": [trace],
            "allocator_settings": {}, "external_annotations": []}
    with open(out, "wb") as f:
        pickle.dump(snap, f, protocol=4)


def settings(out, expected):
    values = {
        "zero": 0, "one_byte": 200, "two_bytes": 60000, "int32": -2000000000, "int40": 1 << 40,
        "neg64": -(1 << 62) - 12345, "max64": (1 << 63) - 1, "min64": -(1 << 63), "u64": (1 << 64) - 1,
        "big": 1 << 200, "float": 0.1, "whole_float": 2.0, "tiny": 5e-324, "neg_float": -1.5e300,
        "true": True, "false": False, "none": None, "text": "h\u00e9llo \u2603 \U0001F600", "empty": "",
        "nested": {"1": 0, "2": 4, "x": "y"},
    }
    snap = {"segments": [], "device_traces": [[]], "allocator_settings": values, "external_annotations": []}
    with open(out, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    rows = {}
    for k, v in values.items():
        if isinstance(v, dict):
            for sk, sv in v.items():
                rows["pytorch.%s.%s" % (k, sk)] = str(sv)
        elif isinstance(v, int) and not isinstance(v, bool) and not -(1 << 63) <= v < (1 << 63):
            continue  # out of int64: not kept
        else:
            rows["pytorch." + k] = "" if v == "" else repr(v) if not isinstance(v, str) else v
    with open(expected, "w") as f:
        for k in sorted(rows):
            f.write("%s|%s\n" % (k, rows[k]))


# ---- exported pickles -----------------------------------------------------------------------

# The opcodes that PyTorch's JavaScript unpickler (torch/utils/viz/MemoryViz.js) knows.
JS_OPCODES = {"APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1",
              "LONG_BINGET", "MARK", "MEMOIZE", "PROTO", "SETITEMS", "SHORT_BINUNICODE", "STOP", "TUPLE2", "APPEND",
              "NEWFALSE", "BINPUT", "BINUNICODE", "EMPTY_TUPLE", "NEWTRUE", "NONE", "BINFLOAT", "TUPLE", "TUPLE1",
              "TUPLE3", "LONG_BINPUT", "LIST", "DICT", "SETITEM"}
ACTIONS = {1: "alloc", 2: "free_requested", 3: "free_completed", 4: "segment_alloc", 5: "segment_free", 6: "oom",
           7: "snapshot", 11: "segment_map", 12: "segment_unmap"}
STATES = {"allocated": "active_allocated", "free": "inactive", "pending_free": "active_pending_free"}


def check_export(path, db):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    problems = []
    ops = collections.Counter(op.name for op, _, _ in pickletools.genops(raw))
    if raw[:2] != b"\x80\x04":
        problems.append("not protocol 4")
    if set(ops) - JS_OPCODES:
        problems.append("opcodes MemoryViz.js cannot read: %s" % sorted(set(ops) - JS_OPCODES))
    # MemoryViz.js spreads each APPENDS batch as call arguments: keep batches small
    depth, batch, biggest = 0, [], 0
    for op, _, _ in pickletools.genops(raw):
        if op.name == "MARK":
            batch.append(0)
        elif op.name in ("APPENDS", "SETITEMS"):
            biggest = max(biggest, batch.pop() if batch else 0)
        elif batch:
            batch[-1] += 1
    if biggest > 4 * 1000 * 20:
        problems.append("a batch of %d opcodes" % biggest)
    d = pickle.loads(raw)
    c = sqlite3.connect(db)
    if set(d) != {"segments", "device_traces", "allocator_settings", "external_annotations"}:
        problems.append("top-level keys %s" % sorted(d))
    nseg, nblk = c.execute("select (select count(*) from segments), (select count(*) from blocks)").fetchone()
    if len(d["segments"]) != nseg or sum(len(s["blocks"]) for s in d["segments"]) != nblk:
        problems.append("segments/blocks: %d/%d, the snapshot has %d/%d" % (
            len(d["segments"]), sum(len(s["blocks"]) for s in d["segments"]), nseg, nblk))
    for s in d["segments"]:
        need = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "blocks", "frames"}
        if not need <= set(s):
            problems.append("segment keys %s" % sorted(s))
            break
        # _memory_viz.segsum asserts that the blocks tile the segment
        if sum(b["size"] for b in s["blocks"]) != s["total_size"]:
            problems.append("blocks do not tile segment at %#x" % s["address"])
        at = s["address"]
        for b in s["blocks"]:
            if b["address"] != at or b["state"] not in STATES.values() or "requested_size" not in b:
                problems.append("block %s" % {k: v for k, v in b.items() if k != "frames"})
                break
            at += b["size"]
        if s["allocated_size"] != sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated"):
            problems.append("allocated_size of segment at %#x" % s["address"])
    want = collections.Counter()
    for kind, n in c.execute("select kind, count(*) from events where kind in (1,2,3,4,5,6,7,11,12) group by kind"):
        want[ACTIONS[kind]] = n
    got = collections.Counter(e["action"] for t in d["device_traces"] for e in t)
    if got != want:
        problems.append("actions %s, the snapshot has %s" % (dict(got), dict(want)))
    start = c.execute("select value from meta where key = 'start_unix_ns'").fetchone()[0]
    first = c.execute("select min(time_ns) from events where kind in (1,2,3,4,5,6,7,11,12)").fetchone()[0]
    times = [e["time_us"] for t in d["device_traces"] for e in t]
    if times and (min(times) != (start + first) // 1000 or times != sorted(times)):
        problems.append("times: first %s, expected %s, sorted %s" % (min(times), (start + first) // 1000,
                                                                     times == sorted(times)))
    for t in d["device_traces"]:
        for e in t:
            keys = {"action", "size", "stream", "time_us", "frames"} | ({"device_free"} if e["action"] == "oom" else {"addr"})
            if not keys <= set(e) or not all({"name", "filename", "line"} <= set(f) for f in e["frames"]):
                problems.append("entry %s" % {k: v for k, v in e.items() if k != "frames"})
                break
    nann = c.execute("select (select count(*) from ranges) + (select count(*) from ranges where end_ns is not null)"
                     " + 2 * (select count(*) from marks)").fetchone()[0]
    if len(d["external_annotations"]) != nann or any(set(a) != {"stage", "name", "device", "time_us"}
                                                     for a in d["external_annotations"]):
        problems.append("annotations: %d, expected %d" % (len(d["external_annotations"]), nann))
    print("\n".join(problems) if problems else "ok")


def frames_key(frames):
    # '' and '??' both mean "no source file" and import the same
    return [(f["name"], f["filename"] if f["filename"] not in ("", "??") else "?", f["line"]) for f in frames]


def same(original, exported):
    a = pickle.loads(gzip.open(original).read() if original.endswith(".gz") else open(original, "rb").read())
    b = pickle.load(open(exported, "rb"))
    problems = []
    for i, (ta, tb) in enumerate(zip(a["device_traces"], b["device_traces"])):
        if len(ta) != len(tb):
            problems.append("device %d: %d entries, exported %d" % (i, len(ta), len(tb)))
        for x, y in zip(ta, tb):
            if any(x.get(k) != y.get(k) for k in ("action", "addr", "device_free", "size", "stream", "time_us")) or \
                    frames_key(x["frames"]) != frames_key(y["frames"]):
                problems.append("entry %s differs" % {k: v for k, v in x.items() if k != "frames"})
                break
    if len(a["segments"]) != len(b["segments"]):
        problems.append("segments: %d, exported %d" % (len(a["segments"]), len(b["segments"])))
    for s, t in zip(a["segments"], b["segments"]):
        if any(s[k] != t[k] for k in ("device", "address", "total_size", "allocated_size", "active_size",
                                      "requested_size", "stream", "segment_type")):
            problems.append("segment at %#x differs" % s["address"])
        for x, y in zip(s["blocks"], t["blocks"]):
            if any(x[k] != y[k] for k in ("address", "size", "state")) or (x["state"] != "inactive" and (
                    x["requested_size"] != y["requested_size"] or frames_key(x["frames"]) != frames_key(y["frames"]))):
                problems.append("block at %#x differs" % x["address"])
                break
    if a.get("external_annotations", []) != b["external_annotations"]:
        problems.append("external_annotations differ")
    if a.get("allocator_settings", {}) != b["allocator_settings"]:
        problems.append("allocator_settings differ")
    print("\n".join(problems[:10]) if problems else "ok")


# ---- a big snapshot, streamed ---------------------------------------------------------------

class Writer:
    """Writes pickle opcodes directly, counting memo entries as the unpickler will."""

    def __init__(self, f):
        self.f, self.memo, self.buf, self.count = f, 0, [], 0

    def raw(self, b):
        self.count += len(b)
        self.buf.append(b)
        if len(self.buf) > 4096:
            self.flush()

    def flush(self):
        self.f.write(b"".join(self.buf))
        self.buf = []

    def memoize(self):
        self.raw(b"\x94")
        self.memo += 1
        return self.memo - 1

    @staticmethod
    def get(i):
        return b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)

    @staticmethod
    def int(v):
        if 0 <= v < 256:
            return b"K" + bytes([v])
        if -(1 << 31) <= v < (1 << 31):
            return b"J" + struct.pack("<i", v)
        return b"\x8a\x08" + struct.pack("<q", v)

    @staticmethod
    def str(s):
        b = s.encode()
        return (b"\x8c" + bytes([len(b)]) if len(b) < 256 else b"X" + struct.pack("<I", len(b))) + b


def big(out, target, compress):
    src = pickle.loads(gzip.open(os.path.join(SNAPSHOTS, "resnet50_leak.pickle.gz")).read())
    trace = src["device_traces"][0]
    stacks = [tuple((f["name"], f["filename"], f["line"]) for f in e["frames"]) for e in trace]
    f = gzip.open(out, "wb", compresslevel=1) if compress else open(out, "wb")
    w = Writer(f)
    keys = {}

    def key(k):
        if k not in keys:
            w.raw(Writer.str(k))
            keys[k] = w.memoize()
        else:
            w.raw(Writer.get(keys[k]))

    frame_memo = {}

    def frame(fr):
        if fr in frame_memo:
            w.raw(Writer.get(frame_memo[fr]))
            return
        w.raw(b"}")
        frame_memo[fr] = w.memoize()
        w.raw(b"(")
        key("name"), w.raw(Writer.str(fr[0])), key("filename"), w.raw(Writer.str(fr[1])), key("line")
        w.raw(Writer.int(fr[2]) + b"u")

    def frames_list(stack):
        w.raw(b"]")
        idx = w.memoize()
        if stack:
            w.raw(b"(")
            for fr in stack:
                frame(fr)
            w.raw(b"e")
        return idx

    w.raw(b"\x80\x04}")
    w.memoize()
    w.raw(b"(")
    key("segments")
    w.raw(b"]")
    w.memoize()
    key("device_traces")
    w.raw(b"]")
    w.memoize()
    w.raw(b"]")
    w.memoize()
    n, last_list = 0, None
    span = trace[-1]["time_us"] - trace[0]["time_us"] + 1000
    while w.count < target:
        w.raw(b"(")
        for i in range(1000):
            e = trace[n % len(trace)]
            stack = stacks[n % len(trace)]
            rounds = n // len(trace)
            w.raw(b"}")
            w.memoize()
            w.raw(b"(")
            key("action"), key(e["action"]), key("addr")
            w.raw(Writer.int(e["addr"] + (rounds % 64) * (1 << 40)))
            key("size"), w.raw(Writer.int(e["size"])), key("stream"), w.raw(Writer.int(e["stream"]))
            key("time_us"), w.raw(Writer.int(e["time_us"] + rounds * span))
            key("compile_context"), key("N/A"), key("user_metadata"), key("")
            key("frames")
            if e["action"] == "free_completed" and last_list is not None:
                w.raw(Writer.get(last_list))
            else:
                last_list = frames_list(stack)
            w.raw(b"u")
            n += 1
        w.raw(b"e")
    w.raw(b"a")  # the device's list into device_traces
    key("allocator_settings")
    w.raw(b"}")
    w.memoize()
    key("external_annotations")
    w.raw(b"]")
    w.memoize()
    w.raw(b"u.")
    w.flush()
    f.close()
    print("%d entries, %d distinct frames" % (n, len(frame_memo)))


def main(argv):
    if len(argv) >= 3 and argv[0] == "hostile":
        hostile(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "protocols":
        protocols(argv[1], argv[2])
    elif len(argv) == 2 and argv[0] == "multi":
        multi(argv[1])
    elif len(argv) == 2 and argv[0] == "releases":
        releases(argv[1])
    elif len(argv) == 3 and argv[0] == "settings":
        settings(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "check-export":
        check_export(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "same":
        same(argv[1], argv[2])
    elif len(argv) >= 3 and argv[0] == "big":
        big(argv[1], int(argv[2]), "--gzip" in argv)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
