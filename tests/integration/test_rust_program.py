"""A Rust program under the preload (tests/programs/rust_split.rs, built here
with each of rustc's two symbol mangling schemes): frames carry Rust's own
names, not mangled symbols; the CPU split between its threads and the bytes
it allocated match what the program measured itself.
"""
import collections
import math
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT

# What no demangled frame may still contain: a v0 or legacy prefix, legacy's
# escapes, or legacy's hash suffix.
MANGLED = re.compile(r"^_R|^_ZN|\$LT\$|\$u7b\$|::h[0-9a-f]{16}$")


@pytest.fixture(scope="module", params=["legacy", "v0"])
def rust_program(request, tmp_path_factory):
    rustc = shutil.which("rustc")
    assert rustc, "rustc is missing: `make deps` installs it (a test dependency)"
    out = tmp_path_factory.mktemp("rust") / ("rust_split_" + request.param)
    cmd = [rustc, "-O", "-g", "--crate-name", "rust_split", "-o", str(out),
           os.path.join(ROOT, "tests", "programs", "rust_split.rs")]
    if request.param == "v0":
        cmd[1:1] = ["-C", "symbol-mangling-version=v0"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return request.param, out


def thread_names(fr, trace_dir):
    names = {}
    for e in fr.events(trace_dir):
        if e["type"] in ("thread.start", "thread.name") and e.get("name"):
            names[e["tid"]] = e["name"]
    return names


@pytest.mark.slow
def test_rust_names_cpu_split_and_allocations(fr, trace_dir, rust_program):
    scheme, program = rust_program
    proc = fr.run([program, "300"], trace_dir, env={"FLIGHTREC_CPU_HZ": 499})
    truth = dict(line.split(None, 1) for line in proc.stdout.splitlines())
    alpha_ns, beta_ns = int(truth["alpha_cpu_ns"]), int(truth["beta_cpu_ns"])

    samples = fr.events(trace_dir, "cpu.sample")
    frames = {f["function"] for e in samples for f in e["stack"] if f.get("function")}
    mangled = sorted(f for f in frames if MANGLED.search(f))
    assert not mangled, "%s: still mangled: %s" % (scheme, mangled[:10])

    def funcs(e):
        return [f.get("function") for f in e["stack"]]

    names = thread_names(fr, trace_dir)
    cpu = collections.Counter()
    for e in samples:
        cpu[names.get(e["tid"])] += e["period_ns"]
    alpha = [e for e in samples if names.get(e["tid"]) == "alpha"]
    beta = [e for e in samples if names.get(e["tid"]) == "beta"]
    # The burning function is on (nearly) every stack of its thread, by its
    # Rust path; the method keeps its module and type.
    assert sum("rust_split::spin_alpha" in funcs(e) for e in alpha) >= 0.9 * len(alpha) > 0
    # (v0 writes an inherent method as "<Type>::method", as rustc-demangle does.)
    crunch = {"rust_split::inner::Worker::crunch", "<rust_split::inner::Worker>::crunch"}
    assert sum(bool(crunch & set(funcs(e))) for e in beta) >= 0.9 * len(beta) > 0
    # The split between the two threads is the one the kernel measured.
    sampled = cpu["alpha"] / cpu["beta"]
    measured = alpha_ns / beta_ns
    assert 0.75 * measured <= sampled <= 1.33 * measured, (cpu, truth)
    for name, ns in (("alpha", alpha_ns), ("beta", beta_ns)):
        assert 0.7 * ns <= cpu[name] <= 1.3 * ns, (name, cpu, truth)
    # Naming Rust's frames (large compile units, long names) keeps the flush
    # thread busy for tens of ms while it also collects the samples: a
    # helper collects meanwhile (sampler_thread.h). Without it 35-59 of ~300
    # samples overflowed their SIGPROF rings; with it none, also beside two
    # busy loops. A few may still overflow on a machine busier than that.
    lost = sum(e["count"] for e in fr.events(trace_dir, "sampler.lost"))
    assert lost <= 0.05 * len(samples), (lost, len(samples))

    # churn() allocated 2000 x 100000 bytes; sampled allocations under it
    # estimate that. A sample of s bytes at mean gap R was taken with
    # probability 1 - e^(-s/R) and stands for s / (1 - e^(-s/R)) bytes (not
    # R: at s = R/5 that weighting comes out 9 % low on average).
    allocs = fr.events(trace_dir, "alloc.sample")
    churned = sum(e["size"] / -math.expm1(-e["size"] / e["sample_bytes"]) for e in allocs
                  if "rust_split::churn" in [f.get("function") for f in e["stack"]])
    assert 0.8 * 200e6 <= churned <= 1.2 * 200e6, churned
    # ... and `heap` puts them on the program's own line, not inside Rust's
    # alloc crate.
    src = os.path.join(ROOT, "tests", "programs", "rust_split.rs")
    vec_line = next(i for i, text in enumerate(open(src), 1) if "vec![i as u8" in text)
    top = fr.dump_json("heap", "--json", trace_dir)["sites"][0]
    assert (top["function"], top["line"]) == ("rust_split::churn", vec_line), top
    assert 0.8 * 200e6 <= top["allocated_bytes_est"] <= 1.2 * 200e6, top
    assert 1600 <= top["count_est"] <= 2400, top
