"""Request inference (scripts/flightrec_lib/request_inference.py): the
per-connection state machine, and requests derived from socket.op/socket.open
columns as the reader sees them. Real recordings are checked end to end by
test_sockets_echo.py, test_sockets_misc.py and test_sockets_redis.py."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from flightrec_lib.request_inference import Exchange, as_dict, iter_requests  # noqa: E402

OP_FIELDS = ["time", "tid", "fd", "conn", "op", "bytes", "duration_ns"]
OPEN_FIELDS = ["time", "tid", "fd", "conn", "role", "family", "sock_type", "local", "peer", "listener"]
REQ_FIELDS = ["time", "tid", "conn", "duration_ns", "bytes_in", "bytes_out", "role"]
STRING_FIELDS = {"op", "role", "family", "sock_type", "local", "peer"}


class FakeSegment:
    def __init__(self, pid):
        self.pid = pid
        self.strings = {}
        self.batches = []

    def sid(self, text):
        return self.strings.setdefault(text, len(self.strings) + 1)

    def string(self, sid):
        return {v: k for k, v in self.strings.items()}[sid]


class FakeBatch:
    """One EVENTS block as the reader hands it over: raw columns, string ids."""

    def __init__(self, seg, name, fields, rows):
        self.segment = seg
        self.type = type("T", (), {"name": name, "field_names": fields})()
        cols = [list(c) for c in zip(*rows)] if rows else [[] for _ in fields]
        for i, f in enumerate(fields):
            if f in STRING_FIELDS:
                cols[i] = [seg.sid(v) for v in cols[i]]
        self._cols = cols

    def columns(self):
        return self._cols

    def columns_named(self, names):
        fields = self.type.field_names
        return [self._cols[fields.index(n)] for n in names] if all(n in fields for n in names) else None


class FakeTrace:
    def __init__(self):
        self.segments, self._batches = [], []

    def segment(self, pid):
        seg = FakeSegment(pid)
        self.segments.append(seg)
        return seg

    def add(self, seg, name, fields, rows):
        b = FakeBatch(seg, name, fields, rows)
        self._batches.append(b)
        seg.batches.append(b)

    def batches(self, types=None):
        return (b for b in self._batches if types is None or b.type.name in types)


def op(time, tid, conn, name, nbytes, dur, fd=5):
    return (time, tid, fd, conn, name, nbytes, dur)


def opened(conn, role, sock_type="stream", time=1):
    return (time, 1, 5, conn, role, "ipv4", sock_type, "127.0.0.1:80", "127.0.0.1:9", 0)


def all_requests(trace, role="all"):
    """The requests as reports list them: by start, then process and connection."""
    return sorted(map(as_dict, iter_requests(trace, role)),
                  key=lambda r: (r["start_ns"], r["pid"], r["connection"]))


def brief(reqs):
    return [(r["connection"], r["role"], r["start_ns"], r["duration_ns"], r["bytes_in"], r["bytes_out"], r["tid"])
            for r in reqs]


# ------------------------------------------------------------------ the state machine

def test_server_exchanges_split_reads_and_writes_and_eof():
    x = Exchange(server=True)
    # Request 1 arrives in two reads and is answered in two writes.
    assert x.on_data(False, 10, 100, 110, 7) is None
    assert x.on_data(False, 5, 120, 125, 7) is None
    assert x.on_data(True, 30, 200, 210, 7) is None
    assert x.on_data(True, 20, 220, 240, 8) is None
    # The next receive closes request 1: start = end of its first read, end =
    # end of its last write; tid = the thread that sent the answer.
    assert x.on_data(False, 4, 300, 305, 7) == (110, 240, 15, 50, 8)
    assert x.on_data(True, 9, 400, 401, 7) is None
    assert x.on_data(False, 0, 500, 501, 7) is None  # zero bytes is not data
    assert x.finish() == (305, 401, 4, 9, 7)  # EOF / end of the trace
    assert x.finish() is None


def test_unanswered_requests_and_unsolicited_data_are_not_requests():
    x = Exchange(server=True)
    assert x.on_data(True, 12, 10, 11, 1) is None  # a greeting before anything was asked
    assert x.on_data(False, 12, 20, 21, 1) is None  # a request never answered
    assert x.finish() is None


def test_client_mirror_view():
    x = Exchange(server=False)
    assert x.on_data(True, 100, 1000, 1010, 3) is None  # the request, sent in two writes
    assert x.on_data(True, 50, 1020, 1030, 3) is None
    assert x.on_data(False, 200, 1040, 1900, 3) is None  # a blocking read of the answer
    assert x.on_data(False, 10, 1910, 1920, 3) is None
    # Latency as the client sees it: from starting to send to the answer's last byte.
    assert x.on_data(True, 100, 2000, 2010, 3) == (1000, 1920, 210, 150, 3)


# ------------------------------------------------------------------ derived from the columns

def test_served_connection_with_errors_peeks_eof_and_close():
    tr = FakeTrace()
    seg = tr.segment(100)
    tr.add(seg, "socket.open", OPEN_FIELDS, [opened(2, "server"), opened(1, "listener")])
    tr.add(seg, "socket.op", OP_FIELDS, [
        op(900, 11, 1, "accept", 9, 100, fd=3),
        op(1100, 11, 2, "recv", 10, 10), op(1120, 11, 2, "recv", -11, 10), op(1140, 11, 2, "read", 5, 10),
        op(1200, 11, 2, "send", 30, 50),
        op(1300, 11, 2, "recvmsg", 7, 10), op(1315, 11, 2, "recv.peek", 99, 1),
        op(1400, 11, 2, "writev", 8, 10), op(1420, 11, 2, "write", 9, 10),
        op(1500, 11, 2, "recv", 0, 10), op(1600, 11, 2, "close", 0, 10),
    ])
    assert brief(all_requests(tr)) == [
        (2, "server", 1110, 1250 - 1110, 15, 30, 11),
        (2, "server", 1310, 1430 - 1310, 7, 17, 11),
    ]


def test_calls_are_taken_in_completion_order_across_threads():
    # Thread 2 (the writer) was drained before thread 1 (the reader): the
    # batches hold send, send, recv, recv; they completed recv, send, recv, send.
    tr = FakeTrace()
    seg = tr.segment(100)
    tr.add(seg, "socket.open", OPEN_FIELDS, [opened(7, "server")])
    tr.add(seg, "socket.op", OP_FIELDS, [op(200, 2, 7, "send", 40, 10), op(400, 2, 7, "send", 41, 10)])
    tr.add(seg, "socket.op", OP_FIELDS, [op(100, 1, 7, "recv", 4, 10), op(300, 1, 7, "recv", 5, 10)])
    assert brief(all_requests(tr)) == [(7, "server", 110, 100, 4, 40, 2), (7, "server", 310, 100, 5, 41, 2)]


def test_client_requests_and_what_is_not_a_request():
    tr = FakeTrace()
    seg = tr.segment(100)
    tr.add(seg, "socket.open", OPEN_FIELDS, [
        opened(21, "client"), opened(30, "listener"), opened(40, "server", sock_type="dgram"),
        opened(50, "server")])
    tr.add(seg, "socket.op", OP_FIELDS, [
        # A client on a dup'd fd: two exchanges.
        op(200, 1, 21, "send", 14, 10), op(210, 1, 21, "recv", 5, 90),
        op(400, 1, 21, "send", 14, 10), op(410, 1, 21, "recv", 5, 40),
        # A connection never described (its socket.open is not in the trace): no role, no requests.
        op(500, 1, 99, "recv", 3, 1), op(510, 1, 99, "send", 3, 1),
        # A datagram "server": an empty datagram is data-less, not EOF.
        op(600, 1, 40, "recvfrom", 8, 1), op(610, 1, 40, "sendto", 8, 1), op(620, 1, 40, "recvfrom", 0, 1),
        op(630, 1, 40, "sendto", 2, 1),
        # A server that shuts down after answering: that exchange ends there.
        op(700, 1, 50, "recv", 3, 1), op(710, 1, 50, "send", 4, 1), op(720, 1, 50, "shutdown", 0, 1),
        op(730, 1, 50, "recv", 1, 1),
    ])
    assert brief(all_requests(tr, "client")) == [(21, "client", 200, 100, 5, 14, 1),
                                                 (21, "client", 400, 50, 5, 14, 1)]
    assert brief(all_requests(tr, "server")) == [(40, "server", 601, 30, 8, 10, 1),
                                                 (50, "server", 701, 10, 3, 4, 1)]


def test_recorded_request_events_of_older_traces_are_read_as_they_are():
    tr = FakeTrace()
    old = tr.segment(100)  # an older recorder: wrote `request` events itself
    tr.add(old, "socket.open", OPEN_FIELDS, [opened(2, "server")])
    tr.add(old, "socket.op", OP_FIELDS, [op(100, 1, 2, "recv", 1, 1), op(110, 1, 2, "send", 1, 1)])
    tr.add(old, "request", REQ_FIELDS, [(101, 1, 2, 10, 1, 1, "server")])
    new = tr.segment(200)
    tr.add(new, "socket.open", OPEN_FIELDS, [opened(2, "server")])
    tr.add(new, "socket.op", OP_FIELDS, [op(100, 9, 2, "recv", 6, 1), op(110, 9, 2, "send", 7, 1)])
    reqs = all_requests(tr)
    assert [(r["pid"], r["start_ns"], r["duration_ns"], r["bytes_in"], r["tid"]) for r in reqs] == \
        [(100, 101, 10, 1, 1), (200, 101, 10, 6, 9)]


def test_segments_are_read_one_after_the_other_and_a_late_call_still_counts():
    """The derivation holds one segment's calls at a time. An exchange spans
    three segments; a receive that completed before the previous segment's
    last send was recorded in the next one (its thread was preempted between
    returning and recording): it is still taken in completion order."""
    tr = FakeTrace()
    s1, s2, s3 = tr.segment(100), tr.segment(100), tr.segment(100)
    for seg in (s1, s2, s3):
        tr.add(seg, "socket.open", OPEN_FIELDS, [opened(7, "server")])
    tr.add(s1, "socket.op", OP_FIELDS, [op(100, 1, 7, "recv", 4, 10), op(200, 2, 7, "send", 40, 10)])
    tr.add(s2, "socket.op", OP_FIELDS, [op(400, 2, 7, "send", 41, 10)])
    # Completed at 310, before s2's send at 410, but recorded in s3.
    tr.add(s3, "socket.op", OP_FIELDS, [op(300, 1, 7, "recv", 5, 10), op(500, 1, 7, "recv", 6, 10),
                                        op(600, 2, 7, "send", 42, 10)])
    assert brief(all_requests(tr)) == [(7, "server", 110, 100, 4, 40, 2), (7, "server", 310, 100, 5, 41, 2),
                                       (7, "server", 510, 100, 6, 42, 2)]
