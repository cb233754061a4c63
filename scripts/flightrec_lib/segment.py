"""segment: decodes one flightrec segment file (format/SPEC.md).

This module knows the block framing and the seven field type codes, nothing
else: every event type, field name and unit comes from the segment's own
SCHEMA blocks. Damage is handled as SPEC.md 4.2 prescribes: a bad block is
reported in `problems` and skipped (resynchronising on the sync word), a
block cut short at end of file ends the read as "truncated", unknown kinds
are skipped. Only an unusable header raises SegmentError.

Speed: EVENTS blocks are decoded lazily, a whole column at a time, with
array/int.from_bytes/itertools (no per-byte Python loops), so decoding runs
at millions of values per second.

Hostile input (docs/LIMITS.md, "Reading traces"): only regular files are
opened, never FIFOs or devices, and no symbolic link found inside a
directory; a file is read in bounded pieces, up to a size (segment_file). What a
block may declare is bounded relative to its bytes and per segment (table
entries, stack depth, event values), so a few KiB cannot demand gigabytes; a
block past a bound is refused as bad and the rest of the segment still reads.
Resynchronisation after a bad block checks candidate CRCs through a CrcIndex,
in time linear in the file. A batch keeps where its payload is in the (still
open) file, or else its stored (compressed) payload, and decodes on use;
decoded columns are cached for a bounded number of values. A segment's intern
tables likewise stay loaded only while recently used (LOADED_TABLE_UNITS over
all segments): a segment read from a still-open file drops them when others
need the room and reads its table blocks again (CRC checked) on next use, so
a trace of many segments costs a few segments' tables, not all of them.

    seg = read_segment(path)
    seg.state                  # "sealed" | "active" | "truncated"
    for batch in seg.batches:  # one per EVENTS block, file order
        batch.type.name, batch.count, batch.column("time")
    seg.events(types={"thread.start"})   # dicts, file order
"""
import operator
import os
import struct
import sys
import weakref
from array import array
from collections import OrderedDict
from itertools import accumulate, islice, repeat

import zstandard

from .crc32c import CrcIndex, crc32c
from .segment_file import SegmentFileError, close_source, open_sources, read_file, source_budget

MAGIC = b"FLTRECSG"
FRAMING_VERSION = 1
SYNC = 0x4B4C4246
SYNC_BYTES = struct.pack("<I", SYNC)
HEADER_FIXED = 48
MIN_HEADER_LEN = HEADER_FIXED + 2 + 2 + 4
MAX_HEADER_LEN = 1 << 20
BLOCK_HEADER = 20
MAX_BLOCK = 64 << 20
FLAG_ZSTD = 1
KNOWN_FLAGS = FLAG_ZSTD
MAX_EVENTS_PER_BLOCK = 1 << 20
# Decompression budget of one segment: INFLATE_BASE + INFLATE_RATIO x file
# size. Recorded segments inflate about 2-30x in all; a small file whose
# frames declare gigabytes (each legal on its own, 64 MiB of zeros is a 2 KiB
# frame) would otherwise cost that much time and memory on every read.
INFLATE_BASE = 64 << 20
INFLATE_RATIO = 256
MAX_FIELDS = 255

# Bounds on what a segment may make the reader hold (docs/LIMITS.md). Each is
# far above anything the recorder writes (it writes <= 65536 events per
# block, stacks of <= 129 frames, tables of tens of thousands of entries).
# Frames kept of one stack; deeper stacks are cut (and said so).
MAX_STACK_DEPTH = 4096
# Table entries (strings, mappings, locations, stacks; stack frames and inline
# lines count too) one segment may define: TABLE_BASE + TABLE_PER_BYTE x file size.
TABLE_BASE = 1 << 21
TABLE_PER_BYTE = 1
# Event values (count x fields) of one EVENTS block: at most BLOCK_CELLS, and
# at most CELL_SLACK + CELLS_PER_BYTE x its decompressed payload (a zero-width
# column stores a million values in one byte). Per segment, all blocks together:
# SEGMENT_CELLS + CELLS_PER_FILE_BYTE x file size.
BLOCK_CELLS = 1 << 22
CELL_SLACK = 1 << 16
CELLS_PER_BYTE = 64
SEGMENT_CELLS = 1 << 23
CELLS_PER_FILE_BYTE = 64
# Problems listed per segment (the rest are counted).
MAX_PROBLEMS = 1000
# Decoded batches kept for reuse, in event values (least recently used go first).
DECODED_CACHE_CELLS = 1 << 22
# Intern tables (strings, mappings, locations, stacks, and the frames built
# from them) kept loaded at once, in table units (entries, frames, lines),
# over all segments; the least recently used segment's tables go first and
# are read again from its file when next needed. At least TABLES_KEPT_MIN
# segments stay loaded whatever their size (a report going back and forth
# between two segments must not re-read them each time).
LOADED_TABLE_UNITS = 1 << 20
TABLES_KEPT_MIN = 2

KIND_SCHEMA, KIND_STRINGS, KIND_MAPPINGS, KIND_LOCATIONS, KIND_STACKS, KIND_EVENTS, KIND_FOOTER = range(1, 8)
KIND_NAMES = {1: "SCHEMA", 2: "STRINGS", 3: "MAPPINGS", 4: "LOCATIONS", 5: "STACKS", 6: "EVENTS",
              7: "FOOTER"}

# Field type codes (format/format_constants.h FieldType).
TIME, UINT, SINT, STRING, STACK, F64, BYTES = range(1, 8)
TYPE_NAMES = {TIME: "time", UINT: "uint", SINT: "sint", STRING: "string", STACK: "stack",
              F64: "f64", BYTES: "bytes"}

# Column schemes (SPEC.md 5.4): encoding byte = scheme << 4 | width. The
# packed forms of PLAIN, ZIGZAG and DELTA (scheme + 5) store the same integers
# shifted right by `shift` bits, as byte planes; PACKED_REL stores differences
# from an earlier column of the block.
(PLAIN, ZIGZAG, DELTA, SCHEME_F64, SCHEME_BYTES, PACKED_PLAIN, PACKED_ZIGZAG, PACKED_DELTA,
 PACKED_REL) = range(9)
_INT_SCHEMES = (PLAIN, ZIGZAG, DELTA, PACKED_PLAIN, PACKED_ZIGZAG, PACKED_DELTA, PACKED_REL)
_SCHEMES_FOR = {TIME: _INT_SCHEMES, UINT: _INT_SCHEMES, SINT: _INT_SCHEMES, STRING: _INT_SCHEMES,
                STACK: _INT_SCHEMES, F64: (SCHEME_F64,), BYTES: (SCHEME_BYTES,)}
_WIDTHS = (0, 1, 2, 4, 8)


def _typecode(signed, size):
    for tc in ("bhilq" if signed else "BHILQ"):
        if array(tc).itemsize == size:
            return tc
    raise RuntimeError("no %d-byte array type" % size)  # pragma: no cover


