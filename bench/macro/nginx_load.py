"""nginx_load: nginx serving one static file, driven by wrk with 2
connections per core (-t 2 -c 4) for a fixed time; wrk --latency gives
p99. nginx runs in the foreground from a generated config in the run's
directory with master_process off: the process that serves is the one the
side was injected into. (With a master, workers are forked: flightrec
follows forks, but gperftools' ITIMER_PROF is not inherited by a child, so
it would profile only the idle master.) The config keeps the side's
variables with `env` directives in case anything re-reads them."""
import os
import re
import signal
import subprocess

from . import procs
from . import server_run

FILE_BYTES = 4096
THREADS, CONNECTIONS = 2, 4

CONFIG = """daemon off;
master_process off;
worker_processes 1;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
{env}
events {{ worker_connections 256; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    keepalive_requests 100000000;
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

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def seconds(scale):
    return max(2, int(round(10 * scale)))


def client_command(port, secs):
    return ["wrk", "-t", str(THREADS), "-c", str(CONNECTIONS), "-d", "%ds" % secs, "--latency",
            "http://127.0.0.1:%s/index.html" % port]


def parse_wrk(text):
    """{'requests', 'rps', 'p99_ms', 'p50_ms', 'errors'} from wrk --latency output."""
    def latency(pct):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s|m)\s*$" % pct, text, re.M)
        if not m:
            raise RuntimeError("no %s%% latency in wrk output:\n%s" % (pct, text))
        return float(m.group(1)) * _UNITS[m.group(2)]
    req = re.search(r"^\s+(\d+) requests in", text, re.M)
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    if not req or not rps:
        raise RuntimeError("unexpected wrk output:\n" + text)
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors += sum(int(g) for g in m.groups())
    return {"requests": int(req.group(1)), "rps": float(rps.group(1)), "p50_ms": latency(50),
            "p99_ms": latency(99), "errors": errors}


def run(side, ctx, rnd):
    port = procs.free_port()
    tag = "nginx-r%d-%s" % (rnd, side.name)
    rundir = ctx.rundir(tag)
    os.makedirs(os.path.join(rundir, "www"))
    os.makedirs(os.path.join(rundir, "tmp"))
    with open(os.path.join(rundir, "www", "index.html"), "wb") as f:
        f.write((b"flightrec nginx benchmark page\n" * (FILE_BYTES // 31 + 1))[:FILE_BYTES])
    env_lines = "".join("env %s;\n" % name for name in side.env_names())
    conf = os.path.join(rundir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(CONFIG.format(dir=rundir, port=port, env=env_lines))
    secs = seconds(ctx.scale)

    def drive():
        p = subprocess.run(procs.pinned(client_command(port, secs), ctx.client_cpu), capture_output=True,
                           text=True, timeout=secs + 120, check=True)
        got = parse_wrk(p.stdout)
        if got["errors"]:
            raise RuntimeError("wrk saw %d errors:\n%s" % (got["errors"], p.stdout))
        return got

    def stop(server):
        os.kill(server, signal.SIGQUIT)  # graceful: exits through exit(), so every tool finishes its file

    cmd = ["nginx", "-p", rundir, "-c", conf, "-e", os.path.join(rundir, "error.log")]
    return server_run.run(side, ctx, tag, cmd, "nginx", port, drive, stop)


def describe(ctx):
    return {
        "server": " ".join(procs.pinned(["$SIDE", "nginx", "-p", "$DIR", "-c", "$DIR/nginx.conf", "-e",
                                         "$DIR/error.log"], ctx.server_cpu)),
        "client": " ".join(procs.pinned(client_command("$PORT", seconds(ctx.scale)), ctx.client_cpu)),
        "stop": "kill -QUIT $NGINX_PID",
        "config": CONFIG.format(dir="$DIR", port="$PORT", env="env LD_PRELOAD; env FLIGHTREC_OUTPUT; ..."),
        "file_bytes": FILE_BYTES,
    }
