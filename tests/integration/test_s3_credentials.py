"""S3 credentials the way AWS workloads get them (issue 33), end to end
under the preload: web identity (STS), container credentials, instance
metadata (IMDSv2), each the only source a run has, each refreshed before
expiry; bucket policies (SSE-KMS, storage class) signed on PUT and multipart.

Every service is a stand-in on 127.0.0.1 (tests/s3/aws_credential_standins.py,
tests/s3/s3_standin.py), reached through the variable the SDKs honour, and
every run has tests/preloads/connect_spy.so ahead of the preload: it writes
down each address the process tries to reach, so each test also proves that
nothing went anywhere but loopback. The S3 stand-in knows no static keys
here: only credentials a credential stand-in handed out (and only until
they expire) verify.
"""
import os
import re
import secrets
import shutil
import time
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "s3"))
from s3_standin import StandIn  # noqa: E402
from aws_credential_standins import ContainerStandIn, ImdsStandIn, StsStandIn  # noqa: E402

BUCKET = "flightrec-creds"
LIFETIME = 6  # seconds: a run of a few seconds lives through at least one refresh
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


@pytest.fixture
def s3():
    standin = StandIn(BUCKET, None, None, max_lifetime=600).start()
    yield standin
    standin.stop()


@pytest.fixture
def spy(fr, tmp_path):
    path = os.path.join(fr.build, "preloads", "connect_spy.so")
    assert os.path.exists(path), f"{path} is not built (run make)"
    log = tmp_path / "connections.log"
    return path, log


def run_env(fr, s3, spy, home, **extra):
    """Only the credential source a test adds; everything else points nowhere."""
    spy_lib, spy_log = spy
    env = {
        "LD_PRELOAD": f"{spy_lib}:{fr.preload}",
        "CONNECT_SPY_LOG": spy_log,
        "FLIGHTREC_S3_BUCKET": BUCKET,
        "FLIGHTREC_S3_ENDPOINT": s3.endpoint,
        "FLIGHTREC_S3_REGION": "us-east-1",
        "FLIGHTREC_SEGMENT_SECONDS": 1,
        "FLIGHTREC_UPLOAD_SHUTDOWN_MS": 20000,
        "FLIGHTREC_LOG": "info",  # the start-up line names the credential source
        "HOME": home,  # an empty home: no ~/.aws/credentials or ~/.aws/config
        "AWS_SHARED_CREDENTIALS_FILE": os.path.join(home, "no-credentials"),
        "AWS_CONFIG_FILE": os.path.join(home, "no-config"),
    }
    env.update(extra)
    return env


def connections(spy):
    _, log = spy
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [line.split() for line in f if line.strip()]


def assert_loopback_only(spy):
    for what, host, port in connections(spy):
        assert host in ("127.0.0.1", "::1"), f"{what} to {host}:{port}: tests talk to loopback only"


def sealed(out):
    return sorted(f for f in os.listdir(out) if f.endswith(".seg"))


def uploads(s3, op="PutObject"):
    return [r for r in s3.requests() if r["op"] == op and r["status"] == 200]


def assert_all_shipped_through_a_refresh(s3, trace_dir, issuer):
    assert sealed(trace_dir) == [], "every sealed segment is uploaded (and deleted locally)"
    puts = uploads(s3) + uploads(s3, "CompleteMultipartUpload")
    assert len(puts) >= 3 and len(s3.objects()) == len(puts), s3.requests()
    used = [r["access_key"] for r in sorted(puts, key=s3.requests().index)]
    assert set(used) <= set(issuer.issued), (used, issuer.issued)
    # Credentials were fetched again before they expired, and the S3 stand-in
    # (botocore-verified signatures, expiry enforced) accepted uploads signed
    # with the refreshed ones.
    assert len(set(used)) >= 2, (used, issuer.requests())
    assert used == sorted(used, key=issuer.issued.index), "never back to older credentials"


def assert_no_secrets(stderr, *secrets_):
    for secret in secrets_:
        assert secret not in stderr, f"a secret reached stderr:\n{stderr}"
    for minted in ("sts-session-", "imds-session-", "container-session-", "imds-"):
        assert minted not in stderr, stderr


