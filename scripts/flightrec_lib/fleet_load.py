"""fleet_load: loads segments into ClickHouse (`flightrec-dump load
--clickhouse URL PATH`, issue 42; schema in fleet_db.py and docs/FLEET.md).

Idempotent without coordination: every segment is keyed by its file name and
two CRC-32Cs (of its first and last 64 KiB; a sealed segment never changes).
Its rows are written under a fresh random load_id, and only once all of them
are in does a ledger row (table `segments`) name that load_id. Reports read
only rows whose load_id the ledger names (the first ledger row of a segment
wins), so a load killed halfway leaves rows nobody reads, and running the
command again loads the segment under a new load_id: no duplicates.

Streaming: rows are buffered up to BATCH_ROWS over all tables and inserted
in batches; a segment's ledger row goes in only after the batch holding its
last rows. Memory is the buffer plus one segment's decoded tables.

Parallel: --workers N forks N loaders over the list (segment i goes to worker
i mod N); --shard I/N keeps the segments whose name hashes to I, so N
machines split one prefix with no coordination. `.active` files are skipped
(not sealed yet); a segment that cannot be read is reported and skipped."""
import bisect
import hashlib
import itertools
import json
import operator
import os
import random
import sys
import time

from . import cli, downstream, fleet_db, fleet_native, names, profiles, progress, request_inference, segment, segment_info, socket_conns
from . import trace as trace_mod
from .crc32c import crc32c

BATCH_ROWS = 100000
STACK_CACHE = 200000  # stacks whose content ids the loader remembers
CRC_SPAN = 64 << 10
PROCESS_TYPES = {"process.start"}
THREAD_TYPES = {"thread.start", "thread.name", "thread.end"}
# A thread record's own keys (Trace.threads); a thread.start's other fields go in `extra`.
_THREAD_KEYS = ("pid", "tid", "name", "start", "end", "type", "time")
STACK_NONE, STACK_UNATTRIBUTED = 0, 1
UNATTRIBUTED_BY_NAME = {name: kind for kind, (name, _) in profiles.UNATTRIBUTED_EVENTS.items()}
SOCKET_TYPES = ("socket.open", "socket.close", "socket.op", "socket.exchange", "socket.gap", "socket.acceptq",
                "request")


class OneSegment:
    """One segment seen as a Trace, for the file reader's own per-trace code
    (requests, socket connections, dropped counts) run on it at load time."""

    def __init__(self, seg):
        self.segments = [seg]

    def batches(self, types=None):
        for b in self.segments[0].batches:
            if types is None or b.type.name in types:
                yield b

    def dropped(self):
        return trace_mod.Trace.dropped(self)


def request_key_id(pkey, conn, start):
    """req_id: the content id of a request (process, connection, start)."""
    h = hashlib.blake2b(b"%d:%d:%d" % (pkey, conn, start), digest_size=8).digest()
    return (int.from_bytes(h, "little") >> 1) | 1


def _request_ids(pkey, conns, starts):
    """request_key_id of each (connection, start), in one pass."""
    b2, frm = hashlib.blake2b, int.from_bytes
    return [(frm(b2(b"%d:%d:%d" % (pkey, c, s), digest_size=8).digest(), "little") >> 1) | 1
            for c, s in zip(conns, starts)]


def trace_hex(hi, lo):
    return "%016x%016x" % (hi, lo) if (hi or lo) else ""


