"""Short-lived processes (issue #28): a process that lives a few
milliseconds gets no sampler thread until its recorder goes live (its first
flush tick), and its one segment is sealed by its exiting thread; a shell's
forked child that execs at once opens no segment of its own; what happened
before going live (CPU samples, a crash) is still in the trace."""
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz"))
import dump_corruption as dc  # noqa: E402  (the block walker, independent of the reader)

# The first tick (going live) waits FLIGHTREC_FLUSH_MS: at its largest, so
# nothing here depends on how fast the machine starts a process.
NOT_YET_LIVE = {"FLIGHTREC_FLUSH_MS": 10000}


def skip_under_a_sanitizer(fr, why):
    if fr.sanitized:
        pytest.skip(why)


def pid_of(path):
    return int(os.path.basename(path).split("-")[-2])


def test_a_shell_fork_before_exec_leaves_no_segment(fr, trace_dir):
    """bash forks a child per command, and the child execs the program: one
    segment per program image (the shell's and each /bin/true's), none for
    the forked shells in between (there used to be one each)."""
    skip_under_a_sanitizer(fr, "bash with a sanitizer runtime preloaded dies in its forked children")
    fr.run(["/bin/bash", "-c", "for i in 1 2 3; do /bin/true; done; :"], trace_dir, env=NOT_YET_LIVE)
    files = fr.segments(trace_dir)
    starts = fr.events(trace_dir, "process.start")
    exes = sorted(os.path.basename(s["exe"]) for s in starts)
    assert exes == ["bash", "true", "true", "true"], (exes, files)
    assert len(files) == 4 and all(f.endswith(".seg") for f in files), files
    assert len({pid_of(f) for f in files}) == 4, files


def test_a_short_lived_segment_defines_only_the_types_it_holds(fr, trace_dir):
    """A segment defines the event types it has events of, not all ~50 the
    recorder knows: /bin/true's segment is its process.start,
    process.rusage and thread.start (it was 1.2 KiB, most of it the other
    types' definitions). Its blocks are all small enough to be stored
    plain, so the process never builds zstd's context (issue #39)."""
    fr.run(["/bin/true"], trace_dir, env=NOT_YET_LIVE)
    files = fr.segments(trace_dir)
    assert len(files) == 1 and files[0].endswith(".seg"), files
    data = open(files[0], "rb").read()
    blocks, names, _, events = dc.events_by_block(data)
    with_events = {names[tid] for tid, count in events.values() if count}
    assert {"process.start", "thread.start"} <= with_events, with_events
    assert set(names.values()) == with_events, (sorted(names.values()), sorted(with_events))
    # The same types, read by the dump tool: each listed with its events.
    listed = {t["name"]: t["events"] for t in fr.dump_json("schema", "--json", files[0])}
    assert set(listed) == with_events and all(listed.values()), listed
    assert all(b.flags == 0 for b in blocks), [(b.kind, b.flags, b.payload_len) for b in blocks]


def test_a_forked_child_that_lives_on_keeps_its_segment(fr, trace_dir):
    """Only an exec before going live drops the child's segment: a child
    that exits (a subshell) is a process of its own and keeps it."""
    skip_under_a_sanitizer(fr, "bash with a sanitizer runtime preloaded dies in its forked children")
    fr.run(["/bin/bash", "-c", "(/bin/true; exit 0); :"], trace_dir, env=NOT_YET_LIVE)
    exes = sorted(os.path.basename(s["exe"]) for s in fr.events(trace_dir, "process.start"))
    # The shell, its subshell (forked, exits without exec) and /bin/true
    # (the subshell's last command, exec'd in place or forked then exec'd).
    assert exes.count("bash") == 2 and exes.count("true") == 1, exes
    # The subshell's exe, command line and service are read by its own flush
    # thread when its segment opens, not in the fork handler; its pid and
    # parent are the fork's.
    bashes = sorted((s for s in fr.events(trace_dir, "process.start") if s["exe"].endswith("/bash")),
                    key=lambda s: s["time"])
    shell, subshell = bashes
    assert subshell["ppid"] == shell["pid"] and subshell["pid"] != shell["pid"], bashes
    assert subshell["cmdline"] == shell["cmdline"] and "(/bin/true; exit 0)" in shell["cmdline"], bashes
    assert subshell["service"] == shell["service"] == "bash" and subshell["hostname"] == shell["hostname"], bashes


def test_before_going_live_there_is_no_sampler_thread(fr, trace_dir):
    proc = fr.run([fr.program("short_lived")], trace_dir, env=NOT_YET_LIVE)
    threads, files = proc.stdout.splitlines()
    # The flush thread (it may not have named itself yet) and main; the
    # sampler's thread used to be a third. (TSan runs a thread of its own.)
    assert "flightrec-sampl" not in threads, proc.stdout
    assert fr.sanitized or len(threads.split(",")) == 2, proc.stdout
    # An image started by exec holds its segment from the start (so a program
    # that uses up every descriptor cannot leave it without one).
    assert files == "files:1", proc.stdout
    # At exit the process's one segment is written and sealed all the same.
    doc = fr.dump_json("info", "--json", trace_dir)
    assert [s["state"] for s in doc["segments"]] == ["sealed"], doc["segments"]
    assert doc["events"]["process.start"] == 1 and doc["events"]["thread.start"] >= 1, doc["events"]


def test_cpu_samples_taken_before_going_live_are_kept(fr, trace_dir):
    """The SIGPROF timers run from the first instruction and their samples
    wait in the thread's ring, which holds only a few (up to 16 KiB of stack
    each): one a quarter full makes the recorder go live at once, and the
    sampler's thread drains it. None is lost (a 10 s wait for the first tick
    lost 18 of about 30)."""
    skip_under_a_sanitizer(fr, "SIGPROF sampling is not used under a sanitizer runtime (sampler.cc)")
    proc = fr.run([fr.program("short_lived"), "300"], trace_dir, env=NOT_YET_LIVE)
    assert "flightrec-sampl" not in proc.stdout, proc.stdout
    burn = [e for e in fr.events(trace_dir, "cpu.sample")
            if any(f.get("function") == "short_burn" for f in e["stack"])]
    # 300 ms of CPU at 99 Hz is about 30 samples.
    assert len(burn) >= 10, len(burn)
    doc = fr.dump_json("info", "--json", trace_dir)
    assert not doc["dropped"], doc["dropped"]


def test_a_crash_before_going_live_is_recorded(fr, trace_dir, tmp_path):
    plain = fr.run([fr.program("crash_test"), "segv"], tmp_path / "plain", preload=False, check=False)
    traced = fr.run([fr.program("crash_test"), "segv"], trace_dir, env=NOT_YET_LIVE, check=False)
    assert traced.returncode == plain.returncode == -signal.SIGSEGV, traced.stderr
    crashes = fr.events(trace_dir, "crash")
    assert len(crashes) == 1 and crashes[0]["stack"][0]["function"] == "crash_here", crashes
    doc = fr.dump_json("info", "--json", trace_dir)
    assert [s["state"] for s in doc["segments"]] == ["sealed"], doc["segments"]