_UNSIGNED = {w: _typecode(False, w) for w in (1, 2, 4, 8)}
_SIGNED = {w: _typecode(True, w) for w in (1, 2, 4, 8)}
_F64 = "d"
_BIG_ENDIAN = sys.byteorder == "big"
_U64 = 1 << 64


class SegmentError(Exception):
    """The file cannot be read as a segment at all (message: one line).
    `truncated` is True when the header itself is cut short (a file created
    an instant ago, or a crash right after creating it)."""

    def __init__(self, message, truncated=False):
        super().__init__(message)
        self.truncated = truncated


class _Corrupt(Exception):
    """A payload that does not parse; becomes one entry in Segment.problems."""


# ---------------------------------------------------------------- primitives

def _uvarint(b, p):
    """(value, next position) of the LEB128 varint at b[p]; at most 10 bytes."""
    try:
        byte = b[p]
        if byte < 0x80:
            return byte, p + 1
        value = byte & 0x7F
        shift = 7
        while True:
            p += 1
            byte = b[p]
            if shift == 63 and byte > 1:
                raise _Corrupt("varint overflows 64 bits")
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, p + 1
            shift += 7
            if shift > 63:
                raise _Corrupt("varint longer than 10 bytes")
    except IndexError:
        raise _Corrupt("payload ends inside a varint") from None


def _str(b, p):
    n, p = _uvarint(b, p)
    end = p + n
    if end > len(b):
        raise _Corrupt("string runs past the end of the block")
    return b[p:end].decode("utf-8", "replace"), end


def _fixed(b, p, n, w):
    """n unsigned little-endian integers of width w at b[p] -> (sequence, next).
    An array, not a list: building n int objects up front costs more than the
    whole decode, and consumers that only aggregate never need most of them."""
    if w == 0:
        return [0] * n, p
    end = p + n * w
    if end > len(b):
        raise _Corrupt("column data runs past the end of the block")
    a = array(_UNSIGNED[w])
    a.frombytes(b[p:end])
    if _BIG_ENDIAN:
        a.byteswap()
    return a, end


def _unzigzag(b, p, n, w):
    """n zigzag-coded values of width w -> (sequence of signed ints, next).

    Decoded for the whole column at once with big-int arithmetic: for each
    w-byte lane u, (u >> 1) ^ -(u & 1). `low` holds every lane's bit 0; the
    shifted value has each lane's top bit cleared (it received the next
    lane's bit 0); (low << 8w) - low turns each set bit 0 into an all-ones
    lane without borrowing across lanes. The result's lanes are the signed
    values in two's complement, which array reads directly."""
    if w == 0:
        return [0] * n, p
    end = p + n * w
    if end > len(b):
        raise _Corrupt("column data runs past the end of the block")
    x = int.from_bytes(b[p:end], "little")
    ones = int.from_bytes((b"\x01" + bytes(w - 1)) * n, "little")
    keep = int.from_bytes((b"\xff" * (w - 1) + b"\x7f") * n, "little")
    low = x & ones
    x = ((x >> 1) & keep) ^ ((low << (8 * w)) - low)
    a = array(_SIGNED[w])
    a.frombytes(x.to_bytes(n * w, "little"))
    if _BIG_ENDIAN:
        a.byteswap()
    return a, end


def _planes(b, p, n, w, lane):
    """The n integers stored as w byte planes at b[p] (all first bytes, then
    all second bytes, ...) -> (bytearray of n little-endian lanes of `lane` >= w
    bytes, next). Extended-slice assignment interleaves a plane at C speed."""
    end = p + n * w
    if end > len(b):
        raise _Corrupt("column data runs past the end of the block")
    buf = bytearray(n * lane)
    for k in range(w):
        buf[k::lane] = b[p + k * n:p + (k + 1) * n]
    return buf, end


def _packed_header(b, p, scheme, index=None):
    """(shift, base, next) of a packed column's data at b[p]; for PACKED_REL
    `base` is the referenced column's index, which must be below `index` (the
    column's own, when known)."""
    base = 0
    if scheme == PACKED_REL:
        if p >= len(b):
            raise _Corrupt("relative column reference runs past the end of the block")
        base = b[p]
        if index is not None and base >= index:
            raise _Corrupt("relative column refers to column %d, not an earlier one" % base)
        p += 1
    if p >= len(b):
        raise _Corrupt("packed column shift runs past the end of the block")
    shift = b[p]
    if shift > 63:
        raise _Corrupt("packed column shift %d" % shift)
    p += 1
    if scheme == PACKED_DELTA:
        if p + 8 > len(b):
            raise _Corrupt("delta base runs past the end of the block")
        base = int.from_bytes(b[p:p + 8], "little")
        p += 8
    return shift, base, p


def _decode_packed(b, p, n, w, scheme, earlier=None):
    """A packed column (schemes 5-8) -> (values, next), as its unpacked scheme
    would decode them; PACKED_REL as signed differences from earlier[ref]
    (the caller reduces them to the field's range)."""
    shift, base, p = _packed_header(b, p, scheme, None if earlier is None else len(earlier))
    if scheme == PACKED_REL:
        if earlier is None or base >= len(earlier) or earlier[base] is None:
            raise _Corrupt("relative column refers to column %d, not an earlier integer one" % base)
        ref = earlier[base]
        if w == 0:
            return list(ref), p
        buf, p = _planes(b, p, n, w, w)
        diffs, _ = _unzigzag(buf, 0, n, w)
        if shift:
            diffs = map((1 << shift).__mul__, diffs)
        return list(map(operator.add, ref, diffs)), p
    if w == 0:
        return ([base] * n if scheme == PACKED_DELTA else [0] * n), p
    if scheme == PACKED_PLAIN:
        # Shifted in place: lanes wide enough for value << shift never carry
        # into their neighbour, so one big-int shift does the whole column.
        lane = next((x for x in (1, 2, 4, 8) if 8 * x >= 8 * w + shift), None)
        if lane is None:  # wider than 64 bits after the shift: mod 2^64, value by value
            buf, p = _planes(b, p, n, w, w)
            return [(v << shift) % _U64 for v in _fixed(buf, 0, n, w)[0]], p
        buf, p = _planes(b, p, n, w, lane)
        if shift:
            buf = (int.from_bytes(buf, "little") << shift).to_bytes(n * lane, "little")
        return _fixed(buf, 0, n, lane)[0], p
    buf, p = _planes(b, p, n, w, w)
    signed, _ = _unzigzag(buf, 0, n, w)
    if scheme == PACKED_ZIGZAG:
        return (list(map((1 << shift).__mul__, signed)) if shift else signed), p
    # PACKED_DELTA (the shift applied by a C-level map feeding accumulate)
    values = list(accumulate(map((1 << shift).__mul__, signed) if shift else signed, initial=base))
    del values[0]
    if min(values) < 0 or max(values) >= _U64:
        values = [v % _U64 for v in values]  # wrapped: arithmetic is mod 2^64
    return values, p


