"""Endpoint names and trace context (issue 41) on real servers under the
preload, nothing in them changed: Python's http.server, redis-server (a
scripted client and redis-benchmark) and nginx. Each must name its
requests' endpoints, with counts exactly what the client sent; a traceparent
a client sent comes back with its request; the raw bytes (query strings,
cookies, keys) never reach the trace."""
import re
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"

HTTP_SERVER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/slow/"):
            import time
            time.sleep(0.3)
        self._answer()
    do_POST = _answer
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
import threading
threading.Thread(target=s.serve_forever, daemon=True).start()
sys.stdin.read()
s.shutdown()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, attempts=400):
    for _ in range(attempts):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nothing listening on port %d" % port)


def by_endpoint(fr, trace_dir, *extra):
    doc = fr.dump_json("requests", "--by", "endpoint", "--json", *extra, trace_dir)
    return {(r["role"], r["endpoint"]): r for r in doc["endpoints"]}


def http_get(port, path, headers=None, method="GET", body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers=headers or {}, method=method,
                                 data=body)
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.read() == b"ok"


def run_http_server(fr, trace_dir, env, client):
    proc = subprocess.Popen([PYTHON, "-c", HTTP_SERVER], env=fr.env(trace_dir, env), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        client(port)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


TRACES = ["%032x" % (0x4bf92f3577b34da6a3ce929d0e0e4730 + i) for i in range(3)]


def python_client(port):
    for i in range(7):
        http_get(port, "/users/%d?token=supersecret%d" % (1000 + i, i), {"Cookie": "session=cookiesecret"})
    for i in range(3):
        http_get(port, "/orders/550e8400-e29b-41d4-a716-44665544000%d/items" % i, method="POST", body=b"x" * 10)
    http_get(port, "/health")
    http_get(port, "/health")
    for i, t in enumerate(TRACES):
        http_get(port, "/traced/%d" % i, {"traceparent": "00-%s-00f067aa0ba902b%d-01" % (t, i),
                                          "X-Request-Id": "rid-%d" % i})


def test_python_http_server_endpoints_counts_and_traceparent(fr, trace_dir):
    run_http_server(fr, trace_dir, {"FLIGHTREC_TRACE_CONTEXT": 1}, python_client)
    rows = by_endpoint(fr, trace_dir)
    server = {ep: r["count"] for (role, ep), r in rows.items() if role == "server"}
    assert server == {"GET /users/:id": 7, "POST /orders/:id/items": 3, "GET /health": 2, "GET /traced/:id": 3}, rows
    r = rows[("server", "POST /orders/:id/items")]
    assert r["bytes_in"] > 10 and r["bytes_out"] > 2
    # Each traceparent comes back with its own request.
    for i, t in enumerate(TRACES):
        doc = fr.dump_json("requests", "--json", "--trace-id", t, trace_dir)
        assert len(doc["requests"]) == 1, doc
        req = doc["requests"][0]
        assert req["endpoint"] == "GET /traced/:id"
        assert req["trace"] == {"trace_id": t, "parent_span_id": "00f067aa0ba902b%d" % i, "sampled": True,
                                "request_id": "rid-%d" % i}
    text = fr.dump_run("requests", "--trace-id", TRACES[1][:12], trace_dir).stdout
    assert "GET /traced/:id" in text and TRACES[1] in text
    assert "rid-2" in fr.dump_run("requests", "--trace-id", "rid-2", trace_dir).stdout
    # --endpoint keeps only that endpoint's requests.
    doc = fr.dump_json("requests", "--json", "--endpoint", "GET /users/*", trace_dir)
    assert len(doc["requests"]) == 7 and {q["endpoint"] for q in doc["requests"]} == {"GET /users/:id"}
    # The raw bytes never reach the trace: no query, cookie, or id.
    everything = fr.dump_run("events", trace_dir).stdout
    for secret in ("supersecret", "cookiesecret", "session=", "550e8400"):
        assert secret not in everything, secret
    # The numeric id as a path segment (timestamps and counts hold such digits too).
    assert not re.search(r"/1003(?![\d])", everything)
    # chrome: request slices carry their endpoint and trace id.
    out = trace_dir.parent / "t.json"
    fr.dump_run("chrome", "-o", out, trace_dir)
    events = json.loads(out.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = [e["name"] for e in events if e.get("cat") == "request"]
    assert names.count("request GET /users/:id") == 7, names
    traced = [e for e in events if e.get("cat") == "request" and e["args"].get("trace_id") == TRACES[0]]
    assert len(traced) == 1 and traced[0]["name"] == "request GET /traced/:id"


def test_endpoints_off_and_trace_context_off(fr, trace_dir):
    run_http_server(fr, trace_dir, {"FLIGHTREC_ENDPOINTS": "off"}, python_client)
    rows = by_endpoint(fr, trace_dir)
    assert {ep for (role, ep) in rows if role == "server"} == {"(unnamed)"}
    assert rows[("server", "(unnamed)")]["count"] == 15
    doc = fr.dump_json("requests", "--json", trace_dir)
    assert not any("trace" in q for q in doc["requests"])


def test_trace_context_is_off_by_default(fr, trace_dir):
    run_http_server(fr, trace_dir, {}, python_client)
    doc = fr.dump_json("requests", "--json", trace_dir)
    assert sum(1 for q in doc["requests"] if q.get("endpoint") == "GET /traced/:id") == 3
    assert not any("trace" in q for q in doc["requests"])


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def read_line_reply(sock):
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = sock.recv(65536)
        assert chunk
        buf += chunk
    if buf.startswith(b"$") and not buf.startswith(b"$-1"):
        n = int(buf[1:buf.index(b"\r\n")])
        while len(buf) < buf.index(b"\r\n") + 2 + n + 2:
            buf += sock.recv(65536)
    return buf


def start_redis(fr, trace_dir, tmp_path, env=None):
    assert shutil.which("redis-server"), "redis-server is missing: run `make deps`"
    port = free_port()
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(data), "--daemonize", "no", "--loglevel", "warning"],
        env=fr.env(trace_dir, dict({"FLIGHTREC_RING_BYTES": "8M"}, **(env or {}))), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    return server, port


def stop_redis(server, port):
    try:
        s = wait_listening(port)
        s.sendall(resp("SHUTDOWN", "NOSAVE"))
        s.recv(1024)
        s.close()
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0, server.stdout.read()


def test_redis_scripted_client_exact_counts_per_command(fr, trace_dir, tmp_path):
    server, port = start_redis(fr, trace_dir, tmp_path)
    try:
        c = wait_listening(port)
        sent = {"SET": 0, "GET": 0, "HSET": 0, "INCR": 0, "PING": 0, "CONFIG GET": 0}
        for i in range(40):
            for cmd in (("SET", "k%d" % i, "secretvalue%d" % i), ("GET", "k%d" % i), ("HSET", "h", "f%d" % i, "v"),
                        ("INCR", "n")):
                c.sendall(resp(*cmd))
                read_line_reply(c)
                sent[cmd[0]] += 1
        for _ in range(5):
            c.sendall(b"PING\r\n")  # inline
            assert read_line_reply(c) == b"+PONG\r\n"
            sent["PING"] += 1
        c.sendall(resp("CONFIG", "GET", "maxmemory"))
        while b"maxmemory" not in c.recv(65536):
            pass
        sent["CONFIG GET"] += 1
        c.close()
    finally:
        stop_redis(server, port)
    rows = by_endpoint(fr, trace_dir)
    got = {ep: r["count"] for (role, ep), r in rows.items() if role == "server"}
    got.pop("SHUTDOWN", None)  # the stop request: answered by closing, not a request
    assert got == sent, rows
    assert "secretvalue" not in fr.dump_run("events", trace_dir).stdout


@pytest.mark.slow
def test_redis_benchmark_exact_counts(fr, trace_dir, tmp_path):
    assert shutil.which("redis-benchmark"), "redis-benchmark is missing: run `make deps`"
    server, port = start_redis(fr, trace_dir, tmp_path)
    n = 3000
    try:
        wait_listening(port).close()
        bench = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(n), "-c", "10",
                                "-q", "-t", "set,get,incr,lpush,hset"], capture_output=True, text=True, timeout=300)
        assert bench.returncode == 0, bench.stderr
    finally:
        stop_redis(server, port)
    rows = by_endpoint(fr, trace_dir)
    got = {ep: r["count"] for (role, ep), r in rows.items() if role == "server"}
    for cmd in ("SET", "GET", "INCR", "LPUSH", "HSET"):
        assert got.get(cmd) == n, (cmd, got)


