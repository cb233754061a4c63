"""otlp.request: flightrec profiles -> one OTLP ExportProfilesServiceRequest
(protobuf bytes), hand-encoded (stdlib only) after profiles_v1development.proto
in this folder (opentelemetry-proto v1.11.0, profiles/v1development, Alpha).

Layout of what is written:

    resource_profiles[]   one per process (host, service, pid), in first-seen order
      resource.attributes service.name, host.name, process.pid,
                          process.parent_pid, process.executable.name,
                          process.executable.path (what process.start told)
      scope_profiles[0]   scope.name "flightrec"
        profiles[]        one per sample type of each kind asked for
                          (profiles.KINDS / SAMPLE_TYPES below)
          samples[]       one per distinct (stack, thread, request): stack_index,
                          attribute_indices (thread.id, thread.name, and
                          flightrec.request.endpoint when the sample was
                          taken in a server request with an endpoint),
                          link_index (the request's W3C trace id and the
                          span that called it, when its traceparent was
                          recorded; else 0), values[] and
                          timestamps_unix_nano[]: one per event (or one
                          aggregated value with timestamps=False)
    dictionary            shared by all: mapping_table (build-id as the
                          attribute process.executable.build_id.gnu),
                          location_table (lines innermost first: inline
                          frames), function_table, link_table, string_table,
                          attribute_table, stack_table; entry 0 of each is
                          the zero value, as the .proto requires.

Values are integers: estimated allocation bytes and counts (floats in
profiles.py) are rounded cumulatively over a profile, so a profile's total
is the rounded total every other report shows (top --json)."""
import hashlib
import os
import re

from .. import pprof_proto, profiles
from ..pprof_proto import _int, _msg, _packed, _varint
from ..trace import batch_events

# Per kind, the sample types written (one OTLP profile each): (type, unit,
# which Entry/point value: 0 samples, 1 weight, 2 objects).
SAMPLE_TYPES = {
    "cpu": [("samples", "count", 0), ("cpu", "nanoseconds", 1)],
    "offcpu": [("offcpu", "nanoseconds", 1)],
    "alloc": [("alloc_space", "bytes", 1), ("alloc_objects", "count", 2)],
    "live": [("inuse_space", "bytes", 1)],
}
SCOPE_NAME = "flightrec"
BUILD_ID_KEY = "process.executable.build_id.gnu"
ENDPOINT_KEY = "flightrec.request.endpoint"
FRAME_TYPE_KEY = "profile.frame.type"

_I64 = 1  # wire type of fixed64


def _fixed64s(buf, field, values):
    """Packed repeated fixed64."""
    if values:
        inner = b"".join(int(v).to_bytes(8, "little") for v in values)
        _msg(buf, field, inner)


def _fixed64(buf, field, v):
    if v:
        _varint(buf, (field << 3) | _I64)
        buf += int(v).to_bytes(8, "little")


def _str(buf, field, text):
    if text:
        _msg(buf, field, text.encode("utf-8", "replace"))


def _any_value(value):
    """common.v1.AnyValue: string_value (1) or int_value (3)."""
    b = bytearray()
    if isinstance(value, str):
        _msg(b, 1, value.encode("utf-8", "replace"))  # written even when empty: it is a oneof
    else:
        _varint(b, (3 << 3) | 0)
        _varint(b, int(value))
    return b


class _Rounder:
    """Cumulative rounding: the integers handed out add up to the rounded
    sum of the floats handed in."""

    def __init__(self):
        self.total = 0.0
        self.given = 0

    def __call__(self, v):
        self.total += v
        n = int(round(self.total)) - self.given
        self.given += n
        return n