def _column_encoding(b, p, field_type):
    """A column's encoding byte at b[p], checked against field_type ->
    (scheme, width, next)."""
    try:
        enc = b[p]
    except IndexError:
        raise _Corrupt("missing column") from None
    p += 1
    scheme, w = enc >> 4, enc & 0x0F
    if w not in _WIDTHS:
        raise _Corrupt("bad column width %d" % w)
    allowed = _SCHEMES_FOR.get(field_type)
    if scheme > PACKED_REL or (allowed is not None and scheme not in allowed):
        raise _Corrupt("column encoding %d does not fit field type %d" % (scheme, field_type))
    return scheme, w, p


def decode_column(b, p, n, field_type, earlier=None):
    """Decodes one column (SPEC.md 5.4) of n values at b[p] -> (sequence, next).
    The sequence is a list or an array (index it, iterate it, len() it; do not
    assume list methods). Integers come out as ints (kSInt signed, others
    unsigned), F64 as floats, BYTES as bytes objects. `earlier`: the block's
    columns decoded so far (None where a column is not an integer one), for
    a PACKED_REL column."""
    scheme, w, p = _column_encoding(b, p, field_type)
    if scheme == PACKED_REL:
        values, p = _decode_packed(b, p, n, w, scheme, earlier)
        if min(values) < 0 or max(values) >= _U64:  # sums are mod 2^64
            values = [v % _U64 for v in values]
        if field_type == SINT:
            values = [v - _U64 if v >= 1 << 63 else v for v in values]
        return values, p
    if scheme >= PACKED_PLAIN:
        values, p = _decode_packed(b, p, n, w, scheme, earlier)
        scheme -= PACKED_PLAIN  # the fix-ups below are those of the unpacked scheme
    elif scheme == PLAIN:
        values, p = _fixed(b, p, n, w)
    elif scheme == ZIGZAG:
        values, p = _unzigzag(b, p, n, w)
    elif scheme == DELTA:
        if p + 8 > len(b):
            raise _Corrupt("delta base runs past the end of the block")
        base = int.from_bytes(b[p:p + 8], "little")
        if w == 0:  # every delta 0: a constant column (a one-thread batch's tids, say)
            values, p = array("Q", [base]) * n, p + 8
        else:
            deltas, p = _unzigzag(b, p + 8, n, w)
            values = list(accumulate(deltas, initial=base))
            del values[0]
            if values[0] < 0 or values[0] >= _U64 or min(values) < 0 or max(values) >= _U64:
                values = [v % _U64 for v in values]  # wrapped: arithmetic is mod 2^64
    elif scheme == SCHEME_F64:
        if w != 8:
            raise _Corrupt("F64 column with width %d" % w)
        end = p + 8 * n
        if end > len(b):
            raise _Corrupt("column data runs past the end of the block")
        a = array(_F64)
        a.frombytes(b[p:end])
        if _BIG_ENDIAN:
            a.byteswap()
        values, p = a, end
    else:  # SCHEME_BYTES
        lens, p = _fixed(b, p, n, w)
        offsets = list(accumulate(lens, initial=p))
        if offsets[-1] > len(b):
            raise _Corrupt("bytes column runs past the end of the block")
        values = list(map(b.__getitem__, map(slice, offsets, islice(offsets, 1, None))))
        p = offsets[-1]
    if signed_type(field_type) is False and scheme == ZIGZAG:
        values = [v % _U64 for v in values]  # an unsigned field stored zigzag
    elif field_type == SINT and scheme in (PLAIN, DELTA):
        values = [v - _U64 if v >= 1 << 63 else v for v in values]
    return values, p


def column_end(b, p, n, field_type, index=None, fields=None):
    """Where a column of n values at b[p] ends, checking everything
    decode_column checks (encoding, width, extent, what a PACKED_REL column
    refers to: `fields` are the block's schema fields) without decoding the
    values; raises _Corrupt. EVENTS blocks are checked with it when read, so
    their damage is known (and reported, the same way for every command)
    before any report decodes them."""
    scheme, w, p = _column_encoding(b, p, field_type)
    if scheme >= PACKED_PLAIN:
        ref = b[p] if scheme == PACKED_REL and p < len(b) else None
        _, _, p = _packed_header(b, p, scheme, index)
        if ref is not None and fields is not None and signed_type(fields[ref].type) is None:
            raise _Corrupt("relative column refers to column %d, not an earlier integer one" % ref)
    if scheme == SCHEME_F64 and w != 8:
        raise _Corrupt("F64 column with width %d" % w)
    if scheme == DELTA:
        p += 8
    end = p + n * w
    if scheme == SCHEME_BYTES and w:
        if end > len(b):
            raise _Corrupt("column data runs past the end of the block")
        lens, _ = _fixed(b, p, n, w)
        end += sum(lens)
    if end > len(b):
        raise _Corrupt("column data runs past the end of the block")
    return end


def signed_type(field_type):
    """True for kSInt, False for the other integer types, None otherwise."""
    if field_type == SINT:
        return True
    if field_type in (TIME, UINT, STRING, STACK):
        return False
    return None


# ------------------------------------------------------------------ schema

class Field:
    __slots__ = ("name", "type", "unit")

    def __init__(self, name, type_code, unit):
        self.name = name
        self.type = type_code
        self.unit = unit

    @property
    def type_name(self):
        return TYPE_NAMES.get(self.type, "type%d" % self.type)

    def _key(self):
        return (self.name, self.type, self.unit)

    def to_json(self):
        return {"name": self.name, "type": self.type_name, "unit": self.unit}


class EventType:
    __slots__ = ("id", "name", "fields", "field_names")

    def __init__(self, type_id, name, fields):
        self.id = type_id
        self.name = name
        self.fields = fields
        self.field_names = [f.name for f in fields]

    def same_layout(self, other):
        return self.name == other.name and [f._key() for f in self.fields] == [f._key() for f in other.fields]

    def to_json(self):
        return {"id": self.id, "name": self.name, "fields": [f.to_json() for f in self.fields]}


# Decoded columns of recently used batches: {weak ref to batch: (columns,
# values)}, oldest first. Weak keys: a trace that is done with (and its
# batches) leaves the cache by itself.
_decoded = OrderedDict()
_decoded_cells = [0]


def _forget(ref):
    entry = _decoded.pop(ref, None)
    if entry is not None:
        _decoded_cells[0] -= entry[1]


