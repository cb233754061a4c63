"""Crash capture: the host's exit status is unchanged, and the trace ends
with a sealed segment holding the crash and its symbolized stack."""
import signal


def crash_events(fr, out):
    return fr.events(out, "crash")


def frames_of(event):
    return [f.get("function", "") for f in event["stack"]]


def run_both(fr, trace_dir, tmp_path, mode):
    plain = fr.run([fr.program("crash_test"), mode], tmp_path / "plain", preload=False, check=False)
    traced = fr.run([fr.program("crash_test"), mode], trace_dir, check=False)
    assert traced.returncode == plain.returncode, (plain.returncode, traced.returncode, traced.stderr)
    assert traced.stdout == plain.stdout
    return traced


def test_segv_is_recorded_and_still_kills(fr, trace_dir, tmp_path):
    proc = run_both(fr, trace_dir, tmp_path, "segv")
    assert proc.returncode == -signal.SIGSEGV
    doc = fr.dump_json("info", "--json", trace_dir)
    assert all(s["state"] == "sealed" for s in doc["segments"]), doc["segments"]
    crashes = crash_events(fr, trace_dir)
    assert len(crashes) == 1
    c = crashes[0]
    assert c["signal_name"] == "SIGSEGV" and c["fault_addr"] == 0
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
    proc = run_both(fr, trace_dir, tmp_path, "abort")
    assert proc.returncode == -signal.SIGABRT
    crashes = crash_events(fr, trace_dir)
    assert len(crashes) == 1 and crashes[0]["signal_name"] == "SIGABRT"
    assert "crash_here" in frames_of(crashes[0])


def test_fpe_is_recorded(fr, trace_dir, tmp_path):
    proc = run_both(fr, trace_dir, tmp_path, "fpe")
    assert proc.returncode == -signal.SIGFPE
    crashes = crash_events(fr, trace_dir)
    assert len(crashes) == 1 and crashes[0]["signal_name"] == "SIGFPE"


def test_stack_overflow_is_recorded_on_the_alternate_stack(fr, trace_dir, tmp_path):
    # No stack is left for a handler when a thread overflows its own: only the
    # alternate signal stack flightrec gives each thread lets it see the crash.
    proc = run_both(fr, trace_dir, tmp_path, "overflow")
    assert proc.returncode == -signal.SIGSEGV
    doc = fr.dump_json("info", "--json", trace_dir)
    assert all(s["state"] == "sealed" for s in doc["segments"]), doc["segments"]
    crashes = crash_events(fr, trace_dir)
    assert len(crashes) == 1 and crashes[0]["signal_name"] == "SIGSEGV"
    names = frames_of(crashes[0])
    # The copied stack window holds the innermost frames: the recursion.
    assert names[0] == "overflow_stack", names[:5]
    assert names.count("overflow_stack") >= 5, names[:10]


def test_application_handler_still_runs(fr, trace_dir, tmp_path):
    proc = run_both(fr, trace_dir, tmp_path, "handled")
    assert proc.returncode == 3 and "handled SIGSEGV" in proc.stdout


def test_crash_capture_can_be_turned_off(fr, trace_dir, tmp_path):
    proc = fr.run([fr.program("crash_test"), "segv"], trace_dir, env={"FLIGHTREC_CRASH": "0"}, check=False)
    assert proc.returncode == -signal.SIGSEGV
    # Without crash capture the process dies mid-segment: whatever was written
    # may be cut anywhere, so read leniently; there must be no crash event.
    dump = fr.dump_run("events", "--json", "--type", "crash", trace_dir, check=False)
    assert "Traceback" not in dump.stderr
    assert dump.stdout.strip() == ""
