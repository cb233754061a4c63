"""info: what a trace holds: segments (state, damage, time range), event
counts by type, dropped data, threads, any crash with its stack, and any
termination signal that ended a process (process.killed: who sent it), and
the incidents triggers opened (incidents.py), and what the disk budget
deleted in the directories read (budget_report.py)."""
import json

from .. import budget_report
from .. import cli
from .. import crash_report
from .. import incidents
from ..crash_report import CRASH_EVENT, KILLED_EVENT, RECOVERED_EVENT
from ..segment_info import segment_entry


def register(subparsers):
    p = subparsers.add_parser("info", help="segments, event counts, dropped data, threads")
    cli.add_paths_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(func=run)


def summarize(trace, paths=()):
    """The info document (what --json prints); paths: the directories whose
    disk-budget tallies it reports."""
    segments = [segment_entry(seg) for seg in trace.segments]
    first, last = trace.time_range()
    wall = None
    if first is not None:
        anchor = next(s for s in trace.segments if s.time_range()[0] is not None)
        wall = (anchor.wall_ns(first), anchor.wall_ns(last))
    counts = trace.event_counts()
    return {
        "segments": segments,
        "events": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "total_events": sum(counts.values()),
        "dropped": dict(sorted(trace.dropped().items())),
        "threads": trace.threads(),
        "crashes": crashes(trace),
        "killed": killed(trace),
        "incidents": incidents.find(trace),
        "time_range": {"first_ns": first, "last_ns": last,
                       "first_wall_ns": wall[0] if wall else None, "last_wall_ns": wall[1] if wall else None},
        "disk_budget": budget_report.find(paths),
        "errors": [{"path": p, "error": m} for p, m in trace.errors],
        "notes": [{"path": p, "note": m} for p, m in trace.notes],
    }


def crashes(trace):
    """crash_report.crashes of the trace's crash events."""
    return crash_report.crashes(trace.events([CRASH_EVENT]), trace.events([RECOVERED_EVENT]))


def killed(trace):
    """crash_report.killed of the trace's process.killed events."""
    return crash_report.killed(trace.events([KILLED_EVENT]))


def run(args):
    trace = cli.open_trace(args.paths)
    if getattr(trace, "fleet", False):  # --clickhouse: from the ledger and tables (fleet_reports.py)
        from .. import fleet_reports
        fleet_reports.check_loaded_by_this_version(trace)
        doc = fleet_reports.info_document(trace)
    else:
        doc = summarize(trace, args.paths)
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print_text(doc)
    return cli.exit_status(trace)


def print_text(doc):
    tr = doc["time_range"]
    t0 = tr["first_ns"]
    segs = doc["segments"]
    states = {}
    for s in segs:
        states[s["state"]] = states.get(s["state"], 0) + 1
    print("%d segment%s (%s), %d events" % (
        len(segs), "" if len(segs) == 1 else "s",
        ", ".join("%d %s" % (n, st) for st, n in sorted(states.items())) or "none", doc["total_events"]))
    if t0 is not None:
        print("time: %s .. %s (%s)" % (cli.format_wall(tr["first_wall_ns"]), cli.format_wall(tr["last_wall_ns"]),
                                       cli.format_seconds(tr["last_ns"] - t0)))
    if segs:
        print("\nsegments:")
        print("  %-9s %7s %4s %8s %10s %9s %9s  %s" % ("STATE", "PID", "SEQ", "EVENTS", "SIZE", "START",
                                                      "DURATION", "FILE"))
        for s in segs:
            start = None if s["first_time_ns"] is None else s["first_time_ns"] - t0
            dur = None if s["first_time_ns"] is None else s["last_time_ns"] - s["first_time_ns"]
            damage = ""
            if s["bad_blocks"]:
                damage = "  [%d bad block%s]" % (s["bad_blocks"], "" if s["bad_blocks"] == 1 else "s")
            print("  %-9s %7d %4d %8d %10s %9s %9s  %s%s" % (
                s["state"], s["pid"], s["sequence"], s["events"], cli.format_bytes(s["size"]),
                "+" + cli.format_seconds(start) if start is not None else "-", cli.format_seconds(dur),
                s["path"], damage))
    if doc["events"]:
        print("\nevents:")
        width = max(len(k) for k in doc["events"])
        for name, n in doc["events"].items():
            print("  %-*s %10d" % (width, name, n))
    print("\ndropped: %s" % ("none" if not doc["dropped"] else ""))
    if doc["dropped"]:
        width = max(len(k) for k in doc["dropped"])
        for kind, n in doc["dropped"].items():
            print("  %-*s %10d" % (width, kind, n))
    names = {(t["pid"], t["tid"]): t["name"] for t in doc["threads"]}
    for c in doc["crashes"]:
        addr = c["fault_addr"]
        print("\n%s: %s (code %s%s) in pid %s tid %s \"%s\"" % (
            "recovered fault (the program's handler went on)" if c["recovered"] else "crash", c["signal"], c["code"], ", fault address 0x%x" % addr if isinstance(addr, int) else "",
            c["pid"], c["tid"], names.get((c["pid"], c["tid"]), "?")))
        for i, f in enumerate(c["stack"]):
            where = "  %s:%d" % (f["file"], f["line"]) if f["file"] else ""
            print("  #%-2d %s%s" % (i, f["function"], where))
    for k in doc["killed"]:
        when = "+" + cli.format_seconds(k["time_ns"] - t0) if t0 is not None and k["time_ns"] is not None else "?"
        if k["sender_pid"] is None:
            sender = " raised by the kernel"
        elif k["sender_pid"] == k["pid"]:  # raise(), or the kernel's SIGPIPE for a write to a closed pipe
            sender = " raised by the process itself"
        else:
            sender = " sent by pid %s (uid %s)" % (k["sender_pid"], k["sender_uid"])
        print("\nkilled: %s%s, pid %s at %s (received by tid %s \"%s\")" % (
            k["signal"], sender, k["pid"], when, k["tid"], names.get((k["pid"], k["tid"]), "?")))
    incidents.print_text(doc["incidents"], cli.format_wall)
    budget_report.print_text(doc["disk_budget"], cli.format_wall, cli.format_bytes)
    threads = doc["threads"]
    if threads:
        print("\nthreads: %d" % len(threads))
        width = max(4, max(len(t["name"]) for t in threads))
        print("  %7s %8s  %-*s %12s %12s" % ("PID", "TID", width, "NAME", "START", "END"))
        for t in threads:
            rel = [("+" + cli.format_seconds(v - t0)) if v is not None and t0 is not None else "-"
                   for v in (t["start"], t["end"])]
            print("  %7s %8s  %-*s %12s %12s" % (t["pid"], t["tid"], width, t["name"], rel[0], rel[1]))
