"""profiles: turns decoded events into weighted stacks, one profile per kind.

A profile is a list of distinct (process, thread, stack) entries, each with
a sample count and a weight, in the order the stacks were first seen. All
reports (top, tree, pprof, flame, folded) start from here.

    kind    events         samples          weight                   objects
    cpu     cpu.sample     1 per event      period_ns                -
    offcpu  offcpu.sample  1 per event      duration_ns * weight     -
    alloc   alloc.sample   1 per event      estimated bytes          estimated count
    live    alloc.sample   1 per event      (as alloc, only samples never freed)

Allocation samples are unbiased estimates: with a mean sampling interval of
R bytes an allocation of S bytes is sampled with probability 1 - e^(-S/R),
so it stands for S / (1 - e^(-S/R)) bytes and 1 / (1 - e^(-S/R))
allocations. R == 1 means every allocation was recorded: weight S, count 1.
Off-CPU switch samples are thinned on threads that switch often (one
switch-out in `weight` is sampled), so a block stands for weight times its
duration; segments without the field sampled every block.
The live kind replays each process's (host, service, pid) alloc.sample and
alloc.free events in time order across its segments; what is left was never
freed (with --to: not freed by then).

Samples the recorder dropped (rings full) keep their weight: each profile
carries it as one "[unattributed: ring full]" entry per thread, a stack of
that one frame, so every report built from here shows it and totals stay
right. alloc: the alloc.unattributed events (the exact estimated bytes and
count of the dropped samples). cpu: sampler.lost counts (records lost in
the perf rings or ours) times the profile's period, an estimate (with perf,
lost records include context-switch records). offcpu: the
offcpu.unattributed events (blocks whose records were dropped in our rings
or queue, with their exact durations; blocks lost in perf's kernel rings
have no known duration and are only counted, in sampler.lost). live has
none: whether a dropped sample was freed is unknown.

Speed and memory: events are read column by column and aggregated by
stack id per segment first; at the end of each segment its stacks are
resolved to frames and merged into the profile's entries by content, so a
profile holds one entry per distinct (process id, thread, stack) of the
trace whatever the number of segments.

Frames are dicts, leaf first: function, file, line (innermost inline frame
first for one pc), address, mapping (path, build_id, start, end, offset, or
None) and inlined (True when the frame was inlined into the next one, i.e.
both stand for the same pc).
"""
import math
import operator
import os
from array import array
from collections import Counter
from itertools import compress, repeat

from . import names, replay, segment
from .report_scope import (ProfileError, endpoint_windows, in_windows, parse_iso, parse_time,  # noqa: F401
                           process_key, processes, resolve_bounds, select_threads, thread_names, time_bounds)


KINDS = {
    "cpu": {"event": "cpu.sample", "unit": "ns", "title": "CPU",
            "sample_types": [("samples", "count"), ("cpu", "nanoseconds")],
            "period_type": ("cpu", "nanoseconds"), "default": "cpu"},
    "offcpu": {"event": "offcpu.sample", "unit": "ns", "title": "Off-CPU",
               "sample_types": [("samples", "count"), ("offcpu", "nanoseconds")],
               "period_type": ("offcpu", "nanoseconds"), "default": "offcpu"},
    "alloc": {"event": "alloc.sample", "unit": "bytes", "title": "Allocations",
              "sample_types": [("alloc_objects", "count"), ("alloc_space", "bytes")],
              "period_type": ("space", "bytes"), "default": "alloc_space"},
    "live": {"event": "alloc.sample", "unit": "bytes", "title": "Live heap",
             "sample_types": [("inuse_objects", "count"), ("inuse_space", "bytes")],
             "period_type": ("space", "bytes"), "default": "inuse_space"},
}

