"""Load: many threads allocating and using sockets as fast as they can, with
a tiny ring so the recorder must drop. Every operation the program did is
either in the trace or counted as dropped — never silently lost. Socket
calls are recorded one by one here (FLIGHTREC_SOCKETS=calls): one record per
call is what fills the rings. (The exchange records' own drop path, summed
into socket.gap like a call's, is not exercised by this test.)"""
import re
import time
import pytest


def test_every_operation_is_recorded_or_counted(fr, trace_dir):
    threads, iterations = 32, 4000
    began = time.monotonic_ns()
    proc = fr.run([fr.program("load_mixed"), str(threads), str(iterations)], trace_dir,
                  env={"FLIGHTREC_RING_BYTES": 4096, "FLIGHTREC_ALLOC_SAMPLE_BYTES": 1,
                       "FLIGHTREC_SAMPLER": "off", "FLIGHTREC_SOCKETS": "calls"}, timeout=300)
    ended_at = time.monotonic_ns()
    produced = threads * iterations
    assert f"mallocs {produced}" in proc.stdout
    doc = fr.dump_json("info", "--json", trace_dir)
    events, dropped = doc["events"], doc["dropped"]
    assert all(s["state"] == "sealed" for s in doc["segments"])
    # With a 4 KiB ring at full speed the recorder must have dropped something.
    assert dropped.get("alloc.sample", 0) + dropped.get("socket.op", 0) > 0, dropped
    # Allocations: each malloc(777) is one sample at rate 1; the C library and
    # thread start-up allocate a little too (a few per thread), never less.
    allocs = events.get("alloc.sample", 0) + dropped.get("alloc.sample", 0)
    assert produced <= allocs <= produced + 20 * threads + 200, (allocs, produced, dropped)
    # Sockets: each round is one send and one recv on the pair, plus the
    # socketpair and two closes per thread.
    ops = events.get("socket.op", 0) + dropped.get("socket.op", 0)
    assert 2 * produced <= ops <= 2 * produced + 10 * threads, (ops, produced, dropped)
    # A thread whose own end record did not fit still has its end in the trace.
    ended = [t for t in doc["threads"] if t["end"] is not None]
    assert len(ended) >= threads, (len(ended), dropped.get("thread.end"))
    # Dropped send/recv records still count toward their connection's bytes
    # (socket.gap): the socket report's totals are exact, 64 bytes each way
    # per round, though most of the socket.op records were dropped.
    assert dropped.get("socket.op", 0) > iterations, dropped
    assert not dropped.get("socket.gap"), dropped
    totals = fr.dump_json("sockets", "--json", trace_dir)["totals"]
    assert totals["bytes_out"] == 64 * produced and totals["bytes_in"] == 64 * produced, totals
    assert events.get("socket.gap", 0) > 0
    # A gap's time is its last dropped call's end, read from the TSC or from
    # clock_gettime (before the TSC's calibration): either way CLOCK_MONOTONIC
    # ns inside the run.
    gap_times = [e["time"] for e in fr.events(trace_dir, "socket.gap")]
    assert gap_times and all(began <= t <= ended_at for t in gap_times), (began, ended_at, gap_times[:5])


@pytest.mark.slow
def test_a_thread_that_fills_its_ring_fast_gets_a_bigger_one(fr, trace_dir):
    """One thread making send+recv pairs as fast as it can writes far more
    than twice its 256 KiB ring a second: the flush thread offers it a ring
    four times as big (preload/threads/ring_growth.h), and the producer moves to it
    at a wrap (or takes a spare of that size when it finds its ring full). Nothing recorded is lost or misplaced on the way: the socket
    totals stay exact and every operation is an event or a counted drop."""
    # 3 s at least, whatever the machine's speed: growth is judged over
    # one-second windows of the flush thread's drains.
    proc = fr.run([fr.program("load_mixed"), "1", "100000", "3"], trace_dir,
                  env={"FLIGHTREC_LOG": "debug", "FLIGHTREC_SAMPLER": "off", "FLIGHTREC_SOCKETS": "calls"},
                  timeout=300)
    iterations = int(re.search(r"mallocs (\d+)", proc.stdout).group(1))
    # Grown by the window, by one drain of half a ring, or by taking a spare when full.
    grown = re.findall(r"thread (\d+) (?:wrote \d+ KiB of records in (?:a second|one drain)|found its ring full): "
                       r"its ring grows to (\d+) KiB", proc.stderr)
    assert grown and all(kib == "1024" for _, kib in grown), proc.stderr[-2000:]
    doc = fr.dump_json("info", "--json", trace_dir)
    events, dropped = doc["events"], doc["dropped"]
    assert all(s["state"] == "sealed" for s in doc["segments"])
    ops = events.get("socket.op", 0) + dropped.get("socket.op", 0)
    assert 2 * iterations <= ops <= 2 * iterations + 10, (ops, dropped)
    totals = fr.dump_json("sockets", "--json", trace_dir)["totals"]
    assert totals["bytes_out"] == 64 * iterations and totals["bytes_in"] == 64 * iterations, totals
    print(f"grown: {grown}; socket.op events {events.get('socket.op')}, dropped {dropped.get('socket.op', 0)}")
