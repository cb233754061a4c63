"""fleet_reports: the socket, request and info reports of a ClickHouse fleet
database (`sockets`, `requests` with --json/--by endpoint/--tree/--diff,
`info` given --clickhouse URL; issue 42, docs/FLEET.md). Each function here
builds, aggregated in the database, the same intermediate the file reader
builds (socket_conns.collect's connection dicts, cmd_requests.analyse's
summaries, histograms, slowest requests and listing, by_endpoint's rows,
downstream.attribute's trees, requests_diff's groups, cmd_info.summarize's
document), so the commands format it with their own code, unchanged.

What it reads was derived at load time by the file reader's own code run on
each segment (fleet_load.py): `socket_conns` holds each segment's partial
connection dicts, `requests` each segment's requests. Here they are merged
with GROUP BY (sums, min/max, the latest description by argMax, op counts by
sumMap, latency percentiles by nearest rank over the sorted durations) and
ranked (ORDER BY ... LIMIT). Times are on each process's monotonic clock,
as the file reader reports them. Values are query parameters, never SQL
text; tables come from fleet_db.Target."""
import json

from . import fleet_db, fleet_incidents, request_report, request_samples, socket_conns, units
from .fleet_requests import REQ_COLUMNS, as_request
from .fleet_sql import glob_regex, percentiles, sum_map


# ------------------------------------------------------------------ sockets

def socket_connections(trace):
    """{(pid, conn): connection dict}, unattributed {"ops", "errors"}: what
    socket_conns.collect returns for the same segments."""
    w, p = trace.where()
    t = trace.target.table("socket_conns")
    rows = trace.conn.execute(
        "SELECT pid, conn, max(desc_time) AS dt, argMax(role, desc_time), argMax(family, desc_time),"
        " argMax(sock_type, desc_time), argMax(local, desc_time), argMax(peer, desc_time),"
        " argMax(listener, desc_time), argMax(fd, desc_time), argMax(tid, desc_time),"
        " argMinIf(fd, first_ns, fd >= 0), countIf(open_ns >= 0), minIf(open_ns, open_ns >= 0), max(close_ns),"
        " countIf(first_ns >= 0), minIf(first_ns, first_ns >= 0), max(last_ns),"
        " sum(bytes_in), sum(bytes_out), sum(ops), sum(errors), sum(eagain),"
        " sum(exchanges), max(gap), sum(summarized_ops),"
        " max(acceptq), sum(aq_samples), max(aq_max_queued), max(aq_backlog), sum(aq_full)"
        " FROM %s WHERE %s AND kind = 0 GROUP BY proc_id, pid, conn" % (t, w), p)
    stats = trace.conn.execute(
        "SELECT pid, conn, n, d[n], %s FROM (SELECT pid, conn, arraySort(groupArrayArray(durations)) AS d,"
        " length(d) AS n FROM %s WHERE %s AND kind = 0 GROUP BY proc_id, pid, conn) WHERE n > 0" % (
            percentiles((50, 90, 99)), t, w), p)
    opm = sum_map(trace.conn, t, "op_names", "op_counts", ("pid", "conn"), w + " AND kind = 0", p)
    errm = sum_map(trace.conn, t, "err_names", "err_counts", ("pid", "conn"), w + " AND kind = 0", p)
    lat = {}
    for pid, conn, n, mx, p50, p90, p99 in stats:
        s = {"count": n, "p50": p50, "p90": p90, "p99": p99, "max": mx}
        if n >= units.EXACT_PER_CONN:
            s["approximate"] = True  # the file reader's histogram (within 0.8%); exact here
        lat[(pid, conn)] = s
    conns = {}
    for (pid, conn, dt, role, family, stype, local, peer, listener, dfd, dtid, opfd, nopen, open_ns, close_ns,
         nfirst, first_ns, last_ns, bin_, bout, ops, errors, eagain, exchanges, gap, summarized,
         aq, aq_samples, aq_maxq, aq_backlog, aq_full) in rows:
        c = socket_conns.new_conn(pid, conn)
        described = dt >= 0
        c.update(role=role if described else "?", family=family if described else "",
                 sock_type=stype if described else "", local=local if described else "",
                 peer=peer if described else "", listener=listener if described else 0,
                 fd=dfd if described else (opfd if opfd >= 0 else None), tid=dtid if described else None,
                 open_ns=open_ns if nopen else None, close_ns=close_ns if close_ns >= 0 else None,
                 first_ns=first_ns if nfirst else None, last_ns=last_ns if last_ns >= 0 else None,
                 bytes_in=bin_, bytes_out=bout, ops=ops, errors=errors, eagain=eagain,
                 ops_by_name=opm.get((pid, conn), {}), errors_by_name=errm.get((pid, conn), {}))
        if aq:
            c["acceptq"] = {"samples": aq_samples, "max_queued": aq_maxq, "backlog": aq_backlog,
                            "full_samples": aq_full}
        if exchanges:
            c["exchanges"] = exchanges
            c["single_calls"] = sum(n for op, n in c["ops_by_name"].items()
                                    if op in socket_conns.DATA_IN or op in socket_conns.DATA_OUT)
        if gap:
            c["summarized_ops"] = summarized
        del c["_durations"], c["_open_time"]
        if c["open_ns"] is None:
            c["open_ns"] = c["first_ns"]
        c["latency_ns"] = lat.get((pid, conn))
        conns[(pid, conn)] = c
    ops, errors = trace.conn.execute("SELECT sum(ops), sum(errors) FROM %s WHERE %s AND kind = 1" % (t, w), p)[0]
    return conns, {"ops": ops or 0, "errors": errors or 0}


