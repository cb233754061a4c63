"""pprof_proto: a hand-written encoder for pprof's profile.proto (stdlib only).

The message layout follows github.com/google/pprof/proto/profile.proto:

    Profile  1 sample_type[] ValueType  2 sample[]  3 mapping[]  4 location[]
             5 function[]  6 string_table[]  9 time_nanos  10 duration_nanos
             11 period_type ValueType  12 period  13 comment[]  14 default_sample_type
    ValueType 1 type(str idx) 2 unit(str idx)
    Sample   1 location_id[] (packed, leaf first)  2 value[] (packed)  3 label[]
    Label    1 key  2 str  3 num  4 num_unit
    Mapping  1 id 2 memory_start 3 memory_limit 4 file_offset 5 filename 6 build_id
             7 has_functions 8 has_filenames 9 has_line_numbers 10 has_inline_frames
    Location 1 id 2 mapping_id 3 address 4 line[]
    Line     1 function_id 2 line
    Function 1 id 2 name 3 system_name 4 filename 5 start_line

Stacks come in as flat, leaf-first lists of frame dicts (see profiles.py):
`function`, `file`, `line`, `address`, `mapping` (dict with path, build_id,
start, end, offset; or None) and `inlined` (True when the frame was inlined
into the next frame of the list, i.e. both belong to one pc). Consecutive
frames up to one with `inlined` false form one pprof Location whose Line
entries are innermost first, as pprof expects.
"""
import gzip

_VARINT, _LEN = 0, 2


def _varint(buf, v):
    # int64 fields carry negative values as 64-bit two's complement.
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        buf.append((v & 0x7F) | 0x80)
        v >>= 7
    buf.append(v)


def _int(buf, field, v):
    """Scalar field; proto3 omits zero values."""
    if v:
        _varint(buf, (field << 3) | _VARINT)
        _varint(buf, v)


def _msg(buf, field, payload):
    _varint(buf, (field << 3) | _LEN)
    _varint(buf, len(payload))
    buf += payload


def _packed(buf, field, values):
    if values:
        inner = bytearray()
        for v in values:
            _varint(inner, v)
        _msg(buf, field, inner)


def pc_groups(frames):
    """The frames of a leaf-first list grouped by pc: each group is one
    physical frame's inlined frames, innermost first, then the frame itself
    (one pprof or OTLP Location)."""
    group = []
    for f in frames:
        group.append(f)
        if not f.get("inlined"):
            yield group
            group = []
    if group:  # a trailing inlined frame with no physical caller: keep it anyway
        yield group


