#!/usr/bin/python3
"""CPU sampling overhead: runs bench/micro/cpu_bench (fixed work) plain and under
the preload at 99 Hz and 999 Hz, interleaved A/B/C rounds so machine drift
hits every side alike, and prints the median ratio of the work's CPU time
(process CPU while the work runs, which includes the recorder's threads)."""
import os
import statistics
import subprocess
import sys
import tempfile

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "../build")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
bench = os.path.join(build, "bench", "cpu_bench")
lib = os.path.join(build, "libflightrec.so")
sides = {"plain": None, "99 Hz": "99", "999 Hz": "999"}


def run(hz, out):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLIGHTREC_")}
    if hz:
        env.update(LD_PRELOAD=lib, FLIGHTREC_OUTPUT=out, FLIGHTREC_CPU_HZ=hz)
    p = subprocess.run([bench], env=env, capture_output=True, text=True, check=True)
    f = p.stdout.split()
    return float(f[1]), float(f[3])


with tempfile.TemporaryDirectory(prefix="fr-cpu-bench-") as out:
    results = {name: [] for name in sides}
    for r in range(rounds):
        for name, hz in sides.items():
            results[name].append(run(hz, os.path.join(out, f"{r}-{hz}")))
    base_cpu = [c for _, c in results["plain"]]
    print(f"cpu_bench: {rounds} interleaved rounds, fixed work")
    for name in sides:
        cpu = [c for _, c in results[name]]
        wall = [w for w, _ in results[name]]
        ratios = [c / b for c, b in zip(cpu, base_cpu)]
        print(f"  {name:7s} cpu median {statistics.median(cpu):.3f} s  wall median {statistics.median(wall):.3f} s"
              f"  cpu ratio vs plain (median of rounds) {statistics.median(ratios):.3f}x")
