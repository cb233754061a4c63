"""The uploader never blocks the program, never writes its TLS keys and never
sends a header line it did not mean to (issue 38 items 5 and 7), end to end
under the preload with the loopback S3 stand-in (tests/s3/s3_standin.py).

Item 5: libcurl's global initialisation has OpenSSL read the configuration
file the environment names (OPENSSL_CONF), and opens SSLKEYLOGFILE. It used
to run in the constructor: OPENSSL_CONF naming a FIFO nobody writes hung
every program at start once FLIGHTREC_S3_BUCKET was set. It runs on the
upload thread now, after a check that keeps it from starting at all when
the configuration could block its reader or a key log is asked for (S3
upload off, one line; uploader/library_environment.h).

Item 7: a credential with a control character (a session token
"...\\r\\nX-Injected: 1" from the container credentials endpoint, the
environment or the shared credentials file) is refused with one line naming
its source, and no request carries it: the S3 stand-in records the header
names of every request it sees.
"""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "s3"))
from s3_standin import StandIn  # noqa: E402
from aws_credential_standins import ContainerStandIn  # noqa: E402

BUCKET = "flightrec-safety"
ACCESS_KEY = "AKIDSAFETY"
SECRET = "safety/Secret+Key=="
INJECTED = "\r\nX-Injected: 1"
HANG = 20  # seconds: a run that takes this long is a hang (never an assertion on speed)


@pytest.fixture
def s3():
    standin = StandIn(BUCKET, ACCESS_KEY, SECRET, max_lifetime=600).start()
    yield standin
    standin.stop()


def s3_env(s3, home, **extra):
    env = {
        "FLIGHTREC_S3_BUCKET": BUCKET,
        "FLIGHTREC_S3_ENDPOINT": s3.endpoint,
        "FLIGHTREC_S3_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "HOME": str(home),
        "AWS_SHARED_CREDENTIALS_FILE": os.path.join(home, "no-credentials"),
        "AWS_CONFIG_FILE": os.path.join(home, "no-config"),
        "FLIGHTREC_SEGMENT_SECONDS": 1,
        # Longer than HANG: an upload thread stuck for good would hold exit up
        # to this bound, and the run would count as a hang.
        "FLIGHTREC_UPLOAD_SHUTDOWN_MS": 60000,
    }
    env.update(extra)
    return env


def sealed(out):
    return sorted(f for f in os.listdir(out) if f.endswith(".seg"))


def injected_requests(s3):
    return [r for r in s3.requests() if "x-injected" in r["header_names"]]


# ---- item 5: nothing that can block runs in the constructor or on a program thread ----

PROGRAMS = [("echo", ["/bin/echo", "hello", "world"]), ("sleep", ["/bin/sleep", "1"])]


@pytest.mark.parametrize("name,cmd", PROGRAMS, ids=[p[0] for p in PROGRAMS])
@pytest.mark.parametrize("where", ["fifo", "included_fifo"])
def test_an_openssl_configuration_that_blocks_leaves_the_program_as_plain(fr, trace_dir, tmp_path, s3, name, cmd,
                                                                          where):
    fifo = tmp_path / "openssl.cnf.fifo"
    os.mkfifo(fifo)  # nobody ever writes it: opening it for reading blocks for good
    conf = fifo
    if where == "included_fifo":
        conf = tmp_path / "openssl.cnf"
        conf.write_text(f"openssl_conf = init\n.include {fifo}\n[init]\n")
    plain = fr.run(cmd, trace_dir, preload=False, timeout=HANG, check=False)
    proc = fr.run(cmd, trace_dir, env=s3_env(s3, tmp_path, OPENSSL_CONF=conf), timeout=HANG, check=False)
    assert (proc.returncode, proc.stdout) == (plain.returncode, plain.stdout), proc.stderr
    assert proc.returncode == 0
    assert s3.requests() == []  # never initialised, never sent
    if name == "sleep":
        # (echo closes stderr at its exit, before the recorder's last lines)
        assert f"S3 upload off: OpenSSL's configuration could block its reader: {fifo} is a FIFO" in proc.stderr, \
            proc.stderr
        assert proc.stderr.count("S3 upload off") == 1, proc.stderr
        assert sealed(trace_dir), "the segments stay for a later run"


