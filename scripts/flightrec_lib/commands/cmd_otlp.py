"""otlp: the selected traces as one OpenTelemetry profiles request
(ExportProfilesServiceRequest, OTLP profiles/v1development, protobuf): written
to a file (-o) and/or sent to an OTLP/HTTP receiver (--endpoint). The
encoding is otlp/request.py's, the HTTP exchange http_push.py's; what the
export holds and what it was tested against: docs/EXPORT.md."""
import gzip
import os
import urllib.parse

from .. import cli, export_io, http_push, profile_cli, profiles
from ..otlp import request as otlp_request
from ..otlp import request_links

SIGNAL_PATH = "/v1development/profiles"
# OTLP exporters' standard header variables (k=v,k2=v2, values URL-encoded):
# credentials given this way stay out of the process list.
HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")


def register(subparsers):
    p = subparsers.add_parser("otlp", help="export profiles as OpenTelemetry OTLP (file and/or OTLP/HTTP)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the ExportProfilesServiceRequest (protobuf, not compressed) here")
    p.add_argument("--kind", action="append", metavar="KIND[,KIND...]",
                   help="which profiles: %s (repeatable; default: every kind the trace has)"
                        % ", ".join(profiles.KINDS))
    p.add_argument("--no-timestamps", action="store_true",
                   help="one aggregated value per stack and thread instead of one value and "
                        "timestamp per event (smaller; memory follows the stacks, not the events)")
    export_io.add_push_arguments(p, "an OTLP/HTTP receiver: POST URL (a URL with no path gets %s)" % SIGNAL_PATH)
    # --endpoint is the receiver (as OTLP exporters call it): the request
    # endpoint selection the other profile reports call --endpoint is this.
    p.add_argument("--request-endpoint", metavar="E",
                   help="only samples taken on a request's handling thread while a request of endpoint E "
                        "was in flight (shell wildcards: 'GET /api/*'; what the other reports call --endpoint)")
    p.add_argument("--no-links", action="store_true",
                   help="do not give samples their server request's endpoint attribute and trace link")
    profile_cli.add_arguments(p, kind=False, endpoint=False)
    p.set_defaults(func=run)


def kinds_of(args):
    if not args.kind:
        return list(profiles.KINDS)
    out = []
    for spec in args.kind:
        for k in spec.split(","):
            k = k.strip()
            if k not in profiles.KINDS:
                raise cli.UsageError("unknown --kind %r (kinds: %s)" % (k, ", ".join(profiles.KINDS)))
            if k not in out:
                out.append(k)
    return out


def endpoint_url(url):
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path=SIGNAL_PATH)
    return urllib.parse.urlunsplit(parts)


def build_request(trace, kinds, args, timestamps=True):
    """(request bytes, builder, [kinds with samples])."""
    links = None
    if not getattr(args, "no_links", False) and not getattr(trace, "fleet", False):
        # The server requests with an endpoint or a trace id; events are then
        # kept one by one (timeline) to be given theirs, with --no-timestamps too.
        links = request_links.RequestLinks(trace) or None
    builder = otlp_request.RequestBuilder(timestamps=timestamps, links=links)
    procs = otlp_request.process_starts(trace)
    written = []
    for kind in kinds:
        try:
            profile = profiles.build(trace, kind, thread=args.thread, t_from=args.t_from, t_to=args.t_to,
                                     timeline=timestamps or links is not None,
                                     endpoint=getattr(args, "request_endpoint", None), point_tag=links)
        except profiles.ProfileError as e:
            raise cli.UsageError(str(e)) from None
        for path, message in profile.problems:
            cli.err_file(path, message)
        if profile.entries:
            builder.add(profile, procs)
            written.append(kind)
    return builder.encode(), builder, written


def run(args):
    if not args.output and not args.endpoint:
        raise cli.UsageError("say where the profiles go: -o FILE and/or --endpoint URL")
    kinds = kinds_of(args)
    headers = export_io.push_settings(args, HEADER_VARIABLES) if args.endpoint else []
    trace = cli.open_trace(args.paths)
    data, builder, written = build_request(trace, kinds, args, timestamps=not args.no_timestamps)
    status = cli.exit_status(trace)
    if not written:
        cli.err("no samples of %s in the selection%s" % (
            ", ".join(kinds), "" if not trace.segments else " (--thread/--from/--to, or the trace has none)"))
    summary = "%d processes, %d profiles (%s), %d samples" % (
        len(builder._processes), builder.profiles_written, ", ".join(written) or "none",
        builder.samples_written)
    if builder.linked_samples:
        summary += " (%d linked to a request's trace)" % builder.linked_samples
    if args.output:
        export_io.write_atomically(args.output, data)
        cli.err("wrote %s: %s, %d bytes" % (os.path.basename(args.output), summary, len(data)))
    if args.endpoint:
        if not written:
            cli.err("nothing sent to %s" % http_push.safe_url(urllib.parse.urlsplit(args.endpoint)))
            return status
        url = endpoint_url(args.endpoint)
        try:
            answer = http_push.post(url, gzip.compress(data, mtime=0), "application/x-protobuf", headers,
                                    content_encoding="gzip", what="profiles",
                                    timeout=args.timeout, retries=args.retries)
        except http_push.PushError as e:
            cli.err(str(e))
            return 1
        where = http_push.safe_url(urllib.parse.urlsplit(url))
        rejected, message = partial_success(answer.body)
        if rejected or message:
            cli.err("%s took the request but rejected %d profiles%s" % (
                where, rejected, ": " + http_push._printable(message) if message else ""))
            return 1 if rejected else status
        cli.err("sent to %s: %s" % (where, summary))
    return status


def partial_success(body):
    """(rejected_profiles, error_message) of an ExportProfilesServiceResponse."""
    rejected, message = 0, ""
    try:
        pos = 0
        while pos < len(body):
            key, pos = http_push._uvarint(body, pos)
            if key == (1 << 3) | 2:  # partial_success
                size, pos = http_push._uvarint(body, pos)
                inner, pos = body[pos:pos + size], pos + size
                p = 0
                while p < len(inner):
                    k, p = http_push._uvarint(inner, p)
                    if k == (1 << 3) | 0:
                        rejected, p = http_push._uvarint(inner, p)
                    elif k == (2 << 3) | 2:
                        n, p = http_push._uvarint(inner, p)
                        message = inner[p:p + n].decode("utf-8", "replace")
                        p += n
                    else:
                        return 0, ""
            else:
                return 0, ""  # not one (or JSON): nothing to say
    except IndexError:
        return 0, ""
    return rejected, message