# Frames below a thread's start routine (libc's thread and process bootstrap,
# and the recorder's own pthread_create trampoline). Reports that draw call
# paths drop them from the root end so a thread's start routine (or main)
# is the root.
BOOTSTRAP_FUNCTIONS = frozenset([
    "_start", "__libc_start_main", "__libc_start_main_impl", "__libc_start_call_main",
    "start_thread", "clone", "clone3", "__clone", "__clone3", "__clone_internal",
    "__GI___clone", "__GI___clone3", "__GI___clone_internal",
])


def alloc_weight(size, sample_bytes):
    """(estimated bytes, estimated count) that one allocation sample stands for.
    The bytes are whole: sums of whole numbers are exact in any order, so a
    report adds up to the same bytes from the files and from a database that
    sums per shard (a float sum's last bits follow the order of its terms)."""
    if sample_bytes <= 1 or size <= 0:
        # Exact recording (rate 1), or a zero-byte block that carries no bytes.
        return float(size), 1.0
    p = -math.expm1(-size / sample_bytes)  # 1 - e^(-S/R) without cancellation
    return float(round(size / p)), 1.0 / p


def mapping_basename(mapping):
    return os.path.basename(mapping.get("path") or "") if mapping else ""


def frame_label(frame):
    """The name a report shows for a frame: the function (short, see names.py,
    unless --full-names), or for an unknown pc
    `[unknown] <mapping basename>+0x<file offset>` or `0x<pc>`."""
    fn = frame.get("function")
    if fn:
        return names.display(fn)
    return _unknown_label(frame)


def frame_label_full(frame):
    """frame_label with the function name exactly as demangled."""
    fn = frame.get("function")
    if fn:
        return fn
    return _unknown_label(frame)


def _unknown_label(frame):
    addr = int(frame.get("address") or 0)
    m = frame.get("mapping")
    if m and m.get("path"):
        off = addr - int(m.get("start") or 0) + int(m.get("offset") or 0)
        return "[unknown] %s+0x%x" % (mapping_basename(m), off)
    return "0x%x" % addr


def is_bootstrap(frame):
    if frame.get("function") in BOOTSTRAP_FUNCTIONS:
        return True
    return mapping_basename(frame.get("mapping")).startswith("libflightrec")


def is_recorder_frame(frame):
    return mapping_basename(frame.get("mapping")).startswith("libflightrec")


def trim_bootstrap(frames):
    """Leaf-first frames without the bootstrap frames at the root end, and
    without the recorder's own frames anywhere (an interposed call such as
    recv() shows as the application calling libc's recv directly); a stack
    made only of such frames is kept whole (it still says something)."""
    end = len(frames)
    while end > 0 and is_bootstrap(frames[end - 1]):
        end -= 1
    kept = [f for f in frames[:end] if not is_recorder_frame(f)]
    return kept if kept else frames


class Entry:
    """One distinct stack of one thread: samples, weight and object estimate.
    Its frames are a list of frame dicts, or (merged profiles) the frame
    numbers of the stack and the table they index: a list per entry would
    be most of the memory of a trace of many distinct stacks."""
    __slots__ = ("_frames", "_table", "samples", "weight", "objects", "first_time", "pid", "tid", "thread",
                 "process", "points")

    def __init__(self, frames, pid, tid, thread, first_time, table=None, process=None):
        self._frames = frames
        self._table = table
        self.samples = 0
        self.weight = 0.0
        self.objects = 0.0
        self.first_time = first_time
        self.pid = pid
        self.tid = tid
        self.thread = thread
        self.process = process  # (host, service, pid) of the segments it came from
        # build(timeline=True): each event's wall time and values (Points), in the
        # order read (not sorted); None otherwise.
        self.points = None

    @property
    def frames(self):
        """Leaf-first frame dicts (shared: do not modify)."""
        if self._table is None:
            return self._frames
        return list(map(self._table.__getitem__, self._frames))