class Batch:
    """One EVENTS block: `count` events of `type`, decoded on use. It keeps
    where the payload is in the segment's open file (read again, CRC checked,
    on use), or where no descriptor is to spare the payload as stored
    (zstd-compressed when it was); decoded columns live in a small shared
    cache (DECODED_CACHE_CELLS values)."""
    __slots__ = ("segment", "type", "count", "offset", "_payload", "_raw_len", "_pos", "_where", "__weakref__")

    def __init__(self, segment, event_type, count, offset, payload, pos, raw_len=None, where=None):
        self.segment = segment
        self.type = event_type
        self.count = count
        self.offset = offset
        self._payload = payload  # raw payload, or the zstd frame if raw_len is set
        self._raw_len = raw_len
        self._pos = pos
        self._where = where  # (fd, offset, length, header fields, CRC): payload re-read from the file

    def _stored(self):
        """The block's stored payload: held, or read again from the file (and
        checked against its CRC: the file may have changed since)."""
        if self._where is None:
            return self._payload
        fd, start, length, head, crc = self._where
        try:
            data = os.pread(fd, length, start)
        except OSError as e:
            raise _Corrupt("cannot read it again: %s" % (e.strerror or e)) from None
        if len(data) != length or crc32c(data, crc32c(head)) != crc:
            raise _Corrupt("the file changed since it was read")
        return data

    def columns(self):
        """One sequence (list or array) per schema field, raw values: string
        and stack fields hold table ids. None if the block turns out not to
        parse (reported once in segment.problems; blocks are validated when
        read, so this does not happen for a block that was kept)."""
        key = weakref.ref(self)
        entry = _decoded.get(key)
        if entry is not None:
            _decoded.move_to_end(key)
            return entry[0]
        if self._payload is None and self._where is None:
            return None
        p, n = self._pos, self.count
        cols = []
        try:
            b = self._stored()
            if self._raw_len is not None:
                b = _inflate(zstandard.ZstdDecompressor(), b, self._raw_len)
            for f in self.type.fields:
                col, p = decode_column(b, p, n, f.type, [c if signed_type(g.type) is not None else None
                                                          for c, g in zip(cols, self.type.fields)])
                cols.append(col)
        except _Corrupt as e:
            self.segment._problem(self.offset, "bad EVENTS block at offset %d: %s" % (self.offset, e))
            self.segment.bad_blocks += 1
            self._payload = self._where = None
            return None
        cells = n * len(cols)
        _decoded[weakref.ref(self, _forget)] = (cols, cells)
        _decoded_cells[0] += cells
        while _decoded_cells[0] > DECODED_CACHE_CELLS and len(_decoded) > 1:
            _, (_, old_cells) = _decoded.popitem(last=False)
            _decoded_cells[0] -= old_cells
        return cols

    def time_span(self):
        """(earliest, latest) of the block's first column (its time), decoding
        that column alone when the block is not in the cache; None if the
        block is damaged (columns() reports it)."""
        entry = _decoded.get(weakref.ref(self))
        if entry is not None:
            col = entry[0][0]
        else:
            if self._payload is None and self._where is None:
                return None
            try:
                b = self._stored()
                if self._raw_len is not None:
                    b = _inflate(zstandard.ZstdDecompressor(), b, self._raw_len)
                col, _ = decode_column(b, self._pos, self.count, self.type.fields[0].type, [])
            except _Corrupt:
                return None
        return (min(col), max(col)) if len(col) else None

    def column(self, name):
        cols = self.columns()
        if cols is None:
            return None
        try:
            return cols[self.type.field_names.index(name)]
        except ValueError:
            return None

    def columns_named(self, names):
        """The columns of the given fields, in that order, or None if the type
        lacks one of them or the block is damaged."""
        fields = self.type.field_names
        if any(n not in fields for n in names):
            return None
        cols = self.columns()
        if cols is None:
            return None
        return [cols[fields.index(n)] for n in names]


# ------------------------------------------------------------------ segment

