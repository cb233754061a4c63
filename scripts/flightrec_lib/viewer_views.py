"""viewer_views: one function per page of the viewer (`flightrec-dump
serve`), each turning a selection into HTML with the reports' own code —
profiles.py (flame, top), flamegraph.py (the SVG), calltree.py,
commands/cmd_chrome.timeline (the timeline), cmd_requests.analyse,
cmd_sockets.collect, cmd_heap.build, cmd_info (crashes, catalog),
incidents.find, cmd_diff.build_sides + diff.py (compare); from ClickHouse
the fleet_* modules the reports use with --clickhouse (fleet_reports,
fleet_heap, fleet_incidents for crashes and incidents, and
cmd_chrome.timeline's fleet_timeline for the timeline, whose window and
event limit the database applies). Nothing here
computes a report a second way: it lays out what those return.

A view returns (title, body HTML, problems); problems are (path, message)
lines the page shows above the view (damaged blocks, unreadable files),
the same lines the command line prints on stderr. Bad requests raise
ViewError (the page says why, status 400).
"""
import json
import os
import re
import tempfile
import time

from . import (calltree, cli, diff, downstream, flamegraph, incidents, profiles, request_report,
               viewer_sources)
from .commands import cmd_chrome, cmd_diff, cmd_flame, cmd_heap, cmd_info, cmd_requests, cmd_sockets
from .viewer_html import bars, call_tree, esc, flame_frame, fmt_bytes, fmt_ns, fmt_value, link, table, text_tree


class ViewError(Exception):
    """A bad request (unknown kind, bad time, bad pid): one line, status 400."""


# Parameters a URL may carry, with their longest accepted value.
PARAMS = {"service": 200, "host": 200, "pid": 200, "incident": 10, "from": 40, "to": 40, "kind": 10,
          "thread": 200, "role": 10, "prefix": 1000, "save": 1, "limit": 6, "endpoint": 200, "trace_id": 80,
          "a_pid": 200, "a_from": 40, "a_to": 40, "b_pid": 200, "b_from": 40, "b_to": 40,
          "a_service": 200, "b_service": 200, "a_host": 200, "b_host": 200, "a_incident": 10, "b_incident": 10}
# Most rows a table shows (the rest are counted, not listed).
ROWS = 200
# Most timeline events drawn (the Chrome JSON has them all).
TIMELINE_EVENTS = 30000


def check_params(query):
    """{name: value} from a parsed query string; refuses unknown names,
    repeated names and overlong values."""
    out = {}
    for name, values in query.items():
        if name not in PARAMS:
            raise ViewError("unknown parameter %r" % name)
        if len(values) != 1:
            raise ViewError("parameter %r given %d times" % (name, len(values)))
        value = values[0].strip()
        if len(value) > PARAMS[name]:
            raise ViewError("parameter %r is too long" % name)
        out[name] = value
    return out


def selection_of(params, side=""):
    """The viewer_sources.Selection the parameters name (side "a_"/"b_":
    that side's own values first)."""
    def get(name):
        return params.get(side + name) or params.get(name) or ""
    pids = []
    for part in re.split(r"[,\s]+", get("pid")):
        if part:
            if not part.isdigit() or len(part) > 10:
                raise ViewError("bad pid %r: process ids, e.g. 1234 or 12,34" % part)
            pids.append(int(part))
    incident = get("incident")
    if incident and not incident.isdigit():
        raise ViewError("bad incident %r: a number as the incidents page lists them" % incident)
    services = [get("service")] if get("service") else None
    hosts = [get("host")] if get("host") else None
    return viewer_sources.Selection(pids or None, services, hosts, int(incident) if incident else None,
                                    params.get("prefix", ""))


def _paths_only(trace):
    """From ClickHouse, the flame graph, top and compare views follow call
    paths only: one row per distinct stack (as cli.open_trace sets it for
    top/flame/diff)."""
    if getattr(trace, "fleet", False):
        trace.merge_threads = True


def _time(params, name):
    value = params.get(name) or None
    if value is not None:
        try:
            profiles.parse_time(value)
        except profiles.ProfileError as e:
            raise ViewError(str(e)) from None
    return value


def _kind(params):
    kind = params.get("kind") or "cpu"
    if kind not in profiles.KINDS:
        raise ViewError("unknown kind %r (kinds: %s)" % (kind, ", ".join(profiles.KINDS)))
    return kind


def _problems(trace, extra=()):
    lines = list(trace.errors) + cli.damage_lines(trace)
    seen = {p for p, _ in lines}
    for p, m in extra:
        if p not in seen:
            lines.append((p, m))
            seen.add(p)
    return lines


def _profile(ctx, kind=None):
    trace = ctx.trace()
    _paths_only(trace)
    kind = kind or _kind(ctx.params)
    try:
        prof = profiles.build(trace, kind, thread=ctx.params.get("thread") or None,
                              t_from=_time(ctx.params, "from"), t_to=_time(ctx.params, "to"),
                              endpoint=ctx.params.get("endpoint") or None)
    except profiles.ProfileError as e:
        raise ViewError(str(e)) from None
    return trace, prof


# ---------------------------------------------------------------- views

