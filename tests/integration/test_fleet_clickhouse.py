"""The fleet in ClickHouse (issue 42): real programs recorded under the
preload (several processes and services, one with a hostile service name)
are loaded with `flightrec-dump load --clickhouse`, and every profile report
(top, tree, folded, flame, pprof, diff; each kind, with --thread, --from/--to,
--service, --pid, --endpoint), heap, sockets, requests (with --slowest,
--json, --by endpoint, --tree, --diff), info (crashes, killed processes,
incidents) and --incident N print exactly what they print from the files. Loading is
idempotent (a second run loads nothing; the rows of a load killed before its
ledger row are never read, and loading again adds no duplicates), skips
.active files, reports a bad segment and loads the rest; a server that is
down gives one line (no password) and exit status 4. With --cluster the
tables spread over two servers through Distributed tables and the reports
still equal the files'.

Each test starts its own clickhouse-server processes on loopback ports
(tests/integration/clickhouse_server.py), never a system one."""
import gzip
import os
import re
import shutil
import subprocess
import time

import pytest

import clickhouse_server

pytestmark = pytest.mark.skipif(not clickhouse_server.available(),
                                reason="needs clickhouse-server and python3-clickhouse-driver (make deps)")

PYTHON = "/usr/bin/python3"
HOSTILE = "x'); DROP TABLE samples; --"
PASSWORD = "s3cret-pw"


def dump(fr, *args, timeout=600):
    return subprocess.run([PYTHON, fr.dump] + [str(a) for a in args], capture_output=True, timeout=timeout)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    from conftest import Flightrec
    fr = Flightrec()
    out = tmp_path_factory.mktemp("fleet-ch")
    d = out / "trace"
    d.mkdir()
    fr.run([fr.program("cpu_split"), "0.4"], d, env={"FLIGHTREC_SERVICE": "api"})
    fr.run([fr.program("cpu_split"), "0.3"], d, env={"FLIGHTREC_SERVICE": "api"})
    fr.run([fr.program("alloc_known")], d, env={"FLIGHTREC_SERVICE": HOSTILE})
    fr.run([fr.program("offcpu_mix")], d, env={"FLIGHTREC_SERVICE": "batch"})
    segs = fr.segments(d)
    assert len(segs) >= 4 and not any(s.endswith(".active") for s in segs)
    return fr, d


# One process serving HTTP to itself (a server thread, the main thread its
# client): named endpoints, W3C trace context on every other request, CPU
# work inside the /work/ requests, each of which also calls /users/0 on the
# same server from its handling thread (a downstream call for --tree) and
# leaks a 4 MiB block (malloc: live at the end, allocated inside the request).
HTTP_PAIR = r"""
import ctypes, http.server, socket, threading, time
LIBC = ctypes.CDLL(None)
LIBC.malloc.restype = ctypes.c_void_p
def get(conn, path, hdr=""):
    conn.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path, hdr)).encode())
    data = b""
    while not data.endswith(b"ok" * 50):
        data += conn.recv(4096)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/work/"):
            end = time.process_time() + 0.05
            while time.process_time() < end:
                pass
            with socket.create_connection(self.server.server_address) as d:
                get(d, "/users/0")
            LIBC.malloc(4 << 20)
        body = b"ok" * 50
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=s.serve_forever, daemon=True).start()
c = socket.create_connection(("127.0.0.1", s.server_address[1]))
for i in range(12):
    path = "/work/%d" % i if i % 3 == 0 else "/users/%d" % i
    hdr = "traceparent: 00-%032x-%016x-01\r\nx-request-id: req-%d\r\n" % (0xabc000 + i, 0x1234 + i, i) if i % 2 else ""
    get(c, path, hdr)
c.close()
s.shutdown()
"""


