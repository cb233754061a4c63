#!/usr/bin/python3
"""Loopback stand-ins for the services AWS workloads get credentials from,
for flightrec's credential-chain tests. Each listens on 127.0.0.1 only, on a
port it picks, and is reached through the variable the SDKs honour:

  ImdsStandIn       EC2 instance metadata, IMDSv2     AWS_EC2_METADATA_SERVICE_ENDPOINT
  ContainerStandIn  ECS / EKS Pod Identity agent      AWS_CONTAINER_CREDENTIALS_FULL_URI
  StsStandIn        STS AssumeRoleWithWebIdentity     AWS_ENDPOINT_URL_STS

They check what the AWS documentation says the real services check:

  * IMDS: the session token comes from PUT /latest/api/token with
    X-aws-ec2-metadata-token-ttl-seconds in 1..21600 (400 otherwise); a PUT
    carrying X-Forwarded-For is refused (403); every GET must carry a live
    X-aws-ec2-metadata-token (401 otherwise: IMDSv1 is off, as with
    HttpTokens=required); tokens die after their TTL.
  * container: the path must be the configured one and Authorization must
    be the configured token (401 when absent, 403 when wrong).
  * STS: POST, form-encoded, Action=AssumeRoleWithWebIdentity,
    Version=2011-06-15, RoleArn = the configured role, RoleSessionName
    matching [\\w+=,.@-]{2,64}, WebIdentityToken = the current token
    (InvalidIdentityToken otherwise); the request is unsigned (the SDKs send
    no Authorization header for this call).

Every credential they hand out expires `lifetime` seconds after issue and is
registered with the S3 stand-in (s3_standin.StandIn.issue), which refuses it
after that with ExpiredToken: refresh is exercised, not assumed.

Faults: fail(n) makes the next n credential requests answer 500 (STS: 500
InternalFailure); fail_forever() / heal(); fail_after(n) hands out n sets,
then fails every later request (a refresh that fails);
hang() makes every request wait, unanswered, until the stand-in stops (a
black hole: the client's own bounds must end it); echo_secrets() makes error answers echo the token the client sent, as a
careless server might (the client must never log it).

Each keeps a request log: .requests() -> [{"method", "path", "status", ...}].
"""
import json
import re
import secrets
import threading
import time
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler

from loopback_service import LoopbackService
from urllib.parse import parse_qs

STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"
SESSION_NAME_RE = re.compile(r"^[\w+=,.@-]{2,64}$")


def iso8601(unix_seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_seconds))


