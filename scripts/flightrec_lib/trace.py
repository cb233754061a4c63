"""trace: any mix of segment files and directories, read as one trace.

    trace = Trace(["/var/tmp/fr", "old/app-1-2-0.seg"])
    trace.errors                     # [(path, message)]: files that could not be read at all
    for e in trace.events({"thread.start"}):   # time order across all files
        e["type"], e["time"], e["pid"], e["name"], e["stack"]  # stack: frame dicts, leaf first
    trace.event_counts(), trace.dropped(), trace.threads()

Directories are searched (recursively) for *.seg and *.active files; files
named explicitly are read whatever their name. Only regular files are read: a
symbolic link found inside a directory is not followed (someone else may have
planted it), and FIFOs and devices are refused (segment.read_file). Events are resolved: string
fields become text, stack fields become lists of frame dicts (see
Segment.frames), bytes stay bytes. Merging by time holds in memory only the
segments whose time ranges overlap (e.g. several processes recording at once),
not the whole trace, and past MERGE_EVENTS events only their blocks that
overlap the slice of time being merged.
"""
import bisect
import itertools
import operator
import os

from .segment import (SINT, STACK, STRING, TIME, UINT, SegmentError, is_segment_name, read_segment,
                      sort_columns)

DROPPED_EVENT = "recorder.dropped"
# Events of overlapping segments merged by one sort; past this, a slice of
# time at a time, so that memory holds the blocks that overlap in time (one
# per process recording at once, say), not every block of the segments.
MERGE_EVENTS = 1 << 21
# Events a slice gathers at least, when blocks allow (the sort of a slice is
# C code; the slicing around it is not).
SLICE_EVENTS = 1 << 18
THREAD_TYPES = ("thread.start", "thread.name", "thread.end")

# The event types the reports interpret, with the type of every field they
# read (as the runtime defines them: preload/*_events.cc, sampler/, the
# crash handler). A segment whose schema gives one of these fields another
# type (damage that kept its CRC, or a foreign writer) cannot be reported on
# without guessing: its events of that type are skipped, and said so once.
# Extra fields, missing fields and types not listed here are left alone.
_I, _S, _K = (TIME, UINT, SINT), (STRING,), (STACK,)
KNOWN_LAYOUTS = {
    "process.start": dict(pid=_I, ppid=_I, exe=_S, cmdline=_S, hostname=_S, service=_S, realtime_ns=_I,
                          monotonic_ns=_I, alloc_sample_bytes=_I, cpu_hz=_I, sampler=_S),
    "process.env": dict(name=_S, value=_S),
    "process.rusage": dict(utime_ns=_I, stime_ns=_I, maxrss_kb=_I, minflt=_I, majflt=_I, nvcsw=_I, nivcsw=_I),
    "thread.start": dict(tid=_I, parent_tid=_I, name=_S, start_routine=_S),
    "thread.name": dict(tid=_I, name=_S),
    "thread.end": dict(tid=_I, name=_S),
    "recorder.dropped": dict(tid=_I, kind=_S, count=_I),
    "crash": dict(tid=_I, signal=_I, signal_name=_S, code=_I, fault_addr=_I, stack=_K),
    "crash.recovered": dict(tid=_I, signal=_I, signal_name=_S),
    "process.killed": dict(tid=_I, signal=_I, signal_name=_S, code=_I, sender_pid=_I, sender_uid=_I),
    "cpu.sample": dict(tid=_I, stack=_K, period_ns=_I),
    "offcpu.sample": dict(tid=_I, stack=_K, duration_ns=_I, reason=_S, weight=_I),
    "sampler.lost": dict(tid=_I, count=_I),
    "alloc.sample": dict(tid=_I, address=_I, size=_I, stack=_K, sample_bytes=_I),
    "alloc.free": dict(tid=_I, address=_I),
    "socket.op": dict(tid=_I, fd=_I, conn=_I, op=_S, bytes=_I, duration_ns=_I),
    "socket.open": dict(tid=_I, fd=_I, conn=_I, role=_S, family=_S, sock_type=_S, local=_S, peer=_S,
                        listener=_I),
    "socket.close": dict(tid=_I, fd=_I, conn=_I, bytes_in=_I, bytes_out=_I, ops=_I, errors=_I),
    "request": dict(tid=_I, conn=_I, duration_ns=_I, bytes_in=_I, bytes_out=_I, role=_S),
    "socket.acceptq": dict(conn=_I, fd=_I, local=_S, queued=_I, backlog=_I),
    "socket.gap": dict(tid=_I, conn=_I, bytes_in=_I, bytes_out=_I, ops=_I, errors=_I),
    "socket.exchange": dict(tid=_I, fd=_I, conn=_I, flags=_I, bytes_in=_I, bytes_out=_I, calls_in=_I,
                            calls_out=_I, errors=_I, would_block=_I, ask_ns=_I, answer_ns=_I, end=_I),
    "trigger": dict(reason=_S, detail=_I, note=_S, incident=_I, before_ns=_I, after_ns=_I, merged=_I,
                    suppressed=_I, mode=_S, tag=_S),
}
# Any type: "pid" (when a schema has it) stands for the process.
_ANY_TYPE = dict(pid=_I)