class RequestBuilder:
    """Collects profiles (per process and kind), interns the shared tables,
    encodes once."""

    def __init__(self, timestamps=True, links=None):
        """links: otlp.request_links.RequestLinks whose tags the profiles'
        points carry (build(point_tag=links)), or None."""
        self.timestamps = timestamps
        self.request_links = links
        self._links = {None: 0}        # (trace id hex, span id hex) -> index
        self._link_list = [None]
        self.linked_samples = 0        # samples (OTLP) with a link
        self._strings = {"": 0}
        self._attributes = {None: 0}   # (key, value) -> index
        self._mappings = {None: 0}     # key -> index
        self._mapping_list = [None]
        self._functions = {None: 0}
        self._function_list = [None]
        self._locations = {None: 0}
        self._location_list = [None]
        self._stacks = {(): 0}
        self._stack_list = [()]
        self._processes = {}           # process key -> {"attrs": [...], "profiles": [bytes]}
        self.profiles_written = 0
        self.samples_written = 0

    # ---- dictionary
    def _s(self, text):
        text = text or ""
        i = self._strings.get(text)
        if i is None:
            i = self._strings[text] = len(self._strings)
        return i

    def _attr(self, key, value):
        k = (key, value)
        i = self._attributes.get(k)
        if i is None:
            self._s(key)
            i = self._attributes[k] = len(self._attributes)
        return i

    def _mapping(self, m):
        if not m:
            return 0
        key = (int(m.get("start") or 0), int(m.get("end") or 0), int(m.get("offset") or 0),
               m.get("path") or "", m.get("build_id") or "")
        i = self._mappings.get(key)
        if i is None:
            i = self._mappings[key] = len(self._mapping_list)
            attrs = (self._attr(BUILD_ID_KEY, key[4]),) if key[4] else ()
            self._mapping_list.append((key[0], key[1], key[2], self._s(key[3]), attrs))
        return i

    def _function(self, name, file):
        key = (name, file)
        i = self._functions.get(key)
        if i is None:
            i = self._functions[key] = len(self._function_list)
            self._function_list.append((self._s(name), self._s(file)))
        return i

    def _location(self, group):
        outer = group[-1]
        mapping = self._mapping(outer.get("mapping"))
        lines = tuple((self._function(f["function"], f.get("file") or ""), int(f.get("line") or 0))
                      for f in group if f.get("function"))
        # Frames the recorder made up ([no stack], [unattributed: ring full])
        # have no mapping and no address: they are no native code.
        attrs = (self._attr(FRAME_TYPE_KEY, "native"),) if mapping or outer.get("address") else ()
        key = (mapping, int(outer.get("address") or 0), lines, attrs)
        i = self._locations.get(key)
        if i is None:
            i = self._locations[key] = len(self._location_list)
            self._location_list.append(key)
        return i

    def _stack(self, frames):
        key = tuple(self._location(g) for g in pprof_proto.pc_groups(frames))
        i = self._stacks.get(key)
        if i is None:
            i = self._stacks[key] = len(self._stack_list)
            self._stack_list.append(key)
        return i

    def _link(self, trace_id, span_id):
        if not trace_id:
            return 0
        k = (trace_id, span_id)
        i = self._links.get(k)
        if i is None:
            i = self._links[k] = len(self._link_list)
            self._link_list.append(k)
        return i

    def _request(self, tag):
        """(attribute indices, link index) of a point tag."""
        if tag <= 0 or self.request_links is None:
            return (), 0
        endpoint, trace_id, span_id = self.request_links.links[tag - 1]
        return ((self._attr(ENDPOINT_KEY, endpoint),) if endpoint else ()), self._link(trace_id, span_id)

    # ---- profiles
    def _process(self, key, procs):
        p = self._processes.get(key)
        if p is None:
            host, service, pid = key
            start = procs.get(key) or {}
            exe = start.get("exe") or ""
            attrs = [("service.name", service or os.path.basename(exe) or "unknown_service"),
                     ("host.name", host or ""), ("process.pid", int(pid or 0))]
            if start.get("ppid"):
                attrs.append(("process.parent_pid", int(start["ppid"])))
            if exe:
                attrs.append(("process.executable.name", os.path.basename(exe)))
                attrs.append(("process.executable.path", exe))
                attrs += runtime_of(exe)
            p = self._processes[key] = {"attrs": [a for a in attrs if a[1] != ""], "profiles": []}
        return p

    def add(self, profile, procs):
        """Adds one profiles.Profile (built with timeline=True unless
        timestamps=False): one OTLP profile per sample type of its kind and
        process. procs: {(host, service, pid): process.start event dict}."""
        by_process = {}
        for e in profile.entries:
            by_process.setdefault(e.process, []).append(e)
        for key, entries in by_process.items():
            proc = self._process(key, procs)
            rows = []
            for e in entries:
                attrs = [self._attr("thread.id", int(e.tid))]
                if e.thread:
                    attrs.append(self._attr("thread.name", e.thread))
                stack = self._stack(e.frames)
                pts = e.points
                if pts is None or pts.tag is None or not any(pts.tag):
                    rows.append((stack, tuple(attrs), 0, e, None))
                    continue
                # One OTLP sample per request the entry's events fell in.
                groups = {}
                for i, tag in enumerate(pts.tag):
                    groups.setdefault(max(tag, 0), []).append(i)
                for tag, indices in groups.items():
                    more, link = self._request(tag)
                    rows.append((stack, tuple(attrs) + more, link, e, indices))
            for stype, unit, which in SAMPLE_TYPES[profile.kind]:
                proc["profiles"].append(self._profile(profile, key, stype, unit, which, rows))

    def _profile(self, profile, key, stype, unit, which, rows):
        spec = profile.spec
        rnd = _Rounder()
        samples = bytearray()
        n_samples = 0
        for stack, attrs, link, e, indices in rows:
            s = bytearray()
            _int(s, 1, stack)
            _packed(s, 2, attrs)
            _int(s, 3, link)
            pts = e.points
            if pts is not None and (self.timestamps or indices is not None):
                column = (pts.samples, pts.weight, pts.objects)[which]
                if indices is None:
                    indices = range(len(pts.time))
                order = sorted(indices, key=pts.time.__getitem__)
                if self.timestamps:
                    _packed(s, 4, [rnd(column[i]) for i in order])
                    _fixed64s(s, 5, [pts.time[i] for i in order])
                else:
                    _packed(s, 4, [rnd(sum(column[i] for i in order))])
            else:
                total = (e.samples, e.weight, e.objects)[which]
                _packed(s, 4, [rnd(total)])
            _msg(samples, 2, s)
            n_samples += 1
            if link:
                self.linked_samples += 1
        out = bytearray()
        vt = bytearray()
        _int(vt, 1, self._s(stype))
        _int(vt, 2, self._s(unit))
        _msg(out, 1, vt)
        out += samples
        start, end = profile.start_wall_ns, profile.end_wall_ns
        _fixed64(out, 3, start)
        # Timestamps fall in [time, time + duration): the last event's is included.
        _int(out, 4, max(0, end - start) + (1 if end else 0))
        pt = bytearray()
        _int(pt, 1, self._s(spec["period_type"][0]))
        _int(pt, 2, self._s(spec["period_type"][1]))
        _msg(out, 5, pt)
        _int(out, 6, int(profile.period))
        # A stable id: the same profile exported twice is the same profile.
        ident = "%s|%s|%s|%s|%s|%d|%d" % (key + (profile.kind, stype, start, end))
        _msg(out, 7, hashlib.sha256(ident.encode("utf-8", "replace")).digest()[:16])
        self.profiles_written += 1
        self.samples_written += n_samples
        return bytes(out)

    # ---- encoding
    def _dictionary(self):
        d = bytearray()
        for entry in self._mapping_list:
            m = bytearray()
            if entry is not None:
                start, end, offset, name, attrs = entry
                _int(m, 1, start)
                _int(m, 2, end)
                _int(m, 3, offset)
                _int(m, 4, name)
                _packed(m, 5, attrs)
            _msg(d, 1, m)
        for entry in self._location_list:
            loc = bytearray()
            if entry is not None:
                mapping, address, lines, attrs = entry
                _int(loc, 1, mapping)
                _int(loc, 2, address)
                for fn, line in lines:
                    ln = bytearray()
                    _int(ln, 1, fn)
                    _int(ln, 2, line)
                    _msg(loc, 3, ln)
                _packed(loc, 4, attrs)
            _msg(d, 2, loc)
        for entry in self._function_list:
            fn = bytearray()
            if entry is not None:
                name, file = entry
                _int(fn, 1, name)
                _int(fn, 2, name)  # no mangled names are recorded: the demangled one
                _int(fn, 3, file)
            _msg(d, 3, fn)
        # link_table[0]: the zero link, with ids of the lengths strict codecs expect.
        for entry in self._link_list:
            trace_id, span_id = entry if entry is not None else ("", "")
            link = bytearray()
            _msg(link, 1, bytes.fromhex(trace_id) if trace_id else bytes(16))
            _msg(link, 2, bytes.fromhex(span_id) if span_id else bytes(8))
            _msg(d, 4, link)
        # Attributes next, then strings: attribute keys are interned as they go.
        attrs = bytearray()
        for entry in sorted(self._attributes.items(), key=lambda kv: kv[1]):
            kv = bytearray()
            if entry[0] is not None:
                key, value = entry[0]
                _int(kv, 1, self._s(key))
                _msg(kv, 2, _any_value(value))
            _msg(attrs, 6, kv)
        for text, _ in sorted(self._strings.items(), key=lambda kv: kv[1]):
            _msg(d, 5, text.encode("utf-8", "replace"))  # entry 0 ("") included
        d += attrs
        for locs in self._stack_list:
            st = bytearray()
            _packed(st, 1, locs)
            _msg(d, 7, st)
        return d

    def encode(self):
        out = bytearray()
        for proc in self._processes.values():
            rp = bytearray()
            res = bytearray()
            for key, value in proc["attrs"]:
                kv = bytearray()
                _str(kv, 1, key)
                _msg(kv, 2, _any_value(value))
                _msg(res, 1, kv)
            _msg(rp, 1, res)
            sp = bytearray()
            scope = bytearray()
            _str(scope, 1, SCOPE_NAME)
            _msg(sp, 1, scope)
            for prof in proc["profiles"]:
                _msg(sp, 2, prof)
            _msg(rp, 2, sp)
            _msg(out, 1, rp)
        _msg(out, 2, self._dictionary())
        return bytes(out)


