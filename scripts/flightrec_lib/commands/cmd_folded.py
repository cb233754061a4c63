"""folded: Brendan Gregg's collapsed stacks, one `root;child;leaf N` line
per distinct call path (flamegraph.pl, speedscope and others read it). N is
samples for cpu, nanoseconds for offcpu, estimated bytes for alloc/live."""
from .. import profile_cli


def register(subparsers):
    p = subparsers.add_parser("folded", help="collapsed stacks (root;child;leaf N)")
    profile_cli.add_arguments(p)
    p.set_defaults(func=run)


def run(args):
    return profile_cli.print_folded(args)
