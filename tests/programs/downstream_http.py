"""A thread-per-request HTTP server (the standard library's
ThreadingHTTPServer) whose handlers call Redis (python3-redis, one shared
connection pool) and PostgreSQL (python3-psycopg2, a connection per
request) a known number of times depending on the path: the downstream
calls of issue 45 (tests/integration/test_downstream.py). Nothing in it
knows about the recorder.

argv: redis port, postgres port (both on 127.0.0.1). Prints the
HTTP port, serves until stdin closes.

  GET  /elections      15 x SELECT (the N+1: one per row), 1 x INCR
  GET  /users/<id>     GET, SET (redis), 1 x SELECT
  POST /votes          1 x INSERT, 2 x INCR
  GET  /health         nothing downstream
Every PostgreSQL connection also makes one Startup exchange.
"""
import http.server
import sys
import threading

import psycopg2
import redis

REDIS_PORT, PG_PORT = int(sys.argv[1]), int(sys.argv[2])
PG_HOST = "127.0.0.1"
cache = redis.Redis(host="127.0.0.1", port=REDIS_PORT)


def pg():
    c = psycopg2.connect(host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", sslmode="disable",
                         gssencmode="disable")
    c.autocommit = True  # no BEGIN before the first statement
    return c


class Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self, body):
        body = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/elections":
            conn = pg()
            try:
                cur = conn.cursor()
                total = 0
                for row in range(15):
                    cur.execute("SELECT %s + 1", (row,))
                    total += cur.fetchone()[0]
            finally:
                conn.close()
            cache.incr("elections.hits")
            return self._answer("elections %d" % total)
        if self.path.startswith("/users/"):
            uid = self.path.rsplit("/", 1)[1]
            cache.get("user:" + uid)
            conn = pg()
            try:
                cur = conn.cursor()
                cur.execute("SELECT %s::int * 2", (int(uid),))
                v = cur.fetchone()[0]
            finally:
                conn.close()
            cache.set("user:" + uid, v, ex=60)
            return self._answer("user %d" % v)
        if self.path == "/health":
            return self._answer("ok")
        self.send_error(404)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.path == "/votes":
            conn = pg()
            try:
                conn.cursor().execute("INSERT INTO votes (v) VALUES (%s)", (n,))
            finally:
                conn.close()
            cache.incr("votes")
            cache.incr("votes.bytes", n)
            return self._answer("voted")
        self.send_error(404)

    def log_message(self, *a):
        pass


if __name__ == "__main__":
    setup = pg()
    setup.cursor().execute("CREATE TABLE IF NOT EXISTS votes (v int)")
    setup.close()
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(s.server_address[1], flush=True)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    sys.stdin.read()
    s.shutdown()