class Segment:
    """A decoded segment. Attributes:

    path, size, header (dict: version, pid, sequence, anchor_monotonic_ns,
    anchor_realtime_ns, service, host), state ("sealed", "active",
    "truncated"), truncated_at, schema ({type id: EventType}), strings,
    mappings, locations, stacks (id -> entry dicts/tuples), batches (list of
    Batch, file order), footer (dict or None), problems ([(offset, message)]),
    bad_blocks, unknown_blocks, events_skipped, unusable_types.

    The tables (and the frames built from them) are loaded on use: read
    them through string(), mapping(), location_frames(), frames() and
    resolved_columns(), which load them again if they were dropped (see
    LOADED_TABLE_UNITS), never through the dicts directly.
    """

    def __init__(self, path):
        self.path = path
        self.size = 0
        self.header = {}
        self.state = "active"
        self.truncated_at = None
        self.schema = {}
        self.strings = {}
        self.mappings = {}   # id -> (start, end, offset, path id, build id id)
        self.locations = {}  # id -> (mapping id, address, ((function id, file id, line), ...))
        self.stacks = {}     # id -> (location id, ...) leaf first
        self.batches = []
        self._undefined = []  # EVENTS blocks waiting for their type's definition
        self.footer = None
        self.problems = []
        self.bad_blocks = 0
        self.unknown_blocks = 0
        self.events_skipped = 0
        self.unusable_types = 0  # types whose layout the reports cannot use (trace.check_layouts)
        self.problems_unlisted = 0  # past MAX_PROBLEMS
        self._types_by_name = None
        self._range = None
        self._text = None
        self._frames = {}
        self._loc_frames = {}
        self._mapping_dicts = {}
        # Table blocks to read again after the tables were dropped: (kind,
        # offset, payload start, length, flags, raw_len, header fields, CRC)
        # of each one that was read whole. _fd: the open file (None: the
        # tables stay loaded for good).
        self._fd = None
        self._table_blocks = []
        self._tables_loaded = True
        self._quiet = False  # problems already said once (tables read again)
        self.table_units = 0
        self._ref = weakref.ref(self, _tables_forget)
        hash(self._ref)  # a weak ref hashes only while alive; _tables_forget runs once it is not

    # -- intern tables, loaded while in use

    def _load_tables(self):
        """Reads the table blocks again (they were dropped for room)."""
        self._tables_loaded = True
        saved, self.table_left = self.table_left, 1 << 62  # accepted once already
        self._quiet = True
        dctx = None
        try:
            for entry in list(self._table_blocks):
                kind, offset, start, length, flags, raw_len, head, crc = entry
                try:
                    data = os.pread(self._fd, length, start)
                    if len(data) != length or crc32c(data, crc32c(head)) != crc:
                        raise _Corrupt("the file changed since it was read")
                    if flags & FLAG_ZSTD:
                        dctx = dctx or zstandard.ZstdDecompressor()
                        data = _inflate(dctx, data, raw_len)
                    _PARSERS[kind](self, data, offset)
                except (OSError, _Corrupt) as e:
                    self._table_blocks.remove(entry)
                    self.bad_blocks += 1
                    self._quiet = False
                    self._problem(offset, "bad %s block at offset %d: cannot read it again: %s" % (
                        KIND_NAMES[kind], offset, getattr(e, "strerror", None) or e))
                    self._quiet = True
        finally:
            self._quiet = False
            self.table_left = saved

    def _unload_tables(self):
        self.strings, self.mappings, self.locations, self.stacks = {}, {}, {}, {}
        self._text = None
        self._frames, self._loc_frames, self._mapping_dicts = {}, {}, {}
        self._tables_loaded = False

    # -- lookups

    @property
    def pid(self):
        return self.header.get("pid")

    def type_named(self, name):
        if self._types_by_name is None:
            self._types_by_name = {t.name: t for t in self.schema.values()}
        return self._types_by_name.get(name)

    # The one place the reader converts between the segment's monotonic clock
    # and the wall clock (its header's anchors, taken together).
    def wall_ns(self, t):
        """Wall-clock ns (since the epoch) of a monotonic time in this segment."""
        return self.header["anchor_realtime_ns"] + (t - self.header["anchor_monotonic_ns"])

    def monotonic_ns(self, wall):
        """The monotonic time in this segment of a wall-clock ns (wall_ns's inverse)."""
        return wall - self.header["anchor_realtime_ns"] + self.header["anchor_monotonic_ns"]

    def wall_offset(self):
        """What to add to this segment's monotonic times for wall-clock ns."""
        return self.header["anchor_realtime_ns"] - self.header["anchor_monotonic_ns"]

    def event_counts(self):
        counts = {}
        for b in self.batches:
            counts[b.type.name] = counts.get(b.type.name, 0) + b.count
        return counts

    def time_range(self):
        """(first, last) event time, from the footer when sealed, else from the
        time columns; (None, None) without events."""
        if self.footer and self.footer.get("events"):
            lo, hi = self.footer.get("first_time_ns"), self.footer.get("last_time_ns")
            # A damaged footer (a key lost or garbled) falls back to the columns.
            if lo is not None and hi is not None and lo <= hi:
                return lo, hi
        # Remembered: batches decode on demand (a bounded cache), and every
        # report asks for the range.
        if self._range is not None and self._range[0] is self.batches and self._range[1] == len(self.batches):
            return self._range[2]
        lo = hi = None
        for b in self.batches:
            times = b.columns()
            if not times:
                continue
            t0, t1 = min(times[0]), max(times[0])
            lo = t0 if lo is None or t0 < lo else lo
            hi = t1 if hi is None or t1 > hi else hi
        self._range = (self.batches, len(self.batches), (lo, hi))
        return lo, hi

    def string(self, sid):
        """Text of a string id: "" for 0, a visible placeholder if it was lost."""
        if _tables_last[0] is not self._ref:
            _use_tables(self)
        text = self._texts().get(sid)
        return text if text is not None else self._missing_string(sid)

    def _texts(self):
        if self._text is None:
            self._text = dict(self.strings)
            self._text[0] = ""
        return self._text

    def _missing_string(self, sid):
        text = "<missing string %d>" % sid
        self._texts()[sid] = text
        return text

    def mapping(self, mid):
        """{path, build_id, start, end, offset} or None (id 0 or lost)."""
        if _tables_last[0] is not self._ref:
            _use_tables(self)
        if mid in self._mapping_dicts:
            return self._mapping_dicts[mid]
        m = self.mappings.get(mid)
        d = None
        if m is not None:
            d = {"path": self.string(m[3]), "build_id": self.string(m[4]), "start": m[0], "end": m[1],
                 "offset": m[2]}
        self._mapping_dicts[mid] = d
        return d

    def location_frames(self, lid):
        """Frames of one location, innermost inline function first."""
        if _tables_last[0] is not self._ref:
            _use_tables(self)
        frames = self._loc_frames.get(lid)
        if frames is None:
            loc = self.locations.get(lid)
            if loc is None:
                frames = [{"function": "<missing location %d>" % lid, "file": "", "line": 0, "address": 0,
                           "mapping": None, "inlined": False}]
            else:
                mapping = self.mapping(loc[0]) if loc[0] else None
                lines = loc[2] or ((0, 0, 0),)
                last = len(lines) - 1
                frames = [{"function": self.string(fn), "file": self.string(fl), "line": line,
                           "address": loc[1], "mapping": mapping, "inlined": i < last}
                          for i, (fn, fl, line) in enumerate(lines)]
            self._loc_frames[lid] = frames
        return frames

    def frames(self, stack_id):
        """Leaf-first frame dicts of a stack id: function, file, line, address,
        mapping (dict or None), inlined. Cached and shared: do not modify."""
        if _tables_last[0] is not self._ref:
            _use_tables(self)
        frames = self._frames.get(stack_id)
        if frames is None:
            if stack_id == 0:
                frames = []
            elif stack_id not in self.stacks:
                frames = [{"function": "<missing stack %d>" % stack_id, "file": "", "line": 0, "address": 0,
                           "mapping": None, "inlined": False}]
            else:
                frames = []
                for lid in self.stacks[stack_id]:
                    frames.extend(self.location_frames(lid))
            self._frames[stack_id] = frames
        return frames

    def resolved_columns(self, batch):
        """The batch's columns with string ids replaced by text and stack ids
        by frame lists; None if the block does not decode."""
        cols = batch.columns()
        if cols is None:
            return None
        if _tables_last[0] is not self._ref:
            _use_tables(self)
        out = []
        for f, col in zip(batch.type.fields, cols):
            if f.type == STRING:
                texts = self._texts()
                for sid in set(col).difference(texts):
                    self._missing_string(sid)
                col = list(map(texts.__getitem__, col))
            elif f.type == STACK:
                cache = self._frames
                for sid in set(col).difference(cache):
                    self.frames(sid)
                col = list(map(cache.__getitem__, col))
            out.append(col)
        return out

    def events(self, types=None, resolve=True, sort=False):
        """Event dicts {"type": name, "pid": header pid, field: value, ...}
        (a schema field named "pid" wins over the header's), batch by batch in
        file order; sort=True orders each batch by time (Trace merges)."""
        for batch in self.batches:
            if types is not None and batch.type.name not in types:
                continue
            cols = self.resolved_columns(batch) if resolve else batch.columns()
            if cols is None:
                continue
            yield from self.rows(batch, sort_columns(cols) if sort else cols)

    def rows(self, batch, cols):
        """Lazy event dicts built from a batch's (resolved) columns."""
        name = batch.type.name
        names = row_field_names(batch.type)
        if "pid" in names:
            keys = ["type"] + names
            rows = zip(repeat(name), *cols)
        else:
            keys = ["type"] + names + ["pid"]
            rows = zip(repeat(name), *cols, repeat(self.header.get("pid")))
        return map(dict, map(zip, repeat(keys), rows))

    def _problem(self, offset, message):
        if self._quiet:
            return
        # A file of many tiny bad blocks must not make a list of millions.
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append((offset, message))
        else:
            self.problems_unlisted += 1


# Segments whose tables are loaded and may be dropped (read from a file kept
# open): {weak ref: table units}, least recently used first; _tables_last is
# the segment used last (the common case, the same one again, costs one test).
_tables_lru = OrderedDict()
_tables_units = [0]
_tables_last = [None]


