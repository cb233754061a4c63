"""The recorder's allocator stays private and never costs the host its life.

Issue #34 item 3: operator new/delete, malloc, free, malloc_usable_size and
__libc_malloc resolve under the preload exactly as without it, in a C
program, a C++ program and a C++ plugin dlopen'ed by the C program; the
plugin's malloc_usable_size(new int[4]) (a segfault when mimalloc's
operator new joined the global scope) prints what it prints plain; the
library exports no mimalloc symbol and no allocator symbol beyond its hooks.
Issue #29 item 8: under `ulimit -v` the host prints and exits as it does
plain, and the preload says at most one line, that recording is off.
Issue #29 item 15: mimalloc never reads the program's MIMALLOC_* variables,
and in a secure-execution process it is not even loaded.
"""
import os
import resource
import shutil
import subprocess
import tempfile

import pytest

# The malloc-family entry points the preload interposes on purpose
# (preload/alloc/hook_malloc.cc). Anything else allocator-like exported is a leak.
INTENDED_ALLOC_HOOKS = {"malloc", "free", "calloc", "realloc", "reallocarray", "malloc_usable_size",
                        "posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc"}
ALLOCATOR_WORDS = ("alloc", "free", "_Znw", "_Zna", "_Zdl", "_Zda", "usable_size", "__libc_", "mi_")


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def run(cmd, env, timeout=60, shell=False):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, shell=shell)


def flightrec_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("flightrec:")]


def test_library_exports_no_mimalloc_and_no_allocator_beyond_its_hooks(fr):
    names = exported(fr.lib)
    assert not [n for n in names if n.startswith("mi_")], sorted(n for n in names if n.startswith("mi_"))
    allocatorish = {n for n in names if any(w in n for w in ALLOCATOR_WORDS)}
    assert allocatorish <= INTENDED_ALLOC_HOOKS, sorted(allocatorish - INTENDED_ALLOC_HOOKS)
    assert "malloc" in names and "free" in names  # the hooks themselves are there
    needed = subprocess.run(["readelf", "-d", fr.lib], capture_output=True, text=True, check=True).stdout
    assert "mimalloc" not in needed, needed


def compare_resolution(fr, plain_out, preloaded_out):
    """Every line "<who> <how> <symbol> <library>" must read as plain, except
    that an intended hook may resolve to the preload itself."""
    hooks = exported(fr.lib) & INTENDED_ALLOC_HOOKS
    lib_name = os.path.basename(fr.lib)
    plain_lines, pre_lines = plain_out.splitlines(), preloaded_out.splitlines()
    assert len(plain_lines) == len(pre_lines), (plain_out, preloaded_out)
    checked = 0
    for a, b in zip(plain_lines, pre_lines):
        fa, fb = a.split(), b.split()
        if len(fa) == 4 and fa[:3] == fb[:3] and fa[2] in hooks and fb[3] == lib_name:
            continue  # our malloc hook, which forwards to the plain target
        assert a == b, "plain: %r, preloaded: %r" % (a, b)
        checked += 1
    return checked


@pytest.mark.parametrize("program, with_plugin", [("alloc_resolve_c", True), ("alloc_resolve_c", False),
                                                  ("alloc_resolve_cc", False)])
def test_allocator_symbols_resolve_as_without_the_preload(fr, trace_dir, program, with_plugin):
    cmd = [fr.program(program)]
    if with_plugin:
        cmd.append(fr.program("libnew_plugin.so"))
    plain = run(cmd, fr.env(trace_dir, preload=False))
    pre = run(cmd, fr.env(trace_dir, {"FLIGHTREC_LOG": "info"}))
    assert plain.returncode == 0, plain.stderr
    assert pre.returncode == plain.returncode, pre.stderr
    checked = compare_resolution(fr, plain.stdout, pre.stdout)
    assert checked >= 20
    # The lines that matter most, spelled out (plain values, now preloaded too).
    who = "plugin" if with_plugin else ("cc" if program.endswith("cc") else "c")
    lines = set(pre.stdout.splitlines())
    for sym in ("mi_malloc", "mi_free", "mi_new_n"):
        assert "%s default %s none" % (who, sym) in lines
    if who == "c":
        assert "c default _Znwm none" in lines and "c default _ZdlPv none" in lines
    else:
        assert "%s bound _Znwm libstdc++.so.6" % who in lines, pre.stdout
        assert "%s default __libc_malloc libc.so.6" % who in lines
    # Our hooks forward to glibc, as plain code would have called it.
    assert "allocations go to" in pre.stderr and "libc.so.6" in pre.stderr, pre.stderr
    assert "recording to" in pre.stderr  # it really was recording


