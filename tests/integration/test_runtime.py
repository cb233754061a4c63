"""The runtime under real programs: threads by name, SIGKILL, fork without
exec, thread churn, bad settings, unusable output directories, memory bound."""
import json
import os

import pytest
import signal
import subprocess
import time


def info(fr, out):
    return fr.dump_json("info", "--json", out)


@pytest.mark.slow
def test_threads_show_up_by_name(fr, trace_dir):
    proc = fr.run([fr.program("threads_basic"), "6"], trace_dir)
    assert "6 threads done" in proc.stdout
    doc = info(fr, trace_dir)
    names = {t["name"] for t in doc["threads"]}
    for i in range(6):
        assert f"tb-worker-{i}" in names, names
    assert doc["events"]["process.start"] >= 1
    assert doc["events"]["thread.start"] >= 7  # main + 6 workers
    assert doc["events"]["thread.end"] >= 6
    # The start routine by name, though it is a static function (not in the
    # dynamic symbol table).
    routines = {e["start_routine"] for e in fr.events(trace_dir, "thread.start") if e["tid"] != e["pid"]}
    if os.environ.get("FLIGHTREC_PRELOAD_FIRST"):
        # Under a sanitizer's runtime every thread starts in its wrapper
        # (asan_thread_start): still a name, not an address.
        assert routines and not any(r.startswith("0x") for r in routines), routines
    else:
        assert routines == {"worker"}, routines
    segs = doc["segments"]
    assert segs and all(s["state"] == "sealed" for s in segs), segs
    # Files are private to the user.
    for path in fr.segments(trace_dir):
        assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(trace_dir).st_mode & 0o777 == 0o700


