"""pprof: a gzipped profile.proto for `go tool pprof` (and anything else that
reads pprof): sample types per kind, period, mappings with build-ids,
functions, locations with line numbers and inline frames, and thread labels
(pprof -tagfocus thread=NAME)."""
import os

from .. import cli, pprof_proto, profiles


def register(subparsers):
    p = subparsers.add_parser("pprof", help="export a profile as pprof's profile.proto (gzipped)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write it")
    profiles.add_arguments(p)
    p.set_defaults(func=run)


def encode(profile):
    spec = profile.spec
    b = pprof_proto.ProfileBuilder(spec["sample_types"], spec["period_type"], profile.period,
                                   default_sample_type=spec["default"])
    alloc = profile.unit == "bytes"
    for e in profile.entries:
        first = e.objects if alloc else e.samples
        labels = {"tid": e.tid}
        if e.thread:
            labels["thread"] = e.thread
        b.add(e.frames, [first, e.weight], labels)
    duration = max(0, profile.end_wall_ns - profile.start_wall_ns)
    return b.encode(time_nanos=profile.start_wall_ns, duration_nanos=duration,
                    comments=["flightrec %s profile" % profile.kind], main_path=profile.main_path)


def run(args):
    trace, profile = profiles.open_profile(args)
    data = encode(profile)
    try:
        with open(args.output, "wb") as f:
            f.write(data)
    except OSError as e:
        raise cli.UsageError("cannot write %s: %s" % (args.output, e.strerror or e)) from None
    if not profile.entries:
        cli.err("%s; wrote an empty profile to %s" % (profiles.empty_message(profile, trace), args.output))
    else:
        cli.err("wrote %s: %s profile, %d samples, %d stacks" % (
            os.path.basename(args.output), profile.kind, profile.samples, len(profile.entries)))
    return cli.exit_status(trace)
