"""flame: a self-contained interactive SVG flame graph (hover for details,
click to zoom, search), or with --folded the collapsed stacks the `folded`
command prints."""
from .. import cli, flamegraph, profile_cli, profiles

PALETTE = {"cpu": "hot", "offcpu": "io", "alloc": "mem", "live": "mem"}


def register(subparsers):
    p = subparsers.add_parser("flame", help="interactive SVG flame graph (or --folded stacks)")
    p.add_argument("-o", "--output", metavar="FILE.svg", help="where to write the SVG (or the folded stacks with --folded)")
    p.add_argument("--folded", action="store_true", help="print collapsed stacks instead (see `folded`)")
    p.add_argument("--title", help="the graph's title")
    profile_cli.add_arguments(p)
    p.set_defaults(func=run)


def run(args):
    if args.folded:
        return profile_cli.print_folded(args)
    if not args.output:
        raise cli.UsageError("flame needs -o FILE.svg (or --folded to print collapsed stacks)")
    trace, profile = profile_cli.open_profile(args)
    title = args.title or "%s flame graph" % profile.spec["title"]
    if profile.entries:
        title += " (%s samples)" % "{:,}".format(profile.samples)
    svg = flamegraph.svg(profile.paths(trim=True), title=title, unit=profile.unit,
                         palette=PALETTE[profile.kind])
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as e:
        raise cli.UsageError("cannot write %s: %s" % (args.output, e.strerror or e)) from None
    if not profile.entries:
        cli.err("%s; wrote an empty flame graph to %s" % (profiles.empty_message(profile, trace), args.output))
    return cli.exit_status(trace)