def test_plugin_usable_size_of_new_array_same_as_plain(fr, trace_dir):
    # The reproducer: a C program dlopens a C++ plugin that calls
    # malloc_usable_size on `new int[4]` (segfaulted under the preload).
    cmd = [fr.program("alloc_resolve_c"), fr.program("libnew_plugin.so")]
    plain = run(cmd, fr.env(trace_dir, preload=False))
    pre = run(cmd, fr.env(trace_dir))
    usable = [line for line in plain.stdout.splitlines() if line.startswith("plugin usable ")]
    assert usable and int(usable[0].split()[2]) >= 16, plain.stdout
    pre_usable = [line for line in pre.stdout.splitlines() if line.startswith("plugin usable ")]
    assert (pre.returncode, pre_usable) == (plain.returncode, usable), (pre.returncode, pre.stderr)
    assert pre.returncode == 0


def test_python_loading_a_cxx_plugin_sees_what_it_sees_plain(fr, trace_dir):
    # The issue's own case: python3 is a C program; ctypes loads C++ code.
    code = "import ctypes, sys; ctypes.CDLL(sys.argv[1]).plugin_run()"
    cmd = ["/usr/bin/python3", "-c", code, fr.program("libnew_plugin.so")]
    plain = run(cmd, fr.env(trace_dir, preload=False))
    pre = run(cmd, fr.env(trace_dir))
    assert plain.returncode == 0, plain.stderr
    assert pre.returncode == 0, pre.stderr
    assert compare_resolution(fr, plain.stdout, pre.stdout) >= 20
    assert "plugin bound _Znwm libstdc++.so.6" in pre.stdout.splitlines()


# Address-space limits in KiB: under, around and over what the recorder needs
# (preload/heap/address_space.h), plus none.
LIMITS_KIB = [30000, 40000, 60000, 100000, 300000, 700000, 2000000]


@pytest.mark.slow
@pytest.mark.parametrize("limit_kib", LIMITS_KIB)
def test_address_space_limit_same_output_and_status(fr, trace_dir, limit_kib):
    # As `ulimit -v N; LD_PRELOAD=... bash -c 'echo hi'`: the limit is set in
    # the child before exec, so only the program itself runs preloaded.
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_kib * 1024, limit_kib * 1024))

    for cmd in (["bash", "-c", "echo hi"], [fr.program("alloc_limit")]):
        plain = subprocess.run(cmd, env=fr.env(trace_dir, preload=False), capture_output=True, text=True,
                               timeout=60, preexec_fn=limit)
        pre = subprocess.run(cmd, env=fr.env(trace_dir), capture_output=True, text=True, timeout=60,
                             preexec_fn=limit)
        assert plain.returncode == 0 and plain.stdout, (cmd, plain.stdout, plain.stderr)
        assert (pre.returncode, pre.stdout) == (plain.returncode, plain.stdout), (cmd, pre.stderr)
        ours = flightrec_lines(pre.stderr)
        assert len(ours) <= 1, (cmd, pre.stderr)
        assert all("recording off" in line for line in ours), (cmd, pre.stderr)
        rest = [line for line in pre.stderr.splitlines() if not line.startswith("flightrec:")]
        assert rest == plain.stderr.splitlines(), (cmd, pre.stderr)
        if limit_kib <= 300000:
            assert ours and "RLIMIT_AS" in ours[0], (cmd, pre.stderr)  # stays off, and says so once