@pytest.mark.slow
@pytest.mark.parametrize("kill", [0, 1])
def test_threads_renamed_without_pthread_setname_np_show_their_new_names(fr, trace_dir, kill):
    """prctl(PR_SET_NAME) and a write to another thread's comm file leave no
    record: the flush thread looks at live threads' names once a second, at
    threads that record every time and at sleeping ones in turn, and at all
    of them on the final tick. kill=1: the process ends by SIGKILL, so the
    busy thread's new name must have been found while it ran. Off-CPU
    sampling is off: its samples at exit would make every sleeping thread
    one that records, and the final look at all of them would go untested."""
    env = {"FLIGHTREC_OFFCPU": "0"}
    if kill:
        # SIGKILL only once the trace on disk names the busy thread: on a
        # busy machine our nice +10 flush thread may take seconds to look.
        # What is checked is that it was found while the process lived.
        proc = subprocess.Popen([fr.program("thread_renames"), "30", "1"], env=fr.env(trace_dir, env),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "renamed\n"
            deadline = time.monotonic() + 120
            while not any(e["name"] == "prctl-busy" for e in fr.events(trace_dir, "thread.name")):
                assert time.monotonic() < deadline, "the busy thread's name never reached the trace"
                time.sleep(0.2)
            out, err = proc.communicate("go\n", timeout=60)
        finally:
            proc.kill()
            proc.wait()
        assert out == "done\n", err
    else:
        proc = fr.run([fr.program("thread_renames"), "30", "0"], trace_dir, check=False, env=env)
        assert proc.stdout == "done\n", proc.stderr
    names = {e["name"] for e in fr.events(trace_dir, "thread.name")}
    assert "prctl-busy" in names, names
    if not kill:
        assert "prctl-sleeper" in names, names
        assert {f"renamed-{i}" for i in range(30)} <= names, names


def test_sigkill_leaves_a_readable_trace(fr, trace_dir):
    env = fr.env(trace_dir)
    proc = subprocess.Popen([fr.program("threads_basic"), "3", "0", "120000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # An active process's blocks are written every 250 ms: killed once they
    # name its threads (polled: a sanitizer's start on a busy machine can
    # take seconds), what was written while it lived must read back.
    want = {"tb-worker-0", "tb-worker-1", "tb-worker-2"}

    def named():
        proc = fr.dump_run("info", "--json", trace_dir, check=False)  # no segment yet: exit 1
        return proc.returncode == 0 and want <= {t["name"] for t in json.loads(proc.stdout)["threads"]}
    fr.wait_until(named, "the workers' names")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    files = fr.segments(trace_dir)
    assert any(f.endswith(".active") for f in files), files
    doc = info(fr, trace_dir)
    assert doc["events"].get("process.start", 0) >= 1
    names = {t["name"] for t in doc["threads"]}
    assert {"tb-worker-0", "tb-worker-1", "tb-worker-2"} <= names, names
    assert all(s["state"] in ("active", "truncated") for s in doc["segments"])


@pytest.mark.slow
def test_a_raw_exit_loses_at_most_the_last_quarter_second(fr, trace_dir):
    # Go's runtime, SIGKILL and the OOM killer end a process without any exit
    # code: what the flush thread had not written yet is gone. It writes an
    # active process's blocks every 250 ms, so a 0.8 s run keeps most of its
    # ~79 samples. (Written once a second, such a run kept none.)
    proc = fr.run([fr.program("raw_exit"), "0.8"], trace_dir)
    assert proc.stdout == "burnt\n"
    files = fr.segments(trace_dir)
    assert files and all(f.endswith(".active") for f in files), files
    burn = [e for e in fr.events(trace_dir, "cpu.sample")
            if e["stack"] and e["stack"][0]["function"] == "raw_exit_burn"]
    assert len(burn) >= 25, len(burn)


@pytest.mark.slow
def test_fork_without_exec_gives_the_child_its_own_segments(fr, trace_dir):
    proc = fr.run([fr.program("threads_basic"), "2", "1"], trace_dir)
    child_pid = int(proc.stdout.split("child ")[1].split()[0])
    files = fr.segments(trace_dir)
    pids = {int(os.path.basename(f).split("-")[-2]) for f in files}
    assert child_pid in pids and len(pids) == 2, files
    child_files = [f for f in files if f"-{child_pid}-" in os.path.basename(f)]
    # The child left through _exit: its segment is still sealed and carries its threads.
    doc = fr.dump_json("info", "--json", *child_files)
    assert all(s["state"] == "sealed" for s in doc["segments"]), doc["segments"]
    child_doc_threads = {t["name"] for t in doc["threads"]}
    assert {"tb-worker-0", "tb-worker-1"} <= child_doc_threads


@pytest.mark.slow
@pytest.mark.parametrize("found", [True, False])
def test_a_path_search_seals_one_segment(fr, trace_dir, tmp_path, found):
    """Issue 29 item 18. dash searches PATH itself, one execve per directory;
    each of those that cannot succeed (no such file) used to seal a segment
    and start another: one per PATH entry. The shell leaves one sealed
    segment: the one sealed by the exec that succeeds or, when none does,
    at its exit."""
    misses = [str(tmp_path / f"nowhere-{i}") for i in range(6)]
    target = "true" if found else "no-such-program-r29"
    proc = fr.run(["/bin/sh", "-c", f"exec {target}"], trace_dir, check=False,
                  env={"PATH": ":".join(misses + ["/usr/bin", "/bin"])})
    assert proc.returncode == (0 if found else 127), proc.stderr
    names = [os.path.basename(f) for f in fr.segments(trace_dir)]
    shell = [n for n in names if n.split("-")[-3] == "sh"]
    print(f"exec {target} through {len(misses)} missing PATH entries: {names}")
    assert len(shell) == 1 and shell[0].endswith(".seg"), names
    doc = info(fr, trace_dir)
    assert all(s["state"] == "sealed" for s in doc["segments"]), doc["segments"]
    services = sorted(n.split("-")[-3] for n in names)
    assert services == (["sh", "true"] if found else ["sh"]), names


def test_relative_output_stays_where_the_process_started(fr, tmp_path):
    # A daemon's way: chdir("/") and fork. The trace of both processes stays
    # in the directory FLIGHTREC_OUTPUT named from where the process started.
    script = ("import os\n"
              "os.chdir('/')\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    sum(range(100000)); os._exit(0)\n"
              "os.waitpid(pid, 0)\n")
    fr.run(["/usr/bin/python3", "-c", script], "traces", cwd=tmp_path)
    files = fr.segments(tmp_path / "traces")
    assert len({os.path.basename(f).split("-")[-2] for f in files}) == 2, files
    assert not os.path.exists("/traces")


@pytest.mark.slow
def test_thread_churn_is_counted_and_bounded(fr, trace_dir):
    fr.run([fr.program("threads_basic"), "2000"], trace_dir, env={"FLIGHTREC_RING_BYTES": 4096})
    doc = info(fr, trace_dir)
    starts = doc["events"].get("thread.start", 0)
    ends = doc["events"].get("thread.end", 0)
    dropped = doc["dropped"]
    dropped_total = sum(dropped.values()) if isinstance(dropped, dict) else dropped
    # Every one of the 2,000 workers (and main) is either recorded or counted as dropped.
    assert starts + dropped_total >= 2001, (starts, dropped)
    assert ends + dropped_total >= 2000, (ends, dropped)
    # (Memory is bounded by test_thousand_live_threads_memory_bound, which reads
    # VmRSS: ru_maxrss is inherited across exec from the launching process.)


def test_bad_value_keeps_default_and_program_runs(fr, trace_dir):
    proc = fr.run([fr.program("threads_basic"), "2"], trace_dir,
                  env={"FLIGHTREC_FLUSH_MS": "abc", "FLIGHTREC_NOT_A_KNOB": "1"})
    assert "2 threads done" in proc.stdout
    assert "flightrec: FLIGHTREC_FLUSH_MS='abc' is not a number; using 50" in proc.stderr
    assert "FLIGHTREC_NOT_A_KNOB" in proc.stderr
    assert info(fr, trace_dir)["events"]["thread.start"] >= 3


def test_unwritable_output_leaves_the_program_unharmed(fr, tmp_path):
    plain = fr.run([fr.program("threads_basic"), "3"], tmp_path, preload=False)
    bad = tmp_path / "not-a-dir"
    bad.write_text("a file where the directory should be")
    proc = fr.run([fr.program("threads_basic"), "3"], bad)
    assert proc.stdout == plain.stdout
    lines = [line for line in proc.stderr.splitlines() if line.startswith("flightrec:")]
    assert len(lines) == 1 and "not a directory" in lines[0], proc.stderr


def test_enable_zero_records_nothing(fr, trace_dir):
    fr.run([fr.program("threads_basic"), "2"], trace_dir, env={"FLIGHTREC_ENABLE": "0"})
    assert fr.segments(trace_dir) == []


@pytest.mark.slow
def test_thousand_live_threads_memory_bound(fr, trace_dir):
    if fr.sanitized:
        pytest.skip("memory bound is for the production build (ASan's shadow memory dominates)")
    plain = fr.run([fr.program("threads_basic"), "1000", "0", "0", "1"], trace_dir, preload=False)
    traced = fr.run([fr.program("threads_basic"), "1000", "0", "0", "1"], trace_dir)
    rss = lambda p: int(p.stdout.split("rss_kb ")[1].split()[0])
    grown_kb = rss(traced) - rss(plain)
    print(f"1000 live threads: plain {rss(plain)} KiB, preloaded {rss(traced)} KiB, +{grown_kb} KiB")
    assert grown_kb < 100 * 1024
    names = {t["name"] for t in info(fr, trace_dir)["threads"]}
    assert "tb-worker-999" in names


def test_a_pool_of_threads_that_allocate_does_not_pay_the_fast_unwinders_cache(fr, trace_dir):
    """400 threads each malloc and free 4 MiB (about 8 allocation samples
    each, at the default rate), then stay alive. libunwind's fast path keeps
    a 256 KiB frame cache per thread that unwinds: a thread that samples this
    rarely uses libgcc's unwinder instead (preload/stacks/local_stack.h), so the
    pool costs the recorder its usual per-thread state, not 100 MiB."""
    if fr.sanitized:
        pytest.skip("memory bound is for the production build (ASan's shadow memory dominates)")
    args = [fr.program("threads_basic"), "400", "0", "0", "1", "4096"]
    plain = fr.run(args, trace_dir, preload=False)
    traced = fr.run(args, trace_dir)
    rss = lambda p: int(p.stdout.split("rss_kb ")[1].split()[0])
    grown_kb = rss(traced) - rss(plain)
    print(f"400 allocating threads: plain {rss(plain)} KiB, preloaded {rss(traced)} KiB, +{grown_kb} KiB")
    samples = [e for e in fr.events(trace_dir, "alloc.sample") if e.get("size") == 1024]
    assert len(samples) >= 400, len(samples)  # the threads did take samples
    # Their stacks are whole: the worker's frame is under each malloc.
    assert all(any("worker" in f["function"] for f in s["stack"]) for s in samples[:50]), samples[0]
    assert grown_kb < 400 * 128, grown_kb  # 256 KiB each would be 100 MiB


def test_service_is_the_name_the_program_was_started_by(fr, trace_dir, tmp_path):
    # Debian's /usr/bin/redis-server is a symlink to redis-check-rdb: the
    # service must be what the user ran, not what the link resolves to.
    link = tmp_path / "my-service"
    os.symlink(fr.program("crash_test"), link)
    fr.run([str(link), "none"], trace_dir)
    starts = fr.events(trace_dir, "process.start")
    assert [s["service"] for s in starts] == ["my-service"], starts
    assert starts[0]["exe"] == fr.program("crash_test")


def test_libcurl_is_not_loaded_unless_s3_is_configured(fr, trace_dir):
    # libcurl and libcrypto (and libcurl's ~30 dependencies) are dlopen'ed by
    # the uploader only when FLIGHTREC_S3_BUCKET is set (uploader/upload_libs.h):
    # every other process started under the preload does not pay their
    # dynamic linking. (test_s3_upload.py uploads through the loaded ones.)
    maps = fr.run(["cat", "/proc/self/maps"], trace_dir).stdout
    assert "libflightrec" in maps
    for lib in ("libcurl", "libcrypto", "libgnutls", "libkrb5", "libldap"):
        assert lib not in maps, lib


def test_a_program_without_libm_does_not_get_it_from_the_preload(fr, trace_dir):
    # The allocation sampler's -log(u) and 1 - e^(-x) are our own
    # (preload/alloc/sample_math.h): cat links no libm, and the preload must
    # not bring it (8-10 page faults and its relocations in every short-lived
    # process). Under a sanitizer its runtime brings libm itself.
    if fr.sanitized:
        pytest.skip("the sanitizer runtime links libm")
    maps = fr.run(["cat", "/proc/self/maps"], trace_dir).stdout
    assert "libflightrec" in maps
    assert "/libm.so" not in maps and "/libm-" not in maps, maps


def _recorder_wakeups(pid):
    """Voluntary context switches of flightrec's threads in process pid."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if not f.read().startswith("flightrec"):
                    continue
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


@pytest.mark.slow
def test_an_idle_process_wakes_the_recorder_rarely_and_its_trace_still_advances(fr, trace_dir):
    # A process that does nothing: the recorder's threads back off to about
    # one wake-up a second each (they woke 40 times a second before the idle
    # backoff), and the trace still gets its process.rusage every second.
    proc = subprocess.Popen(["sleep", "4"], env=fr.env(trace_dir))
    try:
        time.sleep(1.0)
        before = _recorder_wakeups(proc.pid)
        time.sleep(2.5)
        woke = _recorder_wakeups(proc.pid) - before
    finally:
        proc.wait(timeout=30)
    assert woke < 25, woke  # 100 at 40 a second; about 6 with the backoff
    doc = info(fr, trace_dir)
    assert doc["events"].get("process.rusage", 0) >= 4, doc["events"]
