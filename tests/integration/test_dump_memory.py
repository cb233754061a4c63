"""flightrec-dump's memory follows the largest segment, not the trace (issue
#29 item 1): a long, legitimate trace of one process (many segments written
one after the other, each full of allocation samples and frees) is read by
`heap`, `top --kind live`, `top`, `info`, `pprof`, `sockets` and `requests` within a bound that holding every
event at once would exceed several times over.

The trace is built by hand (tests/fuzz/hostile_segments.py helpers) so it is
large yet cheap to make: each segment holds SAMPLES alloc.sample events and
frees of all but KEPT of them, at times after the previous segment's (so
what is live stays small: the replay's own state is not what is measured).
Peak RSS comes from wait4() (test_dump_hostile.run_dump)."""
import json
import os
import re
import struct
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_dump_hostile import hs, run_dump  # noqa: E402

SEGMENTS = 16
SAMPLES = 120_000
KEPT = 1000
SITES = 4
PID = 4321
# Holding every event of this trace costs 1.2-1.4 GB. Streaming, heap costs
# ~100 MB for one segment of it and ~250 MB for all: one segment's events, plus
# the reader's cache of decoded columns (segment.DECODED_CACHE_CELLS, a fixed
# bound) filling up.
RSS_BOUND_KB = 320 << 10
SPEEDSCOPE_RSS_BOUND_KB = 200 << 10

ALLOC_TYPES = [
    (1, "alloc.sample", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("address", hs.UINT, ""),
                         ("size", hs.UINT, "bytes"), ("stack", hs.STACK, ""), ("sample_bytes", hs.UINT, "bytes")]),
    (2, "alloc.free", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("address", hs.UINT, "")]),
]


def constant(value):
    """A DELTA column whose every delta is 0 (width 0): `value` throughout."""
    return bytes([0x20]) + struct.pack("<Q", value)


def steps(first, step, n):
    """A DELTA column of n values first, first + step, ... (one byte per value)."""
    zigzag = (step << 1) if step >= 0 else ((-step << 1) - 1)
    return bytes([0x21]) + struct.pack("<Q", first) + b"\x00" + bytes([zigzag]) * (n - 1)


def alloc_segment(seq):
    """Segment `seq` of the process: SAMPLES allocations of 64 bytes (every
    one recorded: sample_bytes 1) from SITES sites, then frees of all but the
    last KEPT; its times follow those of segment seq - 1."""
    t0 = 1_000_000_000 + seq * 10 * SAMPLES
    out = hs.header(pid=PID, seq=seq)
    out += hs.block(hs.SCHEMA, hs.schema(ALLOC_TYPES))
    names = [hs.text("site_%d" % i) for i in range(1, SITES + 1)] + [hs.text("heap.c")]
    out += hs.block(hs.STRINGS, hs.table(1, names))
    locations = [hs.uvarint(0) + hs.uvarint(0x401000 + i) + hs.uvarint(1) + hs.uvarint(i) + hs.uvarint(SITES + 1)
                 + hs.uvarint(10 * i) for i in range(1, SITES + 1)]
    out += hs.block(hs.LOCATIONS, hs.table(1, locations))
    out += hs.block(hs.STACKS, hs.table(1, [hs.uvarint(1) + hs.uvarint(i) for i in range(1, SITES + 1)]))
    base = 0x10000000 + seq * 16 * SAMPLES
    stacks = bytes([1]) + bytes(1 + i % SITES for i in range(SAMPLES))  # PLAIN, one byte each
    out += hs.block(hs.EVENTS, hs.events(1, SAMPLES, [
        steps(t0, 2, SAMPLES), constant(PID), steps(base, 16, SAMPLES), constant(64), stacks, constant(1)]),
        compress=True)
    frees = SAMPLES - KEPT
    out += hs.block(hs.EVENTS, hs.events(2, frees, [
        steps(t0 + 2 * SAMPLES, 2, frees), constant(PID), steps(base, 16, frees)]), compress=True)
    last = t0 + 2 * SAMPLES + 2 * (frees - 1)
    footer = [("events", SAMPLES + frees), ("first_time_ns", t0), ("last_time_ns", last)]
    out += hs.block(hs.FOOTER, hs.uvarint(len(footer)) + b"".join(hs.text(k) + hs.uvarint(v) for k, v in footer))
    return out


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("long")
    for seq in range(SEGMENTS):
        (d / ("app-%d-%04d.seg" % (PID, seq))).write_bytes(alloc_segment(seq))
    return d


