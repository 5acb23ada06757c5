"""launch.py: a launcher in the manner of torchrun, for tests/test_run.sh: it imports torch but
never touches the GPU, and starts N ranks of train.py with RANK and WORLD_SIZE set.

Usage: launch.py N STEPS
"""
import os
import subprocess
import sys

import torch  # noqa: F401  (torchrun imports it too)

n, steps = int(sys.argv[1]), sys.argv[2]
train = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
ranks = [subprocess.Popen([sys.executable, train, steps], env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(n)))
         for r in range(n)]
sys.exit(max(p.wait() for p in ranks))
