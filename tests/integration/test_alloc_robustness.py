"""The malloc hooks never harm the host: many threads, signal handlers that
allocate, fork while other threads allocate, another allocator preloaded
behind us; and the host's allocations reach the allocator behind us (glibc
normally), never the recorder's private mimalloc."""
import json
import os
import subprocess

import pytest

PYTHON = "/usr/bin/python3"
MIMALLOC = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"


def plain(fr, args):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def functions_in(stack):
    return [f["function"] for f in stack]


def stream_samples(fr, out):
    """alloc.sample events one at a time, without holding them all in the
    test process (pytest's own RSS is inherited as ru_maxrss by every process
    it later starts, which other tests measure)."""
    proc = subprocess.Popen([PYTHON, fr.dump, "events", "--json", "--type", "alloc.sample", str(out)],
                            stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip():
                yield json.loads(line)
    finally:
        proc.stdout.close()
        proc.wait(timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("rate,pairs", [(524288, 1000000), (4096, 150000)])
def test_eight_threads_of_malloc_free_match_the_plain_run(fr, trace_dir, rate, pairs):
    # (The 8 x 10M is scaled down to keep the suite fast; bench/ runs more.)
    args = [fr.program("alloc_stress"), "8", str(pairs)]
    expected = plain(fr, args)
    assert "bad 0" in expected
    proc = fr.run(args, trace_dir, env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": rate, "FLIGHTREC_SAMPLER": "off"})
    assert proc.stdout == expected
    doc = fr.dump_json("heap", "--json", trace_dir)
    assert any("Worker" in s["function"] for s in doc["sites"]), doc["sites"][:5]
    if rate == 524288:
        workers = {e["tid"] for e in stream_samples(fr, trace_dir)
                   if any("Worker" in f for f in functions_in(e["stack"]))}
        assert len(workers) == 8, "every worker thread was sampled"


@pytest.mark.parametrize("rate,iterations", [(524288, 300000), (1, 30000)])
def test_allocating_in_a_signal_handler(fr, trace_dir, rate, iterations):
    proc = fr.run([fr.program("alloc_signal"), str(iterations)], trace_dir,
                  env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": rate, "FLIGHTREC_RING_BYTES": 4 << 20,
                       "FLIGHTREC_SAMPLER": "off"})
    assert proc.stdout.strip() == "sum ok handled yes"
    if rate == 1:
        # The handler's own allocations, unwound through the signal frame into
        # main_loop; and main_loop's own.
        handler = through_main_loop = main_loop = 0
        for e in stream_samples(fr, trace_dir):
            fns = functions_in(e["stack"])
            if fns and "on_signal" in fns[0]:
                handler += 1
                through_main_loop += any("main_loop" in f for f in fns)
            elif fns and "main_loop" in fns[0]:
                main_loop += 1
        assert handler > 0, "no sample from the signal handler"
        assert through_main_loop > 0
        assert main_loop >= iterations


@pytest.mark.slow
def test_fork_while_other_threads_allocate(fr, trace_dir):
    # A small mean interval keeps the other threads inside the sampled path
    # (stack capture, ring push, address set) often when fork happens.
    proc = fr.run([fr.program("alloc_fork"), "6", "3"], trace_dir,
                  env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": 65536, "FLIGHTREC_SAMPLER": "off"}, timeout=120)
    assert proc.stdout.strip() == "forks 6 ok 6"
    files = fr.segments(trace_dir)
    by_pid = {}
    for f in files:
        by_pid.setdefault(int(os.path.basename(f).split("-")[-2]), []).append(f)
    assert len(by_pid) == 7, files  # the parent and six children
    # Each child recorded its own allocations: its 16 MiB block is live at its
    # exit, attributed to child_work; the parent's threads kept sampling. (A
    # child's final flush has a bounded exit budget; on an overloaded machine
    # it can run out, leaving an unsealed segment: such a child is only
    # required to have exited cleanly, which the output above says.)
    # If a fork found another thread stuck mid-capture for longer than the
    # quiesce budget (an overloaded machine), that child says so and records
    # its samples without stacks rather than risk libunwind's inherited locks.
    stackless_ok = "allocation samples in this child carry no stacks" in proc.stderr
    sealed_children = attributed = 0
    for pid, mine in by_pid.items():
        doc = fr.dump_json("heap", "--json", *mine)
        info = fr.dump_json("info", "--json", *mine)
        if any("churn" in s["function"] for s in doc["sites"]):
            continue  # the parent
        if not all(s["state"] == "sealed" for s in info["segments"]):
            continue
        sealed_children += 1
        big = [s for s in doc["sites"] if s["live_bytes_est"] >= 16 << 20]
        assert big, (pid, doc["sites"][:3])
        if "child_work" in big[0]["function"] or (stackless_ok and big[0]["function"] == "[no stack]"):
            attributed += 1
        else:
            raise AssertionError("child %d: 16 MiB live at %s" % (pid, big[0]))
    assert sealed_children >= 1, proc.stderr
    assert attributed == sealed_children


def test_another_allocator_behind_us(fr, trace_dir):
    if not os.path.exists(MIMALLOC):
        pytest.skip("libmimalloc is not installed")
    args = [fr.program("alloc_stress"), "4", "300000"]
    expected = plain(fr, args)
    env = fr.env(trace_dir, {"FLIGHTREC_LOG": "info", "FLIGHTREC_SAMPLER": "off"})
    env["LD_PRELOAD"] = "%s %s" % (fr.lib, MIMALLOC)
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected
    assert "allocations go to %s" % MIMALLOC in proc.stderr
    assert any("Worker" in s["function"] for s in fr.dump_json("heap", "--json", trace_dir)["sites"])
    # glibc's heap does not grow: the blocks really went to mimalloc.
    proc = subprocess.run([fr.program("alloc_where")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    growth = int(proc.stdout.split("glibc_heap_growth ")[1].split()[0])
    assert growth < 1 << 20, proc.stdout
    assert "aligned ok" in proc.stdout


def test_host_allocations_reach_glibc_not_the_recorders_mimalloc(fr, trace_dir):
    # libflightrec.so links libmimalloc.so, which defines malloc too; the hooks
    # must still forward to the next malloc in the host's search order: glibc.
    proc = fr.run([fr.program("alloc_where")], trace_dir, env={"FLIGHTREC_LOG": "info", "FLIGHTREC_SAMPLER": "off"})
    assert "allocations go to /lib/x86_64-linux-gnu/libc.so.6" in proc.stderr \
        or "allocations go to /usr/lib/x86_64-linux-gnu/libc.so.6" in proc.stderr, proc.stderr
    growth = int(proc.stdout.split("glibc_heap_growth ")[1].split()[0])
    assert growth >= 64 << 20, proc.stdout  # all 64 MiB are in glibc's own accounting
    assert "aligned ok" in proc.stdout


SHIM = r"""
#include <errno.h>
#include <stddef.h>
extern void* __libc_malloc(size_t);
extern void __libc_free(void*);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
static int aligned_calls;
void* malloc(size_t n) { return __libc_malloc(n); }
void free(void* p) { __libc_free(p); }
void* calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void* realloc(void* p, size_t n) { return __libc_realloc(p, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  if (a < sizeof(void*) || (a & (a - 1))) return EINVAL;
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  __atomic_add_fetch(&aligned_calls, 1, __ATOMIC_RELAXED);
  *out = p;
  return 0;
}
int shim_aligned_calls(void) { return __atomic_load_n(&aligned_calls, __ATOMIC_RELAXED); }
"""


def test_functions_the_allocator_behind_us_lacks_are_emulated_on_it(fr, trace_dir, tmp_path):
    # An allocator with only malloc/free/calloc/realloc/posix_memalign: memalign,
    # aligned_alloc, valloc and pvalloc must be served by ITS posix_memalign
    # (glibc's copies would hand out blocks from another heap).
    src = tmp_path / "shim.c"
    src.write_text(SHIM)
    so = tmp_path / "libshim.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(so), str(src)], check=True)
    env = fr.env(trace_dir, {"FLIGHTREC_LOG": "info", "FLIGHTREC_SAMPLER": "off"})
    env["LD_PRELOAD"] = "%s %s" % (fr.lib, so)
    proc = subprocess.run([fr.program("alloc_where")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "aligned ok" in proc.stdout
    assert "shim_aligned_calls 5" in proc.stdout, proc.stdout
    assert "(emulated there: memalign aligned_alloc malloc_usable_size)" in proc.stderr, proc.stderr


TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


@pytest.mark.parametrize("allocator", [TCMALLOC, JEMALLOC], ids=["tcmalloc", "jemalloc"])
def test_another_allocator_ahead_of_us(fr, trace_dir, allocator):
    """LD_PRELOAD="libtcmalloc.so.4 libflightrec.so": the program's malloc is
    tcmalloc's, so none of its allocations reach our hooks. The program ends
    as plain; its CPU samples are unwound (tcmalloc links libunwind.so.8,
    whose unw_get_accessors then came first in the lookup order: the copied-
    stack unwinder read null accessors and the process died of SIGSEGV at the
    first sample); allocation profiling says it is off, and why, instead of
    showing a program that allocates nothing."""
    if not os.path.exists(allocator):
        pytest.skip("%s is not installed" % allocator)
    args = [fr.program("alloc_known"), "4"]
    env = fr.env(trace_dir, {"FLIGHTREC_LOG": "info", "FLIGHTREC_SAMPLER": "sigprof"})
    env["LD_PRELOAD"] = "%s %s" % (allocator, fr.lib)
    expected = subprocess.run(args, env={**env, "LD_PRELOAD": allocator}, capture_output=True, text=True,
                              timeout=120)
    assert expected.returncode == 0, expected.stderr
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["functions"] == json.loads(expected.stdout)["functions"]
    assert ("flightrec: allocation profiling off: malloc calls go to %s" % allocator) in proc.stderr
    starts = fr.events(trace_dir, "process.start")
    assert starts and all(s["alloc_sample_bytes"] == 0 for s in starts), starts
    assert "allocation profiling was off" in fr.dump_run("heap", trace_dir).stdout
    # CPU samples with real stacks: main and the program's own functions.
    top = fr.dump_json("top", "--json", trace_dir)
    assert top["samples"] > 0, top
    assert any(f["function"] == "main" and f["total"] > 0 for f in top["functions"]), top["functions"][:10]


def test_our_hooks_ahead_of_another_allocator_profile_it(fr, trace_dir):
    """LD_PRELOAD="libflightrec.so libtcmalloc.so.4": the hooks come first and
    forward to tcmalloc; the estimates of what goes through malloc hold as
    with glibc behind us. tcmalloc's own operator new does not call malloc,
    so `new` is not seen (docs/LIMITS.md), and the recorder says so."""
    if not os.path.exists(TCMALLOC):
        pytest.skip("libtcmalloc is not installed")
    env = fr.env(trace_dir, {"FLIGHTREC_LOG": "info", "FLIGHTREC_RING_BYTES": 16 << 20})
    env["LD_PRELOAD"] = "%s %s" % (fr.lib, TCMALLOC)
    proc = subprocess.run([fr.program("alloc_known"), "1"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "allocations go to %s" % TCMALLOC in proc.stderr
    assert "C++ operator new is %s's own and does not call malloc" % TCMALLOC in proc.stderr
    truth = json.loads(proc.stdout)["functions"]
    sites = fr.dump_json("heap", "--json", trace_dir)["sites"]
    for name in ["churn_small", "leak_large", "large_blocks", "calloc_path"]:
        got = sum(s["allocated_bytes_est"] for s in sites if "::%s(" % name in s["function_full"])
        assert abs(got - truth[name]["bytes"]) <= 0.10 * truth[name]["bytes"], (name, got, truth[name])


def test_stacks_of_a_non_pie_program_taking_mallocs_address_start_at_its_code(fr, trace_dir):
    """Debian's python3 is not position-independent and takes malloc's
    address, so the executable holds a PLT entry for malloc and dlsym names
    python3 as its owner. Whether our frames are trimmed from allocation
    stacks was decided from that answer, and every Python allocation stack
    began with RecordAllocation and MallocSlow."""
    proc = fr.run([PYTHON, "-c", "x = [bytearray(1000) for i in range(20000)]"], trace_dir,
                  env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": 65536})
    assert proc.returncode == 0
    tops = [s["stack"][0]["function"] for s in stream_samples(fr, trace_dir) if s["stack"]]
    assert len(tops) >= 100, len(tops)
    ours = [t for t in tops if "flightrec::" in t or "MallocSlow" in t or "CallocSlow" in t]
    assert ours == [], ours[:5]
