"""viewer_server: the HTTP side of `flightrec-dump serve` — a
ThreadingHTTPServer (standard library) that answers GET for the views
(viewer_views.py) and nothing else.

Safe by construction for one person on one machine:
* it binds 127.0.0.1 unless told otherwise; on a loopback address a request
  whose Host header is not this server (a web page elsewhere resolving its
  own name to 127.0.0.1) is refused;
* URLs name views and selections, never files: the sources are fixed at
  start (viewer_sources.py), there are no static files, no shell, no eval;
* every value from the trace is escaped (viewer_html.esc), pages carry a
  Content-Security-Policy that forbids loading anything from elsewhere;
* views run one at a time (traces are not shared between threads); a
  request that waits too long for another gets a "busy" page, so the server
  always answers;
* any failure is a page saying what went wrong in one line (stderr gets the
  same line); a traceback never reaches the browser.
"""
import http.server
import ipaddress
import os
import socket
import sys
import threading
import time
import traceback
import urllib.parse

from . import cli, viewer_html, viewer_sources, viewer_views
from .fleet_db import FleetError

# How long a request waits for the view being built before the page says "busy".
BUSY_WAIT_S = 20


class ViewerServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, sources):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Handler)
        self.sources = sources
        self.lock = threading.Lock()
        self.busy_since = None
        self.loopback = ipaddress.ip_address(address[0]).is_loopback

    def allowed_host(self, host):
        """On loopback, the Host header must name this server (DNS rebinding)."""
        if not self.loopback:
            return True
        port = self.server_address[1]
        return (host or "").lower() in ("127.0.0.1:%d" % port, "localhost:%d" % port, "[::1]:%d" % port)


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "flightrec-viewer"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = 120  # a connection that sends nothing for this long is closed (its thread ends)

    def log_message(self, fmt, *args):  # quiet: errors get their own line
        pass

    def do_HEAD(self):
        self._send(405, "text/plain; charset=utf-8", b"GET only\n")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD

    def do_GET(self):
        srv = self.server
        if not srv.allowed_host(self.headers.get("Host")):
            return self._send(403, "text/plain; charset=utf-8", b"this viewer answers only to its own address\n")
        url = urllib.parse.urlsplit(self.path)
        view = url.path.strip("/")
        params = {}
        title = "flightrec"
        try:
            params = viewer_views.check_params(urllib.parse.parse_qs(url.query, keep_blank_values=True))
            if view == "favicon.ico":
                return self._send(204, "text/plain", b"")
            if view not in viewer_views.VIEWS and view != "timeline.json":
                return self._page(404, view, {}, "Not found", "no such view: /%s" % view[:100])
            if not srv.lock.acquire(timeout=BUSY_WAIT_S):
                waited = time.monotonic() - (srv.busy_since or time.monotonic())
                return self._page(503, view, params, "Busy", "another view has been building for %.0fs (a large "
                                  "selection?); reload in a moment, or narrow the selection" % waited,
                                  extra=[("Retry-After", "5")])
            try:
                srv.busy_since = time.monotonic()
                saved = params.get("save") == "1"
                ctx = viewer_views.Context(srv.sources, params, saved)
                if view == "timeline.json":
                    return self._timeline_json(ctx)
                title, body, problems = viewer_views.VIEWS[view](ctx)
                doc = viewer_html.page(view, params, title, body, srv.sources.describe(), saved=saved,
                                       problems=problems, generated=cli.format_wall(time.time_ns()))
            finally:
                srv.busy_since = None
                srv.lock.release()
            extra = []
            if saved:
                extra.append(("Content-Disposition", 'attachment; filename="flightrec-%s.html"' % (view or "traces")))
            return self._send(200, "text/html; charset=utf-8", doc.encode("utf-8"), extra)
        except viewer_views.ViewError as e:
            return self._page(400, view, params, "Bad request", str(e))
        except viewer_sources.TooBig as e:
            return self._page(413, view, params, "Selection too large", str(e))
        except viewer_sources.SourceError as e:
            return self._page(502, view, params, "Cannot read the source", str(e))
        except FleetError as e:  # ClickHouse down or refusing: one line, no credentials (fleet_db)
            return self._page(502, view, params, "Cannot read the source", str(e))
        except (BrokenPipeError, ConnectionResetError):
            return None
        except Exception as e:  # never a traceback in the browser
            if os.environ.get("FLIGHTREC_DUMP_DEBUG"):
                traceback.print_exc()
            message = "internal error: %s: %s" % (type(e).__name__, e)
            cli.err("serve /%s: %s" % (view, message))
            return self._page(500, view, params, "Internal error", message + " (the server log has this line; "
                              "set FLIGHTREC_DUMP_DEBUG=1 for details)")

    def _timeline_json(self, ctx):
        import tempfile
        with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as f:
            viewer_views.timeline_json(ctx, f)
            f.seek(0)
            data = f.read().encode("utf-8")
        self._send(200, "application/json", data,
                   [("Content-Disposition", 'attachment; filename="flightrec-timeline.json"')])

    def _page(self, status, view, params, title, message, extra=()):
        doc = viewer_html.error_page(view if view in viewer_views.VIEWS else "", params, title, message,
                                     self.server.sources.describe())
        try:
            self._send(status, "text/html; charset=utf-8", doc.encode("utf-8"), extra)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, status, ctype, data, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", viewer_html.CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cache-Control", "no-store")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


def serve(paths, bind, port, max_bytes, out=sys.stdout, fleet=None):
    """Runs the viewer until interrupted. Returns an exit status."""
    if bind == "localhost":
        bind = "127.0.0.1"
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise cli.UsageError("--bind takes an IP address (127.0.0.1, ::1, 0.0.0.0, ...), not %r" % bind) from None
    try:
        sources = viewer_sources.Sources(paths, max_bytes, fleet)
    except viewer_sources.SourceError as e:
        raise cli.UsageError(str(e)) from None
    try:
        srv = ViewerServer((bind, port), sources)
    except OSError as e:
        raise cli.UsageError("cannot listen on %s port %d: %s" % (bind, port, e.strerror or e)) from None
    host, real_port = srv.server_address[:2]
    shown = "[%s]" % host if ":" in host else host
    print("flightrec viewer: http://%s:%d/ over %s" % (shown, real_port, sources.describe()), file=out, flush=True)
    if srv.loopback:
        print("only this machine can reach it (bound to %s); --bind ADDR to share it" % host, file=out, flush=True)
    else:
        print("bound to %s: anyone who can reach this address and port can read these traces "
              "(no login, no TLS)" % host, file=out, flush=True)
    try:
        srv.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        sources.close()
    return 0

