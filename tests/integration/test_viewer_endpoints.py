"""The web viewer's endpoint, trace-id and ClickHouse views (issue 46, with
the endpoints of issue 41 and the fleet database of issue 42).

One real program is recorded under the preload: a Python http.server and
its own client in one process (test_fleet_clickhouse.HTTP_PAIR) sending 12
requests: 4 `GET /work/N` (50 ms of CPU each, one downstream call to
`/users/0` each, a 4 MiB malloc) and 8 `GET /users/N`, every other one with
a W3C traceparent and an x-request-id. So the server saw exactly 4
`GET /work/:id` and 12 `GET /users/:id` requests, and so did the clients.

Checked, through the viewer's pages (headless Chromium where a page is
looked at, urllib where only its HTML is compared): the requests page's
By endpoint table is `requests --by endpoint` (the counts the program
sent); an endpoint's links lead to its requests and to the profile of the
samples taken inside them, which is `top --endpoint`; a trace id (and an
x-request-id) finds its requests with their trace context; the compare
page takes an endpoint. Then the same pages over `serve --clickhouse URL`
after `load`: the same numbers as from the files; a server that went away
gives a page, not a hang. The timeline over ClickHouse (fleet_timeline.py)
draws the same thread tracks, the same requests (the 32 the program made:
12 sent by its client, 4 downstream calls, each seen by client and server)
and the same CPU and off-CPU samples as the timeline of the files, cut at
the same event limit with the same count left out; its Chrome JSON (the
viewer's download and `chrome --clickhouse`) holds the same.

Crashes and incidents from ClickHouse: test_fleet_clickhouse's
incident_fleet (a SIGSEGV in window mode, a recovered fault then an abort,
slow requests in window mode, a process ended by SIGPIPE, all recorded for
real and loaded): the crashes and incidents pages, and every incident
selected with incident=N, show the same as a viewer over the files.
"""
import html
import json
import os
import re
import subprocess

import pytest

import clickhouse_server
from conftest import PYTHON
from test_fleet_clickhouse import HTTP_PAIR, incident_fleet  # noqa: F401 (a fixture)
from test_viewer import SHOTS, Viewer, assert_clean, load, text_of

WORK, USERS = "GET /work/:id", "GET /users/:id"
TRACE3 = "%032x" % (0xabc000 + 3)   # request 3 (a /work/ one) sent this trace id, x-request-id req-3


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    from conftest import Flightrec
    fr = Flightrec()
    d = tmp_path_factory.mktemp("viewer-endpoints") / "trace"
    d.mkdir()
    fr.run([PYTHON, "-c", HTTP_PAIR], d, env={"FLIGHTREC_SERVICE": "web", "FLIGHTREC_TRACE_CONTEXT": "1",
                                               "FLIGHTREC_CPU_HZ": "1000"})
    return fr, d


@pytest.fixture(scope="module")
def viewer(web):
    fr, d = web
    v = Viewer(fr, [d])
    yield v
    v.stop()


def endpoint_rows(dom):
    """{(role, endpoint): count} of the page's By endpoint table."""
    table = dom.split('<div id="by-endpoint">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr><td>([^<]*)</td><td><span class="ep">([^<]*)</span></td><td class="n">'
                      r'<span class="ep-count">(\d+)</span>', table)
    return {(html.unescape(r), html.unescape(e)): int(n) for r, e, n in rows}


def page_samples(dom):
    m = re.search(r"<p>([\d,]+) samples, ", dom)
    return int(m.group(1).replace(",", "")) if m else None


def check_requests_by_endpoint(fr, v, tmp_path, report_args, shot=None):
    dom, console = load(v.url("requests"), tmp_path, shot=shot)
    assert_clean(dom, console)
    rows = endpoint_rows(dom)
    doc = fr.dump_json("requests", "--by", "endpoint", "--json", *report_args)
    assert rows == {(r["role"], r["endpoint"]): r["count"] for r in doc["endpoints"]}
    # what the program sent, exactly, on both ends
    assert rows == {("server", WORK): 4, ("server", USERS): 12, ("client", WORK): 4, ("client", USERS): 12}, rows
    # the table is in the report's order (total time) and each named endpoint links to its views
    shown = re.findall(r'<span class="ep">([^<]*)</span></td><td class="n"><span class="ep-count">', dom)
    assert [html.unescape(e) for e in shown] == [r["endpoint"] for r in doc["endpoints"]]
    assert 'href="/flame?endpoint=GET+%2Fwork%2F%3Aid"' in dom and 'href="/top?endpoint=GET+%2Fusers%2F%3Aid"' in dom
    return dom


