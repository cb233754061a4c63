"""fleet_segments: writes a synthetic fleet's segments for the fleet benchmark
(issue 42, bench/run_fleet_bench.py): H hosts x M minutes, one process per
host in one of a few services, CPU samples at HZ per host on 4 worker
threads plus allocations (sampled, most freed), cut into 10-minute segments
named as the recorder names them. Stacks are drawn from per-service call
trees (depth 8-30 of ~300 functions with files and lines, libc and the
executable as mappings) so a fleet has thousands of distinct stacks, as
real services do.

The writer follows format/SPEC.md independently of the recorder (as
tests/integration/test_reports_profiles.py's does): 8-byte columns, time
delta-coded, every block zstd-compressed."""
import os
import random
import struct
from array import array

import zstandard

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
import sys  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from flightrec_lib.crc32c import crc32c  # noqa: E402

T, U, STR, STK = 1, 2, 4, 5
TYPES = {
    "process.start": [("pid", U, ""), ("ppid", U, ""), ("exe", STR, ""), ("service", STR, "")],
    "thread.start": [("tid", U, ""), ("parent_tid", U, ""), ("name", STR, ""), ("start_routine", STR, "")],
    "cpu.sample": [("tid", U, ""), ("stack", STK, ""), ("period_ns", U, "ns")],
    "alloc.sample": [("tid", U, ""), ("address", U, ""), ("size", U, "bytes"), ("stack", STK, ""),
                     ("sample_bytes", U, "bytes")],
    "alloc.free": [("tid", U, ""), ("address", U, "")],
    # Requests (FLIGHTREC_SOCKETS=1's records): each server connection
    # described at every segment start, one exchange per request.
    "socket.open": [("tid", U, ""), ("fd", U, ""), ("conn", U, ""), ("role", STR, ""), ("family", STR, ""),
                    ("sock_type", STR, ""), ("local", STR, ""), ("peer", STR, ""), ("listener", U, "")],
    "socket.exchange": [("tid", U, ""), ("fd", U, ""), ("conn", U, ""), ("flags", U, ""), ("bytes_in", U, "bytes"),
                        ("bytes_out", U, "bytes"), ("calls_in", U, ""), ("calls_out", U, ""), ("errors", U, ""),
                        ("would_block", U, ""), ("ask_ns", U, "ns"), ("answer_ns", U, "ns"), ("end", U, "ns"),
                        ("endpoint", STR, "")],
}
ENDPOINTS = ["GET /users/:id", "GET /items/:id", "POST /orders", "GET /search", "GET /health"]
CONNS = 8  # keep-alive server connections per host
SERVICES = ["api", "auth", "search", "billing", "feed"]
SEGMENT_NS = 600 * 10 ** 9
PERIOD = 10_101_010


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


