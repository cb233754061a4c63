"""Memory and threads of one process, and where the recorder's share of it
lies (issue #44). Reads /proc/PID/smaps_rollup (PSS), /proc/PID/status
(threads) and /proc/PID/smaps (PSS by mapping), and sorts each mapping into
one of the places the recorder puts memory:

  libflightrec.so           the library's own mappings (text, data, relocated GOT)
  libraries for us          file mappings of a library the plain side never maps
                            (libdw, libelf, libunwind, libzstd, libmimalloc, ...)
  symbol sources            ELF and debug files mapped whole and private
                            (rw-p at offset 0) by libdw to read symbols
  recorder heap             mimalloc's arenas: anonymous mappings mimalloc places
                            at its aligned hints, 2 TiB..30 TiB (the host's own
                            mmaps and brk heap sit near 0x7f.. and 0x55..)
  recorder thread stacks    the anonymous mapping holding a flightrec-* thread's
                            stack pointer (/proc/PID/task/TID/syscall)
  rings                     anonymous mappings of a per-thread ring slot's size
                            (FLIGHTREC_RING_BYTES + a header of up to 64 KiB) or of a
                            grown ring (1 MiB)
  signal stacks             anonymous mappings of exactly 68 KiB (64 KiB alternate
                            signal stack + its guard)
  other anonymous           every other anonymous mapping (the host's heap, and
                            the recorder's other tables: allocation table, fd tables)
  other files               every other file mapping (the program and its libraries)

The sorting is by address, size and path, so a host mapping that happens to
have a ring's size counts as a ring on both sides: the reports print plain
and preloaded side by side and the added figure is their difference.
"""
import os

RING_DEFAULT = 256 * 1024
CATEGORIES = ("libflightrec.so", "libraries for us", "symbol sources", "recorder heap",
              "recorder thread stacks", "rings", "signal stacks", "perf rings", "brk heap",
              "other anonymous", "other files")


def read_kb(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def pss_kb(pid):
    return read_kb("/proc/%d/smaps_rollup" % pid, "Pss:")


def threads(pid):
    """(all threads, recorder threads) of pid."""
    total = own = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                    name = f.read().strip()
            except OSError:
                continue
            total += 1
            own += name.startswith("flightrec")
    except OSError:
        pass
    return total, own


def recorder_stack_pointers(pid):
    sps = []
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return sps
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if not f.read().startswith("flightrec"):
                    continue
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                fields = f.read().split()
        except OSError:
            continue
        if len(fields) >= 3 and fields[0] != "running":
            sps.append(int(fields[-2], 16))
    return sps


def mappings(pid):
    """[(start, end, perms, offset, path, pss_kb)] of pid."""
    out = []
    cur = None
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                first = line.split(None, 5)
                if "-" in first[0] and len(first) >= 5 and not first[0].endswith(":"):
                    if cur:
                        out.append(cur)
                    lo, hi = first[0].split("-")
                    path = first[5].strip() if len(first) > 5 else ""
                    cur = [int(lo, 16), int(hi, 16), first[1], int(first[2], 16), path, 0]
                elif line.startswith("Pss:") and cur:
                    cur[5] = int(line.split()[1])
    except OSError:
        return []
    if cur:
        out.append(cur)
    return out


def library_paths(pid):
    return {m[4] for m in mappings(pid) if m[4].startswith("/")}


def breakdown(pid, plain_libraries, ring_bytes=RING_DEFAULT, detail=None):
    """PSS KiB of pid by category (CATEGORIES); detail: a list that gets
    (category, size KiB, PSS KiB, path) of every mapping."""
    sums = dict.fromkeys(CATEGORIES, 0)
    sps = recorder_stack_pointers(pid)
    for lo, hi, perms, offset, path, pss in mappings(pid):
        size = hi - lo
        if path.startswith("/"):
            if path.endswith("/libflightrec.so") or "/libflightrec" in path:
                cat = "libflightrec.so"
            elif perms.startswith("rw") and perms.endswith("p") and offset == 0:
                cat = "symbol sources"
            elif path not in plain_libraries:
                cat = "libraries for us"
            else:
                cat = "other files"
        elif path == "[heap]":
            cat = "brk heap"
        elif path == "[stack]":
            cat = "other anonymous"
        elif "perf_event" in path:
            cat = "perf rings"
        elif path.startswith("["):
            cat = "other files"
        elif path:  # /dev/zero (deleted), SYSV, memfd: shared memory of the host
            cat = "other files"
        elif 0x20000000000 <= lo < 0x1E0000000000:
            cat = "recorder heap"
        elif any(lo <= sp < hi for sp in sps):
            cat = "recorder thread stacks"
        elif ring_bytes + 4096 <= size <= ring_bytes + 65536 or size in (1 << 20, (1 << 20) + 4096):
            cat = "rings"
        elif size == 68 * 1024:
            cat = "signal stacks"
        else:
            cat = "other anonymous"
        sums[cat] += pss
        if detail is not None:
            detail.append((cat, size >> 10, pss, path))
    return sums
