"""fleet_profiles: the profiles of reports given --clickhouse URL (issue 42):
the same profiles.Profile the file reader builds (so top, tree, flame,
folded, pprof and diff format it unchanged), aggregated in ClickHouse.

The database does the work per event: samples are summed per (process,
thread, stack) with GROUP BY, the live heap is each address's last
allocation without a later free (argMax), the period is the mean weight
of a CPU sample or the most common allocation sample size. Python receives one row per distinct (process, thread, stack), the
frames of those stacks, and the thread and process starts (to name threads
as the file reader does), so its memory follows the distinct stacks, not the
events. Selections (--service/--host/--pid, --thread, --from/--to) resolve
as the file reader resolves them, then become query parameters (never SQL
text). Rows count only if the ledger names their load_id (fleet_load.py)."""
import json
import os

from . import fleet_db, profiles
from .fleet_sql import glob_regex, sum_map
from .profiles import Entry, Profile, ProfileError


# Commands whose reports use only call paths, never the thread or process of an entry.
PATH_ONLY_COMMANDS = frozenset(["top", "tree", "flame", "folded", "diff"])


class FleetSegment:
    """A ledger row, standing where a Trace holds a Segment (exit status, counts)."""
    bad_blocks = 0
    unusable_types = 0

    def __init__(self, host, service, pid, first, last):
        self.header = {"host": host, "service": service, "pid": pid}
        self.first, self.last = first, last


