"""profile_cli: the command line of the profile reports (top, tree, folded,
flame, pprof, otlp, speedscope, diff): the options they share, opening a
profile from them, and the folded-stacks output `folded` and `flame
--folded` both print.

Kept apart from profiles.py so that the profile builder knows nothing of
the CLI (cli.py opens traces, and with --clickhouse reaches profiles through
fleet_profiles.py: the builder importing the CLI made a cycle).
"""
import sys

from . import cli, flamegraph, profiles


def add_arguments(parser, kinds=tuple(profiles.KINDS), default="cpu", kind=True, endpoint=True):
    """--kind, --thread, --from, --to: the selection every profile report takes
    (kind=False: the caller defines its own --kind)."""
    if kind:
        parser.add_argument("--kind", choices=kinds, default=default,
                            help="which profile (default %s)" % default)
    parser.add_argument("--thread", metavar="T",
                        help="only thread T: a tid, or a thread name (shell wildcards allowed)")
    parser.add_argument("--from", dest="t_from", metavar="TIME",
                        help="start of the time range, from the start of the trace "
                             "(seconds, or 250ms, 1.5s, 2h; negative counts from the end), "
                             "or an ISO time (2026-12-04T16:41:22Z)")
    parser.add_argument("--to", dest="t_to", metavar="TIME", help="end of the time range (as --from)")
    if endpoint:  # (otlp has an --endpoint of its own: the collector)
        parser.add_argument("--endpoint", metavar="E",
                            help="only samples taken on a request's handling thread while a request of endpoint "
                                 "E was in flight (shell wildcards: 'GET /api/*'; docs/REQUESTS.md)")
    parser.add_argument("--since", metavar="DURATION",
                        help="only the last DURATION before now (e.g. 30m, 2h, 1d; wall clock): "
                             "--from at now minus DURATION")
    cli.add_paths_argument(parser)


def open_profile(args):
    """(trace, profile) for a command's parsed arguments; bad requests raise
    cli.UsageError, unreadable input is reported by cli.open_trace."""
    trace = cli.open_trace(args.paths)
    try:
        profile = profiles.build(trace, args.kind, thread=args.thread, t_from=args.t_from, t_to=args.t_to,
                                 endpoint=getattr(args, "endpoint", None))
    except profiles.ProfileError as e:
        raise cli.UsageError(str(e)) from None
    for path, message in profile.problems:
        cli.err_file(path, message)
    return trace, profile


def print_folded(args):
    """`folded` (and `flame --folded`): one `root;child;leaf N` line per call
    path, to stdout or to args.output."""
    trace, profile = open_profile(args)
    if not profile.entries:
        cli.err(profiles.empty_message(profile, trace))
        return cli.exit_status(trace)
    by_samples = profile.kind == "cpu"
    lines = flamegraph.folded((path, n if by_samples else w) for path, n, w in profile.paths(trim=True))
    output = getattr(args, "output", None)  # `flame --folded -o FILE`
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines)
        except OSError as e:
            raise cli.UsageError("cannot write %s: %s" % (output, e.strerror or e)) from None
    else:
        sys.stdout.writelines(line + "\n" for line in lines)
    return cli.exit_status(trace)
