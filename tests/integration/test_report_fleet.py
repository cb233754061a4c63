"""Fleet prefixes and progress (issue 32): --pid, --service and --host narrow
every report, locally and on s3:// (where keys ruled out are not even
downloaded); reading and downloading show a progress line only when stderr
is a terminal.

Real traces: cpu_split recorded as two services on two hosts (the second
in its own UTS namespace with another hostname), served from the S3
stand-in on 127.0.0.1 under the keys the uploader uses
({prefix}/{service}/{date}/{host}/{file})."""
import json
import os
import pty
import select
import shutil
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "s3"))
from s3_standin import StandIn  # noqa: E402

PYTHON = "/usr/bin/python3"
BUCKET = "fleet-it"
OTHER_HOST = "fleet-host-b"


def record(fr, out, service, host=None):
    cmd = [fr.program("cpu_split"), "0.5"]
    if not host:
        fr.run(cmd, out, env={"FLIGHTREC_SERVICE": service})
        return
    # A host of its own: a new UTS namespace with another hostname (needs root);
    # only the program itself runs under the preload.
    cmd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && LD_PRELOAD="$1" exec "$2" "$3"',
           host, fr.preload] + cmd
    fr.run(cmd, out, env={"FLIGHTREC_SERVICE": service}, preload=False)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from conftest import Flightrec
    fr = Flightrec()
    if os.geteuid() != 0 or subprocess.run(["unshare", "--uts", "true"]).returncode != 0:
        pytest.skip("needs root and unshare --uts to record a second host")
    out = tmp_path_factory.mktemp("fleet")
    record(fr, out / "a", "api")
    record(fr, out / "b", "batch", host=OTHER_HOST)
    segs = {d: fr.segments(out / d) for d in ("a", "b")}
    assert segs["a"] and segs["b"]
    return fr, out, segs


