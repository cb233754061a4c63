"""request_inference: request/response exchanges derived from the recorded
socket operations (docs/REQUESTS.md has the heuristic and its limits).

The recorder writes every data call (`socket.op`) and each connection's role
(`socket.open`); the exchanges are derived here, when the trace is read,
rather than by the recorder's flush thread inside the service: that keeps a
third event per request (and its state machine) off the host's CPU.

Traces written by recorders that emitted `request` events themselves are
still read as they are (iter_recorded); a process whose segments hold
none gets its requests derived (iter_derived).

Rules, per connection, over its data calls in order of completion:
 * Server side (accepted connections): a request starts when a receive
   returns data after the previous response (or after accept), at the end of
   that receive (a blocking receive's wait is idle time), and ends at the end
   of the last send before the next receive, EOF or the end of the trace.
 * Client side (connected sockets), the mirror: a request starts at the start
   of the first send after the previous response and ends at the end of the
   last receive before the next send, EOF or the end of the trace.
 * Only exchanges with bytes in both directions are requests: data in the
   "wrong" direction before any request and a request never answered are not.
 * tid is the thread that sent the response (server) or the request
   (client): where the work for it most likely ran.
Failed calls, zero-byte results and MSG_PEEK receives move no data. A
zero-byte receive on a stream socket is EOF; a server's successful shutdown()
ends its current exchange.

Recorders since issue 39 keep that state machine in the hot path itself and
write one `socket.exchange` per exchange (preload/sockets/socket_exchange.h,
format/SPEC.md): a request is then read off it (iter_exchanges) — an
exchange (its parts joined: flags PARTIAL/CONT) with bytes in both
directions, from the begin of its ask run to the end of its answer run. A
connection with exchanges takes its requests from them alone; its few
socket.op data calls (made while another thread held the descriptor's
accounting) count in the totals, not as requests.
"""

import bisect
import operator

SEND_OPS = frozenset(("send", "sendto", "sendmsg", "sendmmsg", "write", "writev", "sendfile", "splice_out"))
RECV_OPS = frozenset(("recv", "recvfrom", "recvmsg", "recvmmsg", "read", "readv", "splice_in"))
ROLES = ("server", "client")


class Exchange:
    """The state machine of one connection. on_data and finish return a
    finished request as (start_ns, end_ns, bytes_in, bytes_out, tid), or None."""

    __slots__ = ("server", "phase", "start", "end", "bytes_in", "bytes_out", "tid")
    IDLE, ASK, ANSWER = 0, 1, 2

    def __init__(self, server):
        self.server = server
        self.phase = self.IDLE
        self.start = self.end = self.bytes_in = self.bytes_out = self.tid = 0

    def _done(self):
        return (self.start, self.end, self.bytes_in, self.bytes_out, self.tid)

    def on_data(self, is_send, nbytes, start_ns, end_ns, tid):
        if nbytes <= 0:
            return None
        # "Ask" is what the request side does: the server receives it, the client sends it.
        ask = is_send != self.server
        done = None
        if ask:
            if self.phase == self.ANSWER:  # a new question: the previous exchange is complete
                done = self._done()
                self.phase = self.IDLE
            if self.phase == self.IDLE:
                # Server: the request exists once its first bytes have arrived.
                # Client: the latency the client sees starts when it begins sending.
                self.start = end_ns if self.server else start_ns
                self.end = end_ns
                self.bytes_in = self.bytes_out = 0
                self.tid = 0 if self.server else tid
                self.phase = self.ASK
        else:
            if self.phase == self.IDLE:
                return None  # unsolicited (a greeting, a push): no request
            self.phase = self.ANSWER
            self.end = end_ns
            if self.server:
                self.tid = tid
        if is_send:
            self.bytes_out += nbytes
        else:
            self.bytes_in += nbytes
        if self.end < self.start:
            self.end = self.start
        return done

    def finish(self):
        """EOF, shutdown or the end of the trace: the pending request if it has its answer."""
        done = self._done() if self.phase == self.ANSWER else None
        self.phase = self.IDLE
        return done


