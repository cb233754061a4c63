"""Shared helpers for integration tests: run real programs under the preload
and read their traces back with scripts/flightrec-dump.

Fixtures:
  fr          -- an object with .build, .lib, .dump, .program(name),
                 .run(cmd, out, env=..., timeout=...) and .dump_json(args...)
  trace_dir   -- a fresh empty directory for one test's segments
"""
import faulthandler
import json
import os
import subprocess
import time
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("FLIGHTREC_BUILD", os.path.join(ROOT, "build"))
PYTHON = "/usr/bin/python3"


# make check-preload-asan: the ASan+UBSan build of the preload (FLIGHTREC_LIB),
# with the sanitizer runtime loaded ahead of it (FLIGHTREC_PRELOAD_FIRST).
LIB = os.environ.get("FLIGHTREC_LIB", os.path.join(BUILD, "libflightrec.so"))
PRELOAD_FIRST = os.environ.get("FLIGHTREC_PRELOAD_FIRST", "")


class Flightrec:
    build = BUILD
    root = ROOT
    lib = LIB
    preload = f"{PRELOAD_FIRST}:{LIB}" if PRELOAD_FIRST else LIB
    # Under a sanitizer runtime: memory and size bounds are not meaningful.
    sanitized = bool(PRELOAD_FIRST)
    dump = os.path.join(ROOT, "scripts", "flightrec-dump")

    def program(self, name):
        path = os.path.join(BUILD, "programs", name)
        assert os.path.exists(path), f"test program {path} is not built (run make)"
        return path

    def env(self, out, extra=None, preload=True):
        # Loopback only: the caller's AWS_* settings (keys, profiles, endpoints)
        # never reach a test program, and instance metadata (169.254.169.254)
        # is off unless a test points it at a loopback stand-in itself.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLIGHTREC_", "AWS_"))}
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        if preload:
            env["LD_PRELOAD"] = self.preload
        env["FLIGHTREC_OUTPUT"] = str(out)
        if extra:
            env.update({k: str(v) for k, v in extra.items()})
        return env

    def run(self, cmd, out, env=None, timeout=120, preload=True, check=True, **kw):
        """Runs cmd (list) under the preload, recording into `out`."""
        proc = subprocess.run(cmd, env=self.env(out, env, preload), capture_output=True,
                              text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"{cmd} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                                 f"stderr:\n{proc.stderr}")
        return proc

    def dump_run(self, *args, check=True, timeout=300):
        proc = subprocess.run([PYTHON, self.dump] + [str(a) for a in args], capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"flightrec-dump {args} exited {proc.returncode}\n{proc.stderr}")
        return proc

    def dump_json(self, *args, check=True):
        proc = self.dump_run(*args, check=check)
        return json.loads(proc.stdout)

    def events(self, out, event_type=None):
        args = ["events", "--json"]
        if event_type:
            args += ["--type", event_type]
        proc = self.dump_run(*args, out)
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    @staticmethod
    def wait_until(check, what, timeout=120):
        """Polls check() until it is true: for what a running program's trace
        on disk must show before the test goes on. A wall-clock sleep instead
        would test the scheduler of a busy machine, not the recorder."""
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, "not seen in %d s: %s" % (timeout, what)
            time.sleep(0.1)

    @staticmethod
    def segments(out):
        return sorted(os.path.join(out, f) for f in os.listdir(out)
                      if f.endswith(".seg") or f.endswith(".active"))


@pytest.fixture
def fr():
    return Flightrec()


# A test still running after this long is hung, not slow (the slowest, the
# 64-thread minute, takes about 2 minutes; under TSan on a busy machine a few
# take 5): every thread's stack goes to stderr and the run ends, failed, rather
# than stalling CI until its limit. A deadlock guard, not a timing assertion.
HUNG_TEST_SECONDS = 1800


@pytest.fixture(autouse=True)
def hung_test_guard():
    faulthandler.dump_traceback_later(HUNG_TEST_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def trace_dir(tmp_path):
    d = tmp_path / "trace"
    d.mkdir(mode=0o700)
    return d


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long run (minutes), e.g. CPython's own tests under the preload")
