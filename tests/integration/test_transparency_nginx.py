"""Transparency under a real forking server: nginx (Debian's build; a master
and 2 worker processes it forks) serves static files to wrk and to plain
HTTP requests, once plain and once under the preload with every feature on
and a small allocation sampling rate. Responses, wrk's error counts, the
error log and the exit codes must be the same; every process leaves its own
sealed segments, and each worker's socket bytes per connection equal what
nginx itself logged ($bytes_sent, $request_length), exactly."""
import collections
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

TRACED = {"FLIGHTREC_ALLOC_SAMPLE_BYTES": 4096, "FLIGHTREC_LOG": "warn",
          # Exact byte totals need every socket record: rings big enough
          # that a starved (nice +10) flush thread drops nothing.
          "FLIGHTREC_RING_BYTES": "8M", "FLIGHTREC_ACCEPTQ_MS": 100}
WRK_SECONDS = 2

# Bytes fixed by a seed: the same in both runs, checked against the responses.
FILES = {
    "index.html": (b"flightrec nginx transparency page\n" * 121)[:4096],
    "small.txt": b"hello from a small file\n",
    "empty.txt": b"",
    # Larger than a socket buffer fills at once: several sendfile calls.
    "blob.bin": random.Random(7).randbytes(300 * 1024),
}