# A request as the functions below yield it: a tuple, in this order (a
# trace may hold millions; as_dict gives the form reports print).
# ENDPOINT: the name the recorder gave its question (issue 41: "GET
# /users/:id", "HSET", "Query SELECT"), "" when none (older recorders,
# FLIGHTREC_ENDPOINTS=off, requests derived from socket.op). TRACE: with
# FLIGHTREC_TRACE_CONTEXT=1, (trace id hex, parent span hex, sampled,
# request id) of its traceparent / x-request-id, else None.
START, PID, CONN, TID, ROLE, DURATION, BYTES_IN, BYTES_OUT, ENDPOINT, TRACE = range(10)


def as_dict(r):
    d = {"connection": r[CONN], "pid": r[PID], "tid": r[TID], "role": r[ROLE], "start_ns": r[START],
         "duration_ns": r[DURATION], "bytes_in": r[BYTES_IN], "bytes_out": r[BYTES_OUT]}
    if len(r) > ENDPOINT and r[ENDPOINT]:
        d["endpoint"] = r[ENDPOINT]
    if len(r) > TRACE and r[TRACE]:
        d["trace"] = trace_dict(r[TRACE])
    return d


def trace_dict(t):
    out = {}
    if t[0]:
        out.update({"trace_id": t[0], "parent_span_id": t[1], "sampled": t[2]})
    if t[3]:
        out["request_id"] = t[3]
    return out


def trace_of(hi, lo, span, flags, request_id):
    """The TRACE member from socket.exchange's columns (None when absent)."""
    if not (hi or lo) and not request_id:
        return None
    tid = "%016x%016x" % (hi, lo) if (hi or lo) else ""
    return (tid, "%016x" % span if tid else "", bool(flags & 1) if tid else False, request_id or "")


def recorded_pids(trace):
    """The processes whose segments hold `request` events (older recorders)."""
    return {b.segment.pid for b in trace.batches({"request"})}


def iter_recorded(trace):
    """The requests of `request` events (traces of older recorders)."""
    for b in trace.batches({"request"}):
        seg = b.segment
        cols = b.columns_named(["time", "tid", "conn", "duration_ns", "bytes_in", "bytes_out", "role"])
        if cols is None:
            continue
        roles = {sid: seg.string(sid) for sid in set(cols[6])}
        pid = seg.pid
        for t, tid, conn, dur, bin_, bout, rid in zip(*cols):
            yield (t, pid, conn, tid, roles[rid], dur, bin_, bout, "", None)


def latest_connections(trace, fields, pids=None):
    """{(pid, conn): (value, ...)}: the given string fields of each connection's
    latest socket.open (a connection is described again when it changes and
    at the start of every segment)."""
    latest = {}
    for b in trace.batches({"socket.open"}):
        if pids is not None and b.segment.pid not in pids:
            continue
        cols = b.columns_named(["time", "conn"] + list(fields))
        if cols is None:
            continue
        s = b.segment.string
        for t, conn, *values in zip(*cols):
            key = (b.segment.pid, conn)
            if key not in latest or latest[key][0] <= t:
                latest[key] = (t, tuple(s(v) for v in values))
    return {k: v[1] for k, v in latest.items()}


# What an op name means to the state machine.
# A MSG_PEEK receive ("recv.peek", ...) moves no data (its bytes stay
# queued), but its zero result is EOF all the same.
_SEND, _RECV, _PEEK, _SHUTDOWN = 1, 2, 3, 4


def _op_class(name):
    if not isinstance(name, str):
        return 0  # a string id the segment does not define (damage): not a call we know
    if name in SEND_OPS:
        return _SEND
    if name in RECV_OPS:
        return _RECV
    if name.endswith(".peek") and name[:-5] in RECV_OPS:
        return _PEEK
    if name == "shutdown":
        return _SHUTDOWN
    return 0


_END = operator.itemgetter(0)