def check_endpoint_views(fr, v, tmp_path, report_args):
    # The endpoint's requests: only those, counted as the report counts them.
    _, _, body = v.get("requests", endpoint="GET /work/*", role="server")
    assert '<span id="request-count">4</span>' in body, text_of(body)[:1500]
    assert set(re.findall(r'<span class="ep">([^<]*)</span>', body.split("<h2>Slowest", 1)[1])) == {"GET /work/:id"}
    # The profile inside an endpoint's requests is `top --endpoint`: same samples, same functions first.
    for ep in ("GET /work/*", "GET /users/*"):
        status, _, body = v.get("top", endpoint=ep)
        assert status == 200
        doc = fr.dump_json("top", "--json", "--endpoint", ep, *report_args)
        if doc["samples"]:
            assert page_samples(body) == doc["samples"], (ep, text_of(body)[:800])
            shown = [html.unescape(f) for f in re.findall(r'<span class="fn">([^<]*)</span>', body)]
            assert shown[:5] == [f["function"] for f in doc["functions"][:5]]
        else:
            assert "only samples taken on a request's handling thread" in html.unescape(body)
    # /work/ burned 4 x 50 ms of CPU inside its requests: far more CPU there than in /users/.
    work = fr.dump_json("top", "--json", "--endpoint", "GET /work/*", *report_args)["total_ns"]
    users = fr.dump_json("top", "--json", "--endpoint", "GET /users/*", *report_args)["total_ns"]
    assert work >= 100_000_000 and work > 5 * users, (work, users)
    # The compare page over one endpoint, two windows.
    status, _, body = v.get("diff", endpoint="GET /work/*", a_to="0.4s", b_from="0.4s")
    assert status == 200 and "inside GET /work/* requests" in html.unescape(body), text_of(body)[:1000]


def check_trace_id(fr, v, tmp_path, report_args, shot=None):
    dom, console = load(v.url("requests", trace_id=TRACE3), tmp_path, shot=shot)
    assert_clean(dom, console)
    assert '<span id="request-count">2</span>' in dom   # the client's and the server's view of request 3
    text = text_of(dom)
    assert "2 requests of this trace" in text and "request id req-3" in text
    assert text.count("trace %s parent span %016x sampled" % (TRACE3, 0x1234 + 3)) == 2, text[:2000]
    doc = fr.dump_json("requests", "--json", "--trace-id", TRACE3, *report_args)
    assert sorted(r["role"] for r in doc["requests"]) == ["client", "server"]
    assert {r["endpoint"] for r in doc["requests"]} == {WORK}
    # by x-request-id, and a prefix of the trace id
    _, _, body = v.get("requests", trace_id="req-5")
    assert '<span id="request-count">2</span>' in body and "request id <code>req-5</code>" in body
    _, _, body = v.get("requests", trace_id=TRACE3[:28])
    assert TRACE3 in body
    status, _, body = v.get("requests", trace_id="f" * 32)
    assert status == 200 and "no request with trace id" in html.unescape(body)


# ------------------------------------------------------------------ from the files

def test_requests_page_by_endpoint_is_the_report(web, viewer, tmp_path):
    fr, d = web
    check_requests_by_endpoint(fr, viewer, tmp_path, [d], shot=os.path.join(SHOTS, "requests-by-endpoint.png"))


def test_endpoint_links_lead_to_that_endpoints_requests_and_profile(web, viewer, tmp_path):
    fr, d = web
    check_endpoint_views(fr, viewer, tmp_path, [d])
    dom, console = load(viewer.url("flame", endpoint="GET /work/*"), tmp_path,
                        shot=os.path.join(SHOTS, "flame-endpoint.png"))
    assert_clean(dom, console)


def test_trace_id_finds_its_requests(web, viewer, tmp_path):
    fr, d = web
    check_trace_id(fr, viewer, tmp_path, [d], shot=os.path.join(SHOTS, "requests-trace-id.png"))


def test_saved_requests_page_keeps_the_endpoint_table(web, viewer, tmp_path):
    _, _, live = viewer.get("requests")
    status, headers, saved = viewer.get("requests", save="1")
    assert status == 200 and "attachment" in headers.get("Content-Disposition", "")
    path = tmp_path / "saved.html"
    path.write_text(saved)
    dom, console = load("file://%s" % path, tmp_path)
    assert_clean(dom, console)
    assert endpoint_rows(dom) == endpoint_rows(live)


