"""program_load: a fixed-work C++ program run to completion under one side:
bench/micro/cpu_bench.cc (CPU-bound hash loop) and bench/micro/alloc_work.cc
(allocation-heavy). Measured from outside over the whole life of the
process, start-up and exit included (a tool that writes its file at exit
pays for it here): wall time, CPU of the process and every helper it
waited for (getrusage via wait4), peak RSS. The program's own report of
its work loop (wall, process CPU) is kept as inner_*."""
import os
import time

from . import procs
from . import sides as sides_mod
from . import trace_stats

PROGRAMS = {
    # name: (binary under BUILD/bench, argument at scale 1)
    "cpu": ("cpu_bench", 1200000000),
    "alloc": ("alloc_work", 150),
}


def command(ctx, name):
    binary, work = PROGRAMS[name]
    return [os.path.join(ctx.build, "bench", binary), str(max(1, int(work * ctx.scale)))]


def run_program(name, side, ctx, rnd):
    tag = "%s-r%d-%s" % (name, rnd, side.name)
    rundir = ctx.rundir(tag)
    outdir = os.path.join(rundir, "out")
    os.makedirs(outdir)
    # GNU time reports the peak RSS: our own wait4 cannot, because a child's
    # ru_maxrss starts at the RSS of the Python process it was forked from.
    maxrss_file = os.path.join(rundir, "maxrss")
    cmd = ["/usr/bin/time", "-f", "%M", "-o", maxrss_file] + procs.pinned(
        side.wrap(command(ctx, name), outdir, ctx.lib), ctx.program_cpu)
    log = os.path.join(rundir, "program.log")
    t0 = time.monotonic()
    proc = procs.launch(cmd, sides_mod.clean_env(), log, cwd=rundir)
    status, ru = procs.finish(proc, timeout=1800)
    wall = time.monotonic() - t0
    with open(log, errors="replace") as f:
        text = f.read()
    if status != 0:
        raise RuntimeError("%s exited with %s:\n%s" % (cmd, status, text[-2000:]))
    inner = None
    for line in text.splitlines():  # the program's line may follow a tool's own chatter
        fields = line.split()
        if len(fields) >= 4 and fields[0] == "wall_s" and fields[2] == "cpu_s":
            inner = float(fields[1]), float(fields[3])
    if inner is None:
        raise RuntimeError("%s printed no 'wall_s .. cpu_s ..' line:\n%s" % (cmd, text[-2000:]))
    trace_bytes = procs.dir_bytes(outdir)
    m = {
        "wall_s": wall,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "inner_wall_s": inner[0],
        "inner_cpu_s": inner[1],
        "maxrss_kb": read_maxrss(maxrss_file),
        "trace_bytes": trace_bytes,
        "trace_bytes_per_s": trace_bytes / wall,
    }
    if side.tool == "flightrec":
        m["flightrec"] = trace_stats.flightrec_summary(outdir)
    ctx.done_with(tag, side, outdir)
    return m


def read_maxrss(path):
    with open(path) as f:
        return int(f.read().split()[-1])


def runner(name):
    return lambda side, ctx, rnd: run_program(name, side, ctx, rnd)


def describe(ctx, name):
    cmd = ["/usr/bin/time", "-f", "%M"] + procs.pinned(["$SIDE"] + [os.path.join("build", "bench", PROGRAMS[name][0])] + command(ctx, name)[1:],
                       ctx.program_cpu)
    return {"command": " ".join(cmd)}
