"""request_inference: request/response exchanges derived from the recorded
socket operations (docs/REQUESTS.md has the heuristic and its limits).

The recorder writes every data call (`socket.op`) and each connection's role
(`socket.open`); the exchanges are derived here, when the trace is read,
rather than by the recorder's flush thread inside the service: that keeps a
third event per request (and its state machine) off the host's CPU.

Traces written by recorders that emitted `request` events themselves are
still read as they are (recorded_requests); a process whose segments hold
none gets its requests derived (derived_requests).

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
"""

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


def recorded_requests(trace):
    """{pid: [request dict]} from `request` events (traces of older recorders)."""
    out = {}
    for b in trace.batches({"request"}):
        seg = b.segment
        cols = b.columns_named(["time", "tid", "conn", "duration_ns", "bytes_in", "bytes_out", "role"])
        if cols is None:
            continue
        roles = {sid: seg.string(sid) for sid in set(cols[6])}
        lst = out.setdefault(seg.pid, [])
        for t, tid, conn, dur, bin_, bout, rid in zip(*cols):
            lst.append({"connection": conn, "pid": seg.pid, "tid": tid, "role": roles[rid], "start_ns": t,
                        "duration_ns": dur, "bytes_in": bin_, "bytes_out": bout})
    return out


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


def derived_requests(trace, pids):
    """{pid: [request dict]} inferred from the socket.op events of the given pids."""
    kinds = {k: v for k, v in latest_connections(trace, ("role", "sock_type"), pids).items() if v[0] in ROLES}
    wanted = {}  # pid -> connections with a role (listeners and unconnected sockets have none)
    for pid, conn in kinds:
        wanted.setdefault(pid, set()).add(conn)
    calls = {}  # (pid, conn) -> [(end, start, class, bytes, tid)], in trace order
    for b in trace.batches({"socket.op"}):
        pid = b.segment.pid
        conns = wanted.get(pid)
        if not conns:
            continue
        cols = b.columns_named(["time", "tid", "conn", "op", "bytes", "duration_ns"])
        if cols is None:
            continue
        classes = {sid: _op_class(b.segment.string(sid)) for sid in set(cols[3])}
        used = {sid for sid, c in classes.items() if c}
        if not used:
            continue
        # The hot loop of `requests` on a big trace: one membership test per
        # call, and the per-connection list looked up only for calls that count.
        for t, tid, conn, op, nbytes, dur in zip(*cols):
            if op in used and conn in conns:
                key = (pid, conn)
                lst = calls.get(key)
                if lst is None:
                    lst = calls[key] = []
                lst.append((t + dur, t, classes[op], nbytes, tid))
    out = {}
    for key, ops in calls.items():
        role, stype = kinds[key]
        server = role == "server"
        stream = stype != "dgram"
        ex = Exchange(server)
        done = []
        ops.sort(key=_END)  # completion order; stable: each thread's call order on ties
        for end, start, c, nbytes, tid in ops:
            if c == _SHUTDOWN:
                if server and nbytes == 0:
                    r = ex.finish()  # a server that shuts down has answered
                    if r:
                        done.append(r)
                continue
            if nbytes > 0:
                if c != _PEEK:
                    r = ex.on_data(c == _SEND, nbytes, start, end, tid)
                    if r:
                        done.append(r)
            elif nbytes == 0 and c != _SEND and stream:
                r = ex.finish()  # EOF: the peer will ask nothing more
                if r:
                    done.append(r)
        r = ex.finish()
        if r:
            done.append(r)
        pid, conn = key
        lst = out.setdefault(pid, [])
        for start, end, bin_, bout, tid in done:
            lst.append({"connection": conn, "pid": pid, "tid": tid, "role": role, "start_ns": start,
                        "duration_ns": end - start, "bytes_in": bin_, "bytes_out": bout})
    return out


def unrecorded_requests(trace, recorded=None):
    """{pid: [request dict]} derived for the processes whose segments hold no
    `request` events (every process, for traces of current recorders)."""
    if recorded is None:
        recorded = {b.segment.pid for b in trace.batches({"request"})}
    pids = {seg.pid for seg in trace.segments} - set(recorded)
    return derived_requests(trace, pids) if pids else {}


def all_requests(trace, role="all"):
    """Every request of the trace, sorted by start: recorded where a process's
    segments hold `request` events, derived from socket.op otherwise."""
    recorded = recorded_requests(trace)
    reqs = []
    for per_pid in (recorded, unrecorded_requests(trace, recorded)):
        for lst in per_pid.values():
            reqs.extend(r for r in lst if role == "all" or r["role"] == role)
    reqs.sort(key=lambda r: (r["start_ns"], r["pid"] or 0, r["connection"]))
    return reqs
