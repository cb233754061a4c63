"""heap: the allocation profile by allocation site.

A site is the innermost frame of a sampled allocation's stack that is
neither part of an allocator (malloc & co., operator new, std::allocator
internals, Rust's alloc crate, the recorder's own hooks) nor the standard
library's plumbing on the way there (std::string's _M_create, vector's
_M_realloc_insert, map's operator[], Rust's core, libc's strdup): the
program's own call line. The library frames in between are kept as context
("via"). A stack with no program frame falls back to its first frame
outside the allocator. For each site:
estimated bytes and number of allocations, and estimated bytes still live at
the end of the trace (never freed: leaks, for a process that exited). Also
the total live estimate, and its peak over time.

Estimates: a sample of S bytes taken at mean interval R stands for
S / (1 - e^(-S/R)) bytes and 1 / (1 - e^(-S/R)) allocations
(profiles.alloc_weight; R == 1 recorded every allocation: exact). Live
blocks come from replaying each process's alloc.sample and alloc.free
events in time order; a free matches the latest sample of its address.

`--json` prints
  {"sample_bytes": N, "allocated_bytes_est": N, "live_bytes_est": N,
   "peak_live_bytes_est": N,
   "sites": [{"function", "function_full", "file", "line", "allocated_bytes_est",
              "count_est", "live_bytes_est", "stack": ["site", ..., "root"],
              "via": ["library call the site made", ..., "the allocator's caller"]}, ...],
   "unattributed_bytes_est": N}
sorted by allocated bytes (or --sort). "function" is the short name
(names.py), "function_full" as demangled. "stack" is the heaviest call path
through the site, site first; "via" the heaviest library path below it.
Samples dropped because a ring was full keep their weight
(alloc.unattributed): they are the site "[unattributed: ring full]", counted
in allocated_bytes_est and also given alone as "unattributed_bytes_est"
(never live: their frees are not tracked). Data the recorder lost otherwise
(dropped frees, a full sampled-address table, drops in traces from before
alloc.unattributed) is reported on stderr: estimates are then low (drops) or
live is high (lost frees)."""
import json
import sys
from collections import Counter

from .. import cli, profiles, replay
from ..heap_sites import Site, document, resolve_site


def register(subparsers):
    p = subparsers.add_parser("heap", help="allocation sites: bytes and count allocated, live at the end, peak")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--sort", choices=("alloc", "live", "count"), default="alloc",
                   help="order sites by estimated bytes allocated (default), live bytes, or count")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="show the first N sites (text default 30, JSON default all)")
    cli.add_paths_argument(p)
    p.set_defaults(func=run)


def _columns(batch, fields, problems):
    """The named columns in order, or None (reported) — see profiles.select_columns."""
    cols = profiles.select_columns(batch, fields, problems)
    return None if cols is None else [cols[f] for f in fields]


def build(trace):
    """The heap report as a dict (the --json document), plus notes for stderr.

    Two passes, so that memory follows the largest segment rather than the
    trace: the first aggregates per site and notes where each process's
    events are; the second replays each process (replay.py), a cluster of
    segments at a time, for what is live at the end and the peak."""
    problems = set()
    sites = {}           # (function, file, line) -> Site
    site_of = {}         # (segment index, stack id) -> (Site, path labels)
    spans = {}           # process key -> {segment index: [lo, hi] of its alloc event times}
    rates = Counter()
    unattributed = Site(profiles.UNATTRIBUTED, "", 0, profiles.UNATTRIBUTED)
    unattributed_samples = 0
    for si, seg in enumerate(trace.segments):
        key = profiles.process_key(seg)
        for batch in seg.batches:
            name = batch.type.name
            if name == "alloc.free":
                cols = _columns(batch, ["time", "address"], problems)
                if cols is not None:
                    replay.widen(spans.setdefault(key, {}), si, cols[0])
                continue
            if name == "alloc.unattributed":
                for _, _, n, b, c in profiles.unattributed_rows(batch, problems):
                    unattributed.bytes += b
                    unattributed.count += c
                    unattributed_samples += n
                continue
            if name != "alloc.sample":
                continue
            cols = _columns(batch, ["time", "address", "size", "stack", "sample_bytes"], problems)
            if cols is None:
                continue
            times, addrs, sizes, stacks, srates = cols
            rates.update(srates)
            replay.widen(spans.setdefault(key, {}), si, times)
            for size, sid, rate in zip(sizes, stacks, srates):
                sk = (si, sid)
                hit = site_of.get(sk)
                if hit is None:
                    hit = resolve_site(seg.frames(sid), sites)
                    site_of[sk] = hit
                site, path, via = hit
                w, c = profiles.alloc_weight(size, rate)
                site.bytes += w
                site.count += c
                site.paths[path] += w
                site.vias[via] += w

    # Replay each process in its own monotonic time order (an allocation
    # before a free at equal times): the blocks left are live at the end.
    # Changes of the live total are merged on the wall clock so the peak
    # is that of all processes together.
    replays = [_changes(trace, seg_spans, site_of, problems) for seg_spans in spans.values()]
    running = peak_total = 0.0
    for _, d in replay.merge_streams([changes for _, changes in replays]):
        running += d
        if running > peak_total:
            peak_total = running
    live_total = 0.0
    for heap, _ in replays:
        for site, path, w in heap.held.values():
            site.live += w
            live_total += w

    return document(sites, unattributed, unattributed_samples, live_total, peak_total, rates,
                    lambda: _configured_rate(trace), trace.dropped(), problems)