def _tables_forget(ref):
    units = _tables_lru.pop(ref, None)
    if units is not None:
        _tables_units[0] -= units
    if _tables_last[0] is ref:
        _tables_last[0] = None


def _use_tables(seg):
    """Loads seg's tables if they were dropped and marks them used last;
    drops the least recently used other segments' past LOADED_TABLE_UNITS."""
    ref = seg._ref
    _tables_last[0] = ref
    if seg._fd is None:
        return  # nothing to read them again from: kept
    if not seg._tables_loaded:
        seg._load_tables()
    if ref in _tables_lru:
        _tables_lru.move_to_end(ref)
    else:
        _tables_lru[ref] = seg.table_units
        _tables_units[0] += seg.table_units
    while _tables_units[0] > LOADED_TABLE_UNITS and len(_tables_lru) > TABLES_KEPT_MIN:
        old, units = _tables_lru.popitem(last=False)  # never seg: it was just moved last
        _tables_units[0] -= units
        other = old()
        if other is not None:
            other._unload_tables()


def row_field_names(event_type):
    """The keys an event dict (Segment.rows) uses for the type's fields, in
    schema order: the field names, except that a field named "type" becomes
    "field.type" (writers never use it, SPEC.md 5.3; the event's type stays
    visible) and a "pid" field that is not an integer becomes "field.pid"
    (only an integer may stand for the process; a damaged schema could make
    it a string or a stack)."""
    names = event_type.field_names
    if "type" in names:
        names = [n if n != "type" else "field.type" for n in names]
    if "pid" in names and event_type.fields[names.index("pid")].type not in (TIME, UINT, SINT):
        names = [n if n != "pid" else "field.pid" for n in names]
    return names


def sort_columns(cols):
    """Columns reordered by the time column (column 0) if it is not already
    ascending; stable."""
    times = cols[0]
    if all(map(operator.le, times, islice(times, 1, None))):
        return cols
    order = sorted(range(len(times)), key=times.__getitem__)
    return [list(map(col.__getitem__, order)) for col in cols]


# ------------------------------------------------------------------ reading

def read_segment(path, follow=True):
    """Reads and decodes one segment file. Raises SegmentError if the file is
    unreadable, not a regular file, too large, or its header is unusable;
    block-level damage goes to segment.problems instead."""
    try:
        if open_sources[0] >= source_budget():
            return parse_segment(read_file(path, follow), path)
        data, fd = read_file(path, follow, keep_open=True)
    except SegmentFileError as e:
        raise SegmentError(str(e)) from None
    open_sources[0] += 1
    try:
        seg = parse_segment(data, path, fd)
    except BaseException:
        close_source(fd)
        raise
    if seg._fd is not None or any(b._where is not None for b in seg.batches):
        weakref.finalize(seg, close_source, fd)  # the batches (and tables) read from it
    else:
        close_source(fd)
    return seg


def parse_segment(data, path="<bytes>", fd=None):
    """fd: the file `data` was read from, still open: EVENTS batches then
    keep only where their payload is, and read it again on use, so a trace
    costs its tables and decoded columns, not its size on disk."""
    seg = Segment(path)
    seg.size = len(data)
    header_len = _parse_header(data, seg)
    reader = _Reader(seg, data, fd)
    reader.run(header_len)
    del reader  # the file's bytes go; batches keep only their own payloads
    _late_events(seg)
    if fd is not None and seg._table_blocks:
        # Its tables can be read again: they count against LOADED_TABLE_UNITS
        # from now on (and may go as later segments are read).
        seg._fd = fd
        seg.table_units = max(1, TABLE_BASE + TABLE_PER_BYTE * seg.size - seg.table_left)
        _use_tables(seg)
    if seg.problems_unlisted:
        seg.problems.append((seg.size, "%d more problems not listed" % seg.problems_unlisted))
    if seg.footer is not None:
        seg.state = "sealed"
    elif seg.truncated_at is not None:
        seg.state = "truncated"
    elif path.endswith(".seg"):
        # Renamed as sealed, yet no footer: the seal did not complete.
        seg.state = "truncated"
    return seg


def _parse_header(d, seg):
    n = len(d)
    if n == 0:
        raise SegmentError("empty file", truncated=True)
    if d[:min(n, 8)] != MAGIC[:min(n, 8)]:
        raise SegmentError("not a flightrec segment (bad magic)")
    if n < HEADER_FIXED:
        raise SegmentError("header cut short at %d bytes" % n, truncated=True)
    magic, version, _, header_len, pid, _, seq, mono, real = struct.unpack_from("<8sHHIIIQQQ", d, 0)
    if version != FRAMING_VERSION:
        raise SegmentError("unsupported framing version %d" % version)
    if header_len < MIN_HEADER_LEN or header_len > MAX_HEADER_LEN:
        raise SegmentError("corrupt header (header_len %d)" % header_len)
    if header_len > n:
        raise SegmentError("header cut short at %d of %d bytes" % (n, header_len), truncated=True)
    (crc,) = struct.unpack_from("<I", d, header_len - 4)
    if crc32c(d[:header_len - 4]) != crc:
        raise SegmentError("bad header CRC")
    strings = []
    p, end = HEADER_FIXED, header_len - 4
    for _ in range(2):
        if end - p < 2:
            raise SegmentError("corrupt header (strings do not fit)")
        (length,) = struct.unpack_from("<H", d, p)
        p += 2
        if length > end - p:
            raise SegmentError("corrupt header (strings do not fit)")
        strings.append(d[p:p + length].decode("utf-8", "replace"))
        p += length
    seg.header = {"version": version, "pid": pid, "sequence": seq, "anchor_monotonic_ns": mono,
                  "anchor_realtime_ns": real, "service": strings[0], "host": strings[1],
                  "header_len": header_len}
    return header_len


