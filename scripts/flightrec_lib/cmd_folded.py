"""folded: Brendan Gregg's collapsed stacks, one `root;child;leaf N` line
per distinct call path (flamegraph.pl, speedscope and others read it). N is
samples for cpu, nanoseconds for offcpu, estimated bytes for alloc/live."""
import sys

from . import cli, flamegraph, profiles


def register(subparsers):
    p = subparsers.add_parser("folded", help="collapsed stacks (root;child;leaf N)")
    profiles.add_arguments(p)
    p.set_defaults(func=run)


def run(args):
    trace, profile = profiles.open_profile(args)
    if not profile.entries:
        cli.err(profiles.empty_message(profile, trace))
        return cli.exit_status(trace)
    by_samples = profile.kind == "cpu"
    lines = flamegraph.folded((path, n if by_samples else w) for path, n, w in profile.paths(trim=True))
    write = sys.stdout.write
    for line in lines:
        write(line + "\n")
    return cli.exit_status(trace)
