"""Exchange records (preload/sockets/socket_exchange.h): a program with known
exchanges (tests/programs/sock_exchanges.cc) under the preload, its decoded
socket.exchange events, and the reports built from them, must show exactly
those exchanges, calls and bytes."""
import re

EX_PARTIAL, EX_CONT, EX_EOF, EX_CLOSED = 2, 4, 8, 16


def run(fr, trace_dir, *args, env=None):
    proc = fr.run([fr.program("sock_exchanges")] + [str(a) for a in args], trace_dir, env=env)
    return proc.stdout


def exchanges(fr, trace_dir):
    return fr.events(trace_dir, "socket.exchange")


def by_role(fr, trace_dir):
    doc = fr.dump_json("sockets", "--json", trace_dir)
    assert doc["totals"]["dropped_records"] == 0
    roles = {}
    for c in doc["connections"]:
        roles.setdefault(c["role"], []).append(c)
    return doc, roles


def test_echo_exchanges_bytes_and_requests(fr, trace_dir):
    n, req, resp = 12, 100, 300
    run(fr, trace_dir, "echo", n, req, resp)
    doc, roles = by_role(fr, trace_dir)
    (client,), (server,) = roles["client"], roles["server"]
    assert (client["bytes_out"], client["bytes_in"]) == (n * req, n * resp)
    assert (server["bytes_in"], server["bytes_out"]) == (n * req, n * resp)
    # Every send counted (two per exchange each side), nothing recorded call by call.
    assert client["ops_by_name"]["out"] == 2 * n and server["ops_by_name"]["out"] == 2 * n
    assert not client.get("single_calls") and not server.get("single_calls")
    # The server's last read is the EOF: one more receive than its requests needed, at least.
    assert server["ops_by_name"]["in"] >= n + 1

    evs = exchanges(fr, trace_dir)
    srv = [e for e in evs if e["conn"] == server["id"]]
    assert sum(e["bytes_in"] for e in srv) == n * req and sum(e["bytes_out"] for e in srv) == n * resp
    assert sum(e["calls_out"] for e in srv) == 2 * n
    # One record per exchange, bar the parts of an exchange (the hooks' clock
    # may change unit once, early): whole exchanges = records that are not
    # continued by the next one.
    whole = [e for e in srv if not e["flags"] & EX_PARTIAL]
    assert len(whole) == n
    assert any(e["flags"] & EX_EOF for e in srv)

    reqs = fr.dump_json("requests", "--json", "--slowest", "0", trace_dir)["requests"]
    for role, conn in (("server", server), ("client", client)):
        mine = [r for r in reqs if r["role"] == role]
        assert len(mine) == n, (role, len(mine))
        assert all(r["connection"] == conn["id"] for r in mine)
        assert {(r["bytes_in"], r["bytes_out"]) for r in mine} == \
            {(req, resp) if role == "server" else (resp, req)}
        assert all(r["duration_ns"] > 0 for r in mine)


def test_the_same_program_per_call_gives_the_same_report(fr, trace_dir, tmp_path):
    n, req, resp = 6, 64, 1000
    run(fr, trace_dir, "echo", n, req, resp, env={"FLIGHTREC_SOCKETS": "calls"})
    assert not exchanges(fr, trace_dir)
    calls_doc, calls_roles = by_role(fr, trace_dir)
    reqs = fr.dump_json("requests", "--json", "--slowest", "0", trace_dir)["requests"]
    assert sorted((r["role"], r["bytes_in"], r["bytes_out"]) for r in reqs) == \
        sorted([("server", req, resp)] * n + [("client", resp, req)] * n)
    for role in ("client", "server"):
        (c,) = calls_roles[role]
        assert (c["bytes_in"], c["bytes_out"]) == ((n * resp, n * req) if role == "client" else (n * req, n * resp))


def test_a_long_download_shows_up_while_it_runs(fr, trace_dir):
    out = run(fr, trace_dir, "download", 2500)
    got = int(re.search(r"bytes=(\d+)", out)[1])
    doc, roles = by_role(fr, trace_dir)
    (client,), (server,) = roles["client"], roles["server"]
    assert (client["bytes_in"], client["bytes_out"]) == (got, 4)
    assert (server["bytes_in"], server["bytes_out"]) == (4, got)
    for conn in (client, server):
        parts = sorted((e for e in exchanges(fr, trace_dir) if e["conn"] == conn["id"]), key=lambda e: e["time"])
        assert sum(e["bytes_in"] + e["bytes_out"] for e in parts) == got + 4
        # Written while the exchange ran: a part that ends well before its last part does.
        assert parts[0]["flags"] & EX_PARTIAL, parts[0]
        assert parts[0]["end"] < parts[-1]["end"] - 500_000_000
        assert all(e["flags"] & EX_CONT for e in parts[1:])
        assert not parts[-1]["flags"] & EX_PARTIAL
    # The reader joins the parts: one request on each side, with every byte.
    reqs = fr.dump_json("requests", "--json", "--slowest", "0", trace_dir)["requests"]
    assert sorted((r["role"], r["bytes_in"], r["bytes_out"]) for r in reqs) == \
        [("client", got, 4), ("server", 4, got)]
    assert all(r["duration_ns"] >= 2_000_000_000 for r in reqs)


def test_would_block_and_errors_are_counted(fr, trace_dir):
    out = run(fr, trace_dir, "wouldblock", 7)
    assert "eagain=7 errors=1" in out
    doc, _ = by_role(fr, trace_dir)
    assert doc["totals"]["eagain"] == 7
    assert doc["totals"]["errors"] == 1
    # The exchange says which way failed: the send to the reset peer.
    failed = [c for c in doc["connections"] if c["errors"]]
    assert len(failed) == 1 and failed[0]["errors_by_name"] == {"out": 1}, failed
    evs = exchanges(fr, trace_dir)
    assert sum(e["would_block"] for e in evs) == 7 and sum(e["calls_in"] for e in evs) == 7
    assert sum(e["errors"] for e in evs) == 1
    assert all(e["flags"] & EX_CLOSED for e in evs)


def test_threads_sharing_one_udp_socket_keep_exact_totals(fr, trace_dir):
    threads, m, size = 4, 3000, 48
    run(fr, trace_dir, "udp", threads, m, size)
    doc, roles = by_role(fr, trace_dir)
    (sender,) = roles["client"]
    assert sender["bytes_out"] == threads * m * size
    # Each call counted once: in its descriptor's exchange, or (when another
    # thread held it at that moment) on its own as a socket.op.
    single = sender.get("single_calls", 0)
    assert sender["ops_by_name"].get("out", 0) + single == threads * m
    assert sender["ops_by_name"].get("send", 0) == single
    receivers = [c for c in doc["connections"] if c["bytes_in"]]
    assert sum(c["bytes_in"] for c in receivers) == threads * m * size
