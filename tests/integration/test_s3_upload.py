"""Shipping sealed segments to S3 (issue 6), end to end under the preload.

A strict S3 stand-in (tests/s3/s3_standin.py: every signature re-verified
with botocore, body hashes and the session token checked) listens on
127.0.0.1 on a free port; tests/programs/s3_worker runs under the preload
with FLIGHTREC_S3_* pointing at it.
"""
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "s3"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from s3_standin import StandIn  # noqa: E402
from flightrec_lib import s3_source  # noqa: E402

BUCKET = "flightrec-it"
ACCESS_KEY = "AKIDINTEGRATION"
SECRET = "integration/Secret+Key=="
TOKEN = "integration-session-token/+="


@pytest.fixture
def s3():
    standin = StandIn(BUCKET, ACCESS_KEY, SECRET, session_token=TOKEN, max_lifetime=600).start()
    yield standin
    standin.stop()


def s3_env(endpoint, **extra):
    env = {
        "FLIGHTREC_S3_BUCKET": BUCKET,
        "FLIGHTREC_S3_ENDPOINT": endpoint,
        "FLIGHTREC_S3_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": TOKEN,
        "AWS_PROFILE": "",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "FLIGHTREC_SEGMENT_SECONDS": 1,
        "FLIGHTREC_UPLOAD_SHUTDOWN_MS": 20000,
    }
    env.update(extra)
    return env


def free_port():
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sealed(out):
    return sorted(f for f in os.listdir(out) if f.endswith(".seg"))


def sha(data):
    return hashlib.sha256(data).hexdigest()


def by_name(objects):
    """{segment file name: bytes}; every key must look like {prefix}/{service}/{date}/{host}/{file}."""
    out = {}
    for key, data in objects.items():
        parts = key.split("/")
        assert len(parts) == 5 and parts[0] == "flightrec" and parts[1] == "s3_worker", key
        assert len(parts[2]) == 10 and parts[2][4] == "-" and parts[2][7] == "-", key
        assert parts[3] == socket.gethostname(), key
        out[parts[4]] = data
    return out


def make_leftovers(fr, out, count):
    """Real sealed segments from a run without S3, copied to `count` distinct names."""
    src = out.parent / "leftover-source"
    src.mkdir(mode=0o700)
    fr.run([fr.program("s3_worker"), "50", "1"], src)
    seg = sealed(src)[0]
    stamp, service, pid, _ = seg[:-4].split("-")
    names = []
    for i in range(count):
        name = f"{stamp}-{service}-{pid}-{9000 + i:04d}.seg"
        shutil.copyfile(src / seg, out / name)
        os.chmod(out / name, 0o600)
        names.append(name)
    return names


@pytest.mark.slow
def test_every_segment_arrives_byte_identical(fr, trace_dir, s3):
    proc = fr.run([fr.program("s3_worker"), "2200"], trace_dir,
                  env=s3_env(s3.endpoint, FLIGHTREC_KEEP_LOCAL=1))
    assert "worker done" in proc.stdout
    local = sealed(trace_dir)
    assert len(local) >= 2, os.listdir(trace_dir)          # rotation every second
    assert not [f for f in os.listdir(trace_dir) if f.endswith(".active")]
    remote = by_name(s3.objects())
    assert sorted(remote) == local, (sorted(remote), local)
    for name in local:
        with open(trace_dir / name, "rb") as f:
            assert sha(remote[name]) == sha(f.read()), name
        assert os.stat(trace_dir / name).st_mode & 0o777 == 0o400  # kept, marked as shipped
    assert not [r for r in s3.requests() if r["status"] != 200], s3.requests()
    assert SECRET not in proc.stderr and TOKEN not in proc.stderr
    # Uploads ran during the recording (rotation every second), yet the trace
    # holds no trace of them: the upload thread records nothing, least of all secrets.
    events = fr.dump_run("events", "--json", trace_dir).stdout
    assert events and SECRET not in events and TOKEN not in events

    # flightrec-dump's s3:// reader (botocore, same variables) gets the same bytes back...
    env = s3_env(s3.endpoint)
    env = {k: str(v) for k, v in env.items()}
    fetched = dict(s3_source.list_and_fetch(f"s3://{BUCKET}/flightrec/s3_worker", env=env))
    assert {k.rsplit("/", 1)[1]: sha(v) for k, v in fetched.items()} == {n: sha(d) for n, d in remote.items()}
    # ...and a downloaded copy reads as a trace.
    copy = s3_source.download_to_temp(f"s3://{BUCKET}/flightrec", env=env)
    try:
        doc = fr.dump_json("info", "--json", copy)
        assert len(doc["segments"]) == len(local)
        assert all(s["state"] == "sealed" for s in doc["segments"]), doc["segments"]
    finally:
        shutil.rmtree(copy)
    with pytest.raises(s3_source.S3SourceError, match="no segments"):
        s3_source.download_to_temp(f"s3://{BUCKET}/nothing-here", env=env)