def view_index(ctx):
    cat = ctx.sources.catalog(ctx.params.get("prefix", ""))
    # service/host/pid narrow the list as they narrow a report (--service, --host, --pid)
    chosen = ctx.selection
    if chosen:
        shown = [p for p in cat["processes"] if chosen.matches(p)]
        cat = dict(cat, processes=shown, segments=sum(p["segments"] for p in shown),
                   bytes=sum(p["bytes"] for p in shown),
                   incidents=[i for i in cat["incidents"] if chosen.matches(i)])
        firsts = [p["first_wall_ns"] for p in shown if p["first_wall_ns"] is not None]
        lasts = [p["last_wall_ns"] for p in shown if p["last_wall_ns"] is not None]
        cat["time_range"] = {"first_wall_ns": min(firsts), "last_wall_ns": max(lasts)} if firsts and lasts else None
    out = ["<h1>Traces</h1>"]
    if cat.get("prefix") is not None:
        out.append("<p>prefix <code>%s</code></p>" % esc(cat["prefix"] or "(bucket root)"))
    tr = cat.get("time_range")
    out.append('<p id="summary"><span id="n-segments">%d</span> segments, %s%s, <span id="n-processes">%d</span> '
               'processes</p>' % (cat["segments"], fmt_bytes(cat["bytes"]),
                                  (", " + esc(cli.format_wall(tr["first_wall_ns"])) + " .. " +
                                   esc(cli.format_wall(tr["last_wall_ns"]))) if tr and tr.get("first_wall_ns")
                                  else "", len(cat["processes"])))
    if cat.get("note"):
        out.append('<p class="note">%s</p>' % esc(cat["note"]))
    if cat["folders"]:
        out.append("<h2>Prefixes</h2><ul>%s</ul>" % "".join(
            '<li><a href="%s">%s</a></li>' % (esc(link("", {"prefix": f})), esc(f)) for f in cat["folders"]))
    rows = []
    for p in cat["processes"]:
        sel = {"service": p["service"] or "", "host": p["host"] or "", "pid": p["pid"] or "",
               "prefix": ctx.params.get("prefix", "")}
        views = " ".join('<a href="%s">%s</a>' % (esc(link(v, sel)), label) for v, label in (
            ("flame", "flame"), ("top", "top"), ("timeline", "timeline"), ("requests", "requests"),
            ("heap", "heap"), ("report", "report")))
        dropped = p["dropped"]
        rows.append([esc(p["service"] or "?"), esc(p["host"] or "?"), esc(p["pid"] if p["pid"] is not None else "?"),
                     str(p["segments"]), esc(fmt_bytes(p["bytes"])),
                     "-" if p["events"] is None else "{:,}".format(p["events"]),
                     esc(cli.format_wall(p["first_wall_ns"])), esc(cli.format_wall(p["last_wall_ns"])),
                     "?" if dropped is None else esc(", ".join("%s %d" % kv for kv in dropped.items()) or "none"),
                     "?" if p["bad_blocks"] is None else str(p["bad_blocks"]), views])
    out.append("<h2>Processes</h2>")
    out.append(table(["service", "host", "pid", "segments", "size", "events", "first", "last", "dropped",
                      "bad blocks", "views"], rows, numeric=(2, 3, 4, 5, 9)) if rows else
               '<p class="note">no segments here</p>')
    if cat["incidents"]:
        out.append("<h2>Incidents</h2>" + _incident_table(cat["incidents"], {}))
    if cat.get("crashes"):
        out.append('<p><a href="/crashes">%d crash%s</a> recorded</p>' % (
            cat["crashes"], "" if cat["crashes"] == 1 else "es"))
    problems = [(e["path"], e["error"]) for e in cat["errors"]]
    return "Traces", "".join(out), problems


def _flame_html(prof, title):
    svg = flamegraph.svg(prof.paths(trim=True), title=title, unit=prof.unit,
                         palette=cmd_flame.PALETTE[prof.kind])
    return flame_frame(svg, title)


def view_flame(ctx):
    trace, prof = _profile(ctx)
    title = "%s flame graph" % prof.spec["title"] + _endpoint_said(ctx)
    if prof.entries:
        title += " (%s samples)" % "{:,}".format(prof.samples)
    out = ["<h1>%s</h1>" % esc(title), _kinds_links(ctx, "flame")]
    if not prof.entries:
        out.append('<p class="error">%s</p>' % esc(_empty(ctx, prof, trace)))
        return title, "".join(out), _problems(trace, prof.problems)
    out.append('<p class="note">hover for details, click a frame to zoom and to open it in the call tree below, '
               '"Search" highlights by regular expression</p>')
    out.append(_flame_html(prof, title))
    root = calltree.build(prof.paths(trim=True))
    out.append('<h2>Call tree</h2><p class="note">clicked: <span id="tree-focus">-</span></p>')
    out.append('<div id="tree">%s</div>' % call_tree(root, prof.unit))
    return title, "".join(out), _problems(trace, prof.problems)


def _empty(ctx, prof, trace):
    """The line a profile with no samples gives (profiles.empty_message, and the endpoint filter)."""
    said = profiles.empty_message(prof, trace)
    if ctx.params.get("endpoint"):
        said += " (endpoint %s: only samples taken on a request's handling thread while a request of that " \
                "endpoint was in flight)" % ctx.params["endpoint"]
    return said


def _endpoint_said(ctx):
    """What the title says of an endpoint filter (the --endpoint of the reports)."""
    ep = ctx.params.get("endpoint")
    return (" inside %s requests" % ep) if ep else ""


def _kinds_links(ctx, view):
    kind = _kind(ctx.params)
    return "<p>%s</p>" % " | ".join(
        ("<b>%s</b>" % esc(profiles.KINDS[k]["title"])) if kind == k else
        '<a href="%s">%s</a>' % (esc(link(view, ctx.params, kind=k)), esc(profiles.KINDS[k]["title"]))
        for k in profiles.KINDS)


