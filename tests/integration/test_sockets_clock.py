"""Socket call times are CLOCK_MONOTONIC nanoseconds whichever clock the hooks
read (preload/runtime/tsc_clock.h): raw TSC ticks converted on the flush thread
(the default where the TSC is invariant) or clock_gettime
(FLIGHTREC_SOCKET_TSC=0). A Python program reads CLOCK_MONOTONIC right before
and after each send of a known size, over ~2.5 s (many flush ticks, and an
idle second that only the periodic map refresh covers); every recorded send
must lie inside its window."""
import sys

import pytest

PROGRAM = r"""
import socket, sys, time
a, b = socket.socketpair()
windows = []
for i in range(40):
    size = 1000 + i
    t0 = time.monotonic_ns()
    a.send(b"x" * size)
    t1 = time.monotonic_ns()
    b.recv(65536)
    windows.append((size, t0, t1))
    time.sleep(1.2 if i == 20 else 0.03)
for size, t0, t1 in windows:
    print(size, t0, t1)
"""

def invariant_tsc():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return "nonstop_tsc" in line.split()
    return False


# The map's error is well under a microsecond; this allows for a pair read
# while the flush thread was preempted, on a loaded machine.
SLACK_NS = 50_000


@pytest.mark.slow
@pytest.mark.parametrize("tsc", ["1", "0"])
def test_send_times_fall_inside_the_monotonic_window_around_each_call(fr, trace_dir, tsc):
    proc = fr.run([sys.executable, "-c", PROGRAM], trace_dir,
                  env={"FLIGHTREC_SOCKET_TSC": tsc, "FLIGHTREC_LOG": "info",
                       "FLIGHTREC_SOCKETS": "calls"})  # each send's own times
    # The kernel's nonstop_tsc flag is the CPUID bit the runtime checks.
    clock = "the TSC" if tsc == "1" and invariant_tsc() else "clock_gettime"
    assert "socket calls timed with %s" % clock in proc.stderr
    windows = {}
    for line in proc.stdout.split("\n"):
        if line.strip():
            size, t0, t1 = map(int, line.split())
            windows[size] = (t0, t1)
    assert len(windows) == 40
    sends = [e for e in fr.events(trace_dir, "socket.op") if e["op"] == "send" and e["bytes"] in windows]
    assert sorted(e["bytes"] for e in sends) == sorted(windows)
    for e in sends:
        t0, t1 = windows[e["bytes"]]
        start, end = e["time"], e["time"] + e["duration_ns"]
        assert start % 128 == 0 and e["duration_ns"] % 128 == 0  # the 128 ns grain
        assert t0 - 128 - SLACK_NS <= start <= end <= t1 + SLACK_NS, (e, t0, t1, clock)