@pytest.mark.slow
@pytest.mark.parametrize("configured_by", ["variables", "profile"])
def test_web_identity_alone_uploads_through_a_refresh(fr, trace_dir, tmp_path, s3, spy, configured_by):
    # A JWT-shaped token, as EKS projects into the pod.
    token = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImZsaWdodHJlYyJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ." + \
        secrets.token_urlsafe(32)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    with StsStandIn(s3, lifetime=LIFETIME, token=token) as sts:
        if configured_by == "variables":
            extra = dict(AWS_WEB_IDENTITY_TOKEN_FILE=token_file, AWS_ROLE_ARN=sts.role_arn,
                         AWS_ROLE_SESSION_NAME="flightrec-it")
        else:  # ~/.aws/config, profile "eks"
            (tmp_path / "config").write_text(f"[profile eks]\nrole_arn = {sts.role_arn}\n"
                                             f"web_identity_token_file = {token_file}\n"
                                             "role_session_name = flightrec-it\n")
            extra = dict(AWS_CONFIG_FILE=tmp_path / "config", AWS_PROFILE="eks")
        proc = fr.run([fr.program("s3_worker"), "6000"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path), AWS_ENDPOINT_URL_STS=sts.endpoint, **extra))
        calls = sts.requests()
        assert "worker done" in proc.stdout
        assert_all_shipped_through_a_refresh(s3, trace_dir, sts)
    assert len(calls) >= 2 and all(c["status"] == 200 for c in calls), calls
    for c in calls:  # what the SDKs send: unsigned, form-encoded, our role and session name
        assert c["action"] == "AssumeRoleWithWebIdentity" and not c["signed"], c
        assert c["role_arn"] == sts.role_arn and c["session_name"] == "flightrec-it", c
    assert "credentials from web identity" in proc.stderr, proc.stderr
    assert_no_secrets(proc.stderr, token)
    assert_loopback_only(spy)
    assert any(port == str(sts.port) for _, _, port in connections(spy)), connections(spy)


@pytest.mark.slow
@pytest.mark.parametrize("token_from", ["file", "variable"])
def test_container_credentials_alone_upload_through_a_refresh(fr, trace_dir, tmp_path, s3, spy, token_from):
    auth = "container-auth-" + secrets.token_urlsafe(24)
    with ContainerStandIn(s3, lifetime=LIFETIME, auth_token=auth) as agent:
        extra = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": agent.full_uri}
        if token_from == "file":
            (tmp_path / "auth").write_text(auth)
            extra["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = tmp_path / "auth"
            extra["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "the-file-wins-over-this-value"
        else:
            extra["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = auth
        proc = fr.run([fr.program("s3_worker"), "6000"], trace_dir,
                      env=run_env(fr, s3, spy, str(tmp_path), **extra))
        calls = agent.requests()
        assert "worker done" in proc.stdout
        assert_all_shipped_through_a_refresh(s3, trace_dir, agent)
    assert len(calls) >= 2 and all(c["status"] == 200 and c["authorization"] == auth for c in calls), calls
    assert "credentials from container credentials endpoint" in proc.stderr, proc.stderr
    assert_no_secrets(proc.stderr, auth)
    assert_loopback_only(spy)


@pytest.mark.slow
def test_instance_metadata_alone_uploads_through_a_refresh_imdsv2_only(fr, trace_dir, tmp_path, s3, spy):
    with ImdsStandIn(s3, lifetime=LIFETIME) as imds:
        proc = fr.run([fr.program("s3_worker"), "6000"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path),
            AWS_EC2_METADATA_DISABLED="false", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint))
        calls = imds.requests()
        tokens = imds.session_tokens()
        assert "worker done" in proc.stdout
        assert_all_shipped_through_a_refresh(s3, trace_dir, imds)
    assert all(c["status"] == 200 for c in calls), calls  # never a 401: every GET carried a session token
    puts = [c for c in calls if c["method"] == "PUT"]
    assert puts and all(c["ttl"] == "21600" for c in puts), calls
    gets = [c for c in calls if c["method"] == "GET"]
    assert gets and all(c["token"] in tokens for c in gets), calls
    assert "credentials from instance metadata" in proc.stderr, proc.stderr
    assert_no_secrets(proc.stderr, *tokens)
    assert_loopback_only(spy)


def test_no_credentials_and_metadata_disabled_makes_no_connection_at_all(fr, trace_dir, tmp_path, s3, spy):
    proc = fr.run([fr.program("s3_worker"), "1500"], trace_dir, env=run_env(fr, s3, spy, str(tmp_path)))
    assert "worker done" in proc.stdout
    assert proc.stderr.count("S3 upload off: no AWS credentials") == 1, proc.stderr
    assert "AWS_EC2_METADATA_DISABLED=true" in proc.stderr, proc.stderr
    assert connections(spy) == [], connections(spy)  # not to S3, not to 169.254.169.254, not to DNS
    assert s3.requests() == []
    assert sealed(trace_dir), "segments stay on disk"


def test_the_connection_spy_sees_the_recorders_connections(fr, trace_dir, tmp_path, s3, spy):
    # The control for the test above: the same run with instance metadata on
    # (pointed at a loopback stand-in) is seen connecting, so an empty log
    # there means no connection, not a blind spy.
    with ImdsStandIn(s3, lifetime=3600) as imds:
        fr.run([fr.program("s3_worker"), "1500"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path),
            AWS_EC2_METADATA_DISABLED="false", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint))
    seen = {(host, int(port)) for what, host, port in connections(spy) if what == "connect"}
    assert ("127.0.0.1", imds.port) in seen and ("127.0.0.1", s3.port) in seen, seen
    assert_loopback_only(spy)


@pytest.mark.slow
def test_failed_fetch_keeps_segments_queued_logs_one_line_and_a_later_run_ships_them(fr, trace_dir, tmp_path, s3,
                                                                                      spy):
    with ImdsStandIn(s3, lifetime=3600) as imds:
        imds.fail_forever()
        imds.echo_secrets()  # its 500s echo the session token we sent: it must not reach our log
        proc = fr.run([fr.program("s3_worker"), "2500"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path), FLIGHTREC_UPLOAD_SHUTDOWN_MS=3000,
            AWS_EC2_METADATA_DISABLED="false", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint))
        assert "worker done" in proc.stdout
        left = sealed(trace_dir)
        assert len(left) >= 2, left
        assert s3.requests() == [], "nothing is sent to S3 without credentials"
        assert len([c for c in imds.requests() if c["status"] == 500]) >= 2, imds.requests()
        assert proc.stderr.count("S3 credentials unavailable") == 1, proc.stderr
        assert "HTTP 500" in proc.stderr, proc.stderr
        assert_no_secrets(proc.stderr, *imds.session_tokens())

        imds.heal()
        proc = fr.run([fr.program("s3_worker"), "200"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path),
            AWS_EC2_METADATA_DISABLED="false", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint))
    shipped = {k.rsplit("/", 1)[1] for k in s3.objects()}
    assert set(left) <= shipped, (left, shipped)
    assert sealed(trace_dir) == []
    assert "S3 credentials unavailable" not in proc.stderr, proc.stderr
    assert_loopback_only(spy)


