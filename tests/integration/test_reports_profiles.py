"""The profile reports (top, tree, folded, pprof, flame, chrome) on traces
with known content. The segments are written here by a small independent
writer that follows format/SPEC.md (uncompressed blocks), so every count,
weight, thread and time is known exactly; the runtime is not needed."""
import gzip
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from flightrec_lib.crc32c import crc32c  # noqa: E402

T, U, S, STR, STK = 1, 2, 3, 4, 5
MS = 1_000_000
PERIOD = 10_101_010
ANCHOR_MONO = 1_000_000_000_000
ANCHOR_REAL = 1_700_000_000_000_000_000

TYPES = {
    "process.start": [("pid", U, ""), ("ppid", U, ""), ("exe", STR, ""), ("cmdline", STR, ""),
                      ("hostname", STR, ""), ("service", STR, ""), ("realtime_ns", U, "ns"),
                      ("monotonic_ns", U, "ns"), ("alloc_sample_bytes", U, "bytes"), ("cpu_hz", U, "Hz"),
                      ("sampler", STR, "")],
    "thread.start": [("tid", U, ""), ("parent_tid", U, ""), ("name", STR, ""), ("start_routine", STR, "")],
    "thread.name": [("tid", U, ""), ("name", STR, "")],
    "cpu.sample": [("tid", U, ""), ("stack", STK, ""), ("period_ns", U, "ns")],
    "offcpu.sample": [("tid", U, ""), ("stack", STK, ""), ("duration_ns", U, "ns"), ("reason", STR, "")],
    "alloc.sample": [("tid", U, ""), ("address", U, ""), ("size", U, "bytes"), ("stack", STK, ""),
                     ("sample_bytes", U, "bytes")],
    "alloc.free": [("tid", U, ""), ("address", U, "")],
    "request.done": [("tid", U, ""), ("method", STR, ""), ("duration_ns", U, "ns")],
    "socket.note": [("tid", U, ""), ("bytes", U, "bytes")],
}


def uvarint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def sstr(s):
    b = s.encode()
    return uvarint(len(b)) + b


