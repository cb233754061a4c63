"""Host safety under the limits a program may run with (issue #38, items 3,
4, 6 and 11): the recorder never ends a program differently than it ends
plain. Each test runs a program of ours plain and under the preload and
compares how it ended.

Before the fixes:
 * RLIMIT_FSIZE (item 3): `ulimit -f 0` or `-f 1` and /bin/echo died of
   SIGXFSZ (exit 153, nothing printed) at our first segment write on its
   thread; a program that lowered its limit died at its exit, at our seal;
 * exec (item 4): execl from a thread with a 16 or 24 KiB stack died of
   SIGSEGV (a 32 KiB argument array in the hook, then the seal on the
   thread's stack), and execl/execlp/execle dropped every argument past
   the 4095th (execle then read an argument as its environment);
 * seccomp (item 6): a program whose filter kills on process_vm_readv died
   of SIGSYS (exit 159) at our address checks on its own threads;
 * RLIMIT_NPROC (item 11): our threads took the program's allowance, so its
   own pthread_create failed sooner.
"""
import os
import resource
import shutil
import subprocess

import pytest


def flightrec_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("flightrec:")]


def run(cmd, env, preexec_fn=None, timeout=120):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec_fn)


# ---------------------------------------------------------------- item 3

def fsize_limit(n_bytes):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, resource.RLIM_INFINITY))
    return apply


@pytest.mark.parametrize("blocks", [0, 1])
@pytest.mark.parametrize("program", ["echo", "fsize_work"])
def test_file_size_limit_at_start(fr, trace_dir, tmp_path, blocks, program):
    """`ulimit -f 0` and `ulimit -f 1` (1 KiB): the program prints and exits
    as it does plain; the recorder stays off with one line, and leaves no
    file behind (an empty .active segment was one of its leftovers)."""
    cmd = ["/bin/echo", "hi"] if program == "echo" else [fr.program("fsize_work"), "0.5"]
    limit = fsize_limit(blocks * 1024)
    plain = run(cmd, fr.env(tmp_path / "plain", preload=False), limit)
    traced = run(cmd, fr.env(trace_dir), limit)
    assert plain.returncode == 0, plain
    assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout), traced
    lines = flightrec_lines(traced.stderr)
    assert len(lines) == 1 and "RLIMIT_FSIZE" in lines[0], traced.stderr
    assert fr.segments(trace_dir) == []


@pytest.mark.parametrize("after", [None, "1"])
def test_file_size_limit_lowered_by_the_program(fr, trace_dir, tmp_path, after):
    """The program records, then lowers its limit under what our segment
    holds and exits at once (the last block is written by its exiting
    thread), or works on (the flush thread meets the limit): it ends as it
    does plain, and the recorder says so in one line."""
    cmd = [fr.program("fsize_work"), "0.6", "100"] + ([after] if after else [])
    plain = run(cmd, fr.env(tmp_path / "plain", preload=False))
    traced = run(cmd, fr.env(trace_dir))
    assert (plain.returncode, plain.stdout) == (0, "done\n"), plain
    assert (traced.returncode, traced.stdout) == (0, "done\n"), traced
    lines = flightrec_lines(traced.stderr)
    assert len(lines) == 1 and "RLIMIT_FSIZE" in lines[0] and "paused" in lines[0], traced.stderr
    # What was written before the limit came down stays readable (the cut
    # file holds whole blocks only); a segment with no event in it is removed.
    if fr.segments(trace_dir):
        fr.dump_run("info", trace_dir)


def test_file_size_limit_above_the_minimum_keeps_recording(fr, trace_dir):
    """A limit the recorder can live with (8 MiB): segments rotate under it
    and the program is recorded as usual."""
    proc = run([fr.program("fsize_work"), "1"], fr.env(trace_dir, {"FLIGHTREC_SEGMENT_BYTES": 64 << 20}),
               fsize_limit(8 << 20))
    assert (proc.returncode, proc.stdout) == (0, "done\n"), proc
    assert flightrec_lines(proc.stderr) == []
    assert all(os.path.getsize(p) <= 4 << 20 for p in fr.segments(trace_dir))
    assert fr.events(trace_dir, "cpu.sample")


# ---------------------------------------------------------------- item 4

@pytest.mark.parametrize("stack_kib", [16, 24, 40])
def test_execl_from_a_thread_with_a_small_stack(fr, trace_dir, tmp_path, stack_kib):
    """A thread with a 16 KiB stack (PTHREAD_STACK_MIN), 24 or 40 KiB calls
    execl: the new image runs, as it does plain; the old one's segment is
    sealed."""
    cmd = [fr.program("exec_args"), "thread", str(stack_kib * 1024)]
    plain = run(cmd, fr.env(tmp_path / "plain", preload=False))
    traced = run(cmd, fr.env(trace_dir))
    assert (plain.returncode, plain.stdout) == (0, "small-stack\n"), plain
    assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout), traced
    sealed = [p for p in fr.segments(trace_dir) if "exec_args" in p]
    assert sealed and all(p.endswith(".seg") for p in sealed), fr.segments(trace_dir)


@pytest.mark.parametrize("call", ["execl", "execlp", "execle"])
def test_execl_family_keeps_every_argument(fr, trace_dir, tmp_path, call):
    """10,000 arguments through execl, execlp and execle (with its own
    environment): the shell gets all of them, and execle's environment."""
    cmd = [fr.program("exec_args"), call]
    plain = run(cmd, fr.env(tmp_path / "plain", preload=False))
    traced = run(cmd, fr.env(trace_dir))
    expected = "10000 bar\n" if call == "execle" else "10000 unset\n"
    assert (plain.returncode, plain.stdout) == (0, expected), plain
    assert (traced.returncode, traced.stdout) == (0, expected), traced


