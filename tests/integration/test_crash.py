"""Crash capture: the host's exit status is unchanged, and the trace ends
with a sealed segment holding the crash and its symbolized stack."""
import signal
import pytest


def frames_of(event):
    return [f.get("function", "") for f in event["stack"]]


def run_both(fr, trace_dir, tmp_path, mode):
    plain = fr.run([fr.program("crash_test"), mode], tmp_path / "plain", preload=False, check=False)
    traced = fr.run([fr.program("crash_test"), mode], trace_dir, check=False)
    assert traced.returncode == plain.returncode, (plain.returncode, traced.returncode, traced.stderr)
    assert traced.stdout == plain.stdout
    return traced


def crashed_once(fr, trace_dir, tmp_path, mode, sig):
    """crash_test MODE dies of sig with and without the preload; the trace
    holds exactly one crash event, of that signal, which is returned."""
    proc = run_both(fr, trace_dir, tmp_path, mode)
    assert proc.returncode == -sig
    crashes = fr.events(trace_dir, "crash")
    assert len(crashes) == 1 and crashes[0]["signal_name"] == sig.name, crashes
    return crashes[0]


def sealed_info(fr, trace_dir):
    """flightrec-dump info of a trace whose every segment was sealed."""
    doc = fr.dump_json("info", "--json", trace_dir)
    assert all(s["state"] == "sealed" for s in doc["segments"]), doc["segments"]
    return doc


def test_segv_is_recorded_and_still_kills(fr, trace_dir, tmp_path):
    c = crashed_once(fr, trace_dir, tmp_path, "segv", signal.SIGSEGV)
    doc = sealed_info(fr, trace_dir)
    assert c["fault_addr"] == 0
    names = frames_of(c)
    assert names[0] == "crash_here", names
    assert "crash_outer" in names and "crash_worker" in names, names
    threads = {t["tid"]: t["name"] for t in doc["threads"]}
    assert threads.get(c["tid"]) == "crasher"
    # info shows the crash with its symbolized stack, in JSON and in text.
    assert [f["function"] for f in doc["crashes"][0]["stack"][:3]] == ["crash_here", "crash_outer", "crash_worker"]
    text = fr.dump_run("info", trace_dir).stdout
    assert "crash: SIGSEGV" in text and "crash_here" in text


def test_abort_is_recorded_and_still_aborts(fr, trace_dir, tmp_path):
    c = crashed_once(fr, trace_dir, tmp_path, "abort", signal.SIGABRT)
    assert "crash_here" in frames_of(c)


def test_fpe_is_recorded(fr, trace_dir, tmp_path):
    crashed_once(fr, trace_dir, tmp_path, "fpe", signal.SIGFPE)


def test_stack_overflow_is_recorded_on_the_alternate_stack(fr, trace_dir, tmp_path):
    # No stack is left for a handler when a thread overflows its own: only the
    # alternate signal stack flightrec gives each thread lets it see the crash.
    c = crashed_once(fr, trace_dir, tmp_path, "overflow", signal.SIGSEGV)
    sealed_info(fr, trace_dir)
    names = frames_of(c)
    # The copied stack window holds the innermost frames: the recursion.
    assert names[0] == "overflow_stack", names[:5]
    assert names.count("overflow_stack") >= 5, names[:10]


def test_application_handler_still_runs(fr, trace_dir, tmp_path):
    """A handler installed after flightrec started runs (behind ours); it
    exits from inside the handler, so the crash was fatal: recorded."""
    proc = run_both(fr, trace_dir, tmp_path, "handled")
    assert proc.returncode == 3 and "handled SIGSEGV" in proc.stdout
    crashes = fr.events(trace_dir, "crash")
    assert len(crashes) == 1 and frames_of(crashes[0])[0] == "crash_here", crashes
    sealed_info(fr, trace_dir)


def test_handler_that_reraises_like_redis(fr, trace_dir, tmp_path):
    """SA_RESETHAND|SA_NODEFER handler that prints a report and kills the
    process with the same signal (redis-server's crash report does this)."""
    proc = run_both(fr, trace_dir, tmp_path, "reraise")
    assert proc.returncode == -signal.SIGSEGV and "crash report" in proc.stdout
    crashes = fr.events(trace_dir, "crash")
    assert len(crashes) == 1 and "crash_here" in frames_of(crashes[0]), [frames_of(c)[:4] for c in crashes]