class SegWriter:
    """Writes one segment: interning tables, schema, columnar events (8-byte
    columns, delta-coded time), footer."""

    def __init__(self, pid, service="svc", host="hostA", seq=0, anchor_mono=ANCHOR_MONO,
                 anchor_real=ANCHOR_REAL):
        self.pid, self.service, self.host, self.seq = pid, service, host, seq
        self.anchor_mono, self.anchor_real = anchor_mono, anchor_real
        self.strings, self.mappings, self.locations, self.stacks = {}, {}, {}, {}
        self.events = {}  # type name -> [rows]
        self.raw_blocks = []  # (kind, payload) written after the events, e.g. damaged ones

    def _intern(self, table, key):
        if key not in table:
            table[key] = len(table) + 1
        return table[key]

    def s(self, text):
        return 0 if not text else self._intern(self.strings, text)

    def mapping(self, path, start, end, offset=0, build_id=""):
        return self._intern(self.mappings, (start, end, offset, self.s(path), self.s(build_id)))

    def stack(self, frames):
        """frames: leaf first; each (mapping id, address, [(function, file, line), ...]) with
        the inline chain innermost first."""
        locs = tuple(self._intern(self.locations, (m, a, tuple((self.s(f), self.s(fl), ln)
                                                              for f, fl, ln in lines)))
                     for m, a, lines in frames)
        return self._intern(self.stacks, locs)

    def add(self, type_name, time, **fields):
        row = [time]
        for name, ftype, _ in TYPES[type_name]:
            v = fields.get(name, 0)
            row.append(self.s(v) if ftype == STR else v)
        self.events.setdefault(type_name, []).append(row)

    @staticmethod
    def _block(kind, payload):
        head = struct.pack("<IHHI", len(payload), kind, 0, len(payload))
        return struct.pack("<I", 0x4B4C4246) + head + struct.pack("<I", crc32c(head + payload)) + payload

    @staticmethod
    def _table(first, entries):
        return uvarint(first) + uvarint(len(entries)) + b"".join(entries)

    def write(self, path, sealed=True):
        service, host = self.service.encode(), self.host.encode()
        hlen = 48 + 2 + len(service) + 2 + len(host) + 4
        head = (b"FLTRECSG" + struct.pack("<HHIIIQQQ", 1, 0, hlen, self.pid, 0, self.seq, self.anchor_mono,
                                           self.anchor_real)
                + struct.pack("<H", len(service)) + service + struct.pack("<H", len(host)) + host)
        out = bytearray(head + struct.pack("<I", crc32c(head)))
        type_ids = {name: i + 1 for i, name in enumerate(self.events)}
        schema = uvarint(len(type_ids))
        for name, tid in type_ids.items():
            fields = [("time", T, "ns")] + TYPES[name]
            schema += uvarint(tid) + sstr(name) + uvarint(len(fields))
            schema += b"".join(sstr(f) + bytes([c]) + sstr(u) for f, c, u in fields)
        out += self._block(1, schema)
        texts = sorted(self.strings, key=self.strings.get)
        if texts:
            out += self._block(2, self._table(1, [sstr(t) for t in texts]))
        if self.mappings:
            out += self._block(3, self._table(1, [b"".join(map(uvarint, m)) for m in
                                                  sorted(self.mappings, key=self.mappings.get)]))
        if self.locations:
            entries = []
            for m, a, lines in sorted(self.locations, key=self.locations.get):
                entries.append(uvarint(m) + uvarint(a) + uvarint(len(lines)) +
                               b"".join(uvarint(f) + uvarint(fl) + uvarint(ln) for f, fl, ln in lines))
            out += self._block(4, self._table(1, entries))
        if self.stacks:
            out += self._block(5, self._table(1, [uvarint(len(s)) + b"".join(map(uvarint, s)) for s in
                                                  sorted(self.stacks, key=self.stacks.get)]))
        times = []
        for name, rows in self.events.items():
            payload = bytearray(uvarint(type_ids[name]) + uvarint(len(rows)))
            cols = list(zip(*rows))
            prev = cols[0][0]
            payload += bytes([(2 << 4) | 8]) + struct.pack("<Q", prev)
            for t in cols[0]:
                d = t - prev
                payload += struct.pack("<Q", ((d << 1) ^ (d >> 63)) & (2 ** 64 - 1))
                prev = t
            for col in cols[1:]:
                payload += bytes([8]) + b"".join(struct.pack("<Q", v) for v in col)
            out += self._block(6, bytes(payload))
            times += cols[0]
        for kind, payload in self.raw_blocks:
            out += self._block(kind, payload)
        if sealed:
            footer = [("events", sum(len(r) for r in self.events.values())),
                      ("first_time_ns", min(times)), ("last_time_ns", max(times))]
            out += self._block(7, uvarint(len(footer)) + b"".join(sstr(k) + uvarint(v) for k, v in footer))
        with open(path, "wb") as f:
            f.write(out)


# ---- a process with known CPU, off-CPU and allocation profiles ---------------------------

PID, WORKER, BLOCKER = 4000, 4001, 4002
T0 = ANCHOR_MONO + 5 * MS