NGINX = """daemon off;
master_process off;
{user}
error_log {dir}/error.log notice;
pid {dir}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
        location /items/ {{ return 200 "item"; }}
        location / {{ }}
    }}
}}
"""


def test_nginx_static_and_numeric_id_paths(fr, trace_dir, tmp_path):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    assert os.path.exists(nginx), "nginx is missing: run `make deps`"
    base = tmp_path / "nginx"
    (base / "www" / "static").mkdir(parents=True)
    (base / "tmp").mkdir()
    (base / "www" / "static" / "a.css").write_text("body{}\n")
    (base / "www" / "index.html").write_text("hello\n")
    port = free_port()
    conf = base / "nginx.conf"
    conf.write_text(NGINX.format(dir=base, port=port, user="user root root;" if os.geteuid() == 0 else ""))
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(base), "-e", str(base / "error.log")],
                            env=fr.env(trace_dir, {"FLIGHTREC_RING_BYTES": "8M", "FLIGHTREC_TRACE_CONTEXT": 1}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_listening(port).close()  # a connection with no request: not a request
        for _ in range(4):
            with urllib.request.urlopen("http://127.0.0.1:%d/static/a.css" % port, timeout=30) as r:
                assert r.read() == b"body{}\n"
        for i in range(6):
            # the last one carries a W3C traceparent: it must come back with its request
            hdr = {"traceparent": "00-%s-00f067aa0ba902b7-01" % TRACES[2], "X-Request-Id": "ngx-5"} if i == 5 else {}
            req = urllib.request.Request("http://127.0.0.1:%d/items/%d?q=1" % (port, 4000 + i), headers=hdr)
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.read() == b"item"
        with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=30) as r:
            assert r.read() == b"hello\n"
    finally:
        proc.send_signal(15)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    rows = by_endpoint(fr, trace_dir)
    got = {ep: r["count"] for (role, ep), r in rows.items() if role == "server"}
    assert got == {"GET /static/a.css": 4, "GET /items/:id": 6, "GET /": 1}, rows
    doc = fr.dump_json("requests", "--json", "--trace-id", TRACES[2], trace_dir)
    assert [(q["role"], q["endpoint"], q["trace"]) for q in doc["requests"]] == [
        ("server", "GET /items/:id", {"trace_id": TRACES[2], "parent_span_id": "00f067aa0ba902b7", "sampled": True,
                                      "request_id": "ngx-5"})], doc["requests"]
    assert sum(1 for q in fr.dump_json("requests", "--json", trace_dir)["requests"] if q.get("trace")) == 1


