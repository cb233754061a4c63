"""heap_sites: a sampled allocation's site and the heap report's document,
shared by the file reader (commands/cmd_heap.py) and the ClickHouse path
(fleet_heap.py), which aggregate differently and format alike.

A site is the innermost frame of a stack that is neither part of an
allocator (malloc & co., operator new, std::allocator internals, Rust's
alloc crate, the recorder's own hooks) nor the standard library's plumbing
on the way there: the program's own call line, with the library frames in
between kept as context ("via"). document() turns the aggregated sites,
totals and drops into the --json document and the stderr notes. Here, below
both, so that no library module imports the command (docs/ARCHITECTURE.md,
"The reader's layers")."""
import re
from collections import Counter

from . import names, profiles

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


def resolve_site(frames, sites):
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
            notes.append(lost_note(kind, lost[kind]))
    return doc, notes


def lost_note(kind, count):
    what = {
        "alloc.sample": "allocation samples were dropped (rings full): estimates are low",
        "alloc.free": "frees of sampled blocks were dropped: live estimates are high",
        "alloc.table_full": "sampled blocks did not fit the address table (FLIGHTREC_ALLOC_TABLE_ENTRIES): "
                            "their frees were not seen, live estimates are high",
        "alloc.free_unrecorded": "frees of sampled blocks happened where nothing is recorded: "
                                 "live estimates are high",
    }[kind]
    return "%s %s" % ("{:,}".format(count), what)
