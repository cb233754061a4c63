"""sockets: what every connection did — role, local and peer address, open
and close time, bytes in and out, operation counts, errors, and latency
percentiles of its blocking calls — built from the socket.* events the
preload's socket hooks record (preload/sockets/decode/socket_events.h describes them).

Byte counts are exact: the sum of what every send/recv-family call returned
(MSG_PEEK receives, recorded as "<op>.peek", moved nothing and are not
counted). A data call whose record did not fit the thread's ring is still
summed, per connection, into socket.gap events, so the totals stay exact;
only its timing is lost. Dropped records show up in `flightrec-dump info`
and in this report's totals as "dropped".
"""
import json
import sys

from .. import cli
from ..units import EXACT_PER_CONN, EXACT_TOTAL, Durations, format_ns, reset_exact_budget

EAGAIN, EINTR, EINPROGRESS = 11, 4, 115
# Outcomes of non-blocking I/O and of signals, not failures of the connection.
NOT_ERRORS = {-EAGAIN, -EINTR, -EINPROGRESS}
DATA_IN = frozenset(["recv", "recvfrom", "recvmsg", "recvmmsg", "read", "readv", "splice_in"])
DATA_OUT = frozenset(["send", "sendto", "sendmsg", "sendmmsg", "write", "writev", "sendfile", "splice_out"])
# Calls that may wait: their durations feed the latency percentiles.
BLOCKING = DATA_IN | DATA_OUT | {"accept", "connect"}
ROLES = ("server", "client", "listener", "other")


def register(subparsers):
    p = subparsers.add_parser("sockets", help="per-connection socket activity: bytes, ops, errors, latency")
    p.add_argument("--json", action="store_true", help="one JSON object: connections and totals")
    p.add_argument("--role", choices=ROLES, action="append",
                   help="only connections with this role (repeatable)")
    cli.add_paths_argument(p)
    p.set_defaults(func=run)


class RawDurations(list):
    """Every duration, kept (collect(raw=True): one segment's partial for the
    fleet loader, fleet_load.py, whose database merges and ranks them)."""
    add = list.append


def _new_conn(pid, conn, durations=Durations):
    return {"id": conn, "pid": pid, "role": "?", "family": "", "sock_type": "", "local": "", "peer": "",
            "listener": 0, "fd": None, "tid": None, "open_ns": None, "close_ns": None,
            "first_ns": None, "last_ns": None, "bytes_in": 0, "bytes_out": 0, "ops": 0, "errors": 0,
            "eagain": 0, "ops_by_name": {}, "errors_by_name": {}, "_durations": durations(), "_open_time": None,
            "acceptq": None}


# socket.exchange flags: which way its failed calls went (socket_exchange.h).
EX_ERR_IN, EX_ERR_OUT = 64, 128


def _error_direction(flags):
    """An exchange's failed calls by direction: "in" (receives), "out" (sends),
    or "data" when both failed in one record (or an older recorder said neither)."""
    way = flags & (EX_ERR_IN | EX_ERR_OUT)
    return "in" if way == EX_ERR_IN else "out" if way == EX_ERR_OUT else "data"


def _field_cols(batch, names):
    """{name: column} for the given fields, or None if the block lacks one or is damaged."""
    cols = batch.columns_named(names)
    return None if cols is None else dict(zip(names, cols))


