"""flightrec-dump on segments written by the C++ SegmentWriter (no runtime
needed): build/unit_tests -tc='format sample*' writes them (see
tests/unit/format_sample_test.cc for their exact content, which the
assertions below mirror). Also: damaged, truncated and foreign input, the
plug-in contract, and the Python CRC32C fast path."""
import json
import os
import random
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("FLIGHTREC_BUILD", os.path.join(ROOT, "build"))
DUMP = os.path.join(ROOT, "scripts", "flightrec-dump")
PYTHON = "/usr/bin/python3"
SEC = 1_000_000_000

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from flightrec_lib.crc32c import crc32c, crc32c_reference  # noqa: E402


def unit_tests():
    path = os.path.join(BUILD, "unit_tests")
    assert os.path.exists(path), f"{path} is not built (run make)"
    return path


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """Directory with sample-4242-77-{0.seg,1.seg,2.active}."""
    out = tmp_path_factory.mktemp("format-sample")
    env = dict(os.environ, FLIGHTREC_FORMAT_SAMPLE_OUT=str(out))
    proc = subprocess.run([unit_tests(), "-tc=format sample set*"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(os.listdir(out)) == ["sample-4242-77-0.seg", "sample-4242-77-1.seg",
                                       "sample-4242-77-2.active"]
    return out


def dump(*args, check=None):
    proc = subprocess.run([PYTHON, DUMP] + [str(a) for a in args], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def info(*paths, check=0):
    return json.loads(dump("info", "--json", *paths, check=check).stdout)


def events(*args, check=0):
    out = dump("events", "--json", *args, check=check).stdout
    return [json.loads(line) for line in out.splitlines()]


def blocks(data):
    """(offset, kind, payload_len) of each block, walking the framing by hand
    (independent of the code under test)."""
    header_len = int.from_bytes(data[12:16], "little")
    out, p = [], header_len
    while p + 20 <= len(data):
        length = int.from_bytes(data[p + 4:p + 8], "little")
        out.append((p, int.from_bytes(data[p + 8:p + 10], "little"), length))
        p += 20 + length
    return out


# ---------------------------------------------------------------- good input

def test_info_summarises_the_sample(sample):
    doc = info(sample)
    assert doc["events"] == {"rusage": 33, "cpu.sample": 25, "thread.start": 4, "thread.end": 3,
                             "misc.values": 3, "recorder.dropped": 1}
    assert doc["total_events"] == 69
    states = {os.path.basename(s["path"]): s["state"] for s in doc["segments"]}
    assert states == {"sample-4242-77-0.seg": "sealed", "sample-4242-77-1.seg": "sealed",
                      "sample-4242-77-2.active": "active"}
    seg0 = doc["segments"][0]
    assert (seg0["pid"], seg0["service"], seg0["host"], seg0["sequence"]) == (4242, "svc", "host-a", 0)
    assert seg0["events"] == 56 and seg0["bad_blocks"] == 0 and seg0["problems"] == []
    assert seg0["footer"]["events"] == 56 and seg0["footer"]["dropped.cpu.sample"] == 3
    # Wall clock from the header anchors: realtime 1.7e18 at monotonic 1 s.
    assert seg0["first_wall_ns"] == 1_700_000_000 * SEC
    # The cpu.sample loss is both an event and a footer total in segment 0
    # (counted once); the socket.op loss is only in segment 1's footer.
    assert doc["dropped"] == {"cpu.sample": 3, "socket.op": 2}
    threads = [(t["pid"], t["tid"], t["name"], t["start"], t["end"]) for t in doc["threads"]]
    assert threads == [
        (4242, 100, "main", 1 * SEC, None),
        (4242, 101, "worker-1", 1 * SEC + 1_000_000, 2 * SEC + 50_000_000),
        (4242, 102, "worker-2", 1 * SEC + 2_000_000, 1 * SEC + 90_000_000),
        (4242, 103, "worker-3", 2 * SEC, 3 * SEC + 100_000_000),
    ]
    assert doc["time_range"]["first_ns"] == 1 * SEC
    assert doc["time_range"]["last_ns"] == 3 * SEC + 100_000_000


def test_info_text_and_default_command(sample):
    out = dump(sample, check=0).stdout  # no subcommand: info
    assert "3 segments (1 active, 2 sealed), 69 events" in out
    assert "worker-3" in out and "socket.op" in out


def test_events_are_decoded_by_schema_in_time_order(sample):
    evs = events(sample)
    assert len(evs) == 69
    times = [e["time"] for e in evs]
    assert times == sorted(times)
    misc = [e for e in evs if e["type"] == "misc.values"]
    assert [(m["delta"], m["ratio"], m["payload"]) for m in misc] == [
        (-42, 0.25, "000162696e"),
        (2**63 - 1, 1e300, bytes(range(256)).hex()),  # written after the next one, older
        (-2**63, -2.5, ""),
    ]
    dropped = [e for e in evs if e["type"] == "recorder.dropped"]
    assert dropped == [{"type": "recorder.dropped", "time": SEC + 50_000_000, "kind": "cpu.sample", "count": 3,
                        "pid": 4242}]
    rusage = [e for e in evs if e["type"] == "rusage" and e["tid"] == 101]
    assert [r["utime"] for r in rusage] == [k * 1_000_000 for k in range(10)]
    assert rusage[-1] == {"type": "rusage", "time": SEC + 100_000_101, "tid": 101, "utime": 9_000_000,
                          "stime": 1_800_000, "maxrss": 4105, "minflt": 90, "majflt": 0, "nvcsw": 9,
                          "nivcsw": 4, "pid": 4242}


def test_stacks_resolve_to_frames(sample):
    cpu = events("--type", "cpu.sample", sample)
    assert len(cpu) == 25
    s1 = cpu[0]["stack"]
    assert [(f["function"], f["inlined"], f["address"]) for f in s1] == [
        ("inlined_helper", True, 0x400101),  # inlined into the next frame: same pc
        ("fn_%d" % 0x400101, False, 0x400101),
        ("fn_%d" % 0x400200, False, 0x400200),
        ("", False, 0x900000),               # in no known mapping
    ]
    assert s1[0]["file"] == "helper.h" and s1[0]["line"] == 7
    assert s1[1]["file"] == "fake.cc" and s1[1]["line"] == 0x101
    assert s1[1]["mapping"] == {"path": "/usr/bin/fake", "build_id": "abcdef0123", "start": 0x400000,
                                "end": 0x500000, "offset": 0x1000}
    assert s1[3]["mapping"] is None
    s2 = cpu[1]["stack"]
    assert [f["function"] for f in s2] == ["fn_%d" % 0x400300, "fn_%d" % 0x400200]
    start = events("--type", "thread.start", sample)
    assert [e["stack"] == [] for e in start] == [True, False, True, True]


def test_events_filters_and_limit(sample):
    evs = events("--type", "thread.start,thread.end", "--limit", "5", sample)
    assert [(e["type"], e["tid"]) for e in evs] == [
        ("thread.start", 100), ("thread.start", 101), ("thread.start", 102), ("thread.end", 102),
        ("thread.start", 103)]
    proc = dump("events", "--type", "no.such.type", sample, check=0)
    assert proc.stdout == ""
    assert "no event type 'no.such.type'" in proc.stderr
    text = dump("events", "--type", "thread.start", sample, check=0).stdout.splitlines()
    assert text[1].split()[:5] == ["+0.001000000", "thread.start", "pid=4242", "tid=101", "name=worker-1"]
    assert "stack=[inlined_helper < fn_4194561 < fn_4194816 < 0x900000]" in text[1]


def test_schema_lists_types_fields_and_units(sample):
    types = json.loads(dump("schema", "--json", sample, check=0).stdout)
    by_name = {t["name"]: t for t in types}
    assert set(by_name) == {"thread.start", "thread.end", "rusage", "cpu.sample", "recorder.dropped",
                            "misc.values"}
    assert [(f["name"], f["type"], f["unit"]) for f in by_name["misc.values"]["fields"]] == [
        ("time", "time", "ns"), ("delta", "sint", ""), ("ratio", "f64", ""), ("payload", "bytes", "bytes")]
    # A segment defines only the types it has events of: rusage is in the
    # first two segments, not the third (cpu.sample, misc.values, thread.end).
    assert by_name["rusage"]["segments"] == 2 and by_name["rusage"]["events"] == 33
    assert by_name["cpu.sample"]["segments"] == 2 and by_name["thread.end"]["segments"] == 3
    text = dump("schema", sample, check=0).stdout
    assert "maxrss  uint    KiB" in text


# ---------------------------------------------------------------- bad input

def test_damaged_block_is_reported_and_the_rest_read(sample, tmp_path):
    for name in os.listdir(sample):
        shutil.copy(os.path.join(sample, name), tmp_path)
    path = tmp_path / "sample-4242-77-0.seg"
    data = bytearray(path.read_bytes())
    event_blocks = [b for b in blocks(data) if b[1] == 6]
    first = event_blocks[0]  # thread.start: main, worker-1, worker-2
    data[first[0] + 20 + first[2] // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    proc = dump("info", "--json", tmp_path, check=1)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0] and "1 damaged block skipped" in lines[0]
    assert "bad CRC at offset %d" % first[0] in lines[0]
    doc = json.loads(proc.stdout)
    assert doc["total_events"] == 66
    assert doc["events"]["thread.start"] == 1
    assert doc["segments"][0]["bad_blocks"] == 1 and doc["segments"][0]["state"] == "sealed"
    # Threads whose start was lost still appear, from their other events.
    threads = {t["tid"]: t for t in doc["threads"]}
    assert threads[102]["start"] is None and threads[102]["end"] == SEC + 90_000_000
    assert threads[101]["name"] == ""
    assert len(events("--type", "rusage", tmp_path, check=1)) == 33


def test_truncated_segments_read_silently_up_to_the_cut(sample, tmp_path):
    data = (sample / "sample-4242-77-0.seg").read_bytes()
    layout = blocks(data)
    footer = layout[-1]
    assert footer[1] == 7
    cut_footer = tmp_path / "a-1-1-0.active"
    cut_footer.write_bytes(data[:footer[0] + 5])
    doc = info(cut_footer)
    assert doc["segments"][0]["state"] == "truncated"
    assert doc["segments"][0]["truncated_at"] == footer[0]
    assert doc["total_events"] == 56
    # Cut inside the last EVENTS block: everything before it survives.
    last_events = [b for b in layout if b[1] == 6][-1]
    cut_events = tmp_path / "b-1-1-0.active"
    cut_events.write_bytes(data[:last_events[0] + 20 + last_events[2] // 2])
    proc = dump("info", "--json", cut_events, check=0)
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert doc["segments"][0]["state"] == "truncated"
    assert 0 < doc["total_events"] < 56
    # A .seg without its footer was renamed without a complete seal.
    renamed = tmp_path / "c-1-1-0.seg"
    renamed.write_bytes(data[:footer[0]])
    assert info(renamed)["segments"][0]["state"] == "truncated"


def test_foreign_missing_and_empty_inputs(sample, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a segment\n")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    missing = tmp_path / "missing.seg"
    proc = dump("info", "--json", text, missing, empty_dir, sample, check=1)
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, proc.stderr
    assert any(str(text) in line and "not a flightrec segment" in line for line in lines)
    assert any(str(missing) in line and "no such file" in line for line in lines)
    assert any(str(empty_dir) in line and "no segment files" in line for line in lines)
    doc = json.loads(proc.stdout)  # the good files were still read
    assert doc["total_events"] == 69 and len(doc["errors"]) == 3
    # Other damage to the header: one line each, nothing read from the file.
    good = (sample / "sample-4242-77-1.seg").read_bytes()
    bad_crc = tmp_path / "badhdr.seg"
    bad_crc.write_bytes(good[:20] + bytes([good[20] ^ 1]) + good[21:])
    proc = dump("events", bad_crc, check=1)
    assert proc.stderr.strip() == "flightrec-dump: %s: bad header CRC" % bad_crc
    # An .active file created an instant ago (no header yet) is not an error.
    fresh = tmp_path / "fresh" / "x-1-1-0.active"
    fresh.parent.mkdir()
    fresh.write_bytes(b"FLTR")
    shutil.copy(sample / "sample-4242-77-1.seg", fresh.parent)
    proc = dump("info", "--json", fresh.parent, check=0)
    assert proc.stderr == ""
    assert json.loads(proc.stdout)["total_events"] == 5


def test_random_damage_never_crashes_the_decoder(sample):
    from flightrec_lib.segment import SegmentError, parse_segment
    data = (sample / "sample-4242-77-0.seg").read_bytes()
    rng = random.Random(5)
    for _ in range(300):
        d = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            d[rng.randrange(len(d))] = rng.randrange(256)
        if rng.random() < 0.3:
            del d[rng.randrange(len(d)):]
        try:
            seg = parse_segment(bytes(d), "x.active")
        except SegmentError:
            continue
        for b in seg.batches:
            cols = seg.resolved_columns(b)
            if cols is not None:
                assert all(len(c) == b.count for c in cols)
        list(seg.events())


def test_closed_pipe_ends_quietly(tmp_path):
    path = tmp_path / "stream.seg"
    env = dict(os.environ, FLIGHTREC_FORMAT_STREAM_OUT=str(path), FLIGHTREC_FORMAT_STREAM_EVENTS="100000")
    proc = subprocess.run([unit_tests(), "-tc=format sample stream*"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout
    p = subprocess.Popen([PYTHON, DUMP, "events", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    _, err = p.communicate(timeout=120)
    assert first.split()[1] in (b"rusage", b"thread.start", b"thread.end")
    assert p.returncode == 0 and err == b"", err
    doc = info(path)
    assert doc["total_events"] == doc["segments"][0]["footer"]["events"] >= 100000


# ---------------------------------------------------------------- plug-ins

def test_subcommands_are_discovered_and_a_broken_one_is_isolated(tmp_path, sample):
    scripts = tmp_path / "scripts"
    shutil.copytree(os.path.join(ROOT, "scripts"), scripts,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "flightrec_lib" / "commands" / "cmd_hello.py").write_text(
        "from .. import cli\n"
        "def register(sub):\n"
        "    p = sub.add_parser('hello', help='count events')\n"
        "    cli.add_paths_argument(p)\n"
        "    p.set_defaults(func=run)\n"
        "def run(args):\n"
        "    trace = cli.open_trace(args.paths)\n"
        "    print('hello', sum(trace.event_counts().values()))\n"
        "    return cli.exit_status(trace)\n")
    (scripts / "flightrec_lib" / "commands" / "cmd_broken.py").write_text("def register(sub):\n    oops(\n")
    # Reached through a symlink, as an installed copy would be.
    link = tmp_path / "bin" / "flightrec-dump"
    link.parent.mkdir()
    link.symlink_to(scripts / "flightrec-dump")
    proc = subprocess.run([PYTHON, str(link), "hello", str(sample)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello 69\n"
    assert proc.stderr.count("\n") == 1 and "cmd_broken" in proc.stderr and "Traceback" not in proc.stderr
    helptext = subprocess.run([PYTHON, DUMP, "--help"], capture_output=True, text=True).stdout
    for name in ("info", "schema", "events"):
        assert name in helptext


# ---------------------------------------------------------------- crc32c

def test_python_crc32c_fast_path_matches_the_reference():
    assert crc32c(b"123456789") == 0xE3069283
    rng = random.Random(3)
    for n in [0, 1, 9, 2047, 2048, 2049, 4096 + 7, 65536, 200_001]:
        data = bytes(rng.getrandbits(8) for _ in range(n))
        assert crc32c(data) == crc32c_reference(data), n
        assert crc32c(data[n // 3:], crc32c(data[:n // 3])) == crc32c_reference(data), n
