"""incidents: the incidents a trace records, and selecting one.

The recorder writes a `trigger` event whenever something asks it to keep
the recent past (a crash, `flightrec-dump trigger`, a slow request, memory
above a limit; preload/flush/window_keeper.h). Triggers of one process that
share an incident number and tag are one incident, spanning
[first trigger - before_ns, last trigger + after_ns]. Incidents are
numbered 1..N in wall-clock order across every process in the trace.

`--incident N` (every command) keeps only the segments of that incident's
process whose time ranges overlap its span: a report then covers the
incident's window, at segment granularity. `group` makes incidents of
trigger events from wherever they come: the segments here, a fleet
database's `incidents` table in fleet_incidents.py."""

TRIGGER_EVENT = "trigger"


class IncidentError(Exception):
    """No such incident (the caller turns it into a usage error)."""


def find(trace):
    """[incident dict], oldest first. Each: number, pid, host, service,
    start_ns/end_ns/first_ns (the process's monotonic clock), start_wall_ns,
    first_wall_ns, end_wall_ns, reasons (in order, unique), notes, triggers,
    suppressed, mode, tag."""
    def triggers():
        for seg in trace.segments:
            if not any(b.type.name == TRIGGER_EVENT for b in seg.batches):
                continue
            shift = seg.wall_offset()
            for e in seg.events([TRIGGER_EVENT]):
                yield seg.header, shift, e
    return group(triggers())


def group(triggers):
    """find's incidents of (segment header, wall minus monotonic ns of that
    segment, trigger event dict) in the trace's segment order, then file
    order: the file reader's segments, or a fleet database's `incidents`
    table (fleet_incidents.py)."""
    by_key = {}
    for header, shift, e in triggers:
        t = e.get("time")
        if not isinstance(t, int):
            continue
        host, pid = header["host"], header["pid"]
        key = (host, pid, e.get("incident"), e.get("tag"))
        inc = by_key.get(key)
        start = t - (e.get("before_ns") or 0)
        end = t + (e.get("after_ns") or 0)
        if inc is None:
            inc = by_key[key] = {
                "pid": pid, "host": host, "service": header["service"], "tag": e.get("tag") or "",
                "mode": e.get("mode") or "", "first_ns": t, "start_ns": start, "end_ns": end,
                "reasons": [], "notes": [], "triggers": 0, "suppressed": 0, "_shift": shift}
        if t < inc["first_ns"]:
            inc["first_ns"], inc["_shift"] = t, shift
        inc["start_ns"] = min(inc["start_ns"], start)
        inc["end_ns"] = max(inc["end_ns"], end)
        reason = e.get("reason") or "?"
        if reason not in inc["reasons"]:
            inc["reasons"].append(reason)
        if e.get("note"):
            inc["notes"].append(e["note"])
        inc["triggers"] += 1
        inc["suppressed"] += e.get("suppressed") or 0
    out = []
    for inc in by_key.values():
        shift = inc.pop("_shift")
        inc["first_wall_ns"] = inc["first_ns"] + shift
        inc["start_wall_ns"] = inc["start_ns"] + shift
        inc["end_wall_ns"] = inc["end_ns"] + shift
        out.append(inc)
    out.sort(key=lambda i: (i["first_wall_ns"], i["host"], i["pid"]))
    for n, inc in enumerate(out, 1):
        inc["number"] = n
    return out


def pick(found, number):
    """Incident `number` (1-based) of find's list, or IncidentError."""
    if not found:
        raise IncidentError("--incident %d: the trace records no incidents (no trigger events)" % number)
    if number < 1 or number > len(found):
        raise IncidentError("--incident %d: the trace has incident%s 1..%d" % (
            number, "" if len(found) == 1 else "s", len(found)))
    return found[number - 1]


def select(trace, number):
    """Keeps in `trace` only the segments of incident `number` (1-based):
    its process's segments overlapping its span. Returns the incident."""
    inc = pick(find(trace), number)
    kept = []
    for seg in trace.segments:
        if seg.header["host"] != inc["host"] or seg.header["pid"] != inc["pid"]:
            continue
        lo, hi = seg.time_range()
        if lo is not None and hi >= inc["start_ns"] and lo <= inc["end_ns"]:
            kept.append(seg)
    trace.segments = kept
    return inc


def print_text(found, format_wall):
    """The incident listing `info` prints."""
    if not found:
        return
    print("\nincidents: %d" % len(found))
    print("  %3s %7s  %-24s %-24s %-9s %s" % ("N", "PID", "TRIGGERED", "WINDOW FROM", "LENGTH", "REASON"))
    for inc in found:
        reason = ",".join(inc["reasons"])
        extra = []
        if inc["triggers"] > 1:
            extra.append("%d triggers" % inc["triggers"])
        if inc["suppressed"]:
            extra.append("%d suppressed" % inc["suppressed"])
        if inc["notes"]:
            extra.append('"%s"' % inc["notes"][0])
        print("  %3d %7d  %-24s %-24s %-9s %s%s" % (
            inc["number"], inc["pid"], format_wall(inc["first_wall_ns"]), format_wall(inc["start_wall_ns"]),
            "%.1fs" % ((inc["end_ns"] - inc["start_ns"]) / 1e9), reason,
            (" (" + ", ".join(extra) + ")") if extra else ""))