class Points:
    """Per event of an entry: wall-clock ns, samples, weight, objects, as
    four flat arrays (8 bytes a value: a trace's events, not Python objects);
    with build(point_tag=...) a fifth, tag: what the tagger said of each
    event (otlp: the request in flight on its thread), else None."""
    __slots__ = ("time", "samples", "weight", "objects", "tag")

    def __init__(self):
        self.time = array("q")
        self.samples = array("q")
        self.weight = array("d")
        self.objects = array("d")
        self.tag = None

    def __len__(self):
        return len(self.time)

    def add(self, t, n, w, c):
        self.time.append(t)
        self.samples.append(n)
        self.weight.append(w)
        self.objects.append(c)

    def merge(self, other, shift, tags=None):
        """Appends other's events, their times moved by shift (monotonic -> wall),
        and with tags (one int per event of other) their tags."""
        if tags is not None:
            if self.tag is None:
                self.tag = array("q", bytes(8 * len(self.time)))  # events merged before: untagged
            self.tag.extend(tags)
        elif self.tag is not None:
            self.tag.extend([0] * len(other.time))
        self.time.extend(t + shift for t in other.time)
        self.samples.extend(other.samples)
        self.weight.extend(other.weight)
        self.objects.extend(other.objects)

    def order(self):
        """Indices in time order."""
        return sorted(range(len(self.time)), key=self.time.__getitem__)


class Profile:
    def __init__(self, kind):
        self.kind = kind
        self.spec = KINDS[kind]
        self.unit = self.spec["unit"]
        self.entries = []         # in first-seen order
        self.period = 0           # cpu: mean period_ns; alloc: the most common sample_bytes
        self.start_wall_ns = 0    # wall-clock span of the included events
        self.end_wall_ns = 0
        self.main_path = None     # the executable, for pprof's mapping[0]
        self.problems = []        # (path, message): decoder problems, one stderr line per file

    @property
    def samples(self):
        return sum(e.samples for e in self.entries)

    @property
    def weight(self):
        return sum(e.weight for e in self.entries)

    def paths(self, trim=True):
        """(root-first labels, samples, weight) entries for calltree/flamegraph."""
        for e in self.entries:
            frames = trim_bootstrap(e.frames) if trim else e.frames
            yield [frame_label(f) for f in reversed(frames)], e.samples, e.weight

    def functions(self, trim=True):
        """Per function (short name; function_full: its heaviest full name):
        self and total samples and weight, sorted by self weight
        (then total, then name). A recursive function counts once per stack
        towards its total. trim: leave out the bootstrap frames below the
        thread's start routine (they would only repeat the grand total)."""
        table = {}

        def row(label, frame):
            r = table.get(label)
            if r is None:
                r = table[label] = {"function": label, "file": frame.get("file") or "",
                                    "self": 0, "total": 0, "self_w": 0.0, "total_w": 0.0,
                                    "fulls": Counter()}
            return r

        for e in self.entries:
            frames = trim_bootstrap(e.frames) if trim else e.frames
            if not frames:
                continue
            leaf = frames[0]
            r = row(frame_label(leaf), leaf)
            r["self"] += e.samples
            r["self_w"] += e.weight
            seen = set()
            for f in frames:
                label = frame_label(f)
                if label in seen:
                    continue
                seen.add(label)
                r = row(label, f)
                r["total"] += e.samples
                r["total_w"] += e.weight
                r["fulls"][frame_label_full(f)] += e.weight or e.samples
        # Short names merge overloads and instantiations; the full name shown
        # with a row is the one that weighed most.
        for r in table.values():
            r["function_full"] = max(r.pop("fulls").items(), key=lambda kv: (kv[1], kv[0]))[0]
        return sorted(table.values(),
                      key=lambda r: (-r["self_w"], -r["self"], -r["total_w"], r["function"]))


# ---------------------------------------------------------------- building

# The profile's period (pprof) is the most common sample_bytes for
# allocations, a prefix of each batch telling it as well as every event
# would. For CPU it is the mean weight of a sample (cpu_period).
PERIOD_PROBE = 4096