def iter_derived(trace, pids):
    """The requests inferred from the socket.op events of the given pids, a
    process at a time, in no particular order.

    Memory follows a block, not the trace (issue 29): each process's blocks
    are read in order, and a call is fed to its connection's state machine
    once no later call can complete before it. A block holds what one flush
    drained from one or more threads' rings, and a call is recorded when it
    returns, so a thread preempted between its return and its record lands
    in a later block behind calls that completed after it. Everything that
    completed before the earliest call of the block just read is safe to
    feed (the later blocks hold what was recorded after that block's drain);
    the rest waits for the next block. Only connections in the middle of an
    exchange keep state."""
    kinds = {k: v for k, v in latest_connections(trace, ("role", "sock_type"), pids).items() if v[0] in ROLES}
    wanted = {}  # pid -> {conn: (server, stream)}: listeners and unconnected sockets have no role
    for (pid, conn), (role, stype) in kinds.items():
        wanted.setdefault(pid, {})[conn] = (role == "server", stype != "dgram")
    del kinds
    segments = {}
    for seg in trace.segments:
        if seg.pid in wanted:
            segments.setdefault(seg.pid, []).append(seg)
    for pid, segs in segments.items():
        conns = wanted[pid]
        exchanged = _exchange_conns(segs, conns)
        if exchanged:
            yield from _derive_exchanges(pid, segs, conns)
            conns = {c: v for c, v in conns.items() if c not in exchanged}
        yield from _derive_process(pid, segs, conns)


def _block_calls(b, conns):
    """[(end, start, class, bytes, tid, conn)] of one socket.op block's data
    calls on the given connections, in file order."""
    seg = b.segment
    cols = b.columns_named(["time", "tid", "conn", "op", "bytes", "duration_ns"])
    if cols is None:
        return []
    classes = {sid: _op_class(seg.string(sid)) for sid in set(cols[3])}
    used = {sid for sid, c in classes.items() if c}
    if not used:
        return []
    # The hot loop of `requests` on a big trace: two membership tests per call.
    return [(t + dur, t, classes[op], nbytes, tid, conn)
            for t, tid, conn, op, nbytes, dur in zip(*cols) if op in used and conn in conns]


# socket.exchange flags (preload/sockets/socket_exchange.h).
EX_PARTIAL, EX_CONT = 2, 4


def _exchange_conns(segs, conns):
    """The connections of these segments that have socket.exchange events."""
    seen = set()
    for seg in segs:
        for b in seg.batches:
            if b.type.name != "socket.exchange":
                continue
            cols = b.columns_named(["conn"])
            if cols is not None:
                seen.update(c for c in set(cols[0]) if c in conns)
    return seen


def _derive_exchanges(pid, segs, conns):
    """The requests of the socket.exchange events of one process: the parts
    of one exchange (PARTIAL, then CONT) are joined; a joined exchange with
    bytes in both directions is a request."""
    open_groups = {}  # conn -> [start, end, bytes_in, bytes_out, tid, endpoint, trace] of an exchange whose last part was PARTIAL

    def done(conn, g):
        server = conns[conn][0]
        ask, answer = (g[2], g[3]) if server else (g[3], g[2])
        if ask > 0 and answer > 0:
            return (g[0], pid, conn, g[4], "server" if server else "client", max(0, g[1] - g[0]), g[2], g[3],
                    g[5], g[6])
        return None

    for seg in segs:
        for b in seg.batches:
            if b.type.name != "socket.exchange":
                continue
            cols = b.columns_named(["time", "tid", "conn", "flags", "bytes_in", "bytes_out", "end"])
            if cols is None:
                continue
            # Endpoint and trace context (issue 41): absent in older segments.
            named = b.columns_named(["endpoint"])
            names = None
            if named is not None:
                strings = {sid: seg.string(sid) for sid in set(named[0])}
                names = [strings[sid] if isinstance(strings[sid], str) else "" for sid in named[0]]
            traced = b.columns_named(["trace_hi", "trace_lo", "parent_span", "trace_flags", "request_id"])
            traces = None
            if traced is not None and (any(traced[0]) or any(traced[1]) or any(traced[4])):
                traces = [trace_of(hi, lo, sp, fl, seg.string(rid) if rid else "")
                          for hi, lo, sp, fl, rid in zip(*traced)]
            for i, (t, tid, conn, flags, bin_, bout, end) in enumerate(zip(*cols)):
                if conn not in conns:
                    continue
                server = conns[conn][0]
                if not flags & (EX_PARTIAL | EX_CONT) and conn not in open_groups:
                    # A whole exchange, no part before it open (most of them):
                    # what done() makes of it, without the group list.
                    if (bin_ > 0 and bout > 0):
                        yield (t, pid, conn, tid, "server" if server else "client", max(0, end - t), bin_, bout,
                               names[i] if names else "", traces[i] if traces else None)
                    continue
                g = open_groups.pop(conn, None)
                if g is not None and not flags & EX_CONT:
                    r = done(conn, g)  # its continuation never came: it ended with its last part
                    if r:
                        yield r
                    g = None
                if g is None:
                    g = [t, end, bin_, bout, tid, names[i] if names else "", traces[i] if traces else None]
                else:
                    # A part that moved no data (a would-block or peek on a
                    # pooled connection, counted until the next question)
                    # carries only the time it was written: no later end.
                    if bin_ or bout:
                        g[1] = max(g[1], end)
                    g[2] += bin_
                    g[3] += bout
                    if server and bout and tid:
                        g[4] = tid
                if flags & EX_PARTIAL:
                    open_groups[conn] = g
                    continue
                r = done(conn, g)
                if r:
                    yield r
    for conn, g in open_groups.items():
        r = done(conn, g)  # the end of the trace
        if r:
            yield r


