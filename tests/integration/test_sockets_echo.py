"""The echo server/client (tests/programs/sock_echo.cc) under the preload:
threads, many connections, known byte counts, three phases using
send/recv, read/write and sendmsg/recvmsg. The socket report must give the
exact bytes per connection and in total, the right numbers of connections
and requests, and the server's handler in the request call trees."""
import json
import re
from collections import Counter

import pytest

PHASE_OPS = {0: ({"send"}, {"recv"}), 1: ({"write"}, {"read"}), 2: ({"sendmsg"}, {"recvmsg"})}
ALL_DATA_OPS = {"send", "recv", "write", "read", "sendmsg", "recvmsg", "sendto", "recvfrom", "writev", "readv"}


def parse_echo(stdout):
    conns = [dict(phase=int(m[0]), local=m[1], sent=int(m[2]), received=int(m[3]), requests=int(m[4]))
             for m in re.findall(r"conn phase=(\d) local=(\S+) sent=(\d+) received=(\d+) requests=(\d+)", stdout)]
    m = re.search(r"total conns=(\d+) requests=(\d+) client_sent=(\d+) client_received=(\d+)", stdout)
    total = dict(conns=int(m[1]), requests=int(m[2]), sent=int(m[3]), received=int(m[4]))
    return conns, total


def port_of(addr):
    return addr.rsplit(":", 1)[1] if addr else None


def run_echo(fr, trace_dir, conns, requests, cpu_us, family, extra_env=None):
    env = {"FLIGHTREC_RING_BYTES": "1M"}
    env.update(extra_env or {})
    proc = fr.run([fr.program("sock_echo"), str(conns), str(requests), str(cpu_us), family], trace_dir, env=env)
    return parse_echo(proc.stdout)


@pytest.mark.slow
# Default: data calls summed per exchange in the hot path (socket.exchange);
# FLIGHTREC_SOCKETS=calls: one socket.op per call. Both give the same report.
@pytest.mark.parametrize("family,conns,requests,mode", [("tcp4", 8, 20, "exchanges"), ("tcp6", 3, 6, "exchanges"),
                                                        ("unix", 3, 6, "exchanges"), ("tcp4", 8, 20, "calls")])