@pytest.mark.slow
def test_heap_memory_follows_one_segment(long_trace):
    status, out, err, rss = run_dump("heap", "--json", long_trace, timeout=300)
    assert status == 0, err
    doc = json.loads(out)
    total = SEGMENTS * SAMPLES * 64
    assert doc["allocated_bytes_est"] == total
    assert doc["live_bytes_est"] == SEGMENTS * KEPT * 64
    # Peak: all of the last segment's allocations on top of what the others kept.
    assert doc["peak_live_bytes_est"] == ((SEGMENTS - 1) * KEPT + SAMPLES) * 64
    assert rss < RSS_BOUND_KB, "heap: peak RSS %d MiB" % (rss >> 10)


@pytest.mark.slow
def test_speedscope_samples_past_the_bound_go_through_a_file(long_trace, tmp_path):
    """1.9M allocation samples, past cmd_speedscope.SPILL_SAMPLES: sorted
    through a temporary file, not held (326 MiB before, ~24 bytes each)."""
    path = tmp_path / "alloc.speedscope.json"
    status, _, err, rss = run_dump("speedscope", "--kind", "alloc", "-o", path, long_trace, timeout=300)
    assert status == 0, err
    doc = json.loads(path.read_text())
    (profile,) = doc["profiles"]
    n = SEGMENTS * SAMPLES
    assert len(profile["samples"]) == len(profile["weights"]) == n
    assert sum(profile["weights"]) == n * 64
    # Sample k of each segment came from site 1 + k % SITES: the stacks are in time order.
    site_of = {i: f["name"] for i, f in enumerate(doc["shared"]["frames"])}
    assert [site_of[s[-1]] for s in profile["samples"][:SITES * 2]] == \
        ["site_%d" % (1 + k % SITES) for k in range(SITES * 2)]
    print("speedscope alloc: peak RSS %d MiB" % (rss >> 10))
    assert rss < SPEEDSCOPE_RSS_BOUND_KB, "speedscope: peak RSS %d MiB" % (rss >> 10)


@pytest.mark.slow
def test_live_profile_memory_follows_one_segment(long_trace):
    status, out, err, rss = run_dump("top", "--kind", "live", "--json", long_trace, timeout=300)
    assert status == 0, err
    doc = json.loads(out)
    assert doc["samples"] == SEGMENTS * KEPT
    assert doc["total_bytes"] == SEGMENTS * KEPT * 64
    assert rss < RSS_BOUND_KB, "top --kind live: peak RSS %d MiB" % (rss >> 10)


@pytest.mark.slow
@pytest.mark.parametrize("args", [["info"], ["top", "--kind", "alloc"]])
def test_aggregating_reports_stay_bounded(long_trace, args):
    status, out, err, rss = run_dump(*args, long_trace, timeout=300)
    assert status == 0, err
    assert rss < RSS_BOUND_KB, "%s: peak RSS %d MiB" % (" ".join(args), rss >> 10)


# ---- tables and timelines: a trace of many segments, each with large intern
# tables (tens of thousands of strings, locations and stacks, as a big service's
# segments have) and cpu.sample events on a few hundred of its stacks. Holding
# every segment's tables costs 400+ MiB for `info`, which never uses them; the
# reader keeps only the recently used ones (segment.LOADED_TABLE_UNITS) and
# reads a segment's again when a report comes back to it. chrome and speedscope
# list every sample in their output: they write it as they go instead of
# building it whole (old peaks 550-640 MiB here).
TABLE_SEGMENTS = 12
TABLE_ENTRIES = 30_000  # locations (each its own function name) and stacks
STACK_DEPTH = 12
CPU_SAMPLES = 20_000    # per segment
SAMPLED_STACKS = 300
CPU_PID = 5432
CPU_PERIOD = 1000
TABLES_RSS_BOUND_KB = 256 << 10

