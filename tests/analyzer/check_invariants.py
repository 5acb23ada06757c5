"""check_invariants.py CLI SNAPSHOT.db...: what must hold in every report and page, whatever the
snapshot (docs/analysis-json.md, docs/viewer.md): memory from before the history is counted from
its first instant, so

  - reserved >= allocated at every instant (the curves' buckets: the highest allocated <= the
    highest reserved, the lowest allocated <= the lowest reserved; every iteration and checkpoint);
  - the peaks are at least the state at the snapshot (peak reserved >= reserved at the snapshot,
    peak allocated >= allocated at the snapshot) and peak reserved >= peak allocated;
  - the page agrees with --json (peaks, what predates the history), its bands add up to the
    allocated curve's highs, and its first bucket holds what predates the history;
  - its segment spans (the segment timeline) start from what predates the history, never add up
    to more than the peak reserved, and add up to reserved at the snapshot at the end;
  - every release of cached memory (segment_free, segment_unmap) has one cause (retries,
    empty_cache, garbage collection...), every retry released something for a request, and
    every suggestion fits the recorded out of memory or saves 5% of peak reserved.

A snapshot on several devices gives a page with a document per device: each is checked by
itself, and together they must add up to --json's state at the snapshot and what predates the
history, each device's peaks within the whole's.

Each snapshot is analyzed with --json and --html by the CLI given; prints ok/FAIL lines, then
"N passed, N failed" (checks.py)."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: checks.py, check_snapshot.py
from checks import check, finish  # noqa: E402


def page_docs(path):
    """The page's documents: one, or one per device (memsnap-data, memsnap-data-1, ...)."""
    page = open(path, encoding="utf-8").read()
    return [json.loads(m.group(1)) for m in re.finditer(r'<script type="application/json" id="memsnap-data(?:-\d+)?">(.*?)</script>', page, re.S)]


def release_bytes(db):
    """The bytes of every segment_free and segment_unmap event the reader takes (sizes above 0)."""
    import sqlite3
    c = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        return c.execute("select coalesce(sum(size), 0) from events where kind in (5, 12) and typeof(size) = 'integer'"
                         " and size > 0 and device between 0 and 63").fetchone()[0]
    finally:
        c.close()


def first_bad(pairs):
    """The first (index, a, b) with a > b, or None."""
    for i, (a, b) in enumerate(pairs):
        if a > b:
            return (i, a, b)
    return None


