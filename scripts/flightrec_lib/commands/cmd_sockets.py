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
from ..socket_conns import collect
from ..units import EXACT_PER_CONN, EXACT_TOTAL, format_ns

ROLES = ("server", "client", "listener", "other")


def register(subparsers):
    p = subparsers.add_parser("sockets", help="per-connection socket activity: bytes, ops, errors, latency")
    p.add_argument("--json", action="store_true", help="one JSON object: connections and totals")
    p.add_argument("--role", choices=ROLES, action="append",
                   help="only connections with this role (repeatable)")
    cli.add_paths_argument(p)
    p.set_defaults(func=run)


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
