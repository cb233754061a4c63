"""fleet_requests: the `requests` table of a ClickHouse fleet database read
back as request_inference's request tuples (the rows fleet_load.py stored,
one per request the file reader derived). request_inference.iter_requests
streams a fleet's requests from here, so it needs nothing of the reports
(fleet_reports.py) that are built on it (docs/ARCHITECTURE.md, "The
reader's layers")."""

REQ_COLUMNS = ("start_mono, pid, conn, tid, role, duration, bytes_in, bytes_out, endpoint, has_trace, trace_id,"
               " parent_span, sampled, request_id, proc_id")


def as_request(row):
    """A requests row (REQ_COLUMNS) as request_inference's request tuple."""
    start, pid, conn, tid, role, dur, bin_, bout, ep, has_trace, tr, span, sampled, rid, _ = row
    return (start, pid, conn, tid, role, dur, bin_, bout, ep, (tr, span, bool(sampled), rid) if has_trace else None)


def iter_requests(trace, role="all", pids=None):
    """request_inference.iter_requests over the requests table (streamed)."""
    w, p = trace.where()
    if role != "all":
        w += " AND role = %(role)s"
        p["role"] = role
    if pids is not None:
        w += " AND pid IN %(pids)s"
        p["pids"] = tuple(pids) or (0,)
    for row in trace.conn.execute_iter("SELECT %s FROM %s WHERE %s" % (REQ_COLUMNS, trace.target.table("requests"),
                                                                       w), p):
        yield as_request(row)