def layout_mismatch(event_type):
    """[(field, type name)] of the fields whose type the reports cannot use."""
    want = KNOWN_LAYOUTS.get(event_type.name, {})
    bad = []
    for f in event_type.fields[1:]:
        codes = want.get(f.name) or _ANY_TYPE.get(f.name)
        if codes is not None and f.type not in codes:
            bad.append((f.name, f.type_name))
    return bad


def check_layouts(seg):
    """Drops the batches of event types whose layout the reports cannot use
    (see KNOWN_LAYOUTS); each such type is one problem of the segment."""
    unusable = {}
    for t in seg.schema.values():
        bad = layout_mismatch(t)
        if bad:
            unusable[t.id] = bad
    if not unusable:
        return
    kept = []
    skipped = {}
    for b in seg.batches:
        if b.type.id in unusable:
            skipped[b.type.id] = skipped.get(b.type.id, 0) + b.count
        else:
            kept.append(b)
    seg.batches = kept
    for tid, bad in sorted(unusable.items()):
        t = seg.schema[tid]
        seg.events_skipped += skipped.get(tid, 0)
        seg.unusable_types += 1
        seg._problem(0, "event type %s has fields of unexpected types (%s); its %d events are skipped" % (
            t.name, ", ".join("%s: %s" % fb for fb in bad), skipped.get(tid, 0)))

