"""flightrec-dump otlp and pprof --push (issue 43) on real traces: two
programs recorded under the preload (cpu_split: CPU and off-CPU samples;
alloc_known with every allocation recorded), exported as an OTLP profiles
request. Every file written is decoded twice, independently of the encoder:
by `protoc --decode_raw` (Debian's protobuf-compiler) and by otlp_schema.py,
which reads the message definitions from the .proto text the encoder
follows; protoc also decodes it by that .proto. The HTTP exchanges go to a
loopback receiver (otlp_receiver.py)."""
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import urllib.parse

import pytest

from conftest import PYTHON, Flightrec
from otlp_receiver import Receiver
from otlp_schema import PROTO, Schema


@pytest.fixture(autouse=True, scope="module")
def protoc_installed():
    assert shutil.which("protoc"), "protoc is not installed: `make deps` installs protobuf-compiler"

SECRET = "Bearer sekrit-token-0042"
REQUEST = "ExportProfilesServiceRequest"
# What each kind's profiles are, and which top --json total each must add up to.
TYPES = {"cpu": [("samples", "count", "samples"), ("cpu", "nanoseconds", "total_ns")],
         "offcpu": [("offcpu", "nanoseconds", "total_ns")],
         "alloc": [("alloc_space", "bytes", "total_bytes"), ("alloc_objects", "count", "samples")],
         "live": [("inuse_space", "bytes", "total_bytes")]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    fr = Flightrec()
    out = tmp_path_factory.mktemp("otlp_trace")
    fr.run([fr.program("cpu_split"), "1"], out)
    # Every allocation recorded: estimated counts are exact, so alloc_objects
    # must equal top's sample count.
    fr.run([fr.program("alloc_known"), "100"], out, env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": "1"})
    return fr, str(out)


@pytest.fixture(scope="module")
def schema():
    return Schema.load()


def dump(*args, env=None, timeout=120):
    e = dict(os.environ)
    e.pop("OTEL_EXPORTER_OTLP_HEADERS", None)
    e.pop("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", None)
    e.update(env or {})
    return subprocess.run([PYTHON, Flightrec.dump] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=e)


def protoc_checks(path):
    """protoc --decode_raw and protoc --decode by the reference .proto both accept the file."""
    with open(path, "rb") as f:
        raw = subprocess.run(["protoc", "--decode_raw"], stdin=f, capture_output=True, timeout=120)
    assert raw.returncode == 0, raw.stderr
    with open(path, "rb") as f:
        typed = subprocess.run(["protoc", "--decode=%s.%s" % (Schema.load().package, REQUEST),
                                "-I", os.path.dirname(PROTO), os.path.basename(PROTO)],
                               stdin=f, capture_output=True, timeout=120)
    assert typed.returncode == 0, typed.stderr
    return raw.stdout.decode(), typed.stdout.decode()


def export(tmp_path, trace, *extra, name="out.pb"):
    path = tmp_path / name
    proc = dump("otlp", "-o", path, *extra, trace)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return path, path.read_bytes()


def strings_of(doc):
    return doc["dictionary"]["string_table"]


def attrs_of(doc, indices):
    d = doc["dictionary"]
    out = {}
    for i in indices:
        kv = d["attribute_table"][i]
        key = strings_of(doc)[kv["key_strindex"]]
        assert key not in out, "an attribute key twice in one reference list"
        v = kv["value"]
        out[key] = v.get("string_value", v.get("int_value"))
    return out


def profiles_by_type(doc):
    """{(type, unit): [(resource attributes, profile)]}."""
    s = strings_of(doc)
    out = {}
    for rp in doc["resource_profiles"]:
        res = {kv["key"]: kv["value"].get("string_value", kv["value"].get("int_value"))
               for kv in rp["resource"]["attributes"]}
        for sp in rp["scope_profiles"]:
            assert sp["scope"]["name"] == "flightrec"
            for p in sp["profiles"]:
                key = (s[p["sample_type"]["type_strindex"]], s[p["sample_type"]["unit_strindex"]])
                out.setdefault(key, []).append((res, p))
    return out


def check_dictionary(doc):
    """Entry 0 of every table is the zero value, every index is in range."""
    d = doc["dictionary"]
    for table in ("mapping_table", "location_table", "function_table", "link_table", "string_table",
                  "attribute_table", "stack_table"):
        assert d.get(table), table + " is missing: its entry 0 must be present"
    assert d["string_table"][0] == ""
    for table in ("mapping_table", "location_table", "function_table", "attribute_table", "stack_table"):
        assert d[table][0] == {}, table
    assert d["link_table"][0] == {"trace_id": bytes(16), "span_id": bytes(8)}
    ns, na = len(d["string_table"]), len(d["attribute_table"])
    for m in d["mapping_table"][1:]:
        # Anonymous executable memory (a JIT's, an interpreter's trampolines) has no file name.
        assert 0 <= m.get("filename_strindex", 0) < ns
        assert all(0 < a < na for a in m.get("attribute_indices", []))
        assert m.get("filename_strindex", 0) or not m.get("attribute_indices"), "a build-id with no file"
        assert m["memory_start"] < m["memory_limit"]
    for loc in d["location_table"][1:]:
        assert 0 <= loc.get("mapping_index", 0) < len(d["mapping_table"])
        for ln in loc.get("lines", []):
            assert 0 < ln["function_index"] < len(d["function_table"])
    for fn in d["function_table"][1:]:
        assert 0 < fn["name_strindex"] < ns
        assert 0 <= fn.get("filename_strindex", 0) < ns
    for kv in d["attribute_table"][1:]:
        assert 0 < kv["key_strindex"] < ns
    for st in d["stack_table"][1:]:
        assert st["location_indices"] and all(0 < i < len(d["location_table"]) for i in st["location_indices"])


def check_samples(doc):
    d = doc["dictionary"]
    for rp in doc["resource_profiles"]:
        for sp in rp["scope_profiles"]:
            for p in sp["profiles"]:
                start, dur = p["time_unix_nano"], p["duration_nano"]
                assert len(p["profile_id"]) == 16 and any(p["profile_id"])
                for s in p["samples"]:
                    assert 0 < s["stack_index"] < len(d["stack_table"])
                    assert all(0 < i < len(d["attribute_table"]) for i in s["attribute_indices"])
                    # Links index the link table; a linked sample names its request's endpoint.
                    assert 0 <= s.get("link_index", 0) < len(d["link_table"])
                    if s.get("link_index", 0):
                        assert len(d["link_table"][s["link_index"]]["trace_id"]) == 16
                        assert len(d["link_table"][s["link_index"]]["span_id"]) == 8
                        assert any(d["string_table"][d["attribute_table"][i]["key_strindex"]] ==
                                   "flightrec.request.endpoint" for i in s["attribute_indices"])
                    ts = s.get("timestamps_unix_nano", [])
                    assert s["values"] and (not ts or len(ts) == len(s["values"]))
                    assert all(start <= t < start + dur for t in ts)


def totals(doc):
    return {k: sum(sum(s["values"]) for _, p in v for s in p["samples"]) for k, v in profiles_by_type(doc).items()}


def test_file_decodes_and_totals_match_top(recorded, schema, tmp_path):
    fr, trace = recorded
    path, data = export(tmp_path, trace)
    raw, typed = protoc_checks(path)
    assert "service.name" in raw and "sample_type {" in typed and "timestamps_unix_nano" in typed
    doc = schema.decode(REQUEST, data)
    check_dictionary(doc)
    check_samples(doc)

    # One resource per process, named as the process.start events say.
    starts = {e["pid"]: e for e in fr.events(trace, "process.start")}
    resources = [{kv["key"]: kv["value"] for kv in rp["resource"]["attributes"]} for rp in doc["resource_profiles"]]
    assert sorted(r["process.pid"]["int_value"] for r in resources) == sorted(starts)
    for r in resources:
        start = starts[r["process.pid"]["int_value"]]
        assert r["process.executable.name"]["string_value"] == os.path.basename(start["exe"])
        assert r["host.name"]["string_value"] == start["hostname"]
        assert r["service.name"]["string_value"]

    # Each sample type's total is top --json's.
    got = totals(doc)
    for kind, types in TYPES.items():
        top = fr.dump_json("top", "--json", "--kind", kind, trace)
        assert top["samples"] > 0, kind
        for stype, unit, field in types:
            assert got[(stype, unit)] == top[field], (kind, stype)

    # Per event: the cpu samples profile has one timestamp per cpu.sample event.
    byt = profiles_by_type(doc)
    n_ts = sum(len(s["timestamps_unix_nano"]) for _, p in byt[("samples", "count")] for s in p["samples"])
    assert n_ts == len(fr.events(trace, "cpu.sample"))


def test_stacks_threads_and_mappings(recorded, schema, tmp_path):
    fr, trace = recorded
    _, data = export(tmp_path, trace, "--kind", "cpu")
    doc = schema.decode(REQUEST, data)
    d, s = doc["dictionary"], strings_of(doc)
    assert set(profiles_by_type(doc)) == {("samples", "count"), ("cpu", "nanoseconds")}

    def leaf(sample):
        loc = d["location_table"][d["stack_table"][sample["stack_index"]]["location_indices"][0]]
        fn = d["function_table"][loc["lines"][0]["function_index"]]
        return s[fn["name_strindex"]], s[fn.get("filename_strindex", 0)], loc["lines"][0].get("line", 0)

    leaves = {}
    for _, p in profiles_by_type(doc)[("samples", "count")]:
        for sample in p["samples"]:
            attrs = attrs_of(doc, sample["attribute_indices"])
            assert isinstance(attrs["thread.id"], int)
            name, file, line = leaf(sample)
            if attrs.get("thread.name") == "cpu-worker" and name in ("leaf_a", "leaf_b"):
                assert file.endswith("cpu_split.cc") and line > 0
                leaves[name] = leaves.get(name, 0) + sum(sample["values"])
    events = fr.events(trace, "cpu.sample")
    for name in ("leaf_a", "leaf_b"):
        assert leaves.get(name) == sum(1 for e in events if e["stack"] and e["stack"][0]["function"] == name)

    # Mappings carry the build-ids the trace recorded.
    build_ids = {f["mapping"]["path"]: f["mapping"]["build_id"] for e in events for f in e["stack"]
                 if f["mapping"] and f["mapping"]["build_id"]}
    assert build_ids
    seen = {}
    for m in d["mapping_table"][1:]:
        attrs = attrs_of(doc, m.get("attribute_indices", []))
        if "process.executable.build_id.gnu" in attrs:
            seen[s[m["filename_strindex"]]] = attrs["process.executable.build_id.gnu"]
    for path, bid in build_ids.items():
        assert seen.get(path) == bid, path


def test_selection_and_aggregated_values(recorded, schema, tmp_path):
    fr, trace = recorded
    pid = next(e["pid"] for e in fr.events(trace, "process.start") if e["exe"].endswith("cpu_split"))
    _, data = export(tmp_path, trace, "--pid", pid, "--thread", "cpu-worker", "--no-timestamps", name="sel.pb")
    protoc_checks(tmp_path / "sel.pb")
    doc = schema.decode(REQUEST, data)
    check_dictionary(doc)
    check_samples(doc)
    assert len(doc["resource_profiles"]) == 1
    byt = profiles_by_type(doc)
    assert ("offcpu", "nanoseconds") not in byt  # the worker never blocks long
    for _, p in byt[("cpu", "nanoseconds")]:
        for sample in p["samples"]:
            assert attrs_of(doc, sample["attribute_indices"])["thread.name"] == "cpu-worker"
            assert len(sample["values"]) == 1 and "timestamps_unix_nano" not in sample
    top = fr.dump_json("top", "--json", "--pid", pid, "--thread", "cpu-worker", trace)
    assert totals(doc)[("cpu", "nanoseconds")] == top["total_ns"]
    assert totals(doc)[("samples", "count")] == top["samples"]

    _, data = export(tmp_path, trace, "--kind", "alloc,live", name="alloc.pb")
    assert set(profiles_by_type(schema.decode(REQUEST, data))) == {
        ("alloc_space", "bytes"), ("alloc_objects", "count"), ("inuse_space", "bytes")}
    proc = dump("otlp", "-o", tmp_path / "x.pb", "--kind", "nosuch", trace)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- HTTP

def digest_dir(path):
    return {f: hashlib.sha256(open(os.path.join(path, f), "rb").read()).hexdigest() for f in sorted(os.listdir(path))}


def one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "sekrit" not in proc.stderr + proc.stdout
    return lines[0]


def test_endpoint_sends_the_same_request(recorded, schema, tmp_path):
    fr, trace = recorded
    with Receiver([("status", 200, {"Content-Type": "application/x-protobuf"}, b"")]) as rx:
        proc = dump("otlp", "-o", tmp_path / "f.pb", "--endpoint", rx.url, "--header", "Authorization=" + SECRET,
                    "--header", "X-Scope-OrgID=team-a", trace)
        assert proc.returncode == 0, proc.stderr
        assert "sekrit" not in proc.stderr + proc.stdout
        assert len(rx.requests) == 1
        req = rx.requests[0]
    assert req["path"] == "/v1development/profiles"
    h = {k.lower(): v for k, v in req["headers"].items()}
    assert h["content-type"] == "application/x-protobuf" and h["content-encoding"] == "gzip"
    assert h["authorization"] == SECRET and h["x-scope-orgid"] == "team-a"
    body = gzip.decompress(req["body"])
    assert body == (tmp_path / "f.pb").read_bytes()
    schema.decode(REQUEST, body)


def test_retries_on_429_and_5xx(recorded, tmp_path):
    fr, trace = recorded
    script = [("status", 503, {}, b"busy"), ("status", 429, {"Retry-After": "0"}, b""),
              ("status", 200, {}, b"")]
    with Receiver(script) as rx:
        proc = dump("otlp", "--endpoint", rx.url + "/custom/path", "--kind", "cpu", trace)
        assert proc.returncode == 0, proc.stderr
        assert len(rx.requests) == 3
        assert {r["path"] for r in rx.requests} == {"/custom/path"}  # a path given is used as is
        assert len({r["body"] for r in rx.requests}) == 1
    with Receiver([("status", 502, {}, b"")]) as rx:
        proc = dump("otlp", "--endpoint", rx.url, "--retries", "2", "--kind", "cpu", trace)
        assert proc.returncode == 1
        assert "502" in one_line(proc) and len(rx.requests) == 3


def test_partial_success_is_reported(recorded, tmp_path):
    fr, trace = recorded
    # ExportProfilesServiceResponse{partial_success{rejected_profiles: 2, error_message: "too old"}}
    inner = b"\x08\x02\x12\x07too old"
    with Receiver([("status", 200, {"Content-Type": "application/x-protobuf"},
                    b"\x0a" + bytes([len(inner)]) + inner)]) as rx:
        proc = dump("otlp", "--endpoint", rx.url, "--kind", "cpu", trace)
    assert proc.returncode == 1
    line = one_line(proc)
    assert "rejected 2" in line and "too old" in line


@pytest.mark.parametrize("case", ["400_text", "400_status", "redirect", "unreachable", "slow",
                                  "flood_ok", "flood_400"])
def test_bad_receivers(recorded, tmp_path, case):
    fr, trace = recorded
    before = digest_dir(trace)
    other = Receiver([("status", 200, {}, b"")])
    script = {
        "400_text": [("status", 400, {"Content-Type": "text/plain"}, b"unknown sample type offcpu\nsecond line")],
        # google.rpc.Status{code: 3, message: "bad dictionary"}
        "400_status": [("status", 400, {"Content-Type": "application/x-protobuf"}, b"\x08\x03\x12\x0ebad dictionary")],
        "redirect": [("status", 307, {"Location": other.url + "/v1development/profiles"}, b"")],
        "slow": [("hang",)],
        "flood_ok": [("flood", 200, 1 << 30)],
        "flood_400": [("flood", 400, 1 << 30)],
        "unreachable": [("status", 200, {}, b"")],
    }[case]
    rx = Receiver(script)
    url = rx.url
    if case == "unreachable":
        rx.close()  # nothing listens on that port any more
    try:
        proc = dump("otlp", "-o", tmp_path / "f.pb", "--endpoint", url, "--header", "Authorization=" + SECRET,
                    "--timeout", "3", "--retries", "2", "--kind", "cpu", trace, timeout=100)
    finally:
        if case != "unreachable":
            rx.close()
        other.close()
    assert digest_dir(trace) == before  # the trace is untouched
    protoc_checks(tmp_path / "f.pb")    # and the file was written whole all the same
    if case == "flood_ok":
        assert proc.returncode == 0, proc.stderr
        assert rx.flooded < (64 << 20), "the client read far more of the answer than it needs"
        return
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("flightrec-dump: wrote f.pb"), proc.stderr
    line = lines[1]
    assert "Traceback" not in proc.stderr and "sekrit" not in proc.stderr + proc.stdout
    expect = {"400_text": "HTTP 400 Bad Request: unknown sample type offcpu second line",
              "400_status": "HTTP 400 Bad Request: bad dictionary",
              "redirect": "redirects", "unreachable": "connection refused", "slow": "no answer",
              "flood_400": "HTTP 400"}[case]
    assert expect in line, line
    if case.startswith("400"):
        assert len(rx.requests) == 1  # a 4xx is not retried
    if case == "redirect":
        assert not other.requests and other.url in line
    if case == "flood_400":
        assert rx.flooded < (64 << 20)


def test_headers_from_the_otlp_variable_and_bad_headers(recorded, tmp_path):
    fr, trace = recorded
    with Receiver([("status", 200, {}, b"")]) as rx:
        proc = dump("otlp", "--endpoint", rx.url, "--kind", "cpu", trace,
                    env={"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20sekrit,x-tenant=t1"})
        assert proc.returncode == 0, proc.stderr
        h = {k.lower(): v for k, v in rx.requests[0]["headers"].items()}
        assert h["authorization"] == "Bearer sekrit" and h["x-tenant"] == "t1"
    for bad in ("NoEquals", "Bad Name=x", "X=a\nb"):
        proc = dump("otlp", "--endpoint", "http://127.0.0.1:9", "--header", bad, trace)
        assert proc.returncode == 2
        line = one_line(proc)
        assert "a\nb" not in line
    proc = dump("otlp", trace)
    assert proc.returncode == 2 and "-o FILE" in one_line(proc)


# ---------------------------------------------------------------- Pyroscope

def form_parts(body, content_type):
    boundary = content_type.split("boundary=")[1].encode()
    parts = {}
    for chunk in body.split(b"--" + boundary)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, data = chunk.partition(b"\r\n\r\n")
        name = head.split(b'name="')[1].split(b'"')[0].decode()
        parts[name] = data[:-2]  # the CRLF before the next boundary
    return parts


@pytest.mark.parametrize("kind", ["cpu", "offcpu", "alloc"])
def test_pprof_push_to_pyroscope_ingest(recorded, tmp_path, kind):
    fr, trace = recorded
    top = fr.dump_json("top", "--json", "--kind", kind, trace)
    starts = {e["pid"]: e for e in fr.events(trace, "process.start")}
    with Receiver([("status", 200, {}, b"")]) as rx:
        proc = dump("pprof", "--kind", kind, "--push", rx.url, "--header", "Authorization=" + SECRET, trace)
        assert proc.returncode == 0, proc.stderr
        assert "sekrit" not in proc.stderr + proc.stdout
        reqs = list(rx.requests)
    assert reqs
    samples = 0
    for req in reqs:
        url = urllib.parse.urlsplit(req["path"])
        q = dict(urllib.parse.parse_qsl(url.query))
        assert url.path == "/ingest" and q["format"] == "pprof"
        assert int(q["from"]) <= int(q["until"])
        pid = int(q["name"].split("pid=")[1].rstrip("}"))
        start = starts[pid]
        service, labels = q["name"].split("{", 1)
        assert service and labels == "host=%s,pid=%d}" % (start["hostname"], pid)
        h = {k.lower(): v for k, v in req["headers"].items()}
        assert h["authorization"] == SECRET
        parts = form_parts(req["body"], h["content-type"])
        pprof = gzip.decompress(parts["profile"])
        raw = subprocess.run(["protoc", "--decode_raw"], input=pprof, capture_output=True, timeout=60)
        assert raw.returncode == 0
        if kind == "offcpu":
            cfg = json.loads(parts["sample_type_config"])
            assert set(cfg) == {"offcpu", "samples"}
        samples += pprof_sample_count(pprof)
    assert samples == top["samples"]


def pprof_sample_count(data):
    """Sum of the first value of every pprof Sample (Profile.sample = 2,
    Sample.value = 2, packed): the sample count for cpu/offcpu, objects for alloc."""
    from otlp_schema import _uvarint
    total, pos = 0, 0
    while pos < len(data):
        key, pos = _uvarint(data, pos)
        wire = key & 7
        if wire == 0:
            _, pos = _uvarint(data, pos)
            continue
        size, pos = _uvarint(data, pos)
        chunk, pos = data[pos:pos + size], pos + size
        if key >> 3 != 2:
            continue
        p = 0
        while p < len(chunk):
            k, p = _uvarint(chunk, p)
            n, p = _uvarint(chunk, p)
            if k >> 3 == 2:
                total += _uvarint(chunk[p:p + n], 0)[0]
            p += n
    return total
