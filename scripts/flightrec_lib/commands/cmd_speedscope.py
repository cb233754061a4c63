"""speedscope: export a profile as a speedscope file (open it at
https://www.speedscope.app or with the `speedscope` npm package's viewer),
one profile per thread: CPU and allocation samples as sampled profiles in
time order (weights: nanoseconds of CPU, estimated bytes), off-CPU blocks
as evented profiles (each block from its start to its end), the live heap
as a sampled profile of what was never freed. The thread with the most
weight is shown first. Format details: speedscope.py."""
import itertools
import operator
import os
import tempfile
from array import array

from .. import cli, profile_cli, profiles, report_scope, speedscope
from ..spill_sort import SpillSort


def register(subparsers):
    p = subparsers.add_parser("speedscope", help="export a profile as a speedscope file, one profile per thread")
    p.add_argument("-o", "--output", required=True, metavar="FILE.json", help="where to write it")
    profile_cli.add_arguments(p)
    p.set_defaults(func=run)


UNITS = {"cpu": "nanoseconds", "offcpu": "nanoseconds", "alloc": "bytes", "live": "bytes"}
WEIGHT_FIELDS = {"cpu": ["period_ns"], "offcpu": ["duration_ns"], "alloc": ["size", "sample_bytes"]}


def _thread_name(names, procs, pid, tid):
    known = names.get((pid, tid))
    if known:
        return known[-1]
    if tid == pid and pid in procs:
        return os.path.basename(procs[pid].get("exe") or "") or "main"
    return "thread"


def _trace_start(trace):
    starts = []
    for seg in trace.segments:
        lo, _ = seg.time_range()
        if lo is not None:
            starts.append(seg.wall_ns(lo))
    return min(starts) if starts else 0


class _Column:
    """A column of numbers: an array while its values fit one, else a list
    (a value past 64 bits, or a float among ints), so each keeps its type."""
    __slots__ = ("values",)

    def __init__(self, typecode):
        self.values = array(typecode)

    def append(self, value):
        try:
            self.values.append(value)
        except (OverflowError, TypeError):
            self.values = list(self.values)
            self.values.append(value)


class _Samples:
    """One thread's samples as columns: start (ns from the trace start),
    stack (index into the trace's distinct stacks), weight."""
    __slots__ = ("starts", "stacks", "weights")

    def __init__(self, float_weights):
        self.starts, self.stacks = _Column("q"), array("L")
        self.weights = _Column("d" if float_weights else "q")


class _Thread(_Samples):
    """One thread's samples while they are held (_Samples), and what its
    profile header needs once they are spilled: the first and last start
    (the last one's weight: the end of a sampled profile) and the latest end
    (an evented one's)."""
    __slots__ = ("first", "last", "last_weight", "max_end", "float_weights")

    def __init__(self, t, w, float_weights):
        _Samples.__init__(self, float_weights)
        self.float_weights = float_weights
        self.first = self.last = t
        self.last_weight = w
        self.max_end = t + w

    def clear(self):
        _Samples.__init__(self, self.float_weights)

    def add(self, t, w):
        if t < self.first:
            self.first = t
        if t >= self.last:  # equal starts keep recorded order: the later one is last
            self.last, self.last_weight = t, w
        if t + w > self.max_end:
            self.max_end = t + w


# Samples held as columns (~24 bytes each) before they all go to the spill.
SPILL_SAMPLES = 1 << 20


def per_thread(trace, kind, spill, thread=None, t_from=None, t_to=None, spill_at=SPILL_SAMPLES, endpoint=None):
    """({(pid, tid): _Thread}, distinct stacks (frame keys, leaf first), thread
    names, processes, problems). The samples stay in their threads' columns
    while there are fewer than spill_at of them; past that, every sample
    goes to spill (a spill_sort.SpillSort of (pid, tid, start, seq, "stack
    weight")), and the threads keep only what the profile headers need.
    Memory: a few numbers per sample up to spill_at, each distinct stack once
    (keys: what the file shows of a frame), not frames or events; a
    segment's tables are needed only while it is read."""
    names, procs = report_scope.thread_names(trace), report_scope.processes(trace)
    selector = report_scope.select_threads(thread, names, procs)
    bounds = report_scope.time_bounds(trace, t_from, t_to)
    windows = report_scope.endpoint_windows(trace, endpoint) if endpoint else None
    t0 = _trace_start(trace)
    problems = set()
    threads = {}
    stacks, stack_ids = [], {}
    event = profiles.KINDS[kind]["event"]
    fields = ["time", "tid", "stack"] + WEIGHT_FIELDS[kind]
    seq = held = 0
    for seg in trace.segments:
        pid = seg.pid
        shift = seg.wall_ns(0) - t0  # monotonic -> ns from the trace start
        index_of = {}  # stack id -> index into stacks
        for batch in seg.batches:
            if batch.type.name != event:
                continue
            cols = profiles.select_columns(batch, fields, problems)
            if cols is None:
                continue
            for row in zip(*(cols[f] for f in fields)):
                t, tid, sid = row[0], row[1], row[2]
                if selector is not None:
                    if selector[0] == "tid" and tid != selector[1]:
                        continue
                    if selector[0] == "keys" and (pid, tid) not in selector[1]:
                        continue
                if bounds is not None and not bounds[0] <= seg.wall_ns(t) <= bounds[1]:
                    continue
                if windows is not None and not report_scope.in_windows(windows.get(pid, {}), tid, t):
                    continue
                si = index_of.get(sid)
                if si is None:
                    keys = speedscope.frame_keys(
                        profiles.trim_bootstrap(seg.frames(sid) or []) or profiles.NO_STACK)
                    si = stack_ids.get(keys)
                    if si is None:
                        si = stack_ids[keys] = len(stacks)
                        stacks.append(keys)
                    index_of[sid] = si
                if kind == "alloc":
                    weight = profiles.alloc_weight(row[3], row[4])[0]
                else:
                    weight = row[3]
                start = t + shift
                th = threads.get((pid, tid))
                if th is None:
                    th = threads[(pid, tid)] = _Thread(start, weight, kind == "alloc")
                else:
                    th.add(start, weight)
                th.starts.append(start)
                th.stacks.append(si)
                th.weights.append(weight)
                held += 1
                if held >= spill_at:
                    seq = _spill(threads, spill, seq)
                    held = 0
    if spill.count:
        _spill(threads, spill, seq)
    return threads, stacks, names, procs, sorted(problems)


