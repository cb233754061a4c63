"""downstream: what each server-side request waited on — the client-side
exchanges (to a database, a cache, another HTTP service) its thread made
while it was in flight (issue 45; docs/REQUESTS.md "Downstream calls").

Owns the attribution and the per-request / per-endpoint summaries that
`requests --tree` and `requests --slowest N` print (cmd_requests.py renders
them). It reads nothing the recorder does not already write: every
request tuple (request_inference.py) carries its thread (a server's: the
thread that began its answer; a client's: the thread that began its
question) and its span.

Rules, per thread (pid, tid), over the server-side requests and the
client-side exchanges on it:
 * a client exchange that overlaps no server request of its thread is
   "outside" (startup, background work; or begun before the one request it
   overlaps arrived: the request cannot have asked for it);
 * overlapping exactly one, and begun inside it: that request's downstream
   call ("attributed") — exact on thread-per-request servers;
 * overlapping two or more (an event loop serving several requests at
   once): "ambiguous", counted as such, never guessed;
 * client exchanges on a thread that served no request are "other_thread"
   (a worker pool the handler handed the call to: not followed).
A request's own time is its wall time minus the union of its attributed
calls' spans clipped to the request (concurrent calls are not counted
twice).

Memory: the client exchanges (of the given threads), and the server
requests that overlap one; a server request that overlaps none waited on
nothing and is summed as it is read.
"""

import bisect

from . import request_inference
from .request_inference import BYTES_IN, BYTES_OUT, CONN, DURATION, ENDPOINT, PID, ROLE, START, TID

UNNAMED = "(unnamed)"


def request_key(r):
    """How a request is named across passes: (pid, conn, start)."""
    return (r[PID], r[CONN], r[START])


class EndpointTree:
    """The aggregate of one server endpoint's requests."""

    __slots__ = ("requests", "wall_ns", "own_ns", "calls", "ambiguous", "ambiguous_requests")

    def __init__(self):
        self.requests = self.wall_ns = self.own_ns = self.ambiguous = self.ambiguous_requests = 0
        self.calls = {}  # (peer, endpoint) -> [calls, wall_ns, bytes_in, bytes_out]

    def as_dict(self, endpoint):
        n = self.requests or 1
        calls = [{"peer": peer, "endpoint": ep, "calls": c, "calls_per_request": round(c / n, 3),
                  "wall_ns": w, "bytes_in": bi, "bytes_out": bo}
                 for (peer, ep), (c, w, bi, bo) in self.calls.items()]
        calls.sort(key=lambda x: (x["peer"], -x["wall_ns"], x["endpoint"]))
        return {"endpoint": endpoint, "requests": self.requests, "wall_ns": self.wall_ns, "own_ns": self.own_ns,
                "downstream_calls": sum(c["calls"] for c in calls), "downstream": calls,
                "ambiguous_calls": self.ambiguous, "ambiguous_requests": self.ambiguous_requests}


def _union_within(spans, lo, hi):
    """The length of the union of the spans clipped to [lo, hi]."""
    total, cur_lo, cur_hi = 0, None, None
    for a, b in sorted(spans):
        a, b = max(a, lo), min(b, hi)
        if b <= a:
            continue
        if cur_hi is None or a > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = a, b
        elif b > cur_hi:
            cur_hi = b
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total


class ClientCollector:
    """The client-side exchanges of the given threads (all when None), fed a
    request at a time: attribute()'s first pass, or a caller's pass over
    the requests that has another job (cmd_requests.concurrency)."""

    def __init__(self, threads=None):
        self.threads = threads
        self.clients = {}  # (pid, tid) -> [(start, end, conn, endpoint, bytes_in, bytes_out)]

    def add(self, r):
        if r[ROLE] != "client":
            return
        key = (r[PID], r[TID])
        if self.threads is None or key in self.threads:
            self.clients.setdefault(key, []).append((r[START], r[START] + r[DURATION], r[CONN],
                                                     r[ENDPOINT] or UNNAMED, r[BYTES_IN], r[BYTES_OUT]))