# ---------------------------------------------------------------- item 11

NOBODY = 65534


@pytest.fixture
def nobody_dir():
    """A directory uid 65534 can reach and record into (its parent root's,
    0755; itself 65534's, 0700)."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("prlimit"):
        pytest.skip("needs root, setpriv and prlimit to run a program as another user")
    import tempfile
    top = tempfile.mkdtemp(prefix="fr-nproc-", dir="/tmp")
    os.chmod(top, 0o755)
    out = os.path.join(top, "trace")
    os.mkdir(out, 0o700)
    os.chown(out, NOBODY, NOBODY)
    yield out
    shutil.rmtree(top, ignore_errors=True)


def as_nobody_under_nproc(fr, nproc, args, out, preload):
    """The program as uid 65534 (root is exempt from RLIMIT_NPROC) under
    `prlimit --nproc=N`; the preload only in the program itself."""
    env = fr.env(out, preload=False)
    inner = ["env", f"LD_PRELOAD={fr.preload}"] if preload else []
    cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
           "prlimit", f"--nproc={nproc}"] + inner + [fr.program("nproc_threads")] + args
    return run(cmd, env, timeout=120)


@pytest.mark.parametrize("nproc", [4, 8])
def test_nproc_limit_leaves_the_program_its_threads(fr, nobody_dir, nproc):
    """Under `prlimit --nproc=4` (or 8) the program creates as many threads
    with the preload as without (before: two fewer, our flush and sampler
    threads took them); the recorder stays off with one line."""
    plain = as_nobody_under_nproc(fr, nproc, ["20"], nobody_dir, preload=False)
    traced = as_nobody_under_nproc(fr, nproc, ["20"], nobody_dir, preload=True)
    assert 0 < plain.returncode < 20, plain
    assert traced.returncode == plain.returncode, (plain, traced)
    lines = flightrec_lines(traced.stderr)
    assert len(lines) == 1 and "RLIMIT_NPROC" in lines[0], traced.stderr
    assert fr.segments(nobody_dir) == []


def test_nproc_limit_lowered_by_the_program(fr, nobody_dir):
    """The program starts under a limit we can live with (80), lowers its soft
    limit to 4, waits until it is its only thread, and creates threads: the
    recorder's threads have left (one line), so it creates as many as plain;
    what was recorded is still sealed at exit."""
    args = ["20", "0.2", "4"]
    plain = as_nobody_under_nproc(fr, 80, args, nobody_dir + "-plain", preload=False)
    traced = as_nobody_under_nproc(fr, 80, args, nobody_dir, preload=True)
    assert 0 < plain.returncode < 20, plain
    assert traced.returncode == plain.returncode, (plain, traced)
    lines = flightrec_lines(traced.stderr)
    assert len(lines) == 1 and "RLIMIT_NPROC lowered" in lines[0], traced.stderr
    segments = fr.segments(nobody_dir)
    assert segments and all(p.endswith(".seg") for p in segments), segments
    assert fr.events(nobody_dir, "process.start")


def test_nproc_limit_with_room_records_as_usual(fr, nobody_dir):
    """A limit with room (80): the program's 20 threads, and a trace."""
    plain = as_nobody_under_nproc(fr, 80, ["20"], nobody_dir + "-plain", preload=False)
    traced = as_nobody_under_nproc(fr, 80, ["20"], nobody_dir, preload=True)
    assert plain.returncode == traced.returncode == 20, (plain, traced)
    assert flightrec_lines(traced.stderr) == []
    assert len(fr.events(nobody_dir, "thread.start")) >= 20


# ---------------------------------------------------------------- item 6

def stacks_with(events, function):
    return [e for e in events if any(f.get("function") == function for f in e.get("stack") or [])]


@pytest.mark.parametrize("mode", ["prctl", "tsync", "launch"])
def test_seccomp_filter_that_kills_on_process_vm_readv(fr, trace_dir, tmp_path, mode):
    """The program's filter kills the process on process_vm_readv, which it
    never calls: installed by the main thread with prctl, on every thread
    (ours too) with seccomp(2) and TSYNC, or by a launcher before the
    recorder started. It exits 0, as plain, and its trace still has CPU
    samples and allocation stacks through its own functions; the log says
    once that a filter was seen."""
    cmd = [fr.program("seccomp_work"), mode, "1"]
    plain = run(cmd, fr.env(tmp_path / "plain", preload=False))
    traced = run(cmd, fr.env(trace_dir, {"FLIGHTREC_LOG": "info"}))
    assert (plain.returncode, plain.stdout) == (0, "done\n"), plain
    assert (traced.returncode, traced.stdout) == (0, "done\n"), traced
    seen = [line for line in flightrec_lines(traced.stderr) if "seccomp filter" in line]
    # launch: the launcher's image saw it at its prctl, the target at start.
    assert len(seen) == (2 if mode == "launch" else 1), traced.stderr
    cpu = fr.events(trace_dir, "cpu.sample")
    assert stacks_with(cpu, "burn_in_sandbox"), len(cpu)
    if not fr.sanitized:
        allocs = fr.events(trace_dir, "alloc.sample")
        assert stacks_with(allocs, "worker"), len(allocs)
