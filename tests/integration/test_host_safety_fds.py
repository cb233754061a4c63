"""What a program sees of the recorder's descriptors, and what libunwind's
address checks do to the program's files (issue #34, libunwind's validation
pipes; issue #29, item 20).

Each test runs a program of ours plain and under the preload. Before the fix:
 * fd_visible listed seven descriptors of ours at every point (libunwind's
   two pipes, the sampler's epoll set and eventfd, the segment), then only
   the segment, now none (the segment is open only while a block is
   written: test_fds_invisible.py holds the strict version);
 * fd_numbers high, which puts its own files on the numbers under the fd
   limit where the recorder keeps its descriptors, exited 1 (libunwind kept
   reading from and writing memory bytes into the program's files there).
"""
import re
import pytest

ALLOC_EVERY = {"FLIGHTREC_ALLOC_SAMPLE_BYTES": "1"}

# Files a recorder thread only reads may be caught between their open and
# close (/proc files; ELF and debug files while libdw maps them), and the
# output directory, opened per use.
TRANSIENT = ("/proc/", "/usr/", "/lib", "/work/")


def by_phase(stdout):
    phases = {}
    for line in stdout.splitlines():
        phase, fd, target = line.split(" ", 2)
        # Pipes' inode numbers differ from run to run (the test's stdout).
        phases.setdefault(phase, {})[int(fd)] = re.sub(r"^pipe:\[\d+\]$", "pipe", target)
    return phases


@pytest.mark.slow
def test_no_descriptor_of_ours_is_visible(fr, trace_dir, tmp_path):
    """At start, with threads allocating (every allocation unwound in place,
    libunwind's address checks included) and sampled, after they joined,
    after an idle spell and in a forked child, the program sees the
    descriptors it sees without the recorder, and at most what a recorder
    thread holds for a moment: a file it reads, the segment while a block
    is written."""
    cmd = [fr.program("fd_visible")]
    plain = fr.run(cmd, tmp_path / "plain-out", preload=False)
    traced = fr.run(cmd, trace_dir, env=ALLOC_EVERY)
    before, after = by_phase(plain.stdout), by_phase(traced.stdout)
    assert sorted(after) == sorted(before) == ["child", "idle", "joined", "start", "threads"]
    for phase, fds in after.items():
        extra = {fd: t for fd, t in fds.items() if before[phase].get(fd) != t}
        segments = [t for t in extra.values() if t.startswith(str(trace_dir)) and t.endswith(".active")]
        passing = [t for t in extra.values()
                   if t not in segments and (t.startswith(TRANSIENT) or t == str(trace_dir))]
        assert len(segments) <= 1 and len(segments) + len(passing) == len(extra), (phase, extra)
        assert not [t for t in extra.values() if re.match(r"pipe|anon_inode:", t)], (phase, extra)
    # The address checks answered without a pipe, and answered right: the
    # in-place stacks reach the program's own frames.
    if fr.sanitized:
        return  # ASan's allocator is its own: our malloc hooks never run there
    samples = fr.events(trace_dir, "alloc.sample")
    deep = [s for s in samples if any(f["function"] == "work" for f in s.get("stack") or [])]
    assert len(samples) > 1000 and len(deep) > 0.9 * len(samples), (len(samples), len(deep))


def test_files_on_the_recorders_numbers_stay_untouched(fr, trace_dir, tmp_path):
    """The program dup2s its own files onto the 64 numbers under the fd limit,
    where the recorder keeps its descriptors, then allocates on two threads
    with every allocation unwound in place. Its files read and stat as
    without the recorder: nothing of ours reads from or writes into them
    (libunwind's address checks used a pipe there, and wrote into the
    program's file once it took the number)."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "traced").mkdir()
    cmd = lambda d: [fr.program("fd_numbers"), str(d), "high"]
    plain = fr.run(cmd(tmp_path / "plain"), tmp_path / "plain-out", preload=False)
    traced = fr.run(cmd(tmp_path / "traced"), trace_dir, check=False, env=ALLOC_EVERY)
    assert traced.returncode == plain.returncode == 0, traced.stderr
    assert plain.stdout.count("\nin ") == 32 and plain.stdout.count("\nout ") == 32
    assert traced.stdout == plain.stdout
