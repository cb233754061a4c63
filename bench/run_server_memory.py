#!/usr/bin/python3
"""Memory and threads per process of two more forking servers (issue #44),
the companions of run_pg_memory.py: nginx with `master_process on;
worker_processes 4;` serving a small static file, and a preforking Python
server (prefork_server.py: a master and 4 forked workers accepting on one
socket). Each server runs twice from a temporary directory on loopback ports,
one plain and one under the preload (every default), at the same time, each
under its own wrk (1 thread, 8 keep-alive connections, SECONDS long), so both sides see the
same machine. SECONDS/2 into the load every process of each server (the
master and its children) is read, and the two are printed side by side by
memory_report.py (PSS from /proc/PID/smaps_rollup, threads, the added PSS by
mapping from process_memory.py).
    run_server_memory.py BUILD [SECONDS] [SERVERS]
Defaults: SECONDS 6, SERVERS nginx,python. FLIGHTREC_* settings in the
environment apply to the preloaded side (the title names them). nginx runs its workers as the
user who starts it (root: `user root root;`).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_report as mr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = 4
PAGE = (b"flightrec server memory page\n" * 36)[:1024]

NGINX_CONFIG = """daemon off;
master_process on;
worker_processes {workers};
{user}
error_log {dir}/error.log notice;
pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    sendfile on;
    keepalive_timeout 65;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
        location / {{ }}
    }}
}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_dir(tmp, name, lib):
    """A server's own directory under tmp, a free loopback port, the
    environment to start it with (LD_PRELOAD=lib unless lib is None, its
    trace in DIR/trace) and its open log file: (dir, port, env, log)."""
    d = os.path.join(tmp, name)
    os.mkdir(d)
    out = os.path.join(d, "trace")
    os.mkdir(out)
    env = dict(os.environ, FLIGHTREC_OUTPUT=out)
    env.pop("LD_PRELOAD", None)
    if lib:
        env["LD_PRELOAD"] = lib
    return d, free_port(), env, open(os.path.join(d, "server.log"), "w")


class Server:
    """One server (plain when lib is None) started from its own directory."""

    def __init__(self, tmp, kind, name, lib):
        self.dir, self.port, env, self.log = server_dir(tmp, kind + "-" + name, lib)
        if kind == "nginx":
            os.mkdir(os.path.join(self.dir, "www"))
            os.mkdir(os.path.join(self.dir, "tmp"))
            with open(os.path.join(self.dir, "www", "index.html"), "wb") as f:
                f.write(PAGE)
            conf = os.path.join(self.dir, "nginx.conf")
            with open(conf, "w") as f:
                f.write(NGINX_CONFIG.format(dir=self.dir, port=self.port, workers=WORKERS,
                                            user="user root root;" if os.geteuid() == 0 else ""))
            cmd = ["nginx", "-p", self.dir, "-c", conf, "-e", os.path.join(self.dir, "error.log")]
        else:
            cmd = ["/usr/bin/python3", os.path.join(HERE, "prefork_server.py"), str(self.port), str(WORKERS)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while len(self.pids()) < 1 + WORKERS or not self.listening():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("%s did not start its %d workers (%s)" % (kind, WORKERS, self.log.name))
            time.sleep(0.1)

    def listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def pids(self):
        return [self.proc.pid] + mr.children(self.proc.pid)

    def load(self, seconds):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        return subprocess.Popen(["wrk", "-t1", "-c8", "-d%ds" % seconds, "http://127.0.0.1:%d/" % self.port],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self):
        # nginx: SIGQUIT, graceful; the Python master stops its workers on SIGTERM.
        self.proc.send_signal(signal.SIGQUIT if self.proc.args[0] == "nginx" else signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            for pid in self.pids()[1:]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.proc.kill()
            self.proc.wait()


def measure(tmp, kind, lib, seconds):
    servers = []
    loads = []
    try:
        servers.append(Server(tmp, kind, "plain", None))
        servers.append(Server(tmp, kind, "flightrec", lib))
        loads = [s.load(seconds) for s in servers]
        time.sleep(seconds / 2.0)
        plain_libraries = mr.library_paths(servers[0].pids())
        snaps = [mr.snapshot(s.pids(), plain_libraries) for s in servers]
        # wrk's own count of the responses it got: the load reached both.
        served = []
        for p in loads:
            text = p.communicate(timeout=seconds + 60)[0]
            m = re.search(r"^\s*(\d+) requests in ([0-9.]+)s", text, re.M)
            served.append("%s in %s s" % (m.group(1), m.group(2)) if m else "none (%s)" % text.strip()[-200:])
    finally:
        for p in loads:
            if p.poll() is None:
                p.kill()
                p.wait()
        for s in servers:
            s.stop()
    return snaps, served


def nginx_version():
    r = subprocess.run(["nginx", "-v"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.stdout.strip().split("/")[-1]


def main():
    build = os.path.abspath(sys.argv[1])
    lib = os.path.join(build, "libflightrec.so")
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    kinds = (sys.argv[3] if len(sys.argv) > 3 else "nginx,python").split(",")
    # Settings from the environment reach the preloaded side: say which.
    given = sorted("%s=%s" % kv for kv in os.environ.items()
                   if kv[0].startswith("FLIGHTREC_") and kv[0] != "FLIGHTREC_OUTPUT")
    settings = " ".join(given) if given else "every default"
    # Owned by the user who runs this (the recorder refuses an output path
    # through a directory another user owns).
    tmp = tempfile.mkdtemp(prefix="fr-srvmem-", dir="/var/tmp")
    try:
        for kind in kinds:
            if kind == "nginx":
                if not (shutil.which("nginx") and shutil.which("wrk")):
                    print("nginx: skipped (needs nginx and wrk)")
                    continue
                title = ("nginx %s, master_process on, worker_processes %d, a 1 KiB static file, "
                         "two servers side by side (plain, and flightrec with %s)"
                         % (nginx_version(), WORKERS, settings))
            elif kind == "python":
                if not shutil.which("wrk"):
                    print("python: skipped (needs wrk)")
                    continue
                title = ("preforking Python server (bench/prefork_server.py, Python %s): a master and %d forked "
                         "workers, two servers side by side (plain, and flightrec with %s)"
                         % (sys.version.split()[0], WORKERS, settings))
            else:
                raise SystemExit("unknown server %r (nginx, python)" % kind)
            print("%s, wrk -t1 -c8 on each, snapshot %d/2 s into the load:" % (title, seconds))
            (ps, ts), served = measure(tmp, kind, lib, seconds)
            print("  wrk responses: plain %s, flightrec %s" % tuple(served))
            mr.report("%s, 1 master + %d workers" % (kind, WORKERS), ps, ts, each=True)
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