# process.runtime.* where the executable says which runtime it is: an
# interpreter's own binary (python3.11, node). Native programs have none.
_RUNTIMES = ((re.compile(r"^python(\d+(?:\.\d+)?)?$"), "CPython"),
             (re.compile(r"^(?:node|nodejs)$"), "node"),
             (re.compile(r"^(?:ruby)(\d+(?:\.\d+)?)?$"), "ruby"),
             (re.compile(r"^(?:java)$"), "java"))


def runtime_of(exe):
    """[(key, value)]: process.runtime.name (and .version when the name holds
    it) for an interpreter's executable, else []."""
    base = os.path.basename(exe)
    for pattern, name in _RUNTIMES:
        m = pattern.match(base)
        if m:
            out = [("process.runtime.name", name)]
            if m.groups() and m.group(1):
                out.append(("process.runtime.version", m.group(1)))
            return out
    return []


def process_starts(trace):
    """{(host, service, pid): process.start event} over a trace's segments
    (each segment's own, so processes of two hosts that share a pid stay apart)."""
    out = {}
    for seg in trace.segments:
        key = profiles.process_key(seg)
        if key in out:
            continue
        for batch in seg.batches:
            if batch.type.name == "process.start":
                for e in batch_events(batch) or ():
                    out[key] = e
                    break
            if key in out:
                break
    return out