CPU_TYPES = [(1, "cpu.sample", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("stack", hs.STACK, ""),
                                ("period_ns", hs.UINT, "ns")])]


def big_tables():
    """STRINGS, LOCATIONS and STACKS blocks (the same for every segment)."""
    names = [hs.text("function_number_%d" % i) for i in range(1, TABLE_ENTRIES + 1)] + [hs.text("big.c")]
    out = hs.block(hs.STRINGS, hs.table(1, names), compress=True)
    locations = [hs.uvarint(0) + hs.uvarint(0x400000 + 16 * i) + hs.uvarint(1) + hs.uvarint(i)
                 + hs.uvarint(TABLE_ENTRIES + 1) + hs.uvarint(i % 1000) for i in range(1, TABLE_ENTRIES + 1)]
    out += hs.block(hs.LOCATIONS, hs.table(1, locations), compress=True)
    stacks = [hs.uvarint(STACK_DEPTH) + b"".join(hs.uvarint(1 + (s + k) % TABLE_ENTRIES) for k in range(STACK_DEPTH))
              for s in range(TABLE_ENTRIES)]
    out += hs.block(hs.STACKS, hs.table(1, stacks), compress=True)
    return out


def cpu_segment(seq, tables, stack_ids):
    """One segment of CPU samples, 2 ns apart, on the given stack ids."""
    n = len(stack_ids)
    t0 = 1_000_000_000 + seq * 10 * n
    out = hs.header(pid=CPU_PID, seq=seq) + hs.block(hs.SCHEMA, hs.schema(CPU_TYPES)) + tables
    ids = b"".join(struct.pack("<I", i) for i in stack_ids)
    out += hs.block(hs.EVENTS, hs.events(1, n, [
        steps(t0, 2, n), constant(CPU_PID), bytes([0x04]) + ids, constant(CPU_PERIOD)]), compress=True)
    last = t0 + 2 * (n - 1)
    footer = [("events", n), ("first_time_ns", t0), ("last_time_ns", last)]
    out += hs.block(hs.FOOTER, hs.uvarint(len(footer)) + b"".join(hs.text(k) + hs.uvarint(v) for k, v in footer))
    return out


@pytest.fixture(scope="module")
def tables_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("tables")
    tables = big_tables()
    for seq in range(TABLE_SEGMENTS):
        ids = [1 + (i * 7919) % SAMPLED_STACKS for i in range(CPU_SAMPLES)]
        (d / ("svc-%d-%04d.seg" % (CPU_PID, seq))).write_bytes(cpu_segment(seq, tables, ids))
    return d


@pytest.mark.slow
def test_segment_tables_are_not_all_held(tables_trace):
    status, out, err, rss = run_dump("info", "--json", tables_trace, timeout=300)
    assert status == 0, err
    doc = json.loads(out)
    assert len(doc["segments"]) == TABLE_SEGMENTS
    assert doc["events"]["cpu.sample"] == TABLE_SEGMENTS * CPU_SAMPLES
    assert rss < TABLES_RSS_BOUND_KB, "info: peak RSS %d MiB" % (rss >> 10)


@pytest.mark.slow
def test_profile_reads_each_segments_tables_again(tables_trace):
    status, out, err, rss = run_dump("top", "--json", "--limit", "5", tables_trace, timeout=300)
    assert status == 0, err
    doc = json.loads(out)
    assert doc["samples"] == TABLE_SEGMENTS * CPU_SAMPLES
    assert doc["total_ns"] == TABLE_SEGMENTS * CPU_SAMPLES * CPU_PERIOD
    # Names come from tables dropped and read again: none is missing.
    assert all(f["function"].startswith("function_number_") for f in doc["functions"]), doc["functions"]
    assert rss < TABLES_RSS_BOUND_KB, "top: peak RSS %d MiB" % (rss >> 10)


@pytest.mark.slow
def test_chrome_timeline_is_written_as_it_goes(tables_trace, tmp_path):
    path = tmp_path / "trace.json"
    status, _, err, rss = run_dump("chrome", "-o", path, tables_trace, timeout=300)
    assert status == 0, err
    data = path.read_bytes()
    assert data.startswith(b'{"traceEvents":[') and data.endswith(b'"generator":"flightrec-dump"}}\n')
    # Every sample, in time order, each named after its leaf function.
    ts = [float(m) for m in re.findall(rb'"name":"function_number_\d+".*?"ts":([0-9.e+]+)\}', data)]
    assert len(ts) == TABLE_SEGMENTS * CPU_SAMPLES
    assert ts == sorted(ts)
    assert rss < TABLES_RSS_BOUND_KB, "chrome: peak RSS %d MiB" % (rss >> 10)