def _changes(trace, seg_spans, site_of, problems):
    """(LiveHeap, its live total's changes): (wall time, +/- estimated bytes),
    sorted by wall time (stable: replay order on ties). Each block is held
    as (site, path, estimated bytes)."""
    heap = replay.LiveHeap(trace.segments, seg_spans, lambda batch, f: profiles.select_columns(batch, f, problems))
    fields = ["time", "address", "size", "stack", "sample_bytes"]

    def take(si, cols):
        blocks = []
        for size, sid, rate in zip(cols["size"], cols["stack"], cols["sample_bytes"]):
            site, path, _ = site_of[(si, sid)]
            blocks.append((site, path, profiles.alloc_weight(size, rate)[0]))
        return cols["time"], cols["address"], blocks

    def replayed(members):
        changes = []
        heap.replay(heap.events(members, fields, take), changes)
        return changes

    groups = list(heap.clusters())
    segs = trace.segments
    # The earliest wall time each cluster can hold, and from it what any later one can.
    floors = [min(seg_spans[si][0] + segs[si].wall_offset() for si in g) for g in groups]
    later = [None] * len(groups)
    for i in range(len(groups) - 2, -1, -1):
        later[i] = floors[i + 1] if later[i + 1] is None else min(floors[i + 1], later[i + 1])
    return heap, replay.wall_ordered(zip(later, map(replayed, groups)))


def _configured_rate(trace):
    for e in trace.events({"process.start"}):
        v = e.get("alloc_sample_bytes")
        if isinstance(v, int):
            return v
    return 0


def _via_text(via):
    """"  via a > b": the library calls between the site and the allocator
    (the first and last of a long chain)."""
    if not via:
        return ""
    shown = list(via) if len(via) <= 3 else [via[0], "...", via[-1]]
    return "  via " + " > ".join(shown)


SORT_KEYS = {"alloc": "allocated_bytes_est", "live": "live_bytes_est", "count": "count_est"}


def run(args):
    if args.limit is not None and args.limit < 0:
        raise cli.UsageError("--limit must be >= 0")
    trace = cli.open_trace(args.paths)
    if getattr(trace, "fleet", False):  # --clickhouse: aggregated in the database (fleet_heap.py)
        from .. import fleet_heap
        doc, notes = fleet_heap.build(trace)
    else:
        doc, notes = build(trace)
    sk = SORT_KEYS[args.sort]
    doc["sites"].sort(key=lambda s: (-s[sk], -s["allocated_bytes_est"], s["function"], s["file"], s["line"]))
    limit = args.limit if args.limit is not None else (None if args.json else 30)
    total_sites = len(doc["sites"])
    if limit is not None:
        doc["sites"] = doc["sites"][:limit]
    for note in notes:
        if isinstance(note, tuple):  # (path, message) from profiles.select_columns
            cli.err_file(*note)
        else:
            cli.err(note)
    if args.json:
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
        return cli.exit_status(trace)
    if not total_sites:
        print("no allocation samples in the trace" + (
            " (allocation profiling was off: FLIGHTREC_ALLOC_SAMPLE_BYTES=0, or the process's"
            " malloc was another allocator's, loaded ahead of the preload)" if doc["sample_bytes"] == 0
            and any(True for _ in trace.batches({"process.start"})) else ""))
        return cli.exit_status(trace)
    rate = doc["sample_bytes"]
    print("Heap: sampled every %s on average; allocated ~%s, live at end ~%s, peak live ~%s%s" % (
        "allocation" if rate <= 1 else cli.format_bytes(rate), cli.format_bytes(doc["allocated_bytes_est"]),
        cli.format_bytes(doc["live_bytes_est"]), cli.format_bytes(doc["peak_live_bytes_est"]),
        "" if len(doc["sites"]) == total_sites else " (top %d of %d sites)" % (len(doc["sites"]), total_sites)))
    table = [("allocated", "count", "live", "site")]
    for s in doc["sites"]:
        where = "%s:%d" % (s["file"], s["line"]) if s["file"] else ""
        caller = "  <- " + s["stack"][1] if len(s["stack"]) > 1 else ""
        table.append((cli.format_bytes(s["allocated_bytes_est"]), "{:,}".format(s["count_est"]),
                      cli.format_bytes(s["live_bytes_est"]),
                      s["function"] + ("  " + where if where else "") + caller + _via_text(s["via"])))
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for row in table:
        print("  ".join(row[i].rjust(widths[i]) for i in range(3)) + "  " + row[3])
    return cli.exit_status(trace)
