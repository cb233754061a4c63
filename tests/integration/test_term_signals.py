"""Termination signals left at their default action (SIGTERM from a service
manager, SIGINT, SIGPIPE, ...) end the process without exit handlers. Under
the preload such a death still leaves a sealed trace with its last moments
and a process.killed event naming the signal and its sender, and the process
dies exactly as it would without us. Signals the program handles or ignores
stay the program's (tests/programs/term_test.c).
"""
import os
import signal
import subprocess
import time

import pytest

from process_cpu import cpu_seconds, wait_for_cpu


def default_signals():
    # A test runner started in the background by a non-interactive shell
    # inherits SIGINT and SIGQUIT ignored, and under nohup SIGHUP too; these
    # tests need the default death for every signal they send.
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGALRM, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def start(fr, trace_dir, mode, preload=True, env=None, **kw):
    args = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    args.update(kw)
    proc = subprocess.Popen([fr.program("term_test"), mode], env=fr.env(trace_dir, env, preload), **args)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def raw_status(proc):
    """The wait status, core-dump bit included (Popen keeps only the signal)."""
    _, status = os.waitpid(proc.pid, 0)
    proc.returncode = -1  # reaped here
    return status


def killed_events(fr, trace_dir):
    return fr.events(trace_dir, "process.killed")


@pytest.mark.slow
def test_sigterm_seals_the_trace_up_to_the_end_and_names_the_sender(fr, trace_dir):
    proc = start(fr, trace_dir, "burn", env={"FLIGHTREC_CPU_HZ": 499})
    # CPU seconds, not wall seconds: on a busy machine the burn may get a
    # fifth of a core. The burning (main) thread's own CPU after "ready", not
    # the process's: the recorder's threads (slow under ASan) and the start
    # count there too. Its last 0.1 s of CPU comes after `mark`.
    base = cpu_seconds(proc.pid, proc.pid)
    wait_for_cpu(proc.pid, base + 0.5, tid=proc.pid)
    mark = time.monotonic_ns()
    wait_for_cpu(proc.pid, base + 0.6, tid=proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    segs = fr.segments(trace_dir)
    assert segs and all(s.endswith(".seg") for s in segs), segs  # sealed, not left .active
    (k,) = killed_events(fr, trace_dir)
    assert (k["signal_name"], k["code"], k["sender_pid"], k["sender_uid"]) == \
        ("SIGTERM", 0, os.getpid(), os.getuid())
    assert k["pid"] == k["tid"] == proc.pid
    burn = [e for e in fr.events(trace_dir, "cpu.sample")
            if [f.get("function") for f in e["stack"]][:2] == ["term_burn_inner", "term_burn_outer"]]
    # 0.6 s of CPU, most of it in the burn: the samples' weights add up to it
    # (on a busy machine the kernel's CPU timers fire late and a sample
    # stands for more than 2 ms: its period_ns says how much).
    assert sum(e["period_ns"] for e in burn) >= 0.3e9, [e["period_ns"] for e in burn]
    # The last moments are there (without the seal, the block being filled
    # was still in memory when the process died): samples of the last 0.1 s
    # of CPU. Times are CLOCK_MONOTONIC, the test's own clock.
    assert any(e["time"] >= mark for e in burn), (mark, max(e["time"] for e in burn))
    info = fr.dump_run("info", trace_dir).stdout
    assert "killed: SIGTERM sent by pid %d" % os.getpid() in info


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM])
def test_the_process_dies_as_without_the_preload(fr, trace_dir, tmp_path, sig):
    statuses = []
    for preload in (False, True):
        # A core, if the signal makes one, lands in the test's directory.
        proc = start(fr, trace_dir, "burn", preload=preload, cwd=tmp_path)
        proc.send_signal(sig)
        statuses.append(raw_status(proc))
    assert statuses[0] == statuses[1]
    assert os.WIFSIGNALED(statuses[1]) and os.WTERMSIG(statuses[1]) == sig
    assert [k["signal_name"] for k in killed_events(fr, trace_dir)] == [signal.Signals(sig).name]


