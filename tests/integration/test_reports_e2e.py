"""End to end: run tests/programs/cpu_split under the preload (a "cpu-worker"
thread splitting CPU 70/30 between leaf_a and leaf_b under worker_main ->
outer_step, the main thread blocked in blocked_in_poll), then check that
every profile report shows the same real samples. The sampler's own
accuracy (the ±5 point split, chain completeness) is test_sampler_*'s job;
here the reports must agree with each other and with the decoded events."""
import gzip
import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

LEAVES = ("leaf_a", "leaf_b")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from conftest import Flightrec
    fr = Flightrec()
    out = tmp_path_factory.mktemp("cpu_split")
    fr.run([fr.program("cpu_split"), "1"], out, timeout=120)
    return fr, str(out)


def cpu_events(fr, out):
    return fr.events(out, "cpu.sample")


def leaf_counts_from_events(events):
    counts = {leaf: 0 for leaf in LEAVES}
    for e in events:
        if e["stack"] and e["stack"][0]["function"] in counts:
            counts[e["stack"][0]["function"]] += 1
    return counts


@pytest.mark.slow
def test_top_tree_folded_agree_with_the_events(recorded):
    fr, out = recorded
    events = cpu_events(fr, out)
    truth = leaf_counts_from_events(events)
    assert truth["leaf_a"] > 0 and truth["leaf_b"] > 0, "the recorder took no samples in the leaves"

    doc = fr.dump_json("top", "--json", out)
    fns = {f["function"]: f for f in doc["functions"]}
    for leaf in LEAVES:
        assert fns[leaf]["self"] == truth[leaf]
        assert fns[leaf]["file"].endswith("cpu_split.cc")
    assert fns["outer_step"]["total"] >= truth["leaf_a"] + truth["leaf_b"]
    assert doc["samples"] == len(events)

    tree = fr.dump_run("tree", "--thread", "cpu-worker", out).stdout.splitlines()
    cells = [line.split(" | ") for line in tree[1:]]
    by_name = {c[3].strip("┬─├╰│ "): (int(c[0].replace(",", "")), c[3]) for c in cells}
    assert tree[0].endswith("call tree")
    assert by_name["worker_main"][1] == "┬ worker_main"  # the start routine is the root
    for leaf in LEAVES:
        n, drawn = by_name[leaf]
        assert n == truth[leaf] and drawn.endswith("─ " + leaf)

    folded = fr.dump_run("folded", "--thread", "cpu-worker", out).stdout.splitlines()
    for leaf in LEAVES:
        n = sum(int(line.rsplit(" ", 1)[1]) for line in folded
                if line.rsplit(" ", 1)[0].split(";")[-1] == leaf)
        assert n == truth[leaf]
    assert any(line.startswith("worker_main;outer_step;leaf_a ") for line in folded)


def test_offcpu_is_led_by_the_blocking_function(recorded):
    fr, out = recorded
    if not fr.events(out, "offcpu.sample"):
        pytest.fail("no offcpu.sample events recorded")
    doc = fr.dump_json("top", "--kind", "offcpu", "--json", out)
    callers = [f for f in doc["functions"] if f["function"] == "blocked_in_poll"]
    assert callers and callers[0]["total_ns"] >= 0.5 * doc["total_ns"]


@pytest.mark.slow
def test_pprof_flame_chrome_show_the_leaves(recorded, tmp_path):
    fr, out = recorded
    truth = leaf_counts_from_events(cpu_events(fr, out))

    pb = tmp_path / "cpu.pb.gz"
    fr.dump_run("pprof", "-o", pb, out)
    assert gzip.decompress(pb.read_bytes())
    go = shutil.which("go")
    assert go, "go is missing: `make deps` installs golang-go (a test dependency)"
    proc = subprocess.run([go, "tool", "pprof", "-top", "-nodefraction=0", "-symbolize=none", str(pb)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PPROF_BINARY_PATH="/nonexistent"))
    assert proc.returncode == 0, proc.stderr
    flat = {}
    for line in proc.stdout.splitlines():
        p = line.split()
        if len(p) >= 6 and p[1].endswith("%") and p[4].endswith("%"):
            flat[p[5]] = p[0]
    for leaf in LEAVES:
        assert leaf in flat
    proc = subprocess.run([go, "tool", "pprof", "-raw", "-symbolize=none", str(pb)],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PPROF_BINARY_PATH="/nonexistent"))
    assert "thread:[cpu-worker]" in proc.stdout

    svg = tmp_path / "cpu.svg"
    fr.dump_run("flame", "-o", svg, out)
    root = ET.parse(svg).getroot()
    frames = {g.get("data-n"): g for g in root.iter("{http://www.w3.org/2000/svg}g")
              if g.get("class") == "f"}
    for leaf in LEAVES:
        assert "%d samples" % truth[leaf] in frames[leaf].get("data-info")

    js = tmp_path / "trace.json"
    fr.dump_run("chrome", "-o", js, out)
    doc = json.loads(js.read_text())
    evs = doc["traceEvents"]
    worker = [e["tid"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"
              and e["args"]["name"] == "cpu-worker"]
    assert len(worker) == 1
    for leaf in LEAVES:
        assert sum(1 for e in evs if e.get("cat") == "cpu" and e["name"] == leaf
                   and e["tid"] == worker[0]) == truth[leaf]
    off = [e for e in evs if e.get("cat") == "offcpu"]
    assert off and all(e["ph"] == "X" and e["dur"] >= 0 for e in off)
    assert any("blocked_in_poll" in e["args"]["stack"] for e in off)