def cpu_period(entries):
    """The CPU profile's period: the attributed samples' total weight over
    their count, in whole nanoseconds. The SIGPROF sampler weighs each sample
    by the thread CPU time since the one before, so periods vary around the
    nominal one; their mean is what a lost sample stands for. The fleet
    computes the same sum and count in ClickHouse (fleet_profiles.py)."""
    n = w = 0
    for e in entries:
        if e.frames is not UNATTRIBUTED_FRAMES:
            n += e.samples
            w += e.weight
    return int(w) // n if n else 0


NO_STACK = [{"function": "[no stack]", "file": "", "line": 0, "address": 0, "mapping": None,
             "inlined": False}]

# The pseudo-frame dropped samples are reported under (see the module doc).
UNATTRIBUTED = "[unattributed: ring full]"
UNATTRIBUTED_FRAMES = [{"function": UNATTRIBUTED, "file": "", "line": 0, "address": 0, "mapping": None,
                        "inlined": False}]
UNATTRIBUTED_SID = -1  # stands for UNATTRIBUTED_FRAMES where a stack id goes
# Events that carry dropped weight, per kind, and the fields read from them.
UNATTRIBUTED_EVENTS = {"alloc": ("alloc.unattributed", ["time", "tid", "samples", "bytes", "count"]),
                       "cpu": ("sampler.lost", ["time", "tid", "count"]),
                       "offcpu": ("offcpu.unattributed", ["time", "tid", "samples", "duration_ns"])}
_UNATTRIBUTED_FIELDS = {name: fields for name, fields in UNATTRIBUTED_EVENTS.values()}
_FLOAT_FIELDS = {"alloc.unattributed": ("bytes", "count")}

def empty_message(profile, trace):
    """Why a profile has no samples, in one line."""
    event = profile.spec["event"]
    if not trace.segments:
        return "no readable segments"
    if not any(True for _ in trace.batches({event})):
        return "no %s events in the trace: nothing to show for --kind %s" % (event, profile.kind)
    if profile.kind == "live":
        return "no live allocations: every sampled allocation in the selection was freed"
    return "no %s events match the selection (--thread/--from/--to)" % event


# Type codes the reports accept for the fields they read: a stack field must
# hold stack ids, every other field plain integers (a damaged or foreign
# schema could declare e.g. `size` as bytes, which no arithmetic survives).
_INTEGER_TYPES = (segment.TIME, segment.UINT, segment.SINT)
_FIELD_TYPES = {"stack": (segment.STACK,)}


def select_columns(batch, fields, problems):
    """{field: column} for the named fields, or None (reported once per segment
    and type, as (path, message)) when a field is missing or has a type the
    reports cannot use, or the block does not decode."""
    names = batch.type.field_names
    floats = _FLOAT_FIELDS.get(batch.type.name, ())
    missing = [f for f in fields if f not in names]
    if missing:
        problems.add((batch.segment.path, "%s events lack field%s %s; they are skipped" % (
            batch.type.name, "s" if len(missing) > 1 else "", ", ".join(missing))))
        return None
    types = {f.name: f for f in batch.type.fields}
    wrong = [f for f in fields if types[f].type not in
             ((segment.F64,) if f in floats else _FIELD_TYPES.get(f, _INTEGER_TYPES))]
    if wrong:
        problems.add((batch.segment.path, "%s events have unusable field types (%s); they are skipped" % (
            batch.type.name, ", ".join("%s: %s" % (f, types[f].type_name) for f in wrong))))
        return None
    cols = batch.columns()
    if cols is None:
        # Columns decode lazily, so this damage shows only now (exit status 1 follows
        # from segment.bad_blocks).
        problems.add((batch.segment.path, "damaged %s block at offset %d skipped" % (
            batch.type.name, batch.offset)))
        return None
    return {f: cols[names.index(f)] for f in fields}