class Trace:
    def __init__(self, paths):
        self.segments = []
        self.errors = []  # (path, message): unreadable, missing, not a segment
        self.notes = []   # (path, message): benign, e.g. an .active file without a header yet
        seen = set()
        for path, follow in self._expand(paths):
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            self._open(path, follow)
        self.segments.sort(key=lambda s: (s.header["service"], s.header["pid"], s.header["sequence"], s.path))

    # -- opening

    def _expand(self, paths):
        for path in paths:
            if os.path.isdir(path):
                found = []
                for root, dirs, files in os.walk(path):
                    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                    found.extend(os.path.join(root, f) for f in sorted(files) if is_segment_name(f))
                if not found:
                    self.errors.append((path, "no segment files (*.seg, *.active) in this directory"))
                for f in found:
                    yield f, False
            elif os.path.exists(path):
                yield path, True
            elif path.endswith(".active") and os.path.exists(path[:-len(".active")] + ".seg"):
                yield path[:-len(".active")] + ".seg", True  # sealed since it was listed
            else:
                self.errors.append((path, "no such file or directory"))

    def _open(self, path, follow=True):
        try:
            seg = read_segment(path, follow)
        except MemoryError:
            # Bounds keep a segment's cost near its size; should one still not
            # fit, the other segments are read and reported all the same.
            self.errors.append((path, "out of memory reading this segment; skipped"))
            return
        except SegmentError as e:
            if not os.path.exists(path) and path.endswith(".active"):
                alt = path[:-len(".active")] + ".seg"
                if os.path.exists(alt):  # renamed while we were reading the directory
                    return self._open(alt, follow)
            if e.truncated and path.endswith(".active"):
                # A recorder creates the file, then writes the header: nothing lost.
                self.notes.append((path, "no data yet (%s)" % e))
            else:
                self.errors.append((path, str(e)))
            return
        check_layouts(seg)
        self.segments.append(seg)

    # -- summaries

    def problems(self):
        """(segment, offset, message) for every block-level problem."""
        for seg in self.segments:
            for offset, message in seg.problems:
                yield seg, offset, message

    def event_counts(self):
        counts = {}
        for seg in self.segments:
            for b in seg.batches:
                counts[b.type.name] = counts.get(b.type.name, 0) + b.count
        return counts

    def time_range(self):
        lo = hi = None
        for seg in self.segments:
            a, b = seg.time_range()
            if a is not None:
                lo = a if lo is None or a < lo else lo
                hi = b if hi is None or b > hi else hi
        return lo, hi

    def batches(self, types=None):
        """Every EVENTS batch (file order within a segment); batch.segment is
        its segment. The fastest way to aggregate: columns, no dicts."""
        for seg in self.segments:
            for b in seg.batches:
                if types is None or b.type.name in types:
                    yield b

    # -- events

    def events(self, types=None, resolve=True):
        """Event dicts of the given type names (all if None), in time order
        across every file. Equal times keep file order."""
        types = set(types) if types is not None else None
        spans = []
        for seg in self.segments:
            if not any(types is None or b.type.name in types for b in seg.batches):
                continue
            lo, hi = seg.time_range()
            if lo is not None:
                spans.append((lo, hi, len(spans), seg))
        spans.sort(key=operator.itemgetter(0, 2))
        # Merge only segments whose time ranges overlap; chain the rest.
        cluster, cluster_hi = [], None
        for lo, hi, _, seg in spans:
            if cluster and lo > cluster_hi:
                yield from self._merge(cluster, types, resolve)
                cluster = []
            cluster_hi = hi if not cluster or hi > cluster_hi else cluster_hi
            cluster.append(seg)
        if cluster:
            yield from self._merge(cluster, types, resolve)

    @staticmethod
    def _merge(segments, types, resolve):
        """Time-ordered events of overlapping segments. Every batch is a
        time-sorted stream; the merge order comes from one C-level sort of all
        their times (timsort finds the sorted runs), and the events are then
        pulled from the streams in that order, never touched by Python code
        in between. Past MERGE_EVENTS events the merge goes a slice of time
        at a time (_merge_sliced)."""
        batches = [(seg, b) for seg in segments for b in seg.batches if types is None or b.type.name in types]
        if sum(b.count for _, b in batches) > MERGE_EVENTS:
            return _merge_sliced(batches, resolve)
        times, counts, streams = [], [], []
        for seg, b in batches:
            cols = seg.resolved_columns(b) if resolve else b.columns()
            if cols is None:
                continue
            cols = sort_columns(cols)
            times.extend(cols[0])
            counts.append(len(cols[0]))
            streams.append(seg.rows(b, cols))
        if len(streams) <= 1:
            return streams[0] if streams else iter(())
        if all(map(operator.le, times, itertools.islice(times, 1, None))):
            return itertools.chain.from_iterable(streams)  # already in order (one type, say)
        owner = []
        for i, n in enumerate(counts):
            owner.extend(itertools.repeat(i, n))
        order = sorted(range(len(times)), key=times.__getitem__)  # stable: file order on ties
        del times
        return map(next, map(streams.__getitem__, map(owner.__getitem__, order)))

    def dropped(self):
        """{kind: count} of data the recorder lost, over all segments.

        Each loss is reported twice by the runtime: as a recorder.dropped event
        (fields kind, count) and in the sealed segment's footer total
        ("dropped.<kind>"). Per segment and kind the two describe the same
        loss, so they are never added: events are used, and the footer total
        when it is larger (events lost to a damaged block, or a kind only the
        footer counts). Segments without a footer (active, truncated) count
        their events."""
        total = {}
        for seg in self.segments:
            from_events = {}
            for b in seg.batches:
                # Producers that count their own losses name the event type
                # "<something>.lost" with a count field (e.g. sampler.lost for
                # perf's PERF_RECORD_LOST): those are drops of that kind.
                if b.type.name.endswith(".lost") and _has_fields(b.type, count=UINT):
                    cols = seg.resolved_columns(b)
                    if cols is not None:
                        n = sum(cols[b.type.field_names.index("count")])
                        from_events[b.type.name] = from_events.get(b.type.name, 0) + n
                    continue
                if b.type.name != DROPPED_EVENT or not _has_fields(b.type, kind=STRING, count=UINT):
                    continue
                cols = seg.resolved_columns(b)
                names = b.type.field_names
                if cols is None:
                    continue
                for kind, count in zip(cols[names.index("kind")], cols[names.index("count")]):
                    from_events[kind] = from_events.get(kind, 0) + count
            per_seg = dict(from_events)
            for key, value in (seg.footer or {}).items():
                if key.startswith("dropped."):
                    kind = key[len("dropped."):]
                    per_seg[kind] = max(per_seg.get(kind, 0), value)
            for kind, count in per_seg.items():
                total[kind] = total.get(kind, 0) + count
        return total

    def threads(self):
        """Threads seen in thread.start / thread.name / thread.end events:
        [{pid, tid, name, start, end, ...extra thread.start fields}], in start
        order. start/end are monotonic ns, None when outside the trace. A tid
        reused after its thread ended is a new entry."""
        out, live = [], {}
        usable = {t.name for s in self.segments for t in s.schema.values()
                  if t.name in THREAD_TYPES and _has_fields(t, tid=(UINT, SINT))}
        for e in self.events(usable):
            key = (e.get("pid"), e.get("tid"))
            if not isinstance(key[1], int):  # a segment whose thread.* layout differs
                continue
            name = e.get("name") if isinstance(e.get("name"), str) else None
            kind = e["type"]
            if kind == "thread.start":
                rec = {"pid": key[0], "tid": key[1], "name": name or "", "start": e["time"], "end": None}
                for k, v in e.items():
                    if k not in rec and k not in ("type", "time") and isinstance(v, (int, str)):
                        rec[k] = v
                live[key] = rec
                out.append(rec)
                continue
            rec = live.get(key)
            if rec is None:  # started before the trace (or in a lost block)
                rec = {"pid": key[0], "tid": key[1], "name": "", "start": None, "end": None}
                live[key] = rec
                out.append(rec)
            if name:
                rec["name"] = name
            if kind == "thread.end":
                rec["end"] = e["time"]
                del live[key]
        return out


