#!/usr/bin/python3
"""dump_corruption: a corruption fuzzer for scripts/flightrec-dump (issue #7,
"Bad input"). This file owns the fuzzer: seed generation, an independent
walker of the block framing, the mutations, the sandboxed worker that runs
every flightrec-dump subcommand on a mutant, and the judge.

Seeds are real segments, recorded at run time by test programs under the
preload (sockets, CPU and off-CPU samples, allocations, threads, requests,
a crash, ring drops), cached in BUILD/fuzz-dump-seeds. A mutant is a seed
plus a list of mutations, each a small JSON-able dict that names blocks by
kind and ordinal (not by byte offset), so a mutation found on one recording
reproduces on a fresh one (tests/integration/test_dump_fuzz.py keeps the
crashers that way).

Every mutant is run through every subcommand in-process (cli.main(argv)) in
a worker process with an address-space limit (RLIMIT_AS) and a per-command
time limit. A failure is: a traceback or internal error, a hang, a memory
blow-up, a worker that died, an exit status other than 0/1, more than one
stderr line naming the damaged file, --json output that is not JSON, or an
event of an intact block missing from `events --json`. Each command's peak
RSS is measured (VmHWM, reset before it through /proc/self/clear_refs) and a
command over RSS_BUDGET_MB fails; `--max-seconds` (make fuzz) also fails a
command that used more CPU seconds than that. Time limits count CPU seconds,
never wall seconds, so a busy machine cannot fail a finite command. Besides small damage, mutations insert hand-made
hostile blocks (hostile_segments.py: value, frame and string bombs, walls of
false sync words) into real seeds.

    dump_corruption.py --build build --seconds 30            # random seed, printed
    dump_corruption.py --build build --seed 7 --only 123     # replay mutant 123 of seed 7
"""
import argparse
import gzip
import io
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

from xml.etree import ElementTree

import zstandard

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from flightrec_lib.crc32c import crc32c  # noqa: E402
import hostile_segments as hs  # noqa: E402  (this directory)

MAGIC = b"FLTRECSG"
SYNC = b"FBLK"
BLOCK_HEADER = 20
KINDS = {"SCHEMA": 1, "STRINGS": 2, "MAPPINGS": 3, "LOCATIONS": 4, "STACKS": 5, "EVENTS": 6, "FOOTER": 7}
KIND_NAMES = {v: k for k, v in KINDS.items()}
RSS_BUDGET_MB = 400  # peak RSS one command may reach on any mutant (issue 29: "a few hundred MB")
HUGE = [0, 1, 0x7F, 0xFF, 0xFFFF, 1 << 20, (1 << 20) + 1, (1 << 26) + 1, 1 << 31, 0xFFFFFFFF, 1 << 32,
        (1 << 32) + 1, 1 << 62, 1 << 63, (1 << 63) + 1, (1 << 64) - 1]

# ---------------------------------------------------------------- seeds

# name -> (program argv, extra environment, expected exit status)
SEED_RECIPES = {
    # sockets (client/server, requests, accept queue), cpu + offcpu samples,
    # allocations and frees, thread starts/names/ends; runs > 1 s, so the
    # writer flushes several times (several SCHEMA and table blocks).
    "sockets": (["sock_echo", "2", "40", "6000"],
                {"FLIGHTREC_ALLOC_SAMPLE_BYTES": "4096", "FLIGHTREC_CPU_HZ": "499"}, 0),
    # a crash event with a symbolized stack
    "crash": (["crash_test", "segv"], {"FLIGHTREC_ALLOC_SAMPLE_BYTES": "1024"}, -signal.SIGSEGV),
    # a 4 KiB ring under load: recorder.dropped events and dropped.* footer keys
    "drops": (["load_mixed", "3", "2000"], {"FLIGHTREC_RING_BYTES": "4096", "FLIGHTREC_ALLOC_SAMPLE_BYTES": "1"}, 0),
}


