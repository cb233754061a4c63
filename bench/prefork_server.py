#!/usr/bin/python3
"""A minimal preforking HTTP server, the shape of gunicorn's sync workers or
Apache prefork, for run_server_memory.py (issue #44): the master opens one
listening socket on loopback, forks WORKERS processes and then only waits;
each worker accepts on the shared socket and answers every request of its
keep-alive connections with a fixed small page (a selector per worker, so a
worker serves several connections at once). SIGTERM to the master stops the
workers and then the master.
    prefork_server.py PORT [WORKERS]
Prints "ready" once every worker is forked.
"""
import os
import selectors
import signal
import socket
import sys

BODY = b"flightrec preforking server page\n" * 8
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY


def worker(listener):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    pending = {}
    while True:
        for key, _ in sel.select():
            if key.data is None:
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    continue  # another worker took it
                conn.setblocking(False)
                pending[conn] = b""
                sel.register(conn, selectors.EVENT_READ, True)
                continue
            conn = key.fileobj
            try:
                data = conn.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(conn)
                del pending[conn]
                conn.close()
                continue
            buf = pending[conn] + data
            answers = buf.count(b"\r\n\r\n")
            pending[conn] = buf[buf.rfind(b"\r\n\r\n") + 4:] if answers else buf
            if answers:
                try:
                    conn.setblocking(True)
                    conn.sendall(RESPONSE * answers)
                    conn.setblocking(False)
                except OSError:
                    sel.unregister(conn)
                    del pending[conn]
                    conn.close()


def main():
    port = int(sys.argv[1])
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    listener.setblocking(False)
    kids = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            try:
                worker(listener)
            finally:
                os._exit(0)
        kids.append(pid)

    def stop(signum, frame):
        for k in kids:
            try:
                os.kill(k, signal.SIGTERM)
            except OSError:
                pass
        for k in kids:
            os.waitpid(k, 0)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
