"""bench_time.py: what the analyzer's benchmarks (bench_replay.sh, bench_predict.sh) measure of a
command: the best wall time of 3 runs, with that run's CPU time (every thread of the child) and the
peak memory of the children so far. Printed one line per command.

usage: python3 bench_time.py LABEL -- CMD... [--- LABEL -- CMD...]...
"""
import os
import resource
import subprocess
import sys


def best_of_3(cmd):
    best, cpu = None, None
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = os.times().elapsed
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        dt = os.times().elapsed - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        c = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if best is None or dt < best:
            best, cpu = dt, c
    return best, cpu


def main(argv):
    print("%d cores; load average %.1f" % (os.cpu_count(), os.getloadavg()[0]))
    groups, cur = [], []
    for a in argv:
        if a == "---":
            groups.append(cur)
            cur = []
        else:
            cur.append(a)
    groups.append(cur)
    for g in groups:
        label, cmd = g[0], g[g.index("--") + 1:]
        wall, cpu = best_of_3(cmd)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print("%-60s best of 3: %.2f s wall, %.2f s CPU, peak RSS so far %.1f MiB" % (label, wall, cpu, rss))


if __name__ == "__main__":
    main(sys.argv[1:])