@pytest.fixture(scope="module")
def socket_fleet(tmp_path_factory):
    """Socket traces (an HTTP server and client in one process with endpoint
    names and trace context; sock_exchanges' echo) loaded into one server
    that the socket, request and info tests share."""
    from conftest import Flightrec
    fr = Flightrec()
    d = tmp_path_factory.mktemp("fleet-sockets") / "trace"
    d.mkdir()
    fr.run([PYTHON, "-c", HTTP_PAIR], d, env={"FLIGHTREC_SERVICE": "web", "FLIGHTREC_TRACE_CONTEXT": "1"})
    fr.run([fr.program("sock_exchanges"), "echo", "5", "100", "300"], d, env={"FLIGHTREC_SERVICE": "echo"})
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0, database="fleet")
        load = dump(fr, "load", "--clickhouse", url, d)
        assert load.returncode == 0, load.stderr
        yield fr, d, url, servers


def _info(fr, d):
    import json
    return json.loads(dump(fr, "info", "--json", d).stdout)


def _pids(fr, d):
    return sorted({s["pid"] for s in _info(fr, d)["segments"]})


def _iso(ns):
    import datetime
    dt = datetime.datetime.fromtimestamp(ns // 10 ** 9, tz=datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + ".%09dZ" % (ns % 10 ** 9)


REPORTS = [
    ["top"], ["top", "--json"], ["top", "--kind", "offcpu"], ["top", "--kind", "alloc"], ["top", "--kind", "live"],
    ["tree"], ["tree", "--kind", "alloc"], ["folded"], ["folded", "--kind", "offcpu"], ["folded", "--kind", "live"],
    ["folded", "--thread", "cpu-worker"], ["top", "--from", "0.2s", "--to=-0.1s"],
    ["top", "--service", HOSTILE, "--kind", "alloc"], ["folded", "--service", "api"], ["top", "--service", "nope"],
    ["top", "--full-names", "--kind", "alloc"],
    ["diff", "--a-to", "0.5s", "--b-from", "0.5s"], ["diff", "--tree", "--a-to", "0.5s", "--b-from", "0.5s"],
    # the live heap: sites, live at the end, the peak (alloc_known leaks, frees, reallocs)
    ["heap"], ["heap", "--json"], ["heap", "--sort", "live", "--service", HOSTILE], ["heap", "--service", "batch"],
]


_NUMBER = re.compile(rb"\d[\d,]*(?:\.\d+)?")


def _close(a, b):
    """a == b, but for numbers within one unit of their last shown digit (or
    1e-9 relative): estimated bytes (alloc, live) are float sums, which the
    database adds in another order than the file reader."""
    if _NUMBER.sub(b"#", a) != _NUMBER.sub(b"#", b):
        return False
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b)):
        if x == y:
            continue
        fx, fy = float(x.replace(b",", b"")), float(y.replace(b",", b""))
        unit = 10.0 ** -len(x.split(b".")[1]) if b"." in x else 1.0
        if abs(fx - fy) > max(unit, 1e-9 * abs(fx)) * 1.0000001:
            return False
    return True


def _same(fr, d, url, args, tmp_path, cluster=None):
    extra = ["--cluster", cluster] if cluster else []
    a = dump(fr, *args, d)
    b = dump(fr, *args, "--clickhouse", url, *extra)
    out_a, out_b = a.stdout, b.stdout
    if args[0] == "diff":  # the header names the source: the directory, or the URL
        out_a = out_a.replace(str(d).encode(), b"SRC")
        out_b = out_b.replace(re.sub(r"//[^@/]*@", "//***@", url).encode(), b"SRC")
    if "alloc" in args or "live" in args or args[0] == "heap":
        assert a.returncode == b.returncode and _close(out_a, out_b), (args, out_a, out_b, a.stderr, b.stderr)
    else:
        assert (a.returncode, out_a) == (b.returncode, out_b), (args, a.stderr, b.stderr)
    assert a.returncode in (0, 1) or args[-1] == "nope", (args, a.stderr)