def test_a_readable_openssl_configuration_is_loaded_and_uploads_go_on(fr, trace_dir, tmp_path, s3):
    """The check refuses only what could block: a configuration of regular
    files (with an .include and a directory) is OpenSSL's to load, as in a
    program of its own, and every segment is shipped."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "extra.cnf").write_text("[extra]\nx = 1\n")
    (tmp_path / "conf.d" / "README").write_text("not read\n")
    part = tmp_path / "part.cnf"
    part.write_text("[part]\ny = 2\n")
    conf = tmp_path / "openssl.cnf"
    conf.write_text(f"openssl_conf = init\n.include {part}\n.include {tmp_path / 'conf.d'}\n[init]\n")
    proc = fr.run([fr.program("s3_worker"), "1500"], trace_dir, env=s3_env(s3, tmp_path, OPENSSL_CONF=conf),
                  timeout=120)
    assert "worker done" in proc.stdout
    assert "S3 upload off" not in proc.stderr, proc.stderr
    assert s3.objects() and sealed(trace_dir) == [], (s3.requests(), proc.stderr)


def test_sslkeylogfile_never_gets_our_tls_keys_nor_is_created(fr, trace_dir, tmp_path, s3):
    """libcurl opens SSLKEYLOGFILE (creating it) at its global init and logs
    every TLS secret into it. The uploader does not initialise libcurl at all
    then: the file is never created by us, and the program runs as plain.
    (The stand-in is plain HTTP: had libcurl been initialised, the file would
    exist, empty, whatever the scheme.)"""
    keys = tmp_path / "keys" / "sslkeys.log"
    keys.parent.mkdir()
    plain = fr.run(["/bin/echo", "keys"], trace_dir, preload=False, timeout=HANG, check=False)
    proc = fr.run(["/bin/echo", "keys"], trace_dir, env=s3_env(s3, tmp_path, SSLKEYLOGFILE=keys), timeout=HANG,
                  check=False)
    assert (proc.returncode, proc.stdout) == (plain.returncode, plain.stdout), proc.stderr
    proc = fr.run([fr.program("s3_worker"), "1200"], trace_dir, env=s3_env(s3, tmp_path, SSLKEYLOGFILE=keys),
                  timeout=120)
    assert "worker done" in proc.stdout
    assert not keys.exists() and os.listdir(keys.parent) == []
    assert "S3 upload off: SSLKEYLOGFILE is set" in proc.stderr, proc.stderr
    assert str(keys) not in proc.stderr
    assert s3.requests() == []
    assert sealed(trace_dir), "the segments stay for a later run"


# ---- item 7: control characters never become header lines ---------------------------


class InjectingContainer(ContainerStandIn):
    """A container credentials endpoint whose session token carries a header of its own."""

    def mint(self):
        doc = super().mint()
        doc["Token"] += INJECTED
        return doc


def test_a_fetched_session_token_with_a_line_break_is_refused_and_never_sent(fr, trace_dir, tmp_path):
    s3 = StandIn(BUCKET, None, None, max_lifetime=600).start()  # knows only what the agent hands out
    try:
        with InjectingContainer(s3, lifetime=3600, auth_token="container-auth") as agent:
            env = s3_env(s3, tmp_path, AWS_CONTAINER_CREDENTIALS_FULL_URI=agent.full_uri,
                         AWS_CONTAINER_AUTHORIZATION_TOKEN="container-auth")
            del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
            proc = fr.run([fr.program("s3_worker"), "1500"], trace_dir,
                          env=dict(env, FLIGHTREC_UPLOAD_SHUTDOWN_MS=2000), timeout=120)
            fetched = agent.requests()
        assert "worker done" in proc.stdout
        assert fetched and all(c["status"] == 200 for c in fetched), fetched  # the agent did hand it out
        assert injected_requests(s3) == [] and s3.requests() == [], s3.requests()
        refused = [line for line in proc.stderr.splitlines()
                   if "refused: the credential document's session token holds a control character" in line]
        assert len(refused) == 1 and "container credentials endpoint" in refused[0], proc.stderr
        assert "X-Injected" not in proc.stderr
        assert sealed(trace_dir), "segments wait for usable credentials"
    finally:
        s3.stop()


@pytest.mark.parametrize("source", ["environment", "shared_file"])
def test_static_credentials_with_a_control_character_are_refused(fr, trace_dir, tmp_path, s3, source):
    env = s3_env(s3, tmp_path)
    if source == "environment":
        env["AWS_SESSION_TOKEN"] = "session-token\nX-Injected: 1"
        expected = "refused: AWS_SESSION_TOKEN (or AWS_SECURITY_TOKEN) holds a control character"
    else:
        creds = tmp_path / "credentials"
        creds.write_text(f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET}\n"
                         "aws_session_token = session-token\rX-Injected: 1\n")
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        env["AWS_SHARED_CREDENTIALS_FILE"] = creds
        expected = f"refused: the session token of [default] in {creds} holds a control character"
    proc = fr.run([fr.program("s3_worker"), "1200"], trace_dir, env=env, timeout=120)
    assert "worker done" in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if expected in line]
    assert len(lines) == 1 and "S3 upload off" in lines[0], proc.stderr
    assert "X-Injected" not in proc.stderr and "session-token" not in proc.stderr
    assert s3.requests() == []
    assert sealed(trace_dir)


def test_the_stand_in_sees_an_injected_header_when_one_is_sent(s3):
    """The header-name record the tests above rely on: a raw request with an
    extra line is seen as such (so an empty list there means none was sent)."""
    host, port = s3.endpoint.split("//")[1].split(":")
    request = (f"GET /{BUCKET}/k HTTP/1.1\r\nHost: {host}\r\nx-amz-security-token: t{INJECTED}\r\n"
               "Connection: close\r\n\r\n")
    out = subprocess.run(["python3", "-c", "import socket,sys; s=socket.create_connection((sys.argv[1], "
                          "int(sys.argv[2]))); s.sendall(sys.argv[3].encode()); s.recv(65536)", host, port, request],
                         capture_output=True, timeout=HANG)
    assert out.returncode == 0, out.stderr
    assert len(injected_requests(s3)) == 1, s3.requests()