# ------------------------------------------------------------------ requests

def request_where(trace, role="all", endpoint=None, trace_id=None):
    """The WHERE clause and parameters of the selected requests (--role,
    --endpoint as a shell pattern, --trace-id as request_report.request_filter)."""
    w, p = trace.where()
    cond = [w]
    if role != "all":
        cond.append("role = %(role)s")
        p["role"] = role
    if endpoint is not None:
        cond.append("match(endpoint, %(ep_re)s)")
        p["ep_re"] = glob_regex(endpoint)
    if trace_id is not None:
        want = trace_id.strip().lower()
        if not want:
            cond.append("0")
        else:
            cond.append("has_trace AND ((trace_id != '' AND startsWith(trace_id, %(tr)s)) OR "
                        "(request_id != '' AND lower(request_id) = %(tr)s))")
            p["tr"] = want
    return " AND ".join(cond), p


def request_stats(trace, where, p):
    """{role: (summary dict, histogram list)} as cmd_requests.RoleStats gives them."""
    t = trace.target.table("requests")
    summ = {}
    for role, n, mx, total, bin_, bout, nconn, p50, p90, p99 in trace.conn.execute(
            "SELECT role, n, d[n], total, bi, bo, nc, %s FROM (SELECT role, arraySort(groupArray(duration)) AS d,"
            " length(d) AS n, sum(duration) AS total, sum(bytes_in) AS bi, sum(bytes_out) AS bo,"
            " uniqExact(proc_id, conn) AS nc FROM %s WHERE %s GROUP BY role) ORDER BY role" % (
                percentiles((50, 90, 99)), t, where), p):
        s = {"count": n, "p50": p50, "p90": p90, "p99": p99, "max": mx, "mean": total // n, "bytes_in": bin_,
             "bytes_out": bout, "connections": nconn}
        if n >= units.EXACT_TOTAL:
            s["approximate"] = True  # the file reader's histogram (within 0.8%); exact here
        summ[role] = s
    # 1-2-5 buckets: the bucket of a duration is the last edge <= it (request_report.EDGES).
    edges = request_report.EDGES
    buckets = {}
    usable = [e for e in edges if e < 1 << 62]
    q = dict(p)
    arms = []
    for i, e in enumerate(usable[1:]):
        q["e%d" % i] = e
        arms.append("duration < %%(e%d)s, %d" % (i, i))
    for role, i, n in trace.conn.execute(
            "SELECT role, multiIf(%s, %d) AS b, count() FROM %s WHERE %s GROUP BY role, b" % (
                ", ".join(arms), len(usable) - 1, t, where), q):
        buckets.setdefault(role, {})[i] = n
    hist = {}
    for role in sorted(summ):
        b = buckets.get(role, {})
        hist[role] = [{"lo_ns": edges[i], "hi_ns": edges[i + 1], "count": b.get(i, 0)}
                      for i in range(min(b), max(b) + 1)] if b else []
    return summ, hist