@pytest.mark.slow
def test_viewer_pages_stay_within_the_reports_bounds(tables_trace):
    """`serve` over the same trace: its timeline page draws at most
    viewer_views.TIMELINE_EVENTS of the 240,000 samples and reads the rest a
    line at a time (it once loaded the whole Chrome JSON: peak 676 MiB
    here, 193 MiB since); the other pages are the reports' own code. The
    server's peak RSS after every page stays under the reports' bound."""
    import subprocess
    import urllib.request
    from conftest import PYTHON
    from test_dump_hostile import DUMP
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLIGHTREC_", "AWS_"))}
    proc = subprocess.Popen([PYTHON, DUMP, "serve", "--port", "0", str(tables_trace)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", proc.stdout.readline()).group(1))
        for view in ("", "timeline", "timeline?from=-1ms", "flame", "top", "report"):
            with urllib.request.urlopen("http://127.0.0.1:%d/%s" % (port, view), timeout=300) as r:
                body = r.read().decode("utf-8")
            assert r.status == 200 and 'data-count="0"' in body and "internal error" not in body, view
            if view == "timeline":
                assert '<span id="drawn">30000</span> events drawn, <span id="not-drawn">%d</span> more not drawn' % (
                    TABLE_SEGMENTS * CPU_SAMPLES - 30000) in body
        with open("/proc/%d/status" % proc.pid) as f:
            peak = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert peak < TABLES_RSS_BOUND_KB, "serve: peak RSS %d MiB" % (peak >> 10)


@pytest.mark.slow
def test_speedscope_is_written_as_it_goes(tables_trace, tmp_path):
    path = tmp_path / "cpu.speedscope.json"
    status, _, err, rss = run_dump("speedscope", "-o", path, tables_trace, timeout=300)
    assert status == 0, err
    doc = json.loads(path.read_text())
    (profile,) = doc["profiles"]
    assert len(profile["samples"]) == TABLE_SEGMENTS * CPU_SAMPLES
    assert sum(profile["weights"]) == TABLE_SEGMENTS * CPU_SAMPLES * CPU_PERIOD
    assert {f["name"] for f in doc["shared"]["frames"]} <= {"function_number_%d" % i
                                                           for i in range(1, TABLE_ENTRIES + 1)}
    assert rss < TABLES_RSS_BOUND_KB, "speedscope: peak RSS %d MiB" % (rss >> 10)


# Profile entries merged across segments: every one of the TABLE_ENTRIES
# stacks is sampled in each of the segments, so one entry per (segment,
# stack) would cost ~200 bytes x segments x stacks (the old reader: 311 MiB
# here, 789 MiB on 24 segments of 40,000); merged by content, entries follow
# the distinct stacks (227 MiB here, mostly two segments' tables).
EVERY_STACK_SEGMENTS = 6
EVERY_STACK_RSS_BOUND_KB = 270 << 10


@pytest.fixture(scope="module")
def every_stack_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("every_stack")
    tables = big_tables()
    for seq in range(EVERY_STACK_SEGMENTS):
        (d / ("svc-%d-%04d.seg" % (CPU_PID, seq))).write_bytes(cpu_segment(seq, tables, range(1, TABLE_ENTRIES + 1)))
    return d


@pytest.mark.slow
def test_profile_entries_follow_distinct_stacks_not_segments(every_stack_trace, tmp_path):
    path = tmp_path / "cpu.pb.gz"
    status, _, err, rss = run_dump("pprof", "-o", path, every_stack_trace, timeout=300)
    assert status == 0, err
    assert rss < EVERY_STACK_RSS_BOUND_KB, "pprof: peak RSS %d MiB" % (rss >> 10)
    samples = EVERY_STACK_SEGMENTS * TABLE_ENTRIES
    # One sample row per distinct stack, each carrying all its segments' samples.
    assert "%d samples, %d stacks" % (samples, TABLE_ENTRIES) in err, err
    # go tool pprof reads the same totals (shutil/subprocess: as test_reports_profiles does).
    from test_reports_profiles import go_pprof
    top = go_pprof("-top", "-unit=ms", "-nodefraction=0", str(path))
    assert "of %gms total" % (samples * CPU_PERIOD / 1e6) in top, top[:400]


# sockets: a connection's blocking-call durations are exact up to a cap, then
# a histogram. SOCKET_OPS receives on one connection, durations spread over
# 1-1000 us: kept as a list they cost ~40 bytes each (the old reader: 173 MiB).
SOCKET_PID = 6543
SOCKET_OPS = 200_000   # per block
SOCKET_BLOCKS = 10
SOCKET_RSS_BOUND_KB = 128 << 10
SOCKET_TYPES = [(1, "socket.op", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("conn", hs.UINT, ""),
                                  ("op", hs.STRING, ""), ("bytes", hs.SINT, "bytes"),
                                  ("duration_ns", hs.UINT, "ns"), ("fd", hs.UINT, "")])]


def socket_durations():
    return [1000 + (i * 7919) % 1_000_003 for i in range(SOCKET_OPS)]


@pytest.fixture(scope="module")
def socket_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("sockets")
    out = hs.header(pid=SOCKET_PID, seq=0) + hs.block(hs.SCHEMA, hs.schema(SOCKET_TYPES))
    out += hs.block(hs.STRINGS, hs.table(1, [hs.text("recv")]))
    durations = hs.plain(socket_durations(), 4)
    for b in range(SOCKET_BLOCKS):
        t0 = 1_000_000_000 + b * SOCKET_OPS * 10_000
        out += hs.block(hs.EVENTS, hs.events(1, SOCKET_OPS, [
            steps(t0, 100, SOCKET_OPS), constant(SOCKET_PID), constant(1), constant(1), constant(100),
            durations, constant(5)]), compress=True)
    (d / ("svc-%d-0000.seg" % SOCKET_PID)).write_bytes(out)
    return d


@pytest.mark.slow
def test_socket_latency_percentiles_are_bounded(socket_trace):
    status, out, err, rss = run_dump("sockets", "--json", socket_trace, timeout=300)
    assert status == 0, err
    assert rss < SOCKET_RSS_BOUND_KB, "sockets: peak RSS %d MiB" % (rss >> 10)
    (conn,) = json.loads(out)["connections"]
    lat = conn["latency_ns"]
    exact = sorted(socket_durations() * SOCKET_BLOCKS)
    n = len(exact)
    assert conn["ops"] == lat["count"] == n and conn["bytes_in"] == 100 * n
    assert lat["max"] == exact[-1] and lat["approximate"] is True
    for name, pct in (("p50", 50), ("p90", 90), ("p99", 99)):
        want = exact[-(-pct * n // 100) - 1]  # nearest rank
        assert abs(lat[name] - want) <= want / 100, (name, lat[name], want)


# ------------------------------------------------------------------ requests

REQ_PID = 7654
REQ_SEGMENTS = 6
REQ_CALLS = 400_000      # per segment: a receive and a send per request
REQ_CONNS = 1000
REQ_BLOCKS = 10        # per segment
REQ_RSS_BOUND_KB = 200 << 10
OPEN_TYPES = (2, "socket.open", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("fd", hs.UINT, ""),
                                 ("conn", hs.UINT, ""), ("role", hs.STRING, ""), ("family", hs.STRING, ""),
                                 ("sock_type", hs.STRING, ""), ("local", hs.STRING, ""), ("peer", hs.STRING, ""),
                                 ("listener", hs.UINT, "")])
REQ_OP_TYPE = (1, "socket.op", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("fd", hs.UINT, ""),
                                ("conn", hs.UINT, ""), ("op", hs.STRING, ""), ("bytes", hs.SINT, "bytes"),
                                ("duration_ns", hs.UINT, "ns")])
RECV, SEND = 1, 2


def request_answer_ns(seq, k):
    """How long the send answering request k of segment seq took."""
    return 1000 + ((seq * REQ_CALLS + k) * 7919) % 50_000


def requests_segment(seq):
    """Server connections 1..REQ_CONNS take turns: request k arrives on
    connection 1 + k % REQ_CONNS (a 10 ns receive at 200k ns), and is
    answered by a send 100 ns later that takes request_answer_ns. Every
    connection is described again at the segment's start, as the recorder does."""
    n = REQ_CALLS
    t0 = 1_000_000_000 + seq * 100 * n
    out = hs.header(pid=REQ_PID, seq=seq) + hs.block(hs.SCHEMA, hs.schema([REQ_OP_TYPE, OPEN_TYPES]))
    out += hs.block(hs.STRINGS, hs.table(1, [hs.text(s) for s in ("recv", "send", "server", "ipv4", "stream",
                                                                     "127.0.0.1:80", "127.0.0.1:9")]))
    out += hs.block(hs.EVENTS, hs.events(2, REQ_CONNS, [
        constant(t0), constant(REQ_PID), constant(5), steps(1, 1, REQ_CONNS), constant(3), constant(4),
        constant(5), constant(6), constant(7), constant(0)]))
    conns = [1 + (i // 2) % REQ_CONNS for i in range(n)]
    durations = [10 if i % 2 == 0 else request_answer_ns(seq, i // 2) for i in range(n)]
    per = n // REQ_BLOCKS  # what one flush drained
    for i in range(0, n, per):
        out += hs.block(hs.EVENTS, hs.events(1, per, [
            steps(t0 + 100 * i, 100, per), constant(REQ_PID), constant(5), hs.plain(conns[i:i + per], 2),
            hs.plain([RECV, SEND] * (per // 2), 1), constant(100), hs.plain(durations[i:i + per], 4)]),
            compress=True)
    return out


def expected_request_durations():
    # Received at +10, answered by the end of the send: 100 + answer - 10.
    return [90 + request_answer_ns(seq, k) for seq in range(REQ_SEGMENTS) for k in range(REQ_CALLS // 2)]


@pytest.fixture(scope="module")
def requests_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("requests")
    for seq in range(REQ_SEGMENTS):
        (d / ("svc-%d-%04d.seg" % (REQ_PID, seq))).write_bytes(requests_segment(seq))
    return d


@pytest.mark.slow
def test_requests_memory_follows_a_segment_not_the_calls(requests_trace):
    status, out, err, rss = run_dump("requests", "--slowest", "3", requests_trace, timeout=600)
    assert status == 0, err
    print("requests: peak RSS %d MiB" % (rss >> 10))
    assert rss < REQ_RSS_BOUND_KB, "requests: peak RSS %d MiB" % (rss >> 10)
    exact = sorted(expected_request_durations())
    n = len(exact)
    m = re.search(r"^(\d+) server-side requests on (\d+) connections: p50 (\S+)  p90 (\S+)  p99 (\S+)  max (\S+)",
                  out, re.M)
    assert m, out
    assert int(m.group(1)) == n and int(m.group(2)) == REQ_CONNS
    from flightrec_lib.units import format_ns
    for group, pct in ((3, 50), (4, 90), (5, 99)):
        assert m.group(group) == format_ns(exact[-(-pct * n // 100) - 1]), (pct, m.group(group))
    assert m.group(6) == format_ns(exact[-1])
    assert "#3 server request" in out and "#4 " not in out


@pytest.mark.slow
def test_requests_json_is_complete_and_in_order(requests_trace):
    paths = sorted(requests_trace.iterdir())[:2]
    status, out, err, rss = run_dump("requests", "--json", "--slowest", "2", *paths, timeout=600)
    assert status == 0, err
    print("requests --json: peak RSS %d MiB" % (rss >> 10))
    assert rss < REQ_RSS_BOUND_KB, "requests --json: peak RSS %d MiB" % (rss >> 10)
    doc = json.loads(out)
    reqs = doc["requests"]
    want = expected_request_durations()[:REQ_CALLS]  # the first two segments' requests, in start order
    assert [r["duration_ns"] for r in reqs] == want
    assert all(a["start_ns"] < b["start_ns"] for a, b in zip(reqs, reqs[1:]))
    assert reqs[0] == {"connection": 1, "pid": REQ_PID, "tid": REQ_PID, "role": "server",
                       "start_ns": 1_000_000_010, "duration_ns": want[0], "bytes_in": 100, "bytes_out": 100,
                       "local": "127.0.0.1:80", "peer": "127.0.0.1:9", "tree": None}
    top = max(want)
    assert [reqs[i]["duration_ns"] for i in doc["slowest"]] == [top, top]
    assert doc["summary"]["server"]["count"] == len(want)


# ------------------------------------------------------------------ events of overlapping segments

TICK_TYPES = [(1, "tick", [("time", hs.TIME, "ns"), ("tid", hs.UINT, ""), ("value", hs.UINT, "")])]


def ticks_segment(pid, seq, n, blocks, first, step):
    """A segment of `blocks` EVENTS blocks of n "tick" events each, at
    first, first + step, ...; value counts the process's events."""
    out = hs.header(pid=pid, seq=seq) + hs.block(hs.SCHEMA, hs.schema(TICK_TYPES))
    for k in range(blocks):
        i = (seq * blocks + k) * n
        out += hs.block(hs.EVENTS, hs.events(1, n, [
            steps(first + i * step, step, n), constant(pid), steps(i, 1, n)]), compress=True)
    return out


def test_sliced_merge_gives_the_events_in_the_same_order(tmp_path):
    """Processes recording at once: their segments overlap in time, events
    of different processes share times (ties keep file order). Merging a
    slice of time at a time, in slices as small as they come, gives exactly
    the order of the one-sort merge."""
    from flightrec_lib import trace as trace_mod
    for pid in (11, 12, 13):
        for seq in range(2):
            # 11 and 13 tick at the same times; 12 in between, at half the pace.
            step = 20 if pid == 12 else 10
            (tmp_path / ("svc-%d-%04d.seg" % (pid, seq))).write_bytes(
                ticks_segment(pid, seq, 50, 3, 1_000_000 + (5 if pid == 12 else 0), step))
    whole = list(trace_mod.Trace([str(tmp_path)]).events())
    assert len(whole) == 3 * 2 * 3 * 50
    saved = trace_mod.MERGE_EVENTS, trace_mod.SLICE_EVENTS
    try:
        trace_mod.MERGE_EVENTS, trace_mod.SLICE_EVENTS = 0, 1
        sliced = list(trace_mod.Trace([str(tmp_path)]).events())
    finally:
        trace_mod.MERGE_EVENTS, trace_mod.SLICE_EVENTS = saved
    assert sliced == whole
    times = [e["time"] for e in whole]
    assert times == sorted(times)
    ties = [(a["pid"], b["pid"]) for a, b in zip(whole, whole[1:]) if a["time"] == b["time"]]
    assert ties and set(ties) == {(11, 13)}


EVENTS_PIDS = 8
EVENTS_PER_BLOCK = 100_000
EVENTS_BLOCKS = 8
EVENTS_RSS_BOUND_KB = 250 << 10


@pytest.mark.slow
def test_events_of_processes_recording_at_once_are_merged_in_slices(tmp_path):
    """8 processes x 800,000 events, all at once: one cluster of overlapping
    segments, 6.4M events (the one-sort merge decoded them all before the
    first line). The merge holds the blocks that overlap the slice."""
    for p in range(EVENTS_PIDS):
        (tmp_path / ("svc-%d-0000.seg" % (100 + p))).write_bytes(
            ticks_segment(100 + p, 0, EVENTS_PER_BLOCK, EVENTS_BLOCKS, 1_000_000 + p, EVENTS_PIDS))
    status, out, err, rss = run_dump("events", "--json", "--limit", "3000000", tmp_path, timeout=600)
    assert status == 0, err
    print("events: peak RSS %d MiB" % (rss >> 10))
    lines = out.splitlines()
    assert len(lines) == 3_000_000
    # The processes take turns, one event each, in time order.
    for k in (0, 1, 2_999_999):
        e = json.loads(lines[k])
        assert e["pid"] == 100 + k % EVENTS_PIDS and e["value"] == k // EVENTS_PIDS, (k, e)
    assert rss < EVENTS_RSS_BOUND_KB, "events: peak RSS %d MiB" % (rss >> 10)