def cpu_trace(directory, pid=PID, service="svc"):
    """Worker thread "worker" (tid 4001): 210 samples in leaf_a (inlined into
    hot_loop) and 90 in leaf_b under worker_main -> outer_step, below libc's
    start_thread/clone3 and the recorder's trampoline. Main thread: 50 samples
    in main -> spin (plus one unsymbolized libc pc), under _start. Thread
    "blocker" (4002) blocks in blocked_in_poll for 3 x 100 ms and in
    nap for 10 ms. Samples are 1 ms apart, in two segments."""
    segs = [SegWriter(pid, service=service, seq=0), SegWriter(pid, service=service, seq=1)]
    for w in segs:
        app = w.mapping("/opt/app/bin/service", 0x400000, 0x480000, 0, "0123456789abcdef")
        libc = w.mapping("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f0000000000, 0x7f0000200000, 0x28000,
                         "feedface")
        pre = w.mapping("/work/build/libflightrec.so", 0x7f1000000000, 0x7f1000100000, 0, "beef")
        root = [(app, 0x403000, [("worker_main", "service.cc", 70)]),
                (pre, 0x7f1000001234, [("(anonymous namespace)::StartTrampoline", "hook_pthread.cc", 30)]),
                (libc, 0x7f0000094b42, [("start_thread", "pthread_create.c", 442)]),
                (libc, 0x7f0000126bb3, [("clone3", "clone3.S", 81)])]
        w.st_a = w.stack([(app, 0x401000, [("leaf_a", "service.cc", 12), ("hot_loop", "service.cc", 40)]),
                          (app, 0x402000, [("outer_step", "service.cc", 55)])] + root)
        w.st_b = w.stack([(app, 0x401100, [("leaf_b", "service.cc", 20)]),
                          (app, 0x402010, [("outer_step", "service.cc", 56)])] + root)
        main_root = [(app, 0x404000, [("main", "service.cc", 90)]),
                     (libc, 0x7f0000029d8f, [("__libc_start_call_main", "libc_start_call_main.h", 58)]),
                     (libc, 0x7f0000029e3f, [("__libc_start_main_impl", "libc-start.c", 392)]),
                     (app, 0x400100, [("_start", "", 0)])]
        w.st_main = w.stack([(app, 0x404100, [("spin", "service.cc", 80)])] + main_root)
        w.st_unknown = w.stack([(libc, 0x7f0000031234, [])] + main_root)
        w.st_poll = w.stack([(libc, 0x7f0000110000, [("__poll", "poll.c", 29)]),
                             (app, 0x405000, [("blocked_in_poll", "service.cc", 101)])] + root[1:])
        w.st_nap = w.stack([(libc, 0x7f0000120000, [("clock_nanosleep", "", 0)]),
                            (app, 0x405100, [("nap", "service.cc", 111)])] + root[1:])
    a, b = segs
    a.add("process.start", T0 - MS, pid=pid, ppid=1, exe="/opt/app/bin/service", service=service,
          alloc_sample_bytes=524288, cpu_hz=99, sampler="perf")
    a.add("thread.start", T0, tid=WORKER, parent_tid=pid, name="worker", start_routine="worker_main")
    a.add("thread.start", T0, tid=BLOCKER, parent_tid=pid, name="blocker", start_routine="blocker_main")
    order = ["a", "b", "a", "a", "b", "a", "a", "b", "a", "a"] * 30  # 210 a, 90 b, a first
    for i, which in enumerate(order):
        w = a if i < 150 else b
        w.add("cpu.sample", T0 + (i + 1) * MS, tid=WORKER, stack=w.st_a if which == "a" else w.st_b,
              period_ns=PERIOD)
    for i in range(50):
        w = a if i < 25 else b
        w.add("cpu.sample", T0 + i * MS + 500_000, tid=pid, stack=w.st_main, period_ns=PERIOD)
    b.add("cpu.sample", T0 + 400 * MS, tid=pid, stack=b.st_unknown, period_ns=PERIOD)
    for i in range(3):
        a.add("offcpu.sample", T0 + i * 100 * MS, tid=BLOCKER, stack=a.st_poll, duration_ns=100 * MS, reason="poll")
    b.add("offcpu.sample", T0 + 310 * MS, tid=BLOCKER, stack=b.st_nap, duration_ns=10 * MS, reason="nanosleep")
    b.add("request.done", T0 + 200 * MS, tid=WORKER, method="GET", duration_ns=5 * MS)
    b.add("socket.note", T0 + 201 * MS, tid=WORKER, bytes=17)
    a.write(os.path.join(directory, "svc-%d-1-0.seg" % pid))
    b.write(os.path.join(directory, "svc-%d-1-1.active" % pid), sealed=False)


