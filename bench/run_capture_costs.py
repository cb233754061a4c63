#!/usr/bin/python3
"""What flightrec's captures cost the application thread that pays for them:

* one CPU sample: bench/micro/sample_cost_bench (fixed work, 24 frames deep) at a
  high rate under the perf sampler and under the SIGPROF fallback, against
  the preload with the sampler off; the added main-thread CPU divided by
  the cpu.sample events in the trace. The added process CPU per sample
  (sampler thread unwinding, flush thread encoding) is reported next to it.
* one sampled allocation: bench/micro/alloc_sample_bench with every allocation
  sampled (FLIGHTREC_ALLOC_SAMPLE_BYTES=1) against sampling off (=0);
  the difference per malloc+free pair.
* off-CPU recording per context switch: bench/micro/switch_cost_bench (two
  threads handing a byte back and forth over pipes) with FLIGHTREC_OFFCPU
  on and off, the CPU sampler on in both at 1 Hz; the added process CPU
  and wall time per voluntary context switch, and how many off-CPU samples
  made it into the trace against how many perf reported lost.

Rounds are interleaved (every side once per round, rotating order) and the
medians of the per-round differences are reported.
    run_capture_costs.py BUILD OUT_JSON [ROUNDS]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from macro import sides, trace_stats  # noqa: E402

HZ = 4999
OFF = dict(sides.FEATURES_OFF)
SAMPLE_SIDES = {
    "sampler off": dict(OFF),
    "perf": dict(OFF, FLIGHTREC_SAMPLER="perf", FLIGHTREC_CPU_HZ=str(HZ)),
    "sigprof": dict(OFF, FLIGHTREC_SAMPLER="sigprof", FLIGHTREC_CPU_HZ=str(HZ)),
}
SWITCH_SIDES = {
    "plain": None,
    "off-CPU off": dict(OFF, FLIGHTREC_SAMPLER="perf", FLIGHTREC_CPU_HZ="1"),
    "off-CPU on": dict(OFF, FLIGHTREC_SAMPLER="perf", FLIGHTREC_CPU_HZ="1", FLIGHTREC_OFFCPU="1"),
}
# A big ring so that sampling every allocation never drops (drops would make it look cheaper).
ALLOC_SIDES = {
    "plain": None,
    "rate 0": dict(OFF, FLIGHTREC_RING_BYTES="64M"),
    "rate 1": dict(OFF, FLIGHTREC_RING_BYTES="64M", FLIGHTREC_ALLOC_SAMPLE_BYTES="1"),
}


def run(build, binary, knobs, outdir):
    env = sides.clean_env()
    if knobs is not None:
        env.update(LD_PRELOAD=os.path.join(build, "libflightrec.so"), FLIGHTREC_OUTPUT=outdir, **knobs)
    p = subprocess.run([os.path.join(build, "bench", binary)], env=env, capture_output=True, text=True,
                       timeout=900, check=True)
    f = p.stdout.split()
    figures = {f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)}
    if knobs is not None:
        figures["trace"] = trace_stats.flightrec_summary(outdir)
        if not figures["trace"]["segments"]:
            print("warning: %s under %s left no segment in %s" % (binary, knobs, outdir), file=sys.stderr)
    return figures


def interleaved(build, binary, table, rounds, tmp):
    runs = {name: [] for name in table}
    names = list(table)
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            runs[name].append(run(build, binary, table[name], os.path.join(tmp, "%s-%d-%s" % (
                binary, r, name.replace(" ", "_")))))
    return runs


def med(xs):
    return statistics.median(xs) if xs else None


def main():
    build = os.path.abspath(sys.argv[1])
    out = sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    doc = {"rounds": rounds, "hz": HZ, "sample_sides": SAMPLE_SIDES, "alloc_sides": ALLOC_SIDES,
           "switch_sides": SWITCH_SIDES}
    with tempfile.TemporaryDirectory(prefix="fr-capture-", dir="/var/tmp") as tmp:
        s = interleaved(build, "sample_cost_bench", SAMPLE_SIDES, rounds, tmp)
        a = interleaved(build, "alloc_sample_bench", ALLOC_SIDES, rounds, tmp)
        w = interleaved(build, "switch_cost_bench", SWITCH_SIDES, rounds, tmp)
    doc["sample_runs"], doc["alloc_runs"], doc["switch_runs"] = s, a, w

    base = s["sampler off"]
    doc["cpu_sample"] = {}
    print("one CPU sample at %d Hz, fixed work 24 frames deep; median of %d interleaved rounds" % (HZ, rounds))
    for name in ("perf", "sigprof"):
        per_thread, per_process, samples, lost = [], [], [], []
        for b, m in zip(base, s[name]):
            n = m["trace"]["events"].get("cpu.sample", 0)
            samples.append(n)
            lost.append(sum(m["trace"]["dropped"].values()))
            if n:
                per_thread.append(1e6 * (m["thread_cpu_s"] - b["thread_cpu_s"]) / n)
                per_process.append(1e6 * (m["process_cpu_s"] - b["process_cpu_s"]) / n)
        fig = {"thread_us_per_sample": med(per_thread), "process_us_per_sample": med(per_process),
               "thread_us_lo": min(per_thread, default=None), "thread_us_hi": max(per_thread, default=None),
               "samples_median": med(samples), "dropped_median": med(lost),
               "work_thread_cpu_s_median": med([m["thread_cpu_s"] for m in s[name]])}
        doc["cpu_sample"][name] = fig
        if fig["thread_us_per_sample"] is None:
            print("  %-8s no cpu.sample events recorded (sampler unavailable?)" % name)
            continue
        print("  %-8s %.2f us on the sampled thread per sample (rounds %.2f..%.2f), %.2f us of process CPU; "
              "%d samples, %d dropped (medians)" % (name, fig["thread_us_per_sample"], fig["thread_us_lo"],
                                                     fig["thread_us_hi"], fig["process_us_per_sample"],
                                                     fig["samples_median"], fig["dropped_median"]))

    diffs = [m["median_pair_ns"] - b["median_pair_ns"] for b, m in zip(a["rate 0"], a["rate 1"])]
    hook = [m["median_pair_ns"] - b["median_pair_ns"] for b, m in zip(a["plain"], a["rate 0"])]
    sampled = [m["trace"]["events"].get("alloc.sample", 0) for m in a["rate 1"]]
    dropped = [sum(m["trace"]["dropped"].values()) for m in a["rate 1"]]
    doc["alloc_sample"] = {
        "ns_per_sampled_pair": med(diffs), "lo": min(diffs), "hi": max(diffs),
        "pair_ns": {name: med([m["median_pair_ns"] for m in a[name]]) for name in ALLOC_SIDES},
        "unsampled_hook_ns": med(hook), "samples_median": med(sampled), "dropped_median": med(dropped),
    }
    fa = doc["alloc_sample"]
    print("one sampled allocation (malloc(64)+free, 16 frames deep, every allocation sampled): +%.0f ns per pair "
          "(rounds %.0f..%.0f); pair %.1f ns plain, %.1f ns rate 0, %.1f ns rate 1; %d alloc.sample events, "
          "%d dropped (medians)" % (fa["ns_per_sampled_pair"], fa["lo"], fa["hi"], fa["pair_ns"]["plain"],
                                    fa["pair_ns"]["rate 0"], fa["pair_ns"]["rate 1"], fa["samples_median"],
                                    fa["dropped_median"]))

    cpu_us = [1e6 * (m["process_cpu_s"] - b["process_cpu_s"]) / m["switches"]
              for b, m in zip(w["off-CPU off"], w["off-CPU on"])]
    wall_us = [1e6 * (m["wall_s"] - b["wall_s"]) / m["switches"] for b, m in zip(w["off-CPU off"], w["off-CPU on"])]
    doc["offcpu_switch"] = {
        "cpu_us_per_switch": med(cpu_us), "cpu_lo": min(cpu_us), "cpu_hi": max(cpu_us),
        "wall_us_per_switch": med(wall_us), "wall_lo": min(wall_us), "wall_hi": max(wall_us),
        "switches_median": med([m["switches"] for m in w["off-CPU on"]]),
        "offcpu_samples_median": med([m["trace"]["events"].get("offcpu.sample", 0) for m in w["off-CPU on"]]),
        "dropped_median": med([sum(m["trace"]["dropped"].values()) for m in w["off-CPU on"]]),
        "dropped_kinds": sorted({k for m in w["off-CPU on"] for k in m["trace"]["dropped"]}),
    }
    fo = doc["offcpu_switch"]
    print("off-CPU recording per voluntary context switch (pipe ping-pong, 20 frames deep): +%.2f us process CPU "
          "(rounds %.2f..%.2f), +%.2f us wall (rounds %.2f..%.2f); %d switches, %d offcpu.sample events, "
          "%d dropped %s (medians)" % (fo["cpu_us_per_switch"], fo["cpu_lo"], fo["cpu_hi"], fo["wall_us_per_switch"],
                                       fo["wall_lo"], fo["wall_hi"], fo["switches_median"],
                                       fo["offcpu_samples_median"], fo["dropped_median"],
                                       ",".join(fo["dropped_kinds"])))
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
