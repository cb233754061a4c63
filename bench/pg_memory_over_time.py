#!/usr/bin/python3
"""How a forking server's added memory moves over its workers' life (issue
#44). run_pg_memory.py and compare_pg_memory.py read PSS a few seconds after
the connections are up; a backend lives for minutes or days, and whatever the
recorder keeps per new thing it meets (a pc it described, a stack, a name)
shows only later. This runs PostgreSQL clusters side by side under the same
pgbench -S load at the same time, one per side (a build of the recorder, or
"plain"), and prints the mean PSS per backend on each side every STEP
seconds, up to SECONDS, and the part of it that is the recorder's heap (its
own pages: what grows with what the recorder keeps). A backend's PSS also
grows by itself, plain or not, as it touches more of the shared buffers.
    pg_memory_over_time.py SIDE [SIDE ...] [--seconds N] [--step N] [--conns N]
A SIDE is "plain", a build directory, or a libflightrec.so, with settings
after commas if wanted (build,FLIGHTREC_ALLOC=0). Defaults:
240 s, a reading every 30 s (and one at 8 s), 16 connections. Needs root.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import process_memory as pm  # noqa: E402
from compare_pg_memory import is_backend  # noqa: E402
from run_pg_memory import Cluster, lib_of, new_template, pg_bin  # noqa: E402


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("sides", nargs="+")
    ap.add_argument("--seconds", type=int, default=240)
    ap.add_argument("--step", type=int, default=30)
    ap.add_argument("--conns", type=int, default=16)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (the clusters run as postgres)")
    tmp = tempfile.mkdtemp(prefix="fr-pgtime-", dir="/var/tmp")
    os.chmod(tmp, 0o755)  # owned by root: see run_pg_memory.py
    clusters, loads = [], []
    try:
        template = new_template(tmp)
        for i, side in enumerate(args.sides):
            where, *settings = side.split(",")
            lib = None if where == "plain" else os.path.abspath(where) if where.endswith(".so") else lib_of(where)
            clusters.append(Cluster(tmp, "side%d" % i, template, lib, tuple(settings)))
        loads = [c.load(args.conns, 3600) for c in clusters]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and min(c.backends() for c in clusters) < args.conns:
            time.sleep(0.1)
        start = time.monotonic()
        print("PostgreSQL %s, pgbench -S, %d connections, one cluster per side, all under load at once; "
              "mean PSS per backend / of it the recorder's own heap, KiB:" %
              (os.path.basename(os.path.dirname(pg_bin())), args.conns))
        print("  %8s  %s" % ("seconds", "  ".join("%16s" % s.split("/")[-1][-16:] for s in args.sides)))
        marks = [8] + list(range(args.step, args.seconds + 1, args.step))
        for mark in marks:
            time.sleep(max(0.0, start + mark - time.monotonic()))
            row = []
            for c in clusters:
                backends = [p for p in c.pids() if is_backend(p)]
                pss = [pm.pss_kb(p) for p in backends]
                heap = [pm.breakdown(p, set())["recorder heap (own)"] for p in backends]
                n = max(1, len(backends))
                row.append("%9.0f /%5.0f" % (sum(pss) / n, sum(heap) / n))
            print("  %8d  %s" % (mark, "  ".join(row)), flush=True)
    finally:
        for load in loads:
            load.terminate()
            load.wait()
        for c in clusters:
            c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