def view_top(ctx):
    trace, prof = _profile(ctx)
    title = "%s: top functions" % prof.spec["title"] + _endpoint_said(ctx)
    out = ["<h1>%s</h1>" % esc(title), _kinds_links(ctx, "top")]
    rows = prof.functions()
    if not rows:
        out.append('<p class="error">%s</p>' % esc(_empty(ctx, prof, trace)))
        return title, "".join(out), _problems(trace, prof.problems)
    total = prof.weight or 1.0
    out.append("<p>%s samples, %s</p>" % ("{:,}".format(prof.samples), esc(fmt_value(prof.weight, prof.unit))))
    cells = []
    for r in rows[:ROWS]:
        cells.append(["{:,}".format(r["self"]), "%.1f%%" % (100.0 * r["self_w"] / total),
                      esc(fmt_value(r["self_w"], prof.unit)), "{:,}".format(r["total"]),
                      "%.1f%%" % (100.0 * r["total_w"] / total), esc(fmt_value(r["total_w"], prof.unit)),
                      '<span class="fn">%s</span>' % esc(r["function"]), esc(r["file"])])
    out.append(table(["self", "self%", "self " + prof.unit, "total", "total%", "total " + prof.unit, "function",
                      "file"], cells, numeric=(0, 1, 2, 3, 4, 5)))
    if len(rows) > ROWS:
        out.append('<p class="note">%d of %d functions</p>' % (ROWS, len(rows)))
    return title, "".join(out), _problems(trace, prof.problems)


def _timeline_limit(params):
    """The most events drawn: limit=N (at most TIMELINE_EVENTS), else TIMELINE_EVENTS."""
    value = params.get("limit") or ""
    if not value:
        return TIMELINE_EVENTS
    if not value.isdigit() or int(value) < 1:
        raise ViewError("bad limit %r: a number of events, 1 to %d" % (value, TIMELINE_EVENTS))
    return min(int(value), TIMELINE_EVENTS)


def view_timeline(ctx):
    trace = ctx.trace()
    limit = _timeline_limit(ctx.params)
    if getattr(trace, "fleet", False):
        return "Timeline", "<h1>Timeline</h1>" + _fleet_timeline(trace, ctx.params, limit), _problems(trace)
    damage = []
    # The `chrome` report's events (cmd_chrome.timeline), one JSON line each in
    # a temporary file, read twice (span, then the events drawn): memory holds
    # the drawn events, never the whole timeline (as `chrome -o` holds none).
    with tempfile.TemporaryDirectory(prefix="flightrec-viewer-") as tmp:
        ct = cmd_chrome.timeline(trace, spill_dir=tmp, on_damage=lambda p, m: damage.append((p, m)))
        path = os.path.join(tmp, "timeline.jsonl")
        meta = ct.metadata()
        with open(path, "w", encoding="utf-8") as f:
            for text in ct.event_texts():
                f.write(text + "\n")

        def events():
            yield from meta
            with open(path, encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)

        body = _draw_timeline(events, ctx.params, limit)
    return "Timeline", "<h1>Timeline</h1>" + body, _problems(trace, damage)


def _fleet_timeline(trace, params, limit):
    """From ClickHouse: the database finds the selection's span, then the
    first `limit` events of the window and how many more there are
    (fleet_timeline.timeline: the same ChromeTrace events as from the files);
    drawn as the files' are."""
    from . import fleet_timeline
    first, last = fleet_timeline.span(trace)
    if first is None:
        return '<p class="error">no events in the selection</p>'
    span = (0.0, (last - first) / 1e3)
    window = _timeline_window(span, params)
    if window is None:
        return '<p class="error">the time window is empty</p>'
    # (a microsecond wider each side: the drawing keeps exactly the window)
    lo_ns, hi_ns = first + int(window[0] * 1e3) - 1000, first + int(window[1] * 1e3) + 1000
    with tempfile.TemporaryDirectory(prefix="flightrec-viewer-") as tmp:
        ct, left_out = fleet_timeline.timeline(trace, spill_dir=tmp, window=(lo_ns, hi_ns), limit=limit,
                                               origin=first)
        meta = ct.metadata()
        drawn = [json.loads(text) for text in ct.event_texts()]
    return _draw_timeline(lambda: iter(meta + drawn), params, limit, span=span, more=left_out)


def _timeline_window(span, params):
    """(lo, hi) in the timeline's microseconds: from/to as the profiles take
    them (seconds from the start, negative from the end) within span; None
    when empty."""
    lo, hi = span
    for name in ("from", "to"):
        value = _time(params, name)
        if value is not None:
            ns, from_end = profiles.parse_time(value)
            at = (span[1] - ns / 1e3) if from_end else (span[0] + ns / 1e3)
            if name == "from":
                lo = max(lo, at)
            else:
                hi = min(hi, at)
    return (lo, hi) if hi > lo else None