def check_snapshot(cli, db, tmp):
    name = os.path.basename(db)
    j = json.loads(subprocess.run([cli, "analyze", "--json", db], check=True, capture_output=True, text=True).stdout)
    s = j["summary"]
    before = s["before_history"]
    check(name + ": --json peak reserved >= reserved at the snapshot", s["peak_reserved_bytes"] >= s["reserved_bytes"],
          (s["peak_reserved_bytes"], s["reserved_bytes"]))
    check(name + ": --json peak allocated >= allocated at the snapshot", s["peak_allocated_bytes"] >= s["allocated_bytes"],
          (s["peak_allocated_bytes"], s["allocated_bytes"]))
    check(name + ": --json peak reserved >= peak allocated", s["peak_reserved_bytes"] >= s["peak_allocated_bytes"],
          (s["peak_reserved_bytes"], s["peak_allocated_bytes"]))
    check(name + ": --json what predates the history is within the peaks",
          before["allocated_bytes"] <= s["peak_allocated_bytes"] and before["reserved_bytes"] <= s["peak_reserved_bytes"]
          and before["allocated_at_snapshot_bytes"] <= s["allocated_bytes"], before)
    bad = first_bad((i["peak_allocated_bytes"], i["peak_reserved_bytes"]) for i in j["iterations"])
    check(name + ": --json every iteration's peak reserved >= its peak allocated", bad is None, bad)
    bad = first_bad((i["end_allocated_bytes"], s["peak_allocated_bytes"]) for i in j["iterations"])
    check(name + ": --json no iteration ends above the peak", bad is None, bad)
    cat = j["categories_at_peak"]
    check(name + ": --json categories at the peak sum to the allocated peak", sum(cat.values()) == s["peak_allocated_bytes"],
          (cat, s["peak_allocated_bytes"]))
    bad = [(i["index"], i["categories"], i["peak_allocated_bytes"]) for i in j["iterations"]
           if i["categories"] is not None and sum(i["categories"].values()) != i["peak_allocated_bytes"]]
    check(name + ": --json every iteration's categories sum to its peak", not bad, bad[:1])

    R = j["releases"]
    causes = [R["retries"], R["empty_cache"], R["garbage_collection"], R["private_pool"], R["other"], R["external_frees"]]
    check(name + ": --json every release of cached memory has one cause (segments and bytes add up)",
          sum(c["segments"] for c in causes) == R["recorded_events"] + R["inferred_events"]
          and sum(c["bytes"] for c in causes) == release_bytes(db), (causes, R["recorded_events"], R["inferred_events"]))
    bad = [r for r in j["retries"] if not (r["requested_bytes"] > 0 and r["released_bytes"] > 0 and r["segments_released"] > 0
                                           and r["time_ns"] <= r["request_ns"])]
    check(name + ": --json every retry asked for bytes after releasing some", not bad and len(j["retries"]) == R["retries"]["listed"]
          <= R["retries"]["count"], bad[:1])
    base = j["suggestions_sweep"].get("baseline_peak_reserved_bytes", 0)
    bad = [g for g in j["suggestions"] if g["saved_bytes"] != base - g["peak_reserved_bytes"]
           or not (g["fits"] or g["saved_bytes"] >= 0.05 * base)]
    check(name + ": --json every suggestion fits or saves 5% of the recorded settings' replayed peak", not bad, bad[:1])

    html = os.path.join(tmp, name + ".html")
    subprocess.run([cli, "analyze", "--html", html, db], check=True, capture_output=True)
    docs = page_docs(html)
    if len(docs) == 1:
        ps = docs[0]["summary"]
        check(name + ": page peaks and what predates the history are --json's",
              ps["peak_allocated_bytes"] == s["peak_allocated_bytes"] and ps["peak_reserved_bytes"] == s["peak_reserved_bytes"]
              and ps["before_history"] == before, (ps["peak_allocated_bytes"], ps["peak_reserved_bytes"]))
        check_page(name, docs[0], s["allocated_bytes"], s["reserved_bytes"])
        return
    ends = [[c for c in d["checkpoints"] if c["kind"] == "end"][0] for d in docs]
    check(name + ": page of %d devices: together, the snapshot's state" % len(docs),
          sum(e["allocated"] for e in ends) == s["allocated_bytes"] and sum(e["reserved"] for e in ends) == s["reserved_bytes"],
          [(e["allocated"], e["reserved"]) for e in ends])
    check(name + ": page of %d devices: together, what predates the history" % len(docs),
          all(sum(d["summary"]["before_history"][k] for d in docs) == before[k] for k in ("allocated_bytes", "reserved_bytes", "blocks")),
          [d["summary"]["before_history"] for d in docs])
    check(name + ": page of %d devices: each device's peaks within the whole's, and the peaks within their sum" % len(docs),
          all(d["summary"]["peak_allocated_bytes"] <= s["peak_allocated_bytes"] and d["summary"]["peak_reserved_bytes"] <= s["peak_reserved_bytes"] for d in docs)
          and sum(d["summary"]["peak_reserved_bytes"] for d in docs) >= s["peak_reserved_bytes"],
          [(d["summary"]["peak_allocated_bytes"], d["summary"]["peak_reserved_bytes"]) for d in docs])
    for d, e in zip(docs, ends):
        check_page(name + " (" + d["summary"]["path"].rsplit(", ", 1)[-1] + ")", d, e["allocated"], e["reserved"])