def test_injected_503s_are_retried(fr, trace_dir, s3):
    s3.set_faults(fail_503=3, ops=["PutObject"])
    proc = fr.run([fr.program("s3_worker"), "300"], trace_dir, env=s3_env(s3.endpoint))
    assert "worker done" in proc.stdout
    codes = [r["code"] for r in s3.requests()]
    assert codes.count("SlowDown") == 3, codes
    assert codes.count("") >= 1, codes
    assert sealed(trace_dir) == [], "uploaded segments are deleted locally"
    assert len(by_name(s3.objects())) == codes.count("")
    assert "rejected" not in proc.stderr, proc.stderr


def test_outage_keeps_segments_and_a_later_run_ships_them(fr, trace_dir, s3):
    down = f"http://127.0.0.1:{free_port()}"
    proc = fr.run([fr.program("s3_worker"), "1200"], trace_dir,
                  env=s3_env(down, FLIGHTREC_UPLOAD_SHUTDOWN_MS=500))
    assert "worker done" in proc.stdout
    left = sealed(trace_dir)
    assert left, "an outage must leave the segments on disk"
    kept = {}
    for name in left:
        with open(trace_dir / name, "rb") as f:
            kept[name] = f.read()
    assert proc.stderr.count("S3 unavailable") == 1, proc.stderr

    proc = fr.run([fr.program("s3_worker"), "50"], trace_dir, env=s3_env(s3.endpoint))
    remote = by_name(s3.objects())
    for name, data in kept.items():
        assert name in remote, (name, sorted(remote))
        assert sha(remote[name]) == sha(data), name
    assert len(remote) > len(kept)  # plus the second run's own segment
    assert sealed(trace_dir) == []


def test_wrong_secret_is_reported_once_and_the_host_runs_on(fr, trace_dir, s3):
    # Leftovers make the failures deterministic: the start-up scan tries one
    # (and stops at the rejection), exit tries again, plus any segment sealed
    # in between.
    leftovers = make_leftovers(fr, trace_dir, 3)
    proc = fr.run([fr.program("s3_worker"), "1500"], trace_dir,
                  env=s3_env(s3.endpoint, AWS_SECRET_ACCESS_KEY="definitely-not-the-secret"))
    assert proc.returncode == 0 and "worker done" in proc.stdout
    attempts = [r for r in s3.requests() if r["op"] == "PutObject"]
    assert len(attempts) >= 2 and all(r["code"] == "SignatureDoesNotMatch" for r in attempts), attempts
    assert proc.stderr.count("SignatureDoesNotMatch") == 1, proc.stderr
    assert "definitely-not-the-secret" not in proc.stderr and TOKEN not in proc.stderr
    assert set(leftovers) <= set(sealed(trace_dir)), "rejected segments stay on disk"
    assert s3.objects() == {}


def test_exit_with_s3_unreachable_returns_within_the_shutdown_bound(fr, trace_dir, s3):
    # A black hole accepts connections and never answers: without the bound,
    # exit would wait for libcurl's 30 s stall timeout, per attempt.
    s3.set_faults(blackhole=True)
    bound_ms = 1000
    start = time.monotonic()
    proc = fr.run([fr.program("s3_worker"), "100"], trace_dir,
                  env=s3_env(s3.endpoint, FLIGHTREC_UPLOAD_SHUTDOWN_MS=bound_ms), timeout=60)
    elapsed = time.monotonic() - start
    assert "worker done" in proc.stdout
    assert any(r["code"] == "blackhole" for r in s3.requests()), "the upload must have been attempted"
    # Generous slack for process start-up and the runtime's own final flush.
    assert elapsed < bound_ms / 1000 + 5, elapsed
    assert sealed(trace_dir), "the unshipped segment stays for a later run"


