"""harness.py: what predict_check.py and whatif_check.py share: a log of every command and its
output, a JSON line per measurement, commands run under one deadline for the whole check, and the
RESULT line train_child.py prints.

  h = Harness("whatif_check", minutes=8.6)   # $OUT (or a new temporary folder) gets
  rc, out, err = h.run(cmd, env)             # whatif_check.log and whatif_check.jsonl
  h.record({"kind": ...})
"""
import json
import os
import subprocess
import tempfile
import time


class Harness:
    def __init__(self, name, minutes):
        self.name = name
        self.out = os.environ.get("OUT") or tempfile.mkdtemp(prefix="memsnap-%s-" % name)
        os.makedirs(self.out, exist_ok=True)
        self.start = time.time()
        self.deadline = self.start + minutes * 60

    def log(self, text):
        with open(os.path.join(self.out, self.name + ".log"), "a") as f:
            f.write(text)

    def record(self, row):
        """Appends row (with its time since the start, t_s) to NAME.jsonl."""
        row["t_s"] = round(time.time() - self.start, 1)
        with open(os.path.join(self.out, self.name + ".jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")

    def run(self, cmd, env=None, timeout=150):
        """Runs cmd; (exit code, stdout, stderr), the code None when it timed out, could not start
        or was skipped; never raises. The timeout shrinks to the deadline."""
        left = self.deadline - time.time()
        if left < 10:
            self.log("$ %s\n[skipped: the deadline]\n" % " ".join(cmd))
            return None, "", "skipped: the deadline"
        t = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(timeout, left),
                               env=dict(os.environ, **(env or {})))
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc, err = None, "timed out"
        except OSError as e:
            rc, out, err = None, "", str(e)
        self.log("$ %s%s\n%s%s[exit %s, %.1f s]\n" % (" ".join("%s=%s" % kv for kv in (env or {}).items()) +
                                                      (" " if env else ""), " ".join(cmd), out[-20000:], err[-8000:],
                                                      rc, time.time() - t))
        return rc, out, err


def result_of(out):
    """The JSON of train_child.py's RESULT line in out, or None."""
    for line in (out or "").splitlines():
        if line.startswith("RESULT "):
            try:
                return json.loads(line[7:])
            except ValueError:
                pass
    return None


def pct(p, m):
    """p's error against m, in percent (None when either is missing)."""
    return 100.0 * (p - m) / m if p is not None and m else None


def boundary(fits, guess, tries=6):
    """The largest size that fits, walked to from `guess` one size at a time: n such that fits(n)
    and not fits(n + 1); 0 when not even 1 fits; None when a probe gave no answer (fits returned
    None) or `tries` steps did not reach it."""
    n = guess
    for _ in range(tries):
        f = fits(n)
        if f is None:
            return None
        if f:
            g = fits(n + 1)
            if g is None:
                return None
            if not g:
                return n
            n += 1
        else:
            n -= 1
            if n < 1:
                return 0
    return None