@pytest.mark.slow
def test_a_metadata_endpoint_that_never_answers_does_not_hold_up_the_host(fr, trace_dir, tmp_path, s3, spy):
    # A black hole where IMDS should be: each request ends at its own bound
    # (2 s) on the upload thread, and at exit at the shutdown deadline; the
    # host's threads never wait for it.
    with ImdsStandIn(s3) as imds:
        imds.hang()
        start = time.monotonic()
        proc = fr.run([fr.program("s3_worker"), "2500"], trace_dir, timeout=60, env=run_env(
            fr, s3, spy, str(tmp_path), FLIGHTREC_UPLOAD_SHUTDOWN_MS=1000,
            AWS_EC2_METADATA_DISABLED="false", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint))
        elapsed = time.monotonic() - start
        hung = [c for c in imds.requests() if c.get("hung")]
    print(f"run with a black-hole IMDS: {elapsed:.2f} s for a 2.5 s program and a 1 s upload budget")
    assert proc.returncode == 0 and "worker done" in proc.stdout
    assert hung, "the uploader did ask the metadata endpoint"
    assert s3.requests() == [] and sealed(trace_dir)
    assert proc.stderr.count("S3 credentials unavailable") == 1, proc.stderr
    assert "Timeout" in proc.stderr, proc.stderr
    assert_loopback_only(spy)


