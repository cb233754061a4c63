"""incidents: the incidents a trace records, and selecting one.

The recorder writes a `trigger` event whenever something asks it to keep
the recent past (a crash, `flightrec-dump trigger`, a slow request, memory
above a limit; preload/flush/window_keeper.h). Triggers of one process that
share an incident number and tag are one incident, spanning
[first trigger - before_ns, last trigger + after_ns]. Incidents are
numbered 1..N in wall-clock order across every process in the trace.

`--incident N` (every command) keeps only the segments of that incident's
process whose time ranges overlap its span: a report then covers the
incident's window, at segment granularity."""

TRIGGER_EVENT = "trigger"


class IncidentError(Exception):
    """No such incident (the caller turns it into a usage error)."""


def find(trace):
    """[incident dict], oldest first. Each: number, pid, host, service,
    start_ns/end_ns/first_ns (the process's monotonic clock), start_wall_ns,
    first_wall_ns, end_wall_ns, reasons (in order, unique), notes, triggers,
    suppressed, mode, tag."""
    by_key = {}
    for seg in trace.segments:
        if not any(b.type.name == TRIGGER_EVENT for b in seg.batches):
            continue
        host, pid = seg.header["host"], seg.header["pid"]
        for e in seg.events([TRIGGER_EVENT]):
            t = e.get("time")
            if not isinstance(t, int):
                continue
            key = (host, pid, e.get("incident"), e.get("tag"))
            inc = by_key.get(key)
            start = t - (e.get("before_ns") or 0)
            end = t + (e.get("after_ns") or 0)
            if inc is None:
                inc = by_key[key] = {
                    "pid": pid, "host": host, "service": seg.header["service"], "tag": e.get("tag") or "",
                    "mode": e.get("mode") or "", "first_ns": t, "start_ns": start, "end_ns": end,
                    "reasons": [], "notes": [], "triggers": 0, "suppressed": 0, "_seg": seg}
            if t < inc["first_ns"]:
                inc["first_ns"], inc["_seg"] = t, seg
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
        seg = inc.pop("_seg")
        inc["first_wall_ns"] = seg.wall_ns(inc["first_ns"])
        inc["start_wall_ns"] = seg.wall_ns(inc["start_ns"])
        inc["end_wall_ns"] = seg.wall_ns(inc["end_ns"])
        out.append(inc)
    out.sort(key=lambda i: (i["first_wall_ns"], i["host"], i["pid"]))
    for n, inc in enumerate(out, 1):
        inc["number"] = n
    return out


def select(trace, number):
    """Keeps in `trace` only the segments of incident `number` (1-based):
    its process's segments overlapping its span. Returns the incident."""
    found = find(trace)
    if not found:
        raise IncidentError("--incident %d: the trace records no incidents (no trigger events)" % number)
    if number < 1 or number > len(found):
        raise IncidentError("--incident %d: the trace has incident%s 1..%d" % (
            number, "" if len(found) == 1 else "s", len(found)))
    inc = found[number - 1]
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
