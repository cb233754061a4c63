#!/usr/bin/python3
"""A strict local S3 stand-in for flightrec's uploader tests.

It speaks just enough S3 for the uploader and for flightrec-dump's s3://
reader (PutObject, GetObject, HeadObject, DeleteObject, ListObjectsV2,
CreateMultipartUpload, UploadPart, CompleteMultipartUpload,
AbortMultipartUpload), and it is stricter than S3 where that catches bugs:

  * every request's SigV4 signature is recomputed with Debian's
    python3-botocore (S3SigV4Auth) as an independent reference;
  * host, x-amz-date and x-amz-content-sha256 must be signed (and
    x-amz-security-token when the stand-in has a session token), every
    x-amz-* header sent must be signed, and the credential scope must match;
  * x-amz-content-sha256 must be the SHA-256 of the body actually received;
  * the path and query must be URI-encoded exactly once, the AWS way;
  * x-amz-date must be within 15 minutes of the stand-in's clock
    (RequestTimeTooSkewed otherwise, with the server's Date, like S3);
  * temporary credentials handed out by the credential stand-ins
    (aws_credential_standins.py, through issue()) are accepted until they
    expire, then refused with 400 ExpiredToken, like S3;
  * bucket policies: server-side encryption and storage-class headers are
    checked for valid values, refused on UploadPart (S3 takes them on the
    object's creation only), recorded per object, and, with require_sse /
    require_kms_key / require_storage_class, demanded on PutObject and
    CreateMultipartUpload (403 AccessDenied otherwise, as a bucket policy does).

Faults, applied to the next N S3 requests (optionally only some operations):
503 SlowDown, 500 InternalError, 403 AccessDenied (forbid_echo: with the
request's session token echoed in <Code> and <Message>), dropped connections (the
request is read, then the socket is closed with no reply), slow responses,
a black hole (connections are accepted and never answered), and a skewed
server clock. Set them with command-line flags or at run time through the
unsigned control endpoint:

  GET  /__control/objects              {"bucket": {"key": {"size": n, "sha256": hex}}}
  GET  /__control/object?key=K         the object's bytes (404 if absent)
  GET  /__control/requests             [{"op", "method", "path", "status", "code", "bytes", "access_key",
                                        "sse", "kms_key", "storage_class"}...]
  POST /__control/faults  {"fail_503": 3, "ops": ["PutObject"], ...}   (returns current faults)
  POST /__control/reset                 clear objects, uploads, faults and the request log

Command line (prints "PORT <n>" on stdout once listening; exits by itself
after --max-lifetime seconds so a forgotten stand-in never lingers):

  s3_standin.py --bucket B --access-key AK --secret-key SK [--session-token T]
                [--region us-east-1] [--port 0] [--max-lifetime 300]
                [--fail-503 N] [--fail-500 N] [--forbid N] [--drop N]
                [--slow-ms MS] [--blackhole] [--skew-seconds S] [--min-part-size BYTES]
                [--require-sse AES256|aws:kms] [--require-kms-key ID] [--require-storage-class CLASS]

Python: StandIn(bucket=..., access_key=..., secret_key=...).start(); .endpoint,
.objects(), .requests(), .set_faults(...), .stop().
"""
import argparse
import datetime
import hashlib
import json
import re
import socket
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler

from loopback_service import LoopbackService
from urllib.parse import quote, unquote_to_bytes, urlsplit

sys.path.insert(0, "/usr/lib/python3/dist-packages")  # Debian's botocore, not a pyenv one
from botocore.auth import S3SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_SKEW = datetime.timedelta(minutes=15)
AUTH_RE = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request,\s*"
                     r"SignedHeaders=([a-z0-9;\-]+),\s*Signature=([0-9a-f]{64})$")
FAULT_NAMES = ("fail_503", "fail_500", "forbid", "forbid_echo", "drop", "slow_ms", "blackhole", "skew_seconds", "ops")
SSE_VALUES = ("AES256", "aws:kms", "aws:kms:dsse")
STORAGE_CLASSES = ("STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER",
                   "DEEP_ARCHIVE", "GLACIER_IR", "OUTPOSTS", "SNOW", "EXPRESS_ONEZONE")