# ------------------------------------------------------------------ from ClickHouse

@pytest.mark.skipif(not clickhouse_server.available(), reason="clickhouse-server or clickhouse_driver missing "
                    "(make deps)")
def test_clickhouse_source_shows_what_the_files_show(web, tmp_path):
    fr, d = web
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0, database="fleet")
        load_run = subprocess.run([PYTHON, fr.dump, "load", "--clickhouse", url, str(d)], capture_output=True,
                                  text=True, timeout=600)
        assert load_run.returncode == 0, load_run.stderr
        v = Viewer(fr, [], "--clickhouse", url)
        try:
            assert "over clickhouse://127.0.0.1:" in v.lines[0]
            dom, console = load(v.url(""), tmp_path, shot=os.path.join(SHOTS, "clickhouse-traces.png"))
            assert_clean(dom, console)
            assert '<span id="n-processes">1</span>' in dom and "<td>web</td>" in dom
            # the same tables as from the files (the reports compare them with the files too)
            ch = ["--clickhouse", url]
            check_requests_by_endpoint(fr, v, tmp_path, ch, shot=os.path.join(SHOTS, "clickhouse-requests.png"))
            check_endpoint_views(fr, v, tmp_path, ch)
            check_trace_id(fr, v, tmp_path, ch)
            assert fr.dump_json("top", "--json", "--endpoint", "GET /work/*", *ch) == \
                fr.dump_json("top", "--json", "--endpoint", "GET /work/*", d)
            for view in ("flame", "top", "heap", "sockets", "report"):
                dom, console = load(v.url(view), tmp_path, shot=os.path.join(SHOTS, "clickhouse-%s.png" % view))
                assert_clean(dom, console)
            _, _, body = v.get("heap")
            files = fr.dump_json("heap", "--json", d)
            shown = [html.unescape(f) for f in re.findall(r'<span class="fn">([^<]*)</span>', body)]
            assert shown[:3] == [s["function"] for s in files["sites"][:3]]
            # no trigger event here: no incident to select, said as from the files
            status, _, body = v.get("flame", incident="1")
            assert status == 502 and "incident 1: the trace records no incidents" in body, text_of(body)[-600:]
            # the server goes away: a page saying so, and the viewer goes on answering
            servers.stop(0)
            status, _, body = v.get("top", service="web")
            assert status == 502 and "Cannot read the source" in body and "Traceback" not in body, body[-800:]
            assert v.get("top", service="web")[0] == 502
        finally:
            err = v.stop()
        assert "Traceback" not in err, err


def main_of(page):
    """What a page shows below its header and selection form, from its first
    heading: the view itself (the header names the source, which differs)."""
    return page.split("<main>", 1)[1].split("<h1>", 1)[1].split("</main>", 1)[0]


@pytest.mark.skipif(not clickhouse_server.available(), reason="clickhouse-server or clickhouse_driver missing "
                    "(make deps)")
