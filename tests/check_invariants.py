"""check_invariants.py CLI SNAPSHOT.db...: what must hold in every report and page, whatever the
snapshot (docs/analysis-json.md, docs/viewer.md): memory from before the history is counted from
its first instant, so

  - reserved >= allocated at every instant (the curves' buckets: the highest allocated <= the
    highest reserved, the lowest allocated <= the lowest reserved; every iteration and checkpoint);
  - the peaks are at least the state at the snapshot (peak reserved >= reserved at the snapshot,
    peak allocated >= allocated at the snapshot) and peak reserved >= peak allocated;
  - the page agrees with --json (peaks, what predates the history), its bands add up to the
    allocated curve's highs, and its first bucket holds what predates the history.

Each snapshot is analyzed with --json and --html by the CLI given; prints ok/FAIL lines, then
"N passed, N failed" (checks.py)."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402


def page_data(path):
    page = open(path, encoding="utf-8").read()
    return json.loads(re.search(r'id="memsnap-data">(.*?)</script>', page, re.S).group(1))


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

    html = os.path.join(tmp, name + ".html")
    subprocess.run([cli, "analyze", "--html", html, db], check=True, capture_output=True)
    d = page_data(html)
    ps = d["summary"]
    check(name + ": page peaks and what predates the history are --json's",
          ps["peak_allocated_bytes"] == s["peak_allocated_bytes"] and ps["peak_reserved_bytes"] == s["peak_reserved_bytes"]
          and ps["before_history"] == before, (ps["peak_allocated_bytes"], ps["peak_reserved_bytes"]))
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
        check(name + ": page curves reach the peaks", max(al["hi"]) == s["peak_allocated_bytes"] and max(rs["hi"]) == s["peak_reserved_bytes"],
              (max(al["hi"]), max(rs["hi"])))
    bands = d["bands"]
    sums = [sum(col[i] for col in bands["bytes"]) for i in range(len(bands["t"]))]
    check(name + ": page bands add up to the allocated curve's highs", bands["t"] == al["t"] and sums == al["hi"],
          next(((i, a, b) for i, (a, b) in enumerate(zip(sums, al["hi"])) if a != b), None))
    bad = first_bad((c["allocated"], c["reserved"]) for c in d["checkpoints"])
    check(name + ": page allocator state: reserved >= allocated at every checkpoint", bad is None, bad)
    end = [c for c in d["checkpoints"] if c["kind"] == "end"]
    check(name + ": page allocator state at the end is the snapshot's",
          len(end) == 1 and end[0]["allocated"] == s["allocated_bytes"] and end[0]["reserved"] == s["reserved_bytes"],
          end and (end[0]["allocated"], end[0]["reserved"], s["allocated_bytes"], s["reserved_bytes"]))


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
