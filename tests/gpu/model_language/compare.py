"""compare.py: memsnap's answers on GPT-2 against PyTorch's MemTracker's (issue 42).

  python3 compare.py MEMSNAP.json MEMTRACKER.json

MEMSNAP.json is `memsnap analyze --json` of gpt2_train.py recorded with `memsnap run` (default
mode; six steps, the first a warm-up); MEMTRACKER.json is memtracker_gpt2.py's (a warm-up step,
then one step under MemTracker). What must hold:

  categories   at the allocated peak, within 2% of MemTracker's at its peak (plus 1 MiB: 2% of
               nothing is nothing, and both round blocks up to 512 B): memsnap's parameter against
               Parameter + Buffer, gradient against Gradient, optimizer_state against Optstate,
               activation against Activation, autograd against Temp (as the issue's figures);
  modules      for each of GPT-2's blocks (transformer.h.N), within 5%: memsnap's activation_bytes
               against Post-Forward Activation less Pre-Forward Activation, forward_peak_bytes
               against Peak-Forward Total, backward_peak_bytes against Peak-Backward Total.
               memsnap's peaks count all allocated memory, MemTracker's its tensors only: the
               peaks are compared less what memsnap counts and MemTracker cannot see, both
               measured in this run: the external memory at memsnap's peak (cuBLAS's own
               cudaMalloc of its handles, seen by memsnap run's interposer) and what the allocator
               held that no tensor did when MemTracker's step began (its workspaces:
               allocated_not_tracked_bytes). The raw figures and ratio are printed beside.
               memsnap's peaks are the largest over the module's calls (the warm-up's are lower:
               no optimizer state yet), its activations the latest call's (the first call also
               makes the workspaces), MemTracker's from its one tracked step.

Prints a table of both sides and one line per comparison; exit status 1 when one fails.
compare(memsnap, memtracker) gives the comparisons as [(name, ok, detail)] (checks.py's rows).
"""
import json
import re
import sys

MiB = 1 << 20
CATEGORY_TOLERANCE, CATEGORY_SLACK = 0.02, MiB
MODULE_TOLERANCE = 0.05
CATEGORIES = [("parameter", ("Parameter", "Buffer")), ("gradient", ("Gradient",)),
              ("optimizer_state", ("Optstate",)), ("activation", ("Activation",)), ("autograd", ("Temp",))]
BLOCK = re.compile(r"(?:^|\.)(transformer\.h\.\d+)$")


def ratio(a, b):
    return a / b if b else float("inf") if a else 1.0


def mib(v, unit=""):
    return "-" if v is None else "%.1f%s" % (v / MiB, unit)


def within(m, t, tol, slack=0):
    return m is not None and t is not None and abs(m - t) <= tol * t + slack


def memtracker_block(mod):
    """MemTracker's figures of one module: (activation, forward peak, backward peak), each the
    largest over its calls; None where it has no snapshot of that state."""
    st = mod.get("states", {})
    pre, post = st.get("Pre-Forward", []), st.get("Post-Forward", [])
    acts = [b.get("Activation", 0) - a.get("Activation", 0) for a, b in zip(pre, post)]
    fw = [s.get("Total", 0) for s in st.get("Peak-Forward", [])]
    bw = [s.get("Total", 0) for s in st.get("Peak-Backward", [])]
    return (max(acts) if acts else None, max(fw) if fw else None, max(bw) if bw else None)


def blocks(names_and_values):
    """{transformer.h.N: value} from (module name, value) pairs; the first of each block."""
    out = {}
    for name, value in names_and_values:
        m = BLOCK.search(name or "")
        if m and m.group(1) not in out:
            out[m.group(1)] = value
    return out


def order(key):
    return int(key.rsplit(".", 1)[1])


