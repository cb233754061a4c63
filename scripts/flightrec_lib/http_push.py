"""http_push: one POST of an export to a profiling backend (an OTLP/HTTP
receiver, Pyroscope's /ingest), bounded in time and memory, with one clear
line for whatever goes wrong.

* One deadline for the whole push (--timeout, retries included): each
  attempt's socket is shut down when it passes, so a receiver that trickles
  bytes cannot hold the reader past it.
* Retries with exponential backoff and jitter on 429 and 5xx and on
  connection failures (Retry-After is honoured, within the deadline).
* Redirects are not followed (the request carries credentials: they go to
  the URL given and nowhere else); a 3xx is one line naming where it points.
* At most MAX_BODY bytes of any answer are read, whatever it announces.
* Headers (authentication) are sent and never printed; neither is a URL's
  user:password or query string (messages name scheme://host:port/path).
"""
import base64
import http.client
import random
import socket
import threading
import time
import urllib.parse

MAX_BODY = 64 * 1024     # of any answer: enough for an error message
MAX_REASON = 200         # characters of an answer's reason shown
BACKOFF_FIRST = 0.5      # seconds before the first retry, doubled each time
BACKOFF_MAX = 8.0
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 4


class PushError(Exception):
    """The push failed: str() is one line for the user."""


def parse_headers(specs):
    """["K=V", ...] -> [(K, V)]; a bad one raises ValueError naming the key only."""
    out = []
    for spec in specs or ():
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or not key or any(c in key for c in " \t\r\n:()<>@,;\\\"/[]?={}") \
                or not key.isascii() or not key.isprintable():
            raise ValueError("bad --header %r: use NAME=VALUE" % (key or spec.partition("=")[0],))
        if "\r" in value or "\n" in value or "\0" in value:
            raise ValueError("bad --header %s: its value holds a line break" % key)
        out.append((key, value))
    return out


def safe_url(parts):
    """scheme://host:port/path of a parsed URL: what messages may show."""
    host = parts.hostname or ""
    if ":" in host:
        host = "[%s]" % host
    port = ":%d" % parts.port if parts.port else ""
    return "%s://%s%s%s" % (parts.scheme, host, port, parts.path or "/")