def slowest(trace, where, p, n):
    """The n slowest requests, as request tuples (cmd_requests._slowest_key's order), and their proc ids."""
    rows = trace.conn.execute(
        "SELECT %s FROM %s WHERE %s ORDER BY duration DESC, start_mono, pid, conn LIMIT %d" % (
            REQ_COLUMNS, trace.target.table("requests"), where, int(n)), p)
    return [as_request(r) for r in rows], [r[-1] for r in rows]


def concurrency(trace, reqs, procs, role):
    """[how many other requests (of role, or all) were in flight on r's thread during r] for each r."""
    out = []
    w, p = trace.where()
    t = trace.target.table("requests")
    for r, pk in zip(reqs, procs):
        q = dict(p, pk=pk, tid=r[3], lo=r[0], hi=r[0] + r[5], role=role)
        n = trace.conn.execute(
            "SELECT count() FROM %s WHERE %s AND proc_id = %%(pk)s AND tid = %%(tid)s AND start_mono <= %%(hi)s"
            " AND start_mono + duration >= %%(lo)s%s" % (t, w, "" if role == "all" else " AND role = %(role)s"),
            q)[0][0]
        out.append(max(0, n - 1))
    return out


def thread_requests(trace, threads, role):
    """The requests (tuples) of the given (pid, tid) threads, of one role."""
    if not threads:
        return []
    w, p = trace.where()
    p = dict(p, pt=tuple((pid << 32) | tid for pid, tid in threads), role=role)
    return [as_request(r) for r in trace.conn.execute(
        "SELECT %s FROM %s WHERE %s AND role = %%(role)s AND bitOr(bitShiftLeft(toUInt64(pid), 32), tid) IN %%(pt)s"
        % (REQ_COLUMNS, trace.target.table("requests"), w), p)]


def latest_connections(trace, pids=None):
    """{(pid, conn): (local, peer)} of each connection's latest description."""
    w, p = trace.where()
    return {(pid, conn): (local, peer) for pid, conn, local, peer in trace.conn.execute(
        "SELECT pid, conn, argMax(local, desc_time), argMax(peer, desc_time) FROM %s WHERE %s AND kind = 0"
        " AND desc_time >= 0 GROUP BY proc_id, pid, conn" % (trace.target.table("socket_conns"), w), p)}


def window_samples(trace, reqs, procs):
    """request_samples.read_samples's result for the windows of reqs:
    {kind: {(pid, tid): (times, [(time, weight, end, frames, stack)])}} on
    the monotonic clock. The stack slot holds the frames (window_entries
    reads them through FleetFrames)."""
    windows = {}
    for r, pk in zip(reqs, procs):
        windows.setdefault((pk, r[1], r[3]), []).append((r[0], r[0] + r[5]))
    return samples_in_windows(trace, windows)


def read_samples(trace, windows):
    """request_samples.read_samples(trace, windows) ({(pid, tid): [(lo, hi)]})
    of a fleet: the samples of every selected process with that pid (the
    file reader keys threads by pid too)."""
    by_pid = {}
    for pk, (_, _, pid) in trace.procs.items():
        by_pid.setdefault(pid, []).append(pk)
    out = {}
    for (pid, tid), spans in windows.items():
        for pk in by_pid.get(pid, ()):
            out[(pk, pid, tid)] = list(spans)
    return samples_in_windows(trace, out)


