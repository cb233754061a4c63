"""flightrec-dump on hostile and odd input (issue #29, items 1-7): memory
bombs, walls of false sync words, FIFOs/devices/links/sparse files named
*.seg, awkward S3 keys, terminal escapes in names, a PACKED_REL column that
refers to a float column, and the minimal header.

Every segment here is built by hand (tests/fuzz/hostile_segments.py) and read
by the real flightrec-dump in a child process under an address-space limit
(a regression then fails with MemoryError, not by eating the machine) and a
generous timeout; peak RSS comes from wait4(). Assertions are on outcomes:
exit status, one stderr line naming the bad file, the intact segment beside
it still reported, bounded memory."""
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from xml.etree import ElementTree

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests", "fuzz"))
sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
import hostile_segments as hs  # noqa: E402

# FLIGHTREC_DUMP_SCRIPT: run another copy of the tool (to see these tests fail
# on the code before the fix).
DUMP = os.environ.get("FLIGHTREC_DUMP_SCRIPT", os.path.join(ROOT, "scripts", "flightrec-dump"))
PYTHON = "/usr/bin/python3"
AS_LIMIT = 1 << 30          # the tool's address space (a MemoryError past it)
RSS_BOUND_KB = 400 << 10    # what any of these inputs may cost, peak


