"""CPU time a test program has really had, from /proc/PID/stat.

Tests that need "enough" samples wait for CPU seconds, never wall seconds:
on a busy machine a program can get a fifth of a core for a while, and a
test that sleeps a fixed time then expects a sample count is a test of the
scheduler (issue 38 item 14)."""
import os
import time

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid, tid=None):
    """User + system CPU seconds of pid (all its threads), or of its thread tid
    alone (the program's own work, without the recorder's threads: under a
    sanitizer those can take a good part of the process's CPU)."""
    path = "/proc/%d/stat" % pid if tid is None else "/proc/%d/task/%d/stat" % (pid, tid)
    with open(path, "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def wait_for_cpu(pid, seconds, timeout=60, tid=None):
    """Returns once pid (or its thread tid) has used `seconds` of CPU; fails
    after `timeout` wall seconds."""
    deadline = time.monotonic() + timeout
    while cpu_seconds(pid, tid) < seconds:
        assert time.monotonic() < deadline, "pid %d used under %.2f s of CPU in %d s" % (pid, seconds, timeout)
        time.sleep(0.02)
