"""hostile_segments: builds segments by hand, byte by byte from format/SPEC.md,
that a hostile or unlucky writer could leave for flightrec-dump: memory
bombs (a few KiB declaring gigabytes of values, frames or strings), walls of
false sync words, names full of terminal escapes. Used by
tests/integration/test_dump_hostile.py and by the corruption fuzzer
(tests/fuzz/dump_corruption.py), which appends such blocks to real seeds.

Every builder returns bytes; nothing here reads a segment."""
import struct

import zstandard

try:
    from flightrec_lib.crc32c import crc32c
except ImportError:  # run from tests/fuzz with scripts/ not yet on sys.path
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
    from flightrec_lib.crc32c import crc32c

SYNC = b"FBLK"
SCHEMA, STRINGS, MAPPINGS, LOCATIONS, STACKS, EVENTS, FOOTER = range(1, 8)
TIME, UINT, SINT, STRING, STACK, F64, BYTES = range(1, 8)


def uvarint(v):
    out = bytearray()
    while True:
        if v < 0x80:
            out.append(v)
            return bytes(out)
        out.append((v & 0x7F) | 0x80)
        v >>= 7


def text(s):
    b = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
    return uvarint(len(b)) + b


def header(pid=4242, seq=0, service=b"svc", host=b"host", mono=1_000_000_000, real=1_700_000_000 * 10**9):
    """A segment header; service=host=b"" gives the minimal 56 bytes."""
    body = (b"FLTRECSG" + struct.pack("<HHIIIQQQ", 1, 0, 0, pid, 0, seq, mono, real)
            + struct.pack("<H", len(service)) + service + struct.pack("<H", len(host)) + host)
    hl = len(body) + 4
    body = body[:12] + struct.pack("<I", hl) + body[16:]
    return body + struct.pack("<I", crc32c(body))


def block(kind, raw, compress=False, flags=0):
    payload = zstandard.ZstdCompressor(level=19).compress(raw) if compress else raw
    flags = flags | (1 if compress else 0)
    mid = struct.pack("<IHHI", len(payload), kind, flags, len(raw))
    return SYNC + mid + struct.pack("<I", crc32c(payload, crc32c(mid))) + payload


def schema(types):
    """types: [(type_id, name, [(field name, type code, unit)])]."""
    out = uvarint(len(types))
    for tid, name, fields in types:
        out += uvarint(tid) + text(name) + uvarint(len(fields))
        for fname, code, unit in fields:
            out += text(fname) + bytes([code]) + text(unit)
    return out


def table(first, entries):
    """A STRINGS/MAPPINGS/LOCATIONS/STACKS payload from encoded entries."""
    return uvarint(first) + uvarint(len(entries)) + b"".join(entries)


def plain(values, width=8):
    """A PLAIN column (scheme 0) of unsigned values."""
    return bytes([width]) + b"".join(v.to_bytes(width, "little") for v in values)


def delta(values, width=8):
    """A DELTA column (scheme 2): base, then zigzag deltas (values ascending)."""
    base = values[0]
    out = bytes([0x20 | width]) + struct.pack("<Q", base)
    prev = base
    for v in values:
        d = v - prev
        out += (((d << 1) ^ (d >> 63)) & ((1 << 64) - 1)).to_bytes(width, "little")
        prev = v
    return out


def events(type_id, count, columns):
    return uvarint(type_id) + uvarint(count) + b"".join(columns)


THREAD_TYPES = [
    (1, "thread.start", [("time", TIME, "ns"), ("tid", UINT, ""), ("parent_tid", UINT, ""),
                         ("name", STRING, ""), ("start_routine", STRING, "")]),
    (2, "cpu.sample", [("time", TIME, "ns"), ("tid", UINT, ""), ("stack", STACK, ""), ("period_ns", UINT, "ns")]),
]


def intact_segment(pid=7, thread_name="worker-1", function="burn_cpu", samples=3):
    """A small, valid, sealed segment: one thread.start and `samples` cpu.sample
    events whose stack is one frame in `function`."""
    out = header(pid=pid)
    out += block(SCHEMA, schema(THREAD_TYPES))
    out += block(STRINGS, table(1, [text(thread_name), text(function), text("burn.c")]))
    out += block(LOCATIONS, table(1, [uvarint(0) + uvarint(0x401000) + uvarint(1) + uvarint(2) + uvarint(3)
                                      + uvarint(12)]))
    out += block(STACKS, table(1, [uvarint(1) + uvarint(1)]))
    t0 = 2_000_000_000
    out += block(EVENTS, events(1, 1, [plain([t0]), plain([pid]), plain([0]), plain([1]), plain([0])]))
    times = [t0 + 10_000_000 * (i + 1) for i in range(samples)]
    out += block(EVENTS, events(2, samples, [delta(times), plain([pid] * samples), plain([1] * samples),
                                             plain([10_000_000] * samples)]))
    footer = [("events", 1 + samples), ("first_time_ns", t0), ("last_time_ns", times[-1])]
    out += block(FOOTER, uvarint(len(footer)) + b"".join(text(k) + uvarint(v) for k, v in footer))
    return out


# ---------------------------------------------------------------- memory bombs

def events_bomb_blocks(nblocks=1, count=1 << 20, type_id=9):
    """EVENTS blocks of `count` events x 255 fields, every column zero bytes
    wide (PLAIN, W=0): ~260 payload bytes declaring 267M values each."""
    wide = [(type_id, "bomb.wide", [("time", TIME, "ns")] + [("f%d" % i, UINT, "") for i in range(254)])]
    return block(SCHEMA, schema(wide)) + block(EVENTS, events(type_id, count, [b"\x00"] * 255)) * nblocks


def deep_stack_blocks(frames=4 << 20, type_id=2, stack_id=1):
    """One stack of `frames` frames (location 0, one byte each) in a zstd frame
    of a few hundred bytes, and one cpu.sample (type `type_id`) that uses it."""
    raw = table(stack_id, [uvarint(frames) + bytes(frames)])
    cpu = [(type_id, "cpu.sample", THREAD_TYPES[1][2])]
    return (block(SCHEMA, schema(cpu)) + block(STACKS, raw, compress=True)
            + block(EVENTS, events(type_id, 1, [plain([3_000_000_000]), plain([1]), plain([stack_id]), plain([1])])))


def empty_strings_block(count=(64 << 20) - 16, first_id=1):
    """A STRINGS block of `count` empty strings: 64 MiB raw, ~2 KiB stored."""
    return block(STRINGS, uvarint(first_id) + uvarint(count) + bytes(count), compress=True)


def false_sync_wall(size):
    """`size` bytes of block headers that pass every check but the CRC, each
    declaring a payload that runs to just before the end of the wall (so a
    reader that checks each CRC over its declared length does quadratic work)."""
    out = bytearray()
    n = size // BLOCK_HEADER
    for i in range(n):
        length = (n - i - 1) * BLOCK_HEADER
        out += SYNC + struct.pack("<IHHII", length, STRINGS, 0, length, 0xDEADBEEF)
    return bytes(out)


BLOCK_HEADER = 20


def bad_block():
    """A block whose CRC does not match (so the reader resynchronises after it)."""
    b = bytearray(block(STRINGS, table(50, [text("x")])))
    b[16] ^= 0xFF
    return bytes(b)
