"""pprof: a gzipped profile.proto for `go tool pprof` (and anything else that
reads pprof): sample types per kind, period, mappings with build-ids,
functions, locations with line numbers and inline frames, and thread labels
(pprof -tagfocus thread=NAME). `--push URL` sends it to Pyroscope's /ingest
instead of (or as well as) writing it: one request per process
(pyroscope.py; the HTTP exchange is http_push.py's)."""
import os
import urllib.parse

from .. import cli, export_io, http_push, pprof_proto, profile_cli, profiles, pyroscope


def register(subparsers):
    p = subparsers.add_parser("pprof", help="export a profile as pprof's profile.proto (gzipped)")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it")
    export_io.add_push_arguments(p, "Pyroscope: POST URL/ingest?format=pprof&name=SERVICE{host=,pid=}, "
                                   "one request per process", flag="--push")
    profile_cli.add_arguments(p)
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


def push(args, trace, profile, headers):
    """Sends one pprof per process; returns 0, or 1 after the first failure's line."""
    from ..otlp.request import process_starts
    procs = process_starts(trace)
    sent = 0
    for key, part in pyroscope.per_process(profile):
        exe = (procs.get(key) or {}).get("exe")
        part.main_path = exe or profile.main_path
        body, ctype = pyroscope.multipart(encode(part), profile.kind)
        url = pyroscope.ingest_url(args.push, key, part, exe)
        try:
            http_push.post(url, body, ctype, headers, what="profile",
                           timeout=args.timeout, retries=args.retries)
        except http_push.PushError as e:
            cli.err("%s%s" % (str(e), " (%d of the other processes' profiles were sent)" % sent if sent else ""))
            return 1
        sent += 1
    cli.err("sent to %s: %s profile of %d process%s" % (
        http_push.safe_url(urllib.parse.urlsplit(pyroscope.ingest_url(args.push, ("", "", 0), profile))),
        profile.kind, sent, "" if sent == 1 else "es"))
    return 0


def run(args):
    if not args.output and not args.push:
        raise cli.UsageError("say where the profile goes: -o FILE and/or --push URL")
    headers = export_io.push_settings(args) if args.push else []
    trace, profile = profile_cli.open_profile(args)
    if args.output:
        export_io.write_atomically(args.output, encode(profile))
        if not profile.entries:
            cli.err("%s; wrote an empty profile to %s" % (profiles.empty_message(profile, trace), args.output))
        else:
            cli.err("wrote %s: %s profile, %d samples, %d stacks" % (
                os.path.basename(args.output), profile.kind, profile.samples, len(profile.entries)))
    if args.push:
        if not profile.entries:
            cli.err("%s; nothing sent" % profiles.empty_message(profile, trace))
        elif push(args, trace, profile, headers):
            return 1
    return cli.exit_status(trace)