def unattributed_rows(batch, problems, lo=None, hi=None, tids=None):
    """(time, tid, samples, weight, count) per alloc.unattributed event of the
    batch within [lo, hi] and the thread set (weight: bytes), per
    offcpu.unattributed event (weight: duration_ns, count 0), or per
    sampler.lost event (weight and count 0: the caller weighs the samples)."""
    fields = _UNATTRIBUTED_FIELDS[batch.type.name]
    cols = select_columns(batch, fields, problems)
    if cols is None:
        return []
    columns = [cols[f] for f in fields]
    columns += [repeat(0.0)] * (5 - len(columns))
    return [r for r in zip(*columns)
            if (lo is None or lo <= r[0] <= hi) and (tids is None or r[1] in tids)]


def _point(points, key):
    p = points.get(key)
    if p is None:
        p = points[key] = Points()
    return p


def _accumulate(acc, key, samples, weight, objects, first_time):
    a = acc.get(key)
    if a is None:
        acc[key] = [samples, weight, objects, first_time]
    else:
        a[0] += samples
        a[1] += weight
        a[2] += objects
        if first_time < a[3]:
            a[3] = first_time


def _live_samples(live_filter):
    """LiveHeap.events' take for --kind live: the alloc.sample events the
    first pass of build took (its live_filter, with --endpoint's request
    windows), each held as (aggregation
    key, time, size, rate)."""
    def take(si, cols):
        lo, hi, tids, pw = live_filter[si]
        times, tidc, stacks = cols["time"], cols["tid"], cols["stack"]
        keep = [(lo is None or lo <= t <= hi) and (tids is None or tid in tids) and
                (pw is None or in_windows(pw, tid, t)) for t, tid in zip(times, tidc)]
        kept_times = list(compress(times, keep))
        blocks = zip(zip(repeat(si), compress(tidc, keep), compress(stacks, keep)), kept_times,
                     compress(cols["size"], keep), compress(cols["sample_bytes"], keep))
        return kept_times, list(compress(cols["address"], keep)), blocks
    return take


def _frame_key(f):
    m = f["mapping"]
    return (f["function"], f["file"], f["line"], f["address"], f["inlined"],
            None if m is None else (m["path"], m["build_id"], m["start"], m["end"], m["offset"]))


