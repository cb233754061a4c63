"""speedscope export (issue 32), checked by the speedscope viewer itself:
the exported file is loaded into the npm package's viewer (installed by
`make integration` under build/npm) in headless Chromium, and the test reads
what the viewer rendered — its profile list and its sandwich table of
functions with self and total weights — against what flightrec-dump's own
reports say about the same trace.

Chromium runs in a network namespace of its own (loopback only) where it
can, and with its background networking off in any case: the page is a
file:// URL and needs no network. If Chromium cannot start here the test
skips, saying why.
"""
import base64
import html
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD

VIEWER = os.path.join(BUILD, "npm", "node_modules", "speedscope", "dist", "release", "index.html")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
    "--disable-domain-reliability", "--disable-client-side-phishing-detection", "--metrics-recording-only",
    "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
    "--virtual-time-budget=15000",
]
UNITS_NS = {"ns": 1, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def isolated():
    """A prefix that runs a command with no network but loopback, when we may."""
    if os.geteuid() == 0 and shutil.which("unshare") and \
            subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0:
        return ["unshare", "--net"]
    return []


def render(speedscope_file, tmp_path, view="sandwich"):
    """The text the speedscope viewer shows for the file (tags stripped)."""
    browser = chromium()
    if not browser:
        pytest.skip("chromium is not installed (make deps installs it)")
    if not os.path.exists(VIEWER):
        pytest.skip("the speedscope viewer is not installed: run make %s" % os.path.relpath(VIEWER))
    # The viewer's own way of opening a local file (its CLI does the same):
    # a script that hands it the file, named in the URL's hash.
    loader = tmp_path / "load.js"
    data = base64.b64encode(open(speedscope_file, "rb").read()).decode()
    loader.write_text("speedscope.loadFileFromBase64(%s, %s)" % (json.dumps(os.path.basename(speedscope_file)),
                                                                  json.dumps(data)))
    url = "file://%s#localProfilePath=%s&view=%s" % (VIEWER, loader, view)
    cmd = isolated() + [browser] + CHROMIUM_FLAGS + ["--user-data-dir=%s" % (tmp_path / "profile"),
                                                     "--dump-dom", url]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.skip("chromium did not finish loading the viewer")
    if proc.returncode != 0 or "<html" not in proc.stdout:
        pytest.skip("chromium could not start here (exit %d): %s" % (proc.returncode, proc.stderr.strip()[-300:]))
    text = html.unescape(re.sub(r"<[^>]+>", " ", proc.stdout))
    return re.sub(r"\s+", " ", text)


def sandwich_row(text, function):
    """(total ns, self ns) of the function's row in the viewer's sandwich table."""
    # speedscope writes shares like "(12.5%)", "(<0.01%)" and, for a function
    # that is nearly all of the profile, "(>99%)".
    amount = r"([\d.]+)(ns|µs|ms|s) \([\d.<>]+%\) "
    m = re.search(amount + amount + re.escape(function) + " ", text + " ")
    assert m, "%s not in the viewer's table: %s" % (function, text[:2000])
    return float(m.group(1)) * UNITS_NS[m.group(2)], float(m.group(3)) * UNITS_NS[m.group(4)]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from conftest import Flightrec
    fr = Flightrec()
    out = tmp_path_factory.mktemp("split")
    fr.run([fr.program("cpu_split"), "1.0"], out)
    return fr, out


@pytest.mark.slow
def test_cpu_profile_per_thread_as_the_viewer_shows_it(recorded, tmp_path):
    fr, out = recorded
    path = tmp_path / "cpu.speedscope.json"
    fr.dump_run("speedscope", "-o", path, out)
    doc = json.loads(path.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    worker = [p for p in doc["profiles"] if p["name"].startswith("cpu-worker ")]
    assert len(worker) == 1 and worker[0]["type"] == "sampled"
    assert doc["profiles"][doc["activeProfileIndex"]] is not None
    # Samples are in time order, one per cpu.sample event of the thread.
    top = fr.dump_json("top", "--json", "--thread", "cpu-worker", out)
    assert len(worker[0]["samples"]) == top["samples"]

    text = render(path, tmp_path)
    # The viewer opened the heaviest thread's profile: the worker (the main thread only polls).
    assert re.search(r"Sandwich cpu-worker \(pid \d+, tid \d+\): CPU ", text), text[:600]
    # Its sandwich table agrees with our own top for the thread (the viewer
    # rounds to 2 decimals): leaf_a and leaf_b carry their self time, and
    # worker_main, at the root, carries everything and no self time - so the
    # stacks went in root first.
    rows = {r["function"]: r for r in top["functions"]}
    for leaf in ("leaf_a", "leaf_b"):
        total, self_ = sandwich_row(text, leaf)
        assert self_ == pytest.approx(rows[leaf]["self_ns"], rel=0.01), (leaf, self_, rows[leaf])
    total, self_ = sandwich_row(text, "worker_main")
    assert self_ == 0 and total == pytest.approx(top["total_ns"], rel=0.01), (total, top["total_ns"])


@pytest.mark.slow
def test_one_profile_per_thread(tmp_path):
    from conftest import Flightrec
    fr = Flightrec()
    out = tmp_path / "demo"
    fr.run([fr.program("demo_service")], out)
    path = tmp_path / "demo.speedscope.json"
    fr.dump_run("speedscope", "-o", path, out)
    doc = json.loads(path.read_text())
    names = [p["name"] for p in doc["profiles"]]
    # demo_service burns CPU on worker-0, worker-1 and echo-server.
    for thread in ("worker-0", "worker-1", "echo-server"):
        assert any(n.startswith(thread + " (pid ") for n in names), names
    text = render(path, tmp_path)
    # The viewer's profile list holds every thread, and shows which of them it opened.
    for i, name in enumerate(names, 1):
        assert "%d %s " % (i, name) in text, (name, text[:800])
    active = names[doc["activeProfileIndex"]]
    assert "%s (%d/%d)" % (active, doc["activeProfileIndex"] + 1, len(names)) in text, text[:800]
    # The opened profile is the heaviest thread's (worker-0 or worker-1, as the
    # scheduler had it): its table leads with what our own top says for that thread.
    per_thread = {n: fr.dump_json("top", "--json", "--thread", re.search(r"tid (\d+)\)", n).group(1), out)
                  for n in names}
    assert per_thread[active]["total_ns"] == max(t["total_ns"] for t in per_thread.values())
    top = per_thread[active]
    leader = top["functions"][0]["function"]
    total, self_ = sandwich_row(text, leader)
    assert self_ == pytest.approx(top["functions"][0]["self_ns"], rel=0.01), (leader, self_, top["functions"][0])


def test_offcpu_blocks_as_an_evented_profile(recorded, tmp_path):
    fr, out = recorded
    path = tmp_path / "offcpu.speedscope.json"
    fr.dump_run("speedscope", "--kind", "offcpu", "-o", path, out)
    doc = json.loads(path.read_text())
    active = doc["profiles"][doc["activeProfileIndex"]]
    assert active["type"] == "evented" and active["name"].startswith("cpu_split ")
    opens = sum(1 for e in active["events"] if e["type"] == "O")
    assert opens == sum(1 for e in active["events"] if e["type"] == "C") > 0
    ats = [e["at"] for e in active["events"]]
    assert ats == sorted(ats)
    text = render(path, tmp_path)
    # The main thread's blocking function, as the viewer shows it: the blocks' time on top.
    total, self_ = sandwich_row(text, "blocked_in_poll")
    assert total > 0.5e9, text[:1500]  # cpu_split's main thread waits out the worker's 1 s of CPU


@pytest.mark.parametrize("kind", ["cpu", "offcpu"])
def test_samples_past_the_memory_bound_give_the_same_file(recorded, kind):
    """Past SPILL_SAMPLES held samples, speedscope sorts them through a
    temporary file instead (issue 29: memory must not grow with the
    samples). Spilling from the first sample must write the very same file."""
    import io
    import sys
    from conftest import ROOT
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from flightrec_lib import speedscope, trace
    from flightrec_lib.commands import cmd_speedscope
    _, out = recorded
    texts = []
    for spill_at in (cmd_speedscope.SPILL_SAMPLES, 1):
        doc = speedscope.Document("same")
        cmd_speedscope.build(trace.Trace([str(out)]), kind, doc, spill_at=spill_at)
        buf = io.StringIO()
        doc.write(buf)
        texts.append(buf.getvalue())
    assert len(json.loads(texts[0])["profiles"]) >= 1
    assert texts[1] == texts[0]