def collect(trace, raw=False):
    """{(pid, conn): connection dict} plus totals of what could not be attributed.
    raw: the partial of one segment for the fleet loader: every blocking-call
    duration kept in "_durations" (a list), "_open_time" kept, open_ns not
    defaulted to first_ns, no latency summary (fleet_sockets.py merges them)."""
    conns = {}
    durations = RawDurations if raw else Durations
    unattributed = {"ops": 0, "errors": 0}
    reset_exact_budget()

    def get(pid, conn):
        key = (pid, conn)
        c = conns.get(key)
        if c is None:
            c = conns[key] = _new_conn(pid, conn, durations)
        return c

    for b in trace.batches({"socket.open"}):
        seg = b.segment
        cols = _field_cols(b, ["time", "tid", "fd", "conn", "role", "family", "sock_type", "local", "peer",
                               "listener"])
        if cols is None:
            continue
        s = seg.string
        for i, conn in enumerate(cols["conn"]):
            c = get(seg.pid, conn)
            t = cols["time"][i]
            if c["open_ns"] is None or t < c["open_ns"]:
                c["open_ns"] = t
            # The latest description wins (connect() may re-describe a socket);
            # re-emissions at segment starts repeat the same description.
            if c["_open_time"] is None or t >= c["_open_time"]:
                c["_open_time"] = t
                c.update(role=s(cols["role"][i]) or "?", family=s(cols["family"][i]),
                         sock_type=s(cols["sock_type"][i]), local=s(cols["local"][i]), peer=s(cols["peer"][i]),
                         listener=cols["listener"][i], fd=cols["fd"][i], tid=cols["tid"][i])

    for b in trace.batches({"socket.close"}):
        cols = _field_cols(b, ["time", "conn"])
        if cols is None:
            continue
        for t, conn in zip(cols["time"], cols["conn"]):
            c = get(b.segment.pid, conn)
            c["close_ns"] = t if c["close_ns"] is None else max(c["close_ns"], t)

    for b in trace.batches({"socket.op"}):
        seg = b.segment
        cols = _field_cols(b, ["time", "conn", "op", "bytes", "duration_ns", "fd"])
        if cols is None:
            continue
        names = {sid: seg.string(sid) for sid in set(cols["op"])}
        pid = seg.pid
        for t, conn, op_id, nbytes, dur, fd in zip(cols["time"], cols["conn"], cols["op"], cols["bytes"],
                                                  cols["duration_ns"], cols["fd"]):
            op = names[op_id]
            failed = nbytes < 0 and nbytes not in NOT_ERRORS
            if conn == 0:  # a socket() that failed: no connection to charge
                unattributed["ops"] += 1
                unattributed["errors"] += failed
                continue
            c = conns.get((pid, conn))
            if c is None:
                c = get(pid, conn)
            c["ops"] += 1
            c["ops_by_name"][op] = c["ops_by_name"].get(op, 0) + 1
            if c["first_ns"] is None or t < c["first_ns"]:
                c["first_ns"] = t
            end = t + dur
            if c["last_ns"] is None or end > c["last_ns"]:
                c["last_ns"] = end
            if c["fd"] is None:
                c["fd"] = fd
            if nbytes > 0:
                if op in DATA_IN:
                    c["bytes_in"] += nbytes
                elif op in DATA_OUT:
                    c["bytes_out"] += nbytes
            elif nbytes == -EAGAIN:
                c["eagain"] += 1
            if failed:
                c["errors"] += 1
                c["errors_by_name"][op] = c["errors_by_name"].get(op, 0) + 1
            if op in BLOCKING and nbytes != -EAGAIN and nbytes != -EINPROGRESS:
                c["_durations"].add(dur)

    # Exchanges (FLIGHTREC_SOCKETS=1): a descriptor's data calls summed per
    # request/response exchange by the hot path. Their calls count as ops
    # ("in" and "out"), with their errors and would-blocks; the calls' own
    # durations are not recorded, so they add nothing to the latency
    # percentiles (FLIGHTREC_SOCKETS=calls records them). A socket.op data
    # call in such a trace is one recorded on its own while another thread
    # held its descriptor's exchange (counted as "single_calls").
    for b in trace.batches({"socket.exchange"}):
        cols = _field_cols(b, ["time", "conn", "fd", "bytes_in", "bytes_out", "calls_in", "calls_out", "errors",
                               "would_block", "end", "flags"])
        if cols is None:
            continue
        pid = b.segment.pid
        for (t, conn, fd, bin_, bout, cin, cout, errors, wb, end, flags) in zip(
                cols["time"], cols["conn"], cols["fd"], cols["bytes_in"], cols["bytes_out"], cols["calls_in"],
                cols["calls_out"], cols["errors"], cols["would_block"], cols["end"], cols["flags"]):
            c = conns.get((pid, conn)) or get(pid, conn)
            c["bytes_in"] += bin_
            c["bytes_out"] += bout
            c["ops"] += cin + cout
            if cin:
                c["ops_by_name"]["in"] = c["ops_by_name"].get("in", 0) + cin
            if cout:
                c["ops_by_name"]["out"] = c["ops_by_name"].get("out", 0) + cout
            c["errors"] += errors
            if errors:
                way = _error_direction(flags)
                c["errors_by_name"][way] = c["errors_by_name"].get(way, 0) + errors
            c["eagain"] += wb
            c["exchanges"] = c.get("exchanges", 0) + 1
            if c["first_ns"] is None or t < c["first_ns"]:
                c["first_ns"] = t
            if c["last_ns"] is None or end > c["last_ns"]:
                c["last_ns"] = end
            if c["fd"] is None:
                c["fd"] = fd
    exchanged = {key for key, c in conns.items() if c.get("exchanges")}
    for key in exchanged:
        c = conns[key]
        c["single_calls"] = sum(n for op, n in c["ops_by_name"].items() if op in DATA_IN or op in DATA_OUT)

    # Data calls whose socket.op records were dropped (a full ring), summed per
    # connection by the recorder: their bytes, ops and errors still count.
    for b in trace.batches({"socket.gap"}):
        cols = _field_cols(b, ["time", "conn", "bytes_in", "bytes_out", "ops", "errors"])
        if cols is None:
            continue
        pid = b.segment.pid
        for t, conn, bin_, bout, ops, errors in zip(cols["time"], cols["conn"], cols["bytes_in"],
                                                    cols["bytes_out"], cols["ops"], cols["errors"]):
            c = conns.get((pid, conn)) or get(pid, conn)
            c["bytes_in"] += bin_
            c["bytes_out"] += bout
            c["ops"] += ops
            c["errors"] += errors
            c["summarized_ops"] = c.get("summarized_ops", 0) + ops
            if c["last_ns"] is None or t > c["last_ns"]:
                c["last_ns"] = t

    for b in trace.batches({"socket.acceptq"}):
        cols = _field_cols(b, ["conn", "queued", "backlog"])
        if cols is None:
            continue
        for conn, queued, backlog in zip(cols["conn"], cols["queued"], cols["backlog"]):
            c = get(b.segment.pid, conn)
            q = c["acceptq"] or {"samples": 0, "max_queued": 0, "backlog": 0, "full_samples": 0}
            q["samples"] += 1
            q["max_queued"] = max(q["max_queued"], queued)
            q["backlog"] = max(q["backlog"], backlog)
            q["full_samples"] += 1 if backlog and queued >= backlog else 0
            c["acceptq"] = q

    if raw:
        return conns, unattributed
    finish_connections(conns.values())
    return conns, unattributed