def attribute(trace, only=None, keep=(), conns=None, threads=None, clients=None):
    """{"endpoints": {endpoint: EndpointTree} of the server requests `only`
    accepts (all when None), "requests": {request_key: dict} for the keys in
    `keep` (their calls, own time, ambiguous count; a kept request missing
    from it waited on nothing: no_calls), "totals": counts of the client
    exchanges by outcome}. threads: only these (pid, tid) are looked
    at (the threads of the kept requests, for `requests --slowest`).
    clients: a ClientCollector's clients, when the caller's pass took them."""
    if conns is None:
        conns = request_inference.latest_connections(trace, ("peer",))
    pids = {t[0] for t in threads} if threads is not None else None
    keep = set(keep)
    totals = {"client_calls": 0, "attributed": 0, "ambiguous": 0, "outside": 0, "other_thread": 0}
    endpoints = {}
    kept = {}
    # Two passes, so that what is held follows the downstream calls, not the
    # requests: the client exchanges first, then only the server requests
    # that overlap one (the others waited on nothing: folded as they pass).
    if clients is None:
        col = ClientCollector(threads)
        for r in request_inference.iter_requests(trace, "client", pids):
            col.add(r)
        clients = col.clients
    cover = {}  # (pid, tid) -> (los, his): the union of its client exchanges' spans
    for key, calls in clients.items():
        los, his = [], []
        for lo, hi, *_ in sorted(calls):
            if his and lo <= his[-1]:
                his[-1] = max(his[-1], hi)
            else:
                los.append(lo)
                his.append(hi)
        cover[key] = (los, his)
    servers, served = {}, set()
    if clients or threads is None:  # (for given threads with no client exchange: nothing was waited on)
        for r in request_inference.iter_requests(trace, "server", pids):
            key = (r[PID], r[TID])
            if threads is not None and key not in threads:
                continue
            selected = only is None or only(r)
            s = (r[START], r[START] + r[DURATION], r[CONN], r[ENDPOINT] or UNNAMED, selected)
            served.add(key)
            c = cover.get(key)
            if c is not None:
                i = bisect.bisect_right(c[0], s[1]) - 1
                if i >= 0 and c[1][i] >= s[0]:
                    servers.setdefault(key, []).append(s)  # some client exchange overlaps it
                    continue
            if selected or (r[PID], r[CONN], r[START]) in keep:
                _fold(endpoints, kept, keep, r[PID], s, [], 0)
    for key, calls in clients.items():
        totals["client_calls"] += len(calls)
        srv = servers.get(key)
        if not srv:
            totals["outside" if key in served else "other_thread"] += len(calls)
            continue
        srv.sort()
        starts = [s[0] for s in srv]
        ends = sorted(s[1] for s in srv)
        longest = max(s[1] - s[0] for s in srv)
        mine = [[] for _ in srv]        # attributed calls per server request
        shared = [0] * len(srv)         # ambiguous calls overlapping it
        for cs, ce, conn, ep, bi, bo in calls:
            upto = bisect.bisect_right(starts, ce)
            n = upto - bisect.bisect_left(ends, cs)
            if n <= 0:
                totals["outside"] += 1
                continue
            if n == 1:
                i = upto - 1
                while srv[i][1] < cs:
                    i -= 1
                if cs < srv[i][0]:
                    totals["outside"] += 1  # begun before the request arrived on this thread
                    continue
                totals["attributed"] += 1
                peer = conns.get((key[0], conn), ("",))[0] or "?"
                mine[i].append((cs, ce, peer, ep, bi, bo))
                continue
            totals["ambiguous"] += 1
            i = upto - 1
            eps = set()  # the endpoints of the selected requests it overlapped: each counts the call once
            while i >= 0 and starts[i] >= cs - longest:
                if srv[i][1] >= cs:
                    shared[i] += 1
                    if srv[i][4]:
                        eps.add(srv[i][3])
                i -= 1
            for e in eps:
                t = endpoints.get(e)
                if t is None:
                    t = endpoints[e] = EndpointTree()
                t.ambiguous += 1
        for i, s in enumerate(srv):
            if s[4] or (key[0], s[2], s[0]) in keep:
                _fold(endpoints, kept, keep, key[0], s, mine[i], shared[i])
    return {"endpoints": endpoints, "requests": kept, "totals": totals}


def classify(servers, calls):
    """One thread's client exchanges by attribute()'s rule, for the fleet
    tables' rows (fleet_load.py): servers [(start, end, ident)] its server
    requests, calls [(start, end, ident)] its client exchanges -> per call,
    in order, (outcome, ident of its server request or None); outcome
    "attributed", "ambiguous", "outside" or "other_thread"."""
    if not servers:
        return [("other_thread", None)] * len(calls)
    srv = sorted(servers)
    starts = [x[0] for x in srv]
    ends = sorted(x[1] for x in srv)
    out = []
    for cs, ce, _ in calls:
        upto = bisect.bisect_right(starts, ce)
        n = upto - bisect.bisect_left(ends, cs)
        if n <= 0:
            out.append(("outside", None))
        elif n == 1:
            i = upto - 1
            while srv[i][1] < cs:
                i -= 1
            out.append(("outside", None) if cs < srv[i][0] else ("attributed", srv[i][2]))
        else:
            out.append(("ambiguous", None))
    return out


