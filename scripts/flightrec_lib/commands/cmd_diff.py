"""diff: what changed between two profiles — two traces (`diff A B`), or two
time windows of one trace (`diff --a-to 10s --b-from -10s T`) — as a
differential top (default), call tree (--tree) or flame graph (--flame -o
FILE.svg: drawn from B, red where B spends a larger share than A, blue
where smaller). `diff --requests T` compares the slowest requests with
typical ones instead (requests_diff.py).

--from/--to select the window of both sides; --a-from/--a-to and
--b-from/--b-to override them per side. Changes are in points of each
side's total (diff.py), so traces of different lengths compare fairly; the
A and B columns keep the plain amounts.

`--json` prints {"kind", "unit", "a": {"paths", "samples", "total"}, "b": {...},
"functions": [{"function", "a_self", "b_self", "a_total", "b_total",
"a_self_pct", ..., "delta_self_pct", "delta_total_pct"}]} (values in ns or
bytes), or with --tree {"tree": [{"path": [...], "a", "b"}]}.
"""
import json
import sys

from .. import cli, diff, flamegraph, profile_cli, profiles


def register(subparsers):
    p = subparsers.add_parser("diff", help="compare two traces or time windows: top, --tree, --flame; "
                                           "--requests: slow requests against typical ones")
    p.add_argument("--tree", action="store_true", help="a differential call tree instead of the function table")
    p.add_argument("--flame", action="store_true", help="a differential flame graph (with -o FILE.svg)")
    p.add_argument("-o", "--output", metavar="FILE.svg", help="where --flame writes the SVG")
    p.add_argument("--requests", action="store_true",
                   help="compare the slowest requests of the trace with typical ones (see requests --diff)")
    p.add_argument("--role", choices=("server", "client", "all"), default="all",
                   help="--requests: server-side requests, client-side, or both (default)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="show the first N functions (text default 30, JSON default all)")
    p.add_argument("--min-pct", type=float, default=1.0, metavar="P",
                   help="--tree: leave out call paths below P%% (average of the two sides; default 1)")
    for side in ("a", "b"):
        p.add_argument("--%s-from" % side, dest="%s_from" % side, metavar="TIME",
                       help="start of side %s's window (as --from)" % side.upper())
        p.add_argument("--%s-to" % side, dest="%s_to" % side, metavar="TIME",
                       help="end of side %s's window (as --to)" % side.upper())
    profile_cli.add_arguments(p)
    p.set_defaults(func=run)


def _side_paths(args):
    if len(args.paths) > 2:
        raise cli.UsageError("diff takes one trace (two windows of it) or two traces: A B")
    return args.paths[0], args.paths[-1]


def _window(args, side):
    return (getattr(args, side + "_from") or args.t_from, getattr(args, side + "_to") or args.t_to)


def _describe(path, window):
    lo, hi = window
    if lo is None and hi is None:
        return path
    return "%s [%s .. %s]" % (path, lo or "start", hi or "end")


def run(args):
    if args.limit is not None and args.limit < 0:
        raise cli.UsageError("--limit must be >= 0")
    if not 0 <= args.min_pct <= 100:
        raise cli.UsageError("--min-pct must be between 0 and 100")
    if args.requests:
        from .. import requests_diff
        if len(args.paths) != 1 and getattr(args, "clickhouse", None) is None:
            raise cli.UsageError("diff --requests takes one trace")
        trace = cli.open_trace(args.paths)
        if getattr(trace, "fleet", False):  # percentiles and members from the database (fleet_reports.py)
            from .. import fleet_reports
            return requests_diff.diff_report(trace, args.role, args.json, args.limit, args.min_pct,
                                             fleet_reports.diff_groups, fleet_reports.read_samples)
        return requests_diff.diff_report(trace, args.role, args.json, args.limit, args.min_pct)
    if args.flame and not args.output:
        raise cli.UsageError("diff --flame needs -o FILE.svg")
    path_a, path_b = _side_paths(args)
    win_a, win_b = _window(args, "a"), _window(args, "b")
    if path_a == path_b and win_a == win_b:
        raise cli.UsageError("nothing to compare: give two traces (diff A B) or two windows "
                             "(--a-from/--a-to, --b-from/--b-to)")
    trace_a = cli.open_trace([path_a])
    trace_b = trace_a if path_b == path_a else cli.open_trace([path_b])
    notes = []
    try:
        sides = build_sides(args.kind, args.thread, (trace_a, win_a, path_a), (trace_b, win_b, path_b), notes,
                            endpoint=args.endpoint)
    except profiles.ProfileError as e:
        raise cli.UsageError(str(e)) from None
    for note in notes:
        if isinstance(note, tuple):
            cli.err_file(*note)
        else:
            cli.err(note)
    (pa, a, da), (pb, b, db) = sides
    status = max(cli.exit_status(trace_a), cli.exit_status(trace_b))
    if not a.entries and not b.entries and not args.flame:
        return status  # both sides said why on stderr: no table of zeros
    if args.flame:
        return _flame(args, pa, a, b, da, db) or status
    if args.tree:
        _tree(args, pa, a, b, da, db)
        return status
    _top(args, pa, a, b, da, db)
    return status


def build_sides(kind, thread, side_a, side_b, notes, endpoint=None):
    """[(profile, diff.Side, description)] for sides A and B, each given as
    (trace, (from, to), name): what `diff` compares and the viewer draws.
    Problems go to notes: (path, message) per file, or a line saying a side
    is empty. A bad request raises profiles.ProfileError naming the side."""
    sides = []
    for (trace, (lo, hi), path), label in ((side_a, "A"), (side_b, "B")):
        try:
            profile = profiles.build(trace, kind, thread=thread, t_from=lo, t_to=hi, endpoint=endpoint)
        except profiles.ProfileError as e:
            raise profiles.ProfileError("side %s: %s" % (label, e)) from None
        notes.extend(profile.problems)
        if not profile.entries and trace.segments:  # no segments: each file has had its line already
            notes.append("side %s (%s): %s" % (label, _describe(path, (lo, hi)),
                                               profiles.empty_message(profile, trace)))
        sides.append((profile, diff.Side(profile.paths(trim=True), label=label), _describe(path, (lo, hi))))
    return sides


def _fmt(unit):
    if unit == "ns":
        return "ms", lambda v: "{:,.2f}".format(v / 1e6)
    return unit, lambda v: "{:,}".format(int(round(v)))


def _header(profile, a, b, da, db):
    label, fmt = _fmt(profile.unit)
    return ["%s diff: A = %s: %s samples, %s %s" % (profile.spec["title"], da, "{:,}".format(a.samples),
                                                   fmt(a.weight), label),
            "%s      B = %s: %s samples, %s %s" % (" " * len(profile.spec["title"]), db,
                                                  "{:,}".format(b.samples), fmt(b.weight), label),
            "Δ: change of each side's share of its total, in points (+ grew in B, - shrank)"]


def _top(args, profile, a, b, da, db):
    rows = diff.function_rows(a, b, order="share")
    limit = args.limit if args.limit is not None else (None if args.json else 30)
    shown = rows if limit is None else rows[:limit]
    if args.json:
        doc = {"kind": profile.kind, "unit": profile.unit,
               "a": {"paths": da, "samples": a.samples, "total": a.weight},
               "b": {"paths": db, "samples": b.samples, "total": b.weight},
               "functions": shown}
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    for line in _header(profile, a, b, da, db):
        print(line)
    label, fmt = _fmt(profile.unit)
    table = [("self A " + label, "self B " + label, "Δself", "total A " + label, "total B " + label, "Δtotal",
              "function")]
    for r in shown:
        table.append((fmt(r["a_self"]), fmt(r["b_self"]), "%+.1f" % r["delta_self_pct"],
                      fmt(r["a_total"]), fmt(r["b_total"]), "%+.1f" % r["delta_total_pct"], r["function"]))
    widths = [max(len(row[i]) for row in table) for i in range(6)]
    for row in table:
        print("  ".join(row[i].rjust(widths[i]) for i in range(6)) + "  " + row[6])
    if len(shown) < len(rows):
        print("(%d of %d functions; --limit N for more)" % (len(shown), len(rows)))


def _tree(args, profile, a, b, da, db):
    rows = diff.tree_rows(a, b, min_pct=args.min_pct)
    if args.json:
        doc = {"kind": profile.kind, "unit": profile.unit,
               "a": {"paths": da, "samples": a.samples, "total": a.weight},
               "b": {"paths": db, "samples": b.samples, "total": b.weight},
               "tree": [{"path": list(p), "a": av, "b": bv} for _, p, av, bv in rows]}
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    for line in _header(profile, a, b, da, db):
        print(line)
    for line in render_tree(rows, a, b, profile.unit):
        print(line)


def render_tree(rows, a, b, unit):
    """Lines of a differential call tree: A, B, change in points, the tree."""
    label, fmt = _fmt(unit)
    if a.by_samples and b.by_samples:
        label, fmt = "samples", lambda v: "{:,}".format(int(round(v)))
    table = [("A " + label, "B " + label, "Δ", "call tree")]
    for drawn, _, av, bv in rows:
        table.append((fmt(a.value(av)), fmt(b.value(bv)), "%+.1f" % (b.share(bv) - a.share(av)), drawn))
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    return [" | ".join(r[i].rjust(widths[i]) for i in range(3)) + " | " + r[3] for r in table]


def _flame(args, profile, a, b, da, db):
    title = "Differential flame graph (%s): B against A" % profile.spec["title"]
    subtitle = "A = %s, B = %s; width: B; red: larger share in B, blue: smaller" % (da, db)
    svg = flamegraph.svg(b.entries, title=title, unit=profile.unit, paint=diff.painter(a, b), subtitle=subtitle)
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as e:
        raise cli.UsageError("cannot write %s: %s" % (args.output, e.strerror or e)) from None
    return 0