def alloc_trace(directory):
    """Two processes allocating at the same addresses. Process 5000 (every
    allocation recorded, sample_bytes 1): kept() allocates 4 x 1000 bytes and
    keeps them, churn() 6 x 300 bytes freed again (one free lands in the next
    segment). Process 5001 (sample_bytes 524288): leak() 2 x 100000 bytes
    kept at addresses that process 5000 freed."""
    w0, w1, w2 = SegWriter(5000, seq=0), SegWriter(5000, seq=1), SegWriter(5001, seq=0)
    for w in (w0, w1, w2):
        app = w.mapping("/opt/app/bin/alloc", 0x400000, 0x480000)
        w.st_kept = w.stack([(app, 0x401000, [("kept", "alloc.cc", 10)]), (app, 0x402000, [("main", "alloc.cc", 50)])])
        w.st_churn = w.stack([(app, 0x401100, [("churn", "alloc.cc", 20)]), (app, 0x402010, [("main", "alloc.cc", 51)])])
        w.st_leak = w.stack([(app, 0x401200, [("leak", "alloc.cc", 30)]), (app, 0x402020, [("main", "alloc.cc", 52)])])
    for i in range(4):
        w0.add("alloc.sample", T0 + i * MS, tid=5000, address=0x1000 + i * 0x1000, size=1000,
               stack=w0.st_kept, sample_bytes=1)
    for i in range(6):
        w0.add("alloc.sample", T0 + (10 + i) * MS, tid=5000, address=0x9000 + i * 0x100, size=300,
               stack=w0.st_churn, sample_bytes=1)
    for i in range(5):
        w0.add("alloc.free", T0 + (20 + i) * MS, tid=5000, address=0x9000 + i * 0x100)
    w1.add("alloc.free", T0 + 30 * MS, tid=5000, address=0x9500)
    w1.add("cpu.sample", T0 + 31 * MS, tid=5000, stack=w1.st_kept, period_ns=PERIOD)
    for i in range(2):
        w2.add("alloc.sample", T0 + (40 + i) * MS, tid=5001, address=0x9000 + i * 0x100, size=100000,
               stack=w2.st_leak, sample_bytes=524288)
    w0.write(os.path.join(directory, "alloc-5000-1-0.seg"))
    w1.write(os.path.join(directory, "alloc-5000-1-1.seg"))
    w2.write(os.path.join(directory, "alloc-5001-1-0.seg"))


@pytest.fixture(scope="module")
def cpu_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpu")
    cpu_trace(str(d))
    return str(d)


@pytest.fixture(scope="module")
def alloc_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("alloc")
    alloc_trace(str(d))
    return str(d)