def _same_files(fr, d, url, tmp_path, cluster=None):
    extra = ["--cluster", cluster] if cluster else []
    for cmd, args in (("flame", ["-o"]), ("pprof", ["-o"]), ("flame", ["--kind", "alloc", "-o"]),
                      ("pprof", ["--kind", "live", "-o"])):
        fa, fb = tmp_path / ("a-" + cmd), tmp_path / ("b-" + cmd)
        a = dump(fr, cmd, *args, fa, d)
        b = dump(fr, cmd, *args, fb, "--clickhouse", url, *extra)
        assert a.returncode == b.returncode == 0, (cmd, a.stderr, b.stderr)
        ba, bb = fa.read_bytes(), fb.read_bytes()
        if cmd == "pprof":  # gzip: compare the profiles, not the compressed bytes
            ba, bb = gzip.decompress(ba), gzip.decompress(bb)
        if cmd == "flame":
            # Estimated bytes are float sums; the database adds them in another
            # order, so the last bits of the SVG's decimal totals may differ.
            ba, bb = (re.sub(rb"\d+\.\d+", lambda m: b"%.9g" % float(m.group()), x) for x in (ba, bb))
        at = next((i for i, (x, y) in enumerate(zip(ba, bb)) if x != y), min(len(ba), len(bb)))
        assert ba == bb, (cmd, args, ba[at - 200:at + 200], bb[at - 200:at + 200])


@pytest.mark.slow  # ~40 report runs (100 s on a busy machine); the faster tests below compare a few reports each
def test_reports_from_clickhouse_equal_the_files(traces, tmp_path):
    fr, d = traces
    with clickhouse_server.ClickHouseServers(1, password=PASSWORD) as servers:
        url = servers.url(0, database="fleet")
        load = dump(fr, "load", "--clickhouse", url, d)
        assert load.returncode == 0, load.stderr
        assert PASSWORD.encode() not in load.stdout + load.stderr
        c = servers.client(0)
        nseg = len(fr.segments(d))
        assert c.execute("SELECT count() FROM fleet.segments")[0][0] == nseg
        # The hostile name is a string like any other, and samples survived it.
        assert c.execute("SELECT count() FROM fleet.samples WHERE service = %(s)s", {"s": HOSTILE})[0][0] > 0
        for args in REPORTS:
            _same(fr, d, url, args, tmp_path)
        pids = _pids(fr, d)
        _same(fr, d, url, ["folded", "--pid", pids[1]], tmp_path)
        # Absolute times: ISO 8601 bounds, and --since (a window ending now that takes it all).
        first = _info(fr, d)["time_range"]["first_wall_ns"]
        _same(fr, d, url, ["top", "--from", _iso(first + 300 * 10 ** 6), "--to", _iso(first + 900 * 10 ** 6)], tmp_path)
        _same(fr, d, url, ["folded", "--kind", "alloc", "--since", "3650d"], tmp_path)
        _same_files(fr, d, url, tmp_path)

        # Idempotent: nothing is loaded twice.
        before = c.execute("SELECT count() FROM fleet.samples")[0][0]
        again = dump(fr, "load", "--clickhouse", url, d)
        assert again.returncode == 0 and b"loaded 0 segments" in again.stdout, again.stdout
        assert c.execute("SELECT count() FROM fleet.samples")[0][0] == before


def test_interrupted_load_leaves_no_duplicates(traces, tmp_path):
    """Rows written without their ledger row (a load killed before it ended)
    are never read; loading again gives the same reports as the files."""
    fr, d = traces
    import sys
    sys.path.insert(0, os.path.join(fr.root, "scripts"))
    from flightrec_lib import fleet_db, fleet_load
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0)
        target = fleet_db.Target(url)
        conn = fleet_db.Connection(target)
        fleet_db.create_schema(conn)
        loader = fleet_load.Loader(conn)
        for p in fr.segments(d):
            loader.load(p, fleet_load.segment_key(p))
        loader.pending_ledger = []  # killed after the data, before the ledger
        loader.flush()
        conn.close()
        c = servers.client(0)
        orphans = c.execute("SELECT count() FROM samples")[0][0]
        assert orphans > 0 and c.execute("SELECT count() FROM segments")[0][0] == 0
        load = dump(fr, "load", "--clickhouse", url, d)
        assert load.returncode == 0, load.stderr
        assert c.execute("SELECT count() FROM samples")[0][0] == 2 * orphans  # loaded again, under new ids
        for args in (["top"], ["folded", "--kind", "alloc"], ["top", "--kind", "live"]):
            _same(fr, d, url, args, tmp_path)


