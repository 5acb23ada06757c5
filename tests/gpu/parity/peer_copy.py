"""peer_copy.py: copies between two GPUs from memory that memsnap mapped, in each of its modes
(issue 24, item 3; docs/pytorch.md, "Peer access"). Needs a machine with two GPUs.

For each case (classic segments, expandable segments, the async mode) one child process makes
memsnap PyTorch's allocator, fills 64 MiB on cuda:0, copies it to cuda:1 (x.to), adds it to a
tensor on cuda:1, copies the sum back, and checks every value. With MEMSNAP_PEER_ACCESS=0 the
expandable and async cases show what a user would see without memsnap's peer mapping.
usage: python3 peer_copy.py            prints one line per case and a table; exit 1 on a failure
       where peer access is on.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CASES = [("classic", ""), ("expandable", "expandable_segments:True"),
         ("async", "backend:cudaMallocAsync")]


def child():
    sys.path.insert(0, os.path.join(ROOT, "recorder", "python"))
    import memsnap
    memsnap.enable()
    import torch
    n = 16 << 20  # 64 MiB of float32
    x = torch.arange(n, dtype=torch.float32, device="cuda:0")
    y = x.to("cuda:1")
    z = y + torch.ones(n, device="cuda:1")
    back = z.to("cuda:0")
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    ok = bool(torch.equal(back, x + 1))
    print("RESULT ok=%s can_access=%s backend=%s" % (ok, torch.cuda.can_device_access_peer(0, 1),
                                                       torch.cuda.get_allocator_backend()))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child()
        return 0
    rows, bad = [], False
    for peer in ("1", "0"):
        for name, conf in CASES:
            env = dict(os.environ, MEMSNAP_PEER_ACCESS=peer)
            if conf:
                env["PYTORCH_CUDA_ALLOC_CONF"] = conf
            else:
                env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            try:
                p = subprocess.run([sys.executable, __file__, "--child"], env=env,
                                   capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                p = subprocess.CompletedProcess([], 124, "", "TimeoutExpired: the child ran 300 s")
            res = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            if p.returncode == 0 and res:
                what = res[-1][len("RESULT "):]
            else:
                # the exception's line (PyTorch adds hints after it), else the last
                lines = [l for l in p.stderr.strip().splitlines() if l.strip()] or ["?"]
                err = next((l for l in reversed(lines) if re.match(r"[\w.]*(Error|Exception)\b", l.strip())), lines[-1])
                what = "exit %d: %s" % (p.returncode, err.strip()[:200])
            good = p.returncode == 0 and res and "ok=True" in res[-1]
            if peer == "1" and not good:
                bad = True
            rows.append((peer, name, what))
            print(peer, name, what, flush=True)
    print("\nMEMSNAP_PEER_ACCESS  mode        result")
    for peer, name, what in rows:
        print("%-19s  %-10s  %s" % (peer, name, what))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
