#!/usr/bin/python3
"""Figures from a real trace (by default the flightrec-defaults redis trace
bench/run_macro.py keeps): bytes on disk per event after zstd, by event
type (each EVENTS block holds one type: its 20-byte header plus stored
payload, divided by its events) with the uncompressed size for
comparison, the intern tables' share, and how fast flightrec-dump decodes
it: the library decoding every column of every block, and the `events`
command end to end (JSON lines to /dev/null). Timings take the fastest
of REPEAT tries (on a shared machine neighbours only ever add time).
    run_trace_figures.py TRACE_DIR OUT_JSON
"""
import json
import os
import resource
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "scripts")
sys.path.insert(0, SCRIPTS)

from flightrec_lib.segment import BLOCK_HEADER, SYNC, read_segment  # noqa: E402

KINDS = {1: "SCHEMA", 2: "STRINGS", 3: "MAPPINGS", 4: "LOCATIONS", 5: "STACKS", 6: "EVENTS", 7: "FOOTER"}
REPEAT = 3


def segment_files(trace_dir):
    return sorted(os.path.join(trace_dir, f) for f in os.listdir(trace_dir) if f.endswith((".seg", ".active")))


def blocks(data, header_len):
    """(offset, kind, payload_len, raw_len) of every block, framing only (format/SPEC.md 4.1)."""
    p = header_len
    while p + BLOCK_HEADER <= len(data):
        sync, payload_len, kind, _flags, raw_len = struct.unpack_from("<IIHHI", data, p)
        if sync != SYNC:
            raise SystemExit("bad block header at offset %d: not a clean trace" % p)
        yield p, kind, payload_len, raw_len
        p += BLOCK_HEADER + payload_len


def sizes(files):
    by_type, by_kind = {}, {}
    total_bytes = total_events = headers = 0
    for path in files:
        seg = read_segment(path)
        batch_at = {b.offset: b for b in seg.batches}
        with open(path, "rb") as f:
            data = f.read()
        total_bytes += len(data)
        header_len = struct.unpack_from("<I", data, 12)[0]
        headers += header_len
        for offset, kind, payload_len, raw_len in blocks(data, header_len):
            stored = BLOCK_HEADER + payload_len
            if kind == 6 and offset in batch_at:
                b = batch_at[offset]
                t = by_type.setdefault(b.type.name, {"events": 0, "bytes": 0, "raw_bytes": 0, "blocks": 0})
                t["events"] += b.count
                t["bytes"] += stored
                t["raw_bytes"] += raw_len
                t["blocks"] += 1
                total_events += b.count
            else:
                k = by_kind.setdefault(KINDS.get(kind, str(kind)), {"bytes": 0, "blocks": 0})
                k["bytes"] += stored
                k["blocks"] += 1
    for t in by_type.values():
        t["bytes_per_event"] = t["bytes"] / t["events"]
        t["raw_bytes_per_event"] = t["raw_bytes"] / t["events"]
    return {"files": len(files), "total_bytes": total_bytes, "total_events": total_events,
            "segment_headers_bytes": headers, "by_type": by_type, "other_blocks": by_kind,
            "bytes_per_event_overall": total_bytes / max(total_events, 1)}


def library_decode(files):
    """Seconds to parse every segment and decode every column (fastest try)."""
    best = None
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        for path in files:
            seg = read_segment(path)
            for b in seg.batches:
                if b.columns() is None:
                    raise SystemExit("%s: block at %d did not decode" % (path, b.offset))
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best


def cli_events(trace_dir):
    """(wall s, CPU s) of `flightrec-dump events --json` writing to /dev/null (fastest try)."""
    best = None
    for _ in range(REPEAT):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        with open(os.devnull, "w") as devnull:
            subprocess.run(["/usr/bin/python3", os.path.join(SCRIPTS, "flightrec-dump"), "events", "--json",
                            trace_dir], stdout=devnull, check=True)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        best = (wall, cpu) if best is None or wall < best[0] else best
    return best


def main():
    trace_dir, out = sys.argv[1], sys.argv[2]
    files = segment_files(trace_dir)
    if not files:
        raise SystemExit("no segments in %s" % trace_dir)
    doc = sizes(files)
    n = doc["total_events"]
    lib_s = library_decode(files)
    cli_wall, cli_cpu = cli_events(trace_dir)
    doc["decode"] = {"events": n, "library_s": lib_s, "library_events_per_s": n / lib_s,
                     "cli_events_wall_s": cli_wall, "cli_events_cpu_s": cli_cpu,
                     "cli_events_per_s": n / cli_wall}
    print("trace %s: %d segments, %d events, %d bytes (%.2f bytes/event overall)" % (
        trace_dir, doc["files"], n, doc["total_bytes"], doc["bytes_per_event_overall"]))
    for name, t in sorted(doc["by_type"].items(), key=lambda kv: -kv[1]["events"]):
        print("  %-18s %9d events %10d bytes  %6.2f B/event stored  (%6.2f raw)" % (
            name, t["events"], t["bytes"], t["bytes_per_event"], t["raw_bytes_per_event"]))
    for kind, k in sorted(doc["other_blocks"].items()):
        print("  %-18s %9s        %10d bytes in %d blocks" % (kind, "", k["bytes"], k["blocks"]))
    print("decode: library %.0f events/s (%.3f s); `flightrec-dump events --json` %.0f events/s (%.2f s wall)" % (
        n / lib_s, lib_s, n / cli_wall, cli_wall))
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
