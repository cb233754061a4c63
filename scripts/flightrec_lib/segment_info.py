"""segment_info: one segment's entry of the `info` document (state, header,
size, event count, time range, damage, footer). The info command
(commands/cmd_info.py) lists it per segment; the fleet loader (fleet_load.py)
stores it in the ledger, from which `info --clickhouse` reads it back
(fleet_reports.info_document). Here, below both, so that no library module
imports the command (docs/ARCHITECTURE.md, "The reader's layers")."""


def segment_entry(seg):
    """One segment's entry of the info document (the fleet loader stores it too)."""
    first, last = seg.time_range()
    counts = seg.event_counts()
    return {
        "path": seg.path,
        "state": seg.state,
        "pid": seg.header["pid"],
        "service": seg.header["service"],
        "host": seg.header["host"],
        "sequence": seg.header["sequence"],
        "size": seg.size,
        "events": sum(counts.values()),
        "first_time_ns": first,
        "last_time_ns": last,
        "first_wall_ns": seg.wall_ns(first) if first is not None else None,
        "bad_blocks": seg.bad_blocks,
        "unknown_blocks": seg.unknown_blocks,
        "truncated_at": seg.truncated_at,
        "problems": [m for _, m in seg.problems],
        "footer": seg.footer,
    }