def finish_connections(conns):
    """A connection's open time defaults to its first call; its durations
    become the latency summary."""
    for c in conns:
        if c["open_ns"] is None:
            c["open_ns"] = c["first_ns"]
        c["latency_ns"] = c.pop("_durations").summary()
        del c["_open_time"]


def totals_of(conns, unattributed, dropped):
    t = {"connections": len(conns), "bytes_in": 0, "bytes_out": 0, "ops": unattributed["ops"],
         "errors": unattributed["errors"], "eagain": 0, "by_role": {}, "dropped_records": dropped}
    for c in conns:
        t["bytes_in"] += c["bytes_in"]
        t["bytes_out"] += c["bytes_out"]
        t["ops"] += c["ops"]
        t["errors"] += c["errors"]
        t["eagain"] += c["eagain"]
        r = t["by_role"].setdefault(c["role"], {"connections": 0, "bytes_in": 0, "bytes_out": 0, "ops": 0,
                                                "errors": 0})
        r["connections"] += 1
        r["bytes_in"] += c["bytes_in"]
        r["bytes_out"] += c["bytes_out"]
        r["ops"] += c["ops"]
        r["errors"] += c["errors"]
    return t


def exactness_note(dropped):
    """What the drops mean for the totals. A dropped data call is summed into
    socket.gap (bytes exact); only "socket.gap" drops (calls not even summed) and
    dropped connection records (socket.addr, or socket.op of socket/accept/close,
    which the recorder cannot tell apart in the count) make counts lower bounds."""
    if dropped.get("socket.gap"):
        return "byte and op counts below are lower bounds"
    return ("byte counts below include the dropped data calls (socket.gap); their timings are missing, and "
            "a dropped open or close leaves its connection's addresses or end unknown")


