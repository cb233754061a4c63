#!/usr/bin/python3
"""Runs pipeline_bench under the preload at 100k records/s and reports the
flush thread's CPU share of one core and the encoded bytes per event, next
to a plain run for the producer's own cost."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "../build")
bench = os.path.join(build, "bench", "pipeline_bench")
lib = os.path.join(build, "libflightrec.so")
dump = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "flightrec-dump")
rate, secs = 100000, 5

def run(preload, out):
    env = dict(os.environ, FLIGHTREC_OUTPUT=out)
    if preload:
        env["LD_PRELOAD"] = lib
    t = subprocess.run(["/usr/bin/time", "-f", "%U %S", bench, str(rate), str(secs)], env=env,
                       capture_output=True, text=True, check=True)
    fields = dict(zip(t.stdout.split()[0::2], t.stdout.split()[1::2]))
    user, sys_ = (float(x) for x in t.stderr.strip().splitlines()[-1].split())
    return fields, user + sys_

out = tempfile.mkdtemp(prefix="fr-bench-")
try:
    plain, plain_cpu = run(False, out + "/plain")
    traced, traced_cpu = run(True, out + "/traced")
    flush = float(traced["flush_cpu_s"])
    wall = float(traced["wall_s"])
    info = json.loads(subprocess.run(["/usr/bin/python3", dump, "info", "--json", out + "/traced"],
                                     capture_output=True, text=True, check=True).stdout)
    names = info["events"].get("thread.name", 0)
    total = sum(info["events"].values())
    size = sum(os.path.getsize(os.path.join(out, "traced", f)) for f in os.listdir(out + "/traced"))
    print(f"pipeline: {traced['records']} records at {float(traced['rate']):.0f}/s for {wall:.1f} s")
    print(f"pipeline: flush thread CPU {flush:.3f} s = {100 * flush / wall:.2f}% of one core (goal <= 2%)")
    print(f"pipeline: process CPU plain {plain_cpu:.2f} s, preloaded {traced_cpu:.2f} s, ratio {traced_cpu / max(plain_cpu, 1e-9):.2f}x")
    print(f"pipeline: {names} thread.name events ({total} events in all), {size} bytes on disk "
          f"= {size / max(total, 1):.2f} bytes per event after zstd")
finally:
    shutil.rmtree(out, ignore_errors=True)