def dump(fr, *args, ok=True):
    proc = fr.dump_run(*args, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def tree_rows(text):
    """[(samples, total, self, drawn tree)] from tree output."""
    lines = text.splitlines()
    assert lines[0].split("|")[-1].strip() == "call tree"
    rows = []
    for line in lines[1:]:
        n, total, self_, tree = line.split(" | ", 3)
        rows.append((int(n.replace(",", "")), total.strip(), self_.strip(), tree))
    return rows


# ---- cpu --------------------------------------------------------------------------------

def test_tree_of_one_thread_starts_at_its_start_routine(fr, cpu_dir):
    out = dump(fr, "tree", "--thread", "worker", cpu_dir).stdout
    ms = lambda n: "{:,.2f}".format(n * PERIOD / 1e6)  # noqa: E731
    assert tree_rows(out) == [
        (300, ms(300), "0.00", "┬ worker_main"),
        (300, ms(300), "0.00", "╰┬ outer_step"),
        (210, ms(210), "0.00", " ├┬ hot_loop"),      # leaf_a was inlined into hot_loop
        (210, ms(210), ms(210), " │╰─ leaf_a"),
        (90, ms(90), ms(90), " ╰─ leaf_b"),
    ]
    # The same thread by tid; the whole process has the main thread too, rooted at main.
    assert dump(fr, "tree", "--thread", str(WORKER), cpu_dir).stdout == out
    everything = tree_rows(dump(fr, "tree", cpu_dir).stdout)
    roots = [r for r in everything if r[3][0] in "┬─"]
    assert [(r[0], r[3]) for r in roots] == [(51, "┬ main"), (300, "┬ worker_main")]
    assert (1, ms(1), ms(1), "╰─ [unknown] libc.so.6+0x59234") in everything


@pytest.mark.slow
def test_tree_min_pct_and_time_range(fr, cpu_dir):
    rows = tree_rows(dump(fr, "tree", "--min-pct", "25", cpu_dir).stdout)
    assert [r[3].strip("┬─├╰│ ") for r in rows] == ["worker_main", "outer_step", "hot_loop", "leaf_a",
                                                     "leaf_b"]
    # Worker samples are at T0 + 1..300 ms and the trace starts at T0 - 1 ms, so
    # they sit at +2..+301 ms: the first 100 ms hold 99 of them.
    rows = tree_rows(dump(fr, "tree", "--thread", "worker", "--to", "100ms", cpu_dir).stdout)
    assert rows[0][0] == 99
    rows = tree_rows(dump(fr, "tree", "--thread", "worker", "--from", "0.1", "--to", "0.2", cpu_dir).stdout)
    assert rows[0][0] == 101  # +100..+200 ms inclusive
    # The last event is at +401 ms: the last 100 ms hold only the sample at +301.
    rows = tree_rows(dump(fr, "tree", "--thread", "worker", "--from=-100ms", cpu_dir).stdout)
    assert rows[0][0] == 1

@pytest.mark.slow
def test_top_json(fr, cpu_dir):
    doc = json.loads(dump(fr, "top", "--json", cpu_dir).stdout)
    assert doc["kind"] == "cpu" and doc["samples"] == 351
    fns = {f["function"]: f for f in doc["functions"]}
    assert [f["function"] for f in doc["functions"][:3]] == ["leaf_a", "leaf_b", "spin"]
    assert fns["leaf_a"]["self"] == 210 and fns["leaf_a"]["file"] == "service.cc"
    assert fns["leaf_a"]["self_ns"] == 210 * PERIOD
    assert fns["outer_step"]["self"] == 0 and fns["outer_step"]["total"] == 300
    assert fns["hot_loop"]["total"] == 210 and fns["main"]["total"] == 51
    assert "start_thread" not in fns and "_start" not in fns  # bootstrap frames are trimmed
    assert fns["[unknown] libc.so.6+0x59234"]["self"] == 1
    limited = json.loads(dump(fr, "top", "--json", "--limit", "2", cpu_dir).stdout)
    assert len(limited["functions"]) == 2 and limited["samples"] == 351
    text = dump(fr, "top", "--limit", "3", cpu_dir).stdout.splitlines()
    assert text[0].startswith("CPU: 351 samples")
    assert text[2].split()[0] == "210" and "leaf_a" in text[2]


@pytest.mark.slow
def test_offcpu_profile_leads_with_the_blocking_function(fr, cpu_dir):
    doc = json.loads(dump(fr, "top", "--kind", "offcpu", "--json", cpu_dir).stdout)
    assert doc["samples"] == 4 and doc["total_ns"] == 310 * MS
    fns = {f["function"]: f for f in doc["functions"]}
    assert doc["functions"][0]["function"] == "__poll"
    assert fns["blocked_in_poll"]["total_ns"] == 300 * MS and fns["nap"]["total_ns"] == 10 * MS
    rows = tree_rows(dump(fr, "tree", "--kind", "offcpu", cpu_dir).stdout)
    assert rows[0] == (3, "300.00", "0.00", "┬ blocked_in_poll")
    folded = dump(fr, "folded", "--kind", "offcpu", cpu_dir).stdout.splitlines()
    assert folded == ["blocked_in_poll;__poll %d" % (300 * MS), "nap;clock_nanosleep %d" % (10 * MS)]


def test_folded_cpu_counts_samples(fr, cpu_dir):
    lines = dump(fr, "folded", "--thread", "worker", cpu_dir).stdout.splitlines()
    assert lines == ["worker_main;outer_step;hot_loop;leaf_a 210", "worker_main;outer_step;leaf_b 90"]
    assert dump(fr, "flame", "--folded", "--thread", "worker", cpu_dir).stdout.splitlines() == lines


def go_pprof(*args):
    go = shutil.which("go")
    assert go, "go is missing: `make deps` installs golang-go (a test dependency)"
    env = dict(os.environ, PPROF_BINARY_PATH="/nonexistent", PPROF_TMPDIR="/tmp")
    proc = subprocess.run([go, "tool", "pprof", "-symbolize=none"] + list(args),
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_pprof_export_reads_back(fr, cpu_dir, tmp_path):
    out = tmp_path / "cpu.pb.gz"
    proc = dump(fr, "pprof", "-o", out, cpu_dir)
    assert "351 samples" in proc.stderr
    assert gzip.decompress(out.read_bytes())
    top = go_pprof("-top", "-unit=ms", str(out))
    flat = {}
    for line in top.splitlines():
        p = line.split()
        if len(p) >= 6 and p[1].endswith("%") and p[4].endswith("%"):
            flat[p[5]] = p[0]
    assert flat["leaf_a"] == "%.2fms" % (210 * PERIOD / 1e6)
    assert flat["leaf_b"] == "%.2fms" % (90 * PERIOD / 1e6)
    assert "File: service" in top and "Build ID: 0123456789abcdef" in top
    raw = go_pprof("-raw", str(out))
    assert "samples/count cpu/nanoseconds[dflt]" in raw and "Period: %d" % PERIOD in raw
    lines = raw.splitlines()
    i = next(k for k, ln in enumerate(lines) if "leaf_a service.cc:12" in ln)
    assert lines[i + 1].split()[:2] == ["hot_loop", "service.cc:40"]  # inline chain kept
    assert "thread:[worker]" in raw
    # Thread labels filter: only the worker's 300 samples.
    top = go_pprof("-top", "-tagfocus=thread=worker", "-unit=ms", str(out))
    assert "spin" not in top and "leaf_a" in top


def test_pprof_offcpu_and_alloc_sample_types(fr, cpu_dir, alloc_dir, tmp_path):
    out = tmp_path / "off.pb.gz"
    dump(fr, "pprof", "--kind", "offcpu", "-o", out, cpu_dir)
    raw = go_pprof("-raw", str(out))
    assert "samples/count offcpu/nanoseconds[dflt]" in raw
    out = tmp_path / "live.pb.gz"
    dump(fr, "pprof", "--kind", "live", "-o", out, alloc_dir)
    raw = go_pprof("-raw", str(out))
    assert "inuse_objects/count inuse_space/bytes[dflt]" in raw
    top = go_pprof("-top", "-unit=B", "-nodefraction=0", str(out))
    assert "4000B" in top and "kept" in top and "churn" not in top


def test_flame_svg(fr, cpu_dir, tmp_path):
    out = tmp_path / "cpu.svg"
    dump(fr, "flame", "-o", out, cpu_dir)
    root = ET.parse(out).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    names = {g.get("data-n") for g in root.iter(ns + "g") if g.get("class") == "f"}
    assert {"all", "worker_main", "outer_step", "hot_loop", "leaf_a", "leaf_b", "main", "spin"} <= names
    assert "start_thread" not in names  # bootstrap frames are trimmed
    assert "351 samples" in "".join(t.text or "" for t in root.iter(ns + "text"))
    assert dump(fr, "flame", cpu_dir, ok=False).returncode == 2  # no -o and no --folded


def test_chrome_timeline(fr, cpu_dir, tmp_path):
    out = tmp_path / "trace.json"
    dump(fr, "chrome", "-o", out, cpu_dir)
    doc = json.loads(out.read_text())
    evs = doc["traceEvents"]
    meta = {(e["name"], e["tid"]): e["args"] for e in evs if e["ph"] == "M"}
    assert meta[("process_name", PID)]["name"] == "svc (pid %d)" % PID
    assert meta[("thread_name", WORKER)]["name"] == "worker"
    assert meta[("thread_name", BLOCKER)]["name"] == "blocker"
    assert meta[("thread_name", PID)]["name"] == "service"
    samples = [e for e in evs if e.get("cat") == "cpu"]
    assert len(samples) == 351 and all(e["ph"] == "i" for e in samples)
    assert sum(e["name"] == "leaf_a" and e["tid"] == WORKER for e in samples) == 210
    leaf_a = next(e for e in samples if e["name"] == "leaf_a")
    assert leaf_a["args"]["stack"][:3] == ["leaf_a", "hot_loop", "outer_step"]
    off = [e for e in evs if e.get("cat") == "offcpu"]
    assert sorted((e["ph"], e["dur"], e["name"]) for e in off) == \
        [("X", 10000.0, "offcpu.sample nanosleep")] + [("X", 100000.0, "offcpu.sample poll")] * 3
    assert off[0]["args"]["stack"][:2] == ["__poll", "blocked_in_poll"]
    req = next(e for e in evs if e.get("cat") == "request")
    assert (req["ph"], req["dur"], req["name"], req["tid"]) == ("X", 5000.0, "request.done GET", WORKER)
    note = next(e for e in evs if e.get("cat") == "socket")
    assert note["ph"] == "i" and note["args"]["bytes"] == 17
    # Time is relative to the first event (process.start at T0 - 1 ms), in us.
    first_sample = min(e["ts"] for e in samples)
    assert first_sample == pytest.approx(1000.0 + 500.0)
    ts = [e["ts"] for e in evs if e["ph"] != "M"]
    assert ts == sorted(ts)


# ---- alloc / live -----------------------------------------------------------------------

@pytest.mark.slow
def test_alloc_and_live_weights(fr, alloc_dir):
    doc = json.loads(dump(fr, "top", "--kind", "alloc", "--json", alloc_dir).stdout)
    fns = {f["function"]: f for f in doc["functions"]}
    assert fns["kept"]["self_bytes"] == 4000 and fns["churn"]["self_bytes"] == 1800
    p = -math.expm1(-100000 / 524288)
    assert fns["leak"]["self_bytes"] == 2 * round(100000 / p)
    assert fns["leak"]["self"] == 2
    live = json.loads(dump(fr, "top", "--kind", "live", "--json", alloc_dir).stdout)
    fns = {f["function"]: f for f in live["functions"]}
    # churn's blocks were all freed (the last one in the next segment); leak's
    # blocks sit at addresses process 5000 freed, but in another process.
    assert set(fns) == {"kept", "leak", "main"}
    assert fns["kept"]["self_bytes"] == 4000 and fns["leak"]["self_bytes"] == 2 * round(100000 / p)
    rows = tree_rows(dump(fr, "tree", "--kind", "live", alloc_dir).stdout)
    assert rows[0][:3] == (6, "{:,}".format(4000 + 2 * round(100000 / p)), "0")
    assert [r[3] for r in rows] == ["┬ main", "├─ kept", "╰─ leak"]
    # Live at +15 ms: the churn blocks allocated by then are not freed yet.
    live = json.loads(dump(fr, "top", "--kind", "live", "--json", "--to", "15ms", alloc_dir).stdout)
    fns = {f["function"]: f for f in live["functions"]}
    assert fns["churn"]["self"] == 6 and fns["kept"]["self"] == 4


# ---- bad input and empty profiles -------------------------------------------------------

@pytest.mark.slow
def test_bad_requests_give_one_line(fr, cpu_dir, tmp_path):
    for args in (["tree", "--thread", "nosuch", cpu_dir], ["top", "--from", "soon", cpu_dir],
                 ["tree", "--from", "2s", "--to", "1s", cpu_dir], ["tree", "--min-pct", "200", cpu_dir],
                 ["top", "--limit", "-1", cpu_dir]):
        proc = dump(fr, *args, ok=False)
        assert proc.returncode == 2, args
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = dump(fr, "tree", "--thread", "nosuch", cpu_dir, ok=False)
    assert "blocker" in proc.stderr and "worker" in proc.stderr
    proc = dump(fr, "pprof", "-o", tmp_path / "missing-dir" / "x.pb.gz", cpu_dir, ok=False)
    assert proc.returncode == 2 and "cannot write" in proc.stderr


@pytest.mark.slow
def test_not_a_segment_and_missing_files(fr, cpu_dir, tmp_path):
    junk = tmp_path / "junk.seg"
    junk.write_bytes(b"this is not a flightrec segment at all")
    for cmd in (["top"], ["tree"], ["folded"], ["pprof", "-o", tmp_path / "p.pb.gz"],
                ["flame", "-o", tmp_path / "f.svg"], ["chrome", "-o", tmp_path / "c.json"]):
        proc = dump(fr, *cmd, junk, ok=False)
        assert proc.returncode == 1, cmd
        assert proc.stderr.count(str(junk)) == 1 and "not a flightrec segment" in proc.stderr
    # Good input next to bad input is still reported, with a non-zero status.
    proc = dump(fr, "top", tmp_path / "nope", junk, cpu_dir, ok=False)
    assert proc.returncode == 1 and "leaf_a" in proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 2


def test_damaged_events_block_is_reported_and_skipped(fr, tmp_path):
    w = SegWriter(6000)
    app = w.mapping("/bin/app", 0x400000, 0x480000)
    st = w.stack([(app, 0x401000, [("work", "app.cc", 1)])])
    for i in range(3):
        w.add("cpu.sample", T0 + i * MS, tid=6000, stack=st, period_ns=PERIOD)
    # A well-framed EVENTS block (CRC ok) of cpu.sample (type id 1) claiming 5
    # events whose columns are cut short: the reader checks column extents
    # when it reads the block, so the one line about the file names it.
    w.raw_blocks.append((6, uvarint(1) + uvarint(5) + bytes([(2 << 4) | 8]) + struct.pack("<Q", T0)))
    w.write(str(tmp_path / "d-6000-1-0.seg"))
    proc = dump(fr, "top", "--json", tmp_path, ok=False)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["samples"] == 3
    assert len(proc.stderr.splitlines()) == 1 and "bad EVENTS block" in proc.stderr, proc.stderr
    proc = dump(fr, "chrome", "-o", tmp_path / "t.json", tmp_path, ok=False)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1 and "bad EVENTS block" in proc.stderr
    evs = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert sum(e.get("cat") == "cpu" for e in evs) == 3


@pytest.mark.slow
def test_empty_profiles_say_so(fr, alloc_dir, cpu_dir, tmp_path):
    proc = dump(fr, "tree", "--kind", "offcpu", alloc_dir)
    assert "no offcpu.sample events" in proc.stdout
    proc = dump(fr, "top", "--kind", "alloc", "--json", cpu_dir)
    assert json.loads(proc.stdout)["functions"] == [] and "no alloc.sample events" in proc.stderr
    proc = dump(fr, "folded", "--thread", "blocker", cpu_dir)
    assert proc.stdout == "" and "match the selection" in proc.stderr
    out = tmp_path / "empty.svg"
    dump(fr, "flame", "--kind", "live", "-o", out, cpu_dir)
    ET.parse(out)
    out = tmp_path / "empty.pb.gz"
    dump(fr, "pprof", "--kind", "offcpu", "-o", out, alloc_dir)
    assert "offcpu/nanoseconds" in go_pprof("-raw", str(out))
