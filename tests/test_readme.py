#!/usr/bin/env python3
"""test_readme.py: the README for the first five minutes, and the documents' index.

README.md: at most 350 lines; the two set-up commands (`make demo`, `make test`); a picture of the
page (a PNG under docs/, well under 1 MiB, made by `make readme-picture`); the tour's commands;
every relative link resolving, to a file and, with a #fragment, to a heading of it; a Limits
section in a user's words: no run number ("run 47") and no test name. docs/README.md: one line
per document of docs/. Every document's relative links resolve too. Prints "N passed, N failed"; the exit status is the failure count.
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL " + name + (": " + detail if detail else ""))


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    out, seen = set(), {}
    in_code = False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def links(text):
    """The relative links of a Markdown text (targets of [..](..) and ![..](..)), outside code."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    out = []
    for m in re.finditer(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto: are not checked here (no network)
        out.append(target)
    return out


def broken_links(rel):
    """The links of document `rel` (relative to the repository) that do not resolve."""
    text = read(rel)
    bad = []
    for target in links(text):
        path, _, frag = target.partition("#")
        full = os.path.normpath(os.path.join(ROOT, os.path.dirname(rel), path)) if path else os.path.join(ROOT, rel)
        if not full.startswith(ROOT) or not os.path.exists(full):
            bad.append(target)
        elif frag and full.endswith(".md") and frag not in anchors(open(full, encoding="utf-8").read()):
            bad.append(target)
    return bad


readme = read("README.md")
lines = readme.split("\n")
n = len(lines) - (1 if readme.endswith("\n") else 0)
check("README: at most 350 lines (%d)" % n, n <= 350)
check("README: the two set-up commands, in a shell block",
      re.search(r"```sh\nmake demo\b[^\n]*\nmake test\b[^\n]*\n```", readme) is not None)
check("README: the tour records, reports, draws the page and predicts",
      all(s in readme for s in ("memsnap run ", "memsnap analyze ", "memsnap analyze --html ", "memsnap predict ")))
check("README: says what it does beside the tools users know",
      all(s in readme for s in ("memory viz", "torch.profiler", "MemTracker", "memray", "Nsight Systems")))

pictures = [t for t in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme) if not re.match(r"^[a-z]+:", t)]
check("README: a picture of the page, under docs/", any(p.startswith("docs/") and p.endswith(".png") for p in pictures), str(pictures))
for p in pictures:
    full = os.path.join(ROOT, p)
    ok = os.path.isfile(full)
    size = os.path.getsize(full) if ok else 0
    with open(full, "rb") if ok else open(os.devnull, "rb") as f:
        magic = f.read(8)
    check("README's picture %s: a PNG under 1 MiB (%d bytes)" % (p, size), ok and magic == b"\x89PNG\r\n\x1a\n" and 0 < size < 1 << 20)

bad = broken_links("README.md")
check("README: every relative link resolves (%d links)" % len(links(readme)), not bad, ", ".join(bad))

m = re.search(r"^## Limits\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
check("README: a Limits section", m is not None)
limits = m.group(1) if m else ""
items = [l for l in limits.split("\n") if l.startswith("- ")]
check("README's Limits: a list, one item a thing that does not work (%d)" % len(items), len(items) >= 3)
runs = re.findall(r"\bruns? \d+", limits, re.I)
check("README's Limits: no run number", not runs, ", ".join(runs))
tests = re.findall(r"\btest_\w+|\b\w+\.test\.js\b|\btests/\S*|\b\w+_test\b|\b\w+\.py\b", limits)
check("README's Limits: no test name", not tests, ", ".join(tests))
check("README's Limits: no measurement tables", "|---" not in limits)

# The README's `memsnap help` block is what the tool prints (test_readme.py [BUILD_DIR]).
cli = os.path.join(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"), "memsnap")
m = re.search(r"`memsnap help` groups them[^\n]*\n\n```\n(.*?)```", readme, re.S)
if os.access(cli, os.X_OK):
    import subprocess
    helped = subprocess.run([cli, "help"], capture_output=True, text=True).stdout
    check("README: its memsnap help block is the tool's output", m is not None and m.group(1) in helped)
else:
    check("README: a memsnap help block", m is not None)

index = read("docs/README.md")
docs = sorted(f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md") and f != "README.md")
listed = re.findall(r"^- \[[^\]]+\]\(([^)#]+)\)", index, re.M)
check("docs/README.md: one line per document of docs/", sorted(listed) == docs and len(listed) == len(set(listed)),
      "missing: %s; extra: %s" % (sorted(set(docs) - set(listed)), sorted(set(listed) - set(docs))))
check("docs/README.md: each entry is one line", all(l.startswith("- [") for l in index.split("\n")[1:] if l.strip()))
for doc in ["docs/README.md"] + ["docs/" + f for f in docs]:
    bad = broken_links(doc)
    check(doc + ": every relative link resolves", not bad, ", ".join(bad))

print("%d passed, %d failed" % (passed, failed))
sys.exit(min(failed, 100))