class _Service(LoopbackService):
    """A loopback HTTP server with a request log, faults, and a credential minter."""

    name = "service"  # each stand-in's own: its thread and the keys it mints

    @property
    def thread_name(self):
        return self.name

    def __init__(self, s3=None, lifetime=3600, max_lifetime=600):
        self.s3 = s3
        self.lifetime = lifetime
        self.failures_left = 0
        self.failing = False
        self.ok_left = None  # fail_after: successes left before failing for good
        self.hanging = threading.Event()
        self.echo = False
        self.issued = []  # access key ids, in order
        super().__init__(self._handler_class(), max_lifetime=max_lifetime)

    # ---- test-facing ------------------------------------------------------------------

    def fail(self, n):
        with self.lock:
            self.failures_left = n

    def fail_forever(self):
        with self.lock:
            self.failing = True

    def fail_after(self, n):
        with self.lock:
            self.ok_left = n

    def heal(self):
        with self.lock:
            self.failing, self.failures_left, self.ok_left = False, 0, None

    def hang(self):
        self.hanging.set()

    def echo_secrets(self, on=True):
        with self.lock:
            self.echo = on

    # ---- internals --------------------------------------------------------------------
    def take_failure(self):
        with self.lock:
            if self.failing:
                return True
            if self.failures_left:
                self.failures_left -= 1
                return True
            if self.ok_left is not None:
                if self.ok_left == 0:
                    return True
                self.ok_left -= 1
            return False

    def mint(self):
        """New temporary credentials, registered with the S3 stand-in."""
        n = len(self.issued) + 1
        key = f"ASIA{self.name.upper()[:4]}{n:04d}{secrets.token_hex(4).upper()}"
        secret = secrets.token_urlsafe(30)
        token = f"{self.name}-session-{n}-" + secrets.token_urlsafe(48)
        expires = int(time.time()) + self.lifetime
        if self.s3 is not None:
            self.s3.issue(key, secret, token, expires)
        with self.lock:
            self.issued.append(key)
        return {"AccessKeyId": key, "SecretAccessKey": secret, "Token": token, "Expiration": iso8601(expires)}

    def handle(self, h, body):
        """Returns (status, content_type, body bytes). Subclasses implement."""
        raise NotImplementedError

    def _handler_class(self):
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = f"flightrec-{service.name}-standin"
            sys_version = ""

            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if service.hanging.is_set():
                    service.record(method=self.command, path=self.path, status=0, hung=True)
                    service.stopping.wait()
                    self.close_connection = True
                    return
                status, ctype, payload = service.handle(self, body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = _any

        return Handler


class ImdsStandIn(_Service):
    name = "imds"
    ROLE = "flightrec-instance-role"
    CREDS_PATH = "/latest/meta-data/iam/security-credentials/"

    def __init__(self, s3=None, lifetime=3600, role=ROLE, **kw):
        super().__init__(s3, lifetime, **kw)
        self.role = role
        self.tokens = {}  # session token -> expiry (monotonic)

    def session_tokens(self):
        with self.lock:
            return list(self.tokens)

    def handle(self, h, body):
        path, method = h.path, h.command
        entry = {"method": method, "path": path, "token": h.headers.get("X-aws-ec2-metadata-token"),
                 "ttl": h.headers.get("X-aws-ec2-metadata-token-ttl-seconds")}

        def answer(status, text, ctype="text/plain"):
            entry["status"] = status
            self.record(**entry)
            return status, ctype, text.encode() if isinstance(text, str) else text

        if path == "/latest/api/token":
            if method != "PUT":
                return answer(405, "")
            if h.headers.get("X-Forwarded-For") is not None:
                return answer(403, "")
            ttl = entry["ttl"]
            if ttl is None or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return answer(400, "")
            token = "imds-" + secrets.token_urlsafe(40)
            with self.lock:
                self.tokens[token] = time.monotonic() + int(ttl)
            return answer(200, token)
        with self.lock:
            alive = self.tokens.get(entry["token"] or "", 0) > time.monotonic()
        if method != "GET":
            return answer(405, "")
        if not alive:
            return answer(401, "")  # IMDSv1 is off: no token, no answer
        if path == self.CREDS_PATH:
            return answer(200, self.role)
        if path == self.CREDS_PATH + self.role:
            if self.take_failure():
                return answer(500, "the token you sent was " + entry["token"] if self.echo else "")
            doc = dict(Code="Success", LastUpdated=iso8601(time.time()), Type="AWS-HMAC", **self.mint())
            return answer(200, json.dumps(doc), "application/json")
        return answer(404, "")


class ContainerStandIn(_Service):
    name = "container"
    PATH = "/v2/credentials/flightrec-task"

    def __init__(self, s3=None, lifetime=3600, auth_token="container-auth-token-" + "x" * 16, **kw):
        super().__init__(s3, lifetime, **kw)
        self.auth_token = auth_token
        self.full_uri = self.endpoint + self.PATH

    def set_auth_token(self, token):
        with self.lock:
            self.auth_token = token

    def handle(self, h, body):
        auth = h.headers.get("Authorization")
        entry = {"method": h.command, "path": h.path, "authorization": auth}

        def answer(status, doc):
            entry["status"] = status
            self.record(**entry)
            return status, "application/json", json.dumps(doc).encode()

        if h.command != "GET" or h.path != self.PATH:
            return answer(404, {"code": "NotFound", "message": "no such credentials path"})
        with self.lock:
            expected = self.auth_token
        if auth is None:
            return answer(401, {"code": "AccessDenied", "message": "Authorization header required"})
        if auth != expected:
            return answer(403, {"code": "AccessDenied", "message": "invalid authorization token"
                                + (f" {auth}" if self.echo else "")})
        if self.take_failure():
            return answer(500, {"code": "InternalError", "message": "try again" + (f" {auth}" if self.echo else "")})
        return answer(200, dict(self.mint(), AccountId="123456789012"))


class StsStandIn(_Service):
    name = "sts"
    ROLE_ARN = "arn:aws:iam::123456789012:role/flightrec-web-identity"

    def __init__(self, s3=None, lifetime=3600, role_arn=ROLE_ARN, token=None, **kw):
        super().__init__(s3, lifetime, **kw)
        self.role_arn = role_arn
        self.token = token  # the web identity token the "identity provider" issued

    def set_token(self, token):
        with self.lock:
            self.token = token

    def _error(self, entry, status, code, message):
        entry["status"], entry["code"] = status, code
        self.record(**entry)
        root = ET.Element("ErrorResponse", xmlns=STS_NS)
        err = ET.SubElement(root, "Error")
        ET.SubElement(err, "Type").text = "Sender" if status < 500 else "Receiver"
        ET.SubElement(err, "Code").text = code
        ET.SubElement(err, "Message").text = message
        ET.SubElement(root, "RequestId").text = secrets.token_hex(8)
        return status, "text/xml", ET.tostring(root)

    def handle(self, h, body):
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
        entry = {"method": h.command, "path": h.path, "action": form.get("Action"),
                 "role_arn": form.get("RoleArn"), "session_name": form.get("RoleSessionName"),
                 "signed": h.headers.get("Authorization") is not None,
                 "content_type": h.headers.get("Content-Type", "")}
        sent_token = form.get("WebIdentityToken", "")
        if h.command != "POST" or h.path != "/":
            return self._error(entry, 404, "NotFound", "POST / only")
        if not entry["content_type"].startswith("application/x-www-form-urlencoded"):
            return self._error(entry, 400, "InvalidParameterValue", "form-encoded body required")
        if entry["signed"]:
            return self._error(entry, 400, "InvalidParameterValue",
                               "AssumeRoleWithWebIdentity is called unsigned; this request carried a signature")
        if form.get("Action") != "AssumeRoleWithWebIdentity" or form.get("Version") != "2011-06-15":
            return self._error(entry, 400, "InvalidAction", "Action/Version not supported")
        for name in ("RoleArn", "RoleSessionName", "WebIdentityToken"):
            if not form.get(name):
                return self._error(entry, 400, "MissingParameter", f"{name} is required")
        if not SESSION_NAME_RE.match(form["RoleSessionName"]):
            return self._error(entry, 400, "ValidationError", "RoleSessionName does not match [\\w+=,.@-]{2,64}")
        if form["RoleArn"] != self.role_arn:
            return self._error(entry, 403, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
        with self.lock:
            expected = self.token
        if sent_token != expected:
            return self._error(entry, 400, "InvalidIdentityToken", "Couldn't verify the token"
                               + (f" {sent_token}" if self.echo else ""))
        if self.take_failure():
            return self._error(entry, 500, "InternalFailure", "try again"
                               + (f" (token {sent_token})" if self.echo else ""))
        creds = self.mint()
        entry["status"] = 200
        self.record(**entry)
        root = ET.Element("AssumeRoleWithWebIdentityResponse", xmlns=STS_NS)
        result = ET.SubElement(root, "AssumeRoleWithWebIdentityResult")
        c = ET.SubElement(result, "Credentials")
        ET.SubElement(c, "SessionToken").text = creds["Token"]
        ET.SubElement(c, "SecretAccessKey").text = creds["SecretAccessKey"]
        ET.SubElement(c, "Expiration").text = creds["Expiration"]
        ET.SubElement(c, "AccessKeyId").text = creds["AccessKeyId"]
        ET.SubElement(result, "SubjectFromWebIdentityToken").text = "system:serviceaccount:default:flightrec"
        user = ET.SubElement(result, "AssumedRoleUser")
        ET.SubElement(user, "Arn").text = self.role_arn.replace(":role/", ":assumed-role/") + "/" + \
            form["RoleSessionName"]
        ET.SubElement(user, "AssumedRoleId").text = "AROAFLIGHTREC:" + form["RoleSessionName"]
        ET.SubElement(result, "Audience").text = "sts.amazonaws.com"
        ET.SubElement(ET.SubElement(root, "ResponseMetadata"), "RequestId").text = secrets.token_hex(8)
        return 200, "text/xml", ET.tostring(root)