def samples_in_windows(trace, windows):
    """read_samples's result for windows {(proc_id, pid, tid): [(lo, hi)]}."""
    out = {k: {} for k in request_samples.KINDS}
    if not windows:
        return out
    w, p = trace.where()
    shifts = trace.shifts()
    merged = request_samples.merge_windows(windows)
    rows = []
    samples = trace.target.table("samples")
    margin = 10 ** 9  # the wall clock of a sample's segment may differ from the request's by its anchors
    for (pk, pid, tid), (los, his) in merged.items():
        conds = []
        q = dict(p, pk=pk, tid=tid)
        for i, (lo, hi) in enumerate(zip(los, his)):
            q["lo%d" % i], q["hi%d" % i] = lo, hi
            conds.append("(time - %%(sh)s <= %%(hi%d)s + %d AND time - %%(sh)s + if(kind = 2, toInt64(period), 0)"
                         " >= %%(lo%d)s - %d)" % (i, margin, i, margin))
        q["sh"] = min((s for s in shifts.get(pk, {}).values()), default=0)
        for row in trace.conn.execute(
                "SELECT kind, time, load_id, stack_id, weight, period FROM %s WHERE %s AND proc_id = %%(pk)s AND"
                " tid = %%(tid)s AND kind IN (1, 2, 3) AND stack_id != 1 AND (%s)" % (samples, w, " OR ".join(conds)),
                q):
            rows.append((pid, tid, los, his) + row)
    import bisect
    frames = trace.stack_frames({r[7] for r in rows if r[7] > 1})
    kinds = {1: "cpu", 2: "offcpu", 3: "alloc"}
    for pid, tid, los, his, kind, wall, load_id, sid, weight, period in rows:
        t = wall - trace.shift_of(load_id)
        k = kinds[kind]
        end = t + period if k == "offcpu" else t
        i = bisect.bisect_right(los, end) - 1
        if i < 0 or his[i] < t:
            continue  # in no window
        fr = None
        if sid > 1:
            fr = frames.get(sid) or [{"function": "<missing stack>", "file": "", "line": 0, "address": 0,
                                      "mapping": None, "inlined": False}]
        out[k].setdefault((pid, tid), []).append((t, weight if k == "alloc" else period, end, FRAMES, fr))
    for per_thread in out.values():
        for key, items in per_thread.items():
            items.sort(key=lambda x: x[0])
            per_thread[key] = ([x[0] for x in items], items)
    return out


class _Frames:
    """Stands where window_entries expects a segment: frames(stack) gives the stack's frames."""

    @staticmethod
    def frames(fr):
        return fr


FRAMES = _Frames()


# ------------------------------------------------------------------ info

def info_document(trace):
    """The info document (cmd_info.summarize's) of the selected processes."""
    w, p = trace.where()
    t = trace.target.table("segments")
    segs = []
    for (info,) in trace.conn.execute(
            "SELECT any(info) FROM %s WHERE %s GROUP BY seg_name, crc_head, crc_tail ORDER BY any(service),"
            " any(pid), any(host), any(sequence), seg_name" % (t, w), p):
        segs.append(json.loads(info))
    counts = sum_map(trace.conn, t, "type_names", "type_counts", ("toUInt8(0)",), w, p).get((0,), {})
    crashes, killed = fleet_incidents.crashes_and_killed(trace)
    first, last = trace.mono_range()
    wall = None
    if first is not None:
        # the file reader converts both ends with the anchors of the segment holding the first event
        anchor = trace.conn.execute("SELECT argMin(shift_ns, mono_first) FROM %s WHERE %s AND has_times" % (t, w),
                                    p)[0][0]
        wall = (first + anchor, last + anchor)
    return {
        "segments": segs,
        "events": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "total_events": sum(counts.values()),
        "dropped": dict(sorted(trace.dropped().items())),
        "threads": trace.threads(),
        "crashes": crashes,
        "killed": killed,
        "incidents": fleet_incidents.find(trace),
        "time_range": {"first_ns": first, "last_ns": last,
                       "first_wall_ns": wall[0] if wall else None, "last_wall_ns": wall[1] if wall else None},
        "disk_budget": [],
        "errors": [],
        "notes": [],
    }