def _spill(threads, spill, seq):
    """Moves the samples the threads hold to spill, in recorded order."""
    for (pid, tid), th in threads.items():
        for start, si, weight in zip(th.starts.values, th.stacks, th.weights.values):
            spill.add((pid, tid, start, seq, "%d %r" % (si, weight)))
            seq += 1
        th.clear()
    return seq


def _number(text):
    """A spilled weight as it was: an int, or a float (repr)."""
    return int(text) if text.lstrip("-").isdigit() else float(text)


def build(trace, kind, doc, thread=None, t_from=None, t_to=None, spill_at=SPILL_SAMPLES, endpoint=None):
    """Adds the profiles to doc (a speedscope.Document); returns the problems
    met on the way."""
    unit = UNITS[kind]
    if kind == "live":
        profile = profiles.build(trace, kind, thread=thread, t_from=t_from, t_to=t_to,
                                 merge=False, endpoint=endpoint)  # one sample per segment and stack, as before
        t0 = _trace_start(trace)
        threads = {}
        for e in profile.entries:
            threads.setdefault((e.pid, e.tid, e.thread), []).append(
                (e.first_time - t0, profiles.trim_bootstrap(e.frames), e.weight))
        for (pid, tid, tname), samples in sorted(threads.items(), key=lambda kv: kv[0][:2]):
            doc.sampled("%s (pid %d, tid %d): live heap" % (tname or "thread", pid, tid), unit, samples)
        return profile.problems
    spill = SpillSort(4, prefix="flightrec-speedscope-")
    threads, stacks, names, procs, problems = per_thread(trace, kind, spill, thread, t_from, t_to, spill_at,
                                                         endpoint)
    title = profiles.KINDS[kind]["title"]

    def label(pid, tid):
        return "%s (pid %d, tid %d): %s" % (_thread_name(names, procs, pid, tid), pid, tid, title)

    if not spill.count:  # every sample held: each thread's sorted in memory
        for (pid, tid) in sorted(threads):
            s = threads.pop((pid, tid))  # written: its columns can go
            starts, weights = s.starts.values, s.weights.values
            order = sorted(range(len(starts)), key=starts.__getitem__)  # stable: recorded order on ties
            if kind == "offcpu":
                doc.evented(label(pid, tid), unit,
                            [(starts[i], starts[i] + weights[i], stacks[s.stacks[i]]) for i in order])
            else:
                doc.sampled_columns(label(pid, tid), unit, starts, [stacks[i] for i in s.stacks], weights, order)
        return problems
    # The spill gives every thread's samples together, threads by (pid, tid),
    # each in time order (recorded order on ties).
    for (pid, tid), items in itertools.groupby(spill.sorted(), key=_THREAD):
        th = threads[(pid, tid)]
        rows = _sample_rows(items)
        if kind == "offcpu":
            doc.evented_stream(label(pid, tid), unit, th.first, max(th.last, th.max_end),
                               ((t, t + w, stacks[si]) for t, si, w in rows))
        else:
            end = max(th.first, th.last + (th.last_weight if unit == "nanoseconds" else 0))
            doc.sampled_stream(label(pid, tid), unit, th.first, end, ((stacks[si], w) for _, si, w in rows))
    spill.close()
    return problems


_THREAD = operator.itemgetter(0, 1)


def _sample_rows(items):
    """(start, stack index, weight) of spilled samples."""
    for _, _, start, _, text in items:
        si, w = text.split(" ")
        yield start, int(si), _number(w)


def run(args):
    trace = cli.open_trace(args.paths)
    out_dir = os.path.dirname(os.path.abspath(args.output))
    try:
        spill = tempfile.TemporaryFile("w+", encoding="utf-8", dir=out_dir, prefix=".flightrec-speedscope-")
    except OSError:
        spill = tempfile.TemporaryFile("w+", encoding="utf-8", prefix="flightrec-speedscope-")
    with spill:
        doc = speedscope.Document("flightrec %s: %s" % (args.kind, " ".join(args.paths)), spill)
        try:
            problems = build(trace, args.kind, doc, thread=args.thread, t_from=args.t_from, t_to=args.t_to,
                             endpoint=args.endpoint)
        except profiles.ProfileError as e:
            raise cli.UsageError(str(e)) from None
        for path, message in problems:
            cli.err_file(path, message)
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                doc.write(f)
        except OSError as e:
            raise cli.UsageError("cannot write %s: %s" % (args.output, e.strerror or e)) from None
    n = doc.profile_count
    if not n:
        cli.err("no %s samples to export; wrote an empty speedscope file to %s" % (
            profiles.KINDS[args.kind]["event"], args.output))
    else:
        cli.err("wrote %s: %d thread profile%s, %d frames" % (
            os.path.basename(args.output), n, "" if n == 1 else "s", len(doc.frames)))
    return cli.exit_status(trace)
