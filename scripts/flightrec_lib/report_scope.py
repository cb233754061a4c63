"""report_scope: which part of a trace a report takes — the threads
(--thread: a tid or a name pattern), the time range (--from/--to: relative
times or ISO wall-clock times) and the request windows (--endpoint).

Shared by the profile builders (profiles.py, fleet_profiles.py) and the
reports that walk samples themselves (speedscope, requests); selection.py
picks segments (--pid/--service/--host), this picks inside them.
"""
import bisect
import fnmatch
import os
import re

from . import request_inference


class ProfileError(Exception):
    """Bad request (unknown kind, bad filter): one clear line for the user."""


_TIME_RE = re.compile(r"^(-?)(\d+(?:\.\d*)?|\.\d+)(ns|us|ms|s|m|h|d)?$")
_TIME_UNITS = {"ns": 1, "us": 1000, "ms": 10 ** 6, "s": 10 ** 9, "m": 60 * 10 ** 9, "h": 3600 * 10 ** 9,
               "d": 86400 * 10 ** 9}
_ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?(Z|[+-]\d{2}:?\d{2})?$")


def parse_iso(text):
    """Wall-clock ns of an ISO 8601 time (UTC unless it names an offset), or
    None if text is not one."""
    import datetime
    text = (text or "").strip()
    m = _ISO_RE.match(text)
    if not m:
        return None
    frac = m.group(3) or ""
    base = text.replace(frac, "", 1) if frac else text
    try:
        dt = datetime.datetime.fromisoformat(base.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    ns = int(dt.timestamp()) * 10 ** 9
    if frac:
        ns += int((frac[1:] + "000000000")[:9])
    return ns


def resolve_bounds(first, last, t_from, t_to):
    """(lo, hi) wall-clock ns of --from/--to against a trace's first and last
    event: relative (seconds, 250ms, 2h; negative from the end) or absolute
    (ISO 8601: 2026-12-04T16:41:22.5Z, UTC unless an offset is given)."""
    bounds = []
    for spec, default in zip((t_from, t_to), (first, last)):
        if spec is None:
            bounds.append(default)
            continue
        absolute = parse_iso(spec)
        if absolute is not None:
            bounds.append(absolute)
            continue
        ns, from_end = parse_time(spec)
        bounds.append(last - ns if from_end else first + ns)
    if bounds[0] > bounds[1]:
        raise ProfileError("empty time range: --from is after --to")
    return bounds[0], bounds[1]


def parse_time(text):
    """"1.5", "1.5s", "200ms", "-2s" -> (ns, from_end). Plain numbers are seconds;
    a leading minus counts from the end of the trace."""
    m = _TIME_RE.match(text.strip()) if text is not None else None
    if not m:
        raise ProfileError("bad time %r: use a number of seconds or e.g. 250ms, 1.5s, -10s, 2h, "
                           "or an ISO time (2026-12-04T16:41:22Z)" % (text,))
    ns = int(round(float(m.group(2)) * _TIME_UNITS[m.group(3) or "s"]))
    return ns, m.group(1) == "-"


def process_key(seg):
    h = seg.header
    return (h.get("host"), h.get("service"), h.get("pid"))


def thread_names(trace):
    """{(pid, tid): [every name the thread had, the latest last]} from the
    thread.start / thread.name / thread.end events."""
    names = {}
    for rec in trace.threads():
        key = (rec["pid"], rec["tid"])
        if rec.get("name"):
            names.setdefault(key, [])
            if rec["name"] not in names[key]:
                names[key].append(rec["name"])
    for e in trace.events({"thread.name"}):
        key = (e.get("pid"), e.get("tid"))
        if e.get("name") and e["name"] not in names.setdefault(key, []):
            names[key].insert(0, e["name"])  # an earlier name; threads() has the last
    return names


def processes(trace):
    """{pid: process.start event dict}."""
    return {e.get("pid"): e for e in trace.events({"process.start"})}


def select_threads(spec, names, procs):
    """The (pid, tid) pairs --thread selects, or a set of tids for a numeric spec."""
    if spec is None:
        return None
    spec = spec.strip()
    if spec.isdigit():
        return ("tid", int(spec))
    known = {}
    for key, ns in names.items():
        for n in ns:
            known.setdefault(n, set()).add(key)
    for pid, e in procs.items():  # a main thread nobody named answers to its exe
        exe = os.path.basename(e.get("exe") or "")
        if exe and not names.get((pid, pid)):
            known.setdefault(exe, set()).add((pid, pid))
            known.setdefault(exe[:15], set()).add((pid, pid))  # as the kernel truncates comm
    picked = set()
    for n, keys in known.items():
        if n == spec or fnmatch.fnmatchcase(n, spec):
            picked |= keys
    if not picked:
        listed = ", ".join(sorted(known)[:12]) or "none recorded"
        raise ProfileError("no thread named %r in the trace (thread names: %s)" % (spec, listed))
    return ("keys", picked)


def time_bounds(trace, t_from, t_to):
    """(lo_wall, hi_wall) in wall-clock ns or None: --from/--to resolved
    against the trace's first and last event."""
    if t_from is None and t_to is None:
        return None
    for t in (t_from, t_to):  # bad specs fail first
        if t is not None and parse_iso(t) is None:
            parse_time(t)
    first = last = None
    for seg in trace.segments:
        lo, hi = seg.time_range()
        if lo is None:
            continue
        a, b = seg.wall_ns(lo), seg.wall_ns(hi)
        first = a if first is None or a < first else first
        last = b if last is None or b > last else last
    if first is None:
        return None
    return resolve_bounds(first, last, t_from, t_to)


def endpoint_windows(trace, pattern):
    """{pid: {tid: (starts, ends)}}: the merged time windows (monotonic ns) of
    the requests whose endpoint matches the shell pattern, on their handling
    threads (issue 41). Memory follows the matching requests."""
    spans = {}
    for r in request_inference.iter_requests(trace):
        ep = r[request_inference.ENDPOINT]
        if not ep or not fnmatch.fnmatchcase(ep, pattern):
            continue
        start = r[request_inference.START]
        spans.setdefault(r[request_inference.PID], {}).setdefault(r[request_inference.TID], []).append(
            (start, start + r[request_inference.DURATION]))
    out = {}
    for pid, threads in spans.items():
        for tid, ws in threads.items():
            los, his = [], []
            for lo, hi in sorted(ws):
                if his and lo <= his[-1]:
                    his[-1] = max(his[-1], hi)
                else:
                    los.append(lo)
                    his.append(hi)
            out.setdefault(pid, {})[tid] = (los, his)
    return out


def in_windows(windows, tid, t):
    w = windows.get(tid)
    if w is None:
        return False
    i = bisect.bisect_right(w[0], t) - 1
    return i >= 0 and t <= w[1][i]