def test_load_skips_active_and_bad_segments(traces, tmp_path):
    fr, d = traces
    mixed = tmp_path / "mixed"
    shutil.copytree(d, mixed)
    good = fr.segments(mixed)
    (mixed / "20261204T000000.000Z-bad-1-0000.seg").write_bytes(b"FLTRECSG" + b"\xff" * 200)
    shutil.copy(good[0], mixed / "20261204T000000.000Z-live-2-0000.active")
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0)
        load = dump(fr, "load", "--clickhouse", url, mixed)
        assert load.returncode == 1, (load.stdout, load.stderr)
        err = load.stderr.decode()
        assert "-bad-1-0000.seg" in err and len(err.strip().splitlines()) == 1, err
        assert b"1 active skipped" in load.stdout and b"1 unreadable" in load.stdout, load.stdout
        assert servers.client(0).execute("SELECT count() FROM segments")[0][0] == len(good)
        _same(fr, d, url, ["top"], tmp_path)


def test_workers_and_shards_split_the_load(traces, tmp_path):
    fr, d = traces
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0)
        empty = dump(fr, "top", "--clickhouse", servers.url(0, database="empty"))
        assert empty.returncode == 4 and b"load segments first" in empty.stderr, empty.stderr
        for i in range(3):
            r = dump(fr, "load", "--clickhouse", url, "--shard", "%d/3" % i, "--workers", "2", d)
            assert r.returncode == 0, r.stderr
        c = servers.client(0)
        assert c.execute("SELECT count(), uniqExact(seg_name) FROM segments")[0] == (len(fr.segments(d)),) * 2
        _same(fr, d, url, ["folded", "--kind", "alloc"], tmp_path)


def test_server_down_is_one_line_without_credentials(traces):
    fr, d = traces
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens once closed
    url = "clickhouse://admin:%s@127.0.0.1:%d/fleet" % (PASSWORD, port)
    for args in (["load", "--clickhouse", url, d], ["top", "--clickhouse", url]):
        r = dump(fr, *args, timeout=120)
        assert r.returncode == 4, (args, r.stdout, r.stderr)
        err = r.stderr.decode()
        assert len(err.strip().splitlines()) == 1 and "unreachable" in err, err
        assert PASSWORD not in err and "Traceback" not in err
    bad = dump(fr, "top", "--clickhouse", "clickhouse://127.0.0.1:1/no-such;db")
    assert bad.returncode == 2 and b"bad database name" in bad.stderr


# The socket, request, heap and endpoint reports the cluster test compares (a
# subset of SOCKET_REPORTS: each kind of query once).
CLUSTER_SOCKET_REPORTS = [
    ["sockets"], ["requests", "--slowest", "12"], ["requests", "--json"], ["requests", "--by", "endpoint"],
    ["requests", "--tree"], ["requests", "--diff"], ["heap"], ["top", "--endpoint", "GET /work/*"],
    ["folded", "--kind", "live", "--endpoint", "GET /*"],
]


@pytest.mark.slow
def test_cluster_of_two_shards_equals_files(traces, socket_fleet, tmp_path):
    fr, d = traces
    sd = socket_fleet[1]
    with clickhouse_server.ClickHouseServers(2, cluster="fleet2") as servers:
        # Sockets, requests, heap: their tables spread too, and the reports still equal the files'.
        sock = servers.url(1, database="sock")
        load = dump(fr, "load", "--clickhouse", sock, "--cluster", "fleet2", sd)
        assert load.returncode == 0, load.stderr
        local = [servers.client(i).execute("SELECT count() FROM sock.requests_local")[0][0] for i in range(2)]
        assert all(n > 0 for n in local), local
        for args in CLUSTER_SOCKET_REPORTS:
            _same(fr, sd, sock, args, tmp_path, cluster="fleet2")

        url = servers.url(0, database="fleet")
        load = dump(fr, "load", "--clickhouse", url, "--cluster", "fleet2", d)
        assert load.returncode == 0, load.stderr
        # Rows really spread: each shard's local table holds some, together all of them.
        local = [servers.client(i).execute("SELECT count() FROM fleet.samples_local")[0][0] for i in range(2)]
        assert all(n > 0 for n in local), local
        assert sum(local) == servers.client(0).execute("SELECT count() FROM fleet.samples")[0][0]
        for args in REPORTS:
            _same(fr, d, url, args, tmp_path, cluster="fleet2")
        _same_files(fr, d, url, tmp_path, cluster="fleet2")


