"""crc32c: CRC-32C (Castagnoli) in pure Python, fast enough to check every block.

Parameters as in format/SPEC.md: reflected polynomial 0x82F63B78, initial
value and final XOR 0xFFFFFFFF; crc32c(b"123456789") == 0xE3069283.
`crc32c(data, crc)` continues a previous result, like zlib.crc32.

A byte-at-a-time table loop manages ~15 MB/s in CPython. Long inputs are
instead cut into K equal chunks that advance in lockstep, one byte of every
chunk per step: each step is a handful of whole-vector operations
(bytes.translate for the table lookups, big-int XOR), so the Python loop
runs only L = len/K times. The chunk CRCs are then combined with the
linearity of CRCs: register(A + B) = shift_|B|(register(A)) ^ register_0(B),
where shift_n advances a register over n zero bytes (a fixed linear map,
tabulated once per chunk length). Where Debian's python3-crcmod is installed
its C extension does the work instead (about 3x faster); results are the same.

CrcIndex answers "CRC of data[a:b]" for many ranges of one buffer in time
independent of b - a (the reader's resynchronisation, SPEC.md 4.2 rule 7,
checks every candidate block this way, so a file full of false sync words
costs linear, not quadratic, time).
"""
import sys
from array import array

try:  # Debian's python3-crcmod: a C CRC, same parameters and continuation rule
    import crcmod as _crcmod
    _fast = _crcmod.mkCrcFun(0x11EDC6F41, initCrc=0, rev=True, xorOut=0xFFFFFFFF)
    if _fast(b"123456789") != 0xE3069283:  # pragma: no cover - a crcmod that differs
        _fast = None
except Exception:  # noqa: BLE001 - not installed (or broken): the pure-Python path
    _fast = None

_POLY = 0x82F63B78


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (_POLY if c & 1 else 0)
        table.append(c)
    return table


_T = _make_table()
# The table split into its four bytes, as bytes.translate tables.
_T_PLANES = [bytes((t >> (8 * m)) & 0xFF for t in _T) for m in range(4)]

_U32 = next(tc for tc in "IL" if array(tc).itemsize == 4)
_LANE_MIN = 2048          # shorter inputs: plain table loop
_shift_cache = {}         # chunk length -> four 256-entry tables for shift_L


