"""fleet_timeline: the `chrome` timeline of a ClickHouse fleet selection
(`chrome --clickhouse URL`, and the viewer's Timeline over `serve
--clickhouse`; issue 46).

No second timeline: the rows of the fleet tables become the same
chrome_trace.ChromeTrace.add calls the file reader's cmd_chrome.timeline
makes (type name, wall time, fields, stack labels), so the events, tracks,
names and slices are built by the one ChromeTrace. What comes from where:

* process and thread tracks: the ledger's processes and `processes` rows
  (named as from the files), FleetTrace.threads() for the thread names;
* cpu.sample / offcpu.sample / alloc.sample and the unattributed events
  (sampler.lost, offcpu.unattributed, alloc.unattributed): `samples`, with
  the fields the table keeps (an off-CPU sample's duration is its `period`
  column, the block's own duration: a slice as from the files); a cpu
  sample is named after its leaf frame (`stacks`);
* alloc.free: `frees`; thread.start/name/end: `threads`; process.start:
  `processes`; crashes and triggers: `crashes` and `incidents`;
* every other event type: `events` (fields from names/values, integers
  given back as numbers, so `duration_ns` makes a slice), but `request`
  events: requests come from `requests` (derived at load by the file
  reader's request_inference, recorded ones included), as cmd_chrome adds
  them.

Bounded: given window=(lo, hi) wall ns and limit=N, the database selects
the events overlapping the window (`time <= hi AND time + duration >=
lo`), each table `ORDER BY time, duration DESC LIMIT N`, and counts the
rest; Python merges those and keeps the first N: what the viewer draws
from the files (the first TIMELINE_EVENTS of the window in time order),
and how many more were not drawn. Without a limit (`chrome --clickhouse`)
every row is streamed into the ChromeTrace, which spills to disk as from
the files. What differs from the files: an event's args hold the columns
the database keeps (not every field of the segment's schema); a request
whose parts straddle two segments is derived per segment (docs/FLEET.md).
"""
import heapq
import os
import re

from . import chrome_trace, fleet_db, profiles, request_inference

# samples.kind -> event type, for sampled and unattributed (stack_id 1) rows
SAMPLE_TYPES = {1: "cpu.sample", 2: "offcpu.sample", 3: "alloc.sample"}
UNATTRIBUTED_TYPES = {fleet_db.KIND_CODES[k]: name for k, (name, _) in profiles.UNATTRIBUTED_EVENTS.items()}

_INT = re.compile(r"-?[0-9]+\Z")


def _value(text):
    return int(text) if _INT.match(text) else text


def _sources(trace):
    """[(name, SQL select list with `time` and `dur` first, table, extra condition)]."""
    return [
        ("samples", "time, if(kind = 2, if(stack_id = 1, toInt64(weight), toInt64(period)), toInt64(-1)) AS dur,"
                    " pid, tid, kind, stack_id, samples, weight, objects, period, address, size", "samples", ""),
        ("requests", "time, duration AS dur, pid, tid, conn, role, bytes_in, bytes_out, endpoint, trace_id,"
                     " parent_span, sampled, request_id, has_trace", "requests", ""),
        ("events", "time, if(has(names, 'duration_ns'), toInt64OrZero(values[indexOf(names, 'duration_ns')]),"
                   " toInt64(-1)) AS dur, pid, tid, type, names, values", "events", " AND type != 'request'"),
        ("frees", "time, toInt64(-1) AS dur, pid, tid, address", "frees", ""),
        ("threads", "time, toInt64(-1) AS dur, pid, tid, type, name", "threads", ""),
        ("processes", "time, toInt64(-1) AS dur, pid, exe, names, values", "processes", ""),
        ("crashes", "time, toInt64(-1) AS dur, pid, ifNull(tid, 0), type, signal, signal_name, code, fault_addr,"
                    " sender_pid, sender_uid", "crashes", ""),
        ("incidents", "time, toInt64(-1) AS dur, pid, reason, detail, note, incident, mode, tag", "incidents", ""),
    ]


def _present(trace):
    """The fleet tables this database has (an old database may lack crashes/incidents)."""
    return {r[0] for r in trace.conn.execute("SELECT name FROM system.tables WHERE database = %(db)s",
                                             {"db": trace.target.database})}


def _dur_sql(select):
    return select.split(",", 1)[1].rsplit(" AS dur", 1)[0]


def span(trace):
    """(first wall ns, last wall ns of an event's end) of the selection, from
    the database (None, None when it holds no event)."""
    w, p = trace.where()
    lo = hi = None
    have = _present(trace)
    for _, select, table, extra in _sources(trace):
        if table not in have:
            continue
        dur = _dur_sql(select)
        a, b, n = trace.conn.execute("SELECT min(time), max(time + greatest(%s, 0)), count() FROM %s WHERE %s%s" % (
            dur, trace.target.table(table), w, extra), p)[0]
        if n:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    return lo, hi


