"""The web viewer (`flightrec-dump serve`, issue 46) in a real browser.

Three real programs are recorded under the preload into one directory:
cpu_split (a worker whose CPU splits ~70/30 between leaf_a and leaf_b),
req_slow (a loopback server answering a known number of requests) and
alloc_known (allocations with known totals). The viewer is started on a
loopback port over that directory and headless Chromium (Debian's
`chromium`, driven as test_report_speedscope.py drives it: --dump-dom and
--screenshot, plus the DevTools protocol over a websocket for a click)
loads its pages. Checked: every page loads with no console message and no
script error; the flame graph's widest frames are the workload's hot
functions, in the proportions `top` reports; a click on a frame opens it
in the call tree; the requests page counts what the program served; a
saved report opens offline (no network at all) with the same content; bad
input (a damaged segment, an unreachable S3, a selection over the size
limit, hostile URLs) gives a page that says so and the server goes on.
Screenshots of each view go to build/viewer-screenshots/.
"""
import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import BUILD, PYTHON
from test_report_speedscope import CHROMIUM_FLAGS, chromium, isolated

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "s3"))
from s3_standin import StandIn  # noqa: E402

SHOTS = os.path.join(BUILD, "viewer-screenshots")
# Flags for pages served on loopback: the speedscope test's, but no virtual
# time budget (a page here needs no timers), a window big enough to see, and
# the console on stderr (every message is a failure: the pages log nothing).
# Names resolve nowhere but the loopback address the viewer listens on.
FLAGS = [f for f in CHROMIUM_FLAGS if not f.startswith(("--virtual-time-budget", "--host-resolver-rules"))] + [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--window-size=1400,1100", "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from conftest import Flightrec
    fr = Flightrec()
    out = tmp_path_factory.mktemp("viewer")
    fr.run([fr.program("cpu_split"), "1.0"], out, env={"FLIGHTREC_CPU_HZ": 1000})
    served = fr.run([fr.program("req_slow")], out, env={"FLIGHTREC_CPU_HZ": 1000})
    requests = int(re.search(r"req_slow: (\d+) requests", served.stdout).group(1))
    fr.run([fr.program("alloc_known"), "4"], out)
    pids = {}
    for seg in fr.dump_json("info", "--json", out)["segments"]:
        pids[seg["service"]] = seg["pid"]
    assert set(pids) == {"cpu_split", "req_slow", "alloc_known"}, pids
    return fr, out, pids, requests


class Viewer:
    def __init__(self, fr, sources, *args, env=None):
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLIGHTREC_", "LD_PRELOAD"))}
        base["AWS_EC2_METADATA_DISABLED"] = "true"
        base.update(env or {})
        self.proc = subprocess.Popen([PYTHON, fr.dump, "serve", "--port", "0"] + list(args) + [str(s) for s in sources],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base)
        self.lines = [self.proc.stdout.readline(), self.proc.stdout.readline()]
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", self.lines[0])
        assert m, (self.lines, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.port = int(m.group(1))
        self.base = "http://127.0.0.1:%d" % self.port

    def url(self, view, **params):
        return "%s/%s%s" % (self.base, view, ("?" + urllib.parse.urlencode(params)) if params else "")

    def get(self, view, headers=None, **params):
        """(status, headers, body text) of a page, fetched without a browser."""
        req = urllib.request.Request(self.url(view, **params), headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, dict(r.headers), r.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read().decode("utf-8")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read()


@pytest.fixture(scope="module")
def viewer(recorded):
    fr, out, _, _ = recorded
    v = Viewer(fr, [out])
    yield v
    v.stop()


def browser_or_skip():
    path = chromium()
    if not path:
        pytest.skip("chromium is not installed (make deps installs it)")
    return path


def load(url, tmp_path, shot=None, prefix=()):
    """Loads a page in headless Chromium: (DOM, console lines). shot: also
    writes a screenshot there."""
    browser = browser_or_skip()
    profile = tmp_path / ("profile-%d" % time.monotonic_ns())
    cmd = list(prefix) + [browser] + FLAGS + ["--user-data-dir=%s" % profile, "--dump-dom", url]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("chromium did not finish loading %s" % url)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        pytest.skip("chromium could not start here (exit %d): %s" % (proc.returncode, proc.stderr.strip()[-300:]))
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    if shot:
        os.makedirs(os.path.dirname(shot), exist_ok=True)
        subprocess.run(list(prefix) + [browser] + FLAGS + ["--user-data-dir=%s" % profile, "--screenshot=%s" % shot,
                                                           url], capture_output=True, timeout=180)
        assert os.path.getsize(shot) > 1000
    return proc.stdout, console


def text_of(dom):
    import html
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom))).strip()