class _Entries:
    """The profile's entries, merged across segments: one per (process id,
    thread, stack content), so memory follows the distinct stacks of the
    trace, not segments x stacks (issue 29). A stack's content is the tuple
    of its frames' numbers, a frame numbered once by content; the frames of
    the first segment that showed it stand for all. merge=False keeps one
    entry per (segment, thread, stack id), as speedscope's live timeline
    wants (a sample per segment at the time it was first seen)."""

    def __init__(self, trace, names, procs, merge=True, point_tag=None):
        self.segs = trace.segments
        self.point_tag = point_tag
        self.names = names
        self.procs = procs
        self.merge = merge
        self.frame_numbers = {}  # frame content -> number
        self.frame_objects = []  # number -> the frame dict that stands for it
        self.thread_names = {}   # (pid, tid) -> name shown
        self.entries = {}        # key -> Entry, in first-seen order

    def _thread(self, pid, tid):
        t = self.thread_names.get((pid, tid))
        if t is None:
            tnames = self.names.get((pid, tid))
            if tnames:
                t = tnames[-1]
            elif tid == pid and pid in self.procs:  # an unnamed main thread: its exe
                t = os.path.basename(self.procs[pid].get("exe") or "")
            else:
                t = ""
            self.thread_names[(pid, tid)] = t
        return t

    def _stack(self, seg, sid):
        """(content key, frames, table): a segment's stack id as the tuple of
        its frames' numbers; frames are the segment's, table is None for the
        two stacks that have no numbers (no stack, lost samples), else the
        frame dicts by number (one per distinct frame, from whichever segment
        showed it first: a new stack costs its key, not its frames)."""
        if sid == UNATTRIBUTED_SID:
            return UNATTRIBUTED_SID, UNATTRIBUTED_FRAMES, None
        frames = seg.frames(sid)
        if not frames:
            return (), NO_STACK, None
        numbers = self.frame_numbers
        objs = self.frame_objects
        key = tuple([numbers.setdefault(k, len(numbers)) for k in map(_frame_key, frames)])
        if max(key) >= len(objs):
            for n, f in zip(key, frames):
                if n == len(objs):  # numbers are given in order: this one is new
                    objs.append(f)
        return key, frames, objs

    def fold(self, acc, points=None):
        """Adds {(segment index, tid, stack id): [samples, weight, objects,
        first monotonic time]} (one segment's, or the live replay's), and with
        points ({same key: Points, monotonic times}) each event's own values,
        for build(timeline=True)."""
        entries = self.entries
        for (si, tid, sid), (n, w, c, t) in acc.items():
            seg = self.segs[si]
            pid = seg.pid
            process = process_key(seg)
            tname = self._thread(pid, tid)
            if self.merge:
                skey, frames, table = self._stack(seg, sid)
                # The whole process key: two hosts' processes may share a pid.
                key = (process, tid, tname, skey)
                e = entries.get(key)
            else:
                key = (si, tid, sid)
                e = None
            wall = seg.wall_ns(t)
            tags = None
            if points is not None and self.point_tag is not None and sid != UNATTRIBUTED_SID:
                # Tagged on monotonic times, in the segment they were recorded in.
                tags = self.point_tag(seg, tid, points.get((si, tid, sid), Points()).time)
            if e is None:
                if self.merge:
                    e = entries[key] = Entry(skey if table is not None else frames, pid, tid, tname, wall, table,
                                             process)
                else:
                    e = entries[key] = Entry(self._stack(seg, sid)[1], pid, tid, tname, wall, process=process)
                e.samples, e.weight, e.objects = n, w, c  # as counted (int or float)
                if points is not None:
                    e.points = Points()
                    e.points.merge(points.get((si, tid, sid), Points()), seg.wall_ns(0), tags)
                continue
            if points is not None and (si, tid, sid) in points:
                e.points.merge(points[(si, tid, sid)], seg.wall_ns(0), tags)
            if wall < e.first_time:
                e.first_time = wall
            e.samples += n
            e.weight += w
            e.objects += c


