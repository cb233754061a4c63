"""The packed column schemes (format/SPEC.md 5.4, schemes 5-7: low zero bits
shifted out, byte planes) as the Python decoder reads them: the exact bytes
the C++ encoder writes for a known column (tests/unit/format_packed_test.cc
checks the same bytes), round trips against an encoder written from the SPEC
text alone, damaged columns, and a segment written by the C++ SegmentWriter
with a packed event type."""
import os
import random
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("FLIGHTREC_BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from flightrec_lib import column_decoder  # noqa: E402
from flightrec_lib.segment import SINT, TIME, UINT, column_end, decode_column, read_segment  # noqa: E402

U64 = 1 << 64


def zigzag(v):
    v %= U64
    signed = v - U64 if v >= 1 << 63 else v
    return ((signed << 1) ^ (signed >> 63)) % U64


def spec_encode(scheme, values, shift, width):
    """A packed column per SPEC.md 5.4, straight from its text (not tuned)."""
    if scheme == 7:
        base = values[0]
        ints, prev = [], base
        for v in values:
            d = (v - prev) % U64
            ints.append(d)
            prev = v
    else:
        base, ints = None, [v % U64 for v in values]
    stored = []
    for x in ints:
        if scheme == 5:
            stored.append(x >> shift)
        else:
            signed = x - U64 if x >= 1 << 63 else x
            stored.append(zigzag(signed >> shift))
    out = bytearray([scheme << 4 | width, shift])
    if base is not None:
        out += base.to_bytes(8, "little")
    for k in range(width):
        out += bytes((s >> (8 * k)) & 0xFF for s in stored)
    return bytes(out)


def test_exact_bytes_of_a_delta_column_on_a_64ns_grid():
    # The vector of tests/unit/format_packed_test.cc: times 64 ns apart, a step back.
    t = [1_000_000_000, 1_000_000_064, 1_000_000_192, 1_000_000_128, 1_000_006_528]
    enc = bytes([7 << 4 | 1, 6]) + t[0].to_bytes(8, "little") + bytes([0, 2, 4, 1, 200])
    assert spec_encode(7, t, 6, 1) == enc
    values, end = decode_column(enc, 0, 5, TIME)
    assert list(values) == t and end == len(enc)
    assert column_end(enc, 0, 5, TIME) == len(enc)
    plain = bytes([5 << 4 | 2, 0, 0x35, 0x56, 0x78, 0x12, 0x00, 0xAB])
    assert list(decode_column(plain, 0, 3, UINT)[0]) == [0x1235, 0x0056, 0xAB78]


@pytest.mark.parametrize("scheme", [5, 6, 7])
def test_round_trips_against_the_spec_encoder(scheme):
    rng = random.Random(scheme)
    field = {5: UINT, 6: SINT, 7: TIME}[scheme]
    for bits in (3, 9, 17, 33, 63):
        for shift in (0, 1, 6, 8, 13, 40):
            if bits + shift > 64:
                continue
            n = rng.choice((1, 2, 255, 1000))
            if scheme == 5:
                vals = [rng.getrandbits(bits) << shift for _ in range(n)]
            elif scheme == 6:
                vals = [rng.choice((1, -1)) * (rng.getrandbits(bits - 1) << shift) for _ in range(n)]
            else:
                t = rng.getrandbits(64)
                vals = []
                for _ in range(n):  # deltas of either sign, wrapping mod 2^64
                    t = (t + rng.choice((1, -1)) * (rng.getrandbits(bits - 1) << shift)) % U64
                    vals.append(t)
            pre = vals if scheme != 7 else [(b - a) % U64 for a, b in zip([vals[0]] + vals, vals)]
            if scheme == 5:
                top = max(v >> shift for v in pre)
            else:
                top = max(zigzag((v - U64 if v >= 1 << 63 else v) >> shift) for v in pre)
            width = next(w for w in (0, 1, 2, 4, 8) if top < 1 << (8 * w))
            enc = spec_encode(scheme, vals, shift, width) + b"tail"
            got, end = decode_column(enc, 0, n, field)
            assert end == len(enc) - 4 == column_end(enc, 0, n, field)
            assert list(got) == vals, (bits, shift, width)


def test_damaged_packed_columns_are_reported_not_misread():
    t = [5_000_000_000, 5_000_001_024, 5_000_002_048, 5_000_900_000]
    enc = spec_encode(7, t, 5, 4)
    assert list(decode_column(enc, 0, 4, TIME)[0]) == t
    for cut in range(len(enc)):
        with pytest.raises(column_decoder.Corrupt):
            decode_column(enc[:cut], 0, 4, TIME)
        with pytest.raises(column_decoder.Corrupt):
            column_end(enc[:cut], 0, 4, TIME)
    bad = bytearray(enc)
    bad[1] = 64  # shift beyond 63
    with pytest.raises(column_decoder.Corrupt, match="shift"):
        decode_column(bytes(bad), 0, 4, TIME)
    with pytest.raises(column_decoder.Corrupt):
        decode_column(bytes([9 << 4 | 1, 0, 0]), 0, 1, UINT)  # scheme 9 is not defined


def test_a_segment_written_by_the_cpp_writer_with_a_packed_type(tmp_path, monkeypatch):
    unit = os.path.join(BUILD, "unit_tests")
    assert os.path.exists(unit), "%s is not built (run make)" % unit
    env = dict(os.environ, FLIGHTREC_PACKED_SAMPLE_OUT=str(tmp_path))
    proc = subprocess.run([unit, "-tc=format packed: a packed event type*"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    packed_calls = []
    real = column_decoder._decode_packed
    monkeypatch.setattr(column_decoder, "_decode_packed", lambda b, p, n, w, scheme, earlier=None:
                        packed_calls.append(scheme) or real(b, p, n, w, scheme, earlier))
    seg = read_segment(str(tmp_path / "packed.seg"))
    assert not seg.problems
    rows = [e for e in seg.events(["x.op"])]
    assert len(rows) == 3000
    for i, e in enumerate(rows):
        assert e["time"] == 1_000_000_000 + i * 1984 + (i % 7) * 64
        assert e["n"] == (i * 37 % 5000) << 4
        assert e["s"] == (-i * 8 if i % 3 == 0 else i * 8)
        assert e["name"] == ("a" if i % 2 else "b")
        assert e["m"] == e["n"] + 3 + (i % 5 == 0)
    # time, n and s took the packed forms (the one-byte string ids stay plain),
    # m the relative one.
    assert sorted(set(packed_calls)) == [5, 6, 7, 8]


def test_relative_column_exact_bytes_and_damage():
    # Column 1 (fd-like) and column 2 following it (conn-like), as in socket.op.
    fd = [7, 9, 7, 12]
    conn = [100, 102, 100, 105]
    fd_col = bytes([5 << 4 | 1, 0]) + bytes(fd)   # PACKED_PLAIN, shift 0, one plane
    rel = bytes([8 << 4 | 1, 1, 0]) + bytes(zigzag(c - f) for c, f in zip(conn, fd))
    assert rel[3:] == bytes([186, 186, 186, 186])  # zigzag(93): one value, repeated
    fds, p = decode_column(fd_col, 0, 4, UINT)
    got, end = decode_column(rel, 0, 4, UINT, [None, fds])
    assert list(got) == conn and end == len(rel) == column_end(rel, 0, 4, UINT, 2)
    # A signed field following an unsigned one, differences of both signs, a shift.
    s = [-8, 40, 1 << 62, -(1 << 40)]
    rel_s = bytes([8 << 4 | 8, 0, 3]) + b"".join(
        bytes((zigzag(((v - f) % U64) - (U64 if ((v - f) % U64) >= 1 << 63 else 0) >> 3) >> (8 * k)) & 0xFF
              for v, f in zip(s, [8, 8, 8, 8])) for k in range(8))
    assert list(decode_column(rel_s, 0, 4, SINT, [[8, 8, 8, 8]])[0]) == s
    # The reference must be an earlier column.
    with pytest.raises(column_decoder.Corrupt, match="earlier"):
        decode_column(rel, 0, 4, UINT, [None])           # column 1 does not exist yet
    with pytest.raises(column_decoder.Corrupt, match="earlier"):
        decode_column(rel, 0, 4, UINT, [None, None])     # column 1 is not an integer one
    with pytest.raises(column_decoder.Corrupt, match="earlier"):
        column_end(rel, 0, 4, UINT, 1)                   # it is this very column
    for cut in range(len(rel)):
        with pytest.raises(column_decoder.Corrupt):
            decode_column(rel[:cut], 0, 4, UINT, [None, fds])
