"""The host never hangs or dies because of how we unwind, sleep or touch
errno (issue #34, items 4, 5, 6 and 9).

Each test runs a program of ours plain and under the preload and asserts the
same exit status and output. Each failed before its fix:
 * jit_frames once/threads: hung forever (libgcc's object_mutex taken again
   by a stack capture from inside malloc / the pthread_mutex_lock hook);
 * jit_frames term: 1 run in 3 never died of SIGTERM (our termination
   handler slept through our own nanosleep hook, which unwound with libgcc
   while the interrupted code held its lock);
 * malloc_errno: errno changed by a successful malloc now and then.
"""
import pytest


def same_as_plain(fr, cmd, trace_dir, tmp_path, env=None, timeout=60):
    plain = fr.run(cmd, tmp_path / "plain-out", preload=False, check=False, timeout=timeout)
    traced = fr.run(cmd, trace_dir, env=env, check=False, timeout=timeout)
    assert traced.returncode == plain.returncode, traced.stderr
    assert traced.stdout == plain.stdout
    return traced


@pytest.mark.parametrize("env", [
    # The reported cases: allocation sampling alone (off-CPU off), and every
    # default. A small sampling interval makes a sample inside libgcc's
    # locked region certain rather than likely.
    {"FLIGHTREC_OFFCPU": "0", "FLIGHTREC_ALLOC_SAMPLE_BYTES": "4096"},
    {},
    {"FLIGHTREC_ALLOC_SAMPLE_BYTES": "4096", "FLIGHTREC_OFFCPU_MIN_US": "1"},
])
@pytest.mark.parametrize("mode", ["once", "threads"])
def test_registered_frames_do_not_deadlock_captures(fr, trace_dir, tmp_path, mode, env):
    proc = same_as_plain(fr, [fr.program("jit_frames"), mode], trace_dir, tmp_path, env=env, timeout=60)
    assert proc.stdout.startswith("caught ")


def test_registered_frames_still_profiled(fr, trace_dir, tmp_path):
    """After the switch to libunwind, allocation samples still carry stacks."""
    fr.run([fr.program("jit_frames"), "threads"], trace_dir,
           env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": "4096"}, timeout=60)
    samples = fr.events(trace_dir, "alloc.sample")
    assert samples, "no allocation samples recorded"
    assert any(len(s.get("stack") or []) >= 3 for s in samples), samples[:3]


@pytest.mark.slow
@pytest.mark.parametrize("run", range(6))
def test_sigterm_during_exceptions_kills(fr, trace_dir, tmp_path, run):
    # Plain: killed by SIGTERM (-15). Preloaded: the same, never a hang.
    proc = same_as_plain(fr, [fr.program("jit_frames"), "term"], trace_dir, tmp_path,
                         env={"FLIGHTREC_OFFCPU_MIN_US": "1"}, timeout=30)
    assert proc.returncode == -15


@pytest.mark.parametrize("env", [{}, {"FLIGHTREC_OFFCPU_MIN_US": "1"}, {"FLIGHTREC_SAMPLER": "perf"}])
def test_program_segv_reporter_runs(fr, trace_dir, tmp_path, env):
    proc = same_as_plain(fr, [fr.program("segv_reporter")], trace_dir, tmp_path, env=env, timeout=30)
    assert proc.returncode == 42 and proc.stdout == "reporter ran\n"


def test_successful_malloc_keeps_errno(fr, trace_dir, tmp_path):
    proc = same_as_plain(fr, [fr.program("malloc_errno"), "200000"], trace_dir, tmp_path,
                         env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": "2048"})
    assert proc.stdout.startswith("changed 0 of ")


@pytest.mark.parametrize("env", [{}, {"FLIGHTREC_SAMPLER": "perf"}])
def test_cancel_reaches_a_read_on_a_reused_socket_number(fr, trace_dir, tmp_path, env):
    """#34 item 6: a stale 'non-blocking socket' entry (socket closed inside
    libc by fclose(fdopen(fd)), number reused by a pipe) made the read hook
    issue a raw, uncancellable read: pthread_cancel never took effect."""
    proc = same_as_plain(fr, [fr.program("cancel_stale_fd")], trace_dir, tmp_path, env=env, timeout=30)
    assert proc.returncode == 0 and proc.stdout == "cancelled\n"


def test_crash_in_a_vfork_child_is_not_the_parents(fr, trace_dir, tmp_path):
    """#34 suspected item, confirmed: a vfork child shares the parent's memory
    and TLS, so our crash handler recorded the child's fault as the parent's,
    sealed the parent's segment and left the crash latch set: the parent's
    own later crash went unrecorded (old library: one crash event, at the
    child's address 16). Now the child changes none of our state."""
    proc = same_as_plain(fr, [fr.program("vfork_crash")], trace_dir, tmp_path, timeout=60)
    assert proc.returncode == -11 and proc.stdout == "child signal 11\n"
    crashes = fr.events(trace_dir, "crash")
    assert [c["fault_addr"] for c in crashes] == [32], crashes


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["sigprof", "perf"])
def test_a_program_linked_with_libunwind_is_sampled_not_killed(fr, trace_dir, tmp_path, sampler):
    """A program linked with libunwind.so.8 (its own crash reporter, or
    gperftools' libtcmalloc) puts that library ahead of the preload's
    libunwind-x86_64.so.8, and both export unw_get_accessors: the recorder
    bound to the wrong one, read null accessors, and the first CPU sample's
    unwind called address 0 (SIGSEGV, exit 139). Now it exits as plain and
    its samples are unwound through main."""
    traced = same_as_plain(fr, [fr.program("unwind_linked")], trace_dir, tmp_path,
                           env={"FLIGHTREC_SAMPLER": sampler})
    assert "own_depth 1" in traced.stdout
    top = fr.dump_json("top", "--json", trace_dir)
    if sampler == "perf" and top["samples"] == 0:
        pytest.skip("perf sampling is not available here")
    names = {f["function"]: f for f in top["functions"]}
    assert names.get("spin", {}).get("self", 0) > 0, top["functions"][:5]
    assert names.get("main", {}).get("total", 0) >= names["spin"]["self"], top["functions"][:5]


def test_fork_while_our_threads_walk_the_loaded_objects(fr, trace_dir, tmp_path):
    """#34, suspected then confirmed: libunwind's lookups on the sampler and
    flush threads hold glibc's dl_load_write_lock inside dl_iterate_phdr,
    which glibc 2.36 does not reset in a fork child. A child forked in that
    window hung in its first dl_iterate_phdr or dlopen (or in the recorder's
    own restart in the child, whose first sampled allocation unwinds). Now
    fork waits for those walks (preload/runtime/hook_dl_iterate_phdr.cc).
    The test shim stretches each of our walks to 2 ms so that 300 forks land
    in one; before the fix a child hung within the first ~70 forks in each
    of 3 runs."""
    shim = f"{fr.build}/preloads/slow_phdr_walks.so"
    cmd = [fr.program("fork_dlopen"), "300"]
    plain = fr.run(cmd, tmp_path / "plain-out", preload=False, timeout=120)
    traced = fr.run(cmd, trace_dir, env={"LD_PRELOAD": f"{shim}:{fr.preload}"}, check=False, timeout=120)
    assert traced.returncode == plain.returncode == 0, traced.stdout + traced.stderr
    assert traced.stdout == plain.stdout == "forks 300 ok\n"
