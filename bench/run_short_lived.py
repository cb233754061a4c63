#!/usr/bin/python3
"""Short-lived processes: a bash loop that forks and execs `/bin/true` N
times, plain and under the preload with every default on, interleaved
rounds, medians. Prints the wall time per process each side takes, what the
preload adds per process, the ratio, the CPU (user + system of bash and all
its children, from wait4's rusage) per process, and how many segment files
the preloaded loop leaves per program image (N `/bin/true` images plus the
shell's own). This is what a build or a test suite run under the preload
pays per process (issue #28: goal <= +0.5 ms and <= 1 segment per image).

It also counts the page faults per process (wait4's ru_minflt of bash and
its children) and times one page fault on this machine (first writes to
fresh anonymous pages, against populating the same pages with one
madvise(MADV_POPULATE_WRITE)): on a VM a fault is an exit to the hypervisor,
and the faults a process adds explain much of what the preload costs it.
    run_short_lived.py BUILD [ROUNDS] [N] [--against OTHER_BUILD]
With --against, a third side (OTHER_BUILD's library, an earlier commit's
build say) runs in the same rounds, and the two libraries are compared
round by round: what one change saves, measured inside one run.
"""
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time


def one(lib, n):
    """(wall seconds, CPU seconds, sealed segments, files left, minor faults) of one loop."""
    with tempfile.TemporaryDirectory(prefix="fr-short-", dir="/var/tmp") as tmp:
        out = os.path.join(tmp, "out")
        env = dict(os.environ, FLIGHTREC_OUTPUT=out)
        if lib:
            env["LD_PRELOAD"] = lib
        # `; :` keeps bash from exec'ing the last command in place of itself.
        script = "for ((i=0;i<%d;i++)); do /bin/true; done; :" % n
        t0 = time.monotonic()
        p = subprocess.Popen(["/bin/bash", "-c", script], env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        if status != 0:
            raise SystemExit("the loop failed under %s (status %d)" % (lib or "no preload", status))
        names = os.listdir(out) if os.path.isdir(out) else []
        sealed = sum(1 for f in names if f.endswith(".seg"))
        files = sum(1 for f in names if f.endswith(".seg") or f.endswith(".active"))
        return wall, ru.ru_utime + ru.ru_stime, sealed, files, ru.ru_minflt


MADV_POPULATE_WRITE = 23  # Linux 5.14


def fault_cost(pages=1024, rounds=5):
    """(µs per page touched one by one, µs per page populated by one madvise
    or None where the kernel has no MADV_POPULATE_WRITE): medians."""
    touch, populate = [], []
    for _ in range(rounds):
        m = mmap.mmap(-1, pages * 4096)
        t0 = time.perf_counter()
        for i in range(0, pages * 4096, 4096):
            m[i] = 1
        touch.append((time.perf_counter() - t0) / pages * 1e6)
        m.close()
        m = mmap.mmap(-1, pages * 4096)
        try:
            t0 = time.perf_counter()
            m.madvise(MADV_POPULATE_WRITE)
            populate.append((time.perf_counter() - t0) / pages * 1e6)
        except OSError:
            pass
        m.close()
    return statistics.median(touch), (statistics.median(populate) if populate else None)


def main():
    args = sys.argv[1:]
    other = None
    if "--against" in args:
        i = args.index("--against")
        other = os.path.join(os.path.abspath(args[i + 1]), "libflightrec.so")
        del args[i:i + 2]
    build = os.path.abspath(args[0])
    lib = os.path.join(build, "libflightrec.so")
    rounds = int(args[1]) if len(args) > 1 else 5
    n = int(args[2]) if len(args) > 2 else 100
    plain, traced, against = [], [], []
    one(None, 10)  # warm the page cache for every side
    one(lib, 10)
    if other:
        one(other, 10)
    for r in range(rounds):
        sides = [(None, plain), (lib, traced)] + ([(other, against)] if other else [])
        k = r % len(sides)  # each side takes each place in the order in turn
        for side_lib, res in sides[k:] + sides[:k]:
            res.append(one(side_lib, n))
    pw = statistics.median(x[0] for x in plain) / n * 1e3
    tw = statistics.median(x[0] for x in traced) / n * 1e3
    pc = statistics.median(x[1] for x in plain) / n * 1e3
    tc = statistics.median(x[1] for x in traced) / n * 1e3
    ratios = [t[0] / p[0] for p, t in zip(plain, traced)]
    segs = statistics.median(x[2] for x in traced) / (n + 1)
    files = statistics.median(x[3] for x in traced) / (n + 1)
    print("short-lived processes (bash loop fork+exec of /bin/true, %d per loop), median of %d interleaved rounds:"
          % (n, rounds))
    print("  fork+exec wall plain %.3f ms, flightrec defaults %.3f ms: +%.3f ms per process, ratio %.2fx "
          "(rounds %.2f-%.2fx)" % (pw, tw, tw - pw, statistics.median(ratios), min(ratios), max(ratios)))
    print("  fork+exec CPU (bash and children) plain %.3f ms, flightrec defaults %.3f ms: +%.3f ms per process"
          % (pc, tc, tc - pc))
    print("  fork+exec segments: %.2f sealed segment files per program image (%.2f files of any kind; %d images "
          "per loop)" % (segs, files, n + 1))
    pf = statistics.median(x[4] for x in plain) / n
    tf = statistics.median(x[4] for x in traced) / n
    touch, populate = fault_cost()
    print("  fork+exec page faults (bash and children) plain %.0f, flightrec defaults %.0f: +%.0f per process; "
          "one fault here costs %.2f us (first write to a fresh page; %s), so the added faults are ~%.2f ms"
          % (pf, tf, tf - pf, touch,
             "%.2f us per page populated by one madvise" % populate if populate is not None
             else "no MADV_POPULATE_WRITE", (tf - pf) * touch / 1e3))
    if other:
        ow = statistics.median(x[0] for x in against) / n * 1e3
        oc = statistics.median(x[1] for x in against) / n * 1e3
        of = statistics.median(x[4] for x in against) / n
        paired = [(t[1] - o[1]) / n * 1e3 for t, o in zip(traced, against)]
        print("  against %s: wall %.3f ms (+%.3f per process over plain), CPU %.3f ms (+%.3f), page faults %.0f "
              "(+%.0f); this build minus that one, CPU per process, median of the rounds' differences %+.3f ms "
              "(rounds %+.3f to %+.3f), page faults %+.0f"
              % (other, ow, ow - pw, oc, oc - pc, of, of - pf, statistics.median(paired), min(paired), max(paired),
                 tf - of))


if __name__ == "__main__":
    main()
