"""events: every event, decoded by the segment's schema, in time order across
all files. Text (one line per event) or --json (one JSON object per line:
type, time (CLOCK_MONOTONIC ns), pid, then the schema's fields; strings as
text, stacks as frame lists leaf first, bytes as hex)."""
import json
import math
import sys

from .. import cli


OUT_BATCH_CHARS = 1 << 20


def register(subparsers):
    p = subparsers.add_parser("events", help="every event, in time order")
    cli.add_paths_argument(p)
    p.add_argument("--type", action="append", metavar="TYPE",
                   help="only events of this type (repeatable; or comma-separated)")
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N events")
    p.set_defaults(func=run)


def _json_default(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    raise TypeError("cannot encode %s" % type(v).__name__)


def _finite(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def to_json(e):
    try:
        return json.dumps(e, default=_json_default, allow_nan=False, separators=(",", ":"))
    except ValueError:  # NaN/inf is not JSON: spell it as a string
        return json.dumps({k: _finite(v) for k, v in e.items()}, default=_json_default,
                          separators=(",", ":"))


def _frame_text(f):
    if f["function"]:
        return f["function"]
    return "0x%x" % f["address"]


def to_text(e, t0):
    parts = ["%+.9f" % ((e["time"] - t0) / 1e9), e["type"], "pid=%s" % e.get("pid")]
    for k, v in e.items():
        if k in ("type", "time", "pid"):
            continue
        if isinstance(v, list):
            v = "[" + " < ".join(_frame_text(f) for f in v) + "]"
        elif isinstance(v, (bytes, bytearray)):
            v = "0x" + v.hex() if v else '""'
        elif isinstance(v, str):
            v = json.dumps(v, ensure_ascii=False) if (not v or any(c in v for c in ' "=\\\n\t')) else v
        parts.append("%s=%s" % (k, v))
    return " ".join(parts)


def run(args):
    types = None
    if args.type:
        types = {t.strip() for arg in args.type for t in arg.split(",") if t.strip()}
    if args.limit is not None and args.limit < 0:
        raise cli.UsageError("--limit must be >= 0")
    trace = cli.open_trace(args.paths)
    if types:
        known = {t.name for s in trace.segments for t in s.schema.values()}
        for t in sorted(types - known):
            cli.err("note: no event type %r in these segments" % t)
    t0 = trace.time_range()[0] or 0
    # Lines are written in batches of at most OUT_BATCH_CHARS characters, not
    # of a number of lines: one event can be large (a stack of 64 KiB names
    # in a hostile file), and 4,096 such lines held 540 MiB with their join.
    out = []
    held = 0
    n = 0
    write = sys.stdout.write
    for e in trace.events(types):
        if args.limit is not None and n >= args.limit:
            break
        line = to_json(e) if args.json else to_text(e, t0)
        out.append(line)
        held += len(line) + 1
        n += 1
        if held >= OUT_BATCH_CHARS:
            write("\n".join(out) + "\n")
            out.clear()
            held = 0
    if out:
        write("\n".join(out) + "\n")
    return cli.exit_status(trace)