def _draw_timeline(events_of, params, limit=TIMELINE_EVENTS, span=None, more=0):
    """events_of(): a fresh iterator over the Chrome trace events (metadata
    first). span: the selection's (first, last) ts when the events given are
    already a window of it (ClickHouse), with `more` events of the window
    left out."""
    names, tracks = {}, {}
    procs = {}
    if span is None:
        span = [None, None]
        for e in events_of():
            if e.get("ph") == "M" or not isinstance(e.get("ts"), (int, float)):
                continue
            ts = e["ts"]
            end = ts + (e.get("dur") or 0)
            span[0] = ts if span[0] is None or ts < span[0] else span[0]
            span[1] = end if span[1] is None or end > span[1] else span[1]
        if span[0] is None:
            return '<p class="error">no events in the selection</p>'
    window = _timeline_window(span, params)
    if window is None:
        return '<p class="error">the time window is empty</p>'
    lo, hi = window
    drawn = 0
    skipped = more
    for e in events_of():
        if e.get("ph") == "M":
            if e.get("name") == "thread_name":
                names[(e.get("pid"), e.get("tid"))] = (e.get("args") or {}).get("name", "")
            elif e.get("name") == "process_name":
                procs[e.get("pid")] = (e.get("args") or {}).get("name", "")
            continue
        if e.get("ph") not in ("X", "i", "I") or not isinstance(e.get("ts"), (int, float)):
            continue
        ts, dur = e["ts"], e.get("dur") or 0
        if ts > hi or ts + dur < lo:
            continue
        if drawn >= limit:
            skipped += 1
            continue
        # only what is drawn (not the event's args and stacks)
        tracks.setdefault((e.get("pid"), e.get("tid", e.get("pid"))), []).append(
            (ts, dur, e.get("cat"), e.get("name") or "", e.get("ph")))
        drawn += 1
    width, left, row_h = 1100, 260, 18
    scale = (width - left - 10) / (hi - lo)
    colors = {"cpu": "#e65100", "offcpu": "#1565c0", "request": "#2e7d32"}
    order = sorted(tracks, key=lambda k: (k[0] or 0, k[1] or 0))
    height = row_h * len(order) + 30
    out = ['<p class="note">%s .. %s; <span id="drawn">%d</span> events drawn%s. Orange ticks: CPU samples, blue: off-CPU, green: '
           'requests, grey: other calls. Hover for names; <a href="%s">the Chrome/Perfetto JSON</a> '
           '(ui.perfetto.dev) has every event.</p>' % (
               "+%.3fs" % ((lo - span[0]) / 1e6), "+%.3fs" % ((hi - span[0]) / 1e6), drawn,
               (', <span id="not-drawn">%d</span> more not drawn (narrow the window with from/to)' % skipped) if skipped else "",
               esc(link("timeline.json", params))),
           '<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-size="11">' % (
               width, height)]
    for i, key in enumerate(order):
        y = 20 + i * row_h
        label = names.get(key) or ""
        out.append('<text x="2" y="%d">%s</text>' % (y + 12, esc("%s %s/%s" % (label, key[0], key[1]))))
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#eee"/>' % (left, width, y + row_h - 1,
                                                                             y + row_h - 1))
        for ts, dur, cat, name, ph in tracks[key]:
            x = left + (max(ts, lo) - lo) * scale
            w = max(1.0, (min(ts + dur, hi) - max(ts, lo)) * scale)
            color = colors.get(cat, "#9e9e9e")
            if ph != "X":
                w = 1.0
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>' % (
                x, y + 2, w, row_h - 5, color, esc(name)))
    out.append('<text x="%d" y="12">+%.3fs</text><text x="%d" y="12" text-anchor="end">+%.3fs</text>' % (
        left, (lo - span[0]) / 1e6, width, (hi - span[0]) / 1e6))
    out.append("</svg>")
    return "".join(out)


def timeline_json(ctx, out):
    """The selection's Chrome/Perfetto JSON (what `chrome -o` writes) onto a stream."""
    trace = ctx.trace()
    with tempfile.TemporaryDirectory(prefix="flightrec-viewer-") as tmp:
        ct = cmd_chrome.timeline(trace, spill_dir=tmp, on_damage=lambda p, m: None)
        return ct.write(out)


def _requests_report(trace, role, slowest_n, endpoint, trace_id):
    """The requests report of `requests [--endpoint E] [--trace-id T]`: the
    file reader's (cmd_requests.analyse) or, from ClickHouse, the database's
    (fleet_reports.analyse), as cmd_requests.run chooses."""
    if getattr(trace, "fleet", False):
        from . import fleet_reports
        return fleet_reports.analyse(trace, role, slowest_n, endpoint, trace_id)
    return cmd_requests.analyse(trace, role, slowest_n=slowest_n,
                                only=request_report.request_filter(endpoint, trace_id))


def _by_endpoint(trace, role, endpoint, trace_id):
    """`requests --by endpoint`'s rows (files or ClickHouse, as cmd_requests.run)."""
    if getattr(trace, "fleet", False):
        from . import fleet_reports
        return fleet_reports.by_endpoint(trace, role, endpoint, trace_id)
    return cmd_requests.by_endpoint(trace, role, request_report.request_filter(endpoint, trace_id))


