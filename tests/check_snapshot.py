"""check_snapshot.py SNAPSHOT: exits 0 if a snapshot is consistent in itself, else prints what
is not and exits 1. Used by tests/recorder/test_stress.c on snapshots taken under load: the file passes
SQLite's integrity check, every segment's blocks tile it exactly, and the statistics (taken at
the same moment) agree with the blocks and segments, device by device."""
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1])
q = lambda sql, *args: db.execute(sql, args).fetchone()[0]  # noqa: E731
problems = []
if q("pragma integrity_check") != "ok":
    problems.append("integrity check failed")
for sid, size, tiled in db.execute("select g.id, g.size, (select sum(size) from blocks where segment_id = g.id) from segments g"):
    if size != tiled:
        problems.append("segment %d: %d bytes, its blocks add up to %s" % (sid, size, tiled))
# The async mode is the option's, not only its segments': a snapshot taken when no block is live
# has none, while the pool still holds memory reserved.
async_mode = q("select count(*) from options where name = 'MEMSNAP_ALLOCATOR' and value in ('async', 'cudaMallocAsync')")
for (dev,) in db.execute("select distinct device from stats"):
    if async_mode or q("select count(*) from segments where device = ? and pool = 'async'", dev):
        # Async mode: the statistics are the driver pool's counters, which round each block up
        # and keep freed memory reserved: they bound the blocks instead of equalling them.
        alloc, reserved, active = (q("select value from stats where device = ? and key = ?", dev, k) for k in (
            "allocated_bytes.all.current", "reserved_bytes.all.current", "active_bytes.all.current"))
        blocks = q("select coalesce(sum(b.size), 0) from blocks b join segments g on g.id = b.segment_id where g.device = ?", dev)
        if not (blocks <= alloc <= reserved and active == alloc):
            problems.append("device %d (async): blocks %d, allocated %d, active %d, reserved %d" % (dev, blocks, alloc, active, reserved))
        continue
    for key, sql in (("allocated_bytes.all.current", "select coalesce(sum(b.size), 0) from blocks b join segments g on g.id = b.segment_id where g.device = ? and b.state = 'allocated'"),
                     ("reserved_bytes.all.current", "select coalesce(sum(size), 0) from segments where device = ?"),
                     ("active_bytes.all.current", "select coalesce(sum(b.size), 0) from blocks b join segments g on g.id = b.segment_id where g.device = ? and b.state != 'free'")):
        stat, actual = q("select value from stats where device = ? and key = ?", dev, key), q(sql, dev)
        if stat != actual:
            problems.append("device %d: %s is %d, the blocks say %d" % (dev, key, stat, actual))
for p in problems[:10]:
    print("  snapshot %s: %s" % (sys.argv[1], p))
sys.exit(1 if problems else 0)