def _derive_process(pid, segs, conns):
    exchanges = {}  # conn -> Exchange, while an exchange is under way
    held = []       # calls not fed yet, in file order

    def feed(calls):
        for end, start, c, nbytes, tid, conn in calls:
            server, stream = conns[conn]
            ex = exchanges.get(conn)
            if ex is None:
                ex = exchanges[conn] = Exchange(server)
            r = None
            if c == _SHUTDOWN:
                if server and nbytes == 0:
                    r = ex.finish()  # a server that shuts down has answered
            elif nbytes > 0:
                if c != _PEEK:
                    r = ex.on_data(c == _SEND, nbytes, start, end, tid)
            elif nbytes == 0 and c != _SEND and stream:
                r = ex.finish()  # EOF: the peer will ask nothing more
            if ex.phase == Exchange.IDLE:
                del exchanges[conn]  # an idle machine is a new one: keep none
            if r:
                yield (r[0], pid, conn, r[4], "server" if server else "client", r[1] - r[0], r[2], r[3], "", None)

    for seg in segs:
        for b in seg.batches:
            if b.type.name != "socket.op":
                continue
            new = _block_calls(b, conns)
            if not new:
                continue
            cut = min(new, key=_END)[0]
            pool = held + new if held else new
            pool.sort(key=_END)  # completion order; stable: file order (each thread's call order) on ties
            n = bisect.bisect_left(pool, cut, key=_END)
            held = pool[n:]
            yield from feed(pool[:n])
    yield from feed(held)
    for conn, ex in exchanges.items():
        r = ex.finish()  # the end of the trace
        if r:
            yield (r[0], pid, conn, r[4], "server" if conns[conn][0] else "client", r[1] - r[0], r[2], r[3], "",
                   None)


def iter_unrecorded(trace, recorded=None):
    """The requests derived for the processes whose segments hold no
    `request` events (every process, for traces of current recorders)."""
    if recorded is None:
        recorded = recorded_pids(trace)
    pids = {seg.pid for seg in trace.segments} - set(recorded)
    return iter_derived(trace, pids) if pids else iter(())


def iter_requests(trace, role="all", pids=None):
    """Every request of the trace (of the given pids), in no particular order:
    recorded where a process's segments hold `request` events, derived from
    socket.op otherwise. Sort key for reports: (START, PID, CONN).
    A ClickHouse fleet (--clickhouse): the requests loaded (fleet_requests.py)."""
    if getattr(trace, "fleet", False):
        from . import fleet_requests
        yield from fleet_requests.iter_requests(trace, role, pids)
        return
    recorded = recorded_pids(trace)
    if pids is not None:
        recorded &= set(pids)
    for r in iter_recorded(trace):
        if (pids is None or r[PID] in pids) and (role == "all" or r[ROLE] == role):
            yield r
    todo = {seg.pid for seg in trace.segments} - recorded
    if pids is not None:
        todo &= set(pids)
    for r in iter_derived(trace, todo):
        if role == "all" or r[ROLE] == role:
            yield r
