"""The S3 stand-in is only a useful reference if it is strict: these tests
sign requests with botocore, tamper with them one way at a time, and check
that the stand-in refuses each, and that it serves what the uploader and
flightrec-dump's s3:// reader need (multipart, ListObjectsV2 paging)."""
import hashlib
import http.client
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "s3"))
from s3_standin import StandIn  # noqa: E402

from botocore.auth import S3SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402
import botocore.session  # noqa: E402
from botocore.config import Config  # noqa: E402

BUCKET, AK, SK, TOKEN = "standin-bkt", "AKIDSTANDIN", "standin/secret+", "tok/en="


@pytest.fixture
def standin():
    s = StandIn(BUCKET, AK, SK, session_token=TOKEN, min_part_size=1024, max_lifetime=120).start()
    yield s
    s.stop()


def signed(standin, method, path, body=b"", secret=SK, token=TOKEN, extra=None):
    """A botocore-signed request (headers dict) for path (already encoded)."""
    host = f"127.0.0.1:{standin.port}"
    headers = {"host": host, "x-amz-content-sha256": hashlib.sha256(body).hexdigest()}
    if token:
        headers["x-amz-security-token"] = token
    headers.update(extra or {})
    req = AWSRequest(method=method, url=f"http://{host}{path}", headers=headers, data=body)
    S3SigV4Auth(Credentials(AK, secret, token), "s3", "us-east-1").add_auth(req)
    return dict(req.headers.items())


def send(standin, method, path, headers, body=b""):
    c = http.client.HTTPConnection("127.0.0.1", standin.port, timeout=10)
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def code(data):
    return data.split(b"<Code>")[1].split(b"</Code>")[0].decode() if b"<Code>" in data else ""


def test_a_correctly_signed_put_is_stored(standin):
    path = f"/{BUCKET}/a/b%20c.seg"
    status, data = send(standin, "PUT", path, signed(standin, "PUT", path, b"hello"), b"hello")
    assert status == 200, data
    assert standin.objects() == {"a/b c.seg": b"hello"}


@pytest.mark.parametrize("tamper,expected", [
    ("secret", "SignatureDoesNotMatch"),
    ("body", "XAmzContentSHA256Mismatch"),
    ("token", "InvalidToken"),
    ("unsigned-token", "AccessDenied"),
    ("not-aws-encoded", "InvalidURI"),
    ("unsigned-amz-header", "AccessDenied"),
    ("old-date", "RequestTimeTooSkewed"),
])
def test_tampered_requests_are_refused(standin, tamper, expected):
    path, body = f"/{BUCKET}/k.seg", b"payload"
    if tamper == "secret":
        headers = signed(standin, "PUT", path, body, secret="wrong")
    elif tamper == "body":
        headers, body = signed(standin, "PUT", path, body), b"PAYLOAD"
    elif tamper == "token":
        headers = signed(standin, "PUT", path, body, token="other")
    elif tamper == "unsigned-token":
        headers = signed(standin, "PUT", path, body, token=None)
        headers["x-amz-security-token"] = TOKEN  # sent, but not signed
    elif tamper == "not-aws-encoded":
        path = f"/{BUCKET}/a$b%2a.seg"  # '$' must be %24, hex must be uppercase
        headers = signed(standin, "PUT", path, body)
    elif tamper == "unsigned-amz-header":
        headers = signed(standin, "PUT", path, body)
        headers["x-amz-meta-extra"] = "1"
    elif tamper == "old-date":
        standin.set_faults(skew_seconds=3600)
        headers = signed(standin, "PUT", path, body)
    status, data = send(standin, "PUT", path, headers, body)
    assert code(data) == expected, (status, data)
    assert standin.objects() == {}


def test_signature_errors_echo_the_canonical_request_like_s3(standin):
    # Real S3 does this; it is why the uploader must never log response bodies.
    path = f"/{BUCKET}/k.seg"
    _, data = send(standin, "PUT", path, signed(standin, "PUT", path, b"x", secret="wrong"), b"x")
    assert b"<CanonicalRequest>" in data and TOKEN.encode() in data


def test_multipart_and_listing_through_botocore(standin):
    client = botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=standin.endpoint, aws_access_key_id=AK,
        aws_secret_access_key=SK, aws_session_token=TOKEN,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    up = client.create_multipart_upload(Bucket=BUCKET, Key="mp/x.seg")["UploadId"]
    p1 = client.upload_part(Bucket=BUCKET, Key="mp/x.seg", UploadId=up, PartNumber=1, Body=b"a" * 1024)
    p2 = client.upload_part(Bucket=BUCKET, Key="mp/x.seg", UploadId=up, PartNumber=2, Body=b"b" * 10)
    with pytest.raises(Exception, match="InvalidPartOrder"):
        client.complete_multipart_upload(Bucket=BUCKET, Key="mp/x.seg", UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": 2, "ETag": p2["ETag"]}, {"PartNumber": 1, "ETag": p1["ETag"]}]})
    client.complete_multipart_upload(Bucket=BUCKET, Key="mp/x.seg", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": p1["ETag"]}, {"PartNumber": 2, "ETag": p2["ETag"]}]})
    assert standin.objects()["mp/x.seg"] == b"a" * 1024 + b"b" * 10

    small = client.create_multipart_upload(Bucket=BUCKET, Key="mp/small.seg")["UploadId"]
    q1 = client.upload_part(Bucket=BUCKET, Key="mp/small.seg", UploadId=small, PartNumber=1, Body=b"a")
    q2 = client.upload_part(Bucket=BUCKET, Key="mp/small.seg", UploadId=small, PartNumber=2, Body=b"b")
    with pytest.raises(Exception, match="EntityTooSmall"):
        client.complete_multipart_upload(Bucket=BUCKET, Key="mp/small.seg", UploadId=small, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": q1["ETag"]}, {"PartNumber": 2, "ETag": q2["ETag"]}]})
    client.abort_multipart_upload(Bucket=BUCKET, Key="mp/small.seg", UploadId=small)

    for i in range(5):
        client.put_object(Bucket=BUCKET, Key=f"list/{i} x.seg", Body=b"%d" % i)
    pages = list(client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="list/",
                                                                   PaginationConfig={"PageSize": 2}))
    assert len(pages) == 3
    assert [o["Key"] for p in pages for o in p["Contents"]] == [f"list/{i} x.seg" for i in range(5)]
