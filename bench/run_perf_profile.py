#!/usr/bin/python3
"""Where flightrec's time goes on redis: redis-server under flightrec's
defaults (unpinned, like the macro run) driven by the same redis-benchmark
load, with `perf record` attached to the server for the load. Reports
the share of all samples by thread and by library, and flightrec's hottest
functions (self time) on its own threads and on redis's thread (the hooks).
Kernel time the sampler causes on redis's thread (perf copying stacks at
context switches, with interrupts off) cannot be split out this way: on
this VM samples taken with interrupts off land on the point where they are
re-enabled (pvm_irq_enable); the macro sides fr-cpu / fr-cpu+offcpu
measure it instead.
    run_perf_profile.py BUILD OUT_JSON [SCALE [SIDE]]
SIDE: a flightrec side of bench/macro/sides.py (default fr-default).
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from macro import procs, redis_load, sides  # noqa: E402

FREQ = 1999
# Libraries only flightrec brings into redis (redis links none of them).
FLIGHTREC_DSOS = ("libflightrec.so", "libzstd", "libunwind", "libdw", "libelf", "libmimalloc", "libcurl")
LINE = re.compile(r"^\s+([\d.]+)%\s+(\S+)\s+(\S+)\s+\[([.k])\]\s+(.*?)\s*$")


def perf_report(data, *args):
    p = subprocess.run(["perf", "report", "-i", data, "--stdio", "--percent-limit", "0"] + list(args),
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("perf report failed: " + p.stderr[-2000:])
    return p.stdout


def samples(data):
    p = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "comm", "-g", "none"],
                       capture_output=True, text=True, timeout=600)
    m = re.search(r"# Samples: (\d+)(K?)", p.stdout)
    return 0 if not m else int(m.group(1)) * (1000 if m.group(2) else 1)


def flightrec_dso(dso):
    return any(dso.startswith(d) for d in FLIGHTREC_DSOS)


def main():
    build, out = os.path.abspath(sys.argv[1]), sys.argv[2]
    scale = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    side_name = sys.argv[4] if len(sys.argv) > 4 else "fr-default"
    side = sides.by_names([side_name])[1]
    n = redis_load.requests_per_test(scale)
    with tempfile.TemporaryDirectory(prefix="fr-perf-", dir="/var/tmp") as tmp:
        port = procs.free_port()
        outdir = os.path.join(tmp, "out")
        os.makedirs(outdir)
        cmd = side.wrap(redis_load.server_command(port, tmp), outdir, os.path.join(build, "libflightrec.so"))
        server = procs.launch(cmd, sides.clean_env(), os.path.join(tmp, "server.log"), cwd=tmp)
        data = os.path.join(tmp, "perf.data")
        try:
            procs.wait_listening(port, server)
            pid = procs.find_in_tree(server.pid, "redis-server")
            perf = subprocess.Popen(["perf", "record", "-F", str(FREQ), "-p", str(pid), "-o", data],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # perf attaches to every thread
            subprocess.run(redis_load.client_command(port, n), capture_output=True, check=True, timeout=1800)
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=120)
            subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, timeout=60)
            procs.finish(server, timeout=300)
        except BaseException:
            procs.kill_session(server)
            raise
        flat = perf_report(data, "--no-children", "-g", "none", "--sort", "comm,dso,sym")
        nsamples = samples(data)
    entries = []
    for line in flat.splitlines():
        m = LINE.match(line)
        if m:
            entries.append({"pct": float(m.group(1)), "comm": m.group(2), "dso": m.group(3),
                            "kernel": m.group(4) == "k", "sym": m.group(5)})
    by_comm, by_comm_dso = {}, {}
    for e in entries:
        by_comm[e["comm"]] = by_comm.get(e["comm"], 0) + e["pct"]
        key = "%s %s" % (e["comm"], e["dso"])
        by_comm_dso[key] = by_comm_dso.get(key, 0) + e["pct"]
    recorder = [e for e in entries if e["comm"].startswith("flightrec-")]
    hooks = [e for e in entries if not e["comm"].startswith("flightrec-") and flightrec_dso(e["dso"])]
    doc = {"freq": FREQ, "requests": 4 * n, "samples": nsamples, "by_comm": by_comm,
           "by_comm_dso": dict(sorted(by_comm_dso.items(), key=lambda kv: -kv[1])),
           "recorder_threads_pct": sum(e["pct"] for e in recorder),
           "host_threads_in_flightrec_pct": sum(e["pct"] for e in hooks),
           "recorder_top": recorder[:15], "host_threads_in_flightrec_top": hooks[:10]}
    print("perf on redis-server under %s (%d Hz, %d requests, %d samples): share of all samples" % (
        "flightrec defaults" if side_name == "fr-default" else side_name, FREQ, 4 * n, doc["samples"]))
    print("  by thread: " + ", ".join("%s %.1f%%" % kv for kv in sorted(by_comm.items(), key=lambda kv: -kv[1])))
    print("  flightrec's own threads: %.1f%%; flightrec's code on redis's thread (hooks): %.1f%%" % (
        doc["recorder_threads_pct"], doc["host_threads_in_flightrec_pct"]))
    print("  by thread and library:")
    for k, v in list(doc["by_comm_dso"].items())[:14]:
        print("   %5.2f%%  %s" % (v, k))
    print("  hottest on flightrec's threads (self):")
    for e in recorder[:12]:
        print("   %5.2f%%  %-16s %-22s %s" % (e["pct"], e["comm"], e["dso"], e["sym"][:110]))
    print("  hottest flightrec code on redis's thread (self):")
    for e in hooks[:8]:
        print("   %5.2f%%  %-16s %-22s %s" % (e["pct"], e["comm"], e["dso"], e["sym"][:110]))
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
