"""fleet_incidents: the crashes, killed processes and incidents of a
ClickHouse fleet database (`info --clickhouse`, and `--incident N` with
--clickhouse; issue 42, docs/FLEET.md).

fleet_load.py puts every crash, crash.recovered and process.killed event in
the `crashes` table (its whole stack in `stacks`) and every trigger event in
the `incidents` table, field by field. Here they come back as the event
dicts the file reader's Trace.events gives (in its order: time, then the
segment order; for triggers the segment order, then file order), and the
code that lists them from files makes the same lists: crash_report.py for
crashes and killed processes, incidents.group for incidents. These are rare
events (a trigger is rate-limited by the recorder, a crash ends a process),
so they are read as rows, not aggregated.

`--incident N` picks the incident as the file reader does (incidents.pick),
then keeps the ledger rows of its process (host, pid) whose monotonic time
ranges overlap its span: FleetTrace.restrict narrows every query of the
report to those segments' load ids."""
from . import crash_report, fleet_db, incidents

CRASH_COLUMNS = ("type, pid, tid, mono, signal, signal_name, code, fault_addr, sender_pid, sender_uid, stack_id")
TRIGGER_COLUMNS = ("host, service, pid, load_id, mono, reason, detail, note, incident, before_ns, after_ns, merged,"
                   " suppressed, mode, tag")
_TYPED = list(fleet_db.CRASH_TYPES) + [fleet_db.TRIGGER_TYPE]


def _typed_tables(trace):
    """Whether the crashes and incidents tables hold the selection's events:
    False when no selected segment has such events (nothing to read); a
    FleetError when some were loaded before those tables (into `events`)."""
    if not trace.event_types() & set(_TYPED):
        return False
    if not fleet_db.ledger_has_column(trace.conn, "typed"):
        old = 1
    else:
        w, p = trace.where()
        old = trace.conn.execute(
            "SELECT count() FROM %s WHERE %s AND typed < %d AND arrayExists(x -> has(%%(typed)s, x), type_names)" % (
                trace.target.table("segments"), w, fleet_db.TYPED_VERSION), dict(p, typed=_TYPED))[0][0]
    if old:
        raise fleet_db.FleetError(
            "database %s holds crash or trigger events loaded by an older flightrec-dump, without the tables "
            "`info` and --incident read: load the segments again into a new database (docs/FLEET.md)"
            % trace.target.database)
    return True


def crash_events(trace):
    """{type: [event dict]} of crash, crash.recovered and process.killed, each
    list in the file reader's order (monotonic time, then segment order)."""
    out = {t: [] for t in fleet_db.CRASH_TYPES}
    if not _typed_tables(trace):
        return out
    w, p = trace.where()
    rows = trace.conn.execute(
        "SELECT %s FROM %s WHERE %s ORDER BY mono, service, pid, sequence, seg_name, ord" % (
            CRASH_COLUMNS, trace.target.table("crashes"), w), p)
    frames = trace.stack_frames({r[-1] for r in rows if r[-1] > 1})
    for kind, pid, tid, mono, sig, sig_name, code, fault, spid, suid, sid in rows:
        e = {"type": kind, "pid": pid, "time": mono, "tid": tid, "signal": sig, "signal_name": sig_name,
             "code": code}
        if kind == crash_report.CRASH_EVENT:
            e["fault_addr"] = fault
            e["stack"] = frames.get(sid, []) if sid > 1 else []
        elif kind == crash_report.KILLED_EVENT:
            e["sender_pid"], e["sender_uid"] = spid, suid
        out[kind].append(e)
    return out


def crashes_and_killed(trace):
    """(info's "crashes" list, its "killed" list) of the selection."""
    ev = crash_events(trace)
    return (crash_report.crashes(ev[crash_report.CRASH_EVENT], ev[crash_report.RECOVERED_EVENT]),
            crash_report.killed(ev[crash_report.KILLED_EVENT]))


def find(trace):
    """incidents.find's list for the selection."""
    if not _typed_tables(trace):
        return []
    w, p = trace.where()
    trace.shifts()  # read before the rows are streamed (one query at a time on a connection)

    def triggers():
        for (host, service, pid, load_id, mono, reason, detail, note, incident, before, after, merged, suppressed,
             mode, tag) in trace.conn.execute_iter(
                "SELECT %s FROM %s WHERE %s ORDER BY service, pid, sequence, seg_name, ord" % (
                    TRIGGER_COLUMNS, trace.target.table("incidents"), w), p):
            e = {"type": fleet_db.TRIGGER_TYPE, "pid": pid, "time": mono, "reason": reason, "detail": detail,
                 "note": note, "incident": incident, "before_ns": before, "after_ns": after, "merged": merged,
                 "suppressed": suppressed, "mode": mode, "tag": tag}
            yield {"host": host, "service": service, "pid": pid}, trace.shift_of(load_id), e
    return incidents.group(triggers())


def select(trace, number):
    """incidents.select for a fleet: keeps in the FleetTrace only the segments
    of incident `number`'s process that overlap its span. Returns the incident."""
    if not fleet_db.ledger_has_times(trace.conn):
        raise fleet_db.FleetError(
            "database %s was loaded by an older flightrec-dump, without the columns --incident reads: load the "
            "segments again into a new database (docs/FLEET.md)" % trace.target.database)
    inc = incidents.pick(find(trace), number)
    w, p = trace.where()
    kept = [r[0] for r in trace.conn.execute(
        "SELECT load_id FROM %s WHERE %s AND host = %%(host)s AND pid = %%(pid)s AND has_times AND"
        " mono_last >= %%(lo)s AND mono_first <= %%(hi)s" % (trace.target.table("segments"), w),
        dict(p, host=inc["host"], pid=inc["pid"], lo=inc["start_ns"], hi=inc["end_ns"]))]
    trace.restrict(kept)
    return inc
