"""Faults: real programs under the preload (every feature on, allocations
sampled every 4 KiB) meet a full disk, an output directory removed under
them, a read-only output, low fd and locked-memory limits, perf refused by
seccomp, every signal blocked, vfork/posix_spawn, exec from a multi-threaded
process and threads leaving through pthread_exit and cancellation. Each must
behave exactly as without the preload (same stdout, same exit status) and
leave a readable trace of what it did."""
import os
import queue
import re
import subprocess
import threading
import time

import pytest

ALL_ON = {"FLIGHTREC_ALLOC_SAMPLE_BYTES": 4096}


def fr_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("flightrec:")]


def app_lines(stderr):
    return [line for line in stderr.splitlines() if not line.startswith("flightrec:")]


def compare(fr, cmd, trace_dir, tmp_path, env=None, timeout=120):
    """Runs cmd plain and under the preload; both must behave the same."""
    plain = fr.run(cmd, tmp_path / "plain-out", preload=False, check=False, timeout=timeout)
    traced = fr.run(cmd, trace_dir, env=dict(ALL_ON, **(env or {})), check=False, timeout=timeout)
    assert traced.returncode == plain.returncode, (plain.returncode, traced.returncode, traced.stderr)
    assert traced.stdout == plain.stdout, traced.stderr
    assert app_lines(traced.stderr) == app_lines(plain.stderr)
    return traced


def info(fr, out, *paths):
    proc = fr.dump_run("info", "--json", *(paths or [out]))
    assert "Traceback" not in proc.stderr, proc.stderr
    import json
    return json.loads(proc.stdout)


def thread_names(doc):
    return {t["name"] for t in doc["threads"]}


def ended(doc):
    return {t["name"] for t in doc["threads"] if t["end"] is not None}


# ---- disk faults ---------------------------------------------------------------------------

class Driven:
    """tests/programs/fault_worker under the preload, one command at a time:
    the test changes the disk between commands and waits for the recorder's
    log lines, never for a fixed time."""

    def __init__(self, fr, out, env):
        self.proc = subprocess.Popen([fr.program("fault_worker")], env=fr.env(out, dict(ALL_ON, **env)),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.answers = queue.Queue()
        self.err = []
        self.cond = threading.Condition()
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump_out(self):
        for line in self.proc.stdout:
            self.answers.put(line.rstrip("\n"))

    def _pump_err(self):
        for line in self.proc.stderr:
            with self.cond:
                self.err.append(line.rstrip("\n"))
                self.cond.notify_all()

    def ask(self, command, timeout=120):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.answers.get(timeout=timeout)

    def wait_log(self, text, timeout=60):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not any(text in line for line in self.err):
                left = deadline - time.monotonic()
                assert left > 0, f"no flightrec line containing {text!r} within {timeout} s: {self.err}"
                self.cond.wait(left)

    def finish(self, code):
        answer = self.ask(f"quit {code}")
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=120)
        with self.cond:
            return answer, rc, list(self.err)


def plain_answers(fr, tmp_path, commands):
    proc = fr.run([fr.program("fault_worker")], tmp_path / "plain-out", preload=False, check=False,
                  input="".join(c + "\n" for c in commands))
    return proc.stdout.splitlines(), proc.returncode


def mount(*args):
    return subprocess.run(["mount"] + list(args), capture_output=True, text=True)


@pytest.fixture
def tmpfs(tmp_path):
    """A 256 KiB tmpfs of our own, unmounted afterwards."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    proc = mount("-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(where))
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(path):
    """Writes a file until the filesystem is full; returns its size."""
    chunk = b"\0" * 4096
    written = 0
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                written += f.write(chunk)
        except OSError as e:
            assert e.errno == 28, e  # ENOSPC
    return written


def wait_for_thread_in_trace(fr, out, name, timeout=60):
    """Until the segment on disk holds `name` (blocks are written about once a second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name in thread_names(info(fr, out)):
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} never reached the segment in {out}")


