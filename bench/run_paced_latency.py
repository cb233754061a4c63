#!/usr/bin/python3
"""Paced latency: redis-server (no persistence, loopback) answering
bench/micro/paced_client, which sends SET/GET at a fixed rate on one
connection, far below what the server can do. Without queueing behind other
clients, a slow request is one the server's thread was stalled for, so this
is where the recorder's stalls on the service's thread show (redis-benchmark
in the macro run saturates the server, and its p99 is mostly queueing).

Sides: plain and flightrec with every default on, interleaved (the order
alternates each round), a fresh server per run. Per side: the median over
rounds of each percentile (latency from send to whole reply, in µs), the
ratio to plain, and the requests that were sent late (a slow reply held
them). Also the figures from each request's due time (sched_*), which
count one stall once for every request it delayed.
    run_paced_latency.py BUILD OUT_JSON ROUNDS [SCALE]
Rate: 2000 requests/s (PACED_RATE); seconds per run: 30 * SCALE, at least 5.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from macro import procs, redis_load, sides  # noqa: E402

RATE = int(os.environ.get("PACED_RATE", "2000"))
SIDES = [s for s in sides.SIDES if s.name in ("plain", "fr-default")]
FIGURES = ("p50_us", "p90_us", "p99_us", "p999_us", "max_us", "sched_p99_us", "sched_p999_us", "late_sends",
           "achieved_rate")


def one(build, side, seconds):
    with tempfile.TemporaryDirectory(prefix="fr-paced-", dir="/var/tmp") as tmp:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        port = procs.free_port()
        cmd = side.wrap(redis_load.server_command(port, tmp), out, os.path.join(build, "libflightrec.so"))
        proc = procs.launch(cmd, sides.clean_env(), os.path.join(tmp, "server.log"), cwd=tmp)
        try:
            procs.wait_listening(port, proc)
            p = subprocess.run([os.path.join(build, "bench", "paced_client"), str(port), str(RATE), str(seconds)],
                               capture_output=True, text=True, timeout=600, check=True)
            subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "shutdown", "nosave"],
                           capture_output=True, timeout=60)
            procs.finish(proc, timeout=120)
        except BaseException:
            procs.kill_session(proc)
            raise
        f = p.stdout.split()
        return {f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)}


def main():
    build, out_json, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scale = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    seconds = max(5, int(30 * scale))
    runs = {s.name: [] for s in SIDES}
    for r in range(rounds):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        for side in order:
            runs[side.name].append(one(build, side, seconds))
    med = {name: {k: statistics.median(x[k] for x in v) for k in FIGURES} for name, v in runs.items()}
    base = med["plain"]
    print("paced latency: redis-server, one connection of SET/GET at %d requests/s, %d s per run, "
          "%d interleaved rounds; medians over rounds, µs from send to reply" % (RATE, seconds, rounds))
    print("%-12s %9s %9s %9s %9s %9s %11s %12s %6s" % ("side", "p50", "p90", "p99", "p99.9", "max",
                                                         "sched p99", "sched p99.9", "late"))
    for s in SIDES:
        m = med[s.name]
        print("%-12s %9.1f %9.1f %9.1f %9.1f %9.1f %11.1f %12.1f %6.0f" % (
            s.name, m["p50_us"], m["p90_us"], m["p99_us"], m["p999_us"], m["max_us"], m["sched_p99_us"],
            m["sched_p999_us"], m["late_sends"]))
    fr = med["fr-default"]
    ratios = {k: fr[k] / base[k] for k in ("p50_us", "p99_us", "p999_us") if base[k] > 0}
    print("ratio fr-default/plain: p50 %.3f p99 %.3f p99.9 %.3f" % (
        ratios.get("p50_us", 0), ratios.get("p99_us", 0), ratios.get("p999_us", 0)))
    with open(out_json, "w") as f:
        json.dump({"rate": RATE, "seconds": seconds, "rounds": rounds, "runs": runs, "median": med,
                   "ratios": ratios, "sides": [s.to_json() for s in SIDES]}, f, indent=1)


if __name__ == "__main__":
    main()
