"""export_io: what the exports that leave the machine share (otlp, pprof
--push): the push options (--header, --timeout, --retries), headers from the
OTLP exporter variables, and writing an output file atomically."""
import os
import tempfile
import urllib.parse

from . import cli, http_push


def add_push_arguments(p, endpoint_help, flag="--endpoint"):
    p.add_argument(flag, metavar="URL", help="send to " + endpoint_help)
    p.add_argument("--header", action="append", metavar="NAME=VALUE",
                   help="an HTTP header to send (e.g. authentication; repeatable; never printed)")
    p.add_argument("--timeout", type=float, default=http_push.DEFAULT_TIMEOUT, metavar="SECONDS",
                   help="give up sending after this long, retries included (default %g)"
                        % http_push.DEFAULT_TIMEOUT)
    p.add_argument("--retries", type=int, default=http_push.DEFAULT_RETRIES, metavar="N",
                   help="retries on 429, 5xx or no connection (default %d)" % http_push.DEFAULT_RETRIES)


def push_settings(args, env_headers=()):
    """[(name, value)] headers, checked; bad values are a usage error."""
    if not (0 < args.timeout <= 3600):
        raise cli.UsageError("--timeout must be between 0 and 3600 seconds")
    if not (0 <= args.retries <= 20):
        raise cli.UsageError("--retries must be between 0 and 20")
    specs = []
    for var in env_headers:
        text = os.environ.get(var)
        if text:
            for item in text.split(","):
                if item.strip():
                    k, _, v = item.partition("=")
                    specs.append("%s=%s" % (k.strip(), urllib.parse.unquote(v.strip())))
            break  # the signal's own variable wins over the general one
    specs += args.header or []
    try:
        return http_push.parse_headers(specs)
    except ValueError as e:
        raise cli.UsageError(str(e)) from None


def write_atomically(path, data):
    """Writes data to path through a temporary file in the same directory, so
    a failure leaves whatever was there before untouched."""
    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=d)
    except OSError as e:
        raise cli.UsageError("cannot write %s: %s" % (path, e.strerror or e)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise cli.UsageError("cannot write %s: %s" % (path, e.strerror or e)) from None


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
