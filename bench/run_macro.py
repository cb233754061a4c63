#!/usr/bin/python3
"""Macro benchmark: real servers and programs under every side (plain,
flightrec configurations, heaptrack, gperftools), interleaved. For each
workload, each round runs every side once, in a fresh shuffled order, so
drift on the (shared) machine hits every side alike; the
report takes medians of per-round ratios (bench/macro/stats.py).

Writes OUT/macro.json (raw runs, rewritten after every run) and keeps the
trace of the last flightrec-defaults redis run in OUT/redis-trace for the
trace figures (bench/run_trace_figures.py).

    run_macro.py --build BUILD --out OUT [--rounds 5] [--scale 1.0]
                 [--workloads redis,nginx,cpu,alloc] [--sides fr-default,heaptrack] [--pin]
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from macro import nginx_load, program_load, redis_load, sides  # noqa: E402

WORKLOADS = {
    "redis": (redis_load.run, redis_load.describe),
    "nginx": (nginx_load.run, nginx_load.describe),
    "cpu": (program_load.runner("cpu"), lambda ctx: program_load.describe(ctx, "cpu")),
    "alloc": (program_load.runner("alloc"), lambda ctx: program_load.describe(ctx, "alloc")),
}
KEEP = ("redis", "fr-default")  # (workload, side) whose trace is kept for the trace figures


class Context:
    """What a workload needs to run one side: paths, scale, CPU pinning, and
    a scratch directory per run (deleted after the run, bar the kept trace)."""

    def __init__(self, build, out, scale, pin):
        self.build = build
        self.lib = os.path.join(build, "libflightrec.so")
        self.out = out
        self.scale = scale
        # --pin: servers on CPU 0, their load generators on CPU 1. Off by
        # default: on this VM every request then needs a cross-CPU wakeup, which
        # doubled plain redis's CPU per request and diluted every tool's
        # overhead, without steadier rounds (RESULTS.md, "Pinning").
        self.server_cpu, self.client_cpu = (0, 1) if pin else (None, None)
        self.program_cpu = None
        self.scratch = tempfile.mkdtemp(prefix="fr-macro-", dir="/var/tmp")

    def rundir(self, tag):
        path = os.path.join(self.scratch, tag)
        os.makedirs(path, exist_ok=True)
        return path

    def done_with(self, tag, side, outdir):
        if (tag.split("-")[0], side.name) == KEEP:
            kept = os.path.join(self.out, "redis-trace")
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(outdir, kept)
        shutil.rmtree(self.rundir(tag), ignore_errors=True)


def shuffled(items, rnd):
    """This round's order: a fresh permutation (seeded, so a rerun repeats it).
    A rotation would keep every side at a fixed distance from plain, so the
    sides placed far from it would always collect more drift."""
    order = list(items)
    random.Random(1000 + rnd).shuffle(order)
    return order


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def brief(workload, m):
    if "cpu_us_per_req" in m:
        return "%.2f us/req, %.0f req/s, p99 %.3f ms, %d trace B" % (
            m["cpu_us_per_req"], m["rps"], m["p99_ms"], m["trace_bytes"])
    return "wall %.2f s, cpu %.2f s, maxrss %d kB, %d trace B" % (m["wall_s"], m["cpu_s"], m["maxrss_kb"],
                                                                m["trace_bytes"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the default work per run")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--sides", default=",".join(s.name for s in sides.SIDES))
    ap.add_argument("--pin", action="store_true", help="pin servers to CPU 0 and load generators to CPU 1")
    args = ap.parse_args()
    build, out = os.path.abspath(args.build), os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit("unknown workload %s (known: %s)" % (w, ", ".join(WORKLOADS)))
    chosen = sides.by_names(args.sides)
    ctx = Context(build, out, args.scale, args.pin)
    doc = {
        "rounds": args.rounds, "scale": args.scale, "pinned": args.pin,
        "started_loadavg": loadavg(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "sides": [s.to_json() for s in chosen],
        "workloads": {w: WORKLOADS[w][1](ctx) for w in workloads},
        "runs": [], "errors": [],
    }
    path = os.path.join(out, "macro.json")

    def save():
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, path)

    t_start = time.monotonic()
    try:
        for w in workloads:
            run = WORKLOADS[w][0]
            # One unrecorded plain run first: page cache, lazy binding, socket buffers.
            run(chosen[0], ctx, -1)
            for rnd in range(args.rounds):
                for pos, side in enumerate(shuffled(chosen, rnd)):
                    entry = {"workload": w, "round": rnd, "position": pos, "side": side.name,
                             "loadavg": loadavg()}
                    try:
                        entry["metrics"] = run(side, ctx, rnd)
                    except Exception as e:  # one broken side must not sink the others' figures
                        entry["error"] = "%s: %s" % (type(e).__name__, e)
                        doc["errors"].append(dict(entry, trace=traceback.format_exc()))
                        print("macro: %s round %d %s FAILED: %s" % (w, rnd, side.name, entry["error"]),
                              file=sys.stderr, flush=True)
                        save()
                        continue
                    doc["runs"].append(entry)
                    save()
                    print("macro: %-5s round %d/%d %-14s %s  (load %.2f)" % (
                        w, rnd + 1, args.rounds, side.name, brief(w, entry["metrics"]), entry["loadavg"][0]),
                        file=sys.stderr, flush=True)
    finally:
        doc["finished_loadavg"] = loadavg()
        doc["elapsed_s"] = time.monotonic() - t_start
        save()
        shutil.rmtree(ctx.scratch, ignore_errors=True)
    print("macro: %d runs, %d failed, %.0f s; raw results in %s" % (len(doc["runs"]), len(doc["errors"]),
                                                                   doc["elapsed_s"], path), file=sys.stderr)
    return 0  # failed runs are in macro.json; write_results.py reports them and fails after writing


if __name__ == "__main__":
    sys.exit(main())