def test_clickhouse_crashes_and_incidents_pages_are_the_files_pages(incident_fleet, tmp_path):
    fr, d, url, servers = incident_fleet
    info = fr.dump_json("info", "--json", d)
    # what the comparison covers is really there
    assert [c["signal"] for c in info["crashes"]].count("SIGSEGV") == 2 and \
        [k["signal"] for k in info["killed"]] == ["SIGPIPE"], (info["crashes"], info["killed"])
    reasons = [i["reasons"] for i in info["incidents"]]
    assert ["slow_request"] in reasons and ["crash"] in reasons, reasons
    files, fleet = Viewer(fr, [d]), Viewer(fr, [], "--clickhouse", url)
    try:
        dom, console = load(fleet.url("crashes"), tmp_path, shot=os.path.join(SHOTS, "clickhouse-crashes.png"))
        assert_clean(dom, console)
        dom, console = load(fleet.url("incidents"), tmp_path, shot=os.path.join(SHOTS, "clickhouse-incidents.png"))
        assert_clean(dom, console)
        pages = {}
        for view, params in (("crashes", {}), ("incidents", {}), ("crashes", {"service": "crashy"}),
                             ("incidents", {"service": "slow"})):
            a, b = files.get(view, **params), fleet.get(view, **params)
            assert a[0] == b[0] == 200, (view, params, text_of(a[2])[-600:], text_of(b[2])[-600:])
            assert main_of(a[2]) == main_of(b[2]), (view, params, text_of(main_of(a[2])), text_of(main_of(b[2])))
            pages[view, tuple(params)] = main_of(b[2])
        # the pages show what info says: every crash with its whole stack, the killing signal, every incident
        crashes = pages["crashes", ()]
        heads = re.findall(r'<h2 class="crash">(crash|recovered fault): (\w+) ', crashes)
        assert sorted(heads) == sorted(("recovered fault" if c["recovered"] else "crash", c["signal"])
                                       for c in info["crashes"]), heads
        shown = [html.unescape(f) for f in re.findall(r'<tr><td class="n">\d+</td><td>([^<]*)</td>', crashes)]
        assert shown == [f["function"] for c in info["crashes"] for f in c["stack"]], shown
        assert "<h2>killed: SIGPIPE " in crashes
        rows = re.findall(r'<tr><td class="n">(\d+)</td><td>([^<]*)</td>', pages["incidents", ()])
        assert [(int(n), html.unescape(s)) for n, s in rows] == \
            [(i["number"], i["service"]) for i in info["incidents"]], rows
        # the Traces page counts them and lists the incidents, as from the files
        a, b = files.get(""), fleet.get("")
        assert '<a href="/crashes">%d crashes</a>' % len(info["crashes"]) in b[2]
        table = lambda page: page.split("<h2>Incidents</h2>", 1)[1].split("</table>", 1)[0]  # noqa: E731
        assert table(a[2]) == table(b[2])
        # incident=N on the other pages: the same segments as from the files (a crash window holds its crash)
        for n in range(1, len(reasons) + 1):
            for view, params in (("crashes", {}), ("incidents", {}), ("top", {"kind": "offcpu"})):
                a, b = files.get(view, incident=str(n), **params), fleet.get(view, incident=str(n), **params)
                assert a[0] == b[0] == 200, (n, view, text_of(a[2])[-600:], text_of(b[2])[-600:])
                if view == "top":
                    shown_a = re.findall(r'<span class="fn">([^<]*)</span>', a[2])
                    assert page_samples(a[2]) == page_samples(b[2]), (n, text_of(a[2])[:800], text_of(b[2])[:800])
                    assert shown_a == re.findall(r'<span class="fn">([^<]*)</span>', b[2]), n
                else:
                    assert main_of(a[2]) == main_of(b[2]), (n, view, text_of(a[2])[-800:], text_of(b[2])[-800:])
            if reasons[n - 1] == ["crash"] and info["incidents"][n - 1]["service"] == "crashy":
                assert '<h2 class="crash">crash: SIGSEGV' in fleet.get("crashes", incident=str(n))[2]
            status, _, body = fleet.get("report", incident=str(n))
            assert status == 200 and "Traceback" not in body, text_of(body)[-800:]
        # no such incident: the files' message
        n = len(reasons) + 1
        a, b = files.get("flame", incident=str(n)), fleet.get("flame", incident=str(n))
        assert a[0] == b[0] == 502 and main_of(a[2]) == main_of(b[2]), (text_of(a[2])[-400:], text_of(b[2])[-400:])
    finally:
        errs = files.stop() + fleet.stop()
    assert "Traceback" not in errs, errs


# ------------------------------------------------------------------ the timeline from ClickHouse

def timeline_of(body):
    """(thread track labels, {colour: rects}, events drawn, events not drawn) of a timeline page."""
    svg = body.split('<svg id="timeline"', 1)[1].split("</svg>", 1)[0]
    labels = [html.unescape(t) for t in re.findall(r'<text x="2" y="\d+">([^<]*)</text>', svg)]
    colours = {}
    for c in re.findall(r'<rect [^>]*fill="(#[0-9a-f]+)"', svg):
        colours[c] = colours.get(c, 0) + 1
    drawn = int(re.search(r'<span id="drawn">(\d+)</span>', body).group(1))
    m = re.search(r'<span id="not-drawn">(\d+)</span>', body)
    return labels, colours, drawn, int(m.group(1)) if m else 0


REQUEST_GREEN, CPU_ORANGE, OFFCPU_BLUE = "#2e7d32", "#e65100", "#1565c0"