def _endpoint_table(ctx, rows):
    """`requests --by endpoint` as a table; each endpoint links to its
    requests and to the profiles of the samples taken inside them."""
    cells = []
    keep = {k: v for k, v in ctx.params.items() if k in ("service", "host", "pid", "incident", "prefix")}
    for r in rows[:ROWS]:
        approx = "~" if r.get("approximate") else ""
        named = r["endpoint"] != "(unnamed)"
        links = " ".join('<a href="%s">%s</a>' % (esc(link(v, keep, endpoint=r["endpoint"], **extra)), label)
                         for v, label, extra in (("requests", "requests", {"role": r["role"]}),
                                                 ("flame", "flame", {}), ("top", "top", {}),
                                                 ("flame", "off-CPU", {"kind": "offcpu"}),
                                                 ("flame", "alloc", {"kind": "alloc"}))) if named else ""
        cells.append([esc(r["role"]), '<span class="ep">%s</span>' % esc(r["endpoint"]),
                      '<span class="ep-count">%d</span>' % r["count"], approx + fmt_ns(r["p50"]),
                      approx + fmt_ns(r["p90"]), approx + fmt_ns(r["p99"]), fmt_ns(r["max"]), fmt_ns(r["total_ns"]),
                      fmt_ns(r["cpu_ns"]), fmt_ns(r["offcpu_ns"]), fmt_bytes(r["alloc_bytes"]),
                      fmt_bytes(r["bytes_in"]), fmt_bytes(r["bytes_out"]), links])
    out = [table(["role", "endpoint", "count", "p50", "p90", "p99", "max", "total", "cpu/req", "offcpu/req",
                  "alloc/req", "in/req", "out/req", "views"], cells, numeric=tuple(range(2, 13)))]
    if len(rows) > ROWS:
        out.append('<p class="note">%d of %d endpoints</p>' % (ROWS, len(rows)))
    return "".join(out)


def view_requests(ctx):
    trace = ctx.trace()
    role = ctx.params.get("role") or "all"
    if role not in ("server", "client", "all"):
        raise ViewError("bad role %r: server, client or all" % role)
    endpoint = ctx.params.get("endpoint") or None
    trace_id = ctx.params.get("trace_id") or None
    rep = _requests_report(trace, role, 20 if trace_id else 10, endpoint, trace_id)
    summ, hist, details = rep["summary"], rep["histogram"], rep["details"]
    total = sum(s["count"] for s in summ.values())
    said = "".join(" %s <code>%s</code>" % (label, esc(v)) for label, v in (("endpoint", endpoint),
                                                                           ("trace id", trace_id)) if v)
    out = ['<h1>Requests</h1><p>role: %s</p>' % " | ".join(
        ('<b>%s</b>' % r) if r == role else '<a href="%s">%s</a>' % (esc(link("requests", ctx.params, role=r)), r)
        for r in ("all", "server", "client")),
        '<p><span id="request-count">%d</span> requests%s%s</p>' % (
            total, said and (" of" + said), (' (<a href="%s">all</a>)' % esc(link(
                "requests", ctx.params, endpoint=None, trace_id=None))) if said else "")]
    if not summ:
        if trace_id:
            why = "no request with trace id or request id %r (recorded with FLIGHTREC_TRACE_CONTEXT=1?)" % trace_id
        elif endpoint:
            why = "no request of endpoint %r in the selection" % endpoint
        elif not any(True for _ in trace.batches({"socket.op", "socket.exchange"})):
            why = "no socket events in the trace (FLIGHTREC_SOCKETS=0, or the program used no sockets)"
        else:
            why = "no requests: no connection had a request/response exchange (docs/REQUESTS.md)"
        out.append('<p class="error">%s</p>' % esc(why))
        return "Requests", "".join(out), _problems(trace)
    rows = []
    for name, s in summ.items():
        approx = "~" if s.get("approximate") else ""
        rows.append([esc(name), '<span class="role-count">%d</span>' % s["count"], str(s["connections"]),
                     approx + fmt_ns(s["p50"]), approx + fmt_ns(s["p90"]), approx + fmt_ns(s["p99"]),
                     fmt_ns(s["max"]), fmt_bytes(s["bytes_in"]), fmt_bytes(s["bytes_out"])])
    out.append(table(["role", "requests", "connections", "p50", "p90", "p99", "max", "in", "out"], rows,
                     numeric=(1, 2, 3, 4, 5, 6, 7, 8)))
    if not trace_id:
        eps = _by_endpoint(trace, role, endpoint, None)
        if any(r["endpoint"] != "(unnamed)" for r in eps):
            out.append('<h2>By endpoint</h2><p class="note">per request: CPU and off-CPU time and sampled '
                       'allocations on the handling thread while it was in flight (docs/REQUESTS.md); sorted '
                       'by total time</p>')
            out.append('<div id="by-endpoint">%s</div>' % _endpoint_table(ctx, eps))
    for name, buckets in hist.items():
        out.append("<h2>Latency histogram (%s)</h2>" % esc(name))
        out.append(bars([(b["lo_ns"], b["count"]) for b in buckets],
                        lambda lo, _b={b["lo_ns"]: b["hi_ns"] for b in buckets}: "%s .. %s" % (
                            fmt_ns(lo), fmt_ns(_b[lo]))))
    t0 = getattr(trace, "mono_range", trace.time_range)()[0] or 0
    thread_names = {(t["pid"], t["tid"]): t["name"] for t in trace.threads() if t.get("name")}
    if details:
        out.append("<h2>%s</h2>" % (("%d requests of this trace, slowest first" if trace_id else "Slowest %d")
                                    % len(details)))
    for i, (r, trees) in enumerate(details, 1):
        arrow = "&lt;-" if r["role"] == "server" else "-&gt;"
        where = "%s %s %s" % (esc(r["local"] or "?"), arrow, esc(r["peer"] or "?"))
        out.append('<h3 class="slow">#%d %s, %s request%s on conn %d (%s), pid %s tid %s %s at +%.3fs, %s in, %s out'
                   '</h3>' % (i, esc(fmt_ns(r["duration_ns"])), esc(r["role"]),
                              (' <span class="ep">%s</span>' % esc(r["endpoint"])) if r.get("endpoint") else "",
                              r["connection"], where, r["pid"], r["tid"],
                              esc(thread_names.get((r["pid"], r["tid"]), "")),
                              (r["start_ns"] - t0) / 1e9, fmt_bytes(r["bytes_in"]), fmt_bytes(r["bytes_out"])))
        tr = r.get("trace")
        if tr:
            tid = tr.get("trace_id")
            out.append('<p class="trace">trace %s parent span %s%s%s</p>' % (
                ('<a class="trace-id" href="%s">%s</a>' % (esc(link("requests", ctx.params, trace_id=tid,
                                                                    endpoint=None)), esc(tid))) if tid else "-",
                esc(tr.get("parent_span_id", "-")), " sampled" if tr.get("sampled") else "",
                (", request id <code>%s</code>" % esc(tr["request_id"])) if tr.get("request_id") else ""))
        if r["concurrent"]:
            out.append('<p class="note">shared: %d other requests in flight on this thread; the samples below '
                       'belong to all of them</p>' % r["concurrent"])
        ds = r.get("downstream")
        if ds and (ds["calls"] or ds["ambiguous_calls"]):
            out.append('<div>Downstream calls</div><pre class="downstream">%s</pre>' % esc("\n".join(
                downstream.render_request(ds, r.get("endpoint") or "request"))))
        if not trees:
            out.append('<p class="note">no samples on this thread inside the request</p>')
        for kind in cmd_requests.KINDS:
            root = trees.get(kind)
            if root is not None:
                out.append("<div>%s (%d samples)</div>%s" % (esc(cmd_requests.KIND_TITLES[kind]), root.samples,
                                                             text_tree(root, cmd_requests.KIND_UNITS[kind])))
    return "Requests", "".join(out), _problems(trace)


