"""otlp_receiver: a loopback HTTP receiver for the export tests (OTLP/HTTP
and Pyroscope's /ingest stand in): records every request (method, path,
headers, raw body) and answers from a script, one entry per request (the
last repeats):

    ("status", code, headers, body)  an answer
    ("hang",)                        read the request, never answer (until close())
    ("flood", code, nbytes)          announce nbytes of body and send zeros until
                                     the client goes away; .flooded counts what was sent

Only 127.0.0.1."""
import http.server
import threading


class Receiver:
    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        self.flooded = 0
        self._release = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                owner.requests.append({"path": self.path, "headers": dict(self.headers.items()),
                                       "body": body})
                i = min(len(owner.requests), len(owner.script)) - 1
                step = owner.script[i]
                if step[0] == "hang":
                    owner._release.wait(120)
                    return
                if step[0] == "flood":
                    _, code, nbytes = step
                    self.send_response(code)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(nbytes))
                    self.end_headers()
                    chunk = b"\0" * 65536
                    try:
                        while owner.flooded < nbytes:
                            self.wfile.write(chunk)
                            owner.flooded += len(chunk)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                _, code, headers, body = step
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