def _printable(text):
    text = " ".join(text.split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text[:MAX_REASON] + ("..." if len(text) > MAX_REASON else "")


def _status_message(body):
    """google.rpc.Status.message (field 2) of a protobuf answer, or ''."""
    pos, n = 0, len(body)
    try:
        while pos < n:
            key, pos = _uvarint(body, pos)
            field, wire = key >> 3, key & 7
            if wire == 0:
                _, pos = _uvarint(body, pos)
            elif wire == 2:
                size, pos = _uvarint(body, pos)
                if field == 2:
                    return body[pos:pos + size].decode("utf-8", "replace")
                pos += size
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                return ""
    except IndexError:
        return ""
    return ""


def _uvarint(buf, pos):
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def reason_of(body, content_type):
    """What an error answer says, in one short printable line."""
    if not body:
        return ""
    if "protobuf" in (content_type or ""):
        text = _status_message(body)
    else:
        text = body.decode("utf-8", "replace")
        if "json" in (content_type or ""):
            import json
            try:
                doc = json.loads(text)
                if isinstance(doc, dict) and isinstance(doc.get("message"), str):
                    text = doc["message"]
            except ValueError:
                pass
    return _printable(text)


class Answer:
    def __init__(self, status, reason, headers, body):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body


def _attempt(parts, path, body, headers, deadline):
    """One POST; returns an Answer. Raises OSError / http.client errors."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise socket.timeout("deadline passed")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=remaining)
    timer = None
    try:
        conn.connect()
        sock = conn.sock

        fired = []

        def cut():  # the deadline: whatever the receiver is doing, stop reading it
            fired.append(True)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
        timer.daemon = True
        timer.start()
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read(MAX_BODY)  # never more, whatever Content-Length says
        except (OSError, http.client.HTTPException):
            if fired:  # what the cut looks like (a reset, an early end) is no news
                raise socket.timeout("deadline passed") from None
            raise
        if fired:
            raise socket.timeout("deadline passed")
        return Answer(resp.status, resp.reason, resp.headers, data)
    finally:
        if timer is not None:
            timer.cancel()
        conn.close()


def _retry_after(answer):
    value = answer.headers.get("Retry-After") if answer.headers else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: use the backoff


def _describe_failure(e, where, timeout):
    if isinstance(e, socket.timeout) or "timed out" in str(e) or "deadline" in str(e):
        return "no answer from %s within %gs" % (where, timeout)
    if isinstance(e, ConnectionRefusedError):
        return "cannot reach %s: connection refused" % where
    if isinstance(e, socket.gaierror):
        return "cannot resolve %s: %s" % (where, e.strerror or e)
    if isinstance(e, http.client.HTTPException):
        return "%s answered with something that is not HTTP (%s)" % (where, type(e).__name__)
    if isinstance(e, OSError):
        # A shutdown by our own deadline timer shows as a reset or an empty read.
        return "cannot talk to %s: %s" % (where, e.strerror or e)
    return "cannot talk to %s: %s" % (where, e)


def post(url, body, content_type, headers=(), content_encoding=None, what="receiver",
         timeout=DEFAULT_TIMEOUT, retries=DEFAULT_RETRIES, sleep=time.sleep):
    """POSTs body to url; returns the 2xx Answer or raises PushError (one line).
    headers: [(name, value)], sent as given and never shown."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PushError("bad URL %r: use http://HOST[:PORT]/PATH or https://..." % safe_url(parts)
                        if parts.hostname else "bad URL: use http://HOST[:PORT]/PATH or https://...")
    try:
        parts.port
    except ValueError:
        raise PushError("bad URL: its port is not a number") from None
    where = safe_url(parts)
    path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    sent = {"Content-Type": content_type, "User-Agent": "flightrec-dump"}
    if content_encoding:
        sent["Content-Encoding"] = content_encoding
    if parts.username is not None:  # user:password@ in the URL: basic authentication
        cred = "%s:%s" % (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
        sent["Authorization"] = "Basic " + base64.b64encode(cred.encode("utf-8")).decode("ascii")
    for k, v in headers:
        sent[k] = v
    deadline = time.monotonic() + timeout
    backoff = BACKOFF_FIRST
    attempts = 0
    last = None
    while True:
        attempts += 1
        wait = None
        try:
            answer = _attempt(parts, path, body, sent, deadline)
        except (OSError, http.client.HTTPException) as e:
            last = _describe_failure(e, where, timeout)
            if time.monotonic() >= deadline:
                raise PushError(last + (" (%d attempts)" % attempts if attempts > 1 else "")) from None
        else:
            status = answer.status
            if 200 <= status < 300:
                return answer
            reason = reason_of(answer.body, answer.headers.get("Content-Type"))
            said = "HTTP %d %s" % (status, _printable(answer.reason or ""))
            if 300 <= status < 400:
                loc = answer.headers.get("Location") or ""
                target = safe_url(urllib.parse.urlsplit(urllib.parse.urljoin(url, loc))) if loc else "nowhere"
                raise PushError("%s redirects (%s) to %s; redirects are not followed: give that URL"
                                % (where, said.strip(), target))
            if status != 429 and status < 500:
                raise PushError("%s refused the %s: %s%s" % (where, what, said.strip(),
                                                             ": " + reason if reason else ""))
            last = "%s answered %s%s" % (where, said.strip(), ": " + reason if reason else "")
            wait = _retry_after(answer)
        if attempts > retries:
            raise PushError("%s (gave up after %d attempts)" % (last, attempts))
        if wait is None:
            wait = backoff * (0.5 + random.random() / 2)
            backoff = min(backoff * 2, BACKOFF_MAX)
        left = deadline - time.monotonic()
        if wait >= left:
            raise PushError("%s (gave up after %d attempts: the %gs timeout would pass before the next)"
                            % (last, attempts, timeout))
        sleep(wait)