def _copies(d, dst, n):
    """dst holding n copies of d's segments under new names (each a segment of its own)."""
    dst.mkdir()
    for i in range(n):
        for p in sorted(os.listdir(d)):
            if p.endswith(".seg"):  # not the disk budget's .flightrec-budget
                shutil.copy(d / p, dst / ("c%02d-%s" % (i, p)))
    return dst


def test_load_interrupted_by_a_server_restart_resumes(traces, tmp_path):
    """The server stops while a load runs (whenever that falls: the outcome
    must not depend on it); the load fails with one line, and once the server
    is back the same command loads the rest: every segment once, reports equal
    the files'."""
    fr, d = traces
    many = _copies(d, tmp_path / "many", 8)
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0)
        fleet = subprocess.Popen([PYTHON, fr.dump, "load", "--clickhouse", url, many],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        c = servers.client(0)
        deadline = time.monotonic() + 300
        while fleet.poll() is None and time.monotonic() < deadline:
            try:
                if c.execute("SELECT count() FROM segments")[0][0] > 0:
                    break
            except Exception:  # tables not created yet
                pass
            time.sleep(0.05)
        servers.stop(0)
        out, err = fleet.communicate(timeout=300)
        if fleet.returncode != 0:  # it was cut short: one line, no traceback
            assert fleet.returncode == 4 and len(err.strip().splitlines()) == 1, err
        servers.restart(0)
        again = dump(fr, "load", "--clickhouse", url, many)
        assert again.returncode == 0, again.stderr
        c = servers.client(0)
        n = len(os.listdir(many))
        assert c.execute("SELECT count(), uniqExact(seg_name) FROM segments")[0] == (n, n)
        for args in (["top"], ["folded", "--kind", "alloc"], ["top", "--kind", "live"]):
            _same(fr, many, url, args, tmp_path)


def test_watch_loads_segments_as_they_appear(traces, tmp_path):
    fr, d = traces
    watched = tmp_path / "watched"
    watched.mkdir()
    segs = [os.path.basename(p) for p in fr.segments(d)]
    shutil.copy(d / segs[0], watched / segs[0])
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0)
        watcher = subprocess.Popen([PYTHON, fr.dump, "load", "--clickhouse", url, "--watch", "0.2", watched],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            c = servers.client(0)

            def loaded():
                try:
                    return c.execute("SELECT count() FROM segments")[0][0]
                except Exception:
                    return 0
            deadline = time.monotonic() + 300
            while loaded() < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert loaded() == 1
            for s in segs[1:]:
                shutil.copy(d / s, watched / (s + ".tmp"))
                os.rename(watched / (s + ".tmp"), watched / s)
            while loaded() < len(segs) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert loaded() == len(segs)
        finally:
            watcher.terminate()
            watcher.wait(60)
        _same(fr, d, url, ["top", "--kind", "alloc"], tmp_path)


def test_exchange_endpoints_and_trace_ids_are_loaded(socket_fleet):
    """Rows carry what the recorder wrote on socket.exchange: the endpoint
    and trace id on the exchange's event, the request table's, and the
    server request a CPU sample fell in."""
    fr, d, url, servers = socket_fleet
    c = servers.client(0)
    eps = dict(c.execute("SELECT endpoint, count() FROM fleet.events WHERE type = 'socket.exchange' AND service = 'web'"
                         " AND endpoint != '' GROUP BY endpoint"))
    assert set(eps) == {"GET /users/:id", "GET /work/:id"}, eps
    traced = c.execute("SELECT DISTINCT trace_id FROM fleet.events WHERE type = 'socket.exchange' AND trace_id != ''")
    # every other request sent a traceparent (1, 3, 5, 7, 9, 11): both ends see it
    assert {t for (t,) in traced} == {"%032x" % (0xabc000 + i) for i in range(1, 12, 2)}, traced
    reqs = c.execute("SELECT role, endpoint, trace_id, request_id FROM fleet.requests WHERE service = 'web'"
                     " AND request_id = 'req-3'")
    assert sorted(reqs) == [(r, "GET /work/:id", "%032x" % 0xabc003, "req-3") for r in ("client", "server")], reqs
    # The CPU work of /work/ requests ran on the server thread inside them.
    n = c.execute("SELECT count() FROM fleet.samples WHERE kind = 1 AND endpoint = 'GET /work/:id' AND request_id != 0"
                  " AND request_id IN (SELECT req_id FROM fleet.requests WHERE role = 'server')")[0][0]
    assert n > 0


def test_downstream_calls_are_rows_joined_to_their_request(socket_fleet):
    """Issue 45 in the fleet tables: each client exchange's row says what
    downstream.py's rule made of it and, when attributed, the req_id of its
    server request; joined in SQL, the counts per (server endpoint, call
    endpoint) and per outcome are `requests --tree --json`'s from the files."""
    import json
    fr, d, url, servers = socket_fleet
    c = servers.client(0)
    tree = json.loads(dump(fr, "requests", "--tree", "--json", "--service", "web", d).stdout)
    want = {(e["endpoint"], call["endpoint"]): call["calls"] for e in tree["endpoints"] for call in e["downstream"]}
    assert want == {("GET /work/:id", "GET /users/:id"): 4}, want  # /work/0, 3, 6, 9 each call /users/0 once
    got = dict(((s, e), n) for s, e, n in c.execute(
        "SELECT s_endpoint, endpoint, count() FROM fleet.requests ANY INNER JOIN "
        "(SELECT req_id AS parent_req_id, endpoint AS s_endpoint FROM fleet.requests WHERE role = 'server') "
        "USING parent_req_id WHERE role = 'client' AND downstream = 'attributed' AND service = 'web' "
        "GROUP BY s_endpoint, endpoint"))
    assert got == want, got
    # Each attributed call lies inside its request, on its thread.
    bad = c.execute("SELECT count() FROM fleet.requests ANY INNER JOIN "
                    "(SELECT req_id AS parent_req_id, start_mono AS s_start, duration AS s_dur, tid AS s_tid "
                    "FROM fleet.requests WHERE role = 'server') USING parent_req_id "
                    "WHERE role = 'client' AND parent_req_id != 0 AND "
                    "(tid != s_tid OR start_mono < s_start OR start_mono + duration > s_start + s_dur)")[0][0]
    assert bad == 0
    outcomes = dict(c.execute("SELECT downstream, count() FROM fleet.requests WHERE role = 'client' "
                              "AND service = 'web' GROUP BY downstream"))
    assert outcomes.get("attributed", 0) == tree["calls"]["attributed"] == 4, (outcomes, tree["calls"])
    assert sum(outcomes.values()) == tree["calls"]["client_calls"], (outcomes, tree["calls"])
    assert c.execute("SELECT count() FROM fleet.requests WHERE role = 'server' AND "
                     "(downstream != '' OR parent_req_id != 0)")[0][0] == 0


SOCKET_REPORTS = [
    ["sockets"], ["sockets", "--role", "server"], ["sockets", "--service", "echo"],
    ["requests"], ["requests", "--slowest", "12"], ["requests", "--role", "server", "--slowest", "3"],
    ["requests", "--role", "client", "--slowest", "0"], ["requests", "--endpoint", "GET /work/*"],
    ["requests", "--trace-id", "0000000000000000000000000000abc00"], ["requests", "--trace-id", "REQ-7"],
    ["requests", "--trace-id", "nope"], ["requests", "--service", "echo"],
    ["heap"], ["heap", "--json", "--service", "web"],
    # every request listed (--json), per endpoint (--by), downstream calls (--tree), slow against typical (--diff)
    ["requests", "--json"], ["requests", "--json", "--role", "server", "--endpoint", "GET /work/*"],
    ["requests", "--json", "--trace-id", "req-3"],
    ["requests", "--by", "endpoint"], ["requests", "--by", "endpoint", "--json", "--role", "server"],
    ["requests", "--by", "endpoint", "--endpoint", "GET /users/*"],
    ["requests", "--tree"], ["requests", "--tree", "--json"], ["requests", "--tree", "--endpoint", "GET /work/*"],
    ["requests", "--tree", "--service", "echo"],
    ["requests", "--diff"], ["requests", "--diff", "--json", "--role", "server"], ["diff", "--requests"],
    # profiles of the samples taken inside requests of an endpoint
    ["top", "--endpoint", "GET /work/*"], ["folded", "--kind", "offcpu", "--endpoint", "GET /*"],
    ["folded", "--kind", "alloc", "--endpoint", "GET /work/*"], ["folded", "--kind", "live", "--endpoint", "GET /*"],
    ["tree", "--endpoint", "GET /users/*", "--from", "0.1s"],
]


def test_socket_and_request_reports_equal_the_files(socket_fleet, tmp_path):
    fr, d, url, _ = socket_fleet
    for args in SOCKET_REPORTS:
        _same(fr, d, url, args, tmp_path)
    # JSON: the same document (a connection's op counts may be listed in another order).
    import json
    a, b = dump(fr, "sockets", "--json", d), dump(fr, "sockets", "--json", "--clickhouse", url)
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    assert json.loads(a.stdout) == json.loads(b.stdout)
    # info: the same, but for the paths (the database keeps the file names) and
    # the disk budget (a directory's state, not the segments').
    for extra in ([], ["--service", "web"]):
        a, b = dump(fr, "info", *extra, d), dump(fr, "info", *extra, "--clickhouse", url)
        assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
        text = re.sub(rb"\ndisk budget \(.*?\n\n", b"\n", a.stdout.replace(str(d).encode() + b"/", b""), flags=re.S)
        assert text == b.stdout, (text, b.stdout)
    # The calls /work/ made to /users/0 from its handling thread are its downstream calls, both ways.
    tree = dump(fr, "requests", "--tree", "--clickhouse", url).stdout.decode()
    assert re.search(r"\[ +4\].*└─ GET /users/:id → 127\.0\.0\.1:\d+ +1\.0 × GET /users/:id per GET /work/:id",
                     tree), tree
    # --endpoint --kind live: only blocks allocated inside the requests (from
    # files too: the live replay once took every allocation, the interpreter's
    # start-up included): each live stack is one allocated in a request.
    def stacks(kind):
        r = dump(fr, "folded", "--kind", kind, "--endpoint", "GET /*", d)
        assert r.returncode == 0, r.stderr
        return {line.rsplit(b" ", 1)[0] for line in r.stdout.splitlines()}
    live = stacks("live")
    assert live and live <= stacks("alloc"), (live, stacks("alloc"))


@pytest.fixture(scope="module")
def incident_fleet(tmp_path_factory):
    """Crashes, killed processes and incidents, recorded for real: a crash in
    window mode (its window kept under an incident), a fault the program
    recovered from then an abort (continuous mode: crash triggers mark the
    trace), slow requests in window mode (triggers merged into one incident),
    a process ended by SIGPIPE; loaded into one server."""
    from conftest import Flightrec
    fr = Flightrec()
    d = tmp_path_factory.mktemp("fleet-incidents") / "trace"
    d.mkdir()
    window = {"FLIGHTREC_MODE": "window", "FLIGHTREC_WINDOW_SECONDS": 30, "FLIGHTREC_TRIGGER_AFTER_SECONDS": 2}
    crash = fr.run([fr.program("crash_test"), "segv"], d, env=dict(window, FLIGHTREC_SERVICE="crashy"), check=False)
    assert crash.returncode == -11, crash.stderr
    abort = fr.run([fr.program("crash_test"), "recovers-then-abort"], d, env={"FLIGHTREC_SERVICE": "recov"},
                   check=False)
    assert abort.returncode == -6, abort.stderr
    fr.run([fr.program("sock_echo"), "1", "2", "200000"], d,
           env=dict(window, FLIGHTREC_WINDOW_SECONDS=2, FLIGHTREC_TRIGGER_AFTER_SECONDS=5,
                    FLIGHTREC_TRIGGER_SLOW_MS=100, FLIGHTREC_SERVICE="slow"))
    piped = subprocess.Popen([fr.program("term_test"), "pipe"], env=fr.env(d, {"FLIGHTREC_SERVICE": "piped"}),
                             stdout=subprocess.PIPE)
    piped.stdout.readline()
    piped.stdout.close()  # the next write raises SIGPIPE
    assert piped.wait(timeout=60) == -13
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0, database="fleet")
        load = dump(fr, "load", "--clickhouse", url, d)
        assert load.returncode == 0, load.stderr
        yield fr, d, url, servers