POLICY_HEADERS = ("x-amz-server-side-encryption", "x-amz-server-side-encryption-aws-kms-key-id", "x-amz-storage-class")


class S3Error(Exception):
    def __init__(self, status, code, message, extra=None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.extra = status, code, message, extra or {}


def aws_encode(text, keep_slash):
    """The AWS URI encoding: unreserved characters stay, everything else %XX."""
    return quote(text, safe="-_.~/" if keep_slash else "-_.~")


class StandIn(LoopbackService):
    thread_name = "s3-standin"

    def __init__(self, bucket, access_key, secret_key, session_token=None, region="us-east-1",
                 host="127.0.0.1", port=0, min_part_size=5 * 1024 * 1024, max_lifetime=None,
                 require_sse=None, require_kms_key=None, require_storage_class=None):
        self.bucket, self.region = bucket, region
        self.access_key, self.secret_key, self.session_token = access_key, secret_key, session_token
        self.min_part_size = min_part_size
        self.max_lifetime = max_lifetime
        self.require_sse, self.require_kms_key = require_sse, require_kms_key
        self.require_storage_class = require_storage_class
        # access key -> (secret, session token or None, expiry as Unix seconds or None)
        self.credentials = {}
        if access_key:
            self.credentials[access_key] = (secret_key, session_token, None)
        self.objects_by_key = {}      # key -> bytes
        self.object_policy = {}       # key -> {"sse", "kms_key", "storage_class"} as created
        self.uploads = {}             # upload id -> {"key": k, "parts": {n: (etag, bytes)}}
        self.faults = {}
        super().__init__(_make_handler(self), host, port, max_lifetime)

    # ---- test-facing views ----------------------------------------------------------
    def objects(self):
        with self.lock:
            return dict(self.objects_by_key)

    def issue(self, access_key, secret_key, session_token, expires_at):
        """Accepts temporary credentials (expires_at: Unix seconds) from now on."""
        with self.lock:
            self.credentials[access_key] = (secret_key, session_token, expires_at)

    def policies(self):
        """{key: {"sse", "kms_key", "storage_class"}} for every stored object."""
        with self.lock:
            return {k: dict(v) for k, v in self.object_policy.items()}

    def set_faults(self, **faults):
        unknown = set(faults) - set(FAULT_NAMES)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}")
        with self.lock:
            self.faults.update(faults)
            return dict(self.faults)

    def reset(self):
        with self.lock:
            self.objects_by_key.clear()
            self.object_policy.clear()
            self.uploads.clear()
            self.log.clear()
            self.faults.clear()

    # ---- internals used by the handler ------------------------------------------------
    def now(self):
        skew = self.faults.get("skew_seconds", 0)
        return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=skew)

    def take_fault(self, op):
        """Returns the fault to apply to this request (consuming one count), or None."""
        with self.lock:
            ops = self.faults.get("ops")
            if ops and op not in ops:
                return None
            if self.faults.get("blackhole"):
                return ("blackhole", None)
            for name in ("drop", "fail_503", "fail_500", "forbid", "forbid_echo"):
                left = self.faults.get(name, 0)
                if left:
                    self.faults[name] = left - 1
                    return (name, None)
            if self.faults.get("slow_ms"):
                return ("slow", self.faults["slow_ms"])
        return None



