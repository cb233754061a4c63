"""Where the recorder's own heap lies in the program (issue #44).

Every thread of ours used to hold two mimalloc heaps: the default one (our
own containers, zstd, symbol indexes) and one in the recorder arena (what
libdw, libelf and libunwind malloc on our threads: recorder_thread_malloc.h).
Each heap takes segments of its own, and each keeps a partly used page for
every size class it allocates, so a forked worker's flush thread paid for
two sets. Now the recorder's own allocations go to the calling thread's
heap in the arena too, and the arena is reserved when the heap opens and
shared with mimalloc's default heaps: all of the recorder's heap lies in
that one reservation, in the parent and in every forked child.

A real program (python3) forks two workers; each of the three burns CPU
and allocates (so the flush thread symbolizes, samples allocations and
writes blocks), then the test reads their /proc/PID/maps while they wait.
"""
import subprocess
import sys

ARENA_BYTES = 128 << 20  # kRecorderArenaBytes (preload/heap/recorder_thread_malloc.h)
# mimalloc places its reservations at aligned hints from 2 TiB to 30 TiB;
# the program's own mmaps and brk heap sit near 0x7f.. and 0x55..
HINT_LO, HINT_HI = 2 << 40, 30 << 40

PROGRAM = r"""
import hashlib, os, sys, time
def work():
    t = time.time(); x = []
    while time.time() - t < 0.5:
        hashlib.sha256(os.urandom(4096)).hexdigest(); x.append(bytearray(20000))
        if len(x) > 200: x = []
work()
gate_r, gate_w = os.pipe()
for i in range(2):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r); os.close(gate_w); work()
        os.write(w, b"r"); os.read(gate_r, 1); os._exit(0)
    os.close(w); os.read(r, 1)
print(os.getpid(), flush=True)
sys.stdin.readline()  # the test has read the maps
os.close(gate_w)
while True:
    try: os.wait()
    except ChildProcessError: break
"""


def heap_mappings(pid):
    """Anonymous mappings of pid in mimalloc's hint range: (start, end, perms)."""
    out = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if HINT_LO <= lo < HINT_HI and len(fields) < 6:
                out.append((lo, hi, fields[1]))
    return out


def children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return [int(c) for c in f.read().split()]


def test_the_recorders_heap_lies_in_one_reservation_in_parent_and_forked_children(fr, trace_dir):
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], env=fr.env(trace_dir), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        parent = int(proc.stdout.readline())
        pids = [parent] + children(parent)
        assert len(pids) == 3, pids
        for pid in pids:
            maps = heap_mappings(pid)
            assert maps, "process %d: no mapping of the recorder's heap" % pid
            assert any(p.startswith("rw") for _, _, p in maps), maps
            lo = min(m[0] for m in maps)
            hi = max(m[1] for m in maps)
            # One reservation: segments taken from the OS beside it would lie
            # past it (the layout before: a 224 MiB window in each process).
            assert hi - lo <= ARENA_BYTES, "process %d: the heap spans %d MiB: %s" % (
                pid, (hi - lo) >> 20, ["%x-%x %s" % m for m in maps])
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # What they did is in the trace: all three processes recorded.
    info = fr.dump_json("info", "--json", trace_dir)
    pids_seen = {s.get("pid") for s in info.get("segments", [])}
    assert set(pids) <= pids_seen, (pids, pids_seen)
