"""server_run: one measured run of a network server under one side. Starts
the (wrapped, pinned) server, waits until it listens, snapshots CPU of its
whole process tree, lets the load generator run, snapshots again, reads
its memory, stops it and collects what the side wrote. The load generator
and the stop are the workload's (redis_load.py, nginx_load.py)."""
import os
import time

from . import procs
from . import sides as sides_mod
from . import trace_stats

RECORDER_THREAD_PREFIX = "flightrec-"


def run(side, ctx, tag, server_cmd, server_comm, port, drive, stop):
    """drive() -> dict of the load generator's figures (must include 'requests');
    stop(server_pid) asks the server to exit. Returns the run's metrics."""
    rundir = ctx.rundir(tag)
    outdir = os.path.join(rundir, "out")
    os.makedirs(outdir)
    cmd = procs.pinned(side.wrap(server_cmd, outdir, ctx.lib), ctx.server_cpu)
    proc = procs.launch(cmd, sides_mod.clean_env(), os.path.join(rundir, "server.log"), cwd=rundir)
    try:
        procs.wait_listening(port, proc)
        server = None
        for _ in range(100):  # under a wrapper the server is a grandchild: give it a moment
            server = procs.find_in_tree(proc.pid, server_comm)
            if server:
                break
            time.sleep(0.05)
        if server is None:
            raise RuntimeError("no process named %s under %s" % (server_comm, cmd))
        tree0, server0, threads0 = procs.tree_cpu(proc.pid), procs.cpu_seconds(server), procs.thread_cpu(server)
        t0 = time.monotonic()
        load = drive()
        wall = time.monotonic() - t0
        tree1, server1, threads1 = procs.tree_cpu(proc.pid), procs.cpu_seconds(server), procs.thread_cpu(server)
        mem = procs.memory_kb(server)
        tree_rss = procs.tree_rss_kb(proc.pid)
        stop(server)
        status, ru = procs.finish(proc, timeout=300)
    except BaseException:
        procs.kill_session(proc)
        raise
    if status != 0:
        raise RuntimeError("%s exited with %s (log: %s)" % (server_comm, status, os.path.join(rundir, "server.log")))
    requests = load["requests"]
    tree_cpu = procs.tree_cpu_delta(tree0, tree1)
    trace_bytes = procs.dir_bytes(outdir)
    m = dict(load)
    m.update({
        "load_wall_s": wall,
        "tree_cpu_s": tree_cpu,
        "server_cpu_s": server1 - server0,
        "cpu_us_per_req": 1e6 * tree_cpu / requests,
        "server_cpu_us_per_req": 1e6 * (server1 - server0) / requests,
        "total_cpu_s": ru.ru_utime + ru.ru_stime,  # whole life, startup and exit included
        "hwm_kb": mem.get("VmHWM"),
        "rss_kb": mem.get("VmRSS"),
        "tree_rss_kb": tree_rss,
        "trace_bytes": trace_bytes,
        "trace_bytes_per_s": trace_bytes / wall,
        "trace_bytes_per_req": trace_bytes / requests,
        "recorder_thread_cpu_s": {name: threads1.get(name, 0.0) - threads0.get(name, 0.0)
                                  for name in threads1 if name.startswith(RECORDER_THREAD_PREFIX)},
    })
    if side.tool == "flightrec":
        m["flightrec"] = trace_stats.flightrec_summary(outdir)
    ctx.done_with(tag, side, outdir)
    return m
