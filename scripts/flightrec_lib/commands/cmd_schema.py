"""schema: the event types a trace's segments define (names, fields, types,
units), as read from their SCHEMA blocks."""
import json

from .. import cli


def register(subparsers):
    p = subparsers.add_parser("schema", help="event types: fields, types and units")
    cli.add_paths_argument(p)
    p.add_argument("--json", action="store_true", help="a JSON list instead of text")
    p.set_defaults(func=run)


def collect(trace):
    """Distinct type layouts: [{name, fields, segments: n, events: n}] by name.
    A type whose layout changed between segments (a different build of the
    recorder) appears once per layout."""
    layouts = {}
    for seg in trace.segments:
        counts = seg.event_counts()
        for t in seg.schema.values():
            key = (t.name, tuple((f.name, f.type, f.unit) for f in t.fields))
            entry = layouts.get(key)
            if entry is None:
                entry = layouts[key] = {"name": t.name, "fields": [f.to_json() for f in t.fields],
                                        "segments": 0, "events": 0}
            entry["segments"] += 1
            entry["events"] += counts.get(t.name, 0)
    return sorted(layouts.values(), key=lambda e: e["name"])


def run(args):
    trace = cli.open_trace(args.paths)
    types = collect(trace)
    if args.json:
        print(json.dumps(types, indent=1))
    else:
        for t in types:
            print("%s  (%d event%s in %d segment%s)" % (t["name"], t["events"], "" if t["events"] == 1 else "s",
                                                       t["segments"], "" if t["segments"] == 1 else "s"))
            width = max(len(f["name"]) for f in t["fields"])
            for f in t["fields"]:
                print("  %-*s  %-7s %s" % (width, f["name"], f["type"], f["unit"]))
    return cli.exit_status(trace)
