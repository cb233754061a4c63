"""On-demand triggers (`flightrec-dump trigger`, issue 38 items 8 and 9), end to
end: real programs under the preload in window mode, triggered through the
control file the command writes.

Checked: a program whose name holds a `-` (file names write it `_`) is
triggered by its name as `ps` shows it, and by its pid without --output (the
command reads the process's FLIGHTREC_OUTPUT from /proc/PID/environ); a
control file another user planted in a shared sticky directory is ignored
(logged once) while the process's own user's still works; a control file
written before the process started, or named for another process with the
same pid, is never obeyed.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

PYTHON = "/usr/bin/python3"
NOBODY = 65534


def window_env(**extra):
    env = {"FLIGHTREC_MODE": "window", "FLIGHTREC_WINDOW_SECONDS": 2, "FLIGHTREC_TRIGGER_AFTER_SECONDS": 0,
           "FLIGHTREC_LOG": "info"}
    env.update(extra)
    return env


def dump(fr, *args, user=None, check=True):
    """flightrec-dump with an environment that says nothing of where processes
    record (no FLIGHTREC_*): the command must find out itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLIGHTREC_", "AWS_"))}
    proc = subprocess.run([PYTHON, fr.dump] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=120, env=env, user=user)
    if check and proc.returncode != 0:
        raise AssertionError("flightrec-dump %s exited %d\n%s" % (args, proc.returncode, proc.stderr))
    return proc


def wait_until(what, predicate, proc, timeout=60):
    """Waits (on a busy machine: generously) until predicate() holds; fails
    if the process exits first."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the process exited before %s" % what
        assert time.monotonic() < deadline, "no %s after %d s" % (what, timeout)
        time.sleep(0.05)


def active_of(out, pid):
    return [f for f in os.listdir(out) if f.endswith(".active") and f"-{pid}-" in f]


def start_ticks(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[19])


def stop(proc):
    """SIGTERM (not a trigger: an orderly stop); the recorder seals on the way out."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def demand_triggers(fr, out):
    return [e for e in fr.events(out, "trigger") if e["reason"] == "demand"]


