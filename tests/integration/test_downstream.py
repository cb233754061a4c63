"""Downstream calls per request (issue 45) on real programs under the
preload, nothing in them changed: a thread-per-request Python HTTP server
(tests/programs/downstream_http.py: ThreadingHTTPServer, python3-redis,
python3-psycopg2) against a redis-server and a PostgreSQL cluster the test
starts on loopback ports. Each request's calls, per peer and endpoint, must
be exactly what its handler makes, aggregated per endpoint to exact calls
per request, and the time waited on them must fit inside the request.
An event-loop server (tests/programs/downstream_node.js: node's http and a
hand-written RESP client) shows its ambiguous share: calls made while
several requests were in flight on its one thread are counted as
ambiguous, never given to one of them."""
import concurrent.futures
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from test_endpoints import free_port, start_redis, stop_redis, wait_listening
from test_viewer import Viewer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = "/usr/bin/python3"
SERVER = os.path.join(ROOT, "tests", "programs", "downstream_http.py")
NODE_SERVER = os.path.join(ROOT, "tests", "programs", "downstream_node.js")


def pg_bin(name):
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/" + name))
    assert found, "PostgreSQL is missing (%s): run `make deps`" % name
    return found[-1]


class Postgres:
    """A throwaway cluster on a loopback port, trust authentication. initdb
    refuses to run as root: as root it runs as the `postgres` user."""

    def __init__(self, env=None):
        """env: the server's environment (e.g. the preload's), else the test's."""
        self.dir = tempfile.mkdtemp(prefix="flightrec-pg-")
        self.port = free_port()
        self.proc = None
        kw = {}
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        self.kw = kw
        data = os.path.join(self.dir, "data")
        init = subprocess.run([pg_bin("initdb"), "-D", data, "--auth=trust", "-U", "postgres", "--no-sync"],
                              capture_output=True, text=True, timeout=300, cwd=self.dir, **kw)
        assert init.returncode == 0, init.stdout + init.stderr
        self.proc = subprocess.Popen(
            [pg_bin("postgres"), "-D", data, "-k", self.dir, "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
             "-c", "fsync=off", "-c", "synchronous_commit=off"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.dir, env=env, **kw)
        for _ in range(600):
            ready = subprocess.run([pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                                   capture_output=True, timeout=30)
            if ready.returncode == 0:
                return
            assert self.proc.poll() is None, self.proc.stdout.read()
            subprocess.run(["sleep", "0.1"])
        raise AssertionError("postgres did not start")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def services(fr, tmp_path):
    pg = Postgres()
    redis_proc, redis_port = None, None
    try:
        redis_proc, redis_port = start_redis(fr, tmp_path / "redis-trace", tmp_path)
        wait_listening(redis_port).close()
        yield pg.port, redis_port
    finally:
        if redis_proc is not None:
            stop_redis(redis_proc, redis_port)
        pg.stop()


def http(port, path, method="GET", body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method, data=body)
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


# What each path's handler calls (tests/programs/downstream_http.py): {(peer kind, endpoint): calls}.
PER_REQUEST = {
    "GET /elections": {("pg", "Startup"): 1, ("pg", "Query SELECT"): 15, ("redis", "INCRBY"): 1},
    "GET /users/:id": {("pg", "Startup"): 1, ("pg", "Query SELECT"): 1, ("redis", "GET"): 1, ("redis", "SET"): 1},
    "POST /votes": {("pg", "Startup"): 1, ("pg", "Query INSERT"): 1, ("redis", "INCRBY"): 2},
    "GET /health": {},
}
SENT = {"GET /elections": 4, "GET /users/:id": 5, "POST /votes": 3, "GET /health": 2}


@pytest.mark.slow
def test_thread_per_request_server_downstream_calls_exact(fr, trace_dir, services):
    pg_port, redis_port = services
    peers = {"pg": "127.0.0.1:%d" % pg_port, "redis": "127.0.0.1:%d" % redis_port}
    proc = subprocess.Popen([PYTHON, SERVER, str(redis_port), str(pg_port)],
                            env=fr.env(trace_dir, {"FLIGHTREC_RING_BYTES": "8M"}), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        calls = []
        for i in range(5):
            calls.append(("/users/%d" % (100 + i), "GET", None, b"user %d" % (2 * (100 + i))))
            if i < 4:
                calls.append(("/elections", "GET", None, b"elections 120"))
            if i < 3:
                calls.append(("/votes", "POST", b"v" * (i + 1), b"voted"))
            if i < 2:
                calls.append(("/health", "GET", None, b"ok"))
        # Four clients at once: however the requests overlap in time, each
        # runs on its own thread, and so do its calls.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda c: http(port, c[0], c[1], c[2]), calls))
        assert got == [c[3] for c in calls]
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    want = {ep: {(peers[k], e): n for (k, e), n in calls.items()} for ep, calls in PER_REQUEST.items()}

    # Per endpoint: exact calls, and calls per request.
    rep = fr.dump_json("requests", "--tree", "--json", trace_dir)
    rows = {r["endpoint"]: r for r in rep["endpoints"]}
    assert {ep: r["requests"] for ep, r in rows.items()} == SENT, rows
    for ep, row in rows.items():
        got = {(c["peer"], c["endpoint"]): c["calls"] for c in row["downstream"]}
        assert got == {k: n * SENT[ep] for k, n in want[ep].items()}, (ep, row)
        for c in row["downstream"]:
            assert c["calls_per_request"] == want[ep][(c["peer"], c["endpoint"])], (ep, c)
        assert row["ambiguous_calls"] == 0
        assert 0 <= row["own_ns"] <= row["wall_ns"]
        assert sum(c["wall_ns"] for c in row["downstream"]) <= row["wall_ns"], row
    # Every client exchange is accounted for: the handlers' calls are all
    # attributed; the server's setup (Startup, CREATE TABLE on the main
    # thread, which serves no request) is on a thread that served none.
    handler_calls = sum(n * SENT[ep] for ep, calls in want.items() for n in calls.values())
    assert rep["calls"] == {"client_calls": handler_calls + 2, "attributed": handler_calls, "ambiguous": 0,
                            "outside": 0, "other_thread": 2}, rep["calls"]

    # Per request (--slowest lists them all): each one's own calls, inside its wall time.
    doc = fr.dump_json("requests", "--json", "--role", "server", "--slowest", "100", trace_dir)
    assert len(doc["slowest"]) == sum(SENT.values())
    for i in doc["slowest"]:
        r = doc["requests"][i]
        ds = r["downstream"]
        got = {(c["peer"], c["endpoint"]): c["calls"] for c in ds["calls"]}
        assert got == want[r["endpoint"]], r
        assert ds["wall_ns"] == r["duration_ns"]
        assert sum(c["wall_ns"] for c in ds["calls"]) <= r["duration_ns"], r
        assert ds["waited_ns"] + ds["own_ns"] == r["duration_ns"] and ds["own_ns"] >= 0
        assert ds["ambiguous_calls"] == 0
        # Each call, one by one: inside the request, with bytes both ways.
        assert len(ds["each"]) == sum(want[r["endpoint"]].values()) and not ds["each_truncated"]
        for c in ds["each"]:
            assert r["start_ns"] <= c["start_ns"] <= c["start_ns"] + c["wall_ns"] <= r["start_ns"] + r["duration_ns"]
            assert c["bytes_in"] > 0 and c["bytes_out"] > 0

    # The text layout: reqray's columns, the N+1 stands out as calls per request.
    text = fr.dump_run("requests", "--tree", trace_dir).stdout
    assert "[# calls]      wall ms |     own ms | name" in text
    assert "15.0 × Query SELECT per GET /elections" in text, text
    assert "[     60]" in text, text
    # --endpoint narrows the tree to the matching requests.
    one = fr.dump_json("requests", "--tree", "--json", "--endpoint", "POST /*", trace_dir)
    assert [r["endpoint"] for r in one["endpoints"]] == ["POST /votes"]
    slow = fr.dump_run("requests", "--role", "server", "--slowest", "20", trace_dir).stdout
    assert slow.count("downstream calls (own = wall minus the time waiting on them):") == sum(SENT.values()) - 2
    # The viewer's requests page shows the same tree under each slow request
    # (its 10 slowest: at most the two /health requests have none).
    v = Viewer(fr, [trace_dir])
    try:
        status, _, body = v.get("requests", role="server")
    finally:
        v.stop()
    assert status == 200
    assert body.count('<pre class="downstream">') >= 8, body
    assert "Query SELECT → %s" % peers["pg"] in body


@pytest.fixture
def redis_only(fr, tmp_path):
    redis_proc, redis_port = start_redis(fr, tmp_path / "redis-trace", tmp_path)
    try:
        wait_listening(redis_port).close()
        yield redis_port
    finally:
        stop_redis(redis_proc, redis_port)


@pytest.mark.slow
def test_event_loop_server_ambiguous_share(fr, trace_dir, redis_only):
    node = shutil.which("node") or shutil.which("nodejs")
    assert node, "node is missing: run `make deps`"
    batch, items = 4, 6
    proc = subprocess.Popen([node, NODE_SERVER, str(redis_only), str(batch)], env=fr.env(trace_dir),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        # One at a time: only one request in flight on the loop, each call is exactly its request's.
        for i in range(items):
            assert http(port, "/item/%d" % i) == b"item %d" % (i + 1)
        # A batch in flight together: the server makes its calls only once all
        # of them have arrived, so every call overlaps `batch` requests.
        with concurrent.futures.ThreadPoolExecutor(batch) as pool:
            got = list(pool.map(lambda i: http(port, "/batch/%d" % i), range(batch)))
        assert got == [b"batched"] * batch
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rep = fr.dump_json("requests", "--tree", "--json", trace_dir)
    rows = {r["endpoint"]: r for r in rep["endpoints"]}
    peer = "127.0.0.1:%d" % redis_only
    assert {ep: r["requests"] for ep, r in rows.items()} == {"GET /item/:id": items, "GET /batch/:id": batch}
    item = rows["GET /item/:id"]
    assert {(c["peer"], c["endpoint"]): c["calls"] for c in item["downstream"]} == {
        (peer, "GET"): items, (peer, "INCR"): items}, item
    assert item["ambiguous_calls"] == 0
    # The batch's calls are never given to one of its requests: all ambiguous.
    b = rows["GET /batch/:id"]
    assert b["downstream"] == [] and b["ambiguous_calls"] == batch and b["ambiguous_requests"] == batch, b
    # PING before listening: outside any request.
    assert rep["calls"] == {"client_calls": 2 * items + batch + 1, "attributed": 2 * items, "ambiguous": batch,
                            "outside": 1, "other_thread": 0}, rep["calls"]
    doc = fr.dump_json("requests", "--json", "--role", "server", "--slowest", "100", trace_dir)
    for i in doc["slowest"]:
        r = doc["requests"][i]
        ds = r["downstream"]
        if r["endpoint"] == "GET /batch/:id":
            assert ds["calls"] == [] and ds["ambiguous_calls"] == batch and ds["own_ns"] == r["duration_ns"]
        else:
            assert {c["endpoint"]: c["calls"] for c in ds["calls"]} == {"GET": 1, "INCR": 1}
            assert ds["ambiguous_calls"] == 0 and sum(c["wall_ns"] for c in ds["calls"]) <= r["duration_ns"]
    text = fr.dump_run("requests", "--tree", trace_dir).stdout
    assert "%d ambiguous calls overlapped %d of these requests" % (batch, batch) in text, text


# ------------------------------------------------------------------ the rules, on a trace built by hand

def rules_segment(pid=77):
    """One process, by hand from format/SPEC.md: server requests and client
    exchanges on three threads, each placed to hit one rule of downstream.py."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "fuzz"))
    import hostile_segments as hs
    strings = ["server", "client", "ipv4", "stream", "127.0.0.1:80", "10.0.0.9:1", "127.0.0.1:5432",
               "127.0.0.1:6379", "GET /a", "GET /b", "GET /c", "GET /d", "Query SELECT", "GET", "SET"]
    sid = {s: i + 1 for i, s in enumerate(strings)}
    open_type = (1, "socket.open", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("fd", hs.UINT, ""),
                                    ("conn", hs.UINT, ""), ("role", hs.STRING, ""), ("family", hs.STRING, ""),
                                    ("sock_type", hs.STRING, ""), ("local", hs.STRING, ""),
                                    ("peer", hs.STRING, ""), ("listener", hs.UINT, "")])
    ex_type = (2, "socket.exchange", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("fd", hs.UINT, ""),
                                      ("conn", hs.UINT, ""), ("flags", hs.UINT, ""), ("bytes_in", hs.UINT, "bytes"),
                                      ("bytes_out", hs.UINT, "bytes"), ("end", hs.TIME, "ns"),
                                      ("endpoint", hs.STRING, "")])
    t0 = 1_000_000_000
    # conn: (role, peer)
    conns = {1: ("server", "10.0.0.9:1"), 2: ("server", "10.0.0.9:1"), 3: ("server", "10.0.0.9:1"),
             4: ("server", "10.0.0.9:1"), 10: ("client", "127.0.0.1:5432"), 11: ("client", "127.0.0.1:6379"),
             12: ("client", "127.0.0.1:5432"), 13: ("client", "127.0.0.1:6379"), 14: ("client", "127.0.0.1:5432")}
    # (start, end, tid, conn, endpoint), times after t0
    exchanges = [
        (100, 200, 7, 14, "Query SELECT"),     # a thread that serves no request: other_thread
        (1000, 5000, 5, 1, "GET /a"),          # A
        (1200, 1800, 5, 10, "Query SELECT"),   # A's
        (1500, 2500, 5, 11, "GET"),            # A's too, overlapping the first: waited 1300, not 1600
        (5100, 5200, 5, 10, "Query SELECT"),   # between requests: outside
        (5500, 6500, 5, 12, "Query SELECT"),   # begun before B arrived: outside
        (6000, 9000, 5, 2, "GET /b"),          # B
        (10000, 20000, 6, 3, "GET /c"),        # C
        (10100, 11000, 6, 13, "SET"),          # C's: D not yet in flight
        (12000, 18000, 6, 4, "GET /d"),        # D, C still in flight
        (13000, 14000, 6, 13, "SET"),          # C and D in flight: ambiguous
    ]
    opens = sorted(conns)
    seg = hs.header(pid=pid) + hs.block(hs.SCHEMA, hs.schema([open_type, ex_type]))
    seg += hs.block(hs.STRINGS, hs.table(1, [hs.text(s) for s in strings]))
    seg += hs.block(hs.EVENTS, hs.events(1, len(opens), [
        hs.plain([t0] * len(opens)), hs.plain([5] * len(opens)), hs.plain(opens), hs.plain(opens),
        hs.plain([sid[conns[c][0]] for c in opens]), hs.plain([sid["ipv4"]] * len(opens)),
        hs.plain([sid["stream"]] * len(opens)), hs.plain([sid["127.0.0.1:80"]] * len(opens)),
        hs.plain([sid[conns[c][1]] for c in opens]), hs.plain([0] * len(opens))]))
    n = len(exchanges)
    seg += hs.block(hs.EVENTS, hs.events(2, n, [
        hs.plain([t0 + e[0] for e in exchanges]), hs.plain([e[2] for e in exchanges]),
        hs.plain([e[3] for e in exchanges]), hs.plain([e[3] for e in exchanges]), hs.plain([0] * n),
        hs.plain([10 if conns[e[3]][0] == "server" else 20 for e in exchanges]),
        hs.plain([20 if conns[e[3]][0] == "server" else 10 for e in exchanges]),
        hs.plain([t0 + e[1] for e in exchanges]), hs.plain([sid[e[4]] for e in exchanges])]))
    return seg


def test_attribution_rules_exact(fr, tmp_path):
    (tmp_path / "svc-77-0000.seg").write_bytes(rules_segment())
    rep = fr.dump_json("requests", "--tree", "--json", tmp_path)
    assert rep["calls"] == {"client_calls": 7, "attributed": 3, "ambiguous": 1, "outside": 2, "other_thread": 1}
    rows = {r["endpoint"]: r for r in rep["endpoints"]}
    a = rows["GET /a"]
    assert (a["requests"], a["wall_ns"], a["own_ns"]) == (1, 4000, 2700), a
    assert [(c["peer"], c["endpoint"], c["calls"], c["wall_ns"]) for c in a["downstream"]] == [
        ("127.0.0.1:5432", "Query SELECT", 1, 600), ("127.0.0.1:6379", "GET", 1, 1000)]
    assert (rows["GET /b"]["own_ns"], rows["GET /b"]["downstream"]) == (3000, [])
    c, d = rows["GET /c"], rows["GET /d"]
    assert (c["own_ns"], c["ambiguous_calls"], c["ambiguous_requests"]) == (9100, 1, 1), c
    assert [(x["endpoint"], x["calls"]) for x in c["downstream"]] == [("SET", 1)]
    assert (d["own_ns"], d["downstream"], d["ambiguous_calls"]) == (6000, [], 1), d
    doc = fr.dump_json("requests", "--json", "--role", "server", "--slowest", "10", tmp_path)
    per = {doc["requests"][i]["endpoint"]: doc["requests"][i]["downstream"] for i in doc["slowest"]}
    assert per["GET /a"]["waited_ns"] == 1300 and per["GET /a"]["own_ns"] == 2700
    assert per["GET /c"]["ambiguous_calls"] == 1 and per["GET /d"]["ambiguous_calls"] == 1
    assert per["GET /b"] == {"wall_ns": 3000, "own_ns": 3000, "waited_ns": 0, "calls": [], "ambiguous_calls": 0,
                             "each": [], "each_truncated": False}
    t0 = 1_000_000_000
    assert per["GET /a"]["each"] == [
        {"start_ns": t0 + 1200, "wall_ns": 600, "peer": "127.0.0.1:5432", "endpoint": "Query SELECT",
         "bytes_in": 20, "bytes_out": 10},
        {"start_ns": t0 + 1500, "wall_ns": 1000, "peer": "127.0.0.1:6379", "endpoint": "GET", "bytes_in": 20,
         "bytes_out": 10}]
    assert a["downstream"][0]["bytes_in"] == 20 and a["downstream"][0]["bytes_out"] == 10
    only = fr.dump_json("requests", "--tree", "--json", "--endpoint", "GET /d", tmp_path)
    assert [r["endpoint"] for r in only["endpoints"]] == ["GET /d"] and only["endpoints"][0]["ambiguous_calls"] == 1