def _no_core():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def record_seed(build, name, out_dir):
    """Runs the seed's program under the preload; returns the sealed segment's bytes."""
    argv, extra, want = SEED_RECIPES[name]
    prog = os.path.join(build, "programs", argv[0])
    if not os.path.exists(prog):
        raise RuntimeError("%s is not built (run make)" % prog)
    rec = tempfile.mkdtemp(prefix="seed-%s-" % name, dir=out_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLIGHTREC_")}
    env.update(extra, LD_PRELOAD=os.path.join(build, "libflightrec.so"), FLIGHTREC_OUTPUT=rec)
    proc = subprocess.run([prog] + argv[1:], env=env, capture_output=True, timeout=120, preexec_fn=_no_core)
    if proc.returncode != want:
        raise RuntimeError("seed %s: %s exited %d\n%s" % (name, argv, proc.returncode, proc.stderr.decode()))
    segs = sorted(f for f in os.listdir(rec) if f.endswith(".seg"))
    if not segs:
        raise RuntimeError("seed %s: no sealed segment in %s" % (name, rec))
    with open(os.path.join(rec, segs[0]), "rb") as f:
        data = f.read()
    shutil.rmtree(rec, True)
    return data


def make_seeds(build, cache_dir=None):
    """{name: bytes}. With cache_dir, seeds recorded earlier by the same
    libflightrec.so are reused (so --seed S replays the same mutants)."""
    lib = os.path.join(build, "libflightrec.so")
    seeds = {}
    work = cache_dir or tempfile.mkdtemp(prefix="fuzz-dump-seeds-")
    os.makedirs(work, exist_ok=True)
    for name in SEED_RECIPES:
        path = os.path.join(work, name + ".seg")
        if cache_dir and os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(lib):
            with open(path, "rb") as f:
                seeds[name] = f.read()
            continue
        seeds[name] = record_seed(build, name, work)
        with open(path, "wb") as f:
            f.write(seeds[name])
    if not cache_dir:
        shutil.rmtree(work, True)
    return seeds


# ---------------------------------------------------------------- framing
# An independent walker (format/SPEC.md sections 3-5), not flightrec_lib's.

def uvarint(b, p):
    v = shift = 0
    while True:
        if p >= len(b) or shift > 63:
            raise ValueError("bad varint")
        byte = b[p]
        p += 1
        v |= (byte & 0x7F) << shift
        if byte < 0x80:
            return v, p
        shift += 7


def enc_uvarint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        if v < 0x80:
            out.append(v)
            return bytes(out)
        out.append((v & 0x7F) | 0x80)
        v >>= 7


def zigzag(v):
    v = v - (1 << 64) if v >= 1 << 63 else v
    return ((v << 1) ^ (v >> 63)) & ((1 << 64) - 1)


def unzigzag(u):
    return (u >> 1) ^ -(u & 1)


class Block:
    __slots__ = ("offset", "kind", "flags", "payload_len", "raw_len", "data")

    def __init__(self, data, offset):
        self.offset = offset
        self.payload_len = int.from_bytes(data[offset + 4:offset + 8], "little")
        self.kind = int.from_bytes(data[offset + 8:offset + 10], "little")
        self.flags = int.from_bytes(data[offset + 10:offset + 12], "little")
        self.raw_len = int.from_bytes(data[offset + 12:offset + 16], "little")
        self.data = bytes(data[offset:offset + BLOCK_HEADER + self.payload_len])

    @property
    def end(self):
        return self.offset + BLOCK_HEADER + self.payload_len

    @property
    def payload(self):
        return self.data[BLOCK_HEADER:]

    def raw(self):
        if self.flags & 1:
            return zstandard.ZstdDecompressor().decompress(self.payload, max_output_size=self.raw_len)
        return self.payload


def header_len(data):
    return int.from_bytes(data[12:16], "little")


def walk(data):
    """(header_len, [Block]) of an intact segment."""
    hl = header_len(data)
    blocks, p = [], hl
    while p + BLOCK_HEADER <= len(data):
        b = Block(data, p)
        if b.end > len(data):
            break
        blocks.append(b)
        p = b.end
    return hl, blocks


def make_block(kind, raw, compress=None, flags=None):
    """A well-formed block (length, flags and CRC consistent) around a raw payload."""
    if compress is None:
        compress = bool(flags and flags & 1)
    payload = zstandard.ZstdCompressor(level=3).compress(raw) if compress else raw
    fl = (flags if flags is not None else 0) & ~1 | (1 if compress else 0)
    return frame(kind, fl, len(raw), payload)


def frame(kind, flags, raw_len, payload, payload_len=None):
    mid = ((len(payload) if payload_len is None else payload_len).to_bytes(4, "little")
           + kind.to_bytes(2, "little") + flags.to_bytes(2, "little") + (raw_len & 0xFFFFFFFF).to_bytes(4, "little"))
    return SYNC + mid + crc32c(payload, crc32c(mid)).to_bytes(4, "little") + payload


def fix_crc(blockbytes):
    """Recomputes a block's CRC over its header fields and whatever payload
    its (possibly altered) payload_len covers within blockbytes."""
    b = bytearray(blockbytes)
    n = int.from_bytes(b[4:8], "little")
    b[16:20] = crc32c(bytes(b[20:20 + n]), crc32c(bytes(b[4:16]))).to_bytes(4, "little")
    return bytes(b)


# -------------------------------------------------- payload structure (sites)
# A "site" is a structural field of a decompressed payload: (pos, len, what),
# what in {"varint", "u8", "u64"}. Mutating one and re-framing the block
# reaches the payload parsers with a good CRC.

def _table_entry_sites(kind, b, p, sites):
    if kind == KINDS["STRINGS"]:
        n, q = uvarint(b, p)
        sites.append((p, q - p, "varint"))
        return q + n
    nvar = {KINDS["MAPPINGS"]: 5, KINDS["LOCATIONS"]: 3, KINDS["STACKS"]: 1}[kind]
    counts = []
    for _ in range(nvar):
        v, q = uvarint(b, p)
        sites.append((p, q - p, "varint"))
        counts.append(v)
        p = q
    extra = counts[-1] * 3 if kind == KINDS["LOCATIONS"] else counts[0] if kind == KINDS["STACKS"] else 0
    for _ in range(extra):
        v, q = uvarint(b, p)
        sites.append((p, q - p, "varint"))
        p = q
    return p


def column_layout(b, p, count):
    """[(enc_pos, data_start, data_end)] of an EVENTS payload's columns, from p."""
    cols = []
    while p < len(b):
        enc = b[p]
        scheme, w = enc >> 4, enc & 15
        q = p + 1
        if scheme >= 5:  # packed (SPEC.md 5.4): u8 shift, PACKED_DELTA a u64 base, W byte planes
            q += 1 + (8 if scheme == 7 else 0)
        if scheme == 2:
            q += 8
        if scheme == 3:
            w = 8
        if scheme == 4:
            lens = [int.from_bytes(b[q + i * w:q + (i + 1) * w], "little") for i in range(count)] if w else [0] * count
            end = q + count * w + sum(lens)
        else:
            end = q + count * w
        if end > len(b) or w not in (0, 1, 2, 4, 8):
            break
        cols.append((p, q, end))
        p = end
    return cols


def sites(kind, b):
    out = []
    try:
        if kind == KINDS["SCHEMA"]:
            n, p = uvarint(b, 0)
            out.append((0, p, "varint"))
            for _ in range(n):
                q = p
                _, p = uvarint(b, p)
                out.append((q, p - q, "varint"))                    # type id
                ln, q = uvarint(b, p)
                out.append((p, q - p, "varint"))                    # name length
                p = q + ln
                nf, q = uvarint(b, p)
                out.append((p, q - p, "varint"))                    # nfields
                p = q
                for _ in range(nf):
                    ln, q = uvarint(b, p)
                    out.append((p, q - p, "varint"))                # field name length
                    p = q + ln
                    out.append((p, 1, "u8"))                        # type code
                    ln, q = uvarint(b, p + 1)
                    out.append((p + 1, q - p - 1, "varint"))        # unit length
                    p = q + ln
        elif kind in (KINDS["STRINGS"], KINDS["MAPPINGS"], KINDS["LOCATIONS"], KINDS["STACKS"]):
            _, p = uvarint(b, 0)
            out.append((0, p, "varint"))                            # first id
            n, q = uvarint(b, p)
            out.append((p, q - p, "varint"))                        # count
            p = q
            for _ in range(n):
                p = _table_entry_sites(kind, b, p, out)
        elif kind == KINDS["EVENTS"]:
            _, p = uvarint(b, 0)
            out.append((0, p, "varint"))                            # type id
            count, q = uvarint(b, p)
            out.append((p, q - p, "varint"))                        # count
            for enc, start, _ in column_layout(b, q, count):
                out.append((enc, 1, "u8"))                          # encoding
                if b[enc] >> 4 == 2:
                    out.append((enc + 1, 8, "u64"))                 # delta base
                if b[enc] >> 4 >= 5:
                    out.append((enc + 1, 1, "u8"))                  # packed shift
                if b[enc] >> 4 == 7:
                    out.append((enc + 2, 8, "u64"))                 # packed delta base
                if b[enc] >> 4 == 4 and b[enc] & 15:
                    out.append((start, b[enc] & 15, "width"))       # first byte length
        elif kind == KINDS["FOOTER"]:
            n, p = uvarint(b, 0)
            out.append((0, p, "varint"))
            for _ in range(n):
                ln, q = uvarint(b, p)
                out.append((p, q - p, "varint"))
                p = q + ln
                _, q = uvarint(b, p)
                out.append((p, q - p, "varint"))
                p = q
    except (ValueError, IndexError):
        pass
    return out


# ---------------------------------------------------------- schema (semantic)

def parse_schema(b):
    n, p = uvarint(b, 0)
    types = []
    for _ in range(n):
        tid, p = uvarint(b, p)
        ln, p = uvarint(b, p)
        name = bytes(b[p:p + ln])
        p += ln
        nf, p = uvarint(b, p)
        fields = []
        for _ in range(nf):
            ln, p = uvarint(b, p)
            fname = bytes(b[p:p + ln])
            p += ln
            code = b[p]
            ln, q = uvarint(b, p + 1)
            fields.append([fname, code, bytes(b[q:q + ln])])
            p = q + ln
        types.append([tid, name, fields])
    return types


def encode_schema(types):
    out = bytearray(enc_uvarint(len(types)))
    for tid, name, fields in types:
        out += enc_uvarint(tid) + enc_uvarint(len(name)) + name + enc_uvarint(len(fields))
        for fname, code, unit in fields:
            out += enc_uvarint(len(fname)) + fname + bytes([code & 0xFF]) + enc_uvarint(len(unit)) + unit
    return bytes(out)


# ---------------------------------------------------------- column values

def decode_ints(b, enc_pos, count):
    """(scheme, values) of an integer column; values as python ints (DELTA decoded)."""
    enc = b[enc_pos]
    scheme, w = enc >> 4, enc & 15
    p = enc_pos + 1
    base = None
    if scheme == 2:
        base = int.from_bytes(b[p:p + 8], "little")
        p += 8
    raw = [int.from_bytes(b[p + i * w:p + (i + 1) * w], "little") if w else 0 for i in range(count)]
    if scheme == 0:
        return scheme, raw
    vals = [unzigzag(u) for u in raw]
    if scheme == 1:
        return scheme, vals
    out, v = [], base
    for d in vals:
        v = (v + d) % (1 << 64)
        out.append(v)
    return scheme, out


def encode_ints(scheme, values):
    """A W=8 column of the given scheme holding values (ints mod 2^64)."""
    if scheme == 0:
        return bytes([0x08]) + b"".join((v % (1 << 64)).to_bytes(8, "little") for v in values)
    if scheme == 1:
        return bytes([0x18]) + b"".join(zigzag(v % (1 << 64)).to_bytes(8, "little") for v in values)
    base = values[0] % (1 << 64)
    out, prev = bytearray([0x28]) + base.to_bytes(8, "little"), base
    for v in values:
        out += zigzag((v - prev) % (1 << 64)).to_bytes(8, "little")
        prev = v % (1 << 64)
    return bytes(out)


# ---------------------------------------------------------------- mutations

def select(blocks, sel):
    """The block a selector names: {"kind": "EVENTS", "nth": 3} (nth wraps),
    {"index": i} (wraps), or None when the seed has no such block."""
    if not blocks:
        return None
    if "index" in sel:
        return sel["index"] % len(blocks)
    idx = [i for i, b in enumerate(blocks) if b.kind == KINDS[sel["kind"]]]
    return idx[sel["nth"] % len(idx)] if idx else None


def _rebuild(data, blocks, i, newblock):
    b = blocks[i]
    return data[:b.offset] + newblock + data[b.end:]


def _fill(rs, n, fill):
    if fill == "zero":
        return bytes(n)
    if fill == "ff":
        return b"\xff" * n
    rng = random.Random(rs)
    if fill == "sync":  # garbage strewn with sync words and plausible block headers
        out = bytearray(rng.getrandbits(8) for _ in range(n))
        for _ in range(max(1, n // 24)):
            q = rng.randrange(max(1, n - 20))
            out[q:q + 4] = SYNC
            if q + 12 <= n:
                out[q + 4:q + 8] = rng.choice([0, 1, 8, n, 1 << 20]).to_bytes(4, "little")
                out[q + 8:q + 10] = rng.randrange(1, 8).to_bytes(2, "little")
        return bytes(out[:n])
    return bytes(rng.getrandbits(8) for _ in range(n))


def _payload_edit(data, blocks, i, fn, keep_flags=True):
    """Re-frames block i around fn(raw payload) (recompressed when it was)."""
    b = blocks[i]
    try:
        raw = b.raw()
    except zstandard.ZstdError:
        return data
    new = fn(bytearray(raw))
    if new is None:
        return data
    return _rebuild(data, blocks, i, make_block(b.kind, bytes(new), compress=bool(b.flags & 1)))


def apply_one(data, m):
    """Applies one mutation dict; returns the new bytes (unchanged when the
    mutation names something the seed lacks)."""
    op = m["op"]
    hl, blocks = walk(data)
    if op == "random_file":
        body = _fill(m["rs"], m["len"], "random")
        if m.get("magic"):
            body = (MAGIC + body)[:max(m["len"], 8)]
        return body
    if op == "header":
        b = bytearray(data)
        pos = int(m["at"] * hl)
        b[pos] ^= 1 << m["bit"]
        if m.get("fix_crc") and hl <= len(b):
            b[hl - 4:hl] = crc32c(bytes(b[:hl - 4])).to_bytes(4, "little")
        return bytes(b)
    if op == "header_len":
        b = bytearray(data)
        b[12:16] = (m["value"] & 0xFFFFFFFF).to_bytes(4, "little")
        return bytes(b)
    if op == "truncate":
        if "boundary" in m:
            cuts = [hl] + [b.end for b in blocks]
            return data[:cuts[m["boundary"] % len(cuts)]]
        return data[:int(m["at"] * len(data))]
    if op == "insert":
        cuts = [hl] + [b.end for b in blocks]
        c = cuts[m["boundary"] % len(cuts)]
        return data[:c] + _fill(m["rs"], m["len"], m.get("fill", "random")) + data[c:]
    if op == "hostile":  # a hand-made bomb or sync wall at a block boundary (hostile_segments)
        cuts = [hl] + [b.end for b in blocks]
        c = cuts[m["boundary"] % len(cuts)]
        return data[:c] + _hostile(m["what"]) + data[c:]
    i = select(blocks, m["block"]) if "block" in m else None
    if "block" in m and i is None:
        return data
    b = blocks[i] if i is not None else None
    if op == "flip":
        pos = b.offset + int(m["at"] * len(b.data)) % len(b.data)
        out = bytearray(data)
        out[pos] ^= 1 << m["bit"]
        return bytes(out)
    if op == "overwrite":
        pos = b.offset + int(m["at"] * len(b.data)) % len(b.data)
        fill = _fill(m.get("rs", 0), m["len"], m.get("fill", "random"))
        return data[:pos] + fill + data[pos + len(fill):]
    if op == "field":
        # A block-header field set to value; fix_crc makes it pass the CRC check.
        off = {"payload_len": 4, "kind": 8, "flags": 10, "raw_len": 12}[m["field"]]
        width = 2 if m["field"] in ("kind", "flags") else 4
        hb = bytearray(b.data[:BLOCK_HEADER])
        hb[off:off + width] = (m["value"] & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        nb = bytes(hb) + b.payload
        if m.get("fix_crc"):
            # The CRC covers payload_len bytes from the block start: whatever the new length claims.
            tail = data[b.offset + BLOCK_HEADER:]
            n = int.from_bytes(hb[4:8], "little")
            if n <= len(tail):
                nb = fix_crc(bytes(hb) + tail[:n])[:BLOCK_HEADER] + b.payload
        return data[:b.offset] + nb + data[b.end:]
    if op == "site":
        def edit(raw):
            ss = sites(b.kind, raw)
            if not ss:
                return None
            pos, ln, what = ss[m["site"] % len(ss)]
            v = m["value"]
            if what == "varint":
                rep = enc_uvarint(v) if not m.get("overlong") else b"\xff" * 10 + b"\x01"
            elif what == "u8":
                rep = bytes([v & 0xFF])
            else:
                rep = (v & ((1 << (8 * ln)) - 1)).to_bytes(ln, "little")
            return raw[:pos] + rep + raw[pos + ln:]
        return _payload_edit(data, blocks, i, edit)
    if op == "payload_flip":
        def edit(raw):
            if not raw:
                return None
            raw[int(m["at"] * len(raw)) % len(raw)] ^= m["xor"] or 1
            return raw
        return _payload_edit(data, blocks, i, edit)
    if op == "payload_cut":
        return _payload_edit(data, blocks, i, lambda raw: raw[:int(m["at"] * len(raw))])
    if op == "payload_grow":  # trailing bytes after the parsed content (must be ignored)
        return _payload_edit(data, blocks, i, lambda raw: raw + _fill(m["rs"], m["len"], "random"))
    if op == "column_value":
        def edit(raw):
            _, p = uvarint(raw, 0)
            count, p = uvarint(raw, p)
            cols = column_layout(raw, p, count)
            ints = [c for c in cols if raw[c[0]] >> 4 in (0, 1, 2)]
            if not ints:
                return None
            enc, _, end = ints[m["column"] % len(ints)]
            scheme, vals = decode_ints(raw, enc, count)
            k = int(m["index"] * count) % count
            vals[k] = m["value"] if not m.get("all") else m["value"]
            if m.get("all"):
                vals = [m["value"]] * count
            return raw[:enc] + encode_ints(scheme, vals) + raw[end:]
        return _payload_edit(data, blocks, i, edit)
    if op == "zstd":
        mode = m["mode"]
        rng = random.Random(m["rs"])
        raw_len = b.raw_len
        if mode == "random":
            payload = _fill(m["rs"], max(1, b.payload_len), "random")
        elif mode == "no_size":  # a valid frame that does not declare its size
            cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
            payload = cobj.compress(b.raw()) + cobj.flush()
        elif mode == "wrong_size":
            payload = zstandard.ZstdCompressor().compress(b.raw() + b"\0" * rng.randrange(1, 64))
        elif mode == "bomb":  # declares exactly raw_len = 64 MiB of zeros: legal, and big
            raw_len = 64 << 20
            payload = zstandard.ZstdCompressor(level=1).compress(b.raw()[:64] + bytes(raw_len - min(64, len(b.raw()))))
        elif mode == "lie":  # decompresses to more than raw_len says
            raw = b.raw()
            payload = zstandard.ZstdCompressor().compress(raw + raw)
            raw_len = len(raw)
            payload = _patch_frame_size(payload, raw_len)
        else:  # truncated frame
            payload = b.payload[:max(1, b.payload_len // 2)]
        return _rebuild(data, blocks, i, frame(b.kind, b.flags | 1, raw_len, payload))
    if op == "split":
        # A table block split in two valid blocks (ids continued), as a writer
        # flushing twice would leave it: the damage that follows meets tables
        # spread over blocks even when the seed wrote each in one.
        if b.kind not in (KINDS["STRINGS"], KINDS["MAPPINGS"], KINDS["LOCATIONS"], KINDS["STACKS"]):
            return data
        raw = b.raw()
        first, p = uvarint(raw, 0)
        n, q = uvarint(raw, p)
        if n < 2:
            return data
        ends, pos = [], q
        for _ in range(n):
            pos = _table_entry_sites(b.kind, raw, pos, [])
            ends.append(pos)
        k = min(n - 1, max(1, int(m["at"] * n)))
        one = enc_uvarint(first) + enc_uvarint(k) + raw[q:ends[k - 1]]
        two = enc_uvarint(first + k) + enc_uvarint(n - k) + raw[ends[k - 1]:ends[-1]]
        compress = bool(b.flags & 1)
        return _rebuild(data, blocks, i, make_block(b.kind, one, compress) + make_block(b.kind, two, compress))
    if op == "string":
        # One STRINGS entry replaced by awkward text (the CRC stays good).
        def edit(raw):
            first, p = uvarint(raw, 0)
            n, q = uvarint(raw, p)
            if n == 0:
                return None
            k = int(m["at"] * n) % n
            pos = q
            for _ in range(k):
                ln, pos = uvarint(raw, pos)
                pos += ln
            ln, end = uvarint(raw, pos)
            text = NASTY_STRINGS[m["which"] % len(NASTY_STRINGS)]
            return raw[:pos] + enc_uvarint(len(text)) + text + raw[end + ln:]
        return _payload_edit(data, blocks, i, edit)
    if op == "footer":
        # A footer entry renamed, removed or set: the CRC stays good.
        def edit(raw):
            n, p = uvarint(raw, 0)
            entries = []
            for _ in range(n):
                ln, p = uvarint(raw, p)
                key = bytes(raw[p:p + ln])
                v, p = uvarint(raw, p + ln)
                entries.append([key, v])
            for e in entries:
                if e[0] == m["key"].encode():
                    if m["what"] == "rename":
                        e[0] = m["to"].encode()
                    elif m["what"] == "set":
                        e[1] = m["value"]
                    else:
                        entries.remove(e)
                    break
            else:
                return None
            out = bytearray(enc_uvarint(len(entries)))
            for key, v in entries:
                out += enc_uvarint(len(key)) + key + enc_uvarint(v)
            return out
        return _payload_edit(data, blocks, i, edit)
    if op == "many_events":
        # A legal EVENTS block of `count` events whose columns are all width 0
        # (every value 0): a few bytes that decode to the most events a block may hold.
        def edit(raw):
            tid, p = uvarint(raw, 0)
            n, q = uvarint(raw, p)
            ncols = len(column_layout(raw, q, n))
            cols = b"\x20" + bytes(8) + b"\x00" * (ncols - 1) if ncols else b""
            return enc_uvarint(tid) + enc_uvarint(m["count"]) + cols
        out = _payload_edit(data, blocks, i, edit)
        if out == data:
            return out
        nb = walk(out)[1][i]
        return out[:nb.end] + nb.data * (m.get("copies", 1) - 1) + out[nb.end:]
    if op == "duplicate":
        cuts = [hl] + [x.end for x in blocks]
        c = cuts[m["to"] % len(cuts)]
        return data[:c] + b.data + data[c:]
    if op == "drop":
        return data[:b.offset] + data[b.end:]
    if op == "swap":
        j = select(blocks, m["other"])
        if j is None or j == i:
            return data
        a, c = sorted((i, j))
        ba, bc = blocks[a], blocks[c]
        return data[:ba.offset] + bc.data + data[ba.end:bc.offset] + ba.data + data[bc.end:]
    if op == "schema":
        def edit(raw):
            try:
                types = parse_schema(raw)
            except (ValueError, IndexError):
                return None
            if not types:
                return None
            if isinstance(m["type"], str):  # by name (regression cases)
                named = [t for t in types if t[1] == m["type"].encode()]
                if not named:
                    return None
                t = named[0]
            else:
                t = types[m["type"] % len(types)]
            fields = t[2]
            fi = m.get("field", 0)
            if isinstance(fi, str):
                idx = [k for k, f in enumerate(fields) if f[0] == fi.encode()]
                if not idx:
                    return None
                fi = idx[0]
            f = fields[fi % len(fields)]
            what = m["what"]
            if what == "code":
                f[1] = m["value"]
            elif what == "rename_field":  # to another field's name (duplicate) or to "type"
                f[0] = m["value"].encode() if isinstance(m["value"], str) else fields[m["value"] % len(fields)][0]
            elif what == "rename_type":
                t[1] = m["value"].encode() if isinstance(m["value"], str) else types[m["value"] % len(types)][1]
            elif what == "drop_field":
                if len(fields) > 1:
                    del fields[fi % len(fields)]
            elif what == "add_field":
                fields.append([m["name"].encode(), m["value"], b""])
            elif what == "swap_fields":
                j = m["value"] % len(fields)
                k = fi % len(fields)
                fields[j], fields[k] = fields[k], fields[j]
            elif what == "type_id":
                t[0] = m["value"]
            elif what == "many_fields":
                fields.extend([[b"f%d" % n, 2, b""] for n in range(m["value"])])
            return encode_schema(types)
        return _payload_edit(data, blocks, i, edit)
    raise ValueError("unknown mutation %r" % op)


NASTY_STRINGS = [b"", b"\n", b"a\nb", b"<script>&amp;\"'", b";", b"a b;c", b" ", b"\x00", b"\xff\xfe\xc3",
                 b"%s%d%%", b"\x1b[31m", b"x" * 65536, "\u2603\U0001F600".encode(), b"0x1234", b"[unknown]",
                 b"\\", b"{}", b"\t\r"]


def _hostile(what):
    """Blocks from hostile_segments, with ids no seed uses (types 250-251,
    table ids from 2^24), so they add to a seed without redefining it."""
    if what == "events_bomb":
        return hs.events_bomb_blocks(nblocks=2, type_id=250)
    if what == "deep_stack":
        return hs.deep_stack_blocks(frames=1 << 20, type_id=251, stack_id=1 << 24)
    if what == "empty_strings":
        return hs.empty_strings_block(first_id=1 << 24)
    return hs.bad_block() + hs.false_sync_wall(64 << 10)  # "sync_wall"


def _patch_frame_size(frame_bytes, size):
    """Rewrites a zstd frame header's content size (single 4- or 8-byte field)."""
    fhd = frame_bytes[4]
    fcs_code = fhd >> 6
    single = (fhd >> 5) & 1
    did = {0: 0, 1: 1, 2: 2, 3: 4}[fhd & 3]
    pos = 5 + (0 if single else 1) + did
    width = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fcs_code]
    if width in (0, 1, 2):
        return frame_bytes
    b = bytearray(frame_bytes)
    b[pos:pos + width] = size.to_bytes(width, "little")
    return bytes(b)


def apply(data, mutations):
    for m in mutations:
        try:
            data = apply_one(data, m)
        except (ValueError, IndexError, KeyError, ZeroDivisionError, zstandard.ZstdError):
            pass  # an earlier mutation left nothing this one can name: it does nothing
    return data


# Ops after which blocks past the damage must still be read (the damage fails
# the CRC, or re-frames a block consistently without changing type ids, or
# only adds or removes whole blocks / garbage between them).
SUFFIX_SAFE = {"flip", "overwrite", "insert", "hostile", "truncate", "duplicate", "drop", "swap", "zstd", "many_events", "footer",
               "split", "string",
               "payload_cut", "payload_grow", "column_value"}


def suffix_safe(mutations):
    for m in mutations:
        if m["op"] == "zstd" and m["mode"] == "bomb":
            return False  # it may spend the segment's decompression budget (segment.INFLATE_BASE)
        if m["op"] in SUFFIX_SAFE:
            continue
        if m["op"] in ("payload_flip", "site") and m["block"].get("kind") not in (None, "SCHEMA"):
            continue
        if m["op"] == "schema" and m["what"] not in ("type_id", "rename_type"):
            continue
        return False
    return True


def random_mutation(rng, seed_blocks):
    """One random mutation dict."""
    kinds = sorted({KIND_NAMES.get(b.kind, "EVENTS") for b in seed_blocks}) or ["EVENTS"]

    def sel(kind=None):
        if kind is None and rng.random() < 0.3:
            return {"index": rng.randrange(1 << 16)}
        return {"kind": kind or rng.choice(kinds), "nth": rng.randrange(64)}

    r = rng.random()
    ops = [
        (8, lambda: {"op": "flip", "block": sel(), "at": rng.random(), "bit": rng.randrange(8)}),
        (5, lambda: {"op": "overwrite", "block": sel(), "at": rng.random(), "len": rng.choice([1, 2, 4, 8, 20, 64, 300]),
                     "fill": rng.choice(["random", "zero", "ff"]), "rs": rng.randrange(1 << 30)}),
        (5, lambda: {"op": "truncate", "boundary": rng.randrange(1 << 16)}),
        (5, lambda: {"op": "truncate", "at": rng.random()}),
        (1, lambda: {"op": "random_file", "len": rng.choice([1, 7, 48, 100, 4096]), "rs": rng.randrange(1 << 30),
                     "magic": rng.random() < 0.5}),
        (2, lambda: {"op": "header", "at": rng.random(), "bit": rng.randrange(8), "fix_crc": rng.random() < 0.7}),
        (1, lambda: {"op": "header_len", "value": rng.choice(HUGE + [57, 58, 59, 100])}),
        (4, lambda: {"op": "insert", "boundary": rng.randrange(1 << 16), "len": rng.choice([1, 3, 19, 20, 21, 200, 5000]),
                     "fill": rng.choice(["random", "sync", "zero"]), "rs": rng.randrange(1 << 30)}),
        (8, lambda: {"op": "field", "block": sel(), "field": rng.choice(["payload_len", "raw_len", "kind", "flags"]),
                     "value": rng.choice(HUGE + list(range(0, 10))), "fix_crc": rng.random() < 0.7}),
        (20, lambda: {"op": "site", "block": sel(), "site": rng.randrange(1 << 16),
                      "value": rng.choice(HUGE + [2, 3, 4, 5, 6, 7, 8, 9, 0x10, 0x24, 0x48, 0x30, 0x38, 0x40]),
                      "overlong": rng.random() < 0.05}),
        (10, lambda: {"op": "payload_flip", "block": sel(), "at": rng.random(), "xor": rng.randrange(1, 256)}),
        (3, lambda: {"op": "payload_cut", "block": sel(), "at": rng.random()}),
        (1, lambda: {"op": "payload_grow", "block": sel(), "len": rng.choice([1, 100]), "rs": rng.randrange(1 << 30)}),
        (14, lambda: {"op": "column_value", "block": sel("EVENTS"), "column": rng.randrange(16), "index": rng.random(),
                      "value": rng.choice(HUGE + [-1, -(1 << 63), 2, 3, 1000, 1 << 40]), "all": rng.random() < 0.3}),
        (4, lambda: {"op": "zstd", "block": sel(), "mode": rng.choice(["random", "no_size", "wrong_size", "lie",
                                                                          "cut", "bomb"]),
                     "rs": rng.randrange(1 << 30)}),
        (3, lambda: {"op": "duplicate", "block": sel(), "to": rng.randrange(1 << 16)}),
        (3, lambda: {"op": "hostile", "boundary": rng.randrange(1 << 16),
                     "what": rng.choice(["events_bomb", "deep_stack", "empty_strings", "sync_wall"])}),
        (1, lambda: {"op": "many_events", "block": sel("EVENTS"), "count": rng.choice([1 << 10, 1 << 12]),
                     "copies": rng.choice([1, 2, 3])}),
        (3, lambda: {"op": "drop", "block": sel()}),
        (3, lambda: {"op": "swap", "block": sel(), "other": sel()}),
        (16, lambda: _schema_mutation(rng)),
        (6, lambda: {"op": "string", "block": sel("STRINGS"), "at": rng.random(),
                     "which": rng.randrange(len(NASTY_STRINGS))}),
        (3, lambda: {"op": "footer", "block": {"kind": "FOOTER", "nth": 0},
                     "key": rng.choice(["events", "first_time_ns", "last_time_ns", "dropped.alloc.sample"]),
                     "what": rng.choice(["rename", "drop", "set"]), "to": "x",
                     "value": rng.choice(HUGE)}),
    ]
    total = sum(w for w, _ in ops)
    x = r * total
    for w, make in ops:
        x -= w
        if x < 0:
            return make()
    return ops[0][1]()


def _schema_mutation(rng):
    what = rng.choice(["code", "code", "code", "rename_field", "rename_type", "drop_field", "add_field",
                       "swap_fields", "type_id", "many_fields"])
    m = {"op": "schema", "block": {"kind": "SCHEMA", "nth": rng.randrange(8)}, "type": rng.randrange(64),
         "field": rng.randrange(16), "what": what}
    if what == "code":
        m["value"] = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 255])
    elif what == "rename_field":
        m["value"] = rng.choice(["type", "pid", "time", "", "stack", "tid"]) if rng.random() < 0.5 else rng.randrange(16)
    elif what == "rename_type":
        m["value"] = rng.choice(["cpu.sample", "alloc.sample", "alloc.free", "thread.start", "thread.end",
                                 "recorder.dropped", "socket.op", "request", "crash", "", "x.lost"]) \
            if rng.random() < 0.6 else rng.randrange(64)
    elif what == "add_field":
        m["name"] = rng.choice(["extra", "count", "kind", "stack", "tid"])
        m["value"] = rng.randrange(1, 8)
    elif what == "swap_fields":
        m["value"] = rng.randrange(16)
    elif what == "type_id":
        m["value"] = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 100, 1 << 32, (1 << 64) - 1])
    elif what == "many_fields":
        m["value"] = rng.choice([1, 250, 300])
    return m


def random_mutant(rng, seed_blocks):
    n = 1 if rng.random() < 0.75 else rng.randint(2, 4)
    muts = [random_mutation(rng, seed_blocks) for _ in range(n)]
    if rng.random() < 0.25:  # damage meeting tables spread over several blocks
        muts.insert(0, {"op": "split", "block": {"kind": rng.choice(["STRINGS", "MAPPINGS", "LOCATIONS", "STACKS"]),
                                                   "nth": 0}, "at": rng.random()})
    return muts


# ---------------------------------------------------------------- expectations

def events_by_block(data):
    """{block offset: (type name, count)} of a seed's EVENTS blocks, plus
    {type id: offset of the SCHEMA block defining it}."""
    _, blocks = walk(data)
    names, schema_at, out = {}, {}, {}
    for b in blocks:
        raw = b.raw()
        if b.kind == KINDS["SCHEMA"]:
            for tid, name, _ in parse_schema(raw):
                if tid not in names:
                    names[tid] = name.decode("utf-8", "replace")
                    schema_at[tid] = b.offset
        elif b.kind == KINDS["EVENTS"]:
            tid, p = uvarint(raw, 0)
            count, _ = uvarint(raw, p)
            out[b.offset] = (tid, count)
    return blocks, names, schema_at, out


def expected_events(seed, mutant, mutations):
    """{type name: minimum count} that `events` must show for the mutant:
    every EVENTS block of the seed lying wholly before the first changed
    byte, and (for SUFFIX_SAFE mutations) wholly inside the unchanged tail,
    whose defining SCHEMA block is intact and comes before it."""
    hl = header_len(seed)
    n = min(len(seed), len(mutant))
    pre = 0
    while pre < n and seed[pre] == mutant[pre]:
        pre += 1
    if pre < hl:
        return {}
    suf = 0
    if suffix_safe(mutations):
        while suf < n - pre and seed[-1 - suf] == mutant[-1 - suf]:
            suf += 1
    tail = len(seed) - suf
    blocks, names, schema_at, evs = events_by_block(seed)
    intact = {b.offset for b in blocks if b.end <= pre or b.offset >= tail}
    want = {}
    for off, (tid, count) in evs.items():
        s = schema_at.get(tid)
        if off in intact and s in intact and s < off:
            name = names[tid]
            want[name] = want.get(name, 0) + count
    return want


# ---------------------------------------------------------------- commands

PROFILE_KINDS = ("cpu", "offcpu", "alloc", "live")


def commands(kind, out):
    """Every subcommand, with and without --json where it exists."""
    return [
        ["info"], ["info", "--json"], ["schema"], ["schema", "--json"], ["events"], ["events", "--json"],
        ["top", "--kind", kind], ["top", "--json", "--kind", kind], ["tree", "--kind", kind],
        ["pprof", "--kind", kind, "-o", out + ".pb.gz"], ["flame", "--kind", kind, "-o", out + ".svg"],
        ["flame", "--folded", "--kind", kind], ["folded", "--kind", kind], ["chrome", "-o", out + ".json"],
        ["heap"], ["heap", "--json"], ["sockets"], ["sockets", "--json"], ["requests"], ["requests", "--json"],
    ]


# ---------------------------------------------------------------- worker

class Hang(BaseException):
    """Raised by the worker's alarm; a BaseException so cli.main's catch-all
    does not turn it into an ordinary error line."""


def _on_alarm(signum, frame):
    raise Hang()


def _strict_json(text):
    def bad(c):
        raise ValueError("non-JSON constant %s" % c)
    return json.loads(text, parse_constant=bad)


def _check_output(argv, stdout, outfile):
    """Problems with what a command wrote (not its status): JSON that is not JSON, etc."""
    try:
        if "--json" in argv:
            if argv[0] == "events":
                counts = {}
                for line in stdout.splitlines():
                    e = _strict_json(line)
                    counts[e["type"]] = counts.get(e["type"], 0) + 1
                return None, counts
            if stdout.strip():
                _strict_json(stdout)
        if outfile and os.path.exists(outfile):
            with open(outfile, "rb") as f:
                body = f.read()
            if outfile.endswith(".json"):
                _strict_json(body.decode("utf-8"))
            elif outfile.endswith(".gz"):
                gzip.decompress(body)
            elif outfile.endswith(".svg"):
                ElementTree.fromstring(body)  # well-formed XML, whatever the names in it
    except Exception as e:  # noqa: BLE001 - any failure to parse is the finding
        return "bad output: %s: %s" % (type(e).__name__, str(e)[:200]), None
    return None, None


def _peak_rss_kb():
    """VmHWM of this process (KiB), or None where /proc says nothing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def run_command(argv, soft_timeout):
    """Runs `flightrec-dump argv` in this process; returns a result dict."""
    from flightrec_lib import cli
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    outfile = argv[argv.index("-o") + 1] if "-o" in argv else None
    if outfile and os.path.exists(outfile):
        os.unlink(outfile)
    res = {"argv": argv, "status": None, "escaped": None}
    measured = _reset_peak_rss()
    t0 = time.process_time()  # `seconds` and --max-seconds are CPU seconds too
    # CPU seconds, not wall seconds (ITIMER_PROF): a loop that never ends
    # burns CPU, and a busy machine that gives this worker a fifth of a core
    # must not make a slow-but-finite command a "hang". A command that blocks
    # without CPU is the Runner's hard timeout's.
    signal.signal(signal.SIGPROF, _on_alarm)
    signal.setitimer(signal.ITIMER_PROF, soft_timeout)
    try:
        sys.stdout, sys.stderr = out, err
        try:
            res["status"] = cli.main(argv)
        except SystemExit as e:
            res["status"] = e.code if isinstance(e.code, int) else 1
    except Hang:
        res["escaped"] = "hang: still running after %.0f s of CPU\n%s" % (soft_timeout, traceback.format_exc())
    except BaseException:  # noqa: BLE001 - an escaped exception is the finding
        res["escaped"] = traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        sys.stdout, sys.stderr = saved
    res["seconds"] = time.process_time() - t0
    res["peak_rss_kb"] = _peak_rss_kb() if measured else None
    res["stderr"] = err.getvalue()[-20000:]
    stdout = out.getvalue()
    res["output_problem"], res["type_counts"] = _check_output(argv, stdout, outfile)
    return res


def worker_main(conn, mem_bytes, soft_timeout, lib_dir, tmp):
    """Serves ("run", files, argvs) requests until EOF. Each file is
    (name, bytes); argvs get the paths appended. lib_dir: a directory holding
    another flightrec_lib to run instead (the fuzzer's own self-test)."""
    if lib_dir:
        for name in [n for n in sys.modules if n == "flightrec_lib" or n.startswith("flightrec_lib.")]:
            del sys.modules[name]
        sys.path.insert(0, lib_dir)
    if mem_bytes:
        # Room on top of what the worker already maps: it is forked from its
        # parent (a pytest process that may have grown to hundreds of MB over
        # a suite), and a fixed limit would leave the commands less each time.
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + mem_bytes, mapped + mem_bytes))
    os.environ["FLIGHTREC_DUMP_DEBUG"] = "1"  # an internal error comes with its traceback
    try:
        while True:
            try:
                req = conn.recv()
            except EOFError:
                return
            if req[0] == "quit":
                return
            _, files, argvs = req
            paths = []
            for name, body in files:
                path = os.path.join(tmp, name)
                with open(path, "wb") as f:
                    f.write(body)
                paths.append(path)
            for i, argv in enumerate(argvs):
                conn.send(("start", i))
                res = run_command([a.replace("@OUT@", os.path.join(tmp, "out")) for a in argv] + paths,
                                  soft_timeout)
                conn.send(("done", i, res))
            for p in paths:
                os.unlink(p)
            conn.send(("end",))
    finally:
        conn.close()


