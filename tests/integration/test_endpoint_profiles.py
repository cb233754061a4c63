"""--endpoint E on the profile reports (issue 41 item 3): top, tree, flame,
folded, pprof, speedscope and diff keep only the samples taken on a
request's handling thread while a request of a matching endpoint was in
flight; `diff --endpoint E` compares two windows of one endpoint.

One real program under the preload (test_fleet_clickhouse.HTTP_PAIR, a
Python http.server and its own client in one process): 4 `GET /work/N`
requests burn 50 ms of CPU each in their handler, 8 `GET /users/N` (and 4
downstream `/users/0`) do almost nothing. Every report is checked against
`top --endpoint` (the same samples, counted the same way by each format's
own reader: the folded counts, the SVG's total, go tool pprof's total,
speedscope's samples, the diff's two sides against --to/--from), and the
filter against what the program did: the /work/ CPU is there, and only on
threads that handled a /work/ request.
"""
import json
import re

import pytest

from conftest import PYTHON
from test_fleet_clickhouse import HTTP_PAIR
from test_reports_profiles import go_pprof

WORK = "GET /work/*"


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    from conftest import Flightrec
    fr = Flightrec()
    d = tmp_path_factory.mktemp("endpoint-profiles") / "trace"
    d.mkdir()
    fr.run([PYTHON, "-c", HTTP_PAIR], d, env={"FLIGHTREC_SERVICE": "web", "FLIGHTREC_CPU_HZ": "1000"})
    return fr, d


def top(fr, d, *args):
    return fr.dump_json("top", "--json", *args, d)


def test_endpoint_keeps_the_cpu_of_that_endpoints_requests(web):
    fr, d = web
    work, users, every = top(fr, d, "--endpoint", WORK), top(fr, d, "--endpoint", "GET /users/*"), top(fr, d)
    # 4 x 50 ms of CPU inside /work/ requests; /users/ answers in microseconds.
    assert work["total_ns"] >= 100_000_000 and work["total_ns"] > 5 * users["total_ns"], (work, users)
    assert work["samples"] < every["samples"]  # the interpreter's start-up, the client's loop: outside
    assert top(fr, d, "--endpoint", "GET /nothing/*")["samples"] == 0
    # Only threads that handled (or, client side, sent) a /work/ request carry its samples.
    reqs = fr.dump_json("requests", "--json", "--endpoint", WORK, d)["requests"]
    assert len(reqs) == 8  # 4 server-side, 4 client-side
    handlers = {r["tid"] for r in reqs}
    out = d.parent / "s.json"
    fr.dump_run("speedscope", "--endpoint", WORK, "-o", out, d)
    doc = json.loads(out.read_text())
    counted = {}
    for p in doc["profiles"]:
        n = len(p.get("samples", []))
        if n:
            tid = int(re.search(r"tid (\d+)", p["name"]).group(1))
            counted[tid] = counted.get(tid, 0) + n
    assert counted and set(counted) <= handlers, (counted, handlers)
    assert sum(counted.values()) == work["samples"]


def test_every_profile_report_takes_the_same_samples(web, tmp_path):
    fr, d = web
    work = top(fr, d, "--endpoint", WORK)
    n, total = work["samples"], work["total_ns"]
    assert n > 0
    folded = fr.dump_run("folded", "--endpoint", WORK, d).stdout.splitlines()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in folded) == n
    svg = tmp_path / "f.svg"
    fr.dump_run("flame", "--endpoint", WORK, "-o", svg, d)
    assert float(re.search(r'data-total="([^"]+)"', svg.read_text()).group(1)) == total
    tree = fr.dump_run("tree", "--endpoint", WORK, "--min-pct", "0", d).stdout.splitlines()
    roots = [line.split("|") for line in tree[1:] if line.split("|")[3].startswith((" ┬", " ─"))]
    assert sum(int(r[0]) for r in roots) == n, tree[:20]
    pb = tmp_path / "p.pb.gz"
    proc = fr.dump_run("pprof", "--endpoint", WORK, "-o", pb, d)
    assert "%d samples" % n in proc.stderr, proc.stderr
    shown = go_pprof("-top", "-unit=ms", "-nodefraction=0", str(pb))
    # pprof prints the total to two decimals; SIGPROF samples weigh the
    # thread CPU time since the last one, so the total is any number of ns.
    pprof_total = re.search(r"of ([0-9.]+)ms total", shown)
    assert pprof_total and abs(float(pprof_total.group(1)) - total / 1e6) <= 0.005, shown[:400]


def test_diff_endpoint_compares_two_windows_of_one_endpoint(web):
    fr, d = web
    cut = "0.5s"
    doc = fr.dump_json("diff", "--json", "--endpoint", WORK, "--a-to", cut, "--b-from", cut, d)
    before = top(fr, d, "--endpoint", WORK, "--to", cut)
    after = top(fr, d, "--endpoint", WORK, "--from", cut)
    assert (doc["a"]["samples"], doc["a"]["total"]) == (before["samples"], before["total_ns"])
    assert (doc["b"]["samples"], doc["b"]["total"]) == (after["samples"], after["total_ns"])
    assert doc["a"]["samples"] + doc["b"]["samples"] > 0