class ProfileBuilder:
    """Collects samples, interns mappings/functions/locations, encodes once."""

    def __init__(self, sample_types, period_type, period, default_sample_type=None):
        # sample_types: [(type, unit)], period_type: (type, unit).
        self._strings = {"": 0}
        self._sample_types = [(self._s(t), self._s(u)) for t, u in sample_types]
        self._period_type = (self._s(period_type[0]), self._s(period_type[1]))
        self._period = int(period)
        self._default = self._s(default_sample_type) if default_sample_type else 0
        self._mappings = {}    # key -> index (ids are assigned at encode time)
        self._mapping_list = []
        self._functions = {}   # (name, file) -> id
        self._locations = {}   # (mapping key, address, lines) -> id
        self._location_list = []
        self._samples = {}     # (location ids, labels) -> [values]
        self._nvalues = len(sample_types)

    def _s(self, text):
        text = text or ""
        idx = self._strings.get(text)
        if idx is None:
            idx = self._strings[text] = len(self._strings)
        return idx

    def _mapping(self, m):
        if not m:
            return None
        key = (int(m.get("start") or 0), int(m.get("end") or 0), int(m.get("offset") or 0),
               m.get("path") or "", m.get("build_id") or "")
        if key not in self._mappings:
            self._mappings[key] = len(self._mapping_list)
            self._mapping_list.append(key)
        return key

    def _function(self, name, file):
        key = (name, file)
        fid = self._functions.get(key)
        if fid is None:
            fid = self._functions[key] = len(self._functions) + 1
        return fid

    def _location(self, group):
        """group: the frames of one pc, innermost first."""
        outer = group[-1]
        mkey = self._mapping(outer.get("mapping"))
        lines = tuple((self._function(f["function"], f.get("file") or ""), int(f.get("line") or 0))
                      for f in group if f.get("function"))
        key = (mkey, int(outer.get("address") or 0), lines)
        lid = self._locations.get(key)
        if lid is None:
            lid = self._locations[key] = len(self._location_list) + 1
            self._location_list.append(key)
        return lid

    def location_ids(self, frames):
        """Leaf-first location ids for a leaf-first frame list."""
        return tuple(self._location(group) for group in pc_groups(frames))

    def add(self, frames, values, labels=None):
        """Adds one (possibly pre-aggregated) sample. labels: {key: str or int}."""
        if len(values) != self._nvalues:
            raise ValueError("sample has %d values, profile has %d sample types"
                             % (len(values), self._nvalues))
        lab = tuple(sorted((labels or {}).items()))
        key = (self.location_ids(frames), lab)
        acc = self._samples.get(key)
        if acc is None:
            self._samples[key] = list(values)
        else:
            for i, v in enumerate(values):
                acc[i] += v

    def encode(self, time_nanos=0, duration_nanos=0, comments=(), main_path=None):
        """Returns the gzipped profile. main_path: the executable, whose mapping
        pprof expects first (it names the profile after mapping[0])."""
        order = list(self._mapping_list)
        if main_path:
            first = [k for k in order if k[3] == main_path]
            order = first + [k for k in order if k[3] != main_path]
        mapping_id = {k: i + 1 for i, k in enumerate(order)}
        comment_ids = [self._s(c) for c in comments]

        out = bytearray()
        for t, u in self._sample_types:
            vt = bytearray()
            _int(vt, 1, t)
            _int(vt, 2, u)
            _msg(out, 1, vt)

        for (locs, labels), values in self._samples.items():
            s = bytearray()
            _packed(s, 1, locs)
            _packed(s, 2, [int(round(v)) for v in values])
            for k, v in labels:
                lb = bytearray()
                _int(lb, 1, self._s(k))
                if isinstance(v, str):
                    _int(lb, 2, self._s(v))
                else:
                    _int(lb, 3, int(v))
                _msg(s, 3, lb)
            _msg(out, 2, s)

        # What each mapping's locations tell about symbolization (pprof uses the
        # flags to decide whether to symbolize a mapping itself).
        flags = {k: [False, False, False, False] for k in order}
        for mkey, _addr, lines in self._location_list:
            if mkey is None or not lines:
                continue
            fl = flags[mkey]
            fl[0] = True
            fl[2] = fl[2] or any(ln for _, ln in lines)
            fl[3] = fl[3] or len(lines) > 1
        files_of = {fid: key[1] for key, fid in self._functions.items()}
        for mkey, _addr, lines in self._location_list:
            if mkey is not None and any(files_of[fid] for fid, _ in lines):
                flags[mkey][1] = True

        for k in order:
            start, end, offset, path, build_id = k
            m = bytearray()
            _int(m, 1, mapping_id[k])
            _int(m, 2, start)
            _int(m, 3, end)
            _int(m, 4, offset)
            _int(m, 5, self._s(path))
            _int(m, 6, self._s(build_id))
            for i, f in enumerate(flags[k]):
                _int(m, 7 + i, 1 if f else 0)
            _msg(out, 3, m)

        for lid, (mkey, addr, lines) in enumerate(self._location_list, start=1):
            loc = bytearray()
            _int(loc, 1, lid)
            _int(loc, 2, mapping_id[mkey] if mkey is not None else 0)
            _int(loc, 3, addr)
            for fid, ln in lines:
                line = bytearray()
                _int(line, 1, fid)
                _int(line, 2, ln)
                _msg(loc, 4, line)
            _msg(out, 4, loc)

        for (name, file), fid in self._functions.items():
            fn = bytearray()
            _int(fn, 1, fid)
            _int(fn, 2, self._s(name))
            _int(fn, 3, self._s(name))
            _int(fn, 4, self._s(file))
            _msg(out, 5, fn)

        pt = bytearray()
        _int(pt, 1, self._period_type[0])
        _int(pt, 2, self._period_type[1])
        # String table last: every index above has been interned by now. Entry 0
        # must be "" and is always written (proto3 would drop nothing here: it
        # is a repeated field).
        strings = sorted(self._strings.items(), key=lambda kv: kv[1])
        for text, _ in strings:
            _msg(out, 6, text.encode("utf-8", "replace"))
        _int(out, 9, int(time_nanos))
        _int(out, 10, int(duration_nanos))
        _msg(out, 11, pt)
        _int(out, 12, self._period)
        for c in comment_ids:
            _int(out, 13, c)  # repeated int64, unpacked form is accepted too
        _int(out, 14, self._default)
        return gzip.compress(bytes(out), mtime=0)