ROUNDS = 400
SCRIPT = [f"work before {ROUNDS}", f"work during {ROUNDS}", f"work paused {ROUNDS}", f"work after {ROUNDS}",
          "quit 3"]


def check_fault_run(fr, tmp_path, out, driven, answers, fault_text):
    """Common ending: same answers and exit status as the plain run, exactly
    one 'paused' and one 'resumed' line, and a readable trace of the run."""
    answer, rc, err = driven.finish(3)
    answers.append(answer)
    want, want_rc = plain_answers(fr, tmp_path, SCRIPT)
    assert answers == want and rc == want_rc == 3
    lines = fr_lines("\n".join(err))
    paused = [line for line in lines if "recording paused" in line]
    resumed = [line for line in lines if "recording resumed" in line]
    assert len(paused) == 1 and fault_text in paused[0], lines
    assert len(resumed) == 1, lines
    assert len(lines) == 2, lines
    doc = info(fr, out)
    print(f"{fault_text}: {lines}; segments {[s['state'] for s in doc['segments']]}; dropped {doc['dropped']}")
    # Whatever was discarded while paused is counted, never silently lost.
    assert doc["dropped"].get("output.unavailable", 0) > 0, doc["dropped"]
    # The work after the repair is all there; the last segment is sealed.
    assert {"after-0", "after-1"} <= ended(doc), doc["threads"]
    assert doc["segments"][-1]["state"] == "sealed", doc["segments"]
    assert not doc["errors"], doc["errors"]
    return doc


def test_full_disk_pauses_and_resumes(fr, tmp_path, tmpfs):
    out = tmpfs / "trace"
    driven = Driven(fr, out, {})
    answers = [driven.ask(SCRIPT[0])]
    wait_for_thread_in_trace(fr, out, "before-0")
    filler = tmpfs / "filler"
    fill(filler)
    answers.append(driven.ask(SCRIPT[1]))  # its records cannot be written
    driven.wait_log("recording paused")
    answers.append(driven.ask(SCRIPT[2]))  # drained and discarded while paused
    os.unlink(filler)
    driven.wait_log("recording resumed")
    answers.append(driven.ask(SCRIPT[3]))
    doc = check_fault_run(fr, tmp_path, out, driven, answers, "No space left on device")
    # The segment cut short by the full disk still reads up to its last whole block.
    assert {"before-0", "before-1"} <= thread_names(doc)


def test_output_directory_removed_while_running(fr, tmp_path, trace_dir):
    out = trace_dir / "removed"
    driven = Driven(fr, out, {})
    answers = [driven.ask(SCRIPT[0])]
    wait_for_thread_in_trace(fr, out, "before-0")
    subprocess.run(["rm", "-rf", str(out)], check=True)
    answers.append(driven.ask(SCRIPT[1]))
    driven.wait_log("recording paused")
    answers.append(driven.ask(SCRIPT[2]))
    driven.wait_log("recording resumed")  # the directory is created again
    answers.append(driven.ask(SCRIPT[3]))
    doc = check_fault_run(fr, tmp_path, out, driven, answers, "disappeared")
    assert os.stat(out).st_mode & 0o777 == 0o700


def test_read_only_output_until_remounted(fr, tmp_path, tmpfs):
    out = tmpfs / "trace"
    out.mkdir(mode=0o700)
    proc = mount("-o", "remount,ro", str(tmpfs))
    if proc.returncode != 0:
        pytest.skip(f"cannot remount a tmpfs read-only: {proc.stderr.strip()}")
    driven = Driven(fr, out, {})
    answers = [driven.ask(SCRIPT[0])]
    driven.wait_log("recording paused")  # at start: nothing can be created
    answers.append(driven.ask(SCRIPT[1]))
    answers.append(driven.ask(SCRIPT[2]))
    assert mount("-o", "remount,rw", str(tmpfs)).returncode == 0
    driven.wait_log("recording resumed")
    answers.append(driven.ask(SCRIPT[3]))
    check_fault_run(fr, tmp_path, out, driven, answers, "Read-only file system")