def test_a_program_named_with_a_dash_is_triggered_by_name_and_by_pid_without_output(fr, trace_dir, tmp_path):
    prog = tmp_path / "svc-with-dash"
    shutil.copy(fr.program("s3_worker"), prog)
    proc = subprocess.Popen([str(prog), "120000"], env=fr.env(trace_dir, window_env()),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("a segment", lambda: active_of(trace_dir, proc.pid), proc)
        assert "svc_with_dash" in active_of(trace_dir, proc.pid)[0]   # the file name's form of the service
        control = trace_dir / (".trigger-%d-%d" % (proc.pid, start_ticks(proc.pid)))

        by_name = dump(fr, "trigger", "--note", "by name", "svc-with-dash")   # as ps and pgrep show it
        assert "triggered pid %d (svc_with_dash)" % proc.pid in by_name.stdout, by_name.stdout
        wait_until("the first trigger consumed", lambda: not control.exists(), proc)
        by_pid = dump(fr, "trigger", "--note", "by pid", proc.pid)            # no --output, no FLIGHTREC_OUTPUT
        assert str(trace_dir) in by_pid.stdout, by_pid.stdout
        wait_until("the second trigger consumed", lambda: not control.exists(), proc)
        # The sanitised form names it too.
        assert "triggered pid %d" % proc.pid in dump(fr, "trigger", "--note", "by file name", "svc_with_dash").stdout
        wait_until("the third trigger consumed", lambda: not control.exists(), proc)
    finally:
        stop(proc)
    doc = fr.dump_json("info", "--json", trace_dir)
    incidents = doc["incidents"]
    assert [i["reasons"] for i in incidents] == [["demand"]] * 3, incidents
    assert [i["notes"] for i in incidents] == [["by name"], ["by pid"], ["by file name"]], incidents
    assert {i["pid"] for i in incidents} == {proc.pid}
    assert [n for n in os.listdir(trace_dir) if "@" in n], os.listdir(trace_dir)   # window mode kept them
    text = fr.dump_run("info", trace_dir).stdout
    assert "incidents: 3" in text and '"by pid"' in text


def test_trigger_names_what_it_cannot_find(fr, trace_dir):
    bad = dump(fr, "trigger", "--output", trace_dir, "999999999", check=False)
    assert bad.returncode == 2 and "no such process" in bad.stderr
    bad = dump(fr, "trigger", "no-such-service", check=False)
    assert bad.returncode == 2 and "no live process" in bad.stderr
    # A live process that does not record (no preload): said so, with where it looked.
    bad = dump(fr, "trigger", os.getpid(), check=False)
    assert bad.returncode == 2 and "not a live process recording into" in bad.stderr


@pytest.fixture
def shared_dir():
    """A sticky directory everyone may write into (like /tmp), ours: one the
    recorder accepts as output directory, where another user can plant files."""
    d = tempfile.mkdtemp(prefix="fr-shared-", dir="/tmp")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_users_control_file_is_ignored(fr, shared_dir, tmp_path):
    log = tmp_path / "stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen([fr.program("s3_worker"), "120000"], env=fr.env(shared_dir, window_env()),
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_until("a segment", lambda: active_of(shared_dir, proc.pid), proc)
        control = os.path.join(shared_dir, ".trigger-%d-%d" % (proc.pid, start_ticks(proc.pid)))
        # Another user writes the control file, as `flightrec-dump trigger` would.
        plant = ("import os; fd = os.open(%r, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644); "
                 "os.write(fd, b'not yours\\n')" % control)
        subprocess.run([PYTHON, "-c", plant], user=NOBODY, check=True, timeout=60)
        assert os.stat(control).st_uid == NOBODY
        wait_until("the foreign file noticed", lambda: "owned by another user" in log.read_text(), proc)
        time.sleep(1.5)   # a few more looks: still not obeyed, and logged once
        assert os.path.exists(control)   # not ours to delete
        # The command itself refuses to trigger another user's process.
        refused = dump(fr, "trigger", "--output", shared_dir, proc.pid, user=NOBODY, check=False)
        assert refused.returncode == 1 and "runs as uid 0" in refused.stderr, refused.stderr
        # The process's own user (root here) still can: its file replaces the planted one.
        dump(fr, "trigger", "--note", "mine", proc.pid)
        wait_until("the trigger consumed", lambda: not os.path.exists(control), proc)
    finally:
        stop(proc)
    assert log.read_text().count("owned by another user") == 1, log.read_text()
    assert [e["note"] for e in demand_triggers(fr, shared_dir)] == ["mine"]


def test_a_control_file_from_before_the_process_or_for_another_process_is_not_obeyed(fr, trace_dir, tmp_path):
    # The pid and its start time are known before the recorder starts: a shell
    # (not recorded) waits for a line, then execs the program under the preload
    # (same pid, same start time).
    env = fr.env(trace_dir, {**window_env(), "FR_PRELOAD": fr.preload}, preload=False)
    log = tmp_path / "stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen(["/bin/sh", "-c", 'read line; exec env LD_PRELOAD="$FR_PRELOAD" "$@"', "sh",
                                 fr.program("s3_worker"), "120000"],
                                env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
    try:
        start = start_ticks(proc.pid)
        control = trace_dir / (".trigger-%d-%d" % (proc.pid, start))

        def plant(path, note, mtime=None):
            path.write_text(note + "\n")
            if mtime is not None:
                os.utime(path, (mtime, mtime))
        # Left by an earlier process with this pid and start tick (a reboot
        # with a persistent directory): written an hour before this one started.
        plant(control, "stale", time.time() - 3600)
        # Aimed at an earlier process with the same pid (another start time),
        # and the old name that bound nothing: never even opened.
        other = trace_dir / (".trigger-%d-%d" % (proc.pid, start - 1))
        legacy = trace_dir / (".trigger-%d" % proc.pid)
        plant(other, "other process")
        plant(legacy, "legacy name")
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        wait_until("a segment", lambda: active_of(trace_dir, proc.pid), proc)
        # The recorder deletes the stale file (its own user's) without obeying it.
        wait_until("the stale file removed", lambda: not control.exists(), proc)
        assert other.exists() and legacy.exists()
        dump(fr, "trigger", "--note", "fresh", proc.pid)
        assert not other.exists() and not legacy.exists()   # the command cleans up what nobody will read
        wait_until("the trigger consumed", lambda: not control.exists(), proc)
    finally:
        stop(proc)
    assert [e["note"] for e in demand_triggers(fr, trace_dir)] == ["fresh"]
    assert log.read_text().count("written before this process started") == 1, log.read_text()