def run_dump(*args, env=None, timeout=120, stdout_path=None):
    """(status, stdout, stderr, peak RSS KiB) of flightrec-dump under
    RLIMIT_AS; killed (status -9) after `timeout` seconds. With stdout_path
    the output goes to that file and is not read here (stdout is "")."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    full_env = dict(os.environ if env is None else env)
    full_env.pop("FLIGHTREC_DUMP_DEBUG", None)
    out_file = open(stdout_path, "w+b") if stdout_path else tempfile.TemporaryFile()
    with out_file as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([PYTHON, DUMP] + [str(a) for a in args], stdout=out, stderr=err,
                                preexec_fn=limit, env=full_env)
        timer = threading.Timer(timeout, lambda: os.kill(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = "" if stdout_path else out.read().decode("utf-8", "replace")
        return proc.returncode, text, err.read().decode("utf-8", "replace"), usage.ru_maxrss


def lines_naming(stderr, name):
    return [ln for ln in stderr.splitlines() if name in ln]


@pytest.fixture
def tdir(tmp_path):
    d = tmp_path / "trace"
    d.mkdir()
    (d / "intact.seg").write_bytes(hs.intact_segment(pid=7))
    return d


def assert_intact_reported(stdout):
    doc = json.loads(stdout)
    pids = {s["pid"] for s in doc["segments"]}
    assert 7 in pids, doc["segments"]
    assert doc["events"].get("cpu.sample", 0) >= 3, doc["events"]


# ---------------------------------------------------------------- 1. memory bombs

@pytest.mark.slow
def test_events_bomb_is_refused_in_bounded_memory(tdir):
    """Three EVENTS blocks of 1M events x 255 zero-width columns (a 1 KB
    file): each refused with one line; the intact segment beside it reads."""
    bomb = hs.header(pid=9) + hs.events_bomb_blocks(nblocks=3)
    assert len(bomb) < 3000
    (tdir / "bomb.seg").write_bytes(bomb)
    for args in (["info", "--json"], ["info"], ["events", "--json"], ["top", "--kind", "cpu"]):
        status, out, err, rss = run_dump(*args, tdir)
        assert status == 1, (args, status, err)
        named = lines_naming(err, "bomb.seg")
        assert len(named) == 1 and "more values than a block may declare" in named[0], (args, err)
        assert "internal error" not in err
        assert rss < RSS_BOUND_KB, (args, rss)
        if args == ["info", "--json"]:
            assert_intact_reported(out)
            bomb_doc = [s for s in json.loads(out)["segments"] if s["pid"] == 9][0]
            assert bomb_doc["bad_blocks"] == 3 and bomb_doc["events"] == 0


def test_events_with_long_names_are_written_in_bounded_memory(tmp_path):
    """1,024 samples whose one frame is a 64 KiB function name: `events`
    writes 67 MB of JSON lines. The fuzzer found it holding 4,096 lines at a
    time (peak RSS 552 MiB on a recording with longer stacks); here it was
    224 MiB before the lines were batched by size, about 30 after."""
    long_name = "f" * 65536
    (tmp_path / "long.seg").write_bytes(hs.intact_segment(function=long_name, samples=1024))
    out_path = tmp_path / "events.jsonl"
    status, _, err, rss = run_dump("events", "--json", tmp_path / "long.seg", stdout_path=out_path)
    assert status == 0, err
    assert rss < 96 << 10, rss
    # The output is whole: every sample, each with the full name. (Read line
    # by line: this process's peak RSS is inherited by the ones it starts.)
    samples = 0
    with open(out_path) as f:
        for line in f:
            e = json.loads(line)
            if e["type"] == "cpu.sample":
                samples += 1
                assert e["stack"][0]["function"] == long_name
    assert samples == 1024


@pytest.mark.slow
def test_deep_stack_is_cut_in_bounded_memory(tdir):
    """One stack of 4M frames in a few hundred bytes: cut to 4096 frames (and
    said so), the tree still drawn, memory bounded."""
    deep = hs.header(pid=9) + hs.deep_stack_blocks()
    assert len(deep) < 2000
    (tdir / "deep.seg").write_bytes(deep)
    status, out, err, rss = run_dump("tree", "--kind", "cpu", tdir)
    assert status == 0, err
    assert "burn_cpu" in out  # the intact segment's samples
    assert rss < RSS_BOUND_KB, rss
    status, out, err, rss = run_dump("info", "--json", tdir / "deep.seg")
    doc = json.loads(out)["segments"][0]
    assert any("deeper than 4096 frames" in p for p in doc["problems"]), doc["problems"]
    assert rss < RSS_BOUND_KB, rss


@pytest.mark.slow
def test_empty_strings_bomb_is_refused_in_bounded_memory(tdir):
    """A 2 KiB STRINGS block that inflates to 64M empty strings."""
    bomb = hs.header(pid=9) + hs.empty_strings_block()
    assert len(bomb) < 8000
    (tdir / "strings.seg").write_bytes(bomb)
    status, out, err, rss = run_dump("info", "--json", tdir)
    assert status == 1, err
    named = lines_naming(err, "strings.seg")
    assert len(named) == 1 and "table entries" in named[0], err
    assert_intact_reported(out)
    assert rss < RSS_BOUND_KB, rss


# ---------------------------------------------------------------- 2. resync

def test_a_megabyte_of_false_sync_words_costs_linear_time(tdir):
    """After a bad block, 1 MiB of block headers that pass every check but
    the CRC, each declaring a payload to the end of the wall; then the whole
    intact segment. Checking each CRC over its declared length took minutes;
    it must now finish (generous timeout) and find every intact block."""
    intact = hs.intact_segment(pid=11)
    hl = int.from_bytes(intact[12:16], "little")
    wall = hs.false_sync_wall(1 << 20)
    (tdir / "wall.seg").write_bytes(intact[:hl] + hs.bad_block() + wall + intact[hl:])
    status, out, err, rss = run_dump("info", "--json", tdir / "wall.seg", timeout=90)
    assert status == 1, (status, err)
    seg = json.loads(out)["segments"][0]
    assert seg["events"] == 4 and seg["state"] == "sealed", seg
    assert seg["bad_blocks"] == 1
    assert len(lines_naming(err, "wall.seg")) == 1


# ---------------------------------------------------------------- 3. odd files

@pytest.mark.slow
def test_only_regular_files_are_read(tdir, tmp_path):
    """A FIFO, a link to /dev/zero, a link to an intact segment and an 8 GiB
    sparse file, all named *.seg inside the directory: none is read (no hang,
    no 8 GiB read), each gets one line, the intact segment is reported."""
    os.mkfifo(tdir / "fifo.seg")
    os.symlink("/dev/zero", tdir / "zero.seg")
    other = tmp_path / "elsewhere.seg"
    other.write_bytes(hs.intact_segment(pid=12))
    os.symlink(other, tdir / "link.seg")
    with open(tdir / "sparse.seg", "wb") as f:
        f.truncate(8 << 30)
    status, out, err, rss = run_dump("info", "--json", tdir, timeout=60)
    assert status == 1, (status, err)
    assert_intact_reported(out)
    assert 12 not in {s["pid"] for s in json.loads(out)["segments"]}  # the link was not followed
    for name, why in (("fifo.seg", "FIFO"), ("zero.seg", "symbolic link"), ("link.seg", "symbolic link"),
                      ("sparse.seg", "larger than")):
        named = lines_naming(err, name)
        assert len(named) == 1 and why in named[0], (name, err)
    assert rss < RSS_BOUND_KB, rss
    # Named explicitly, a link is the operator's choice (followed); a device never is read.
    status, out, err, _ = run_dump("info", "--json", tdir / "link.seg")
    assert status == 0 and json.loads(out)["segments"][0]["pid"] == 12, err
    status, out, err, _ = run_dump("info", "/dev/zero", timeout=60)
    assert status == 1 and "not a regular file" in err, err


# ---------------------------------------------------------------- 4. s3:// keys

AK, SK = "AKIDHOSTILE", "hostile/secret"


@pytest.fixture
def standin():
    from s3_standin import StandIn
    s = StandIn(bucket="hostile-bkt", access_key=AK, secret_key=SK)
    s.start()
    yield s
    s.stop()


def s3_env(standin, tmpdir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLIGHTREC_"))}
    env.update(FLIGHTREC_S3_ENDPOINT=standin.endpoint, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK,
               AWS_REGION="us-east-1", TMPDIR=str(tmpdir), AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    return env


@pytest.mark.slow
def test_s3_keys_that_nest_collide_or_are_long(standin, tmp_path):
    """`a/x.seg` and `a/x.seg/b.seg` (a file and a directory of one name),
    `a//x.seg` (collapses onto `a/x.seg` as a path) and a 300-character
    component: each read as its own segment, nothing left in TMPDIR."""
    keys = {"a/x.seg": 21, "a/x.seg/b.seg": 22, "a//x.seg": 23, "a/" + "k" * 300 + ".seg": 24}
    with standin.lock:
        for key, pid in keys.items():
            standin.objects_by_key[key] = hs.intact_segment(pid=pid)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    status, out, err, _ = run_dump("info", "--json", "s3://hostile-bkt/a", env=s3_env(standin, tmpdir))
    assert status == 0, err
    assert sorted(s["pid"] for s in json.loads(out)["segments"]) == [21, 22, 23, 24]
    assert os.listdir(tmpdir) == []


def test_s3_failed_download_leaves_nothing_behind(standin, tmp_path):
    with standin.lock:
        for i in range(3):
            standin.objects_by_key["b/%d.seg" % i] = hs.intact_segment(pid=30 + i)
    standin.set_faults(forbid=5, ops=["GetObject"])
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    status, out, err, _ = run_dump("info", "s3://hostile-bkt/b", env=s3_env(standin, tmpdir))
    assert status == 1 and "403" in err, err
    assert "Traceback" not in err
    assert os.listdir(tmpdir) == []


# ---------------------------------------------------------------- 5. names

EVIL_THREAD = "evil\x1b]0;pwned\x07\x1b[2J\u202e"
EVIL_FUNC = "fn\x1b[31mred\x9b1m\uffff\x00end"


@pytest.mark.slow
def test_names_with_terminal_escapes_are_escaped(tmp_path):
    seg = tmp_path / "evil.seg"
    seg.write_bytes(hs.intact_segment(pid=5, thread_name=EVIL_THREAD, function=EVIL_FUNC))
    unsafe = [chr(c) for c in list(range(0x20)) + list(range(0x7F, 0xA0)) if chr(c) not in "\t\n"] + ["\u202e"]
    for args in (["info"], ["top", "--kind", "cpu"], ["tree", "--kind", "cpu"], ["folded", "--kind", "cpu"],
                 ["events"]):
        status, out, err, _ = run_dump(*args, seg)
        assert status == 0, (args, err)
        bad = sorted({c for c in out if c in unsafe})
        assert not bad, (args, bad)
        assert "\\x1b" in out, (args, out[:2000])
    # JSON keeps the exact names (escaped the JSON way, decoding to the same text).
    status, out, err, _ = run_dump("info", "--json", seg)
    assert [t["name"] for t in json.loads(out)["threads"]] == [EVIL_THREAD]
    assert not {c for c in out if c in unsafe}
    # The flame graph stays well-formed XML.
    svg = tmp_path / "f.svg"
    status, _, err, _ = run_dump("flame", "--kind", "cpu", "-o", svg, seg)
    assert status == 0, err
    ElementTree.parse(svg)


# ---------------------------------------------------------------- 6. validation once

def test_packed_rel_column_referring_to_a_float_is_refused_by_every_command(tmp_path):
    """A PACKED_REL column whose `ref` names an F64 column: `info` counted the
    events, `events` dropped them silently. The block is now refused when
    read, so every command agrees and says so."""
    types = [(3, "odd.rel", [("time", hs.TIME, "ns"), ("ratio", hs.F64, ""), ("v", hs.UINT, "")])]
    rel = bytes([0x81, 1, 0]) + bytes(2)  # PACKED_REL W=1, ref column 1 (the F64), shift 0, 2 values
    f64 = bytes([0x38]) + struct.pack("<dd", 0.5, 1.5)
    body = hs.events(3, 2, [hs.plain([5_000_000_000, 5_000_000_001]), f64, rel])
    seg = tmp_path / "rel.seg"
    seg.write_bytes(hs.header(pid=3) + hs.block(hs.SCHEMA, hs.schema(types)) + hs.block(hs.EVENTS, body))
    status, out, err, _ = run_dump("info", "--json", seg)
    assert status == 1, err
    doc = json.loads(out)
    assert doc["events"].get("odd.rel", 0) == 0 and doc["segments"][0]["bad_blocks"] == 1, doc
    assert "not an earlier integer one" in err
    status, out, err, _ = run_dump("events", "--json", seg)
    assert status == 1 and out.strip() == "", (out, err)
    assert len(lines_naming(err, "rel.seg")) == 1


# ---------------------------------------------------------------- 7. SPEC

def test_minimal_header_is_56_bytes_as_spec_says(tmp_path):
    seg = tmp_path / "min.seg"
    data = hs.header(pid=56, service=b"", host=b"")
    assert len(data) == 56
    seg.write_bytes(data)
    status, out, err, _ = run_dump("info", "--json", seg)
    assert status == 0, err
    assert json.loads(out)["segments"][0]["pid"] == 56
    spec = open(os.path.join(ROOT, "format", "SPEC.md")).read()
    assert "below 56" in spec and "below 58" not in spec


@pytest.mark.slow
def test_one_bad_schema_block_does_not_blind_a_real_segment(fr, trace_dir):
    """The writer defines every type twice per segment, in SCHEMA blocks of
    different writes; with the first SCHEMA block damaged, flightrec-dump
    decodes every EVENTS block once the copy defines its type (before: every
    event of the segment was lost)."""
    import dump_corruption as dc
    fr.run([fr.program("sock_echo"), "2", "40", "6000"], trace_dir,
           env={"FLIGHTREC_FLUSH_MS": "100", "FLIGHTREC_CPU_HZ": "499", "FLIGHTREC_ALLOC_SAMPLE_BYTES": "4096"})
    seg = [p for p in fr.segments(trace_dir) if p.endswith(".seg")][0]
    data = open(seg, "rb").read()
    _, blocks = dc.walk(data)
    schema_blocks = [b for b in blocks if b.kind == hs.SCHEMA]
    defined = {}
    for i, b in enumerate(schema_blocks):
        for tid, _, _ in dc.parse_schema(b.raw()):
            defined.setdefault(tid, []).append(i)
    assert defined and all(len(v) == 2 and v[0] != v[1] for v in defined.values()), defined
    intact = sum(count for _, count in dc.events_by_block(data)[3].values())
    damaged = bytearray(data)
    first = schema_blocks[0]
    damaged[first.offset + 20 + first.payload_len // 2] ^= 0x10
    bad = trace_dir / "damaged.seg"
    bad.write_bytes(bytes(damaged))
    status, out, err, _ = run_dump("events", "--json", bad)
    assert status == 1 and len(lines_naming(err, "damaged.seg")) == 1, err
    counts = {}
    for line in out.splitlines():
        t = json.loads(line)["type"]
        counts[t] = counts.get(t, 0) + 1
    assert sum(counts.values()) == intact > 0, (counts, intact)


@pytest.mark.slow
def test_a_file_of_tiny_bad_blocks_lists_a_bounded_number_of_problems(tdir):
    """1 MiB of alternating bad and good tiny blocks: every bad one counted,
    1000 problems listed (not tens of thousands), memory bounded."""
    good = hs.block(hs.STRINGS, hs.table(1, [hs.text("x")]))
    bad = hs.bad_block()
    n = (1 << 20) // (len(good) + len(bad))
    (tdir / "manybad.seg").write_bytes(hs.header(pid=13) + (bad + good) * n)
    status, out, err, rss = run_dump("info", "--json", tdir, timeout=300)
    assert status == 1, err
    seg = [s for s in json.loads(out)["segments"] if s["pid"] == 13][0]
    assert seg["bad_blocks"] == n
    assert len(seg["problems"]) == 1001 and seg["problems"][-1].endswith("more problems not listed")
    assert_intact_reported(out)
    assert rss < RSS_BOUND_KB, rss


@pytest.mark.slow
@pytest.mark.parametrize("use_crcmod", [True, False])
def test_range_crcs_from_prefix_registers_match_the_plain_loop(use_crcmod):
    """What resynchronisation relies on: CrcIndex.crc(a, b, crc) equals the
    plain table loop over data[a:b], for any range (C or pure-Python CRC)."""
    import random
    from flightrec_lib import crc32c as c
    saved = c._fast
    if not use_crcmod:
        c._fast = None
    elif saved is None:
        pytest.skip("python3-crcmod is not importable from this interpreter")
    try:
        rng = random.Random(29)
        data = bytes(rng.randrange(256) for _ in range(70_001))
        index = c.CrcIndex(data)
        for _ in range(300):
            a = rng.randrange(len(data) + 1)
            b = rng.randrange(a, len(data) + 1)
            seed = rng.randrange(1 << 32)
            assert index.crc(a, b, seed) == c.crc32c_reference(data[a:b], seed), (a, b)
    finally:
        c._fast = saved