class Writer:
    def __init__(self, pid, service, host, seq, anchor_mono, anchor_real):
        self.pid, self.service, self.host, self.seq = pid, service, host, seq
        self.anchor_mono, self.anchor_real = anchor_mono, anchor_real
        self.strings, self.mappings, self.locations, self.stacks = {}, {}, {}, {}
        self.events = {}
        self.cctx = zstandard.ZstdCompressor(level=3)

    def _intern(self, table, key):
        if key not in table:
            table[key] = len(table) + 1
        return table[key]

    def s(self, text):
        return 0 if not text else self._intern(self.strings, text)

    def mapping(self, path, start, end, build_id):
        return self._intern(self.mappings, (start, end, 0, self.s(path), self.s(build_id)))

    def stack(self, frames):
        locs = tuple(self._intern(self.locations, (m, a, ((self.s(f), self.s(fl), ln),)))
                     for m, a, f, fl, ln in frames)
        return self._intern(self.stacks, locs)

    def add_rows(self, type_name, rows):
        self.events.setdefault(type_name, []).extend(rows)

    def _block(self, kind, payload):
        z = self.cctx.compress(payload)
        head = struct.pack("<IHHI", len(z), kind, 1, len(payload))
        return struct.pack("<I", 0x4B4C4246) + head + struct.pack("<I", crc32c(head + z)) + z

    @staticmethod
    def _table(entries):
        return uvarint(1) + uvarint(len(entries)) + b"".join(entries)

    def write(self, path):
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
        out += self._block(2, self._table([sstr(t) for t in sorted(self.strings, key=self.strings.get)]))
        out += self._block(3, self._table([b"".join(map(uvarint, m)) for m in
                                           sorted(self.mappings, key=self.mappings.get)]))
        out += self._block(4, self._table([uvarint(m) + uvarint(a) + uvarint(len(lines)) +
                                           b"".join(uvarint(f) + uvarint(fl) + uvarint(ln) for f, fl, ln in lines)
                                           for m, a, lines in sorted(self.locations, key=self.locations.get)]))
        out += self._block(5, self._table([uvarint(len(s)) + b"".join(map(uvarint, s)) for s in
                                           sorted(self.stacks, key=self.stacks.get)]))
        first = last = None
        count = 0
        for name, rows in self.events.items():
            rows.sort(key=lambda r: r[0])
            for i in range(0, len(rows), 65536):
                part = rows[i:i + 65536]
                cols = list(zip(*part))
                times = cols[0]
                prev = times[0]
                deltas = array("Q", [prev])
                for t in times:
                    d = t - prev
                    deltas.append(((d << 1) ^ (d >> 63)) & 0xFFFFFFFFFFFFFFFF)
                    prev = t
                payload = bytearray(uvarint(type_ids[name]) + uvarint(len(part)))
                payload += bytes([(2 << 4) | 8]) + deltas.tobytes()
                for col in cols[1:]:
                    payload += bytes([8]) + array("Q", col).tobytes()
                out += self._block(6, bytes(payload))
                first = times[0] if first is None or times[0] < first else first
                last = times[-1] if last is None or times[-1] > last else last
                count += len(part)
        footer = [("events", count), ("first_time_ns", first), ("last_time_ns", last)]
        out += self._block(7, uvarint(len(footer)) + b"".join(sstr(k) + uvarint(v) for k, v in footer))
        with open(path, "wb") as f:
            f.write(out)
        return count


def service_tree(rng, service, nfuncs=300):
    """Call paths of a service: (function, file, line, address) frames, leaf first."""
    funcs = [("%s::%s_%d" % (service, rng.choice(["handle", "parse", "encode", "lookup", "render", "hash",
                                                  "compress", "query", "merge", "scan"]), i),
              "src/%s/mod%d.cc" % (service, i % 40), 10 + i, 0x401000 + 0x40 * i) for i in range(nfuncs)]
    paths = []
    for _ in range(400):
        depth = rng.randint(6, 28)
        paths.append([rng.choice(funcs) for _ in range(depth)])
    return paths