def view_sockets(ctx):
    trace = ctx.trace()
    if getattr(trace, "fleet", False):  # merged in the database, as cmd_sockets.run does (fleet_reports.py)
        from . import fleet_reports
        fleet_reports.check_loaded_by_this_version(trace)
        conns, unattributed = fleet_reports.socket_connections(trace)
    else:
        conns, unattributed = cmd_sockets.collect(trace)
    rows = sorted(conns.values(), key=lambda c: (c["pid"] or 0, c["open_ns"] or 0, c["id"]))
    dropped = {k: v for k, v in trace.dropped().items() if k.startswith("socket")}
    totals = cmd_sockets.totals_of(rows, unattributed, sum(dropped.values()))
    out = ["<h1>Sockets</h1>", '<p><span id="conn-count">%d</span> connections, %s in, %s out, %d operations, '
           '%d errors%s</p>' % (totals["connections"], fmt_bytes(totals["bytes_in"]), fmt_bytes(totals["bytes_out"]),
                                totals["ops"], totals["errors"],
                                (", %d records dropped: %s" % (totals["dropped_records"],
                                                               cmd_sockets.exactness_note(dropped)))
                                if totals["dropped_records"] else "")]
    if not rows:
        out.append('<p class="error">no connections in the selection</p>')
        return "Sockets", "".join(out), _problems(trace)
    t0 = getattr(trace, "mono_range", trace.time_range)()[0] or 0  # (as cmd_sockets.run)
    cells = []
    for c in rows[:ROWS]:
        lat = c.get("latency_ns") or {}
        cells.append([str(c["pid"]), str(c["id"]), esc(c["role"]), esc(c["local"]), esc(c["peer"]),
                      "-" if c["open_ns"] is None else "+%.3fs" % ((c["open_ns"] - t0) / 1e9),
                      "-" if c["close_ns"] is None else "+%.3fs" % ((c["close_ns"] - t0) / 1e9),
                      fmt_bytes(c["bytes_in"]), fmt_bytes(c["bytes_out"]), str(c["ops"]), str(c["errors"]),
                      fmt_ns(lat.get("p50")), fmt_ns(lat.get("p99"))])
    out.append(table(["pid", "conn", "role", "local", "peer", "open", "close", "in", "out", "ops", "errors",
                      "p50", "p99"], cells, numeric=(0, 1, 7, 8, 9, 10, 11, 12)))
    if len(rows) > ROWS:
        out.append('<p class="note">%d of %d connections</p>' % (ROWS, len(rows)))
    return "Sockets", "".join(out), _problems(trace)


