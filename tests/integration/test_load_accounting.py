"""Load: many threads allocating and using sockets as fast as they can, with
a tiny ring so the recorder must drop. Every operation the program did is
either in the trace or counted as dropped — never silently lost."""


def test_every_operation_is_recorded_or_counted(fr, trace_dir):
    threads, iterations = 32, 4000
    proc = fr.run([fr.program("load_mixed"), str(threads), str(iterations)], trace_dir,
                  env={"FLIGHTREC_RING_BYTES": 4096, "FLIGHTREC_ALLOC_SAMPLE_BYTES": 1,
                       "FLIGHTREC_SAMPLER": "off"}, timeout=300)
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
