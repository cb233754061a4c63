#!/usr/bin/python3
"""Truth under bursts (issue 30): how close the allocation estimates stay to
the truth when samples arrive faster than the flush thread drains them.

tests/programs/alloc_burst runs a known pattern (20,000 x 4 KiB kept;
100,000 malloc/free pairs of 64 B - 8 KiB on each of two threads; 16 x
8 MiB; calloc, realloc, posix_memalign, aligned_alloc, new[]) and prints the
truth. Three sides, interleaved round by round:
  quiet 64K    FLIGHTREC_ALLOC_SAMPLE_BYTES=65536
  hog 64K      the same with a busy loop on every core (the flush thread,
               nice +10, is starved)
  quiet 512K   the default rate
For each run: samples dropped (rings full), each function's estimate
against its truth, and the total against the truth two ways side by side,
from the same trace: the sites alone (what reports said before dropped
samples kept their weight) and the sites plus "[unattributed: ring full]".

    run_burst_truth.py BUILD [ROUNDS]
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

PY = "/usr/bin/python3"
SIDES = (("quiet 64K", 65536, False), ("hog 64K", 65536, True), ("quiet 512K", 524288, False))
UNATTRIBUTED = "[unattributed: ring full]"


def run_once(build, rate, hog):
    dump = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "flightrec-dump")
    with tempfile.TemporaryDirectory(prefix="burst-") as out:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLIGHTREC_")}
        env.update({"LD_PRELOAD": os.path.join(build, "libflightrec.so"), "FLIGHTREC_OUTPUT": out,
                    "FLIGHTREC_SAMPLER": "off", "FLIGHTREC_ALLOC_SAMPLE_BYTES": str(rate)})
        hogs = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)] if hog else []
        try:
            proc = subprocess.run([os.path.join(build, "programs", "alloc_burst")], env=env, capture_output=True,
                                  text=True, check=True, timeout=300)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        truth = json.loads(proc.stdout.strip().splitlines()[-1])["functions"]
        heap = json.loads(subprocess.run([PY, dump, "heap", "--json", out], capture_output=True, text=True,
                                         check=True).stdout)
        info = json.loads(subprocess.run([PY, dump, "info", "--json", out], capture_output=True, text=True,
                                         check=True).stdout)
    got = {name: 0.0 for name in truth}
    for s in heap["sites"]:
        m = re.search(r"(\w+)\(", s.get("function_full") or s["function"])  # the short name drops "(...)"
        if m and m.group(1) in got:
            got[m.group(1)] += s["allocated_bytes_est"]
    total = sum(t["bytes"] for t in truth.values())
    return {
        "dropped": info["dropped"].get("alloc.sample", 0),
        "site_err": {n: 100.0 * (got[n] - truth[n]["bytes"]) / truth[n]["bytes"] for n in truth},
        "total_sites_err": 100.0 * (heap["allocated_bytes_est"] - heap["unattributed_bytes_est"] - total) / total,
        "total_err": 100.0 * (heap["allocated_bytes_est"] - total) / total,
    }


def span(values, fmt="%+.1f"):
    return "%s (%s .. %s)" % (fmt % statistics.median(values), fmt % min(values), fmt % max(values))


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    runs = {name: [] for name, _, _ in SIDES}
    for _ in range(rounds):
        for name, rate, hog in SIDES:
            runs[name].append(run_once(build, rate, hog))
    print("alloc_burst, %d rounds interleaved; median (min .. max) over rounds" % rounds)
    for name, _, _ in SIDES:
        rs = runs[name]
        print("\n%s" % name)
        print("  samples dropped:                    %s" % span([r["dropped"] for r in rs], "%d"))
        print("  total error, sites only (before):   %s %%" % span([r["total_sites_err"] for r in rs]))
        print("  total error, sites + unattributed:  %s %%" % span([r["total_err"] for r in rs]))
        for fn in rs[0]["site_err"]:
            print("  %-14s error:                %s %%" % (fn, span([r["site_err"][fn] for r in rs])))
        worst = [max(abs(v) for v in r["site_err"].values()) for r in rs]
        print("  worst site |error| per run:         %s %%" % span(worst, "%.1f"))


if __name__ == "__main__":
    main()
