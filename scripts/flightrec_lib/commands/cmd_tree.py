"""tree: the call-tree summary — one row per call path, root first (a
thread's start routine at the top), children in first-seen order, columns
`# samples | total ms | self ms | call tree` (bytes for alloc/live)."""
from .. import calltree, cli, profile_cli, profiles


def register(subparsers):
    p = subparsers.add_parser("tree", help="call-tree summary of a profile")
    p.add_argument("--min-pct", type=float, default=0.0, metavar="P",
                   help="leave out call paths below P%% of the total")
    profile_cli.add_arguments(p)
    p.set_defaults(func=run)


def run(args):
    if not 0 <= args.min_pct <= 100:
        raise cli.UsageError("--min-pct must be between 0 and 100")
    trace, profile = profile_cli.open_profile(args)
    if not profile.entries:
        print(profiles.empty_message(profile, trace))
        return cli.exit_status(trace)
    root = calltree.build(profile.paths(trim=True))
    for line in calltree.render(root, unit=profile.unit, min_pct=args.min_pct):
        print(line)
    return cli.exit_status(trace)
