#!/usr/bin/python3
"""What flightrec's flush thread costs a loaded redis-server, per setting, in
one run each: redis-server under the preload with the given FLIGHTREC_*
settings, redis-benchmark (SET, GET, LPUSH, LPOP; 20 clients) against it,
and from /proc around the load: the server's CPU per request (every
thread), the flush thread's, its share, its voluntary wake-ups (futex
sleeps ended) and involuntary switches (preempted) per second, and trace
bytes per request. A quick probe for one question (does a setting change the
flush thread's cost?), not the interleaved A/B of run_macro.py: run it
several times, alternating settings, on a quiet machine.
    redis_flush_share.py LIB REQUESTS [NAME=VALUE ...]
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time


def threads(pid):
    """(ns on CPU of every thread, of the flush thread, its [voluntary, involuntary] switches)."""
    total = flush = 0
    switches = [0, 0]
    for t in glob.glob("/proc/%d/task/*" % pid):
        try:
            comm = open(t + "/comm").read().strip()
            ns = int(open(t + "/schedstat").read().split()[0])
            status = open(t + "/status").read()
        except OSError:
            continue
        total += ns
        if comm.startswith("flightrec-flush"):
            flush += ns
            switches = [int(l.split()[1]) for l in status.splitlines() if "ctxt_switches" in l]
    return total, flush, switches


def main():
    lib, n, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    port = 30000 + os.getpid() % 5000
    tmp = tempfile.mkdtemp(prefix="fr-redis-share-", dir="/var/tmp")
    try:
        out = os.path.join(tmp, "out")
        env = dict(os.environ, LD_PRELOAD=os.path.abspath(lib), FLIGHTREC_OUTPUT=out)
        for s in settings:
            k, v = s.split("=", 1)
            env[k] = v
        srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", tmp, "--loglevel", "warning"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        t0, f0, s0 = threads(srv.pid)
        w0 = time.monotonic()
        subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set,get,lpush,lpop",
                        "-c", "20", "-n", str(n), "-q"], stdout=subprocess.DEVNULL, check=True)
        t1, f1, s1 = threads(srv.pid)
        dt = time.monotonic() - w0
        subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        srv.wait(timeout=30)
        req = 4 * n
        size = sum(os.path.getsize(f) for f in glob.glob(out + "/**/*", recursive=True) if os.path.isfile(f))
        print("%s: server CPU %.0f ns/request, flush thread %.1f ns/request = %.2f%% of the server's CPU, "
              "%.0f wake-ups/s, %.0f preemptions/s, %.2f trace bytes/request"
              % (" ".join(settings) or "defaults", (t1 - t0) / req, (f1 - f0) / req, 100.0 * (f1 - f0) / (t1 - t0),
                 (s1[0] - s0[0]) / dt, (s1[1] - s0[1]) / dt, size / req))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