class _Reader:
    """The block loop of SPEC.md 4.2 over one segment's bytes."""

    def __init__(self, seg, data, fd=None):
        self.seg = seg
        self.data = data
        self.fd = fd
        self.size = len(data)
        self.dctx = None
        self.inflate_left = INFLATE_BASE + INFLATE_RATIO * len(data)
        seg.table_left = TABLE_BASE + TABLE_PER_BYTE * len(data)
        seg.cells_left = SEGMENT_CELLS + CELLS_PER_FILE_BYTE * len(data)
        self.crc_index = None  # built on the first resynchronisation

    def run(self, pos):
        seg, size = self.seg, self.size
        while pos < size:
            if size - pos < BLOCK_HEADER:
                seg.truncated_at = pos
                return
            check = self._check(pos)
            if check == "past end":
                q = self._resync(pos + 1)
                if q is None:
                    seg.truncated_at = pos
                    return
                seg.bad_blocks += 1
                seg._problem(pos, "corrupt block length at offset %d" % pos)
                pos = self._skip(pos, q)
                continue
            if check is not None or not self._crc_ok(pos):
                seg.bad_blocks += 1
                seg._problem(pos, "%s at offset %d" % (check or "bad CRC", pos))
                pos = self._skip(pos, self._resync(pos + 1))
                continue
            payload_len, kind, flags, raw_len = struct.unpack_from("<IHHI", self.data, pos + 4)
            self._block(pos, kind, flags, raw_len, pos + BLOCK_HEADER, payload_len)
            pos += BLOCK_HEADER + payload_len

    def _check(self, p):
        sync, payload_len, _, flags, raw_len = struct.unpack_from("<IIHHI", self.data, p)
        if sync != SYNC:
            return "no block sync word"
        if payload_len > MAX_BLOCK or raw_len > MAX_BLOCK or (not flags & FLAG_ZSTD and payload_len != raw_len):
            return "impossible block length"
        if payload_len > self.size - p - BLOCK_HEADER:
            return "past end"
        return None

    def _crc_ok(self, p):
        d = self.data
        (payload_len,) = struct.unpack_from("<I", d, p + 4)
        (stored,) = struct.unpack_from("<I", d, p + 16)
        return crc32c(d[p + BLOCK_HEADER:p + BLOCK_HEADER + payload_len], crc32c(d[p + 4:p + 16])) == stored

    def _resync(self, q):
        """First offset >= q holding a complete block with a good CRC, or None.
        Every candidate is examined once per file (the caller continues past
        the answer) and its CRC comes from the CrcIndex in time independent of
        the length it declares: linear in the file, whatever it holds."""
        d = self.data
        while True:
            q = d.find(SYNC_BYTES, q)
            if q < 0 or q + BLOCK_HEADER > self.size:
                return None
            if self._check(q) is None:
                if self.crc_index is None:
                    self.crc_index = CrcIndex(d)
                (payload_len,) = struct.unpack_from("<I", d, q + 4)
                (stored,) = struct.unpack_from("<I", d, q + 16)
                head = crc32c(d[q + 4:q + 16])
                if self.crc_index.crc(q + BLOCK_HEADER, q + BLOCK_HEADER + payload_len, head) == stored:
                    return q
            q += 1

    def _skip(self, p, q):
        if q is None:
            self.seg._problem(p, "no good block after offset %d; %d bytes unreadable" % (p, self.size - p))
            return self.size
        self.seg._problem(p, "skipped %d bytes to the next good block at offset %d" % (q - p, q))
        return q

    def _block(self, offset, kind, flags, raw_len, start, length):
        seg = self.seg
        if flags & ~KNOWN_FLAGS:
            seg.unknown_blocks += 1
            seg._problem(offset, "unsupported block flags 0x%x at offset %d" % (flags, offset))
            return
        if kind not in KIND_NAMES:
            seg.unknown_blocks += 1
            seg._problem(offset, "skipped block of unknown kind %d at offset %d" % (kind, offset))
            return
        if seg.footer is not None:
            seg._problem(offset, "%s block after the footer at offset %d" % (KIND_NAMES[kind], offset))
        stored = self.data[start:start + length]
        payload = stored
        try:
            if flags & FLAG_ZSTD:
                payload = self._decompress(stored, raw_len)
            if kind == KIND_EVENTS:
                where = None
                if self.fd is not None:
                    where = (self.fd, start, length, bytes(self.data[offset + 4:offset + 16]),
                             struct.unpack_from("<I", self.data, offset + 16)[0])
                _parse_events(seg, payload, offset, bytes(stored) if flags & FLAG_ZSTD else None, where)
            else:
                _PARSERS[kind](seg, payload, offset)
                if self.fd is not None and kind in _TABLE_KINDS:
                    seg._table_blocks.append((kind, offset, start, length, flags, raw_len,
                                              bytes(self.data[offset + 4:offset + 16]),
                                              struct.unpack_from("<I", self.data, offset + 16)[0]))
        except _Corrupt as e:
            seg.bad_blocks += 1
            seg._problem(offset, "bad %s block at offset %d: %s" % (KIND_NAMES[kind], offset, e))

    def _decompress(self, payload, raw_len):
        # Check the frame's declared size before letting zstd allocate for it.
        try:
            declared = zstandard.frame_content_size(payload)
        except zstandard.ZstdError:
            raise _Corrupt("not a zstd frame") from None
        if declared != raw_len:
            raise _Corrupt("zstd frame size %d does not match raw_len %d" % (declared, raw_len))
        if raw_len > self.inflate_left:
            raise _Corrupt("would inflate past the segment's budget (%d MiB for a %d-byte file)"
                           % ((INFLATE_BASE + INFLATE_RATIO * self.size) >> 20, self.size))
        self.inflate_left -= raw_len
        if self.dctx is None:
            self.dctx = zstandard.ZstdDecompressor()
        return _inflate(self.dctx, payload, raw_len)


def _inflate(dctx, payload, raw_len):
    try:
        raw = dctx.decompress(payload, max_output_size=raw_len)
    except zstandard.ZstdError as e:
        raise _Corrupt("zstd: %s" % e) from None
    if len(raw) != raw_len:
        raise _Corrupt("zstd frame decompressed to %d bytes, expected %d" % (len(raw), raw_len))
    return raw


# ----------------------------------------------------------- payload parsers

def _parse_schema(seg, b, offset):
    count, p = _uvarint(b, 0)
    if count > len(b) - p:
        raise _Corrupt("bad type count")
    defs = []
    for _ in range(count):
        tid, p = _uvarint(b, p)
        name, p = _str(b, p)
        nfields, p = _uvarint(b, p)
        if tid == 0 or tid >= 1 << 32 or nfields == 0 or nfields > MAX_FIELDS:
            raise _Corrupt("bad type definition")
        fields = []
        for _ in range(nfields):
            fname, p = _str(b, p)
            if p >= len(b):
                raise _Corrupt("bad field definition in type %s" % name)
            code = b[p]
            unit, p = _str(b, p + 1)
            fields.append(Field(fname, code, unit))
        defs.append(EventType(tid, name, fields))
    for t in defs:
        if t.fields[0].type != TIME or t.fields[0].name != "time":
            seg._problem(offset, "event type %s at offset %d ignored: field 0 is not a time" % (t.name, offset))
            continue
        if len(set(t.field_names)) != len(t.field_names):
            # Events are presented as {field: value}: two fields of one name
            # cannot both be shown, and which one a report reads is a guess.
            seg._problem(offset, "event type %s at offset %d ignored: two fields share a name" % (t.name, offset))
            continue
        old = seg.schema.get(t.id)
        if old is None:
            seg.schema[t.id] = t
            seg._types_by_name = None
        elif not old.same_layout(t):
            seg._problem(offset, "conflicting redefinition of event type %d (%s) at offset %d; kept the first"
                         % (t.id, t.name, offset))