def test_echo_exact_bytes_connections_and_requests(fr, trace_dir, family, conns, requests, mode):
    env = {"FLIGHTREC_SOCKETS": "calls"} if mode == "calls" else {}
    expected, total = run_echo(fr, trace_dir, conns, requests, 0, family, env)
    assert bool(fr.events(trace_dir, "socket.exchange")) == (mode == "exchanges")
    assert total["conns"] == 3 * conns and total["requests"] == 3 * conns * requests

    doc = fr.dump_json("sockets", "--json", trace_dir)
    assert doc["totals"]["dropped_records"] == 0
    by_role = {}
    for c in doc["connections"]:
        by_role.setdefault(c["role"], []).append(c)
    assert len(by_role["listener"]) == 1
    assert len(by_role["client"]) == 3 * conns
    assert len(by_role["server"]) == 3 * conns
    assert sum(c["errors"] for c in doc["connections"]) == 0
    family_name = {"tcp4": "ipv4", "tcp6": "ipv6", "unix": "unix"}[family]
    assert {c["family"] for c in doc["connections"]} == {family_name}
    listener = by_role["listener"][0]
    if family == "tcp6":
        assert listener["local"].startswith("[::1]:")
    elif family == "unix":
        assert listener["local"].startswith("/tmp/sock_echo.")
    else:
        assert listener["local"].startswith("127.0.0.1:")

    # Totals, both sides, exact.
    clients, servers = by_role["client"], by_role["server"]
    assert sum(c["bytes_out"] for c in clients) == total["sent"]
    assert sum(c["bytes_in"] for c in clients) == total["received"]
    assert sum(c["bytes_in"] for c in servers) == total["sent"]
    assert sum(c["bytes_out"] for c in servers) == total["received"]
    assert all(c["listener"] == listener["id"] for c in servers)

    # Per connection, exact, and with the phase's calls.
    if family == "unix":  # unix clients are unnamed: compare the multisets
        assert Counter((c["bytes_out"], c["bytes_in"]) for c in clients) == \
            Counter((e["sent"], e["received"]) for e in expected)
        assert Counter((c["bytes_in"], c["bytes_out"]) for c in servers) == \
            Counter((e["sent"], e["received"]) for e in expected)
    else:
        client_by_port = {port_of(c["local"]): c for c in clients}
        server_by_port = {port_of(c["peer"]): c for c in servers}
        for e in expected:
            cl, sv = client_by_port[e["local"]], server_by_port[e["local"]]
            assert (cl["bytes_out"], cl["bytes_in"]) == (e["sent"], e["received"]), e
            assert (sv["bytes_in"], sv["bytes_out"]) == (e["sent"], e["received"]), e
            assert cl["peer"] == listener["local"] and sv["local"] == listener["local"]
            outs, ins = PHASE_OPS[e["phase"]]
            used = set(cl["ops_by_name"]) & ALL_DATA_OPS
            if mode == "calls":
                assert used == outs | ins, (e, cl["ops_by_name"])
                assert set(sv["ops_by_name"]) & ALL_DATA_OPS == outs | ins
            else:  # one thread per connection end: nothing recorded call by call
                assert not used and not set(sv["ops_by_name"]) & ALL_DATA_OPS, (e, cl["ops_by_name"])
                # Every send counted: one per request (echo_client sends each request whole).
                assert cl["ops_by_name"]["out"] >= e["requests"] and sv["ops_by_name"]["in"] > e["requests"]
            # Every client closed its connection after a shutdown and an EOF read.
            assert cl["ops_by_name"]["shutdown"] == 1 and cl["close_ns"] is not None

    # Requests: one per exchange on each side, with the exchange's bytes.
    reqs = fr.dump_json("requests", "--json", "--slowest", "0", trace_dir)["requests"]
    server_reqs = [r for r in reqs if r["role"] == "server"]
    client_reqs = [r for r in reqs if r["role"] == "client"]
    assert len(server_reqs) == total["requests"]
    assert len(client_reqs) == total["requests"]
    per_conn = Counter(r["connection"] for r in server_reqs)
    assert sorted(per_conn.values()) == [requests] * (3 * conns)
    sizes = Counter((r["bytes_in"], r["bytes_out"]) for r in server_reqs)
    want = Counter()
    for e in expected:
        want[(e["sent"] // e["requests"], e["received"] // e["requests"])] += e["requests"]
    assert sizes == want
    assert all(r["duration_ns"] > 0 for r in reqs)
    # The client sees at least as much latency as the server spends on each exchange.
    assert sum(r["duration_ns"] for r in client_reqs) >= sum(r["duration_ns"] for r in server_reqs)
    # The Perfetto timeline shows the same requests as slices on their threads.
    timeline = trace_dir.parent / "timeline.json"
    fr.dump_run("chrome", "-o", str(timeline), trace_dir)
    slices = [e for e in json.loads(timeline.read_text())["traceEvents"] if e.get("cat") == "request"]
    assert len(slices) == len(reqs)
    assert all(e["ph"] == "X" for e in slices)
    assert sorted(e["args"]["bytes_in"] for e in slices) == sorted(r["bytes_in"] for r in reqs)


def tree_names(tree):
    names, stack = set(), [tree]
    while stack:
        node = stack.pop()
        if node.get("name"):
            names.add(node["name"])
        stack.extend(node["children"])
    return names


@pytest.mark.slow
def test_echo_request_trees_show_the_handler(fr, trace_dir):
    expected, total = run_echo(fr, trace_dir, 6, 20, 3000, "tcp4", {"FLIGHTREC_CPU_HZ": "499"})
    if not fr.events(trace_dir, "cpu.sample"):
        pytest.skip("no cpu.sample events in the trace: CPU sampling is not available here")
    doc = fr.dump_json("requests", "--json", "--slowest", str(total["requests"] * 2), "--role", "server", trace_dir)
    cpu_trees = [r["tree"]["cpu"] for r in doc["requests"] if r["tree"] and "cpu" in r["tree"]]
    assert cpu_trees, "no CPU samples fell inside any server request"
    with_handler = [t for t in cpu_trees if any("echo_handle_request" in n for n in tree_names(t))]
    # The server spends its requests burning CPU in the handler.
    assert len(with_handler) >= 0.8 * len(cpu_trees), (len(with_handler), len(cpu_trees))
    text = fr.dump_run("requests", "--slowest", "3", "--role", "server", trace_dir).stdout
    assert "server-side requests on 18 connections" in text
    assert "latency histogram (server)" in text


def test_echo_with_sockets_disabled_records_no_socket_events(fr, trace_dir):
    expected, total = run_echo(fr, trace_dir, 2, 3, 0, "tcp4", {"FLIGHTREC_SOCKETS": "0"})
    assert total["requests"] == 18
    counts = fr.dump_json("info", "--json", trace_dir)["events"]
    assert counts.get("process.start", 0) >= 1
    assert not any(k.startswith("socket.") or k == "request" for k in counts), counts