def timeline(trace, spill_dir=None, window=None, limit=None, origin=None):
    """(ChromeTrace, events left out): the fleet selection's timeline. window:
    (lo, hi) wall ns, only the events overlapping it; limit: at most that many
    events, the first in time order (longer first at equal times); origin:
    the wall time of ts 0 (default: the earliest event added)."""
    ct = chrome_trace.ChromeTrace(spill_dir=spill_dir, origin=origin)
    for host, service, pid in trace.procs.values():
        ct.process(pid, "%s (pid %d)" % (service or "process", pid))
    w, p = trace.where()
    have = _present(trace)
    if window is not None:
        p = dict(p, lo=int(window[0]), hi=int(window[1]))
    queries = []
    for name, select, table, extra in _sources(trace):
        if table not in have:
            continue
        where = w + extra
        if window is not None:
            where += " AND time <= %%(hi)s AND time + greatest(%s, 0) >= %%(lo)s" % _dur_sql(select)
        queries.append((name, "SELECT %s FROM %s WHERE %s" % (select, trace.target.table(table), where),
                        "SELECT count() FROM %s WHERE %s" % (trace.target.table(table), where)))
    threads = trace.threads()
    left_out = 0
    if limit is None:
        # Every row, streamed (one query at a time on the connection): the
        # samples' stack labels first, from their distinct stacks.
        labels = _labels(trace, [r[0] for r in trace.conn.execute(
            "SELECT DISTINCT stack_id FROM %s WHERE %s AND stack_id > 1" % (
                trace.target.table("samples"), w), p)])
        _names(ct, trace, threads)
        for name, sql, _ in queries:
            for row in trace.conn.execute_iter(sql, p):
                _add(ct, name, row, labels)
        return ct, 0
    chosen = []
    total = 0
    for name, sql, count in queries:
        rows = trace.conn.execute(sql + " ORDER BY time, dur DESC LIMIT %d" % limit, p)
        chosen.append([(r[0], -r[1], name, r) for r in rows])
        total += trace.conn.execute(count, p)[0][0] if len(rows) == limit else len(rows)
    kept = list(heapq.merge(*chosen, key=lambda x: (x[0], x[1])))[:limit]
    left_out = total - len(kept)
    labels = _labels(trace, [r[5] for _, _, name, r in kept if name == "samples" and r[5] > 1])
    _names(ct, trace, threads)
    for _, _, name, row in kept:
        _add(ct, name, row, labels)
    return ct, left_out


def _labels(trace, stack_ids):
    """{stack id: leaf-first frame labels} (as cmd_chrome labels a stack)."""
    frames = trace.stack_frames(set(stack_ids))
    return {sid: [profiles.frame_label(f) for f in fr] for sid, fr in frames.items()}


def _names(ct, trace, threads):
    """Process and thread names as cmd_chrome.timeline gives them (a
    process.start's service, else its executable's name)."""
    w, p = trace.where()
    for pid, exe, names, values in trace.conn.execute(
            "SELECT pid, exe, names, values FROM %s WHERE %s ORDER BY time, pid" % (
                trace.target.table("processes"), w), p):
        service = dict(zip(names, values)).get("service")
        ct.process(pid, "%s (pid %s)" % (service or os.path.basename(exe or "") or "process", pid))
        ct.thread(pid, pid, os.path.basename(exe or ""))
    for rec in threads:
        ct.thread(rec["pid"], rec["tid"], rec.get("name"))


def _fields(names, values):
    return {k: _value(v) for k, v in zip(names, values)}


def _add(ct, source, row, labels):
    t, dur, pid = row[0], row[1], row[2]
    if source == "samples":
        tid, kind, sid, n, weight, objects, period, address, size = row[3:]
        if sid == 1:
            name = UNATTRIBUTED_TYPES[kind]
            fields = {"tid": tid, "samples": n} if kind != 1 else {"tid": tid, "count": n}
            if kind == 2:
                fields["duration_ns"] = dur
            elif kind == 3:
                fields.update(bytes=weight, count=objects)
            ct.add(pid, name, t, fields)
            return
        if kind == 1:
            fields = {"tid": tid, "period_ns": period}
        elif kind == 2:
            fields = {"tid": tid, "duration_ns": dur}
        else:
            fields = {"tid": tid, "address": address, "size": size, "sample_bytes": period}
        ct.add(pid, SAMPLE_TYPES[kind], t, fields, labels.get(sid) if sid > 1 else None)
    elif source == "requests":
        tid, conn, role, bin_, bout, endpoint, trace_id, parent, sampled, request_id, has_trace = row[3:]
        fields = {"time": t, "tid": tid, "conn": conn, "duration_ns": dur, "bytes_in": bin_, "bytes_out": bout,
                  "role": role}
        if endpoint:
            fields["endpoint"] = endpoint
        if has_trace:
            fields.update(request_inference.trace_dict((trace_id, parent, bool(sampled), request_id)))
        ct.add(pid, "request", t, fields)
    elif source == "events":
        tid, type_name, names, values = row[3:]
        fields = _fields(names, values)
        if tid:
            fields["tid"] = tid
        ct.add(pid, type_name, t, fields)
    elif source == "frees":
        ct.add(pid, "alloc.free", t, {"tid": row[3], "address": row[4]})
    elif source == "threads":
        tid, type_name, name = row[3:]
        ct.add(pid, type_name, t, {"tid": tid, "name": name} if name else {"tid": tid})
    elif source == "processes":
        exe, names, values = row[3:]
        fields = _fields(names, values)
        fields.pop("tid", None)
        ct.add(pid, "process.start", t, fields)
    elif source == "crashes":
        tid, type_name, sig, sig_name, code, fault, spid, suid = row[3:]
        fields = {k: v for k, v in (("tid", tid), ("signal", sig), ("signal_name", sig_name), ("code", code),
                                     ("fault_addr", fault), ("sender_pid", spid), ("sender_uid", suid))
                  if v is not None}
        ct.add(pid, type_name, t, fields)
    elif source == "incidents":
        reason, detail, note, incident, mode, tag = row[3:]
        fields = {k: v for k, v in (("reason", reason), ("detail", detail), ("note", note), ("incident", incident),
                                     ("mode", mode), ("tag", tag)) if v is not None}
        ct.add(pid, fleet_db.TRIGGER_TYPE, t, fields)
