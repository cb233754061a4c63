"""Transparency: programs no one here wrote (bash, make + gcc, Python) run
under the preload with every feature on and a small allocation sampling
rate, and behave exactly as without it; every process in those trees leaves
its own readable segments."""
import os
import shutil
import subprocess
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "..", "transparency")
ALL_ON = {"FLIGHTREC_ALLOC_SAMPLE_BYTES": 4096, "FLIGHTREC_LOG": "warn"}


def compare(fr, cmd, trace_dir, tmp_path, cwd=None, timeout=180):
    plain = fr.run(cmd, tmp_path / "plain-out", preload=False, check=False, cwd=cwd, timeout=timeout)
    traced = fr.run(cmd, trace_dir, env=ALL_ON, check=False, cwd=cwd, timeout=timeout)
    assert traced.returncode == plain.returncode, traced.stderr
    assert traced.stdout == plain.stdout
    assert traced.stderr == plain.stderr, traced.stderr
    return traced


def check_segments(fr, trace_dir, min_processes):
    files = fr.segments(trace_dir)
    pids = {os.path.basename(f).split("-")[-2] for f in files}
    assert len(pids) >= min_processes, (len(pids), files[:5])
    doc = fr.dump_json("info", "--json", trace_dir)
    assert not any(s.get("bad_blocks") for s in doc["segments"]), doc["segments"]
    assert all(s["state"] == "sealed" for s in doc["segments"]), [s for s in doc["segments"]
                                                                  if s["state"] != "sealed"][:3]
    assert doc["events"].get("process.start", 0) >= len(pids)
    return doc


def test_bash_pipelines_subshells_traps(fr, trace_dir, tmp_path):
    proc = compare(fr, ["/bin/bash", os.path.join(WORK, "pipeline.sh")], trace_dir, tmp_path)
    assert proc.returncode == 5 and "trap EXIT ran" in proc.stdout
    # bash, seq, awk, sort, tr, subshells, printf, wc: each its own process.
    check_segments(fr, trace_dir, min_processes=6)


@pytest.mark.slow
def test_make_j2_builds_a_c_project(fr, trace_dir, tmp_path):
    results = []
    for name, preload in (("plain", False), ("traced", True)):
        src = tmp_path / name
        shutil.copytree(os.path.join(WORK, "cproject"), src)
        out = trace_dir if preload else tmp_path / "plain-out"
        env = ALL_ON if preload else None
        build = fr.run(["make", "-j2"], out, env=env, preload=preload, cwd=src, timeout=300, check=False)
        assert build.returncode == 0, build.stderr
        run = subprocess.run([str(src / "app")], capture_output=True, text=True)
        results.append((run.returncode, run.stdout))
    assert results[0] == results[1]
    # make, sh, gcc, cc1, as, collect2, ld ... for 7 translation units.
    check_segments(fr, trace_dir, min_processes=15)


@pytest.mark.slow
def test_python_threads_asyncio_subprocess_signals(fr, trace_dir, tmp_path):
    proc = compare(fr, ["/usr/bin/python3", os.path.join(WORK, "workload.py")], trace_dir, tmp_path)
    assert "pong:ping True 7 sub err 499500" in proc.stdout
    doc = check_segments(fr, trace_dir, min_processes=3)
    assert doc["events"].get("thread.start", 0) >= 5


STDIO_PROBE = r"""
import errno, os
for fd in (0, 2):
    try:
        os.fstat(fd)
        print("fd%d open" % fd)
    except OSError as e:
        print("fd%d %s" % (fd, errno.errorcode[e.errno]))
print("opens", os.open("/dev/null", os.O_RDONLY), os.open("/dev/null", os.O_RDONLY))
"""


def test_a_program_started_with_stdin_and_stderr_closed_finds_them_free(fr, trace_dir, tmp_path):
    """posix_spawn's POSIX_SPAWN_CLOSE and daemons start programs with standard
    streams closed. The recorder's descriptors (libunwind's pipes, the segment,
    the output directory, the sampler's) must not take those numbers: the
    program's fstat(0) fails as without us and its first opens get 0 and 2."""
    close_stdin_stderr = lambda: (os.close(0), os.close(2))
    cmd = ["/usr/bin/python3", "-c", STDIO_PROBE]
    plain = fr.run(cmd, tmp_path / "plain-out", preload=False, preexec_fn=close_stdin_stderr)
    traced = fr.run(cmd, trace_dir, env=ALL_ON, preexec_fn=close_stdin_stderr)
    assert plain.stdout == "fd0 EBADF\nfd2 EBADF\nopens 0 2\n"
    assert traced.stdout == plain.stdout
    doc = fr.dump_json("info", "--json", trace_dir)
    assert [s["state"] for s in doc["segments"]] == ["sealed"]


def test_low_numbers_stay_the_programs_own(fr, trace_dir, tmp_path):
    """A program's first file gets 3, and files it puts on low numbers with
    dup2 (a shell's `exec 3<in 4>out ...`) are left alone while every
    allocation is unwound in place. The recorder's descriptors sit high
    (format/own_fds.h): before, libunwind's address-check pipe held 5 and 6,
    and once the program had put its own files there, libunwind wrote a byte
    into out.6 and read one out of in.5; the segment's number was taken over
    too, which paused recording."""
    cmd = lambda d: [fr.program("fd_numbers"), str(d)]
    (tmp_path / "plain").mkdir()
    (tmp_path / "traced").mkdir()
    plain = fr.run(cmd(tmp_path / "plain"), tmp_path / "plain-out", preload=False)
    traced = fr.run(cmd(tmp_path / "traced"), trace_dir, check=False,
                    env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": 1, "FLIGHTREC_LOG": "warn"})
    assert plain.stdout.startswith("first 3\n") and "in 5: line 5\n" in plain.stdout
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout
    assert traced.stderr == "", traced.stderr
    doc = fr.dump_json("info", "--json", trace_dir)
    assert [s["state"] for s in doc["segments"]] == ["sealed"]
    assert doc["events"].get("alloc.sample", 0) > 1000