def _cpu_seconds(pid):
    """User + system CPU seconds of pid; 0 once it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Runner:
    """Owns one worker process; restarts it after a hang or a death."""

    def __init__(self, mem_bytes=1 << 30, soft_timeout=10.0, hard_timeout=25.0, lib_dir=None):
        import multiprocessing
        self.mp = multiprocessing.get_context("fork")
        self.mem_bytes, self.soft, self.hard = mem_bytes, soft_timeout, hard_timeout
        self.lib_dir = lib_dir
        self.tmp = tempfile.mkdtemp(prefix="fuzz-dump-")  # the workers' files; removed by close()
        self.proc = None
        self.conn = None

    def _start(self):
        os.makedirs(self.tmp, exist_ok=True)
        parent, child = self.mp.Pipe()
        self.proc = self.mp.Process(target=worker_main, args=(child, self.mem_bytes, self.soft, self.lib_dir, self.tmp),
                                    daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent

    def close(self):
        if self.proc is not None:
            try:
                self.conn.send(("quit",))
            except OSError:
                pass
            self.conn.close()
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
            self.proc = None
        shutil.rmtree(self.tmp, True)

    def _kill(self):
        self.proc.kill()
        self.proc.join()
        self.conn.close()
        self.proc = None

    def run(self, files, argvs):
        """[(argv, result or None, failure text or None)] for each argv."""
        if self.proc is None:
            self._start()
        self.conn.send(("run", files, argvs))
        results = [None] * len(argvs)
        current = None
        # No answer: killed once the worker has burned `hard` CPU seconds
        # since the last answer (its own CPU timer failed), or after 8 times
        # that in wall seconds, at least 120 (it blocks without CPU). Wall
        # time alone would call a starved worker on a busy machine hung.
        cpu0, wall0 = _cpu_seconds(self.proc.pid), time.monotonic()
        while True:
            if not self.conn.poll(1.0):
                cpu, wall = _cpu_seconds(self.proc.pid) - cpu0, time.monotonic() - wall0
                if cpu > self.hard or wall > max(8 * self.hard, 120):
                    results[current or 0] = {"argv": argvs[current or 0], "fatal": "killed: no answer after "
                                             "%.0f s of CPU, %.0f s of wall time" % (cpu, wall)}
                    self._kill()
                    return results
                continue
            cpu0, wall0 = _cpu_seconds(self.proc.pid), time.monotonic()
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                code = self.proc.exitcode if self.proc else None
                self.proc.join(5)
                code = self.proc.exitcode
                results[current or 0] = {"argv": argvs[current or 0],
                                         "fatal": "worker died (exit %s): crash or memory limit" % code}
                self.conn.close()
                self.proc = None
                return results
            if msg[0] == "start":
                current = msg[1]
            elif msg[0] == "done":
                results[msg[1]] = msg[2]
            else:
                return results


# ---------------------------------------------------------------- judging

def _signature(text):
    """Exception type and innermost flightrec_lib frame of a traceback."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    where, exc, last_file = "", "?", -1
    for n, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith("File "):
            last_file = n
            if "flightrec_lib" in s:
                parts = s.split('"')
                lineno = s.split("line ")[-1].split(",")[0]
                where = "%s:%s" % (os.path.basename(parts[1]), lineno)
    for ln in lines[last_file + 1:]:
        m = re.match(r"^([A-Za-z_][\w.]*)(:|$)", ln)
        if m and not ln.startswith(" ") and not ln.startswith("flightrec-dump"):
            exc = m.group(1)
            break
    return "%s at %s" % (exc, where or "?")