def compare(ms, mt, out=sys.stdout):
    """The comparisons of memsnap's analysis `ms` with memtracker_gpt2.py's `mt` (both parsed):
    [(name, ok, detail)]; the figures are printed to `out`."""
    rows = []
    cat, peak = ms.get("categories_at_peak", {}), mt.get("peak", {})
    print("categories at the peak: memsnap (peak %.1f MiB) against MemTracker (peak %.1f MiB; "
          "max_memory_allocated %.1f MiB over its step)" % (
              ms.get("summary", {}).get("peak_allocated_bytes", 0) / MiB, peak.get("Total", 0) / MiB,
              mt.get("max_memory_allocated", 0) / MiB), file=out)
    if mt.get("allocated_not_tracked_bytes") is not None:
        print("  allocated when MemTracker's step began but not tracked by it (cuBLAS's workspaces...): %.1f MiB" % (
            mt["allocated_not_tracked_bytes"] / MiB), file=out)
    for name, theirs in CATEGORIES:
        m, t = cat.get(name), sum(peak.get(k, 0) for k in theirs)
        ok = within(m, t, CATEGORY_TOLERANCE, CATEGORY_SLACK)
        detail = "memsnap %s, MemTracker %s %.1f MiB (%d B): ratio %s" % (
            "missing" if m is None else "%.1f MiB (%d B)" % (m / MiB, m), "+".join(theirs), t / MiB, t,
            "-" if m is None else "%.4f" % ratio(m, t))
        print("  %-16s %s %s" % (name, "ok  " if ok else "FAIL", detail), file=out)
        rows.append(("category " + name, ok, detail))
    print("  (not compared: memsnap's %s; MemTracker's Other %.1f MiB)" % (
        ", ".join("%s %.1f MiB" % (k, v / MiB) for k, v in cat.items() if k not in dict(CATEGORIES)),
        peak.get("Other", 0) / MiB), file=out)

    modules = ms.get("modules")
    if not isinstance(modules, list):
        for what in ("activation", "forward peak", "backward peak"):
            rows.append(("module " + what, False, "memsnap's JSON has no 'modules' list"))
        return rows
    mine = blocks((m.get("name"), m) for m in modules)
    theirs = blocks((m.get("fqn"), memtracker_block(m)) for m in mt.get("modules", []))
    keys = sorted(set(mine) | set(theirs), key=order)
    fields = [("activation", "activation_bytes"), ("forward peak", "forward_peak_bytes"),
              ("backward peak", "backward_peak_bytes")]
    found = {what: [] for what, _ in fields}  # what -> [(block, memsnap, MemTracker, ratio, ok)]
    unseen = cat.get("external", 0) + (mt.get("allocated_not_tracked_bytes") or 0)
    print("GPT-2's blocks, memsnap / MemTracker (ratio), MiB; peaks compared less %.1f MiB MemTracker cannot see "
          "(external %.1f MiB, workspaces %.1f MiB), the raw ratio in brackets:" % (
              unseen / MiB, cat.get("external", 0) / MiB, (mt.get("allocated_not_tracked_bytes") or 0) / MiB), file=out)
    print("  %-18s %-30s %-30s %-30s" % ("block", "activation", "forward peak", "backward peak"), file=out)
    for key in keys:
        cells = []
        for i, (what, field) in enumerate(fields):
            raw = mine.get(key, {}).get(field)
            m = raw - unseen if raw is not None and field != "activation_bytes" else raw
            t = theirs[key][i] if key in theirs else None
            r = ratio(m, t) if m is not None and t is not None else None
            ok = within(m, t, MODULE_TOLERANCE)
            found[what].append((key, m, t, r, ok))
            raw_r = "" if raw == m or raw is None or not t else " [%.3f]" % ratio(raw, t)
            cells.append("%s / %s (%s)%s%s" % (mib(m), mib(t), "-" if r is None else "%.3f" % r, raw_r, "" if ok else " !"))
        print("  %-18s %-30s %-38s %-38s" % (key, *cells), file=out)
    for what, _ in fields:
        if not keys:
            rows.append(("module " + what, False, "no block transformer.h.N on either side (memsnap %d modules, "
                         "MemTracker %d)" % (len(modules), len(mt.get("modules", [])))))
            continue
        failed = sum(not ok for *_, ok in found[what])
        key, m, t, r, _ = max(found[what], key=lambda f: float("inf") if f[3] is None else abs(f[3] - 1))
        detail = "%d blocks, %d beyond 5%%; the farthest %s: memsnap %s, MemTracker %s, ratio %s" % (
            len(keys), failed, key, mib(m, " MiB"), mib(t, " MiB"), "-" if r is None else "%.3f" % r)
        rows.append(("module " + what, failed == 0, detail))
        print("  %-16s %s %s" % (what, "ok  " if failed == 0 else "FAIL", detail), file=out)
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py MEMSNAP.json MEMTRACKER.json")
    with open(sys.argv[1]) as f:
        ms = json.load(f)
    with open(sys.argv[2]) as f:
        mt = json.load(f)
    rows = compare(ms, mt)
    failed = sum(not ok for _, ok, _ in rows)
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
