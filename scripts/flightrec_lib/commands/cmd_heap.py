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
import re
import sys
from collections import Counter

from .. import cli, names, profiles, replay

# Frames that belong to an allocator rather than to the program: the
# allocation entry points and C++ allocation plumbing. Matched on the
# demangled function name: exact names, then prefixes, then substrings.
ALLOCATOR_NAMES = frozenset([
    "malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign", "aligned_alloc",
    "memalign", "valloc", "pvalloc", "__libc_malloc", "__libc_calloc", "__libc_realloc",
    "__libc_memalign", "__libc_valloc", "__libc_pvalloc", "__GI___libc_malloc",
    "__GI___libc_realloc", "__posix_memalign", "_mid_memalign", "_int_malloc", "_int_realloc",
    "tcache_init", "sysmalloc",
])
ALLOCATOR_PREFIXES = (
    "operator new", "__gnu_cxx::new_allocator", "std::__new_allocator", "std::allocator<",
    "std::allocator_traits<", "std::__allocated_ptr", "mi_", "je_", "tc_",
)
ALLOCATOR_SUBSTRINGS = ("::_M_allocate(", "::allocate(unsigned long")
# Rust: the global allocator's shims and the whole `alloc` crate (Box, Vec,
# String, RawVec and the allocation calls they inline), so a site is the
# program's line that built the Box or grew the Vec, not the same few
# alloc.rs lines for every allocation. Trait impls the crate gives other
# types ("<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem") too.
RUST_ALLOCATOR_PREFIXES = (
    "alloc::", "<alloc::", "std::alloc::", "<std::alloc::", "std::sys::alloc::", "<std::sys::alloc::",
    "__rust_alloc", "__rust_realloc", "__rdl_", "__rg_",
)
RUST_FOREIGN_IMPL = re.compile(r"^<[^<>]* as (alloc|std::alloc)::")
# The standard libraries' own code: a heap site is the program's call into
# them, with these frames kept as context ("via").
STD_LIBRARY_PREFIXES = (
    "std::", "__gnu_cxx::", "__cxxabiv1::", "__gnu_debug::", "core::", "<core::", "hashbrown::", "<hashbrown::",
)
STD_LIBRARY_DIRS = ("/include/c++/", "/c++/v1/", "/rustc/", "/library/core/src/", "/library/std/src/")
STD_LIBRARY_OBJECTS = ("libstdc++.so", "libc++.so", "libc++abi.so", "libc.so", "libc-")
LOST_KINDS = ("alloc.sample", "alloc.free", "alloc.table_full", "alloc.free_unrecorded")


def register(subparsers):
    p = subparsers.add_parser("heap", help="allocation sites: bytes and count allocated, live at the end, peak")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--sort", choices=("alloc", "live", "count"), default="alloc",
                   help="order sites by estimated bytes allocated (default), live bytes, or count")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="show the first N sites (text default 30, JSON default all)")
    cli.add_paths_argument(p)
    p.set_defaults(func=run)


def is_allocator_frame(frame):
    if profiles.mapping_basename(frame.get("mapping")).startswith("libflightrec"):
        return True
    fn = frame.get("function") or ""
    if not fn:
        return False
    if fn in ALLOCATOR_NAMES or fn.startswith(ALLOCATOR_PREFIXES) or fn.startswith(RUST_ALLOCATOR_PREFIXES):
        return True
    if RUST_FOREIGN_IMPL.match(fn):
        return True
    return any(s in fn for s in ALLOCATOR_SUBSTRINGS)


def is_library_frame(frame):
    """A frame of the language's standard library (C++ std::, libstdc++/libc++
    code and headers, Rust's core/std, libc): plumbing between the program's
    call and the allocator, e.g. std::string's constructor, vector's
    _M_realloc_insert, std::map::operator[], strdup."""
    fn = frame.get("function") or ""
    # The short name has no return type or template arguments in front.
    if fn and names.simplify(fn).startswith(STD_LIBRARY_PREFIXES):
        return True
    f = frame.get("file") or ""
    if any(d in f for d in STD_LIBRARY_DIRS):
        return True
    base = profiles.mapping_basename(frame.get("mapping"))
    return base.startswith(STD_LIBRARY_OBJECTS)


def site_index(frames):
    """Index of the site frame in a leaf-first stack: the first frame that is
    neither an allocator's nor standard-library plumbing — the program's own
    call. A stack with no program frame at all falls back to the first frame
    that is not an allocator's (the leaf when every frame is one)."""
    first_outside_allocator = None
    for i, frame in enumerate(frames):
        if is_allocator_frame(frame):
            continue
        if first_outside_allocator is None:
            first_outside_allocator = i
        if not is_library_frame(frame):
            return i
    return first_outside_allocator or 0