def write_fleet(out, hosts=100, minutes=60, hz=20, alloc_per_s=4, seed=42, start_real=1_790_000_000 * 10 ** 9,
                req_per_s=0):
    """Writes the fleet under out/<service>/<host>/; returns (segments, events, bytes).
    req_per_s: server requests per second per host (socket.exchange on
    CONNS keep-alive connections, latencies log-normal around 5 ms)."""
    rng = random.Random(seed)
    trees = {s: service_tree(random.Random(hash(s) & 0xffff), s) for s in SERVICES}
    nseg = nev = nbytes = 0
    span = minutes * 60 * 10 ** 9
    for h in range(hosts):
        service = SERVICES[h % len(SERVICES)]
        host = "host-%03d" % h
        pid = 1000 + h
        tree = trees[service]
        hot = rng.sample(range(len(tree)), 40)  # a few paths take most samples
        d = os.path.join(out, service, host)
        os.makedirs(d, exist_ok=True)
        anchor_mono = 10 ** 12
        tids = [pid + 1 + i for i in range(4)]
        for seq, t0 in enumerate(range(0, span, SEGMENT_NS)):
            w = Writer(pid, service, host, seq, anchor_mono, start_real)
            app = w.mapping("/opt/%s/bin/%s" % (service, service), 0x400000, 0x800000, "%016x" % (h % 5))
            libc = w.mapping("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f0000000000, 0x7f0000200000, "feedface")
            root = [(libc, 0x7f0000094b42, "start_thread", "pthread_create.c", 442),
                    (libc, 0x7f0000126bb3, "clone3", "clone3.S", 81)]
            stacks = [w.stack([(app, a, f, fl, ln) for f, fl, ln, a in p] + root) for p in tree]
            if seq == 0:
                w.add_rows("process.start", [(anchor_mono, pid, 1, w.s("/opt/%s/bin/%s" % (service, service)),
                                              w.s(service))])
                w.add_rows("thread.start", [(anchor_mono + 1 + i, tid, pid, w.s("worker-%d" % i), w.s("work"))
                                            for i, tid in enumerate(tids)])
            end = min(t0 + SEGMENT_NS, span)
            n = (end - t0) * hz // 10 ** 9
            step = (end - t0) // max(n, 1)
            rows = []
            for i in range(n):
                k = hot[int(rng.paretovariate(1.2)) % 40] if rng.random() < 0.8 else rng.randrange(len(stacks))
                rows.append((anchor_mono + t0 + i * step + rng.randrange(step), tids[i % 4], stacks[k], PERIOD))
            w.add_rows("cpu.sample", rows)
            na = (end - t0) * alloc_per_s // 10 ** 9
            allocs, frees = [], []
            for i in range(na):
                t = anchor_mono + t0 + rng.randrange(end - t0)
                addr = 0x5500000000 + rng.randrange(1 << 24) * 16
                allocs.append((t, tids[i % 4], addr, rng.choice([64, 256, 4096, 65536]),
                               stacks[rng.randrange(len(stacks))], 524288))
                if rng.random() < 0.9:
                    frees.append((min(t + rng.randrange(10 ** 9), anchor_mono + end - 1), tids[i % 4], addr))
            w.add_rows("alloc.sample", allocs)
            w.add_rows("alloc.free", frees)
            nr = (end - t0) * req_per_s // 10 ** 9
            if nr:
                opens = [(anchor_mono + t0, tids[c % 4], 10 + c, c + 1, w.s("server"), w.s("inet"), w.s("stream"),
                          w.s("10.0.%d.%d:8080" % (h // 250, h % 250)), w.s("10.1.0.%d:%d" % (c, 40000 + c)), 100)
                         for c in range(CONNS)]
                w.add_rows("socket.open", opens)
                eps = [w.s(e) for e in ENDPOINTS]
                rstep = (end - t0) // nr
                ex = []
                for i in range(nr):
                    t = anchor_mono + t0 + i * rstep + rng.randrange(rstep // 2)
                    dur = min(int(rng.lognormvariate(15.4, 0.9)), rstep // 2)
                    c = i % CONNS
                    bin_, bout = rng.randrange(200, 2000), rng.randrange(500, 50000)
                    ex.append((t, tids[i % 4], 10 + c, c + 1, 0, bin_, bout, 1, 1 + bout // 16384, 0, 0,
                               dur // 2, dur // 2, t + dur, eps[int(rng.paretovariate(1.5)) % len(eps)]))
                w.add_rows("socket.exchange", ex)
            stamp = start_real + t0
            name = "%s-%s-%d-%04d.seg" % (_stamp(stamp), service, pid, seq)
            path = os.path.join(d, name)
            nev += w.write(path)
            nbytes += os.path.getsize(path)
            nseg += 1
    return nseg, nev, nbytes


def _stamp(ns):
    import datetime
    dt = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return dt.strftime("%Y%m%dT%H%M%S.") + "%03dZ" % (dt.microsecond // 1000)
