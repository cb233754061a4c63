"""folded: Brendan Gregg's collapsed stacks, one `root;child;leaf N` line
per distinct call path (flamegraph.pl, speedscope and others read it). N is
samples for cpu, nanoseconds for offcpu, estimated bytes for alloc/live."""
import sys

from .. import cli, flamegraph, profiles


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
