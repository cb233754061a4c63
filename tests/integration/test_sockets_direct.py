"""Direct system calls on non-blocking sockets (preload/sockets/socket_direct.h): the
data hooks skip libc's wrapper only where that changes nothing the program
can see. tests/programs/sock_direct.c checks every answer itself (bytes,
errno untouched on success, EAGAIN, EPIPE); here the trace must agree, and a
thread blocked in recv() must still be cancellable however its socket became
blocking."""
import pytest

EAGAIN, EPIPE = 11, 32
SEND_OPS = {"write", "writev", "send", "sendto", "sendmsg"}
RECV_OPS = {"read", "readv", "recv", "recvfrom", "recvmsg"}


@pytest.mark.slow
@pytest.mark.parametrize("direct", ["1", "0"])
def test_data_calls_answer_as_libc_does(fr, trace_dir, direct):
    proc = fr.run([fr.program("sock_direct"), "calls"], trace_dir,
                  env={"FLIGHTREC_SOCKET_DIRECT": direct, "FLIGHTREC_LOG": "info", "FLIGHTREC_SOCKETS": "calls"})
    plain = fr.run([fr.program("sock_direct"), "calls"], trace_dir, preload=False)
    assert proc.stdout == plain.stdout == "sent=480 received=480 eagain=2 epipe=1\n"
    said = "skip libc's wrapper" if direct == "1" else "go through libc"
    assert f"data calls on non-blocking sockets {said}" in proc.stderr
    ops = fr.events(trace_dir, "socket.op")
    by_op = {}
    for e in ops:
        by_op.setdefault(e["op"], []).append(e["bytes"])
    # Each call form once, with the bytes the program moved.
    assert {op: v for op, v in by_op.items() if op in SEND_OPS} == {
        "write": [100], "writev": [70], "send": [200, -EPIPE], "sendto": [33], "sendmsg": [77]}
    assert {op: v for op, v in by_op.items() if op in RECV_OPS} == {
        "read": [100, -EAGAIN], "readv": [70], "recv": [200, -EAGAIN], "recvfrom": [33], "recvmsg": [77]}
    assert all(e["duration_ns"] >= 0 for e in ops)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blocking", "fcntl", "ioctl", "dup"])
def test_a_thread_blocked_in_recv_can_still_be_cancelled(fr, trace_dir, mode):
    # "fcntl", "ioctl", "dup": the socket was created non-blocking and made
    # blocking later (through another fd for "dup"). A hook that still took
    # it for non-blocking would make a direct call, which pthread_cancel
    # cannot interrupt: the program's alarm() would end it after 10 s.
    proc = fr.run([fr.program("sock_direct"), "cancel", mode], trace_dir, timeout=60, check=False,
                  env={"FLIGHTREC_SOCKETS": "calls"})  # reads each call's socket.op
    assert (proc.returncode, proc.stdout) == (0, "cancelled\n"), proc.stderr
    recvs = [e for e in fr.events(trace_dir, "socket.op") if e["op"] == "recv"]
    assert [e["bytes"] for e in recvs][:3] == [1, 1, 1]
