"""The host comes first at exit (issue 38): a program's thread that leaves —
through exit, _exit from a signal handler, the raw exit system call, from a
thread with a 16 KiB stack, or eight threads at once — ends exactly as it
would without the preload, and the trace is sealed. The exiting thread only
asks the flush thread for the final seal and waits (bounded); nothing heavy
runs on it (docs/ARCHITECTURE.md, "On a program's thread")."""
import subprocess

import pytest

ENV = {"FLIGHTREC_SAMPLER": "auto"}


def run(fr, trace_dir, *args, preload=True, timeout=30):
    # A hang is the failure this file looks for: a process that outlives the
    # timeout is killed (SIGKILL: a hung one may have every signal blocked).
    try:
        return fr.run([fr.program("exit_paths"), *args], trace_dir, env=ENV, preload=preload,
                      check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"exit_paths {' '.join(args)} still running after {timeout} s (hung)")


def sealed_only(fr, trace_dir):
    names = [f.name for f in trace_dir.iterdir() if f.name.startswith("2")]
    assert names and all(n.endswith(".seg") for n in names), names
    return names


def test_exit_from_a_signal_handler_that_interrupted_malloc(fr, tmp_path):
    """A SIGALRM handler calls _exit(3) while the main thread is in
    malloc/free. The old _exit hook sealed on the handler's thread and hung
    on the arena lock the interrupted malloc held (12 of 20 runs)."""
    for i in range(12):
        out = tmp_path / f"run{i}"
        out.mkdir()
        proc = run(fr, out, "alarm_exit")
        assert proc.returncode == 3, (i, proc.returncode, proc.stderr)
        sealed_only(fr, out)


@pytest.mark.parametrize("mode,status", [("raw_exit_alone", 9), ("raw_exit", 7)])
def test_last_thread_leaving_through_the_exit_system_call(fr, trace_dir, mode, status):
    """The main thread leaves through SYS_exit (as a seccomp-strict program
    must): no atexit, no destructor. Without the preload the process ends
    with that status when its last thread is gone; with it, the recorder's
    threads used to keep it alive for good, deaf to SIGTERM."""
    plain = run(fr, trace_dir, mode, str(status), preload=False)
    assert plain.returncode == status
    proc = run(fr, trace_dir, mode, str(status))
    assert proc.returncode == status, proc.stderr
    sealed_only(fr, trace_dir)
    doc = fr.dump_json("info", "--json", trace_dir)
    assert doc["events"].get("cpu.sample", 0) + doc["events"].get("process.rusage", 0) > 0, doc["events"]


def test_python_leaving_through_the_exit_system_call(fr, trace_dir):
    """The audit's own reproduction: ctypes' syscall(60, 7)."""
    cmd = ["/usr/bin/python3", "-c", "import ctypes; ctypes.CDLL(None).syscall(60, 7)"]
    try:
        proc = fr.run(cmd, trace_dir, check=False, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("python3 with a raw exit still running after 30 s (hung)")
    assert proc.returncode == 7, proc.stderr
    sealed_only(fr, trace_dir)


def test_exit_from_a_thread_with_a_16k_stack(fr, trace_dir):
    """exit(5) from a thread with a 16 KiB stack right after it starts: the
    final tick used to run on that stack down into libdw (SIGSEGV)."""
    proc = run(fr, trace_dir, "small_stack_exit", "5")
    assert proc.returncode == 5, proc.stderr
    sealed_only(fr, trace_dir)


def test_eight_threads_calling_exit_at_once(fr, tmp_path):
    """Eight threads call exit(0) together: the first to reach glibc's
    _exit used to end the process while another was still sealing (8 of 10
    traces left .active). Every run's trace is sealed now."""
    for i in range(8):
        out = tmp_path / f"run{i}"
        out.mkdir()
        proc = run(fr, out, "many_exit")
        assert proc.returncode == 0, proc.stderr
        sealed_only(fr, out)
