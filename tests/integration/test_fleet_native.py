"""The loader's Native-format encoding (scripts/flightrec_lib/fleet_native.py,
issue 42) writes every column type the fleet schema inserts byte for byte as
the ClickHouse driver's own writers do, whatever mix of runs the buffer holds:
lists, one value repeated (a segment's constant), values appended one by one,
empty arrays and repeated array values, text beyond ASCII, large repeats
(written in pieces). Both write into the driver's buffered socket writer over
a socket pair; no server is needed. (The whole path, server included, is
test_fleet_clickhouse.py's: every report from ClickHouse equals the files'.)"""
import importlib.util
import os
import socket
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

pytestmark = pytest.mark.skipif(importlib.util.find_spec("clickhouse_driver") is None,
                                reason="needs python3-clickhouse-driver (make deps)")


def _encode(write):
    """The bytes write(buf) puts into a driver BufferedSocketWriter."""
    from clickhouse_driver.bufferedwriter import BufferedSocketWriter
    a, b = socket.socketpair()
    try:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        out = bytearray()
        b.setblocking(False)
        buf = BufferedSocketWriter(a, 1 << 16)

        def drain():
            while True:
                try:
                    chunk = b.recv(1 << 20)
                except BlockingIOError:
                    return
                out.extend(chunk)

        write(buf)
        buf.flush()
        drain()
        return bytes(out)
    finally:
        a.close()
        b.close()


def _driver(ctype, values):
    from clickhouse_driver.columns.service import write_column
    from clickhouse_driver.context import Context
    ctx = Context()
    ctx.client_settings = {"strings_as_bytes": False, "strings_encoding": "utf-8", "use_numpy": False,
                           "input_format_null_as_default": False}
    ctx.settings = {}
    return _encode(lambda buf: write_column(ctx, "c", ctype, list(values), buf))


def _ours(ctype, col):
    from flightrec_lib import fleet_native

    def fallback(items):
        raise AssertionError("fell back to the driver for %s" % ctype)
    return _encode(lambda buf: fleet_native.write_column(buf, ctype, col, fallback))


def _column(parts):
    """A Column from ("list", values) / ("repeat", v, n) / ("append", v) /
    ("sparse", default, n, [(index, value)]) parts."""
    from flightrec_lib import fleet_native
    col = fleet_native.Column()
    for p in parts:
        if p[0] == "list":
            col.extend(list(p[1]))
        elif p[0] == "repeat":
            col.repeat(p[1], p[2])
        elif p[0] == "sparse":
            col.extend_sparse(fleet_native.Sparse(p[1], p[2], p[3]))
        else:
            col.append(p[1])
    return col


CASES = [
    ("UInt8", [("list", [0, 1, 255]), ("repeat", 7, 5), ("append", 3), ("append", 4), ("list", [9])]),
    ("UInt16", [("repeat", 65535, 3), ("list", [1, 2])]),
    ("UInt32", [("list", [0, 2 ** 32 - 1]), ("append", 5), ("repeat", 12345, 4)]),
    ("UInt64", [("list", [2 ** 64 - 1, 0, 17]), ("repeat", 2 ** 63 + 5, 100000), ("append", 1)]),
    ("Int64", [("list", [-(2 ** 63), -1, 2 ** 63 - 1]), ("repeat", -42, 3), ("append", 0)]),
    ("Float64", [("list", [0.5, -1e300, 3]), ("repeat", 0.0, 4), ("append", 2.25)]),
    ("String", [("list", ["", "a", "é€😀", "x" * 300]), ("repeat", "host-1", 200000), ("append", "t"),
                ("repeat", "", 3), ("list", ["b"])]),
    ("Array(String)", [("list", [[], ["a", "bc"], ["é"]]), ("repeat", ("fd", "bytes", "op"), 5000),
                       ("repeat", (), 4), ("append", ["z"]), ("append", []), ("list", [["q"] * 3])]),
    ("Array(UInt64)", [("list", [[1, 2], [], [2 ** 64 - 1]]), ("repeat", (5, 6), 3), ("append", [7])]),
    ("Array(Int64)", [("list", [[-1], [0, 1]]), ("repeat", (), 2), ("repeat", (-5,), 3)]),
    # the request columns of samples: mostly the default, a value at a few rows
    ("UInt64", [("sparse", 0, 10, [(0, 5), (3, 7), (4, 8), (9, 2 ** 64 - 1)]), ("list", [1]), ("sparse", 0, 4, []),
                ("append", 2), ("sparse", 0, 3, [(2, 9)])]),
    ("String", [("sparse", "", 100, [(2, "GET /a"), (3, "é€")]), ("append", "x"), ("sparse", "", 3, [(0, "z")]),
                ("sparse", "", 2, [(0, "p"), (1, "q")]), ("repeat", "h", 2)]),
    # generic events' values: each row a tuple
    ("Array(String)", [("list", [("1", "22"), (), ("é",)]), ("repeat", ("fd",), 3), ("list", [("a", "b", "c")])]),
]


@pytest.mark.parametrize("ctype,parts", CASES, ids=[c[0] for c in CASES])
def test_runs_encode_as_the_driver(ctype, parts):
    col = _column(parts)
    flat = col.values()
    assert col.n == len(flat)
    ours = _ours(ctype, col)
    assert ours == _driver(ctype, flat)
    assert len(ours) > 0


def test_other_types_go_to_the_driver():
    from flightrec_lib import fleet_native
    col = _column([("list", [1, None]), ("repeat", None, 2)])
    seen = []
    fleet_native.write_column(None, "Nullable(Int64)", col, seen.append)
    assert seen == [[1, None, None, None]]
    assert not fleet_native.fast_type("Nullable(Int64)") and fleet_native.fast_type("Array(String)")
