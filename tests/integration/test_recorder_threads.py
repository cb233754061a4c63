"""How many threads the recorder adds to a process (issue 44), and that a
process whose main thread leaves through pthread_exit still ends as it would
without the preload, its atexit output written to its own stdout.

recorder_threads burns 0.3 s on a worker, then prints the names of the
process's flightrec-* threads. By default (FLIGHTREC_SAMPLER_THREAD=0) the
flush thread hosts the sampler's collection (sampler/sampler_thread.h): one
thread, and the worker's samples are in the trace. With the setting at 1 the
sampler has a thread of its own. With main_exit, main leaves first; the flush thread
has left the program's descriptor table (own_fd_table.h) in the SIGPROF
modes, so (hosted) the exit keeper the main thread made as it left
(preload/runtime/exit_keeper.h) makes the exit(0), and the atexit handler's
output, including a line main left in stdout's buffer, reaches the pipe.
"""
import collections

import pytest

OWN_TABLE_LINE = "flightrec: flush thread: descriptor table of its own"
HOSTED = {"FLIGHTREC_SAMPLER_THREAD": "0"}  # the flush thread collects


def recorder_line(stdout):
    """The flightrec-* threads the program saw, but for the helper that
    collects while the flush thread reads a module's debug information for
    the first time (sampler_thread.h, SlowWorkScope): it lives for those
    milliseconds only, and a busy machine may stretch them into the look."""
    lines = [line for line in stdout.splitlines() if line.startswith("recorder:")]
    assert len(lines) == 1, stdout
    return [name for name in lines[0].split()[1:] if name != "flightrec-help"]


def worker_samples(fr, trace_dir):
    leaves = collections.Counter(e["stack"][0]["function"] for e in fr.events(trace_dir, "cpu.sample")
                                 if e["stack"])
    return leaves["worker_burn"]


@pytest.mark.parametrize("sampler", ["auto", "sigprof", "perf"])
def test_one_recorder_thread_and_samples(fr, trace_dir, sampler):
    # The default (FLIGHTREC_SAMPLER_THREAD=0).
    proc = fr.run([fr.program("recorder_threads")], trace_dir, env={"FLIGHTREC_SAMPLER": sampler})
    assert recorder_line(proc.stdout) == ["flightrec-flush"], proc.stdout
    assert proc.stdout.endswith("atexit ran\n"), proc.stdout
    # 0.3 s of CPU at 99 Hz: about 30 samples, collected by the flush thread.
    assert worker_samples(fr, trace_dir) >= 10


def test_with_the_setting_the_sampler_has_a_thread(fr, trace_dir):
    proc = fr.run([fr.program("recorder_threads")], trace_dir, env={"FLIGHTREC_SAMPLER_THREAD": "1"})
    assert recorder_line(proc.stdout) == ["flightrec-flush", "flightrec-sampl"], proc.stdout
    assert worker_samples(fr, trace_dir) >= 10


@pytest.mark.parametrize("sampler", ["auto", "sigprof", "perf"])
def test_atexit_output_after_main_leaves_through_pthread_exit(fr, trace_dir, tmp_path, sampler):
    plain = fr.run([fr.program("recorder_threads"), "main_exit"], tmp_path / "plain", preload=False)
    traced = fr.run([fr.program("recorder_threads"), "main_exit"], trace_dir,
                    env={"FLIGHTREC_SAMPLER": sampler, "FLIGHTREC_LOG": "debug", **HOSTED}, timeout=60)
    # Everything but the recorder's own threads is as without the preload:
    # main's buffered line and the handler's, written by the exit.
    def without_recorder(out):
        return [line for line in out.splitlines() if not line.startswith("recorder:")]
    assert without_recorder(traced.stdout) == without_recorder(plain.stdout) == [
        "main leaves through pthread_exit", "atexit ran"], traced.stdout
    own_table = OWN_TABLE_LINE in traced.stderr.splitlines()
    # The SIGPROF modes take a table of their own here (kernel 5.6+, no
    # seccomp filter, no S3); perf keeps the program's table.
    assert own_table == (sampler != "perf"), traced.stderr
    expected = ["flightrec-flush", "flightrec-keep"] if own_table else ["flightrec-flush"]
    assert recorder_line(traced.stdout) == expected, traced.stdout
    assert worker_samples(fr, trace_dir) >= 10


def test_a_helper_collects_while_a_module_is_first_read(fr, trace_dir):
    """The flush thread reads each module's ELF and DWARF the first time one
    of its pcs is named (libdw; seconds for a large binary): a helper thread
    collects the samples meanwhile (sampler_thread.h, SlowWorkScope), and is
    gone when the reading is done."""
    proc = fr.run([fr.program("recorder_threads")], trace_dir, env={"FLIGHTREC_LOG": "debug", **HOSTED})
    helped = [line for line in proc.stderr.splitlines()
              if line.startswith("flightrec: a helper thread collected the samples for ")]
    assert helped, proc.stderr
    assert recorder_line(proc.stdout) == ["flightrec-flush"], proc.stdout
    assert worker_samples(fr, trace_dir) >= 10
