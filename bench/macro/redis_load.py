"""redis_load: redis-server (Debian's build, no persistence, loopback)
driven by redis-benchmark: SET, GET, LPUSH, LPOP with 20 clients and a
fixed request count per test. Throughput and p99 come from
redis-benchmark's --csv output (one row per test)."""
import csv
import io
import math
import subprocess

from . import procs
from . import server_run

TESTS = "set,get,lpush,lpop"
CLIENTS = 20


def server_command(port, rundir):
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", rundir, "--daemonize", "no", "--loglevel", "warning"]


def client_command(port, n):
    return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", TESTS, "-c", str(CLIENTS),
            "-n", str(n), "--csv"]


def parse_csv(text):
    """{test: {'rps': float, 'p99_ms': float, ...}} from redis-benchmark --csv."""
    rows = list(csv.DictReader(io.StringIO(text)))
    out = {}
    for r in rows:
        out[r["test"]] = {"rps": float(r["rps"]), "p50_ms": float(r["p50_latency_ms"]),
                          "p99_ms": float(r["p99_latency_ms"]), "max_ms": float(r["max_latency_ms"])}
    return out


def requests_per_test(scale):
    return max(1000, int(100000 * scale))


def run(side, ctx, rnd):
    port = procs.free_port()
    n = requests_per_test(ctx.scale)
    tag = "redis-r%d-%s" % (rnd, side.name)

    def drive():
        p = subprocess.run(procs.pinned(client_command(port, n), ctx.client_cpu), capture_output=True, text=True,
                           timeout=1800, check=True)
        tests = parse_csv(p.stdout)
        if len(tests) != len(TESTS.split(",")):
            raise RuntimeError("redis-benchmark printed %d tests, wanted %s:\n%s" % (len(tests), TESTS, p.stdout))
        total = n * len(tests)
        busy = sum(n / t["rps"] for t in tests.values())
        return {"requests": total, "tests": tests, "rps": total / busy,
                # one figure across the four tests: the geometric mean of their p99s
                "p99_ms": math.exp(sum(math.log(t["p99_ms"]) for t in tests.values()) / len(tests))}

    def stop(_server):
        subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "shutdown", "nosave"],
                       capture_output=True, timeout=60)

    return server_run.run(side, ctx, tag, server_command(port, ctx.rundir(tag)), "redis-server", port, drive, stop)


def describe(ctx):
    n = requests_per_test(ctx.scale)
    server = procs.pinned(["$SIDE"] + server_command("$PORT", "$DIR"), ctx.server_cpu)
    return {
        "server": " ".join(server).replace("--save  ", "--save '' "),
        "client": " ".join(procs.pinned(client_command("$PORT", n), ctx.client_cpu)),
        "stop": "redis-cli -p $PORT shutdown nosave",
        "requests_per_run": n * len(TESTS.split(",")),
    }