class _Stream:
    """One block being merged: its sorted times and event dicts, and how far
    the merge has taken them."""
    __slots__ = ("index", "times", "rows", "pos")

    def __init__(self, index, times, rows):
        self.index, self.times, self.rows, self.pos = index, times, rows, 0


def _merge_sliced(batches, resolve):
    """The events of (segment, batch) pairs in time order, file order on ties
    (the pairs' order), with only the blocks that overlap the slice being
    merged decoded at once. A block is opened once the merge reaches its
    earliest time; each step merges, from the open blocks, every event
    before the earliest time of the next block not yet open (none of its
    events can come before that), then opens more."""
    spans = []
    for i, (seg, b) in enumerate(batches):
        span = b.time_span()
        if span is not None:
            spans.append((span[0], i))
        elif b.columns() is None:
            pass  # damaged: columns() reported it, as the one-sort merge would have
    spans.sort()
    open_, waiting = [], 0  # open streams; their events not yet merged
    k = 0
    while k < len(spans) or open_:
        low = min((st.times[st.pos] for st in open_), default=None)
        while k < len(spans) and (low is None or spans[k][0] <= low or waiting < SLICE_EVENTS):
            i = spans[k][1]
            k += 1
            seg, b = batches[i]
            cols = seg.resolved_columns(b) if resolve else b.columns()
            if cols is None or not len(cols[0]):
                continue
            cols = sort_columns(cols)
            st = _Stream(i, cols[0], seg.rows(b, cols))
            open_.append(st)
            waiting += len(st.times)
            low = st.times[0] if low is None or st.times[0] < low else low
        cut = spans[k][0] if k < len(spans) else None
        times, owner, streams = [], [], []
        open_.sort(key=operator.attrgetter("index"))  # ties: file order
        for st in open_:
            end = len(st.times) if cut is None else bisect.bisect_left(st.times, cut, st.pos)
            if end > st.pos:
                times.extend(itertools.islice(st.times, st.pos, end))
                owner.extend(itertools.repeat(len(streams), end - st.pos))
                streams.append(st.rows)
                waiting -= end - st.pos
                st.pos = end
        order = sorted(range(len(times)), key=times.__getitem__)  # stable: file order on ties
        del times
        yield from map(next, map(streams.__getitem__, map(owner.__getitem__, order)))
        open_ = [st for st in open_ if st.pos < len(st.times)]


def _has_fields(event_type, **wanted):
    """True if event_type has each named field with (one of) the given type codes."""
    types = {f.name: f.type for f in event_type.fields}
    for name, codes in wanted.items():
        codes = codes if isinstance(codes, tuple) else (codes,)
        if types.get(name) not in codes:
            return False
    return True


def batch_events(batch, resolve=True):
    """Event dicts of one batch in time order, built lazily; None if the
    block does not decode."""
    seg = batch.segment
    cols = seg.resolved_columns(batch) if resolve else batch.columns()
    if cols is None:
        return None
    return seg.rows(batch, sort_columns(cols))
