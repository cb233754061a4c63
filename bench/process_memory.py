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
                            mmaps and brk heap sit near 0x7f.. and 0x55..): the
                            writer's batches and intern tables, the symbolizer's
                            caches and symbol indexes, zstd's context, and
                            the recorder arena: whatever our threads malloc
                            (libdw's DWARF, libelf, zlib, libcurl). Split in
                            two: the part only this process has ("own": its
                            private pages) and the copy-on-write pages a forked
                            child still shares with its parent ("inherited")
  malloc arenas             glibc's per-thread arenas (64 MiB-aligned heaps in
                            the mmap area): before the recorder arena
                            (preload/heap/recorder_thread_malloc.h), what
                            libdw/libelf allocated on our threads; now only
                            what glibc allocates there for itself (a
                            single-threaded host has none)
  unwind caches             anonymous mappings of exactly 256 KiB: libunwind's
                            per-thread trace cache, made for a thread that
                            captures more than 32 allocation stacks a second
                            (preload/stacks/local_stack.cc), every entry written
  recorder thread stacks    the anonymous mapping holding a flightrec-* thread's
                            stack pointer (/proc/PID/task/TID/syscall)
  rings                     anonymous mappings of a per-thread ring slot's size
                            (FLIGHTREC_RING_BYTES + a header of up to 64 KiB) or of a
                            grown ring (1 MiB)
  SIGPROF rings             the SIGPROF sampler's timer table (4096 slots,
                            1280 KiB, touched only where a slot is used) and its
                            per-thread rings of 128 KiB, alone or merged with
                            the table by the kernel (same flags, adjacent)
  signal stacks             anonymous mappings of exactly 68 KiB (64 KiB alternate
                            signal stack + its guard)
  reserved tables           other anonymous mappings made with MAP_NORESERVE
                            (smaps VmFlags "nr"): the socket fd table, exchange
                            slots and prefix buffers, the allocation table, the
                            spare grown rings; sized for the worst case, they
                            cost only the pages touched
  other anonymous           every other anonymous mapping (the host's heap and
                            anything not named above)
  other files               every other file mapping (the program and its libraries)

Anonymous mappings the kernel fused (same flags, adjacent) are split at a
known size at one end (an unwind cache, a SIGPROF ring), which takes the
PSS first up to its own size: an estimate, exact when the known part is
written whole (both are). The sorting is by address, size and path, so a host mapping that happens to
have a ring's size counts as a ring on both sides: the reports print plain
and preloaded side by side and the added figure is their difference.
"""
import os

RING_DEFAULT = 256 * 1024
SIGPROF_TABLE = 4096 * 320
SIGPROF_RING = 128 * 1024
UNWIND_CACHE = 256 * 1024
ARENA_ALIGN = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit
CATEGORIES = ("libflightrec.so", "libraries for us", "symbol sources", "recorder heap (own)",
              "recorder heap (inherited)", "malloc arenas", "unwind caches", "recorder thread stacks",
              "rings", "SIGPROF rings", "signal stacks", "reserved tables", "perf rings", "brk heap",
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
    """[(start, end, perms, offset, path, pss_kb, private_kb, vmflags)] of pid."""
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
                    cur = [int(lo, 16), int(hi, 16), first[1], int(first[2], 16), path, 0, 0, ""]
                elif not cur:
                    continue
                elif line.startswith("Pss:"):
                    cur[5] = int(line.split()[1])
                elif line.startswith("Private_Clean:") or line.startswith("Private_Dirty:"):
                    cur[6] += int(line.split()[1])
                elif line.startswith("VmFlags:"):
                    cur[7] = line[8:].strip()
    except OSError:
        return []
    if cur:
        out.append(cur)
    return out


def library_paths(pid):
    return {m[4] for m in mappings(pid) if m[4].startswith("/")}


def sigprof_size(size):
    """A SIGPROF ring, or the timer table with any number of rings merged."""
    if size == SIGPROF_RING:
        return True
    return SIGPROF_TABLE <= size <= SIGPROF_TABLE + 16 * SIGPROF_RING and (size - SIGPROF_TABLE) % SIGPROF_RING == 0


def breakdown(pid, plain_libraries, ring_bytes=RING_DEFAULT, detail=None):
    """PSS KiB of pid by category (CATEGORIES); detail: a list that gets
    (category, size KiB, PSS KiB, path) of every mapping."""
    sums = dict.fromkeys(CATEGORIES, 0)
    sps = recorder_stack_pointers(pid)
    maps = mappings(pid)
    # glibc arenas: a heap starts 64 MiB-aligned, its reserve follows it
    # (---p); the arena may have grown in several rw-p pieces.
    arena_heaps = [m[0] for m in maps
                   if not m[4] and m[2].startswith("rw") and m[0] % ARENA_ALIGN == 0 and m[0] >= 0x7F0000000000]
    for lo, hi, perms, offset, path, pss, private, flags in maps:
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
            # PSS = private pages + shares of the shared ones: the private
            # part is this process's own, the rest its parent's copy.
            own = min(private, pss)
            sums["recorder heap (own)"] += own
            sums["recorder heap (inherited)"] += pss - own
            if detail is not None:
                detail.append(("recorder heap", size >> 10, pss, path))
            continue
        elif any(a <= lo < a + ARENA_ALIGN for a in arena_heaps):
            cat = "malloc arenas"
        elif any(lo <= sp < hi for sp in sps):
            cat = "recorder thread stacks"
        elif size == 68 * 1024:
            cat = "signal stacks"
        elif "nr" in flags.split():
            cat = "reserved tables"
        else:
            # The kernel merges adjacent anonymous mappings of the same
            # flags, so a cache or ring may come fused to a neighbour (the
            # host's or ours): a known size at either end is taken out
            # first and given its share of the PSS, up to its own size
            # (these are written whole), the rest goes by its own size.
            parts = []
            rest = size
            for known, kcat in ((UNWIND_CACHE, "unwind caches"), (SIGPROF_RING, "SIGPROF rings")):
                if rest > known and anon_category(rest - known, ring_bytes) != "other anonymous":
                    parts.append((kcat, known))
                    rest -= known
                    break
            parts.append((anon_category(rest, ring_bytes), rest))
            left = pss
            for i, (cat, n) in enumerate(parts):
                share = left if i == len(parts) - 1 else min(left, n >> 10)
                left -= share
                sums[cat] += share
                if detail is not None:
                    detail.append((cat, n >> 10, share, path))
            continue
        sums[cat] += pss
        if detail is not None:
            detail.append((cat, size >> 10, pss, path))
    return sums


def anon_category(size, ring_bytes):
    if size == UNWIND_CACHE:
        return "unwind caches"
    if ring_bytes + 4096 <= size <= ring_bytes + 65536 or size in (1 << 20, (1 << 20) + 4096):
        return "rings"
    if sigprof_size(size):
        return "SIGPROF rings"
    return "other anonymous"
