"""The credential stand-ins (tests/s3/aws_credential_standins.py) are only a
useful reference if botocore, the AWS SDK for Python, gets credentials from
them exactly as from the real services, and if they refuse what the real
services refuse. Everything here talks to 127.0.0.1 only."""
import http.client
import os
import sys
import time
import urllib.parse

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "s3"))
from s3_standin import StandIn  # noqa: E402
from aws_credential_standins import ContainerStandIn, ImdsStandIn, StsStandIn  # noqa: E402

sys.path.insert(0, "/usr/lib/python3/dist-packages")  # Debian's botocore
import botocore.session  # noqa: E402
from botocore import UNSIGNED  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.utils import ContainerMetadataFetcher, InstanceMetadataFetcher  # noqa: E402


def call(port, method, path, headers=None, body=b""):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


@pytest.fixture
def s3():
    standin = StandIn("creds-bucket", None, None, max_lifetime=120).start()
    yield standin
    standin.stop()


def s3_client(s3, creds):
    return botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=s3.endpoint, aws_access_key_id=creds["access_key"],
        aws_secret_access_key=creds["secret_key"], aws_session_token=creds["token"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


@pytest.mark.slow
def test_botocore_gets_imds_credentials_that_s3_accepts_until_they_expire(s3):
    with ImdsStandIn(s3, lifetime=3) as imds:
        # env={}: botocore's own AWS_EC2_METADATA_DISABLED check reads os.environ otherwise.
        fetcher = InstanceMetadataFetcher(timeout=2, num_attempts=1, base_url=imds.endpoint + "/", env={})
        creds = fetcher.retrieve_iam_role_credentials()
        assert creds["access_key"] == imds.issued[0] and creds["token"] and creds["expiry_time"]
        client = s3_client(s3, creds)
        client.put_object(Bucket="creds-bucket", Key="k", Body=b"x")
        assert s3.objects() == {"k": b"x"}
        time.sleep(3.5)  # past the expiry the stand-in handed out
        with pytest.raises(Exception, match="ExpiredToken"):
            client.put_object(Bucket="creds-bucket", Key="k2", Body=b"y")
        calls = imds.requests()
    assert calls[0]["method"] == "PUT" and calls[0]["ttl"] == "21600", calls
    assert all(c["token"] for c in calls[1:]), calls


def test_imds_refuses_what_imdsv2_refuses():
    with ImdsStandIn() as imds:
        path = ImdsStandIn.CREDS_PATH
        assert call(imds.port, "GET", path)[0] == 401  # IMDSv1: no token, no answer
        assert call(imds.port, "GET", path, {"X-aws-ec2-metadata-token": "made-up"})[0] == 401
        assert call(imds.port, "PUT", "/latest/api/token")[0] == 400  # no TTL
        for ttl in ("0", "21601", "ten"):
            assert call(imds.port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": ttl})[0] == 400
        assert call(imds.port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60",
                                                            "X-Forwarded-For": "10.0.0.1"})[0] == 403
        status, token = call(imds.port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "1"})
        assert status == 200
        assert call(imds.port, "GET", path, {"X-aws-ec2-metadata-token": token.decode()}) == (200, imds.ROLE.encode())
        time.sleep(1.2)
        assert call(imds.port, "GET", path, {"X-aws-ec2-metadata-token": token.decode()})[0] == 401  # TTL over


def test_botocore_gets_container_credentials_and_the_agent_checks_authorization(s3):
    with ContainerStandIn(s3, lifetime=60, auth_token="agent-token-0123456789") as agent:
        creds = ContainerMetadataFetcher().retrieve_full_uri(agent.full_uri,
                                                             headers={"Authorization": "agent-token-0123456789"})
        assert creds["AccessKeyId"] == agent.issued[0] and creds["Token"] and creds["Expiration"]
        s3_client(s3, {"access_key": creds["AccessKeyId"], "secret_key": creds["SecretAccessKey"],
                       "token": creds["Token"]}).put_object(Bucket="creds-bucket", Key="c", Body=b"z")
        assert call(agent.port, "GET", agent.PATH)[0] == 401
        assert call(agent.port, "GET", agent.PATH, {"Authorization": "wrong"})[0] == 403
        assert call(agent.port, "GET", "/other", {"Authorization": "agent-token-0123456789"})[0] == 404
    assert s3.objects() == {"c": b"z"}


def test_botocore_assumes_a_role_with_web_identity_and_sts_checks_the_request(s3):
    token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ0ZXN0In0.c2ln"
    with StsStandIn(s3, lifetime=60, token=token) as sts:
        client = botocore.session.get_session().create_client(
            "sts", region_name="us-east-1", endpoint_url=sts.endpoint,
            config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}))
        out = client.assume_role_with_web_identity(RoleArn=sts.role_arn, RoleSessionName="botocore-check",
                                                   WebIdentityToken=token)
        assert out["Credentials"]["AccessKeyId"] == sts.issued[0]
        with pytest.raises(Exception, match="InvalidIdentityToken"):
            client.assume_role_with_web_identity(RoleArn=sts.role_arn, RoleSessionName="s2", WebIdentityToken="x" * 20)
        with pytest.raises(Exception, match="AccessDenied"):
            client.assume_role_with_web_identity(RoleArn="arn:aws:iam::1:role/other", RoleSessionName="s3",
                                                 WebIdentityToken=token)

        def form(**fields):
            base = {"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15", "RoleArn": sts.role_arn,
                    "RoleSessionName": "s1", "WebIdentityToken": token}
            base.update(fields)
            return urllib.parse.urlencode({k: v for k, v in base.items() if v is not None}).encode()

        ctype = {"Content-Type": "application/x-www-form-urlencoded"}
        assert call(sts.port, "POST", "/", ctype, form())[0] == 200
        assert b"InvalidAction" in call(sts.port, "POST", "/", ctype, form(Version="2010-01-01"))[1]
        assert b"MissingParameter" in call(sts.port, "POST", "/", ctype, form(WebIdentityToken=None))[1]
        assert b"ValidationError" in call(sts.port, "POST", "/", ctype, form(RoleSessionName="has space"))[1]
        signed = dict(ctype, Authorization="AWS4-HMAC-SHA256 Credential=x")
        assert call(sts.port, "POST", "/", signed, form())[0] == 400
        assert call(sts.port, "POST", "/", {"Content-Type": "text/plain"}, form())[0] == 400
    assert len(sts.issued) == 2  # botocore once, the plain form once
