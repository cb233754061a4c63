#!/usr/bin/python3
"""Peak memory of one big process (issue #44, item 3): redis-server plain and
under the preload (every default), started side by side from a temporary
directory on loopback ports, each driven by its own redis-benchmark (the
macro run's load: SET, GET, LPUSH, LPOP, 20 clients, REQUESTS per test) at
the same time, so both sides see the same machine. Half-way into the load
each server is read (PSS and where the added PSS lies by mapping, from
memory_report.py / process_memory.py); at the end its peak RSS (VmHWM) and
RSS. Repeated ROUNDS times with fresh servers; the added peak RSS of each
round is printed and the median over rounds.
    run_redis_memory.py BUILD [ROUNDS [REQUESTS]]
Defaults: ROUNDS 3, REQUESTS 100000.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_report as mr  # noqa: E402
from run_server_memory import server_dir  # noqa: E402


def status_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Redis:
    """One redis-server (plain when lib is None), no persistence."""

    def __init__(self, tmp, name, lib):
        self.dir, self.port, env, self.log = server_dir(tmp, name, lib)
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", self.dir],
                                     env=env, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while subprocess.run(["redis-cli", "-p", str(self.port), "ping"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=self.plain_env()).returncode != 0:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("redis-server did not start (%s)" % self.log.name)
            time.sleep(0.1)

    @staticmethod
    def plain_env():
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        return env

    def load(self, requests):
        return subprocess.Popen(["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.port), "-t",
                                 "set,get,lpush,lpop", "-c", "20", "-n", str(requests), "-q"],
                                env=self.plain_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def one_round(tmp, lib, requests, n):
    servers = [Redis(tmp, "plain-%d" % n, None), Redis(tmp, "flightrec-%d" % n, lib)]
    try:
        loads = [s.load(requests) for s in servers]
        # Half-way: the plain side's requests take about as long as the other's.
        time.sleep(0.5)
        while all(p.poll() is None for p in loads) and status_kb(servers[0].proc.pid, "VmRSS") < 4096:
            time.sleep(0.1)
        time.sleep(1.0)
        plain_libraries = mr.library_paths([servers[0].proc.pid])
        snaps = [mr.snapshot([s.proc.pid], plain_libraries) for s in servers]
        for p in loads:
            p.wait(timeout=600)
        peaks = [status_kb(s.proc.pid, "VmHWM") for s in servers]
        rss = [status_kb(s.proc.pid, "VmRSS") for s in servers]
    finally:
        for s in servers:
            s.stop()
    return snaps, peaks, rss


def main():
    build = os.path.abspath(sys.argv[1])
    lib = os.path.join(build, "libflightrec.so")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    requests = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
    if not (shutil.which("redis-server") and shutil.which("redis-benchmark")):
        print("redis-memory: skipped (needs redis-server and redis-benchmark)")
        return
    given = sorted("%s=%s" % kv for kv in os.environ.items()
                   if kv[0].startswith("FLIGHTREC_") and kv[0] != "FLIGHTREC_OUTPUT")
    print("redis-server, plain and flightrec (%s) side by side, each under its own redis-benchmark "
          "(set,get,lpush,lpop, 20 clients, %d requests per test), %d rounds:"
          % (" ".join(given) if given else "every default", requests, rounds))
    tmp = tempfile.mkdtemp(prefix="fr-redismem-", dir="/var/tmp")
    added = []
    try:
        for n in range(rounds):
            (ps, ts), peaks, rss = one_round(tmp, lib, requests, n)
            added.append(peaks[1] - peaks[0])
            print("  round %d: peak RSS (VmHWM) plain %.1f MiB, flightrec %.1f MiB, added %+.1f MiB; "
                  "RSS at the end %.1f / %.1f MiB" % (n + 1, mr.mib(peaks[0]), mr.mib(peaks[1]),
                                                       mr.mib(peaks[1] - peaks[0]), mr.mib(rss[0]), mr.mib(rss[1])))
            mr.report("round %d, half-way into the load" % (n + 1), ps, ts)
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("  added peak RSS, median of %d rounds: %+.1f MiB (rounds %+.1f to %+.1f)"
          % (rounds, mr.mib(statistics.median(added)), mr.mib(min(added)), mr.mib(max(added))))


if __name__ == "__main__":
    main()
