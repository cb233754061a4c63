#!/usr/bin/python3
"""What an idle process pays for being recorded: `sleep` under the preload
with every default on, and what flightrec's own threads (flush, sampler)
spend while it does nothing: CPU (schedstat, ns on CPU) and wake-ups
(voluntary context switches) per second, measured over a window that starts
after start-up. The same with FLIGHTREC_FLUSH_MS=5 (the drain period before
the threads were woken by need) shows what periodic wake-ups cost on this
machine. Interleaved rounds; medians. The same again for a process of 500
threads that all sleep (bench/micro/idle_threads), as a thread pool between
requests: what visiting each thread's slot on every tick costs
(preload/flush/slot_scan.h).

Then what a short-lived process pays to start and exit under the preload:
`/bin/true` plain and with every default on, interleaved, CPU of the whole
process (every thread) from wait4's rusage. That is what a build or a test
suite run under the preload pays per process; the same once more into an
output directory that already holds 20,000 segments, as such a run's does
after a while (the disk budget must not cost a scan of them per process).
    run_idle_cost.py BUILD [ROUNDS]
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

WINDOW_S = 5.0
CROWDED_SEGMENTS = 20000
SIDES = (("defaults", {}), ("FLIGHTREC_FLUSH_MS=5", {"FLIGHTREC_FLUSH_MS": "5"}))
POOL_THREADS = 500


def recorder_threads(pid):
    """{tid: (ns on CPU, voluntary switches)} of flightrec's threads."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            if not open(base + "comm").read().startswith("flightrec-"):
                continue
            ns = int(open(base + "schedstat").read().split()[0])
            status = open(base + "status").read()
            vol = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        out[tid] = (ns, vol)
    return out


def one(lib, env, pool=None, busy=False):
    """pool: the idle_threads program, run with POOL_THREADS threads instead
    of `sleep`; busy: its main thread making a send+recv pair every ms."""
    with tempfile.TemporaryDirectory(prefix="fr-idle-", dir="/var/tmp") as tmp:
        e = dict(os.environ, LD_PRELOAD=lib, FLIGHTREC_OUTPUT=os.path.join(tmp, "out"), **env)
        secs = str(int(WINDOW_S + 3))
        cmd = [pool, str(POOL_THREADS), secs, "1" if busy else "0"] if pool else ["sleep", secs]
        p = subprocess.Popen(cmd, env=e)
        try:
            time.sleep(1.0)  # past start-up
            a = recorder_threads(p.pid)
            t0 = time.monotonic()
            time.sleep(WINDOW_S)
            b = recorder_threads(p.pid)
            dt = time.monotonic() - t0
        finally:
            p.kill()
            p.wait()
    cpu = sum(b[t][0] - a[t][0] for t in b if t in a) / dt
    wakes = sum(b[t][1] - a[t][1] for t in b if t in a) / dt
    return cpu, wakes, len(b)


def start_cost(lib, env, out=None):
    """CPU seconds (user + system, every thread) of one /bin/true, recording
    into a new directory or into `out`."""
    with tempfile.TemporaryDirectory(prefix="fr-start-", dir="/var/tmp") as tmp:
        e = dict(os.environ, FLIGHTREC_OUTPUT=out or os.path.join(tmp, "out"), **env)
        if lib:
            e["LD_PRELOAD"] = lib
        p = subprocess.Popen(["/bin/true"], env=e)
        _, status, ru = os.wait4(p.pid, 0)
        if status != 0:
            raise SystemExit("/bin/true failed under %s" % (lib or "no preload"))
        return ru.ru_utime + ru.ru_stime


def main():
    build = os.path.abspath(sys.argv[1])
    lib = os.path.join(build, "libflightrec.so")
    pool = os.path.join(build, "bench", "idle_threads")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    sides = [(name, env, None, False) for name, env in SIDES]
    sides += [("%d threads, %s" % (POOL_THREADS, name), env, pool, False) for name, env in SIDES]
    sides += [("%d threads, main busy, %s" % (POOL_THREADS, name), env, pool, True) for name, env in SIDES]
    res = {name: [] for name, _, _, _ in sides}
    for r in range(rounds):
        for name, env, prog, busy in (sides if r % 2 == 0 else sides[::-1]):
            res[name].append(one(lib, env, prog, busy))
    print("idle process (`sleep`; `idle_threads %d`: that many sleeping threads; main busy: its main thread "
          "making a send+recv pair every ms), flightrec's threads over %.0f s windows, median of %d rounds:"
          % (POOL_THREADS, WINDOW_S, rounds))
    for name, _, _, _ in sides:
        cpu = statistics.median(x[0] for x in res[name])
        wakes = statistics.median(x[1] for x in res[name])
        threads = max(x[2] for x in res[name])
        print("  idle %-22s %.2f ms CPU per second (%.3f%% of a core), %.0f wake-ups per second, %d threads"
              % (name + ":", cpu / 1e6, cpu / 1e7, wakes, threads))
    runs = 20 * rounds
    plain, traced, crowded = [], [], []
    with tempfile.TemporaryDirectory(prefix="fr-crowded-", dir="/var/tmp") as full:
        # What a test suite run under the preload leaves behind: one small
        # sealed segment per process it started, all in one directory.
        for i in range(CROWDED_SEGMENTS):
            with open(os.path.join(full, "20250101T000000.000Z-old-%d-0000.seg" % (i + 1)), "wb") as f:
                f.write(b"x" * 100)
        sides = ((None, plain, None), (lib, traced, None), (lib, crowded, full))
        for r in range(runs):
            for side in sides if r % 2 == 0 else sides[::-1]:
                side[1].append(start_cost(side[0], {}, side[2]))
    p, t, c = (statistics.median(x) * 1e3 for x in (plain, traced, crowded))
    print("process start and exit (`/bin/true`), CPU of the whole process, median of %d interleaved runs:" % runs)
    print("  start plain %.2f ms, flightrec defaults %.2f ms: +%.2f ms per process" % (p, t, t - p))
    print("  into a directory already holding %d segments: %.2f ms: +%.2f ms per process" % (CROWDED_SEGMENTS, c, c - p))


if __name__ == "__main__":
    main()
