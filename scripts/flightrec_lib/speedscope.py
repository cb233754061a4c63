"""speedscope: writes a speedscope file (https://www.speedscope.app, the
format its file-format-spec.ts defines) from per-thread samples or blocks.

    doc = Document("flightrec cpu profile", spill=tempfile.TemporaryFile("w+"))
    doc.sampled("worker-0 (pid 1, tid 2)", "nanoseconds", [(t, frames, weight), ...])
    doc.evented("main (pid 1, tid 1)", "nanoseconds", [(start, end, frames), ...])
    doc.write(f)

frames are leaf-first frame dicts (as Segment.frames gives them) or the
(label, file, line) triples frame_keys() makes of them; the file lists each
distinct (name, file) once in shared.frames, and stacks refer to them root
first. Times are nanoseconds from the start of the trace, so JavaScript's
doubles hold them exactly. A sampled profile keeps the samples in time order
(speedscope's "Time Order" view); an evented one opens a block's frames at
its start and closes them at its end (blocks of one thread never overlap; a
later one that would is started where the earlier one ended).

Memory: the file lists every sample, so it grows with the trace. Each
profile is written out as JSON text as soon as it is added (to `spill`, a
temporary file, when given), and only the shared frame table and each
distinct stack's text stay in memory; write() puts the frames before the
profiles, where the format wants them. The text is what json.dump of the
whole document (as_dict) writes.
"""
import io
import json
import shutil

from . import profiles

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
_COMPACT = (",", ":")
_CHUNK = 8192  # values per json.dumps call when writing long lists


def frame_keys(frames):
    """The (label, file, line) of each frame: all the file needs of a stack."""
    return tuple((profiles.frame_label(f), f.get("file") or "", f.get("line")) for f in frames)


def _dumps(value):
    return json.dumps(value, separators=_COMPACT)


def _list_text(values):
    """JSON text of a list of numbers, a chunk at a time."""
    parts = []
    for i in range(0, len(values), _CHUNK):
        parts.append(_dumps(list(values[i:i + _CHUNK]))[1:-1])
    return "[" + ",".join(parts) + "]"


def _joined(texts):
    """"[" + ",".join(texts) + "]", as a stream of pieces."""
    yield "["
    first = True
    for t in texts:
        yield t if first else "," + t
        first = False
    yield "]"


class Document:
    def __init__(self, name, spill=None):
        self.name = name
        self.frames = []       # shared.frames
        self.frame_ids = {}    # (name, file) -> index
        self.weights = []      # per profile, to pick the one shown first
        self._out = spill if spill is not None else io.StringIO()  # the profiles' JSON text
        self._stacks = {}      # frame keys -> JSON text of the root-first indices

    @property
    def profile_count(self):
        return len(self.weights)

    def _frame(self, key):
        name, file, line = key
        k = (name, file)
        i = self.frame_ids.get(k)
        if i is None:
            i = self.frame_ids[k] = len(self.frames)
            entry = {"name": name}
            if file:
                entry["file"] = file
                if line:
                    entry["line"] = int(line)
            self.frames.append(entry)
        return i

    def stack(self, frames):
        """Root-first frame indices of a leaf-first stack (frame dicts or keys)."""
        keys = frames if isinstance(frames, tuple) else frame_keys(frames)
        return [self._frame(k) for k in reversed(keys)]

    def _stack_text(self, keys):
        text = self._stacks.get(keys)
        if text is None:
            text = self._stacks[keys] = _dumps(self.stack(keys))
        return text

    def _profile(self, head, *bodies):
        """Writes one profile: head's fields, then each (key, JSON text)."""
        self._out.write(("," if self.weights else "") + _dumps(head)[:-1])
        for key, text in bodies:  # text: a string or an iterable of strings
            self._out.write(',"%s":' % key)
            if isinstance(text, str):
                self._out.write(text)
            else:
                self._out.writelines(text)
        self._out.write("}")

    def sampled(self, name, unit, samples):
        """samples: (time, leaf-first frames, weight), any order (sorted here)."""
        samples = sorted(samples, key=lambda s: s[0])
        if not samples:
            return
        self.sampled_columns(name, unit, [s[0] for s in samples],
                             [s[1] if isinstance(s[1], tuple) else frame_keys(s[1]) for s in samples],
                             [s[2] for s in samples])

    def sampled_columns(self, name, unit, times, stacks, weights, order=None):
        """The samples as columns (times; frame keys per sample; weights),
        taken in `order` (indices, time order) or as given."""
        if order is None:
            order = range(len(times))
        if not len(order):
            return
        start = times[order[0]]
        last = order[-1]
        end = max(start, times[last] + (weights[last] if unit == "nanoseconds" else 0))
        ws = [weights[i] for i in order]
        # Frame ids are given in the order the samples list the stacks.
        samples_text = _joined(map(self._stack_text, map(stacks.__getitem__, order)))
        self._profile({"type": "sampled", "name": name, "unit": unit, "startValue": start, "endValue": end},
                      ("samples", samples_text), ("weights", _list_text(ws)))
        self.weights.append(sum(ws))

    def evented(self, name, unit, blocks):
        """blocks: (start, end, leaf-first frames); one thread's, so they do not nest."""
        blocks = sorted(blocks, key=lambda b: b[0])
        if not blocks:
            return
        # endValue (the last block's end) comes before the events in the file.
        last_end = blocks[0][0]
        for start, end, _ in blocks:
            last_end = max(end, max(start, last_end))
        total = [0]

        def events():
            last_end = blocks[0][0]
            for start, end, frames in blocks:
                start = max(start, last_end)
                end = max(end, start)
                stack = self.stack(frames)
                for f in stack:
                    yield _dumps({"type": "O", "frame": f, "at": start})
                for f in reversed(stack):
                    yield _dumps({"type": "C", "frame": f, "at": end})
                last_end = end
                total[0] += end - start

        self._profile({"type": "evented", "name": name, "unit": unit, "startValue": blocks[0][0],
                       "endValue": last_end}, ("events", _joined(events())))
        self.weights.append(total[0])

    def write(self, fp):
        """Writes the whole file (what json.dump(as_dict()) would write)."""
        active = max(range(len(self.weights)), key=self.weights.__getitem__) if self.weights else 0
        fp.write('{"$schema":%s,"name":%s,"exporter":"flightrec-dump","activeProfileIndex":%d,'
                 '"shared":{"frames":%s},"profiles":[' % (_dumps(SCHEMA), _dumps(self.name), active,
                                                          _dumps(self.frames)))
        self._out.seek(0)
        shutil.copyfileobj(self._out, fp)
        fp.write("]}")

    def as_dict(self):
        buf = io.StringIO()
        self.write(buf)
        return json.loads(buf.getvalue())