def test_mimalloc_environment_is_not_read_by_our_heap(fr, trace_dir):
    # MIMALLOC_VERBOSE=1 made the preload's mimalloc print its options and
    # addresses into the host's stderr; MIMALLOC_SHOW_STATS=1 printed at exit.
    extra = {"MIMALLOC_VERBOSE": "1", "MIMALLOC_SHOW_STATS": "1", "mimalloc_show_errors": "1"}
    cmd = ["/bin/bash", "-c", 'echo "$MIMALLOC_VERBOSE"; ' + fr.program("alloc_resolve_cc")]
    plain = run(cmd, fr.env(trace_dir, extra, preload=False))
    pre = run(cmd, fr.env(trace_dir, dict(extra, FLIGHTREC_LOG="info")))
    assert pre.returncode == plain.returncode == 0, pre.stderr
    assert pre.stdout.splitlines()[0] == "1"  # the program still sees its variable
    compare_resolution(fr, plain.stdout, pre.stdout)
    assert "mimalloc:" not in pre.stderr, pre.stderr
    assert "recording to" in pre.stderr  # the heap was in use


# libstdc++'s emergency exception pool, which our library's static copy of
# libstdc++ allocates from the host's malloc as it is loaded, before any
# code of ours runs (docs/LIMITS.md, "Memory"): 72,704 bytes with GCC 12.
STATIC_LIBSTDCXX_POOL = 72704


def test_the_programs_heap_at_main_holds_nothing_of_the_recorders(fr, trace_dir):
    """What init builds for the recorder's life lies in the recorder's heap,
    not the program's: at main the program's heap holds only what loading
    our library put there, and its first allocations get the blocks and
    usable sizes they get plain. (Init's tables, event types and symbolizer
    were built in the program's heap, about 81 KiB, and freed into it by the
    flush thread while the program ran: a malloc(16) then came back with 40
    usable bytes in one run of many, where plain gives 24.)"""
    prog = fr.program("heap_at_main")
    plain = run([prog], fr.env(trace_dir, preload=False))
    assert plain.returncode == 0, plain.stderr

    def fields(out):
        lines = out.splitlines()
        return int(lines[0].split()[1]), [line for line in lines if line.startswith("usable")]

    plain_inuse, plain_usable = fields(plain.stdout)
    for _ in range(5):
        pre = run([prog], fr.env(trace_dir, {"FLIGHTREC_FLUSH_MS": 1}))
        assert pre.returncode == 0, pre.stderr
        inuse, usable = fields(pre.stdout)
        assert usable == plain_usable, (pre.stdout, plain.stdout)
        # Beyond the pool: the loader's records of the recorder's heap library
        # (mimalloc, loaded on demand) and of our configuration, a few KiB.
        added = inuse - plain_inuse - STATIC_LIBSTDCXX_POOL
        assert added <= 16 * 1024, (inuse, plain_inuse)


@pytest.fixture
def world_readable_dir():
    path = tempfile.mkdtemp(prefix="flightrec-secure-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_secure_execution_never_loads_mimalloc(fr, world_readable_dir):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to make a setgid process")
    # A setgid copy of the probe, run by nobody: egid != rgid, so AT_SECURE.
    # LD_PRELOAD is ignored there; the probe dlopens the library by path, as
    # /etc/ld.so.preload would load it.
    probe = os.path.join(world_readable_dir, "secure_probe")
    lib = os.path.join(world_readable_dir, "libflightrec.so")
    shutil.copy(fr.program("secure_probe"), probe)
    shutil.copy(fr.lib, lib)
    os.chown(probe, 0, 0)
    os.chmod(probe, 0o2755)
    os.chmod(lib, 0o755)
    env = {"PATH": "/usr/bin:/bin", "MIMALLOC_VERBOSE": "1", "MIMALLOC_SHOW_STATS": "1",
           "FLIGHTREC_OUTPUT": os.path.join(world_readable_dir, "out")}
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    secure = run(as_nobody + [probe, lib], env)
    assert secure.returncode == 0, secure.stderr
    assert "at_secure 1" in secure.stdout, secure.stdout
    assert "MIMALLOC_VERBOSE 1" in secure.stdout  # the variable was there to be read
    assert "mimalloc absent" in secure.stdout, secure.stdout
    assert secure.stderr == "", secure.stderr
    # Control: the same probe as root (not secure) does load the heap, so
    # "absent" above is the recorder's decision, not a probe that sees nothing.
    normal = run([probe, lib], dict(env, MIMALLOC_VERBOSE="1"))
    assert normal.returncode == 0, normal.stderr
    assert "at_secure 0" in normal.stdout and "mimalloc loaded" in normal.stdout, normal.stdout
    assert "mimalloc:" not in normal.stderr, normal.stderr