def chrome_counts(doc):
    """{thread names}, and the number of request, cpu.sample and offcpu.sample events of a Chrome JSON."""
    threads = {(e["pid"], e["tid"], e["args"]["name"]) for e in doc["traceEvents"]
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    cats = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "M":
            cats[e["cat"]] = cats.get(e["cat"], 0) + 1
    return threads, cats.get("request", 0), cats.get("cpu", 0), cats.get("offcpu", 0)


@pytest.mark.skipif(not clickhouse_server.available(), reason="clickhouse-server or clickhouse_driver missing "
                    "(make deps)")
def test_clickhouse_timeline_is_the_files_timeline(web, viewer, tmp_path):
    fr, d = web
    served = fr.dump_json("requests", "--json", d)["requests"]
    # what the comparison covers is really there: 12 requests sent, 4 downstream calls, each seen twice
    assert len(served) == 32 and sum(r["role"] == "server" for r in served) == 16, len(served)
    with clickhouse_server.ClickHouseServers(1) as servers:
        url = servers.url(0, database="fleet")
        load_run = subprocess.run([PYTHON, fr.dump, "load", "--clickhouse", url, str(d)], capture_output=True,
                                  text=True, timeout=600)
        assert load_run.returncode == 0, load_run.stderr
        v = Viewer(fr, [], "--clickhouse", url)
        try:
            dom, console = load(v.url("timeline"), tmp_path, shot=os.path.join(SHOTS, "clickhouse-timeline.png"))
            assert_clean(dom, console)
            assert "not available" not in dom
            files, fleet = timeline_of(viewer.get("timeline")[2]), timeline_of(dom)
            # the same threads (tracks named alike), the same requests and samples
            tracks = lambda t: sorted(l for l in t[0])  # noqa: E731
            assert tracks(fleet) == tracks(files), (tracks(files), tracks(fleet))
            assert len(files[0]) >= 3, files[0]   # main, the server's thread, the handlers
            assert files[1].get(REQUEST_GREEN) == fleet[1].get(REQUEST_GREEN) == len(served), (files[1], fleet[1])
            for colour in (CPU_ORANGE, OFFCPU_BLUE):
                assert files[1].get(colour, 0) == fleet[1].get(colour, 0), (colour, files[1], fleet[1])
            assert files[1].get(CPU_ORANGE, 0) > 0, files[1]   # 4 x 50 ms of CPU at 1000 Hz
            assert files[3] == fleet[3] == 0
            # cut at a limit: the page says how many were left out, as from the files
            cut_files, cut_fleet = (timeline_of(x.get("timeline", limit="50")[2]) for x in (viewer, v))
            assert cut_files[2] == cut_fleet[2] == 50, (cut_files[2:], cut_fleet[2:])
            assert cut_files[3] == files[2] - 50 and cut_fleet[3] == fleet[2] - 50, (files[2:], fleet[2:],
                                                                                     cut_files[2:], cut_fleet[2:])
            # the first 50 events in time order: the same requests and samples among them
            for colour in (REQUEST_GREEN, CPU_ORANGE, OFFCPU_BLUE):
                assert cut_files[1].get(colour, 0) == cut_fleet[1].get(colour, 0), (colour, cut_files[1], cut_fleet[1])
            # a window (from/to as the profiles take them; here it leaves out the process's first event,
            # an instant at the start): the same requests and samples inside it
            w_files, w_fleet = (timeline_of(x.get("timeline", **{"from": "1ms", "to": "-1ms"})[2]) for x in (viewer, v))
            for colour in (REQUEST_GREEN, CPU_ORANGE, OFFCPU_BLUE):
                assert w_files[1].get(colour, 0) == w_fleet[1].get(colour, 0), (colour, w_files[1], w_fleet[1])
            assert w_files[2] < files[2] and w_fleet[2] < fleet[2], (w_files[2:], files[2:], w_fleet[2:], fleet[2:])
            # the Chrome JSON: the viewer's download and `chrome --clickhouse`, against `chrome` over the files
            want = chrome_counts(json.loads(viewer.get("timeline.json")[2]))
            assert want[1] == len(served) and want[2] > 0, want[1:]
            got = chrome_counts(json.loads(v.get("timeline.json")[2]))
            assert got == want, (got[1:], want[1:], got[0] ^ want[0])
            out = tmp_path / "fleet.json"
            run = subprocess.run([PYTHON, fr.dump, "chrome", "--clickhouse", url, "-o", str(out)],
                                 capture_output=True, text=True, timeout=600)
            assert run.returncode == 0, run.stderr
            assert chrome_counts(json.loads(out.read_text())) == want
        finally:
            err = v.stop()
        assert "Traceback" not in err, err