@pytest.mark.slow
def test_faults_the_application_recovers_from_keep_it_running(fr, trace_dir, tmp_path):
    """1000 SIGSEGVs a handler recovers from (siglongjmp), as a JVM's implicit
    null checks do: the program goes on exactly as without us and its handler
    sees every fault; the first fault is recorded (before the handler runs,
    nobody can tell it will recover), the later ones go straight to it, and
    the trace is sealed and readable."""
    proc = run_both(fr, trace_dir, tmp_path, "recovers")
    assert proc.returncode == 0 and "no crash: 1001" in proc.stdout, proc.stdout
    crashes = fr.events(trace_dir, "crash")
    assert len(crashes) == 1 and "recover_many" in frames_of(crashes[0]), crashes
    # The handler left by siglongjmp and the program went on: recovered, not a
    # crash (seen when the next fault arrives from outside that handler).
    assert len(fr.events(trace_dir, "crash.recovered")) == 1
    doc = sealed_info(fr, trace_dir)
    assert [c["recovered"] for c in doc["crashes"]] == [True], doc["crashes"]


@pytest.mark.slow
def test_a_crash_after_siglongjmp_recoveries_is_recorded(fr, trace_dir, tmp_path):
    """After 1000 faults its handler left by siglongjmp, the same thread calls
    abort(): that crash is recorded too, with its own stack (the first fault
    is marked recovered; nothing takes the abort for one from inside the
    long-gone handler)."""
    proc = run_both(fr, trace_dir, tmp_path, "recovers-then-abort")
    assert proc.returncode == -signal.SIGABRT and "recovered 1000" in proc.stdout, (proc.returncode, proc.stdout)
    crashes = fr.events(trace_dir, "crash")
    assert [c["signal_name"] for c in crashes] == ["SIGSEGV", "SIGABRT"], crashes
    assert "crash_here" in frames_of(crashes[1]) and "recover_many" not in frames_of(crashes[1]), crashes[1]
    assert len(fr.events(trace_dir, "crash.recovered")) == 1


def test_application_handler_runs_on_the_threads_own_stack(fr, trace_dir, tmp_path):
    """Our handler runs on a 64 KiB alternate stack (to record stack
    overflows); a handler the application installed without SA_ONSTACK runs
    on the thread's own stack, as without us: this one puts 1 MiB there (as
    redis-server's memory test does), sees no alternate stack, and exits 3."""
    proc = run_both(fr, trace_dir, tmp_path, "bigstack")
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert "handler used 1024 KiB of stack, on an alternate stack: 0" in proc.stdout, proc.stdout
    crashes = fr.events(trace_dir, "crash")
    assert len(crashes) == 1 and "crash_here" in frames_of(crashes[0]), crashes


@pytest.mark.slow
def test_faults_whose_handler_returns_are_recovered_not_crashes(fr, trace_dir, tmp_path):
    """1000 faults whose handler fixes the page and returns (a JVM's handler
    returns too): the first is recorded before the handler runs, then marked
    crash.recovered when the handler returns; info lists no crash; the later
    faults go to the handler first and leave nothing; recording goes on."""
    proc = run_both(fr, trace_dir, tmp_path, "returns")
    assert proc.returncode == 0 and "no crash: 1001" in proc.stdout, proc.stdout
    assert len(fr.events(trace_dir, "crash")) == 1
    assert len(fr.events(trace_dir, "crash.recovered")) == 1
    doc = sealed_info(fr, trace_dir)
    assert [c["recovered"] for c in doc["crashes"]] == [True], doc["crashes"]
    assert "crash: SIGSEGV" not in fr.dump_run("info", trace_dir).stdout
    # Recording resumed after the seal: the thread's end is in a later segment.
    assert len(doc["segments"]) >= 2, doc["segments"]
    # Quietly: the output never failed, so no "usable again" warning (a JVM
    # would otherwise print one at every start).
    assert "flightrec" not in proc.stderr, proc.stderr


def test_crash_capture_can_be_turned_off(fr, trace_dir, tmp_path):
    proc = fr.run([fr.program("crash_test"), "segv"], trace_dir, env={"FLIGHTREC_CRASH": "0"}, check=False)
    assert proc.returncode == -signal.SIGSEGV
    # Without crash capture the process dies mid-segment: whatever was written
    # may be cut anywhere, so read leniently; there must be no crash event.
    dump = fr.dump_run("events", "--json", "--type", "crash", trace_dir, check=False)
    assert "Traceback" not in dump.stderr
    assert dump.stdout.strip() == ""
