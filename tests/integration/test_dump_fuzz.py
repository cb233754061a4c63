"""flightrec-dump on corrupt segments: the corruption fuzzer
(tests/fuzz/dump_corruption.py) driven from pytest.

Seeds are recorded here, by real programs under the preload (sockets,
samples, allocations, threads, a crash, ring drops). Every crasher the
fuzzer found is kept below as a mutation description applied to a fresh
seed (no binary in the tree), and a fixed-seed fuzz run of bounded length
runs every subcommand on every mutant. `make fuzz FUZZ_SECONDS=N` runs the
same fuzzer for N seconds with a random seed."""
import os
import shutil
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("FLIGHTREC_BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "tests", "fuzz"))
import dump_corruption as dc  # noqa: E402

FIXED_SEED = 20261130
FIXED_ITERATIONS = 24


@pytest.fixture(scope="module")
def seeds():
    return dc.make_seeds(BUILD)


@pytest.fixture(scope="module")
def runner():
    r = dc.Runner()
    yield r
    r.close()


def _ev(kind, nth=0):
    return {"kind": kind, "nth": nth}


# What the fuzzer found, one case per distinct failure: (id, seed, mutations,
# profile kind[, commands]).
# Each failed before the fix it names (checked against the code before it).
# Commands for the cases that are slow by nature (each run inflates 64 MiB).
SOME = [["info", "--json"], ["events", "--json"], ["top", "--kind", "cpu"], ["chrome", "-o", "@OUT@.json"]]

CRASHERS = [
    # A footer key lost to damage: Segment.time_range returned (None, t), info
    # died in wall_ns (TypeError) and events/chrome skipped the whole segment.
    ("footer-first-time-lost", "crash",
     [{"op": "footer", "block": _ev("FOOTER"), "key": "first_time_ns", "what": "rename", "to": "f\x85rst_time_ns"}],
     "alloc"),
    ("footer-last-time-lost", "sockets",
     [{"op": "footer", "block": _ev("FOOTER"), "key": "last_time_ns", "what": "drop"}], "live"),
    # A damaged block plus an EVENTS block whose column encoding (CRC intact)
    # fails only when decoded: two stderr lines for one file. Columns are now
    # checked when the block is read.
    ("bad-column-width-second-line", "sockets",
     [{"op": "flip", "block": _ev("STRINGS"), "at": 0.5, "bit": 3},
      {"op": "site", "block": _ev("EVENTS", 6), "site": 2, "value": 0x07}], "cpu"),
    ("f64-encoding-on-uint-second-line", "sockets",
     [{"op": "flip", "block": _ev("LOCATIONS"), "at": 0.5, "bit": 1},
      {"op": "site", "block": _ev("EVENTS", 3), "site": 4, "value": 0x38}], "offcpu"),
    # A damaged block plus a type renamed alloc.sample: "lack fields" was a second line.
    ("renamed-type-second-line", "sockets",
     [{"op": "schema", "block": _ev("SCHEMA"), "type": "socket.op", "what": "rename_type", "value": "alloc.sample"},
      {"op": "flip", "block": _ev("STACKS"), "at": 0.1, "bit": 7}], "live"),
    # The trigger event's after_ns given the STACK type (CRC intact): incidents
    # added a frame list to a time (TypeError in info). Its layout is now checked.
    ("trigger-after-ns-a-stack", "crash",
     [{"op": "schema", "block": _ev("SCHEMA"), "type": "trigger", "field": "after_ns", "what": "code", "value": 5}],
     "cpu"),
    # A string field renamed "pid": chrome sorted str and int pids (TypeError).
    ("string-field-named-pid", "sockets",
     [{"op": "schema", "block": _ev("SCHEMA"), "type": "socket.open", "field": "role", "what": "rename_field",
       "value": "pid"}], "alloc"),
    # thread.name's tid declared a stack: a frame list in a dict key (TypeError).
    ("thread-tid-as-stack", "crash",
     [{"op": "schema", "block": _ev("SCHEMA"), "type": "thread.name", "field": "tid", "what": "code", "value": 5}],
     "cpu"),
    # The crash's stack declared a uint: info iterated an int (TypeError).
    ("crash-stack-as-uint", "crash",
     [{"op": "schema", "block": _ev("SCHEMA"), "type": "crash", "field": "stack", "what": "code", "value": 2}],
     "cpu"),
    # Field 0 renamed: events and chrome read e["time"] (KeyError).
    ("time-field-renamed", "crash",
     [{"op": "schema", "block": _ev("SCHEMA"), "type": "crash", "field": "time", "what": "rename_field",
       "value": "pid"}], "live"),
    # Two fields of one name: which one a report reads was a guess.
    ("duplicate-field-name", "sockets",
     [{"op": "schema", "block": _ev("SCHEMA"), "type": "cpu.sample", "field": "period_ns", "what": "rename_field",
       "value": "stack"}], "cpu"),
    # A stack field renamed "type": rows() showed it as "field.type",
    # chrome looked for it under the schema's name and labelled the event's
    # type string as frames (AttributeError).
    ("stack-field-named-type", "sockets",
     [{"op": "schema", "block": _ev("SCHEMA"), "type": "cpu.sample", "field": "stack", "what": "rename_field",
       "value": "type"}], "cpu", [["chrome", "-o", "@OUT@.json"], ["events", "--json"]]),
    # Eight EVENTS blocks, each a small zstd frame declaring 64 MiB (legal):
    # every batch held its 64 MiB payload until decoded (memory).
    ("zstd-64mib-payloads-held", "sockets",
     [{"op": "zstd", "block": _ev("EVENTS", 4), "mode": "bomb", "rs": 1}]
     + [{"op": "duplicate", "block": _ev("EVENTS", 4), "to": 9} for _ in range(11)], "cpu", SOME),
    # Issue 29: hand-made hostile blocks inserted into a real recording. Before
    # the bounds, each cost gigabytes (MemoryError under the worker's limit, or
    # peak RSS far over the budget); the sync wall cost quadratic time.
    ("hostile-events-bomb", "sockets", [{"op": "hostile", "boundary": 5, "what": "events_bomb"}], "cpu"),
    ("hostile-deep-stack", "sockets", [{"op": "hostile", "boundary": 5, "what": "deep_stack"}], "cpu"),
    ("hostile-empty-strings", "crash", [{"op": "hostile", "boundary": 3, "what": "empty_strings"}], "alloc"),
    ("hostile-sync-wall", "drops", [{"op": "hostile", "boundary": 2, "what": "sync_wall"}], "live", SOME),
]


@pytest.mark.slow
def test_seeds_hold_every_block_kind_and_event_type(seeds):
    """The fuzzer mutates what the seeds hold: all seven block kinds, compressed
    and plain blocks, and every event type the reports read. (Tables spread
    over several blocks come from the fuzzer's "split" mutation.)"""
    kinds, flags, types = set(), set(), set()
    for data in seeds.values():
        _, blocks = dc.walk(data)
        kinds |= {b.kind for b in blocks}
        flags |= {b.flags for b in blocks}
        _, names, _, _ = dc.events_by_block(data)
        types |= set(names.values())
    assert kinds == set(range(1, 8))
    assert flags == {0, 1}
    assert {"cpu.sample", "offcpu.sample", "alloc.sample", "alloc.free", "thread.start", "thread.name",
            "thread.end", "socket.op", "socket.open", "socket.close", "crash", "recorder.dropped",
            "process.start", "process.rusage"} <= types


@pytest.mark.slow
@pytest.mark.parametrize("case", CRASHERS, ids=[c[0] for c in CRASHERS])
def test_crasher_stays_fixed(seeds, runner, case):
    _, seed_name, mutations, kind = case[:4]
    argvs = case[4] if len(case) > 4 else None
    fails, mutant, results = dc.run_mutant(runner, seeds, seed_name, mutations, kind, argvs=argvs)
    assert mutant != seeds[seed_name], "the mutation no longer applies to a fresh recording"
    assert not fails, "\n\n".join(detail for _, detail in fails)
    assert all(r is not None for r in results)


@pytest.mark.slow
def test_fixed_seed_fuzz_run(seeds, runner):
    """Every subcommand on FIXED_ITERATIONS mutants: no traceback, hang,
    memory blow-up, second stderr line, bad JSON or lost intact event."""
    stats = dc.fuzz(seeds, FIXED_SEED, iterations=FIXED_ITERATIONS, runner=runner, log=lambda s: None)
    assert stats["mutants"] == FIXED_ITERATIONS
    assert stats["unchanged"] < FIXED_ITERATIONS // 4
    report = ["%s (x%d): %s\n%s" % (sig, n, first["case"], first["detail"])
              for sig, (n, first) in stats["failures"].items()]
    assert not stats["failures"], "\n\n".join(report)


# ---------------------------------------------------------------- the judge itself

BOOM = '''
import os, sys, time
from .. import cli

def register(sub):
    p = sub.add_parser("boom")
    p.add_argument("how")
    cli.add_paths_argument(p)
    p.set_defaults(func=run)

def run(args):
    path = args.paths[0]
    if args.how == "raise":
        return {}["missing"]
    if args.how == "hang":  # a loop that never ends burns CPU
        while True:
            pass
    if args.how == "eat":
        return len(bytearray(3 << 30))
    if args.how == "bloat":  # within the address-space limit, over the RSS budget
        return 0 if len(b"x" * (600 << 20)) else 1
    if args.how == "slow":  # 1.5 s of CPU
        t0 = time.process_time()
        while time.process_time() - t0 < 1.5:
            pass
    if args.how == "twolines":
        cli.err("%s: first" % path)
        cli.err("%s: second" % path)
        return 1
    if args.how == "usage":
        raise cli.UsageError("no")
    if args.how == "badjson":
        print('{"a": NaN}')
    return 0
'''


@pytest.fixture(scope="module")
def sabotaged_lib(tmp_path_factory):
    """A copy of flightrec_lib with a `boom` subcommand that fails on purpose,
    and a decoder that silently loses every other EVENTS block."""
    root = tmp_path_factory.mktemp("sabotaged")
    lib = root / "flightrec_lib"
    shutil.copytree(os.path.join(ROOT, "scripts", "flightrec_lib"), lib,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (lib / "commands" / "cmd_boom.py").write_text(BOOM)
    seg = (lib / "segment.py").read_text()
    marker = "def _parse_events(seg, b, offset, stored=None, where=None):\n"
    assert marker in seg
    seg = seg.replace(marker, marker + "    seg._lose = not getattr(seg, '_lose', False)\n"
                                       "    if seg._lose:\n        return\n")
    (lib / "segment.py").write_text(seg)
    return str(root)


@pytest.mark.slow
def test_the_judge_sees_every_kind_of_failure(seeds, sabotaged_lib):
    """The fuzzer can fail: a traceback, a hang, a memory blow-up, two lines
    for one file, a usage error on a bad file, bad JSON and lost events are
    each reported (by a deliberately broken copy of the tool)."""
    r = dc.Runner(mem_bytes=1 << 30, soft_timeout=3, hard_timeout=15, lib_dir=sabotaged_lib)
    try:
        files = [("m.seg", seeds["crash"])]
        hows = ["raise", "hang", "eat", "twolines", "usage", "badjson"]
        results = r.run(files, [["boom", h] + (["--json"] if h == "badjson" else []) for h in hows][:5]
                        + [["schema", "--json"]])
        fails = dc.judge(results[:5], "m.seg", {})
        sigs = [s for s, _ in fails]
        assert any(s.startswith("traceback KeyError at cmd_boom.py") for s in sigs), sigs
        assert any(s.startswith("hang ") for s in sigs), sigs
        assert any(s.startswith("memory MemoryError") for s in sigs), sigs
        assert "boom: 2 stderr lines name the file" in sigs, sigs
        assert "boom: exit status 2" in sigs, sigs
        assert dc.judge(results[5:], "m.seg", {}) == []
        # Peak RSS and time are watched too (make fuzz passes --max-seconds).
        # (The slow command burns 1.5 s of CPU, so it is over a 1 s budget
        # however fast the machine; the bloat one is judged on memory alone.)
        # On a busy machine touching 400 MiB takes seconds of CPU (page faults
        # are dear in a VM): a runner whose hang limit is far beyond that
        # judges these, so the memory is all it can report.
        patient = dc.Runner(mem_bytes=1 << 30, soft_timeout=60, hard_timeout=120, lib_dir=sabotaged_lib)
        try:
            results = patient.run(files, [["boom", "bloat"], ["boom", "slow"]])
        finally:
            patient.close()
        assert [s for s, _ in dc.judge(results[:1], "m.seg", {})] == ["boom: peak RSS over 400 MiB"]
        assert [s for s, _ in dc.judge(results[1:], "m.seg", {}, max_seconds=1.0)] == ["boom: slower than 1 s"]
        # Lost events: every second EVENTS block vanishes in the sabotaged decoder.
        fails, _, _ = dc.run_mutant(r, seeds, "sockets", [], "cpu")
        assert [s for s, _ in fails] == ["intact events missing"], fails
    finally:
        r.close()
    # And a JSON document with NaN is not JSON.
    assert dc._check_output(["top", "--json"], '{"a": NaN}', None)[0].startswith("bad output")
