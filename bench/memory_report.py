"""The side-by-side memory report of a forking server (issue #44), shared by
run_pg_memory.py (PostgreSQL) and run_server_memory.py (nginx, a preforking
Python server): which processes make up a server (a top process and its
children), one snapshot of each (PSS, threads, PSS by mapping from
process_memory.py) and the printed comparison of a plain and a preloaded
server, so every server's figures are read and printed the same way.
"""
import os

import process_memory as pm


def children(top):
    """The pids whose parent is top, sorted."""
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == top:
            kids.append(int(d))
    return sorted(kids)


def library_paths(pids):
    """Every file the plain side maps: a library outside it was mapped for us."""
    paths = set()
    for pid in pids:
        paths |= pm.library_paths(pid)
    return paths


def snapshot(pids, plain_libraries):
    """[(pid, PSS KiB, threads, recorder threads, {category: PSS KiB})] of
    every pid still alive."""
    rows = []
    for pid in pids:
        pss = pm.pss_kb(pid)
        if pss is None:
            continue
        total, own = pm.threads(pid)
        rows.append((pid, pss, total, own, pm.breakdown(pid, plain_libraries)))
    return rows


def mib(kb):
    return kb / 1024.0


def report(label, ps, ts, out=print, each=False):
    """Prints plain (ps) against preloaded (ts), two snapshot() lists of one
    server: totals, added PSS and threads per process, and where the added
    PSS lies by category; each: also every process's PSS and threads, in pid order (the
    top process first), for a server of a few processes."""
    n_p, n_t = len(ps), len(ts)
    if not n_p or not n_t:
        out("  %s: no process to read (plain %d, flightrec %d)" % (label, n_p, n_t))
        return
    tot_p = sum(r[1] for r in ps)
    tot_t = sum(r[1] for r in ts)
    thr_p = sum(r[2] for r in ps) / n_p
    thr_t = sum(r[2] for r in ts) / n_t
    own_t = sum(r[3] for r in ts) / n_t
    out("  %s: processes plain %d, flightrec %d; total PSS plain %.1f MiB, flightrec %.1f MiB "
        "(%.2fx), added %.0f KiB per process; threads per process plain %.2f, flightrec %.2f (recorder "
        "threads %.2f)"
        % (label, n_p, n_t, mib(tot_p), mib(tot_t), tot_t / tot_p,
           (tot_t / n_t - tot_p / n_p), thr_p, thr_t, own_t))
    if each:
        out("    PSS KiB (threads) of each process, top process first: plain %s; flightrec %s"
            % (" ".join("%d(%d)" % (r[1], r[2]) for r in ps), " ".join("%d(%d)" % (r[1], r[2]) for r in ts)))
    out("    where the added PSS lies, KiB per process (flightrec - plain):")
    for cat in pm.CATEGORIES:
        a = sum(r[4][cat] for r in ts) / n_t
        b = sum(r[4][cat] for r in ps) / n_p
        out("      %-24s %+8.0f   (plain %.0f, flightrec %.0f)" % (cat, a - b, b, a))