def test_sigpipe_is_recorded_and_still_kills(fr, trace_dir):
    proc = subprocess.Popen([fr.program("term_test"), "pipe"], env=fr.env(trace_dir), stdout=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away: the next write raises SIGPIPE
    assert proc.wait(timeout=30) == -signal.SIGPIPE
    (k,) = killed_events(fr, trace_dir)
    assert k["signal_name"] == "SIGPIPE"
    assert all(s.endswith(".seg") for s in fr.segments(trace_dir))


@pytest.mark.slow
def test_handled_and_ignored_signals_stay_the_programs(fr, trace_dir):
    proc = start(fr, trace_dir, "handler")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out.strip()) == (7, "handled")
    proc = start(fr, trace_dir, "ignore")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert (proc.returncode, out.strip()) == (0, "survived")
    assert killed_events(fr, trace_dir) == []


def test_the_default_put_back_after_a_handler_is_held_again(fr, trace_dir):
    proc = start(fr, trace_dir, "restore")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert [k["signal_name"] for k in killed_events(fr, trace_dir)] == ["SIGTERM"]


def test_a_vfork_child_killed_leaves_the_parent_as_it_was(fr, trace_dir):
    # The child shares the parent's memory until it dies: our handler must
    # change nothing there, or the parent's next SIGTERM is mishandled.
    proc = subprocess.Popen([fr.program("term_test"), "vfork"], env=fr.env(trace_dir), stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "child signal 15"
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    killed = [(k["signal_name"], k["pid"]) for k in killed_events(fr, trace_dir)]
    assert [k for k in killed if k[1] == proc.pid] == [("SIGTERM", proc.pid)], killed
    # A sanitizer runtime turns vfork into fork (TSan does): the child, then
    # a process of its own, may record its own death too.
    if not os.environ.get("FLIGHTREC_PRELOAD_FIRST"):
        assert len(killed) == 1, killed


def test_sigaction_reports_what_the_program_set(fr, trace_dir):
    plain = fr.run([fr.program("term_test"), "dispositions"], trace_dir, preload=False).stdout
    traced = fr.run([fr.program("term_test"), "dispositions"], trace_dir).stdout
    assert traced == plain
    assert "TERM default" in traced and "signal(SIGUSR1) before=default then=mine" in traced


def test_an_inherited_sig_ign_is_kept(fr, trace_dir):
    # nohup's way: SIGHUP ignored before exec. The program must keep ignoring it.
    proc = subprocess.Popen([fr.program("term_test"), "burn"], env=fr.env(trace_dir), stdout=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert [k["signal_name"] for k in killed_events(fr, trace_dir)] == ["SIGTERM"]


def test_a_vfork_child_resetting_signals_leaves_the_parents_alone(fr, trace_dir):
    # Python's subprocess resets SIGPIPE in a vfork child before exec. The
    # child runs in the parent's memory: the recorder's tables (held signals,
    # the application's handlers behind ours) are the parent's and must not
    # take the child's changes. Before: the parent's sigaction said SIGPIPE
    # was at its default while the kernel still ignored it (CPython's
    # test_restore_signals failed under the preload).
    plain = subprocess.run([fr.program("term_test"), "vfork-reset"], capture_output=True, text=True, timeout=30)
    traced = fr.run([fr.program("term_test"), "vfork-reset"], trace_dir)
    assert plain.stdout.splitlines()[:3] == ["PIPE ignored", "SEGV handler", "TERM default"], plain.stdout
    assert traced.stdout.splitlines()[:3] == plain.stdout.splitlines()[:3], traced.stdout

    # And a program it execs inherits SIGPIPE ignored, as without the preload.
    # (Only that bit: a sanitizer runtime changes others on its own.)
    def pipe_ignored(out):
        mask = int(out.splitlines()[3].split()[1], 16)
        return bool(mask >> (signal.SIGPIPE - 1) & 1)
    assert pipe_ignored(plain.stdout) and pipe_ignored(traced.stdout), (plain.stdout, traced.stdout)