def segment_key(path):
    """(name, crc of the first CRC_SPAN bytes, crc of the last, size)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        head = f.read(CRC_SPAN)
        if st.st_size > CRC_SPAN:
            f.seek(max(CRC_SPAN, st.st_size - CRC_SPAN))
            tail = f.read(CRC_SPAN)
        else:
            tail = b""
    return os.path.basename(path), crc32c(head), crc32c(tail), st.st_size


def _frame_key(f):
    m = f["mapping"]
    return (f["function"], f["file"], f["line"], f["address"], f["inlined"],
            None if m is None else (m["path"], m["build_id"], m["start"], m["end"], m["offset"]))


def stack_id(frames):
    """Content address of a stack (2 and up; 0 and 1 are reserved)."""
    h = hashlib.blake2b(repr([_frame_key(f) for f in frames]).encode("utf-8", "surrogateescape"),
                        digest_size=8).digest()
    return (int.from_bytes(h, "little") >> 1) | 2


def _text(v):
    if isinstance(v, list):  # a stack: its leaf function
        return v[0].get("function") or "" if v else ""
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return str(v)


class Loader:
    """Buffers rows column by column (clickhouse-driver's columnar inserts:
    a column of a batch goes in as one list), inserts every BATCH_ROWS."""

    def __init__(self, conn):
        self.conn = conn
        self.columns = {name: _column_names(cols) for name, cols, _, _, _ in fleet_db.TABLES}
        self.buf = {name: _new_columns(cols) for name, cols in self.columns.items()}
        self.nrows = 0
        self.pending_ledger = []  # ledger rows of the segments whose rows are in the buffer
        self.sent_ledger = []  # ... whose rows were sent, not yet known stored
        self.conns = {}
        self.stacks_sent = set()
        self.stack_ids = {}  # resolved locations of a stack -> its content id (_segment_stack)
        self.loc_numbers = {}  # a location's content -> its number in stack_ids' keys
        self.loaded = self.events = self.rows = 0
        self.failed = []
        self.windows = {}

    # -- buffering

    def _add(self, table, row):
        for col, v in zip(self.buf[table], row):
            col.append(v)
        self.nrows += 1

    def _add_rows(self, table, rows):
        """Many rows (tuples) at once: one transposition, one extend per column."""
        if not rows:
            return
        for col, vals in zip(self.buf[table], zip(*rows)):
            col.extend(list(vals))
        self.nrows += len(rows)

    def _extend(self, table, cols, n):
        """cols: per column a list of n values (the buffer keeps it), one
        value for all n rows (a tuple for an array column's one value), or a
        fleet_native.Sparse (one value but at a few rows)."""
        for col, v in zip(self.buf[table], cols):
            if isinstance(v, list):
                col.extend(v)
            elif type(v) is fleet_native.Sparse:
                col.extend_sparse(v)
            else:
                col.repeat(v, n)
        self.nrows += n

    def _conn(self, table):
        """The connection a table's inserts go through: one per table, so the
        server stores every table's batch while the loader decodes the next
        (an insert occupies its connection until the server has stored it)."""
        c = self.conns.get(table)
        if c is None:
            c = self.conns[table] = fleet_db.Connection(self.conn.target)
        return c

    def _wait(self):
        """Until the server has stored every insert sent; then the ledger rows
        of the segments whose rows those were can go in."""
        for c in self.conns.values():
            c.insert_wait()
        self.sent_ledger, ledger = [], self.sent_ledger
        return ledger

    def _send(self, final):
        """Sends the buffered rows, each table's on its own connection, without
        waiting for the server to store them (but for the last batch, final).
        Idempotency: a segment's ledger row is sent only once the server has
        stored all of that segment's rows: the batches sent before this one
        are waited for first, and their segments' ledger rows go in with this
        batch; this batch's go in with the next (or at the end)."""
        t = self.conn.target
        ledger = self._wait()  # the previous batch stored: its segments' ledger rows may go in
        for name, _, _, _, _ in fleet_db.TABLES:
            cols = self.buf[name]
            if not cols[0].n or name == "segments":
                continue
            self.buf[name] = _new_columns(cols)
            self._conn(name).insert_start("INSERT INTO %s (%s) VALUES" % (
                t.table(name), ", ".join(self.columns[name])), cols)
            self.rows += cols[0].n
            del cols
        if ledger:
            self._conn("segments").insert_start("INSERT INTO %s (%s) VALUES" % (
                t.table("segments"), ", ".join(self.columns["segments"])), _ledger_columns(ledger))
        self.sent_ledger, self.pending_ledger = self.pending_ledger, []
        self.nrows = 0
        if final:
            ledger = self._wait()
            if ledger:
                c = self._conn("segments")
                c.insert_start("INSERT INTO %s (%s) VALUES" % (
                    t.table("segments"), ", ".join(self.columns["segments"])), _ledger_columns(ledger))
                c.insert_wait()

    def flush(self):
        """Everything buffered into the database, the ledger last; returns
        once the server has stored it all."""
        self._send(final=True)

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns = {}

    # -- one segment

    def load(self, path, key):
        try:
            seg = segment.read_segment(path, follow=False)
        except (segment.SegmentError, OSError, MemoryError) as e:
            self.failed.append((path, str(e)))
            return False
        h = seg.header
        host, service, pid = h.get("host") or "", h.get("service") or "", h.get("pid") or 0
        pkey = fleet_db.proc_id(host, service, pid)
        load_id = random.getrandbits(63) | 1
        lo, hi = seg.time_range()
        first = seg.wall_ns(lo) if lo is not None else h["anchor_realtime_ns"]
        last = seg.wall_ns(hi) if hi is not None else first
        base = (load_id, pkey, host, service, pid)
        shift = h["anchor_realtime_ns"] - h["anchor_monotonic_ns"]
        problems = set()
        sids = {}
        one = OneSegment(seg)
        self.windows = self._requests_and_sockets(one, seg, base, shift, pkey)

        loc_keys = {}

        def sid_of(s):
            v = sids.get(s)
            if v is None:
                v = sids[s] = self._segment_stack(seg, s, loc_keys)
            return v

        nevents = 0
        for batch in seg.batches:
            name = batch.type.name
            ord0 = nevents
            nevents += batch.count
            if name in ("cpu.sample", "offcpu.sample", "alloc.sample"):
                self._samples(batch, base, shift, sid_of, sids, problems)
            elif name in UNATTRIBUTED_BY_NAME:
                self._unattributed(batch, base, shift, problems)
            elif name == "alloc.free":
                cols = profiles.select_columns(batch, ["time", "tid", "address"], problems)
                if cols is not None:
                    n = len(cols["time"])
                    self._extend("frees", list(base) + [[t + shift for t in cols["time"]], list(cols["tid"]),
                                                        list(cols["address"])], n)
            elif name in fleet_db.CRASH_TYPES or name == fleet_db.TRIGGER_TYPE:
                self._typed(seg, batch, base, shift, (h.get("sequence") or 0, key[0]), ord0)
            else:
                self._generic(seg, batch, base, shift)
            if self.nrows >= BATCH_ROWS:
                self._send(final=False)
        entry = segment_info.segment_entry(seg)
        entry["path"] = key[0]
        counts = seg.event_counts()
        dropped = one.dropped()
        self.pending_ledger.append((key[0], key[1], key[2], key[3], load_id, pkey, host, service,
                                    pid, h.get("sequence") or 0, seg.state, first, last, nevents,
                                    time.time_ns(), len(problems) + seg.bad_blocks,
                                    shift, lo if lo is not None else 0, hi if hi is not None else 0,
                                    0 if lo is None else 1, list(counts), list(counts.values()),
                                    list(dropped), list(dropped.values()), json.dumps(entry, default=str),
                                    fleet_db.TYPED_VERSION))
        for p, message in sorted(problems):
            cli.err_file(p, message)
        if seg.bad_blocks:
            cli.err_file(path, "%d damaged block(s) skipped; the rest was loaded" % seg.bad_blocks)
        self.loaded += 1
        self.events += nevents
        return True

    def _requests_and_sockets(self, one, seg, base, shift, pkey):
        """The segment's requests and socket-connection partials (the file
        reader's code run on this one segment) into their tables; returns the
        server requests' windows by thread, for the samples that fall in them."""
        if not any(b.type.name in SOCKET_TYPES for b in seg.batches):
            return {}
        R = request_inference
        reqs = list(R.iter_requests(one))
        n = len(reqs)
        wins = {}  # tid -> its server requests' (start, end, req_id, endpoint, trace_id)
        by_thread = {}  # tid -> ([server (start, end, req_id)], [client (start, end, row index)])
        if n:
            # Column by column (the rows' fields transposed once), as the rows were.
            cols = list(zip(*reqs))
            starts, tids, roles, durs = cols[R.START], cols[R.TID], cols[R.ROLE], cols[R.DURATION]
            rids = _request_ids(pkey, cols[R.CONN], starts)
            eps = [ep or "" for ep in cols[R.ENDPOINT]]
            trs = cols[R.TRACE]
            if any(trs):
                trace_cols = [[tr[0] if tr else "" for tr in trs], [tr[1] if tr else "" for tr in trs],
                              [1 if tr and tr[2] else 0 for tr in trs], [tr[3] if tr else "" for tr in trs],
                              [1 if tr else 0 for tr in trs]]
                tr0 = trace_cols[0]
            else:
                trace_cols = ["", "", 0, "", 0]
                tr0 = None
            for i, role in enumerate(roles):
                if role == "server":
                    start = starts[i]
                    end = start + durs[i]
                    by_thread.setdefault(tids[i], ([], []))[0].append((start, end, rids[i]))
                    wins.setdefault(tids[i], []).append((start, end, rids[i], eps[i],
                                                         tr0[i] if tr0 is not None else ""))
                elif role == "client":
                    start = starts[i]
                    by_thread.setdefault(tids[i], ([], []))[1].append((start, start + durs[i], i))
            # Downstream calls joined to their request (issue 45): each client
            # exchange's outcome by downstream.py's rule, over this segment's requests.
            parent_ids, outcomes = [0] * n, [""] * n
            for servers, calls in by_thread.values():
                for (_, _, i), (outcome, parent) in zip(calls, downstream.classify(servers, calls)):
                    parent_ids[i], outcomes[i] = parent or 0, outcome
            self._extend("requests", list(base) + [
                [t + shift for t in starts], list(starts), list(tids), list(cols[R.CONN]), list(roles), list(durs),
                list(cols[R.BYTES_IN]), list(cols[R.BYTES_OUT]), eps] + trace_cols + [rids, parent_ids, outcomes],
                n)
        conns, unattributed = socket_conns.collect(one, raw=True)
        n = lambda v: -1 if v is None else v  # noqa: E731
        first = seg.time_range()[0] or 0
        for c in conns.values():
            q = c["acceptq"] or {}
            t = c["open_ns"] if c["open_ns"] is not None else (c["first_ns"] if c["first_ns"] is not None else first)
            self._add("socket_conns", base + (
                t + shift, 0, c["id"], c["role"], c["family"] or "", c["sock_type"] or "", c["local"] or "",
                c["peer"] or "", c["listener"] or 0, n(c["fd"]), n(c["tid"]), n(c["_open_time"]), n(c["open_ns"]),
                n(c["close_ns"]), n(c["first_ns"]), n(c["last_ns"]), c["bytes_in"], c["bytes_out"], c["ops"],
                c["errors"], c["eagain"], list(c["ops_by_name"]), list(c["ops_by_name"].values()),
                list(c["errors_by_name"]), list(c["errors_by_name"].values()), list(c["_durations"]),
                c.get("exchanges", 0), 1 if "summarized_ops" in c else 0, c.get("summarized_ops", 0),
                1 if c["acceptq"] else 0, q.get("samples", 0), q.get("max_queued", 0), q.get("backlog", 0),
                q.get("full_samples", 0)))
        if unattributed["ops"] or unattributed["errors"]:
            self._add("socket_conns", base + (first + shift, 1, 0, "", "", "", "", "", 0, -1, -1, -1, -1, -1, -1, -1,
                                              0, 0, unattributed["ops"], unattributed["errors"], 0, [], [], [], [],
                                              [], 0, 0, 0, 0, 0, 0, 0, 0))
        return _request_windows(wins)

    def _in_requests(self, tids, times):
        """[request_id, endpoint, trace_id] columns of samples: the server
        request in flight on the sample's thread at its time (the latest begun
        of those, looking back at most 64), or 0/''/'' when none. A sample
        after every earlier request's end (reach: the latest end so far) is in
        none without a look back: most samples, on a thread that serves short
        requests now and then."""
        wins = self.windows
        if not wins or not any(t in wins for t in set(tids)):
            return [0, "", ""]
        n = len(tids)
        hits = []  # (sample index, its request window): few, most samples are in none
        right = bisect.bisect_right
        for k, (tid, t) in enumerate(zip(tids, times)):
            w = wins.get(tid)
            if w is None:
                continue
            starts, ws, reach = w
            i = right(starts, t) - 1
            if i < 0 or reach[i] < t:
                continue
            for j in range(i, max(-1, i - 64), -1):
                if ws[j][1] >= t:
                    hits.append((k, ws[j]))
                    break
        if not hits:
            return [0, "", ""]
        # columns of a default but at the hits (encoded as runs: no list of n
        # mostly empty strings to write)
        return [fleet_native.Sparse(default, n, [(k, w[f]) for k, w in hits])
                for f, default in ((2, 0), (3, ""), (4, ""))]

    def _samples(self, batch, base, shift, sid_of, sids, problems):
        kind = {"cpu.sample": 1, "offcpu.sample": 2, "alloc.sample": 3}[batch.type.name]
        if kind == 3:
            cols = profiles.select_columns(batch, ["time", "tid", "stack", "address", "size", "sample_bytes"],
                                           problems)
            if cols is None:
                return
            weigh = {}
            for sr in set(zip(cols["size"], cols["sample_bytes"])):
                weigh[sr] = profiles.alloc_weight(*sr)
            wc = list(map(weigh.__getitem__, zip(cols["size"], cols["sample_bytes"])))
            n = len(wc)
            self._extend("samples", list(base) + [
                [t + shift for t in cols["time"]], list(cols["tid"]), kind, 1, [w for w, _ in wc], [c for _, c in wc],
                _map_stacks(sid_of, sids, cols["stack"]), list(cols["sample_bytes"]), list(cols["address"]),
                list(cols["size"])] + self._in_requests(cols["tid"], cols["time"]), n)
            return
        field = "period_ns" if kind == 1 else "duration_ns"
        cols = profiles.select_columns(batch, ["time", "tid", "stack", field], problems)
        if cols is None:
            return
        weights = cols[field]
        if kind == 2 and "weight" in batch.type.field_names:
            wcol = profiles.select_columns(batch, ["weight"], problems)
            if wcol is not None and any(m != 1 for m in wcol["weight"]):
                weights = [d * max(m, 1) for d, m in zip(weights, wcol["weight"])]
        n = len(weights)
        # period: cpu's period; offcpu's own duration (before thinning weights),
        # which `requests --slowest` clips to a request's window as the file reader does.
        self._extend("samples", list(base) + [
            [t + shift for t in cols["time"]], list(cols["tid"]), kind, 1, list(map(float, weights)), 0.0,
            _map_stacks(sid_of, sids, cols["stack"]), list(cols[field]), 0, 0] +
            self._in_requests(cols["tid"], cols["time"]), n)

    def _unattributed(self, batch, base, shift, problems):
        kind = fleet_db.KIND_CODES[UNATTRIBUTED_BY_NAME[batch.type.name]]
        for t, tid, n, b, c in profiles.unattributed_rows(batch, problems, None, None, None):
            # cpu: weight 0 here, n x the profile's period at query time (as the file reader).
            self._add("samples", base + (t + shift, tid, kind, n, 0.0 if kind == 1 else float(b),
                                         float(c), STACK_UNATTRIBUTED, 0, 0, 0, 0, "", ""))

    def _segment_stack(self, seg, s, loc_keys):
        """The content id of the segment's stack s. A stack seen before (in
        any segment this loader read) is found by its content, the resolved
        locations (loc_keys: this segment's, each resolved once), without
        building its frames or hashing them again: most stacks of a service
        recur in every segment."""
        stacks, locations, mappings = seg.raw_tables()
        locs = stacks.get(s) if s else None
        if not locs:
            return self._stack(seg.frames(s))
        key = tuple(map(loc_keys.get, locs))
        if None in key:
            for lid in locs:
                if lid in loc_keys:
                    continue
                loc = locations.get(lid)
                if loc is None:
                    return self._stack(seg.frames(s))  # a missing location: frames say so
                m = mappings.get(loc[0]) if loc[0] else None
                content = (loc[1], None if m is None else (m[0], m[1], m[2], seg.string(m[3]), seg.string(m[4])),
                           tuple((seg.string(fn), seg.string(fl), line) for fn, fl, line in loc[2]))
                # a location's content as a small number, the same in every segment
                # this loader reads: a stack's key is then a tuple of ints (its
                # hash is not a walk through every frame's strings again)
                loc_keys[lid] = self.loc_numbers.setdefault(content, len(self.loc_numbers))
            key = tuple(map(loc_keys.__getitem__, locs))
        v = self.stack_ids.get(key)
        if v is None:
            v = self.stack_ids[key] = self._stack(seg.frames(s))
            if len(self.stack_ids) > STACK_CACHE or len(self.loc_numbers) > STACK_CACHE:
                # bounded: a fleet of very many distinct stacks only hashes them
                # again. The numbers go with the keys made of them (this
                # segment's too: its locations are numbered again on use).
                self.stack_ids.clear()
                self.loc_numbers.clear()
                loc_keys.clear()
        return v

    def _stack(self, frames):
        """The content id of a stack (frame dicts), its row sent once."""
        if not frames:
            return STACK_NONE
        v = stack_id(frames)
        if v not in self.stacks_sent:
            self.stacks_sent.add(v)
            self._add("stacks", _stack_row(v, frames))
        return v

    def _typed(self, seg, batch, base, shift, place, ord0):
        """crash, crash.recovered, process.killed (table `crashes`) and trigger
        (table `incidents`) events: every field the runtime writes, NULL where
        the segment's schema lacks it, and a crash's whole stack. Rare events:
        a dict each, as the file reader reads them."""
        cols = seg.resolved_columns(batch)
        if cols is None:
            return
        name = batch.type.name
        fields = segment.row_field_names(batch.type)
        for i, row in enumerate(zip(*cols)):
            e = dict(zip(fields, row))
            t = e.get("time")
            if not isinstance(t, int):
                continue
            if name == fleet_db.TRIGGER_TYPE:
                self._add("incidents", base + (t + shift, t, _s(e.get("reason")), _i(e.get("detail")),
                                               _s(e.get("note")), _i(e.get("incident")), _i(e.get("before_ns")),
                                               _i(e.get("after_ns")), _i(e.get("merged")), _i(e.get("suppressed")),
                                               _s(e.get("mode")), _s(e.get("tag"))) + place + (ord0 + i,))
                continue
            fa = e.get("fault_addr")
            stack = e.get("stack")
            self._add("crashes", base + (t + shift, t, name, _i(e.get("tid")), _i(e.get("signal")),
                                         _s(e.get("signal_name")), _i(e.get("code")),
                                         fa if isinstance(fa, int) and 0 <= fa < 1 << 64 else None,
                                         _i(e.get("sender_pid")), _i(e.get("sender_uid")),
                                         self._stack(stack if isinstance(stack, list) else None)) + place +
                      (ord0 + i,))

    def _generic(self, seg, batch, base, shift):
        cols = seg.resolved_columns(batch)
        if cols is None:
            return
        name = batch.type.name
        fields = segment.row_field_names(batch.type)
        ti = fields.index("time") if "time" in fields else None
        di = fields.index("tid") if "tid" in fields else None
        if name in THREAD_TYPES:
            ni = fields.index("name") if "name" in fields else None
            for row in zip(*cols):
                tid = row[di] if di is not None else 0
                if not isinstance(tid, int):
                    continue
                nm = row[ni] if ni is not None and isinstance(row[ni], str) else ""
                extra = ""
                if name == "thread.start":  # Trace.threads keeps its other int and text fields
                    extra = json.dumps({f: v for f, v in zip(fields, row) if f not in _THREAD_KEYS and
                                        isinstance(v, (int, str))})
                self._add("threads", base + ((row[ti] + shift) if ti is not None else 0, tid, name, nm, extra))
            return
        if name in PROCESS_TYPES:
            ei = fields.index("exe") if "exe" in fields else None
            for row in zip(*cols):
                self._add("processes", base + ((row[ti] + shift) if ti is not None else 0,
                                               str(row[ei]) if ei is not None else "",
                                               list(fields), [_text(v) for v in row]))
            return
        rest = [i for i, f in enumerate(fields) if f not in ("time", "tid")]
        rest_names = [fields[i] for i in rest]
        # An exchange's endpoint and W3C trace id (issue 41), in columns of their own.
        ei = fields.index("endpoint") if name == "socket.exchange" and "endpoint" in fields else None
        hi_i = fields.index("trace_hi") if name == "socket.exchange" and "trace_hi" in fields else None
        lo_i = fields.index("trace_lo") if hi_i is not None and "trace_lo" in fields else None
        # Column by column (one conversion per column, not per cell); each
        # row's values as the text _text gives.
        n = len(cols[0]) if cols else 0
        if not n:
            return
        texts = []
        for i in rest:
            ftype = batch.type.fields[i].type
            col = cols[i]
            if ftype == segment.STRING:
                texts.append(col)  # resolved to text already
            elif ftype in (segment.UINT, segment.SINT, segment.TIME):
                texts.append(list(map(str, col)))  # decoded integers
            else:
                texts.append(list(map(_text, col)))
        # each row's values a tuple (encoded as the lists were: an array column's elements)
        values = list(zip(*texts)) if texts else [()] * n
        if di is None:
            tids = 0
        elif batch.type.fields[di].type in (segment.UINT, segment.SINT, segment.TIME):  # decoded integers
            tids = list(map(operator.and_, cols[di], itertools.repeat(0xffffffff)))
        else:
            tids = [(v & 0xffffffff) if isinstance(v, int) else 0 for v in cols[di]]
        eps = [v if isinstance(v, str) else "" for v in cols[ei]] if ei is not None else ""
        trs = [trace_hex(h, lo) if isinstance(h, int) and isinstance(lo, int) else "" for h, lo in
               zip(cols[hi_i], cols[lo_i])] if lo_i is not None else ""
        self._extend("events", list(base) + [[t + shift for t in cols[ti]] if ti is not None else 0, tids, name,
                                             tuple(rest_names), values, eps, trs], n)


def _new_columns(cols):
    return [fleet_native.Column() for _ in cols]


def _ledger_columns(rows):
    out = _new_columns(rows[0])
    for col, vals in zip(out, zip(*rows)):
        col.extend(list(vals))
    return out


def _i(v):
    """An integer field for a Nullable(Int64) column (None: absent or out of range)."""
    return v if isinstance(v, int) and -(1 << 63) <= v < 1 << 63 else None


def _s(v):
    return v if isinstance(v, str) else None


def _request_windows(wins):
    """{tid: (starts, [(start, end, req_id, endpoint, trace_id)], reach)} of
    server requests ({tid: [window]}), by start; reach[i]: the latest end of
    requests 0..i."""
    out = {}
    for tid, ws in wins.items():
        ws.sort()
        out[tid] = ([w[0] for w in ws], ws, list(itertools.accumulate((w[1] for w in ws), max)))
    return out


def _map_stacks(sid_of, sids, column):
    """The content ids of a column of segment stack ids: each distinct id
    resolved once (sid_of), then a C-speed lookup per event."""
    for s in set(column).difference(sids):
        sid_of(s)
    return list(map(sids.__getitem__, column))


def _column_names(cols):
    out, depth, cur = [], 0, ""
    for ch in cols:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    names_ = []
    for c in out:
        c = c.strip()
        if c.split()[0] == "day":  # filled by the server
            continue
        n = c.split()[0]
        if c.split()[1].startswith("Nested"):
            inner = c[c.index("(") + 1:c.rindex(")")]
            names_.extend("%s.%s" % (n, p.strip().split()[0]) for p in inner.split(","))
        else:
            names_.append(n)
    return names_


def _stack_row(sid, frames):
    cols = ([], [], [], [], [], [], [], [], [], [], [], [])
    for f in frames:
        m = f["mapping"]
        fn = f["function"] or ""
        vals = (fn, names.simplify(fn) if fn else "", f["file"] or "", f["line"] or 0,
                (m["path"] or "") if m else "", (m["build_id"] or "") if m else "", f["address"] or 0,
                m["start"] if m else 0, m["end"] if m else 0, m["offset"] if m else 0, 1 if m else 0,
                1 if f["inlined"] else 0)
        for c, v in zip(cols, vals):
            c.append(v)
    return (sid, len(frames)) + cols


def candidates(paths, shard=None):
    """Segment files under the paths (sorted), .active left out; with
    shard=(I, N) only those whose name hashes to I."""
    found, skipped_active, missing = [], 0, []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    if f.endswith(".active"):
                        skipped_active += 1
                    elif segment.is_segment_name(f):
                        found.append(os.path.join(root, f))
        elif os.path.isfile(p):
            if p.endswith(".active"):
                skipped_active += 1
            else:
                found.append(p)
        else:
            missing.append(p)
    if shard is not None:
        i, n = shard
        found = [f for f in found if fleet_db.shard_of(os.path.basename(f), n) == i]
    return found, skipped_active, missing


def run_load(target, paths, workers=1, shard=None, quiet_if_none=False):
    """Loads; returns the exit status (0, or 1 when some input was bad).
    quiet_if_none: no summary line when there was nothing new (--watch rounds)."""
    found, active, missing = candidates(paths, shard)
    for p in missing:
        cli.err_file(p, "no such file or directory")
    conn = fleet_db.Connection(target)
    fleet_db.create_schema(conn)
    done = set(conn.execute("SELECT seg_name, crc_head, crc_tail FROM %s" % target.table("segments")))
    conn.close()
    todo = []
    bad = 0
    for p in found:
        try:
            k = segment_key(p)
        except OSError as e:
            cli.err_file(p, "cannot read: %s" % (e.strerror or e))
            bad += 1
            continue
        if k[:3] not in done:
            todo.append((p, k))
    skipped = len(found) - len(todo) - bad
    workers = max(1, min(workers, len(todo) or 1))
    started = time.monotonic()
    if workers == 1:
        stats = _work(target, todo)
    else:
        stats = _fork_workers(target, todo, workers)
    loaded, events, failed = stats
    took = time.monotonic() - started
    if quiet_if_none and not todo and not failed and not missing and not bad:
        return 0
    print("loaded %d segment%s (%d events) in %.1fs; %d already loaded%s%s" % (
        loaded, "" if loaded == 1 else "s", events, took, skipped,
        "; %d active skipped" % active if active else "",
        "; %d unreadable" % failed if failed else ""), flush=True)
    return 1 if (failed or missing or bad) else 0


def _work(target, todo):
    conn = fleet_db.Connection(target)
    loader = Loader(conn)
    shown = progress.Progress("loading segments", total=len(todo))
    try:
        for path, key in todo:
            loader.load(path, key)
            shown.advance(nbytes=key[3])
        loader.flush()
    finally:
        shown.done()
        loader.close()
        conn.close()
    for path, message in loader.failed:
        cli.err_file(path, message)
    return loader.loaded, loader.events, len(loader.failed)


def _fork_workers(target, todo, n):
    pids = []
    for w in range(n):
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            status = 3
            try:
                stats = _work(target, todo[w::n])
                os.write(wfd, ("%d %d %d" % stats).encode())
                status = 0
            except fleet_db.FleetError as e:
                cli.err(str(e))
                status = 1
            except BaseException as e:  # noqa: BLE001 - a worker must report and exit
                cli.err("load worker %d: %s: %s" % (w, type(e).__name__, e))
            finally:
                sys.stdout.flush()
                os._exit(status)
        os.close(wfd)
        pids.append((pid, r))
    loaded = events = failed = 0
    errors = 0
    for pid, r in pids:
        data = b""
        while True:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            data += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if data:
            a, b, c = map(int, data.split())
            loaded, events, failed = loaded + a, events + b, failed + c
        if status != 0:
            errors += 1
    if errors:
        raise fleet_db.FleetError("%d of %d load workers failed (see above); run the command again to resume" % (
            errors, n))
    return loaded, events, failed
