"""chrome_trace: the Chrome trace-event / Perfetto JSON timeline.

Generic by design: it knows event types only through their schema field
names, so event types added later (sockets, requests, ...) show up with no
code here.

* every process is a process track named after its service/exe and pid,
  every thread a thread track named from thread.start/thread.name;
* an event with a `tid` field goes on that thread's track, any other on its
  process (a process-scoped instant);
* an event with a `duration_ns` field is a complete ("X") slice — off-CPU
  intervals, socket operations, requests;
* cpu.sample is an instant named after the leaf function (instants cannot
  break the nesting of the slices on the same track); other events are
  instants named after their type;
* stacks go into args as lists of frame labels, leaf first.

Timestamps are microseconds since the earliest event (wall clock, so
processes recorded on different machines line up); the origin is kept in
otherData.origin_realtime_ns.

Memory: the timeline lists every event of the trace, sorted by time, so the
document grows with the trace. Events are kept as their JSON text (not
dicts) and sorted by spill_sort.py: full runs go to anonymous temporary
files (next to the output) and are merged as the document is written, so
memory holds one run, whatever the trace's length (docs/LIMITS.md).
"""
import json
import math

from .spill_sort import SpillSort

_COMPACT = (",", ":")

# String fields that make an event's name more telling than its bare type.
_NAME_FIELDS = ("op", "method", "reason", "name", "kind", "path", "endpoint")


class ChromeTrace:
    def __init__(self, spill_dir=None, origin=None):
        """origin: the wall time of ts 0 (default: the earliest event added;
        fleet_timeline gives the selection's start when it adds a window of it)."""
        # (wall_ns, -duration, seq, event JSON without "ts"): unique keys, so the JSON text never decides.
        self._events = SpillSort(3, spill_dir, prefix="flightrec-chrome-")
        self._origin = origin
        self._fixed = origin is not None
        self._count = 0
        self._threads = {}  # (pid, tid) -> name
        self._processes = {}
        self._seq = 0

    def process(self, pid, name):
        self._processes[pid] = name

    def thread(self, pid, tid, name):
        if name:
            self._threads[(pid, tid)] = name
        else:
            self._threads.setdefault((pid, tid), "")

    def add(self, pid, type_name, wall_ns, fields, stack_labels=None):
        """fields: {name: value} with strings resolved, the stack (if any) given
        separately as leaf-first labels. Field `time` is ignored (wall_ns wins)."""
        args = {k: v for k, v in fields.items() if k != "time"}
        for k, v in args.items():
            if isinstance(v, (bytes, bytearray)):
                args[k] = bytes(v).hex()
            elif isinstance(v, float) and not math.isfinite(v):
                args[k] = str(v)  # NaN/inf are not JSON
        if stack_labels is not None:
            args["stack"] = stack_labels
        ev = {"pid": pid, "cat": type_name.split(".")[0]}
        tid = fields.get("tid")
        if isinstance(tid, int) and tid > 0:
            ev["tid"] = tid
            self.thread(pid, tid, None)
        else:
            ev["tid"] = pid
        if type_name == "cpu.sample" and stack_labels:
            ev["name"] = stack_labels[0]
        else:
            ev["name"] = type_name
            for f in _NAME_FIELDS:
                v = fields.get(f)
                if isinstance(v, str) and v:
                    ev["name"] = "%s %s" % (type_name, v)
                    break
        dur = fields.get("duration_ns")
        if isinstance(dur, int) and not isinstance(dur, bool) and dur >= 0:
            ev["ph"] = "X"
            ev["dur"] = dur / 1000.0
        else:
            ev["ph"] = "i"
            ev["s"] = "t" if "tid" in fields else "p"
        ev["args"] = args
        # Longer slices first at equal start so parents precede their children.
        self._events.add((wall_ns, -(dur if ev["ph"] == "X" else 0), self._seq,
                          json.dumps(ev, separators=_COMPACT)))
        self._seq += 1
        self._count += 1
        if not self._fixed and (self._origin is None or wall_ns < self._origin):
            self._origin = wall_ns

    def metadata(self):
        """The metadata ("M") events: process and thread names, thread order."""
        out = []
        for pid, name in sorted(self._processes.items()):
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": pid,
                        "args": {"name": name}})
        for (pid, tid), name in sorted(self._threads.items()):
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                        "args": {"name": name or ("main" if tid == pid else "thread %d" % tid)}})
            # The main thread first, then threads by tid.
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                        "args": {"sort_index": 0 if tid == pid else tid}})
        return out

    def event_texts(self):
        """Every other event's JSON text, in time order, once (the spill is
        closed at the end): what write() puts into traceEvents, and what the
        viewer reads a line at a time."""
        origin = self._origin if self._origin is not None else 0
        try:
            # "ts" is the last key of each event, as json.dump would write it had it been set last.
            for wall_ns, _, _, text in self._events.sorted():
                yield text[:-1] + ',"ts":' + float.__repr__((wall_ns - origin) / 1000.0) + "}"
        finally:
            self._events.close()

    def write(self, fp):
        """Writes the JSON document; returns the number of non-metadata events.
        The text is what json.dump of the whole document would write."""
        origin = self._origin if self._origin is not None else 0
        fp.write('{"traceEvents":[')
        first = True
        for item in self.metadata():
            fp.write(("" if first else ",") + json.dumps(item, separators=_COMPACT))
            first = False
        for text in self.event_texts():
            fp.write(("" if first else ",") + text)
            first = False
        fp.write('],"displayTimeUnit":"ms","otherData":' + json.dumps(
            {"origin_realtime_ns": origin, "generator": "flightrec-dump"}, separators=_COMPACT) + "}")
        fp.write("\n")
        return self._count
