"""otlp.request_links: which server request each sample was taken in, for
the OTLP export's sample links (the request's W3C trace id and span) and its
`flightrec.request.endpoint` attribute (issue 43, once issue 41 gave
requests endpoints and trace context).

A sample is the request's when it was taken on the request's handling
thread (the thread that began its answer) inside its window, and no other
server request of that process was in flight on that thread then: on an
event loop (several requests in flight on one thread) the sample could be
any of theirs, and it gets no request rather than a guessed one, as
downstream.py does for downstream calls. Client-side exchanges are not
requests here: a sample taken while a handler waits on its database belongs
to the request being served.

What is held: per thread, the disjoint time pieces of its server requests
that carry an endpoint or a trace id (three flat arrays), and one entry per
distinct (endpoint, trace id, span id): memory follows the server requests,
not the samples."""
import bisect
from array import array

from .. import request_inference as ri

AMBIGUOUS = -1  # a tag: several requests in flight on the thread


class RequestLinks:
    """tag(segment, tid, monotonic times) -> one int per time: 0 no request,
    AMBIGUOUS, else an index into `links` ((endpoint, trace id hex, span id
    hex), 1-based: links[tag - 1])."""

    def __init__(self, trace):
        self.links = []
        index = {}
        spans = {}  # (pid, tid) -> [(start, end, tag)]
        for r in ri.iter_requests(trace, role="server"):
            ep = r[ri.ENDPOINT] if len(r) > ri.ENDPOINT else ""
            tr = r[ri.TRACE] if len(r) > ri.TRACE else None
            trace_id, span_id = (tr[0], tr[1]) if tr and tr[0] else ("", "")
            if ep or trace_id:
                key = (ep or "", trace_id, span_id)
                tag = index.get(key)
                if tag is None:
                    self.links.append(key)
                    tag = index[key] = len(self.links)
            else:
                tag = 0  # a request all the same: it makes overlapping ones ambiguous
            start = r[ri.START]
            spans.setdefault((r[ri.PID], r[ri.TID]), []).append((start, start + r[ri.DURATION], tag))
        self.threads = {key: _pieces(reqs) for key, reqs in spans.items()}
        self.ambiguous = 0  # samples given no request because several were in flight

    def __bool__(self):
        return bool(self.links)

    def __call__(self, seg, tid, times):
        pieces = self.threads.get((seg.pid, tid))
        if pieces is None:
            return [0] * len(times)
        los, his, tags = pieces
        out = []
        for t in times:
            i = bisect.bisect_right(los, t) - 1
            tag = tags[i] if i >= 0 and t < his[i] else 0
            if tag == AMBIGUOUS:
                self.ambiguous += 1
            out.append(tag)
        return out


def _pieces(reqs):
    """(starts, ends, tags): a thread's requests ([start, end), tag) cut into
    disjoint pieces [start, end), each with the one request in flight or
    AMBIGUOUS; stretches with none are left out."""
    changes = {}  # time -> [requests ending, requests starting]
    for i, (s, e, _) in enumerate(reqs):
        if e > s:
            changes.setdefault(e, ([], []))[0].append(i)
            changes.setdefault(s, ([], []))[1].append(i)
    los, his, tags = array("q"), array("q"), array("q")
    active = set()
    times = sorted(changes)
    for j, b in enumerate(times):
        ending, starting = changes[b]
        active.difference_update(ending)
        active.update(starting)
        if not active or j + 1 == len(times):
            continue
        tag = reqs[next(iter(active))][2] if len(active) == 1 else AMBIGUOUS
        if tags and tags[-1] == tag and his[-1] == b:
            his[-1] = times[j + 1]
        else:
            los.append(b)
            his.append(times[j + 1])
            tags.append(tag)
    return los, his, tags
