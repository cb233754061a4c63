"""LoopbackService: what the test stand-ins (s3_standin.py,
aws_credential_standins.py) share: a threaded HTTP server on a loopback
address, started once and stopped once (also by a timer, so a forgotten
stand-in never lingers), usable as a context manager, with a request log
that tests read instead of the server's own logging."""
import threading
from http.server import ThreadingHTTPServer


class LoopbackService:
    thread_name = "stand-in"

    def __init__(self, handler_class, host="127.0.0.1", port=0, max_lifetime=None):
        self.lock = threading.Lock()
        self.log = []
        self.stopping = threading.Event()
        self.server = ThreadingHTTPServer((host, port), handler_class)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://{host}:{self.port}"
        self._timer = None
        if max_lifetime:
            self._timer = threading.Timer(max_lifetime, self.stop)
            self._timer.daemon = True

    def start(self):
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                         name=self.thread_name).start()
        if self._timer:
            self._timer.start()
        return self

    def stop(self):
        if self.stopping.is_set():
            return
        self.stopping.set()
        if self._timer:
            self._timer.cancel()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def requests(self):
        with self.lock:
            return list(self.log)

    def record(self, **entry):
        with self.lock:
            self.log.append(entry)
