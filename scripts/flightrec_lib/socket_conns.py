"""socket_conns: the connection dicts built from a trace's socket.* events
(preload/sockets/decode/socket_events.h): role, addresses, open/close and
first/last call times, bytes in and out, op and error counts by call, the
blocking calls' durations, accept-queue samples. Shared by the `sockets`
command (commands/cmd_sockets.py, which formats them), the fleet loader
(fleet_load.py: one segment's partial, collect(raw=True)) and the ClickHouse
path (fleet_reports.py: the same dicts merged in the database), so that none
of them imports a command (docs/ARCHITECTURE.md, "The reader's layers").

Byte counts are exact: the sum of what every send/recv-family call returned
(MSG_PEEK receives, recorded as "<op>.peek", moved nothing and are not
counted). A data call whose record did not fit the thread's ring is still
summed, per connection, into socket.gap events, so the totals stay exact;
only its timing is lost."""
from .units import Durations, reset_exact_budget

EAGAIN, EINTR, EINPROGRESS = 11, 4, 115
# Outcomes of non-blocking I/O and of signals, not failures of the connection.
NOT_ERRORS = {-EAGAIN, -EINTR, -EINPROGRESS}
DATA_IN = frozenset(["recv", "recvfrom", "recvmsg", "recvmmsg", "read", "readv", "splice_in"])
DATA_OUT = frozenset(["send", "sendto", "sendmsg", "sendmmsg", "write", "writev", "sendfile", "splice_out"])
# Calls that may wait: their durations feed the latency percentiles.
BLOCKING = DATA_IN | DATA_OUT | {"accept", "connect"}


class RawDurations(list):
    """Every duration, kept (collect(raw=True): one segment's partial for the
    fleet loader, fleet_load.py, whose database merges and ranks them)."""
    add = list.append


def new_conn(pid, conn, durations=Durations):
    """A connection dict with nothing seen yet; "_durations" and "_open_time"
    are collect's working fields (finish_connections drops them)."""
    return {"id": conn, "pid": pid, "role": "?", "family": "", "sock_type": "", "local": "", "peer": "",
            "listener": 0, "fd": None, "tid": None, "open_ns": None, "close_ns": None,
            "first_ns": None, "last_ns": None, "bytes_in": 0, "bytes_out": 0, "ops": 0, "errors": 0,
            "eagain": 0, "ops_by_name": {}, "errors_by_name": {}, "_durations": durations(), "_open_time": None,
            "acceptq": None}


# socket.exchange flags: which way its failed calls went (socket_exchange.h).
EX_ERR_IN, EX_ERR_OUT = 64, 128


def error_direction(flags):
    """An exchange's failed calls by direction: "in" (receives), "out" (sends),
    or "data" when both failed in one record (or an older recorder said neither)."""
    way = flags & (EX_ERR_IN | EX_ERR_OUT)
    return "in" if way == EX_ERR_IN else "out" if way == EX_ERR_OUT else "data"


def field_cols(batch, names):
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
            c = conns[key] = new_conn(pid, conn, durations)
        return c

    for b in trace.batches({"socket.open"}):
        seg = b.segment
        cols = field_cols(b, ["time", "tid", "fd", "conn", "role", "family", "sock_type", "local", "peer",
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
        cols = field_cols(b, ["time", "conn"])
        if cols is None:
            continue
        for t, conn in zip(cols["time"], cols["conn"]):
            c = get(b.segment.pid, conn)
            c["close_ns"] = t if c["close_ns"] is None else max(c["close_ns"], t)

    for b in trace.batches({"socket.op"}):
        seg = b.segment
        cols = field_cols(b, ["time", "conn", "op", "bytes", "duration_ns", "fd"])
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
        cols = field_cols(b, ["time", "conn", "fd", "bytes_in", "bytes_out", "calls_in", "calls_out", "errors",
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
                way = error_direction(flags)
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
        cols = field_cols(b, ["time", "conn", "bytes_in", "bytes_out", "ops", "errors"])
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
        cols = field_cols(b, ["conn", "queued", "backlog"])
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