CONFIG = """daemon off;
master_process on;
worker_processes 2;
{user}
error_log {dir}/error.log notice;
pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    log_format flightrec '$pid $remote_port $status $bytes_sent $request_length "$request" "$http_user_agent"';
    access_log {dir}/access.log flightrec;
    sendfile on;
    tcp_nopush on;
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
LOG_LINE = re.compile(r'^(\d+) (\d+) (\d+) (\d+) (\d+) "(.*)" "(.*)"$')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, attempts=200):
    """A connection to nginx, retried while it starts (bounded: ~10 s)."""
    for _ in range(attempts):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nginx did not start listening on port %d" % port)


def fetch(port, path, method="GET"):
    """(status, content-length, content-type, body) of one request on its own connection."""
    req = urllib.request.Request("http://127.0.0.1:%d/%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Length"), r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Length"), e.headers.get("Content-Type"), e.read()


def fetch_all(port):
    got = [(p, m) + fetch(port, p, m) for p, m in
           [(name, "GET") for name in FILES] + [("missing.html", "GET"), ("index.html", "HEAD")]]
    for path, method, status, length, _, body in got:
        if path in FILES:
            want = FILES[path] if method == "GET" else b""
            assert (status, body, length) == (200, want, str(len(FILES[path]))), (path, method, status)
        else:
            assert status == 404, (path, status)
    return got


def run_wrk(port):
    p = subprocess.run(["wrk", "-t", "2", "-c", "2", "-d", "%ds" % WRK_SECONDS,
                        "http://127.0.0.1:%d/index.html" % port],
                       capture_output=True, text=True, timeout=WRK_SECONDS + 60)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"^\s+(\d+) requests in", p.stdout, re.M)
    assert m, p.stdout
    # wrk prints these lines only when something went wrong.
    assert "Socket errors" not in p.stdout, p.stdout
    assert "Non-2xx or 3xx responses" not in p.stdout, p.stdout
    return int(m.group(1))


def full_load(port):
    """Requests for every file, wrk on the fixed URL, the requests again."""
    probe = wait_listening(port)
    probe_port = probe.getsockname()[1]
    probe.close()  # a connection that sends nothing: 0 bytes either way
    before = fetch_all(port)
    wrk_requests = run_wrk(port)
    return {"probe_port": probe_port, "before": before, "wrk_requests": wrk_requests,
            "after": fetch_all(port)}


def one_request(port):
    wait_listening(port).close()
    return {"status": fetch(port, "small.txt")[0]}


def serve(fr, base, trace_dir, preload, drive=full_load, drop_privileges=False):
    """Runs nginx once (plain or traced) under `drive`, then stops it gracefully."""
    base.mkdir()
    (base / "www").mkdir()
    (base / "tmp").mkdir()
    for name, data in FILES.items():
        (base / "www" / name).write_bytes(data)
    port = free_port()
    # As root the workers switch to `nobody` unless told otherwise.
    user = "user root root;" if os.geteuid() == 0 and not drop_privileges else ""
    conf = base / "nginx.conf"
    conf.write_text(CONFIG.format(dir=base, port=port, user=user))
    env = fr.env(trace_dir if preload else base / "unused-out", TRACED if preload else None, preload)
    with open(base / "stdout", "w+") as out, open(base / "stderr", "w+") as err:
        server = subprocess.Popen(["nginx", "-p", str(base), "-c", str(conf), "-e", str(base / "error.log")],
                                  env=env, stdout=out, stderr=err)
        try:
            got = drive(port)
            server.send_signal(signal.SIGQUIT)  # graceful: workers finish, then exit()
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        out.seek(0)
        err.seek(0)
        got.update(rc=server.returncode, pid=server.pid, port=port, stdout=out.read(), stderr=err.read(),
                   error_log=(base / "error.log").read_text().splitlines(),
                   access_log=(base / "access.log").read_text().splitlines())
    return got


def log_shape(lines, base):
    """The error log without times, pids, ports, connection numbers and the
    run's directory: which kinds of line appeared (SIGCHLD notices may
    merge, so a set). The master's SIGIO notice comes or not with the timing
    of its channel to the workers, plain too: left out."""
    shape = {re.sub(r"\d+", "N", line.split("] ", 1)[-1].replace(str(base), "DIR")) for line in lines}
    return shape - {"N#N: signal N (SIGIO) received"}


def worker_pids(side):
    pids = [int(m.group(1)) for line in side["error_log"]
            for m in [re.search(r"start worker process (\d+)$", line)] if m]
    exits = [line for line in side["error_log"] if "worker process" in line and "exited" in line]
    assert len(pids) == 2, side["error_log"]
    # nginx's own report of each worker's end: a clean exit() in both runs.
    assert sorted(int(re.search(r"worker process (\d+) exited with code 0$", line).group(1))
                  for line in exits) == sorted(pids), exits
    return pids


def logged_bytes(side):
    """From nginx's access log: {(worker pid, client port): [bytes sent,
    bytes read]} and the keys of urllib's connections (wrk sends no
    User-Agent)."""
    per_conn = collections.defaultdict(lambda: [0, 0])
    urllib_conns = []
    for line in side["access_log"]:
        m = LOG_LINE.match(line)
        assert m, line
        key = (int(m.group(1)), int(m.group(2)))
        per_conn[key][0] += int(m.group(4))
        per_conn[key][1] += int(m.group(5))
        if m.group(7).startswith("Python-urllib/"):
            urllib_conns.append(key)
    return dict(per_conn), urllib_conns


def need_nginx_and_wrk():
    if not (shutil.which("nginx") and shutil.which("wrk")):
        pytest.skip("nginx or wrk is not installed (make deps installs both)")


@pytest.mark.slow
def test_nginx_master_and_workers_under_wrk(fr, trace_dir, tmp_path):
    need_nginx_and_wrk()
    plain = serve(fr, tmp_path / "plain", None, preload=False)
    traced = serve(fr, tmp_path / "traced", trace_dir, preload=True)

    # The same observable behaviour.
    for side in (plain, traced):
        assert side["rc"] == 0, side["error_log"]
        assert side["wrk_requests"] > 0
    assert traced["before"] == plain["before"] and traced["after"] == plain["after"]
    assert (traced["stdout"], traced["stderr"]) == (plain["stdout"], plain["stderr"])
    # nginx sends its stderr into error.log once configured: anything
    # flightrec says lands there, with its prefix.
    ours = [line for line in traced["error_log"] if line.startswith("flightrec: ")]
    print("flightrec lines in error.log:", ours)
    nginx_lines = [line for line in traced["error_log"] if not line.startswith("flightrec: ")]
    assert log_shape(nginx_lines, tmp_path / "traced") == log_shape(plain["error_log"], tmp_path / "plain"), \
        (nginx_lines, plain["error_log"])
    worker_pids(plain)
    workers = worker_pids(traced)
    master = traced["pid"]

    # Every process of the tree: its own sealed, readable segments.
    doc = fr.dump_json("info", "--json", trace_dir)
    assert {s["pid"] for s in doc["segments"]} == {master} | set(workers), doc["segments"]
    assert all(s["state"] == "sealed" and not s["bad_blocks"] and not s["problems"]
               for s in doc["segments"]), doc["segments"]
    starts = {e["pid"]: e for e in fr.events(trace_dir, "process.start")}
    assert set(starts) == {master} | set(workers)
    assert all(starts[w]["ppid"] == master for w in workers)

    # Socket bytes, exact per connection against nginx's own access log: the
    # master opens the listener, each worker inherits it and accepts on it;
    # each worker's connections carry what it logged.
    sockets = fr.dump_json("sockets", "--json", trace_dir)
    assert sockets["totals"]["dropped_records"] == 0, sockets["totals"]
    conns = sockets["connections"]
    listeners = [c for c in conns if c["role"] == "listener"]
    assert sorted((c["pid"], c["local"]) for c in listeners) == \
        sorted((pid, "127.0.0.1:%d" % traced["port"]) for pid in [master] + workers)
    served = [c for c in conns if c["role"] == "server"]
    assert {c["pid"] for c in served} <= set(workers)
    traced_bytes = collections.defaultdict(lambda: [0, 0])
    errors = {}
    for c in served:
        key = (c["pid"], int(c["peer"].rsplit(":", 1)[1]))
        traced_bytes[key][0] += c["bytes_out"]
        traced_bytes[key][1] += c["bytes_in"]
        if c["errors"]:
            errors[key] = c["errors_by_name"]
    probe = [k for k in traced_bytes if k[1] == traced["probe_port"]]
    assert len(probe) == 1 and traced_bytes[probe[0]] == [0, 0]
    # A connection that carried no request (the probe; wrk's reconnect
    # when it stopped) leaves no access-log line.
    logged, urllib_conns = logged_bytes(traced)
    assert {k: v for k, v in traced_bytes.items() if v != [0, 0]} == logged
    # urllib: 2 x 6 requests, each on its own connection, closed cleanly.
    assert len(set(urllib_conns)) == len(urllib_conns) == 12
    assert not [k for k in urllib_conns if k in errors], dict(errors)
    # wrk closes its 2 connections when its time is up, a request possibly
    # in flight: nginx's next recv on each may fail (reset), nothing else.
    # ("in": the failed receive counted inside an exchange record.)
    assert len(errors) <= 2 and all(e in ({"recv": 1}, {"in": 1}) for e in errors.values()), dict(errors)
    # wrk counted the responses it finished; nginx logged those and any in
    # flight when wrk stopped.
    assert len(traced["access_log"]) >= traced["wrk_requests"] + 12
    print("nginx traced: %d wrk requests, %d connections, %d bytes sent"
          % (traced["wrk_requests"], len(logged), sum(v[0] for v in logged.values())))


# Known gaps, kept here so they flip to failures (strict) once fixed.

def test_nginx_workers_that_drop_privileges_keep_recording(fr, trace_dir, tmp_path):
    need_nginx_and_wrk()
    if os.geteuid() != 0:
        pytest.skip("nginx drops privileges only when started as root")
    side = serve(fr, tmp_path / "traced", trace_dir, preload=True, drive=one_request, drop_privileges=True)
    assert side["rc"] == 0, side["error_log"]
    workers = worker_pids(side)
    doc = fr.dump_json("info", "--json", trace_dir)
    assert {s["pid"] for s in doc["segments"]} == {side["pid"]} | set(workers)
    assert all(s["state"] == "sealed" for s in doc["segments"]), [l for l in side["error_log"]
                                                                 if l.startswith("flightrec: ")]


def test_nginx_worker_segments_carry_the_service_name(fr, trace_dir, tmp_path):
    need_nginx_and_wrk()
    side = serve(fr, tmp_path / "traced", trace_dir, preload=True, drive=one_request)
    assert side["rc"] == 0 and side["status"] == 200, side["error_log"]
    doc = fr.dump_json("info", "--json", trace_dir)
    assert len(doc["segments"]) == 3
    assert [s["service"] for s in doc["segments"]] == ["nginx"] * 3