class FleetTrace:
    """The selected processes of a ClickHouse fleet database, in place of a Trace.
    merge_threads: the reports that only follow call paths (top, tree, flame,
    folded, diff) get one entry per distinct stack over all processes and
    threads (GROUP BY stack_id), which is what they compute anyway; pprof keeps
    one per (process, thread, stack) for its thread labels."""
    fleet = True
    merge_threads = False

    def __init__(self, target, chosen):
        self.target = target
        self.conn = fleet_db.Connection(target)
        self.errors = []
        self.notes = []
        self.skipped = 0
        self.g = "GLOBAL " if target.cluster else ""
        if not self.conn.execute("SELECT count() FROM system.tables WHERE database = %(db)s AND name = 'segments'",
                                 {"db": target.database})[0][0]:
            raise fleet_db.FleetError("no flightrec tables in database %s of %s: load segments first "
                                      "(flightrec-dump load --clickhouse URL PATH)" % (target.database, target.shown))
        self.live = "(SELECT argMin(load_id, loaded_ns) FROM %s GROUP BY seg_name, crc_head, crc_tail)" % (
            target.table("segments"))
        self.only = None  # restrict(): the load ids of the segments kept (--incident)
        self._processes(chosen, "load_id %sIN %s" % (self.g, self.live), {})
        self.ledger_times = fleet_db.ledger_has_times(self.conn)

    def _processes(self, chosen, where, p):
        """self.procs and self.segments (one per process) of the ledger rows where says."""
        rows = self.conn.execute(
            "SELECT host, service, pid, proc_id, min(first_ns), max(last_ns) FROM %s WHERE %s "
            "GROUP BY host, service, pid, proc_id ORDER BY service, pid, host" % (
                self.target.table("segments"), where), p)
        self.procs = {}
        self.segments = []
        for host, service, pid, pkey, first, last in rows:
            if chosen and not chosen.matches({"host": host, "service": service, "pid": pid}):
                self.skipped += 1
                continue
            self.procs[pkey] = (host, service, pid)
            self.segments.append(FleetSegment(host, service, pid, first, last))
        self._names = self._starts = None
        self._shifts = self._types = None

    def restrict(self, load_ids):
        """Keeps only the segments of these load ids (the ledger's): every
        query then reads their rows only, as the file reader keeps only some
        segments (--incident: incidents.select, fleet_incidents.select)."""
        w, p = self.where()
        self.only = tuple(sorted(set(load_ids))) or (0,)
        self._processes(None, w + " AND load_id IN %(only)s", dict(p, only=self.only))

    def where(self, alias=""):
        """The clause every query of this trace starts with, and its parameters."""
        w = "load_id %sIN %s AND proc_id IN %%(procs)s" % (self.g, self.live)
        p = {"procs": tuple(self.procs) or (0,)}
        if self.only is not None:
            w += " AND load_id IN %(only)s"
            p["only"] = self.only
        return w, p

    def batches(self, types=None):
        """Something per event type present (profiles.empty_message asks)."""
        kinds = {"cpu.sample": 1, "offcpu.sample": 2, "alloc.sample": 3}
        w, p = self.where()
        for t in types or ():
            if t not in kinds:
                if self.ledger_times and t in self.event_types():
                    yield t
                continue
            if t in kinds:
                p = dict(p, kind=kinds[t])
                n = self.conn.execute("SELECT count() FROM %s WHERE %s AND kind = %%(kind)s AND stack_id != 1" % (
                    self.target.table("samples"), w), p)[0][0]
                if n:
                    yield t

    # -- clocks, drops and event types (the ledger's per-segment columns; fleet_reports.py)

    def shifts(self):
        """{proc_id: {load_id: wall minus monotonic ns}} of the selected segments."""
        if self._shifts is None:
            w, p = self.where()
            self._shifts = {}
            self._shift_of = {}
            for pk, load_id, sh in self.conn.execute("SELECT proc_id, load_id, shift_ns FROM %s WHERE %s" % (
                    self.target.table("segments"), w), p):
                self._shifts.setdefault(pk, {})[load_id] = sh
                self._shift_of[load_id] = sh
        return self._shifts

    def shift_of(self, load_id):
        self.shifts()
        return self._shift_of.get(load_id, 0)

    def mono_range(self):
        """(first, last) event time on the monotonic clock, as Trace.time_range gives it."""
        w, p = self.where()
        first, last, n = self.conn.execute("SELECT min(mono_first), max(mono_last), count() FROM %s WHERE %s AND "
                                           "has_times" % (self.target.table("segments"), w), p)[0]
        return (first, last) if n else (None, None)

    def dropped(self):
        w, p = self.where()
        return sum_map(self.conn, self.target.table("segments"), "dropped_kinds", "dropped_counts", ("toUInt8(0)",),
                       w, p).get((0,), {})

    def event_types(self):
        if self._types is None:
            w, p = self.where()
            self._types = {r[0] for r in self.conn.execute("SELECT DISTINCT arrayJoin(type_names) FROM %s WHERE %s" % (
                self.target.table("segments"), w), p)}
        return self._types

    def threads(self):
        """Trace.threads's list (start/end on the monotonic clock), from the threads table."""
        w, p = self.where()
        out, live = [], {}
        extra = "extra" if fleet_db.ledger_has_column(self.conn, "typed") else "''"  # added with the ledger's typed
        # Trace.events's order: monotonic time, then (equal times) the segment
        # that starts first, then the trace's segment order (service, pid,
        # sequence, name); thread events are few, sorted here.
        seg_order = {load_id: (first, service, pid, seq, name) for load_id, first, service, pid, seq, name in
                     self.conn.execute("SELECT load_id, mono_first, service, pid, sequence, seg_name FROM %s WHERE %s"
                                       % (self.target.table("segments"), w), p)}
        rows = self.conn.execute("SELECT pid, tid, type, name, time, load_id, %s FROM %s WHERE %s" % (
            extra, self.target.table("threads"), w), p)
        rows = sorted(((r[4] - self.shift_of(r[5]),) + r for r in rows),
                      key=lambda r: (r[0], seg_order.get(r[6], ()), r[2]))
        for mono, pid, tid, kind, name, t, load_id, more in rows:
            key = (pid, tid)
            if kind == "thread.start":
                rec = {"pid": pid, "tid": tid, "name": name or "", "start": mono, "end": None}
                if more:
                    for k, v in json.loads(more).items():
                        rec.setdefault(k, v)
                live[key] = rec
                out.append(rec)
                continue
            rec = live.get(key)
            if rec is None:
                rec = live[key] = {"pid": pid, "tid": tid, "name": "", "start": None, "end": None}
                out.append(rec)
            if name:
                rec["name"] = name
            if kind == "thread.end":
                rec["end"] = mono
                del live[key]
        return out

    def time_range(self):
        if not self.segments:
            return None, None
        return min(s.first for s in self.segments), max(s.last for s in self.segments)

    # -- thread names and process starts, as the file reader finds them

    def thread_names(self):
        if self._names is None:
            w, p = self.where()
            rows = self.conn.execute(
                "SELECT pid, tid, type, name, time FROM %s WHERE %s ORDER BY time, pid, tid" % (
                    self.target.table("threads"), w), p)
            out, live = [], {}
            renames = []
            for pid, tid, kind, name, _t in rows:
                key = (pid, tid)
                if kind == "thread.name":
                    renames.append((key, name))
                if kind == "thread.start":
                    rec = {"pid": pid, "tid": tid, "name": name or ""}
                    live[key] = rec
                    out.append(rec)
                    continue
                rec = live.get(key)
                if rec is None:
                    rec = live[key] = {"pid": pid, "tid": tid, "name": ""}
                    out.append(rec)
                if name:
                    rec["name"] = name
                if kind == "thread.end":
                    del live[key]
            names = {}
            for rec in out:
                if rec["name"]:
                    lst = names.setdefault((rec["pid"], rec["tid"]), [])
                    if rec["name"] not in lst:
                        lst.append(rec["name"])
            for key, name in renames:
                if name and name not in names.setdefault(key, []):
                    names[key].insert(0, name)
            self._names = names
        return self._names

    def process_starts(self):
        if self._starts is None:
            w, p = self.where()
            rows = self.conn.execute("SELECT pid, exe FROM %s WHERE %s ORDER BY time, pid" % (
                self.target.table("processes"), w), p)
            self._starts = {}
            for pid, exe in rows:
                self._starts[pid] = {"pid": pid, "exe": exe}
        return self._starts

    # -- profiles

    def endpoint_samples(self, pattern, p):
        """SQL of the samples (the samples table's columns the profile queries
        read) taken on a thread while a request of an endpoint matching the
        shell pattern was in flight on it (profiles.endpoint_windows: either
        role, windows inclusive at both ends). Per thread, the requests' starts
        (+1) and ends (-1) and the samples go into one array sorted by time
        (a start, then samples, then an end at equal times); the running sum
        is the number of such requests in flight at each sample. Adds its
        parameter to p."""
        w, wp = self.where()
        p.update(wp)
        p["ep_glob"] = glob_regex(pattern)
        req = self.target.table("requests")
        match = "%s AND endpoint != '' AND match(endpoint, %%(ep_glob)s)" % w
        # (load_id is the column: an alias of that name would be what WHERE reads)
        zero = ("toUInt64(0) AS stack_id, toUInt32(0) AS samples, toFloat64(0) AS weight, toFloat64(0) AS objects,"
                " toUInt64(0) AS period, toUInt8(0) AS kind, toUInt64(0) AS address, load_id")
        return (
            "(SELECT proc_id, pid, tid, tupleElement(e, 1) AS time, tupleElement(e, 3) AS stack_id,"
            " tupleElement(e, 4) AS samples, tupleElement(e, 5) AS weight, tupleElement(e, 6) AS objects,"
            " tupleElement(e, 7) AS period, tupleElement(e, 8) AS kind, tupleElement(e, 9) AS address,"
            " tupleElement(e, 10) AS load_id FROM ("
            "  SELECT proc_id, any(pid) AS pid, tid, arraySort(x -> (x.1, x.2), groupArray((t, o, stack_id, samples,"
            "   weight, objects, period, kind, address, load_id))) AS ev,"
            "   arrayCumSum(arrayMap(x -> multiIf(x.2 = 0, 1, x.2 = 2, -1, 0), ev)) AS opens FROM ("
            "   SELECT proc_id, pid, tid, time AS t, toUInt8(0) AS o, %s FROM %s WHERE %s"
            "   UNION ALL SELECT proc_id, pid, tid, time + duration AS t, toUInt8(2) AS o, %s FROM %s WHERE %s"
            "   UNION ALL SELECT proc_id, pid, tid, time AS t, toUInt8(1) AS o, stack_id, samples, weight, objects,"
            "    period, kind, address, load_id FROM %s WHERE %s AND stack_id != 1 AND (proc_id, tid) %sIN"
            "    (SELECT proc_id, tid FROM %s WHERE %s))"
            "  GROUP BY proc_id, tid) ARRAY JOIN ev AS e, opens AS op WHERE tupleElement(e, 2) = 1 AND op > 0)" % (
                zero, req, match, zero, req, match, self.target.table("samples"), w, self.g, req, match))

    def build_profile(self, kind, thread=None, t_from=None, t_to=None, endpoint=None):
        if kind not in profiles.KINDS:
            raise ProfileError("unknown profile kind %r (kinds: %s)" % (kind, ", ".join(profiles.KINDS)))
        prof = Profile(kind)
        names = self.thread_names()
        procs = self.process_starts()
        selector = profiles.select_threads(thread, names, procs)
        bounds = self._bounds(t_from, t_to)
        w, p = self.where()
        cond = [w]
        if selector is not None:
            if selector[0] == "tid":
                cond.append("tid = %(tid)s")
                p["tid"] = selector[1]
            else:
                cond.append("bitOr(bitShiftLeft(toUInt64(pid), 32), tid) IN %(pt)s")
                p["pt"] = tuple((pid << 32) | tid for pid, tid in selector[1]) or (0,)
        if bounds is not None:
            cond.append("time >= %(lo)s AND time <= %(hi)s")
            p["lo"], p["hi"] = bounds
        samples = self.target.table("samples") if not endpoint else self.endpoint_samples(endpoint, p)
        p["kind"] = fleet_db.KIND_CODES["alloc" if kind == "live" else kind]
        where = " AND ".join(cond + ["kind = %(kind)s"])
        merged = self.merge_threads
        if kind != "live":
            keys = "0, toUInt32(0), stack_id" if merged else "proc_id, tid, stack_id"
            rows = self.conn.execute(
                "SELECT %s, sum(samples), sum(weight), sum(objects), min(time), max(time) "
                "FROM %s WHERE %s GROUP BY %s" % (keys, samples, where, keys), p)
        else:
            frees = self.target.table("frees")
            fcond = w + (" AND time <= %(hi)s" if bounds is not None else "")
            # Each address's last event (an allocation goes first at equal times);
            # an allocation that is last was never freed.
            keys = "0, toUInt32(0), s" if merged else "proc_id, t, s"
            rows = self.conn.execute(
                "SELECT " + keys + ", count(), sum(wt), sum(ob), min(tm), max(tm) FROM ("
                " SELECT proc_id, address, argMax(tid, k) AS t, argMax(stack_id, k) AS s, argMax(weight, k) AS wt,"
                " argMax(objects, k) AS ob, argMax(time, k) AS tm, argMax(a, k) AS isalloc FROM ("
                "  SELECT proc_id, address, tid, stack_id, weight, objects, time, toUInt8(1) AS a,"
                "   time * 2 AS k FROM %s WHERE %s AND stack_id != 1"
                "  UNION ALL SELECT proc_id, address, toUInt32(0) AS tid, toUInt64(0) AS stack_id, toFloat64(0) AS weight,"
                "   toFloat64(0) AS objects, time, toUInt8(0) AS a, time * 2 + 1 AS k FROM %s WHERE %s)"
                " GROUP BY proc_id, address) WHERE isalloc = 1 GROUP BY %s" % (samples, where, frees, fcond, keys),
                p)
        period = 0
        if kind == "cpu":  # the mean weight of an attributed sample (profiles.cpu_period)
            pr = self.conn.execute(
                "SELECT sum(period), count() FROM %s WHERE %s AND stack_id != 1" % (samples, where), p)
            if pr and pr[0][1]:
                period = int(pr[0][0]) // int(pr[0][1])
        elif kind != "offcpu":
            pr = self.conn.execute(
                "SELECT period, count() AS c FROM %s WHERE %s AND stack_id != 1 GROUP BY period "
                "ORDER BY c DESC, period LIMIT 1" % (samples, where), p)
            if pr:
                period = pr[0][0]
        frames = self.stack_frames({r[2] for r in rows if r[2] > 1})
        entries = []
        span = [None, None]
        thread_names = {}
        for pkey, tid, sid, n, wt, ob, t0, t1 in rows:
            host, service, pid = self.procs[pkey] if not merged else (None, None, None)
            tname = "" if merged else thread_names.get((pid, tid))
            if tname is None:
                tnames = names.get((pid, tid))
                if tnames:
                    tname = tnames[-1]
                elif tid == pid and pid in procs:
                    tname = os.path.basename(procs[pid].get("exe") or "")
                else:
                    tname = ""
                thread_names[(pid, tid)] = tname
            if sid == 1:
                fr = profiles.UNATTRIBUTED_FRAMES
            elif sid == 0:
                fr = profiles.NO_STACK
            else:
                fr = frames.get(sid) or [{"function": "<missing stack>", "file": "", "line": 0, "address": 0,
                                          "mapping": None, "inlined": False}]
            e = Entry(fr, pid, tid, tname, t0, process=None if merged else (host, service, pid))
            e.samples, e.weight, e.objects = n, (n * period if (kind == "cpu" and sid == 1) else wt), ob
            entries.append(e)
            span[0] = t0 if span[0] is None or t0 < span[0] else span[0]
            span[1] = t1 if span[1] is None or t1 > span[1] else span[1]
        if kind == "live":  # the span of the allocations taken, freed or not (as the file reader)
            span = list(self.conn.execute("SELECT min(time), max(time), count() FROM %s WHERE %s AND stack_id != 1" % (
                samples, where), p)[0][:2])
        entries.sort(key=lambda e: (e.first_time, e.process or (), e.tid or 0))
        prof.entries = entries
        prof.period = period
        prof.start_wall_ns, prof.end_wall_ns = span[0] or 0, span[1] or 0
        if procs:
            prof.main_path = next(iter(procs.values())).get("exe") or None
        return prof

    def _bounds(self, t_from, t_to):
        if t_from is None and t_to is None:
            return None
        for t in (t_from, t_to):  # bad specs fail first
            if t is not None and profiles.parse_iso(t) is None:
                profiles.parse_time(t)
        first, last = self.time_range()
        if first is None:
            return None
        return profiles.resolve_bounds(first, last, t_from, t_to)

    def stack_frames(self, ids):
        """{stack id: frames as Segment.frames gives them} of the given stack ids."""
        out = {}
        ids = sorted(ids)
        mappings = {}
        for i in range(0, len(ids), 5000):
            part = tuple(ids[i:i + 5000])
            for row in self.conn.execute(
                    "SELECT stack_id, frames.function, frames.file, frames.line, frames.module, frames.build_id,"
                    " frames.address, frames.map_start, frames.map_end, frames.map_offset, frames.mapped,"
                    " frames.inlined FROM %s WHERE stack_id IN %%(ids)s" % self.target.table("stacks"),
                    {"ids": part}):
                sid = row[0]
                if sid in out:
                    continue
                frames = []
                for fn, fl, line, mod, bid, addr, ms, me, mo, mapped, inl in zip(*row[1:]):
                    m = None
                    if mapped:
                        mk = (mod, bid, ms, me, mo)
                        m = mappings.get(mk)
                        if m is None:
                            m = mappings[mk] = {"path": mod, "build_id": bid, "start": ms, "end": me, "offset": mo}
                    frames.append({"function": fn, "file": fl, "line": line, "address": addr, "mapping": m,
                                   "inlined": bool(inl)})
                out[sid] = frames
        return out