def run(args):
    trace = cli.open_trace(args.paths)
    if getattr(trace, "fleet", False):  # --clickhouse: merged in the database (fleet_reports.py)
        from .. import fleet_reports
        fleet_reports.check_loaded_by_this_version(trace)
        conns, unattributed = fleet_reports.socket_connections(trace)
    else:
        conns, unattributed = collect(trace)
    rows = sorted(conns.values(), key=lambda c: (c["pid"] or 0, c["open_ns"] or 0, c["id"]))
    if args.role:
        rows = [c for c in rows if c["role"] in args.role]
    dropped = {k: v for k, v in trace.dropped().items() if k.startswith("socket")}
    totals = totals_of(rows, unattributed if not args.role else {"ops": 0, "errors": 0},
                       sum(dropped.values()))
    if args.json:
        # dumps, not dump: only dumps uses the C encoder.
        sys.stdout.write(json.dumps({"connections": rows, "totals": totals}, separators=(",", ":")))
        print()
        return cli.exit_status(trace)
    if not rows:
        if not trace.segments:
            print("no readable segments")
        elif not any(True for _ in trace.batches({"socket.op", "socket.open", "socket.exchange"})):
            print("no socket events in the trace (FLIGHTREC_SOCKETS=0, or the program used no sockets)")
        else:
            print("no connections match the selection")
        return cli.exit_status(trace)
    t0 = getattr(trace, "mono_range", trace.time_range)()[0] or 0
    by_role = ", ".join("%d %s" % (v["connections"], k) for k, v in sorted(totals["by_role"].items()))
    print("%d connections (%s): %s in, %s out in %d ops, %d errors, %d would-block" % (
        totals["connections"], by_role, _bytes(totals["bytes_in"]), _bytes(totals["bytes_out"]), totals["ops"],
        totals["errors"], totals["eagain"]))
    if dropped:
        print("warning: %d socket records were dropped before reaching the trace (%s); %s" % (
            sum(dropped.values()), ", ".join("%s %d" % kv for kv in sorted(dropped.items())),
            exactness_note(dropped)))
    print()
    header = ("CONN", "PID", "ROLE", "LOCAL", "PEER", "OPEN", "CLOSE", "BYTES IN", "BYTES OUT", "OPS", "ERR",
              "p50", "p99", "max")
    table = [header]
    for c in rows:
        lat = c["latency_ns"] or {}
        peer = c["peer"]
        if c["role"] == "listener" and c["acceptq"]:
            q = c["acceptq"]
            peer = "acceptq max %d/%d" % (q["max_queued"], q["backlog"])
        table.append((str(c["id"]), str(c["pid"]), c["role"], c["local"] or "-", peer or "-",
                      _rel(c["open_ns"], t0), _rel(c["close_ns"], t0), "{:,}".format(c["bytes_in"]),
                      "{:,}".format(c["bytes_out"]), "{:,}".format(c["ops"]), str(c["errors"]),
                      _approx(lat, "p50"), _approx(lat, "p99"), format_ns(lat.get("max"))))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    right = {0, 1, 5, 6, 7, 8, 9, 10, 11, 12, 13}
    for r in table:
        print("  ".join(v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(r)).rstrip())
    if any((c["latency_ns"] or {}).get("approximate") for c in rows):
        print("~: percentile from a histogram, within 1%% (more than %d blocking calls on the connection, "
              "or %d in all)" % (EXACT_PER_CONN, EXACT_TOTAL))
    errs = [(c, c["errors_by_name"]) for c in rows if c["errors_by_name"]]
    if errs:
        print()
        print("errors by call:")
        for c, by in errs:
            print("  conn %d: %s" % (c["id"], ", ".join("%s %d" % kv for kv in sorted(by.items()))))
    return cli.exit_status(trace)


def _approx(lat, key):
    """A percentile, with "~" when it came from the histogram (Durations)."""
    return ("~" if lat.get("approximate") else "") + format_ns(lat.get(key))


def _rel(ns, t0):
    return "-" if ns is None else "+%.3fs" % ((ns - t0) / 1e9)


def _bytes(n):
    return cli.format_bytes(n)
