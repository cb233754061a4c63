#!/usr/bin/python3
"""Memory and threads per process of a forking server (issue #44): two
PostgreSQL clusters of Debian's `postgresql`, started by this script in a
temporary directory on loopback ports as the user `postgres`, one plain and
one under the preload (every default), driven at the same time by pgbench
(select-only, -c N connections), so both sides see the same machine. While
the load runs, every process of each cluster (the postmaster and its
children) is read: PSS (/proc/PID/smaps_rollup), threads, and the PSS of
each mapping sorted by where the recorder puts memory (process_memory.py).
    run_pg_memory.py BUILD [CONNS,...] [SECONDS]
Defaults: 16,64 connections, SECONDS 8 (the snapshot SECONDS/2 after every
backend is up).
Needs root (it runs the clusters as postgres and reads their /proc).
"""
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_report as mr  # noqa: E402


def pg_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        raise SystemExit("PostgreSQL is not installed (Debian package postgresql)")
    return os.path.dirname(found[-1])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def as_postgres(cmd, env=None, **kw):
    return subprocess.run(["runuser", "-u", "postgres", "--"] + cmd, env=env, check=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


class Cluster:
    def __init__(self, tmp, name, template, lib, settings=()):
        self.dir = os.path.join(tmp, name)
        shutil.copytree(template, self.dir)
        shutil.chown(self.dir, "postgres", "postgres")
        for root, dirs, files in os.walk(self.dir):
            for n in dirs + files:
                shutil.chown(os.path.join(root, n), "postgres", "postgres")
        self.port = free_port()
        self.out = os.path.join(tmp, name + "-trace")
        os.mkdir(self.out)
        shutil.chown(self.out, "postgres", "postgres")
        env = dict(os.environ, FLIGHTREC_OUTPUT=self.out)
        env.pop("LD_PRELOAD", None)
        if lib:
            env["LD_PRELOAD"] = lib
        self.log = open(os.path.join(tmp, name + ".log"), "w")
        self.proc = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "env"] + (["LD_PRELOAD=" + lib] if lib else []) + list(settings) +
            ["FLIGHTREC_OUTPUT=" + self.out, os.path.join(pg_bin(), "postgres"), "-D", self.dir,
             "-p", str(self.port), "-k", self.dir, "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=100"],
            env=env, stdout=self.log, stderr=self.log)
        for _ in range(200):
            if subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(pg_bin(), "pg_isready"),
                               "-h", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("postgres did not start (%s)" % self.log.name)
        as_postgres(["pgbench", "-i", "-q", "-s", "1", "-h", "127.0.0.1", "-p", str(self.port), "postgres"])

    def postmaster(self):
        with open(os.path.join(self.dir, "postmaster.pid")) as f:
            return int(f.readline())

    def pids(self):
        top = self.postmaster()
        return [top] + mr.children(top)

    def backends(self):
        """How many client backends (title "postgres: USER DB HOST(PORT) ...") run."""
        n = 0
        for pid in self.pids()[1:]:
            try:
                with open("/proc/%d/cmdline" % pid) as f:
                    n += "127.0.0.1(" in f.read()
            except OSError:
                pass
        return n

    def load(self, conns, seconds):
        return subprocess.Popen(["runuser", "-u", "postgres", "--", "pgbench", "-S", "-n", "-c", str(conns), "-j", "2",
                                 "-T", str(seconds), "-h", "127.0.0.1", "-p", str(self.port), "postgres"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        try:
            os.kill(self.postmaster(), 2)  # SIGINT: fast shutdown
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def new_template(tmp):
    """An initdb'd cluster directory in tmp, owned by postgres, for Cluster to copy."""
    template = os.path.join(tmp, "template")
    os.mkdir(template)
    shutil.chown(template, "postgres", "postgres")
    as_postgres([os.path.join(pg_bin(), "initdb"), "-D", template, "-A", "trust", "-N"])
    return template


def lib_of(build):
    """BUILD's libflightrec.so; one clear line (not a silently plain run) for anything else."""
    lib = os.path.join(os.path.abspath(build), "libflightrec.so")
    if not os.path.isfile(lib):
        raise SystemExit("no libflightrec.so in %s: give the build directory (e.g. build)" % build)
    return lib


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    lib = lib_of(sys.argv[1])
    conns_list = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "16,64").split(",")]
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    if os.geteuid() != 0:
        raise SystemExit("run as root (the clusters run as postgres)")
    pwd.getpwnam("postgres")
    # Owned by root (the recorder refuses an output path through a directory
    # another user owns); what postgres writes lies in subdirectories it owns.
    tmp = tempfile.mkdtemp(prefix="fr-pgmem-", dir="/var/tmp")
    os.chmod(tmp, 0o755)
    clusters = []
    try:
        template = new_template(tmp)
        plain = Cluster(tmp, "plain", template, None)
        clusters.append(plain)
        traced = Cluster(tmp, "flightrec", template, lib)
        clusters.append(traced)
        print("PostgreSQL %s, pgbench -S, two clusters side by side (plain, and flightrec with every default), "
              "snapshot %d/2 s after every connection is up:" % (os.path.basename(os.path.dirname(pg_bin())), seconds))
        for conns in conns_list:
            # The load lasts until both snapshots are taken (reading smaps
            # walks the page tables of 64 backends' shared buffers: seconds),
            # then pgbench is stopped.
            loads = [c.load(conns, 3600) for c in clusters]
            deadline = time.monotonic() + 2 * seconds
            while time.monotonic() < deadline and min(c.backends() for c in clusters) < conns:
                time.sleep(0.1)
            time.sleep(seconds / 2.0)
            backs = [c.backends() for c in clusters]
            plain_libraries = mr.library_paths(plain.pids())
            snaps = [mr.snapshot(c.pids(), plain_libraries) for c in clusters]
            for p in loads:
                p.terminate()
                p.wait()
            if min(backs) < conns:
                print("  (only %d and %d of %d backends were up at the snapshot)" % (backs[0], backs[1], conns))
            mr.report("%d connections" % conns, snaps[0], snaps[1])
    finally:
        for c in clusters:
            c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
