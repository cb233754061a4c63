"""fleet_native: the loader's insert buffers and their encoding in ClickHouse's
Native format (issue 42, fleet_load.py). Owned here because the driver's own
column writers were a third of a load's time: a Python list per column grown
row by row, a copy of each list, a struct.pack of every number and an encode
of every string, even of the many values that are one segment's constant
(host, service, load_id ...) repeated for each of its rows.

A Column holds runs: lists of values, or (value, n) for one value n times (a
segment's constant), so buffering a constant costs nothing per row and
encoding it is one bytes multiplication. Numbers go out through the array
module (one C call per run), strings through the driver's C write_strings;
Array(String) and Array(numbers) offsets are computed per run. Column types
this file does not know (Nullable, rare tables) fall back to the driver's own
write_column over the flattened list, so every type still goes in exactly as
the driver would send it."""
import itertools
import sys
from array import array

# ClickHouse type -> array typecode (little-endian machines only: see FAST).
_CODES = {"UInt8": "B", "UInt16": "H", "UInt32": "I", "UInt64": "Q", "Int8": "b", "Int16": "h", "Int32": "i",
          "Int64": "q", "Float32": "f", "Float64": "d"}
_SIZES = {"UInt8": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8, "Int8": 1, "Int16": 2, "Int32": 4, "Int64": 8,
          "Float32": 4, "Float64": 8}
FAST = sys.byteorder == "little" and all(array(c).itemsize == _SIZES[t] for t, c in _CODES.items())
_RUN_BYTES = 1 << 20  # a constant run is written in pieces of about this size


class Column:
    """One column of a batch: runs of values (lists) and of one value repeated."""
    __slots__ = ("runs", "tail", "n")

    def __init__(self):
        self.runs = []
        self.tail = []  # single values appended (rows added one at a time)
        self.n = 0

    def append(self, v):
        self.tail.append(v)
        self.n += 1

    def extend(self, values):
        """values: a list the column may keep (the caller does not change it after)."""
        if self.tail:
            self.runs.append(self.tail)
            self.tail = []
        self.runs.append(values)
        self.n += len(values)

    def repeat(self, v, n):
        if self.tail:
            self.runs.append(self.tail)
            self.tail = []
        self.runs.append(_Repeat(v, n))
        self.n += n

    def extend_sparse(self, sparse):
        """A Sparse's n values: runs of its default between its points."""
        at = 0
        for i, v in sparse.points:
            if i > at:
                self.repeat(sparse.default, i - at)
            self.append(v)
            at = i + 1
        if sparse.n > at:
            self.repeat(sparse.default, sparse.n - at)

    def all_runs(self):
        return self.runs + [self.tail] if self.tail else self.runs

    def values(self):
        """The column as one list (for the driver's writers)."""
        out = []
        for r in self.all_runs():
            if type(r) is _Repeat:
                out.extend([r.v] * r.n)
            else:
                out.extend(r)
        return out


class Sparse:
    """n values of a column, all default but at points [(index, value)]
    (indices increasing): a column that is mostly one value (the request a
    sample fell in: most fell in none)."""
    __slots__ = ("default", "n", "points")

    def __init__(self, default, n, points):
        self.default, self.n, self.points = default, n, points


class _Repeat:
    __slots__ = ("v", "n")

    def __init__(self, v, n):
        self.v, self.n = v, n


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _encoded(v):
    return v if isinstance(v, bytes) else v.encode("utf-8")


def _write_repeated(buf, piece, n):
    """piece * n, in pieces of bounded size (memory)."""
    if not piece or not n:
        return
    per = max(1, _RUN_BYTES // len(piece))
    chunk = piece * min(n, per)
    while n >= per:
        buf.write(chunk)
        n -= per
    if n:
        buf.write(piece * n)


def _write_numbers(buf, code, runs):
    for r in runs:
        if type(r) is _Repeat:
            _write_repeated(buf, array(code, (r.v,)).tobytes(), r.n)
        elif r:
            buf.write(array(code, r).tobytes())


def _write_strings(buf, runs):
    for r in runs:
        if type(r) is _Repeat:
            if isinstance(r.v, (str, bytes)):
                b = _encoded(r.v)
                _write_repeated(buf, _varint(len(b)) + b, r.n)
            else:  # what the driver makes of it (or its error)
                buf.write_strings([r.v] * r.n, encoding="utf-8")
        elif r:
            buf.write_strings(r, encoding="utf-8")


def _write_array(buf, inner, runs):
    """Array(inner): every row's end offset (UInt64), then the elements."""
    offsets = []
    end = 0
    for r in runs:
        if type(r) is _Repeat:
            k = len(r.v)
            offsets.append(array("Q", range(end + k, end + k * r.n + 1, k)) if k else
                           array("Q", (end,)) * r.n)
            end += k * r.n
        elif r:
            a = array("Q", itertools.accumulate(map(len, r), initial=end))
            end = a[-1]
            offsets.append(a[1:])
    for a in offsets:
        buf.write(a.tobytes())
    elems = []
    for r in runs:
        if type(r) is _Repeat:
            if r.v and r.n:
                elems.append(_Repeat(list(r.v), r.n))
        elif r:
            elems.append(list(itertools.chain.from_iterable(r)))
    if inner == "String":
        # a repeated list of strings: its encoded strings repeated
        for e in elems:
            if type(e) is _Repeat:
                if all(isinstance(s, (str, bytes)) for s in e.v):
                    piece = b"".join(_varint(len(b)) + b for b in map(_encoded, e.v))
                    _write_repeated(buf, piece, e.n)
                else:
                    buf.write_strings(e.v * e.n, encoding="utf-8")
            else:
                buf.write_strings(e, encoding="utf-8")
    else:
        code = _CODES[inner]
        for e in elems:
            if type(e) is _Repeat:
                _write_repeated(buf, array(code, e.v).tobytes(), e.n)
            else:
                buf.write(array(code, e).tobytes())


def _inner(ctype):
    return ctype[6:-1] if ctype.startswith("Array(") and ctype.endswith(")") else None


def fast_type(ctype):
    """Whether write_column encodes this type itself (else the driver does)."""
    if not FAST:
        return False
    inner = _inner(ctype)
    return ctype in _CODES or ctype == "String" or inner == "String" or inner in _CODES


def write_column(buf, ctype, column, driver_write):
    """Column's data (no name or type) into buf, the connection's buffered
    writer. driver_write(items): the driver's writer, for the other types."""
    runs = column.all_runs()
    if not FAST:
        driver_write(column.values())
    elif ctype in _CODES:
        _write_numbers(buf, _CODES[ctype], runs)
    elif ctype == "String":
        _write_strings(buf, runs)
    else:
        inner = _inner(ctype)
        if inner == "String" or inner in _CODES:
            _write_array(buf, inner, runs)
        else:
            driver_write(column.values())