# Node's http module, nothing changed in it: one endpoint per path shape,
# a traceparent header coming back with its request.
NODE_SERVER = r"""
const http = require("http");
const s = http.createServer((req, res) => {
  let n = 0;
  req.on("data", (c) => { n += c.length; });
  req.on("end", () => { res.setHeader("Content-Length", "2"); res.end("ok"); });
});
s.keepAliveTimeout = 60000;
s.listen(0, "127.0.0.1", () => { process.stdout.write(s.address().port + "\n"); });
process.stdin.on("end", () => { s.close(); process.exit(0); });
process.stdin.resume();
"""


def test_node_http_endpoints_counts_and_traceparent(fr, trace_dir, tmp_path):
    node = shutil.which("node") or shutil.which("nodejs")
    assert node, "node is missing: run `make deps`"
    script = tmp_path / "server.js"
    script.write_text(NODE_SERVER)
    proc = subprocess.Popen([node, str(script)], env=fr.env(trace_dir, {"FLIGHTREC_TRACE_CONTEXT": 1}),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        python_client(port)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = by_endpoint(fr, trace_dir)
    server = {ep: r["count"] for (role, ep), r in rows.items() if role == "server"}
    assert server == {"GET /users/:id": 7, "POST /orders/:id/items": 3, "GET /health": 2, "GET /traced/:id": 3}, rows
    for i, t in enumerate(TRACES):
        doc = fr.dump_json("requests", "--json", "--trace-id", t, trace_dir)
        assert [(q["endpoint"], q["trace"]) for q in doc["requests"]] == [
            ("GET /traced/:id", {"trace_id": t, "parent_span_id": "00f067aa0ba902b%d" % i, "sampled": True,
                                 "request_id": "rid-%d" % i})], doc["requests"]
    everything = fr.dump_run("events", trace_dir).stdout
    for secret in ("supersecret", "cookiesecret", "550e8400"):
        assert secret not in everything, secret


def slow_client(port):
    http_get(port, "/fast/a")
    http_get(port, "/slow/1")
    http_get(port, "/fast/b")


@pytest.mark.parametrize("rules,fires", [
    ("GET /slow/*=100,*=60000", True),   # the slow endpoint's own threshold
    ("GET /slow/*=0,*=100", False),      # 0: never for it, though slower than the rule for the rest
    ("GET /fast/*=100", False),          # no rule for it at all
])
def test_slow_trigger_per_endpoint(fr, trace_dir, rules, fires):
    env = {"FLIGHTREC_MODE": "window", "FLIGHTREC_WINDOW_SECONDS": 2, "FLIGHTREC_TRIGGER_AFTER_SECONDS": 1,
           "FLIGHTREC_TRIGGER_SLOW_MS": rules}
    run_http_server(fr, trace_dir, env, slow_client)
    triggers = fr.events(trace_dir, "trigger")
    if fires:
        assert triggers and {e["reason"] for e in triggers} == {"slow_request"}, triggers
        assert all(e["detail"] >= 100_000_000 for e in triggers), triggers
    else:
        assert triggers == []
    # The request was slow either way (the rules decide, not the timing).
    doc = fr.dump_json("requests", "--json", "--endpoint", "GET /slow/*", trace_dir)
    assert len(doc["requests"]) == 1 and doc["requests"][0]["duration_ns"] >= 300_000_000