def no_calls(r):
    """The "requests" entry of a request that waited on nothing."""
    return {"wall_ns": r[DURATION], "own_ns": r[DURATION], "waited_ns": 0, "calls": [], "ambiguous_calls": 0,
            "each": [], "each_truncated": False}


# A kept request lists its calls one by one (start, wall, bytes) up to this many.
EACH_LIMIT = 1000


def _fold(endpoints, kept, keep, pid, s, calls, ambiguous):
    """Adds one server request s (start, end, conn, endpoint, selected) and its calls."""
    start, end, conn, ep = s[0], s[1], s[2], s[3]
    groups = {}
    for cs, ce, peer, cep, bi, bo in calls:
        g = groups.get((peer, cep))
        if g is None:
            g = groups[(peer, cep)] = [0, 0, 0, 0]
        g[0] += 1
        g[1] += ce - cs
        g[2] += bi
        g[3] += bo
    waited = _union_within([(c[0], c[1]) for c in calls], start, end)
    wall = end - start
    own = wall - waited
    if s[4]:
        t = endpoints.get(ep)
        if t is None:
            t = endpoints[ep] = EndpointTree()
        t.requests += 1
        t.wall_ns += wall
        t.own_ns += own
        if ambiguous:
            t.ambiguous_requests += 1
        for k, v in groups.items():
            g = t.calls.get(k)
            if g is None:
                t.calls[k] = list(v)
            else:
                for j in range(4):
                    g[j] += v[j]
    rk = (pid, conn, start)
    if rk in keep:
        lst = [{"peer": peer, "endpoint": cep, "calls": c, "wall_ns": w, "bytes_in": bi, "bytes_out": bo}
               for (peer, cep), (c, w, bi, bo) in groups.items()]
        lst.sort(key=lambda x: (x["peer"], -x["wall_ns"], x["endpoint"]))
        each = [{"start_ns": cs, "wall_ns": ce - cs, "peer": peer, "endpoint": cep, "bytes_in": bi, "bytes_out": bo}
                for cs, ce, peer, cep, bi, bo in sorted(calls)[:EACH_LIMIT]]
        kept[rk] = {"wall_ns": wall, "own_ns": own, "waited_ns": waited, "calls": lst, "ambiguous_calls": ambiguous,
                    "each": each, "each_truncated": len(calls) > EACH_LIMIT}


# ------------------------------------------------------------------ rendering

HEADER = "[# calls]      wall ms |     own ms | name"


def _row(calls, wall_ns, own_ns, name):
    return "[%7d]  %11.3f | %10.3f | %s" % (calls, wall_ns / 1e6, own_ns / 1e6, name)


def render_request(d, name):
    """Lines of one request's tree (d: attribute()'s "requests" entry)."""
    lines = [HEADER, _row(1, d["wall_ns"], d["own_ns"], name)]
    calls = d["calls"]
    for j, c in enumerate(calls):
        branch = "└─ " if j == len(calls) - 1 else "├─ "
        lines.append(_row(c["calls"], c["wall_ns"], c["wall_ns"], branch + "%s → %s" % (c["endpoint"], c["peer"])))
    if d["ambiguous_calls"]:
        lines.append("  + %d ambiguous call%s on this thread while other requests were in flight "
                     "(not counted above; own includes them)" % (d["ambiguous_calls"], "" if d["ambiguous_calls"] == 1
                                                                  else "s"))
    return lines


def render_endpoint(row, escape=str):
    """Lines of one endpoint's aggregated tree (row: EndpointTree.as_dict)."""
    n = row["requests"]
    ep = escape(row["endpoint"])
    lines = [_row(n, row["wall_ns"], row["own_ns"], "%s  (%d request%s)" % (ep, n, "" if n == 1 else "s"))]
    calls = row["downstream"]
    for j, c in enumerate(calls):
        branch = "└─ " if j == len(calls) - 1 else "├─ "
        lines.append(_row(c["calls"], c["wall_ns"], c["wall_ns"], "%s%s → %s   %.1f × %s per %s" % (
            branch, escape(c["endpoint"]), escape(c["peer"]), c["calls_per_request"], escape(c["endpoint"]), ep)))
    if row["ambiguous_calls"]:
        lines.append("  + %d ambiguous call%s overlapped %d of these requests while other requests were in flight "
                     "on the thread (event loop): not counted above, own includes them" % (
                         row["ambiguous_calls"], "" if row["ambiguous_calls"] == 1 else "s",
                         row["ambiguous_requests"]))
    return lines