def build(trace, kind, thread=None, t_from=None, t_to=None, merge=True, timeline=False, endpoint=None,
          point_tag=None):
    """The profile of one kind over a Trace, filtered by thread and time
    (merge: see _Entries). timeline: every entry also keeps each event's time
    and values (Entry.points), for exports that carry per-sample timestamps
    (OTLP); memory then grows with the events, not only the stacks.
    endpoint: a shell pattern; only samples inside the windows of requests of
    a matching endpoint on their handling thread (endpoint_windows).
    point_tag (with timeline): f(segment, tid, monotonic times) -> one int per
    time, kept as Entry.points.tag (otlp's request links); lost-sample
    entries are not tagged (their time is when the loss was counted)."""
    if getattr(trace, "fleet", False):  # --clickhouse: aggregated in the database (fleet_profiles.py)
        return trace.build_profile(kind, thread=thread, t_from=t_from, t_to=t_to, endpoint=endpoint)
    if kind not in KINDS:
        raise ProfileError("unknown profile kind %r (kinds: %s)" % (kind, ", ".join(KINDS)))
    prof = Profile(kind)
    windows = endpoint_windows(trace, endpoint) if endpoint else None
    names = thread_names(trace)
    procs = processes(trace)
    selector = select_threads(thread, names, procs)
    bounds = time_bounds(trace, t_from, t_to)
    problems = set()
    event = prof.spec["event"]
    alloc = kind in ("alloc", "live")
    weight_field = {"cpu": "period_ns", "offcpu": "duration_ns"}.get(kind)
    fields = ["time", "tid", "stack"] + (["address", "size", "sample_bytes"] if alloc else [weight_field])

    merged = _Entries(trace, names, procs, merge, point_tag if timeline else None)
    periods = Counter()
    live = {}      # process key -> {segment index: [lo, hi] of the alloc events taken}
    live_filter = {}  # segment index -> (lo, hi, tids, endpoint windows) its alloc.sample events were taken with
    span = [None, None]
    for si, seg in enumerate(trace.segments):
        pid = seg.pid
        if selector is None:
            tids = None
        elif selector[0] == "tid":
            tids = {selector[1]}
        else:
            tids = {tid for (p, tid) in selector[1] if p == pid}
            if not tids:
                continue
        lo = hi = None
        if bounds is not None:
            lo, hi = seg.monotonic_ns(bounds[0]), seg.monotonic_ns(bounds[1])
        seg_lo = seg_hi = None  # monotonic span of the events taken from this segment
        acc = {}  # this segment's (si, tid, stack id) -> [samples, weight, objects, first mono time]
        points = {} if timeline else None  # same key -> Points of its events (monotonic times)
        if kind == "live":
            # the second pass takes the same events (inside --endpoint's windows too)
            live_filter[si] = (lo, hi, tids, None if windows is None else windows.get(pid, {}))
        for batch in seg.batches:
            if kind in UNATTRIBUTED_EVENTS and batch.type.name == UNATTRIBUTED_EVENTS[kind][0]:
                if windows is not None:
                    continue  # lost samples have no thread time to match a request against
                for t, tid, n, b, c in unattributed_rows(batch, problems, lo, hi, tids):
                    # cpu: weighed by the profile's period once it is known (below).
                    _accumulate(acc, (si, tid, UNATTRIBUTED_SID), n, b, c, t)
                    if timeline:
                        _point(points, (si, tid, UNATTRIBUTED_SID)).add(t, n, b, c)
                    seg_lo = t if seg_lo is None or t < seg_lo else seg_lo
                    seg_hi = t if seg_hi is None or t > seg_hi else seg_hi
                continue
            if batch.type.name == "alloc.free" and kind == "live":
                cols = select_columns(batch, ["time", "address"], problems)
                if cols is None:
                    continue
                # Frees from any thread count; a free after --to leaves the block live at --to.
                frees = [t for t in cols["time"] if hi is None or t <= hi]
                seg_spans = live.setdefault(process_key(seg), {})
                if frees:
                    replay.widen(seg_spans, si, frees)
                continue
            if batch.type.name != event:
                continue
            cols = select_columns(batch, fields, problems)
            if cols is None:
                continue
            # Whole columns at a time: filter with masks, aggregate with Counter
            # (C speed); Python-level work is per distinct stack, not per event.
            columns = [cols[f] for f in fields]
            mask = None
            if lo is not None:
                mask = [lo <= t <= hi for t in columns[0]]
            if tids is not None:
                by_thread = [t in tids for t in columns[1]]
                mask = by_thread if mask is None else list(map(operator.and_, mask, by_thread))
            if windows is not None:
                pw = windows.get(pid, {})
                in_req = [in_windows(pw, tid, t) for t, tid in zip(columns[0], columns[1])]
                mask = in_req if mask is None else list(map(operator.and_, mask, in_req))
            if mask is not None:
                columns = [list(compress(c, mask)) for c in columns]
            times, tidc, stacks = columns[:3]
            if not times:
                continue
            t0, t1 = min(times), max(times)
            seg_lo = t0 if seg_lo is None or t0 < seg_lo else seg_lo
            seg_hi = t1 if seg_hi is None or t1 > seg_hi else seg_hi
            if kind == "live":
                periods.update(columns[5][:PERIOD_PROBE])
                replay.widen(live.setdefault(process_key(seg), {}), si, (t0, t1))
                continue
            # (tid, stack) -> time of its first occurrence: reversed, so the earliest wins.
            first = dict(zip(zip(reversed(tidc), reversed(stacks)), reversed(times)))
            if alloc:
                sizes, rates = columns[4:]
                periods.update(rates[:PERIOD_PROBE])
                for (tid, sid, size, rate), n in Counter(zip(tidc, stacks, sizes, rates)).items():
                    w, c = alloc_weight(size, rate)
                    _accumulate(acc, (si, tid, sid), n, n * w, n * c, first[(tid, sid)])
                if timeline:
                    weigh = {}
                    for t, tid, sid, size, rate in zip(times, tidc, stacks, sizes, rates):
                        wc = weigh.get((size, rate))
                        if wc is None:
                            wc = weigh[(size, rate)] = alloc_weight(size, rate)
                        _point(points, (si, tid, sid)).add(t, 1, wc[0], wc[1])
            else:
                weights = columns[3]
                if kind != "cpu" and "weight" in batch.type.field_names:
                    # A thinned switch sample stands for `weight` blocks (older
                    # segments have no such field: every block was sampled).
                    wcol = select_columns(batch, ["weight"], problems)
                    if wcol is not None:
                        mult = wcol["weight"] if mask is None else list(compress(wcol["weight"], mask))
                        if any(m != 1 for m in mult):
                            weights = [d * max(m, 1) for d, m in zip(weights, mult)]
                for (tid, sid, w), n in Counter(zip(tidc, stacks, weights)).items():
                    _accumulate(acc, (si, tid, sid), n, n * w, 0.0, first[(tid, sid)])
                if timeline:
                    for t, tid, sid, w in zip(times, tidc, stacks, weights):
                        _point(points, (si, tid, sid)).add(t, 1, w, 0.0)
        merged.fold(acc, points)  # resolved while its tables are loaded; merged across segments
        if seg_lo is not None:
            a, b = seg.wall_ns(seg_lo), seg.wall_ns(seg_hi)
            span[0] = a if span[0] is None or a < span[0] else span[0]
            span[1] = b if span[1] is None or b > span[1] else span[1]

    if kind == "live":
        # Replay each process's allocations and frees in time order (at equal
        # times an allocation goes first), a cluster of segments at a time
        # (replay.py): what is left was never freed.
        take = _live_samples(live_filter)
        for seg_spans in live.values():
            heap = replay.LiveHeap(trace.segments, seg_spans, lambda batch, f: select_columns(batch, f, problems))
            for members in heap.clusters():
                heap.replay(heap.events(members, fields, take, free_until=lambda si: live_filter[si][1]))
            acc = {}
            points = {} if timeline else None
            for key, t, size, rate in heap.held.values():
                w, c = alloc_weight(size, rate)
                _accumulate(acc, key, 1, w, c, t)
                if timeline:
                    _point(points, key).add(t, 1, w, c)
            merged.fold(acc, points)

    # Order by first appearance (wall clock, so processes recorded side by
    # side interleave correctly).
    entries = list(merged.entries.values())
    period = cpu_period(entries) if kind == "cpu" else (periods.most_common(1)[0][0] if periods else 0)
    if kind == "cpu":
        for e in entries:
            if e.frames is UNATTRIBUTED_FRAMES:  # lost samples weigh the profile's period
                e.weight = e.samples * period
                if e.points is not None:
                    e.points.weight = array("d", (n * period for n in e.points.samples))
    entries.sort(key=lambda e: e.first_time)
    prof.entries = entries
    prof.period = period
    prof.start_wall_ns, prof.end_wall_ns = span[0] or 0, span[1] or 0
    if procs:
        prof.main_path = next(iter(procs.values())).get("exe") or None
    prof.problems = sorted(problems)
    return prof
