"""test_holders_pick.py: which blocks of a snapshot the holder walk (recorder/python/memsnap/holders.py,
pick_blocks) sets out from: the allocator's live blocks, the sites that grew first; never memory
outside the allocator (segments of pool 'external': cuBLAS's own cudaMalloc, seen by `memsnap
run`'s interposer), which no tensor owns (run 71's GPT-2 page said "held by: no Python tensor"
under cuBLAS's workspace). A snapshot's tables made by hand (docs/snapshot-format.md).
"""
import os
import sqlite3
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))  # tests/: checks.py
sys.path.insert(0, os.path.join(here, "..", "..", "recorder", "python"))
from checks import check, finish  # noqa: E402
from memsnap import holders  # noqa: E402

db = os.path.join(tempfile.mkdtemp(prefix="memsnap-pick-"), "s.db")
c = sqlite3.connect(db)
c.executescript("""
CREATE TABLE segments(id INTEGER PRIMARY KEY, device INTEGER, address INTEGER, size INTEGER, pool TEXT, stream INTEGER,
  expandable INTEGER, pool_id0 INTEGER, pool_id1 INTEGER, source TEXT, library TEXT);
CREATE TABLE blocks(id INTEGER PRIMARY KEY, segment_id INTEGER, address INTEGER, size INTEGER, requested_size INTEGER,
  state TEXT, stack_id INTEGER, role INTEGER, module_label_id INTEGER);
CREATE TABLE events(id INTEGER PRIMARY KEY, time_ns INTEGER, kind INTEGER, device INTEGER, stream INTEGER, address INTEGER,
  size INTEGER, requested_size INTEGER, extra INTEGER, thread INTEGER, stack_id INTEGER);
INSERT INTO segments VALUES (1, 0, 4096, 2097152, 'large', 0, 0, 0, 0, NULL, NULL),
                            (2, 0, 8388608, 67108864, 'external', 0, 0, 0, 0, 'cublasCreate_v2', 'libcublas.so');
INSERT INTO blocks VALUES (1, 1, 4096, 1048576, 1048576, 'allocated', 7, 0, 0),
                          (2, 1, 1052672, 1048576, 1048576, 'free', 0, 0, 0),
                          (3, 2, 8388608, 67108864, 67108864, 'allocated', 9, 0, 0);
INSERT INTO events VALUES (1, 100, 1, 0, 0, 4096, 1048576, 1048576, 0, 1, 7),
                          (2, 200, 1, 0, 0, 8388608, 67108864, 67108864, 0, 1, 9);
""")
c.commit()
c.close()
picked = holders.pick_blocks(db, time.monotonic() + 5)
check("the allocator's live block is walked", (4096, 1048576, 7) in picked)
check("external memory (pool 'external', 64 MiB: the largest) is not, nor a free block", [p[0] for p in picked] == [4096])
finish()