def assert_clean(dom, console):
    assert not console, "console messages:\n" + "\n".join(console)
    m = re.search(r'<div id="page-errors"[^>]*data-count="(\d+)"', dom)
    assert m and m.group(1) == "0", dom[:3000]


def flame_svgs(dom):
    """The flame graph SVG documents the page embeds (as the browser got them)."""
    return [base64.b64decode(d).decode("utf-8") for d in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', dom)]


def frame_widths(svg):
    """{name: (widest frame's data-w, its rect x, y, width)} and the graph's total."""
    total = float(re.search(r'data-total="([^"]+)"', svg).group(1))
    out = {}
    for m in re.finditer(r'<g class="f" data-n="([^"]*)" data-info="[^"]*" data-x="([^"]+)" data-w="([^"]+)" '
                         r'data-d="(\d+)"[^>]*>.*?<rect x="([^"]+)" y="([^"]+)" width="([^"]+)"', svg):
        name, w = m.group(1), float(m.group(3))
        if name not in out or w > out[name][0]:
            out[name] = (w, float(m.group(5)), float(m.group(6)), float(m.group(7)))
    return out, total


# ------------------------------------------------------------------ pages

def test_every_view_loads_clean_and_is_photographed(recorded, viewer, tmp_path):
    fr, out, pids, _ = recorded
    views = [("traces", "", {}), ("flame", "flame", {"pid": pids["cpu_split"]}),
             ("top", "top", {"pid": pids["cpu_split"]}), ("timeline", "timeline", {"pid": pids["req_slow"]}),
             ("requests", "requests", {"pid": pids["req_slow"]}), ("sockets", "sockets", {"pid": pids["req_slow"]}),
             ("heap", "heap", {"pid": pids["alloc_known"]}), ("crashes", "crashes", {}),
             ("incidents", "incidents", {}),
             ("compare", "diff", {"a_pid": pids["cpu_split"], "b_pid": pids["req_slow"]}),
             ("report", "report", {"pid": pids["cpu_split"]})]
    for name, view, params in views:
        status, _, _ = viewer.get(view, **params)
        assert status == 200, (view, status)
        dom, console = load(viewer.url(view, **params), tmp_path, shot=os.path.join(SHOTS, name + ".png"))
        assert_clean(dom, console)
        assert 'data-view="%s"' % (view or "index") in dom
    # The index lists the three processes with their sizes and drop counts.
    dom, _ = load(viewer.url(""), tmp_path)
    assert re.search(r'<span id="n-processes">3</span>', dom), text_of(dom)[:1000]
    for service, pid in pids.items():
        assert re.search(r"%s\s*</td><td>[^<]*</td><td class=\"n\">%d</td>" % (service, pid), dom), service


def test_flame_graph_widest_frames_are_the_hot_functions(recorded, viewer, tmp_path):
    fr, out, pids, _ = recorded
    dom, console = load(viewer.url("flame", pid=pids["cpu_split"]), tmp_path)
    assert_clean(dom, console)
    svgs = flame_svgs(dom)
    assert len(svgs) == 1
    widths, total = frame_widths(svgs[0])
    ranked = sorted((w[0], n) for n, w in widths.items() if n != "all")[::-1]
    # cpu_split: worker_main -> outer_step -> leaf_a (~70%) / leaf_b (~30%); main only polls.
    assert [n for _, n in ranked[:4]] == ["worker_main", "outer_step", "leaf_a", "leaf_b"], ranked[:6]
    # In the proportions `top` reports for the same process (the same profile code).
    top = fr.dump_json("top", "--json", "--pid", pids["cpu_split"], out)
    rows = {r["function"]: r for r in top["functions"]}
    for leaf in ("leaf_a", "leaf_b"):
        assert widths[leaf][0] / total == pytest.approx(rows[leaf]["self_ns"] / top["total_ns"], abs=1e-6)
    # The call tree under the graph has the same paths.
    assert 'data-path="[&quot;worker_main&quot;,&quot;outer_step&quot;,&quot;leaf_a&quot;]"' in dom


def test_top_page_is_the_top_report(recorded, viewer, tmp_path):
    fr, out, pids, _ = recorded
    dom, console = load(viewer.url("top", pid=pids["cpu_split"]), tmp_path)
    assert_clean(dom, console)
    shown = re.findall(r'<span class="fn">([^<]*)</span>', dom)
    top = fr.dump_json("top", "--json", "--pid", pids["cpu_split"], out)
    assert shown[:5] == [r["function"] for r in top["functions"][:5]]
    assert shown[0] == "leaf_a"


def test_requests_page_counts_what_the_program_served(recorded, viewer, tmp_path):
    fr, out, pids, served = recorded
    dom, console = load(viewer.url("requests", pid=pids["req_slow"]), tmp_path)
    assert_clean(dom, console)
    # req_slow's one client connection sends `served` requests; the server side sees each one.
    server = re.search(r'<td>server</td><td class="n"><span class="role-count">(\d+)</span>', dom)
    assert server and int(server.group(1)) == served, text_of(dom)[:1500]
    doc = fr.dump_json("requests", "--json", "--pid", pids["req_slow"], out)
    count = int(re.search(r'<span id="request-count">(\d+)</span>', dom).group(1))
    assert count == len(doc["requests"])
    # The slowest server-side requests go through slow_path (15 ms of CPU each): their trees say so.
    dom, console = load(viewer.url("requests", pid=pids["req_slow"], role="server"), tmp_path)
    assert_clean(dom, console)
    slowest = dom.split("<h2>Slowest", 1)[1]
    # (CPU samples count CPU time: ~15 per slow request at 1000 Hz, however busy the machine.
    # Which request is the very slowest is the scheduler's: on a busy machine a preempted
    # fast one can be; so slow_path must be in the trees the section shows, not the first.)
    trees = slowest.split('<h3 class="slow">')[1:]
    assert trees and any("slow_path" in t for t in trees), text_of(slowest)[:1500]


def test_heap_page_lists_the_leaking_sites(recorded, viewer, tmp_path):
    fr, out, pids, _ = recorded
    dom, console = load(viewer.url("heap", pid=pids["alloc_known"]), tmp_path)
    assert_clean(dom, console)
    doc = fr.dump_json("heap", "--json", "--pid", pids["alloc_known"], out)
    shown = re.findall(r'<span class="fn">([^<]*)</span>', dom)
    assert shown[:5] == [s["function"] for s in doc["sites"][:5]]


def test_compare_page_is_the_diff_report(recorded, viewer, tmp_path):
    fr, out, pids, _ = recorded
    dom, console = load(viewer.url("diff", a_pid=pids["cpu_split"], b_pid=pids["req_slow"]), tmp_path)
    assert_clean(dom, console)
    seg = {s: [p for p in fr.segments(out) if s in os.path.basename(p)][0] for s in pids}
    doc = fr.dump_json("diff", "--json", seg["cpu_split"], seg["req_slow"])
    shown = re.findall(r'<span class="fn">([^<]*)</span>', dom)
    assert shown[:6] == [r["function"] for r in doc["functions"][:6]]
    # Drawn from B (req_slow): its frames, coloured by change; A's hot leaf is not drawn.
    widths, _ = frame_widths(flame_svgs(dom)[0])
    assert "slow_path" in widths and "leaf_a" not in widths


def test_click_on_a_frame_opens_it_in_the_call_tree(recorded, viewer, tmp_path):
    fr, out, pids, _ = recorded
    with DevTools(tmp_path) as dt:
        dt.open(viewer.url("flame", pid=pids["cpu_split"]))
        svg = flame_svgs(dt.eval("document.documentElement.outerHTML"))[0]
        w, x, y, width = frame_widths(svg)[0]["leaf_a"]
        box = dt.eval("JSON.stringify(document.querySelector('iframe.flame').getBoundingClientRect())")
        box = json.loads(box)
        dt.click(box["left"] + 1 + x + width / 2, box["top"] + 1 + y + 8)
        deadline = time.monotonic() + 60
        focus = "-"
        while time.monotonic() < deadline and focus == "-":
            focus = dt.eval("document.getElementById('tree-focus').textContent")
            time.sleep(0.1)
        assert focus == "worker_main > outer_step > leaf_a"
        assert dt.eval("document.querySelector('details.hit').getAttribute('data-path')") == \
            '["worker_main","outer_step","leaf_a"]'
        assert dt.eval("document.getElementById('page-errors').getAttribute('data-count')") == "0"


def test_saved_report_opens_offline_with_the_same_content(recorded, viewer, tmp_path):
    fr, out, pids, served = recorded
    params = {"pid": "%d,%d" % (pids["cpu_split"], pids["req_slow"])}
    status, headers, live = viewer.get("report", **params)
    assert status == 200
    status, headers, saved = viewer.get("report", save="1", **params)
    assert status == 200 and "attachment" in headers.get("Content-Disposition", "")
    path = tmp_path / "incident.html"
    path.write_text(saved, encoding="utf-8")
    # No network at all (a namespace of its own where we may; CSP in the page in any case).
    dom, console = load("file://%s" % path, tmp_path, prefix=isolated(),
                        shot=os.path.join(SHOTS, "saved-report.png"))
    assert_clean(dom, console)
    assert "<header" in dom and "saved from flightrec-dump serve" in dom
    body = lambda doc: re.sub(r"<header.*?</header>", "", doc.split("<main>", 1)[1], flags=re.S)
    assert body(dom) == body(live) or text_of(body(dom)) == text_of(body(live))
    # What it shows: the CPU flame graph with the hot function, the request count.
    widths, _ = frame_widths(flame_svgs(dom)[0])
    assert "leaf_a" in widths
    assert int(re.search(r'<span id="request-count">(\d+)</span>', dom).group(1)) >= served
    # Nothing in it points anywhere but into itself.
    assert not re.search(r'(src|href)="(https?:|//)', saved)


# ------------------------------------------------------------------ bad input

def test_damaged_segment_gives_a_page_that_says_so(recorded, tmp_path):
    fr, out, pids, _ = recorded
    bad = tmp_path / "bad"
    bad.mkdir()
    seg = [s for s in fr.segments(out) if "cpu_split" in s][0]
    data = bytearray(open(seg, "rb").read())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0x5A
    (bad / os.path.basename(seg)).write_bytes(bytes(data))
    (bad / "junk.seg").write_bytes(b"not a segment at all")
    v = Viewer(fr, [bad])
    try:
        for view in ("", "flame", "timeline", "report"):
            status, _, page = v.get(view)
            assert status == 200, (view, status, text_of(page)[:500])
            assert '<div class="problems">' in page and "junk.seg" in page, view
            assert "damaged block" in page, (view, text_of(page)[:1500])
            assert "Traceback" not in page
        dom, console = load(v.url("flame"), tmp_path, shot=os.path.join(SHOTS, "damaged.png"))
        assert_clean(dom, console)
    finally:
        assert "Traceback" not in v.stop()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    return port


def test_unreachable_s3_gives_a_page_that_says_so(recorded, tmp_path):
    fr, _, _, _ = recorded
    env = {"FLIGHTREC_S3_ENDPOINT": "http://127.0.0.1:%d" % free_port(), "FLIGHTREC_S3_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "AKIDVIEWER", "AWS_SECRET_ACCESS_KEY": "viewer/secret",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent"}
    v = Viewer(fr, ["s3://viewer-bucket/flightrec"], env=env)
    try:
        for view in ("", "flame"):
            status, _, page = v.get(view)
            assert status == 502, (view, status)
            assert "Cannot read the source" in page and "Could not connect" in page, text_of(page)[:800]
            assert "viewer/secret" not in page and "Traceback" not in page
        dom, console = load(v.url(""), tmp_path, shot=os.path.join(SHOTS, "s3-unreachable.png"))
        assert_clean(dom, console)
        assert 'id="error"' in dom
    finally:
        assert "Traceback" not in v.stop()


def test_s3_browsing_lists_before_downloading(recorded, tmp_path):
    fr, out, pids, _ = recorded
    standin = StandIn("viewer-it", "AKIDVIEWER", "viewer/secret", max_lifetime=600).start()
    try:
        with standin.lock:
            for f in fr.segments(out):
                name = os.path.basename(f)
                service = [s for s in pids if s in name][0]
                key = "flightrec/%s/2026-12-03/host-a/%s" % (service, name)
                standin.objects_by_key[key] = open(f, "rb").read()
        env = {"FLIGHTREC_S3_ENDPOINT": standin.endpoint, "FLIGHTREC_S3_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "AKIDVIEWER", "AWS_SECRET_ACCESS_KEY": "viewer/secret",
               "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent"}
        v = Viewer(fr, ["s3://viewer-it/flightrec"], env=env)
        try:
            status, _, page = v.get("")
            assert status == 200, text_of(page)[:800]
            # Prefixes to browse, and the processes the keys name, with nothing downloaded.
            for service, pid in pids.items():
                assert "%s/" % service in page and ">%d<" % pid in page
            assert not [r for r in standin.requests() if r.get("op") == "GetObject"]
            status, _, page = v.get("", prefix="cpu_split/")
            assert status == 200 and 'id="n-processes">1<' in page
            # Opening one process downloads its segments only.
            status, _, page = v.get("top", pid=pids["cpu_split"])
            assert status == 200 and '<span class="fn">leaf_a</span>' in page
            got = [r["path"] for r in standin.requests() if r.get("op") == "GetObject" and r.get("status") == 200]
            assert got and all("cpu_split" in p for p in got), got
            dom, console = load(v.url(""), tmp_path, shot=os.path.join(SHOTS, "s3-index.png"))
            assert_clean(dom, console)
            status, _, page = v.get("", prefix="../x")
            assert status == 502 and "bad prefix" in page
        finally:
            assert "Traceback" not in v.stop()
    finally:
        standin.stop()


def test_selection_over_the_size_limit_is_refused_with_a_page(recorded, tmp_path):
    fr, out, pids, _ = recorded
    sizes = {s["pid"]: s["size"] for s in fr.dump_json("info", "--json", out)["segments"]}
    # A limit between the smallest process and the whole directory.
    limit_mb = (min(sizes.values()) + 1) / float(1 << 20)
    v = Viewer(fr, [out], "--max-mb", "%.6f" % limit_mb)
    try:
        status, _, page = v.get("flame")
        assert status == 413 and "Selection too large" in page and "narrow it" in page
        small = min(sizes, key=sizes.get)
        status, _, page = v.get("flame", pid=small)
        assert status == 200, text_of(page)[:500]
        status, _, page = v.get("")  # the catalog still lists everything
        assert status == 200 and 'id="n-processes">3<' in page
    finally:
        assert "Traceback" not in v.stop()


def test_crashes_page_shows_a_real_crash_with_its_stack(tmp_path):
    """crash_test segv dies under the preload: the crashes page names the
    signal, the process and the stack `info` reports, frame by frame."""
    from conftest import Flightrec
    fr = Flightrec()
    out = tmp_path / "crash"
    proc = fr.run([fr.program("crash_test"), "segv"], out, check=False)
    assert proc.returncode == -11, proc.stderr
    (crash,) = fr.dump_json("info", "--json", out)["crashes"]
    v = Viewer(fr, [out])
    try:
        dom, console = load(v.url("crashes"), tmp_path, shot=os.path.join(SHOTS, "crashes-segv.png"))
        assert_clean(dom, console)
        assert re.search(r'<h2 class="crash">crash: SIGSEGV \(code [^)]*, fault address 0x0\) in pid %d ' % crash["pid"],
                         dom), text_of(dom)[:800]
        table = dom.split('<h2 class="crash">', 1)[1].split("</table>", 1)[0]
        shown = [html_unescape(f) for f in re.findall(r"<tr><td class=\"n\">\d+</td><td>([^<]*)</td>", table)]
        assert shown == [f["function"] for f in crash["stack"]] and len(shown) >= 3, (shown, crash["stack"])
        # The Traces page counts it and links to it.
        _, _, body = v.get("")
        assert '<a href="/crashes">1 crash</a>' in body
    finally:
        v.stop()


def html_unescape(text):
    import html
    return html.unescape(text)


def test_traces_page_filters_as_the_reports_select(recorded, viewer):
    """service/host/pid on the Traces page list what --service/--host/--pid select."""
    fr, out, pids, _ = recorded
    for params, want in (({}, set(pids)), ({"service": "cpu_*"}, {"cpu_split"}),
                         ({"pid": "%d,%d" % (pids["req_slow"], pids["alloc_known"])}, {"req_slow", "alloc_known"}),
                         ({"host": "no-such-host"}, set())):
        status, _, body = viewer.get("", **params)
        assert status == 200
        listed = set(re.findall(r"<tr><td>([^<]*)</td>", body.split("<h2>Processes</h2>", 1)[1]))
        assert listed == want, (params, listed)
        assert '<span id="n-processes">%d</span>' % len(want) in body
        args = sum((["--" + k, v] for k, v in params.items()), [])
        segs = fr.dump_json("info", "--json", *args, out)["segments"] if want else []
        assert '<span id="n-segments">%d</span>' % len(segs) in body


def test_hostile_requests_read_nothing_outside_the_sources(viewer):
    for path in ("/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/etc/passwd", "//etc/passwd"):
        req = urllib.request.Request(viewer.base + path)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, body = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read().decode()
        assert status == 404 and "root:" not in body, path
    status, _, page = viewer.get("flame", path="/etc/passwd")
    assert status == 400 and "unknown parameter" in page
    status, _, page = viewer.get("flame", pid="1;id")
    assert status == 400 and "bad pid" in page
    status, _, page = viewer.get("flame", kind="cpu", thread="<script>alert(1)</script>")
    assert "<script>alert(1)" not in page
    # Another site's page resolving its name to 127.0.0.1 is refused (DNS rebinding).
    status, _, page = viewer.get("", headers={"Host": "attacker.example:%d" % viewer.port})
    assert status == 403
    req = urllib.request.Request(viewer.url(""), method="POST", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=60)
    assert e.value.code == 405
    # And it still answers.
    assert viewer.get("")[0] == 200


def test_bind_to_a_shared_address_says_who_can_reach_it(recorded, viewer):
    """--bind 0.0.0.0: the second line says that anyone who can reach the
    address can read the traces; reached here only through 127.0.0.1, it
    serves the same page (the Host check is for loopback binds only). The
    default bind says only this machine can reach it."""
    fr, out, pids, _ = recorded
    assert viewer.lines[1].startswith("only this machine can reach it (bound to 127.0.0.1)"), viewer.lines
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLIGHTREC_", "LD_PRELOAD"))}
    proc = subprocess.Popen([PYTHON, fr.dump, "serve", "--port", "0", "--bind", "0.0.0.0", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        m = re.match(r"flightrec viewer: http://0\.0\.0\.0:(\d+)/ over ", lines[0])
        assert m, (lines, proc.stderr.read() if proc.poll() is not None else "")
        assert lines[1].strip() == "bound to 0.0.0.0: anyone who can reach this address and port can read these " \
                                   "traces (no login, no TLS)", lines
        with urllib.request.urlopen("http://127.0.0.1:%s/" % m.group(1), timeout=300) as r:
            body = r.read().decode("utf-8")
        assert r.status == 200 and '<span id="n-processes">%d</span>' % len(pids) in body, text_of(body)[:600]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in proc.stderr.read()


# ------------------------------------------------------------------ DevTools

class DevTools:
    """Headless Chromium driven over the DevTools protocol: a websocket
    client on the standard library (no Playwright, no download)."""

    def __init__(self, tmp_path):
        self.browser = browser_or_skip()
        self.tmp_path = tmp_path

    def __enter__(self):
        flags = [f for f in FLAGS if f not in ("--enable-logging=stderr", "--v=0")]
        self.proc = subprocess.Popen([self.browser] + flags + [
            "--user-data-dir=%s" % (self.tmp_path / "devtools-profile"), "--remote-debugging-port=0",
            "--remote-allow-origins=*", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        port = None
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                pytest.skip("chromium could not start here")
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
        assert port, "chromium did not say where DevTools listens"
        for _ in range(100):
            targets = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=30).read())
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                break
            time.sleep(0.1)
        self.ws = _WebSocket(pages[0]["webSocketDebuggerUrl"])
        self.next_id = 0
        return self

    def __exit__(self, *exc):
        self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send({"id": self.next_id, "method": method, "params": params})
        while True:
            msg = self.ws.recv()
            if msg.get("id") == self.next_id:
                assert "error" not in msg, msg
                return msg.get("result", {})

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    def open(self, url):
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.eval("document.readyState + ':' + location.href") == "complete:" + url:
                # The flame graph's frame has its own load.
                if self.eval("Array.from(document.querySelectorAll('iframe')).every(function (f) {"
                             "return f.getBoundingClientRect().height > 0; })"):
                    time.sleep(0.5)
                    return
            time.sleep(0.1)
        pytest.fail("page did not load: %s" % url)

    def click(self, x, y):
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


class _WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=120)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           % (u.path, u.hostname, u.port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            assert chunk, "websocket handshake cut short"
            head += chunk
        assert b" 101 " in head.split(b"\r\n", 1)[0], head

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "websocket closed"
            data += chunk
        return data

    def send(self, obj):
        data = json.dumps(obj).encode()
        mask = os.urandom(4)
        head = bytearray([0x81])
        if len(data) < 126:
            head.append(0x80 | len(data))
        elif len(data) < 65536:
            head.append(0x80 | 126)
            head += len(data).to_bytes(2, "big")
        else:
            head.append(0x80 | 127)
            head += len(data).to_bytes(8, "big")
        self.sock.sendall(bytes(head) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._read(2), "big")
            elif n == 127:
                n = int.from_bytes(self._read(8), "big")
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode in (0x1, 0x0):
                message += payload
                if b0 & 0x80:
                    return json.loads(message.decode("utf-8"))
            elif opcode == 0x8:
                raise AssertionError("websocket closed by chromium")
            # ping/pong and others: ignored

    def close(self):
        self.sock.close()