def _make_handler(standin):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "flightrec-s3-standin"
        sys_version = ""

        def log_message(self, *args):  # quiet: tests read requests() instead
            pass

        def date_time_string(self, timestamp=None):
            return formatdate(standin.now().timestamp(), usegmt=True)

        def do_GET(self):
            self._dispatch()

        def do_PUT(self):
            self._dispatch()

        def do_POST(self):
            self._dispatch()

        def do_DELETE(self):
            self._dispatch()

        def do_HEAD(self):
            self._dispatch()

        # ---- plumbing -----------------------------------------------------------------
        def _read_body(self):
            if self.headers.get("Transfer-Encoding"):
                raise S3Error(501, "NotImplemented", "Transfer-Encoding is not supported; send Content-Length")
            length = self.headers.get("Content-Length")
            if length is None:
                if self.command in ("PUT", "POST"):
                    raise S3Error(411, "MissingContentLength", "You must provide the Content-Length HTTP header.")
                return b""
            n = int(length)
            chunks, left = [], n
            while left:
                chunk = self.rfile.read(min(left, 1 << 20))
                if not chunk:
                    raise ConnectionError("client closed mid-body")
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)

        def _send(self, status, body=b"", content_type="application/xml", headers=None):
            self.send_response(status)
            self.send_header("x-amz-request-id", uuid.uuid4().hex[:16].upper())
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD" and body:
                self.wfile.write(body)

        def _send_error(self, err, resource):
            root = ET.Element("Error")
            ET.SubElement(root, "Code").text = err.code
            ET.SubElement(root, "Message").text = err.message
            ET.SubElement(root, "Resource").text = resource
            for k, v in err.extra.items():
                ET.SubElement(root, k).text = v
            ET.SubElement(root, "RequestId").text = uuid.uuid4().hex[:16].upper()
            body = b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)
            self._send(err.status, body)

        def _dispatch(self):
            raw_path, _, raw_query = self.path.partition("?")
            if raw_path.startswith("/__control/"):
                return self._control(raw_path, raw_query)
            op = self._operation(raw_path, raw_query)
            nbytes = 0

            def record(status, code):
                # Recorded before the reply is written, so a client that has its
                # answer always finds the request in requests().
                m = AUTH_RE.match(self.headers.get("Authorization", ""))
                standin.record(op=op, method=self.command, path=self.path, status=status, code=code, bytes=nbytes,
                               access_key=m.group(1) if m else None,
                               sse=self.headers.get("x-amz-server-side-encryption"),
                               kms_key=self.headers.get("x-amz-server-side-encryption-aws-kms-key-id"),
                               storage_class=self.headers.get("x-amz-storage-class"),
                               header_names=sorted({k.lower() for k in self.headers.keys()}))

            try:
                fault = standin.take_fault(op)
                if fault and fault[0] == "blackhole":
                    record(0, "blackhole")
                    standin.stopping.wait(standin.max_lifetime or 3600)
                    self.close_connection = True
                    return
                body = self._read_body()
                nbytes = len(body)
                if fault and fault[0] == "drop":
                    record(0, "dropped")
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault and fault[0] == "fail_503":
                    raise S3Error(503, "SlowDown", "Please reduce your request rate.")
                if fault and fault[0] == "fail_500":
                    raise S3Error(500, "InternalError", "We encountered an internal error. Please try again.")
                if fault and fault[0] == "forbid":
                    raise S3Error(403, "AccessDenied", "Access Denied")
                if fault and fault[0] == "forbid_echo":
                    # A careless server: the session token sent comes back in <Code> and <Message>.
                    token = self.headers.get("x-amz-security-token", "")
                    raise S3Error(403, "AccessDenied" + token, f"Access Denied for session token {token}")
                if fault and fault[0] == "slow":
                    time.sleep(fault[1] / 1000.0)
                self._authenticate(raw_path, raw_query, body)
                status, payload, headers = self._handle(op, raw_path, raw_query, body)
                record(status, "")
                self._send(status, payload, headers=headers)
            except S3Error as err:
                record(err.status, err.code)
                self._send_error(err, raw_path)
            except (ConnectionError, socket.timeout):
                record(0, "connection")
                self.close_connection = True

        # ---- addressing ---------------------------------------------------------------
        def _bucket_and_key(self, raw_path):
            host = (self.headers.get("Host") or "").split(":")[0]
            if host.startswith(standin.bucket + ".") and host != standin.bucket:  # virtual-hosted style
                return standin.bucket, unquote_to_bytes(raw_path[1:]).decode("utf-8", "surrogateescape")
            parts = raw_path[1:].split("/", 1)
            bucket = unquote_to_bytes(parts[0]).decode()
            key = unquote_to_bytes(parts[1]).decode("utf-8", "surrogateescape") if len(parts) > 1 else ""
            return bucket, key

        @staticmethod
        def _query(raw_query):
            out = {}
            if raw_query:
                for pair in raw_query.split("&"):
                    k, _, v = pair.partition("=")
                    out[unquote_to_bytes(k).decode()] = unquote_to_bytes(v).decode()
            return out

        def _operation(self, raw_path, raw_query):
            q = self._query(raw_query)
            bucket, key = self._bucket_and_key(raw_path)
            m = self.command
            if not key:
                if m == "GET" and q.get("list-type") == "2":
                    return "ListObjectsV2"
                return f"Bucket{m.title()}"
            if m == "PUT":
                return "UploadPart" if "uploadId" in q else "PutObject"
            if m == "POST":
                if "uploads" in q:
                    return "CreateMultipartUpload"
                return "CompleteMultipartUpload" if "uploadId" in q else "PostObject"
            if m == "DELETE":
                return "AbortMultipartUpload" if "uploadId" in q else "DeleteObject"
            return {"GET": "GetObject", "HEAD": "HeadObject"}.get(m, m)

        # ---- authentication (the strict part) ---------------------------------------
        def _authenticate(self, raw_path, raw_query, body):
            auth = self.headers.get("Authorization")
            if not auth:
                raise S3Error(403, "AccessDenied", "Anonymous access is not allowed (no Authorization header)")
            m = AUTH_RE.match(auth.strip())
            if not m:
                raise S3Error(400, "AuthorizationHeaderMalformed", "The authorization header is malformed")
            access_key, date8, region, service, signed_names, signature = m.groups()
            with standin.lock:
                known = standin.credentials.get(access_key)
            if known is None:
                raise S3Error(403, "InvalidAccessKeyId",
                              "The AWS Access Key Id you provided does not exist in our records.")
            secret_key, session_token, expires_at = known
            if expires_at is not None and time.time() >= expires_at:
                raise S3Error(400, "ExpiredToken", "The provided token has expired.")
            if region != standin.region or service != "s3":
                raise S3Error(400, "AuthorizationHeaderMalformed",
                              f"the region '{region}' is wrong; expecting '{standin.region}'"
                              if region != standin.region else "the service must be s3")
            amz_date = self.headers.get("x-amz-date", "")
            try:
                when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
            except ValueError:
                raise S3Error(403, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
            if amz_date[:8] != date8:
                raise S3Error(400, "AuthorizationHeaderMalformed", "credential date does not match x-amz-date")
            now = standin.now()
            if abs(now - when) > MAX_SKEW:
                raise S3Error(403, "RequestTimeTooSkewed",
                              "The difference between the request time and the current time is too large.",
                              {"RequestTime": amz_date, "ServerTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                               "MaxAllowedSkewMilliseconds": "900000"})
            names = signed_names.split(";")
            if names != sorted(names):
                raise S3Error(403, "SignatureDoesNotMatch", "SignedHeaders must be sorted")
            required = {"host", "x-amz-date", "x-amz-content-sha256"}
            if session_token is not None:
                required.add("x-amz-security-token")
            present = {k.lower() for k in self.headers.keys()}
            required |= {h for h in present if h.startswith("x-amz-")}
            missing = sorted(required - set(names))
            if missing:
                raise S3Error(403, "AccessDenied", f"headers must be signed: {', '.join(missing)}")
            if session_token is not None and self.headers.get("x-amz-security-token") != session_token:
                raise S3Error(400, "InvalidToken", "The provided token is malformed or otherwise invalid.")
            claimed = self.headers.get("x-amz-content-sha256", "")
            actual = hashlib.sha256(body).hexdigest()
            if claimed != actual:
                raise S3Error(400, "XAmzContentSHA256Mismatch",
                              "The provided 'x-amz-content-sha256' header does not match what was computed.",
                              {"ClientComputedContentSHA256": claimed, "S3ComputedContentSHA256": actual})
            # Encoded exactly once, the AWS way (botocore signs the wire form as-is).
            if aws_encode(unquote_to_bytes(raw_path), keep_slash=True) != raw_path:
                raise S3Error(400, "InvalidURI", "path is not URI-encoded the AWS way (once, uppercase hex)")
            if raw_query:
                for pair in raw_query.split("&"):
                    k, _, v = pair.partition("=")
                    for part in (k, v):
                        if aws_encode(unquote_to_bytes(part), False) != part:
                            raise S3Error(400, "InvalidArgument", "query is not URI-encoded the AWS way")
            # The independent reference: botocore recomputes the signature.
            headers = {}
            for name in names:
                values = self.headers.get_all(name) or []
                if not values:
                    raise S3Error(403, "SignatureDoesNotMatch", f"signed header {name} is absent")
                headers[name] = ",".join(" ".join(v.split()) for v in values)
            host = self.headers.get("Host")
            url = f"http://{host}{raw_path}" + (f"?{raw_query}" if raw_query else "")
            req = AWSRequest(method=self.command, url=url, headers=headers, data=body)
            req.context["timestamp"] = amz_date
            signer = S3SigV4Auth(Credentials(access_key, secret_key, session_token), "s3", standin.region)
            canonical = signer.canonical_request(req)
            string_to_sign = signer.string_to_sign(req, canonical)
            expected = signer.signature(string_to_sign, req)
            if expected != signature:
                # Like S3, echo what we signed: a client that logs error bodies leaks its token here.
                raise S3Error(403, "SignatureDoesNotMatch",
                              "The request signature we calculated does not match the signature you provided. "
                              "Check your key and signing method.",
                              {"AWSAccessKeyId": access_key, "StringToSign": string_to_sign,
                               "SignatureProvided": signature, "CanonicalRequest": canonical})

        # ---- operations ---------------------------------------------------------------
        def _handle(self, op, raw_path, raw_query, body):
            bucket, key = self._bucket_and_key(raw_path)
            if bucket != standin.bucket:
                raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist")
            q = self._query(raw_query)
            policy = self._object_policy(op)
            if op == "PutObject":
                etag = '"%s"' % hashlib.md5(body).hexdigest()
                with standin.lock:
                    standin.objects_by_key[key] = body
                    standin.object_policy[key] = policy
                return 200, b"", {"ETag": etag}
            if op in ("GetObject", "HeadObject"):
                with standin.lock:
                    data = standin.objects_by_key.get(key)
                if data is None:
                    raise S3Error(404, "NoSuchKey", "The specified key does not exist.")
                etag = '"%s"' % hashlib.md5(data).hexdigest()
                return 200, data, {"ETag": etag}
            if op == "DeleteObject":
                with standin.lock:
                    standin.objects_by_key.pop(key, None)
                return 204, b"", {}
            if op == "CreateMultipartUpload":
                upload_id = uuid.uuid4().hex
                with standin.lock:
                    standin.uploads[upload_id] = {"key": key, "parts": {}, "policy": policy}
                root = ET.Element("InitiateMultipartUploadResult", xmlns=S3_NS)
                ET.SubElement(root, "Bucket").text = bucket
                ET.SubElement(root, "Key").text = key
                ET.SubElement(root, "UploadId").text = upload_id
                return 200, ET.tostring(root), {}
            if op == "UploadPart":
                upload = self._upload(q, key)
                n = int(q.get("partNumber", "0"))
                if not 1 <= n <= 10000:
                    raise S3Error(400, "InvalidArgument", "Part number must be an integer between 1 and 10000")
                etag = '"%s"' % hashlib.md5(body).hexdigest()
                with standin.lock:
                    upload["parts"][n] = (etag, body)
                return 200, b"", {"ETag": etag}
            if op == "CompleteMultipartUpload":
                return self._complete(q, key, body)
            if op == "AbortMultipartUpload":
                with standin.lock:
                    if standin.uploads.pop(q["uploadId"], None) is None:
                        raise S3Error(404, "NoSuchUpload", "The specified upload does not exist.")
                return 204, b"", {}
            if op == "ListObjectsV2":
                return self._list(q, bucket)
            raise S3Error(501, "NotImplemented", f"{op} is not supported by the stand-in")

        def _object_policy(self, op):
            """Checks the encryption and storage-class headers as S3 and a bucket policy would."""
            sse = self.headers.get("x-amz-server-side-encryption")
            kms_key = self.headers.get("x-amz-server-side-encryption-aws-kms-key-id")
            storage_class = self.headers.get("x-amz-storage-class")
            creates = op in ("PutObject", "CreateMultipartUpload")
            if not creates:
                sent = [h for h in POLICY_HEADERS if self.headers.get(h) is not None]
                if sent:
                    raise S3Error(400, "InvalidArgument", f"{sent[0]} is not allowed on {op}")
                return None
            if sse is not None and sse not in SSE_VALUES:
                raise S3Error(400, "InvalidArgument", "The encryption method specified is not supported")
            if kms_key is not None and not (sse or "").startswith("aws:kms"):
                raise S3Error(400, "InvalidArgument", "x-amz-server-side-encryption-aws-kms-key-id requires "
                                                      "x-amz-server-side-encryption: aws:kms")
            if storage_class is not None and storage_class not in STORAGE_CLASSES:
                raise S3Error(400, "InvalidStorageClass", "The storage class you specified is not valid")
            if standin.require_sse and sse != standin.require_sse:
                raise S3Error(403, "AccessDenied", "Access Denied (bucket policy: server-side encryption "
                                                   f"{standin.require_sse} required)")
            if standin.require_kms_key and kms_key != standin.require_kms_key:
                raise S3Error(403, "AccessDenied", "Access Denied (bucket policy: KMS key required)")
            if standin.require_storage_class and storage_class != standin.require_storage_class:
                raise S3Error(403, "AccessDenied", "Access Denied (bucket policy: storage class required)")
            return {"sse": sse, "kms_key": kms_key, "storage_class": storage_class}

        def _upload(self, q, key):
            with standin.lock:
                upload = standin.uploads.get(q.get("uploadId", ""))
            if upload is None or upload["key"] != key:
                raise S3Error(404, "NoSuchUpload", "The specified upload does not exist.")
            return upload

        def _complete(self, q, key, body):
            upload = self._upload(q, key)
            try:
                root = ET.fromstring(body)
            except ET.ParseError:
                raise S3Error(400, "MalformedXML", "The XML you provided was not well-formed")
            listed = []
            for part in root.iter():
                if part.tag.split("}")[-1] != "Part":
                    continue
                fields = {c.tag.split("}")[-1]: (c.text or "") for c in part}
                listed.append((int(fields.get("PartNumber", "0")), fields.get("ETag", "")))
            if not listed:
                raise S3Error(400, "MalformedXML", "no parts listed")
            if [n for n, _ in listed] != sorted({n for n, _ in listed}):
                raise S3Error(400, "InvalidPartOrder", "The list of parts was not in ascending order.")
            chunks, md5s = [], b""
            for i, (n, etag) in enumerate(listed):
                stored = upload["parts"].get(n)
                if stored is None or stored[0] != etag:
                    raise S3Error(400, "InvalidPart", "One or more of the specified parts could not be found.")
                if i + 1 < len(listed) and len(stored[1]) < standin.min_part_size:
                    raise S3Error(400, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed "
                                                         "object size.")
                chunks.append(stored[1])
                md5s += hashlib.md5(stored[1]).digest()
            data = b"".join(chunks)
            with standin.lock:
                standin.objects_by_key[key] = data
                standin.object_policy[key] = upload["policy"]
                standin.uploads.pop(q["uploadId"], None)
            res = ET.Element("CompleteMultipartUploadResult", xmlns=S3_NS)
            ET.SubElement(res, "Key").text = key
            ET.SubElement(res, "ETag").text = '"%s-%d"' % (hashlib.md5(md5s).hexdigest(), len(listed))
            return 200, ET.tostring(res), {}

        def _list(self, q, bucket):
            prefix = q.get("prefix", "")
            max_keys = int(q.get("max-keys", "1000"))
            after = q.get("continuation-token") or q.get("start-after") or ""
            with standin.lock:
                keys = sorted(k for k in standin.objects_by_key if k.startswith(prefix) and k > after)
                sizes = {k: len(standin.objects_by_key[k]) for k in keys}
            # delimiter: keys with it past the prefix roll up into CommonPrefixes
            # (one entry each, as S3 lists them; the page holds both kinds).
            delim = q.get("delimiter", "")
            common = []
            if delim:
                plain = []
                for k in keys:
                    cut = k.find(delim, len(prefix))
                    if cut < 0:
                        plain.append(k)
                    elif k[:cut + len(delim)] not in common:
                        common.append(k[:cut + len(delim)])
                keys = plain
            page, rest = keys[:max_keys], keys[max_keys:]
            root = ET.Element("ListBucketResult", xmlns=S3_NS)
            ET.SubElement(root, "Name").text = bucket
            ET.SubElement(root, "Prefix").text = prefix
            ET.SubElement(root, "KeyCount").text = str(len(page))
            ET.SubElement(root, "MaxKeys").text = str(max_keys)
            ET.SubElement(root, "IsTruncated").text = "true" if rest else "false"
            if rest:
                ET.SubElement(root, "NextContinuationToken").text = page[-1]
            url_encoded = q.get("encoding-type") == "url"
            if url_encoded:
                ET.SubElement(root, "EncodingType").text = "url"
            for k in page:
                c = ET.SubElement(root, "Contents")
                ET.SubElement(c, "Key").text = quote(k, safe="/") if url_encoded else k
                ET.SubElement(c, "Size").text = str(sizes[k])
                ET.SubElement(c, "StorageClass").text = "STANDARD"
            for cp in common:
                ET.SubElement(ET.SubElement(root, "CommonPrefixes"), "Prefix").text = \
                    quote(cp, safe="/") if url_encoded else cp
            return 200, ET.tostring(root), {}

        # ---- control endpoint (unsigned; tests only) -------------------------------------
        def _control(self, raw_path, raw_query):
            body = self._read_body() if self.headers.get("Content-Length") else b""
            q = self._query(raw_query)
            if raw_path == "/__control/objects":
                objs = {k: {"size": len(v), "sha256": hashlib.sha256(v).hexdigest()}
                        for k, v in standin.objects().items()}
                return self._send(200, json.dumps({standin.bucket: objs}).encode(), "application/json")
            if raw_path == "/__control/object":
                data = standin.objects().get(q.get("key", ""))
                if data is None:
                    return self._send(404, b"no such key", "text/plain")
                return self._send(200, data, "application/octet-stream")
            if raw_path == "/__control/requests":
                return self._send(200, json.dumps(standin.requests()).encode(), "application/json")
            if raw_path == "/__control/faults" and self.command == "POST":
                try:
                    current = standin.set_faults(**json.loads(body or b"{}"))
                except (ValueError, TypeError) as e:
                    return self._send(400, str(e).encode(), "text/plain")
                return self._send(200, json.dumps(current).encode(), "application/json")
            if raw_path == "/__control/reset" and self.command == "POST":
                standin.reset()
                return self._send(200, b"{}", "application/json")
            return self._send(404, b"unknown control endpoint", "text/plain")

    return Handler


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bucket", required=True)
    p.add_argument("--access-key", required=True)
    p.add_argument("--secret-key", required=True)
    p.add_argument("--session-token")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--max-lifetime", type=float, default=300.0)
    p.add_argument("--min-part-size", type=int, default=5 * 1024 * 1024)
    p.add_argument("--fail-503", type=int, default=0)
    p.add_argument("--fail-500", type=int, default=0)
    p.add_argument("--forbid", type=int, default=0)
    p.add_argument("--drop", type=int, default=0)
    p.add_argument("--slow-ms", type=int, default=0)
    p.add_argument("--blackhole", action="store_true")
    p.add_argument("--skew-seconds", type=int, default=0)
    p.add_argument("--require-sse")
    p.add_argument("--require-kms-key")
    p.add_argument("--require-storage-class")
    a = p.parse_args(argv)
    if a.host not in ("127.0.0.1", "::1", "localhost"):
        p.error("the stand-in listens on loopback only")
    s = StandIn(a.bucket, a.access_key, a.secret_key, a.session_token, a.region, a.host, a.port,
                a.min_part_size, a.max_lifetime, a.require_sse, a.require_kms_key, a.require_storage_class)
    s.set_faults(fail_503=a.fail_503, fail_500=a.fail_500, forbid=a.forbid, drop=a.drop, slow_ms=a.slow_ms,
                 blackhole=a.blackhole, skew_seconds=a.skew_seconds)
    s.start()
    print(f"PORT {s.port}", flush=True)
    s.stopping.wait()  # stop() by max-lifetime, or SIGTERM/SIGINT from the test
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