def judge(results, mutant_path, want, rss_budget_mb=RSS_BUDGET_MB, max_seconds=None):
    """[(signature, detail)] of every failure in one mutant's results."""
    fails = []
    counts = None
    for res in results:
        if res is None:
            continue
        cmd = " ".join(res["argv"][:4])
        if res.get("fatal"):
            fails.append(("%s: %s" % (res["argv"][0], res["fatal"]), res["fatal"]))
            continue
        rss = res.get("peak_rss_kb")
        if rss is not None and rss_budget_mb and rss > rss_budget_mb << 10:
            fails.append(("%s: peak RSS over %d MiB" % (res["argv"][0], rss_budget_mb),
                          "%s\npeak RSS %.0f MiB" % (cmd, rss / 1024)))
        if max_seconds is not None and res.get("seconds", 0) > max_seconds and not res["escaped"]:
            fails.append(("%s: slower than %g s" % (res["argv"][0], max_seconds),
                          "%s\ntook %.1f s" % (cmd, res["seconds"])))
        if res["escaped"]:
            kind = "hang" if res["escaped"].startswith("hang") else "escaped"
            fails.append(("%s %s" % (kind, _signature(res["escaped"])), cmd + "\n" + res["escaped"]))
            continue
        err = res["stderr"]
        if "Traceback" in err or "internal error" in err:
            kind = "memory" if "MemoryError" in err else "traceback"
            fails.append(("%s %s" % (kind, _signature(err)), cmd + "\n" + err))
            continue
        if res["status"] not in (0, 1):
            fails.append(("%s: exit status %s" % (res["argv"][0], res["status"]), cmd + "\n" + err))
        naming = [ln for ln in err.splitlines() if mutant_path in ln]
        if len(naming) > 1:
            fails.append(("%s: %d stderr lines name the file" % (res["argv"][0], len(naming)), cmd + "\n" + err))
        if res["status"] == 1 and not naming:
            fails.append(("%s: exit status 1 without a line naming the file" % res["argv"][0], cmd + "\n" + err))
        if res["output_problem"]:
            fails.append(("%s: %s" % (cmd, res["output_problem"].split(":")[0] + ":" +
                                      res["output_problem"].split(":")[1]), cmd + "\n" + res["output_problem"]))
        if res["type_counts"] is not None:
            counts = res["type_counts"]
    if counts is not None:
        missing = {t: (n, counts.get(t, 0)) for t, n in want.items() if counts.get(t, 0) < n}
        if missing:
            fails.append(("intact events missing", "want >= got: %s" % missing))
    return fails