def test_processes_sharing_a_directory_never_upload_a_segment_twice(fr, trace_dir, s3):
    leftovers = make_leftovers(fr, trace_dir, 8)
    s3.set_faults(slow_ms=40)  # widen the window in which the processes race for each file
    env = fr.env(trace_dir, s3_env(s3.endpoint))
    procs = [subprocess.Popen([fr.program("s3_worker"), "400", "1"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "worker done" in out, err
    puts = [r["path"].rsplit("/", 1)[1] for r in s3.requests() if r["op"] == "PutObject" and r["status"] == 200]
    for name in leftovers:
        assert puts.count(name) == 1, (name, puts)
    assert len(puts) == len(set(puts)), puts
    assert sealed(trace_dir) == []


def test_forked_childrens_segments_are_shipped_too(fr, trace_dir, s3):
    # threads_basic 2 1: two threads, then fork without exec; the child leaves via _exit.
    proc = fr.run([fr.program("threads_basic"), "2", "1"], trace_dir, env=s3_env(s3.endpoint))
    child = int(proc.stdout.split("child ")[1].split()[0])
    names = [k.rsplit("/", 1)[1] for k in s3.objects()]
    pids = {int(n.split("-")[-2]) for n in names}
    assert child in pids and len(pids) == 2, names
    assert sealed(trace_dir) == []
    puts = [r for r in s3.requests() if r["op"] == "PutObject"]
    assert len(puts) == len(names), puts  # each exactly once


@pytest.mark.slow
def test_a_program_closing_every_descriptor_never_loses_an_upload_or_its_own_files(fr, trace_dir, s3):
    # sock_misc closestorm: close_range(3, ~0U)/closefrom(3) about every
    # millisecond, then a socket pair on the lowest numbers carrying 16 bytes.
    # Each upload is held open 40 ms by the stand-in, so the storm runs
    # through every one of them. Before the uploader's descriptors were
    # protected (segment lock, directory scans, credentials), the storm
    # closed the segment under its upload, the number went to the program's
    # socket pair, and the uploader's read and close then hit the program's
    # socket: failed rounds in the program, failed or foreign uploads.
    leftovers = make_leftovers(fr, trace_dir, 4)
    s3.set_faults(slow_ms=40)
    proc = fr.run([fr.program("sock_misc"), "closestorm", "3000"], trace_dir,
                  env=s3_env(s3.endpoint, FLIGHTREC_KEEP_LOCAL=1))
    fields = dict(kv.split("=", 1) for kv in proc.stdout.split() if "=" in kv)
    assert int(fields["rounds"]) >= 500, proc.stdout
    assert (fields["errors"], fields["first_error"]) == ("0", "none"), proc.stdout + proc.stderr
    remote = {k.rsplit("/", 1)[1]: v for k, v in s3.objects().items()}
    local = sealed(trace_dir)
    assert set(leftovers) < set(local) and sorted(remote) == local, (sorted(remote), local)
    for name in local:  # byte for byte: never a program's file sent in a segment's place
        with open(trace_dir / name, "rb") as f:
            assert sha(remote[name]) == sha(f.read()), name
    assert "S3" not in proc.stderr and "upload" not in proc.stderr, proc.stderr


def test_dot_segments_in_service_and_prefix_reach_s3_as_written(fr, trace_dir, s3):
    """Issue 29 item 16. FLIGHTREC_SERVICE=.. and a prefix with /./ and /../
    are legal key text. libcurl used to collapse the dot segments of the URL
    while the signature covered them: every upload failed with
    SignatureDoesNotMatch. The path goes out as signed, so the keys hold
    exactly what was configured."""
    proc = fr.run([fr.program("s3_worker"), "1500"], trace_dir,
                  env=s3_env(s3.endpoint, FLIGHTREC_SERVICE="..", FLIGHTREC_S3_PREFIX="a/./b/../c"))
    assert "worker done" in proc.stdout
    keys = sorted(s3.objects())
    print(f"keys: {keys}")
    assert keys, (s3.requests(), proc.stderr)
    assert all(k.startswith("a/./b/../c/../") and k.endswith(".seg") for k in keys), keys
    assert not [r for r in s3.requests() if r["status"] != 200], s3.requests()
    assert sealed(trace_dir) == [], "every sealed segment is shipped (and deleted locally)"
    assert "S3" not in proc.stderr, proc.stderr
