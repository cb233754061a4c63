"""block_scanner: the framing of a segment (format/SPEC.md 4): block
headers, sync words, CRCs, zstd payloads within a decompression budget, and
resynchronisation after damage (a bad block is skipped, the scan goes on at
the next good one). The Python twin of format/block_scanner.*; what a
block's payload means is segment.py's.
"""
import struct

import zstandard

from .column_decoder import Corrupt
from .crc32c import CrcIndex, crc32c

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
# Decompression budget of one segment: INFLATE_BASE + INFLATE_RATIO x file
# size. Recorded segments inflate about 2-30x in all; a small file whose
# frames declare gigabytes (each legal on its own, 64 MiB of zeros is a 2 KiB
# frame) would otherwise cost that much time and memory on every read.
INFLATE_BASE = 64 << 20
INFLATE_RATIO = 256

KIND_SCHEMA, KIND_STRINGS, KIND_MAPPINGS, KIND_LOCATIONS, KIND_STACKS, KIND_EVENTS, KIND_FOOTER = range(1, 8)
KIND_NAMES = {1: "SCHEMA", 2: "STRINGS", 3: "MAPPINGS", 4: "LOCATIONS", 5: "STACKS", 6: "EVENTS",
              7: "FOOTER"}


class BlockScanner:
    """The block loop of SPEC.md 4.2 over one segment's bytes: each good
    block's payload (inflated) goes to on_block(scanner, offset, kind, flags,
    raw_len, start, length, stored, payload), which parses it or raises
    Corrupt; damage goes to seg.bad_blocks / seg._problem."""

    def __init__(self, seg, data, fd=None, on_block=None):
        self.seg = seg
        self.on_block = on_block
        self.data = data
        self.fd = fd
        self.size = len(data)
        self.dctx = None
        self.inflate_left = INFLATE_BASE + INFLATE_RATIO * len(data)
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
            self.on_block(self, offset, kind, flags, raw_len, start, length, stored, payload)
        except Corrupt as e:
            seg.bad_blocks += 1
            seg._problem(offset, "bad %s block at offset %d: %s" % (KIND_NAMES[kind], offset, e))

    def _decompress(self, payload, raw_len):
        # Check the frame's declared size before letting zstd allocate for it.
        try:
            declared = zstandard.frame_content_size(payload)
        except zstandard.ZstdError:
            raise Corrupt("not a zstd frame") from None
        if declared != raw_len:
            raise Corrupt("zstd frame size %d does not match raw_len %d" % (declared, raw_len))
        if raw_len > self.inflate_left:
            raise Corrupt("would inflate past the segment's budget (%d MiB for a %d-byte file)"
                           % ((INFLATE_BASE + INFLATE_RATIO * self.size) >> 20, self.size))
        self.inflate_left -= raw_len
        if self.dctx is None:
            self.dctx = zstandard.ZstdDecompressor()
        return inflate(self.dctx, payload, raw_len)


def inflate(dctx, payload, raw_len):
    try:
        raw = dctx.decompress(payload, max_output_size=raw_len)
    except zstandard.ZstdError as e:
        raise Corrupt("zstd: %s" % e) from None
    if len(raw) != raw_len:
        raise Corrupt("zstd frame decompressed to %d bytes, expected %d" % (len(raw), raw_len))
    return raw
