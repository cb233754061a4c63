"""segment: decodes one flightrec segment file (format/SPEC.md).

This module (with block_scanner.py, the framing, and column_decoder.py, the
type codes and columns) knows the format, nothing else: every event type, field name and unit comes from the segment's own
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
import weakref
from collections import OrderedDict
from itertools import islice, repeat

import zstandard

# Split as format/ splits the C++ reader: the framing (block_scanner.py), the
# payload primitives and column decoding (column_decoder.py), and here what
# a segment's blocks mean (header, schema, tables, batches of events). The
# type codes and decode_column stay importable from here.
from .block_scanner import (FLAG_ZSTD, FRAMING_VERSION, HEADER_FIXED, INFLATE_BASE, KIND_EVENTS,  # noqa: F401
                            KIND_FOOTER, KIND_LOCATIONS, KIND_MAPPINGS, KIND_NAMES, KIND_SCHEMA, KIND_STACKS,
                            KIND_STRINGS, MAGIC, MAX_HEADER_LEN, MIN_HEADER_LEN, BlockScanner, inflate)
from .column_decoder import (BYTES, F64, SINT, STACK, STRING, TIME, TYPE_NAMES, UINT, Corrupt,  # noqa: F401
                             column_end, decode_column, read_str, signed_type, uvarint)
from .crc32c import crc32c
from .segment_file import SegmentFileError, close_source, open_sources, read_file, source_budget

MAX_FIELDS = 255
MAX_EVENTS_PER_BLOCK = 1 << 20

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


class SegmentError(Exception):
    """The file cannot be read as a segment at all (message: one line).
    `truncated` is True when the header itself is cut short (a file created
    an instant ago, or a crash right after creating it)."""

    def __init__(self, message, truncated=False):
        super().__init__(message)
        self.truncated = truncated


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
            raise Corrupt("cannot read it again: %s" % (e.strerror or e)) from None
        if len(data) != length or crc32c(data, crc32c(head)) != crc:
            raise Corrupt("the file changed since it was read")
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
                b = inflate(zstandard.ZstdDecompressor(), b, self._raw_len)
            for f in self.type.fields:
                col, p = decode_column(b, p, n, f.type, [c if signed_type(g.type) is not None else None
                                                          for c, g in zip(cols, self.type.fields)])
                cols.append(col)
        except Corrupt as e:
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
                    b = inflate(zstandard.ZstdDecompressor(), b, self._raw_len)
                col, _ = decode_column(b, self._pos, self.count, self.type.fields[0].type, [])
            except Corrupt:
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
                        raise Corrupt("the file changed since it was read")
                    if flags & FLAG_ZSTD:
                        dctx = dctx or zstandard.ZstdDecompressor()
                        data = inflate(dctx, data, raw_len)
                    _PARSERS[kind](self, data, offset)
                except (OSError, Corrupt) as e:
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

    def raw_tables(self):
        """(stacks, locations, mappings): the id -> entry tables as decoded
        (stack: location ids; location: (mapping id, address, ((function id,
        file id, line), ...)); mapping: (start, end, offset, path id, build id
        id)), loaded if they were dropped. For a reader that keys stacks by
        content without building frame dicts (fleet_load.py)."""
        if _tables_last[0] is not self._ref:
            _use_tables(self)
        return self.stacks, self.locations, self.mappings

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
    seg.table_left = TABLE_BASE + TABLE_PER_BYTE * len(data)
    seg.cells_left = SEGMENT_CELLS + CELLS_PER_FILE_BYTE * len(data)
    reader = BlockScanner(seg, data, fd, _read_block)
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


def _read_block(scanner, offset, kind, flags, raw_len, start, length, stored, payload):
    """BlockScanner's on_block: one good block's payload into the segment."""
    seg, data = scanner.seg, scanner.data
    if kind == KIND_EVENTS:
        where = None
        if scanner.fd is not None:
            where = (scanner.fd, start, length, bytes(data[offset + 4:offset + 16]),
                     struct.unpack_from("<I", data, offset + 16)[0])
        _parse_events(seg, payload, offset, bytes(stored) if flags & FLAG_ZSTD else None, where)
    else:
        _PARSERS[kind](seg, payload, offset)
        if scanner.fd is not None and kind in _TABLE_KINDS:
            seg._table_blocks.append((kind, offset, start, length, flags, raw_len,
                                      bytes(data[offset + 4:offset + 16]),
                                      struct.unpack_from("<I", data, offset + 16)[0]))


# ----------------------------------------------------------- payload parsers

def _parse_schema(seg, b, offset):
    count, p = uvarint(b, 0)
    if count > len(b) - p:
        raise Corrupt("bad type count")
    defs = []
    for _ in range(count):
        tid, p = uvarint(b, p)
        name, p = read_str(b, p)
        nfields, p = uvarint(b, p)
        if tid == 0 or tid >= 1 << 32 or nfields == 0 or nfields > MAX_FIELDS:
            raise Corrupt("bad type definition")
        fields = []
        for _ in range(nfields):
            fname, p = read_str(b, p)
            if p >= len(b):
                raise Corrupt("bad field definition in type %s" % name)
            code = b[p]
            unit, p = read_str(b, p + 1)
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
    first, p = uvarint(b, 0)
    count, p = uvarint(b, p)
    if first == 0 or count > len(b) - p or first + count > 1 << 32:
        raise Corrupt("bad table id range")
    if count > seg.table_left:
        raise Corrupt("%d table entries, past what the segment may define (%d left of %d)"
                       % (count, seg.table_left, TABLE_BASE + TABLE_PER_BYTE * seg.size))
    entries = []
    units = [count]  # entries, plus each stack frame and inline line
    for _ in range(count):
        entry, p = parse_entry(b, p, units)
        entries.append(entry)
        if units[0] > seg.table_left:
            raise Corrupt("table entries, frames and lines past what the segment may define (%d)"
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
    start, p = uvarint(b, p)
    end, p = uvarint(b, p)
    off, p = uvarint(b, p)
    path, p = uvarint(b, p)
    build, p = uvarint(b, p)
    return (start, end, off, path, build), p


def _location_entry(b, p, units):
    mapping, p = uvarint(b, p)
    address, p = uvarint(b, p)
    nlines, p = uvarint(b, p)
    if nlines > (len(b) - p) // 3:
        raise Corrupt("bad line count")
    units[0] += nlines
    lines = []
    for _ in range(nlines):
        fn, p = uvarint(b, p)
        fl, p = uvarint(b, p)
        line, p = uvarint(b, p)
        lines.append((fn, fl, line))
    return (mapping, address, tuple(lines)), p


def _stack_entry(b, p, units):
    n, p = uvarint(b, p)
    if n > len(b) - p:
        raise Corrupt("bad frame count")
    locs = []
    for _ in range(min(n, MAX_STACK_DEPTH)):
        lid, p = uvarint(b, p)
        locs.append(lid)
    if n > MAX_STACK_DEPTH:
        # Kept: the leaf end (where time was spent); the rest is skipped, not
        # stored. The cut is said once per block (units[1] counts the stacks).
        for _ in range(n - MAX_STACK_DEPTH):
            _, p = uvarint(b, p)
        if len(units) == 1:
            units.append(0)
        units[1] += 1
    units[0] += len(locs)
    return tuple(locs), p


def _string_entry(b, p, units):
    return read_str(b, p)


def _parse_strings(seg, b, offset):
    _table(seg, b, offset, seg.strings, _string_entry)
    seg._text = None


def _parse_events(seg, b, offset, stored=None, where=None):
    """stored: the block's zstd frame when it was compressed (what the batch
    keeps, instead of the decompressed payload b); where: (fd, payload
    offset, length, header fields, CRC) to read it again from instead."""
    tid, p = uvarint(b, 0)
    count, p = uvarint(b, p)
    if count == 0 or count > MAX_EVENTS_PER_BLOCK:
        raise Corrupt("bad event count")
    t = seg.schema.get(tid)
    if t is None:
        # Kept as stored until the end of the segment: writers define every
        # type twice (SPEC.md 5.3), so a later SCHEMA block may define it.
        seg._undefined.append((offset, tid, count, bytes(b) if stored is None else stored,
                               None if stored is None else len(b)))
        return
    cells = count * len(t.fields)
    if cells > BLOCK_CELLS or cells > CELL_SLACK + CELLS_PER_BYTE * len(b):
        raise Corrupt("%d events x %d fields in a %d-byte payload: more values than a block may declare"
                       % (count, len(t.fields), len(b)))
    if cells > seg.cells_left:
        raise Corrupt("%d events x %d fields: past the values the segment may hold (%d)"
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
                _parse_events(seg, inflate(dctx, kept, raw_len), offset, kept)
            late = True
        except Corrupt as e:
            seg.bad_blocks += 1
            seg._problem(offset, "bad EVENTS block at offset %d: %s" % (offset, e))
    if late:
        seg.batches.sort(key=operator.attrgetter("offset"))


def _parse_footer(seg, b, offset):
    count, p = uvarint(b, 0)
    if count > len(b) - p:
        raise Corrupt("bad footer count")
    entries = {}
    for _ in range(count):
        key, p = read_str(b, p)
        value, p = uvarint(b, p)
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