@pytest.mark.parametrize("variable", ["AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                                      "AWS_WEB_IDENTITY_TOKEN_FILE"])
@pytest.mark.slow
def test_a_fifo_as_a_credential_file_is_refused_not_waited_on(fr, trace_dir, tmp_path, s3, spy, variable):
    """Issue 29 item 19. Opening a FIFO for reading waits for a writer: the
    upload thread used to wait forever, and every exit the whole shutdown
    budget. Credential, config and token files are opened non-blocking and
    read only if regular: the FIFO is named in one line, nothing is sent,
    the segments stay on disk."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    extra = {variable: fifo}
    if variable == "AWS_WEB_IDENTITY_TOKEN_FILE":
        extra["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/flightrec-it"
        extra["AWS_ENDPOINT_URL_STS"] = s3.endpoint  # never reached: the token cannot be read
    proc = fr.run([fr.program("s3_worker"), "1500"], trace_dir, timeout=60, env=run_env(
        fr, s3, spy, str(tmp_path), FLIGHTREC_UPLOAD_SHUTDOWN_MS=1000, **extra))
    assert proc.returncode == 0 and "worker done" in proc.stdout
    ours = [line for line in proc.stderr.splitlines() if str(fifo) in line]
    print(f"{variable} is a FIFO: {ours}")
    assert len(ours) == 1 and "not a regular file" in ours[0], proc.stderr
    assert s3.requests() == [] and sealed(trace_dir)
    assert_loopback_only(spy)


@pytest.mark.slow
def test_a_refresh_that_fails_stops_uploads_before_the_credentials_expire(fr, trace_dir, tmp_path, s3, spy):
    # Refreshed half way through the lifetime, unusable 2 s before its end:
    # 10 s leaves the failing refresh a 3 s window in which the old
    # credentials still work (6 s left 1 s, which one late upload round on a
    # busy machine missed: it then saw them already expired). The worker
    # outlives them, so some segments stay on disk.
    with ImdsStandIn(s3, lifetime=10) as imds:
        imds.fail_after(1)  # the first set, then every refresh fails
        proc = fr.run([fr.program("s3_worker"), "10000"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path), FLIGHTREC_UPLOAD_SHUTDOWN_MS=3000,
            AWS_EC2_METADATA_DISABLED="false", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint))
        assert "worker done" in proc.stdout
        assert len(imds.issued) == 1
    puts = uploads(s3)
    assert puts and {r["access_key"] for r in puts} == set(imds.issued), s3.requests()
    assert not [r for r in s3.requests() if r["code"] == "ExpiredToken"], "expired credentials are never used"
    assert sealed(trace_dir), "what could not be shipped stays on disk"
    # One line for the failure, said at the first failed refresh (while the
    # old credentials still worked), not again when they ran out.
    assert proc.stderr.count("S3 credentials could not be refreshed") == 1, proc.stderr
    assert proc.stderr.count("HTTP 500") == 1 and "S3 credentials unavailable" not in proc.stderr, proc.stderr
    assert_loopback_only(spy)


def test_sts_errors_echoing_the_token_are_logged_without_it(fr, trace_dir, tmp_path, s3, spy):
    token = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL29pZGMuZXhhbXBsZSJ9." + secrets.token_urlsafe(32)
    (tmp_path / "token").write_text(token)
    with StsStandIn(s3, lifetime=LIFETIME, token="a-different-token-the-idp-expects") as sts:
        sts.echo_secrets()
        proc = fr.run([fr.program("s3_worker"), "1500"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path), FLIGHTREC_UPLOAD_SHUTDOWN_MS=2000,
            AWS_WEB_IDENTITY_TOKEN_FILE=tmp_path / "token", AWS_ROLE_ARN=sts.role_arn,
            AWS_ENDPOINT_URL_STS=sts.endpoint))
        calls = sts.requests()
    assert calls and all(c["code"] == "InvalidIdentityToken" for c in calls), calls
    # The default session name is one STS accepts.
    assert re.fullmatch(r"[\w+=,.@-]{2,64}", calls[0]["session_name"] or ""), calls
    assert proc.stderr.count("InvalidIdentityToken") == 1, proc.stderr
    assert "[redacted]" in proc.stderr, proc.stderr
    assert_no_secrets(proc.stderr, token, token.split(".")[2])
    assert sealed(trace_dir) and s3.requests() == []
    assert_loopback_only(spy)


def test_an_s3_error_echoing_the_metadata_token_is_logged_without_it(fr, trace_dir, tmp_path, s3, spy):
    s3.set_faults(forbid_echo=1000)
    with ImdsStandIn(s3, lifetime=3600) as imds:
        proc = fr.run([fr.program("s3_worker"), "1500"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path), FLIGHTREC_UPLOAD_SHUTDOWN_MS=2000,
            AWS_EC2_METADATA_DISABLED="false", AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint))
        assert "worker done" in proc.stdout
        assert imds.issued
    refused = [r for r in s3.requests() if r["status"] == 403]
    assert refused and all(r["code"].startswith("AccessDenied") for r in refused), s3.requests()
    assert len(refused[0]["code"]) > len("AccessDenied"), "the stand-in did echo a token"
    assert proc.stderr.count("rejected: HTTP 403 AccessDenied[redacted] - Access Denied for session token "
                             "[redacted]") == 1, proc.stderr
    assert_no_secrets(proc.stderr)
    assert_loopback_only(spy)


def big_leftover(fr, trace_dir, size):
    """A sealed segment padded past `size` bytes, under a name of this host's shape."""
    src = trace_dir.parent / "big-source"
    src.mkdir(mode=0o700)
    fr.run([fr.program("s3_worker"), "50", "1"], src)
    seg = sealed(src)[0]
    stamp, service, pid, _ = seg[:-4].split("-")
    name = f"{stamp}-{service}-{pid}-9999.seg"
    with open(src / seg, "rb") as f:
        data = f.read()
    with open(trace_dir / name, "wb") as f:
        f.write(data + os.urandom(max(0, size - len(data))))
    os.chmod(trace_dir / name, 0o600)
    shutil.rmtree(src)
    return name


@pytest.mark.slow
def test_sse_kms_and_storage_class_are_signed_on_put_and_multipart(fr, trace_dir, tmp_path, spy):
    # A bucket whose policy demands SSE-KMS with one key and a storage class;
    # credentials from instance metadata, refreshed during the run.
    s3 = StandIn(BUCKET, None, None, max_lifetime=600, require_sse="aws:kms", require_kms_key=KMS_KEY,
                 require_storage_class="STANDARD_IA").start()
    try:
        big = big_leftover(fr, trace_dir, 6 << 20)  # above the 5 MiB multipart threshold below
        with ImdsStandIn(s3, lifetime=LIFETIME) as imds:
            env = run_env(fr, s3, spy, str(tmp_path), AWS_EC2_METADATA_DISABLED="false",
                          AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.endpoint, FLIGHTREC_S3_MULTIPART_BYTES="5M",
                          FLIGHTREC_S3_SSE_KMS_KEY_ID=KMS_KEY, FLIGHTREC_S3_STORAGE_CLASS="STANDARD_IA")
            proc = fr.run([fr.program("s3_worker"), "5000"], trace_dir, env=env)
            assert "worker done" in proc.stdout
            assert_all_shipped_through_a_refresh(s3, trace_dir, imds)
            objects = s3.objects()
            assert any(k.endswith("/" + big) and len(v) >= 6 << 20 for k, v in objects.items()), sorted(objects)
            want = {"sse": "aws:kms", "kms_key": KMS_KEY, "storage_class": "STANDARD_IA"}
            assert s3.policies() == {k: want for k in objects}, s3.policies()
            reqs = s3.requests()
            assert [r for r in reqs if r["op"] == "CreateMultipartUpload" and r["status"] == 200], reqs
            parts = [r for r in reqs if r["op"] == "UploadPart" and r["status"] == 200]
            assert len(parts) >= 2 and all(r["sse"] is None and r["storage_class"] is None for r in parts), parts
            assert "rejected" not in proc.stderr, proc.stderr

            # The control: without the settings, the same bucket refuses the upload.
            s3.reset()
            control = {k: v for k, v in env.items() if k not in (
                "FLIGHTREC_S3_SSE_KMS_KEY_ID", "FLIGHTREC_S3_STORAGE_CLASS")}
            proc = fr.run([fr.program("s3_worker"), "300"], trace_dir,
                          env=dict(control, FLIGHTREC_UPLOAD_SHUTDOWN_MS=2000))
            assert s3.objects() == {} and sealed(trace_dir)
            assert proc.stderr.count("AccessDenied") == 1, proc.stderr
    finally:
        s3.stop()
    assert_loopback_only(spy)


def test_sse_aes256_with_static_keys(fr, trace_dir, tmp_path, spy):
    s3 = StandIn(BUCKET, "AKIDSTATICSSE", "static/secret+key", max_lifetime=600, require_sse="AES256").start()
    try:
        proc = fr.run([fr.program("s3_worker"), "1200"], trace_dir, env=run_env(
            fr, s3, spy, str(tmp_path), AWS_ACCESS_KEY_ID="AKIDSTATICSSE", AWS_SECRET_ACCESS_KEY="static/secret+key",
            FLIGHTREC_S3_SSE="AES256"))
        assert "worker done" in proc.stdout
        objects = s3.objects()
        assert objects and sealed(trace_dir) == []
        assert set(map(str, s3.policies().values())) == {str({"sse": "AES256", "kms_key": None,
                                                              "storage_class": None})}
    finally:
        s3.stop()
    assert_loopback_only(spy)