def _bytewise(reg, data):
    t = _T
    for b in data:
        reg = t[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg


def _shift_tables(length):
    """Tables A[m][v] = shift_length(v << 8m): advancing a register over
    `length` zero bytes, split by register byte (the map is linear)."""
    tables = _shift_cache.get(length)
    if tables is None:
        zeros = bytes(length)
        tables = _tables_from_basis([_bytewise(1 << bit, zeros) for bit in range(32)])
        _shift_cache[length] = tables
    return tables


def _chunk_registers(reg, data, length):
    """Registers after each `length`-byte chunk of data (len a multiple of
    `length`), chunk 0 started from reg, every other chunk from 0."""
    k = len(data) // length
    t0, t1, t2, t3 = _T_PLANES
    frm = int.from_bytes
    # Register byte planes of all k chunks; chunk 0 starts from reg, the rest from 0.
    s0, s1, s2, s3 = reg & 0xFF, (reg >> 8) & 0xFF, (reg >> 16) & 0xFF, reg >> 24
    for j in range(length):
        idx = (s0 ^ frm(data[j::length], "little")).to_bytes(k, "little")
        s0 = frm(idx.translate(t0), "little") ^ s1
        s1 = frm(idx.translate(t1), "little") ^ s2
        s2 = frm(idx.translate(t2), "little") ^ s3
        s3 = frm(idx.translate(t3), "little")
    packed = bytearray(4 * k)
    for m, plane in enumerate((s0, s1, s2, s3)):
        packed[m::4] = plane.to_bytes(k, "little")
    regs = array(_U32, bytes(packed))
    if sys.byteorder == "big":
        regs.byteswap()
    return regs


def _lanes(reg, data, length):
    """Register after `data` (len a multiple of `length`), starting from reg."""
    regs = _chunk_registers(reg, data, length)
    a0, a1, a2, a3 = _shift_tables(length)
    acc = 0
    for r in regs:
        acc = a0[acc & 0xFF] ^ a1[(acc >> 8) & 0xFF] ^ a2[(acc >> 16) & 0xFF] ^ a3[acc >> 24] ^ r
    return acc


def crc32c(data, crc=0):
    """CRC-32C of data (bytes-like), continuing from `crc` (0 to start)."""
    if _fast is not None:
        return _fast(data, crc)
    reg = crc ^ 0xFFFFFFFF
    n = len(data)
    if n >= _LANE_MIN:
        if not isinstance(data, bytes):
            data = bytes(data)
        # Chunk length ~ sqrt(n/8) balances the per-step and per-chunk loops.
        length = 64
        while length * length * 8 < n and length < 1024:
            length *= 2
        body = n - n % length
        reg = _lanes(reg, data[:body] if body != n else data, length)
        data = data[body:]
    return _bytewise(reg, data) ^ 0xFFFFFFFF


def crc32c_reference(data, crc=0):
    """The plain table loop; the definition the fast path is tested against."""
    return _bytewise(crc ^ 0xFFFFFFFF, data) ^ 0xFFFFFFFF


# ---------------------------------------------------------------- range CRCs

_M = 0xFFFFFFFF
_pow2_tables = []  # [j] -> four 256-entry tables advancing a register over 2**j zero bytes


def _tables_from_basis(basis):
    """Four 256-entry byte tables of the linear map with these 32 basis images."""
    tables = []
    for m in range(4):
        tab = [0] * 256
        for v in range(1, 256):
            low = v & -v
            tab[v] = tab[v ^ low] ^ basis[8 * m + low.bit_length() - 1]
        tables.append(tab)
    return tables


def _pow2_level(j):
    """Tables of the shift over 2**j zero bytes: each level squares the one
    before (shift_2n = shift_n o shift_n), so no level walks its zero bytes."""
    while len(_pow2_tables) <= j:
        if not _pow2_tables:
            _pow2_tables.append(_shift_tables(1))
            continue
        t0, t1, t2, t3 = _pow2_tables[-1]
        basis = []
        for bit in range(32):
            r = 1 << bit
            for _ in range(2):
                r = t0[r & 0xFF] ^ t1[(r >> 8) & 0xFF] ^ t2[(r >> 16) & 0xFF] ^ t3[r >> 24]
            basis.append(r)
        _pow2_tables.append(_tables_from_basis(basis))
    return _pow2_tables[j]


def shift_register(reg, nbytes):
    """The register after `nbytes` zero bytes, from reg (zero-based register,
    no final XOR): O(log nbytes) table steps, whatever nbytes is."""
    j = 0
    while nbytes:
        if nbytes & 1:
            t0, t1, t2, t3 = _pow2_level(j)
            reg = t0[reg & 0xFF] ^ t1[(reg >> 8) & 0xFF] ^ t2[(reg >> 16) & 0xFF] ^ t3[reg >> 24]
        nbytes >>= 1
        j += 1
    return reg


def register(data, reg=0):
    """Zero-based register after data, continuing from reg (no init/final XOR)."""
    return crc32c(data, reg ^ _M) ^ _M


class CrcIndex:
    """Prefix registers of one buffer every SPACING bytes, computed in one
    pass; then crc(a, b, crc) costs one short tail and one shift, so checking
    many overlapping ranges is linear in the buffer, not in their lengths.

    The CRC register is linear over GF(2): reg(r, X + Y) = shift_|Y|(reg(r, X))
    ^ reg(0, Y). With P(i) the register of data[:i] from 0, the register of
    data[a:b] from 0 is P(b) ^ shift_(b-a)(P(a))."""

    SPACING = 128

    def __init__(self, data):
        self.data = data
        s = self.SPACING
        body = len(data) - len(data) % s
        chunks = _chunk_registers(0, data[:body], s) if body else []
        a0, a1, a2, a3 = _shift_tables(s)
        prefix = array(_U32, [0])
        acc = 0
        for r in chunks:
            acc = a0[acc & 0xFF] ^ a1[(acc >> 8) & 0xFF] ^ a2[(acc >> 16) & 0xFF] ^ a3[acc >> 24] ^ r
            prefix.append(acc)
        self.prefix = prefix

    def _at(self, i):
        """P(i): register of data[:i] from 0."""
        base = i - i % self.SPACING
        reg = self.prefix[base // self.SPACING]
        return register(self.data[base:i], reg) if i != base else reg

    def crc(self, a, b, crc=0):
        """crc32c(data[a:b], crc), without reading the range."""
        reg = shift_register((crc ^ _M) ^ self._at(a), b - a) ^ self._at(b)
        return reg ^ _M
