"""show_snapshot.py SNAPSHOT.db: a short summary of a memsnap snapshot, for `make demo`.

Until `memsnap analyze` exists (the analyzer), this shows what a snapshot holds with plain SQL
(docs/snapshot-format.md): what was recorded, and what is alive by the function that
allocated it.
"""
import sqlite3
import sys


def mib(n):
    return "%.2f MiB" % (n / 1048576.0)


def main(path):
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    version = db.execute("pragma user_version").fetchone()[0]
    if version != 1:
        print("error: '%s' has snapshot format %d; this script reads 1" % (path, version), file=sys.stderr)
        return 1
    meta = dict(db.execute("select key, value from meta"))
    print("snapshot of pid %s on %s (%s backend): %s events recorded, %s dropped" % (
        meta["pid"], meta["host"], meta["backend"], meta["recorded_events"], meta["dropped_events"]))
    for name, n in db.execute("select k.name, count(*) from events e join event_kinds k on k.id = e.kind "
                              "group by e.kind order by e.kind"):
        print("  %-16s %d" % (name, n))
    print("marks: %d, ranges: %d" % (db.execute("select count(*) from marks").fetchone()[0],
                                      db.execute("select count(*) from ranges").fetchone()[0]))
    print("alive at the snapshot, by allocating function:")
    for name, blocks, size in db.execute(
            "select f.name, count(*), sum(b.size) from blocks b "
            "join stack_frames sf on sf.stack_id = b.stack_id and sf.position = 0 "
            "join frames f on f.id = sf.frame_id where b.state = 'allocated' "
            "group by f.id order by sum(b.size) desc limit 8"):
        print("  %-28s %4d blocks %12s" % (name, blocks, mib(size)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: show_snapshot.py SNAPSHOT.db", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