def check_loaded_by_this_version(trace):
    """A FleetError when the database predates the tables these reports read."""
    if not fleet_db.ledger_has_times(trace.conn):
        raise fleet_db.FleetError(
            "database %s was loaded by an older flightrec-dump, without the tables `sockets`, `requests` and `info` "
            "read: load the segments again into a new database (docs/FLEET.md)" % trace.target.database)


def by_endpoint(trace, role="all", endpoint=None, trace_id=None):
    """cmd_requests.by_endpoint's rows, aggregated in ClickHouse.

    Per (role, endpoint): the durations' nearest-rank percentiles and sums
    (GROUP BY). The samples count for the request of their thread that
    began last at or before them (when they are not past its end), as the
    file reader's bisect finds it: per thread, the requests (in the file
    reader's order of equal starts) and the samples go into one array sorted
    by time, a request first at equal times; each request carries the change
    of "current end" and "current group" from the request before it, so a
    running sum (arrayCumSum) gives every sample the request in flight
    without a join. Then GROUP BY the group."""
    check_loaded_by_this_version(trace)
    where, p = request_where(trace, role, endpoint, trace_id)
    t = trace.target.table("requests")
    ep = "if(endpoint = '', '(unnamed)', endpoint)"
    groups = {}
    for h, rl, name, n, mx, total, bin_, bout, p50, p90, p99 in trace.conn.execute(
            "SELECT cityHash64(role, ep), role, ep, n, d[n], total, bi, bo, %s FROM (SELECT role, %s AS ep,"
            " arraySort(groupArray(duration)) AS d, length(d) AS n, sum(duration) AS total, sum(bytes_in) AS bi,"
            " sum(bytes_out) AS bo FROM %s WHERE %s GROUP BY role, ep)" % (percentiles((50, 90, 99)), ep, t, where), p):
        row = {"role": rl, "endpoint": name, "count": n, "p50": p50, "p90": p90, "p99": p99, "max": mx,
               "total_ns": total, "cpu_ns": 0, "offcpu_ns": 0, "alloc_bytes": 0,
               "bytes_in": bin_ // n, "bytes_out": bout // n}
        if n >= units.EXACT_TOTAL:
            row["approximate"] = True  # the file reader's histogram (within 0.8%); exact here
        groups[h] = row
    if groups:
        w, _ = trace.where()
        reqs = (
            "SELECT proc_id, tid, rt AS t, toUInt8(0) AS o, ri, rde AS de, rdh AS dh, toUInt8(0) AS k,"
            " toInt64(0) AS per, toFloat64(0) AS wt FROM ("
            "  SELECT proc_id, tid, arraySort(x -> (x.1, x.2, x.3, x.4), groupArray((time, time + duration, role, %s)))"
            "   AS rs, arrayMap(x -> x.1, rs) AS starts, arrayMap(x -> x.2, rs) AS ends,"
            "   arrayMap(x -> toInt64(cityHash64(x.3, x.4)), rs) AS hs,"
            "   arrayMap((a, b) -> a - b, ends, arrayPopBack(arrayPushFront(ends, toInt64(0)))) AS des,"
            "   arrayMap((a, b) -> a - b, hs, arrayPopBack(arrayPushFront(hs, toInt64(0)))) AS dhs"
            "  FROM %s WHERE %s GROUP BY proc_id, tid)"
            " ARRAY JOIN starts AS rt, des AS rde, dhs AS rdh, arrayEnumerate(starts) AS ri" % (ep, t, where))
        samples = (
            "SELECT proc_id, tid, time AS t, toUInt8(1) AS o, toUInt32(0) AS ri, toInt64(0) AS de, toInt64(0) AS dh,"
            " kind AS k, toInt64(period) AS per, weight AS wt FROM %s WHERE %s AND kind IN (1, 2, 3) AND"
            " stack_id != 1 AND (proc_id, tid) %sIN (SELECT proc_id, tid FROM %s WHERE %s)" % (
                trace.target.table("samples"), w, trace.g, t, where))
        for h, cpu, off, alloc in trace.conn.execute(
                "SELECT toUInt64(ch), sumIf(tupleElement(e, 7), tupleElement(e, 6) = 1),"
                " sumIf(greatest(0, least(tupleElement(e, 1) + tupleElement(e, 7), ce) - tupleElement(e, 1)),"
                "  tupleElement(e, 6) = 2), sumIf(tupleElement(e, 8), tupleElement(e, 6) = 3) FROM ("
                "  SELECT arraySort(x -> (x.1, x.2, x.3), groupArray((t, o, ri, de, dh, k, per, wt))) AS ev,"
                "   arrayCumSum(arrayMap(x -> x.4, ev)) AS ces, arrayCumSum(arrayMap(x -> x.5, ev)) AS chs,"
                "   arrayCumSum(arrayMap(x -> toUInt32(x.2 = 0), ev)) AS nrs"
                "  FROM (%s UNION ALL %s) GROUP BY proc_id, tid)"
                " ARRAY JOIN ev AS e, ces AS ce, chs AS ch, nrs AS nr"
                " WHERE tupleElement(e, 2) = 1 AND nr > 0 AND tupleElement(e, 1) <= ce GROUP BY ch" % (reqs, samples),
                p):
            g = groups.get(h)
            if g is None:
                continue
            n = g["count"]
            g["cpu_ns"], g["offcpu_ns"], g["alloc_bytes"] = cpu // n, off // n, int(alloc // n)
    rows = list(groups.values())
    rows.sort(key=lambda x: (-x["total_ns"], x["role"], x["endpoint"]))
    return rows


def downstream_attribution(trace, endpoint=None, trace_id=None):
    """downstream.attribute's result over every server request (`requests
    --tree`). The server requests on threads that made no client exchange
    waited on nothing: summed per endpoint in the database (GROUP BY). The
    threads that made client exchanges are attributed by downstream.py
    itself, from their requests streamed out of the database (the overlap
    rules; memory: those threads' client exchanges, as from files)."""
    from . import downstream
    check_loaded_by_this_version(trace)
    w, p = trace.where()
    t = trace.target.table("requests")
    client_threads = {(pid, tid) for pid, tid in trace.conn.execute(
        "SELECT DISTINCT pid, tid FROM %s WHERE %s AND role = 'client'" % (t, w), p)}
    conns = {k: (v[1],) for k, v in latest_connections(trace).items()}
    att = downstream.attribute(trace, only=request_report.request_filter(endpoint, trace_id), conns=conns,
                               threads=client_threads)
    sw, sp = request_where(trace, "server", endpoint, trace_id)
    for ep, n, total in trace.conn.execute(
            "SELECT if(endpoint = '', %%(unnamed)s, endpoint) AS ep, count(), sum(duration) FROM %s WHERE %s AND"
            " (pid, tid) %sNOT IN (SELECT pid, tid FROM %s WHERE %s AND role = 'client') GROUP BY ep" % (
                t, sw, trace.g, t, w), dict(sp, unnamed=downstream.UNNAMED)):
        tree = att["endpoints"].get(ep)
        if tree is None:
            tree = att["endpoints"][ep] = downstream.EndpointTree()
        tree.requests += n
        tree.wall_ns += total
        tree.own_ns += total
    return att


def diff_groups(trace, role):
    """requests_diff.groups's (count, slow group, typical group): the
    percentiles that bound the groups computed in the database (nearest
    rank over the sorted durations), then only the members streamed out."""
    from . import requests_diff
    check_loaded_by_this_version(trace)
    where, p = request_where(trace, role)
    t = trace.target.table("requests")
    slow, typical = requests_diff.Group(), requests_diff.Group()
    n, slow_from, lo, hi = trace.conn.execute(
        "SELECT n, %s FROM (SELECT arraySort(groupArray(duration)) AS d, length(d) AS n FROM %s WHERE %s)" % (
            percentiles((requests_diff.SLOW_PCT,) + requests_diff.TYPICAL), t, where), p)[0]
    if n < 3:
        return n, slow, typical
    q = dict(p, slow_from=slow_from, lo=lo, hi=hi)
    for row in trace.conn.execute_iter(
            "SELECT %s FROM %s WHERE %s AND (duration >= %%(slow_from)s OR (duration >= %%(lo)s AND duration <= "
            "%%(hi)s)) ORDER BY start_mono, pid, conn" % (REQ_COLUMNS, t, where), q):
        r = as_request(row)
        (slow if r[5] >= slow_from else typical).add(r)
    return n, slow, typical


class Listing:
    """Stands where cmd_requests.analyse's spill of every request is (the
    --json listing): the selected requests in the spill's order, sorted by
    the database (ORDER BY) and streamed, as the spill's items."""

    def __init__(self, trace, where, p, role_ids):
        self.trace, self.where, self.p = trace, where, p
        self.role_ids = role_ids

    def sorted(self):
        for row in self.trace.conn.execute_iter(
                "SELECT %s FROM %s WHERE %s ORDER BY start_mono, pid, conn, tid, duration, bytes_in, bytes_out, role,"
                " endpoint, trace_id, parent_span, sampled, request_id" % (
                    REQ_COLUMNS, self.trace.target.table("requests"), self.where), self.p):
            r = as_request(row)
            rid = self.role_ids.setdefault(r[4], str(len(self.role_ids)))
            yield (r[0], r[1], r[2], r[3], r[5], r[6], r[7], json.dumps([rid, r[8], r[9]], separators=(",", ":")))

    def close(self):
        pass


def analyse(trace, role="all", slowest_n=5, endpoint=None, trace_id=None, listing=False):
    """cmd_requests.analyse's report, aggregated in ClickHouse; listing: the
    --json list of every request (Listing), streamed when written."""
    from . import calltree, downstream
    from .request_inference import PID, ROLE, TID
    check_loaded_by_this_version(trace)
    where, p = request_where(trace, role, endpoint, trace_id)
    summ, hist = request_stats(trace, where, p)
    slow, procs = slowest(trace, where, p, slowest_n) if slowest_n else ([], [])
    conns = latest_connections(trace)
    in_flight = concurrency(trace, slow, procs, role)
    served = [r for r in slow if r[ROLE] == "server"]
    slow_threads = {(r[PID], r[TID]) for r in served}
    clients = downstream.ClientCollector(slow_threads)
    for r in thread_requests(trace, slow_threads, "client"):
        clients.add(r)
    waited = {}
    if clients.clients:
        waited = downstream.attribute(trace, only=lambda r: False, keep=[downstream.request_key(r) for r in served],
                                      conns={k: (v[1],) for k, v in conns.items()}, threads=slow_threads,
                                      clients=clients.clients)["requests"]
    samples = window_samples(trace, slow, procs)
    details = []
    for r, n in zip(slow, in_flight):
        lo, hi = r[0], r[0] + r[5]
        trees = {}
        for kind in request_samples.KINDS:
            entries = request_samples.window_entries(kind, samples[kind].get((r[PID], r[TID])), lo, hi)
            if entries:
                trees[kind] = calltree.build(entries)
        d = request_report.request_dict(r, conns)
        d["tree"] = {k: request_report.tree_json(t) for k, t in trees.items()}
        d["concurrent"] = n
        if r[ROLE] == "server":
            d["downstream"] = waited.get(downstream.request_key(r)) or downstream.no_calls(r)
        details.append((d, trees))
    role_ids = {r: str(i) for i, r in enumerate(sorted(summ))}
    return {"stats": summ, "slowest": slow, "details": details, "histogram": hist, "summary": summ,
            "conns": conns, "listing": Listing(trace, where, p, role_ids) if listing else None,
            "role_ids": role_ids}