def test_s3_keys_ruled_out_by_the_selection():
    """Which uploader keys a selection may skip unread (the headers still decide the rest)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
    from flightrec_lib.selection import Selection
    key = "fr/api/2026-12-03/web-7/20261203T094644.954Z-api-1234-0003.seg"
    assert Selection(pids={1234}).key_may_match(key)
    assert not Selection(pids={99}).key_may_match(key)
    assert Selection(hosts=["web-*"]).key_may_match(key)
    assert not Selection(hosts=["db-*"]).key_may_match(key)
    assert not Selection(services=["batch"]).key_may_match(key)
    # The uploader writes '/' in a service name as '_': a selection naming "a/b" still matches.
    assert Selection(services=["team/api"]).key_may_match(key.replace("/api/", "/team_api/"))
    # Keys in another layout are never ruled out by their name.
    assert Selection(pids={99}).key_may_match("elsewhere/x.seg")
    assert Selection(hosts=["db"]).key_may_match("a/b/not-a-date/c/x-1-2.seg")


def info(fr, *args):
    return json.loads(fr.dump_run("info", "--json", *args).stdout)


def pids_of(doc):
    return {s["pid"] for s in doc["segments"]}


@pytest.mark.slow
def test_local_filters_narrow_every_report(fleet):
    fr, out, segs = fleet
    every = info(fr, out)
    assert len(pids_of(every)) == 2
    only_b = info(fr, "--host", OTHER_HOST, out)
    assert {s["host"] for s in only_b["segments"]} == {OTHER_HOST}
    assert {s["service"] for s in only_b["segments"]} == {"batch"}
    only_api = info(fr, "--service", "a*", out)
    assert {s["service"] for s in only_api["segments"]} == {"api"}
    (pid_b,) = pids_of(only_b)
    assert pids_of(info(fr, "--pid", str(pid_b), out)) == {pid_b}
    # Profiles too: the samples of one process only (folded counts add up to its cpu.sample events).
    cpu_b = fr.dump_json("top", "--json", "--pid", str(pid_b), out)
    cpu_all = fr.dump_json("top", "--json", out)
    b_events = [e for e in fr.events(out / "b", "cpu.sample")]
    assert cpu_b["samples"] == len(b_events) and cpu_all["samples"] > cpu_b["samples"]
    # A selection that takes nothing says so.
    proc = fr.dump_run("top", "--service", "nope", out, check=False)
    assert "no segments match service nope" in proc.stderr, proc.stderr
    proc = fr.dump_run("top", "--pid", "x1", out, check=False)
    assert proc.returncode == 2 and "bad --pid" in proc.stderr


@pytest.fixture
def served(fleet):
    """The fleet's segments in the S3 stand-in, keyed as the uploader keys them."""
    fr, out, segs = fleet
    standin = StandIn(BUCKET, "AKIDFLEET", "fleet/secret", max_lifetime=600).start()
    hosts = {"a": socket.gethostname(), "b": OTHER_HOST}
    services = {"a": "api", "b": "batch"}
    keys = {}
    with standin.lock:
        for d, files in segs.items():
            for f in files:
                if not f.endswith(".seg"):
                    continue
                key = "flightrec/%s/2026-12-03/%s/%s" % (services[d], hosts[d], os.path.basename(f))
                with open(f, "rb") as fh:
                    standin.objects_by_key[key] = fh.read()
                keys.setdefault(d, []).append(key)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLIGHTREC_"))}
    env.update({"FLIGHTREC_S3_ENDPOINT": standin.endpoint, "FLIGHTREC_S3_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "AKIDFLEET", "AWS_SECRET_ACCESS_KEY": "fleet/secret",
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent"})
    yield fr, standin, keys, env
    standin.stop()


def dump(fr, env, *args, stderr=subprocess.PIPE):
    return subprocess.run([PYTHON, fr.dump] + [str(a) for a in args], env=env, stdout=subprocess.PIPE,
                          stderr=stderr, text=True, timeout=300)


def fetched(standin):
    return sorted(r["path"].split("/", 2)[2] for r in standin.requests()
                  if r.get("op") == "GetObject" and r.get("status") == 200)


def test_s3_prefix_is_narrowed_before_download(served):
    fr, standin, keys, env = served
    assert keys.get("a") and keys.get("b")
    proc = dump(fr, env, "info", "--json", "--host", OTHER_HOST, "s3://%s/flightrec" % BUCKET)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {s["host"] for s in doc["segments"]} == {OTHER_HOST}
    # Only the other host's objects were downloaded, and no progress went to a non-terminal stderr.
    assert fetched(standin) == sorted(keys["b"]), standin.requests()
    assert proc.stderr == ""
    with standin.lock:
        standin.log.clear()
    proc = dump(fr, env, "info", "--json", "--service", "api", "--host", OTHER_HOST, "s3://%s/flightrec" % BUCKET)
    assert proc.returncode == 1 and "no segments under this prefix match" in proc.stderr, proc.stderr
    assert fetched(standin) == []


def run_on_terminal(fr, env, *args):
    """Runs flightrec-dump with stderr on a pseudo-terminal; (stdout, what the terminal got)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([PYTHON, fr.dump] + [str(a) for a in args], env=env, stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 300)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed its end
            break
        if not chunk:
            break
        seen += chunk
    stdout = proc.stdout.read().decode()
    proc.wait(timeout=300)
    os.close(master)
    return proc.returncode, stdout, seen.decode("utf-8", "replace")


@pytest.mark.slow
def test_progress_only_on_a_terminal(served, fleet):
    fr, standin, keys, env = served
    _, out, segs = fleet
    n = len(segs["a"]) + len(segs["b"])
    rc, stdout, tty = run_on_terminal(fr, env, "top", out)
    assert rc == 0 and "CPU:" in stdout
    assert "reading segments: %d/%d" % (n, n) in tty, repr(tty)
    assert tty.endswith("\r\x1b[K"), repr(tty[-40:])  # the line is erased before the report
    # The same command with stderr on a pipe: the report, and not a byte of progress.
    proc = dump(fr, env, "top", out)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == stdout
    # Downloads: the count of segments fetched, and their bytes.
    rc, stdout, tty = run_on_terminal(fr, env, "info", "s3://%s/flightrec" % BUCKET)
    assert rc == 0, tty
    total = len(keys["a"]) + len(keys["b"])
    assert "downloading s3://%s/flightrec: %d/%d (" % (BUCKET, total, total) in tty, repr(tty)


def test_progress_stays_silent_with_stderr_to_a_file(fleet, tmp_path):
    fr, out, _ = fleet
    log = tmp_path / "stderr.txt"
    with open(log, "w") as f:
        proc = subprocess.run([PYTHON, fr.dump, "tree", str(out)], stdout=subprocess.PIPE, stderr=f, timeout=300)
    assert proc.returncode == 0 and log.read_text() == ""
    shutil.rmtree(tmp_path, ignore_errors=True)