def _table(seg, b, offset, table, parse_entry):
    first, p = _uvarint(b, 0)
    count, p = _uvarint(b, p)
    if first == 0 or count > len(b) - p or first + count > 1 << 32:
        raise _Corrupt("bad table id range")
    if count > seg.table_left:
        raise _Corrupt("%d table entries, past what the segment may define (%d left of %d)"
                       % (count, seg.table_left, TABLE_BASE + TABLE_PER_BYTE * seg.size))
    entries = []
    units = [count]  # entries, plus each stack frame and inline line
    for _ in range(count):
        entry, p = parse_entry(b, p, units)
        entries.append(entry)
        if units[0] > seg.table_left:
            raise _Corrupt("table entries, frames and lines past what the segment may define (%d)"
                           % (TABLE_BASE + TABLE_PER_BYTE * seg.size))
    seg.table_left -= units[0]
    if units[1:]:
        seg._problem(offset, "%d stack%s deeper than %d frames at offset %d cut to %d" % (
            units[1], "" if units[1] == 1 else "s", MAX_STACK_DEPTH, offset, MAX_STACK_DEPTH))
    dups = 0
    for i, entry in enumerate(entries, first):
        if i in table:
            dups += 1
        else:
            table[i] = entry
    if dups:
        seg._problem(offset, "%d duplicate table ids at offset %d ignored" % (dups, offset))


def _mapping_entry(b, p, units):
    start, p = _uvarint(b, p)
    end, p = _uvarint(b, p)
    off, p = _uvarint(b, p)
    path, p = _uvarint(b, p)
    build, p = _uvarint(b, p)
    return (start, end, off, path, build), p


def _location_entry(b, p, units):
    mapping, p = _uvarint(b, p)
    address, p = _uvarint(b, p)
    nlines, p = _uvarint(b, p)
    if nlines > (len(b) - p) // 3:
        raise _Corrupt("bad line count")
    units[0] += nlines
    lines = []
    for _ in range(nlines):
        fn, p = _uvarint(b, p)
        fl, p = _uvarint(b, p)
        line, p = _uvarint(b, p)
        lines.append((fn, fl, line))
    return (mapping, address, tuple(lines)), p


def _stack_entry(b, p, units):
    n, p = _uvarint(b, p)
    if n > len(b) - p:
        raise _Corrupt("bad frame count")
    locs = []
    for _ in range(min(n, MAX_STACK_DEPTH)):
        lid, p = _uvarint(b, p)
        locs.append(lid)
    if n > MAX_STACK_DEPTH:
        # Kept: the leaf end (where time was spent); the rest is skipped, not
        # stored. The cut is said once per block (units[1] counts the stacks).
        for _ in range(n - MAX_STACK_DEPTH):
            _, p = _uvarint(b, p)
        if len(units) == 1:
            units.append(0)
        units[1] += 1
    units[0] += len(locs)
    return tuple(locs), p


def _string_entry(b, p, units):
    return _str(b, p)


def _parse_strings(seg, b, offset):
    _table(seg, b, offset, seg.strings, _string_entry)
    seg._text = None


def _parse_events(seg, b, offset, stored=None, where=None):
    """stored: the block's zstd frame when it was compressed (what the batch
    keeps, instead of the decompressed payload b); where: (fd, payload
    offset, length, header fields, CRC) to read it again from instead."""
    tid, p = _uvarint(b, 0)
    count, p = _uvarint(b, p)
    if count == 0 or count > MAX_EVENTS_PER_BLOCK:
        raise _Corrupt("bad event count")
    t = seg.schema.get(tid)
    if t is None:
        # Kept as stored until the end of the segment: writers define every
        # type twice (SPEC.md 5.3), so a later SCHEMA block may define it.
        seg._undefined.append((offset, tid, count, bytes(b) if stored is None else stored,
                               None if stored is None else len(b)))
        return
    cells = count * len(t.fields)
    if cells > BLOCK_CELLS or cells > CELL_SLACK + CELLS_PER_BYTE * len(b):
        raise _Corrupt("%d events x %d fields in a %d-byte payload: more values than a block may declare"
                       % (count, len(t.fields), len(b)))
    if cells > seg.cells_left:
        raise _Corrupt("%d events x %d fields: past the values the segment may hold (%d)"
                       % (count, len(t.fields), SEGMENT_CELLS + CELLS_PER_FILE_BYTE * seg.size))
    q = p
    for i, f in enumerate(t.fields):
        q = column_end(b, q, count, f.type, i, t.fields)
    seg.cells_left -= cells
    if where is not None:
        seg.batches.append(Batch(seg, t, count, offset, None, p, len(b) if stored is not None else None, where))
        return
    if stored is not None:
        seg.batches.append(Batch(seg, t, count, offset, stored, p, len(b)))
        return
    if len(b) - q > max(4096, q - p):
        # Bytes after the columns are ignored (SPEC.md 5); a batch waiting to be
        # decoded must not hold megabytes of them.
        b, p = bytes(b[p:q]), 0
    seg.batches.append(Batch(seg, t, count, offset, bytes(b), p))


def _late_events(seg):
    """EVENTS blocks read before their type was defined: decoded now if a
    later SCHEMA block defined it (its first definition was lost), else
    skipped and reported."""
    pending, seg._undefined = seg._undefined, []
    late = False
    dctx = None
    for offset, tid, count, kept, raw_len in pending:
        if tid not in seg.schema:
            seg.events_skipped += count
            seg._problem(offset, "%d events of undefined type %d at offset %d skipped (schema lost?)"
                         % (count, tid, offset))
            continue
        try:
            if raw_len is None:
                _parse_events(seg, kept, offset)
            else:
                dctx = dctx or zstandard.ZstdDecompressor()
                _parse_events(seg, _inflate(dctx, kept, raw_len), offset, kept)
            late = True
        except _Corrupt as e:
            seg.bad_blocks += 1
            seg._problem(offset, "bad EVENTS block at offset %d: %s" % (offset, e))
    if late:
        seg.batches.sort(key=operator.attrgetter("offset"))


def _parse_footer(seg, b, offset):
    count, p = _uvarint(b, 0)
    if count > len(b) - p:
        raise _Corrupt("bad footer count")
    entries = {}
    for _ in range(count):
        key, p = _str(b, p)
        value, p = _uvarint(b, p)
        entries[key] = value
    if seg.footer is None:
        seg.footer = entries


_PARSERS = {
    KIND_SCHEMA: _parse_schema,
    KIND_STRINGS: _parse_strings,
    KIND_MAPPINGS: lambda seg, b, off: _table(seg, b, off, seg.mappings, _mapping_entry),
    KIND_LOCATIONS: lambda seg, b, off: _table(seg, b, off, seg.locations, _location_entry),
    KIND_STACKS: lambda seg, b, off: _table(seg, b, off, seg.stacks, _stack_entry),
    KIND_EVENTS: _parse_events,
    KIND_FOOTER: _parse_footer,
}


_TABLE_KINDS = (KIND_STRINGS, KIND_MAPPINGS, KIND_LOCATIONS, KIND_STACKS)


def is_segment_name(name):
    return name.endswith(".seg") or name.endswith(".active")


def display_name(path):
    return os.path.basename(path)
