"""column_decoder: the payload primitives of a segment (format/SPEC.md 5):
varints, strings, the seven field type codes and the column schemes, and
decoding a column of n values (decode_column) or finding its end without
decoding it (column_end). The Python twin of format/column_decoder.*; it
knows nothing of blocks or segments, and says what does not parse by
raising Corrupt (which the block reader turns into one problem line).
"""
import operator
import sys
from array import array
from itertools import accumulate, islice


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



class Corrupt(Exception):
    """A payload that does not parse; becomes one entry in Segment.problems."""



def uvarint(b, p):
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
                raise Corrupt("varint overflows 64 bits")
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, p + 1
            shift += 7
            if shift > 63:
                raise Corrupt("varint longer than 10 bytes")
    except IndexError:
        raise Corrupt("payload ends inside a varint") from None


def read_str(b, p):
    n, p = uvarint(b, p)
    end = p + n
    if end > len(b):
        raise Corrupt("string runs past the end of the block")
    return b[p:end].decode("utf-8", "replace"), end


def _fixed(b, p, n, w):
    """n unsigned little-endian integers of width w at b[p] -> (sequence, next).
    An array, not a list: building n int objects up front costs more than the
    whole decode, and consumers that only aggregate never need most of them."""
    if w == 0:
        return [0] * n, p
    end = p + n * w
    if end > len(b):
        raise Corrupt("column data runs past the end of the block")
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
        raise Corrupt("column data runs past the end of the block")
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
        raise Corrupt("column data runs past the end of the block")
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
            raise Corrupt("relative column reference runs past the end of the block")
        base = b[p]
        if index is not None and base >= index:
            raise Corrupt("relative column refers to column %d, not an earlier one" % base)
        p += 1
    if p >= len(b):
        raise Corrupt("packed column shift runs past the end of the block")
    shift = b[p]
    if shift > 63:
        raise Corrupt("packed column shift %d" % shift)
    p += 1
    if scheme == PACKED_DELTA:
        if p + 8 > len(b):
            raise Corrupt("delta base runs past the end of the block")
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
            raise Corrupt("relative column refers to column %d, not an earlier integer one" % base)
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
        raise Corrupt("missing column") from None
    p += 1
    scheme, w = enc >> 4, enc & 0x0F
    if w not in _WIDTHS:
        raise Corrupt("bad column width %d" % w)
    allowed = _SCHEMES_FOR.get(field_type)
    if scheme > PACKED_REL or (allowed is not None and scheme not in allowed):
        raise Corrupt("column encoding %d does not fit field type %d" % (scheme, field_type))
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
            raise Corrupt("delta base runs past the end of the block")
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
            raise Corrupt("F64 column with width %d" % w)
        end = p + 8 * n
        if end > len(b):
            raise Corrupt("column data runs past the end of the block")
        a = array(_F64)
        a.frombytes(b[p:end])
        if _BIG_ENDIAN:
            a.byteswap()
        values, p = a, end
    else:  # SCHEME_BYTES
        lens, p = _fixed(b, p, n, w)
        offsets = list(accumulate(lens, initial=p))
        if offsets[-1] > len(b):
            raise Corrupt("bytes column runs past the end of the block")
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
    values; raises Corrupt. EVENTS blocks are checked with it when read, so
    their damage is known (and reported, the same way for every command)
    before any report decodes them."""
    scheme, w, p = _column_encoding(b, p, field_type)
    if scheme >= PACKED_PLAIN:
        ref = b[p] if scheme == PACKED_REL and p < len(b) else None
        _, _, p = _packed_header(b, p, scheme, index)
        if ref is not None and fields is not None and signed_type(fields[ref].type) is None:
            raise Corrupt("relative column refers to column %d, not an earlier integer one" % ref)
    if scheme == SCHEME_F64 and w != 8:
        raise Corrupt("F64 column with width %d" % w)
    if scheme == DELTA:
        p += 8
    end = p + n * w
    if scheme == SCHEME_BYTES and w:
        if end > len(b):
            raise Corrupt("column data runs past the end of the block")
        lens, _ = _fixed(b, p, n, w)
        end += sum(lens)
    if end > len(b):
        raise Corrupt("column data runs past the end of the block")
    return end


def signed_type(field_type):
    """True for kSInt, False for the other integer types, None otherwise."""
    if field_type == SINT:
        return True
    if field_type in (TIME, UINT, STRING, STACK):
        return False
    return None