def _info_json(r, d=None):
    import json
    doc = json.loads(r.stdout)
    doc.pop("disk_budget")  # a directory's state, not the segments'
    if d is not None:  # the database keeps file names
        for s in doc["segments"]:
            s["path"] = os.path.basename(s["path"])
    return doc


@pytest.mark.slow  # ~30 report runs
def test_crashes_and_incidents_equal_the_files(incident_fleet, tmp_path):
    """info lists the same crashes (whole stacks, the recovered fault),
    killed processes and incidents from ClickHouse as from the files, and
    --incident N selects the same segments for every report."""
    fr, d, url, servers = incident_fleet
    a, b = dump(fr, "info", "--json", d), dump(fr, "info", "--json", "--clickhouse", url)
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    files, fleet = _info_json(a, d), _info_json(b)
    assert files == fleet
    # What the comparison covers is really there.
    assert [c["signal"] for c in files["crashes"]].count("SIGSEGV") == 2 and \
        [c["recovered"] for c in files["crashes"]].count(True) == 1, files["crashes"]
    assert all(len(c["stack"]) >= 3 for c in files["crashes"]), files["crashes"]
    assert [k["signal"] for k in files["killed"]] == ["SIGPIPE"], files["killed"]
    reasons = [i["reasons"] for i in files["incidents"]]
    assert ["slow_request"] in reasons and ["crash"] in reasons and len(reasons) >= 3, files["incidents"]
    assert any(i["triggers"] > 1 for i in files["incidents"]), files["incidents"]
    assert "Simultaneous" not in b.stderr.decode() and not b.stderr, b.stderr
    # Text, with the filters.
    for extra in ([], ["--service", "crashy"], ["--service", "slow"]):
        a, b = dump(fr, "info", *extra, d), dump(fr, "info", *extra, "--clickhouse", url)
        assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
        text = re.sub(rb"\ndisk budget \(.*?\n\n", b"\n", a.stdout.replace(str(d).encode() + b"/", b""), flags=re.S)
        assert text == b.stdout, (text, b.stdout)
    # --incident N: every incident, in info (JSON: the segments kept) and in reports.
    for n in range(1, len(reasons) + 1):
        a = dump(fr, "info", "--json", "--incident", n, d)
        b = dump(fr, "info", "--json", "--incident", n, "--clickhouse", url)
        assert a.returncode == b.returncode == 0, (n, a.stderr, b.stderr)
        assert _info_json(a, d) == _info_json(b), n
        assert len(_info_json(b)["segments"]) < len(files["segments"])
        for args in (["top", "--kind", "offcpu"], ["folded"], ["sockets"], ["requests", "--slowest", "3"]):
            _same(fr, d, url, args + ["--incident", n], tmp_path)
    slow = next(i["number"] for i in files["incidents"] if i["reasons"] == ["slow_request"])
    r = dump(fr, "requests", "--incident", slow, "--clickhouse", url)
    assert r.returncode == 0 and b"server" in r.stdout, (r.stdout, r.stderr)  # the slow requests are there
    # No such incident: the same usage error (exit 2) both ways.
    for n in (0, len(reasons) + 1):
        a = dump(fr, "top", "--incident", n, d)
        b = dump(fr, "top", "--incident", n, "--clickhouse", url)
        assert (a.returncode, a.stderr) == (b.returncode, b.stderr) and a.returncode == 2, (a.stderr, b.stderr)