def library_context(frames, site):
    """Short labels of the library frames between the allocator and the site
    (leaf first): how the program's call reached the allocator."""
    return [profiles.frame_label(f) for f in frames[:site] if not is_allocator_frame(f)]


class Site:
    __slots__ = ("function", "file", "line", "function_full", "bytes", "count", "live", "paths", "vias")

    def __init__(self, function, file, line, function_full):
        self.function, self.file, self.line = function, file, line
        self.function_full = function_full
        self.bytes = self.count = self.live = 0.0
        self.paths = Counter()  # call path (tuple of labels, site first) -> estimated bytes
        self.vias = Counter()   # library frames between site and allocator (call order) -> bytes


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
                    hit = _resolve_site(seg.frames(sid), sites)
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


def document(sites, unattributed, unattributed_samples, live_total, peak_total, rates, configured_rate, lost,
             problems=()):
    """The --json document and the stderr notes from what build aggregated
    (the file reader's passes, or fleet_heap.py's queries): sites {key: Site},
    the unattributed Site and its sample count, the live total at the end and
    its peak, rates Counter {sample_bytes: samples}, configured_rate() the
    process.start setting when there are no samples, lost Trace.dropped()."""
    sample_bytes = rates.most_common(1)[0][0] if rates else configured_rate()
    rows = [s for s in sites.values()] + ([unattributed] if unattributed_samples else [])
    doc = {
        "sample_bytes": int(sample_bytes),
        "allocated_bytes_est": int(round(sum(s.bytes for s in rows))),
        "unattributed_bytes_est": int(round(unattributed.bytes)),
        "live_bytes_est": int(round(live_total)),
        "peak_live_bytes_est": int(round(peak_total)),
        "sites": [],
    }
    for s in rows:
        path = max(s.paths.items(), key=lambda kv: (kv[1], kv[0]))[0] if s.paths else ()
        via = max(s.vias.items(), key=lambda kv: (kv[1], kv[0]))[0] if s.vias else ()
        doc["sites"].append({
            "function": s.function, "function_full": s.function_full, "file": s.file, "line": s.line,
            "allocated_bytes_est": int(round(s.bytes)), "count_est": int(round(s.count)),
            "live_bytes_est": int(round(s.live)), "stack": list(path), "via": list(via),
        })
    notes = sorted(problems)
    if len(rates) > 1:
        notes.append("samples were taken at %d different mean intervals (%s bytes); "
                     "each is weighted by its own" % (len(rates), ", ".join(str(r) for r in sorted(rates))))
    for kind in LOST_KINDS:
        if kind == "alloc.sample" and lost.get(kind) and unattributed_samples >= lost[kind]:
            notes.append("%s allocation samples were dropped (rings full): their weight is the site %s" % (
                "{:,}".format(lost[kind]), profiles.UNATTRIBUTED))
        elif lost.get(kind):
            notes.append(_lost_note(kind, lost[kind]))
    return doc, notes


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


def _resolve_site(frames, sites):
    """(Site, call path from the site to the root, library frames the site
    reached the allocator through, in call order) of one stack."""
    frames = frames or []
    i = site_index(frames)
    frame = frames[i] if frames else {"function": "[no stack]", "file": "", "line": 0}
    function = profiles.frame_label(frame) if frames else "[no stack]"
    key = (function, frame.get("file") or "", int(frame.get("line") or 0))
    site = sites.get(key)
    if site is None:
        site = sites[key] = Site(*key, profiles.frame_label_full(frame) if frames else "[no stack]")
    path = tuple(profiles.frame_label(f) for f in profiles.trim_bootstrap(frames[i:])) if frames else ()
    via = tuple(reversed(library_context(frames, i)))
    return site, path, via


def _configured_rate(trace):
    for e in trace.events({"process.start"}):
        v = e.get("alloc_sample_bytes")
        if isinstance(v, int):
            return v
    return 0


def _lost_note(kind, count):
    what = {
        "alloc.sample": "allocation samples were dropped (rings full): estimates are low",
        "alloc.free": "frees of sampled blocks were dropped: live estimates are high",
        "alloc.table_full": "sampled blocks did not fit the address table (FLIGHTREC_ALLOC_TABLE_ENTRIES): "
                            "their frees were not seen, live estimates are high",
        "alloc.free_unrecorded": "frees of sampled blocks happened where nothing is recorded: "
                                 "live estimates are high",
    }[kind]
    return "%s %s" % ("{:,}".format(count), what)


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
            " (allocation profiling was off: FLIGHTREC_ALLOC_SAMPLE_BYTES=0)" if doc["sample_bytes"] == 0
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