def view_heap(ctx):
    trace = ctx.trace()
    if getattr(trace, "fleet", False):  # aggregated in the database, as cmd_heap.run does (fleet_heap.py)
        from . import fleet_heap
        doc, notes = fleet_heap.build(trace)
    else:
        doc, notes = cmd_heap.build(trace)
    sk = cmd_heap.SORT_KEYS["alloc"]
    sites = sorted(doc["sites"], key=lambda s: (-s[sk], -s["allocated_bytes_est"], s["function"], s["file"],
                                                s["line"]))
    problems = [n for n in notes if isinstance(n, tuple)]
    out = ["<h1>Heap</h1>"]
    out += ['<p class="note">%s</p>' % esc(n) for n in notes if not isinstance(n, tuple)]
    if not sites:
        out.append('<p class="error">no allocation samples in the selection</p>')
        return "Heap", "".join(out), _problems(trace, problems)
    rate = doc["sample_bytes"]
    out.append('<p>sampled every %s on average; allocated ~<span id="allocated">%s</span>, live at end ~%s, '
               'peak live ~%s</p>' % ("allocation" if rate <= 1 else fmt_bytes(rate),
                                      fmt_bytes(doc["allocated_bytes_est"]), fmt_bytes(doc["live_bytes_est"]),
                                      fmt_bytes(doc["peak_live_bytes_est"])))
    cells = []
    for s in sites[:ROWS]:
        where = "%s:%d" % (s["file"], s["line"]) if s["file"] else ""
        cells.append([fmt_bytes(s["allocated_bytes_est"]), "{:,}".format(s["count_est"]),
                      fmt_bytes(s["live_bytes_est"]), '<span class="fn">%s</span>' % esc(s["function"]), esc(where),
                      esc(" <- ".join(s["stack"][1:4])), esc(" > ".join(s["via"]))])
    out.append(table(["allocated", "count", "live", "site", "where", "called from", "via"], cells,
                     numeric=(0, 1, 2)))
    if len(sites) > ROWS:
        out.append('<p class="note">%d of %d sites</p>' % (ROWS, len(sites)))
    out.append('<p><a href="%s">live heap flame graph</a> | <a href="%s">allocations flame graph</a></p>' % (
        esc(link("flame", ctx.params, kind="live")), esc(link("flame", ctx.params, kind="alloc"))))
    return "Heap", "".join(out), _problems(trace, problems)


def _crashes_and_killed(trace):
    """info's crashes and killed lists: cmd_info's from the files, fleet_incidents's
    from ClickHouse (both made by crash_report.py)."""
    if getattr(trace, "fleet", False):
        from . import fleet_incidents
        return fleet_incidents.crashes_and_killed(trace)
    return cmd_info.crashes(trace), cmd_info.killed(trace)


def _incidents_of(trace):
    """incidents.find's list: from the files, or the ClickHouse `incidents` table
    (fleet_incidents.find, grouped by incidents.group as from the files)."""
    if getattr(trace, "fleet", False):
        from . import fleet_incidents
        return fleet_incidents.find(trace)
    return incidents.find(trace)


def view_crashes(ctx):
    trace = ctx.trace()
    crashes, killed = _crashes_and_killed(trace)
    names = {(t["pid"], t["tid"]): t["name"] for t in trace.threads()}
    out = ["<h1>Crashes</h1>"]
    if not crashes and not killed:
        out.append('<p id="no-crashes">no crash and no killing signal in the selection</p>')
    for c in crashes:
        addr = c["fault_addr"]
        out.append('<h2 class="crash">%s: %s (code %s%s) in pid %s tid %s "%s"</h2>' % (
            "recovered fault" if c["recovered"] else "crash", esc(c["signal"]), esc(c["code"]),
            ", fault address 0x%x" % addr if isinstance(addr, int) else "", c["pid"], c["tid"],
            esc(names.get((c["pid"], c["tid"]), "?"))))
        out.append(table(["#", "function", "where"], [[str(i), esc(f["function"]),
                                                       esc("%s:%d" % (f["file"], f["line"]) if f["file"] else "")]
                                                      for i, f in enumerate(c["stack"])], numeric=(0,)))
    for k in killed:
        sender = "raised by the kernel" if k["sender_pid"] is None else \
            "raised by the process itself" if k["sender_pid"] == k["pid"] else \
            "sent by pid %s (uid %s)" % (k["sender_pid"], k["sender_uid"])
        out.append("<h2>killed: %s %s, pid %s</h2>" % (esc(k["signal"]), esc(sender), k["pid"]))
    return "Crashes", "".join(out), _problems(trace)


def _incident_table(found, params):
    rows = []
    for inc in found:
        sel = dict(params, incident=str(inc["number"]))
        rows.append([str(inc["number"]), esc(inc["service"]), esc(inc["host"]), str(inc["pid"]),
                     esc(cli.format_wall(inc["first_wall_ns"])), "%.1fs" % ((inc["end_ns"] - inc["start_ns"]) / 1e9),
                     esc(", ".join(inc["reasons"])), str(inc["triggers"]), esc("; ".join(inc["notes"][:3])),
                     '<a href="%s">report</a> <a href="%s">flame</a>' % (esc(link("report", sel)),
                                                                         esc(link("flame", sel)))])
    return table(["#", "service", "host", "pid", "triggered", "window", "reason", "triggers", "notes", "views"],
                 rows, numeric=(0, 3, 7))


def view_incidents(ctx):
    trace = ctx.trace()
    found = _incidents_of(trace)
    out = ["<h1>Incidents</h1>"]
    if not found:
        out.append('<p>no incidents (no trigger events) in the selection</p>')
    else:
        params = {k: v for k, v in ctx.params.items() if k in ("service", "host", "pid", "prefix")}
        out.append(_incident_table(found, params))
    return "Incidents", "".join(out), _problems(trace)