def check_page(name, d, allocated_at_snapshot, reserved_at_snapshot):
    """What must hold in one document of a page, whose state at the snapshot is given."""
    ps = d["summary"]
    before = ps["before_history"]
    check(name + ": page peaks at least the state at the snapshot",
          ps["peak_allocated_bytes"] >= allocated_at_snapshot and ps["peak_reserved_bytes"] >= reserved_at_snapshot and ps["peak_reserved_bytes"] >= ps["peak_allocated_bytes"],
          (ps["peak_allocated_bytes"], ps["peak_reserved_bytes"], allocated_at_snapshot, reserved_at_snapshot))
    al, rs = d["curves"]["allocated"], d["curves"]["reserved"]
    check(name + ": page curves share their buckets", al["t"] == rs["t"])
    bad = first_bad(zip(al["hi"], rs["hi"]))
    check(name + ": page reserved >= allocated at every instant (highs)", bad is None, bad)
    bad = first_bad(zip(al["lo"], rs["lo"]))
    check(name + ": page reserved >= allocated at every instant (lows)", bad is None, bad)
    if al["hi"]:
        check(name + ": page draws what predates the history from the first bucket",
              al["hi"][0] >= before["allocated_bytes"] and rs["hi"][0] >= before["reserved_bytes"],
              (al["hi"][0], rs["hi"][0], before))
        check(name + ": page curves reach the peaks", max(al["hi"]) == ps["peak_allocated_bytes"] and max(rs["hi"]) == ps["peak_reserved_bytes"],
              (max(al["hi"]), max(rs["hi"])))
    bands = d["bands"]
    sums = [sum(col[i] for col in bands["bytes"]) for i in range(len(bands["t"]))]
    check(name + ": page bands add up to the allocated curve's highs", bands["t"] == al["t"] and sums == al["hi"],
          next(((i, a, b) for i, (a, b) in enumerate(zip(sums, al["hi"])) if a != b), None))
    bad = first_bad((c["allocated"], c["reserved"]) for c in d["checkpoints"])
    check(name + ": page allocator state: reserved >= allocated at every checkpoint", bad is None, bad)
    end = [c for c in d["checkpoints"] if c["kind"] == "end"]
    check(name + ": page allocator state at the end is the snapshot's",
          len(end) == 1 and end[0]["allocated"] == allocated_at_snapshot and end[0]["reserved"] == reserved_at_snapshot,
          end and (end[0]["allocated"], end[0]["reserved"], allocated_at_snapshot, reserved_at_snapshot))
    sp = d["segment_spans"]
    n = len(sp["addr"])
    check(name + ": page segment spans are columns of one length", all(len(sp[k]) == n for k in ("size", "start", "end", "stream", "device", "stack")))
    first = [i for i in range(n) if sp["stack"][i] == -1 and sp["start"][i] == ps["first_ns"]]
    check(name + ": page segment spans start from what predates the history",
          sum(sp["size"][i] for i in first) == before["reserved_bytes"], (sum(sp["size"][i] for i in first), before["reserved_bytes"]))
    events = sorted([(sp["start"][i], 1, sp["size"][i]) for i in range(n)] + [(sp["end"][i], 0, -sp["size"][i]) for i in range(n) if sp["end"][i] >= 0])
    total, highest = 0, 0
    for _, _, size in events:
        total += size
        highest = max(highest, total)
    check(name + ": page segment spans never add up to more than the peak reserved", highest <= ps["peak_reserved_bytes"], (highest, ps["peak_reserved_bytes"]))
    if not sp["omitted"]:
        alive = sum(sp["size"][i] for i in range(n) if sp["end"][i] < 0)
        check(name + ": page segment spans alive at the end add up to reserved at the snapshot", alive == reserved_at_snapshot, (alive, reserved_at_snapshot))


def main():
    cli = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for db in sys.argv[2:]:
            try:
                check_snapshot(cli, db, tmp)
            except (subprocess.CalledProcessError, ValueError, KeyError, AttributeError) as e:
                check(os.path.basename(db) + ": analyzed", False, repr(e)[:300])
    finish()


if __name__ == "__main__":
    main()
