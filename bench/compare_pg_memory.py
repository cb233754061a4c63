#!/usr/bin/python3
"""Two builds of the recorder against each other in a forking server (issue
#44): PostgreSQL under pgbench -S with N connections, one cluster per build,
one after the other, ROUNDS rounds alternating which goes first. Each round
reads the PSS of every backend and of every process of the cluster
SECONDS/2 after all connections are up (as run_pg_memory.py does). Prints
each round's mean per backend and per process, and the means over rounds.

Where run_pg_memory.py compares a build with plain PostgreSQL (and so
carries the spread of two clusters' own memory, ±100-150 KiB per process),
this compares two builds under the same load, for changes of a few hundred
KiB.
    compare_pg_memory.py BUILD_A BUILD_B [ROUNDS [CONNS [SECONDS]]]
Defaults: 4 rounds, 16 connections, SECONDS 16. Needs root. A BUILD may
carry settings after commas, to measure a setting rather than a build:
    compare_pg_memory.py build,FLIGHTREC_SAMPLER_THREAD=1 build
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import process_memory as pm  # noqa: E402
from run_pg_memory import Cluster, lib_of, new_template, pg_bin  # noqa: E402


def is_backend(pid):
    try:
        with open("/proc/%d/cmdline" % pid) as f:
            return "127.0.0.1(" in f.read()
    except OSError:
        return False


def threads_of(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    except (OSError, StopIteration):
        return 0


def side_of(arg):
    """(libflightrec.so, settings) from BUILD[,VAR=VALUE...]."""
    build, *settings = arg.split(",")
    for kv in settings:
        if not kv.startswith("FLIGHTREC_") or "=" not in kv:
            raise SystemExit("%s: settings after the build are FLIGHTREC_VAR=VALUE" % arg)
    return lib_of(build), tuple(settings)


def one_round(side, conns, seconds):
    """(mean PSS KiB of the backends, mean PSS KiB of all processes, mean threads per backend)."""
    tmp = tempfile.mkdtemp(prefix="fr-pgcmp-", dir="/var/tmp")
    os.chmod(tmp, 0o755)  # owned by root: see run_pg_memory.py
    cluster = None
    try:
        lib, settings = side
        cluster = Cluster(tmp, "fr", new_template(tmp), lib, settings)
        load = cluster.load(conns, 3600)
        deadline = time.monotonic() + 2 * seconds
        while time.monotonic() < deadline and cluster.backends() < conns:
            time.sleep(0.1)
        time.sleep(seconds / 2.0)
        pids = cluster.pids()
        backends = [pm.pss_kb(p) for p in pids if is_backend(p)]
        threads = [threads_of(p) for p in pids if is_backend(p)]
        everyone = [pm.pss_kb(p) for p in pids]
        load.terminate()
        load.wait()
        return (sum(backends) / max(1, len(backends)), sum(everyone) / max(1, len(everyone)),
                sum(threads) / max(1, len(threads)))
    finally:
        if cluster:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    libs = [side_of(sys.argv[1]), side_of(sys.argv[2])]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    conns = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    seconds = int(sys.argv[5]) if len(sys.argv) > 5 else 16
    if os.geteuid() != 0:
        raise SystemExit("run as root (the clusters run as postgres)")
    results = [[], []]  # by position: A and B may be the same build (a check of the spread)
    for r in range(rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            results[i].append(one_round(libs[i], conns, seconds))
    print("PostgreSQL %s, pgbench -S, %d connections, %d rounds (one cluster per build, alternating), "
          "snapshot %d/2 s after every connection is up:" % (os.path.basename(os.path.dirname(pg_bin())), conns,
                                                             rounds, seconds))
    for name, lib, v in zip("AB", libs, results):
        print("  %s %s: backend PSS KiB %s, mean %.0f; every process, mean %.0f; threads per backend %.1f" %
              (name, " ".join((lib[0],) + lib[1]), " ".join("%.0f" % x[0] for x in v), sum(x[0] for x in v) / len(v),
               sum(x[1] for x in v) / len(v), sum(x[2] for x in v) / len(v)))
    a, b = (sum(x[0] for x in v) / rounds for v in results)
    print("  B - A: %+.0f KiB per backend" % (b - a))


if __name__ == "__main__":
    main()