def view_diff(ctx):
    p = ctx.params
    kind = _kind(p)
    form = ['<form class="sel" method="get" action="/diff"><b>Compare</b> kind <select name="kind">%s</select> ' % (
        "".join('<option%s>%s</option>' % (" selected" if kind == k else "", k) for k in profiles.KINDS))]
    for side in ("a", "b"):
        form.append(" <b>%s</b>:" % side.upper())
        for name in ("service", "host", "pid", "incident", "from", "to"):
            form.append(' %s <input name="%s_%s" value="%s" size="8">' % (name, side, name,
                                                                         esc(p.get(side + "_" + name, ""))))
    form.append(' endpoint <input name="endpoint" value="%s" size="14" placeholder="GET /api/*">' % esc(
        p.get("endpoint", "")))
    form.append(" <button>compare</button></form>")
    out = ["".join(form) if not ctx.saved else ""]
    sides = []
    for side in ("a", "b"):
        chosen = selection_of(p, side + "_")
        window = (_time(p, side + "_from") or _time(p, "from"), _time(p, side + "_to") or _time(p, "to"))
        # (build_sides adds the window to the description)
        sides.append((ctx.trace(chosen), window, _describe_side(chosen, (None, None))))
    if sides[0][0] is sides[1][0] and sides[0][1] == sides[1][1]:
        out.append('<p class="error">nothing to compare: give the two sides different processes or time windows '
                   '(e.g. a_to=10s and b_from=-10s)</p>')
        return "Compare", "".join(out), []
    notes = []
    for t, _, _ in sides:
        _paths_only(t)
    try:
        built = cmd_diff.build_sides(kind, p.get("thread") or None, sides[0], sides[1], notes,
                                     endpoint=p.get("endpoint") or None)
    except profiles.ProfileError as e:
        raise ViewError(str(e)) from None
    (pa, a, da), (pb, b, db) = built
    out.append("<h1>%s diff: B against A%s</h1>" % (esc(pa.spec["title"]), esc(_endpoint_said(ctx))))
    out.append("<p>A = %s: %s samples, %s<br>B = %s: %s samples, %s</p>" % (
        esc(da), "{:,}".format(a.samples), esc(fmt_value(a.weight, pa.unit)), esc(db), "{:,}".format(b.samples),
        esc(fmt_value(b.weight, pa.unit))))
    out += ['<p class="note">%s</p>' % esc(n) for n in notes if not isinstance(n, tuple)]
    title = "Differential flame graph (%s): B against A" % pa.spec["title"]
    svg = flamegraph.svg(b.entries, title=title, unit=pa.unit, paint=diff.painter(a, b),
                         subtitle="width: B; red: larger share in B, blue: smaller")
    out.append(flame_frame(svg, title))
    rows = diff.function_rows(a, b, order="share")
    cells = [[esc(fmt_value(r["a_self"], pa.unit)), esc(fmt_value(r["b_self"], pa.unit)), "%+.1f" % r["delta_self_pct"],
              esc(fmt_value(r["a_total"], pa.unit)), esc(fmt_value(r["b_total"], pa.unit)),
              "%+.1f" % r["delta_total_pct"], '<span class="fn">%s</span>' % esc(r["function"])] for r in rows[:ROWS]]
    out.append("<h2>Functions by change of self share (points)</h2>")
    out.append(table(["self A", "self B", "Δself", "total A", "total B", "Δtotal", "function"], cells,
                     numeric=(0, 1, 2, 3, 4, 5)))
    problems = _problems(sides[0][0], [n for n in notes if isinstance(n, tuple)])
    if sides[1][0] is not sides[0][0]:
        problems += _problems(sides[1][0])
    return "Compare", "".join(out), problems


def _describe_side(chosen, window):
    said = chosen.describe() or "everything"
    if chosen.incident is not None:
        said += ", incident %d" % chosen.incident
    if window[0] or window[1]:
        said += " [%s .. %s]" % (window[0] or "start", window[1] or "end")
    return said


def view_report(ctx):
    """The incident report: the selection's summary, crashes, incidents, the
    CPU flame graph and top, requests and heap on one page (save it as one file)."""
    parts, problems = [], []
    trace = ctx.trace()
    first, last = trace.time_range()
    procs = sorted({(s.header["service"], s.header["host"], s.header.get("pid", getattr(s, "pid", None)))
                    for s in trace.segments},
                   key=lambda k: (k[0] or "", k[1] or "", k[2] or 0))
    parts.append("<h1>Incident report</h1><p>%s; %d segments; %s</p>" % (
        esc(_describe_side(ctx.selection, (ctx.params.get("from"), ctx.params.get("to")))), len(trace.segments),
        esc("; ".join("%s on %s pid %s" % p for p in procs))))
    dropped = trace.dropped()
    parts.append("<p>dropped: %s</p>" % esc(", ".join("%s %d" % kv for kv in sorted(dropped.items())) or "none"))
    for fn in (view_crashes, view_incidents, view_flame, view_top, view_requests, view_heap):
        try:
            _, body, probs = fn(ctx)
        except ViewError as e:
            body, probs = '<p class="error">%s</p>' % esc(e), []
        parts.append('<section>%s</section>' % body.replace("<h1>", "<h2>").replace("</h1>", "</h2>"))
        problems += [p for p in probs if p not in problems]
    return "Incident report", "".join(parts), problems


VIEWS = {"": view_index, "flame": view_flame, "top": view_top, "timeline": view_timeline,
         "requests": view_requests, "sockets": view_sockets, "heap": view_heap, "crashes": view_crashes,
         "incidents": view_incidents, "diff": view_diff, "report": view_report}


class Context:
    """One request: the sources, its parameters, its selection."""

    def __init__(self, sources, params, saved=False):
        self.sources = sources
        self.params = params
        self.saved = saved
        self.selection = selection_of(params)
        self.started = time.monotonic()

    def trace(self, chosen=None):
        trace = self.sources.open(chosen or self.selection)
        if getattr(trace, "fleet", False):
            trace.merge_threads = False  # (the profile views set it: _paths_only)
        return trace