def run_mutant(runner, seeds, seed_name, mutations, kind="cpu", extra=None, name="mutant.seg", argvs=None,
               max_seconds=None, stats=None):
    """Applies mutations to a seed, runs every command (or argvs), returns
    (failures, mutant bytes, results). extra: name of an intact seed read
    alongside (its events must all show)."""
    seed = seeds[seed_name]
    mutant = apply(seed, mutations)
    want = expected_events(seed, mutant, mutations)
    files = [(name, mutant)]
    if extra:
        files.append(("intact-" + extra + ".seg", seeds[extra]))
        for t, n in expected_events(seeds[extra], seeds[extra], []).items():
            want[t] = want.get(t, 0) + n
    results = runner.run(files, argvs or commands(kind, "@OUT@"))
    if stats is not None:
        for res in results:
            if res and not res.get("fatal"):
                cmd = " ".join(res["argv"][:3])
                if (res.get("peak_rss_kb") or 0) > stats["peak_rss_kb"][0]:
                    stats["peak_rss_kb"] = (res["peak_rss_kb"], cmd)
                if res.get("seconds", 0) > stats["slowest"][0]:
                    stats["slowest"] = (res["seconds"], cmd)
    return judge(results, name, want, max_seconds=max_seconds), mutant, results


def fuzz(seeds, seed, seconds=None, iterations=None, runner=None, save_dir=None, log=print, only=None,
         max_seconds=None):
    """Runs mutants until the time or iteration budget is spent. Returns a
    summary dict: mutants, command runs, seconds, failures {signature: [count,
    first example]}."""
    own = runner is None
    runner = runner or Runner()
    names = sorted(seeds)
    layouts = {n: walk(seeds[n])[1] for n in names}
    t0 = time.monotonic()
    stats = {"seed": seed, "mutants": 0, "commands": 0, "failures": {}, "unchanged": 0,
             "peak_rss_kb": (0, None), "slowest": (0.0, None)}
    i = 0 if only is None else only
    try:
        while True:
            if only is not None and i > only:
                break
            if iterations is not None and stats["mutants"] >= iterations:
                break
            if seconds is not None and time.monotonic() - t0 >= seconds:
                break
            rng = random.Random("%s:%d" % (seed, i))
            seed_name = names[i % len(names)]
            mutations = random_mutant(rng, layouts[seed_name])
            kind = PROFILE_KINDS[rng.randrange(len(PROFILE_KINDS))]
            extra = rng.choice(names) if rng.random() < 0.15 else None
            fname = "m%d.%s" % (i, "active" if rng.random() < 0.3 else "seg")
            fails, mutant, _ = run_mutant(runner, seeds, seed_name, mutations, kind, extra, fname,
                                          max_seconds=max_seconds, stats=stats)
            stats["mutants"] += 1
            stats["commands"] += len(commands(kind, ""))
            if mutant == seeds[seed_name]:
                stats["unchanged"] += 1
            for sig, detail in fails:
                entry = stats["failures"].setdefault(sig, [0, None])
                entry[0] += 1
                if entry[1] is None:
                    case = {"index": i, "seed_name": seed_name, "mutations": mutations, "kind": kind,
                            "extra": extra, "name": fname}
                    entry[1] = {"case": case, "detail": detail[-3000:]}
                    log("FAIL mutant %d (%s): %s\n  case: %s\n  %s" % (
                        i, seed_name, sig, json.dumps(case), detail[-1500:].replace("\n", "\n  ")))
                    if save_dir:
                        os.makedirs(save_dir, exist_ok=True)
                        with open(os.path.join(save_dir, "crash-%d-%d.seg" % (seed, i)), "wb") as f:
                            f.write(mutant)
                        with open(os.path.join(save_dir, "crash-%d-%d.json" % (seed, i)), "w") as f:
                            json.dump({"signature": sig, **case}, f)
            i += 1
    finally:
        if own:
            runner.close()
    stats["seconds"] = time.monotonic() - t0
    return stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    ap.add_argument("--only", type=int, default=None, help="run only mutant number N of --seed")
    ap.add_argument("--mem-mb", type=int, default=1024, help="worker address-space limit")
    ap.add_argument("--timeout", type=float, default=10.0, help="CPU seconds after which a command is a hang")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="fail a command that uses more CPU seconds than this (a resource check, unlike --timeout's hang)")
    ap.add_argument("--save", default=None, help="directory for crashing mutants (default BUILD/fuzz-dump-crashers)")
    args = ap.parse_args(argv)
    if args.seconds is None and args.iterations is None and args.only is None:
        args.seconds = 30
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    build = os.path.abspath(args.build)
    seeds = make_seeds(build, os.path.join(build, "fuzz-dump-seeds"))
    print("dump_corruption: seed %d, seeds %s" % (seed, ", ".join("%s (%d bytes)" % (n, len(d))
                                                                 for n, d in sorted(seeds.items()))), flush=True)
    runner = Runner(mem_bytes=args.mem_mb << 20, soft_timeout=args.timeout, hard_timeout=args.timeout + 15)
    try:
        stats = fuzz(seeds, seed, args.seconds, args.iterations, runner,
                     args.save or os.path.join(build, "fuzz-dump-crashers"),
                     log=lambda s: print(s, flush=True), only=args.only, max_seconds=args.max_seconds)
    finally:
        runner.close()
    print("dump_corruption: %d mutants (%d unchanged), %d command runs in %.1f s, %d failure signature%s "
          "(seed %d)" % (stats["mutants"], stats["unchanged"], stats["commands"], stats["seconds"],
                         len(stats["failures"]), "" if len(stats["failures"]) == 1 else "s", seed))
    print("dump_corruption: peak RSS %.0f MiB (%s; budget %d MiB), slowest command %.2f s (%s)" % (
        stats["peak_rss_kb"][0] / 1024, stats["peak_rss_kb"][1], RSS_BUDGET_MB, stats["slowest"][0],
        stats["slowest"][1]))
    for sig, (n, first) in sorted(stats["failures"].items(), key=lambda kv: -kv[1][0]):
        print("  %5d  %s   (first: mutant %d)" % (n, sig, first["case"]["index"]))
    if stats["failures"]:
        print("dump_corruption: FAILED; replay with: %s --seed %d --only N" % (sys.argv[0], seed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
