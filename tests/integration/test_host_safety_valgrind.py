"""A program run under Valgrind with the preload in its environment ends, and
is reported on, exactly as without the preload: the recorder steps back.

Found with curl's own test suite (tests/runtests.pl runs curl under Valgrind
whenever it is installed): under the preload every curl test failed. Valgrind
replaces `free` by name in every library, our private heap's included, so
each free of the recorder's became an "Invalid free" in the program's Valgrind
report, and curl died of SIGSEGV ("can't extend stack during signal delivery")
once the SIGPROF sampler ran on Valgrind's emulated CPU, where samples would
describe Valgrind's translation anyway.
"""
import json
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")


def under_valgrind(fr, out, extra=None, preload=True):
    cmd = ["valgrind", "-q", "--error-exitcode=99", fr.program("alloc_known"), "64"]
    return subprocess.run(cmd, env=fr.env(out, extra, preload), capture_output=True, text=True, timeout=600)


def test_a_program_under_valgrind_is_reported_on_as_without_the_preload(fr, trace_dir, tmp_path):
    plain = under_valgrind(fr, tmp_path / "plain", preload=False)
    assert plain.returncode == 0, plain.stderr
    traced = under_valgrind(fr, trace_dir, {"FLIGHTREC_LOG": "info"})
    # Valgrind's verdict on the program (exit 99 on any error it reports) and
    # what the program printed are as without us.
    assert traced.returncode == plain.returncode, traced.stderr
    assert json.loads(traced.stdout) == json.loads(plain.stdout)
    valgrind_lines = [line for line in traced.stderr.splitlines() if line.startswith("==")]
    assert valgrind_lines == [], traced.stderr
    # The one line, at info level, comes from the program's process (the
    # Valgrind launcher itself is an ordinary program and is recorded).
    assert "flightrec: recording off: running under Valgrind" in traced.stderr.splitlines()
    starts = fr.events(trace_dir, "process.start")
    assert starts, "the launcher, a plain process, is recorded"
    assert not any("alloc_known" in s.get("exe", "") for s in starts), starts


def test_under_valgrind_the_recorder_says_nothing_by_default(fr, trace_dir):
    """Test suites compare a program's stderr: the step-back is silent unless
    FLIGHTREC_LOG asks for information."""
    traced = under_valgrind(fr, trace_dir)
    assert traced.returncode == 0, traced.stderr
    assert not [line for line in traced.stderr.splitlines() if line.startswith("flightrec:")], traced.stderr
